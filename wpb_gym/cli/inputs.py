"""What the ``wpb`` command line accepts beyond single values, and the errors it reports.

Single values (budgets, counts, numbers, names, paths) are checked in
``wpb_gym.core.setting_values``, the same way from a flag, a YAML config or ``--env-kwargs``.
Here: env arguments (``KEY=VALUE`` and their names), the files and run folders a command reads,
and argparse's usage errors, on one line. Errors are ``InputError``s naming the option (or file
and key) and what was expected; ``wpb`` prints them on one line and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml

from ..core.checks import InputError
from ..core.messages import did_you_mean, one_line
from ..core.setting_values import input_error, parse_budget, underflows
from ..core.settings_files import ConfigLoader


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


def check_env_kwargs(kwargs: Any, where: str, reserved: dict[str, str] | None = None, *,
                     query_tier: bool = False, env_class: type | None = None) -> dict[str, Any]:
    """Env arguments by name (``WritePolicyBenchEnv``'s own, or generator options; with
    ``query_tier``, ``QueryTierEnv``'s and ``QueryTierConfig``'s; ``env_class`` names another
    env, such as ``WritePolicyBenchEnv`` playing a tier's episodes), with ``budget_bytes`` read as
    a budget and a number with an exponent that YAML read as text (``1e-3``: YAML 1.1 wants
    ``1.0e-3``) read as the number where a float is expected. ``reserved`` names arguments set
    otherwise, and how."""
    import inspect

    from ..envs.env import WritePolicyBenchEnv
    from ..envs.query_env import QueryTierEnv
    from ..episodes.generators.paper import GeneratorConfig
    from ..episodes.generators.queries import QueryTierConfig

    if not isinstance(kwargs, dict):
        raise InputError(f"{where}: expected a mapping of env arguments, got {type(kwargs).__name__} {kwargs!r}")
    config_class = QueryTierConfig if query_tier else GeneratorConfig
    if env_class is None:
        env_class = QueryTierEnv if query_tier else WritePolicyBenchEnv
    signature = inspect.signature(env_class.__init__).parameters.values()
    arguments = [p.name for p in signature if p.name != "self" and p.kind is not p.VAR_KEYWORD]
    arguments = [name for name in arguments if name not in _ENV_PARTS]  # text cannot give them
    options = [name for name in config_class.__dataclass_fields__ if name not in arguments]
    floats = {p.name for p in signature if p.annotation in ("float", "float | None")}
    floats |= {f.name for f in config_class.__dataclass_fields__.values() if f.type == "float"}
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


def check_regime(env_kwargs: dict[str, Any], where: str) -> None:
    """The ``regime`` of generated episodes, if given, is a known one, named with the closest.
    With ``episodes`` the regime only selects among the files' episodes (``real:stripe``), so
    any name is left to that selection."""
    from ..episodes.generators.regimes import ALL_REGIMES

    regime = env_kwargs.get("regime")
    if regime is None or "episodes" in env_kwargs or regime in ALL_REGIMES:
        return
    if str(regime).startswith(("real:", "real_queries:")):
        raise InputError(f"{where}: regime: {regime!r} names real-drift episodes, which come from files: give "
                         f"them with episodes=PATH (wpb episodes from-events), not as a generated regime")
    raise InputError(
        f"{where}: regime: unknown regime {regime!r}{did_you_mean(str(regime), ALL_REGIMES)}; "
        f"known regimes: {', '.join(ALL_REGIMES)}"
    )


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
    return [episode for _, episode in read_placed_episode_source(path)]


def read_placed_episode_source(path: str) -> list[tuple[str, Any]]:
    """``read_episode_source`` with where each episode is read from (``FILE:LINE``)."""
    from ..episodes.frozen import FrozenSetError
    from ..episodes.jsonl import EpisodeFormatError
    from ..episodes.sources import read_placed_episodes

    with reading(path):
        try:
            return read_placed_episodes(path)
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


def check_same_limits(runs: Sequence[tuple[Any, Sequence[dict[str, Any]]]], across_regimes: bool = False) -> None:
    """Refuse runs that played one (regime, length, budget) under different limits beside the
    budget (``wpb eval --kind-budgets``, ``--write-time``, ``--compression``): their rows are different conditions,
    and pairing or pooling them would compare unlike with unlike. ``across_regimes``: one budget
    under different limits in any regime and length (a transfer table ranks policies across
    regimes)."""
    for column, what, option in (("kind_budgets", "kind budgets", "--kind-budgets"),
                                 ("write_time", "write time", "--write-time"),
                                 ("compression", "compression", "--compression")):
        seen: dict[tuple[Any, Any, Any], tuple[str, Any]] = {}
        for where, rows in runs:
            for row in rows:
                condition = ((None, None) if across_regimes else (row["mode"], row["steps"])) + (row["budget_bytes"],)
                value = row.get(column) or ""
                first = seen.setdefault(condition, (value, where))
                if first[0] != value:
                    mode, steps, budget = condition
                    played = f"{mode}, T={steps}" if mode is not None else "a regime"
                    raise InputError(
                        f"{first[1]} played {played} at {budget} bytes with {what} "
                        f"{first[0] or 'none'}, {where} with {value or 'none'}: those are different conditions "
                        f"(wpb eval {option}); give runs of the same {what}"
                    )


def check_policies(names: Iterable[str], rows: Sequence[dict[str, Any]], where: Any, option: str) -> None:
    """Refuse agent names the run's rows do not have, listing those it has."""
    held = sorted({r["policy"] for r in rows})
    for name in names:
        if name not in held:
            raise InputError(
                f"{option}: no agent {name!r} in {where}{did_you_mean(name, held)}; it has: {', '.join(held)}"
            )
