"""The hindsight oracle: exact WRITE-only knapsack optimum U*(B), its prefix curve, its set.

U*(B) = max over subsets S of the steps of sum(u_t, t in S) subject to sum(w_t, t in S) <= B,
with w_t the WRITE cost (``estimate_bytes`` on the track's view) and u_t the hidden utility.
The paper's implementation is exact up to 2 KB and greedy above; this one is exact at every
budget and length.

Method. The generators' utilities are small multiples of a common unit (0.5 in the paper),
so the DP is indexed by *utility* instead of bytes: ``need[U]`` is the least weight of a
subset worth at least ``U`` units, updated item by item in time order with one vectorised
``numpy.minimum``. ``need`` is non-decreasing, so after item t every budget is answered by a
binary search — which gives U*(B, t) for all prefixes and all budgets in the same pass. The
array only has to reach the LP (fractional) bound at the largest budget asked for, so its size
follows what the budget can buy, not the episode. When utilities share no small unit (or when
it is cheaper) the classic byte-indexed DP is used instead; both are exact.

Limits. Utilities above ``MAX_UTILITY`` (1e12, the loader's bound too) are refused with a
``ValueError`` naming the step and the limit. The methods that count utility in integer
units (int64, and float64 for the DP's answers) are used only while the units of all steps
together stay below ``_MAX_UNITS`` = 2**50: far from int64's 9.2e18, and where float64 still
holds every count exactly and ``rint(u * scale)`` recovers each step's units. Beyond it (say
1e12 in units of 1/10,000) the byte-indexed DP answers, whose sums are float64 like every
other utility sum. No input gives a wrapped-around integer: 9.3e18 once came back as 1.0.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Sequence

import numpy as np

from ..core.tracks import track_costs
from ..core.types import MAX_UTILITY, Episode

# Largest denominator accepted for the utility unit (0.5 -> 2, 0.25 -> 4, 1/3 -> 3, 0.01 -> 100).
_MAX_UNIT_DENOMINATOR = 10_000
# Most units all steps together may hold for the unit-counting methods (see the module docstring).
_MAX_UNITS = 2**50
# "auto" picks the cheaper of the two exact DPs; the others force one (for tests and benchmarks).
_METHODS = ("auto", "utility", "bytes")


@dataclass(frozen=True)
class OracleCurve:
    """U*(B) for each budget and the prefix curve U*(B, t) over steps 0..t."""

    budgets: tuple[int, ...]
    final: np.ndarray  # shape (len(budgets),)
    prefix: np.ndarray  # shape (len(budgets), T); prefix[:, -1] == final

    def at(self, budget: int) -> float:
        return float(self.final[self.budgets.index(budget)])


@dataclass(frozen=True)
class F1Bound:
    """The best F1 a WRITE-only policy can reach at a budget: keep the cheapest critical steps."""

    f1: float
    recall: float
    precision: float
    kept: int
    relevant: int


def as_arrays(costs: Sequence[int], utilities: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Costs (int64) and utilities (float64) as arrays, checked: equal lengths, costs >= 0,
    utilities finite, >= 0 and at most ``MAX_UTILITY``."""
    w = np.asarray(costs, dtype=np.int64).reshape(-1)
    u = np.asarray(utilities, dtype=np.float64).reshape(-1)
    if w.shape != u.shape:
        raise ValueError(f"costs and utilities differ in length ({w.size} vs {u.size})")
    if (w < 0).any():
        raise ValueError("costs must be non-negative")
    if not np.isfinite(u).all() or (u < 0).any():
        raise ValueError("utilities must be finite and non-negative")
    if u.size and u.max() > MAX_UTILITY:
        i = int(np.argmax(u > MAX_UTILITY))
        raise ValueError(
            f"utility of step {i} is {float(u[i])!r}, above the oracle's limit of {MAX_UTILITY:g} "
            "(beyond it utility sums are no longer exact)"
        )
    return w, u


def check_budgets(budgets: Iterable[int]) -> tuple[int, ...]:
    """``budgets`` as a non-empty tuple of non-negative ints, or a ``ValueError``."""
    out = tuple(int(b) for b in budgets)
    if not out or any(b < 0 for b in out):
        raise ValueError(f"budgets must be a non-empty list of non-negative ints, got {out}")
    return out


