"""Writing a run folder's files, with the slow part of the report done while the grid runs.

The summary's bootstrap intervals and the figures take about as long as a fifth of the paper's
grid. ``RunWriter`` hands each (regime, length)'s summary and figures to a worker process as
soon as the last of its episodes is in, so that on a machine with a core to spare the report is
mostly done when the grid ends; what is left (the last condition, the cheap tables) is written
then. A condition's
part is used only if its rows are exactly those of the final run (a resumed run adds
checkpointed rows); otherwise it is computed again.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from ..child_processes import end_with_parent
from ..grid import row_key
from ..run_folder import RESULTS

Condition = tuple[Any, int]  # (mode, steps)


def _warm_up(parent: int) -> None:
    end_with_parent(parent)
    import matplotlib.figure  # noqa: F401  (imported while the grid runs, not after it)
    from scipy import stats  # noqa: F401


def run_tables(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The run's small tables, by file name (they need every row, and take little time)."""
    from .report import confusion_matrix_csv, leaderboard, recall_at_budget_csv, utility_per_kb_json

    return {
        "leaderboard.md": leaderboard(rows),
        "recall_at_budget.csv": recall_at_budget_csv(rows),
        "utility_per_kb.json": utility_per_kb_json(rows),
        "confusion_matrix.csv": confusion_matrix_csv(rows),
    }


class RunWriter:
    """The report of one run: ``add`` each episode's rows as it is done, then ``write``."""

    def __init__(self, episodes: Iterable[Condition]) -> None:
        self._expected = Counter(episodes)  # episodes per condition
        self._done: Counter[Condition] = Counter()
        self._rows: dict[Condition, list[dict[str, Any]]] = {}
        # Per condition: the rows its part was computed from, and the part's futures.
        self._parts: dict[Condition, tuple[list[dict[str, Any]], dict[str, Future]]] = {}
        # On Linux fork, so that the worker starts with everything imported; elsewhere (macOS
        # forks unsafely, Windows cannot) the platform's default.
        context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else None)
        # One worker: on two cores a second one competes with the grid (measured no faster).
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_warm_up, initargs=(os.getpid(),))
        # Start the worker now, before the grid starts threads of its own (a fork copies only the
        # forking thread: a lock another thread held would stay held in the child).
        self._pool.submit(int)

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def add(self, condition: Condition, rows: list[dict[str, Any]]) -> None:
        """One episode of ``condition`` is done, with these rows."""
        self._rows.setdefault(condition, []).extend(rows)
        self._done[condition] += 1
        if self._done[condition] == self._expected[condition]:
            self._submit(condition, sorted(self._rows.pop(condition), key=row_key))

    def _submit(self, condition: Condition, rows: list[dict[str, Any]]) -> None:
        from .plots import PICTURES, condition_picture
        from .report import summary_body

        futures = {kind: self._pool.submit(condition_picture, rows, *condition, kind) for kind in PICTURES}
        futures["summary"] = self._pool.submit(summary_body, rows)
        self._parts[condition] = (rows, futures)

    def write(self, folder: Path, rows: list[dict[str, Any]], run: dict[str, Any]) -> list[Path]:
        """Every file of the run into ``folder`` (``results.csv`` last); returns the pictures."""
        from .plots import PICTURES, picture_name
        from ...core.atomic_files import write_atomic, write_atomic_bytes
        from .report import SUMMARY_HEADER, ordering, results_csv

        by_condition: dict[Condition, list[dict[str, Any]]] = {}
        for row in rows:
            by_condition.setdefault((row["mode"], row["steps"]), []).append(row)
        for condition, chosen in by_condition.items():
            prepared = self._parts.get(condition)
            if prepared is None or prepared[0] != chosen:
                self._submit(condition, chosen)
        # In the worker too: it has the statistics imported, and this process has nothing else to do.
        tables = self._pool.submit(run_tables, rows)
        write_atomic(folder / "run.json", json.dumps(run, indent=2, sort_keys=True) + "\n")
        results = results_csv(rows, run)
        for name, text in tables.result().items():
            write_atomic(folder / name, text)
        order = sorted(by_condition, key=ordering)
        parts = {condition: self._parts[condition][1] for condition in order}
        summary = "".join(parts[condition]["summary"].result() for condition in order)
        write_atomic(folder / "summary.csv", SUMMARY_HEADER + summary)
        pictures = [
            write_atomic_bytes(folder / picture_name(kind, *condition, len(order) > 1), parts[condition][kind].result())
            for condition in order
            for kind in PICTURES
        ]
        write_atomic(folder / RESULTS, results)
        return pictures


def write_run(folder: Path, rows: list[dict[str, Any]], run: dict[str, Any]) -> list[Path]:
    """Every file of a finished run into ``folder`` (``results.csv`` last); returns the pictures."""
    with RunWriter(()) as writer:
        return writer.write(folder, rows, run)
