"""The evaluation grid (spec §6.2–6.3): policies × episodes × budgets × tracks, one row each.

A policy enters as a ``PolicySpec``: a label for the tables, a picklable factory that
builds a fresh policy for every run (so no state leaks between episodes or budgets) and the
track it needs. The core never imports ``agents``: the CLI passes factories in.

Work is split by episode: one task runs every policy at every budget and track on one
episode, with the exact oracle computed once per (episode, track) for all budgets. Tasks
run in worker processes when ``jobs > 1``; the rows are sorted afterwards, so the result
does not depend on ``jobs``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .generator import make_config
from .metrics import CONFUSION_NAMES, METRIC_NAMES
from .oracle import episode_oracle
from .policy import POLICY_TRACKS
from .runner import run_episode
from .sources import GeneratedEpisodes
from .tracks import TRACKS, UNPRIVILEGED
from .types import Episode

# Columns of results.csv, in order: the condition, then the paper's metric names, then the rest.
KEY_COLUMNS = ("mode", "steps", "budget_bytes", "track", "policy", "policy_track", "episode_id", "episode_index")
METRIC_COLUMNS = (
    *METRIC_NAMES,  # the paper's metric names, in the paper's order
    "merge_actions",
    *CONFUSION_NAMES,
    "actions",
    "rejected_actions",
    "oracle_f1",  # the hindsight WRITE-only F1 bound of the episode at this budget and track
)
# Columns holding counts (the other metric columns hold floats).
INT_COLUMNS = frozenset(
    {"steps", "budget_bytes", "episode_index", "bytes_used", "write_actions", "expire_actions", "merge_actions"}
    | set(CONFUSION_NAMES)
    | {"actions", "rejected_actions"}
)
ROW_COLUMNS = KEY_COLUMNS + METRIC_COLUMNS


@dataclass(frozen=True)
class PolicySpec:
    """A policy of the grid: ``label`` in tables, ``factory()`` a fresh policy, ``track`` it needs."""

    label: str
    factory: Callable[[], Any]
    track: str = UNPRIVILEGED
    only_own_track: bool = False  # a model trained on one track's byte costs runs on that track only

    def __post_init__(self) -> None:
        if self.track not in POLICY_TRACKS:
            raise ValueError(f"policy {self.label!r}: track must be one of {POLICY_TRACKS}, got {self.track!r}")

    def runs_on(self, track: str) -> bool:
        if self.only_own_track:
            return track == self.track
        return self.track == UNPRIVILEGED or track != UNPRIVILEGED


@dataclass(frozen=True)
class EpisodeRef:
    """One episode of the grid: generated from (regime, length, seed, index), or given."""

    mode: str
    steps: int
    index: int
    seed: int | None = None
    episode: Episode | None = field(default=None, compare=False)

    def load(self) -> Episode:
        if self.episode is not None:
            return self.episode
        return GeneratedEpisodes(make_config(self.mode, length=self.steps), self.seed).episode(self.index)


def generated_refs(regimes: Sequence[str], lengths: Sequence[int], per_condition: int, seed: int) -> list[EpisodeRef]:
    """Episodes 0..per_condition-1 of every (regime, length), generated from ``seed``."""
    for regime in regimes:
        make_config(regime)  # an unknown regime fails here, before any work
    return [
        EpisodeRef(regime, length, i, seed) for regime in regimes for length in lengths for i in range(per_condition)
    ]


def given_refs(episodes: Sequence[Episode], origin: str = "<episodes>") -> list[EpisodeRef]:
    """Refs to episodes read from files; each episode's regime comes from its own data."""
    refs = []
    counters: dict[tuple[str, int], int] = {}
    for position, episode in enumerate(episodes):
        mode = episode.regime
        if mode is None:
            raise ValueError(
                f"{origin}: episode {position} names no regime (labels['mode'] or the steps' metadata['mode'])"
            )
        key = (str(mode), len(episode))
        index = counters.get(key, 0)
        counters[key] = index + 1
        refs.append(EpisodeRef(str(mode), len(episode), index, None, episode))
    return refs


