"""Generated episodes of the contract change model without text, compiled from their draws without being made.

Such an episode (no documentation sections, no renames: the regimes ``breaking``, ``reverts``
and ``noisy_priority``) shows only endpoint snapshots
``{"api": "api.v<V>.endpoint_<i>", "deprecated": <bool>, "params": [...], "required": [...], "version": <V>}``.
``compile_contract`` replays the generator on its draws (``contract_replay``) and writes the
arrays ``episode_arrays`` would make of the made episode (``_compile``), with no observation
dict, JSON text or description in between: a snapshot's JSON length and fields follow from its
endpoint, version, flag and its parameter names' lengths, and its equalities from ids.

Ids are numbered as ``episode_arrays`` numbers them with a memo of its own (value ids aside,
which are only compared for equality): ``tests/envs/test_contract_episodes.py`` compares the
two, value ids renamed, and plays both. An episode one of whose endpoints would take more names
than the word pairs give (the generator then numbers them) is made instead.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...core.accounting import HEADER_BYTES, INDEX_BYTES
from ...core.tracks import PRIVILEGED
from ...episodes.generators.contracts import _PAIR_NAMES, NAMES_BEFORE_NUMBERING
from ...episodes.generators.paper import episode_priorities
from ...episodes.sources import EpisodeRecipe
from . import layout as L
from .contract_replay import play_contract
from .episode_arrays import float_array, float_sections
from .paper_episodes import DrawnLabels, deprecated_section, metadata_lengths

_MAX_STATIC = 2**31
_NAME_LENGTHS = np.array([len(name) for name in _PAIR_NAMES], dtype=np.int64)


def contract_compilable(recipe: object) -> bool:
    """Whether ``compile_contract`` plays this episode: a generated one of the contract change
    model without documentation sections or renames."""
    c = recipe.config if isinstance(recipe, EpisodeRecipe) else None
    return (c is not None and c.change_model == "contract" and c.doc_prob == 0 and not c.renames
            and c.max_params <= NAMES_BEFORE_NUMBERING)


def compile_contract(recipe: EpisodeRecipe, track: str, reward_fn, budget: int):
    """``(static, floats, state)`` of the recipe's episode on ``track`` and its utilities,
    critical steps and WRITE costs (``paper_episodes.DrawnLabels``), ``reward_fn`` started on
    it; None when the episode must be made (numbered names) or its arrays are too large for int32."""
    c = recipe.config
    T = c.length
    played = play_contract(recipe)
    if played is None:
        return None
    content_of, utility, critical = played[:3]
    priorities = episode_priorities(c, recipe.seed, recipe.index, utility) if track == PRIVILEGED else None
    metadata = metadata_lengths(c.regime, priorities, T)
    compiled = _compile(*played, metadata, _NAME_LENGTHS, HEADER_BYTES + INDEX_BYTES)
    static, floats, state_size, costs = compiled
    if not len(static):
        return None
    critical_steps = tuple(np.flatnonzero(critical).tolist())
    utility.setflags(write=False)
    reward_fn.start_labels(T, critical_steps, utility, costs, budget)
    if priorities is not None or reward_fn._oracle_prefix is not None or reward_fn.known_oracle is not None:
        clipped = None if priorities is None else np.where(priorities > 0, np.minimum(priorities, 1.0), 0.0)
        floats = float_array(utility, clipped, floats[deprecated_section(T)], None, reward_fn)
    return (static, floats, np.zeros(state_size, dtype=np.int32)), DrawnLabels(critical_steps, utility, costs)


@njit(cache=True, inline="always")
def _digits(n):
    count = 1
    while n >= 10:
        n //= 10
        count += 1
    return count


@njit(cache=True, inline="always")
def _slot(table, keys, key):
    """Where ``key`` is in an open-addressing table of int64 keys (``keys[table[slot]]``), or the
    empty slot it would take."""
    size = table.shape[0]
    slot = ((key ^ (key >> 17)) * 0x2545F4914F6CDD1D) & (size - 1)
    while table[slot] >= 0 and keys[table[slot]] != key:
        slot = (slot + 1) & (size - 1)
    return slot


@njit(cache=True)
def _table(n):
    size = 1
    while size < 2 * n:
        size *= 2
    return np.full(size, -1, dtype=np.int64)


@njit(cache=True)
def _list_ids(p_start, p_flat, r_start, r_flat):
    """An id per distinct name list, numbered as first met among every content's parameter
    list, then every content's required list (``compile_episode``'s mask ids: equal lists are
    equal sets); per list its id (parameter lists first), and per id where it starts and ends
    in ``p_flat`` or, past ``p_flat``'s end, in ``r_flat``."""
    n = p_start.shape[0] - 1
    table = _table(2 * n)
    ids = np.empty(2 * n, dtype=np.int64)
    first = np.empty(2 * n, dtype=np.int64)  # per id, the list that introduced it
    n_ids = 0
    for k in range(2 * n):
        flat, a0, a1 = (p_flat, p_start[k], p_start[k + 1]) if k < n else (r_flat, r_start[k - n], r_start[k - n + 1])
        h = np.int64(a1 - a0)
        for j in range(a0, a1):
            h = h * 1000003 + flat[j]
        slot = h & (table.shape[0] - 1)
        ids[k] = -1
        while table[slot] >= 0:
            m = table[slot]
            o = first[m]
            other, b0, b1 = (p_flat, p_start[o], p_start[o + 1]) if o < n else (r_flat, r_start[o - n],
                                                                                 r_start[o - n + 1])
            if b1 - b0 == a1 - a0 and np.all(other[b0:b1] == flat[a0:a1]):
                ids[k] = m
                break
            slot = (slot + 1) & (table.shape[0] - 1)
        if ids[k] < 0:
            ids[k] = table[slot] = n_ids
            first[n_ids] = k
            n_ids += 1
    return ids, first[:n_ids]


