"""Ids numbered as first met, in compiled code: the drawn episodes' equalities as ints.

``contract_episodes`` writes the arrays ``episode_arrays`` would make of an episode, whose ids
(families, value ids, parameter sets, contracts) are numbered in the order things are first
met. These number int64 keys (``dense``) and runs of values (``run_ids``: name lists,
``list_ids``; texts, ``text_classes``) that way, through open-addressing tables (``table_of``,
``slot_of``) whose slots depend on every bit of a key (``mixed``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def mixed(h):
    """``h``'s bits mixed into every bit of the result (MurmurHash3's finalizer), non-negative:
    a table slot from its low bits depends on all of ``h``'s (ids that differ only in high bits,
    as parameters of different endpoints do, would otherwise share their slots)."""
    x = np.uint64(h)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return np.int64(x >> np.uint64(1))


@njit(cache=True, inline="always")
def slot_of(table, keys, key):
    """Where ``key`` is in an open-addressing table of int64 keys (``keys[table[slot]]``), or the
    empty slot it would take."""
    size = table.shape[0]
    slot = mixed(key) & (size - 1)
    while table[slot] >= 0 and keys[table[slot]] != key:
        slot = (slot + 1) & (size - 1)
    return slot


@njit(cache=True)
def table_of(n):
    """An empty table (every slot -1) for ``n`` keys, at most half full."""
    size = 1
    while size < 2 * n:
        size *= 2
    return np.full(size, -1, dtype=np.int64)


@njit(cache=True)
def run_ids(values, starts, ends, counted):
    """Each run ``values[starts[k]:ends[k]]``'s number, equal runs one number, numbered as first
    met among the ``counted`` runs (-1 for the others); and per number the run that introduced it."""
    m = starts.shape[0]
    table = table_of(m)
    ids = np.full(m, -1, dtype=np.int64)
    first = np.empty(m, dtype=np.int64)
    n_ids = 0
    for k in range(m):
        if not counted[k]:
            continue
        a0, a1 = starts[k], ends[k]
        h = np.int64(a1 - a0)
        for j in range(a0, a1):
            h = h * 1000003 + values[j]
        slot = mixed(h) & (table.shape[0] - 1)
        while table[slot] >= 0:
            o = first[table[slot]]
            if ends[o] - starts[o] == a1 - a0 and np.all(values[starts[o]:ends[o]] == values[a0:a1]):
                ids[k] = table[slot]
                break
            slot = (slot + 1) & (table.shape[0] - 1)
        if ids[k] < 0:
            ids[k] = table[slot] = n_ids
            first[n_ids] = k
            n_ids += 1
    return ids, first[:n_ids]


@njit(cache=True)
def list_ids(p_start, p_flat, r_start, r_flat, is_snapshot, with_required):
    """An id per distinct name list, numbered as first met among every snapshot's parameter
    list, then every snapshot's required list (``compile_episode``'s mask ids: equal lists are
    equal sets); per list its id (parameter lists first; -1 for a section or a guide, and for
    every required list of snapshots without one), and per id the list that introduced it."""
    n = p_start.shape[0] - 1
    values = np.concatenate((p_flat, r_flat))
    starts = np.concatenate((p_start[:n], p_flat.shape[0] + r_start[:n]))
    ends = np.concatenate((p_start[1:], p_flat.shape[0] + r_start[1:]))
    counted = np.concatenate((is_snapshot, is_snapshot & with_required))
    return run_ids(values, starts, ends, counted)


@njit(cache=True, inline="always")
def listed(k, n, p_start, p_flat, r_start, r_flat):
    """List ``k``: content k's parameters, or content k - n's required ones."""
    if k < n:
        return p_flat, p_start[k], p_start[k + 1]
    return r_flat, r_start[k - n], r_start[k - n + 1]


@njit(cache=True)
def dense(keys):
    """Each key's number, keys numbered as first met (``keys`` non-negative int64)."""
    table = table_of(keys.shape[0])
    firsts = np.empty(keys.shape[0], dtype=np.int64)
    out = np.empty(keys.shape[0], dtype=np.int64)
    n = 0
    for k in range(keys.shape[0]):
        slot = slot_of(table, firsts, keys[k])
        if table[slot] < 0:
            table[slot] = n
            firsts[n] = keys[k]
            n += 1
        out[k] = table[slot]
    return out, n


@njit(cache=True)
def text_classes(starts, lengths, text):
    """Each text's number, equal texts one number, numbered as first met."""
    return run_ids(text, starts, starts + lengths, np.ones(starts.shape[0], dtype=np.bool_))[0]
