"""The hindsight bounds with compression (``wpb_gym.core.compression``).

A WRITE-only policy writes each step plain (``costs[t]`` bytes, worth a whole critical step
and ``u_t``), compressed (``compressed[t]`` bytes, worth ``credit`` of a critical step and
``credit * u_t``) or not at all, within ``budget`` bytes. ``compressed[t] == -1``: the codec
refuses step t, which can only be written plain. ``compressed_costs`` gives these costs for an
episode's track view.

``compression_f1_bound``: the best F1 = 2·TP / (kept + |R|), with TP = plain + credit ·
compressed critical items and kept the number of items. Exact, by three facts:

* a non-critical item adds to kept and not to TP, so it never helps: only critical steps count;
* order the critical steps by ``costs[t] - compressed[t]`` (those the codec refuses first).
  Some best choice writes plain only steps that come before every step it writes compressed:
  a plain ``j`` after a compressed ``i`` can swap with it (``i`` plain, ``j`` compressed) for
  ``(p_j - c_j) - (p_i - c_i) >= 0`` bytes fewer, same counts. So the fewest bytes of ``a``
  plain and ``b`` compressed items is, over the splits ``s`` of that order, the least sum of
  the ``a`` cheapest plain of the first ``s`` and the ``b`` cheapest compressed of the rest;
* for a fixed ``a``, F1 moves one way in ``b`` (its derivative has the sign of
  ``credit·(a + |R|) - a``), and the counts ``b`` that fit are ``0..bmax(a)``; the best ``b``
  is 0 or ``bmax(a)``.

So only ``bmax(a)`` is needed, one binary search per split: O(|R|²) work, |R| in the
thousands in well under a second. With ``credit`` 0 compressing never helps and this is
``oracle.hindsight_f1_bound``; with ``credit`` 1 it is that bound at the cheaper cost of each.

``compression_oracle_utility``: U*, a multiple-choice knapsack (skip, plain or compressed per
step). A dynamic programme over utility units (``need[v]``, the fewest bytes of a choice worth
at least ``v`` units) when the utilities share a common unit and ``credit`` is a fraction
with a small denominator (``oracle.utility_unit_scale``: generated episodes use units like
0.5; credits like 0.5, 0.25 or 0.3), or over bytes (``best[b]``, the most utility within ``b``
bytes), whichever has fewer cells; exact. When neither fits ``_MAX_CELLS`` the answer is an upper bound and
``LimitedBound.exact`` is False: the least of

* U* of the plain oracle with every step at its cheaper cost and full utility: a choice that
  fits writes a set of steps that fits at those costs and is worth no more than their
  utilities, and
* the fractional (LP) knapsack over the plain and the compressed writes as separate items: it
  relaxes both "at most one write per step" and integrality.

Without a compressed write that could help (every step refused or ``credit`` 0; for U*, also
each compressed write costing at least its plain one), each function answers as the plain
oracle's (``hindsight_f1_bound``, ``oracle_utility``, ``oracle_write_set``), to the bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction

import numpy as np

from ..core.compression import compressed_cost
from ..core.tracks import policy_episode
from ..core.types import Episode
from .kind_bounds import LimitedBound
from .queries import has_queries
from .oracle import (
    F1Bound,
    as_arrays,
    hindsight_f1_bound,
    lp_bound,
    oracle_utility,
    oracle_write_set,
    utility_unit_scale,
)

REFUSED = -1  # ``compressed[t]`` of a step the codec refuses
_INFEASIBLE = 1 << 60  # bytes of a utility no choice reaches: far above any budget, far below int64's limit
# Most cells the programme for U* may touch in all (each step's update, up to the units or
# bytes the steps so far can reach). The write set keeps two bits a cell to walk back (100 MB
# here) under the same limit, so it reaches U* whenever U* is exact; the work is a few seconds.
_MAX_CELLS = 400_000_000
# Most units the writes may hold in all, as the plain oracle's (exact in int64 and float64).
_MAX_UNITS = 2**50


def refuse_queries(episode: Episode) -> None:
    """Refuse compressed writes on an episode with queries: the query tier's hindsight bound
    (``query_bound``) has no form for them, so its scores would have no bound to stand against."""
    if has_queries(episode):
        raise ValueError(f"episode {episode.episode_id!r} has queries, and the query tier has no bound with "
                         "compressed writes: run compression on episodes without queries")


def compressed_costs(episode: Episode, track: str) -> np.ndarray:
    """Bytes of a compressed WRITE of every step as a policy on ``track`` sees it, ``-1`` where
    the codec refuses the step (int64, read-only, computed once per track view)."""
    view = policy_episode(episode, track)
    costs = view.__dict__.get("_compressed_costs")
    if costs is None:
        costs = np.fromiter((_or_refused(compressed_cost(step)) for step in view.steps), dtype=np.int64,
                            count=len(view.steps))
        costs.setflags(write=False)
        view.__dict__["_compressed_costs"] = costs
    return costs


def _or_refused(cost: int | None) -> int:
    return REFUSED if cost is None else cost


def compression_f1_bound(costs: Sequence[int], compressed: Sequence[int], critical_steps: Iterable[int],
                         budget: int, credit: float) -> F1Bound:
    """The best F1 of a WRITE-only policy that may compress, within ``budget`` (exact; see the
    module docstring). Among equally good choices, the one with the fewest items; with no
    critical steps the bound is 0, as ``hindsight_f1_bound``'s."""
    w = _costs(costs)
    c = _compressed(compressed, w.size)
    budget, credit = _budget(budget), _credit(credit)
    crit = _critical(critical_steps, w.size)
    relevant = len(crit)
    if relevant == 0:
        return F1Bound(0.0, 0.0, 0.0, 0, 0)
    p, c = w[crit], c[crit]
    usable = c != REFUSED
    if credit == 0.0 or not usable.any():
        # A compressed item that earns nothing only lowers precision: the plain bound, as it is.
        return hindsight_f1_bound(w, crit, budget)
    plain_fit = int(np.searchsorted(np.cumsum(np.sort(p)), budget, side="right"))  # most plain items
    bmax = _most_compressed(p, c, usable, budget, plain_fit)
    a = np.concatenate((np.arange(plain_fit + 1), np.arange(plain_fit + 1)))
    b = np.concatenate((np.zeros(plain_fit + 1, dtype=np.int64), bmax))
    kept = a + b
    tp = a + credit * b
    f1 = np.where(kept > 0, 2.0 * tp / (kept + relevant), 0.0)  # relevant > 0: no division by 0
    best = int(np.lexsort((kept, -f1))[0])  # the highest F1, then the fewest items
    plain, small = int(a[best]), int(b[best])
    if plain + small == 0:
        return F1Bound(0.0, 0.0, 0.0, 0, relevant)
    # The same float operations as hindsight_f1_bound's when nothing is compressed.
    hits = plain + credit * small
    return F1Bound(2.0 * hits / (plain + small + relevant), hits / relevant, hits / (plain + small),
                   plain + small, relevant)