_state_sizes = njit(cache=True)(L.state_sizes)


@njit(cache=True)
def _compile(content_of, utility, critical, endpoint, version, deprecated, p_start, p_flat, r_start, r_flat, metadata,
             name_lengths, entry_bytes):
    """``(static, floats, state size, costs)`` of a played episode (``_play``'s arrays), as
    ``compile_episode`` makes them of the made episode read with a memo of its own; its floats
    without priorities or any oracle; ``metadata``: each step's visible metadata's JSON length
    (one for all, or one per step). An empty ``static`` when the arrays are too large for int32."""
    T = content_of.shape[0]
    n = endpoint.shape[0]
    list_of, first_list = _list_ids(p_start, p_flat, r_start, r_flat)
    n_lists = first_list.shape[0]
    lists_length = 0
    for m in range(n_lists):
        k = first_list[m]
        lists_length += p_start[k + 1] - p_start[k] if k < n else r_start[k - n + 1] - r_start[k - n]
    # Families (endpoints) numbered as first shown; apis are the contents themselves (each
    # snapshot has a version of its own, so an "api" string of its own).
    family_of_endpoint = np.full(endpoint.max() + 1, -1, dtype=np.int64)
    n_families = 0
    for c in range(n):
        if family_of_endpoint[endpoint[c]] < 0:
            family_of_endpoint[endpoint[c]] = n_families
            n_families += 1
    sizes = np.zeros(L.N_STATIC, dtype=np.int64)
    for name in (L.COST, L.KIND, L.FAMILY, L.API, L.CONTENT, L.PREVIOUS, L.CRITICAL, L.RETURNS):
        sizes[name] = T
    for name in (L.VERSION_KIND, L.VERSION_RANK, L.PARAMS, L.REQUIRED, L.CONTRACT, L.IS_DICT, L.EQUALITY):
        sizes[name] = n
    sizes[L.FIELD_OFFSETS] = n + 1
    for name in (L.FIELD_KEYS, L.FIELD_VALUES, L.FIELD_LENGTHS, L.FIELD_IS_API):
        sizes[name] = 5 * n
    sizes[L.MASK_OFFSETS] = n_lists + 1
    sizes[L.MASK_BITS] = lists_length
    total = L.HEADER_SIZE + sizes.sum()
    if total >= _MAX_STATIC or sum(_state_sizes(T, n_families, n)) >= _MAX_STATIC:
        return np.zeros(0, dtype=np.int32), np.zeros(0), 0, np.zeros(0, dtype=np.int64)
    # Contracts: (parameter set, required set, deprecated, not removed), numbered as first shown.
    contract_of = np.empty(n, dtype=np.int64)
    contract_keys = np.empty(n, dtype=np.int64)
    table = _table(n)
    n_contracts = 0
    for c in range(n):
        key = (list_of[c] * n_lists + list_of[n + c]) * 2 + (1 if deprecated[c] else 0)
        slot = _slot(table, contract_keys, key)
        if table[slot] < 0:
            table[slot] = n_contracts
            contract_keys[n_contracts] = key
            n_contracts += 1
        contract_of[c] = table[slot]
    # Version ranks among the episode's distinct versions.
    top = version.max()
    present = np.zeros(top + 1, dtype=np.bool_)
    for c in range(n):
        present[version[c]] = True
    rank = np.zeros(top + 1, dtype=np.int64)
    for v in range(1, top + 1):
        rank[v] = rank[v - 1] + present[v - 1]
    # Value ids: ints by value (deprecated 0 / 1, versions), the api strings, the name lists, None.
    api_base = top + 1
    list_base = api_base + n
    static = np.zeros(total, dtype=np.int32)
    static[L.H_LENGTH], static[L.H_FAMILIES], static[L.H_APIS] = T, n_families, n
    static[L.H_NONE_VALUE] = list_base + n_lists
    at = np.empty(L.N_STATIC, dtype=np.int64)
    position = L.HEADER_SIZE
    for name in range(L.N_STATIC):
        at[name] = static[L.H_STATIC + name] = position
        position += sizes[name]
    position = 0
    for k, size in enumerate(_state_sizes(T, n_families, n)):
        static[L.H_STATE + k] = position
        position += size
    state_size = position
    text = np.empty(n, dtype=np.int64)
    for c in range(n):
        static[at[L.VERSION_KIND] + c] = L.VERSION_NUMBER
        static[at[L.VERSION_RANK] + c] = rank[version[c]]
        static[at[L.PARAMS] + c] = list_of[c]
        static[at[L.REQUIRED] + c] = list_of[n + c]
        static[at[L.CONTRACT] + c] = contract_of[c]
        static[at[L.IS_DICT] + c] = 1
        static[at[L.EQUALITY] + c] = -2 - c
        static[at[L.FIELD_OFFSETS] + c + 1] = 5 * (c + 1)
        # The fields in key order (api, deprecated, params, required, version): each length is the
        # key's text and ": " plus the value's JSON text; a list of names is 4 per name beyond them.
        v_digits = _digits(version[c])
        lists = np.zeros(2, dtype=np.int64)
        for side in range(2):
            flat, a0, a1 = (p_flat, p_start[c], p_start[c + 1]) if side == 0 else (r_flat, r_start[c], r_start[c + 1])
            lists[side] = 2 if a1 == a0 else 4 * (a1 - a0)
            for j in range(a0, a1):
                lists[side] += name_lengths[flat[j]]
        f, v, g = at[L.FIELD_KEYS] + 5 * c, at[L.FIELD_VALUES] + 5 * c, at[L.FIELD_LENGTHS] + 5 * c
        for k in range(5):
            static[f + k] = k
        static[v], static[v + 1], static[v + 2] = api_base + c, 1 if deprecated[c] else 0, list_base + list_of[c]
        static[v + 3], static[v + 4] = list_base + list_of[n + c], version[c]
        static[g] = 7 + 17 + v_digits + _digits(endpoint[c])
        static[g + 1] = 14 + (4 if deprecated[c] else 5)
        static[g + 2] = 10 + lists[0]
        static[g + 3] = 12 + lists[1]
        static[g + 4] = 11 + v_digits
        static[at[L.FIELD_IS_API] + 5 * c] = 1
        text[c] = 10 + static[g] + static[g + 1] + static[g + 2] + static[g + 3] + static[g + 4]
    costs = np.empty(T, dtype=np.int64)
    step_deprecated = np.empty(T, dtype=np.float64)
    last_of_family = np.full(n_families, -1, dtype=np.int64)
    seen_keys = np.empty(T, dtype=np.int64)  # (family, contract) pairs shown so far
    seen = _table(T)
    n_seen = 0
    for t in range(T):
        c = content_of[t]
        costs[t] = text[c] + metadata[t if metadata.shape[0] > 1 else 0] + entry_bytes
        step_deprecated[t] = 1.0 if deprecated[c] else 0.0
        family = family_of_endpoint[endpoint[c]]
        previous = last_of_family[family]
        contract = contract_of[c]
        static[at[L.COST] + t] = costs[t]
        static[at[L.KIND] + t] = L.KIND_ENDPOINT
        static[at[L.FAMILY] + t] = family
        static[at[L.API] + t] = c
        static[at[L.CONTENT] + t] = c
        static[at[L.PREVIOUS] + t] = previous
        static[at[L.CRITICAL] + t] = critical[t]
        # returns_to_earlier: the contract differs from the family's last shown one, and an
        # earlier step of the family showed it.
        slot = _slot(seen, seen_keys, family * n_contracts + contract)
        shown_before = seen[slot] >= 0
        if not shown_before:
            seen[slot] = n_seen
            seen_keys[n_seen] = family * n_contracts + contract
            n_seen += 1
        static[at[L.RETURNS] + t] = (previous >= 0 and contract != contract_of[content_of[previous]]
                                     and shown_before)
        last_of_family[family] = t
    # Parameter sets: a parameter's id numbered as first met in the contents' parameter lists
    # (sorted names, in content order), a set's members in ascending id.
    bit_of = np.full(name_lengths.shape[0], -1, dtype=np.int64)
    n_bits = 0
    for j in range(p_flat.shape[0]):
        if bit_of[p_flat[j]] < 0:
            bit_of[p_flat[j]] = n_bits
            n_bits += 1
    bits = at[L.MASK_BITS]
    for m in range(n_lists):
        k = first_list[m]
        flat, a0, a1 = (p_flat, p_start[k], p_start[k + 1]) if k < n else (r_flat, r_start[k - n],
                                                                           r_start[k - n + 1])
        members = np.sort(bit_of[flat[a0:a1]])
        static[bits:bits + members.shape[0]] = members
        bits += members.shape[0]
        static[at[L.MASK_OFFSETS] + m + 1] = bits - at[L.MASK_BITS]
    none = np.zeros(0, dtype=np.float64)
    floats = float_sections(utility, none, step_deprecated, none, none, np.nan)
    return static, floats, state_size, costs
