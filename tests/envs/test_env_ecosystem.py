"""Ecosystem tests of every registered ``WritePolicyBench`` id, in the style MiniGrid/Gymnasium test their envs.

Generic over ``wpb_gym.ENV_IDS``: the Gymnasium and Stable-Baselines3 env checkers, same-seed
determinism, registration without a prior import, pickling mid-episode, Gymnasium and SB3
vector envs, a short sb3-contrib ``MaskablePPO`` run with ``Monitor`` logging, the dict
observation mode and rendering. Every warning is an error unless a test says otherwise.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

import wpb_gym

pytestmark = pytest.mark.filterwarnings("error")

ENV_IDS = sorted(wpb_gym.ENV_IDS)
DEFAULT_ID = "WritePolicyBench-v0"
PRIVILEGED_ID = "WritePolicyBench-Privileged-v0"
VECTOR_IDS = [DEFAULT_ID, PRIVILEGED_ID]  # vector tests on two ids only: they are the slow ones


def n_actions(env: gym.Env) -> int:
    return int(env.action_space.n)


def random_valid_action(rng: np.random.Generator, mask: np.ndarray) -> int:
    """A random action the mask allows; half the time one that advances time (SKIP/WRITE/MERGE).

    Uniform choice over every valid action EXPIREs almost everything it writes (each stored
    item adds a valid EXPIRE), so memory would stay nearly empty; the bias fills it up.
    """
    mask = np.asarray(mask, dtype=bool)
    assert mask.ndim == 1 and mask[0], f"SKIP must always be valid: {mask}"
    valid = np.flatnonzero(mask)
    K = (mask.size - 2) // 2
    if rng.random() < 0.5:
        valid = valid[valid < 2 + K]
    return int(rng.choice(valid))


def assert_info_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    np.testing.assert_array_equal(a["action_mask"], b["action_mask"])
    assert a["action_mask"].dtype == b["action_mask"].dtype == np.bool_
    assert a["reason"] == b["reason"]
    for key in a.keys() - {"action_mask"}:
        assert a[key] == b[key], key


def assert_obs_equal(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert np.array_equal(a[key], b[key]), key
    else:
        assert a.dtype == b.dtype and np.array_equal(a, b)


def rollout(env: gym.Env, seed: int, action_seed: int) -> tuple[list[np.ndarray], list[float], dict]:
    """Observations and rewards of one episode under seeded random valid actions, and the final info."""
    rng = np.random.default_rng(action_seed)
    obs, info = env.reset(seed=seed)
    observations, rewards = [obs], []
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(random_valid_action(rng, info["action_mask"]))
        observations.append(obs)
        rewards.append(reward)
        done = terminated or truncated
    return observations, rewards, info


# ---------------------------------------------------------------------------------------- registry
def test_registry_holds_every_id_with_its_kwargs():
    # One per regime and two long-stream variants, each on both tracks.
    assert len(ENV_IDS) == 2 * (len(wpb_gym.REGIMES) + 2)
    for env_id, kwargs in wpb_gym.ENV_IDS.items():
        spec = gym.spec(env_id)
        assert spec.entry_point == "wpb_gym.envs.env:WritePolicyBenchEnv"
        assert spec.kwargs == kwargs
        env = gym.make(f"wpb_gym:{env_id}")  # the module prefix works in gym.make (not in gym.spec)
        assert env.spec.id == env_id
        env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_spaces_match_the_docstring(env_id):
    env = gym.make(env_id)
    unwrapped = env.unwrapped
    assert unwrapped.regime == wpb_gym.ENV_IDS[env_id].get("regime")  # None: the default regime
    assert unwrapped.track == wpb_gym.ENV_IDS[env_id]["track"]
    K = unwrapped.K
    assert env.action_space == gym.spaces.Discrete(2 + 2 * K)
    if unwrapped.track == "privileged":
        n = 40 + 8 + 15 * K
    else:
        n = 39 + 8 + 14 * K
    assert env.observation_space == gym.spaces.Box(0.0, 1.0, (n,), np.float32)
    obs, info = env.reset(seed=0)
    assert obs.shape == (n,) and obs.dtype == np.float32
    assert info["action_mask"].shape == (2 + 2 * K,) and info["action_mask"].dtype == np.bool_
    np.testing.assert_array_equal(env.unwrapped.action_masks(), info["action_mask"])
    env.close()


# ---------------------------------------------------------------------------------------- 1. checkers
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_check_env(env_id):
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gym_check_env(env.unwrapped)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_check_env(env_id):
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sb3_check_env(env, warn=True)
    env.close()


# ---------------------------------------------------------------------------------------- 2. determinism
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_trajectory(env_id):
    env_a, env_b = gym.make(env_id), gym.make(env_id)  # the defaults: dense rewards, a cost per EXPIRE
    total, expires = 0.0, 0
    obs_a, info_a = env_a.reset(seed=123)
    obs_b, info_b = env_b.reset(seed=123)
    assert_obs_equal(obs_a, obs_b)
    assert_info_equal(info_a, info_b)
    rng = np.random.default_rng(7)
    steps = 0
    done = False
    while not done:
        assert env_a.observation_space.contains(obs_a)
        action = random_valid_action(rng, info_a["action_mask"])
        obs_a, reward_a, terminated_a, truncated_a, info_a = env_a.step(action)
        obs_b, reward_b, terminated_b, truncated_b, info_b = env_b.step(action)
        assert_obs_equal(obs_a, obs_b)
        assert reward_a == reward_b
        total += reward_a
        expires += action >= 2 + env_a.unwrapped.K
        assert terminated_a == terminated_b and truncated_a == truncated_b
        assert info_a["accepted"] is True, info_a["reason"]  # the action was valid
        assert_info_equal(info_a, info_b)
        steps += 1
        done = terminated_a or truncated_a
    assert steps >= len(env_a.unwrapped.episode)  # EXPIREs do not advance time
    assert info_a["metrics"] == info_b["metrics"]
    cost = env_a.unwrapped.expire_cost
    assert cost == 0.03 and total == pytest.approx(info_a["f1"] - cost * expires, abs=1e-9)
    env_a.close()
    env_b.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_different_seed_different_episode(env_id):
    env = gym.make(env_id)
    observations_0, _, _ = rollout(env, seed=0, action_seed=0)
    observations_1, _, _ = rollout(env, seed=1, action_seed=0)
    same = len(observations_0) == len(observations_1) and all(
        np.array_equal(a, b) for a, b in zip(observations_0, observations_1, strict=False)
    )
    assert not same
    # and the seed, not the actions, is what decides: seed 0 again gives the first episode back
    observations_again, _, _ = rollout(env, seed=0, action_seed=0)
    assert len(observations_again) == len(observations_0)
    assert all(np.array_equal(a, b) for a, b in zip(observations_0, observations_again, strict=False))
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_action_mask_is_exactly_what_the_store_accepts(env_id):
    """What MaskablePPO relies on: a masked action is rejected (and penalised), an allowed one accepted."""
    penalty = 0.25
    env = gym.make(env_id, invalid_action_penalty=penalty, dense_reward=False, expire_cost=0.0).unwrapped
    rng = np.random.default_rng(5)
    _, info = env.reset(seed=21)
    checked = {True: 0, False: 0}
    for step in range(120):
        mask = info["action_mask"]
        if step % 24 == 0:
            state = pickle.dumps(env)
            for action in range(n_actions(env)):
                probe = pickle.loads(state)
                _, reward, terminated, _, probe_info = probe.step(action)
                assert probe_info["accepted"] is bool(mask[action]), (action, probe_info["reason"])
                assert (probe_info["reason"] == "accepted") is bool(mask[action])
                if not terminated:
                    assert reward == (0.0 if mask[action] else -penalty)
                checked[bool(mask[action])] += 1
        _, _, terminated, _, info = env.step(random_valid_action(rng, mask))
        assert not terminated
    assert checked[True] > 0 and checked[False] > 0


# ---------------------------------------------------------------------------------------- 3. fresh process
_FRESH_PROCESS_SCRIPT = """
import hashlib, json, sys
import gymnasium as gym
assert "wpb_gym" not in sys.modules
env = gym.make("wpb_gym:WritePolicyBench-v0")
assert "wpb_gym" in sys.modules
obs, info = env.reset(seed=0)
digest = hashlib.sha256(obs.tobytes())
done = False
while not done:
    obs, reward, done, truncated, info = env.step(1 if info["action_mask"][1] else 0)
    digest.update(obs.tobytes())
