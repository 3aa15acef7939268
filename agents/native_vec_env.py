"""SB3's ``VecEnv`` over the native vector env: N episodes stepped and masked in one call each.

``DummyVecEnv`` steps N single envs one by one, copies every info dict at every step and
fetches MaskablePPO's masks env by env through the wrappers. ``NativeVecEnv`` hands the whole
action array to ``WritePolicyBenchVectorEnv`` (same dynamics: the single env's own), and
``env_method("action_masks")`` returns the rows of one batched mask array. Episodes reset in
the step that ends them, as SB3 expects: the finished episode's last observation is
``infos[i]["terminal_observation"]`` and its metrics are ``infos[i]["metrics"]`` (and each
metric's own key). The infos of the other sub-envs are empty: the single env's per-step
entries (``t``, ``accepted``, ``reason``, ``bytes_used``, ``action_mask``) are in
``last_info``, batched; ``reset_infos`` are empty dicts (the reset infos are ``last_info``
after a reset). Wrap it in ``VecMonitor`` for SB3's episode statistics (``make_native_vec_env``
does).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecMonitor

from wpb_gym.envs.vector import WritePolicyBenchVectorEnv


class NativeVecEnv(VecEnv):
    """``num_envs`` sub-envs of ``WritePolicyBenchEnv(**env_kwargs)`` as one SB3 ``VecEnv``."""

    def __init__(self, num_envs: int, env_kwargs: Mapping[str, Any] | None = None) -> None:
        self.vector = WritePolicyBenchVectorEnv(num_envs, autoreset_mode="SameStep", **dict(env_kwargs or {}))
        super().__init__(num_envs, self.vector.single_observation_space, self.vector.single_action_space)
        self.render_mode = self.vector.render_mode
        self.last_info: dict[str, Any] = {}
        self._actions: np.ndarray | None = None

    def reset(self):
        options = self._options
        if any(option != options[0] for option in options):
            raise ValueError("NativeVecEnv resets every sub-env with the same options; got different ones")
        seeds = self._seeds if any(seed is not None for seed in self._seeds) else None
        observations, self.last_info = self.vector.reset(seed=seeds, options=options[0] or None)
        self.reset_infos = [{} for _ in range(self.num_envs)]
        self._reset_seeds()
        self._reset_options()
        return observations

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(self.num_envs)

    def step_wait(self):
        observations, rewards, terminated, truncated, info = self.vector.step(self._actions)
        self.last_info = info
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i in np.flatnonzero(dones):
            final = _row(info["final_info"], i)
            final["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            final["terminal_observation"] = info["final_obs"][i]
            infos[i] = final
        return observations, rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        self.vector.close()

    # ------------------------------------------------------------------ sub-env access
    def _targets(self, indices: Any) -> list[Any]:
        return [self.vector.envs[i] for i in self._get_indices(indices)]

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(env, attr_name) for env in self._targets(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        for env in self._targets(indices):
            setattr(env, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list[Any]:
        if method_name == "action_masks" and not method_args and not method_kwargs:
            return list(self.vector.action_masks()[list(self._get_indices(indices))])  # one batched array
        return [getattr(env, method_name)(*method_args, **method_kwargs) for env in self._targets(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]  # sub-envs are bare WritePolicyBenchEnvs

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [env.render() if env.render_mode == "rgb_array" else None for env in self.vector.envs]


def _row(batched: Mapping[str, Any], i: int) -> dict[str, Any]:
    """Sub-env ``i``'s entries of a batched info (Gymnasium's ``key`` / ``_key`` layout)."""
    row = {}
    for key, value in batched.items():
        if key.startswith("_") or not batched.get("_" + key, np.zeros(i + 1, bool))[i]:
            continue
        row[key] = _row(value, i) if isinstance(value, Mapping) else value[i]
        if isinstance(row[key], np.generic):
            row[key] = row[key].item()
    return row


def make_native_vec_env(num_envs: int, env_kwargs: Mapping[str, Any] | None = None, seed: int | None = None,
                        monitor_dir: str | None = None):
    """``NativeVecEnv`` in ``VecMonitor`` (SB3's episode reward and length statistics), seeded
    like ``make_vec_env``: sub-env i's first reset uses ``seed + i``. With ``monitor_dir``, the
    episodes are logged there as SB3's ``monitor.csv`` (``load_results(monitor_dir)``)."""
    env = NativeVecEnv(num_envs, env_kwargs)
    if seed is not None:
        env.seed(seed)
        env.action_space.seed(seed)
    if monitor_dir is None:
        return VecMonitor(env)
    os.makedirs(monitor_dir, exist_ok=True)
    return VecMonitor(env, filename=os.path.join(monitor_dir, "native"))
