"""``CompiledCore``: the vector env's sub-envs as arrays, stepped by ``kernel`` in one call.

It holds, per sub-env, the episode's arrays (``episode_arrays``), its memory (``state``), its
scalars and its own reward function (labels and oracle), and the batched observation and mask
buffers. Each sub-env's single env chooses the episode (seeds, options, sampler); the core
compiles it from its random draws when it is a generated episode of the paper's regimes
(``paper_episodes``: the episode is not made), else reads it as the single env's table would
(``episode_arrays.describe_episode``) and compiles that, and steps it. The single env starts
the episode (made then if it was not), and replays the actions the kernel took through its
own ``advance``, only when it is read (``sync``) or handed to the user (``release``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from numba.typed import List

from ...episodes.sources import EpisodeList, EpisodeRecipe
from ...scoring.metrics import metrics_of_labels
from ..observation.encoder import ObservationEncoder
from ..render import MemoryViewer
from ..rewards import REWARD_METRICS, RewardFunction, closing_reward, terminal_reward
from .compile_cache import keyed_on_these_sources
from .contents import ContentMemo
from .layout import (
    F_PAID,
    F_PENALTIES,
    LOG,
    METRIC_CODES,
    N_FLOAT_SCALARS,
    S_BUDGET,
    S_EXPIRES,
    S_LOG,
    S_MERGES,
    S_T,
    S_USED,
    S_WRITES,
    n_scalars,
)

with keyed_on_these_sources():
    # Their compiled functions bind their cache folder as they are defined.
    from . import kernel
    from .episode_arrays import compile_episode, describe_episode
    from .oracle_by_class import drawn_oracle
    from .paper_episodes import DrawnLabels, compile_drawn, drawn_compilable

_LISTS = ("statics", "floats", "states")
_KEPT_EPISODES = 4096
# Integers up to 2**53 convert to float64 exactly, so the kernel's cost / budget is Python's.
_EXACT_INTS = 2**53


def compilable_settings(env: Any) -> bool:
    """Whether the compiled core can play sub-envs made like ``env`` (every sub-env has fresh
    copies of its parts) at all: parts the kernel mirrors (a subclass may change what they
    do), no rendering, an EXPIRE cap float64 holds exactly."""
    cap = env.max_expires_per_step
    plain_parts = (type(env.reward_fn) is RewardFunction and type(env._encoder) is ObservationEncoder
                   and type(env.viewer) is MemoryViewer)
    return plain_parts and env.render_mode is None and (cap is None or cap < _EXACT_INTS)


_EMPTY_INT = np.zeros(1, dtype=np.int32)
_EMPTY_FLOAT = np.zeros(1, dtype=np.float64)


class CompiledCore:
    """The compiled state of ``n`` sub-envs made with the settings of ``env`` (a single env)."""

    def __init__(self, n: int, env: Any) -> None:
        self.n = n
        self.K = env.K
        self.cap = -1 if env.max_expires_per_step is None else int(env.max_expires_per_step)
        self.oldest = env.slot_order == "oldest"
        self.privileged = int(env.privileged)
        reward_fn = env.reward_fn
        self.weights = dict(reward_fn.weights)
        assert set(self.weights) <= set(REWARD_METRICS)
        self.codes = np.array([METRIC_CODES[name] for name in self.weights], dtype=np.int64)
        self.weight_values = np.array(list(self.weights.values()), dtype=np.float64)
        self.dense = reward_fn.dense
        self.expire_cost = reward_fn.expire_cost
        self.penalties = np.zeros(n, dtype=np.float64)  # each sub-env's invalid_action_penalty
        self.memo = ContentMemo()
        self.statics = List([_EMPTY_INT] * n)
        self.floats = List([_EMPTY_FLOAT] * n)
        self.states = List([_EMPTY_INT] * n)
        # The same arrays for Python to read (a typed list's items are slow to reach from Python).
        self.arrays = [(_EMPTY_INT, _EMPTY_FLOAT, _EMPTY_INT)] * n
        self.scalars = np.zeros((n, n_scalars(self.K)), dtype=np.int64)
        self.fscalars = np.zeros((n, N_FLOAT_SCALARS), dtype=np.float64)
        self.observations = np.zeros((n, env.layout.size), dtype=np.float32)
        self.masks = np.zeros((n, env.n_actions), dtype=np.bool_)
        self.compiled = np.zeros(n, dtype=np.bool_)  # sub-envs whose episode the kernel plays
        self.synced = np.zeros(n, dtype=np.int64)  # actions replayed into the single env so far
        self.released = np.zeros(n, dtype=np.bool_)  # handed to the user: stepped by the single env for good
        # (episode, budget) chosen for a sub-env whose single env has not started it (see sync).
        self.pending: list[tuple[Any, int] | None] = [None] * n
        # The core's own reward functions (labels, oracle) of compiled episodes: a single env
        # keeps its own, on its own episode, until it is brought up to date.
        self.reward_fns = [env.reward_fn.fresh() for _ in range(n)]
        # Compiled episodes of sets read from files, by (episode object, budget): see _arrays.
        self.kept: dict[tuple[int, int], tuple[Any, ...]] = {}
        # Per sub-env, its kept episode's U*(B) once a close has computed it (a one-item list
        # shared with the kept entry; None: the episode is not kept). Held here as well, not
        # looked up at close: the entries may be dropped (see _arrays) while the episode plays.
        self.oracles: list[list[float | None] | None] = [None] * n
        self.unstarted: list[int] = []  # sub-envs the last ``start`` failed to start
        # Per sub-env, what its episode is scored on when the core played it from its draws
        # (``paper_episodes``), without making it; None: the episode itself.
        self.labels: list[DrawnLabels | None] = [None] * n
        self._index()

    def _index(self) -> None:
        self.compiled_indices = np.flatnonzero(self.compiled)
        self.single_indices = np.flatnonzero(~self.compiled)

    def start(self, indices: Sequence[int], envs: Sequence[Any]) -> None:
        """The sub-envs ``indices`` were just reset: those whose episode was chosen but not started
        (``pending``) are compiled and observed; an episode the core cannot play, and a
        sub-env that was reset in full, is played by its single env. Making or reading an
        episode may fail (say, out of memory): the other sub-envs are started all the same, the
        first error is raised after, and the sub-envs that failed are listed in ``unstarted``
        (played by their single env, which has no episode started: reset them again)."""
        ready, budgets = [], []
        self.unstarted, error = [], None
        for i in indices:
            env = envs[i]
            self.compiled[i] = False  # until its new episode is compiled
            self.penalties[i] = env.invalid_action_penalty
            self.synced[i] = 0
            chosen = self.pending[i]
            arrays = None
            try:
                if chosen is not None:
                    episode, budget = chosen
                    if budget < _EXACT_INTS:
                        arrays = self._arrays(i, env, episode, budget)
                    if arrays is None:  # the single env plays it: start it now
                        env._start(self._made(i), budget)
                        self.pending[i] = None
            except Exception as failure:
                self.pending[i] = None
                self.unstarted.append(i)
                error = error or failure
                continue
            if arrays is None:
                self.copy_from(i, env)
                continue
            self.compiled[i] = True
            self.arrays[i] = arrays
            kernel.place(self.statics, self.floats, self.states, i, *arrays)
            ready.append(i)
            budgets.append(budget)
        self._index()
        if ready:
            kernel.start_batch(np.array(ready, dtype=np.int64), np.array(budgets, dtype=np.int64), self.statics,
                               self.floats, self.states, self.scalars, self.fscalars, self.masks, self.observations,
                               self.K, self.cap, self.oldest, self.privileged)
        if error is not None:
            raise error

    def _arrays(self, i: int, env: Any, episode: Any, budget: int) -> tuple[np.ndarray, ...] | None:
        """Sub-env ``i``'s arrays for ``episode`` (None: the core cannot play it), its reward
        function started. An episode of a set read from files comes back: its static arrays
        (read-only to the kernel) are kept and shared, and only its memory is made afresh; its
        U*(B), once computed, too."""
        reward_fn = self.reward_fns[i]
        self.labels[i] = self.oracles[i] = None
        if isinstance(episode, EpisodeRecipe):
            if drawn_compilable(episode):
                drawn = compile_drawn(episode, env.track, reward_fn, budget)
                if drawn is not None:
                    arrays, self.labels[i] = drawn
                    return arrays
            episode = self._made(i)
        key = (id(episode), budget) if isinstance(env.sampler.source, EpisodeList) else None
        kept = self.kept.get(key) if key is not None else None
        if kept is not None and kept[0] is episode:
            _, static, floats, costs, state_size, oracle = kept
            self.oracles[i] = oracle
            if oracle[0] is None:  # close asks the reward function, until one close has told the entry
                reward_fn.start(episode, costs, budget)
            return static, floats, np.zeros(state_size, dtype=np.int32)
        columns = describe_episode(episode, env.track, self.memo)
        if columns is None:
            return None
        costs = columns.costs
        reward_fn.start(episode, costs, budget)
        arrays = compile_episode(columns, reward_fn, self.memo)
        if arrays is not None and key is not None:
            if len(self.kept) >= _KEPT_EPISODES:
                self.kept.clear()
            self.oracles[i] = [None]
            # The entry holds the episode, so its id stays its own while the entry lives.
            self.kept[key] = (episode, arrays[0], arrays[1], costs, len(arrays[2]), self.oracles[i])
        return arrays

    def _made(self, i: int) -> Any:
        """Sub-env ``i``'s chosen episode, made if it came as a recipe."""
        episode, budget = self.pending[i]
        if isinstance(episode, EpisodeRecipe):
            episode = episode.make()
            self.pending[i] = (episode, budget)
        return episode

    def step(self, indices: np.ndarray, actions: np.ndarray, rewards: np.ndarray, terminated: np.ndarray,
             reasons: np.ndarray) -> None:
        """Advance the compiled sub-envs ``indices`` by their ``actions``; the reward of a step
        that ends an episode is filled in by ``close``."""
        kernel.step_batch(indices, actions, self.statics, self.floats, self.states, self.scalars, self.fscalars,
                          self.masks, self.observations, rewards, terminated, reasons, self.K, self.cap, self.oldest,
                          self.privileged, self.dense, self.codes, self.weight_values, self.penalties,
                          self.expire_cost)

    def close(self, i: int, env: Any) -> tuple[float, dict[str, Any]]:
        """The final reward and metrics of compiled sub-env ``i``'s finished episode."""
        row = self.scalars[i]
        static, _, state = self.arrays[i]
        retained = tuple(kernel.retained(static, state, row).tolist())
        # What the episode is scored on: a drawn episode's labels, or the episode itself.
        scored = self.labels[i]
        if scored is None:
            scored = env.episode if self.pending[i] is None else self.pending[i][0]
        known = self.oracles[i]
        if known is None or known[0] is None:
            reward_fn = self.reward_fns[i]
            # A dense reward's oracle has U*(B) already; else a drawn episode's is tried first.
            oracle = reward_fn.known_oracle
            if oracle is None and self.labels[i] is not None:
                oracle = drawn_oracle(self.labels[i], int(row[S_BUDGET]))
            if oracle is None:
                oracle = reward_fn.oracle_utility()
            if known is not None:
                known[0] = oracle  # an episode that comes back at this budget has this U*(B)
        else:
            oracle = known[0]
        metrics = metrics_of_labels(
            len(scored), scored.critical_steps, scored.utilities, scored.total_drift_events, retained,
            bytes_used=int(row[S_USED]), budget=int(row[S_BUDGET]), writes=int(row[S_WRITES]),
            expires=int(row[S_EXPIRES]), merges=int(row[S_MERGES]), oracle_utility=oracle,
        ).as_row()
        floats = self.fscalars[i]
        reward = closing_reward(terminal_reward(self.weights, metrics) - floats[F_PENALTIES], floats[F_PAID])
        floats[F_PAID] += reward
        return reward, metrics

    def sync(self, i: int, env: Any) -> None:
        """Bring single env ``i`` to the kernel's state: start its episode if it was not, and
        replay the actions the kernel took since it was last brought up to date."""
        if not self.compiled[i]:
            return
        if self.pending[i] is not None:
            env._start(self._made(i), self.pending[i][1])
            self.pending[i] = None
            self.synced[i] = 0
        taken = int(self.scalars[i, S_LOG])
        if self.synced[i] < taken:
            static, _, state = self.arrays[i]
            log = kernel.st_py(static, LOG)
            for a in state[log + self.synced[i]: log + taken].tolist():
                env.advance(a)
            self.synced[i] = taken

    def __getstate__(self) -> dict[str, Any]:
        # numba's typed lists do not pickle: plain lists of the same arrays do.
        state = dict(self.__dict__)
        for name in _LISTS:
            state[name] = list(state[name])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in _LISTS:
            state[name] = List(state[name])
        self.__dict__.update(state)

    def release(self, i: int, env: Any) -> None:
        """Sub-env ``i`` is stepped by its single env from now on, brought to the core's state."""
        self.sync(i, env)
        if self.compiled[i]:
            self.compiled[i] = False
            self.statics[i], self.floats[i], self.states[i] = self.arrays[i] = _EMPTY_INT, _EMPTY_FLOAT, _EMPTY_INT
            self._index()
        self.released[i] = True

    def copy_from(self, i: int, env: Any) -> None:
        """Sub-env ``i`` is played by its single env: take its observation and mask."""
        encoder = env._encoder
        self.observations[i] = np.frombuffer(encoder.obs_bytes, dtype=np.float32)
        self.masks[i] = np.frombuffer(encoder.mask, dtype=np.bool_)

    def t(self) -> np.ndarray:
        return self.scalars[:, S_T]

    def bytes_used(self) -> np.ndarray:
        return self.scalars[:, S_USED]