def _most_compressed(p: np.ndarray, c: np.ndarray, usable: np.ndarray, budget: int, plain_fit: int) -> np.ndarray:
    """``bmax[a]``: the most compressed items beside ``a`` plain ones within ``budget``, for
    ``a`` in ``0..plain_fit``, over every split of the exchange order (module docstring)."""
    order = np.lexsort((p - c, usable))  # the refused first, then by the bytes compression saves
    prefix = np.sort(p)  # split at the end: every step may be plain, none compressed
    suffix = np.zeros(0, dtype=np.int64)  # sorted compressed costs of the steps past the split
    bmax = np.zeros(plain_fit + 1, dtype=np.int64)
    for s in range(p.size, -1, -1):
        plain_bytes = np.concatenate(([0], np.cumsum(prefix[:plain_fit])))
        plain_bytes = plain_bytes[plain_bytes <= budget]  # non-decreasing: a prefix of the counts
        fits = np.searchsorted(np.cumsum(suffix), budget - plain_bytes, side="right")
        np.maximum(bmax[: fits.size], fits, out=bmax[: fits.size])
        if s:
            # Move the split one step earlier: that step leaves the plain side for the compressed one.
            t = order[s - 1]
            prefix = np.delete(prefix, int(np.searchsorted(prefix, p[t])))
            if usable[t]:
                suffix = np.insert(suffix, int(np.searchsorted(suffix, c[t])), c[t])
    return bmax


