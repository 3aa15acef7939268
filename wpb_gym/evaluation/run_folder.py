"""The run folder of ``wpb eval``: checked before any work, and replaced only by a complete run.

A new run is written to a staging folder inside the run folder (the same file system, so
moving a file in is a rename). Only when every file is there does ``publish`` replace the
earlier run: the old ``results.csv`` goes first (from then on the folder no longer looks
complete), then the files of the earlier run that the new one does not write (pictures of
other regimes, reports derived from the old results), then the new files move in, and
``results.csv`` last. Until that moment an interrupted or failed run leaves the earlier
results as they were. Files that ``wpb`` does not write are never touched.

Episode checkpoints (``.partial-<key>/``) live in the run folder too, so that ``--resume``
finds them; the key covers the settings and the content of the episodes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.atomic_files import default_mode
from ..core.checks import InputError

RESULTS = "results.csv"
# What wpb eval writes besides results.csv, and what wpb report derives from results.csv:
# a new run makes both of the earlier run's stale.
RUN_FILES = ("run.json", "leaderboard.md", "summary.csv", "recall_at_budget.csv", "utility_per_kb.json")
RUN_FILES += ("confusion_matrix.csv", "f1_vs_budget*.png", "regret_curve*.png")
REPORT_FILES = ("paper_tables.md", "headroom.md", "f1_by_budget.md", "transfer.md")
STAGING_PREFIX = ".incoming-"
CHECKPOINT_PREFIX = ".partial-"


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


def episodes_digest(episodes: Iterable[Any]) -> str:
    """The sha256 of the episodes' canonical JSON: part of the checkpoint key, so that a file
    edited between an interrupt and ``--resume`` never mixes its old rows with new ones."""
    from ..episodes.jsonl import dumps_episode

    digest = hashlib.sha256()
    for episode in episodes:
        digest.update(dumps_episode(episode).encode("utf-8") + b"\n")
    return digest.hexdigest()


# Hex digits of an episode's hash: 64 bits, so two different episodes of a benchmark never
# share one, and short enough to read in a table or an error message.
EPISODE_HASH_DIGITS = 16


def episode_hash(episode: Any) -> str:
    """What the episode is, as a short stable name: the first 16 hex digits of the sha256 of its
    canonical JSON (its steps and labels, as ``episodes_digest`` reads them). The same episode
    has the same hash in every process, generated or read back from a file; a change to one step
    or label gives another. Every result row carries it (``episode_hash``), so that paired
    statistics match two runs' rows by the episode they played, not by its place in the run."""
    from ..episodes.jsonl import dumps_episode

    return hashlib.sha256(dumps_episode(episode).encode("utf-8")).hexdigest()[:EPISODE_HASH_DIGITS]
