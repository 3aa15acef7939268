"""The run folder of ``wpb eval``: checked before any work, and replaced only by a complete run.

A new run is written to a staging folder inside the run folder (the same file system, so
moving a file in is a rename). Only when every file is there does ``publish`` replace the
earlier run: the old ``results.csv`` goes first (from then on the folder no longer looks
complete), then the files of the earlier run that the new one does not write (pictures of
other regimes, reports derived from the old results), then the new files move in, and
``results.csv`` last. Until that moment an interrupted or failed run leaves the earlier
results as they were. Files that ``wpb`` does not write are never touched.

Episode checkpoints (``.partial-<key>/``) live in the run folder too, so that ``--resume``
finds them; the key covers the settings, the content of the episodes and of every file an
agent reads (a trained model), and ``settings`` in the checkpoint folder says what the key
covered, so that a resume that finds only others can say what changed.

One run at a time writes a run folder: ``claim`` holds a lock on ``.wpb-eval.lock`` in it
from before the checkpoints are touched until the run is published, and a second run
refuses, naming the first one's process. The lock is ``flock``'s: the kernel releases it
when its process ends, however it ends, so the lock file a killed run leaves behind blocks
no one. Where ``fcntl`` is missing (Windows), the folder is not locked and the run says so.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..core.atomic_files import default_mode, write_atomic
from ..core.checks import InputError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

RESULTS = "results.csv"
# What wpb eval writes besides results.csv, and what wpb report derives from results.csv:
# a new run makes both of the earlier run's stale.
RUN_FILES = ("run.json", "leaderboard.md", "summary.csv", "recall_at_budget.csv", "utility_per_kb.json")
RUN_FILES += ("confusion_matrix.csv", "f1_vs_budget*.png", "regret_curve*.png")
REPORT_FILES = ("paper_tables.md", "headroom.md", "f1_by_budget.md", "transfer.md")
STAGING_PREFIX = ".incoming-"
CHECKPOINT_PREFIX = ".partial-"
LOCK_FILE = ".wpb-eval.lock"
# In a checkpoint folder: what its key covered (the recorded settings, as JSON). Not named
# *.json: those are the episodes' rows.
CHECKPOINT_SETTINGS = "settings"


def check_folder_path(out: Path, option: str = "--out") -> None:
    """Refuse a folder path that is a file, lies under a file, or cannot be written (before any work)."""
    for part in (out, *out.parents):
        if part.exists():
            if not part.is_dir():
                where = "is a file" if part == out else f"lies under {part}, which is a file"
                raise InputError(f"{option} {out}: {where}; expected a folder")
            if not os.access(part, os.W_OK | os.X_OK):
                raise InputError(f"{option} {out}: {part} is not writable")
            return


def check_no_earlier_run(out: Path, force: bool) -> None:
    """Refuse a run folder that holds an earlier run's ``results.csv``, unless ``force``."""
    results = out / RESULTS
    if results.exists() and not results.is_file():
        raise InputError(f"{results} is not a file; expected the results of an earlier run or nothing")
    if results.exists() and not force:
        raise InputError(
            f"{out} already holds {RESULTS}; pass --force to replace it (kept until the new run is complete)"
        )


# The lock files this process holds: a forked child (a worker of the grid, the report's
# process) closes its copies at once. A flock belongs to the open file, which a fork shares:
# a child that outlived a killed parent would otherwise hold the folder.
_HELD: set[int] = set()


def _close_held() -> None:
    for fd in _HELD:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_held)


@contextlib.contextmanager
def claim(out: Path, where: str = "--out") -> Iterator[None]:
    """Hold the run folder ``out`` (made if missing) while the block runs: an ``InputError``
    naming the folder (as ``where`` gave it: ``--out`` for ``wpb eval``, ``RUN`` for ``wpb
    report``) and the process that holds it, if another does. A folder made here and still
    empty at the end (the run failed before writing anything) is removed again."""
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        yield from _held(out, where)
    finally:
        if made:
            with contextlib.suppress(OSError):  # not empty: it holds what the run wrote (checkpoints)
                out.rmdir()


