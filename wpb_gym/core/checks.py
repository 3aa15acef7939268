"""Argument checks and the bad-input error, shared by every layer (this module imports nothing
of the package)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["InputError", "finite", "only_defaults", "require_finite", "require_int"]


class InputError(ValueError):
    """Bad command-line or config input: ``wpb`` prints the message on one line and exits 2."""


def require_int(value: Any, name: str, minimum: int = 0) -> int:
    """``value`` as a Python int if it is an integer (a NumPy one included; a bool is not) of at
    least ``minimum``, else a ``ValueError`` saying ``"<name> must be a non-negative int, got
    <value>"`` (a positive int for a minimum of 1, an int >= m above)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        expected = {0: "a non-negative int", 1: "a positive int"}.get(minimum, f"an int >= {minimum}")
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return int(value)


def finite(value: Any) -> bool:
    """``math.isfinite`` of a number, False (not an ``OverflowError``) for an int past float64's
    range."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def require_finite(value: Any, name: str) -> float:
    """``value`` as a float if it is a finite real number (a bool is not), else a ``ValueError``
    saying ``"<name> must be a finite number, got <value>"``."""
    real = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if real and finite(value):
        return float(value)
    raise ValueError(f"{name} must be a finite number, got {value!r}")


def only_defaults(part: str, given: dict[str, Any], defaults: dict[str, Any]) -> None:
    """A part passed in replaces the arguments it is built from: those must keep their defaults."""
    set_too = sorted(k for k, v in given.items() if k not in defaults or v != defaults[k])
    if set_too:
        raise ValueError(f"{part} replaces the arguments {set_too}: pass one or the other")
