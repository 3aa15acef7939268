"""What each distinct observation holds, as the compiled core compares it, memoised on its JSON text.

For one observation ``ContentMemo.content`` gives what the single env's ``StreamTable`` reads
from it (kind, family and api keys, version, parameter sets, deprecated and removed flags, in
``ObservationShapes.describe``'s terms) and what the store compares (its top-level fields: key
ids, value ids equal exactly when Python's ``==`` is, JSON lengths for MERGE pricing). Generated
streams show the same endpoint states again and again, so one memo serves all the episodes of a
vector env; ids are only compared within one episode, and the memo starts afresh (between
episodes) when it grows large. Only plain JSON is described (``episode_arrays`` checks it first):
equal text then means an equal value of equal types.
"""

from __future__ import annotations

from typing import Any

from ...core.accounting import MERGE_KEY, identity_key, json_text
from ..observation.stream_table import KIND_OTHER, kind_and_family, stated_contract

# "api" values the store compares as the table keys them: equal ids exactly when ``same_api``.
_API_TYPES = (str, int, float, bool, type(None))

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
        self.keys: dict[str, tuple[int, int]] = {MERGE_KEY: (0, len(json_text(MERGE_KEY)) + 2)}  # id, len + 2
        self.api_key = 0
        self.values: dict[tuple[Any, ...], int] = {}
        self.unique = -1  # equality ids of non-empty dicts count down from -2
        self.bits: dict[Any, int] = {}  # a parameter (``identity_key``) -> its member id
        self.layouts: dict[tuple[str, ...], tuple[tuple[int, ...], ...]] = {}  # see _layout

    def start(self) -> None:
        """Called before each episode: ids stay consistent within it."""
        if len(self.by_text) > self.limit or len(self.values) > 8 * self.limit or len(self.bits) > self.limit:
            self.clear()

    def content(self, text: str, obs: Any) -> tuple[Any, ...] | None:
        """The description of ``obs``, a plain JSON observation whose JSON text is ``text``; None
        when its ``"api"`` is a list or dict (the table keys those by text, the store by ``==``)."""
        try:
            return self.by_text[text]
        except KeyError:
            found = self.by_text[text] = self._describe(obs)
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
        bits = self.bits
        try:  # identity_key of a hashable member, without the call
            return tuple(sorted({bits.setdefault((type(v), v), len(bits)) for v in values}))
        except TypeError:
            return tuple(sorted({bits.setdefault(identity_key(v), len(bits)) for v in values}))

    def _fields(self, obs: Any) -> tuple[Any, ...]:
        """(is a dict, equality id, field key ids, value ids, JSON lengths, which field is "api").
        The equality id is only compared when one side is not a dict or is empty
        (``_fields_changed``), so a non-empty dict gets one of its own. Only a MERGE prices
        fields, and only an observation with an "api" can be merged: the others' lengths are 0."""
        values = self.values
        if not (isinstance(obs, dict) and obs):
            return (int(isinstance(obs, dict)), values.setdefault(_equality_key(obs), len(values)), (), (), (), ())
        self.unique -= 1
        names = tuple(obs)
        layout = self.layouts.get(names)  # observations of one kind share their keys, in one order
        if layout is None:
            layout = self.layouts[names] = self._layout(names)
        order, key_ids, key_lengths, is_api = layout
        items = list(obs.values())
        if MERGE_KEY in obs:
            facts = [(_equality_key(items[i]), json_length(items[i])) for i in order]
            lengths = tuple([n + length for n, (_, length) in zip(key_lengths, facts, strict=True)])
        else:
            facts = [(_equality_key(items[i]), 0) for i in order]
            lengths = (0,) * len(order)
        value_ids = tuple([values.setdefault(key, len(values)) for key, _ in facts])
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
        joined = "".join(value)  # the strings checked in one go: '["a", "bc"]' is 4 per string
        if joined.isascii() and joined.isprintable() and '"' not in joined and "\\" not in joined:
            return len(joined) + 4 * len(value) if value else 2
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
