"""Scripted and oracle baselines (paper §5, spec §5): deterministic reference policies.

Canonical names are the paper's (``no_mem``, ``fifo_store_all``, ``last_kb``...); the spec's
names (``NeverWrite``, ``AlwaysWrite``, ``RecencyBias``...) are ``aliases``. Class names are
the spec's names.

| name               | class             | track        | what it does                                    |
|--------------------|-------------------|--------------|-------------------------------------------------|
| no_mem             | NeverWrite        | unprivileged | always SKIP                                     |
| fifo_store_all     | AlwaysWrite       | unprivileged | WRITE while the step fits, never evict          |
| uniform_sample     | UniformSample     | unprivileged | WRITE steps with t % N == 0 that fit            |
| last_kb            | RecencyBias       | unprivileged | EXPIRE oldest items until the step fits, WRITE  |
| random             | RandomPolicy      | unprivileged | WRITE with probability p if it fits             |
| merge_aggressive   | MergeAggressive   | unprivileged | MERGE into the newest same-api base, or last_kb |
| expire_oldest      | ExpireOldest      | unprivileged | EXPIRE items older than max_age, WRITE if fits  |
| change_detector    | ChangeDetector    | unprivileged | WRITE endpoint snapshots changed since shown    |
| priority_threshold | PriorityThreshold | privileged   | WRITE iff priority > tau and it fits            |
| priority_greedy    | PriorityGreedy    | privileged   | WRITE, evicting lower-priority items to fit     |
| utility_greedy     | UtilityGreedy     | oracle       | WRITE the steps a utility-greedy knapsack picks |
| oracle_optimal     | OracleOptimal     | oracle       | WRITE an exact WRITE-only knapsack optimum      |

Every agent obeys the rule of ``agents.base``: per step, first any EXPIREs, then at most one
WRITE or MERGE, which is the last action yielded. Skipping yields nothing. Evictions are
planned on the memory as it is before the step, then yielded (a decision never depends on
whether the caller applies the EXPIREs before asking for the next action). Agents that evict
to make room expire nothing unless the plan makes the step fit; ``expire_oldest`` (age rule)
and ``last_kb`` with ``max_expires`` are the exceptions, as their docstrings say. "Fits"
means ``cost <= remaining``, with the WRITE cost ``estimate_bytes(step)`` of the step as the
run's track shows it.

Everything is deterministic given the parameters and the episode; ``random`` seeds a
``numpy.random.default_rng`` per episode from ``(seed, episode_id, length)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import ClassVar

import numpy as np

from wpb_gym.core.accounting import canonical_delta, estimate_bytes, merge_cost
from wpb_gym.core.checks import require_int
from wpb_gym.core.policy import EpisodeContext
from wpb_gym.core.store import StoreView
from wpb_gym.core.types import MemoryAction, Step

from ..base import BaselineAgent, episode_seed, plan_oldest_evictions, require_probability, step_priority
from .observe import StreamObserver
from .oracles import OracleOptimal, UtilityGreedy

__all__ = [
    "BASELINES",
    "AlwaysWrite",
    "BaselineAgent",
    "ChangeDetector",
    "ExpireOldest",
    "MergeAggressive",
    "NeverWrite",
    "OracleOptimal",
    "PriorityGreedy",
    "PriorityThreshold",
    "RandomPolicy",
    "RecencyBias",
    "UniformSample",
    "UtilityGreedy",
    "episode_seed",
    "plan_oldest_evictions",
]


# ---------------------------------------------------------------------------- unprivileged
class NeverWrite(BaselineAgent):
    """``no_mem``: always SKIP (0 recall, 0 bytes)."""

    name = "no_mem"
    aliases = ("NeverWrite",)
    description = "Never writes anything (always SKIP): the empty-memory floor."
    track = "unprivileged"
    kind = "scripted"

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        return iter(())


class AlwaysWrite(BaselineAgent):
    """``fifo_store_all`` (fill-then-stop): WRITE whenever the step fits, else SKIP; no eviction."""

    name = "fifo_store_all"
    aliases = ("AlwaysWrite",)
    description = "Writes every step while it fits in the remaining budget, then stops (no eviction)."
    track = "unprivileged"
    kind = "scripted"

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        if estimate_bytes(step) <= store.remaining():
            yield MemoryAction.write(step, reason="fits")


class UniformSample(BaselineAgent):
    """``uniform_sample``: WRITE the steps with ``step.t % N == 0`` (paper: N = 10) that fit; no eviction."""

    name = "uniform_sample"
    aliases = ("UniformSample",)
    description = "Writes every N-th step (t % N == 0) while it fits; no eviction."
    track = "unprivileged"
    kind = "scripted"
    _param_names = ("N",)

    def __init__(self, *, N: int = 10) -> None:  # "N" as in the paper
        self.N = require_int(N, "N", 1)

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        if step.t % self.N == 0 and estimate_bytes(step) <= store.remaining():
            yield MemoryAction.write(step, reason=f"t % {self.N} == 0")


def _last_kb_actions(
    step: Step, store: StoreView, max_expires: int | None = None, reason: str = "recency"
) -> Iterator[MemoryAction]:
    """``last_kb``'s actions for ``step``: EXPIRE the oldest items until it fits, then WRITE it.

    With ``max_expires = k``, at most the ``k`` oldest items are expired, and the step is
    written only if that made it fit (the expired items stay expired either way).
    """
    cost = estimate_bytes(step)
    if cost > store.max_bytes:
        return  # cannot fit even in an empty memory: keep what is there
    room = store.remaining()
    if max_expires is None:
        plan = plan_oldest_evictions(store, cost - room)
        if plan is None:  # pragma: no cover - every stored item is older than the current step
            return
    else:
        plan = []
        for item in store.iter_items() if cost > room else ():
            if len(plan) == max_expires or cost <= room:
                break
            plan.append(item.t)
            room += item.byte_cost
    for t in plan:
        yield MemoryAction.expire(t, reason="make room (oldest first)")
    if max_expires is None or cost <= room:
        yield MemoryAction.write(step, reason=reason)


class RecencyBias(BaselineAgent):
    """``last_kb`` (last-k bytes, LRU-style): keep the most recent steps that fit.

    Reading pinned here (``max_expires=None``, the default): every step is written. Before
    the WRITE, the oldest items (by timestep) are expired, as many as needed, until the step
    fits. A step whose cost exceeds the whole budget is skipped and nothing is expired. Only
    items older than the current step can be in memory when the plan is made (the WRITE is
    the step's last action), so every stored item is a candidate.

    ``max_expires=k`` caps the EXPIREs per step: the ``k`` oldest items at most are expired
    when the step does not fit, and the step is written only if it then fits. ``k = 1``
    reproduces the paper's Table 2 exactly on the paper's own episode files (F1 0.036 /
    0.122 at 1024 / 10240 bytes, default regime, privileged track), so the reference code
    expired one item per step; the default follows the paper's text ("until the current
    step fits").
    """

    name = "last_kb"
    aliases = ("RecencyBias",)
    description = "Writes every step, first expiring the oldest items until it fits (a sliding window of bytes)."
    track = "unprivileged"
    kind = "scripted"
    _param_names = ("max_expires",)

    def __init__(self, *, max_expires: int | None = None) -> None:
        self.max_expires = None if max_expires is None else require_int(max_expires, "max_expires", 1)

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        return _last_kb_actions(step, store, self.max_expires)


class RandomPolicy(BaselineAgent):
    """``random``: WRITE with probability ``p`` if the step fits; no eviction.

    ``p = 0.1`` is our choice (the paper names the baseline but gives no value). One uniform
    draw is made per step, fits or not, from ``default_rng(episode_seed(seed, episode_id,
    length))`` set up by ``start_episode``, so the draws of an episode depend only on
    ``(seed, episode)``, neither on the budget nor on the episodes run before. Without a
    ``start_episode`` call the stream is seeded from ``seed`` alone.
    """

    name = "random"
    aliases = ("RandomPolicy",)
    description = "Writes each step with probability p (if it fits), seeded per episode; no eviction."
    track = "unprivileged"
    kind = "scripted"
    _param_names = ("p", "seed")

    def __init__(self, *, p: float = 0.1, seed: int = 0) -> None:
        self.p = require_probability("p", p)
        self.seed = require_int(seed, "seed", 0)
        self._rng = np.random.default_rng(episode_seed(self.seed, None, 0))

    def start_episode(self, context: EpisodeContext) -> None:
        self._rng = np.random.default_rng(episode_seed(self.seed, context.episode_id, context.length))

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        # Not a generator: the draw is made when select() is called, at every step.
        draw = self._rng.random()
        if draw < self.p and estimate_bytes(step) <= store.remaining():
            return iter((MemoryAction.write(step, reason=f"draw {draw:.3f} < p"),))
        return iter(())


class MergeAggressive(BaselineAgent):
    """``merge_aggressive``: prefer MERGE into the newest base item of the same ``api``, else ``last_kb``.

    When memory holds a base (WRITE) item whose observation has exactly the step's ``"api"``
    (``store.newest_base_item(api)``) and the canonical delta against it is non-empty, MERGE
    into that item; if the merge cost does not fit, first expire the oldest items other than
    that base until it does. If it cannot fit even then (or there is no such base, or the
    delta is empty, or the observation has no ``"api"``), behave exactly like ``last_kb``.

    ``if_merge_fails="skip"`` is the paper's code as its Table 2/3 numbers imply: once memory
    holds a base of the same ``api``, the step is merged or dropped, never written (on the
    paper's released episodes this gives its 0.513 at 10 KB, default regime). The default,
    ``"last_kb"``, is the rule as the spec words it.

    In the synthetic regimes the version is part of the ``api`` string
    (``"api.v3.endpoint_5"``) and every drift bumps it, so two snapshots with the same ``api``
    are identical, their delta is empty and exact-``api`` MERGE never applies: there this
    agent acts as ``last_kb``. MERGE applies to streams whose ``api`` is stable across
    versions (e.g. ``"GET /v1/charges"`` in the apidrift data).
    """

    name = "merge_aggressive"
    aliases = ("MergeAggressive",)
    description = "MERGEs a changed snapshot into the newest stored item of the same api; otherwise acts as last_kb."
    track = "unprivileged"
    kind = "scripted"
    _param_names = ("if_merge_fails",)

    def __init__(self, if_merge_fails: str = "last_kb") -> None:
        if if_merge_fails not in ("last_kb", "skip"):
            raise ValueError(f"if_merge_fails must be 'last_kb' or 'skip', got {if_merge_fails!r}")
        self.if_merge_fails = if_merge_fails

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        obs = step.observation
        base = store.newest_base_item(obs["api"]) if isinstance(obs, dict) and "api" in obs else None
        if base is not None:
            delta = canonical_delta(obs, base.step.observation)
            if delta:
                cost = merge_cost(delta)
                plan = plan_oldest_evictions(store, cost - store.remaining(), keep=base.t)
                if plan is not None:
                    for t in plan:
                        yield MemoryAction.expire(t, reason="make room for MERGE (oldest first)")
                    yield MemoryAction.merge(step, base.t, delta=delta, reason="same api, changed fields")
                    return
            if self.if_merge_fails == "skip":
                return
        yield from _last_kb_actions(step, store)


class ExpireOldest(BaselineAgent):
    """``expire_oldest``: EXPIRE every item older than ``max_age`` timesteps, then WRITE if the step fits.

    An item is expired at step ``t`` when ``t - item.t > max_age``. ``max_age = 50`` is our
    choice (the spec names the age ``T`` but gives no value; 50 is a quarter of the paper's
    200-step episodes). The WRITE does not evict beyond the age rule.
    """

    name = "expire_oldest"
    aliases = ("ExpireOldest",)
    description = "Expires items older than max_age timesteps, then writes the step if it fits."
    track = "unprivileged"
    kind = "scripted"
    _param_names = ("max_age",)

    def __init__(self, *, max_age: int = 50) -> None:
        self.max_age = require_int(max_age, "max_age", 0)

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        plan, freed = [], 0
        room = store.remaining()  # read before any EXPIRE is applied
        oldest = store.oldest_item()
        if oldest is not None and step.t - oldest.t > self.max_age:
            for item in store.items():  # oldest first: stop at the first young enough
                if step.t - item.t <= self.max_age:
                    break
                plan.append(item.t)
                freed += item.byte_cost
        for t in plan:
            yield MemoryAction.expire(t, reason=f"older than {self.max_age} steps")
        if estimate_bytes(step) <= room + freed:
            yield MemoryAction.write(step, reason="fits")


class ChangeDetector(BaselineAgent):
    """``change_detector``: WRITE an endpoint snapshot iff it differs from the last one of its family *shown*.

    Our unprivileged heuristic. ``agents.scripted.observe.StreamObserver`` remembers the last
    observation shown for each endpoint family (the ``api`` without its version segments), so
    a drift — a new version, added or removed parameters, a changed deprecation flag — is a
    step whose family was seen before and whose observation changed. Everything else is
    skipped: first sightings of a family (nothing to compare with), identical repeats
    (redundancy streaks), and, unless listed in ``kinds``, documentation sections and
    migration guides (neither is a drift event, and at 1–5 KB each they would crowd out
    several drift snapshots). Kinds listed in ``kinds`` are written under the same rule.

    ``trigger="changed"`` (default) writes any change; ``trigger="version_up"`` only a change
    that raises the ``version`` (``last_updated`` for docs). They agree on the generated
    regimes (every change there is a drift, and every drift raises the version); on the
    paper's own episode files, whose generator shows a deprecated endpoint as not deprecated
    again on its next, non-critical, sighting, ``"version_up"`` avoids those false positives.

    When a chosen step does not fit, the oldest items are expired until it does (planned
    first); if it cannot fit even with memory empty, nothing is expired and it is skipped.
    Reads only the observation, the store view and its own memory of the stream.
    """

    name = "change_detector"
    aliases = ()
    description = "Writes endpoint snapshots that changed since their family was last shown, evicting oldest first."
    track = "unprivileged"
    kind = "scripted"
    _param_names = ("kinds", "trigger")

    KINDS: ClassVar[tuple[str, ...]] = ("endpoint", "doc", "guide", "other")
    TRIGGERS: ClassVar[tuple[str, ...]] = ("changed", "version_up")

    def __init__(self, *, kinds: Iterable[str] = ("endpoint",), trigger: str = "changed") -> None:
        kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
        unknown = [k for k in kinds if k not in self.KINDS]
        if unknown:
            raise ValueError(f"kinds: unknown content kind(s) {unknown}; expected some of {self.KINDS}")
        if trigger not in self.TRIGGERS:
            raise ValueError(f"trigger must be one of {self.TRIGGERS}, got {trigger!r}")
        self.kinds = kinds
        self.trigger = trigger
        self._observer = StreamObserver()

    def start_episode(self, context: EpisodeContext) -> None:
        self._observer.reset()

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        # Not a generator: the observer must see every step, even if the caller never iterates.
        change = self._observer.describe(step, store)
        self._observer.remember(step)
        if change.kind not in self.kinds or not change.seen_before:
            return iter(())
        if not (change.version_up if self.trigger == "version_up" else change.changed):
            return iter(())
        # The eviction of last_kb: the oldest items until the step fits, none if it never can.
        return _last_kb_actions(step, store, reason="changed since last shown")


# ---------------------------------------------------------------------------- privileged
class PriorityThreshold(BaselineAgent):
    """``priority_threshold``: WRITE iff ``priority > tau`` (paper: 0.5) and the step fits; no eviction."""

    name = "priority_threshold"
    aliases = ("PriorityThreshold",)
    description = "Writes steps whose priority hint exceeds tau while they fit; no eviction."
    track = "privileged"
    kind = "scripted"
    _param_names = ("tau",)

    def __init__(self, *, tau: float = 0.5) -> None:
        if isinstance(tau, bool) or not isinstance(tau, (int, float, np.floating)) or not np.isfinite(tau):
            raise ValueError(f"tau must be a finite number, got {tau!r}")
        self.tau = float(tau)

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        if step_priority(step) > self.tau and estimate_bytes(step) <= store.remaining():
            yield MemoryAction.write(step, reason=f"priority > {self.tau}")


class PriorityGreedy(BaselineAgent):
    """``priority_greedy``: keep high-priority items, evicting the lowest-priority ones to make room.

    WRITE the step if it fits. Otherwise plan evictions among the stored items whose priority
    (``item.step.metadata["priority"]``) is strictly lower than the step's, lowest priority
    first (ties: oldest first), until the step fits; if the plan makes it fit, yield those
    EXPIREs then the WRITE, otherwise SKIP and evict nothing.
    """

    name = "priority_greedy"
    aliases = ()
    description = "Writes every step, evicting strictly lower-priority items (lowest, then oldest, first) to fit."
    track = "privileged"
    kind = "scripted"

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        priority = step_priority(step)
        cost = estimate_bytes(step)
        need = cost - store.remaining()
        if need > 0:
            if cost > store.max_bytes:
                return
            candidates = sorted(  # complete before any action is yielded, so iterating without a copy is safe
                (p, item.t, item.byte_cost) for item in store.iter_items() if (p := step_priority(item.step)) < priority
            )
            plan, freed = [], 0
            for _, t, byte_cost in candidates:
                plan.append(t)
                freed += byte_cost
                if freed >= need:
                    break
            if freed < need:
                return
            for t in plan:
                yield MemoryAction.expire(t, reason="lower priority")
        yield MemoryAction.write(step, reason=f"priority {priority:.3f}")


BASELINES: tuple[type[BaselineAgent], ...] = (
    NeverWrite,
    AlwaysWrite,
    UniformSample,
    RecencyBias,
    RandomPolicy,
    MergeAggressive,
    ExpireOldest,
    ChangeDetector,
    PriorityThreshold,
    PriorityGreedy,
    UtilityGreedy,
    OracleOptimal,
)
"""Every baseline class, unprivileged first, then privileged, then oracle."""
