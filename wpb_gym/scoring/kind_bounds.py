"""The hindsight bounds under hierarchical budgets: a total and a limit per content kind.

``kind_f1_bound``: the best F1 a WRITE-only policy reaches when each kind's steps must fit its
own limit and all of them the total. Every critical step is worth the same to F1, so some best
set keeps, in each kind, that kind's cheapest critical steps; of the cheapest ``m_k`` that fit
kind ``k``'s limit, taking them in one order of cost across kinds while the total allows is
optimal (exchange argument: a kept step of kind ``k`` can always be swapped for a cheaper
allowed one of any kind). Exact.

``kind_oracle_utility``: U*(B, limits), the best total utility of a WRITE-only set that fits
both. Steps of different kinds only meet in the total, so for each kind (the kinds without a
limit form one group limited by the total) a DP over utility units gives ``need_k[v]``, the
least bytes of a set of that kind worth at least ``v`` units within its limit; a min-plus
convolution of the groups' curves gives the least bytes for ``v`` units in all, and U* is the
largest ``v`` whose bytes fit the total. Exact whenever the utilities are multiples of a
common unit (every generated and every shipped episode). Otherwise no unit indexes the DP and
the answer is an upper bound, the least of U*(B) without the kind limits and the sum of each
group's own U* at its limit; ``LimitedBound.exact`` says which.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..core.kind_budgets import KindBudgets, content_kind
from ..core.types import Episode
from .oracle import (
    F1Bound,
    as_arrays,
    lp_bound,
    oracle_utility,
    oracle_write_set,
    utility_unit_scale,
)

_UNLIMITED = "(no limit)"
_INFEASIBLE = 1 << 60  # bytes of a utility no set reaches: far above any budget, far below int64's limit


def step_kinds(episode: Episode) -> list[str]:
    """The content kind of each step (a track changes metadata, never the kind)."""
    return [content_kind(step.observation) for step in episode.steps]


@dataclass(frozen=True)
class LimitedBound:
    """U* under limits beside the budget (kind budgets, write time), and whether it is the optimum
    (else an upper bound on it)."""

    utility: float
    exact: bool


def _groups(kinds: Sequence[str], budget: int, limits: KindBudgets) -> dict[str, tuple[np.ndarray, int]]:
    """The steps of each limited kind with its limit (capped by the total), and the steps of
    every kind without a limit as one group limited by the total."""
    index: dict[str, list[int]] = {}
    for t, kind in enumerate(kinds):
        key = kind if limits.limit(kind) is not None else _UNLIMITED
        index.setdefault(key, []).append(t)
    groups = {}
    for key, steps in index.items():
        limit = budget if key == _UNLIMITED else min(budget, limits.limit(key))  # type: ignore[type-var]
        groups[key] = (np.asarray(steps, dtype=np.int64), limit)
    return groups


def kind_f1_bound(costs: Sequence[int], kinds: Sequence[str], critical_steps: Iterable[int], budget: int,
                  limits: KindBudgets | None) -> F1Bound:
    """The best F1 of a WRITE-only policy within ``budget`` and each kind's limit (exact)."""
    w = np.asarray(costs, dtype=np.int64)
    if len(kinds) != w.size:
        raise ValueError(f"costs and kinds differ in length ({w.size} vs {len(kinds)})")
    crit = sorted(set(int(t) for t in critical_steps))
    relevant = len(crit)
    if relevant == 0:
        return F1Bound(0.0, 0.0, 0.0, 0, 0)
    allowed: list[int] = []
    for key, (steps, limit) in _groups([kinds[t] for t in crit], budget, limits or KindBudgets(())).items():
        own = np.sort(w[crit][steps])
        fits = int(np.searchsorted(np.cumsum(own), limit, side="right"))
        allowed.extend(own[:fits].tolist())
    kept = int(np.searchsorted(np.cumsum(sorted(allowed)), budget, side="right")) if allowed else 0
    if kept == 0:
        return F1Bound(0.0, 0.0, 0.0, 0, relevant)
    return F1Bound(2.0 * kept / (kept + relevant), kept / relevant, 1.0, kept, relevant)


def kind_oracle_utility(costs: Sequence[int], kinds: Sequence[str], utilities: Sequence[float], budget: int,
                        limits: KindBudgets | None) -> LimitedBound:
    """U* of a WRITE-only set within ``budget`` and each kind's limit (see the module docstring)."""
    w, u = as_arrays(costs, utilities)
    solution = _solve(w, u, kinds, budget, limits)
    if solution is None:
        groups = _groups(kinds, budget, limits or KindBudgets(()))
        whole = oracle_utility(w, u, budget)
        parts = sum(oracle_utility(w[steps], u[steps], limit) for steps, limit in groups.values())
        return LimitedBound(min(whole, parts), False)
    return LimitedBound(solution.best / solution.scale, True)


