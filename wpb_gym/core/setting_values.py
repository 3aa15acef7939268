"""A setting's value as a flag's text or a config file's YAML gives it, checked and normalised.

One function per kind of value (budgets, integers, numbers, seconds, switches, names, paths),
so that a value is checked the same way whether it comes from a flag, a config file or
``--env-kwargs``. Each takes ``where`` (the option, or the file and key) and raises an
``InputError`` starting with it; ``wpb`` prints it on one line and exits 2.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from .checks import InputError, finite, require_int
from .messages import did_you_mean


def input_error(where: str, message: str) -> InputError:
    # A flag's parser is given no ``where``: argparse names the flag itself.
    return InputError(f"{where}: {message}" if where else message)


# A budget of 1 TiB is far beyond any memory a write policy is given, and every budget up to
# it stays exact as a float (plots and CSV readers turn budgets into floats).
MAX_BUDGET = 1 << 40
# The generator builds a whole episode in memory; beyond a million steps numpy and memory give out.
MAX_LENGTH = 1_000_000

# The project counts 1KB = 1024 bytes (DEFAULT_BUDGETS, the paper's "10KB" = 10240).
_UNITS = {"": 1, "b": 1, "kb": 1 << 10, "kib": 1 << 10, "mb": 1 << 20, "mib": 1 << 20, "gb": 1 << 30, "gib": 1 << 30}
_BUDGET = re.compile(r"([+-]?)(\d+(?:\.\d+)?)\s*([A-Za-z]*)")
_BUDGET_HELP = "a number of bytes, optionally with a unit: 1024, 10KB, 1MB (1KB = 1024 bytes)"


def parse_budget(value: Any, where: str = "") -> int:
    """The budget ``value`` names, in bytes: an int, or text such as ``"10240"``, ``"10KB"``, ``"1.5KB"``.

    Units (any case): B, KB/KiB, MB/MiB, GB/GiB, powers of 1024. A fraction is allowed only
    where it makes whole bytes. Budgets run from 0 (store nothing) to ``MAX_BUDGET``.
    """
    if isinstance(value, bool):
        raise input_error(where, f"expected {_BUDGET_HELP}, got {value!r}")
    if isinstance(value, int):
        number = Fraction(value)
    elif isinstance(value, str):
        match = _BUDGET.fullmatch(value.strip())
        if match is None:
            raise input_error(where, f"expected {_BUDGET_HELP}, got {value!r}")
        sign, digits, unit = match.groups()
        factor = _UNITS.get(unit.lower())
        if factor is None:
            raise input_error(where, f"unknown unit {unit!r} in {value!r}; expected B, KB, MB or GB (1KB = 1024 bytes)")
        number = Fraction(digits) * factor * (-1 if sign == "-" else 1)
        if number.denominator != 1:
            raise input_error(where, f"{value!r} is not a whole number of bytes ({float(number):g})")
    else:
        raise input_error(where, f"expected {_BUDGET_HELP}, got {type(value).__name__} {value!r}")
    if number < 0:
        raise input_error(where, f"a budget cannot be negative, got {value!r}")
    if number > MAX_BUDGET:
        raise input_error(where, f"at most {MAX_BUDGET} bytes (1024GB), got {value!r}")
    return int(number)


def budget_text(budget: int) -> str:
    """``10240`` -> ``"10KB"``: the largest unit that divides the budget exactly (``parse_budget``'s inverse)."""
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if budget and budget % size == 0:
            return f"{budget // size}{unit}"
    return f"{budget}B"


def budget_argument(value: Any, name: str) -> int:
    """A budget passed to an env (``budget_bytes=``, ``options["budget_bytes"]``): bytes as an
    int, or text with a unit as everywhere else (``"10KB"``)."""
    return parse_budget(value, name) if isinstance(value, str) else require_int(value, name, 0)


def parse_budgets(value: Any, where: str = "") -> list[int]:
    """A non-empty list of distinct budgets: a list, one value, or comma-separated text."""
    budgets = [parse_budget(item, where) for item in _items(value, where)]
    return unique(budgets, where)


def parse_pairs(value: Any, where: str, example: str) -> list[tuple[str, Any]]:
    """``NAME=VALUE`` items: comma-separated text (values as text, stripped) or a mapping, in
    order; ``example`` shows the form in errors."""
    if isinstance(value, Mapping):
        return [(str(k), v) for k, v in value.items()]
    if not isinstance(value, str):
        raise input_error(where, f"expected text such as {example}, got {type(value).__name__}")
    pairs = []
    for item in value.split(","):
        name, sep, amount = item.partition("=")
        if not sep or not name.strip() or not amount.strip():
            raise input_error(where, f"expected NAME=VALUE items such as {example}, got {item!r}")
        pairs.append((name.strip(), amount.strip()))
    return pairs


def parse_fields(value: Any, where: str, example: str, parsers: Mapping[str, Callable[[Any, str], Any]]
                 ) -> dict[str, Any]:
    """``NAME=VALUE`` items (``parse_pairs``) of the fields ``parsers`` names, each value read by its
    parser (given the value and where it is); an unknown or repeated field is an ``InputError``."""
    fields: dict[str, Any] = {}
    for name, amount in parse_pairs(value, where, example):
        if name not in parsers:
            raise input_error(where, f"unknown field {name!r}; expected {', '.join(parsers)}")
        if name in fields:
            raise input_error(where, f"{name!r} is given twice")
        fields[name] = parsers[name](amount, f"{where}: {name}" if where else name)
    return fields


def _items(value: Any, where: str) -> list[Any]:
    """The items of a list setting given as a list, a comma-separated string or one scalar."""
    if isinstance(value, str):
        items: list[Any] = [x.strip() for x in value.split(",")]
        if any(not x for x in items):
            raise input_error(where, f"expected a comma-separated list without empty items, got {value!r}")
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        items = [value]
    else:
        raise input_error(where, f"expected a list, got {type(value).__name__} {value!r}")
    if not items:
        raise input_error(where, "expected a non-empty list")
    return items


def unique(values: Sequence[Any], where: str) -> list[Any]:
    """``values``, refusing repeats: a repeated grid value would count the same episodes twice
    and narrow every confidence interval to match."""
    seen: set[Any] = set()
    for value in values:
        key = repr(value) if isinstance(value, (dict, list)) else value
        if key in seen:
            raise input_error(where, f"{value!r} is given more than once (each value may appear once)")
        seen.add(key)
    return list(values)


def parse_names(value: Any, where: str, known: Iterable[str] | None = None) -> list[str]:
    """A non-empty list of distinct names (a list or comma-separated text), each among ``known`` if given."""
    names = _items(value, where)
    for name in names:
        if not isinstance(name, str):
            raise input_error(where, f"expected names, got {type(name).__name__} {name!r}")
    if known is not None:
        known = list(known)
        for name in names:
            if name not in known:
                raise input_error(where, f"unknown {name!r}{did_you_mean(name, known)}; known: {', '.join(known)}")
    return unique(names, where)


def parse_int(value: Any, where: str, minimum: int, maximum: int | None = None) -> int:
    """An int (or its decimal text) in ``[minimum, maximum]``."""
    if isinstance(value, str):
        try:
            if not value.isascii():  # int() reads other scripts' digits too
                raise ValueError
            value = int(value.strip())
        except ValueError:
            raise input_error(where, f"expected an integer, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise input_error(where, f"expected an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise input_error(where, f"expected an integer >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise input_error(where, f"expected an integer <= {maximum}, got {value}")
    return value


def parse_bool(value: Any, where: str) -> bool:
    """A YAML boolean (``true``/``false``; also the text ``"true"``/``"false"``)."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise input_error(where, f"expected true or false, got {value!r}")
    return value


def underflows(text: str) -> bool:
    """Whether the number ``text`` is not 0 though it reads as 0.0 (``1e-400``)."""
    mantissa = text.strip().lower().partition("e")[0]
    try:
        return float(mantissa) != 0 and float(text) == 0
    except ValueError:
        return False


def parse_seconds(value: Any, where: str, maximum: float | None = None) -> float:
    """A non-negative, finite number of seconds (or its text), at most ``maximum``."""
    if isinstance(value, str):
        text = value
        try:
            value = float(text.strip())
        except ValueError:
            raise input_error(where, f"expected a number of seconds, got {text!r}") from None
        if value == 0 and underflows(text):  # 0 switches a limit off: a tiny limit that rounds to it must not
            raise input_error(where, f"{text.strip()} seconds is too small to tell from 0 (no limit)")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not finite(value) or value < 0:
        raise input_error(where, f"expected a non-negative number of seconds, got {value!r}")
    if maximum is not None and value > maximum:
        raise input_error(where, f"at most {maximum:g} seconds, got {value!r}")
    return float(value)


def parse_float(value: Any, where: str, minimum: float | None = None, maximum: float | None = None) -> float:
    """A finite number (or its text) in ``[minimum, maximum]``."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise input_error(where, f"expected a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not finite(value):
        raise input_error(where, f"expected a finite number, got {value!r}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        span = f"in [{minimum:g}, {maximum:g}]" if minimum is not None and maximum is not None else (
            f">= {minimum:g}" if minimum is not None else f"<= {maximum:g}"
        )
        raise input_error(where, f"expected a number {span}, got {value!r}")
    return float(value)


def parse_text(value: Any, where: str) -> str:
    """Non-empty text."""
    if not isinstance(value, str) or not value.strip():
        raise input_error(where, f"expected non-empty text, got {value!r}")
    return value


def parse_choice(value: Any, where: str, choices: Sequence[str]) -> str:
    """One of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        hint = did_you_mean(str(value), choices)
        raise input_error(where, f"expected one of {', '.join(choices)}, got {value!r}{hint}")
    return value


def parse_ints(value: Any, where: str, minimum: int, maximum: int | None = None) -> list[int]:
    """A non-empty list of distinct ints in ``[minimum, maximum]``."""
    return unique([parse_int(item, where, minimum, maximum) for item in _items(value, where)], where)


def parse_path(value: Any, where: str = "") -> str:
    """A path given as text: not empty (it would mean the current folder) and without NUL."""
    if not isinstance(value, str) or not value.strip():
        raise input_error(where, f"expected a path, got {value!r}")
    if "\x00" in value:
        raise input_error(where, f"a path cannot hold a NUL character, got {value!r}")
    return value
