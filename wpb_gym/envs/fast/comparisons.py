"""How the compiled core compares two steps: ``envs.observation.comparisons`` on the flat
arrays of ``episode_arrays`` (contents' fields, parameter sets, contracts, version ranks)."""

from __future__ import annotations

from .borrowing import borrowing, borrowing_inline
from .layout import (
    CONTENT,
    CONTRACT,
    DEPRECATED,
    EQUALITY,
    FIELD_IS_API,
    FIELD_KEYS,
    FIELD_LENGTHS,
    FIELD_OFFSETS,
    FIELD_VALUES,
    H_NONE_VALUE,
    H_STATIC,
    IS_DICT,
    MASK_BITS,
    MASK_OFFSETS,
    N_SEEN,
    PARAMS,
    PREVIOUS,
    REMOVED,
    REQUIRED,
    RETURNS,
    SEEN_CHANGED,
    SEEN_FAMILY,
    SEEN_NEWLY_DEPRECATED,
    SEEN_NEWLY_REMOVED,
    SEEN_PARAMS_ADDED,
    SEEN_PARAMS_REMOVED,
    SEEN_REMOVED,
    SEEN_REQUIRED_ADDED,
    SEEN_REQUIRED_REMOVED,
    SEEN_RESTORED,
    SEEN_RETURNS,
    SEEN_UNDEPRECATED,
    SEEN_VERSION_DOWN,
    SEEN_VERSION_UP,
    STEP_SEEN,
    VERSION_KIND,
    VERSION_OTHER,
    VERSION_RANK,
)

NO_VERSION_ORDER = 2


@borrowing_inline
def col(static, name, i):
    """Entry ``i`` of the static section ``name``."""
    return static[static[H_STATIC + name] + i]


@borrowing_inline
def at(static, name):
    """Where the static section ``name`` starts."""
    return static[H_STATIC + name]


@borrowing_inline
def fat(floats, name, i):
    """Entry ``i`` of the float section ``name``."""
    return floats[int(floats[name]) + i]


# ---------------------------------------------------------------- comparisons (comparisons.py)
@borrowing
def added(static, a, b):
    """``comparisons._added``: |a - b| / |a| for two parameter sets (0 if either is missing or a is empty)."""
    if a < 0 or b < 0:
        return 0.0
    offsets, bits = at(static, MASK_OFFSETS), at(static, MASK_BITS)
    a0, a1 = static[offsets + a], static[offsets + a + 1]
    size = a1 - a0
    if size == 0:
        return 0.0
    b0, b1 = static[offsets + b], static[offsets + b + 1]
    i, j, common = a0, b0, 0
    while i < a1 and j < b1:
        x, y = static[bits + i], static[bits + j]
        if x == y:
            common += 1
            i += 1
            j += 1
        elif x < y:
            i += 1
        else:
            j += 1
    return (size - common) / size


@borrowing
def compare_versions(static, ct, cr):
    """``stream_table.compare_versions`` of two contents' versions: 1, -1, 0, or 2 (no order)."""
    kt, kr = col(static, VERSION_KIND, ct), col(static, VERSION_KIND, cr)
    if kt != kr:
        return NO_VERSION_ORDER
    rt, rr = col(static, VERSION_RANK, ct), col(static, VERSION_RANK, cr)
    if kt == VERSION_OTHER:
        return 0 if rt == rr else NO_VERSION_ORDER
    # Branches, not ``(rt > rr) - (rt < rr)``: without the JIT these are NumPy bools, which refuse to subtract.
    if rt > rr:
        return 1
    return -1 if rt < rr else 0


@borrowing
def fields_changed(static, ct, cr):
    """``comparisons._fields_changed``: the share of content ``ct``'s fields that differ in ``cr``."""
    offsets = at(static, FIELD_OFFSETS)
    i0, i1 = static[offsets + ct], static[offsets + ct + 1]
    if col(static, IS_DICT, ct) == 0 or col(static, IS_DICT, cr) == 0 or i1 == i0:
        return 1.0 if col(static, EQUALITY, ct) != col(static, EQUALITY, cr) else 0.0
    keys, values = at(static, FIELD_KEYS), at(static, FIELD_VALUES)
    j, j1 = static[offsets + cr], static[offsets + cr + 1]
    changed = 0
    for i in range(i0, i1):
        key = static[keys + i]
        while j < j1 and static[keys + j] < key:
            j += 1
        if j >= j1 or static[keys + j] != key or static[values + j] != static[values + i]:
            changed += 1
    return changed / (i1 - i0)


