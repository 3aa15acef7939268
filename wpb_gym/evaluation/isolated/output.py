"""What a sandboxed policy prints, as it reaches the evaluator's terminal.

A policy's process writes to a pipe, and a process of the sandbox's relays it to the
evaluator's standard output and error (``sandbox``). Copied as it is, a policy could write a
terminal's escape sequences (move the cursor, rewrite lines already shown, set the window's
title, and on some terminals worse) or lines that read as the evaluator's own ("400 rows over
40 episodes -> runs/board/"). So the relay shows it line by line: each line is decoded as UTF-8
(a byte that is not is shown as U+FFFD), has every control or format character written as its
escape (``core.messages.shown``: ``\\x1b``, ``\\r``, ``\\u202e``) and starts with
``[policy NAME] ``. A line longer than ``LONGEST_LINE`` bytes is cut into lines of that length.
The traceback of an exception the policy raised in its process, which the evaluator quotes in
its error, is its text too, and is quoted the same way (``quoted``).
"""

from __future__ import annotations

from ...core.messages import shown

__all__ = ["LONGEST_LINE", "PolicyLines", "line_prefix", "quoted"]

LONGEST_LINE = 16384  # bytes of one relayed line; a longer one goes on in the next


def line_prefix(name: str) -> bytes:
    """What starts every relayed line of the policy ``name``."""
    return f"[policy {shown(name)}] ".encode()


def quoted(name: str, text: str) -> str:
    """The policy ``name``'s ``text`` as lines of its own, each marked and with no control character."""
    prefix = line_prefix(name).decode()
    # Cut at "\n" alone, as the relay cuts what a policy prints: any other separator is shown.
    return "\n".join(prefix + shown(line.removesuffix("\r")) for line in text.split("\n"))


class PolicyLines:
    """One stream of a policy's output (its standard output, or its error), cut into lines:
    ``feed`` takes what was read and returns the lines it completed, ready to write; ``end``
    returns the unfinished last one, if any."""

    def __init__(self, name: str) -> None:
        self.prefix = line_prefix(name)
        self.pending = b""

    def feed(self, data: bytes) -> bytes:
        lines = (self.pending + data).split(b"\n")
        self.pending = lines.pop()
        while len(self.pending) > LONGEST_LINE:  # a line without end is shown a piece at a time
            lines.append(self.pending[:LONGEST_LINE])
            self.pending = self.pending[LONGEST_LINE:]
        return b"".join(self._shown(line) for line in lines)

    def end(self) -> bytes:
        rest, self.pending = self.pending, b""
        return self._shown(rest) if rest else b""

    def _shown(self, line: bytes) -> bytes:
        if line.endswith(b"\r"):  # a line ended as on Windows: the ending, not a character of it
            line = line[:-1]
        return self.prefix + shown(line.decode("utf-8", "replace")).encode() + b"\n"
