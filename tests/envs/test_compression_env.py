"""``compression=`` in the environment: one more action (a compressed WRITE), the mask is the
store's verdict, the observation says what compressing saves, and the dense rewards sum to the
credited F1."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from limits_checks import play_checking_the_mask
from python_path import python_env

import wpb_gym  # noqa: F401  (registers the ids)
from wpb_gym.core.compression import Compression, compressed_cost
from wpb_gym.core.tracks import track_costs
from wpb_gym.core.types import MemoryAction
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.store_limits import COMPRESSION_FEATURES
from wpb_gym.episodes.generators.regimes import generate_episode, make_config
from wpb_gym.scoring.compression_bounds import compressed_costs, compression_oracle_utility

CREDIT = "credit=0.75"


def test_one_more_action_and_features_follow_the_layout():
    plain = gym.make("WritePolicyBench-v0", regime="breaking", slots=3)
    env = gym.make("WritePolicyBench-v0", regime="breaking", slots=3, compression=CREDIT)
    assert env.action_space.n == plain.action_space.n + 1 == 2 + 2 * 3 + 1
    extra = len(COMPRESSION_FEATURES) + 3
    assert env.observation_space.shape[0] == plain.observation_space.shape[0] + extra
    dict_env = gym.make("WritePolicyBench-v0", regime="breaking", slots=3, compression=CREDIT,
                        observation_mode="dict")
    obs, info = dict_env.reset(seed=0)
    assert obs["action_mask"].shape == (9,) and obs["limits"].shape == (extra,)
    assert dict_env.observation_space.contains(obs) and info["action_mask"].shape == (9,)


@pytest.mark.parametrize("mode", ["box", "dict"])
def test_the_mask_is_the_stores_verdict_and_compressing_is_observed(mode):
    env = gym.make("WritePolicyBench-v0", regime="contract_mix", budget_bytes=1024, compression=CREDIT,
                   observation_mode=mode, slots=3)
    seen = {"compressed": 0}

    def compression_observed(obs, base, done):
        extra = obs["limits"] if mode == "dict" else obs[-(len(COMPRESSION_FEATURES) + 3):]
        store = base.store
        mask = base.action_masks()
        if not done:
            step = base.current_step
            small = compressed_cost(step)
            assert extra[0] == pytest.approx(small / base.step_details(base.t)[1] if small else 0.0)
            verdict = store.check(MemoryAction.write_compressed(step), base.t).accepted
            assert bool(mask[-1]) == verdict == bool(extra[1])
        for k, t in enumerate(base.slot_timesteps):
            assert extra[2 + k] == float(t is not None and store.get(t).codec is not None)
        seen["compressed"] += len(store.compressed_timesteps())

    rng = np.random.default_rng(1)
    for seed in range(2):
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            mask = info["action_mask"]
            a = len(mask) - 1 if mask[-1] and rng.random() < 0.5 else int(rng.choice(np.flatnonzero(mask)))
            obs, _, done, _, info = env.step(a)
            assert info["accepted"]
            compression_observed(obs, env.unwrapped, done)
    assert seen["compressed"] > 0
    # And the checks every limit shares: WRITE and MERGE bits are the store's verdict.
    play_checking_the_mask(env, range(2), "over_budget", 0.7, compression_observed)


def test_the_compressed_action_decodes_and_encodes():
    env = gym.make("WritePolicyBench-v0", regime="breaking", compression=CREDIT, slots=2)
    env.reset(seed=0)
    base = env.unwrapped
    last = base.n_actions - 1
    action = base.decode_action(last)
    assert action.action == "WRITE" and action.codec == "summary/1" and action.step is base.current_step
    assert base.encode_action(action) == last and base.encode_action(MemoryAction.write(base.current_step)) == 1
    plain = gym.make("WritePolicyBench-v0", regime="breaking", slots=2)
    plain.reset(seed=0)
    assert plain.unwrapped.encode_action(action) is None


@pytest.mark.parametrize("reward", ["f1", "utility"])
def test_dense_rewards_sum_to_the_credited_score(reward):
    env = gym.make("WritePolicyBench-v0", regime="contract_mix", budget_bytes=2048, compression=CREDIT,
                   reward=reward, expire_cost=0.0, slots=2)
    rng = np.random.default_rng(3)
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            mask = info["action_mask"]
            a = int(rng.choice(np.flatnonzero(mask)))
            obs, r, done, _, info = env.step(a)
            total += r
        base = env.unwrapped
        metrics = info["metrics"]
        if reward == "f1":
            assert total == pytest.approx(metrics["f1"])
        else:
            costs = track_costs(base.episode, "unprivileged")
            optimum = compression_oracle_utility(costs, compressed_costs(base.episode, "unprivileged"),
                                                 base.episode.utilities, 2048, 0.75)
            assert optimum.exact and metrics["oracle_utility"] == pytest.approx(optimum.utility)
            assert total == pytest.approx(metrics["policy_utility"] / optimum.utility)
        assert base.store.compression == Compression(0.75)


def test_compression_is_refused_where_it_cannot_be_modelled_and_vector_envs_take_it():
    with pytest.raises(ValueError, match="neg_regret"):
        gym.make("WritePolicyBench-v0", compression=CREDIT, reward="neg_regret")
    single = gym.make("WritePolicyBench-v0", regime="breaking", compression=CREDIT)
    for mode in ("sync", "vector_entry_point"):
        envs = gym.make_vec("WritePolicyBench-v0", num_envs=2, vectorization_mode=mode, regime="breaking",
                            compression=CREDIT)
        obs, info = envs.reset(seed=0)
        assert obs.shape == (2, single.observation_space.shape[0])
        assert info["action_mask"].shape == (2, single.action_space.n)
        envs.close()
    with pytest.raises(ValueError, match="one at a time"):
        gym.make("WritePolicyBench-v0", compression=CREDIT, write_time="total=5")
    with pytest.raises(ValueError, match="compression: unknown field 'ratio'; expected credit"):
        gym.make("WritePolicyBench-v0", compression="ratio=2")


@pytest.mark.parametrize("source", ["regime", "episodes"])
def test_episodes_with_queries_are_refused_under_compression_wherever_they_play(source):
    # The query tier's bound has no form for compressed writes: its episodes are refused at
    # reset, by the single env (on the core or its Python parts) and by the vector envs.
    knobs = {"endpoints": 12, "families": 3, "length": 60, "checkpoint_interval": 10}
    if source == "regime":
        kwargs = {"regime": "queries_medium", **knobs}
    else:
        kwargs = {"episodes": [generate_episode(make_config("queries_medium", **knobs), seed=1)]}
    makers = [lambda: WritePolicyBenchEnv(compression=CREDIT, **kwargs),
              lambda: python_env(compression=CREDIT, **kwargs),
              lambda: gym.make_vec("WritePolicyBench-v0", num_envs=2, compression=CREDIT, **kwargs),
              lambda: gym.make_vec("WritePolicyBench-v0", num_envs=2, vectorization_mode="sync", compression=CREDIT,
                                   **kwargs)]
    for make in makers:
        with pytest.raises(ValueError, match="the query tier has no bound with compressed writes"):
            make().reset(seed=0)
    WritePolicyBenchEnv(**kwargs).reset(seed=0)  # without compression, they play


def test_the_rendering_names_a_compressed_write():
    env = gym.make("WritePolicyBench-v0", regime="breaking", slots=2, compression=CREDIT, render_mode="ansi")
    env.reset(seed=0)
    compressed = env.action_space.n - 1  # the last action
    while not env.unwrapped.action_masks()[compressed]:  # a step whose text compresses
        env.step(0)
    env.step(compressed)
    assert "WRITE compressed -> accepted" in env.render() and "EXPIRE slot" not in env.render()
