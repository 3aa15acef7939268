"""Episodes as JSONL (spec §6.1): one episode per line, ``{"labels": {...}, "steps": [...]}``.

Reading validates every line and fails with an ``EpisodeFormatError`` that names the file,
the line and the field; no bad input gets through, and none gets a bare Python exception:
bytes that are not UTF-8, a ``.gz`` file that is not gzip or is truncated or corrupt, JSON
that Python reads but a data file must not hold (``NaN``, ``1e400``, a repeated key, nesting
past ``strict_json.MAX_NESTING`` levels, integers past Python's digit limit — see
``strict_json``), and every field of the schema below of the wrong type or out of range.

Schema. ``steps``: a non-empty list of ``{"t", "observation", "metadata"?}`` with ``t`` the
integers 0..T-1 in order, ``observation`` any JSON value, ``metadata`` an object whose
``priority`` (the privileged hint), where given, is a finite number on every step.
``labels``: an object with ``critical_steps`` (distinct timesteps), ``utility_by_step`` (an
object with one canonical integer key per timestep and a number in [0, MAX_UTILITY] each),
and optionally ``breaking_changes`` (distinct timesteps), ``total_drift_events`` (an integer
at least the number of critical steps: drift coverage is a fraction) and ``deprecated_apis``
(a non-negative integer); other labels are kept as they are. The episode's names
(``labels.mode``, ``labels.episode_id``, the first step's ``metadata.mode``), where they are text,
hold no lone surrogate and do not start as a spreadsheet formula (``core.csv_cells``).

Files ending in ``.gz`` are gzip-compressed. Writing is deterministic (sorted keys,
``json.dumps`` defaults, gzip without timestamp) and atomic (a temporary file renamed into
place), so ``write_jsonl(load_jsonl(f))`` reproduces a file written this way — the paper's
released files included — byte for byte.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import math
import os
import re
import sys
import zlib
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from ..core.atomic_files import atomic_output
from ..core.csv_cells import FORMULA_RULE, formula_start
from ..core.queries import QueryFormatError, parse_queries
from ..core.strict_json import JSONLineError, StrictDecoder
from ..core.types import MAX_UTILITY, Episode, Step, frozen_instances

_STEP_KEYS = frozenset({"t", "observation", "metadata"})
_EPISODE_KEYS = {"steps", "labels"}


class EpisodeFormatError(ValueError):
    """A file that is not a valid episode stream; ``path``, ``line`` and ``field`` say where."""

    def __init__(self, path: str | os.PathLike[str], line: int | None, field: str | None, message: str) -> None:
        self.path, self.line, self.field = str(path), line, field
        where = self.path + (f":{line}" if line is not None else "")
        super().__init__(f"{where}: {field + ': ' if field else ''}{message}")


def open_text(path: Path, mode: str) -> IO[str]:
    """A text handle on ``path`` (UTF-8, ``\\n`` newlines), gzip-decoded when it ends in ``.gz``."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, mode + "b"), encoding="utf-8", newline="\n")
    return open(path, mode, encoding="utf-8", newline="\n")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    """``repr(value)``, cut short: a message must stay one readable line whatever the file holds."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:45]}... ({len(text)} characters)"


def _is_text(value: str) -> bool:
    """Whether ``value`` is Unicode text: no lone surrogate, which no UTF-8 file can hold."""
    return value.isascii() or not _SURROGATE.search(value)


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _is_finite_number(value: Any) -> bool:
    # An int of 400 digits is a JSON number but no float: it must not reach float().
    if isinstance(value, float):
        return math.isfinite(value)
    return _is_number(value) and abs(value) <= sys.float_info.max


def episode_from_dict(data: Any, *, path: str | os.PathLike[str] = "<episode>", line: int | None = None) -> Episode:
    """Validate one decoded JSON object and build the ``Episode`` (``utility_by_step`` keys -> int)."""

    def fail(field: str | None, message: str) -> EpisodeFormatError:
        return EpisodeFormatError(path, line, field, message)

    if not isinstance(data, dict):
        raise fail(None, f"expected a JSON object per line, got {type(data).__name__}")
    unknown = sorted(set(data) - _EPISODE_KEYS)
    if unknown:
        raise fail(unknown[0], f"unknown key (an episode has only {sorted(_EPISODE_KEYS)})")
    if "steps" not in data:
        raise fail("steps", "missing")
    raw_steps = data["steps"]
    if not isinstance(raw_steps, list) or not raw_steps:
        raise fail("steps", "expected a non-empty list of steps")
    steps = _steps(raw_steps, fail)
    T = len(steps)

    if "labels" not in data:
        raise fail("labels", "missing")
    labels = data["labels"]
    if not isinstance(labels, dict):
        raise fail("labels", f"expected an object, got {type(labels).__name__}")
    labels = dict(labels)
    # The names of an episode: its regime and id go into results.csv, the reports and the
    # pictures' file names, all UTF-8. A JSON escape can spell a lone surrogate (\ud800), which
    # is no character; and a name starting with "=" would run as a formula in a spreadsheet
    # opening results.csv, which must keep it as it is (core.csv_cells). Both are refused here,
    # before any work, not when the results are written. (Other types are written as their
    # str(): a number, or a list or object's "[" or "{".)
    names = [(f"labels.{key}", labels.get(key)) for key in ("mode", "episode_id")]
    names.append(("steps[0].metadata.mode", steps[0].metadata.get("mode")))
    for field, name in names:
        if not isinstance(name, str):
            continue
        if not _is_text(name):
            raise fail(field, f"{_shown(name)} holds a lone surrogate (a \\uD800-\\uDFFF escape without its pair), "
                              "which is not a character: UTF-8 cannot write it")
        formula = formula_start(name)
        if formula is not None:
            raise fail(field, f"expected {FORMULA_RULE} (it is written to results.csv as it is); "
                              f"got {_shown(name)}, which starts with {formula}")

    for key in ("critical_steps", "breaking_changes"):
        if key not in labels:
            if key == "critical_steps":
                raise fail("labels.critical_steps", "missing (the relevant timesteps R)")
            continue
        value = labels[key]
        if not isinstance(value, list):
            raise fail(f"labels.{key}", f"expected a list of timesteps, got {type(value).__name__}")
        seen = set()
        for j, t in enumerate(value):
            if not _is_int(t):
                raise fail(f"labels.{key}[{j}]", f"expected an integer timestep, got {_shown(t)}")
            if not 0 <= t < T:
                raise fail(f"labels.{key}[{j}]", f"timestep {_shown(t)} is outside the episode (0..{T - 1})")
            if t in seen:
                raise fail(f"labels.{key}[{j}]", f"timestep {t} is listed twice")
            seen.add(t)

    for key in ("total_drift_events", "deprecated_apis"):
        if key in labels and not (_is_int(labels[key]) and labels[key] >= 0):
            raise fail(f"labels.{key}", f"expected a non-negative integer, got {_shown(labels[key])}")
    critical = len(labels["critical_steps"])
    if "total_drift_events" in labels and labels["total_drift_events"] < critical:
        raise fail(
            "labels.total_drift_events",
            f"{_shown(labels['total_drift_events'])} is fewer than the {critical} critical steps "
            "(each critical step is a drift event; drift coverage would exceed 1)",
        )

    if "utility_by_step" not in labels:
        raise fail("labels.utility_by_step", "missing (the hidden utility of every timestep)")
    raw_util = labels["utility_by_step"]
    if not isinstance(raw_util, dict):
        raise fail("labels.utility_by_step", f"expected an object keyed by timestep, got {type(raw_util).__name__}")
    labels["utility_by_step"] = _utilities(raw_util, T, fail)
    if "queries" in labels:
        try:
            queries = parse_queries(labels["queries"], T)
        except QueryFormatError as exc:
            raise fail(exc.field, exc.message) from None
        for k, query in enumerate(queries):
            # A query is asked at a checkpoint step: one that shows queries, not an endpoint.
            # Anywhere else the env would play the step itself and a policy never decide on it.
            obs = steps[query.t].observation
            if not (isinstance(obs, dict) and "queries" in obs and "api" not in obs):
                raise fail(f"labels.queries[{k}]", f"t={query.t} is not a checkpoint step (its observation "
                                                   f"shows no queries, or shows an endpoint); got {_shown(obs)}")
    return Episode(steps=steps, labels=labels)


_ABSENT = object()
_FLOAT_MAX = sys.float_info.max


def _steps(raw_steps: list[Any], fail: Any) -> list[Step]:
    """The validated steps. Written for speed (a released file has 8,000 steps): the checks
    every step passes come first and cheaply, the precise diagnosis only on a failure."""
    fields = []
    with_priority, missing_priority = 0, None
    for i, raw in enumerate(raw_steps):
        if not isinstance(raw, dict):
            raise fail(f"steps[{i}]", f"expected an object, got {type(raw).__name__}")
        if not raw.keys() <= _STEP_KEYS:
            unknown = sorted(set(raw) - _STEP_KEYS)
            raise fail(f"steps[{i}].{unknown[0]}", f"unknown key (a step has only {sorted(_STEP_KEYS)})")
        t = raw.get("t", _ABSENT)
        if t.__class__ is not int or t != i:
            where = f"steps[{i}].t"
            if t is _ABSENT:
                raise fail(where, "missing")
            if not _is_int(t):
                raise fail(where, f"expected an integer, got {_shown(t)}")
            if t != i:
                raise fail(where, f"expected {i} (timesteps must run 0..T-1 in order), got {_shown(t)}")
        if "observation" not in raw:
            raise fail(f"steps[{i}].observation", "missing")
        metadata = raw["metadata"] if "metadata" in raw else {}
        if not isinstance(metadata, dict):
            raise fail(f"steps[{i}].metadata", f"expected an object, got {type(metadata).__name__}")
        priority = metadata.get("priority", _ABSENT)
        if priority is _ABSENT:
            if missing_priority is None:
                missing_priority = i
        else:
            # x - x is 0.0 for a finite float, NaN for inf and NaN.
            if not (priority.__class__ is float and priority - priority == 0.0) and not _is_finite_number(priority):
                raise fail(f"steps[{i}].metadata.priority", f"expected a finite number, got {_shown(priority)}")
            with_priority += 1
        fields.append({"t": i, "observation": raw["observation"], "metadata": metadata})
    if with_priority and missing_priority is not None:
        raise fail(
            f"steps[{missing_priority}].metadata.priority",
            f"missing (the privileged priority hint is given at {with_priority} of {len(fields)} steps: "
            "give it at all or none)",
        )
    return frozen_instances(Step, fields)


@functools.lru_cache(maxsize=64)
def _timestep_keys(length: int) -> frozenset[str]:
    return frozenset(map(str, range(length)))


def _utilities(raw_util: dict[Any, Any], T: int, fail: Any) -> dict[int, float | int]:
    """``utility_by_step`` with int keys, in the file's order, validated."""
    if raw_util.keys() == _timestep_keys(T):
        # Every key canonical, in range and present: only the values are left to check,
        # and a list of plain finite numbers in range passes these C-level tests.
        values = list(raw_util.values())
        if set(map(type, values)) <= {float, int}:
            try:
                total = sum(values)
            except OverflowError:  # an int too large for a float among floats
                total = math.nan
            if total - total == 0 and min(values) >= 0 and max(values) <= MAX_UTILITY:
                return dict(zip(map(int, raw_util), values))
    utility: dict[int, float | int] = {}
    for key, value in raw_util.items():
        field = f"labels.utility_by_step[{_shown(key)}]"
        try:
            t = int(key)
        except (TypeError, ValueError):
            raise fail(field, "key is not an integer timestep") from None
        if str(t) != str(key):
            raise fail(field, "key is not a canonical integer timestep")
        if not 0 <= t < T:
            raise fail(field, f"timestep {_shown(t)} is outside the episode (0..{T - 1})")
        if t in utility:
            raise fail(field, f"timestep {t} is given twice")
        if not _is_number(value):
            raise fail(field, f"expected a number, got {_shown(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise fail(field, f"utility must be finite, got {_shown(value)}")
        if value < 0:
            raise fail(field, f"utility must be non-negative, got {_shown(value)}")
        if value > MAX_UTILITY:
            raise fail(
                field,
                f"utility must be at most {MAX_UTILITY:g} (the largest the oracle and metrics sum exactly), "
                f"got {_shown(value)}",
            )
        utility[t] = value
    if len(utility) != T:
        missing = [t for t in range(T) if t not in utility]
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        raise fail("labels.utility_by_step", f"no utility for {len(missing)} timestep(s): {shown}")
    return utility


# What a damaged .gz raises while it is read: a truncated stream, a bad header, CRC or
# length, a corrupt deflate block.
_GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


def _gzip_problem(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "gzip data ends early (the file is truncated)"
    if isinstance(exc, gzip.BadGzipFile) and str(exc).startswith("Not a gzipped file"):
        return "not gzip data (a file named *.gz must be gzip-compressed)"
    return f"corrupt gzip data ({exc})"


def _open_lines(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _decode_utf8(raw: bytes, path: Path, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        hint = " (it looks gzip-compressed: name it *.jsonl.gz)" if raw.startswith(b"\x1f\x8b") else ""
        raise EpisodeFormatError(
            path, lineno, None, f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}{hint}"
        ) from None


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Episode]:
    """Stream the episodes of a ``.jsonl`` or ``.jsonl.gz`` file, validating each line."""
    path = Path(path)
    decoder = StrictDecoder()
    with _open_lines(path) as fh:
        lines = iter(fh)
        lineno = 0
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                break
            except _GZIP_ERRORS as exc:
                raise EpisodeFormatError(path, lineno + 1, None, _gzip_problem(exc)) from None
            lineno += 1
            text = _decode_utf8(raw, path, lineno)
            if not text.strip():
                raise EpisodeFormatError(path, lineno, None, "empty line (one episode per line, no blank lines)")
            try:
                data = decoder.decode(text, raw)
            except JSONLineError as exc:
                raise EpisodeFormatError(path, lineno, exc.field, exc.message) from None
            yield episode_from_dict(data, path=path, line=lineno)


def load_jsonl(path: str | os.PathLike[str]) -> list[Episode]:
    """All episodes of a ``.jsonl`` / ``.jsonl.gz`` file (use ``iter_jsonl`` to stream)."""
    return list(iter_jsonl(path))


def dumps_episode(episode: Episode) -> str:
    """The canonical one-line JSON of an episode (sorted keys, ``json.dumps`` defaults)."""
    return json.dumps(episode.to_dict(), sort_keys=True, allow_nan=False)


def write_jsonl(path: str | os.PathLike[str], episodes: Iterable[Episode]) -> int:
    """Write ``episodes`` one per line, atomically; returns the number written.

    The file appears under ``path`` only once complete: an exception part-way leaves no file
    (and no earlier file is clobbered by a partial one).
    """
    return write_lines_atomically(path, (dumps_episode(episode) for episode in episodes))


def write_lines_atomically(path: str | os.PathLike[str], lines: Iterable[str]) -> int:
    """Write ``lines`` (without newlines) to ``path``, gzip if it ends in ``.gz``; returns the count.

    The data goes to a temporary file in the same folder, renamed into place only once
    complete, so a failure part-way leaves neither a partial file nor a clobbered old one.
    """
    path = Path(path)
    count = 0
    with atomic_output(path) as raw:
        # mtime=0 and no file name in the header keep compressed output deterministic.
        sink: IO[bytes] = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if path.suffix == ".gz" else raw
        try:
            for line in lines:
                sink.write(line.encode("utf-8") + b"\n")
                count += 1
        finally:
            if sink is not raw:
                sink.close()
    return count
