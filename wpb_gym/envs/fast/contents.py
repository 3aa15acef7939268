"""What each distinct observation holds, as the compiled core compares it, memoised on its JSON text.

For one observation ``ContentMemo.content`` gives what the single env's ``StreamTable`` reads
from it (kind, family and api keys, version, parameter sets, deprecated and removed flags, in
``ObservationShapes.describe``'s terms) and what the store compares (its top-level fields: key
ids, value ids equal exactly when Python's ``==`` is, JSON lengths for MERGE pricing). Generated
streams show the same endpoint states again and again, so one memo serves all the episodes of a
vector env; ids are only compared within one episode, and the memo starts afresh (between
episodes) when it grows large. A description is kept from its text's second sighting on: the
contract regimes draw new names for every episode, so their texts never come back, and keeping
their descriptions only made the garbage collector's full passes more frequent. Only plain
JSON is described (``episode_arrays`` checks it first, or knows it of the package's generated
episodes): equal text then means an equal value of equal types.
"""

from __future__ import annotations

from itertools import chain, repeat
from operator import itemgetter
from typing import Any

from ...core.accounting import MERGE_KEY, identity_key, json_text
from ..observation.stream_table import KIND_ENDPOINT, KIND_OTHER, endpoint_family, kind_and_family, stated_contract

# "api" values the store compares as the table keys them: equal ids exactly when ``same_api``.
_API_TYPES = frozenset({str, int, float, bool, type(None)})

_UNKNOWN = object()  # not described yet (None is a description: the core does not mirror it)

# Positions in a content's description.
(KIND, FAMILY_KEY, API_KEY, VERSION, PARAMS, REQUIRED, DEPRECATED, REMOVED,
 IS_DICT, EQUALITY, FIELD_KEYS, FIELD_VALUES, FIELD_LENGTHS, FIELD_IS_API) = range(14)


