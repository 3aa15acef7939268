"""U*(B) of an episode played from its draws (``paper_episodes``, ``contract_episodes``), in
compiled code: its utilities come in a few classes of halves (0.5, 1, 2, 5, 6, and 0, which no
optimum takes), so the WRITE-only knapsack is solved by trying the counts of each class, as
``scoring.oracle``'s enumerated search does. Tested equal to ``scoring.oracle.oracle_utility``
(``tests/envs/test_paper_episodes.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .compile_cache import cached

# The most combinations of class counts ``class_optimum`` tries before leaving U*(B) to
# ``scoring.oracle`` (long episodes: hundreds of drifts and repeats).
MAX_COMBINATIONS = 50_000
# The largest utility, in half units, whose classes ``class_optimum`` counts in an array.
_MAX_HALF_UNITS = 1 << 16


def drawn_oracle(labels: Any, budget: int) -> float | None:
    """U*(B) of a drawn episode's ``DrawnLabels`` (``scoring.oracle.oracle_utility``'s value), None when it has
    too many combinations of class counts to try. Its utilities are halves, so
    the optimum in half units is exact in integers, as the oracle's is."""
    best = class_optimum(labels.utilities, labels.costs, budget, MAX_COMBINATIONS)
    return None if best < 0 else best / 2


@cached()
def class_optimum(utilities, costs, budget, max_combinations):
    """The most half units a set of steps within ``budget`` holds (-1: too many combinations, or
    a utility above ``_MAX_HALF_UNITS``).
    ``oracle._enumerated_optimum``'s search: steps of equal units are interchangeable but for
    their cost, so some optimal set takes the cheapest steps of each class; every count of each
    class but the most numerous is tried, and that one's most steps that fit are added."""
    units = np.rint(utilities * 2).astype(np.int64)
    # The useful steps (worth something, fitting alone) by class, in ascending units.
    top, weight, value = 0, 0, 0
    for t in range(units.shape[0]):
        if units[t] > 0 and costs[t] <= budget:
            top = max(top, units[t])
            weight += costs[t]
            value += units[t]
    if weight <= budget:
        return value
    if top > _MAX_HALF_UNITS:  # a class per half unit up to the top: left to scoring.oracle
        return -1
    seen = np.zeros(top + 1, dtype=np.int64)
    for t in range(units.shape[0]):
        if units[t] > 0 and costs[t] <= budget:
            seen[units[t]] += 1
    m = 0
    for k in range(top + 1):
        m += seen[k] > 0
    classes = np.empty(m, dtype=np.int64)
    sizes = np.empty(m, dtype=np.int64)
    m, last = 0, 0
    for k in range(top + 1):
        if seen[k]:
            classes[m], sizes[m] = k, seen[k]
            if seen[k] > sizes[last]:
                last = m
            seen[k] = m  # from here on: the class's position
            m += 1
    # Per class, the prefix sums of its steps' costs, cheapest first (0 first), end to end.
    starts = np.zeros(m + 1, dtype=np.int64)
    for j in range(m):
        starts[j + 1] = starts[j] + sizes[j] + 1
    prefix = np.zeros(starts[m], dtype=np.int64)
    filled = starts[:m] + 1
    for t in range(units.shape[0]):
        if units[t] > 0 and costs[t] <= budget:
            j = seen[units[t]]
            prefix[filled[j]] = costs[t]
            filled[j] += 1
    fits = np.zeros(m, dtype=np.int64)
    combinations = 1
    for j in range(m):
        own = prefix[starts[j] + 1:starts[j + 1]]
        own.sort()
        total = 0
        for n in range(own.shape[0]):
            total += own[n]
            own[n] = total
            if total <= budget:
                fits[j] = n + 1
        if j != last:
            combinations *= fits[j] + 1
            if combinations > max_combinations:
                return -1
    # The counts of the classes but the last and one more ("inner") as an odometer; for each,
    # the inner class's counts in one sweep: as they rise, the last class's most that fit falls.
    inner = 1 if last == 0 else 0
    counts = np.zeros(m, dtype=np.int64)
    weight, value, best = 0, 0, 0
    while True:
        best = max(best, _sweep(prefix, starts, fits, classes, inner, last, weight, value, budget))
        j = 0
        while j < m:
            if j == last or j == inner:
                j += 1
                continue
            if counts[j] < fits[j]:  # one more of class j; the classes below it start again from none
                counts[j] += 1
                weight += prefix[starts[j] + counts[j]] - prefix[starts[j] + counts[j] - 1]
                value += classes[j]
                if weight <= budget:
                    break
            weight -= prefix[starts[j] + counts[j]]
            value -= classes[j] * counts[j]
            counts[j] = 0
            j += 1
        if j >= m:
            return best


@cached()
def _sweep(prefix, starts, fits, classes, inner, last, weight, value, budget):
    """The best of every count of class ``inner`` (none if there are only the last class's
    steps) added to ``weight`` and ``value``, with the last class's most steps that fit."""
    last_start, last_fits = starts[last], fits[last]
    more = _most_that_fit(prefix, last_start, last_fits, budget - weight)
    best = value + classes[last] * more
    if inner >= classes.shape[0]:
        return best
    for n in range(1, fits[inner] + 1):
        weight += prefix[starts[inner] + n] - prefix[starts[inner] + n - 1]
        if weight > budget:
            break
        value += classes[inner]
        while more > 0 and prefix[last_start + more] > budget - weight:
            more -= 1
        best = max(best, value + classes[last] * more)
    return best


@cached()
def _most_that_fit(prefix, start, most, room):
    """How many of a class's cheapest steps fit in ``room``: the largest n <= ``most`` with
    ``prefix[start + n] <= room`` (its prefix sums rise), by bisection."""
    low, high = 0, most
    while low < high:
        middle = (low + high + 1) // 2
        if prefix[start + middle] <= room:
            low = middle
        else:
            high = middle - 1
    return low
