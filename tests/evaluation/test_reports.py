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
from wpb_gym.evaluation.grid import generated_refs, run_grid
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
    capsys.readouterr()
    assert wpb(["compare", str(out), str(worse), "--agents", "oracle_optimal", "--wide"]) == 0
    assert "| IQM A | IQM B | recall A |" in capsys.readouterr().out


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


# ---------------------------------------------------------------------------- pairing by episode
def strip_hash(results) -> None:
    """Turn ``results`` (a results.csv) into one written before rows carried ``episode_hash``."""
    with open(results, newline="", encoding="utf-8") as handle:
        table = list(csv.reader(handle))
    drop = table[0].index("episode_hash")
    with open(results, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows([cells[:drop] + cells[drop + 1:] for cells in table])


def one_line_error(capsys, argv) -> str:
    """``wpb argv`` exits 2 with one line on stderr, nothing on stdout and no traceback."""
    capsys.readouterr()
    code = wpb(argv)
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and len(captured.err.splitlines()) == 1, captured
    assert "Traceback" not in captured.err
    return captured.err


def test_compare_refuses_runs_on_other_episodes(tmp_path, capsys):
    """Episode i of a run on --seed 777 is not episode i of one on --seed 0: no paired lift between them."""
    a, b = run_cli(tmp_path / "a"), run_cli(tmp_path / "b", "--seed", "777")
    err = one_line_error(capsys, ["compare", str(a), str(b)])
    assert err.startswith(f"wpb compare: error: {a} and {b} were not run on the same episodes: condition (default, "
                          "40, 1024, privileged), agent fifo_store_all: 3 episodes in ")
    assert f", 3 in {b}, 0 in common ({a}'s episode 0 is " in err
    assert err.rstrip().endswith("evaluate both on the same episode set (the same --seed, or the same frozen set)")
    store = tmp_path / "baseline"
    assert wpb(["baseline", "set", str(a), "--store", str(store)]) == 0
    err = one_line_error(capsys, ["compare", "--against-baseline", str(b), "--store", str(store)])
    assert "were not run on the same episodes" in err and f"wpb baseline set RUN --store {store}" in err
    # Within one run every agent played the same episodes.
    assert wpb(["compare", str(b), "--versus", "oracle_optimal"]) == 0


def test_compare_pairs_by_episode_content_and_gives_the_figures_of_before(tmp_path):
    from wpb_gym.evaluation.reports.compare import compare_runs
    from wpb_gym.evaluation.reports.report import read_results

    rows_a = read_results(run_cli(tmp_path) / "results.csv")
    # B: the same episodes, in the reverse order of the run (another episode_index), each scored
    # 0.01 * (its index in A) lower.
    rows_b = [{**r, "f1": r["f1"] - 0.01 * r["episode_index"], "episode_index": 2 - r["episode_index"]}
              for r in rows_a]
    comparisons = compare_runs(rows_a, rows_b)
    assert len(comparisons) == 2 * 4  # 2 budgets x (fifo on two tracks, two privileged agents)
    for c in comparisons:
        assert c.episodes == 3 and c.only_a == c.only_b == 0
        assert c.lift == pytest.approx(-0.01)  # by index, each of A's episodes would meet another
    # The same figures as pairing by index gives where the episodes are in the same order.
    in_order = [{**r, "f1": r["f1"] - 0.01 * r["episode_index"]} for r in rows_a]
    for c, same in zip(comparisons, compare_runs(rows_a, in_order), strict=True):
        a = [r for r in rows_a if tuple(r[k] for k in ("mode", "steps", "budget_bytes", "track", "policy"))
             == c.condition]
        a.sort(key=lambda r: r["episode_index"])
        b = np.array([r["f1"] - 0.01 * r["episode_index"] for r in a])
        f1 = np.array([r["f1"] for r in a])
        assert (same.mean_a, same.mean_b, same.lift) == (f1.mean(), b.mean(), (b - f1).mean())
        assert (same.lift_low, same.lift_high) == bootstrap_ci(b - f1)
        assert same == c


def test_compare_pairs_the_episodes_both_runs_played_and_lists_the_others():
    from wpb_gym.evaluation.reports.compare import compare_runs, comparison_markdown

    three = run_grid(generated_refs(["default"], [40], 3, seed=0), small_policies(), [1024], ["unprivileged"])
    five = run_grid(generated_refs(["default"], [40], 5, seed=0), small_policies(), [1024], ["unprivileged"])
    (c,) = compare_runs(three, five)
    assert (c.episodes, c.only_a, c.only_b, c.lift) == (3, 0, 2, 0.0)
    text = comparison_markdown([c], "f1", "three", "five")
    assert text.endswith("Episodes that only one run played are left out (n counts the episodes both played):\n\n"
                         "- condition (default, 40, 1024, unprivileged), agent last_kb: 0 of A's 3 episodes and 2 "
                         "of B's 5\n")


def small_policies():
    from functools import partial

    from wpb_gym.evaluation.grid import PolicySpec

    return [PolicySpec("last_kb", partial(make_agent, "last_kb"))]


def test_runs_written_before_the_episode_hash_are_refused_across_runs_only(tmp_path, capsys):
    new = run_cli(tmp_path / "new")
    old = tmp_path / "old"
    old.mkdir()
    (old / "results.csv").write_text((new / "results.csv").read_text())
    strip_hash(old / "results.csv")
    err = one_line_error(capsys, ["compare", str(old), str(new)])
    assert err.startswith(f"wpb compare: error: {old} has no episode hashes (its results.csv was written before ")
    assert "run its evaluation again" in err
    store = tmp_path / "baseline"
    assert wpb(["baseline", "set", str(old), "--store", str(store)]) == 0
    err = one_line_error(capsys, ["compare", "--against-baseline", str(new), "--store", str(store)])
    assert f"{store} has no episode hashes" in err and f"wpb baseline set RUN --store {store}" in err
    # Its own agents played the same episodes: they still pair, by index.
    capsys.readouterr()
    assert wpb(["compare", str(old), "--versus", "oracle_optimal"]) == 0
    assert len([x for x in capsys.readouterr().out.splitlines() if "oracle_optimal vs" in x]) == 4


def test_ablation_pairs_by_episode_and_refuses_other_episodes(tmp_path, capsys, monkeypatch):
    from wpb_gym.cli import evaluation as cli_evaluation
    from wpb_gym.evaluation.reports.compare import ablation_markdown
    from wpb_gym.evaluation.reports.pairing import EpisodeMismatch

    def runs(seeds, count=3):
        return [run_grid(generated_refs(["default"], [40], count, seed), small_policies(), [1024], ["unprivileged"])
                for seed in seeds]

    with pytest.raises(EpisodeMismatch, match=r"^x and y were not run on the same episodes: seed 1, condition "
                                              r"\(default, 40, 1024, unprivileged\): 3 episodes in x, 3 in y, 0 in "
                                              r"common"):
        ablation_markdown(runs([0, 1]), runs([0, 2]), "x", "y")
    text = ablation_markdown(runs([0, 1]), runs([0, 1], count=4), "x", "y")
    assert "| +0.000 | n/a |" in text
    assert text.endswith("Episodes that only one variant played are left out of its seed's means:\n\n"
                         "- seed 0, condition (default, 40, 1024, unprivileged): 0 of A's 3 episodes and 1 of B's 4\n"
                         "- seed 1, condition (default, 40, 1024, unprivileged): 0 of A's 3 episodes and 1 of B's 4\n")
    # On the command line: the second config's episodes made from other seeds than the first's.
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    common = "lengths: [40]\nepisodes_per_condition: 2\nbudgets: [1024]\ntracks: [unprivileged]\n"
    a.write_text("agents: [last_kb]\n" + common)
    b.write_text("agents: [change_detector]\n" + common)
    made = cli_evaluation._generated_refs
    monkeypatch.setattr(cli_evaluation, "_generated_refs",
                        lambda config, seed: made(config, seed + 100 * (config["agents"] == ["change_detector"])))
    err = one_line_error(capsys, ["ablate", str(a), str(b), "--seeds", "2"])
    assert err.startswith("wpb ablate: error: a and b were not run on the same episodes: seed 0, condition (default, "
                          "40, 1024, unprivileged): 2 episodes in a, 2 in b, 0 in common (a's episode 0 is ")


def test_the_compare_table_is_compact_unless_wide_and_every_column_is_named():
    from wpb_gym.evaluation.reports.compare import compare_runs, comparison_markdown

    rows = run_grid(generated_refs(["default"], [40], 3, seed=0), small_policies(), [1024], ["unprivileged"])
    worse = [{**r, "f1": r["f1"] - 0.5} for r in rows]
    (c,) = compare_runs(rows, worse)
    for wide, columns in ((False, 11), (True, 17)):
        table = [line for line in comparison_markdown([c], "f1", "a", "b", wide=wide).splitlines()
                 if line.startswith("|")]
        header = [cell.strip() for cell in table[0].strip("|").split("|")]
        assert len(header) == columns and all(header) and header[-1] == "flag"
        assert len(table[2].strip("|").split("|")) == columns
        assert table[2].rstrip(" |").endswith("**regression**")
        assert ("IQM A" in header) == wide
    compact = comparison_markdown([c], "f1", "a", "b").splitlines()
    assert max(len(line) for line in compact if line.startswith("|")) < 120


def test_importing_the_report_leaves_the_statistics_to_the_report_worker():
    # wpb eval imports the report's modules before its grid; scipy.stats (a third of a second of
    # imports) is imported by the report worker while the grid runs, not by the grid's process.
    import subprocess
    import sys

    code = ("import sys; import wpb_gym.evaluation.reports.report, wpb_gym.evaluation.reports.run_writer; "
            "print('scipy.stats' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
