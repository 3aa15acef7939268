"""The hindsight bounds under a write-time budget (``wpb_gym.core.write_time``).

A WRITE-only set ``S`` fits when its bytes fit the budget and its writes' ticks
(``per_write + ceil(bytes * per_kb / 1024)`` each) fit the episode's ``total``. Both weights
grow with a step's bytes.

``time_f1_bound``: every critical step counts the same, and the cheapest ``k`` critical steps
by bytes also take the fewest ticks of any ``k`` (each step's ticks grow with its bytes), so
the best F1 keeps the most cheapest critical steps that fit both. Exact.

``time_oracle_utility``: a knapsack with two weights. A dynamic programme over (ticks, utility
units) keeps the fewest bytes of a set worth at least ``v`` units within ``τ`` ticks; U* is
the most units whose bytes fit the budget within ``total`` ticks. Exact whenever the
utilities share a common unit (every generated and shipped episode); otherwise the least of
U* without the time limit and the best utility of the steps that fit in time (the bytes
ignored) bounds it from above, and ``LimitedBound.exact`` is False; so it does where the
programme would be too large (long episodes with much write time: more than 2e9 cells).
``time_oracle_write_set`` recovers a set that reaches it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from ..core.write_time import WriteTime
from .kind_bounds import LimitedBound
from .oracle import (
    F1Bound,
    as_arrays,
    lp_bound,
    oracle_utility,
    oracle_write_set,
    utility_unit_scale,
)

_INFEASIBLE = 1 << 60
# Most cells the DP may touch in all ((ticks + 1) x (units + 1) per item): about a minute of
# work and, with the decisions kept, their bytes. Beyond it the bound is the upper one.
_MAX_CELLS = 2_000_000_000


def step_ticks(costs: np.ndarray, write_time: WriteTime) -> np.ndarray:
    """The ticks a WRITE of each step takes."""
    costs = np.asarray(costs, dtype=np.int64)
    return write_time.per_write + -(-costs * write_time.per_kb // 1024)


def time_f1_bound(costs: Sequence[int], critical_steps: Iterable[int], budget: int, write_time: WriteTime) -> F1Bound:
    """The best F1 of a WRITE-only policy within ``budget`` bytes and the write time (exact)."""
    w = np.asarray(costs, dtype=np.int64)
    crit = sorted(set(int(t) for t in critical_steps))
    relevant = len(crit)
    if relevant == 0:
        return F1Bound(0.0, 0.0, 0.0, 0, 0)
    cheapest = np.sort(w[crit])
    fits_bytes = int(np.searchsorted(np.cumsum(cheapest), budget, side="right"))
    fits_time = int(np.searchsorted(np.cumsum(step_ticks(cheapest, write_time)), write_time.total, side="right"))
    kept = min(fits_bytes, fits_time)
    if kept == 0:
        return F1Bound(0.0, 0.0, 0.0, 0, relevant)
    return F1Bound(2.0 * kept / (kept + relevant), kept / relevant, 1.0, kept, relevant)


def time_oracle_utility(costs: Sequence[int], utilities: Sequence[float], budget: int,
                        write_time: WriteTime) -> LimitedBound:
    """U* of a WRITE-only set within ``budget`` bytes and the write time (see the module docstring)."""
    w, u = as_arrays(costs, utilities)
    solved = _solve(w, u, budget, write_time, keep_decisions=False)
    if solved is None:
        ticks = step_ticks(w, write_time)
        in_time = oracle_utility(ticks, u, write_time.total)  # the ticks as the only weight
        return LimitedBound(min(oracle_utility(w, u, budget), in_time), False)
    scale, best, _ = solved
    return LimitedBound(best / scale, True)


def time_oracle_write_set(costs: Sequence[int], utilities: Sequence[float], budget: int,
                          write_time: WriteTime) -> tuple[int, ...]:
    """A WRITE set (timesteps, sorted) worth ``time_oracle_utility``'s U*. Without a common
    utility unit: the byte optimum, then its least valuable per tick dropped until it fits in
    time (feasible, not always optimal)."""
    w, u = as_arrays(costs, utilities)
    solved = _solve(w, u, budget, write_time, keep_decisions=True)
    ticks = step_ticks(w, write_time)
    if solved is None:
        chosen = sorted(oracle_write_set(w, u, budget), key=lambda t: (u[t] / ticks[t] if ticks[t] else math.inf, -t))
        while int(ticks[chosen].sum()) > write_time.total:
            chosen.pop(0)
        return tuple(sorted(chosen))
    _, best, (items, units, decisions, total) = solved
    chosen = []
    tau, v = total, best
    for t, row in zip(reversed(items), reversed(decisions), strict=True):
        if v == 0:
            break
        if row[tau, v]:
            chosen.append(int(t))
            tau -= int(ticks[t])
            v = max(0, v - int(units[t]))
    return tuple(sorted(chosen))


def _solve(w: np.ndarray, u: np.ndarray, budget: int, write_time: WriteTime, keep_decisions: bool):
    """(scale, the optimum in units, (items, units, decision rows)) or None without a common unit.

    ``need[τ, v]``: the fewest bytes of a set worth at least ``v`` units within ``τ`` ticks."""
    if budget < 0:
        raise ValueError(f"budget must be a non-negative int, got {budget}")
    ticks = step_ticks(w, write_time)
    useful = (u > 0) & (w <= budget) & (ticks <= write_time.total)
    if not useful.any():
        return 1, 0, ([], np.zeros(0, dtype=np.int64), [], 0)
    scale = utility_unit_scale(u[useful])
    if scale is None:
        return None
    units = np.rint(u * scale).astype(np.int64)
    items = np.flatnonzero(useful)
    cap = int(min(int(units[items].sum()), math.floor(lp_bound(w[items], units[items].astype(np.float64), budget)
                                                        * (1 + 1e-9) + 1e-6)))
    # Ticks past what every useful step together takes change nothing: the rows stop there.
    total = min(write_time.total, int(ticks[items].sum()))
    cells = (total + 1) * (cap + 1)
    if cells * items.size > _MAX_CELLS or (keep_decisions and cells * items.size > _MAX_CELLS // 16):
        return None
    need = np.full((total + 1, cap + 1), _INFEASIBLE, dtype=np.int64)
    need[:, 0] = 0
    decisions = []
    for t in items.tolist():
        k, wt, tk = int(units[t]), int(w[t]), int(ticks[t])
        old = need.copy() if keep_decisions or tk == 0 else need
        # The item on top of the best set of tk fewer ticks: "at least v" units, so for v < k
        # the item alone (on the empty set) serves.
        shifted = old[: need.shape[0] - tk]
        candidate = np.empty_like(shifted)
        candidate[:, min(k, cap + 1):] = shifted[:, : max(cap + 1 - k, 0)] + wt
        candidate[:, : min(k, cap + 1)] = wt
        candidate[:, 0] = 0
        target = need[tk:]
        np.minimum(target, candidate, out=target)
        if keep_decisions:
            decisions.append(need < old)
    fits = np.flatnonzero(need[total] <= budget)
    return scale, int(fits.max()), (items, units, decisions, total)

