"""The native vector environment: N episodes of ``WritePolicyBench-v0`` stepped by one call.

``gym.make_vec("WritePolicyBench-v0", num_envs=N)`` builds it (every registered id has it as
its ``vector_entry_point``). Each sub-env's single env chooses its episodes (seeds, options,
sampler); the compiled core (``envs.fast``) turns them into arrays and steps all sub-envs in one
call; each sub-env's single env is a row of that core (``WritePolicyBenchEnv.play_on``), so
reading or stepping it is reading or stepping the sub-env. What the core does not mirror
(episodes that are not plain JSON, subclassed parts) is stepped by the single env's Python
parts (``advance``). ``tests/envs/test_vector_env.py`` and ``test_vector_core.py`` play it
against Gymnasium's ``SyncVectorEnv`` over single envs on their Python parts and require every
output to be equal.
"""

from __future__ import annotations

import inspect
import os
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ..core.checks import require_finite, require_int
from .env import WritePolicyBenchEnv
from .fast.layout import REASONS

if TYPE_CHECKING:  # numba loads with the first vector env, not with this module
    from .fast.core import CompiledCore

# The arguments that choose episodes: sub-envs share the first one's episode sampler (a file's
# episodes are read once), each working on its own fresh copy.
_SAMPLER_ARGUMENTS = ("regime", "length", "episodes", "episode_seed", "episode_order")
_ENV_ARGUMENTS = tuple(p for p in inspect.signature(WritePolicyBenchEnv.__init__).parameters if p != "self")
_ACCEPTED = REASONS[0]


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

    ``episode_workers=k`` (default 0; POSIX only): k processes prepare, while the sub-envs play,
    the episode each sub-env's next autoreset will choose, where the core would otherwise make
    it during the reset: every episode it does not compile from its draws (those with
    documentation sections, guides or renames, those under compression, those past its bounds,
    and every one with ``replay_generators=False``; the others take a fraction of a single env's reset). A
    prepared episode is taken only if it is the one chosen, so the outputs are the same with or
    without workers. They start with the vector env when its episodes are such, on other CPUs,
    and stop with ``close()``.

    ``replay_generators`` (default True): the core plays an episode of the paper's four regimes
    (without sections or guides) and of the contract regimes without text (``breaking``,
    ``reverts``, ``noisy_priority``) by running the generator's own rules
    (``paper_structure.play``, ``contract_structure.play``) compiled on its random draws,
    without making it; every other generated episode is made by its generator (a contract
    regime's running its rules compiled) and read as a single env reads it. False: those too.
    The outputs are the same either way; False is for debugging and for measuring what the
    compiled rules gain (``benchmarks/vector_env.py --part generators``).
    """

    metadata = {**WritePolicyBenchEnv.metadata, "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, *, autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
                 episode_workers: int = 0, replay_generators: bool = True, **env_kwargs: Any) -> None:
        self.num_envs = require_int(num_envs, "num_envs", 1)
        if not isinstance(replay_generators, (bool, np.bool_)):
            raise ValueError(f"replay_generators must be True or False, got {replay_generators!r}")
        episode_workers = require_int(episode_workers, "episode_workers", 0)
        if episode_workers > self.num_envs:  # a worker prepares one sub-env's next episode at a time
            raise ValueError(f"episode_workers must be at most num_envs ({self.num_envs}), got {episode_workers}")
        if episode_workers and os.name != "posix":
            raise ValueError(f"episode_workers needs a POSIX system (Linux, macOS), got {episode_workers} on {os.name}")
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
        self._recording = first.viewer.records
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.n_actions = first.n_actions
        self._first = first
        self._dict_mode = first.observation_mode == "dict"
        self._autoreset = np.zeros(self.num_envs, dtype=np.bool_)
        self._all = np.ones(self.num_envs, dtype=np.bool_)
        self._started = False
        self._last: StepOutcome | None = None
        self._metric_plans: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # see _add_metrics
        self._no_reasons = np.full(self.num_envs, _ACCEPTED, dtype=object)  # every action accepted
        from .fast.core import CompiledCore  # numba: with the first vector env, not wpb_gym

        self._core = CompiledCore(self.num_envs, first, episode_workers, bool(replay_generators))
        self._use_kernel = first.plays_compiled
        for i, env in enumerate(self._envs):  # on the Python parts too: stepped by hand, it updates its row
            env.play_on(self._core, i, self._envs)

    @property
    def core(self) -> CompiledCore:
        """The compiled core that steps the sub-envs: which it holds (``compiled``), their live
        arrays (``observations``, ``masks``, ``t()``, ``bytes_used()``) and its episode workers
        (``workers``). For looking inside, as tests and benchmarks do; the arrays change with the
        next step."""
        return self._core

    @property
    def single_envs(self) -> tuple[WritePolicyBenchEnv, ...]:
        """Every sub-env's single env (``sub_env``)."""
        return tuple(self._envs)

    @property
    def envs(self) -> list[WritePolicyBenchEnv]:
        """The single envs, one per sub-env (``sub_env``)."""
        return list(self._envs)

    def sub_env(self, i: int) -> WritePolicyBenchEnv:
        """Sub-env ``i``'s single env: a row of the compiled core (or the Python parts that play
        it), so what you read is the sub-env's state and what you do to it (``expose_item``,
        ``reset``, ``step``, attributes) is what the vector env plays."""
        return self._envs[i]

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
        self._reset_sub_envs(np.flatnonzero(chosen).tolist(), seeds, options)
        self._started = True
        self._last = None
        observations, infos = self._batch()
        if reset_mask is not None:
            infos = _masked(infos, chosen)
        self.report_workers()
        return observations, infos

    # ------------------------------------------------------------------ step
    def step(self, actions: Any):
        outcome = self.advance(actions)
        observations, infos = self._batch(outcome.accepted, outcome.reasons)
        if outcome.finished and self.autoreset_mode != AutoresetMode.SAME_STEP:
            self._add_metrics(infos, outcome.finished)
        for i, obs, info in outcome.final:
            self._add_info(infos, {"final_obs": obs, "final_info": info}, i)
        truncated = np.zeros(self.num_envs, dtype=np.bool_)
        self.report_workers()
        return observations, outcome.rewards, outcome.terminated, truncated, infos

    def advance(self, actions: Any) -> StepOutcome:
        """``step`` without building the observations and infos (the SB3 adapter reads the
        buffers, ``observations()`` and ``infos()``, itself)."""
        if self.closed:
            raise RuntimeError("the vector env is closed")
        if not self._started:
            raise RuntimeError("call reset() before step()")
        actions = self._check_actions(actions)
        autoreset = self._autoreset
        if self.autoreset_mode == AutoresetMode.DISABLED and autoreset.any():
            i = int(np.flatnonzero(autoreset)[0])  # refused before any sub-env moves
            raise RuntimeError(f"sub-env {i}'s episode is over: reset it (options['reset_mask']) first")
        n = self.num_envs
        core = self._core
        rewards = np.zeros(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=np.bool_)
        codes = np.zeros(n, dtype=np.int8)
        if autoreset.any():  # NEXT_STEP: this step starts the next episode; its action is ignored
            restarting = np.flatnonzero(autoreset).tolist()
            self._reset_sub_envs(restarting)
            moving = np.ones(n, dtype=np.bool_)
            moving[restarting] = False
            compiled, by_env = np.flatnonzero(moving & core.compiled), np.flatnonzero(moving & ~core.compiled)
        else:
            compiled, by_env = core.compiled_indices, core.single_indices
        # A sub-env whose single env was stepped to its episode's end is refused before any other
        # moves (the sub-envs due to restart above have restarted, as they would have anyway).
        over = next((i for i in by_env.tolist() if self._envs[i].episode_over), -1)
        if over < 0 and len(compiled):
            over = core.step(compiled, actions, rewards, terminated, codes)
        if over >= 0:
            raise RuntimeError(f"sub-env {over}'s episode is over (its single env was stepped to the end): reset "
                               "it (options['reset_mask'])")
        if len(compiled):
            if core.readers or self._recording:
                # A store read back follows every step (agents hold it), and a viewer that records sees each.
                for i in range(n) if self._recording else sorted(core.readers):
                    if core.compiled[i]:
                        self._envs[i].store  # noqa: B018 - reading brings it up to date
        accepted = codes == 0
        reasons = None if accepted.all() else _reason_names(codes)
        finished: list[tuple[int, dict[str, Any]]] = []
        for i in by_env.tolist():
            env = self._envs[i]
            rewards[i], terminated[i], ok, reason, metrics = env.advance(int(actions[i]))
            if not ok:
                accepted[i] = False
                reasons = _reason_names(codes) if reasons is None else reasons
                reasons[i] = reason
            core.copy_from(i, env)
            if metrics is not None:
                finished.append((i, metrics))
        if terminated.any():
            ended = np.flatnonzero(terminated & core.compiled).tolist()
            if ended:
                finished.extend(core.close(ended, self._envs, rewards))
            finished.sort(key=lambda f: f[0])
        final: list[tuple[int, Any, dict[str, Any]]] = []
        if finished and self.autoreset_mode == AutoresetMode.SAME_STEP:
            for i, metrics in finished:
                info = {"t": self._t(i), "accepted": bool(accepted[i]), "reason": _ACCEPTED if reasons is None else
                        reasons[i], "bytes_used": self._bytes_used(i), "action_mask": core.masks[i].copy(),
                        "metrics": metrics, **metrics}
                final.append((i, self._observation_of(i), info))
                accepted[i] = True
                if reasons is not None:
                    reasons[i] = _ACCEPTED
            self._reset_sub_envs([i for i, _ in finished])
        elif finished:
            autoreset[[i for i, _ in finished]] = True
        self._last = StepOutcome(rewards, terminated, accepted, reasons, finished, final)
        return self._last

    def report_workers(self) -> None:
        """Warn once if the episode workers were dropped. ``reset`` and ``step`` do as their last
        act (a warning made an error leaves the env whole); after ``advance``, call it once the
        step's results are read."""
        self._core.report_workers()

    def observations(self) -> Any:
        """The current observations of all sub-envs (a new array, or dict of arrays)."""
        core = self._core
        return core.observations.copy() if not self._dict_mode else self._split(core.observations, core.masks)

    def infos(self) -> dict[str, Any]:
        """The every-step infos of the last ``step``/``advance`` (or reset): what ``step`` returns
        but for the metrics and final entries."""
        last = self._last
        return self._batch(None if last is None else last.accepted, None if last is None else last.reasons)[1]

    def _reset_sub_envs(self, indices: list[int], seeds: list[int | None] | None = None,
                        options: dict[str, Any] | None = None) -> None:
        """Reset these sub-envs: each single env chooses its episode (seeding, options, sampler)
        and, where the compiled core will play it, leaves starting it to the core. The sub-envs
        reset before one that fails are started all the same; a sub-env whose episode the core
        failed to make or read is left needing a reset (the next step's in ``NextStep`` mode)."""
        core, done = self._core, []
        try:
            for i in indices:
                env, seed = self._envs[i], None if seeds is None else seeds[i]
                if self._use_kernel:
                    core.pending[i] = env.choose_episode(seed, options, recipe=True)
                else:
                    core.pending[i] = None
                    env.reset(seed=seed, options=options)
                self._autoreset[i] = False
                done.append(i)
        finally:
            try:
                self._start(done)
            finally:
                self._autoreset[core.unstarted] = True

    def _start(self, indices: list[int]) -> None:
        """The sub-envs ``indices`` were just reset: hand their episodes to the compiled core."""
        if self._use_kernel:
            self._core.start(indices, self._envs)
        else:
            for i in indices:
                self._core.copy_from(i, self._envs[i])

    def _t(self, i: int) -> int:
        return int(self._core.t()[i]) if self._core.compiled[i] else self._envs[i].t

    def _bytes_used(self, i: int) -> int:
        return int(self._core.bytes_used()[i]) if self._core.compiled[i] else self._envs[i].store.bytes_used

    def _observation_of(self, i: int) -> Any:
        """Sub-env ``i``'s current observation, as the single env returns it."""
        row = self._core.observations[i].copy()
        return row if not self._dict_mode else self._split(row, self._core.masks[i])

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
        """Observations and the every-step infos of all sub-envs, from the core's buffers (each
        array new: what the caller does with it does not reach the core)."""
        core = self._core
        masks = core.masks.copy()
        t = core.t().astype(int)
        used = core.bytes_used().astype(int)
        for i in core.single_indices.tolist():
            env = self._envs[i]
            t[i], used[i] = env.t, env.store.bytes_used
        present = list(np.ones((5, self.num_envs), dtype=np.bool_))  # the five "_key" masks, all True
        infos = {
            "t": t,
            "_t": present[0],
            "accepted": present[1].copy() if accepted is None else accepted.copy(),
            "_accepted": present[1],
            "reason": self._no_reasons.copy() if reasons is None else reasons.copy(),
            "_reason": present[2],
            "bytes_used": used,
            "_bytes_used": present[3],
            "action_mask": masks,
            "_action_mask": present[4],
        }
        if self._dict_mode:
            return self._split(core.observations, masks), infos  # the split copies
        return core.observations.copy(), infos

    def _add_metrics(self, infos: dict[str, Any], finished: list[tuple[int, dict[str, Any]]]) -> None:
        """What Gymnasium's ``_add_info`` of ``{"metrics": m, **m}`` gives, for each finished
        ``(i, m)`` in turn, with each metric's arrays made once for all the sub-envs (a step
        that ends episodes would otherwise make and fill two arrays and two masks per metric
        and episode): one block of rows per dtype, and one of masks."""
        rows = [metrics for _, metrics in finished]
        shape = (tuple(rows[0]), tuple(map(type, rows[0].values())))
        plan = self._metric_plans.get(shape)
        if plan is None:
            plan = self._metric_plans[shape] = _metric_plan(*shape)
        if not plan or any(tuple(row) != shape[0] for row in rows[1:]):
            for i, metrics in finished:  # not one shape of numbers: Gymnasium's own, episode by episode
                self._add_info(infos, {"metrics": metrics, **metrics}, i)
            return
        names, masked, groups = plan
        n = self.num_envs
        where = [i for i, _ in finished]
        masks = np.zeros((2 * len(names) + 1, n), dtype=np.bool_)
        masks[:, where] = True
        mask_rows = list(masks)  # iterating makes the row views faster than indexing does
        nested, flat = [None] * len(names), [None] * len(names)
        for kind, columns, keys in groups:
            block = np.zeros((2, len(columns), n), dtype=kind)
            block[:, :, where] = np.array([[row[key] for key in keys] for row in rows], dtype=kind).T
            for j, inner, outer in zip(columns, block[0], block[1]):
                nested[j], flat[j] = inner, outer
        inside: dict[str, Any] = {}
        for name, mask_name, array, mask in zip(names, masked, nested, mask_rows[0::2]):
            inside[name], inside[mask_name] = array, mask
        infos["metrics"], infos["_metrics"] = inside, mask_rows[-1]
        for name, mask_name, array, mask in zip(names, masked, flat, mask_rows[1::2]):
            if name in infos:  # an every-step key (``bytes_used``): its array takes the values, as they are
                kept = infos[name]
                for i, row in zip(where, rows):
                    kept[i] = row[name]
                infos.setdefault(mask_name, mask)[where] = True
            else:
                infos[name], infos[mask_name] = array, mask

    def _split(self, flat: np.ndarray, masks: np.ndarray) -> dict[str, np.ndarray]:
        """``"dict"`` observations from the flat rows (the mask as int8, as the single env's), keys
        in the observation space's order, as Gymnasium's vector envs give them."""
        parts = self._first.split_observation(flat, masks)
        return {key: parts[key] for key in self.single_observation_space.spaces}

    # ------------------------------------------------------------------ reading
    def action_masks(self) -> np.ndarray:
        """The valid actions of every sub-env, ``(num_envs, n_actions)`` bools (SKIP always valid)."""
        return self._core.masks.copy()

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """``name`` of every sub-env: called with the arguments if it is a method, else read."""
        results = []
        for env in self._envs:
            attribute = getattr(env, name)
            results.append(attribute(*args, **kwargs) if callable(attribute) else attribute)
        return tuple(results)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """``name`` of every sub-env's single env."""
        return tuple(getattr(env, name) for env in self._envs)

    def set_attr(self, name: str, values: Any) -> None:
        """Set ``name`` on every sub-env: to ``values[i]`` for a list or tuple of N, else to ``values``."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr needs {self.num_envs} values, one per sub-env, got {len(values)}")
        if name == "invalid_action_penalty":  # checked before any is set
            values = [require_finite(value, name) for value in values]
        for env, value in zip(self._envs, values):
            setattr(env, name, value)

    def close_extras(self, **kwargs: Any) -> None:
        self._core.close_workers()
        for env in self._envs:
            env.close()

    def render(self) -> tuple[Any, ...] | None:
        if self.render_mode is None:
            return None
        return tuple(env.render() for env in self._envs)


class StepOutcome(NamedTuple):
    """What one vector step did: rewards, terminations, which actions were accepted and why
    not (None: all were), the finished episodes' metrics and, in ``"SameStep"`` mode, their
    final observations and infos (sub-env index first, ascending)."""

    rewards: np.ndarray
    terminated: np.ndarray
    accepted: np.ndarray
    reasons: np.ndarray | None
    finished: list[tuple[int, dict[str, Any]]]
    final: list[tuple[int, Any, dict[str, Any]]]


def _reason_names(codes: np.ndarray) -> np.ndarray:
    """The rejection reasons of the compiled core's codes, as the single env names them."""
    names = np.full(len(codes), _ACCEPTED, dtype=object)
    for i in np.flatnonzero(codes).tolist():
        names[i] = REASONS[codes[i]]
    return names


def _metric_plan(names: tuple[str, ...], kinds: tuple[type, ...]) -> tuple[Any, ...]:
    """How ``_add_metrics`` lays out metrics of these names and value types: the names, their
    masks' names, and per dtype (as Gymnasium's ``_add_info`` chooses it) the positions and
    names of its metrics. Empty (Gymnasium's ``_add_info`` episode by episode) when a value is
    not a number, a metric is named ``metrics``, or one is named as another's mask."""
    masks = [f"_{name}" for name in names]
    if ("metrics" in names or not set(masks).isdisjoint(names)
            or not all(kind in (int, float, bool) or issubclass(kind, np.number) for kind in kinds)):
        return ()
    groups = []
    for kind in dict.fromkeys(kinds):
        columns = [j for j, each in enumerate(kinds) if each is kind]
        groups.append((kind, columns, [names[j] for j in columns]))
    return names, masks, groups


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
