"""``wpb eval``: the grid runner, its files and its statistics."""

from __future__ import annotations

import csv
import json
import re
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import yaml

from agents.registry import agent_entry, make_agent
from wpb_gym.cli import build_parser
from wpb_gym.cli import main as wpb
from wpb_gym.cli.eval_settings import EVAL
from wpb_gym.core.setting_values import parse_budget
from wpb_gym.core.types import Episode, Step
from wpb_gym.evaluation import grid as grid_module
from wpb_gym.evaluation.grid import ROW_COLUMNS, PolicySpec, generated_refs, given_refs, run_grid, skipped
from wpb_gym.evaluation.reports.report import RUN_COLUMNS
from wpb_gym.evaluation.runner import run_episode

ROOT = Path(__file__).resolve().parents[2]


def spec(name: str) -> PolicySpec:
    return PolicySpec(name, partial(make_agent, name), agent_entry(name).track)


POLICIES = [spec(n) for n in ("fifo_store_all", "last_kb", "change_detector", "priority_threshold", "oracle_optimal")]


def small_grid(jobs: int):
    refs = generated_refs(["default", "burst_redundancy"], [60], 3, seed=4)
    return run_grid(refs, POLICIES, [1024, 4096], ["unprivileged", "privileged"], jobs=jobs)


def test_rows_do_not_depend_on_jobs_and_match_the_evaluator():
    rows = small_grid(jobs=1)
    assert rows == small_grid(jobs=2)
    # 2 regimes x 3 episodes x 2 budgets x (3 policies unprivileged + 5 privileged)
    assert len(rows) == 2 * 3 * 2 * (3 + 5)
    for row in rows[:: len(rows) // 7]:
        ref = generated_refs([row["mode"]], [row["steps"]], row["episode_index"] + 1, seed=4)[-1]
        run = run_episode(make_agent(row["policy"]), ref.load(), row["budget_bytes"], row["track"])
        assert {k: row[k] for k in run.metrics.as_row() if k in row} == {
            k: v for k, v in run.metrics.as_row().items() if k in row
        }


def test_the_oracle_is_computed_once_per_episode_and_track(monkeypatch):
    calls = []
    real = grid_module.episode_oracle

    def counting(episode, budgets, track):
        calls.append((id(episode), track))
        return real(episode, budgets, track)

    monkeypatch.setattr(grid_module, "episode_oracle", counting)
    refs = generated_refs(["default"], [40], 2, seed=1)
    run_grid(refs, POLICIES, [1024, 2048, 4096], ["unprivileged", "privileged"])
    assert len(calls) == len(set(calls)) == 2 * 2


def test_agents_that_cannot_run_on_a_track_are_skipped_with_a_note():
    notes = skipped(POLICIES, ["unprivileged", "privileged"])
    assert notes == [
        "priority_threshold (privileged track) is not run on the unprivileged track",
        "oracle_optimal (oracle track) is not run on the unprivileged track",
    ]


def test_models_run_on_their_own_track_only():
    model = PolicySpec("sb3:m", object, "unprivileged", only_own_track=True)
    assert model.runs_on("unprivileged") and not model.runs_on("privileged")
    assert skipped([model], ["unprivileged", "privileged"]) == [
        "sb3:m (unprivileged track) is not run on the privileged track"
    ]
    assert PolicySpec("x", object).runs_on("privileged")


def test_episodes_from_files_take_their_regime_from_the_data():
    episodes = [
        Episode(
            steps=[Step(t, {"api": "a", "v": t + k}, {"mode": "custom"}) for t in range(5)],
            labels={"critical_steps": [1], "utility_by_step": {1: 1.0}},
        )
        for k in range(2)
    ]
    refs = given_refs(episodes)
    assert [(r.mode, r.steps, r.index) for r in refs] == [("custom", 5, 0), ("custom", 5, 1)]
    nameless = Episode(steps=[Step(0, {}, {})], labels={})
    with pytest.raises(ValueError, match="episode 0 names no regime"):
        given_refs([nameless], "file.jsonl")


def test_every_row_carries_its_episodes_content_hash():
    from wpb_gym.episodes.identity import episode_hash

    refs = generated_refs(["default"], [40], 2, seed=1) + generated_refs(["default"], [40], 2, seed=777)
    refs = [grid_module.EpisodeRef(r.mode, r.steps, i, r.seed) for i, r in enumerate(refs)]
    rows = run_grid(refs, POLICIES[:2], [1024, 4096], ["unprivileged"])
    hashes = {}
    for row in rows:
        hashes.setdefault(row["episode_index"], set()).add(row["episode_hash"])
    # One hash per episode, the same on every agent's and budget's row, and four different episodes.
    assert {i: {episode_hash(refs[i].load())} for i in range(4)} == hashes
    assert len({h for (h,) in hashes.values()}) == 4 and all(len(h) == 16 for (h,) in hashes.values())


def test_the_episode_hash_is_stable_across_processes_and_names_the_content(tmp_path):
    import os
    import subprocess
    import sys

    from wpb_gym.episodes.jsonl import write_jsonl
    from wpb_gym.episodes.sources import read_episodes
    from wpb_gym.episodes.identity import episode_hash

    episode = generated_refs(["breaking"], [80], 1, seed=3)[0].load()
    digest = episode_hash(episode)
    code = (
        "from wpb_gym.evaluation.grid import generated_refs\n"
        "from wpb_gym.episodes.identity import episode_hash\n"
        "print(episode_hash(generated_refs(['breaking'], [80], 1, seed=3)[0].load()))"
    )
    for hash_seed in ("1", "2"):  # another process, and another order of its sets and dicts
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
        assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              check=True).stdout.strip() == digest
    # The same episode read back from a file is the same episode.
    write_jsonl(tmp_path / "e.jsonl", [episode])
    (back,) = read_episodes(str(tmp_path / "e.jsonl"))
    assert episode_hash(back) == digest
    # One step changed, or one label, is another episode.
    steps = list(episode.steps)
    steps[40] = Step(40, {**steps[40].observation, "changed": True}, steps[40].metadata)
    assert episode_hash(Episode(steps=steps, labels=episode.labels)) != digest
    assert episode_hash(Episode(steps=episode.steps, labels={**episode.labels, "episode_id": 1})) != digest


