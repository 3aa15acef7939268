"""SB3's VecEnv over the native vector env: what DummyVecEnv gives, and the same trained models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

from agents.sb3.native_vec_env import NativeVecEnv, make_native_vec_env
from agents.sb3.train import build_vec_env, algo_class
from wpb_gym.envs.env import WritePolicyBenchEnv

KWARGS = {"length": 25, "api_pool": 8, "dense_reward": True, "regime": "contract_mix"}


# The default regime's episodes are replayed from their draws unless replay_generators=False.
@pytest.mark.parametrize("kwargs,replay", [(KWARGS, True), ({**KWARGS, "regime": "default"}, False)])
def test_steps_observations_rewards_masks_and_final_infos_are_dummy_vec_envs(kwargs, replay):
    native = make_native_vec_env(4, kwargs, seed=5, replay_generators=replay)
    assert native.venv.vector.core.replay is replay
    dummy = make_vec_env(WritePolicyBenchEnv, n_envs=4, seed=5, env_kwargs=kwargs, vec_env_cls=DummyVecEnv)
    assert is_masking_supported(native)
    assert np.array_equal(native.reset(), dummy.reset())
    rng = np.random.default_rng(1)
    ended = 0
    for _ in range(150):
        masks = get_action_masks(native)
        assert masks.shape == (4, native.action_space.n) and np.array_equal(masks, get_action_masks(dummy))
        actions = np.array([rng.choice(np.flatnonzero(row)) for row in masks])
        got, want = native.step(actions), dummy.step(actions)
        for a, b in zip(got[:3], want[:3], strict=True):
            assert np.array_equal(a, b) and a.dtype == b.dtype
        for i in np.flatnonzero(want[2]):
            ended += 1
            mine, theirs = got[3][i], want[3][i]
            assert np.array_equal(mine.pop("terminal_observation"), theirs.pop("terminal_observation"))
            assert np.array_equal(mine.pop("action_mask"), theirs.pop("action_mask"))
            episode, monitored = mine.pop("episode"), theirs.pop("episode")
            assert episode["l"] == monitored["l"] and episode["r"] == pytest.approx(monitored["r"], abs=1e-5)
            assert mine == theirs  # the metrics, t, accepted, reason, bytes_used, TimeLimit.truncated
        for i in np.flatnonzero(~want[2]):
            assert got[3][i] == {}  # per-step entries are batched in last_info instead
    assert ended >= 8
    last = native.venv.last_info
    assert last["action_mask"].shape == (4, native.action_space.n) and last["t"].shape == (4,)


def test_sub_env_access_and_options():
    env = NativeVecEnv(3, {"length": 10})
    env.reset()
    assert env.get_attr("length") == [10, 10, 10]
    assert len(env.env_method("action_masks", indices=[2])) == 1
    assert env.env_method("oracle_utility", indices=[0, 1]) == [e.oracle_utility() for e in env.vector.envs[:2]]
    env.set_attr("invalid_action_penalty", 0.5, indices=[1])
    assert [e.invalid_action_penalty for e in env.vector.envs] == [0.0, 0.5, 0.0]
    with pytest.raises(ValueError, match="invalid_action_penalty must be a finite number"):
        env.set_attr("invalid_action_penalty", float("inf"))
    with pytest.raises(IndexError, match=r"no sub-env \[9\] of 3"):
        env.set_attr("invalid_action_penalty", 7.0, indices=[0, 9])
    assert list(env.vector.core.penalties) == [0.0, 0.5, 0.0] == env.get_attr("invalid_action_penalty")
    assert env.env_is_wrapped(DummyVecEnv) == [False] * 3
    env.set_options({"budget_bytes": 2048})
    env.reset()
    assert env.get_attr("store")[0].max_bytes == 2048
    env.set_options([{"budget_bytes": 1024}, {}, {}])
    with pytest.raises(ValueError, match="same options"):
        env.reset()


@pytest.mark.parametrize("algo", ["maskable_ppo", "ppo", "a2c", "dqn", "recurrent_ppo"])
def test_every_algorithm_trains_the_same_model_from_it_as_from_dummy_vec_env(algo):
    torch.set_num_threads(1)
    n_envs = 1 if algo == "dqn" else 3
    settings = {"seed": 3, "device": "cpu", "policy_kwargs": {"net_arch": [16]}}
    if algo in ("ppo", "maskable_ppo", "recurrent_ppo"):
        settings.update(n_steps=32, batch_size=32, n_epochs=2)
    if algo == "recurrent_ppo":
        settings["policy_kwargs"] = {"net_arch": [16], "lstm_hidden_size": 8}
    if algo == "dqn":
        settings.update(learning_starts=50, train_freq=4, buffer_size=1000)
    kwargs = {**KWARGS, "episode_seed": 3}
    policy = "MlpLstmPolicy" if algo == "recurrent_ppo" else "MlpPolicy"
    trained = []
    for kind in ("native", "dummy"):
        model = algo_class(algo)(policy, build_vec_env(kwargs, n_envs, 3, kind), **settings)
        model.learn(192)
        assert model.num_timesteps >= 192
        trained.append([p.detach().clone() for p in model.policy.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*trained, strict=True))