def _effective_budgets(budgets: tuple[int, ...], w: np.ndarray) -> tuple[int, ...]:
    # A budget above the total weight buys everything; capping keeps any int64 arithmetic safe.
    total = int(w.sum()) if w.size else 0
    return tuple(min(b, total) for b in budgets)


def utility_unit_scale(u: np.ndarray) -> int | None:
    """Smallest integer s such that every u*s is an integer, if one with a small denominator exists
    and the units of all of ``u`` stay below ``_MAX_UNITS`` (None otherwise)."""
    scale = 1
    for value in set(u.tolist()):  # any order: the least common multiple does not depend on it
        denominator = _unit_denominator(value)
        if denominator is None:
            return None
        scale = scale * denominator // math.gcd(scale, denominator)
        if scale > _MAX_UNIT_DENOMINATOR:
            return None
    # A float bound with room to spare: the exact total is within a hair of it.
    if float(u.sum()) * scale > _MAX_UNITS:
        return None
    return scale


@functools.lru_cache(maxsize=4096)
def _unit_denominator(value: float) -> int | None:
    """The denominator of ``value`` as a fraction with a small denominator, None if it is not one.

    Memoised: the generators' utilities take a handful of values, met again in every episode.
    """
    frac = Fraction(value).limit_denominator(_MAX_UNIT_DENOMINATOR)
    return frac.denominator if float(frac) == value else None