def _held(out: Path, where: str) -> Iterator[None]:
    if fcntl is None:
        print(f"note: this platform has no fcntl: {out} is not locked against another wpb eval or report "
              "writing it at the same time", file=sys.stderr)
        yield
        return
    path = out / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, default_mode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):  # not "held by another"
                os.close(fd)
                raise
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            who = f"pid {holder}" if holder.isdigit() else "just starting"
            raise InputError(
                f"{where} {out}: another wpb eval or report ({who}) is writing this run folder; wait for it to "
                f"end{', or give another --out' if where == '--out' else ''}"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        # The run that held it may have removed the file between our open and our lock: then
        # ours is a lock on a file no one else sees; lock the one at ``path`` instead.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    _HELD.add(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        # Removed while still locked, so that a run waiting on this file finds it gone and retries.
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                path.unlink()
        _HELD.discard(fd)
        os.close(fd)


def staging_folder(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
    staging.chmod(default_mode(directory=True))  # mkdtemp's 0700 would hide the published run
    return staging


def publish(staging: Path, out: Path) -> None:
    """Move the complete run in ``staging`` into ``out``, replacing the earlier run's files."""
    new = {path.name for path in staging.iterdir()}
    if RESULTS not in new:
        raise ValueError(f"{staging}: no {RESULTS}; a run is published only when complete")
    (out / RESULTS).unlink(missing_ok=True)
    for pattern in RUN_FILES + REPORT_FILES:
        for stale in out.glob(pattern):
            if stale.name not in new and stale.is_file():
                stale.unlink()
    for name in sorted(new - {RESULTS}):
        os.replace(staging / name, out / name)
    os.replace(staging / RESULTS, out / RESULTS)
    staging.rmdir()


def discard(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)


def checkpoint_folder(out: Path, key: str) -> Path:
    return out / f"{CHECKPOINT_PREFIX}{key}"


def other_checkpoints(out: Path, key: str) -> list[Path]:
    """Checkpoint folders of other settings or other episode contents."""
    mine = checkpoint_folder(out, key).name
    return sorted(p for p in out.glob(f"{CHECKPOINT_PREFIX}*") if p.is_dir() and p.name != mine)


def write_checkpoint_settings(folder: Path, recorded: dict[str, Any]) -> None:
    """Record in the checkpoint folder what its key covers (``checkpoint_differences`` reads it)."""
    write_atomic(folder / CHECKPOINT_SETTINGS, json.dumps(recorded, sort_keys=True, default=str))


def checkpoint_differences(folder: Path, recorded: dict[str, Any]) -> str:
    """What differs between the settings the checkpoints in ``folder`` were made with and
    ``recorded``, in words: other episode contents, another model of an agent (naming the
    file that changed), other settings (naming them)."""
    try:
        old = json.loads((folder / CHECKPOINT_SETTINGS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = None
    if not isinstance(old, dict):  # written before checkpoints said what they cover
        return "other settings or other episode contents"
    new = json.loads(json.dumps(recorded, sort_keys=True, default=str))  # as the file holds it
    what = []
    if any(old.get(key) != new.get(key) for key in ("episodes_sha256", "generated_by")):
        what.append("other episode contents")
    old_files, new_files = old.get("agent_files") or {}, new.get("agent_files") or {}
    for label, files in sorted(new_files.items()):
        changed = [path for path, digest in files.items() if (old_files.get(label) or {}).get(path) != digest]
        if changed and label in old_files:
            what.append(f"another model of agent {label!r} ({', '.join(changed)} changed since)")
    covered = ("episodes_sha256", "generated_by", "agent_files")
    settings = sorted(key for key in set(old) | set(new) if key not in covered and old.get(key) != new.get(key))
    if settings:
        what.append(f"other settings ({', '.join(settings)})")
    return "; ".join(what) or "other settings or other episode contents"


def drawn_seed(out: Path, recorded: dict[str, Any]) -> int | None:
    """The seed an interrupted run of the settings ``recorded`` drew (``wpb eval --seed draw
    --resume``): that of the newest checkpoint folder in ``out`` whose settings are ``recorded``
    but for the seed; None if there is none."""
    new = json.loads(json.dumps({k: v for k, v in recorded.items() if k != "seed"}, sort_keys=True, default=str))
    found = []
    for folder in out.glob(f"{CHECKPOINT_PREFIX}*"):
        try:
            old = json.loads((folder / CHECKPOINT_SETTINGS).read_text(encoding="utf-8"))
            when = folder.stat().st_mtime
        except (OSError, ValueError):
            continue
        if not isinstance(old, dict):
            continue
        seed = old.pop("seed", None)
        if old == new and isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0:
            found.append((when, seed))
    return max(found)[1] if found else None


def read_checkpoints(folder: Path, columns: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    """Checkpointed rows by file stem. A checkpoint that was cut short or does not hold rows
    with exactly ``columns`` is left out: its episode runs again."""
    done = {}
    for file in sorted(folder.glob("*.json")):
        try:
            chunk = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(chunk, list) and all(isinstance(r, dict) and r.keys() == set(columns) for r in chunk):
            done[file.stem] = chunk
    return done


def input_digest(path: str | os.PathLike[str]) -> str:
    """The sha256 of what a file holds, or of a folder's files: each one's path inside the
    folder and its sha256, in sorted order (a file renamed, added, removed or changed gives
    another digest). Part of the checkpoint key for the files agents read (trained models)."""
    path = Path(path)
    if not path.is_dir():
        return _file_sha256(path)
    digest = hashlib.sha256()
    files = {p.relative_to(path).as_posix(): p for p in path.rglob("*") if p.is_file()}
    for name in sorted(files):
        digest.update(name.encode("utf-8", "surrogateescape") + b"\0")
        digest.update(_file_sha256(files[name]).encode("ascii") + b"\n")
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def episodes_digest(episodes: Iterable[Any]) -> str:
    """The sha256 of the episodes' canonical JSON: part of the checkpoint key, so that a file
    edited between an interrupt and ``--resume`` never mixes its old rows with new ones."""
    from ..episodes.jsonl import dumps_episode

    digest = hashlib.sha256()
    for episode in episodes:
        digest.update(dumps_episode(episode).encode("utf-8") + b"\n")
    return digest.hexdigest()


