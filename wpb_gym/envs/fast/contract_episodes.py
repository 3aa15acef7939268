"""Generated episodes of the contract change model, compiled from their draws without being made.

A contract episode without text (no documentation sections, no renames and their migration
guides: the ``breaking``, ``reverts`` and ``noisy_priority`` regimes) shows endpoint snapshots
only, ``{"api": "api.v<V>.endpoint_<i>", "deprecated": <bool>, "params": [<names>], "required":
[<names>], "version": <V>}``, each a function of its endpoint state. ``compile_drawn`` plays the
episode's draws with the generator's own functions (``contract_structure.take_names`` and
``play``, compiled) and writes the arrays ``episode_arrays`` would make of the generated
episode (``describe_episode``, then ``compile_episode``), with no observation dict, JSON text or
description in between: a snapshot's JSON length and fields follow from its state and the
lengths of its parameter names (word pairs).

Ids are numbered as ``episode_arrays`` numbers them for a fresh ``ContentMemo``: contents,
families, parameter sets (masks) and contracts in first-shown order, a parameter (its word
pair) as first met reading the parameter lists and then the required lists, each list in the
sorted order the snapshot shows; a value's id is equal exactly when Python's ``==`` is (ints
by value, so ``True`` and version 1 share one), and a content's equality id is unique. An
episode whose names were numbered (an endpoint past ``NAMES_BEFORE_NUMBERING`` names) is left
to the made episode. The differential tests compare the two and play both.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.accounting import HEADER_BYTES, INDEX_BYTES
from ...core.tracks import PRIVILEGED
from ...episodes.generators import contract_structure
from ...episodes.generators.contracts import pair_names
from ...episodes.generators.paper import GeneratorConfig, contract_episode_structure, episode_priorities
from ...episodes.sources import EpisodeRecipe
from . import layout as L
from .compile_cache import cached
from .episode_arrays import float_sections
from .paper_episodes import (
    digits,
    metadata_lengths,
    regime_metadata,
    snapshot_step,
    started_arrays,
    state_sizes,
    static_array,
    static_sizes,
    version_ranks,
)

_MAX_STATIC = 2**31
# Each word pair's name: its length, and its rank in sorted order (a snapshot's lists are sorted).
_PAIR_LENGTHS = np.array([len(name) for name in pair_names()], dtype=np.int64)
_PAIR_RANKS = np.argsort(np.argsort(np.array(pair_names(), dtype=object), kind="stable"), kind="stable").astype(
    np.int64)
_FIELDS = 5  # api, deprecated, params, required, version: the key ids in this order


def drawn_compilable(recipe: Any) -> bool:
    """Whether ``compile_drawn`` plays this episode: a generated one of the contract change model
    without text, whose endpoints start with fewer than half the names that would be numbered
    (endpoints that start with more may well number some, and their episodes are made, which
    episode workers can do ahead; past that, ``compile_drawn`` finds numbered names after the
    draws). Its utilities are all halves (0, 0.5, 1, 2, 5, 6), which ``drawn_batches.end_drawn``
    relies on to score it in half units."""
    c = recipe.config if isinstance(recipe, EpisodeRecipe) else None
    return (isinstance(c, GeneratorConfig) and c.change_model == "contract" and c.doc_prob == 0 and not c.renames
            and c.max_params < contract_structure.NAMES_BEFORE_NUMBERING // 2)


compiled_take = cached()(contract_structure.take_names)
compiled_play = cached()(contract_structure.play)


def make(recipe: EpisodeRecipe) -> Any:
    """``recipe.make()``, a contract regime's episode made with the generator's functions compiled
    (``generate_episode`` runs them as Python): the same episode."""
    c = recipe.config
    if isinstance(c, GeneratorConfig) and c.change_model == "contract":
        return recipe.make(take_names=compiled_take, play=compiled_play)
    return recipe.make()


def compile_drawn(recipe: EpisodeRecipe, track: str, reward_fn: Any, budget: int, limits: Any = None):
    """``(static, floats, state)`` of the recipe's episode on ``track`` and its
    ``paper_episodes.DrawnLabels``, ``reward_fn`` started on it (under ``limits``, a
    ``StoreLimits``, if given); None when its names were numbered or the arrays are too large
    for int32."""
    c = recipe.config
    s = contract_episode_structure(c, recipe.seed, recipe.index, take_names=compiled_take, play=compiled_play)
    if track != PRIVILEGED:
        priorities = None
        metadata = regime_metadata(c.regime)
    else:
        priorities = episode_priorities(c, recipe.seed, recipe.index, s.utility)
        metadata = metadata_lengths(c.regime, priorities, c.length)
    compiled = contract_arrays(s.content_of, s.critical, s.utility, s.state_endpoint, s.state_version,
                               s.state_deprecated, s.param_start, s.params, s.required_start, s.required,
                               s.name_pair, s.name_suffix, _PAIR_LENGTHS, _PAIR_RANKS, metadata,
                               HEADER_BYTES + INDEX_BYTES)
    return started_arrays(*compiled, priorities, reward_fn, budget, limits)


# Lists longer than this are sorted by NumPy, shorter ones by insertion (no array made per list).
_SHORT_LIST = 32


@cached(inline="always")
def _sorted_lists(contents, start, items, key):
    """Each content's list (``items[start[s]:start[s + 1]]`` of its state ``s``) in ascending
    ``key`` order (distinct keys), as offsets and items."""
    total = 0
    for c in range(contents.shape[0]):
        total += start[contents[c] + 1] - start[contents[c]]
    out_start = np.empty(contents.shape[0] + 1, dtype=np.int64)
    out = np.empty(total, dtype=np.int64)
    position = 0
    for c in range(contents.shape[0]):
        s = contents[c]
        out_start[c] = position
        if start[s + 1] - start[s] > _SHORT_LIST:
            listed = items[start[s]:start[s + 1]]
            for j in np.argsort(key[listed]):
                out[position] = listed[j]
                position += 1
            continue
        for j in range(start[s], start[s + 1]):
            value = items[j]
            k = position
            while k > out_start[c] and key[out[k - 1]] > key[value]:
                out[k] = out[k - 1]
                k -= 1
            out[k] = value
            position += 1
    out_start[contents.shape[0]] = position
    return out_start, out


@cached(inline="always")
def _list_length(starts, names, c, name_pair, pair_lengths):
    """The JSON length of content ``c``'s list of names: ``'["a", "bc"]'`` is 4 per name and its letters."""
    if starts[c + 1] == starts[c]:
        return 2
    length = 4 * (starts[c + 1] - starts[c])
    for j in range(starts[c], starts[c + 1]):
        length += pair_lengths[name_pair[names[j]]]
    return length


