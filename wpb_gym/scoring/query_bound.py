"""The hindsight bound on query accuracy: the most queries any policy could answer right.

Knowing every query, the best policy chooses which endpoint snapshots memory holds at each
checkpoint. It is an integer program, solved with HiGHS (``scipy.optimize.milp``):

* An *item* is a way to hold a snapshot: a WRITE of step ``s`` (cost: its WRITE bytes on the
  track), or a MERGE of step ``s`` onto an earlier snapshot ``b`` of the same endpoint (cost:
  its delta's bytes), which needs ``b`` held as a WRITE item whenever it is held.
* ``y[i, k]`` = item ``i`` is held at checkpoint ``k``. An item can be held from the first
  checkpoint after its step, and once dropped it is gone (``y[i, k+1] <= y[i, k]``). At
  every checkpoint the held items fit the budget, and at most one item holds a timestep.
* ``z[i, k]`` = item ``i`` answers its endpoint's queries at checkpoint ``k``: it is held
  and no newer item of its endpoint is (the reader reads the newest). The objective is the
  number of queries answered right.

Holding only checkpoint by checkpoint loses nothing: a policy can expire at each checkpoint
step what the next checkpoint does not need, and write each item when its step is shown, so
between two checkpoints memory holds a part of what the next one holds, which fits.

The program's optimum is exact. For large episodes HiGHS is given a time limit; it then
returns the best schedule found (a feasible value, a lower bound on the optimum) and a proven
upper bound from its search (``upper``). Both are reported; on small episodes they meet.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, sparse

from ..core.accounting import canonical_delta, merge_cost
from ..core.queries import answer_of, same_answer
from ..core.store import ByteMemoryStore
from ..core.tracks import policy_episode, track_costs
from ..core.types import Episode, MemoryAction
from .queries import QueryScore, episode_queries, score_queries

DEFAULT_TIME_LIMIT = 60.0


@dataclass(frozen=True)
class QueryBound:
    """The hindsight bound of an episode at a budget: ``upper`` (no policy answers more, as a
    fraction of the queries), ``feasible`` (a schedule that answers this many), ``exact`` when
    they are proven equal, and the schedule: per item its step, the base step of a MERGE
    (None for a WRITE) and the checkpoints it is held through (``held_until``)."""

    upper: float
    feasible: float
    exact: bool
    asked: int
    schedule: tuple[tuple[int, int | None, int], ...]


@dataclass(frozen=True)
class _Item:
    step: int
    base: int | None
    api: str
    cost: int
    first: int  # index of the first checkpoint after its step
    right: dict[int, int]  # checkpoint index -> queries of its endpoint it answers right


def query_bound(episode: Episode, budget: int, track: str = "unprivileged", *,
                time_limit: float = DEFAULT_TIME_LIMIT, newest: bool = False) -> QueryBound:
    """The hindsight bound on query accuracy of ``episode`` with a ``budget``-byte memory on ``track``.

    ``upper`` comes from the program without the reader's newest-item rule (a relaxation: a
    held item may answer although a newer one of its endpoint is held), which HiGHS solves
    fast; ``feasible`` is the accuracy of HiGHS's best schedule played through the store (the
    real reader). ``newest=True`` keeps the rule in the program (exact, slower: for small
    episodes and the tests).
    """
    queries = episode_queries(episode)
    asked = len(queries)
    if not asked:
        return QueryBound(0.0, 0.0, True, 0, ())
    checkpoints = sorted({q.t for q in queries})
    items = _items(episode, budget, track, checkpoints)
    problem = _Program(items, len(checkpoints), budget, newest)
    if problem.n == 0:
        return QueryBound(0.0, 0.0, True, asked, ())
    relaxed = optimize.linprog(problem.objective, A_ub=problem.matrix, b_ub=problem.upper, bounds=(0, 1),
                               method="highs")
    if relaxed.status != 0:
        raise RuntimeError(f"HiGHS could not solve the bound's linear relaxation: {relaxed.message}")
    # Counts of queries: no schedule answers more than the integer part of the relaxation's value
    # (less HiGHS's tolerance, relative to the value: thousands of queries must not lose one).
    upper = _whole(-relaxed.fun)
    schedules = [problem.schedule(problem.round(relaxed.x), checkpoints)]
    found = None
    if time_limit > 0:
        result = optimize.milp(
            problem.objective,
            constraints=optimize.LinearConstraint(problem.matrix, -np.inf, problem.upper),
            integrality=np.ones(problem.n),
            bounds=optimize.Bounds(0, 1),
            options={"time_limit": time_limit, "disp": False, "mip_rel_gap": 0.0},
        )
        dual = getattr(result, "mip_dual_bound", None)
        if dual is not None and np.isfinite(dual):
            upper = min(upper, _whole(-dual))
        if result.x is not None:
            held = np.round(result.x).astype(bool)
            schedules.append(problem.schedule(held, checkpoints))
            if result.status == 0:
                found = float(-problem.objective @ held)
    scored = [(replay_schedule(episode, schedule, budget, track).correct, schedule) for schedule in schedules]
    feasible, schedule = max(scored, key=lambda pair: pair[0])
    upper = max(upper, feasible)
    exact = feasible == upper or (newest and found is not None and feasible == found)
    return QueryBound(upper / asked, feasible / asked, exact, asked, schedule)


def replay_schedule(episode: Episode, schedule: Sequence[tuple[int, int | None, int]], budget: int,
                    track: str = "unprivileged") -> QueryScore:
    """Play a bound's schedule through the store and score it with the reader: each item is
    written (or merged onto its base) when its step is shown and expired at the checkpoint
    step it is last held through, after that checkpoint's queries are read."""
    store = ByteMemoryStore(budget)
    steps = policy_episode(episode, track).steps
    writes = {step: base for step, base, _ in schedule}
    leaving: dict[int, list[int]] = defaultdict(list)
    for step, _, until in schedule:
        leaving[until].append(step)
    for step in steps:
        t = step.t
        for target in sorted(leaving.get(t, ()), reverse=True):  # deltas before their bases
            store.expire(target, t)
        if t in writes:
            base = writes[t]
            action = MemoryAction.write(step) if base is None else MemoryAction.merge(step, base)
            decision = store.execute(action, t)
            if not decision.accepted:
                raise RuntimeError(f"the bound's schedule was refused at t={t}: {decision.reason.value}")
    return score_queries(episode, store)


