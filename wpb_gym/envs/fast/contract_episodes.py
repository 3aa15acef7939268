"""Generated episodes of the contract change model, compiled from their draws without being made.

Such an episode shows endpoint snapshots
``{"api": "api.v<V>.endpoint_<i>", "deprecated": <bool>, "params": [...], "required": [...], "version": <V>}``
(``endpoint_<i>_r<k>`` after k renames), documentation sections
``{"content": <text>, "last_updated": <date>, "section": "endpoint_<i>/docs"}`` and migration
guides ``{"deadline": <date>, "new_api": <api>, "notes": <text>, "old_api": <api>}``.
``compile_contract`` replays the generator on its draws (``contract_replay``) and writes the
arrays ``episode_arrays`` would make of the made episode (``_compile``), with no observation
dict, JSON text or description in between: an observation's JSON length and fields follow from
its endpoint, version, renames, flag, day, its parameter names' lengths and its text's length,
and its equalities from ids (a text's from its bytes).

``compile_played`` also writes the paper model's episodes with sections or guides
(``paper_text_episodes``), whose snapshots have no "required" list and whose sections have
topics.

Ids are numbered as ``episode_arrays`` numbers them with a memo of its own (value ids aside,
which are only compared for equality): ``tests/envs/test_contract_episodes.py`` compares the
two, value ids renamed, and plays both. An episode is made instead when one of its endpoints
would take more names than the word pairs give (the generator then numbers them), when its text
stream is NumPy's to draw (``numpy_streams``), or when its sizes pass the bounds below.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...core.accounting import HEADER_BYTES, INDEX_BYTES
from ...core.tracks import PRIVILEGED
from ...episodes.generators.contracts import _PAIR_NAMES, NAMES_BEFORE_NUMBERING
from ...episodes.generators.paper import episode_priorities
from ...episodes.sources import EpisodeRecipe
from ..observation.stream_table import KIND_DOC, KIND_ENDPOINT
from . import layout as L
from .contract_replay import (
    C_DAY,
    C_DEPRECATED,
    C_ENDPOINT,
    C_KIND,
    C_NAME,
    C_OLD_NAME,
    C_TEXT,
    C_TEXT_LENGTH,
    C_TOPIC,
    C_VERSION,
    play_contract,
)
from .episode_arrays import float_sections
from .id_tables import dense, list_ids, listed, slot_of, table_of, text_classes
from .paper_episodes import digits, metadata_lengths, started, static_sizes

_MAX_STATIC = 2**31
_MAX_COST = 2**31
# An api's id is (version * pool + endpoint) * (T + 2) + renames (int64); a date stays within
# four-digit years.
MAX_LENGTH = 1_000_000
MAX_POOL = 1_000_000
# Each endpoint's lists are rows as wide as the longest (widened as it grows): at most this many
# cells, as in paper_episodes (larger episodes are made and read).
MAX_CELLS = 2**24
_NAME_LENGTHS = np.array([len(name) for name in _PAIR_NAMES], dtype=np.int64)
_CONTRACT_TOPICS = np.array([len("docs")], dtype=np.int64)  # a section is "endpoint_<i>/docs"


def contract_compilable(recipe: object) -> bool:
    """Whether ``compile_contract`` plays this episode: a generated one of the contract change
    model whose endpoints start with fewer names than would be numbered, its sizes within what
    the compiled ids and ISO dates hold."""
    c = recipe.config if isinstance(recipe, EpisodeRecipe) else None
    return (c is not None and c.change_model == "contract" and c.max_params <= NAMES_BEFORE_NUMBERING
            and c.length <= MAX_LENGTH and c.api_pool <= MAX_POOL
            and c.api_pool * (c.max_params + c.length + 1) <= MAX_CELLS)


def compile_contract(recipe: EpisodeRecipe, track: str, reward_fn, budget: int):
    """``(static, floats, state)`` of the recipe's episode on ``track`` and its utilities,
    critical steps and WRITE costs (``paper_episodes.DrawnLabels``), ``reward_fn`` started on
    it; None when the episode must be made (numbered names, a text stream NumPy draws) or its
    arrays are too large for int32."""
    played = play_contract(recipe)
    if played is None:
        return None
    content_of, utility, critical, contents, p_start, p_flat, r_start, r_flat, text = played
    lists = (p_start, p_flat, _NAME_LENGTHS[p_flat], r_start, r_flat, _NAME_LENGTHS[r_flat])
    return compile_played(recipe, track, reward_fn, budget, (content_of, utility, critical, contents, *lists, text),
                          True, _CONTRACT_TOPICS)


def compile_played(recipe: EpisodeRecipe, track: str, reward_fn, budget: int, played: tuple, with_required: bool,
                   topic_lengths: np.ndarray):
    """``compile_contract``'s result from a replayed episode's columns (``_compile``'s first
    arguments), its snapshots with a "required" list or not, its sections' topics' lengths."""
    c = recipe.config
    T = c.length
    utility, critical = played[1:3]
    priorities = episode_priorities(c, recipe.seed, recipe.index, utility) if track == PRIVILEGED else None
    metadata = metadata_lengths(c.regime, priorities, T)
    static, floats, state_size, costs = _compile(*played, metadata, with_required, topic_lengths,
                                                 HEADER_BYTES + INDEX_BYTES)
    return started(static, floats, state_size, utility, costs, critical, priorities, reward_fn, budget)


@njit(cache=True, inline="always")
def _list_length(lengths, a0, a1):
    """The JSON length of a list of names whose lengths are ``lengths[a0:a1]``: 4 per name beyond
    them (quotes, comma and space, the brackets), "[]" when empty."""
    total = 2 if a1 == a0 else 4 * (a1 - a0)
    for j in range(a0, a1):
        total += lengths[j]
    return total


@njit(cache=True, inline="always")
def _api_length(version, endpoint, renames):
    """The JSON length of ``"api.v<version>.endpoint_<endpoint>"`` (``_r<renames>`` after a rename)."""
    return 17 + digits(version) + digits(endpoint) + (2 + digits(renames) if renames else 0)


_state_sizes = njit(cache=True)(L.state_sizes)
# Per kind of content (KIND_ENDPOINT, KIND_DOC, KIND_GUIDE): its fields, and each key's JSON
# length with its quotes and ": " ("api", "deprecated", "params", "required", "version";
# "content", "last_updated", "section"; "deadline", "new_api", "notes", "old_api").
# A snapshot without a "required" list (the paper model's) has the first row's keys but "required".
_FIELDS = np.array([5, 3, 4], dtype=np.int64)
_KEY_LENGTHS = np.array([[7, 14, 10, 12, 11], [11, 16, 11, 0, 0], [12, 11, 9, 11, 0]], dtype=np.int64)
_UNREQUIRED_KEY_LENGTHS = np.array([7, 14, 10, 11], dtype=np.int64)


@njit(cache=True)
def _compile(content_of, utility, critical, contents, p_start, p_flat, p_lengths, r_start, r_flat, r_lengths, text,
             metadata, with_required, topic_lengths, entry_bytes):
    """``(static, floats, state size, costs)`` of a played episode (``contract_replay._play``'s
    arrays, with each listed name's length), as ``compile_episode`` makes them of the made
    episode read with a memo of its own; its floats without priorities or any oracle;
    ``metadata``: each step's visible metadata's JSON length (one for all, or one per step);
    ``with_required``: whether snapshots have a "required" list; ``topic_lengths``: the length
    of each section topic. An empty ``static`` when the arrays are too large for int32."""
    T = content_of.shape[0]
    n = contents.shape[0]
    kind = contents[:, C_KIND]
    endpoint, version, renames = contents[:, C_ENDPOINT], contents[:, C_VERSION], contents[:, C_NAME]
    day = contents[:, C_DAY]
    is_snapshot = kind == KIND_ENDPOINT
    list_of, first_list = list_ids(p_start, p_flat, r_start, r_flat, is_snapshot, with_required)
    fields = _FIELDS.copy()
    key_lengths = _KEY_LENGTHS.copy()
    if not with_required:
        fields[0] = 4
        key_lengths[0, :4] = _UNREQUIRED_KEY_LENGTHS
    n_topics = topic_lengths.shape[0]
    n_lists = first_list.shape[0]
    lists_length = 0
    for m in range(n_lists):
        flat, a0, a1 = listed(first_list[m], n, p_start, p_flat, r_start, r_flat)
        lists_length += a1 - a0
    # Families, numbered as first shown: an endpoint's name (its renames apart), a section's
    # endpoint, a guide's old name; apis are the snapshots themselves (each has a version of its own).
    span = T + 2
    family_keys = np.empty(n, dtype=np.int64)
    n_fields = 0
    api_of = np.full(n, -1, dtype=np.int64)
    n_apis = 0
    for c in range(n):
        if kind[c] == KIND_ENDPOINT:
            family_keys[c] = (endpoint[c] * span + renames[c]) * 3
            api_of[c] = n_apis
            n_apis += 1
        elif kind[c] == KIND_DOC:  # a section title: its endpoint and topic
            family_keys[c] = (endpoint[c] * n_topics + contents[c, C_TOPIC]) * 3 + 1
        else:  # the family of a guide's old api
            family_keys[c] = (endpoint[c] * span + contents[c, C_OLD_NAME]) * 3 + 2
        n_fields += fields[kind[c] - KIND_ENDPOINT]
    family_of, n_families = dense(family_keys)
    sizes = static_sizes(T, n, n_fields, n_lists, lists_length)
    total = L.HEADER_SIZE + sizes.sum()
    if total >= _MAX_STATIC or sum(_state_sizes(T, n_families, n_apis)) >= _MAX_STATIC:
        return np.zeros(0, dtype=np.int32), np.zeros(0), 0, np.zeros(0, dtype=np.int64)
    # Contracts: (parameter set, required set, deprecated, not removed), numbered as first shown.
    contract_of = np.full(n, -1, dtype=np.int64)
    contract_keys = np.empty(n, dtype=np.int64)
    table = table_of(n)
    n_contracts = 0
    for c in range(n):
        if not is_snapshot[c]:
            continue
        key = (list_of[c] * (n_lists + 1) + list_of[n + c] + 1) * 2 + contents[c, C_DEPRECATED]
        slot = slot_of(table, contract_keys, key)
        if table[slot] < 0:
            table[slot] = n_contracts
            contract_keys[n_contracts] = key
            n_contracts += 1
        contract_of[c] = table[slot]
    # Version ranks: a snapshot's among the snapshots' versions, a section's among the sections'
    # dates (ISO dates sort as their days); a guide has none (all of one rank).
    top = 1
    for c in range(n):
        if is_snapshot[c]:
            top = max(top, version[c])
    present = np.zeros(top + 1, dtype=np.bool_)
    for c in range(n):
        if is_snapshot[c]:
            present[version[c]] = True
    rank = np.zeros(top + 1, dtype=np.int64)
    for v in range(1, top + 1):
        rank[v] = rank[v - 1] + present[v - 1]
    last_day = 0
    for c in range(n):
        if kind[c] != KIND_ENDPOINT:
            last_day = max(last_day, day[c])
    day_present = np.zeros(last_day + 1, dtype=np.bool_)
    for c in range(n):
        if kind[c] == KIND_DOC:
            day_present[day[c]] = True
    day_rank = np.zeros(last_day + 1, dtype=np.int64)
    for d in range(1, last_day + 1):
        day_rank[d] = day_rank[d - 1] + day_present[d - 1]
    # Value ids, equal exactly when the values are: ints by value (deprecated 0 / 1, versions),
    # then the api strings (a snapshot's, a guide's new and old names), dates, section titles,
    # texts and name lists, and None.
    pool = endpoint.max() + 1
    api_keys = np.empty(2 * n, dtype=np.int64)  # per content: its api or a guide's new one, a guide's old one
    for c in range(n):
        api_keys[2 * c] = (version[c] * pool + endpoint[c]) * span + renames[c]
        api_keys[2 * c + 1] = ((version[c] - 1) * pool + endpoint[c]) * span + max(contents[c, C_OLD_NAME], 0)
    api_value, n_api_values = dense(api_keys)
    day_value, n_days = dense(day)
    section_value, n_sections = dense(endpoint * n_topics + contents[:, C_TOPIC])
    text_value = text_classes(contents[:, C_TEXT], contents[:, C_TEXT_LENGTH], text)
    api_base = top + 1
    day_base = api_base + n_api_values
    section_base = day_base + n_days
    text_base = section_base + n_sections
    list_base = text_base + n + 1
    # Key ids, as the memo numbers them: "api" first, then each kind's keys in its dict's order
    # when the kind is first shown.
    key_ids = np.zeros((3, 5), dtype=np.int64)
    next_key = 1
    for c in range(n):
        k = kind[c] - KIND_ENDPOINT
        if key_ids[k, 1] == 0:
            for j in range(1 if k == 0 else 0, fields[k]):
                key_ids[k, j] = next_key
                next_key += 1
    static = np.zeros(total, dtype=np.int32)
    static[L.H_LENGTH], static[L.H_FAMILIES], static[L.H_APIS] = T, n_families, n_apis
    static[L.H_NONE_VALUE] = list_base + n_lists
    at = np.empty(L.N_STATIC, dtype=np.int64)
    position = L.HEADER_SIZE
    for name in range(L.N_STATIC):
        at[name] = static[L.H_STATIC + name] = position
        position += sizes[name]
    position = 0
    for k, size in enumerate(_state_sizes(T, n_families, n_apis)):
        static[L.H_STATE + k] = position
        position += size
    state_size = position
    text_length = np.empty(n, dtype=np.int64)
    field = 0
    for c in range(n):
        k = kind[c] - KIND_ENDPOINT
        f, v, g = at[L.FIELD_KEYS] + field, at[L.FIELD_VALUES] + field, at[L.FIELD_LENGTHS] + field
        for j in range(fields[k]):
            static[f + j] = key_ids[k, j]
        static[at[L.IS_DICT] + c] = 1
        static[at[L.EQUALITY] + c] = -2 - c
        static[at[L.PARAMS] + c] = list_of[c]
        static[at[L.REQUIRED] + c] = list_of[n + c]
        static[at[L.CONTRACT] + c] = contract_of[c]
        length = 2 * fields[k]  # braces and separators
        for j in range(fields[k]):
            length += key_lengths[k, j]
        if kind[c] == KIND_ENDPOINT:
            static[at[L.VERSION_KIND] + c] = L.VERSION_NUMBER
            static[at[L.VERSION_RANK] + c] = rank[version[c]]
            static[v], static[v + 1] = api_base + api_value[2 * c], contents[c, C_DEPRECATED]
            static[v + 2] = list_base + list_of[c]
            static[g] = 7 + _api_length(version[c], endpoint[c], renames[c])
            static[g + 1] = 14 + (4 if contents[c, C_DEPRECATED] else 5)
            static[g + 2] = 10 + _list_length(p_lengths, p_start[c], p_start[c + 1])
            last = 3
            if with_required:
                static[v + 3] = list_base + list_of[n + c]
                static[g + 3] = 12 + _list_length(r_lengths, r_start[c], r_start[c + 1])
                last = 4
            static[v + last] = version[c]
            static[g + last] = 11 + digits(version[c])
            static[at[L.FIELD_IS_API] + field] = 1
            length = 2 * fields[0]
            for j in range(fields[0]):
                length += static[g + j]
        elif kind[c] == KIND_DOC:  # {"content": text, "last_updated": date, "section": "endpoint_<i>/<topic>"}
            static[at[L.VERSION_KIND] + c] = L.VERSION_STRING
            static[at[L.VERSION_RANK] + c] = day_rank[day[c]]
            static[v], static[v + 1] = text_base + text_value[c], day_base + day_value[c]
            static[v + 2] = section_base + section_value[c]
            # The text and date quoted, the title's "endpoint_", "/" and quotes around its parts.
            length += (contents[c, C_TEXT_LENGTH] + 2 + 12 + 12 + digits(endpoint[c])
                       + topic_lengths[contents[c, C_TOPIC]])
        else:  # {"deadline": date, "new_api": api, "notes": text, "old_api": api}
            static[at[L.VERSION_KIND] + c] = L.VERSION_OTHER
            static[v], static[v + 1] = day_base + day_value[c], api_base + api_value[2 * c]
            static[v + 2], static[v + 3] = text_base + text_value[c], api_base + api_value[2 * c + 1]
            length += (12 + _api_length(version[c], endpoint[c], renames[c]) + contents[c, C_TEXT_LENGTH] + 2
                       + _api_length(version[c] - 1, endpoint[c], contents[c, C_OLD_NAME]))
        text_length[c] = length
        field += fields[k]
        static[at[L.FIELD_OFFSETS] + c + 1] = field
    costs = np.empty(T, dtype=np.int64)
    step_deprecated = np.empty(T, dtype=np.float64)
    last_of_family = np.full(n_families, -1, dtype=np.int64)
    seen_keys = np.empty(T, dtype=np.int64)  # (family, contract) pairs shown so far
    seen = table_of(T)
    n_seen = 0
    for t in range(T):
        c = content_of[t]
        costs[t] = text_length[c] + metadata[t if metadata.shape[0] > 1 else 0] + entry_bytes
        step_deprecated[t] = 1.0 if is_snapshot[c] and contents[c, C_DEPRECATED] else 0.0
        family = family_of[c]
        previous = last_of_family[family]
        contract = contract_of[c]
        static[at[L.COST] + t] = costs[t]
        static[at[L.KIND] + t] = kind[c]
        static[at[L.FAMILY] + t] = family
        static[at[L.API] + t] = api_of[c]
        static[at[L.CONTENT] + t] = c
        static[at[L.PREVIOUS] + t] = previous
        static[at[L.CRITICAL] + t] = critical[t]
        # returns_to_earlier: the contract differs from the family's last shown one, and an
        # earlier step of the family showed it.
        if contract >= 0:
            slot = slot_of(seen, seen_keys, family * n_contracts + contract)
            shown_before = seen[slot] >= 0
            if not shown_before:
                seen[slot] = n_seen
                seen_keys[n_seen] = family * n_contracts + contract
                n_seen += 1
            static[at[L.RETURNS] + t] = (previous >= 0 and contract != contract_of[content_of[previous]]
                                         and shown_before)
        last_of_family[family] = t
    # Parameter sets: a parameter's id numbered as first met in the snapshots' parameter lists
    # (sorted names, in content order), a set's members in ascending id.
    # Per listed name (parameter lists, then required ones), its parameter's id.
    bit_of, _ = dense(np.concatenate((p_flat, r_flat)))
    bits = at[L.MASK_BITS]
    for m in range(n_lists):
        k = first_list[m]
        a0, a1 = (p_start[k], p_start[k + 1]) if k < n else (p_flat.shape[0] + r_start[k - n],
                                                              p_flat.shape[0] + r_start[k - n + 1])
        members = np.sort(bit_of[a0:a1])
        static[bits:bits + members.shape[0]] = members
        bits += members.shape[0]
        static[at[L.MASK_OFFSETS] + m + 1] = bits - at[L.MASK_BITS]
    if T and costs.max() >= _MAX_COST:  # as compile_episode: the single env plays it
        return np.zeros(0, dtype=np.int32), np.zeros(0), 0, np.zeros(0, dtype=np.int64)
    none = np.zeros(0, dtype=np.float64)
    floats = float_sections(utility, none, step_deprecated, none, none, np.nan)
    return static, floats, state_size, costs
