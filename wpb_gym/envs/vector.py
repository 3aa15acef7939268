"""The native vector environment: N episodes of ``WritePolicyBench-v0`` stepped by one call.

``gym.make_vec("WritePolicyBench-v0", num_envs=N)`` builds it (every registered id has it as
its ``vector_entry_point``). Episodes are chosen, read and labelled by one single env per
sub-env at reset; the steps are taken by the compiled core (``envs.fast``) for all sub-envs in
one call, on arrays. A sub-env whose episode holds observations that are not plain JSON, and
every sub-env of a vector env made with a ``render_mode``, is stepped by its single env's own
``advance`` instead. ``tests/envs/test_vector_env.py`` plays it against Gymnasium's
``SyncVectorEnv`` over single envs on every regime, both tracks, both observation modes, long
episodes and episodes from files, and requires every output to be equal.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ..core.checks import require_int
from .env import WritePolicyBenchEnv
from .fast.core import CompiledCore
from .fast.layout import REASONS

# The arguments that choose episodes: sub-envs share the first one's episode sampler (a file's
# episodes are read once), each working on its own fresh copy.
_SAMPLER_ARGUMENTS = ("regime", "length", "episodes", "episode_seed", "episode_order")
_ENV_ARGUMENTS = tuple(p for p in inspect.signature(WritePolicyBenchEnv.__init__).parameters if p != "self")
_ACCEPTED = "accepted"


class WritePolicyBenchVectorEnv(VectorEnv):
    """``num_envs`` episodes of ``WritePolicyBenchEnv``, stepped together.

    Takes every argument of ``WritePolicyBenchEnv`` (one set for all sub-envs) and
    ``autoreset_mode`` (``"NextStep"``, Gymnasium's default, ``"SameStep"`` or ``"Disabled"``;
    see Gymnasium's vector API). ``reset(seed=s)`` seeds sub-env i with ``s + i`` (or takes a
    list of N seeds), exactly as ``SyncVectorEnv`` does, so sub-env i plays what a single env
    reset with that seed plays. ``options`` go to every sub-env; ``options["reset_mask"]`` (N
    bools) resets only those sub-envs.

    ``step(actions)`` returns observations ``(N, n)`` (a dict of batched arrays in ``"dict"``
    mode), float64 rewards, terminations, truncations (always False) and infos in Gymnasium's
    vector layout: each key of the single env's info as an array over the sub-envs with a
    boolean ``_key`` mask. ``info["action_mask"]`` and ``action_masks()`` are ``(N, n_actions)``.
    A finished episode's metrics are in the info of the step that ends it, under
    ``"metrics"`` and each metric's own key, masked to the sub-envs that finished.
    """

    metadata = {**WritePolicyBenchEnv.metadata, "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, *, autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
                 **env_kwargs: Any) -> None:
        self.num_envs = require_int(num_envs, "num_envs", 1)
        try:
            self.autoreset_mode = AutoresetMode(autoreset_mode)
        except ValueError:
            modes = ", ".join(repr(m.value) for m in AutoresetMode)
            raise ValueError(f"autoreset_mode must be one of {modes}, got {autoreset_mode!r}") from None
        self.metadata = {**type(self).metadata, "autoreset_mode": self.autoreset_mode}
        first = WritePolicyBenchEnv(**env_kwargs)
        shared = {k: v for k, v in env_kwargs.items() if k in _ENV_ARGUMENTS and k not in _SAMPLER_ARGUMENTS}
        shared["episode_sampler"] = first.sampler
        self._envs = [first] + [WritePolicyBenchEnv(**shared) for _ in range(self.num_envs - 1)]
        self.render_mode = first.render_mode
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.n_actions = first.n_actions
        self._layout = first.layout
        self._dict_mode = first.observation_mode == "dict"
        self._autoreset = np.zeros(self.num_envs, dtype=np.bool_)
        self._all = np.ones(self.num_envs, dtype=np.bool_)
        self._started = False
        self._core = CompiledCore(self.num_envs, first)
        self._use_kernel = self.render_mode is None  # rendering records what the single env does

    @property
    def envs(self) -> list[WritePolicyBenchEnv]:
        """The single envs, one per sub-env, each brought to its sub-env's state."""
        for i, env in enumerate(self._envs):
            self._core.sync(i, env)
        return self._envs

    # ------------------------------------------------------------------ reset
    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        n = self.num_envs
        if seed is None:
            seeds: list[int | None] = [None] * n
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in range(n)]
        elif isinstance(seed, (list, tuple)) and len(seed) == n:
            seeds = list(seed)
        else:
            raise ValueError(f"seed must be None, an int or a list of {n} seeds, got {seed!r}")
        options = dict(options or {})
        reset_mask = options.pop("reset_mask", None)
        if reset_mask is None:
            chosen = self._all
        else:
            chosen = np.asarray(reset_mask)
            if chosen.shape != (n,) or chosen.dtype != np.bool_ or not chosen.any():
                raise ValueError(f"options['reset_mask'] must be {n} bools with at least one True, got {reset_mask!r}")
            if not self._started and not chosen.all():
                raise ValueError("the first reset resets every sub-env: leave out options['reset_mask']")
        indices = np.flatnonzero(chosen).tolist()
        for i in indices:
            self._envs[i].reset(seed=seeds[i], options=options)
            self._autoreset[i] = False
        self._start(indices)
        self._started = True
        observations, infos = self._batch()
        if reset_mask is not None:
            infos = _masked(infos, chosen)
        return observations, infos

    # ------------------------------------------------------------------ step
    def step(self, actions: Any):
        if self.closed:
            raise RuntimeError("the vector env is closed")
        if not self._started:
            raise RuntimeError("call reset() before step()")
        actions = self._check_actions(actions)
        if self.autoreset_mode == AutoresetMode.DISABLED and self._autoreset.any():
            i = int(np.flatnonzero(self._autoreset)[0])  # refused before any sub-env moves
            raise RuntimeError(f"sub-env {i}'s episode is over: reset it (options['reset_mask']) first")
        n = self.num_envs
        core = self._core
        rewards = np.zeros(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=np.bool_)
        codes = np.zeros(n, dtype=np.int8)
        restarting = np.flatnonzero(self._autoreset)
        if len(restarting):  # NEXT_STEP: this step starts the next episode; its action is ignored
            for i in restarting.tolist():
                self._envs[i].reset()
            self._autoreset[restarting] = False
            self._start(restarting.tolist())
        moving = np.ones(n, dtype=np.bool_)
        moving[restarting] = False
        compiled = np.flatnonzero(moving & core.compiled)
        if len(compiled):
            core.step(compiled, actions, rewards, terminated, codes)
        accepted = codes == 0
        reasons = np.full(n, _ACCEPTED, dtype=object)
        for i in np.flatnonzero(~accepted).tolist():
            reasons[i] = REASONS[codes[i]]
        finished: list[tuple[int, dict[str, Any]]] = []
        for i in np.flatnonzero(moving & ~core.compiled).tolist():
            env = self._envs[i]
            rewards[i], terminated[i], accepted[i], reasons[i], metrics = env.advance(int(actions[i]))
            core.copy_from(i, env)
            if metrics is not None:
                finished.append((i, metrics))
        for i in np.flatnonzero(terminated & core.compiled).tolist():
            rewards[i], metrics = core.close(i, self._envs[i])
            finished.append((i, metrics))
        same_step = self.autoreset_mode == AutoresetMode.SAME_STEP
        final: list[tuple[int, Any, dict[str, Any]]] = []
        if same_step and finished:
            ended = sorted(i for i, _ in finished)
            by_index = dict(finished)
            for i in ended:
                info = {"t": int(core.t()[i]) if core.compiled[i] else self._envs[i]._t,
                        "accepted": bool(accepted[i]), "reason": reasons[i],
                        "bytes_used": self._bytes_used(i), "action_mask": core.masks[i].copy(),
                        "metrics": by_index[i], **by_index[i]}
                final.append((i, self._observation_of(i), info))
                self._envs[i].reset()
                accepted[i], reasons[i] = True, _ACCEPTED
            self._start(ended)
        elif finished:
            self._autoreset[[i for i, _ in finished]] = True
        observations, infos = self._batch(accepted, reasons)
        for i, metrics in ([] if same_step else sorted(finished, key=lambda f: f[0])):
            self._add_info(infos, {"metrics": metrics, **metrics}, i)
        for i, obs, info in final:
            self._add_info(infos, {"final_obs": obs, "final_info": info}, i)
        truncated = np.zeros(n, dtype=np.bool_)
        return observations, rewards, terminated, truncated, infos

    def _start(self, indices: list[int]) -> None:
        """The sub-envs ``indices`` were just reset: hand their episodes to the compiled core."""
        if self._use_kernel:
            self._core.start(indices, self._envs)
        else:
            for i in indices:
                self._core.copy_from(i, self._envs[i])

    def _bytes_used(self, i: int) -> int:
        return int(self._core.bytes_used()[i]) if self._core.compiled[i] else self._envs[i]._store.budget.used

    def _observation_of(self, i: int) -> Any:
        """Sub-env ``i``'s current observation, as the single env returns it."""
        row = self._core.observations[i].copy()
        if not self._dict_mode:
            return row
        layout = self._layout
        step_end = layout.n_step
        memory_end = step_end + layout.n_memory
        return {"step": row[:step_end].copy(), "memory": row[step_end:memory_end].copy(),
                "slots": row[memory_end:].copy(), "action_mask": self._core.masks[i].view(np.int8).copy()}

    def _check_actions(self, actions: Any) -> np.ndarray:
        array = np.asarray(actions)
        if array.shape != (self.num_envs,) or array.dtype.kind not in "iu":
            raise ValueError(
                f"actions must be {self.num_envs} integers (one per sub-env), got {array.dtype} of shape {array.shape}"
            )
        if array.size and (array.min() < 0 or array.max() >= self.n_actions):
            bad = int(np.flatnonzero((array < 0) | (array >= self.n_actions))[0])
            raise ValueError(f"action {array[bad]} of sub-env {bad} is not in Discrete({self.n_actions})")
        return array.astype(np.int64, copy=False)

    def _batch(self, accepted: np.ndarray | None = None, reasons: np.ndarray | None = None):
        """Observations and the every-step infos of all sub-envs, from the core's buffers."""
        n = self.num_envs
        core = self._core
        flat = core.observations.copy()
        masks = core.masks.copy()
        compiled = core.compiled
        t = core.t().copy()
        used = core.bytes_used().copy()
        for i in np.flatnonzero(~compiled).tolist():
            env = self._envs[i]
            t[i], used[i] = env._t, env._store.budget.used
        infos = {
            "t": t.astype(int),
            "_t": self._all.copy(),
            "accepted": np.ones(n, dtype=np.bool_) if accepted is None else accepted,
            "_accepted": self._all.copy(),
            "reason": np.full(n, _ACCEPTED, dtype=object) if reasons is None else reasons,
            "_reason": self._all.copy(),
            "bytes_used": used.astype(int),
            "_bytes_used": self._all.copy(),
            "action_mask": masks.copy(),
            "_action_mask": self._all.copy(),
        }
        if not self._dict_mode:
            return flat, infos
        layout = self._layout
        step_end = layout.n_step
        memory_end = step_end + layout.n_memory
        observations = {
            "step": flat[:, :step_end].copy(),
            "memory": flat[:, step_end:memory_end].copy(),
            "slots": flat[:, memory_end:].copy(),
            "action_mask": masks.view(np.int8).copy(),
        }
        return observations, infos

    # ------------------------------------------------------------------ reading
    def action_masks(self) -> np.ndarray:
        """The valid actions of every sub-env, ``(num_envs, n_actions)`` bools (SKIP always valid)."""
        return self._core.masks.copy()

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """``name`` of every sub-env: called with the arguments if it is a method, else read."""
        results = []
        for env in self.envs:
            attribute = getattr(env, name)
            results.append(attribute(*args, **kwargs) if callable(attribute) else attribute)
        return tuple(results)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return tuple(getattr(env, name) for env in self.envs)

    def set_attr(self, name: str, values: Any) -> None:
        """Set ``name`` on every sub-env: to ``values[i]`` for a list or tuple of N, else to ``values``."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr needs {self.num_envs} values, one per sub-env, got {len(values)}")
        for env, value in zip(self.envs, values, strict=True):
            setattr(env, name, value)
        self._core.penalties[:] = [env.invalid_action_penalty for env in self._envs]

    def close_extras(self, **kwargs: Any) -> None:
        for env in self._envs:
            env.close()

    def render(self) -> tuple[Any, ...] | None:
        if self.render_mode is None:
            return None
        return tuple(env.render() for env in self.envs)


def _masked(infos: dict[str, Any], chosen: np.ndarray) -> dict[str, Any]:
    """Infos of a partial reset: only the sub-envs that were reset have entries (the others
    hold the zero or None that Gymnasium's own vector envs leave there)."""
    masked = {}
    for key, value in infos.items():
        if key.startswith("_"):
            masked[key] = value & chosen
        else:
            value = value.copy()
            value[~chosen] = None if value.dtype == object else 0
            masked[key] = value
    return masked
