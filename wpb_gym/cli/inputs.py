"""What the ``wpb`` command line accepts, and the errors it reports for anything else.

Every value is checked by the same function whether it comes from a flag, a YAML config or
``--env-kwargs``, so the three can never disagree. Errors are ``InputError``s naming the
option (or file and key) and what was expected; ``wpb`` prints them on one line and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, NoReturn

import yaml

from ..core.checks import InputError, finite


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


def parse_budgets(value: Any, where: str = "") -> list[int]:
    """A non-empty list of distinct budgets: a list, one value, or comma-separated text."""
    budgets = [parse_budget(item, where) for item in _items(value, where)]
    return unique(budgets, where)


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


class ConfigLoader(yaml.SafeLoader):
    """The YAML of config files and of ``KEY=VALUE`` flags: YAML's safe loader, refusing a key
    given twice in one mapping (YAML keeps the last), a value its tag does not fit and a float
    too small to tell from 0."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key!r} is given twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except (ValueError, KeyError, IndexError, TypeError, OverflowError):  # a tag its value does not fit
            tag = node.tag.rsplit(":", 1)[-1]
            value = node.value if isinstance(node, yaml.ScalarNode) else "this value"
            raise yaml.constructor.ConstructorError(
                None, None, f"{value!r} is not a valid {tag}", node.start_mark
            ) from None

    def construct_underflow_checked_float(self, node: yaml.ScalarNode) -> float:
        # A setting of 0 can mean "off" (a time limit): a number written too small for a float is refused.
        value = self.construct_yaml_float(node)
        if value == 0 and underflows(node.value.replace("_", "")):
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value} is too small to tell from 0", node.start_mark
            )
        return value


ConfigLoader.add_constructor("tag:yaml.org,2002:float", ConfigLoader.construct_underflow_checked_float)


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


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The env's parts: objects built in Python (``WritePolicyBenchEnv``'s docstring), never from text.
_ENV_PARTS = {
    "episode_sampler": "EpisodeSampler",
    "observation_encoder": "ObservationEncoder",
    "reward_fn": "RewardFunction",
    "viewer": "MemoryViewer",
}


