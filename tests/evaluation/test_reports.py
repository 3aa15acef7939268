"""The statistics, files and comparisons of a run: bootstrap intervals, atomic writes, the leaderboard, paired comparisons, resume and ablation."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from test_eval import refused, run_cli, small_grid

from agents.registry import make_agent
from wpb_gym.cli import main as wpb
from wpb_gym.evaluation import grid as grid_module
from wpb_gym.evaluation.grid import generated_refs
from wpb_gym.core.atomic_files import write_atomic
from wpb_gym.evaluation.reports.report import bootstrap_ci, leaderboard
from wpb_gym.evaluation.runner import run_episode


# ---------------------------------------------------------------------------- statistics and files
def test_bootstrap_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    hits = 0
    trials = 200
    for i in range(trials):
        sample = rng.exponential(scale=2.0, size=40)  # skewed: the true mean is 2
        low, high = bootstrap_ci(sample, seed=i)
        hits += low <= 2.0 <= high
    assert 0.88 <= hits / trials <= 0.99


def test_bootstrap_interval_edge_cases():
    assert all(math.isnan(x) for x in bootstrap_ci([0.5]))
    assert bootstrap_ci([0.25, 0.25, 0.25]) == (0.25, 0.25)
    assert bootstrap_ci([0.0, 1.0, 0.5, 0.2], seed=3) == bootstrap_ci([0.0, 1.0, 0.5, 0.2], seed=3)


def test_an_interrupted_write_leaves_no_file(tmp_path, monkeypatch):
    target = tmp_path / "results.csv"

    def fail(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr("wpb_gym.evaluation.reports.report.os.replace", fail)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, "a,b\n1,2\n")
    assert list(tmp_path.iterdir()) == []


def test_leaderboard_falls_back_to_the_nearest_budget():
    rows = small_grid(jobs=1)
    board = leaderboard(rows, budget=10240)
    assert "Recall@4KB" in board and "| 3 |" in board


# ---------------------------------------------------------------------------- comparisons
def test_clopper_pearson_matches_tabulated_intervals():
    from wpb_gym.evaluation.reports.compare import clopper_pearson

    # Exact binomial 95% intervals (tabulated; e.g. 0/10 -> upper 1 - 0.025**(1/10)).
    assert clopper_pearson(0, 10)[1:] == pytest.approx((0.0, 0.308497), abs=1e-6)
    assert clopper_pearson(10, 10)[1:] == pytest.approx((0.691503, 1.0), abs=1e-6)
    assert clopper_pearson(5, 10)[1:] == pytest.approx((0.187086, 0.812914), abs=1e-6)
    assert clopper_pearson(1, 20)[1:] == pytest.approx((0.001265, 0.248733), abs=1e-6)
    assert all(math.isnan(x) for x in clopper_pearson(0, 0))


def test_probability_of_improvement_and_iqm():
    from wpb_gym.evaluation.reports.compare import iqm, probability_of_improvement

    assert probability_of_improvement([0, 0], [1, 1]) == 1.0
    assert probability_of_improvement([1, 1], [0, 0]) == 0.0
    assert probability_of_improvement([0.5, 0.5], [0.5, 0.5]) == 0.5
    assert probability_of_improvement([0, 1], [0.5, 2]) == 0.75
    assert iqm([1, 2, 3, 4, 5, 6, 7, 100]) == 4.5


def test_compare_flags_a_regression_and_the_baseline_check_fails(tmp_path, capsys):
    out = run_cli(tmp_path)
    store = tmp_path / "baseline"
    assert wpb(["baseline", "set", str(out), "--store", str(store)]) == 0
    assert wpb(["compare", "--against-baseline", str(out), "--store", str(store)]) == 0  # same run: no regression
    # A worse run: fifo_store_all loses its F1 on the privileged track at 10 KB.
    worse = tmp_path / "worse"
    worse.mkdir()
    with open(out / "results.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        fields = reader.fieldnames
    for r in rows:
        if r["policy"] == "fifo_store_all" and r["track"] == "privileged" and r["budget_bytes"] == "10240":
            r["f1"] = repr(float(r["f1"]) - 0.05 - 0.01 * int(r["episode_index"]))
    with open(worse / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    capsys.readouterr()
    assert wpb(["compare", "--against-baseline", str(worse), "--store", str(store)]) == 1
    text = capsys.readouterr().out
    flagged = [line for line in text.splitlines() if "**regression**" in line]
    assert len(flagged) == 1 and "| fifo_store_all |" in flagged[0] and "| 10240 | privileged |" in flagged[0]
    assert "1 regression(s)" in text
    assert wpb(["compare", str(out), str(worse), "--agents", "oracle_optimal"]) == 0


def test_compare_explains_bad_calls(tmp_path, capsys):
    refused(capsys, ["compare", str(tmp_path)], "two run folders")
    refused(
        capsys, ["compare", "--against-baseline", str(tmp_path), "--store", str(tmp_path / "none")], "no baseline in"
    )
    refused(
        capsys, ["baseline", "set", str(tmp_path / "missing"), "--store", str(tmp_path / "b")], "no such results file"
    )


def test_resume_after_an_interrupt_gives_the_same_results(tmp_path, monkeypatch):
    fresh = run_cli(tmp_path / "fresh")
    real = grid_module.run_task
    calls = []

    def interrupted(task):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(task.ref.index)
        return real(task)

    monkeypatch.setattr(grid_module, "run_task", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_cli(tmp_path / "cut")
    out = tmp_path / "cut" / "run"
    assert not (out / "results.csv").exists()
    assert len(list(out.glob(".partial-*/*.json"))) == 2
    calls.clear()
    monkeypatch.setattr(grid_module, "run_task", lambda task: calls.append(task.ref.index) or real(task))
    run_cli(tmp_path / "cut", "--resume")
    assert calls == [2]  # only the episode the interrupt left
    assert (out / "results.csv").read_text() == (fresh / "results.csv").read_text()
    assert not list(out.glob(".partial-*"))


def test_wpb_ablate_reports_mean_std_and_paired_tests(tmp_path, capsys):
    from scipy import stats

    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    common = "lengths: [60]\nepisodes_per_condition: 3\nbudgets: [2048]\ntracks: [unprivileged]\n"
    a.write_text("agents: [last_kb]\n" + common)
    b.write_text("agents: [change_detector]\n" + common)
    assert wpb(["ablate", str(a), str(b), "--seeds", "3", "--out", str(tmp_path / "ablation.md")]) == 0
    text = capsys.readouterr().out
    assert text == (tmp_path / "ablation.md").read_text()
    line = next(x for x in text.splitlines() if "last_kb → change_detector" in x)
    # The same numbers computed independently: per seed, the mean F1 over its 3 episodes.
    per_seed = {}
    for name in ("last_kb", "change_detector"):
        per_seed[name] = []
        for seed in range(3):
            refs = generated_refs(["default"], [60], 3, seed)
            per_seed[name].append(np.mean([run_episode(make_agent(name), r.load(), 2048).metrics.f1 for r in refs]))
    p = stats.ttest_rel(per_seed["change_detector"], per_seed["last_kb"]).pvalue
    assert f"{np.mean(per_seed['last_kb']):.3f} ± {np.std(per_seed['last_kb'], ddof=1):.3f}" in line
    assert f"{p:.3g}" in line and line.rstrip(" |").endswith("*")
    assert wpb(["ablate", str(a), str(a), "--seeds", "2"]) == 0
    same = next(x for x in capsys.readouterr().out.splitlines() if "| last_kb |" in x or "→" in x)
    assert "+0.000" in same and "n/a" in same
    c = tmp_path / "c.yaml"
    c.write_text("agents: [last_kb]\nepisodes: some/folder\n")
    refused(capsys, ["ablate", str(a), str(c), "--seeds", "2"], "reads episodes from files")
