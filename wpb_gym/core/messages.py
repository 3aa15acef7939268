"""How an error reads: on one line, with the closest known name when a name is misspelt; and
text of others (names from data, what a policy prints) shown on one line with nothing a
terminal or a page would act on."""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Iterable
from typing import Any


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, or nothing: the shortest that begins
    with ``name`` (``budget``: ``budget_bytes``, not ``kind_budgets``), else difflib's closest."""
    known = list(known)
    starting = sorted((k for k in known if k.startswith(name) and k != name), key=len) if name else []
    close = starting[:1] or difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def one_line(message: str) -> str:
    """``message`` on one line: the lines of a multi-line message (a model-loading error) joined."""
    text = ""
    for line in (line.strip() for line in str(message).splitlines()):
        if line:
            text += line if not text else (" " if text.endswith(":") else "; ") + line
    return text


# Line breaks and other invisible characters, shown as the escapes Python would print.
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Control and format characters (a terminal's escape sequences start with one; the format ones
# include those that reverse the direction of text), line and paragraph separators, and
# surrogates (no UTF-8 file can hold a lone one: writing it would fail).
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def shown(value: Any) -> str:
    """``value`` as text on one line: ``str(value)`` with every line break, control character,
    line or paragraph separator and lone surrogate written as its escape (``\\n``, ``\\x00``,
    ``\\u2028``, ``\\ud800``); other text, accents and emoji included, stays as it is."""
    text = str(value)
    if text.isprintable():  # the common case: nothing to show differently (a space is printable)
        return text
    out = []
    for ch in text:
        if ch == " " or unicodedata.category(ch) not in _HIDDEN:
            out.append(ch)
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)