def _items(episode: Episode, budget: int, track: str, checkpoints: list[int]) -> list[_Item]:
    """Every way to hold an endpoint snapshot that answers some query right, and every WRITE
    that such a MERGE needs as its base."""
    queries = episode_queries(episode)
    index = {t: k for k, t in enumerate(checkpoints)}
    asked: dict[tuple[str, int], list] = defaultdict(list)
    for q in queries:
        asked[q.api, index[q.t]].append(q)
    asked_at: dict[str, list[int]] = defaultdict(list)
    for api, k in asked:
        asked_at[api].append(k)
    observations, _ = episode.columns()
    costs = track_costs(episode, track)
    shows: dict[str, list[int]] = defaultdict(list)
    for t, obs in enumerate(observations):
        if isinstance(obs, dict) and isinstance(obs.get("api"), str) and obs["api"] in asked_at:
            shows[obs["api"]].append(t)

    def right_of(obs: dict, api: str, first: int) -> dict[int, int]:
        right = {}
        for k in asked_at[api]:
            if k >= first:
                n = sum(same_answer(answer_of(obs, q.fact, q.argument), q.answer) for q in asked[api, k])
                if n:
                    right[k] = n
        return right

    items: list[_Item] = []
    for api, steps in shows.items():
        writes: dict[int, _Item] = {}
        merges: list[_Item] = []
        for j, s in enumerate(steps):
            first = bisect.bisect_right(checkpoints, s)
            if first == len(checkpoints):
                continue
            obs = observations[s]
            if costs[s] <= budget:
                writes[s] = _Item(s, None, api, int(costs[s]), first, right_of(obs, api, first))
            for b in steps[:j]:
                delta = canonical_delta(obs, observations[b])
                if not delta or costs[b] > budget:
                    continue
                cost = merge_cost(delta)
                if cost + costs[b] > budget:
                    continue
                right = right_of({**observations[b], **delta}, api, first)
                if right:
                    merges.append(_Item(s, b, api, cost, first, right))
        needed = {m.base for m in merges}
        items.extend(item for s, item in writes.items() if item.right or s in needed)
        items.extend(merges)
    return items


