"""Text that comes from data, where it enters a report: Markdown, and the titles of plots.

Regime names and episode ids come from episode files, agent labels from configs and the
command line, run names from folder names: any of them may hold a line break, a ``|`` or HTML.
Written into Markdown as they are, a line break ends a table row or a heading and the next
line starts a row of its own (a regime named ``"x\\n| fake | 1.000 |"`` would add a
leaderboard row), a ``|`` opens a cell, and HTML is passed through to the page (MkDocs and
most Markdown renderers keep raw HTML: a regime named ``<script>...</script>`` would run in
the browser of whoever reads the published leaderboard). ``markdown_text`` is what every
table, heading and list item of the reports writes such text through; ``markdown_code`` puts
it in a code span where it can be shown there as it is; ``shown`` puts it on one line for a
plot title. CSV files need neither: the ``csv`` module quotes a cell that holds a line break,
a comma or a quote, and reads it back whole (a cell a spreadsheet would run as a formula is
refused before it gets there: ``wpb_gym.core.csv_cells``).
"""

from __future__ import annotations

import re
from typing import Any

from ...core.messages import shown

__all__ = ["markdown_code", "markdown_text", "shown"]

# Markdown's and HTML's own characters, as the text they are. HTML's as entities: a backslash
# does not stop a renderer from reading "<" as the start of a tag. The rest with a backslash:
# "|" (a cell), "`" (a code span, inside which nothing is escaped, that could take in the
# cells after it) and "[", "]" (a link, whose target could be "javascript:").
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "`": "\\`", "[": "\\[", "]": "\\]"}
_SPECIAL = re.compile("[&<>|`\\[\\]]")
# What a code span cannot show as itself in every renderer: nothing inside one is escaped, so
# its own backtick and HTML's characters (shown raw in the file) are left out, and a "|" or a
# "\\" is read differently by GitHub's tables and by Python-Markdown's.
_NOT_IN_CODE = re.compile("[&<>|`\\\\]")


def markdown_text(value: Any) -> str:
    """``value`` in a Markdown table cell, heading or list item: on one line (``shown``), with
    ``\\`` and ``|`` escaped, so that it can neither end its row nor open a cell (a ``\\`` of
    the data before a ``|`` cannot unescape it); ``&``, ``<`` and ``>`` as HTML entities, so
    that no tag or entity of the data reaches the page; and the backtick and brackets
    escaped, so that it opens no code span and no link. It reads as the text it is."""
    text = shown(str(value).replace("\\", "\\\\"))
    return _SPECIAL.sub(lambda match: _ESCAPES[match.group()], text)


def markdown_code(value: Any) -> str:
    """``value`` as inline code (`` `value` ``) when a code span shows it as it is: one line,
    none of ``` ` | \\ < > & ```; otherwise as ``markdown_text``, plain (in a code span its
    escapes would be shown as written)."""
    text = str(value)
    if text.isprintable() and not _NOT_IN_CODE.search(text):
        return f"`{text}`"
    return markdown_text(text)