def kind_oracle_write_set(costs: Sequence[int], kinds: Sequence[str], utilities: Sequence[float], budget: int,
                          limits: KindBudgets | None) -> tuple[int, ...]:
    """A WRITE set (timesteps, sorted) worth ``kind_oracle_utility``'s U* within ``budget`` and
    each kind's limit. Without a common utility unit: each group's own optimum at its limit,
    then the least valuable per byte dropped until the total fits (feasible, not always optimal)."""
    w, u = as_arrays(costs, utilities)
    solution = _solve(w, u, kinds, budget, limits)
    chosen: list[int] = []
    if solution is None:
        for steps, limit in _groups(kinds, budget, limits or KindBudgets(())).values():
            chosen += [int(steps[i]) for i in oracle_write_set(w[steps], u[steps], limit)]
        chosen.sort(key=lambda t: (u[t] / w[t] if w[t] else math.inf, -t))
        while int(w[chosen].sum()) > budget:
            chosen.pop(0)
        return tuple(sorted(chosen))
    # Back through the convolutions: the units each group contributes to the optimum.
    v = solution.best
    for i in range(len(solution.curves) - 1, -1, -1):
        before, curve, after = solution.combined[i], solution.curves[i][2], solution.combined[i + 1]
        x = next(x for x in range(max(0, v - curve.size + 1), min(v, before.size - 1) + 1)
                 if before[x] + curve[v - x] == after[v])
        steps, _, _ = solution.curves[i]
        # The group's best set within the bytes its share of the optimum needs is worth at least that share.
        chosen += [int(steps[j]) for j in oracle_write_set(w[steps], u[steps], int(curve[v - x]))] if v > x else []
        v = x
    return tuple(sorted(chosen))


@dataclass(frozen=True)
class _Solution:
    scale: int
    curves: list[tuple[np.ndarray, int, np.ndarray]]  # (steps, limit, need curve) per group
    combined: list[np.ndarray]  # combined[i]: the first i groups' least bytes per units
    best: int  # the optimum, in units


def _solve(w: np.ndarray, u: np.ndarray, kinds: Sequence[str], budget: int, limits: KindBudgets | None
           ) -> _Solution | None:
    """The groups' curves and their convolutions, or None without a common utility unit."""
    if len(kinds) != w.size:
        raise ValueError(f"costs and kinds differ in length ({w.size} vs {len(kinds)})")
    if budget < 0:
        raise ValueError(f"budget must be a non-negative int, got {budget}")
    useful = (u > 0) & (w <= budget)
    scale = utility_unit_scale(u[useful]) if useful.any() else 1
    if scale is None:
        return None
    units = np.rint(u * scale).astype(np.int64)
    curves, combined = [], [np.zeros(1, dtype=np.int64)]
    for steps, limit in _groups(kinds, budget, limits or KindBudgets(())).values():
        curve = _need_curve(w[steps], units[steps], limit)
        curves.append((steps, limit, curve))
        combined.append(_min_plus(combined[-1], curve, budget))
    return _Solution(scale, curves, combined, int(np.flatnonzero(combined[-1] <= budget).max()))


def _need_curve(w: np.ndarray, units: np.ndarray, limit: int) -> np.ndarray:
    """``need[v]``: the least bytes of a subset worth at least ``v`` units within ``limit``
    (``_INFEASIBLE`` where none is), for ``v`` up to what the fractional bound allows."""
    useful = (units > 0) & (w <= limit)
    w, units = w[useful], units[useful]
    infeasible = _INFEASIBLE
    if not w.size:
        return np.zeros(1, dtype=np.int64)
    scale_bound = lp_bound(w, units.astype(np.float64), limit)
    cap = int(min(int(units.sum()), math.floor(scale_bound * (1 + 1e-9) + 1e-6)))
    need = np.full(cap + 1, infeasible, dtype=np.int64)
    need[0] = 0
    for k, wt in zip(units.tolist(), w.tolist(), strict=True):
        if k <= cap:
            np.minimum(need[k:], need[:cap + 1 - k] + wt, out=need[k:])  # the sum is a new array: old values
        np.minimum(need[1:min(k, cap + 1)], wt, out=need[1:min(k, cap + 1)])
    need[need > limit] = infeasible
    # "At least v units": a cheaper set worth more also serves v.
    return np.minimum.accumulate(need[::-1])[::-1]


def _min_plus(a: np.ndarray, b: np.ndarray, budget: int) -> np.ndarray:
    """``out[v] = min over x + y = v of a[x] + b[y]``, cut where nothing fits ``budget``."""
    out = np.full(a.size + b.size - 1, _INFEASIBLE, dtype=np.int64)
    for x, cost in enumerate(a.tolist()):
        if cost <= budget:
            np.minimum(out[x:x + b.size], b + cost, out=out[x:x + b.size])
    fits = np.flatnonzero(out <= budget)
    return out[: int(fits.max()) + 1]
