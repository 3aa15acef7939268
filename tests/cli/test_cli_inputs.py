"""The command line's input checks, names built from data and run-folder replacement, alone."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wpb_gym.cli.eval_settings import EVAL
from wpb_gym.cli.inputs import check_env_kwargs
from wpb_gym.core.checks import InputError
from wpb_gym.core.file_names import name_part
from wpb_gym.core.messages import one_line
from wpb_gym.core.setting_values import MAX_BUDGET, budget_text, parse_budget, parse_budgets, parse_ints, parse_names
from wpb_gym.evaluation.run_folder import check_folder_path, publish, read_checkpoints, staging_folder

# ---------------------------------------------------------------------------- budgets


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1024", 1024),
        (10240, 10240),
        ("10KB", 10240),
        ("10kb", 10240),
        ("10 KB", 10240),
        ("10KiB", 10240),
        ("1MB", 1 << 20),
        ("1GB", 1 << 30),
        ("100B", 100),
        ("1.5KB", 1536),
        ("0", 0),
        ("0KB", 0),
        ("1024GB", MAX_BUDGET),
        (MAX_BUDGET, MAX_BUDGET),
    ],
)
def test_parse_budget_reads_bytes_and_units_of_1024(text, expected):
    assert parse_budget(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ten", "expected a number of bytes"),
        ("", "expected a number of bytes"),
        ("10 K B", "expected a number of bytes"),
        ("1e3", "expected a number of bytes"),
        ("10XB", "unknown unit 'XB'"),
        ("10TB", "unknown unit 'TB'"),
        ("-1KB", "cannot be negative"),
        (-1, "cannot be negative"),
        ("1.3KB", r"not a whole number of bytes \(1331.2\)"),
        ("1.5", "not a whole number of bytes"),
        ("1025GB", "at most 1099511627776 bytes"),
        (10**29, "at most 1099511627776 bytes"),
        (1024.0, "got float 1024.0"),
        (True, "got True"),
        (None, "got NoneType None"),
    ],
)
def test_parse_budget_names_what_is_wrong(text, message):
    with pytest.raises(InputError, match=f"^budgets: .*{message}"):
        parse_budget(text, "budgets")


@given(st.integers(min_value=0, max_value=MAX_BUDGET))
def test_budget_text_reads_back(budget):
    assert parse_budget(budget_text(budget)) == budget


def test_lists_refuse_repeats_even_when_spelled_differently():
    assert parse_budgets("1KB,10KB") == [1024, 10240]
    assert parse_budgets([1024, "2KB"]) == [1024, 2048]
    assert parse_budgets(4096) == [4096]
    with pytest.raises(InputError, match="budgets: 1024 is given more than once"):
        parse_budgets("1KB,1024", "budgets")
    with pytest.raises(InputError, match="lengths: 20 is given more than once"):
        parse_ints([20, 20], "lengths", 1)
    with pytest.raises(InputError, match="regimes: 'default' is given more than once"):
        parse_names("default,default", "regimes", ["default"])
    with pytest.raises(InputError, match="without empty items"):
        parse_budgets("1KB,,2KB", "budgets")
    with pytest.raises(InputError, match="non-empty list"):
        parse_budgets([], "budgets")


def test_unknown_names_get_a_suggestion():
    with pytest.raises(InputError, match=r"tracks: unknown 'privilegd' \(did you mean 'privileged'\?\); known: "):
        parse_names("privilegd", "tracks", ["unprivileged", "privileged"])


def test_env_kwargs_list_every_accepted_key_and_read_budgets():
    assert check_env_kwargs({"budget_bytes": "10KB", "drift_prob": 0.1}, "--env-kwargs") == {
        "budget_bytes": 10240,
        "drift_prob": 0.1,
    }
    with pytest.raises(InputError) as error:
        check_env_kwargs({"budget": 100}, "--env-kwargs")
    message = str(error.value)
    assert "unknown env argument 'budget' (did you mean 'budget_bytes'?)" in message
    for key in ("budget_bytes", "track", "slots", "episodes", "reward", "drift_prob", "api_pool"):
        assert re.search(rf"\b{key}\b", message), key
    with pytest.raises(InputError, match="episode_seed is set by --seed"):
        check_env_kwargs({"episode_seed": 3}, "--env-kwargs", {"episode_seed": "set by --seed"})
    with pytest.raises(InputError, match="budget_bytes: a budget cannot be negative"):
        check_env_kwargs({"budget_bytes": -1}, "--env-kwargs")


def test_env_kwargs_read_exponent_text_as_a_number_only_where_a_float_is_expected():
    """YAML 1.1 (PyYAML) reads 1e-3 as text; a float option means the number, other options
    keep their text (a regime or a path named 1e3 stays a name)."""
    given = {"doc_utility": "1e-3", "invalid_action_penalty": "2E1", "expire_cost": " 5e-2 ", "regime": "1e3",
             "length": "1e3", "episodes": "46e1339", "drift_prob": "1e-1x"}
    assert check_env_kwargs(given, "--env-kwargs") == {**given, "doc_utility": 0.001, "invalid_action_penalty": 20.0,
                                                       "expire_cost": 0.05}


def test_one_line_joins_the_lines_of_a_message():
    assert one_line("a is not b:\n  first: x\n  second: y\n") == "a is not b: first: x; second: y"


# ---------------------------------------------------------------------------- eval settings


def eval_settings(config, flags):
    """``wpb eval``'s settings from a config file and the flags given (a mapping), as the command merges them."""
    return EVAL.resolve({"config": config, "out": "run", **flags})