# ---------------------------------------------------------------------------- the command
def refused(capsys, argv, pattern: str) -> str:
    """``wpb argv`` exits 2 with one line on stderr matching ``pattern``; returns that line."""
    capsys.readouterr()
    assert wpb(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and re.search(pattern, err), err
    return err


def run_cli(tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "run"
    argv = ["eval", "--agents", "fifo_store_all,priority_threshold,oracle_optimal", "--regimes", "default"]
    argv += ["--lengths", "40", "--episodes-per-condition", "3", "--budgets", "1024,10240", "--out", str(out)]
    assert wpb([*argv, "--quiet", *extra]) == 0
    return out


def test_wpb_eval_writes_every_file_and_they_parse(tmp_path, capsys):
    out = run_cli(tmp_path)
    with open(out / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == list(ROW_COLUMNS + RUN_COLUMNS)
    assert len(rows) == 3 * 2 * (1 + 3)  # fifo on both tracks, the other two on privileged only
    assert {r["policy"] for r in rows if r["track"] == "unprivileged"} == {"fifo_store_all"}
    assert all(0.0 <= float(r["f1"]) <= 1.0 for r in rows)
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["agents"] == ["fifo_store_all", "priority_threshold", "oracle_optimal"]
    assert len(run["notes"]) == 2 and run["config_hash"] == rows[0]["config_hash"]
    assert rows[0]["seed"] == "0" and rows[0]["version"] == run["version"]
    board = (out / "leaderboard.md").read_text()
    assert "oracle_optimal (oracle)" in board and "F1@10KB" in board
    assert "## default, T=40, unprivileged track" in board and "## default, T=40, privileged track" in board
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    assert "note: priority_threshold (privileged track)" in capsys.readouterr().err
    # The aggregates and pictures.
    with open(out / "recall_at_budget.csv", newline="") as handle:
        recall = list(csv.DictReader(handle))
    assert len(recall) == 2 * (1 + 3)  # budgets x (policy, track) pairs
    assert all(float(r["recall_ci_low"]) <= float(r["recall_mean"]) <= float(r["recall_ci_high"]) for r in recall)
    utility = json.loads((out / "utility_per_kb.json").read_text())
    assert set(utility["default/T=40"]) == {"unprivileged", "privileged"}
    with open(out / "confusion_matrix.csv", newline="") as handle:
        confusion = list(csv.DictReader(handle))
    fifo = [
        r
        for r in rows
        if r["policy"] == "fifo_store_all" and r["track"] == "privileged" and r["budget_bytes"] == "1024"
    ]
    summed = next(
        c
        for c in confusion
        if c["policy"] == "fifo_store_all" and c["track"] == "privileged" and c["budget_bytes"] == "1024"
    )
    assert int(summed["tp"]) == sum(int(r["tp"]) for r in fifo) and int(summed["episodes"]) == 3
    with open(out / "summary.csv", newline="") as handle:
        summary = list(csv.DictReader(handle))
    from wpb_gym.evaluation.reports.report import SUMMARY_METRICS

    assert len(summary) == len(recall) * len(SUMMARY_METRICS) and "f1" in SUMMARY_METRICS
    for s in summary:
        assert float(s["ci_low"]) <= float(s["mean"]) + 1e-12 and float(s["mean"]) <= float(s["ci_high"]) + 1e-12
    f1 = next(
        s
        for s in summary
        if s["metric"] == "f1"
        and s["policy"] == "fifo_store_all"
        and s["track"] == "privileged"
        and s["budget_bytes"] == "1024"
    )
    assert float(f1["mean"]) == pytest.approx(np.mean([float(r["f1"]) for r in fifo]))
    for name in ("f1_vs_budget.png", "regret_curve.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_wpb_report_paper_tables(tmp_path, capsys):
    out = run_cli(tmp_path)
    capsys.readouterr()
    assert wpb(["report", str(out), "--paper-tables"]) == 0
    text = capsys.readouterr().out
    assert text == (out / "paper_tables.md").read_text()
    assert "## Mean F1 vs memory budget: default, T=40" in text
    assert "| `oracle_optimal` |" in text and "## Memory diagnostics at 10240 bytes: default, T=40" in text
    refused(capsys, ["report", str(tmp_path / "nothing"), "--paper-tables"], "no such results file")


def test_headroom_table_is_the_bound_against_the_best_policy_per_track(tmp_path, capsys):
    from wpb_gym.evaluation.reports.tables import headroom_table

    names = ("last_kb", "change_detector", "breaking_detector", "priority_threshold", "priority_greedy")
    refs = generated_refs(["reverts"], [80], 4, seed=1)
    rows = run_grid(refs, [spec(n) for n in names], [1024, 10240], ["unprivileged", "privileged"])
    text = headroom_table(rows, highlight=["breaking_detector"])
    lines = {line.split(" | ")[2]: line for line in text.splitlines() if line.startswith("| reverts |")}
    assert set(lines) == {"1KB", "10KB"}
    for budget, at in ((1024, "1KB"), (10240, "10KB")):

        def f1(policy, track, budget=budget):
            return np.mean(
                [r["f1"] for r in rows if (r["policy"], r["track"], r["budget_bytes"]) == (policy, track, budget)]
            )

        bound = np.mean([r["oracle_f1"] for r in rows if r["budget_bytes"] == budget and r["track"] == "unprivileged"])
        unprivileged = max(names[:3], key=lambda n: (f1(n, "unprivileged"), n))
        privileged = max(names[3:], key=lambda n: (f1(n, "privileged"), n))
        best = max(f1(unprivileged, "unprivileged"), f1(privileged, "privileged"))
        assert lines[at] == (
            f"| reverts | 80 | {at} | {bound:.3f} | {f1(unprivileged, 'unprivileged'):.3f} (`{unprivileged}`) | "
            f"{f1(privileged, 'privileged'):.3f} (`{privileged}`) | {f1('breaking_detector', 'unprivileged'):.3f} | "
            f"{bound - best:+.3f} |"
        )
    # Through the command line: --headroom writes headroom.md.
    out = run_cli(tmp_path)
    capsys.readouterr()
    assert wpb(["report", str(out), "--headroom", "--highlight", "fifo_store_all"]) == 0
    assert capsys.readouterr().out == (out / "headroom.md").read_text()
    refused(capsys, ["report", str(out), "--headroom", "--paper-tables"], "not allowed with argument")


def fake_rows(mode, scores, budgets=(1024, 10240), episodes=3, steps=50):
    """Grid-like rows: ``scores[(policy, track)] = f1`` per episode i as f1 + 0.01 * i."""
    rows = []
    for (policy, track), f1 in scores.items():
        for budget in budgets:
            for i in range(episodes):
                rows.append(
                    {
                        "mode": mode,
                        "steps": steps,
                        "budget_bytes": budget,
                        "track": track,
                        "policy": policy,
                        "policy_track": track,
                        "episode_index": i,
                        "f1": f1 + 0.01 * i,
                        "oracle_f1": 0.9,
                    }
                )
    return rows


def test_f1_by_budget_table_ranks_policies_with_intervals_and_the_bound():
    from wpb_gym.evaluation.reports.tables import f1_by_budget_table

    rows = fake_rows("real:toy", {("a", "unprivileged"): 0.2, ("b", "privileged"): 0.5})
    text = f1_by_budget_table(rows)
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[0] == "| Policy | Track | 1KB | 10KB |"
    assert lines[1].startswith("| b | privileged | 0.510 [") and lines[2].startswith("| a | unprivileged | 0.210 [")
    assert lines[3] == "| **hindsight bound** | | 0.900 [0.900, 0.900] | 0.900 [0.900, 0.900] |"
    assert "## real:toy, T=50, 3 episodes" in text


def test_transfer_table_ranks_synthetic_regimes_by_rank_agreement():
    from scipy import stats

    from wpb_gym.evaluation.reports.tables import transfer_table

    real = {
        ("p1", "unprivileged"): 0.12,
        ("p2", "unprivileged"): 0.4,
        ("p3", "privileged"): 0.7,
        ("p4", "privileged"): 0.3,
    }
    same_order = {k: v / 2 for k, v in real.items()}
    reversed_order = {k: 1.0 - v for k, v in real.items()}
    rows = fake_rows("real:toy", real)
    synthetic = fake_rows("alike", same_order) + fake_rows("opposite", reversed_order)
    text = transfer_table(rows, synthetic)
    table = [line for line in text.splitlines() if line.startswith("| ") and "rho" not in line]
    assert table[0].startswith("| alike | +1.00 | +1.00 (p=") and table[1].startswith("| opposite | -1.00 |")
    keys = sorted(real)
    gap = np.mean([abs(real[k] - same_order[k]) for k in keys])
    assert f"+1.00 / {gap:.3f} (n=4)" in table[0]
    rho = stats.spearmanr([same_order[k] for k in keys], [real[k] for k in keys]).statistic
    assert rho == pytest.approx(1.0)
    # Only regimes evaluated at the same episode length are compared.
    longer = transfer_table(rows, fake_rows("alike", same_order, steps=200))
    assert "No synthetic regime was evaluated at T=50." in longer and "| alike |" not in longer


def test_results_are_read_back_with_clear_errors(tmp_path):
    from wpb_gym.evaluation.reports.report import read_results

    out = run_cli(tmp_path)
    rows = read_results(out / "results.csv")
    assert rows[0]["budget_bytes"] == 1024 and isinstance(rows[0]["f1"], float)
    text = (out / "results.csv").read_text().splitlines()
    broken = tmp_path / "broken.csv"
    cells = text[2].split(",")
    cells[ROW_COLUMNS.index("f1")] = "high"
    broken.write_text("\n".join([text[0], text[1], ",".join(cells)]) + "\n")
    with pytest.raises(ValueError, match="broken.csv, line 3, column 'f1': expected a number, got 'high'"):
        read_results(broken)
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a results.csv"):
        read_results(tmp_path / "other.csv")


def test_a_failed_forced_run_keeps_the_earlier_results(tmp_path, monkeypatch):
    out = run_cli(tmp_path)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def fail(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr("wpb_gym.evaluation.grid.run_grid", fail)
    with pytest.raises(RuntimeError, match="interrupted"):
        run_cli(tmp_path, "--force")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_wpb_eval_refuses_to_overwrite_and_explains_bad_settings(tmp_path, capsys):
    out = run_cli(tmp_path)
    refused(capsys, ["eval", "--agents", "no_mem", "--out", str(out)], "already holds results.csv")
    run_cli(tmp_path, "--force")
    refused(capsys, ["eval", "--agents", "lru", "--out", str(tmp_path / "x")], "no agent named 'lru'")
    config = tmp_path / "c.yaml"
    config.write_text("agents: [no_mem]\nbudget: [1]\n")
    refused(
        capsys, ["eval", "--config", str(config), "--out", str(tmp_path / "y")], r"unknown setting\(s\) \['budget'\]"
    )
    config.write_text("agents: [no_mem]\nbudgets: [1, -2]\n")
    refused(
        capsys, ["eval", "--config", str(config), "--out", str(tmp_path / "y")], "budgets: a budget cannot be negative"
    )


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "configs" / "eval").glob("*.yaml")))
def test_shipped_configs_are_valid(name):
    from wpb_gym.cli.evaluation import agent_item

    path = ROOT / "configs" / "eval" / name
    args = build_parser().parse_args(["eval", "--config", str(path), "--out", "unused"])
    config = EVAL.resolve(args)
    for agent in config["agents"]:
        agent_entry(agent_item(agent)[0])  # [LABEL=]NAME:PATH names a model file a run makes first
    raw = yaml.safe_load(path.read_text())
    assert config["budgets"] == [parse_budget(b) for b in raw["budgets"]]
    assert set(raw) <= set(config)


def test_command_line_options_override_the_config(tmp_path):
    path = ROOT / "configs" / "eval" / "paper.yaml"
    args = build_parser().parse_args(["eval", "--config", str(path), "--budgets", "2048", "--out", "unused"])
    assert EVAL.resolve(args)["budgets"] == [2048]


# ---------------------------------------------------------------------------- golden results
def golden_file(tmp_path: Path) -> Path:
    """Two hand-made 4-step episodes of regime "g". Every WRITE costs 81 bytes on the
    unprivileged track: len('{"api": "a", "v": 0}') = 20, len('{"mode": "g"}') = 13, + 48. The
    episodes differ only in the priority hint, which the unprivileged track does not see: the
    same steps twice would be one episode counted twice."""
    from wpb_gym.episodes.jsonl import write_jsonl

    episodes = []
    for e in range(2):
        steps = [Step(t, {"api": "a", "v": t}, {"mode": "g", "priority": 0.5 / (e + 1)}) for t in range(4)]
        labels = {
            "critical_steps": [1, 3],
            "utility_by_step": {0: 1.0, 1: 2.0, 2: 1.0, 3: 2.0},
            "mode": "g",
            "episode_id": e,
        }
        episodes.append(Episode(steps=steps, labels=labels))
    path = tmp_path / "golden.jsonl"
    write_jsonl(path, episodes)
    return path


def test_golden_results_on_a_hand_made_set(tmp_path):
    from wpb_gym.evaluation.reports.report import read_results

    out = tmp_path / "run"
    argv = ["eval", "--episodes", str(golden_file(tmp_path)), "--agents", "fifo_store_all,last_kb"]
    assert wpb([*argv, "--budgets", "170,1000", "--tracks", "unprivileged", "--out", str(out), "--quiet"]) == 0
    rows = {(r["policy"], r["budget_bytes"], r["episode_index"]): r for r in read_results(out / "results.csv")}
    assert len(rows) == 2 * 2 * 2 and {r["mode"] for r in rows.values()} == {"g"}
    expected = {
        # fifo at 170: writes t=0, 1 (162 bytes), nothing more fits. W = {0, 1}, R = {1, 3}.
        ("fifo_store_all", 170): dict(
            tp=1,
            fp=1,
            fn=1,
            tn=1,
            f1=0.5,
            policy_utility=3.0,
            oracle_utility=4.0,
            regret_write_only=1.0,
            bytes_used=162,
            avg_staleness=2.5,
            expire_actions=0,
        ),
        # last_kb at 170: t=2 expires t=0, t=3 expires t=1. W = {2, 3}.
        ("last_kb", 170): dict(
            tp=1,
            fp=1,
            fn=1,
            tn=1,
            f1=0.5,
            policy_utility=3.0,
            oracle_utility=4.0,
            regret_write_only=1.0,
            bytes_used=162,
            avg_staleness=0.5,
            expire_actions=2,
            expire_rate=0.5,
        ),
        # Everything fits in 1000 bytes: W = {0, 1, 2, 3}.
        ("fifo_store_all", 1000): dict(
            tp=2,
            fp=2,
            fn=0,
            tn=0,
            f1=2 / 3,
            recall=1.0,
            precision=0.5,
            policy_utility=6.0,
            oracle_utility=6.0,
            regret_write_only=0.0,
            bytes_used=324,
            utilization=0.324,
            write_density=1.0,
        ),
    }
    for (policy, budget), values in expected.items():
        for episode in range(2):
            row = rows[(policy, budget, episode)]
            for key, value in values.items():
                assert row[key] == pytest.approx(value), (policy, budget, episode, key)
    assert rows[("fifo_store_all", 170, 0)]["utility_per_kb"] == pytest.approx(3.0 / (162 / 1024))


def test_agents_with_parameters_in_the_config(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(
        "agents:\n  - random\n  - {name: random, p: 0.5, label: random_half}\n  - {name: last_kb, max_expires: 1}\n"
        "lengths: [40]\nepisodes_per_condition: 2\nbudgets: [2048]\ntracks: [unprivileged]\n"
    )
    out = tmp_path / "run"
    assert wpb(["eval", "--config", str(config), "--out", str(out), "--quiet"]) == 0
    with open(out / "results.csv", newline="") as handle:
        policies = {r["policy"] for r in csv.DictReader(handle)}
    assert policies == {"random", "random_half", "last_kb(max_expires=1)"}
    config.write_text("agents:\n  - {name: random, q: 1}\n")
    argv = ["eval", "--config", str(config), "--out", str(tmp_path / "x")]
    refused(capsys, argv, "no parameter")
    config.write_text("agents:\n  - random\n  - {name: random}\n")
    refused(capsys, argv, r"agents \['random'\] appear twice")
    config.write_text("agents:\n  - {p: 1}\n")
    refused(capsys, argv, "needs a string 'name'")


def test_compare_versus_pairs_one_agent_with_every_other(tmp_path, capsys):
    out = run_cli(tmp_path)
    capsys.readouterr()
    assert wpb(["compare", str(out), "--versus", "oracle_optimal"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "oracle_optimal vs" in x]
    # privileged track: vs fifo_store_all and priority_threshold, at 2 budgets
    assert len(lines) == 4 and all("| 3 |" in x for x in lines)
    assert not any("regression" in x for x in lines)
    refused(capsys, ["compare", str(out), "--versus", "nobody"], "no agent 'nobody'")