@cached(inline="always")
def _slot(table, h):
    return h & (table.shape[0] - 1)


@cached()
def contract_arrays(content_of, critical, utility, state_endpoint, state_version, state_deprecated, param_start,
                    params, required_start, required, name_pair, name_suffix, pair_lengths, pair_ranks, metadata,
                    entry_bytes):
    """``(static, floats, state size, utility, costs, critical)`` of a contract episode's
    ``contract_structure.Structure`` (its fields as arguments), as ``paper_episodes`` gives
    them; an empty ``static`` for an episode left to the made one (numbered names, or arrays
    too large for int32)."""
    T = content_of.shape[0]
    empty = np.zeros(0, dtype=np.int32)
    for k in range(name_suffix.shape[0]):
        if name_suffix[k] >= 0:
            return empty, np.zeros(0), 0, utility, np.zeros(0, dtype=np.int64), critical
    # Contents: the states shown, in first-shown order.
    n_states = state_endpoint.shape[0]
    content_of_state = np.full(n_states, -1, dtype=np.int64)
    contents = np.empty(n_states, dtype=np.int64)
    n = 0
    step_content = np.empty(T, dtype=np.int64)
    for t in range(T):
        s = content_of[t]
        if content_of_state[s] < 0:
            content_of_state[s] = n
            contents[n] = s
            n += 1
        step_content[t] = content_of_state[s]
    contents = contents[:n]
    # Each content's lists as the snapshot shows them: names sorted (their word pairs' ranks).
    name_rank = np.empty(name_pair.shape[0], dtype=np.int64)
    for k in range(name_pair.shape[0]):
        name_rank[k] = pair_ranks[name_pair[k]]
    shown_start, shown_params = _sorted_lists(contents, param_start, params, name_rank)
    shown_required_start, shown_required = _sorted_lists(contents, required_start, required, name_rank)
    # A parameter's id: its word pair's, numbered as first met (parameter lists, then required lists).
    bit_of_pair = np.full(pair_lengths.shape[0], -1, dtype=np.int64)
    n_bits = 0
    for j in range(shown_params.shape[0]):
        p = name_pair[shown_params[j]]
        if bit_of_pair[p] < 0:
            bit_of_pair[p] = n_bits
            n_bits += 1
    for j in range(shown_required.shape[0]):
        p = name_pair[shown_required[j]]
        if bit_of_pair[p] < 0:
            bit_of_pair[p] = n_bits
            n_bits += 1
    # Parameter sets (masks): equal lists share an id, numbered as first met (the parameter
    # lists, then the required lists), through an open-addressing table on their members.
    members = np.empty(shown_params.shape[0] + shown_required.shape[0], dtype=np.int64)
    list_start = np.empty(2 * n + 1, dtype=np.int64)
    position = 0
    for half in range(2):
        starts = shown_start if half == 0 else shown_required_start
        names = shown_params if half == 0 else shown_required
        for c in range(n):
            list_start[half * n + c] = position
            a = position
            if starts[c + 1] - starts[c] > _SHORT_LIST:
                for value in np.sort(bit_of_pair[name_pair[names[starts[c]:starts[c + 1]]]]):
                    members[position] = value
                    position += 1
                continue
            for j in range(starts[c], starts[c + 1]):  # ascending ids, by insertion
                value = bit_of_pair[name_pair[names[j]]]
                k = position
                while k > a and members[k - 1] > value:
                    members[k] = members[k - 1]
                    k -= 1
                members[k] = value
                position += 1
    list_start[2 * n] = position
    size = 1
    while size < 4 * n + 2:
        size *= 2
    table = np.full(size, -1, dtype=np.int64)
    mask_of_list = np.empty(2 * n, dtype=np.int64)
    mask_rep = np.empty(2 * n, dtype=np.int64)  # a mask's first list
    n_masks = 0
    mask_bits = 0
    for m in range(2 * n):
        a0, a1 = list_start[m], list_start[m + 1]
        h = np.int64(a1 - a0)
        for j in range(a0, a1):
            h = h * 1000003 + members[j]
        slot = _slot(table, h)
        found = -1
        while table[slot] >= 0:
            other = mask_rep[table[slot]]
            b0, b1 = list_start[other], list_start[other + 1]
            if b1 - b0 == a1 - a0:
                same = True
                for j in range(a1 - a0):
                    if members[a0 + j] != members[b0 + j]:
                        same = False
                        break
                if same:
                    found = table[slot]
                    break
            slot = _slot(table, slot + 1)
        if found < 0:
            found = n_masks
            table[slot] = found
            mask_rep[found] = m
            n_masks += 1
            mask_bits += a1 - a0
        mask_of_list[m] = found
    # Contracts: (parameter set, required set, deprecated), numbered as first shown.
    contract_of = np.empty(n, dtype=np.int64)
    size = 1
    while size < 2 * n + 2:
        size *= 2
    keys = np.full(size, -1, dtype=np.int64)
    values = np.empty(size, dtype=np.int64)
    n_contracts = 0
    for c in range(n):
        key = (mask_of_list[c] * n_masks + mask_of_list[n + c]) * 2 + (1 if state_deprecated[contents[c]] else 0)
        slot = _slot(keys, key * 1000003)
        while keys[slot] >= 0 and keys[slot] != key:
            slot = _slot(keys, slot + 1)
        if keys[slot] < 0:
            keys[slot], values[slot] = key, n_contracts
            n_contracts += 1
        contract_of[c] = values[slot]
    # Families (endpoints) numbered as first shown.
    family_of_endpoint = np.full(state_endpoint.max() + 1, -1, dtype=np.int64)
    n_families = 0
    for c in range(n):
        e = state_endpoint[contents[c]]
        if family_of_endpoint[e] < 0:
            family_of_endpoint[e] = n_families
            n_families += 1
    rank = version_ranks(state_version[contents])
    # Value ids: ints by value (deprecated 0 / 1, versions), then the api strings, lists and None.
    api_base = rank.shape[0]
    list_base = api_base + n
    none_value = list_base + n_masks
    sizes = static_sizes(T, n, _FIELDS * n, n_masks, mask_bits)
    if L.HEADER_SIZE + sizes.sum() >= _MAX_STATIC or sum(state_sizes(T, n_families, n)) >= _MAX_STATIC:
        return empty, np.zeros(0), 0, utility, np.zeros(0, dtype=np.int64), critical
    static, at = static_array(T, n_families, n, none_value, sizes)
    state_position = 0
    for k, size in enumerate(state_sizes(T, n_families, n)):
        static[L.H_STATE + k] = state_position
        state_position += size

    text = np.empty(n, dtype=np.int64)
    for c in range(n):
        s = contents[c]
        v_digits = digits(state_version[s])
        params_length = _list_length(shown_start, shown_params, c, name_pair, pair_lengths)
        required_length = _list_length(shown_required_start, shown_required, c, name_pair, pair_lengths)
        static[at[L.VERSION_KIND] + c] = L.VERSION_NUMBER
        static[at[L.VERSION_RANK] + c] = rank[state_version[s]]
        static[at[L.PARAMS] + c] = mask_of_list[c]
        static[at[L.REQUIRED] + c] = mask_of_list[n + c]
        static[at[L.CONTRACT] + c] = contract_of[c]
        static[at[L.IS_DICT] + c] = 1
        static[at[L.EQUALITY] + c] = -2 - c
        static[at[L.FIELD_OFFSETS] + c + 1] = _FIELDS * (c + 1)
        f = at[L.FIELD_KEYS] + _FIELDS * c
        v = at[L.FIELD_VALUES] + _FIELDS * c
        g = at[L.FIELD_LENGTHS] + _FIELDS * c
        for k in range(_FIELDS):
            static[f + k] = k
        static[v], static[v + 1], static[v + 2], static[v + 3], static[v + 4] = (
            api_base + c, 1 if state_deprecated[s] else 0, list_base + mask_of_list[c],
            list_base + mask_of_list[n + c], state_version[s])
        # Each field's length: the key's text and ": " plus the value's JSON text.
        static[g] = 7 + 17 + v_digits + digits(state_endpoint[s])
        static[g + 1] = 14 + (4 if state_deprecated[s] else 5)
        static[g + 2] = 10 + params_length
        static[g + 3] = 12 + required_length
        static[g + 4] = 11 + v_digits
        static[at[L.FIELD_IS_API] + _FIELDS * c] = 1
        # The snapshot's text: its fields, braces and separators.
        text[c] = static[g] + static[g + 1] + static[g + 2] + static[g + 3] + static[g + 4] + 2 * _FIELDS
    bits = at[L.MASK_BITS]
    for m in range(n_masks):
        first = mask_rep[m]
        for j in range(list_start[first], list_start[first + 1]):
            static[bits] = members[j]
            bits += 1
        static[at[L.MASK_OFFSETS] + m + 1] = bits - at[L.MASK_BITS]

    costs = np.empty(T, dtype=np.int64)
    step_deprecated = np.empty(T, dtype=np.float64)
    last_of_family = np.full(n_families, -1, dtype=np.int64)
    # Whether an earlier step of the family showed the contract: (family, contract) keys seen.
    size = 1
    while size < 2 * T + 2:
        size *= 2
    seen = np.full(size, -1, dtype=np.int64)
    for t in range(T):
        c = step_content[t]
        s = contents[c]
        costs[t] = text[c] + metadata[t if metadata.shape[0] > 1 else 0] + entry_bytes
        step_deprecated[t] = 1.0 if state_deprecated[s] else 0.0
        family = family_of_endpoint[state_endpoint[s]]
        previous = last_of_family[family]
        contract = contract_of[c]
        key = family * n_contracts + contract
        slot = _slot(seen, key * 1000003)
        while seen[slot] >= 0 and seen[slot] != key:
            slot = _slot(seen, slot + 1)
        shown_before = seen[slot] >= 0
        seen[slot] = key
        returns = previous >= 0 and contract != contract_of[step_content[previous]] and shown_before
        snapshot_step(static, at, t, costs[t], family, c, previous, critical[t], returns)
        last_of_family[family] = t
    none = np.zeros(0, dtype=np.float64)
    floats = float_sections(utility, none, step_deprecated, none, none, np.nan)
    return static, floats, state_position, utility, costs, critical