def compression_oracle_utility(costs: Sequence[int], compressed: Sequence[int], utilities: Sequence[float],
                               budget: int, credit: float) -> LimitedBound:
    """U* of a WRITE-only policy that may compress, within ``budget``: exact when a DP over
    utility units or bytes fits ``_MAX_CELLS``, else an upper bound (see the module docstring)."""
    problem = _Problem(costs, compressed, utilities, budget, credit)
    if not problem.compresses:
        return LimitedBound(oracle_utility(problem.w, problem.u, problem.budget), True)
    solved = problem.solve(keep_decisions=False)
    if solved is None:
        return LimitedBound(problem.upper_bound(), False)
    return LimitedBound(solved[0], True)


def compression_oracle_write_set(costs: Sequence[int], compressed: Sequence[int], utilities: Sequence[float],
                                 budget: int, credit: float) -> tuple[list[int], list[int]]:
    """(the steps written plain, the steps written compressed), each sorted: a choice worth
    ``compression_oracle_utility``'s U* whenever that is exact. Otherwise a choice that fits
    but is not always optimal: the plain oracle's set, then compressed writes of the other
    steps, the most utility per byte first, while they fit."""
    problem = _Problem(costs, compressed, utilities, budget, credit)
    if not problem.compresses:
        return sorted(oracle_write_set(problem.w, problem.u, problem.budget)), []
    solved = problem.solve(keep_decisions=True)
    if solved is None:
        return problem.greedy_choice()
    return solved[1]