print(json.dumps({"id": env.spec.id, "digest": digest.hexdigest(), "f1": info["f1"], "reward": reward}))
"""


def test_make_with_module_prefix_in_a_fresh_process(tmp_path):
    environ = dict(os.environ, PYTHONHASHSEED="4321")  # another hash seed: results must not depend on it
    result = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS_SCRIPT],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environ,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["id"] == DEFAULT_ID
    # The same episode and the same observations as in this process.
    env = gym.make(DEFAULT_ID)
    obs, info = env.reset(seed=0)
    digest = hashlib.sha256(obs.tobytes())
    done = False
    while not done:
        obs, reward, done, _, info = env.step(1 if info["action_mask"][1] else 0)
        digest.update(obs.tobytes())
    assert out == {"id": DEFAULT_ID, "digest": digest.hexdigest(), "f1": info["f1"], "reward": reward}


# ---------------------------------------------------------------------------------------- 4. pickling
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pickle_mid_episode_continues_identically(env_id):
    env = gym.make(env_id).unwrapped
    rng = np.random.default_rng(3)
    obs, info = env.reset(seed=11)
    for _ in range(60):
        obs, reward, terminated, truncated, info = env.step(random_valid_action(rng, info["action_mask"]))
        assert not terminated
    copy = pickle.loads(pickle.dumps(env))
    assert copy is not env and copy.t == env.t
    np.testing.assert_array_equal(copy.action_masks(), env.action_masks())
    done = False
    while not done:
        action = random_valid_action(rng, info["action_mask"])
        obs, reward, terminated, truncated, info = env.step(action)
        obs_c, reward_c, terminated_c, truncated_c, info_c = copy.step(action)
        assert_obs_equal(obs, obs_c)
        assert reward == reward_c and terminated == terminated_c and truncated == truncated_c
        assert_info_equal(info, info_c)
        done = terminated or truncated
    assert info["metrics"] == info_c["metrics"]
    # The copy carries the RNG too: the next unseeded reset draws the same episode.
    obs, info = env.reset()
    obs_c, info_c = copy.reset()
    assert env.episode_index == copy.episode_index
    assert_obs_equal(obs, obs_c)


# ---------------------------------------------------------------------------------------- 5. gymnasium vector envs
@pytest.mark.parametrize("env_id", VECTOR_IDS)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_gymnasium_make_vec(env_id, mode):
    num_envs = 2
    # Terminal rewards, so that each episode's last reward is its F1.
    envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, dense_reward=False, expire_cost=0.0)
    try:
        n = int(envs.single_action_space.n)
        obs, infos = envs.reset(seed=0)
        assert envs.observation_space.contains(obs)
        rng = np.random.default_rng(0)
        episodes_ended = 0
        for _ in range(320):
            # Gymnasium 1.x stacks info arrays: "action_mask" is (num_envs, n) and "_action_mask" says who has one.
            masks = infos["action_mask"]
            assert masks.shape == (num_envs, n) and masks.dtype == np.bool_
            assert infos["_action_mask"].all() and masks[:, 0].all()
            np.testing.assert_array_equal(np.stack(envs.call("action_masks")), masks)
            actions = np.array([random_valid_action(rng, m) for m in masks])
            obs, rewards, terminated, truncated, infos = envs.step(actions)
            assert envs.observation_space.contains(obs)
            assert np.isfinite(rewards).all() and not truncated.any()
            # The final metrics appear exactly for the sub-envs whose episode just ended.
            np.testing.assert_array_equal(infos.get("_f1", np.zeros(num_envs, bool)), terminated)
            if terminated.any():
                np.testing.assert_array_equal(rewards[terminated], infos["f1"][terminated])
                assert ((infos["f1"][terminated] >= 0) & (infos["f1"][terminated] <= 1)).all()
            episodes_ended += int(terminated.sum())
        assert episodes_ended >= 1  # the run crossed an autoreset
    finally:
        envs.close()


# ---------------------------------------------------------------------------------------- 6. SB3 vector envs
@pytest.mark.parametrize("env_id", VECTOR_IDS)
@pytest.mark.parametrize(
    "vec_env_cls, vec_env_kwargs",
    [(DummyVecEnv, None), (SubprocVecEnv, {"start_method": "fork"})],
    ids=["DummyVecEnv", "SubprocVecEnv"],
)
def test_sb3_make_vec_env(env_id, vec_env_cls, vec_env_kwargs):
    n_envs = 2
    venv = make_vec_env(
        env_id, n_envs=n_envs, seed=0, vec_env_cls=vec_env_cls, vec_env_kwargs=vec_env_kwargs,
        env_kwargs={"dense_reward": False, "expire_cost": 0.0},  # the last reward of an episode is its F1
    )
    try:
        n = int(venv.action_space.n)
        obs = venv.reset()
        assert obs.shape == (n_envs, *venv.observation_space.shape) and obs.dtype == np.float32
        rng = np.random.default_rng(0)
        masks = np.stack(venv.env_method("action_masks"))
        episodes_ended = 0
        for _ in range(320):
            assert masks.shape == (n_envs, n) and masks.dtype == np.bool_ and masks[:, 0].all()
            actions = np.array([random_valid_action(rng, m) for m in masks])
            obs, rewards, dones, infos = venv.step(actions)
            assert all(venv.observation_space.contains(o) for o in obs)
            masks = np.stack(venv.env_method("action_masks"))
            for i in range(n_envs):
                if not dones[i]:
                    np.testing.assert_array_equal(masks[i], infos[i]["action_mask"])
                    continue
                # An episode ended: SB3 reset the env; the info holds the last step's view.
                info = infos[i]
                episodes_ended += 1
                assert venv.observation_space.contains(info["terminal_observation"])
                assert info["TimeLimit.truncated"] is False
                assert rewards[i] == info["f1"] and 0.0 <= info["f1"] <= 1.0
                assert info["episode"]["r"] == round(info["f1"], 6)  # Monitor added by make_vec_env
        assert episodes_ended >= 1
        assert np.stack(venv.env_method("action_masks", indices=[1])).shape == (1, n)
    finally:
        venv.close()


# ---------------------------------------------------------------------------------------- 7. MaskablePPO, Monitor
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_monitor_logs_final_metrics(env_id):
    env = Monitor(gym.make(env_id, budget_bytes=102_400), info_keywords=("f1", "recall"))
    _, info = env.reset(seed=0)
    # Writing every step after the contract regimes' warm-up keeps critical steps (100 KB holds them).
    warmup, t, done = env.unwrapped.episode.labels.get("warmup_steps", 0), 0, False
    while not done:
        _, _, terminated, truncated, info = env.step(1 if info["action_mask"][1] and t >= warmup else 0)
        t, done = t + 1, terminated or truncated
    assert 0.0 < info["f1"] <= 1.0
    assert info["f1"] == info["metrics"]["f1"] and info["recall"] == info["metrics"]["recall"]
    assert info["episode"]["f1"] == info["f1"] and info["episode"]["recall"] == info["recall"]
    assert info["episode"]["l"] == len(env.unwrapped.episode)
    # The return is F1 exactly: the rewards of an episode add up to the terminal metric.
    assert env.get_episode_rewards() == [info["f1"]]
    env.close()


def test_maskable_ppo_trains_and_evaluates():
    torch = pytest.importorskip("torch")
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.evaluation import evaluate_policy

    torch.set_num_threads(1)
    train_env = gym.make(DEFAULT_ID)
    model = MaskablePPO("MlpPolicy", train_env, n_steps=256, batch_size=64, seed=0)
    model.learn(total_timesteps=2_000)
    assert model.num_timesteps >= 2_000

    eval_env = Monitor(gym.make(DEFAULT_ID), info_keywords=("f1", "recall"))
    eval_env.reset(seed=99)  # seeds the env's RNG: evaluate_policy's unseeded resets draw fixed episodes
    mean_reward, std_reward = evaluate_policy(model, eval_env, n_eval_episodes=2, use_masking=True)
    assert math.isfinite(mean_reward) and math.isfinite(std_reward)
    assert 0.0 <= mean_reward <= 1.0
    episode_rewards = eval_env.get_episode_rewards()
    assert len(episode_rewards) == 2 and all(0.0 <= r <= 1.0 for r in episode_rewards)
    assert mean_reward == pytest.approx(np.mean(episode_rewards))
    train_env.close()
    eval_env.close()


# ---------------------------------------------------------------------------------------- 8. dict mode, rendering
def test_dict_observation_mode_passes_both_checkers():
    env = gym.make(DEFAULT_ID, observation_mode="dict")
    assert isinstance(env.observation_space, gym.spaces.Dict)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gym_check_env(env.unwrapped)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "slots" is flat, so SB3 has nothing to suggest
        sb3_check_env(env, warn=True)
    assert env.observation_space["slots"].shape == (env.unwrapped.K * len(env.unwrapped.slot_features),)
    # The mask in the observation is the info's mask.
    obs, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(50):
        assert env.observation_space.contains(obs)
        np.testing.assert_array_equal(obs["action_mask"].astype(bool), info["action_mask"])
        obs, _, _, _, info = env.step(random_valid_action(rng, info["action_mask"]))
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_render_ansi(env_id):
    env = gym.make(env_id, render_mode="ansi")
    _, info = env.reset(seed=0)
    first = env.render()
    assert isinstance(first, str) and first.startswith("t=0/")
    rng = np.random.default_rng(0)
    for _ in range(30):
        _, _, _, _, info = env.step(random_valid_action(rng, info["action_mask"]))
    later = env.render()
    assert isinstance(later, str) and later != first
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_render_rgb_array(env_id):
    env = gym.make(env_id, render_mode="rgb_array")
    _, info = env.reset(seed=0)
    first = env.render()
    assert isinstance(first, np.ndarray) and first.dtype == np.uint8
    assert first.ndim == 3 and first.shape[2] == 3 and first.shape[0] > 0 and first.shape[1] > 0
    rng = np.random.default_rng(0)
    for _ in range(40):
        _, _, _, _, info = env.step(random_valid_action(rng, info["action_mask"]))
    later = env.render()
    assert isinstance(later, np.ndarray) and later.dtype == np.uint8
    assert later.shape == first.shape  # a constant frame size, as video recorders need
    assert not np.array_equal(later, first)
    env.close()


@pytest.mark.parametrize("render_mode", ["ansi", "rgb_array"])
def test_check_env_with_render_mode(render_mode):
    env = gym.make(DEFAULT_ID, render_mode=render_mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gym_check_env(env.unwrapped)
    env.close()


def test_an_unknown_keyword_is_a_type_error_as_python_says_it():
    with pytest.raises(TypeError, match="unexpected keyword argument 'frameskip'"):
        gym.make("WritePolicyBench-v0", frameskip=4)


def test_torchrl_steps_it_with_the_mask_as_its_action_mask_transform_wants():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchrl")
    from torchrl.data import Binary
    from torchrl.envs import GymEnv, TransformedEnv
    from torchrl.envs.gym_like import default_info_dict_reader
    from torchrl.envs.transforms import ActionMask
    from torchrl.envs.utils import check_env_specs

    env = GymEnv("WritePolicyBench-v0", length=20)
    check_env_specs(env)
    n = env.action_spec.shape[-1]
    mask_spec = {"action_mask": Binary(n, dtype=torch.bool)}
    env.set_info_dict_reader(default_info_dict_reader(["action_mask"], spec=mask_spec))
    env = TransformedEnv(env, ActionMask())
    torch.manual_seed(0)
    rollout = env.rollout(200)  # random actions, drawn among the valid ones
    chosen = rollout["action"].argmax(-1)
    assert rollout["action_mask"].gather(-1, chosen[:, None]).all()
    assert rollout["next", "done"][-1].item() and rollout.batch_size[0] >= 20