def lp_bound(w: np.ndarray, u: np.ndarray, budget: int) -> float:
    """Fractional-knapsack optimum: an upper bound on U*(budget)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        density = np.where(w > 0, u / np.maximum(w, 1), np.inf)
    order = np.argsort(-density, kind="stable")
    cum_w = np.cumsum(w[order])
    whole = int(np.searchsorted(cum_w, budget, side="right"))
    total = float(u[order[:whole]].sum())
    if whole < order.size:
        nxt = order[whole]
        room = budget - (int(cum_w[whole - 1]) if whole else 0)
        total += float(u[nxt]) * room / float(w[nxt])
    return total


class _Solver:
    """One pass over the items in time order; optional per-item decisions for backtracking."""

    def __init__(self, w: np.ndarray, u: np.ndarray, max_budget: int, keep_decisions: bool, method: str) -> None:
        if method not in _METHODS:
            raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
        self.w, self.u = w, u
        self.max_budget = max_budget
        useful = (u > 0) & (w <= max_budget)
        self.items = np.flatnonzero(useful)
        self.keep_decisions = keep_decisions
        scale = utility_unit_scale(u[useful]) if self.items.size else 1
        cap_w = int(min(max_budget, int(w[useful].sum()))) if self.items.size else 0
        if scale is not None and self.items.size:
            units = np.rint(u * scale).astype(np.int64)
            bound = lp_bound(w[useful], u[useful], max_budget) * scale
            cap_u = int(min(int(units[useful].sum()), math.floor(bound * (1 + 1e-9) + 1e-6)))
        else:
            units, cap_u = None, None
        if method == "utility" and cap_u is None and self.items.size:
            raise ValueError(
                "method='utility' needs utilities that are multiples of a common unit, "
                f"at most {_MAX_UNITS} units in all"
            )
        # Pick the cheaper exact DP: array size ~ cap_u + 1 (utility-indexed) or cap_w + 1.
        if method == "auto":
            self.by_utility = cap_u is not None and cap_u <= cap_w
        else:
            self.by_utility = method == "utility" and cap_u is not None
        self.scale, self.units, self.cap_u, self.cap_w = scale, units, cap_u, cap_w

    def run(self, budgets: tuple[int, ...], t_len: int) -> tuple[np.ndarray, list[tuple[int, np.ndarray]]]:
        """Return the prefix curve (len(budgets), t_len) and, if kept, per-item decision rows.

        Only the cells an item can change are touched: in the utility-indexed DP, cells past
        ``frontier + k`` (``frontier`` = first infeasible utility) stay infeasible; in the
        byte-indexed DP, cells past the total weight seen so far all hold the total utility.
        Early items therefore cost little, and T = 10,000 at 1 MB stays well under a second.
        """
        b = np.asarray(budgets, dtype=np.int64)
        items = self.items.tolist()
        values = np.zeros((len(items) + 1, b.size), dtype=np.float64)
        decisions: list[tuple[int, np.ndarray]] = []
        if self.by_utility:
            size = self.cap_u + 1
            infeasible = self.max_budget + 1
            big = infeasible + (int(self.w[self.items].max()) if items else 0)
            dtype = np.int32 if big < np.iinfo(np.int32).max else np.int64
            need = np.full(size, infeasible, dtype=dtype)
            # Search keys of the array's own dtype: a mixed-dtype searchsorted copies the array.
            # The last key finds the frontier (first utility that no subset reaches within budget).
            keys = np.append(b, self.max_budget).astype(dtype)
            need[0] = 0
            scratch = np.empty(size, dtype=dtype)
            frontier = 1  # need[frontier:] are all infeasible
            units, weights = self.units.tolist(), self.w.tolist()
            minimum, add = np.minimum, np.add
            for row, t in enumerate(items, start=1):
                k, wt = units[t], weights[t]
                hi = size if frontier + k > size else frontier + k
                if self.keep_decisions:
                    old = need[:hi].copy()
                if k < hi:
                    n = hi - k
                    add(need[:n], wt, out=scratch[:n])
                    minimum(need[k:hi], scratch[:n], out=need[k:hi])
                low = k if k < hi else hi
                if need[low - 1] > wt:  # need is sorted: otherwise no cell below k improves
                    minimum(need[:low], wt, out=need[:low])
                found = need[:hi].searchsorted(keys, side="right")
                frontier = int(found[-1])
                if self.keep_decisions:
                    decisions.append((hi, np.packbits(need[:hi] < old)))
                values[row] = found[:-1]
        else:
            size = self.cap_w + 1
            best = np.zeros(size, dtype=np.float64)
            filled = 1  # best[filled:] implicitly equal best[filled - 1] (every item seen fits)
            clipped = np.minimum(b, self.cap_w)
            weights, utils = self.w.tolist(), self.u.tolist()
            for row, t in enumerate(items, start=1):
                wt, ut = weights[t], utils[t]
                hi = min(size, filled + wt)
                best[filled:hi] = best[filled - 1]
                if self.keep_decisions:
                    old = best[:hi].copy()
                if wt == 0:
                    best[:hi] += ut
                else:
                    np.maximum(best[wt:hi], best[: hi - wt] + ut, out=best[wt:hi])
                filled = hi
                if self.keep_decisions:
                    decisions.append((hi, np.packbits(best[:hi] > old)))
                values[row] = best[np.minimum(clipped, filled - 1)]
        if self.by_utility:
            values = (values - 1.0) / self.scale
            values[0] = 0.0
        # Steps that are not items leave the optimum where the previous item put it.
        latest = np.zeros(t_len, dtype=np.int64)
        latest[self.items] = np.arange(1, len(items) + 1)
        latest = np.maximum.accumulate(latest) if t_len else latest
        return values[latest].T.copy(), decisions

    def backtrack(self, decisions: list[tuple[int, np.ndarray]], budget: int, final_units: int) -> tuple[int, ...]:
        """Recover an optimal subset from the decision rows of ``run``.

        A set bit in an item's row at the current state means the item improved that DP
        cell, so it is in the subset; the state then moves to where that value came from.
        ``final_units`` is the optimum in utility units (utility-indexed DP only).
        """
        chosen = []
        items = self.items.tolist()
        state = final_units if self.by_utility else min(budget, self.cap_w)
        for (hi, row), t in zip(reversed(decisions), reversed(items), strict=False):
            if self.by_utility and state == 0:
                break
            if self.by_utility:
                changed = state < hi and (row[state >> 3] >> (7 - (state & 7))) & 1
            else:
                # Cells past the row's end hold the running total, improved by every item.
                cell = min(state, hi - 1)
                changed = (row[cell >> 3] >> (7 - (cell & 7))) & 1
            if changed:
                chosen.append(t)
                state = max(0, state - int(self.units[t])) if self.by_utility else state - int(self.w[t])
        return tuple(sorted(chosen))


def oracle_curve(
    costs: Sequence[int], utilities: Sequence[float], budgets: Iterable[int], method: str = "auto"
) -> OracleCurve:
    """U*(B) and the prefix curve U*(B, t) for every budget, in one pass over the steps."""
    w, u = as_arrays(costs, utilities)
    budgets = check_budgets(budgets)
    effective = _effective_budgets(budgets, w)
    solver = _Solver(w, u, max(effective), keep_decisions=False, method=method)
    prefix, _ = solver.run(effective, w.size)
    final = prefix[:, -1].copy() if w.size else np.zeros(len(budgets))
    return OracleCurve(budgets=budgets, final=final, prefix=prefix)


def _grouped_optimum(w: np.ndarray, u: np.ndarray, budget: int) -> float | None:
    """U*(budget) by utility class, or None when the method does not apply or would be slow.

    Steps of equal utility are interchangeable but for their cost, so some optimal set takes
    the cheapest n_c steps of each class c; only the counts are searched. With few classes
    (the generators have 4) a DP over classes replaces the DP over steps: for each class,
    ``need'[v] = min_n need[v - n k_c] + P_c[n]`` (P_c the prefix sums of its sorted costs),
    one vectorised minimum per class. ``need[v]`` is the least weight of a set worth exactly
    v units. The largest class is left out of the DP and added at the end: for every v, the
    most of its steps that fit in ``budget - need[v]`` (a binary search on P_c). Same unit
    scaling and LP cap as the step DP, so it returns the same float.
    """
    useful = (u > 0) & (w <= budget)
    if not useful.any():
        return 0.0
    w, u = w[useful], u[useful]
    scale = utility_unit_scale(u)
    if scale is None:
        return None
    units = np.rint(u * scale).astype(np.int64)
    if int(w.sum()) <= budget:
        return int(units.sum()) / scale
    by_class = Counter(units.tolist())
    if len(by_class) > _GROUPED_MAX_CLASSES:
        return None
    classes, counts = list(by_class), list(by_class.values())
    enumerated = _enumerated_optimum(w, units, classes, counts, budget)
    if enumerated is not None:
        return enumerated / scale
    bound = lp_bound(w, u, budget) * scale
    cap = int(min(int(units.sum()), math.floor(bound * (1 + 1e-9) + 1e-6)))
    size = cap + 1
    # The largest class is not convolved: it is added last by a binary search per cell.
    members = sorted(zip(counts, classes, strict=True))  # (steps in the class, its units)
    *small, (_, last) = members
    if sum(min(n, cap // k) + 1 for n, k in small) * size > _GROUPED_MAX_CELLS:
        return None
    infeasible = np.int64(1) << 60
    need = np.full(size, infeasible, dtype=np.int64)
    need[0] = 0
    cells = np.arange(size, dtype=np.int64)
    for _, k in small:
        sorted_costs = np.sort(w[units == k])[: cap // k]
        prefix = np.concatenate(([0], np.cumsum(sorted_costs)))
        source = cells[None, :] - (np.arange(prefix.size, dtype=np.int64) * k)[:, None]
        candidates = need[np.maximum(source, 0)] + prefix[:, None]
        candidates[source < 0] = infeasible
        need = np.minimum(candidates.min(axis=0), infeasible)
    feasible = np.flatnonzero(need <= budget)
    last_prefix = np.cumsum(np.sort(w[units == last]))
    n_last = np.searchsorted(last_prefix, budget - need[feasible], side="right")
    return int((feasible + n_last * last).max()) / scale


def _enumerated_optimum(
    w: np.ndarray, units: np.ndarray, classes: list[int], counts: list[int], budget: int
) -> int | None:
    """The optimum in utility units, by trying every count of every class but the largest,
    or None when there are too many such combinations.

    The grouped method's search without its DP: with the generators' few small classes
    there are a few hundred combinations, and a handful of array operations try them all
    (the DP takes several per class). The largest class is added by binary search, as there.
    """
    last = max(zip(counts, classes, strict=True))[1]  # the grouped method's order: count, then units
    weight = np.zeros(1, dtype=np.int64)
    value = np.zeros(1, dtype=np.int64)
    for k in classes:
        if k == last:
            continue
        prefix = np.cumsum(np.sort(w[units == k]))
        fits = int(prefix.searchsorted(budget, side="right"))  # more of this class cannot fit
        if weight.size * (fits + 1) > _ENUMERATED_MAX_COMBINATIONS:
            return None
        weight = (weight[:, None] + np.concatenate(([0], prefix[:fits]))).ravel()
        value = (value[:, None] + np.arange(0, (fits + 1) * k, k)).ravel()
        keep = weight <= budget
        weight, value = weight[keep], value[keep]
    last_prefix = np.cumsum(np.sort(w[units == last]))
    n_last = last_prefix.searchsorted(budget - weight, side="right")
    return int((value + n_last * last).max())


# The grouped method runs when there are at most this many utility classes and its arrays
# stay this small; otherwise the step DP answers. It tries the combinations of class counts
# directly when there are at most _ENUMERATED_MAX_COMBINATIONS.
_GROUPED_MAX_CLASSES = 16
_GROUPED_MAX_CELLS = 4_000_000
_ENUMERATED_MAX_COMBINATIONS = 20_000


def oracle_utility(costs: Sequence[int], utilities: Sequence[float], budget: int) -> float:
    """U*(B): the best total utility of a WRITE-only subset of steps that fits ``budget``.

    For a single budget and no prefix curve this first tries the grouped method (a DP over
    utility classes: fast when utilities take few values, as in every generated regime).
    """
    w, u = as_arrays(costs, utilities)
    (budget,) = check_budgets([budget])
    grouped = _grouped_optimum(w, u, budget)
    if grouped is not None:
        return grouped
    return oracle_curve(w, u, [budget]).at(budget)


def oracle_write_set(
    costs: Sequence[int], utilities: Sequence[float], budget: int, method: str = "auto"
) -> tuple[int, ...]:
    """An optimal WRITE set for ``budget`` (timesteps, sorted).

    Its utility equals U*(budget) up to float rounding (summing 0.7 and 0.1 in floats gives
    0.7999999999999999, the utility-indexed DP 0.8).
    """
    w, u = as_arrays(costs, utilities)
    (budget,) = _effective_budgets(check_budgets([budget]), w)
    solver = _Solver(w, u, budget, keep_decisions=True, method=method)
    prefix, decisions = solver.run((budget,), w.size)
    final_units = int(round(prefix[0, -1] * solver.scale)) if (solver.by_utility and w.size) else 0
    return solver.backtrack(decisions, budget, final_units)


def hindsight_f1_bound(costs: Sequence[int], critical_steps: Iterable[int], budget: int) -> F1Bound:
    """Best F1 of a WRITE-only policy within ``budget``: the cheapest critical steps that fit.

    Keeping any non-critical step only lowers precision, so the best retained set is the
    largest number k of critical steps whose cheapest-k total fits; F1 = 2k / (k + |R|).
    With no critical steps the bound is 0 (the metrics' convention for empty R).
    """
    w = np.asarray(costs, dtype=np.int64)
    crit = sorted(set(int(t) for t in critical_steps))
    relevant = len(crit)
    if relevant == 0:
        return F1Bound(0.0, 0.0, 0.0, 0, 0)
    cum = np.cumsum(np.sort(w[crit]))
    kept = int(np.searchsorted(cum, budget, side="right"))
    if kept == 0:
        return F1Bound(0.0, 0.0, 0.0, 0, relevant)
    return F1Bound(2.0 * kept / (kept + relevant), kept / relevant, 1.0, kept, relevant)


@dataclass(frozen=True)
class EpisodeOracle:
    """Everything the oracle says about one episode on one track.

    Within limits beside the budget (``limited_bounds.episode_oracle_within``: kind budgets or
    write time), ``f1_bounds`` and ``utility`` are those within the limits too, while ``curve``
    stays the byte budget's alone (an upper bound on them)."""

    track: str
    costs: np.ndarray
    curve: OracleCurve
    f1_bounds: dict[int, F1Bound]
    kind_utilities: dict[int, float] | None = None

    def utility(self, budget: int) -> float:
        if self.kind_utilities is not None:
            return self.kind_utilities[budget]
        return self.curve.at(budget)


def episode_oracle(episode: Episode, budgets: Iterable[int], track: str) -> EpisodeOracle:
    """U*(B), U*(B, t) and the F1 bound of ``episode`` with the WRITE costs of ``track``."""
    budgets = check_budgets(budgets)
    costs = track_costs(episode, track)
    curve = oracle_curve(costs, episode.utilities, budgets)
    bounds = {b: hindsight_f1_bound(costs, episode.critical_steps, b) for b in budgets}
    return EpisodeOracle(track=track, costs=costs, curve=curve, f1_bounds=bounds)
