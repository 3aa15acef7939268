"""The env's parts used alone and injected: the episode sampler, the reward function and the
viewer (the encoder has its own differential test against the literal reference)."""

from __future__ import annotations

import numpy as np
import pytest

from wpb_gym import generate_episode, make_config
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.episode_sampler import EpisodeSampler
from wpb_gym.envs.render import MemoryViewer
from wpb_gym.envs.rewards import RewardFunction


def test_the_sampler_alone_draws_cycles_and_overrides():
    sampler = EpisodeSampler(regime="burst_drift", length=20, episodes=None, episode_seed=3, order="cycle",
                             generator_options={})
    rng = np.random.default_rng(0)
    first, index = sampler.choose(rng, {})
    assert index == 0 and first == generate_episode(make_config("burst_drift", length=20), 3, 0)
    assert sampler.choose(rng, {})[1] == 1
    sampler.restart()
    assert sampler.choose(rng, {})[1] == 0
    longer, _ = sampler.choose(rng, {"length": 30, "episode_index": 4})
    assert len(longer) == 30 and longer.regime == "burst_drift"
    with pytest.raises(ValueError, match="episode_order must be one of"):
        EpisodeSampler(regime=None, length=None, episodes=None, episode_seed=0, order="sorted", generator_options={})


def test_the_reward_function_alone_pays_f1_potentials_that_add_up():
    episode = generate_episode(make_config("default", length=10), 0, 0)
    rewards = RewardFunction({"f1": 1.0}, dense=True)
    rewards.start(episode, np.full(10, 100), 10_000)
    critical = set(episode.critical_steps)
    paid = []
    for t in range(10):
        if t in critical:
            rewards.kept(t)
        final = {"f1": 1.0 if critical else 0.0, "policy_utility": 0.0, "oracle_utility": 1.0, "regret_write_only": 1.0}
        paid.append(rewards.reward(t, 0.0, None if t < 9 else final))
    assert sum(paid) == pytest.approx(1.0 if critical else 0.0)
    assert min(paid) >= 0.0  # keeping exactly the critical steps never lowers the potential


def test_injected_parts_replace_the_arguments_they_are_built_from():
    sampler = EpisodeSampler(regime="redundancy", length=15, episodes=None, episode_seed=1, order="random",
                             generator_options={})
    env = WritePolicyBenchEnv(episode_sampler=sampler, reward_fn=RewardFunction({"utility": 1.0}, dense=False))
    env.reset(seed=0)
    assert env.regime == "redundancy" and len(env.episode) == 15 and env.reward_weights == {"utility": 1.0}
    with pytest.raises(ValueError, match=r"episode_sampler replaces the arguments \['length'\]"):
        WritePolicyBenchEnv(episode_sampler=sampler, length=20)
    with pytest.raises(ValueError, match=r"reward_fn replaces the arguments \['dense_reward'\]"):
        WritePolicyBenchEnv(reward_fn=RewardFunction({"f1": 1.0}, dense=True), dense_reward=True)


def test_the_viewer_records_only_what_its_mode_draws():
    picture, text = MemoryViewer("rgb_array"), MemoryViewer("ansi")
    for viewer in (picture, text):
        viewer.stored(0, False)
        viewer.stored(1, True)
        viewer.expired(0, 2)
        viewer.time_advanced(120)
        viewer.acted(5, "accepted")
        assert viewer.last_action_text({5: "EXPIRE slot 0"}.get) == "EXPIRE slot 0 -> accepted"
    assert picture.memory_history == {0: (2, False), 1: (None, True)} and picture.bytes_history == (120,)
    assert text.memory_history == {} and text.bytes_history == ()
    with pytest.raises(ValueError, match="render_mode must be one of"):
        MemoryViewer("human")