class _Problem:
    """The multiple-choice knapsack of ``compression_oracle_utility``: each step's useful writes."""

    def __init__(self, costs: Sequence[int], compressed: Sequence[int], utilities: Sequence[float],
                 budget: int, credit: float) -> None:
        self.w, self.u = as_arrays(costs, utilities)
        self.c = _compressed(compressed, self.w.size)
        self.budget, self.credit = _budget(budget), _credit(credit)
        w, c, u, budget = self.w, self.c, self.u, self.budget
        self.cu = self.credit * u  # the float product, as the metrics credit a compressed item
        self.plain_ok = (u > 0) & (w <= budget)
        # A compressed write costing at least the plain one is worth no more: never better.
        self.comp_ok = (c != REFUSED) & (c <= budget) & (self.cu > 0) & (c < w)
        self.items = np.flatnonzero(self.plain_ok | self.comp_ok)
        self.compresses = bool(self.comp_ok.any())

    def solve(self, keep_decisions: bool) -> tuple[float, tuple[list[int], list[int]] | None] | None:
        """(U*, the choice reaching it when ``keep_decisions``), or None when the DP is too large.

        Of the two programmes, the one that touches fewer cells: each step's update stops where
        the steps before it, and it, can reach (their units, or their bytes), as the plain
        oracle's does; so the count is known before any work."""
        w, c, items = self.w, self.c, self.items
        # The dearest useful write of each step: no choice of these steps spends more.
        top = np.maximum(np.where(self.plain_ok, w, 0), np.where(self.comp_ok, c, 0))[items]
        cap_w = min(self.budget, int(top.sum()))
        cells_w = int(np.minimum(cap_w + 1, 1 + np.cumsum(top)).sum())
        units, cells_u = self._units(), None
        if units is not None:
            kp, kc, unit = units
            weights = np.concatenate((w[self.plain_ok], c[self.comp_ok]))
            values = np.concatenate((kp[self.plain_ok], kc[self.comp_ok])).astype(np.float64)
            # The LP with each write its own item bounds U* (module docstring): no cell past it is needed.
            bound = lp_bound(weights, values, cap_w)
            most = np.maximum(kp, kc)[items]
            cap_u = int(min(int(most.sum()), math.floor(bound * (1 + 1e-9) + 1e-6)))
            cells_u = int(np.minimum(cap_u + 1, 1 + np.cumsum(most)).sum())
        if cells_u is not None and cells_u <= cells_w:
            return self._by_units(kp, kc, cap_u, unit, keep_decisions) if cells_u <= _MAX_CELLS else None
        return self._by_bytes(cap_w, top, keep_decisions) if cells_w <= _MAX_CELLS else None

    def _units(self) -> tuple[np.ndarray, np.ndarray, Fraction] | None:
        """Each step's plain and compressed writes in whole units, and what a unit is worth; None
        unless the utilities share a common unit and ``credit`` is a fraction with a small
        denominator (0.5, 0.25, 0.3 = 3/10, 1/3...).

        The unit comes from the two fractions, not from the float products: 0.3 * 1.5 is
        0.44999999999999996 in floats, which no small unit divides, but 9/20 exactly. U* is
        then the exact optimum, a few float roundings from a float sum of the same choice."""
        useful = self.plain_ok | self.comp_ok
        per = utility_unit_scale(self.u[useful])  # u = whole * (1 / per)
        den = utility_unit_scale(np.array([self.credit]))  # credit = num / den
        if per is None or den is None or float(self.u[useful].sum()) * per * den > _MAX_UNITS:
            return None
        num = round(self.credit * den)
        whole = np.rint(self.u * per).astype(np.int64)
        kp = np.where(self.plain_ok, whole * den, 0)
        kc = np.where(self.comp_ok, whole * num, 0)
        # The largest unit dividing every write's value: fewer cells.
        common = int(np.gcd.reduce(np.concatenate((kp[self.plain_ok], kc[self.comp_ok]))))
        return kp // common, kc // common, Fraction(common, per * den)

    def _by_units(self, kp: np.ndarray, kc: np.ndarray, cap: int, unit: Fraction, keep_decisions: bool):
        """``need[v]``: the fewest bytes of a choice worth at least ``v`` units.

        ``need[:frontier]`` fit the budget and no cell past it does; a step worth at most ``k``
        units moves the frontier at most ``k`` cells, so it updates only ``need[:frontier + k]``
        (a cell past that draws on cells past the frontier: still beyond the budget)."""
        need = np.full(cap + 1, _INFEASIBLE, dtype=np.int64)
        need[0] = 0
        frontier = 1
        rows = []
        for t in self.items.tolist():
            k_plain, k_small = int(kp[t]), int(kc[t])
            hi = min(need.size, frontier + max(k_plain, k_small))
            part = need[:hi]
            plain = _with_write(part, k_plain, int(self.w[t])) if self.plain_ok[t] else None
            small = _with_write(part, k_small, int(self.c[t])) if self.comp_ok[t] else None
            need[:hi], row = _better(part, plain, small, np.less, keep_decisions)
            # The true need is non-decreasing, so the cells within the budget are a prefix.
            frontier = int(np.count_nonzero(need[:hi] <= self.budget))
            rows.append((hi, row))
        best = frontier - 1
        if not keep_decisions:
            return float(best * unit), None
        plain_set, small_set = [], []
        v = best
        for t, (hi, (took_plain, took_small)) in zip(reversed(self.items.tolist()), reversed(rows), strict=True):
            if v == 0:
                break
            if v >= hi:  # a cell the step could not change: it is not in the choice
                continue
            if _bit(took_small, v):
                small_set.append(t)
                v = max(0, v - int(kc[t]))
            elif _bit(took_plain, v):
                plain_set.append(t)
                v = max(0, v - int(kp[t]))
        return float(best * unit), (sorted(plain_set), sorted(small_set))

    def _by_bytes(self, cap: int, top: np.ndarray, keep_decisions: bool):
        """``best[b]``: the most utility of a choice within ``b`` bytes.

        ``best[filled:]`` all hold ``best[filled - 1]``: every write seen so far fits there, so
        a step whose dearest write is ``top`` bytes changes only ``best[:filled + top]``."""
        best = np.zeros(cap + 1, dtype=np.float64)
        filled = 1
        rows = []
        for t, dearest in zip(self.items.tolist(), top.tolist(), strict=True):
            hi = min(best.size, filled + dearest)
            best[filled:hi] = best[filled - 1]
            part = best[:hi]
            plain = _shifted(part, int(self.w[t]), float(self.u[t])) if self.plain_ok[t] else None
            small = _shifted(part, int(self.c[t]), float(self.cu[t])) if self.comp_ok[t] else None
            best[:hi], row = _better(part, plain, small, np.greater, keep_decisions)
            filled = hi
            rows.append((hi, row))
        if not keep_decisions:
            return float(best[filled - 1]), None
        plain_set, small_set = [], []
        room = cap
        for t, (hi, (took_plain, took_small)) in zip(reversed(self.items.tolist()), reversed(rows), strict=True):
            cell = min(room, hi - 1)  # past the row, every cell is decided as its last one
            if _bit(took_small, cell):
                small_set.append(t)
                room -= int(self.c[t])
            elif _bit(took_plain, cell):
                plain_set.append(t)
                room -= int(self.w[t])
        return float(best[filled - 1]), (sorted(plain_set), sorted(small_set))

    def upper_bound(self) -> float:
        """The least of two upper bounds on U* (module docstring)."""
        cheaper = np.where(self.comp_ok, np.minimum(self.w, self.c), self.w)
        whole = oracle_utility(cheaper, self.u, self.budget)
        weights = np.concatenate((self.w[self.plain_ok], self.c[self.comp_ok]))
        values = np.concatenate((self.u[self.plain_ok], self.cu[self.comp_ok]))
        return min(whole, lp_bound(weights, values, self.budget))

    def greedy_choice(self) -> tuple[list[int], list[int]]:
        """The plain oracle's set, then compressed writes of the rest by utility per byte while they fit."""
        plain = sorted(oracle_write_set(self.w, self.u, self.budget))
        room = self.budget - int(self.w[plain].sum())
        written = set(plain)
        rest = [t for t in np.flatnonzero(self.comp_ok).tolist() if t not in written]
        rest.sort(key=lambda t: (-(self.cu[t] / self.c[t]) if self.c[t] else -math.inf, t))
        small = []
        for t in rest:
            if self.c[t] <= room:
                small.append(t)
                room -= int(self.c[t])
        return plain, sorted(small)


