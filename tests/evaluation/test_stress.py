"""Adversarial drift (``wpb stress``): the knobs searched, the search, the frozen stress sets and
the report, which ``wpb eval`` on the sets must reproduce."""

from __future__ import annotations

import csv
import json
from functools import partial
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.registry import make_agent
from wpb_gym.cli import main
from wpb_gym.episodes.frozen import open_frozen_set
from wpb_gym.episodes.generators.paper import REGIMES, generate_episode, generate_episodes
from wpb_gym.evaluation.stress import KNOBS, SET_SEED_OFFSET, StressSettings, run_stress, score, search_space

pytest.importorskip("optuna")

SMALL = StressSettings("breaking", 120, 10240, trials=8, search_episodes=2, set_episodes=4, seed=5)


def wpb(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("regime, track, knobs", [
    ("default", "unprivileged", ["drift_prob", "remove_param_prob", "deprecate_prob"]),
    ("burst_drift", "unprivileged", ["drift_prob", "remove_param_prob", "deprecate_prob", "burst_interval",
                                     "burst_len", "burst_drift_prob"]),
    ("redundancy", "unprivileged", ["drift_prob", "remove_param_prob", "deprecate_prob", "redundancy_prob"]),
    ("breaking", "unprivileged", ["drift_prob", "breaking_prob"]),
    ("breaking", "privileged", ["drift_prob", "breaking_prob", "priority_correlation"]),
    ("reverts", "unprivileged", ["drift_prob", "breaking_prob", "revert_prob", "revert_window"]),
    ("contract_mix", "unprivileged", ["drift_prob", "breaking_prob", "revert_prob", "revert_window", "doc_prob"]),
])
def test_the_search_moves_the_knobs_the_regime_uses(regime, track, knobs):
    config = StressSettings(regime, 200, 10240, track=track).config()
    assert [knob[0] for knob in search_space(config, track)] == knobs


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(REGIMES)), st.sampled_from(["unprivileged", "privileged"]), st.data())
def test_every_point_of_the_search_space_is_a_valid_episode(regime, track, data):
    base = StressSettings(regime, 200, 10240, track=track)
    values = {}
    for name, kind, low, high, _ in search_space(base.config(), track):
        values[name] = (data.draw(st.integers(int(low), int(high))) if kind == "int"
                        else data.draw(st.floats(low, high)))
    episode = generate_episode(base.config(**values), 0, 0)
    assert len(episode) == 200


def test_every_knob_is_a_generator_field():
    fields = set(StressSettings("default", 200, 10240).config().to_dict())
    assert {knob[0] for knob in KNOBS} <= fields


@pytest.fixture(scope="module")
def stress_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stress") / "run"
    policies = [(name, partial(make_agent, name)) for name in ("last_kb", "change_detector", "breaking_detector")]
    run_stress(policies, SMALL, out, command="test")
    return out


def test_the_run_holds_a_frozen_stress_set_per_policy_and_the_standard_set(stress_run):
    summary = json.loads((stress_run / "stress.json").read_text())
    assert set(summary["sets"]) == {"standard", "last_kb", "change_detector", "breaking_detector"}
    for name, folder in summary["sets"].items():
        frozen = open_frozen_set(stress_run / folder)  # verifies every file's sha256
        (file,) = frozen.manifest["files"].values()
        assert file["seed"] == SMALL.seed + SET_SEED_OFFSET and file["episodes"] == SMALL.set_episodes
        knobs = {} if name == "standard" else summary["worst"][name]["knobs"]
        for knob, value in knobs.items():
            assert file["generator"][knob] == value
    with (stress_run / "search.csv").open() as f:
        trials = list(csv.DictReader(f))
    assert len(trials) == 3 * SMALL.trials
    for label, worst in summary["worst"].items():
        mine = sorted((float(t["shortfall"]) for t in trials if t["policy"] == label), reverse=True)
        candidates = summary["candidates"][label]
        # The three worst trials, scored again; the chosen one is the worst on validation.
        assert [c["search_value"] for c in candidates] == mine[:3]
        assert worst["validation_value"] == max(c["validation_value"] for c in candidates)


def test_the_search_finds_where_a_policy_falls_further(stress_run):
    values = json.loads((stress_run / "stress.json").read_text())["values"]
    own = values["change_detector"]["change_detector"]
    standard = values["change_detector"]["standard"]
    # change_detector writes every change: with few breaking ones its memory fills with the others.
    assert own["bound"] - own["f1"] > standard["bound"] - standard["f1"] + 0.2


def test_the_same_settings_give_the_same_search_and_sets(stress_run, tmp_path):
    again = tmp_path / "again"
    policies = [(name, partial(make_agent, name)) for name in ("last_kb", "change_detector", "breaking_detector")]
    run_stress(policies, SMALL, again, command="test")
    first, second = (json.loads((p / "stress.json").read_text()) for p in (stress_run, again))
    assert first == second
    for folder in first["sets"].values():
        manifests = [json.loads((p / folder / "MANIFEST.json").read_text())["files"] for p in (stress_run, again)]
        assert [f["sha256"] for f in manifests[0].values()] == [f["sha256"] for f in manifests[1].values()]


