"""Reset options of WritePolicyBench-v0: seeds, episode choice and per-episode overrides do what the docstring says."""

from __future__ import annotations

import numpy as np
import pytest
from test_env_properties import GENERATOR_OPTIONS, REGIMES

from wpb_gym import (
    generate_episode,
    make_config,
    write_jsonl,
)
from wpb_gym.envs.env import WritePolicyBenchEnv


# ---------------------------------------------------------------------------- 8. reset options
def test_reset_same_seed_same_episode_and_observation():
    kwargs = {"length": 30, "budget_bytes": 1000, "slots": 3, "regime": "burst_redundancy", "doc_prob": 0.3}
    env_a, env_b = WritePolicyBenchEnv(**kwargs), WritePolicyBenchEnv(**kwargs)
    obs_a, _ = env_a.reset(seed=11)
    obs_b, _ = env_b.reset(seed=11)
    np.testing.assert_array_equal(obs_a, obs_b)
    assert env_a.episode.to_dict() == env_b.episode.to_dict()
    assert env_a.episode_index == env_b.episode_index
    for a in (1, 1, 0, 1):
        env_a.step(a)
    obs_c, _ = env_a.reset(seed=11)
    np.testing.assert_array_equal(obs_a, obs_c)
    assert env_a.episode.to_dict() == env_b.episode.to_dict()
    # Different seeds draw (almost surely) different episodes.
    indices = set()
    for s in range(5):
        env_a.reset(seed=s)
        indices.add(env_a.episode_index)
    assert len(indices) > 1


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("options", GENERATOR_OPTIONS, ids=str)
def test_reset_episode_index_matches_the_generator(regime, options):
    env = WritePolicyBenchEnv(regime=regime, length=40, episode_seed=3, **options)
    for i in (0, 7, 123):
        env.reset(options={"episode_index": i})
        expected = generate_episode(make_config(regime, length=40, **options), 3, i)
        assert env.episode.to_dict() == expected.to_dict()
        assert env.episode_index == i


def test_reset_budget_regime_and_length_options_apply_to_one_episode():
    env = WritePolicyBenchEnv(length=30, budget_bytes=1000, doc_prob=0.3)
    env.reset(seed=0, options={"budget_bytes": 777})
    assert env.store.max_bytes == 777
    done = False
    while not done:
        _, _, done, _, info = env.step(1)
    assert info["metrics"]["budget_bytes"] == 777
    env.reset()
    assert env.store.max_bytes == 1000

    env.reset(options={"regime": "redundancy", "episode_index": 2})
    assert env.episode.regime == "redundancy" == env.episode.labels["mode"]
    assert env.episode.to_dict() == generate_episode(make_config("redundancy", length=30, doc_prob=0.3), 0, 2).to_dict()
    env.reset()
    assert env.episode.regime == "default" and len(env.episode) == 30

    env.reset(options={"length": 12})
    assert len(env.episode) == 12
    env.reset()
    assert len(env.episode) == 30


@pytest.mark.parametrize("options", [{"seed": 1}, {"budget": 10}, {"episode_index": 0, "foo": 1}])
def test_reset_unknown_option_raises(options):
    env = WritePolicyBenchEnv(length=20)
    with pytest.raises(ValueError):
        env.reset(options=options)


@pytest.mark.parametrize("kind", ["list", "file"])
def test_cycle_order_visits_episodes_in_order_and_wraps(kind, tmp_path):
    episodes = [generate_episode(make_config("default", length=20 + i), 5, i) for i in range(3)]
    if kind == "list":
        source = episodes
    else:
        source = tmp_path / "episodes.jsonl"
        write_jsonl(source, episodes)
    env = WritePolicyBenchEnv(episodes=source, episode_order="cycle", slots=2)
    seen = []
    for _ in range(7):
        env.reset()
        seen.append(env.episode_index)
        assert env.episode.to_dict() == episodes[env.episode_index].to_dict()
    assert seen == [0, 1, 2, 0, 1, 2, 0]
    env.reset(seed=9)  # a seeded reset restarts the cycle
    assert env.episode_index == 0
    env.reset()
    assert env.episode_index == 1


def test_cycle_order_on_generated_episodes_counts_up():
    env = WritePolicyBenchEnv(length=20, episode_order="cycle", episode_seed=2)
    indices = []
    for _ in range(4):
        env.reset()
        indices.append(env.episode_index)
        assert env.episode.to_dict() == generate_episode(make_config(length=20), 2, env.episode_index).to_dict()
    assert indices == [0, 1, 2, 3]
