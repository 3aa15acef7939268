"""The compiled core's memory: the store's items as linked lists over timesteps (store order,
each family's items, each api's WRITE items), a heap of item sizes, and the counters the
observation reads (``ByteMemoryStore`` and the ``ObservationEncoder``'s indexes, on arrays)."""

from __future__ import annotations

from .borrowing import borrowing, borrowing_inline
from .comparisons import col
from .layout import (
    API,
    API_HEAD,
    API_NEXT,
    API_PREV,
    CHILDREN,
    FAMILY,
    FAMILY_HEAD,
    FAMILY_LIVE,
    FAMILY_NEXT,
    FAMILY_PREV,
    H_STATE,
    HEAP_COST,
    HEAP_T,
    ITEM_COST,
    NEXT,
    PARENT,
    PREV,
    S_HEAD,
    S_HEAP,
    S_ITEMS,
    S_MERGE_ITEMS,
    S_TAIL,
    S_USED,
)


# ---------------------------------------------------------------- memory (the store and the encoder's indexes)
@borrowing_inline
def st(static, name):
    """Where the state section ``name`` starts."""
    return static[H_STATE + name]


@borrowing
def _heap_before(state, hc, ht, i, j):
    ci, cj = state[hc + i], state[hc + j]
    return ci > cj or (ci == cj and state[ht + i] < state[ht + j])


@borrowing
def _heap_swap(state, hc, ht, i, j):
    state[hc + i], state[hc + j] = state[hc + j], state[hc + i]
    state[ht + i], state[ht + j] = state[ht + j], state[ht + i]


@borrowing
def _heap_push(static, state, scalars, cost, t):
    hc, ht = st(static, HEAP_COST), st(static, HEAP_T)
    i = scalars[S_HEAP]
    scalars[S_HEAP] = i + 1
    state[hc + i], state[ht + i] = cost, t
    while i > 0:
        parent = (i - 1) // 2
        if not _heap_before(state, hc, ht, i, parent):
            break
        _heap_swap(state, hc, ht, i, parent)
        i = parent


@borrowing
def largest(static, state, scalars):
    """``ObservationEncoder._largest_item``: the item with the most bytes (the oldest of those)."""
    hc, ht, costs = st(static, HEAP_COST), st(static, HEAP_T), st(static, ITEM_COST)
    while state[costs + state[ht]] < 0:  # expired: leaves the heap now
        n = scalars[S_HEAP] - 1
        scalars[S_HEAP] = n
        _heap_swap(state, hc, ht, 0, n)
        i = 0
        while True:
            left, best = 2 * i + 1, i
            if left < n and _heap_before(state, hc, ht, left, best):
                best = left
            if left + 1 < n and _heap_before(state, hc, ht, left + 1, best):
                best = left + 1
            if best == i:
                break
            _heap_swap(state, hc, ht, i, best)
            i = best
    return state[ht]


@borrowing
def store(static, state, scalars, t, parent, cost):
    """The store accepted WRITE (``parent`` -1; ``layout.COMPRESSED`` for a compressed one) or
    MERGE (``parent`` its base) of step ``t`` for ``cost`` bytes."""
    state[st(static, ITEM_COST) + t] = cost
    state[st(static, PARENT) + t] = parent
    state[st(static, CHILDREN) + t] = 0
    nxt, prv = st(static, NEXT), st(static, PREV)
    tail = scalars[S_TAIL]
    state[prv + t], state[nxt + t] = tail, -1
    if tail >= 0:
        state[nxt + tail] = t
    else:
        scalars[S_HEAD] = t
    scalars[S_TAIL] = t
    family = col(static, FAMILY, t)
    if family >= 0:
        _push(state, st(static, FAMILY_HEAD), st(static, FAMILY_PREV), st(static, FAMILY_NEXT), family, t)
        state[st(static, FAMILY_LIVE) + family] += 1
    if parent < 0:
        api = col(static, API, t)
        if api >= 0:
            _push(state, st(static, API_HEAD), st(static, API_PREV), st(static, API_NEXT), api, t)
    else:
        state[st(static, CHILDREN) + parent] += 1
        scalars[S_MERGE_ITEMS] += 1
    _heap_push(static, state, scalars, cost, t)
    scalars[S_USED] += cost
    scalars[S_ITEMS] += 1


@borrowing
def _push(state, heads, older, newer, group, t):
    """Item ``t`` becomes the newest of ``group``'s list (``heads``: newest per group)."""
    head = state[heads + group]
    state[older + t], state[newer + t] = head, -1
    if head >= 0:
        state[newer + head] = t
    state[heads + group] = t


@borrowing
def _unlink(state, heads, older, newer, group, s):
    before, after = state[older + s], state[newer + s]
    if after >= 0:
        state[older + after] = before
    else:
        state[heads + group] = before
    if before >= 0:
        state[newer + before] = after


@borrowing
def remove(static, state, scalars, s):
    """The store expired item ``s``."""
    costs = st(static, ITEM_COST)
    scalars[S_USED] -= state[costs + s]
    state[costs + s] = -1
    scalars[S_ITEMS] -= 1
    nxt, prv = st(static, NEXT), st(static, PREV)
    before, after = state[prv + s], state[nxt + s]
    if before >= 0:
        state[nxt + before] = after
    else:
        scalars[S_HEAD] = after
    if after >= 0:
        state[prv + after] = before
    else:
        scalars[S_TAIL] = before
    family = col(static, FAMILY, s)
    if family >= 0:
        _unlink(state, st(static, FAMILY_HEAD), st(static, FAMILY_PREV), st(static, FAMILY_NEXT), family, s)
        state[st(static, FAMILY_LIVE) + family] -= 1
    parent = state[st(static, PARENT) + s]
    if parent >= 0:
        scalars[S_MERGE_ITEMS] -= 1
        state[st(static, CHILDREN) + parent] -= 1
    else:
        api = col(static, API, s)
        if api >= 0:
            _unlink(state, st(static, API_HEAD), st(static, API_PREV), st(static, API_NEXT), api, s)


@borrowing
def cost_budget(cost, budget):
    if budget == 0:
        return 1.0
    return cost / budget if cost < budget else 1.0