def parse_env_kwarg(value: Any, where: str) -> tuple[str, Any]:
    """One env argument: ``KEY=VALUE`` with VALUE read as YAML (``slots=4``, ``dense_reward=false``,
    ``regime=default``), or a (key, value) pair from a config's mapping."""
    if isinstance(value, tuple) and len(value) == 2:
        return value
    if not isinstance(value, str):
        raise input_error(where, f"expected key=value, got {value!r}")
    key, sep, text = value.partition("=")
    if not sep or not _NAME.fullmatch(key):
        raise input_error(where, f"expected key=value, got {value!r}")
    try:
        return key, yaml.load(text, Loader=ConfigLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise input_error(where, f"{value!r}: the value is not valid YAML ({problem})") from None


_EXPONENT_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")


def check_env_kwargs(kwargs: Any, where: str, reserved: dict[str, str] | None = None) -> dict[str, Any]:
    """Env arguments by name (``WritePolicyBenchEnv``'s own, or generator options), with
    ``budget_bytes`` read as a budget and a number with an exponent that YAML read as text
    (``1e-3``: YAML 1.1 wants ``1.0e-3``) read as the number where a float is expected.
    ``reserved`` names arguments set otherwise, and how."""
    import inspect

    from ..envs.env import WritePolicyBenchEnv
    from ..episodes.generators.paper import GeneratorConfig

    if not isinstance(kwargs, dict):
        raise InputError(f"{where}: expected a mapping of env arguments, got {type(kwargs).__name__} {kwargs!r}")
    signature = inspect.signature(WritePolicyBenchEnv.__init__).parameters.values()
    arguments = [p.name for p in signature if p.name != "self" and p.kind is not p.VAR_KEYWORD]
    arguments = [name for name in arguments if name not in _ENV_PARTS]  # text cannot give them
    options = [name for name in GeneratorConfig.__dataclass_fields__ if name not in arguments]
    floats = {p.name for p in signature if p.annotation == "float"}
    floats |= {f.name for f in GeneratorConfig.__dataclass_fields__.values() if f.type == "float"}
    checked = {}
    for key, value in kwargs.items():
        if reserved and key in reserved:
            raise InputError(f"{where}: {key} is {reserved[key]}")
        if key in _ENV_PARTS:
            raise InputError(
                f"{where}: {key} takes a Python object (a {_ENV_PARTS[key]}), which text cannot give; "
                "pass it to the env in Python, or set the arguments it replaces"
            )
        if key not in arguments and key not in options:
            raise InputError(
                f"{where}: unknown env argument {key!r}{did_you_mean(str(key), arguments + options)}; "
                f"env arguments: {', '.join(arguments)}; generator options: {', '.join(options)}"
            )
        if key in floats and isinstance(value, str) and _EXPONENT_NUMBER.fullmatch(value.strip()):
            if underflows(value):
                raise InputError(f"{where}: {key}: {value.strip()} is too small to tell from 0")
            value = float(value)
        checked[key] = parse_budget(value, f"{where}: budget_bytes") if key == "budget_bytes" else value
    return checked


@contextlib.contextmanager
def reading(path: Any) -> Iterator[None]:
    """Turn the low-level errors of reading ``path`` (missing, a folder, not gzip, not UTF-8,
    cut short) into an ``InputError`` naming it. Errors that already name their file pass."""
    try:
        yield
    except (OSError, EOFError, UnicodeError, zlib.error) as error:
        if isinstance(error, OSError) and error.strerror:
            message = f"{error.filename or path}: cannot read: {error.strerror}"
        elif isinstance(error, UnicodeError):
            message = f"{path}: not UTF-8 text"
        else:
            message = str(error) if str(path) in str(error) else f"{path}: cannot read: {error}"
        raise InputError(message) from None


class OneLineParser(argparse.ArgumentParser):
    """Usage errors on one line, like every other error of ``wpb``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # argparse reads "-1KB" as an unknown option, not as the value of --budgets: values that
        # start with a minus and a digit go to the option, whose own check names the problem.
        self._negative_number_matcher = re.compile(r"^-\d[\w.,]*$")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see '{self.prog} --help' for usage)\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        # argparse reports unknown options from the top parser ("wpb: error"): name the command.
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            prog = getattr(parsed, "prog", self.prog)
            message = f"unrecognized arguments: {' '.join(unknown)} (see '{prog} --help' for usage)"
            self.exit(2, f"{prog}: error: {message}\n")
        return parsed


def flag_type(parse: Callable[..., Any], *args: Any) -> Callable[[str], Any]:
    """An argparse type from one of the parsers above: a flag is checked like a config value."""

    def parse_flag(text: str) -> Any:
        try:
            return parse(text, "", *args)
        except InputError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse_flag


def read_episode_source(path: str) -> list[Any]:
    """The episodes of a file, folder or frozen set; loader errors that name their file pass."""
    from ..episodes.frozen import FrozenSetError
    from ..episodes.jsonl import EpisodeFormatError
    from ..episodes.sources import read_episodes

    with reading(path):
        try:
            return read_episodes(path)
        except (EpisodeFormatError, FrozenSetError, UnicodeError):
            raise
        except ValueError as error:  # no episodes, or another refusal of the loader
            raise InputError(str(error)) from None


def read_run(path: Path) -> list[dict[str, Any]]:
    """The rows of the run folder ``path`` (its ``results.csv``), with errors naming what is wrong."""
    from ..evaluation.reports.report import read_results

    if path.exists() and not path.is_dir():
        raise InputError(f"{path}: is a file; expected a run folder written by wpb eval")
    results = path / "results.csv"
    if results.exists() and not results.is_file():
        raise InputError(f"{results}: is not a file; expected the results.csv of wpb eval")
    with reading(results):
        try:
            rows = read_results(results)
        except UnicodeDecodeError:
            raise InputError(f"{results}: not UTF-8 text; expected the results.csv of wpb eval") from None
        except (FileNotFoundError, ValueError) as error:
            raise InputError(str(error)) from None
    if not rows:
        raise InputError(f"{results}: holds no rows; expected the results of a complete wpb eval run")
    return rows


def check_policies(names: Iterable[str], rows: Sequence[dict[str, Any]], where: Any, option: str) -> None:
    """Refuse agent names the run's rows do not have, listing those it has."""
    held = sorted({r["policy"] for r in rows})
    for name in names:
        if name not in held:
            raise InputError(
                f"{option}: no agent {name!r} in {where}{did_you_mean(name, held)}; it has: {', '.join(held)}"
            )
