"""One episode, as the compiled core reads it: flat arrays built from what does not depend on memory.

The vector env's sub-env chooses the episode and its budget as a single env's reset does; the
core then builds the single env's ``StreamTable`` of it (with the same function) and starts the
reward function on it; this module turns those into three flat arrays per sub-env, with the
offsets of their sections in a header:

* ``static`` (int32): per timestep its cost, kind, family, api, content, the last shown step
  of its family, ``returns_to_earlier`` and the other ids the kernel compares; per distinct
  observation (content) its version rank, parameter and contract ids and its top-level
  fields; per parameter set its sorted members (the kernel derives the other
  ``*_since_seen`` features from these, ``comparisons.since_seen``);
* ``floats`` (float64): utilities, priorities, flags and the prefix oracle;
* ``state`` (int32, zeros): room for the memory the kernel keeps (linked lists of items, a
  heap of sizes, the action log), its size known from the episode.

Equality follows Python's, as the single env compares values: ``1 == 1.0 == True`` inside
lists and dicts, a missing key is ``None`` for a MERGE delta but not for ``fields_changed``.
Episodes whose observations are not plain JSON (a NaN, a tuple, non-string keys) are not
compiled (``compile_episode`` returns None) and the vector env plays them with the single env.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np

from ...core.accounting import MERGE_KEY, json_text
from . import layout as L

# "api" values the store compares as the table keys them: equal ids exactly when ``same_api``.
_API_TYPES = (str, int, float, bool, type(None))


class FieldMemo:
    """What each distinct observation text holds, kept across the episodes of one vector env
    (generated streams show the same endpoint states again and again). Ids are only compared
    within one episode, so the memo starts afresh when it grows large."""

    def __init__(self, limit: int = 16384) -> None:
        self.limit = limit
        self.clear()

    def clear(self) -> None:
        self.by_text: dict[str, tuple[Any, ...]] = {}
        self.keys: dict[str, tuple[int, int]] = {MERGE_KEY: (0, len(json_text(MERGE_KEY)) + 2)}  # id, len + 2
        self.api_key = 0
        self.values: dict[tuple[Any, ...], int] = {}
        self.unique = -1  # equality ids of non-empty dicts count down from -2
        self.masks: dict[int, tuple[int, ...]] = {}

    def start(self) -> None:
        if len(self.by_text) > self.limit or len(self.values) > 8 * self.limit:
            self.clear()

    def describe(self, text: str, obs: Any) -> tuple[Any, ...]:
        """(is a dict, equality id, field key ids, value ids, JSON lengths, which field is "api")
        of an observation and its JSON text. The equality id is only compared when one side is
        not a dict or is empty (``_fields_changed``), so a non-empty dict gets one of its own.
        Only a MERGE prices fields, and only an observation with an "api" can be merged: the
        others' lengths are 0."""
        found = self.by_text.get(text)
        if found is None:
            values = self.values
            if isinstance(obs, dict) and obs:
                self.unique -= 1
                keys = self.keys
                fields = sorted((*(keys.get(k) or self._key(k)), v) for k, v in obs.items())
                if MERGE_KEY in obs:
                    keys_and_lengths = [(_equality_key(f[2]), f[1] + json_length(f[2])) for f in fields]
                else:
                    keys_and_lengths = [(_equality_key(f[2]), 0) for f in fields]
                found = (
                    1,
                    self.unique,
                    [f[0] for f in fields],
                    [values.setdefault(key, len(values)) for key, _ in keys_and_lengths],
                    [length for _, length in keys_and_lengths],
                    [1 if f[0] == self.api_key else 0 for f in fields],
                )
            else:
                found = (int(isinstance(obs, dict)), values.setdefault(_equality_key(obs), len(values)), [], [], [], [])
            self.by_text[text] = found
        return found

    def _key(self, key: str) -> tuple[int, int]:
        found = self.keys[key] = (len(self.keys), len(json_text(key)) + 2)
        return found

    def bits(self, mask: int) -> tuple[int, ...]:
        """The members of a parameter set (a bit mask), ascending."""
        found = self.masks.get(mask)
        if found is None:
            members, rest = [], mask
            while rest:
                lowest = rest & -rest
                members.append(lowest.bit_length() - 1)
                rest ^= lowest
            found = self.masks[mask] = tuple(members)
        return found

    def none_id(self) -> int:
        return self.values.setdefault((3,), len(self.values))


def _normal(value: Any) -> Any:
    """A value whose JSON text is equal exactly when Python says the values are equal."""
    kind = type(value)
    if kind is bool:
        return int(value)
    if kind is float:
        return int(value) if value.is_integer() else value
    if kind is dict:
        return {k: _normal(v) for k, v in value.items()}
    if kind is list:
        return [_normal(v) for v in value]
    return value


def _normal_text(value: Any) -> str:
    return json_text(_normal(value))


