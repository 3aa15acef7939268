"""The query tier end to end on the command line: freeze a small set, evaluate the keepers and
``causal_privileged`` on it, and read the run with ``report --headroom``, ``compare`` and ``seeds``.

The tiers' own episodes have thousands of steps; the set here is frozen with small generator
options (20 endpoints, 8 checkpoints of 10 steps). Figures are recomputed from results.csv.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from wpb_gym.cli import main
from wpb_gym.episodes.frozen import open_frozen_set
from wpb_gym.episodes.generators.queries import BREAKING_KINDS
from wpb_gym.evaluation.grid import QUERY_COLUMNS
from wpb_gym.evaluation.reports.report import read_results

OPTIONS = {"endpoints": 20, "families": 4, "checkpoint_interval": 10, "queries_per_checkpoint": 30,
           "summary_max_bytes": 800}
SETS = [x for k, v in OPTIONS.items() for x in ("--set", f"{k}={v}")]
AGENTS = ("keep_latest_lfu", "keep_latest_family", "causal_privileged")
BUDGETS = (2048, 4096)


def wpb(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def refused(capsys, *argv) -> str:
    """``wpb argv`` exits 2 with one line on stderr and no traceback; returns the line."""
    code, _, err = wpb(capsys, *argv)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("note:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def query_run(tmp_path_factory) -> Path:
    """A frozen set of two tiers (3 episodes each, T=100) and a run of the three agents on it."""
    root = tmp_path_factory.mktemp("query_tier")
    freeze = ["freeze", "--regimes", "queries_easy,queries_medium", "--lengths", "100", "--episodes", "3"]
    assert main([*freeze, *SETS, "--out", str(root / "set")]) == 0
    argv = ["eval", "--episodes", str(root / "set"), "--agents", ",".join(AGENTS), "--budgets", "2KB,4KB",
            "--tracks", "unprivileged,privileged", "--out", str(root / "run"), "--quiet"]
    assert main(argv) == 0
    return root


def means(rows, column="query_accuracy", **where) -> float:
    chosen = [r[column] for r in rows if all(r[k] == v for k, v in where.items())]
    assert chosen
    return float(np.mean(chosen))


def test_freeze_writes_the_query_tier_with_hashes_and_its_counts(query_run, tmp_path, capsys):
    from wpb_gym.scoring.queries import queried_state_bytes

    frozen = open_frozen_set(query_run / "set")
    manifest = json.loads((query_run / "set" / "MANIFEST.json").read_text(encoding="utf-8"))
    for f in frozen.files:
        entry = manifest["files"][f.path.name]
        assert entry["sha256"] == hashlib.sha256(f.path.read_bytes()).hexdigest()
        assert {k: entry["generator"][k] for k in OPTIONS} == OPTIONS and entry["generator"]["length"] == 100
    # The summary table: breaking changes counted from the tier's change kinds, and its queries.
    code, out, _ = wpb(capsys, "freeze", "--regimes", "queries_easy", "--lengths", "100", "--episodes", "3",
                       *SETS, "--out", tmp_path / "again")
    assert code == 0
    table = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("| ")]
    header, row = [c.strip() for c in table[0]], [c.strip() for c in table[1]]
    assert header[:7] == ["regime", "T", "episodes", "critical/ep", "breaking/ep", "queries/ep", "queried state"]
    (f,) = [f for f in frozen.files if f.regime == "queries_easy"]
    episodes = list(f.iter_episodes())
    breaking = np.mean([sum(kind in BREAKING_KINDS for _, kind in e.labels["change_kinds"]) for e in episodes])
    assert float(row[4]) == pytest.approx(breaking, abs=0.05) and breaking > 0
    assert row[5] == f"{np.mean([len(e.labels['queries']) for e in episodes]):.0f}"
    assert row[6] == f"{np.mean([queried_state_bytes(e) for e in episodes]) / 1024:.0f} KB"
    assert row[-1] == f.sha256[:12]  # the same options give the same file


def test_results_csv_has_the_query_columns_for_every_run(query_run):
    rows = read_results(query_run / "run" / "results.csv")
    with open(query_run / "run" / "results.csv", newline="", encoding="utf-8") as handle:
        header = next(csv.reader(handle))
    assert [c for c in header if c in QUERY_COLUMNS] == list(QUERY_COLUMNS)
    # 2 tiers x 3 episodes x 2 budgets x (2 keepers on both tracks + causal_privileged on the privileged one)
    assert len(rows) == 2 * 3 * 2 * 5
    assert all(0 <= r["query_accuracy"] <= r["query_bound"] <= 1 for r in rows)
    assert all(r["query_feasible"] <= r["query_bound"] for r in rows)
    # The bound is the episode's: the same for every policy and both tracks (their byte costs are equal).
    per_episode = {}
    for r in rows:
        per_episode.setdefault((r["mode"], r["episode_index"], r["budget_bytes"]), set()).add(r["query_bound"])
    assert all(len(bounds) == 1 for bounds in per_episode.values())
    # causal_privileged runs on the privileged track only.
    assert {r["track"] for r in rows if r["policy"] == "causal_privileged"} == {"privileged"}


def test_the_leaderboard_leads_with_query_accuracy(query_run):
    rows = read_results(query_run / "run" / "results.csv")
    text = (query_run / "run" / "leaderboard.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    start = lines.index("## queries_easy, T=100, privileged track")
    bound = means(rows, "query_bound", mode="queries_easy", budget_bytes=4096, track="privileged")
    assert lines[start + 2].startswith(f"Hindsight bound on query accuracy: {bound:.3f} [")
    assert lines[start + 4].startswith("| Policy | Query acc.@4KB | Recall@4KB |")
    table = lines[start + 6 : start + 6 + 3]
    accuracy = {a: means(rows, mode="queries_easy", budget_bytes=4096, track="privileged", policy=a) for a in AGENTS}
    assert [re.match(r"\| (\w+)", line).group(1) for line in table] == sorted(AGENTS, key=lambda a: -accuracy[a])
    assert "causal_privileged (oracle)" in text and "nan" not in text
    assert "nan" not in (query_run / "run" / "summary.csv").read_text(encoding="utf-8")


def test_report_headroom_leaves_the_runs_learned_agents_out_of_best(query_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(query_run / "run", run)
    # The run's best keeper relabelled as a learned agent's seed: the run's agents say which it is.
    rows = read_results(run / "results.csv")
    medium = [r for r in rows if r["mode"] == "queries_medium" and r["track"] == "unprivileged"]
    best = max(AGENTS[:2], key=lambda a: means(medium, policy=a, budget_bytes=BUDGETS[0]))
    text = (run / "results.csv").read_text(encoding="utf-8")
    (run / "results.csv").write_text(text.replace(f",{best},", ",vk_s0,"), encoding="utf-8")
    meta = json.loads((run / "run.json").read_text(encoding="utf-8"))
    meta["config"]["agents"] = [a for a in meta["config"]["agents"] if a != best] + ["vk_s0=value_keeper:x.json"]
    (run / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    code, out, _ = wpb(capsys, "report", run, "--headroom")
    assert code == 0 and "Learned agents are never best" in out and "`vk_s0`" in out
    lines = out.splitlines()
    start = lines.index("## queries_medium, T=100")
    other = next(a for a in AGENTS[:2] if a != best)
    assert f"(`{other}`)" in lines[start + 4] and "(`vk_s0`)" not in lines[start + 4]
    # A run.json that cannot be read is said, not silently taken as naming no learned agents.
    (run / "run.json").write_text("{", encoding="utf-8")
    code, _, err = wpb(capsys, "report", run, "--headroom")
    assert code == 0 and "cannot read the run's agents" in err


def test_report_headroom_gives_the_bound_the_best_policies_and_the_gates(query_run, capsys):
    run = query_run / "run"
    code, out, _ = wpb(capsys, "report", run, "--headroom", "--highlight", "keep_latest_family")
    assert code == 0 and out == (run / "headroom.md").read_text(encoding="utf-8")
    assert out.startswith("# Query-tier headroom") and f"Written by `wpb report {run} --headroom`" in out
    rows = read_results(run / "results.csv")
    lines = out.splitlines()
    start = lines.index("## queries_medium, T=100")
    assert lines[start + 2].split(" | ")[-4:] == [
        "Priv. − best unpriv.", "(Priv. − best unpriv.) / (bound − best unpriv.)", "`keep_latest_family`",
        "Episodes |",
    ]
    for line, budget in zip(lines[start + 4 : start + 6], BUDGETS, strict=True):
        cells = line.strip("| ").split(" | ")
        where = {"mode": "queries_medium", "budget_bytes": budget}
        bound = means(rows, "query_bound", **where, track="unprivileged")
        privileged = means(rows, **where, track="privileged", policy="causal_privileged")
        keepers = {a: means(rows, **where, track="unprivileged", policy=a) for a in AGENTS[:2]}
        best = max(keepers, key=keepers.get)
        assert cells[1] == f"{bound:.3f}"
        assert cells[3] == f"{privileged:.3f} (`causal_privileged`)"
        assert cells[4] == f"{keepers[best]:.3f} (`{best}`)"
        assert cells[5:8] == [
            f"{keepers[best] / bound:.3f}",
            f"{privileged - keepers[best]:+.3f}",
            f"{(privileged - keepers[best]) / (bound - keepers[best]):.3f}",
        ]
        assert cells[8] == f"{keepers['keep_latest_family']:.3f}" and cells[9] == "3"


def test_compare_and_seeds_take_query_accuracy(query_run, tmp_path, capsys):
    run = query_run / "run"
    code, out, _ = wpb(capsys, "compare", run, "--versus", "keep_latest_family", "--metric", "query_accuracy")
    assert code == 0 and out.startswith("# keep_latest_family (B) vs each other agent (A) on query_accuracy")
    # Per tier and budget: keep_latest_lfu on both tracks, causal_privileged on the privileged one.
    assert len([line for line in out.splitlines() if "keep_latest_family vs" in line]) == 2 * 2 * 3
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    code, out, _ = wpb(capsys, "compare", run, copy, "--metric", "query_accuracy")
    lifts = [line.split(" | ")[8] for line in out.splitlines() if line.startswith("| queries_")]
    assert code == 0 and len(lifts) == 2 * 2 * 5 and all(lift.startswith("+0.000") for lift in lifts)
    code, out, _ = wpb(capsys, "seeds", run, "--learned", "family=keep_latest_family", "--versus",
                       "keep_latest_lfu,causal_privileged@privileged", "--metric", "query_accuracy")
    assert code == 0 and "hindsight bound (`query_bound`)" in out
    rows = read_results(run / "results.csv")
    line = next(x for x in out.splitlines() if x.startswith("| queries_easy | 100 | 4096 | unprivileged | family |"))
    mine = [r for r in rows if (r["mode"], r["budget_bytes"], r["track"], r["policy"])
            == ("queries_easy", 4096, "unprivileged", "keep_latest_family")]
    gap = np.mean([max(0.0, r["query_bound"] - r["query_accuracy"]) for r in mine])
    assert line.split(" | ")[9].startswith(f"{gap:.3f} [")


def test_query_accuracy_of_results_without_queries_is_a_one_line_error(runs, capsys):
    paper = runs / "unprivileged"
    line = refused(capsys, "compare", paper, paper / ".." / "both", "--metric", "query_accuracy")
    assert line == (f"wpb compare: error: --metric query_accuracy: {paper} has no query-tier results (its regimes: "
                    "default); query accuracy is scored on queries_easy, queries_medium, queries_hard only")
    line = refused(capsys, "seeds", paper, "--learned", "x=last_kb", "--versus", "fifo_store_all",
                   "--metric", "query_accuracy")
    assert line.startswith("wpb seeds: error: --metric query_accuracy:") and "no query-tier results" in line


def test_results_without_the_query_columns_still_read(query_run, tmp_path, capsys):
    """A results.csv written before the columns existed: the commands read it; query accuracy is absent."""
    old = tmp_path / "old"
    old.mkdir()
    with open(query_run / "run" / "results.csv", newline="", encoding="utf-8") as handle:
        table = list(csv.reader(handle))
    keep = [i for i, name in enumerate(table[0]) if name not in QUERY_COLUMNS]
    with open(old / "results.csv", "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows([[line[i] for i in keep] for line in table])
    code, out, _ = wpb(capsys, "report", old, "--headroom")
    assert code == 0 and out.startswith("# Headroom (mean F1") and "Query-tier" not in out
    assert wpb(capsys, "compare", old, "--versus", "keep_latest_lfu", "--metric", "f1")[0] == 0
    assert "has no query-tier results" in refused(capsys, "compare", old, "--versus", "keep_latest_lfu",
                                                  "--metric", "query_accuracy")


def test_eval_of_a_query_tier_too_short_for_its_warm_up_is_a_one_line_error(tmp_path, capsys):
    line = refused(capsys, "eval", "--regimes", "queries_easy", "--lengths", "300", "--agents", "keep_latest_lfu",
                   "--out", tmp_path / "run")
    assert line == ("wpb eval: error: --lengths with --regimes: regime 'queries_easy' needs a length of at least "
                    "514, got 300: its episodes open with a warm-up that shows each of its 512 endpoints once, then "
                    "at least one change and the final checkpoint (the tier's own length is 2512)")
    line = refused(capsys, "eval", "--regimes", "queries_medium", "--agents", "keep_latest_lfu", "--out", tmp_path / "r")
    assert line.startswith("wpb eval: error: --lengths (by default 200) with --regimes: regime 'queries_medium' needs")
    assert not (tmp_path / "run").exists() and not (tmp_path / "r").exists()


def test_eval_of_generated_query_episodes(tmp_path, capsys):
    code, _, _ = wpb(capsys, "eval", "--regimes", "queries_easy", "--lengths", "620", "--episodes-per-condition", "1",
                     "--agents", "keep_latest_lfu", "--budgets", "10KB", "--tracks", "unprivileged",
                     "--out", tmp_path / "run", "--quiet")
    assert code == 0
    (row,) = read_results(tmp_path / "run" / "results.csv")
    assert row["mode"] == "queries_easy" and row["steps"] == 620 and 0 < row["query_accuracy"] <= row["query_bound"]
