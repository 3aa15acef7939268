"""The baselines that use compressed writes: each is breaking_detector without compression, the
rationer's plan (golden), and the tuning grid its prior was chosen on."""

from __future__ import annotations

import pytest

from agents.registry import make_agent
from agents.scripted import rationer_tuning
from agents.scripted.heuristics import best_mix
from wpb_gym.core.compression import Compression
from wpb_gym.episodes.generators.regimes import generate_episode, make_config
from wpb_gym.evaluation.runner import run_episode


def test_the_rationers_plan_mixes_plain_and_compressed_writes_by_credit():
    # 5 steps of 300 bytes plain, 120 compressed, in 1000 bytes: 3 plain give F1 6/8. At credit
    # 0.75, 2 plain and 3 compressed give 2 * 4.25 / 10 = 0.85; at 0.25 only 0.55.
    steps = {"plain_cost": 300, "small_cost": 120, "relevant": 5}
    assert best_mix(1000, **steps, n=5, plain_held=0, packed_held=0, credit=0.75) == (2, 3)
    assert best_mix(1000, **steps, n=5, plain_held=0, packed_held=0, credit=0.25) == (3, 0)
    # What memory holds counts: with 3 plain items held and room for one plain step, that.
    assert best_mix(300, **steps, n=1, plain_held=3, packed_held=0, credit=0.75) == (1, 0)
    assert best_mix(100, **steps, n=2, plain_held=0, packed_held=0, credit=0.75) == (0, 0)  # nothing fits


@pytest.mark.parametrize("name", ["breaking_compressor", "breaking_rationer"])
def test_without_compression_each_is_breaking_detector(name):
    episode = generate_episode(make_config("contract_mix"), 4)
    ours = run_episode(make_agent(name), episode, 1024)
    reference = run_episode(make_agent("breaking_detector"), episode, 1024)
    assert ours.store.timesteps() == reference.store.timesteps()
    assert ours.metrics.as_row() == reference.metrics.as_row()


def test_with_compression_they_compress_and_are_never_refused():
    episode = generate_episode(make_config("reverts"), 4)
    runs = {name: run_episode(make_agent(name), episode, 1024, compression=Compression(0.75))
            for name in ("breaking_detector", "breaking_compressor", "breaking_rationer")}
    for run in runs.values():
        assert sum(run.store.rejected_counts.values()) == 0
    compressor = runs["breaking_compressor"].store
    assert compressor.timesteps() and compressor.compressed_timesteps() == compressor.timesteps()
    assert runs["breaking_rationer"].store.compressed_timesteps()


def test_the_tuning_grid_scores_every_pair_and_names_the_best(capsys):
    scores = rationer_tuning.grid_scores(seed=0, episodes=1, credit=0.75)
    assert set(scores) == {(p, w) for p in rationer_tuning.PRIORS for w in rationer_tuning.WEIGHTS}
    assert all(0.0 < f1 <= 1.0 for f1 in scores.values())
    rationer_tuning.main(["--episodes", "1"])
    out = capsys.readouterr().out
    assert out.count("mean F1") == len(scores) and "best: prior" in out
