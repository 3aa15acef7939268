"""The hindsight bounds of a run, whatever it has beside its byte budget: the one place that
chooses between the plain oracle (``oracle``), the bounds under kind budgets (``kind_bounds``),
those under write time (``time_bounds``) and those with compressed writes
(``compression_bounds``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ..core.compression import Compression
from ..core.kind_budgets import KindBudgets
from ..core.store_limits import StoreLimits
from ..core.tracks import track_costs
from ..core.types import Episode
from ..core.write_time import WriteTime
from .compression_bounds import compressed_costs, compression_f1_bound, compression_oracle_utility
from .kind_bounds import kind_f1_bound, kind_oracle_utility, step_kinds
from .oracle import EpisodeOracle, check_budgets, episode_oracle, oracle_curve, oracle_utility
from .time_bounds import time_f1_bound, time_oracle_utility


def utility_within(costs: Sequence[int] | np.ndarray, utilities: Sequence[float] | np.ndarray, budget: int,
                   kinds: KindBudgets | None = None, write_time: WriteTime | None = None,
                   kinds_of_steps: Sequence[str] | None = None, compression: Compression | None = None,
                   compressed: Sequence[int] | np.ndarray | None = None) -> float:
    """U*(B) within ``kinds`` (with each step's content kind, ``kinds_of_steps``) or
    ``write_time``, or with ``compression`` (each step's compressed cost, ``compressed``), or
    within the budget alone."""
    if kinds:
        if kinds_of_steps is None:
            raise ValueError("utility_within: kind budgets need each step's content kind (kinds_of_steps)")
        return kind_oracle_utility(costs, kinds_of_steps, utilities, budget, kinds).utility
    if write_time is not None:
        return time_oracle_utility(costs, utilities, budget, write_time).utility
    if compression is not None:
        if compressed is None:
            raise ValueError("utility_within: compression needs each step's compressed cost (compressed)")
        return compression_oracle_utility(costs, compressed, utilities, budget, compression.credit).utility
    return oracle_utility(costs, utilities, budget)


def episode_oracle_within(episode: Episode, budgets: Iterable[int], track: str,
                          limits: StoreLimits | None = None) -> EpisodeOracle:
    """``oracle.episode_oracle`` within ``limits`` (kind budgets resolved at each budget, write
    time, or compression): their F1 bound and U* per budget; ``curve`` stays the byte budget's
    alone (with compression, not a bound: compressed writes can keep more)."""
    if not limits:
        return episode_oracle(episode, budgets, track)
    budgets = check_budgets(budgets)
    costs = track_costs(episode, track)
    curve = oracle_curve(costs, episode.utilities, budgets)
    if limits.kinds is not None:
        of_steps = step_kinds(episode)
        resolved = {b: limits.kinds.resolve(b) for b in budgets}
        bounds = {b: kind_f1_bound(costs, of_steps, episode.critical_steps, b, resolved[b]) for b in budgets}
        utilities = {b: utility_within(costs, episode.utilities, b, kinds=resolved[b], kinds_of_steps=of_steps)
                     for b in budgets}
    elif limits.compression is not None:
        credit = limits.compression.credit
        compressed = compressed_costs(episode, track)
        bounds = {b: compression_f1_bound(costs, compressed, episode.critical_steps, b, credit) for b in budgets}
        utilities = {b: utility_within(costs, episode.utilities, b, compression=limits.compression,
                                       compressed=compressed) for b in budgets}
    else:
        time = limits.write_time
        bounds = {b: time_f1_bound(costs, episode.critical_steps, b, time) for b in budgets}
        utilities = {b: utility_within(costs, episode.utilities, b, write_time=time) for b in budgets}
    return EpisodeOracle(track=track, costs=costs, curve=curve, f1_bounds=bounds, kind_utilities=utilities)