def _with_write(need: np.ndarray, k: int, cost: int) -> np.ndarray:
    """``need`` with one more write worth ``k`` units for ``cost`` bytes on top: "at least v"
    units, so below ``k`` the write alone (on the empty choice) serves."""
    out = np.empty_like(need)
    k = min(k, need.size)
    out[k:] = need[: need.size - k] + cost
    out[:k] = cost
    out[0] = 0
    return out


def _shifted(best: np.ndarray, cost: int, value: float) -> np.ndarray:
    """``best`` with one more write of ``cost`` bytes worth ``value`` on top (-inf where it does not fit)."""
    out = np.full_like(best, -np.inf)
    if cost < best.size:
        out[cost:] = best[: best.size - cost] + value
    return out


def _better(old: np.ndarray, plain: np.ndarray | None, small: np.ndarray | None, beats, keep_decisions: bool):
    """The better of not writing, writing plain and writing compressed in every cell, and, if
    kept, the cells where each write won (packed bits). The compressed write wins a cell only
    over both others, so a walk back reads its bit first."""
    new = old
    took_plain = took_small = None
    if plain is not None:
        took_plain = beats(plain, new)
        new = np.where(took_plain, plain, new)
    if small is not None:
        took_small = beats(small, new)
        new = np.where(took_small, small, new)
    if not keep_decisions:
        return new, None
    return new, (_packed(took_plain), _packed(took_small))


def _packed(mask: np.ndarray | None) -> np.ndarray | None:
    return None if mask is None else np.packbits(mask)


def _bit(row: np.ndarray | None, i: int) -> bool:
    return row is not None and bool((row[i >> 3] >> (7 - (i & 7))) & 1)


def _costs(costs: Sequence[int]) -> np.ndarray:
    w = np.asarray(costs, dtype=np.int64).reshape(-1)
    if (w < 0).any():
        raise ValueError("costs must be non-negative")
    return w


def _compressed(compressed: Sequence[int], size: int) -> np.ndarray:
    c = np.asarray(compressed, dtype=np.int64).reshape(-1)
    if c.size != size:
        raise ValueError(f"costs and compressed differ in length ({size} vs {c.size})")
    if (c < REFUSED).any():
        t = int(np.argmax(c < REFUSED))
        raise ValueError(f"compressed costs must be non-negative, or -1 for a step the codec refuses; "
                         f"step {t} has {int(c[t])}")
    return c


def _budget(budget: int) -> int:
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 0:
        raise ValueError(f"budget must be a non-negative int, got {budget!r}")
    return int(budget)


def _credit(credit: float) -> float:
    if isinstance(credit, bool) or not isinstance(credit, (int, float, np.integer, np.floating)) \
            or not 0.0 <= credit <= 1.0:  # also refuses NaN
        raise ValueError(f"credit must be a number in [0, 1], got {credit!r}")
    return float(credit)


def _critical(critical_steps: Iterable[int], size: int) -> list[int]:
    crit = sorted(set(int(t) for t in critical_steps))
    if crit and (crit[0] < 0 or crit[-1] >= size):
        bad = crit[0] if crit[0] < 0 else crit[-1]
        raise ValueError(f"critical_steps must be steps 0 to {size - 1} of costs, got {bad}")
    return crit
