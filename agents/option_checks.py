"""The type a library's default implies for an option given as data (a sweep file's
hyperparameters, RLlib's ``ppo_options``), checked before any training starts."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from typing import Any

from wpb_gym.core.checks import finite

__all__ = ["mistyped", "type_problem"]


def type_problem(value: Any, default: Any, *, sequences: bool = True, note: str = "") -> str | None:
    """What is wrong with ``value`` for an option whose default is ``default``, or None.

    Only numbers and switches are checked; other defaults (None, a mapping) leave the value to
    the library. A list or tuple passes when ``sequences`` (schedules, DQN's ``train_freq``
    pair). ``note`` follows "like its default ..." in the message.
    """
    if isinstance(default, bool):
        return None if isinstance(value, bool) else f"expected true or false, like its default {default}"
    if not isinstance(default, (int, float)) or (sequences and isinstance(value, (list, tuple))):
        return None
    kind = "an integer" if isinstance(default, int) else "a number"
    like = f", like its default {default!r}{note}"
    if isinstance(value, str) and _NUMBER_TEXT.fullmatch(value.strip()):
        return f"expected {kind}, got text (YAML reads 1e-3 as text: write 1.0e-3)"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected {kind}{like}"
    if isinstance(default, int) and not isinstance(value, int):
        return f"expected an integer{like}"
    return None if finite(value) else "expected a finite number"


_NUMBER_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def mistyped(cls: type, options: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """The first of ``options`` (arguments of ``cls``) whose value does not fit the type of its
    default, as (name, value, problem); None if every one fits. Names ``cls`` does not take are
    left to it."""
    parameters = inspect.signature(cls.__init__).parameters
    for name, value in options.items():
        problem = type_problem(value, parameters[name].default) if name in parameters else None
        if problem:
            return name, value, problem
    return None