def test_wpb_eval_on_a_stress_set_gives_the_reports_figures(stress_run, tmp_path, capsys):
    summary = json.loads((stress_run / "stress.json").read_text())
    out = tmp_path / "eval"
    code, _, err = wpb(capsys, "eval", "--episodes", stress_run / summary["sets"]["last_kb"], "--agents",
                       "last_kb,change_detector", "--budgets", "10KB", "--tracks", "unprivileged", "--out", out,
                       "--quiet")
    assert code == 0, err
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    for label in ("last_kb", "change_detector"):
        f1 = [float(r["f1"]) for r in rows if r["policy"] == label]
        bound = [float(r["oracle_f1"]) for r in rows if r["policy"] == label]
        assert sum(f1) / len(f1) == pytest.approx(summary["values"][label]["last_kb"]["f1"])
        assert sum(bound) / len(bound) == pytest.approx(summary["values"][label]["last_kb"]["bound"])


def test_wpb_stress_writes_the_report_and_refuses_bad_input(tmp_path, capsys):
    out = tmp_path / "stress"
    args = ["stress", "--agents", "last_kb,fifo_store_all", "--regime", "reverts", "--length", 120, "--trials", 3,
            "--search-episodes", 1, "--set-episodes", 2, "--out", out, "--quiet"]
    code, printed, err = wpb(capsys, *args)
    assert code == 0, err
    assert "stress sets of 2 policies (reverts, T=120, 10KB)" in printed
    report = (out / "report.md").read_text()
    assert (f"Written by `wpb stress --agents last_kb,fifo_store_all --regime reverts --length 120 --budget 10KB "
            f"--track unprivileged --trials 3 --search-episodes 1 --set-episodes 2 --seed 0 --out {out}`") in report
    assert "| last_kb |" in report and "stress: fifo_store_all" in report and "*hindsight F1 bound*" in report
    assert "revert_window=" in report  # the regime's own knobs were searched

    def refused(*argv) -> str:
        code, _, err = wpb(capsys, *argv)
        assert code == 2 and "Traceback" not in err, err
        return err

    assert "already exists; pass --force" in refused(*args)
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    assert "holds no stress run; refusing to replace it" in refused(*args[:-3], "--out", other, "--force")
    assert (other / "keep.txt").read_text() == "mine"
    assert "--length 20" in refused("stress", "--agents", "last_kb", "--length", 20, "--out", tmp_path / "x")
    assert "priority_greedy cannot play it" in refused("stress", "--agents", "priority_greedy", "--out", tmp_path / "x")
    assert "search a Python agent" in refused("stress", "--agents", "exec:agents/external/examples/last_kb.js",
                                              "--out", tmp_path / "x")
    assert "--regime: expected one of breaking, burst_drift" in refused("stress", "--agents", "last_kb", "--regime",
                                                                        "queries_hard", "--out", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_a_policy_failing_while_the_sets_are_played_leaves_no_run(tmp_path):
    calls = []

    def fails_on_the_sets():  # plays the search and the validation, then breaks
        calls.append(1)
        if len(calls) > SMALL.trials * SMALL.search_episodes + 3 * SMALL.search_episodes:
            raise RuntimeError("no")
        return make_agent("last_kb")

    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="no"):
        run_stress([("flaky", fails_on_the_sets)], SMALL, out, command="test")
    assert not out.exists() and not list(tmp_path.glob(".run.*"))


def test_the_shortfall_is_the_bound_minus_the_f1():
    episodes = list(generate_episodes(SMALL.config(), 0, 3))
    nothing = score(partial(make_agent, "no_mem"), episodes, SMALL)  # keeps nothing: F1 0
    assert nothing.f1 == 0 and nothing.shortfall == nothing.bound > 0
    best = score(partial(make_agent, "breaking_detector"), episodes, SMALL)
    assert 0 <= best.shortfall < nothing.shortfall and best.bound == nothing.bound


def test_without_optuna_wpb_stress_says_what_to_install(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "optuna" else real(name, *a))
    code, _, err = wpb(capsys, "stress", "--agents", "last_kb", "--out", tmp_path / "x")
    assert code == 2 and "pip install 'writepolicybench-gym[stress]'" in err


@pytest.mark.parametrize("regime", ["breaking", "burst_drift"])
def test_the_stress_pages_tables_are_what_its_command_writes(regime, tmp_path, capsys):
    page = (Path(__file__).resolve().parents[2] / "docs" / "stress.md").read_text()
    out = tmp_path / f"stress_{regime}"
    code, _, err = wpb(capsys, "stress", "--agents", "last_kb,change_detector,breaking_detector,fifo_store_all",
                       "--regime", regime, "--trials", 30, "--out", out, "--quiet")
    assert code == 0, err
    report = (out / "report.md").read_text()
    for table in (report[report.index("| Policy | search |"):report.index("## Every policy")].strip(),
                  report[report.index("| Policy | standard"):].strip()):
        assert table in page