class _Program:
    """The integer program over ``items``: variables ``y`` (held) then ``z`` (answers), as
    ``minimise objective @ x`` subject to ``matrix @ x <= upper``."""

    def __init__(self, items: list[_Item], n_checkpoints: int, budget: int, newest: bool) -> None:
        self.items = items
        self.budget = budget
        # How long an item can be worth holding: to its last useful checkpoint, or for a base
        # to the last useful checkpoint of a MERGE onto it.
        last = [max(item.right) if item.right else -1 for item in items]
        base_of = {(item.api, item.step): i for i, item in enumerate(items) if item.base is None}
        for i, item in enumerate(items):
            if item.base is not None:
                b = base_of[item.api, item.base]
                last[b] = max(last[b], last[i])
        self.y: dict[tuple[int, int], int] = {}
        for i, item in enumerate(items):
            for k in range(item.first, last[i] + 1):
                self.y[i, k] = len(self.y)
        self.z: dict[tuple[int, int], int] = {}
        for i, item in enumerate(items):
            for k in item.right:
                self.z[i, k] = len(self.y) + len(self.z)
        self.n = len(self.y) + len(self.z)
        objective = np.zeros(self.n)
        for (i, k), v in self.z.items():
            objective[v] = -items[i].right[k]
        self.objective = objective

        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        upper: list[float] = []

        def row(entries: list[tuple[int, float]], bound: float) -> None:
            r = len(upper)
            for col, val in entries:
                rows.append(r)
                cols.append(col)
                vals.append(val)
            upper.append(bound)

        by_checkpoint: dict[int, list[tuple[int, float]]] = defaultdict(list)
        by_step: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
        for (i, k), v in self.y.items():
            by_checkpoint[k].append((v, float(items[i].cost)))
            by_step[items[i].step, k].append((v, 1.0))
            after = self.y.get((i, k + 1))
            if after is not None:
                row([(after, 1.0), (v, -1.0)], 0.0)  # once dropped, gone
            if items[i].base is not None:
                row([(v, 1.0), (self.y[base_of[items[i].api, items[i].base], k], -1.0)], 0.0)  # its base is held
        for entries in by_checkpoint.values():
            row(entries, float(budget))
        for entries in by_step.values():
            if len(entries) > 1:
                row(entries, 1.0)  # one item per timestep
        held_by: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
        if newest:
            for (i, k), v in self.y.items():
                held_by[items[i].api, k].append((items[i].step, v))
        answering: dict[tuple[str, int], list[tuple[int, float]]] = defaultdict(list)
        for (i, k), v in self.z.items():
            row([(v, 1.0), (self.y[i, k], -1.0)], 0.0)  # answers only if held
            answering[items[i].api, k].append((v, 1.0))
            for step, other in held_by[items[i].api, k]:
                if step > items[i].step:
                    row([(v, 1.0), (other, 1.0)], 1.0)  # and only if nothing newer is
        for entries in answering.values():
            if len(entries) > 1:
                row(entries, 1.0)  # one item answers an endpoint's queries
        self.matrix = sparse.csr_array((vals, (rows, cols)), shape=(len(upper), self.n))
        self.upper = np.asarray(upper)

    def round(self, x: np.ndarray) -> np.ndarray:
        """A schedule near the relaxation's solution ``x``: checkpoint by checkpoint, the items held
        at the one before or new now, most held by ``x`` first, while they fit (a MERGE only with
        its base, and one item per timestep: the relaxation may split a step between its WRITE
        and a MERGE); an item left out is dropped for good."""
        held = np.zeros(self.n, dtype=bool)
        by_checkpoint: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for (i, k), v in self.y.items():
            by_checkpoint[k].append((i, v))
        base_of = {(item.api, item.step): i for i, item in enumerate(self.items) if item.base is None}
        kept: set[int] = set()
        for k in sorted(by_checkpoint):
            candidates = [(i, v) for i, v in by_checkpoint[k] if i in kept or self.items[i].first == k]
            candidates.sort(key=lambda pair: (-x[pair[1]], self.items[pair[0]].cost))
            room = self.budget
            now: set[int] = set()
            steps: set[int] = set()
            for i, v in candidates:
                item = self.items[i]
                if x[v] < 1e-6 or item.cost > room or item.step in steps:
                    continue
                if item.base is not None and base_of[item.api, item.base] not in now:
                    continue
                now.add(i)
                steps.add(item.step)
                room -= item.cost
                held[v] = True
            kept = now
        for (i, k), v in self.z.items():
            held[v] = held[self.y[i, k]]
        return held

    def schedule(self, held: np.ndarray, checkpoints: list[int]) -> tuple[tuple[int, int | None, int], ...]:
        until: dict[int, int] = {}
        for (i, k), v in self.y.items():
            if held[v]:
                until[i] = max(until.get(i, -1), k)
        rows = [(self.items[i].step, self.items[i].base, checkpoints[k]) for i, k in until.items()]
        return tuple(sorted(rows, key=lambda row: (row[0], -1 if row[1] is None else row[1], row[2])))


def _whole(value: float) -> float:
    """The integer part of a solver's optimum, allowing for its tolerance relative to the value."""
    return float(math.floor(value + 1e-6 * max(1.0, abs(value))))

