"""PufferLib drives the env through its Gymnasium emulation and its vector API, as docs/environment.md shows.

PufferLib's wheel (``pufferlib-core``) pins an older torch, so ``make setup`` installs it
without its dependencies; the emulation needs only numpy and gymnasium.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import wpb_gym  # noqa: F401  (registers the ids)


def test_pufferlib_steps_it_with_valid_actions_and_reports_final_metrics():
    pytest.importorskip("pufferlib")
    import pufferlib.emulation
    import pufferlib.vector

    def make(buf=None, seed=0):
        return pufferlib.emulation.GymnasiumPufferEnv(
            env_creator=gym.make, env_args=["WritePolicyBench-v0"], env_kwargs={"length": 20}, buf=buf, seed=seed
        )

    single = gym.make("WritePolicyBench-v0", length=20)
    vec = pufferlib.vector.make(make, num_envs=2, backend=pufferlib.vector.Serial)
    obs, _ = vec.reset(seed=0)
    assert obs.shape == (2, *single.observation_space.shape)
    assert vec.single_action_space == single.action_space
    masks = [env.env.get_wrapper_attr("action_masks")() for env in vec.envs]
    rng = np.random.default_rng(0)
    finished, steps = [], 0
    while len(finished) < 4:
        actions = np.array([rng.choice(np.flatnonzero(mask)) for mask in masks])
        obs, rewards, terminals, truncations, infos = vec.step(actions)
        steps += 1
        assert obs.shape == (2, *single.observation_space.shape) and np.isfinite(rewards).all()
        assert all(info["accepted"] for info in infos)  # drawn among the valid actions: none refused
        masks = [info["action_mask"] for info in infos]  # the next state's mask
        finished += [info["metrics"] for info in infos if "metrics" in info]
        assert terminals.sum() + truncations.sum() == sum("metrics" in info for info in infos)
    assert steps >= 40  # two episodes in each env, of 20 timesteps (an EXPIRE does not end a timestep)
    assert all(0.0 <= m["f1"] <= 1.0 and m["steps"] == 20 for m in finished)
    vec.close()
