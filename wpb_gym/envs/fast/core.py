"""``CompiledCore``: envs as rows of arrays, stepped by ``kernel`` in one call (a single env is a
core with one row, the vector env's sub-envs are the rows of one core).

It holds, per sub-env, the episode's arrays (``episode_arrays``), its memory (``state``), its
scalars and its own reward function (labels and oracle), and the batched observation and mask
buffers. Each sub-env's single env chooses the episode (seeds, options, sampler); the core
compiles it from its random draws when it is one of the paper regimes' (``paper_episodes``:
the episode is not made; those a step starts are started together, and those it ends scored
together, by ``drawn_batches``) or of the contract regimes without text
(``contract_episodes``: not made either, started one by one, scored together), else has it
made by its generator (``contract_episodes.make``), reads it as the encoder's
table would (``episode_arrays.describe_episode``) and compiles that, and steps it. The single
env reads its row (``decisions``, ``slots``, ``episode``, ``oracle``) for what it shows beyond
the observation; an episode the core cannot read is started on the single env's Python parts,
and its row only copies their observation and mask (``copy_from``). With ``workers``,
processes (``episode_workers``) make, read and compile ahead the episode each sub-env's next
autoreset will choose, where the core would make it during the reset.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Sequence

import numpy as np
from numba.core import config as numba_config

from ...core.kind_budgets import KINDS
from ...episodes.generators.paper import structure_draws
from ...episodes.sources import EpisodeList, EpisodeRecipe, GeneratedEpisodes
from ...scoring.metrics import metric_row, metrics_of_labels
from ...scoring.oracle import oracle_utility
from ..rewards import REWARD_METRICS, closing_reward, terminal_reward
from . import contract_episodes, drawn_batches, episode_arrays, kernel, paper_episodes
from .arenas import Arenas
from .compile_cache import say_when_compiling
from .contents import ContentMemo
from .episode_arrays import limited, scored_labels, summary_costs
from .episode_workers import EpisodeWorkers
from .first_run import CoreCode
from .layout import (
    COMPRESSED,
    COMPRESSING,
    COST,
    EXACT_INTS,
    F_PAID,
    F_PENALTIES,
    H_LENGTH,
    H_STATE,
    H_STATIC,
    ITEM_COST,
    KIND,
    KINDS_LIMITED,
    METRIC_CODES,
    N_FLOAT_SCALARS,
    N_KINDS,
    N_LIMITS,
    PARENT,
    PRIORITY,
    S_BUDGET,
    S_EXPIRES,
    S_LENGTH,
    S_MERGES,
    S_SHOWN,
    S_SLOTS,
    S_T,
    S_USED,
    S_WRITES,
    UTILITY,
    WT_PER_KB,
    WT_PER_WRITE,
    WT_TOTAL,
    n_scalars,
)
from .oracle_by_class import MAX_COMBINATIONS
from .paper_episodes import drawn_compilable, unprivileged_settings

# A newcomer's first env waits on numba for tens of seconds: say what it is waiting for.
say_when_compiling(__name__.rpartition(".")[0])

# Every call into compiled code goes through CODE: on a first run, the Python twins of these
# modules until numba has compiled them in the background (``first_run``).
CODE = CoreCode({"kernel": kernel, "drawn_batches": drawn_batches, "episode_arrays": episode_arrays,
                 "paper_episodes": paper_episodes, "contract_episodes": contract_episodes})

if numba_config.DISABLE_JIT:
    # NUMBA_DISABLE_JIT=1 runs these functions as Python over NumPy scalars, which warn where the
    # parameter sets' hashes let 64-bit integers wrap around, as the machine code does on purpose.
    warnings.filterwarnings("ignore", "overflow encountered in scalar", RuntimeWarning,
                            re.escape(__name__.rpartition(".")[0]) + r"\.")

# Compiled episodes of sets read from files kept at most, per sub-env and in all (a T = 200
# episode's arrays take about 18 KB).
_KEPT_PER_SUB_ENV, _KEPT_EPISODES = 256, 4096
# clock's four scalars lead each row.
assert (S_T, S_LENGTH, S_BUDGET, S_USED) == (0, 1, 2, 3)
_CLOCK_END = 4


def _from_draws(recipe: Any) -> Any:
    """The function compiling ``recipe``'s episode from its draws (``paper_episodes``: the paper
    regimes' without sections or guides; ``contract_episodes``: the contract regimes' without
    sections or renames); None for an episode the core makes and reads."""
    if drawn_compilable(recipe):
        return CODE.paper_episodes.compile_drawn
    return CODE.contract_episodes.compile_drawn if contract_episodes.drawn_compilable(recipe) else None


def _counted(row: np.ndarray) -> dict[str, int]:
    """What ``metric_row`` reads of a sub-env's scalar row."""
    return {"bytes_used": int(row[S_USED]), "budget": int(row[S_BUDGET]), "writes": int(row[S_WRITES]),
            "expires": int(row[S_EXPIRES]), "merges": int(row[S_MERGES])}


