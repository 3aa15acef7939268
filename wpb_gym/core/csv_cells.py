"""Text that a spreadsheet would read as a formula, refused before it can reach a CSV file.

Regime names and episode ids come from episode files, agent labels from configs and the
command line, and all of them are written into ``results.csv`` and the other CSV files of a
run. A spreadsheet that opens such a file reads a cell starting with ``=``, ``+``, ``-`` or
``@`` (a tab or a carriage return before one counts too) as a formula, and a formula can run a
command (``=cmd|' /C calc'!A0``) or send the sheet's cells elsewhere (``=HYPERLINK(...)``).

The usual defence, a ``'`` put before such a cell, would change the text: ``results.csv`` is
read back by ``wpb compare``, ``seeds`` and ``report``, and must give back exactly the names
it was written with. So such text is refused where it enters instead: an episode file when it
is read, an agent's label when the agents are checked. A number (``-0.5``, ``-3``) is no
formula and passes.
"""

from __future__ import annotations

import re

__all__ = ["FORMULA_RULE", "formula_start"]

# What a spreadsheet reads as the start of a formula (OWASP's list for CSV injection).
_STARTS = frozenset("=+-@\t\r")
_NAMES = {"\t": "a tab", "\r": "a carriage return"}
# A '-' that starts a whole number is a negative number, not a formula.
_NUMBER = re.compile(r"-(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")

FORMULA_RULE = (
    "text that a spreadsheet cannot read as a formula: no =, +, @, tab or carriage return first, "
    "and - first only in a number"
)


def formula_start(text: str) -> str | None:
    """Why a spreadsheet would read ``text`` as a formula (``"'='"``, ``"a tab"``...), or None."""
    first = text[:1]
    if first not in _STARTS:  # (an empty text too)
        return None
    if first == "-" and _NUMBER.fullmatch(text):
        return None
    return _NAMES.get(first, repr(first))