def json_length(value: Any) -> int:
    """``len(json_text(value))``, without writing the text for what observations mostly hold:
    plain ASCII strings, ints, lists of those strings, null and booleans."""
    kind = type(value)
    if kind is str:
        if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
            return len(value) + 2
    elif kind is int:
        return len(str(value))
    elif kind is list and all(type(x) is str for x in value):
        return 2 + sum(map(json_length, value)) + 2 * (len(value) - 1) if value else 2
    elif value is None or value is True:
        return 4
    elif value is False:
        return 5
    return len(json_text(value))


def _equality_key(value: Any) -> tuple[Any, ...]:
    """A key equal for two JSON values exactly when Python says they are equal: strings by
    themselves, numbers and booleans by value (1 == 1.0 == True), lists of strings by their
    items, other containers by the JSON text of their normal form."""
    kind = type(value)
    if kind is str:
        return (0, value)
    if kind is int or kind is bool:
        return (1, int(value))
    if kind is float:
        return (1, int(value)) if value.is_integer() else (2, value)
    if value is None:
        return (3,)
    if kind is list and all(type(x) is str for x in value):
        return (5, tuple(value))
    if _printed_as_compared(value):
        return (4, json_text(value))
    return (4, _normal_text(value))


def _printed_as_compared(value: Any) -> bool:
    """True when equal JSON text means equal in Python and back: no bool or float inside."""
    kind = type(value)
    if kind is str or kind is int or value is None:
        return True
    if kind is dict:
        return all(map(_printed_as_compared, value.values()))
    if kind is list:
        return all(map(_printed_as_compared, value))
    return False


def _version_codes(versions: list[Any]) -> tuple[list[int], list[int]]:
    """Each version as (kind, rank) so that ``compare_versions`` is a comparison of ints: numbers
    (not bools) and strings ranked among their own kind, anything else by identity."""
    kinds, ranks = [], []
    numbers = sorted({v for v in versions if type(v) in (int, float)})
    strings = sorted({v for v in versions if type(v) is str})
    number_rank, rank, last = {}, -1, None
    for v in numbers:
        if last is None or v > last:
            rank += 1
            last = v
        number_rank[v] = rank
    string_rank = {v: i for i, v in enumerate(strings)}
    others: dict[tuple[str, str], int] = {}
    for v in versions:
        if type(v) in (int, float):
            kinds.append(L.VERSION_NUMBER)
            ranks.append(number_rank[v])
        elif type(v) is str:
            kinds.append(L.VERSION_STRING)
            ranks.append(string_rank[v])
        else:
            kinds.append(L.VERSION_OTHER)
            ranks.append(others.setdefault((type(v).__name__, _equality_key(v)), len(others)))
    return kinds, ranks


def _dense(ids: list[int]) -> tuple[np.ndarray, int]:
    """Ids renumbered 0.. in first-seen order (-1 stays -1), and how many there are."""
    numbers = dict.fromkeys(ids)
    numbers.pop(-1, None)
    numbers = dict(zip(numbers, range(len(numbers)), strict=True))
    numbers[-1] = -1
    return np.fromiter(map(numbers.__getitem__, ids), dtype=np.int32, count=len(ids)), len(numbers) - 1


def _returns_to_earlier(families: np.ndarray, content_of: np.ndarray, previous: np.ndarray,
                        contract_of_content: np.ndarray) -> np.ndarray:
    """``returns_to_earlier`` of every step (``comparisons.seen_features``): its contract differs
    from the last shown step's of its family and some earlier step of the family showed it."""
    T = len(families)
    steps = np.arange(T)
    contract = contract_of_content[content_of] if T else np.zeros(0, dtype=np.int64)
    known = (families >= 0) & (contract >= 0)
    # (family, contract) as one key; steps without one get a key of their own.
    keys = np.where(known, families.astype(np.int64) * (len(contract_of_content) + 1) + contract, -1 - steps)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    before = np.where(previous >= 0, contract[np.maximum(previous, 0)], -1)
    return (known & (previous >= 0) & (contract != before) & (first[inverse] < steps)).astype(np.int32)


def _flat(parts: list[Any]) -> np.ndarray:
    return np.fromiter(chain.from_iterable(parts), dtype=np.int32)