class CompiledCore:
    """The compiled state of ``n`` sub-envs made with the settings of ``env`` (a single env)."""

    def __init__(self, n: int, env: Any, workers: int = 0, replay: bool = True) -> None:
        if env.plays_compiled:  # else the single envs step every sub-env: nothing to compile
            CODE.start()
        self.n = n
        self.replay = replay  # False: every generated episode is made and read (see the vector env)
        self.K = env.K
        self.cap = -1 if env.max_expires_per_step is None else int(env.max_expires_per_step)
        self.oldest = env.slot_order == "oldest"
        self.privileged = int(env.privileged)
        # The limits beside the byte budget (a ``StoreLimits``; None: none), and as the kernel
        # reads them (``layout.WT_TOTAL`` ...); each sub-env's kind limits follow its budget.
        self.store_limits = env.limits.limits if env.limits is not None else None
        time = self.store_limits.write_time if self.store_limits is not None else None
        compression = self.store_limits.compression if self.store_limits is not None else None
        self.compressing = compression is not None
        self.credit = compression.credit if compression is not None else 1.0
        self.limits = np.zeros(N_LIMITS, dtype=np.int64)
        self.limits[[WT_TOTAL, WT_PER_WRITE, WT_PER_KB]] = (-1, 0, 0) if time is None else (
            time.total, time.per_write, time.per_kb)
        self.limits[KINDS_LIMITED] = self.store_limits is not None and self.store_limits.kinds is not None
        self.limits[COMPRESSING] = self.compressing
        reward_fn = env.reward_fn
        self.weights = dict(reward_fn.weights)
        assert set(self.weights) <= set(REWARD_METRICS)
        self.codes = np.array([METRIC_CODES[name] for name in self.weights], dtype=np.int64)
        self.weight_values = np.array(list(self.weights.values()), dtype=np.float64)
        self.dense = reward_fn.dense
        self.oracle_at_start = reward_fn.oracle_at_start
        self.expire_cost = reward_fn.expire_cost
        self.penalties = np.zeros(n, dtype=np.float64)  # each sub-env's invalid_action_penalty
        self.memo = ContentMemo()
        self.arenas = Arenas(n)  # each compiled sub-env's episode arrays
        self.scalars = np.zeros((n, n_scalars(self.K)), dtype=np.int64)
        self.fscalars = np.zeros((n, N_FLOAT_SCALARS), dtype=np.float64)
        self.observations = np.zeros((n, env.observation_size), dtype=np.float32)
        self.masks = np.zeros((n, env.n_actions), dtype=np.bool_)
        self.compiled = np.zeros(n, dtype=np.bool_)  # sub-envs whose episode the kernel plays
        # (episode, budget) of each compiled sub-env: chosen by its single env, played here.
        self.pending: list[tuple[Any, int] | None] = [None] * n
        # Sub-envs whose single env reads its memory back from the core (``env.store``): the
        # vector env has them follow each step.
        self.readers: set[int] = set()
        # The core's own reward functions (labels, oracle) of compiled episodes.
        self.reward_fns = [env.reward_fn.fresh() for _ in range(n)]
        # Compiled episodes of sets read from files, by (episode object, budget): see _arrays.
        self.kept: dict[tuple[int, int], tuple[Any, ...]] = {}
        # Per sub-env, its kept episode's U*(B) once a close has computed it (a one-item list
        # shared with the kept entry; None: the episode is not kept). Held here as well, not
        # looked up at close: the entries may be dropped (see _arrays) while the episode plays.
        self.oracles: list[list[float | None] | None] = [None] * n
        self.unstarted: list[int] = []  # sub-envs the last ``start`` failed to start
        self._one: tuple[np.ndarray, ...] | None = None  # step_one's arrays
        # Sub-envs whose episode the core plays from its draws (``paper_episodes``,
        # ``contract_episodes``), without
        # making it, and scores on its arrays in half units (``drawn_batches.end_drawn``); and
        # their U*(B) when their reward function computed it at the start (a dense reward's;
        # None: not yet).
        self.drawn = np.zeros(n, dtype=np.bool_)
        self.known_oracles: list[float | None] = [None] * n
        # What a made episode that is not kept is scored on (``scored_labels``).
        self.labels: list[tuple[int, tuple[int, ...], np.ndarray, int] | None] = [None] * n
        # Processes preparing the next made episode of each sub-env (None: the core makes them).
        self.workers = EpisodeWorkers(workers, env.track, env.reward_fn, self.store_limits) if workers else None
        source = env.sampler.source
        if (self.workers is not None and isinstance(source, GeneratedEpisodes) and env.plays_compiled
                and self._replayer(source.recipe(0)) is None):  # episodes the core would make: start now
            self.workers.start()
        self._index()

    def _replayer(self, recipe: Any) -> Any:
        """``_from_draws(recipe)``; None for every recipe when the core does not replay generators,
        or with compression (a drawn episode has no summaries: it is made and read)."""
        return _from_draws(recipe) if self.replay and not self.compressing else None

    def _index(self) -> None:
        self.compiled_indices = np.flatnonzero(self.compiled)
        self.single_indices = np.flatnonzero(~self.compiled)

    def start(self, indices: Sequence[int], envs: Sequence[Any]) -> None:
        """The sub-envs ``indices`` were just reset: those whose episode was chosen but not started
        (``pending``) are compiled and observed; an episode the core cannot play, and a
        sub-env that was reset in full, is played by its single env. Making or reading an
        episode, or placing its arrays, may fail (say, out of memory): the other sub-envs are
        started all the same, the first error met is raised after, and the sub-envs that failed
        are listed in ``unstarted`` (played by their single env, which has no episode started:
        reset them again)."""
        ready: list[tuple[int, int]] = []
        self.unstarted, error = [], None
        batches: dict[int, tuple[Any, list[int], list[tuple[np.ndarray, ...]]]] = {}  # by generator config
        for i in indices:
            env = envs[i]
            self.compiled[i] = self.drawn[i] = False  # until its new episode is compiled
            self.penalties[i] = env.invalid_action_penalty
            self.oracles[i] = self.known_oracles[i] = None
            try:
                draws = self._batched(self.pending[i])
            except Exception:  # met again, and recorded, by the one-by-one path
                draws = None
            if draws is None:
                error = self._start_one(i, env, ready, error)
                continue
            config = self.pending[i][0].config
            batch = batches.get(id(config)) or batches.setdefault(id(config), (config, [], []))
            batch[1].append(i)
            batch[2].append(draws)
        for config, members, drawn in batches.values():
            for i in self._start_drawn(config, members, drawn):  # left to the one-by-one path
                error = self._start_one(i, envs[i], ready, error)
        self._index()
        self.unstarted.sort()
        if ready:
            started, budgets = zip(*ready)
            CODE.kernel.start_batch(np.array(started, dtype=np.int64), np.array(budgets, dtype=np.int64),
                                    self._kind_limits(budgets), self.credit, *self.arenas.buffers, self.arenas.spans,
                                    self.scalars, self.fscalars, self.masks, self.observations, self.K, self.cap,
                                    self.oldest, self.privileged, self.limits)
        if self.workers is not None:
            for i in indices:
                self._want_next(i, envs[i])
        if error is not None:
            raise error

    def _kind_limits(self, budgets: Sequence[int]) -> np.ndarray:
        """The content kinds' limits in bytes (-1: none) of sub-envs of ``budgets``, a row each."""
        limits = np.full((len(budgets), N_KINDS), -1, dtype=np.int64)
        shares = self.store_limits.kinds if self.store_limits is not None else None
        if shares is not None:
            for j, budget in enumerate(budgets):
                for kind, limit in shares.resolve(budget):
                    limits[j, KINDS.index(kind)] = limit
        return limits

    def _batched(self, chosen: tuple[Any, int] | None) -> tuple[np.ndarray, ...] | None:
        """The structure draws of a chosen episode that ``start_drawn`` starts with others (None:
        started on its own): a drawn one off the privileged track, its budget one float64 holds,
        for a reward function that needs nothing of the episode at its start (no U*(B)), without
        limits beside the byte budget (under them U*(B) is computed as the episode starts)."""
        if (chosen is None or self.privileged or self.oracle_at_start or not self.replay
                or self.store_limits is not None):
            return None
        recipe, budget = chosen
        if type(recipe) is not EpisodeRecipe or budget >= EXACT_INTS or not drawn_compilable(recipe):
            return None
        return structure_draws(recipe.config, recipe.seed, recipe.index)

    def _start_drawn(self, config: Any, members: list[int], draws: list[tuple[np.ndarray, ...]]) -> list[int]:
        """Start the drawn episodes of sub-envs ``members`` (of ``config``) in one call (a second
        for those whose arrays outgrew their segments); returns the sub-envs left to start one
        by one: all of them if a call failed (say, out of memory: one by one, a failure is its
        own sub-env's), else those too large for int32."""
        settings = unprivileged_settings(config)
        budgets = [self.pending[i][1] for i in members]
        try:
            outcome, need = self._drawn_call(members, draws, budgets, settings)
            grown = np.flatnonzero(outcome < 0).tolist()
            if grown:
                for j in grown:
                    self.arenas.fit(members[j], tuple(need[j].tolist()))
                outcome[grown] = self._drawn_call([members[j] for j in grown], [draws[j] for j in grown],
                                                  [budgets[j] for j in grown], settings)[0]
        except Exception:
            return members
        left = []
        for i, started in zip(members, outcome.tolist()):
            if started == 1:
                self.compiled[i] = self.drawn[i] = True
            else:
                left.append(i)
        return left

    def _drawn_call(self, members: list[int], draws: list[tuple[np.ndarray, ...]], budgets: list[int],
                    settings: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray]:
        # One config's episodes: each draw has the same shape in all of them.
        n_params, uniforms, endpoints = (np.stack(part) for part in zip(*draws))
        arenas = self.arenas
        return CODE.drawn_batches.start_drawn(np.array(members, dtype=np.int64), n_params, uniforms, endpoints,
                                              np.array(budgets, dtype=np.int64), *settings, *arenas.buffers,
                                              arenas.spans, arenas.capacity, self.scalars, self.fscalars, self.masks,
                                              self.observations, self.K, self.cap, self.oldest, self.privileged,
                                              self.limits)

    def _start_one(self, i: int, env: Any, ready: list[tuple[int, int]], error: Exception | None) -> Exception | None:
        """Compile sub-env ``i``'s chosen episode and place it (``ready`` to start), or start it
        in its single env; returns the first error of the ``start`` so far."""
        chosen = self.pending[i]
        arrays = None
        try:
            if chosen is not None:
                episode, budget = chosen
                if budget < EXACT_INTS:
                    arrays = self._arrays(i, env, episode, budget)
                if arrays is None:  # the single env plays it: start it now
                    env.start_episode(self._made(i), budget)
                    self.pending[i] = None
                else:
                    self.arenas.put(i, *arrays)
        except Exception as failure:
            self.pending[i] = None
            self.unstarted.append(i)
            return error or failure
        if arrays is None:
            self.copy_from(i, env)
            return error
        self.compiled[i] = True
        ready.append((i, budget))
        return error

    def _arrays(self, i: int, env: Any, episode: Any, budget: int) -> tuple[np.ndarray, np.ndarray, int] | None:
        """Sub-env ``i``'s static and float arrays for ``episode`` and its state's size (None:
        the core cannot play it), its reward
        function started. An episode of a set read from files comes back: its static arrays are
        kept (and copied into the sub-env's segments), and only its memory is made afresh; its
        U*(B), once computed, too."""
        reward_fn = self.reward_fns[i]
        recipe = episode if isinstance(episode, EpisodeRecipe) else None
        if recipe is not None:
            from_draws = self._replayer(episode)
            if from_draws is not None:
                drawn = from_draws(episode, env.track, reward_fn, budget, self.store_limits)
                if drawn is not None:
                    (static, floats, state), _ = drawn
                    self.drawn[i] = True
                    self.known_oracles[i] = reward_fn.known_oracle
                    return static, floats, len(state)
            prepared = self.workers.take(i, episode, budget) if self.workers is not None else None
            if prepared is not None:
                static, floats, state_size, self.labels[i], self.reward_fns[i] = prepared
                return static, floats, state_size
            episode = self._made(i)
        key = (id(episode), budget) if isinstance(env.sampler.source, EpisodeList) else None
        kept = self.kept.get(key) if key is not None else None
        if kept is not None and kept[0] is episode:
            _, static, floats, costs, state_size, oracle = kept
            self.oracles[i] = oracle
            if oracle[0] is None:  # close asks the reward function, until one close has told the entry
                reward_fn.start(episode, costs, budget, **limited(self.store_limits, budget, summary_costs(static)
                                                                  if self.compressing else None))
            return static, floats, state_size
        arrays = CODE.episode_arrays.read_and_compile(episode, env.track, self.memo, reward_fn, budget, recipe,
                                                      self.store_limits)
        if arrays is None:
            return None
        static, floats, state, costs = arrays
        if recipe is not None:
            # The made episode is not kept: held for as long as it plays, its thousands of
            # objects would reach the garbage collector's oldest generation, and every full
            # pass scans numba's objects too (tens of ms). It is made again if it is read
            # (``episode``); scoring needs only its labels.
            self.pending[i] = (recipe, budget)
            self.labels[i] = scored_labels(episode)
        if key is not None:
            if len(self.kept) >= min(_KEPT_EPISODES, _KEPT_PER_SUB_ENV * self.n):
                self.kept.clear()
            self.oracles[i] = [None]
            # The entry holds the episode, so its id stays its own while the entry lives.
            self.kept[key] = (episode, static, floats, costs, len(state), self.oracles[i])
        return static, floats, len(state)

    def _want_next(self, i: int, env: Any) -> None:
        """Have the workers prepare the episode sub-env ``i``'s next autoreset will choose, if
        the core plays the sub-env and would make that episode (a generated one it cannot
        compile from its draws)."""
        if self.compiled[i] and not self.drawn[i]:
            recipe, budget = env.sampler.peek(env.np_random), env.budget_bytes
            if recipe is not None and budget < EXACT_INTS and self._replayer(recipe) is None:
                self.workers.want(i, recipe, budget)

    def close_workers(self) -> None:
        if self.workers is not None:
            self.workers.close()

    def report_workers(self) -> None:
        """Warn once if the episode workers were dropped."""
        if self.workers is not None:
            self.workers.report()

    def _made(self, i: int) -> Any:
        """Sub-env ``i``'s chosen episode, made if it came as a recipe."""
        episode, budget = self.pending[i]
        if isinstance(episode, EpisodeRecipe):
            episode = CODE.contract_episodes.make(episode)
            self.pending[i] = (episode, budget)
        return episode

    def step(self, indices: np.ndarray, actions: np.ndarray, rewards: np.ndarray, terminated: np.ndarray,
             reasons: np.ndarray) -> int:
        """Advance the compiled sub-envs ``indices`` by their ``actions``; the reward of a step
        that ends an episode is filled in by ``close``. Returns -1, or the first of them whose
        episode was already over, and then advances none."""
        if self.workers is not None:  # between resets too: the workers get their next jobs as they finish
            self.workers.pump()
        return CODE.kernel.step_batch(indices, actions, *self.arenas.buffers, self.arenas.spans, self.scalars,
                               self.fscalars, self.masks, self.observations, rewards, terminated, reasons, self.K,
                               self.cap, self.oldest, self.privileged, self.dense, self.codes, self.weight_values,
                               self.penalties, self.expire_cost, self.limits)

    def close(self, indices: list[int], envs: Sequence[Any], rewards: np.ndarray) -> list[tuple[int, dict[str, Any]]]:
        """The final rewards (into ``rewards``) and metrics of the finished episodes of compiled
        sub-envs ``indices``, as ``(i, metrics)`` in their order."""
        metrics: dict[int, dict[str, Any]] = {}
        drawn = [i for i in indices if self.drawn[i]]
        if drawn:  # scored on their arrays, in one call
            known = [self.known_oracles[i] for i in drawn]
            counts = CODE.drawn_batches.end_drawn(np.array(drawn, dtype=np.int64), *self.arenas.buffers,
                                                  self.arenas.spans, self.scalars,
                                                  np.array([oracle is None for oracle in known]), MAX_COMBINATIONS)
            for i, oracle, (kept, tp, units, staleness, relevant, best) in zip(drawn, known, counts.tolist()):
                if oracle is None:
                    oracle = best / 2 if best >= 0 else self._scoring_oracle(i)
                row = self.scalars[i]
                metrics[i] = metric_row(int(row[S_LENGTH]), relevant, relevant, kept, tp, units / 2, float(staleness),
                                        oracle_utility=oracle, **_counted(row))
        closed = []
        for i in indices:
            if i not in metrics:
                static, _, state = self.arenas.views(i)
                row = self.scalars[i]
                metrics[i] = self._scored(i, envs[i], tuple(CODE.kernel.retained(static, state, row).tolist()),
                                          _counted(row))
            floats = self.fscalars[i]
            reward = closing_reward(terminal_reward(self.weights, metrics[i]) - floats[F_PENALTIES], floats[F_PAID])
            floats[F_PAID] += reward
            rewards[i] = reward
            closed.append((i, metrics[i]))
        return closed

    def _scoring_oracle(self, i: int) -> float:
        """U*(B) of sub-env ``i``'s drawn episode from its arrays, by ``scoring.oracle``."""
        static, floats, _ = self.arenas.views(i)
        T, costs, utilities = int(static[H_LENGTH]), int(static[H_STATIC + COST]), int(floats[UTILITY])
        return oracle_utility(static[costs:costs + T].astype(np.int64), floats[utilities:utilities + T],
                              int(self.scalars[i, S_BUDGET]))

    def _scored(self, i: int, env: Any, retained: tuple[int, ...], counted: dict[str, int]) -> dict[str, Any]:
        """The metrics of sub-env ``i``'s finished episode that retains ``retained``: a made one (on
        its labels)."""
        chosen = self.pending[i]
        if chosen is not None and isinstance(chosen[0], EpisodeRecipe):
            labels = self.labels[i]
        else:
            labels = scored_labels(env.episode if chosen is None else chosen[0])
        known = self.oracles[i]
        if known is None or known[0] is None:
            oracle = self.reward_fns[i].oracle_utility()  # a dense reward's oracle has it already
            if known is not None:
                known[0] = oracle  # an episode that comes back at this budget has this U*(B)
        else:
            oracle = known[0]
        if self.compressing:  # the compressed items retained count their credit
            static, _, state = self.arenas.views(i)
            parents = state[int(static[H_STATE + PARENT]) + np.array(retained, dtype=np.int64)]
            counted = {**counted, "compressed": [t for t, p in zip(retained, parents.tolist()) if p == COMPRESSED],
                       "credit": self.credit}
        return metrics_of_labels(*labels, retained, oracle_utility=oracle, **counted).as_row()

    def start_chosen(self, i: int, episode: Any, budget: int, envs: Sequence[Any]) -> None:
        """Start sub-env ``i`` on the ``episode`` (or recipe) and budget its single env chose
        (``start``: on its Python parts if the core cannot read the episode)."""
        self.pending[i] = (episode, budget)
        self.start([i], envs)

    def clock(self, i: int) -> tuple[int, int, int, int]:
        """Compiled sub-env ``i``'s timestep, episode length, budget and bytes used."""
        t, length, budget, used = self.scalars[i, :_CLOCK_END].tolist()  # one call for the four
        return t, length, budget, used

    def step_one(self, i: int, action: int, envs: Sequence[Any]) -> tuple[float, bool, int, dict[str, Any] | None]:
        """Advance compiled sub-env ``i`` alone: the reward, whether the episode ended, the
        refusal's code (0: accepted; ``layout.REASONS``) and the final metrics (None before the
        end); a ``RuntimeError`` if its episode was over."""
        one = self._one
        if one is None:
            n = self.n
            one = self._one = (np.zeros(1, dtype=np.int64), np.zeros(n, dtype=np.int64),
                               np.zeros(n, dtype=np.float64), np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.int8))
        indices, actions, rewards, terminated, codes = one
        indices[0], actions[i] = i, action
        if self.step(indices, actions, rewards, terminated, codes) >= 0:
            raise RuntimeError("the episode is over: call reset() before step()")
        if terminated[i]:
            metrics = self.close([i], envs, rewards)[0][1]  # the final reward too
            return float(rewards[i]), True, int(codes[i]), metrics
        return float(rewards[i]), False, int(codes[i]), None

    def episode(self, i: int) -> Any:
        """Sub-env ``i``'s current episode (compiled: made now if it came as a recipe)."""
        return self._made(i)

    def oracle(self, i: int) -> float:
        """U*(B) of compiled sub-env ``i``'s episode at its budget (computed once)."""
        if self.drawn[i]:
            if self.known_oracles[i] is None:
                self.known_oracles[i] = self._scoring_oracle(i)
            return self.known_oracles[i]
        known = self.oracles[i]
        if known is not None and known[0] is not None:
            return known[0]
        oracle = self.reward_fns[i].oracle_utility()
        if known is not None:
            known[0] = oracle
        return oracle

    def decisions(self, i: int) -> np.ndarray:
        """Compiled sub-env ``i``'s actions this episode and what each did (``kernel.decisions``): a copy."""
        static, _, state = self.arenas.views(i)
        return CODE.kernel.decisions(static, state, self.scalars[i]).copy()

    def slots(self, i: int) -> list[int]:
        """The timesteps of the items compiled sub-env ``i`` shows, slot 0 first."""
        row = self.scalars[i]
        return row[S_SLOTS:S_SLOTS + row[S_SHOWN]].tolist()

    def item_cost(self, i: int, t: int) -> int:
        """Bytes of compiled sub-env ``i``'s item stored at step ``t`` (-1: none)."""
        static, _, state = self.arenas.views(i)
        return int(state[int(static[H_STATE + ITEM_COST]) + t])

    def step_details(self, i: int, t: int) -> tuple[int, int, float | None]:
        """``WritePolicyBenchEnv.step_details`` of compiled sub-env ``i``'s step ``t``."""
        static, floats, _ = self.arenas.views(i)
        kind = int(static[int(static[H_STATIC + KIND]) + t])
        cost = int(static[int(static[H_STATIC + COST]) + t])
        priority = float(floats[int(floats[PRIORITY]) + t]) if self.privileged else None
        return kind, cost, priority

    def expose(self, i: int, t: int) -> None:
        """Show compiled sub-env ``i``'s stored item ``t`` in the last slot (``expose_item``)."""
        static, floats, state = self.arenas.views(i)
        CODE.kernel.expose(static, floats, state, self.scalars[i], self.K, self.cap, self.privileged,
                           self.limits, self.observations[i], self.masks[i], t)

    def leave(self, i: int) -> None:
        """Sub-env ``i``'s single env plays its own episode from now on (``start_episode``)."""
        if self.workers is not None:
            self.workers.forget(i)
        self.compiled[i] = self.drawn[i] = False
        self.pending[i] = None
        self.arenas.release(i)
        self._index()

    def copy_from(self, i: int, env: Any) -> None:
        """Sub-env ``i`` is played by its single env: take its observation and mask."""
        encoder = env.observation_encoder
        row = self.observations[i]
        flat = np.frombuffer(encoder.obs_bytes, dtype=np.float32)
        row[:flat.shape[0]] = flat
        if flat.shape[0] < row.shape[0]:
            row[flat.shape[0]:] = env.limit_features()
        self.masks[i] = np.frombuffer(encoder.mask, dtype=np.bool_)

    def t(self) -> np.ndarray:
        return self.scalars[:, S_T]

    def bytes_used(self) -> np.ndarray:
        return self.scalars[:, S_USED]
