"""Text that comes from data, where it enters a report: Markdown, and the titles of plots.

Regime names and episode ids come from episode files, agent labels from configs and the
command line, run names from folder names: any of them may hold a line break or a ``|``.
Written into Markdown as they are, a line break ends a table row or a heading and the next
line starts a row of its own (a regime named ``"x\\n| fake | 1.000 |"`` would add a
leaderboard row), and a ``|`` opens a cell. ``markdown_text`` is what every table, heading
and list item of the reports writes such text through; ``shown`` puts it on one line for a
plot title. CSV files need neither: the ``csv`` module quotes a cell that holds a line
break, a comma or a quote, and reads it back whole.
"""

from __future__ import annotations

import unicodedata
from typing import Any

__all__ = ["markdown_text", "shown"]

# Line breaks and other invisible characters, shown as the escapes Python would print.
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Control and format characters, line and paragraph separators, and surrogates (no UTF-8 file
# can hold a lone one: writing it would fail).
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


def markdown_text(value: Any) -> str:
    """``value`` in a Markdown table cell, heading or list item: on one line (``shown``), with
    ``\\`` and ``|`` escaped, so that it can neither end its row nor open a cell (a ``\\`` of
    the data before a ``|`` cannot unescape it). It reads as the text it is."""
    return shown(str(value).replace("\\", "\\\\")).replace("|", "\\|")
