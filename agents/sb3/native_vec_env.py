"""SB3's ``VecEnv`` over the native vector env: N episodes stepped and masked in one call each.

``DummyVecEnv`` steps N single envs one by one, copies every info dict at every step and
fetches MaskablePPO's masks env by env through the wrappers. ``NativeVecEnv`` hands the whole
action array to ``WritePolicyBenchVectorEnv`` (its compiled core, tested against the single env), and
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

from wpb_gym.core.checks import require_finite
from wpb_gym.envs.vector import WritePolicyBenchVectorEnv


class NativeVecEnv(VecEnv):
    """``num_envs`` sub-envs of ``WritePolicyBenchEnv(**env_kwargs)`` as one SB3 ``VecEnv``;
    ``episode_workers`` and ``replay_generators``: the vector env's (processes preparing its made
    episodes ahead; whether its core replays generators from their draws)."""

    def __init__(self, num_envs: int, env_kwargs: Mapping[str, Any] | None = None, episode_workers: int = 0,
                 replay_generators: bool = True) -> None:
        self.vector = WritePolicyBenchVectorEnv(num_envs, autoreset_mode="SameStep", episode_workers=episode_workers,
                                                replay_generators=replay_generators, **dict(env_kwargs or {}))
        super().__init__(num_envs, self.vector.single_observation_space, self.vector.single_action_space)
        self.render_mode = self.vector.render_mode
        self._last_info: dict[str, Any] | None = {}
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
        vector = self.vector
        outcome = vector.advance(self._actions)
        self._last_info = None
        dones = outcome.terminated.copy()
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i, obs, final in outcome.final:
            final = {k: v.item() if isinstance(v, np.generic) else v for k, v in final.items()}
            final["TimeLimit.truncated"] = False
            final["terminal_observation"] = obs
            infos[i] = final
        observations = vector.observations()
        vector.report_workers()
        return observations, outcome.rewards.astype(np.float32), dones, infos

    @property
    def last_info(self) -> dict[str, Any]:
        """The batched every-step infos of the last step or reset (built when read)."""
        if self._last_info is None:
            self._last_info = self.vector.infos()
        return self._last_info

    @last_info.setter
    def last_info(self, value: dict[str, Any]) -> None:
        self._last_info = value

    def close(self) -> None:
        self.vector.close()

    # ------------------------------------------------------------------ sub-env access
    def _targets(self, indices: Any) -> list[Any]:
        return [self.vector.sub_env(i) for i in self._get_indices(indices)]

    def has_attr(self, attr_name: str) -> bool:
        return all(hasattr(env, attr_name) for env in self.vector.single_envs)

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(env, attr_name) for env in self._targets(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        if attr_name == "invalid_action_penalty":  # checked before any sub-env is set
            value = require_finite(value, attr_name)
        targets = list(self._get_indices(indices))
        outside = [i for i in targets if not -self.num_envs <= i < self.num_envs]
        if outside:  # before any sub-env is set
            raise IndexError(f"set_attr: no sub-env {outside} of {self.num_envs}")
        for env in [self.vector.sub_env(i) for i in targets]:
            setattr(env, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list[Any]:
        if method_name == "action_masks" and not method_args and not method_kwargs:
            return list(self.vector.action_masks()[list(self._get_indices(indices))])  # one batched array
        return [getattr(env, method_name)(*method_args, **method_kwargs) for env in self._targets(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]  # sub-envs are bare WritePolicyBenchEnvs

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [env.render() if env.render_mode == "rgb_array" else None for env in self.vector.single_envs]


def make_native_vec_env(num_envs: int, env_kwargs: Mapping[str, Any] | None = None, seed: int | None = None,
                        monitor_dir: str | None = None, episode_workers: int = 0, replay_generators: bool = True):
    """``NativeVecEnv`` in ``VecMonitor`` (SB3's episode reward and length statistics), seeded
    like ``make_vec_env``: sub-env i's first reset uses ``seed + i``. With ``monitor_dir``, the
    episodes are logged there as SB3's ``monitor.csv`` (``load_results(monitor_dir)``).
    ``episode_workers`` and ``replay_generators`` are ``NativeVecEnv``'s."""
    env = NativeVecEnv(num_envs, env_kwargs, episode_workers, replay_generators)
    if seed is not None:
        env.seed(seed)
        env.action_space.seed(seed)
    if monitor_dir is None:
        return VecMonitor(env)
    os.makedirs(monitor_dir, exist_ok=True)
    return VecMonitor(env, filename=os.path.join(monitor_dir, "native"))
