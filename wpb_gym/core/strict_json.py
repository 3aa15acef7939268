"""Strict decoding of one JSON text: what Python's ``json`` lets through that a data file must not.

Python's decoder reads ``NaN`` and ``Infinity`` (not JSON), turns ``1e400`` into ``inf``,
keeps the last of two equal keys without a word, and fails with a bare ``RecursionError``
(deep nesting) or ``ValueError`` (an integer of more than 4,300 digits, the interpreter's
limit on int-from-string conversion). ``StrictDecoder.decode`` refuses each of these with a
``JSONLineError`` whose ``field`` is the dotted path of the culprit (``None``: the text as a
whole).

Nesting is limited to ``MAX_NESTING`` levels (the line's object is level 1), far beyond any
episode (5 in the generated and released ones) and well below Python's recursion limit,
so that every later recursive pass over a value (``json.dumps``, ``copy.deepcopy``, ``==``)
has room wherever in the call stack it runs. Without a limit, a file 600 levels deep loads
and then breaks the evaluator.

Speed. The decoder runs once per line of a data file, so its checks cost little on the
common path: one scan of the line's bytes (``bytes.translate``, ``bytes.replace``, in C)
rules out overflowing numbers, counts the keys and measures the nesting; the decode counts
the keys of the objects it builds (an ``object_hook``). Only a line that the scan cannot
clear is decoded again with hooks that mark every culprit, and walked to name it.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

MAX_NESTING = 100


class JSONLineError(ValueError):
    """A JSON text that a data file may not hold; ``field`` names where (``None``: the whole text)."""

    def __init__(self, field: str | None, message: str) -> None:
        self.field, self.message = field, message
        super().__init__(f"{field + ': ' if field else ''}{message}")


class _Duplicated(dict):  # type: ignore[type-arg]
    """The object the decoder built for a JSON object with a repeated key (only to locate it)."""

    key: str


class _Overflow(float):
    """A number literal too large for a float (only to locate it)."""

    literal: str


class _LongInt:
    """An integer literal with more digits than Python converts (only to locate it)."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _scan_tables() -> tuple[bytes, bytes]:
    # Kept: brackets (both kinds as "[" "]"), quotes, colons, digits (as "0") and exponent
    # letters (as "e"); signs and points are dropped so that "1.5E+400" reads "00e000".
    table = bytearray(range(256))
    table[ord("{")], table[ord("}")], table[ord("E")] = ord("["), ord("]"), ord("e")
    for b in b"123456789":
        table[b] = ord("0")
    kept = set(b'[]{}":0123456789eE')
    return bytes(table), bytes(b for b in range(256) if b not in kept)


_SHAPE, _NOT_SHAPE = _scan_tables()


def _scan(data: bytes) -> tuple[bool, bytes]:
    """(whether a number in the valid JSON text ``data`` may overflow a float, the text's
    structure: its brackets and colons outside strings, in order).

    A finite float is below 1.8e308, so a literal that overflows has an exponent of three
    digits or more, or (with a two-digit exponent at most) an integer part of 210 digits or
    more; text inside strings may look like either, which only costs a slower decode.
    Escapes go first (escaped backslashes, then escaped quotes: JSON reads them left to
    right), so every quote left delimits a string. Dropping empty strings (most of them,
    once their letters are gone) keeps the quotes alternating open/close, so the even
    pieces of a split on quotes are what lies outside strings.
    """
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    shape = data.translate(_SHAPE, _NOT_SHAPE)
    may_overflow = b"e000" in shape or b"0" * 200 in shape
    structure = shape.translate(None, b"0e").replace(b'""', b"")
    if b'"' in structure:
        structure = b"".join(structure.split(b'"')[::2])
    return may_overflow, structure


def _nesting_within(structure: bytes, limit: int) -> bool:
    """Whether brackets ``structure`` (as ``_scan`` gives it) nest at most ``limit`` levels."""
    brackets = structure.replace(b":", b"")
    for _ in range(limit):  # each pass removes the innermost level
        if not brackets:
            return True
        brackets = brackets.replace(b"[]", b"")
    return not brackets