def test_eval_settings_check_a_config_like_the_flags(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("agents: last_kb,no_mem\nbudgets: [0, 10KB, '1MB']\nlengths: 20\ntracks: privileged\n")
    settings = eval_settings(config, {"seed": 3})
    assert settings["agents"] == ["last_kb", "no_mem"] and settings["budgets"] == [0, 10240, 1 << 20]
    assert settings["lengths"] == [20] and settings["tracks"] == ["privileged"] and settings["seed"] == 3
    for text, message in [
        ("agents: [x]\nbudgets: [1024, 1KB]\n", "c.yaml: budgets: 1024 is given more than once"),
        ("agents: [x]\nregimes: [default, default]\n", "c.yaml: regimes: 'default' is given more than once"),
        ("agents: [x]\nseed: -1\n", r"c.yaml: seed: expected an integer >= 0, got -1"),
        ("agents: [x]\njobs: many\n", "c.yaml: jobs: expected an integer, got 'many'"),
        ("agents: [x]\nepisodes: [a]\n", "c.yaml: episodes: expected a path"),
        ("agents: 5\n", "c.yaml: agents: expected a non-empty list"),
        ("agents: [{name: random, label: [1]}]\n", "c.yaml: agents: an agent's 'label' must be a non-empty string"),
        ("agents: [x]\nbudget: 3\n", r"unknown setting\(s\) \['budget'\] \(did you mean 'budgets'\?\)"),
        ("- a\n", "must hold a mapping of settings"),
        ("agents: [\n", r"c.yaml:2:1: not valid YAML"),
    ]:
        config.write_text(text)
        with pytest.raises(InputError, match=message):
            eval_settings(config, {})
    config.write_bytes(b"agents: [\xff]\n")
    with pytest.raises(InputError, match=r"c.yaml: not UTF-8 text \(byte 9\)"):
        eval_settings(config, {})
    with pytest.raises(InputError, match="is a folder; expected a YAML file"):
        eval_settings(tmp_path, {})


# ---------------------------------------------------------------------------- names built from data


@pytest.mark.parametrize("name", ["default", "burst_drift", "contract_mix", "a.b"])
def test_plain_regime_names_are_kept(name):
    assert name_part(name) == name


@given(st.text(max_size=300))
def test_names_built_from_data_are_one_safe_path_part(text):
    part = name_part(text)
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", part) and len(part) <= 64
    assert part not in (".", "..") and "/" not in part and "\x00" not in part


@given(st.text(max_size=50), st.text(max_size=50))
def test_different_names_never_share_a_file_name(a, b):
    if a != b:
        assert name_part(a) != name_part(b)


def test_rewritten_names_never_equal_plain_ones():
    assert name_part("real:stripe") != name_part("real-stripe")
    assert "-" in name_part("real-stripe") and "-" not in name_part("real_stripe")


# ---------------------------------------------------------------------------- the run folder


def test_check_folder_path_refuses_files_on_the_way(tmp_path):
    (tmp_path / "f").write_text("x")
    check_folder_path(tmp_path / "new" / "deeper")
    with pytest.raises(InputError, match="--out .*f: is a file; expected a folder"):
        check_folder_path(tmp_path / "f")
    with pytest.raises(InputError, match="lies under .*f, which is a file"):
        check_folder_path(tmp_path / "f" / "sub")


def test_publish_replaces_only_what_wpb_wrote_and_results_last(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    for name in ("results.csv", "run.json", "f1_vs_budget_a_T20.png", "headroom.md", "notes.txt"):
        (out / name).write_text("old " + name)
    staging = staging_folder(out)
    for name in ("results.csv", "run.json", "f1_vs_budget.png"):
        (staging / name).write_text("new " + name)
    publish(staging, out)
    assert sorted(p.name for p in out.iterdir()) == ["f1_vs_budget.png", "notes.txt", "results.csv", "run.json"]
    assert (out / "results.csv").read_text() == "new results.csv" and (out / "notes.txt").read_text() == "old notes.txt"
    incomplete = staging_folder(out)
    (incomplete / "run.json").write_text("partial")
    with pytest.raises(ValueError, match="no results.csv"):
        publish(incomplete, out)
    assert (out / "run.json").read_text() == "new run.json"


def test_checkpoints_that_are_not_rows_run_again(tmp_path):
    columns = ("mode", "f1")
    (tmp_path / "good.json").write_text(json.dumps([{"mode": "m", "f1": 0.5}]))
    (tmp_path / "cut.json").write_text('[{"mode": "m", "f1"')
    (tmp_path / "other.json").write_text(json.dumps([{"mode": "m"}]))
    (tmp_path / "scalar.json").write_text("3")
    assert read_checkpoints(tmp_path, columns) == {"good": [{"mode": "m", "f1": 0.5}]}


# ---------------------------------------------------------------------------- pictures


def _picture_rows(modes, budgets):
    rows = []
    for mode in modes:
        for budget in budgets:
            for episode in range(2):
                rows.append(
                    {
                        "mode": mode,
                        "steps": 20,
                        "budget_bytes": budget,
                        "track": "unprivileged",
                        "policy": "a$b",
                        "policy_track": "unprivileged",
                        "f1": 0.1 * episode + budget / 4096,
                        "regret_write_only": 0.0,
                    }
                )
    return rows


def test_pictures_of_regimes_from_data_get_safe_distinct_names(tmp_path):
    from wpb_gym.evaluation.reports.plots import run_pictures, write_pictures

    modes = ["/tmp/x/ESCAPED", "../../up", "a/b", "a-b", "x" * 5000, "a\x00b", "$\\frac{$"]
    names = run_pictures(_picture_rows(modes, [1024, 2048]))
    assert len(names) == 2 * len(modes)
    for name in names:
        assert re.fullmatch(r"(f1_vs_budget|regret_curve)_[A-Za-z0-9][A-Za-z0-9_.-]*_T20\.png", name), name
    written = write_pictures(_picture_rows(modes[:2], [1024]), tmp_path / "run")
    assert all(path.parent == tmp_path / "run" for path in written)


def test_a_budget_of_zero_is_drawn(tmp_path):
    from wpb_gym.evaluation.reports.plots import run_pictures

    pictures = run_pictures(_picture_rows(["default"], [0, 1024, 2048]))
    assert set(pictures) == {"f1_vs_budget.png", "regret_curve.png"}
    assert all(data.startswith(b"\x89PNG") for data in pictures.values())


def test_a_negative_value_after_a_space_reaches_the_options_own_check(capsys):
    from wpb_gym.cli import main

    for argv in (["eval", "--budgets", "-1KB", "--out", "unused"], ["inspect", "x.jsonl", "--budgets", "-5,1KB"]):
        assert main(argv) == 2
        error = capsys.readouterr().err
        assert "a budget cannot be negative" in error and error.count("\n") == 1
