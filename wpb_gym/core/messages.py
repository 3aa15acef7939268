"""How an error reads: on one line, with the closest known name when a name is misspelt."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, or nothing."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def one_line(message: str) -> str:
    """``message`` on one line: the lines of a multi-line message (a model-loading error) joined."""
    text = ""
    for line in (line.strip() for line in str(message).splitlines()):
        if line:
            text += line if not text else (" " if text.endswith(":") else "; ") + line
    return text