@borrowing
def merge_cost(static, ct, cs):
    """Bytes of a MERGE of content ``ct`` into a base item of content ``cs`` with the same api
    (``len(json.dumps(canonical_delta)) + 16``); -1 when the delta is empty."""
    if ct == cs:
        return -1
    offsets = at(static, FIELD_OFFSETS)
    keys, values = at(static, FIELD_KEYS), at(static, FIELD_VALUES)
    lengths, is_api = at(static, FIELD_LENGTHS), at(static, FIELD_IS_API)
    none = static[H_NONE_VALUE]
    j, j1 = static[offsets + cs], static[offsets + cs + 1]
    total, n = 0, 0
    for i in range(static[offsets + ct], static[offsets + ct + 1]):
        if static[is_api + i]:
            continue
        key = static[keys + i]
        while j < j1 and static[keys + j] < key:
            j += 1
        if j < j1 and static[keys + j] == key:
            changed = static[values + j] != static[values + i]
        else:  # base.get(k) is None
            changed = static[values + i] != none
        if changed:
            total += static[lengths + i]
            n += 1
    if n == 0:
        return -1
    return total + 2 * n + 16  # "{", "}", ", " between items, the MERGE overhead


@borrowing
def reverted(static, floats, s, t):
    """``comparisons.reverted``: step ``t`` shows the contract its family had before item ``s``."""
    now = col(static, CONTRACT, col(static, CONTENT, t))
    if now < 0 or col(static, CONTRACT, col(static, CONTENT, s)) == now:
        return False
    before = col(static, PREVIOUS, s)
    if before >= 0:
        return col(static, CONTRACT, col(static, CONTENT, before)) == now
    return fat(floats, REMOVED, s) > fat(floats, REMOVED, t)


@borrowing
def since_seen(static, floats, t, obs):
    """``comparisons.seen_features`` of step ``t``, written into ``obs``: step ``t`` against the
    last shown step of its family (``returns_to_earlier`` comes precomputed, ``RETURNS``)."""
    for j in range(STEP_SEEN, STEP_SEEN + N_SEEN):
        obs[j] = 0.0
    gone = fat(floats, REMOVED, t)
    obs[SEEN_REMOVED] = gone
    previous = col(static, PREVIOUS, t)
    if previous < 0:
        return
    obs[SEEN_FAMILY] = 1.0
    ct, cp = col(static, CONTENT, t), col(static, CONTENT, previous)
    if ct == cp:  # the same observation: unchanged
        return
    obs[SEEN_CHANGED] = 1.0
    order = compare_versions(static, ct, cp)
    obs[SEEN_VERSION_UP] = 1.0 if order == 1 else 0.0
    obs[SEEN_VERSION_DOWN] = 1.0 if order == -1 else 0.0
    pt, pp = col(static, PARAMS, ct), col(static, PARAMS, cp)
    rt, rp = col(static, REQUIRED, ct), col(static, REQUIRED, cp)
    obs[SEEN_PARAMS_ADDED] = added(static, pt, pp)
    obs[SEEN_PARAMS_REMOVED] = added(static, pp, pt)
    obs[SEEN_REQUIRED_ADDED] = added(static, rt, rp)
    obs[SEEN_REQUIRED_REMOVED] = added(static, rp, rt)
    dt, dp = fat(floats, DEPRECATED, t), fat(floats, DEPRECATED, previous)
    obs[SEEN_NEWLY_DEPRECATED] = 1.0 if dt > dp else 0.0
    obs[SEEN_UNDEPRECATED] = 1.0 if dp > dt else 0.0
    gone_before = fat(floats, REMOVED, previous)
    obs[SEEN_NEWLY_REMOVED] = 1.0 if gone > gone_before else 0.0
    obs[SEEN_RESTORED] = 1.0 if gone_before > gone else 0.0
    obs[SEEN_RETURNS] = col(static, RETURNS, t)
