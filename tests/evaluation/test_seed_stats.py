"""``wpb seeds``: learned agents over training seeds, with rliable's statistics."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from test_reports import strip_hash

from wpb_gym.cli import main as wpb
from wpb_gym.evaluation.reports.seed_stats import seed_table, seed_table_markdown, stratified_iqm

PPO = {"ppo": ["ppo_s0", "ppo_s1", "ppo_s2"]}


def row(base, track, policy, declared, episode, f1, episode_set="s0"):
    """A row of ``episode`` of the set ``episode_set``: its hash says which set and episode it is."""
    return {**base, "track": track, "policy": policy, "policy_track": declared, "episode_index": episode,
            "episode_hash": f"{episode_set}-{episode:04d}", "f1": f1, "oracle_f1": 1.0}


def rows_for(offset: float, noise: float = 0.01, episodes: int = 30, seeds: int = 3, seed: int = 1):
    rng = np.random.default_rng(seed)
    rows = []
    base = dict(mode="breaking", steps=200, budget_bytes=10240)
    for e in range(episodes):
        level = rng.uniform(0.5, 0.9)
        for s in range(seeds):
            score = level + offset + rng.normal(0, noise)
            rows.append(row(base, "unprivileged", f"ppo_s{s}", "unprivileged", e, score))
        rows.append(row(base, "unprivileged", "breaking_detector", "unprivileged", e, level))
        rows.append(row(base, "privileged", "breaking_detector", "unprivileged", e, level + 0.5))
        for name, shift in (("priority_threshold", -0.2), ("priority_greedy", -0.1)):
            rows.append(row(base, "privileged", name, "privileged", e, level + shift))
    return rows


def test_lifts_recover_a_known_offset_and_the_best_privileged_baseline():
    (result,) = seed_table(rows_for(0.02), PPO, ["breaking_detector", "best@privileged"])
    assert result.condition == ("breaking", 200, 10240, "unprivileged") and result.episodes == 30
    detector, best = result.lifts
    assert detector.reference == "breaking_detector"
    assert detector.low < 0.02 < detector.high and detector.low > 0 and detector.p_improvement > 0.9
    # best@privileged: among the policies that declare the privileged track (breaking_detector's
    # privileged-track rows do not count), the best mean.
    assert best.reference == "priority_greedy (best privileged)" and best.lift == pytest.approx(0.12, abs=0.01)
    # The optimality gap against the bound of 1.0 is 1 - the mean score.
    scores = np.array([[r["f1"] for r in rows_for(0.02) if r["policy"] == f"ppo_s{s}"] for s in range(3)])
    assert result.gap == pytest.approx(float(np.mean(1.0 - scores)))
    assert result.seed_means == pytest.approx(tuple(scores.mean(axis=1)))


def test_a_tie_is_level_and_the_interval_straddles_zero():
    (result,) = seed_table(rows_for(0.0, noise=0.005), PPO, ["breaking_detector"])
    (lift,) = result.lifts
    assert lift.low < 0 < lift.high and 0.3 < lift.p_improvement < 0.7


def test_the_stratified_bootstrap_resamples_seeds_within_episodes():
    rng = np.random.default_rng(0)
    scores = rng.uniform(size=(3, 40))
    value, low, high = stratified_iqm(scores, rng, reps=2000)
    assert value == pytest.approx(stats.trim_mean(scores.ravel(), 0.25))
    assert low < value < high
    same = np.tile(rng.uniform(size=(1, 40)), (3, 1))  # seeds agree: nothing to resample
    value, low, high = stratified_iqm(same, rng, reps=200)
    assert low == pytest.approx(value) and high == pytest.approx(value)


def test_missing_rows_are_an_error_not_a_smaller_sample():
    rows = [r for r in rows_for(0.0) if not (r["policy"] == "ppo_s2" and r["episode_index"] == 3)]
    with pytest.raises(ValueError, match="ppo_s2 was not evaluated on the same episodes"):
        seed_table(rows, PPO, ["breaking_detector"])
    with pytest.raises(ValueError, match=r"no rows for seed\(s\) \['ppo_s9'\]"):
        seed_table(rows_for(0.0), {"ppo": ["ppo_s0", "ppo_s9"]}, [])
    rows = [r for r in rows_for(0.0) if not (r["policy"] == "breaking_detector" and r["episode_index"] == 0)]
    with pytest.raises(ValueError, match="breaking_detector was not evaluated on the same episodes"):
        seed_table(rows, PPO, ["breaking_detector"])


def test_the_markdown_table_has_one_row_per_reference():
    results = seed_table(rows_for(0.02), PPO, ["breaking_detector", "best@privileged"])
    lines = seed_table_markdown(results).splitlines()
    assert sum(line.startswith("| breaking |") for line in lines) == 2
    assert "priority_greedy (best privileged)" in lines[-1]


def test_a_best_reference_that_names_a_reference_given_is_one_comparison():
    (result,) = seed_table(rows_for(0.02), PPO, ["priority_greedy@privileged", "breaking_detector", "best@privileged"])
    assert [lift.reference for lift in result.lifts] == ["priority_greedy (best privileged)", "breaking_detector"]


def test_wpb_seeds_reads_a_run_and_refuses_unknown_labels(tmp_path, capsys):
    # Three scripted agents under labels of their own play the part of one agent's seeds.
    config = tmp_path / "eval.yaml"
    config.write_text(
        "agents: [{name: change_detector, label: a}, {name: last_kb, label: b}, {name: fifo_store_all, label: c},"
        " breaking_detector]\nregimes: [breaking]\nlengths: [80]\nbudgets: [2048]\nepisodes_per_condition: 4\n"
        "tracks: [unprivileged]\n"
    )
    run = tmp_path / "run"
    assert wpb(["eval", "--config", str(config), "--out", str(run), "--quiet"]) == 0
    capsys.readouterr()
    out = tmp_path / "table.md"
    assert wpb(["seeds", str(run), "--learned", "mix=a,b,c", "--versus", "breaking_detector", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| breaking | 80 | 2048 | unprivileged | mix | 3 | 4 |" in printed and out.read_text() == printed
    assert wpb(["seeds", str(run), "--learned", "mix=a,zz"]) == 2
    assert "zz" in capsys.readouterr().err
    assert wpb(["seeds", str(run), "--learned", "mix"]) == 2
    assert "--learned expects NAME=LABEL" in capsys.readouterr().err


def test_a_row_given_twice_is_refused():
    rows = rows_for(0.0)
    with pytest.raises(ValueError, match="two rows for episode 0"):
        seed_table(rows + rows[:1], PPO, [])


def test_a_learned_agent_is_reported_on_the_track_it_declares():
    rows = rows_for(0.02)
    rows += [{**r, "track": "privileged"} for r in rows if r["policy"].startswith("ppo_s")]
    (result,) = seed_table(rows, PPO, ["breaking_detector"])
    assert result.condition[3] == "unprivileged"


def test_seeds_or_references_run_on_other_episodes_are_refused():
    """Episode 3 of a run on another seed is another episode: pairing it by index would be wrong."""
    rows = rows_for(0.02)
    elsewhere = [{**r, "episode_hash": f"s777-{r['episode_index']:04d}"} if r["policy"] == "breaking_detector" else r
                 for r in rows]
    with pytest.raises(ValueError, match=r"breaking_detector was not evaluated on the same episodes as ppo: 30 "
                                         r"episodes in ppo, 30 in breaking_detector, 0 in common \(ppo's episode 0 is "
                                         r"s0-0000, breaking_detector's episode 0 is s777-0000\)"):
        seed_table(elsewhere, PPO, ["breaking_detector"])
    one_seed = [{**r, "episode_hash": f"s777-{r['episode_index']:04d}"} if r["policy"] == "ppo_s1" else r for r in rows]
    with pytest.raises(ValueError, match="ppo_s1 was not evaluated on the same episodes as ppo_s0: 30 episodes in"):
        seed_table(one_seed, PPO, [])
    # The same episodes in another order of the run (another episode_index) pair by content.
    moved = [{**r, "episode_index": 29 - r["episode_index"]} if r["policy"] == "breaking_detector" else r for r in rows]
    (result,) = seed_table(moved, PPO, ["breaking_detector"])
    (expected,) = seed_table(rows, PPO, ["breaking_detector"])
    assert result.lifts[0].lift == pytest.approx(expected.lifts[0].lift)


def test_rows_without_episode_hashes_pair_by_index_within_one_run_only():
    rows = rows_for(0.02)
    old = [{k: v for k, v in r.items() if k != "episode_hash"} for r in rows]
    assert seed_table(old, PPO, ["breaking_detector"], one_run=True) == seed_table(rows, PPO, ["breaking_detector"])
    with pytest.raises(ValueError, match="has no episode hashes .* run its evaluation again"):
        seed_table(old, PPO, ["breaking_detector"])


def test_wpb_seeds_refuses_runs_on_other_episodes_in_one_line(tmp_path, capsys):
    """The learned agent's seeds in one run folder, the reference in another: they must share episodes."""
    common = ["--regimes", "breaking", "--lengths", "80", "--budgets", "2048", "--episodes-per-condition", "3",
              "--tracks", "unprivileged", "--quiet"]
    config = tmp_path / "learned.yaml"
    config.write_text("agents: [{name: change_detector, label: a}, {name: last_kb, label: b}]\n")
    runs = {}
    for name, seed, agents in (("learned", 0, ["--config", str(config)]),
                               ("reference", 0, ["--agents", "breaking_detector"]),
                               ("held_out", 777, ["--agents", "breaking_detector"])):
        runs[name] = tmp_path / name
        assert wpb(["eval", *agents, *common, "--seed", str(seed), "--out", str(runs[name])]) == 0
    capsys.readouterr()
    learned = ["--learned", "mix=a,b", "--versus", "breaking_detector"]
    assert wpb(["seeds", str(runs["learned"]), str(runs["reference"]), *learned]) == 0
    assert "| breaking | 80 | 2048 | unprivileged | mix | 2 | 3 |" in capsys.readouterr().out
    assert wpb(["seeds", str(runs["learned"]), str(runs["held_out"]), *learned]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err and len(captured.err.splitlines()) == 1
    assert captured.err.startswith(f"wpb seeds: error: {runs['learned']}, {runs['held_out']}: ")
    assert "breaking_detector was not evaluated on the same episodes as mix: 3 episodes in mix, 3 in " in captured.err
    assert "0 in common" in captured.err
    # A run written before results carried the hash: alone it pairs by index, with another run not.
    strip_hash(runs["learned"] / "results.csv")
    assert wpb(["seeds", str(runs["learned"]), "--learned", "mix=a,b", "--versus", "a"]) == 0
    capsys.readouterr()
    assert wpb(["seeds", str(runs["learned"]), str(runs["reference"]), *learned]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"error: {runs['learned']} has no episode hashes" in err