def compile_episode(tab: Any, reward_fn: Any, memo: FieldMemo) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(static, floats, state) of an episode from its ``StreamTable`` and the reward function
    started on it, or None when an observation is not plain JSON."""
    contents = tab.contents
    if min(contents) < 0:
        return None
    raw = tab._raw
    if raw is not None and any(step.t != t for t, step in enumerate(raw)):
        return None  # the store refuses to WRITE a step whose t is not the current timestep
    memo.start()
    T = tab.length
    # Per distinct observation (content ids are 1.. in first-shown order).
    n_contents = max(contents)
    first = [0] * n_contents
    for t in range(T - 1, -1, -1):
        first[contents[t] - 1] = t
    describe = memo.describe
    texts = tab._texts
    observations = [tab.observation(t) for t in first]
    if any(isinstance(obs, dict) and MERGE_KEY in obs and type(obs[MERGE_KEY]) not in _API_TYPES
           for obs in observations):
        return None  # a container "api": the table keys it by its JSON text, the store by ==
    described = [describe(texts[t], obs) for t, obs in zip(first, observations, strict=True)]
    version_kind, version_rank = _version_codes([tab.versions[t] for t in first])
    mask_ids: dict[int, int] = {}
    contract_ids: dict[Any, int] = {}

    def mask_id(mask: int | None) -> int:
        return -1 if mask is None else mask_ids.setdefault(mask, len(mask_ids))

    params = [mask_id(tab.params[t]) for t in first]
    required = [mask_id(tab.required[t]) for t in first]
    # A contract as ``comparisons.contracts`` states it, a function of the observation.
    contract = [-1 if tab.params[t] is None else contract_ids.setdefault(
        (tab.params[t], tab.required[t] or 0, tab.deprecated[t], tab.removed[t]), len(contract_ids)) for t in first]
    field_offsets = np.zeros(n_contents + 1, dtype=np.int32)
    field_offsets[1:] = np.cumsum([len(d[2]) for d in described])
    masks = list(mask_ids)
    bit_lists = [memo.bits(m) for m in masks]
    mask_offsets = np.zeros(len(masks) + 1, dtype=np.int32)
    mask_offsets[1:] = np.cumsum([len(b) for b in bit_lists])
    costs = np.asarray(tab.costs, dtype=np.int64)
    if T and costs.max() >= 2**31:
        return None
    families, n_families = _dense(tab.families)
    apis, n_apis = _dense(tab.apis)
    content_of = np.asarray(contents, dtype=np.int32) - 1
    previous = np.asarray(tab.previous_shown, dtype=np.int32)

    sections = {
        L.COST: costs,
        L.KIND: tab.kinds,
        L.FAMILY: families,
        L.API: apis,
        L.CONTENT: content_of,
        L.PREVIOUS: previous,
        L.CRITICAL: reward_fn._critical,
        L.RETURNS: _returns_to_earlier(families, content_of, previous, np.asarray(contract, dtype=np.int64)),
        L.VERSION_KIND: version_kind,
        L.VERSION_RANK: version_rank,
        L.PARAMS: params,
        L.REQUIRED: required,
        L.CONTRACT: contract,
        L.IS_DICT: [d[0] for d in described],
        L.EQUALITY: [d[1] for d in described],
        L.FIELD_OFFSETS: field_offsets,
        L.FIELD_KEYS: _flat([d[2] for d in described]),
        L.FIELD_VALUES: _flat([d[3] for d in described]),
        L.FIELD_LENGTHS: _flat([d[4] for d in described]),
        L.FIELD_IS_API: _flat([d[5] for d in described]),
        L.MASK_OFFSETS: mask_offsets,
        L.MASK_BITS: _flat(bit_lists),
    }
    header = np.zeros(L.HEADER_SIZE, dtype=np.int64)
    header[L.H_LENGTH] = T
    header[L.H_FAMILIES] = n_families
    header[L.H_APIS] = n_apis
    header[L.H_NONE_VALUE] = memo.none_id()
    arrays = [np.asarray(sections[name], dtype=np.int32) for name in range(L.N_STATIC)]
    position = L.HEADER_SIZE
    for name, array in enumerate(arrays):
        header[L.H_STATIC + name] = position
        position += len(array)
    # The kernel's memory: sections sized by the episode (layout.state_sizes).
    sizes = L.state_sizes(T, n_families, n_apis)
    state_position = 0
    for name, size in enumerate(sizes):
        header[L.H_STATE + name] = state_position
        state_position += size
    if position >= 2**31 or state_position >= 2**31:
        return None
    static = np.concatenate([header.astype(np.int32), *arrays]) if arrays else header.astype(np.int32)
    oracle_prefix = reward_fn._oracle_prefix
    float_parts = [
        np.asarray(reward_fn._utilities, dtype=np.float64),
        np.asarray(tab.priorities if tab.priorities is not None else np.zeros(T), dtype=np.float64),
        np.asarray(tab.deprecated, dtype=np.float64),
        np.asarray(tab.removed, dtype=np.float64),
        np.zeros(0) if oracle_prefix is None else np.asarray(oracle_prefix, dtype=np.float64),
    ]
    float_header = np.zeros(L.N_FLOATS + 1, dtype=np.float64)
    position = len(float_header)
    for name, part in enumerate(float_parts):
        float_header[name] = position
        position += len(part)
    float_header[L.N_FLOATS] = np.nan if reward_fn._oracle_value is None else reward_fn._oracle_value
    floats = np.concatenate([float_header, *float_parts])
    state = np.zeros(state_position, dtype=np.int32)
    return static, floats, state
