"""Oracle-track agents: upper bounds that choose their WRITEs from the hidden labels.

``utility_greedy`` picks steps greedily by utility, ``oracle_optimal`` an exact WRITE-only
knapsack optimum (``wpb_gym.scoring.oracle``). The runner hands the labelled episode to
oracle-track policies only.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Iterator

import numpy as np

from wpb_gym.core.kind_budgets import KindBudgets
from wpb_gym.core.policy import EpisodeContext
from wpb_gym.core.store import StoreView
from wpb_gym.core.tracks import track_costs
from wpb_gym.core.types import MemoryAction, Step
from wpb_gym.core.write_time import WriteTime
from wpb_gym.scoring.compression_bounds import compressed_costs, compression_oracle_write_set
from wpb_gym.scoring.kind_bounds import kind_oracle_write_set, step_kinds
from wpb_gym.scoring.oracle import oracle_write_set
from wpb_gym.scoring.time_bounds import time_oracle_write_set

from ..base import BaselineAgent


class _OracleAgent(BaselineAgent):
    """An agent that decides its WRITE set from the hidden labels at episode start."""

    track = "oracle"
    kind = "oracle"

    def __init__(self) -> None:
        self._write_set: frozenset[int] | None = None
        self._compressed_set: frozenset[int] = frozenset()

    def start_episode(self, context: EpisodeContext) -> None:
        if context.episode is None:
            raise ValueError(
                f"{self.name} is an oracle-track agent: it needs the episode with its hidden labels "
                "(EpisodeContext.episode), which the runner gives oracle-track policies only"
            )
        costs = track_costs(context.episode, context.track)
        self._compressed_set = frozenset()
        if context.compression is not None:
            plain, compressed = self._choose_compressed(costs, context.episode.utilities, context)
            self._compressed_set = frozenset(int(t) for t in compressed)
        else:
            plain = self._choose(costs, context.episode.utilities, context)
        self._write_set = frozenset(int(t) for t in plain) | self._compressed_set

    @abstractmethod
    def _choose(self, costs: np.ndarray, utilities: np.ndarray, context: EpisodeContext) -> Iterable[int]:
        """The timesteps to WRITE in this episode."""

    def _choose_compressed(self, costs: np.ndarray, utilities: np.ndarray,
                           context: EpisodeContext) -> tuple[Iterable[int], Iterable[int]]:
        """With compressed writes allowed: (the steps to WRITE plainly, those to WRITE
        compressed). By default the plain choice, none compressed."""
        return self._choose(costs, utilities, context), ()

    @property
    def write_set(self) -> tuple[int, ...]:
        """The timesteps chosen for the current episode (sorted)."""
        return tuple(sorted(self._write_set or ()))

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        if self._write_set is None:
            raise RuntimeError(f"{self.name}: start_episode(context) must be called before select()")
        if step.t in self._compressed_set:
            yield MemoryAction.write_compressed(step, reason="chosen in hindsight, compressed")
        elif step.t in self._write_set:
            yield MemoryAction.write(step, reason="chosen in hindsight")


class UtilityGreedy(_OracleAgent):
    """``utility_greedy`` (oracle track): WRITE the steps a greedy-by-utility knapsack picks.

    At episode start, steps with positive hidden utility are sorted by utility (highest
    first; ties: cheaper WRITE on the run's track first, then earlier) and taken one by one
    when their cost still fits in what the budget has left; a step that does not fit is
    passed over and the scan goes on with the next. The chosen steps are written when they
    come (their total cost fits the budget, so every WRITE is accepted). Steps of zero
    utility are never chosen: they cannot add utility and cost bytes.
    """

    name = "utility_greedy"
    aliases = ("UtilityGreedy",)
    description = "Oracle: writes the steps picked greedily by hidden utility (ties: cheaper, then earlier)."

    def _choose(self, costs: np.ndarray, utilities: np.ndarray, context: EpisodeContext) -> Iterable[int]:
        order = sorted(range(len(costs)), key=lambda t: (-float(utilities[t]), int(costs[t]), t))
        left = int(context.budget_bytes)
        # With hierarchical budgets a step must fit its kind's limit too; with write time, the
        # time left.
        limits = dict(context.kind_budgets or {})
        kinds = step_kinds(context.episode) if limits else None  # type: ignore[arg-type]
        write_time = WriteTime(**context.write_time) if context.write_time else None
        ticks_left = write_time.total if write_time else 0
        chosen = []
        for t in order:
            if utilities[t] <= 0:
                break
            kind = kinds[t] if kinds is not None else None
            ticks = write_time.ticks(int(costs[t])) if write_time else 0
            if costs[t] <= left and (kind not in limits or costs[t] <= limits[kind]) and ticks <= ticks_left:
                chosen.append(t)
                left -= int(costs[t])
                ticks_left -= ticks
                if kind in limits:
                    limits[kind] -= int(costs[t])
        return chosen


class OracleOptimal(_OracleAgent):
    """``oracle_optimal`` (oracle track): WRITE exactly ``oracle_write_set(costs, utilities, budget)``.

    The exact WRITE-only knapsack optimum U*(B) on the run track's WRITE costs: its retained
    utility equals the ``oracle_utility`` the metrics' regret is measured against. With
    hierarchical budgets, the optimum within each kind's limit too (``kind_oracle_write_set``);
    with a write-time budget, within it (``time_oracle_write_set``); with compressed writes
    allowed, the optimum choosing for each step plain, compressed or neither
    (``compression_oracle_write_set``).
    """

    name = "oracle_optimal"
    aliases = ("OracleOptimal",)
    description = "Oracle: writes an exact WRITE-only knapsack optimum of hidden utility (an upper bound)."

    def _choose(self, costs: np.ndarray, utilities: np.ndarray, context: EpisodeContext) -> Iterable[int]:
        if context.write_time:
            return time_oracle_write_set(costs, utilities, int(context.budget_bytes), WriteTime(**context.write_time))
        if context.kind_budgets:
            return kind_oracle_write_set(costs, step_kinds(context.episode), utilities,  # type: ignore[arg-type]
                                         int(context.budget_bytes), KindBudgets.of(context.kind_budgets))
        return oracle_write_set(costs, utilities, int(context.budget_bytes))

    def _choose_compressed(self, costs: np.ndarray, utilities: np.ndarray,
                           context: EpisodeContext) -> tuple[Iterable[int], Iterable[int]]:
        compressed = compressed_costs(context.episode, context.track)  # type: ignore[arg-type]
        return compression_oracle_write_set(costs, compressed, utilities, int(context.budget_bytes),
                                            float(context.compression["credit"]))  # type: ignore[index]