def json_nesting_within(text: str | bytes, limit: int) -> bool:
    """Whether the valid JSON ``text`` (or its bytes) nests at most ``limit`` levels (its
    outermost value is level 1), measured on the text, without a recursive pass over the value."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if data.count(b"[") + data.count(b"{") <= limit:  # too few brackets to be deeper: most texts
        return True
    return _nesting_within(_scan(data)[1], limit)


def nesting_within(value: Any, limit: int) -> bool:
    """Whether ``value``'s dicts and lists nest at most ``limit`` levels (``value`` is level
    1), walked without recursion (for values a YAML loader built). A value a YAML alias repeats
    is walked once (aliases repeat one object: walked at each place, ten aliases of ten
    aliases... take exponential time), and one that holds itself nests without end."""
    return tree_shape(value)[0] <= limit


def tree_shape(value: Any) -> tuple[float, int]:
    """How deeply ``value``'s dicts and lists nest (``inf`` for one that holds itself) and how
    many values (keys, items, the value itself) it holds written out, each alias in full: in
    time linear in its distinct objects, without recursion."""
    depths: dict[int, float] = {}
    sizes: dict[int, int] = {}
    todo: list[tuple[Any, bool]] = [(value, False)]
    while todo:
        node, finished = todo.pop()
        key = id(node)
        if not isinstance(node, (dict, list)):
            continue
        if finished:
            children = list(node.values()) if isinstance(node, dict) else node
            parts = [c for c in children if isinstance(c, (dict, list))]
            depths[key] = 1 + max((depths[id(c)] for c in parts), default=0)
            sizes[key] = 1 + len(children) - len(parts) + sum(sizes[id(c)] for c in parts) + (
                len(node) if isinstance(node, dict) else 0
            )
            continue
        if key in depths:
            continue  # walked already, elsewhere
        if key in sizes:  # met again while still walking it: it holds itself
            return math.inf, sys.maxsize
        sizes[key] = 0  # (walking it)
        todo.append((node, True))
        children = node.values() if isinstance(node, dict) else node
        todo.extend((c, False) for c in children if isinstance(c, (dict, list)))
    if not isinstance(value, (dict, list)):
        return 0, 1
    return depths[id(value)], sizes[id(value)]


def _short(literal: str) -> str:
    return literal if len(literal) <= 40 else f"{literal[:20]}...{literal[-12:]} ({len(literal)} characters)"


def _key_path(where: str, key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f"{where}.{key}" if where else key
    shown = repr(key) if len(str(key)) <= 40 else repr(str(key)[:37] + "...")
    return f"{where}[{shown}]"


def _culprit(value: Any, limit: int) -> tuple[str, str] | None:
    """(path, what is wrong) of the first refused part of ``value`` in document order."""
    found = _find_culprit(value, limit)
    if found is None:
        return None
    where, problem = found
    # A path 100 levels deep is 300 characters of "[0]": its start says where it is.
    return (where if len(where) <= 120 else where[:100] + "..."), problem


def _find_culprit(value: Any, limit: int) -> tuple[str, str] | None:
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, (dict, list)) and depth > limit:
            return where, f"nested more than {limit} levels deep"
        if isinstance(node, _Duplicated):
            return _key_path(where, node.key), f"duplicate key {node.key!r} (a key may appear once per object)"
        if isinstance(node, _Overflow):
            return (
                where,
                f"number {_short(node.literal)} is out of range "
                f"(it would read as {float(node)}; numbers must be finite)",
            )
        if isinstance(node, float) and not math.isfinite(node):
            name = "NaN" if math.isnan(node) else ("Infinity" if node > 0 else "-Infinity")
            return where, f"non-standard JSON constant {name} (not allowed: numbers must be finite)"
        if isinstance(node, _LongInt):
            return where, f"integer literal of {node.digits} digits (at most {sys.get_int_max_str_digits()} are read)"
        if isinstance(node, dict):
            children = [(child, _key_path(where, key), depth + 1) for key, child in node.items()]
        elif isinstance(node, list):
            children = [(child, f"{where}[{i}]", depth + 1) for i, child in enumerate(node)]
        else:
            continue
        stack.extend(reversed(children))
    return None


class StrictDecoder:
    """Decodes JSON texts one at a time (not thread-safe: keep one per reader).

    The common path decodes with an ``object_hook`` that only counts keys: a text whose
    objects hold as many keys as it has colons outside strings repeats none. Otherwise it is
    decoded again with an ``object_pairs_hook`` that sees every pair (slower: it builds a
    list of pairs per object), to find the repeated key.
    """

    def __init__(self, max_nesting: int = MAX_NESTING) -> None:
        self.max_nesting = max_nesting
        self._flagged = False
        self._keys = 0

        def count(obj: dict[str, Any]) -> dict[str, Any]:
            self._keys += len(obj)
            return obj

        def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
            obj = dict(items)
            if len(obj) != len(items):
                self._flagged = True
                seen: set[str] = set()
                for key, _ in items:
                    if key in seen:
                        break
                    seen.add(key)
                obj = _Duplicated(items)
                obj.key = key
            return obj

        def constant(name: str) -> float:
            self._flagged = True
            return float(name)

        def number(literal: str) -> float:
            value = float(literal)
            if math.isfinite(value):
                return value
            self._flagged = True
            marked = _Overflow(value)
            marked.literal = literal
            return marked

        def long_int(literal: str) -> Any:
            try:
                return int(literal)
            except ValueError:
                self._flagged = True
                return _LongInt(len(literal.lstrip("-")))

        self._counting = json.JSONDecoder(object_hook=count, parse_constant=constant)
        self._counting_floats = json.JSONDecoder(object_hook=count, parse_constant=constant, parse_float=number)
        self._exact = json.JSONDecoder(
            object_pairs_hook=pairs, parse_constant=constant, parse_float=number, parse_int=long_int
        )

    def decode(self, text: str, data: bytes | None = None) -> Any:
        """The value of ``text`` (``data``: the same text as UTF-8, when the caller has it)."""
        if text.startswith("\ufeff"):
            raise JSONLineError(None, "starts with a byte-order mark (BOM): save the file as UTF-8 without one")
        if data is None:
            data = text.encode("utf-8", "surrogatepass")
        may_overflow, structure = _scan(data)
        self._flagged, self._keys = False, 0
        try:
            value = self._run(self._counting_floats if may_overflow else self._counting, text)
            exact = self._keys == structure.count(b":")
        except JSONLineError:
            raise
        except ValueError:
            # The only other ValueError the decoder raises: an integer past Python's digit
            # limit (the exact decode below marks it, to name its field).
            exact = False
        if not exact:
            self._flagged = False
            value = self._run(self._exact, text)
        if self._flagged or not _nesting_within(structure, self.max_nesting):
            found = _culprit(value, self.max_nesting)
            if found is not None:
                raise JSONLineError(*found)
        return value

    def _run(self, decoder: json.JSONDecoder, text: str) -> Any:
        try:
            return decoder.decode(text)
        except json.JSONDecodeError as exc:
            where = f"line {exc.lineno} column {exc.colno}" if exc.lineno > 1 else f"column {exc.colno}"
            raise JSONLineError(None, f"malformed JSON: {exc.msg} at {where}") from None
        except RecursionError:
            raise JSONLineError(None, f"nested more than {self.max_nesting} levels deep") from None
