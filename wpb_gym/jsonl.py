"""Episodes as JSONL (spec §6.1): one episode per line, ``{"labels": {...}, "steps": [...]}``.

Reading validates every line and fails with an ``EpisodeFormatError`` that names the file,
the line and the field. Files ending in ``.gz`` are gzip-compressed. Writing is
deterministic (sorted keys, ``json.dumps`` defaults, gzip without timestamp) and atomic (a
temporary file renamed into place), so ``write_jsonl(load_jsonl(f))`` reproduces a file
written this way — the paper's released files included — byte for byte.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from .types import Episode, Step

_STEP_KEYS = {"t", "observation", "metadata"}
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
    steps = []
    for i, raw in enumerate(raw_steps):
        where = f"steps[{i}]"
        if not isinstance(raw, dict):
            raise fail(where, f"expected an object, got {type(raw).__name__}")
        unknown = sorted(set(raw) - _STEP_KEYS)
        if unknown:
            raise fail(f"{where}.{unknown[0]}", f"unknown key (a step has only {sorted(_STEP_KEYS)})")
        if "t" not in raw:
            raise fail(f"{where}.t", "missing")
        if not _is_int(raw["t"]):
            raise fail(f"{where}.t", f"expected an integer, got {raw['t']!r}")
        if raw["t"] != i:
            raise fail(f"{where}.t", f"expected {i} (timesteps must run 0..T-1 in order), got {raw['t']}")
        if "observation" not in raw:
            raise fail(f"{where}.observation", "missing")
        metadata = raw.get("metadata", {})
        if not isinstance(metadata, dict):
            raise fail(f"{where}.metadata", f"expected an object, got {type(metadata).__name__}")
        steps.append(Step(t=i, observation=raw["observation"], metadata=metadata))
    T = len(steps)

    if "labels" not in data:
        raise fail("labels", "missing")
    labels = data["labels"]
    if not isinstance(labels, dict):
        raise fail("labels", f"expected an object, got {type(labels).__name__}")
    labels = dict(labels)

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
                raise fail(f"labels.{key}[{j}]", f"expected an integer timestep, got {t!r}")
            if not 0 <= t < T:
                raise fail(f"labels.{key}[{j}]", f"timestep {t} is outside the episode (0..{T - 1})")
            if t in seen:
                raise fail(f"labels.{key}[{j}]", f"timestep {t} is listed twice")
            seen.add(t)

    for key in ("total_drift_events", "deprecated_apis"):
        if key in labels and not (_is_int(labels[key]) and labels[key] >= 0):
            raise fail(f"labels.{key}", f"expected a non-negative integer, got {labels[key]!r}")

    if "utility_by_step" not in labels:
        raise fail("labels.utility_by_step", "missing (the hidden utility of every timestep)")
    raw_util = labels["utility_by_step"]
    if not isinstance(raw_util, dict):
        raise fail("labels.utility_by_step", f"expected an object keyed by timestep, got {type(raw_util).__name__}")
    utility: dict[int, float | int] = {}
    for key, value in raw_util.items():
        field = f"labels.utility_by_step[{key!r}]"
        try:
            t = int(key)
        except (TypeError, ValueError):
            raise fail(field, "key is not an integer timestep") from None
        if str(t) != str(key):
            raise fail(field, "key is not a canonical integer timestep")
        if not 0 <= t < T:
            raise fail(field, f"timestep {t} is outside the episode (0..{T - 1})")
        if t in utility:
            raise fail(field, f"timestep {t} is given twice")
        if not _is_number(value):
            raise fail(field, f"expected a number, got {value!r}")
        if not math.isfinite(value):
            raise fail(field, f"utility must be finite, got {value!r}")
        if value < 0:
            raise fail(field, f"utility must be non-negative, got {value!r}")
        utility[t] = value
    if len(utility) != T:
        missing = [t for t in range(T) if t not in utility]
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        raise fail("labels.utility_by_step", f"no utility for {len(missing)} timestep(s): {shown}")
    labels["utility_by_step"] = utility
    return Episode(steps=steps, labels=labels)


def _first_non_finite(value: Any, where: str) -> str | None:
    """Dotted path of the first NaN/Infinity inside decoded JSON (for the error's field)."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    if isinstance(value, dict):
        items = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for child_where, child in items:
        found = _first_non_finite(child, child_where)
        if found is not None:
            return found
    return None


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Episode]:
    """Stream the episodes of a ``.jsonl`` or ``.jsonl.gz`` file, validating each line."""
    path = Path(path)
    with open_text(path, "r") as fh:
        for lineno, text in enumerate(fh, start=1):
            if not text.strip():
                raise EpisodeFormatError(path, lineno, None, "empty line (one episode per line, no blank lines)")
            # NaN/Infinity are not JSON; Python's json reads them, so note them and refuse the
            # line after validation (which names the field when a utility is the culprit).
            constants: list[str] = []
            try:
                data = json.loads(text, parse_constant=lambda name: constants.append(name) or float(name))
            except json.JSONDecodeError as exc:
                raise EpisodeFormatError(
                    path, lineno, None, f"malformed JSON: {exc.msg} at column {exc.colno}"
                ) from None
            episode = episode_from_dict(data, path=path, line=lineno)
            if constants:
                where = _first_non_finite(data, "")
                raise EpisodeFormatError(
                    path, lineno, where, f"non-standard JSON constant {constants[0]} (not allowed)"
                )
            yield episode


def load_jsonl(path: str | os.PathLike[str]) -> list[Episode]:
    """All episodes of a ``.jsonl`` / ``.jsonl.gz`` file (use ``iter_jsonl`` to stream)."""
    return list(iter_jsonl(path))


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def default_mode(directory: bool = False) -> int:
    """The mode an ordinary new file or folder gets under the umask.

    ``mkstemp``/``mkdtemp`` create 0600/0700, which would hide a released set from other users.
    """
    return (0o777 if directory else 0o666) & ~_current_umask()


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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    count = 0
    try:
        with os.fdopen(fd, "wb") as raw:
            if path.suffix == ".gz":
                # mtime=0 and no file name in the header keep compressed output deterministic.
                sink: IO[bytes] = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
            else:
                sink = raw
            try:
                for line in lines:
                    sink.write(line.encode("utf-8") + b"\n")
                    count += 1
            finally:
                if sink is not raw:
                    sink.close()
        os.chmod(tmp_name, default_mode())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return count