@dataclass(frozen=True)
class GridTask:
    ref: EpisodeRef
    policies: tuple[PolicySpec, ...]
    budgets: tuple[int, ...]
    tracks: tuple[str, ...]


def run_task(task: GridTask) -> list[dict[str, Any]]:
    """Every policy × budget × track on one episode: one row each."""
    episode = task.ref.load()
    rows = []
    for track in task.tracks:
        oracle = episode_oracle(episode, task.budgets, track)
        for budget in task.budgets:
            best = oracle.utility(budget)
            for spec in task.policies:
                if not spec.runs_on(track):
                    continue
                run = run_episode(spec.factory(), episode, budget, track, oracle_utility=best, record_actions=False)
                metrics = run.metrics.as_row()
                row = {
                    "mode": task.ref.mode,
                    "steps": task.ref.steps,
                    "budget_bytes": budget,
                    "track": track,
                    "policy": spec.label,
                    "policy_track": spec.track,
                    "episode_id": episode.episode_id if episode.episode_id is not None else task.ref.index,
                    "episode_index": task.ref.index,
                }
                row.update({name: metrics[name] for name in METRIC_COLUMNS if name in metrics})
                rejected = sum(run.store.rejected_counts.values())
                row["actions"] = sum(run.store.accepted_counts.values()) + rejected
                row["rejected_actions"] = rejected
                row["oracle_f1"] = oracle.f1_bounds[budget].f1
                rows.append(row)
    return rows


def row_key(row: dict[str, Any]) -> tuple:
    return (
        row["mode"],
        row["steps"],
        row["budget_bytes"],
        TRACKS.index(row["track"]),
        row["policy"],
        row["episode_index"],
    )


def skipped(policies: Sequence[PolicySpec], tracks: Sequence[str]) -> list[str]:
    """A note for every (policy, track) pair the grid leaves out."""
    return [
        f"{spec.label} ({spec.track} track) is not run on the {track} track"
        for track in tracks
        for spec in policies
        if not spec.runs_on(track)
    ]


def run_grid(
    refs: Sequence[EpisodeRef],
    policies: Sequence[PolicySpec],
    budgets: Sequence[int],
    tracks: Sequence[str],
    *,
    jobs: int = 1,
    progress: Callable[[Iterator[list[dict[str, Any]]], int], Iterator[list[dict[str, Any]]]] | None = None,
    on_episode_done: Callable[[EpisodeRef, list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """All rows of the grid, sorted by condition, policy and episode (identical for any ``jobs``).

    ``on_episode_done(ref, rows)`` is called as each episode's rows arrive (in ``refs`` order),
    e.g. to checkpoint them for a resumable run.
    """
    labels = [p.label for p in policies]
    if len(set(labels)) != len(labels):
        raise ValueError(f"policy labels must be unique, got {labels}")
    for track in tracks:
        if track not in TRACKS:
            raise ValueError(f"unknown track {track!r}; expected some of {TRACKS}")
    if any(isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in budgets):
        raise ValueError(f"budgets must be non-negative ints, got {list(budgets)}")
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    tasks = [GridTask(ref, tuple(policies), tuple(budgets), tuple(tracks)) for ref in refs]
    if jobs == 1:
        results: Iterator[list[dict[str, Any]]] = map(run_task, tasks)
        rows = _collect(results, refs, progress, on_episode_done)
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = pool.map(run_task, tasks, chunksize=max(1, len(tasks) // (4 * jobs)))
            rows = _collect(results, refs, progress, on_episode_done)
    rows.sort(key=row_key)
    return rows


def _collect(results, refs, progress, on_episode_done) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    chunks = progress(results, len(refs)) if progress is not None else results
    for ref, chunk in zip(refs, chunks, strict=False):  # map keeps the order of refs
        if on_episode_done is not None:
            on_episode_done(ref, chunk)
        rows.extend(chunk)
    return rows
