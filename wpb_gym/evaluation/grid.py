"""The evaluation grid (spec §6.2–6.3): policies × episodes × budgets × tracks, one row each.

A policy enters as a ``PolicySpec``: a label for the tables, a picklable factory that
builds a fresh policy for every run (so no state leaks between episodes or budgets) and the
track it needs. The core never imports ``agents``: the CLI passes factories in.

Work is split by episode: one task runs every policy at every budget and track on one
episode, in lockstep (``wpb_gym.evaluation.playing.play``), with the exact oracle computed once per
(episode, track) for all budgets, and for an episode with queries the hindsight query bound once
per budget (and per track only where the tracks' byte costs differ). Tasks run in worker processes when ``jobs > 1`` (in isolated
mode, ``jobs`` counts the policies' processes: ``isolated_workers``); the rows are sorted
afterwards, so the result does not depend on ``jobs``.

``isolate=True`` runs every policy in a process of its own (``wpb_gym.evaluation.isolated.isolation``), which
is what a leaderboard submission must use; in-process evaluation is the fast default for
trusted code. Either way ``limits`` caps each policy's actions and time per timestep, and a
run stopped by a limit keeps its row, with the error in the ``error`` column.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np
from threadpoolctl import threadpool_limits

from ..core.csv_cells import FORMULA_RULE, formula_start
from ..core.kind_budgets import KindShares
from ..core.store_limits import StoreLimits
from ..core.policy import POLICY_TRACKS
from ..core.tracks import TRACKS, UNPRIVILEGED, track_costs
from ..core.types import Episode
from ..episodes.generators.queries import QUERY_REGIMES
from ..episodes.generators.regimes import make_config
from ..episodes.identity import episode_hash, refuse_repeated_episodes
from ..episodes.sources import GeneratedEpisodes
from ..scoring.metrics import CONFUSION_NAMES, METRIC_NAMES
from ..scoring.limited_bounds import episode_oracle_within
from ..scoring.oracle import episode_oracle
from ..scoring.queries import has_queries
from .child_processes import end_with_parent
from .isolated.processes import fork_server_started
from .isolated.sandbox import AUTO, Sandbox, resolve_sandbox
from .playing import PlayedRun, Seat, end_episode, play, score
from .ray_backend import BACKENDS, ray_map
from .referee import DEFAULT_LIMITS, RunLimits

if TYPE_CHECKING:
    from ..scoring.query_bound import QueryBound

# What the episode is: the hash of its content (episodes.identity.episode_hash). episode_index is only
# its place among the run's episodes of a regime and length; the hash is what paired statistics
# match two runs' rows on. Results written before the column existed read it as "".
EPISODE_HASH = "episode_hash"
# Columns of results.csv, in order: the condition, then the paper's metric names, then the rest.
KEY_COLUMNS = (
    "mode", "steps", "budget_bytes", "track", "policy", "policy_track", "episode_id", "episode_index", EPISODE_HASH
)
METRIC_COLUMNS = (
    *METRIC_NAMES,  # the paper's metric names, in the paper's order
    "merge_actions",
    *CONFUSION_NAMES,
    "actions",
    "rejected_actions",
    "oracle_f1",  # the hindsight WRITE-only F1 bound of the episode at this budget and track
)
# The query tier's headline score and its hindsight bound: None in memory and empty in
# results.csv for an episode without queries (results written before the columns existed read
# them as NaN, as they read an empty cell).
QUERY_COLUMNS = (
    "query_accuracy",  # the share of the episode's queries memory answered right
    "query_bound",  # no policy answers more at this budget and track (QueryBound.upper)
    "query_feasible",  # what a schedule found with hindsight answers (QueryBound.feasible)
)
# The bound's solver gets no time beyond its linear relaxation and a rounding of it: seconds
# per episode and budget (wpb_gym.scoring.query_bound).
QUERY_BOUND_TIME_LIMIT = 0.0
# Empty, or why the run's policy was stopped (a limit) or its memory view diverged. Results
# written before the column existed read as "".
ERROR_COLUMN = "error"
# Hierarchical budgets: the limit of each content kind that has one at this budget, in bytes
# (``endpoint=6144,doc=3072``), "" for none. Results written before the column existed read "".
KIND_BUDGETS_COLUMN = "kind_budgets"
# The write-time budget (``total=40,per_write=1,per_kb=0``), "" for none; likewise read as "".
WRITE_TIME_COLUMN = "write_time"
# Compressed writes allowed (``credit=0.5``: what a compressed critical step is worth), "" if not.
COMPRESSION_COLUMN = "compression"
LIMIT_COLUMNS = (KIND_BUDGETS_COLUMN, WRITE_TIME_COLUMN, COMPRESSION_COLUMN)
# Columns holding counts (the other metric columns hold floats).
INT_COLUMNS = frozenset(
    {"steps", "budget_bytes", "episode_index", "bytes_used", "write_actions", "expire_actions", "merge_actions"}
    | set(CONFUSION_NAMES)
    | {"actions", "rejected_actions"}
)
ROW_COLUMNS = KEY_COLUMNS + METRIC_COLUMNS + QUERY_COLUMNS + (ERROR_COLUMN, *LIMIT_COLUMNS)


@dataclass(frozen=True)
class PolicySpec:
    """A policy of the grid: ``label`` in tables, ``factory()`` a fresh policy, ``track`` it needs."""

    label: str
    factory: Callable[[], Any]
    track: str = UNPRIVILEGED
    only_own_track: bool = False  # a model trained on one track's byte costs runs on that track only
    # The limits beside the budget a model was trained under (its observation has their features):
    # a grid without them is refused (what its process says of it, when isolated).
    trained_limits: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.track not in POLICY_TRACKS:
            raise ValueError(f"policy {self.label!r}: track must be one of {POLICY_TRACKS}, got {self.track!r}")
        _refuse_formula(f"policy {self.label!r}: its label", str(self.label))

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
    for regime in regimes:  # an unknown regime, or a length it cannot have, fails here before any work
        for length in lengths:
            if regime in QUERY_REGIMES:
                _check_query_length(regime, length)
            make_config(regime, length=length)
    return [
        EpisodeRef(regime, length, i, seed) for regime in regimes for length in lengths for i in range(per_condition)
    ]


def _check_query_length(regime: str, length: int) -> None:
    tier = make_config(regime)
    shortest = tier.endpoints + 2
    if length < shortest:
        raise ValueError(
            f"regime {regime!r} needs a length of at least {shortest}, got {length}: its episodes open with a "
            f"warm-up that shows each of its {tier.endpoints} endpoints once, then at least one change and the "
            f"final checkpoint (the tier's own length is {tier.length})"
        )


def given_refs(
    episodes: Sequence[Episode], origin: str = "<episodes>", places: Sequence[str] | None = None
) -> list[EpisodeRef]:
    """Refs to episodes read from files; each episode's regime comes from its own data.

    The same episode (by content: ``episode_hash``) given twice is refused, naming both
    ``places`` (where each episode was read, ``FILE:LINE``; by default its position): it would
    count twice in every mean and interval, and pair with itself in a comparison.
    """
    refuse_repeated_episodes(episodes, origin, places)
    refs = []
    counters: dict[tuple[str, int], int] = {}
    for position, episode in enumerate(episodes):
        mode = episode.regime
        if mode is None:
            raise ValueError(
                f"{origin}: episode {position} names no regime (labels['mode'] or the steps' metadata['mode'])"
            )
        # Read from a file, both were checked there; an episode made in Python is checked here.
        _refuse_formula(f"{origin}: episode {position}: its regime (labels['mode'])", str(mode))
        if isinstance(episode.episode_id, str):
            _refuse_formula(f"{origin}: episode {position}: its labels['episode_id']", episode.episode_id)
        key = (str(mode), len(episode))
        index = counters.get(key, 0)
        counters[key] = index + 1
        refs.append(EpisodeRef(str(mode), len(episode), index, None, episode))
    return refs


def _refuse_formula(what: str, text: str) -> None:
    """A ``ValueError`` if ``text``, which results.csv holds as it is, would run as a spreadsheet formula."""
    formula = formula_start(text)
    if formula is not None:
        raise ValueError(f"{what}: expected {FORMULA_RULE}; got {text!r}, which starts with {formula}")


@dataclass(frozen=True)
class GridTask:
    ref: EpisodeRef
    policies: tuple[PolicySpec, ...]
    budgets: tuple[int, ...]
    tracks: tuple[str, ...]
    limits: RunLimits = DEFAULT_LIMITS
    isolate: bool = False
    sandbox: Sandbox | None = None  # isolated: the policies' sandbox (resolved), or none
    store_limits: StoreLimits = StoreLimits()  # kind budgets, write time or compression, beside each budget

    def seat(self, i: int, track: str, budget: int) -> Seat:
        spec = self.policies[i]
        limits = self.store_limits
        return Seat.within(spec.factory(), budget, track, i, spec.label, self.store_limits)


def run_task(task: GridTask) -> list[dict[str, Any]]:
    """Every policy × budget × track on one episode: one row each (in this process)."""
    episode = task.ref.load()
    plan = _plan(task)
    seats = [task.seat(i, track, budget) for i, track, budget in plan]
    runs = play(episode, seats, limits=task.limits)
    results, rows = _score(task, episode, plan, runs)
    for run, result in zip(runs, results, strict=True):
        end_episode(run, result)
    return rows


def run_isolated_tasks(tasks: Sequence[GridTask]) -> list[list[dict[str, Any]]]:
    """``run_task`` for several episodes at once, every policy in a process of its own: their
    runs advance in lockstep, one message per policy and timestep for all of them."""
    pool = _isolated_pool(tasks[0].policies, tasks[0].limits, tasks[0].sandbox)
    episodes = [task.ref.load() for task in tasks]
    plans = [_plan(task) for task in tasks]
    played = pool.play_many(list(zip(episodes, plans, strict=True)), stores=False,  # rows need only metrics
                            limits=tasks[0].store_limits)
    out, all_runs, all_results = [], [], []
    for task, episode, plan, runs in zip(tasks, episodes, plans, played, strict=True):
        results, rows = _score(task, episode, plan, runs)
        all_runs += runs
        all_results += results
        out.append(rows)
    pool.end(all_runs, all_results)
    return out


def _score(task: GridTask, episode: Episode, plan: list[tuple[int, str, int]], runs: list[PlayedRun]):
    """The results of an episode's runs and their rows (the exact oracle once per track, the
    query bound once per budget and distinct byte costs, the episode's hash once: about 0.2 s
    for an episode of 7,000 steps, whose play takes far longer)."""
    oracles = {track: episode_oracle(episode, task.budgets, track) if not task.store_limits
               else episode_oracle_within(episode, task.budgets, track, task.store_limits) for track in task.tracks}
    results = [score(run, episode, oracles[run.seat.track].utility(run.seat.budget)) for run in runs]
    bounds = query_bounds(episode, sorted({(track, budget) for _, track, budget in plan}), task.store_limits.kinds)
    digest = episode_hash(episode)
    rows = [
        _row(task, episode, digest, task.policies[i], run, result, oracles, bounds)
        for (i, _, _), run, result in zip(plan, runs, results, strict=True)
    ]
    return results, rows


def query_bounds(episode: Episode, conditions: Sequence[tuple[str, int]], kinds: KindShares | None = None
                 ) -> dict[tuple[str, int], QueryBound]:
    """The hindsight query bound of ``episode`` at every ``(track, budget)`` (none without queries).

    With hierarchical budgets (``kinds``) the bound is solved at the least of the total and the
    endpoint limit: the reader answers from endpoint snapshots only, so no policy holds more of
    them than that limit, and nothing else it holds answers a query.

    The bound depends on the track only through its byte costs: a track whose costs equal an
    earlier one's shares its bounds (the query tier's steps have no priority hint, so both
    tracks cost the same).
    """
    if not has_queries(episode):
        return {}
    from ..scoring.query_bound import query_bound  # scipy.optimize: imported for the query tier only

    bounds: dict[tuple[str, int], QueryBound] = {}
    solved: list[tuple[Any, dict[int, QueryBound]]] = []  # (costs, bounds by budget) per distinct costs
    for track, budget in conditions:
        costs = track_costs(episode, track)
        by_budget = next((found for seen, found in solved if np.array_equal(seen, costs)), None)
        if by_budget is None:
            by_budget = {}
            solved.append((costs, by_budget))
        if budget not in by_budget:
            by_budget[budget] = query_bound(episode, _endpoint_room(budget, kinds), track,
                                            time_limit=QUERY_BOUND_TIME_LIMIT)
        bounds[track, budget] = by_budget[budget]
    return bounds


def _endpoint_room(budget: int, kinds: KindShares | None) -> int:
    limit = kinds.resolve(budget).limit("endpoint") if kinds is not None else None
    return budget if limit is None else min(budget, limit)


def _plan(task: GridTask) -> list[tuple[int, str, int]]:
    return [
        (i, track, budget)
        for track in task.tracks
        for i, spec in enumerate(task.policies)
        if spec.runs_on(track)
        for budget in task.budgets
    ]


def _row(
    task: GridTask,
    episode: Episode,
    digest: str,
    spec: PolicySpec,
    run: PlayedRun,
    result: Any,
    oracles: dict,
    bounds: dict,
) -> dict:
    track, budget = run.seat.track, run.seat.budget
    metrics = result.metrics.as_row()
    row = {
        "mode": task.ref.mode,
        "steps": task.ref.steps,
        "budget_bytes": budget,
        "track": track,
        "policy": spec.label,
        "policy_track": spec.track,
        "episode_id": episode.episode_id if episode.episode_id is not None else task.ref.index,
        "episode_index": task.ref.index,
        EPISODE_HASH: digest,
    }
    row.update({name: metrics[name] for name in METRIC_COLUMNS if name in metrics})
    rejected = sum(run.store.rejected_counts.values())
    row["actions"] = sum(run.store.accepted_counts.values()) + rejected
    row["rejected_actions"] = rejected
    row["oracle_f1"] = oracles[track].f1_bounds[budget].f1
    row.update(dict.fromkeys(QUERY_COLUMNS))
    if result.queries is not None:
        bound = bounds[track, budget]
        row.update(query_accuracy=result.queries.accuracy, query_bound=bound.upper, query_feasible=bound.feasible)
    problems = []
    if run.error is not None:
        problems.append(f"stopped: {run.error}")
    if run.diverged_at is not None:
        problems.append(f"memory view diverged from the evaluator's at t={run.diverged_at}")
    row["error"] = "; ".join(problems)
    row[KIND_BUDGETS_COLUMN] = run.seat.kinds.text() if run.seat.kinds else ""
    row[WRITE_TIME_COLUMN] = run.seat.write_time.text() if run.seat.write_time else ""
    row[COMPRESSION_COLUMN] = run.seat.compression.text() if run.seat.compression else ""
    return row


# Episodes played at once in isolated evaluation. More means fewer messages, but every policy
# process then steps more runs in lockstep, each timestep touching all of their memories: on the
# paper grid (one worker) 4 was fastest (2, 4, 5, 8, 10 episodes: 6.0-6.5, 5.5-5.6, 5.5-6.2,
# 5.7-6.9, 6.9-8.8 s; benchmarks/eval_grid.py --isolate).
ISOLATED_BATCH = 4
# One set of policy processes per process of the grid, kept from one episode to the next, and
# the process that started them: a forked child inherits the dict, not the right to stop them.
_POOLS: dict[bytes, Any] = {}
_POOLS_PID = os.getpid()
_POOLS_STARTED = False  # whether this process ever started policy processes (and a fork server)


def _own_pools() -> dict[bytes, Any]:
    global _POOLS_PID, _POOLS_STARTED
    if _POOLS_PID != os.getpid():  # forked: the parent's pools are the parent's to close
        _POOLS.clear()
        _POOLS_PID, _POOLS_STARTED = os.getpid(), False
    return _POOLS


def _isolated_pool(policies: Sequence[PolicySpec], limits: RunLimits, sandbox: Sandbox | None) -> Any:
    import pickle

    from .isolated.isolation import IsolatedPolicies

    # A model's track is its file's, which only its own process reads (never the oracle's).
    described = [(p.label, p.factory, None if p.only_own_track else p.track) for p in policies]
    global _POOLS_STARTED
    key = pickle.dumps((described, limits, sandbox))
    pools = _own_pools()
    pool = pools.get(key)
    if pool is None:
        close_isolated_pools()
        pool = pools[key] = IsolatedPolicies(described, limits, sandbox)
        _POOLS_STARTED = True
    return pool


def isolated_info(
    policies: Sequence[PolicySpec], limits: RunLimits = DEFAULT_LIMITS, sandbox: Sandbox | None | str = AUTO
) -> list[dict[str, Any]]:
    """What each policy declares (``name``, ``track``, ``needs_stream``), asked of it in its own
    process (in its sandbox: ``sandbox`` as for ``run_grid``); the processes are kept for a
    ``run_grid`` of the same policies, limits and sandbox in this process."""
    pool = _isolated_pool(policies, limits, resolve_sandbox(sandbox))
    return [pool.info(i) for i in range(len(policies))]


def close_isolated_pools() -> None:
    """Stop the policy processes this process started for isolated grids."""
    pools = _own_pools()
    while pools:
        pools.popitem()[1].close()


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
    isolate: bool = False,
    limits: RunLimits = DEFAULT_LIMITS,
    backend: str = "processes",
    address: str | None = None,
    sandbox: Sandbox | None | str = AUTO,
    store_limits: StoreLimits | None = None,
) -> list[dict[str, Any]]:
    """All rows of the grid, sorted by condition, policy and episode (identical for any ``jobs``,
    either ``isolate``, any ``sandbox`` and either ``backend``).

    ``on_episode_done(ref, rows)`` is called as each episode's rows arrive (in ``refs`` order),
    e.g. to checkpoint them for a resumable run. ``isolate`` runs each policy in its own
    process (see the module docstring), in a sandbox (``wpb_gym.evaluation.isolated.sandbox``)
    by default wherever the platform allows one: ``sandbox=None`` for none, a ``Sandbox`` to
    require one (with its limits); ``limits`` bounds each policy per timestep.
    ``backend="ray"`` runs the tasks as Ray tasks (``ray_backend``: a local Ray of ``jobs`` CPUs,
    or the cluster at ``address``). ``store_limits``: kind budgets (each content kind's limit resolved
    at every budget) or a write-time budget (``wpb_gym.core.store_limits``); the bounds respect
    them too.
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
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "ray" and isolate:
        raise ValueError("isolated evaluation runs on the process pool (backend='processes'), not on Ray")
    if address is not None and backend != "ray":
        raise ValueError("address names a Ray cluster: it needs backend='ray'")
    walls = resolve_sandbox(sandbox) if isolate else None
    tasks = [GridTask(ref, tuple(policies), tuple(budgets), tuple(tracks), limits, isolate, walls,
                      store_limits or StoreLimits()) for ref in refs]
    # Isolated: episodes go in batches, each batch's runs in lockstep (fewer messages).
    batches = [tasks[i : i + ISOLATED_BATCH] for i in range(0, len(tasks), ISOLATED_BATCH)]
    # Isolated, a process per policy and track it plays.
    processes = sum(spec.runs_on(track) for spec in policies for track in tracks)
    workers = isolated_workers(jobs, processes) if isolate else jobs
    try:
        if backend == "ray":
            rows = _collect(ray_map(run_task, tasks, jobs=jobs, address=address), refs, progress, on_episode_done)
        elif workers == 1:
            if isolate:
                results: Iterator[list[dict[str, Any]]] = chain.from_iterable(map(run_isolated_tasks, batches))
            else:
                results = map(run_task, tasks)
            rows = _collect(results, refs, progress, on_episode_done)
        else:
            context = None
            if isolate and (_POOLS_STARTED or fork_server_started()):
                # The workers start their own policy processes. This process has started some
                # (isolated_info), or a sandbox to see that the platform allows one, and with
                # them a fork server that a forked worker can neither use nor replace: such
                # workers are spawned instead (about a second more).
                close_isolated_pools()
                context = multiprocessing.get_context("spawn")
            # Workers end with this process, even when it is killed (SIGKILL leaves no chance to
            # shut the pool down); their policy processes end with them.
            with ProcessPoolExecutor(
                max_workers=workers, initializer=start_worker, initargs=(os.getpid(), blas_threads(workers)),
                mp_context=context
            ) as pool:
                if isolate:
                    results = chain.from_iterable(pool.map(run_isolated_tasks, batches))
                else:
                    results = pool.map(run_task, tasks, chunksize=max(1, len(tasks) // (4 * jobs)))
                rows = _collect(results, refs, progress, on_episode_done)
    finally:
        close_isolated_pools()
    rows.sort(key=row_key)
    return rows


def blas_threads(workers: int) -> int:
    """The BLAS threads each of ``workers`` processes gets: its share of the usable cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // max(workers, 1))


def start_worker(parent: int, threads: int) -> None:
    """A grid worker's start: it ends with its parent, and its BLAS and OpenMP pools keep to
    ``threads``. Left at one thread per core each, N workers on N cores contend: ``value_keeper``
    (a NumPy network valuing ~200 held endpoints per decision) played 3.5x slower with two
    workers on two cores (``benchmarks/value_keeper.py``, two at once)."""
    end_with_parent(parent)
    threadpool_limits(threads)


def isolated_workers(jobs: int, policies: int) -> int:
    """Worker processes of an isolated grid of ``jobs`` jobs: each drives a process per policy
    and track (``policies`` of them), and those processes are what keeps the cores busy (a
    worker waits while its policies think, and they wait for it), so ``jobs`` counts policy
    processes, not workers. More workers than
    that only make the processes take turns on the cores: on the paper's grid (7 policies,
    2 cores) one worker took 5.7-6.1 s and two 6.6-8.2 s (``benchmarks/eval_grid.py --isolate``)."""
    return max(1, jobs // max(1, policies))


def _collect(results, refs, progress, on_episode_done) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    chunks = progress(results, len(refs)) if progress is not None else results
    for ref, chunk in zip(refs, chunks, strict=False):  # map keeps the order of refs
        if on_episode_done is not None:
            on_episode_done(ref, chunk)
        rows.extend(chunk)
    return rows