class ContentMemo:
    """Descriptions of observations by JSON text, and the ids they use (see the module docstring)."""

    def __init__(self, limit: int = 16384) -> None:
        self.limit = limit
        self.clear()

    def clear(self) -> None:
        self.by_text: dict[str, tuple[Any, ...] | None] = {}
        self.sighted: set[str] = set()  # texts described once, not kept (a second sighting keeps one)
        self.keys: dict[str, tuple[int, int]] = {MERGE_KEY: (0, len(json_text(MERGE_KEY)) + 2)}  # id, len + 2
        self.api_key = 0
        self.values = _Ids()  # an equality key -> its value id
        self.unique = -1  # equality ids of non-empty dicts count down from -2
        # A parameter -> its member id: a string by itself, anything else by ``identity_key``
        # (a string and a tuple are never equal, so the two kinds of key cannot meet).
        self.bits = _Ids()
        self.member_sets: dict[tuple[str, ...], tuple[int, ...]] = {}  # a list of strings -> its members
        self.layouts: dict[tuple[str, ...], tuple[tuple[int, ...], ...]] = {}  # see _layout

    def start(self) -> None:
        """Called before each episode: ids stay consistent within it."""
        if (len(self.by_text) > self.limit or len(self.sighted) > self.limit or len(self.values) > 8 * self.limit
                or len(self.bits) > self.limit or len(self.member_sets) > self.limit):
            self.clear()

    def content(self, text: str, obs: Any) -> tuple[Any, ...] | None:
        """The description of ``obs``, a plain JSON observation whose JSON text is ``text``; None
        when its ``"api"`` is a list or dict (the table keys those by text, the store by ``==``).
        One observation at a time: the literal form of what ``contents`` does for many."""
        try:
            return self.by_text[text]
        except KeyError:
            found = self._describe(obs)
            self._remember({text: found})
            return found

    def contents(self, texts: list[str], observations: list[Any]) -> list[tuple[Any, ...] | None]:
        """``content`` of each observation (``texts`` their JSON texts). Those not described yet are
        described together: dicts that share their keys (every snapshot of a generated stream)
        a field at a time, a column of strings, numbers or string lists in one pass, instead of
        a call per value (``_describe_dicts``); the others one by one."""
        by_text = self.by_text
        found = [by_text.get(text, _UNKNOWN) for text in texts]
        groups: dict[tuple[str, ...], list[int]] = {}
        fresh: dict[str, tuple[Any, ...] | None] = {}
        for i, description in enumerate(found):
            if description is _UNKNOWN:
                obs = observations[i]
                if type(obs) is dict and obs:
                    groups.setdefault(tuple(obs), []).append(i)
                else:
                    found[i] = fresh.setdefault(texts[i], self._describe(obs))
        for names, members in groups.items():
            described = self._describe_dicts(names, [observations[i] for i in members])
            for i, description in zip(members, described, strict=True):
                # A text met twice keeps its first description, as one at a time would.
                found[i] = fresh.setdefault(texts[i], description)
        self._remember(fresh)
        return found

    def without_texts(self, observations: list[Any]) -> tuple[list[Any], list[int], list[Any]] | None:
        """For observations whose texts are not met again (a generated episode's with sections or
        guides: the memo gains nothing from them), without writing their JSON texts: each one's
        description, its text's length, and a key equal for two of them exactly when their texts
        are. Only when every observation is a non-empty dict with string keys and each key holds
        one kind of value (strings, ints, booleans or lists of strings) in all of them, so that
        equal value ids mean equal texts (else None). No description is kept. When an observation is not
        described (None: an "api" the core does not mirror), no keys are given."""
        groups: dict[tuple[str, ...], list[int]] = {}
        for i, obs in enumerate(observations):
            if type(obs) is not dict or not obs:
                return None
            groups.setdefault(tuple(obs), []).append(i)
        n = len(observations)
        described: list[Any] = [None] * n
        lengths = [0] * n
        exact: dict[str, type] = {}
        for names, members in groups.items():
            if not all(type(name) is str for name in names):
                return None
            found, text_lengths = self._describe_group(names, [observations[i] for i in members], exact)
            if text_lengths is None:
                return None
            for i, description, length in zip(members, found, text_lengths, strict=True):
                described[i] = description
                lengths[i] = length
        if None in described:
            return described, lengths, []
        return described, lengths, [(d[FIELD_KEYS], d[FIELD_VALUES]) for d in described]

    def _remember(self, fresh: dict[str, tuple[Any, ...] | None]) -> None:
        """Keep the descriptions of texts described before (see the module docstring)."""
        sighted = self.sighted
        for text, description in fresh.items():
            if text in sighted:
                self.by_text[text] = description
                sighted.discard(text)
            else:
                sighted.add(text)

    def _describe_dicts(self, names: tuple[str, ...], group: list[dict[str, Any]]) -> list[tuple[Any, ...] | None]:
        """``_describe`` of each non-empty dict of ``group``, all with the keys ``names`` in this
        order, column by column."""
        return self._describe_group(names, group, None)[0]

    def _describe_group(self, names: tuple[str, ...], group: list[dict[str, Any]],
                        exact: dict[str, type] | None) -> tuple[list[tuple[Any, ...] | None], list[int] | None]:
        """``_describe_dicts``, and with ``exact`` (each key's kind of value in the groups read
        so far) the length of each dict's JSON text, or None for the lengths when a key's values
        are not all of one kind ``_column_facts`` names."""
        n = len(group)
        layout = self.layouts.get(names)
        if layout is None:
            layout = self.layouts[names] = self._layout(names)
        order, key_ids, key_lengths, is_api = layout
        # The dicts share their keys in this order, so a key's column is its values' column.
        columns = {name: list(map(itemgetter(name), group)) for name in names}
        priced = MERGE_KEY in columns  # only an observation with an "api" can be merged (see _fields)
        value_id = self.values.__getitem__
        value_columns, length_columns, keys_of = [], [], {}
        text_lengths = None if exact is None else [sum(key_lengths) + 2 * len(names)] * n
        for key_length, i in zip(key_lengths, order, strict=True):
            name = names[i]
            keys, lengths, kind = keys_of[name] = _column_facts(columns[name], priced or exact is not None)
            value_columns.append(list(map(value_id, keys)))
            if priced:
                length_columns.append([key_length + length for length in lengths])
            if text_lengths is not None:
                if kind is None or exact.setdefault(name, kind) is not kind:
                    text_lengths = None
                else:
                    text_lengths = list(map(sum, zip(text_lengths, lengths, strict=True)))
        field_values = list(zip(*value_columns, strict=True))
        field_lengths = list(zip(*length_columns, strict=True)) if priced else [(0,) * len(order)] * n
        absent = [None] * n
        version = columns.get("version") or columns.get("last_updated") or absent
        params = self._member_column(columns.get("params", absent), keys_of.get("params"))
        required = self._member_column(columns.get("required", absent), keys_of.get("required"))
        deprecated = [1.0 if v is True else 0.0 for v in columns.get("deprecated", absent)]
        removed = [1.0 if v is True else 0.0 for v in columns.get("removed", absent)]
        apis = columns.get(MERGE_KEY, absent)
        api_keys = [(type(api), api) for api in apis] if priced else absent
        kinds, families = _kinds_and_families(columns, group)
        first = self.unique - 1
        self.unique -= n
        described = list(zip(kinds, families, api_keys, version, params, required, deprecated, removed, repeat(1, n),
                             range(first, first - n, -1), repeat(key_ids, n), field_values, field_lengths,
                             repeat(is_api, n), strict=True))
        if priced and not set(map(type, apis)) <= _API_TYPES:
            described = [None if type(api) not in _API_TYPES else d for api, d in zip(apis, described, strict=True)]
        return described, text_lengths

    def _member_column(self, column: Any, facts: tuple[list[Any], list[int], type | None] | None
                       ) -> list[tuple[int, ...] | None]:
        """``_members`` of each value of a column, given the column's ``_column_facts``: when
        every value is a list of strings (equality keys ``(5, items)``), a list met before (a
        parameter list an endpoint keeps across versions) is looked up, not rebuilt."""
        if facts is None or any(key[0] != 5 for key in facts[0]):
            return list(map(self._members, column))
        cache, bit = self.member_sets, self.bits.__getitem__
        found = []
        for _, items in facts[0]:
            members = cache.get(items)
            if members is None:
                members = cache[items] = tuple(sorted(set(map(bit, items))))
            found.append(members)
        return found

    def _describe(self, obs: Any) -> tuple[Any, ...] | None:
        fields = self._fields(obs)
        if not isinstance(obs, dict):
            return (KIND_OTHER, None, None, None, None, None, 0.0, 0.0, *fields)
        if MERGE_KEY in obs:
            api = obs[MERGE_KEY]
            if type(api) not in _API_TYPES:
                return None
            api_key = identity_key(api)
        else:
            api_key = None
        kind, family_key = kind_and_family(obs)
        return (kind, family_key, api_key, *stated_contract(obs, self._members), *fields)

    def _members(self, values: Any) -> tuple[int, ...] | None:
        """A parameter list as the ascending ids of its distinct members (the table's bit mask)."""
        if not isinstance(values, list):
            return None
        bit = self.bits.__getitem__
        try:  # identity_key of a hashable member, without the call
            return tuple(sorted({bit(v if type(v) is str else (type(v), v)) for v in values}))
        except TypeError:
            return tuple(sorted({bit(v if type(v) is str else identity_key(v)) for v in values}))

    def _fields(self, obs: Any) -> tuple[Any, ...]:
        """(is a dict, equality id, field key ids, value ids, JSON lengths, which field is "api").
        The equality id is only compared when one side is not a dict or is empty
        (``_fields_changed``), so a non-empty dict gets one of its own. Only a MERGE prices
        fields, and only an observation with an "api" can be merged: the others' lengths are 0."""
        values = self.values
        if not (isinstance(obs, dict) and obs):
            return (int(isinstance(obs, dict)), values[equality_key(obs)], (), (), (), ())
        self.unique -= 1
        names = tuple(obs)
        layout = self.layouts.get(names)  # observations of one kind share their keys, in one order
        if layout is None:
            layout = self.layouts[names] = self._layout(names)
        order, key_ids, key_lengths, is_api = layout
        items = list(obs.values())
        if MERGE_KEY in obs:
            facts = [(equality_key(items[i]), json_length(items[i])) for i in order]
            lengths = tuple([n + length for n, (_, length) in zip(key_lengths, facts, strict=True)])
        else:
            facts = [(equality_key(items[i]), 0) for i in order]
            lengths = (0,) * len(order)
        value_ids = tuple([values[key] for key, _ in facts])
        return (1, self.unique, key_ids, value_ids, lengths, is_api)

    def _layout(self, names: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
        """For a dict's keys in its order: the positions in key-id order, the key ids, the
        lengths they add to a field (quotes and ": "), and which is "api"."""
        ids = [self.keys.get(k) or self._key(k) for k in names]
        order = tuple(sorted(range(len(names)), key=lambda i: ids[i][0]))
        return (order, tuple(ids[i][0] for i in order), tuple(ids[i][1] for i in order),
                tuple(1 if ids[i][0] == self.api_key else 0 for i in order))

    def _key(self, key: str) -> tuple[int, int]:
        found = self.keys[key] = (len(self.keys), len(json_text(key)) + 2)
        return found

    def none_id(self) -> int:
        return self.values[(3,)]


class _Ids(dict):
    """Ids by key: a key met for the first time gets the next one (0, 1, ...), so that a column
    of keys is looked up with one ``map`` of ``__getitem__``."""

    def __missing__(self, key: Any) -> int:
        found = self[key] = len(self)
        return found


def first_met(keys: list[Any]) -> list[int]:
    """Each key's number, keys numbered in the order they are first met (``_Ids``)."""
    return list(map(_Ids().__getitem__, keys))


def _kinds_and_families(columns: dict[str, list[Any]], group: list[dict[str, Any]]) -> tuple[Any, list[Any]]:
    """``kind_and_family`` of each dict of ``group`` (all with the keys of ``columns``): the
    kind is the group's, and string endpoints are keyed by their family's string."""
    apis = columns.get(MERGE_KEY)
    if apis is not None and set(map(type, apis)) == {str}:
        return repeat(KIND_ENDPOINT, len(apis)), [("api", (str, family)) for family in map(endpoint_family, apis)]
    kinds, families = zip(*map(kind_and_family, group), strict=True)
    return kinds, families


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
        if _plain_ascii(value):
            return len(value) + 2
    elif kind is int:
        return len(str(value))
    elif kind is list and all(type(x) is str for x in value):
        joined = "".join(value)  # the strings checked in one go: '["a", "bc"]' is 4 per string
        if _plain_ascii(joined):
            return len(joined) + 4 * len(value) if value else 2
    elif value is None or value is True:
        return 4
    elif value is False:
        return 5
    return len(json_text(value))


def _plain_ascii(text: str) -> bool:
    """True when ``text`` is its own JSON string body: printable ASCII, no quote or backslash."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


def _column_facts(column: tuple[Any, ...], priced: bool) -> tuple[list[Any], list[int], type | None]:
    """``equality_key`` and (when ``priced``) ``json_length`` of each value of a column: for a
    column of one type (strings, ints, booleans or lists of strings) in one pass. And that type
    (``list``: of strings only), under which equal keys mean equal JSON texts; None for a
    column of any other values."""
    kinds = set(map(type, column))
    kind = kinds.pop() if len(kinds) == 1 else None
    if kind is str:
        keys = [(0, v) for v in column]
        if not priced:
            return keys, [], str
        if _plain_ascii("".join(column)):
            return keys, [len(v) + 2 for v in column], str
        return keys, list(map(json_length, column)), str
    if kind is int:
        return [(1, v) for v in column], list(map(len, map(str, column))) if priced else [], int
    if kind is bool:
        return [(1, int(v)) for v in column], [4 if v else 5 for v in column] if priced else [], bool
    if kind is list and not set(map(type, chain.from_iterable(column))) - {str}:
        keys = [(5, tuple(v)) for v in column]
        if not priced:
            return keys, [], list
        if _plain_ascii("".join(chain.from_iterable(column))):
            return keys, [len("".join(v)) + 4 * len(v) if v else 2 for v in column], list
        return keys, list(map(json_length, column)), list
    return [equality_key(v) for v in column], [json_length(v) for v in column] if priced else [], None


def equality_key(value: Any) -> tuple[Any, ...]:
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
