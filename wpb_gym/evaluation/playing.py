"""Playing policies over one episode, each at a budget: the offline evaluator's inner loop (spec §6.3).

Each step is shown to a policy as its track sees it; every action is applied the moment the
policy yields it, so a generator resumes on the memory its earlier actions made. The final
memory is scored with the benchmark's metrics against the hidden labels.

What a policy can and cannot change (the evaluator's integrity rules):

* The store judges and prices every action from the evaluator's **canonical** copy of the
  step (the episode's track view), which no policy is ever handed. A policy is shown its own
  copy (the observation read-only: ``wpb_gym.core.readonly``), shared only by that policy's runs
  on this episode; editing it, or the byte cost cached on it, changes nothing that is judged.
* Actions are normalised once into exact built-in types before they are judged
  (``wpb_gym.evaluation.referee``); memory items and decisions a policy reads are not what the store
  reads its rules from.
* ``RunLimits`` caps the actions and the time a policy spends on one timestep.

What stays reachable in one process — the store behind a view, the labels through the
interpreter's frames or the garbage collector, the next runs of the same code through its
globals — is closed by isolated evaluation, which runs each policy in its own process and
sends it each step only when its turn comes (``wpb_gym.evaluation.isolated.isolation``).
``wpb_gym.evaluation.runner.run_episode`` runs one policy either way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Hashable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from time import perf_counter
from typing import Any, NamedTuple

from ..core.accounting import estimate_bytes, json_len, observation_json
from ..core.compression import Compression
from ..core.kind_budgets import KindBudgets, KindShares
from ..core.policy import ORACLE, EpisodeContext, EpisodeOutcome, check_can_run, limit_context, policy_name
from ..core.readonly import freeze, thaw
from ..core.store import ByteMemoryStore, Decision
from ..core.store_limits import StoreLimits
from ..core.tracks import UNPRIVILEGED, plain_track, policy_episode, track_costs
from ..core.types import Episode, MemoryAction, Step, frozen_instance
from ..core.write_time import WriteTime
from ..scoring.compression_bounds import compressed_costs, refuse_queries
from ..scoring.kind_bounds import step_kinds
from ..scoring.limited_bounds import utility_within
from ..scoring.metrics import EpisodeMetrics, compute_metrics
from ..scoring.queries import QueryScore, has_queries, score_queries
from .isolated.wire import encode_action
from .referee import DEFAULT_LIMITS, NOT_JSON, PolicyLimitError, RunLimits, apply, as_action, normalise


class LoggedAction(NamedTuple):
    """An action the policy yielded at ``t`` (normalised; a WRITE or MERGE names the canonical
    step) and the store's decision on it."""

    t: int
    action: MemoryAction
    decision: Decision


@dataclass(frozen=True)
class EpisodeRun:
    """The outcome of a run: the metrics, the final memory, every action applied, the limit
    the policy went over (``None`` when it ran to the end), in isolated evaluation the
    first timestep at which the policy's replica of its memory disagreed with the evaluator's
    decisions (``None`` for a policy that left its replica alone) and, for an episode of the
    query tier, how memory answered its queries (``queries.accuracy`` is the tier's headline
    score; ``None`` for an episode without queries)."""

    metrics: EpisodeMetrics
    store: ByteMemoryStore
    actions: tuple[LoggedAction, ...]
    error: PolicyLimitError | None = None
    diverged_at: int | None = None
    queries: QueryScore | None = None


@dataclass(frozen=True)
class Seat:
    """One run of ``play``: ``policy`` (a fresh instance) at ``budget`` bytes on ``track``
    (and, with hierarchical budgets, ``kinds``: the limit of each content kind that has one; with
    a write-time budget, ``write_time``; with compressed writes allowed, ``compression``).

    Seats with the same ``group`` are runs of the same policy: on one track they are shown the
    same read-only copies of the steps (one copy per policy, not one per budget). ``label``
    names the policy in errors (by default its ``name``).
    """

    policy: Any
    budget: int
    track: str = UNPRIVILEGED
    group: Hashable = None
    label: str | None = None
    kinds: KindBudgets | None = None
    write_time: WriteTime | None = None
    compression: Compression | None = None

    def store(self) -> ByteMemoryStore:
        """A fresh memory for this seat."""
        return ByteMemoryStore(self.budget, self.kinds, self.write_time, self.compression)

    def limit_fields(self) -> dict[str, Any]:
        """What a policy's ``EpisodeContext`` says of the limits beside the budget."""
        return limit_context(self.kinds, self.write_time, self.compression)

    @classmethod
    def within(cls, policy: Any, budget: int, track: str, group: Hashable, label: str | None,
               limits: StoreLimits | None) -> Seat:
        """A seat under a run's ``limits`` (kind shares resolved at ``budget``; None: none)."""
        if not limits:
            return cls(policy, budget, track, group, label)
        return cls(policy, budget, track, group, label, limits.kinds_at(budget), limits.write_time,
                   limits.compression)

    def limits(self) -> StoreLimits | None:
        """The seat's limits as a run states them (kind limits in bytes), None without any."""
        kinds = KindShares(tuple(self.kinds)) if self.kinds else None
        return StoreLimits(kinds, self.write_time, self.compression) or None

    def __post_init__(self) -> None:
        # The track decides what the policy is shown: read once, as the text it holds.
        object.__setattr__(self, "track", plain_track(self.track))


@dataclass
class PlayedRun:
    """What ``play`` leaves of a seat: its store, its action log and its error, if any."""

    seat: Seat
    name: str
    store: ByteMemoryStore
    actions: list[LoggedAction] = field(default_factory=list)
    error: PolicyLimitError | None = None
    diverged_at: int | None = None


class StepCopies:
    """The copies of one track's steps shown to one policy (one group): the observation
    read-only (``wpb_gym.core.readonly``), the metadata a plain dict of its own.

    Each observation object is frozen once per policy (``memo``, shared by the policy's
    tracks: generated streams show one object at many steps, and both tracks show the same
    observations). Metadata is the priority hint policies read at every step, so it stays a
    plain dict, which Python reads fastest: string-valued metadata is copied once per content,
    the rest once per step. The copy carries the canonical step's byte cost, so a policy does
    not serialise it again (a policy that edits its copy's cached cost only misleads itself).
    """

    def __init__(self, canonical: Sequence[Step], memo: dict[Any, tuple[Any, Any]] | None = None) -> None:
        self.canonical = canonical  # may grow as steps arrive (isolated evaluation)
        self._frozen = {} if memo is None else memo  # id(value) or content -> (value, its copy)
        self._steps: dict[int, Step] = {}
        self._all: list[Step] | None = None

    def _freeze(self, value: Any) -> Any:
        entry = self._frozen.get(id(value))
        if entry is None or entry[0] is not value:
            entry = self._frozen[id(value)] = (value, freeze(value))
        return entry[1]

    def _copy_metadata(self, metadata: Any) -> Any:
        if type(metadata) is dict and all(type(v) is str for v in metadata.values()):
            key = ("metadata", *metadata.items())  # the unprivileged {"mode": ...} of every step
            entry = self._frozen.get(key)
            if entry is None:
                entry = self._frozen[key] = (None, dict(metadata))
            return entry[1]
        return thaw(metadata)

    def step(self, t: int) -> Step:
        shown = self._steps.get(t)
        if shown is None:
            source = self.canonical[t]
            fields = {
                "t": t,
                "observation": self._freeze(source.observation),
                "metadata": self._copy_metadata(source.metadata),
            }
            # The canonical step's cost, computed now (the store needs it anyway): a policy reads
            # it from its copy without serialising the copy again.
            fields["_write_cost"] = estimate_bytes(source)
            fields["_observation_json"] = observation_json(source)
            shown = self._steps[t] = frozen_instance(Step, fields)
        return shown

    def all(self) -> list[Step]:
        """The copy of every step, in order (made once: a policy's runs share it)."""
        every = self._all
        if every is None or len(every) != len(self.canonical):
            every = self._all = [self.step(t) for t in range(len(self.canonical))]
        return every

    def stream(self) -> Episode:
        """Every shown step, without labels (for policies with ``needs_stream``)."""
        return Episode(steps=tuple(self.all()), labels={})


def private_episode(episode: Episode) -> Episode:
    """A copy of ``episode`` (labels included) sharing no mutable object with it: what an
    oracle-track policy is given, so that nothing it does reaches the scoring."""
    steps = tuple(Step(s.t, thaw(s.observation), thaw(s.metadata)) for s in episode.steps)
    return Episode(steps=steps, labels=thaw(episode.labels))


def contexts(
    seats: Sequence[Seat], declared: Sequence[str], episode: Episode, copies: dict[str, StepCopies]
) -> list[Any]:
    """The ``EpisodeContext`` of the seats of one policy (``declared``: the track each seat's
    policy declared when it was checked; ``copies``: its copies by track; an oracle policy's
    private episode is made once)."""
    episodes: dict[Hashable, Episode] = {}
    out = []
    for seat, track in zip(seats, declared, strict=True):
        oracle = None
        if track == ORACLE:
            oracle = episodes.get(seat.group)
            if oracle is None:
                oracle = episodes[seat.group] = private_episode(episode)
        stream = copies[seat.track].stream() if getattr(seat.policy, "needs_stream", False) else None
        out.append(
            EpisodeContext(
                length=len(episode),
                budget_bytes=seat.budget,
                track=seat.track,
                episode_id=thaw(episode.episode_id),
                episode=oracle,
                stream=stream,
                **seat.limit_fields(),
            )
        )
    return out


def play(
    episode: Episode, seats: Sequence[Seat], *, limits: RunLimits = DEFAULT_LIMITS, record_actions: bool = False
) -> list[PlayedRun]:
    """Run every seat over ``episode`` in this process; one ``PlayedRun`` each, in seat order.

    Runs are played one after another (trusted code: see the module docstring), a policy's
    (a group's) runs together: they share its read-only copies of the steps, which are let go
    before the next policy's are made.
    """
    declared = {id(seat): check_can_run(seat.policy, seat.track) for seat in seats}
    canonical = {track: policy_episode(episode, track).steps for track in {seat.track for seat in seats}}
    runs = [PlayedRun(seat, seat.label or policy_name(seat.policy), seat.store()) for seat in seats]
    by_group: dict[Hashable, list[PlayedRun]] = {}
    for run in runs:
        by_group.setdefault(run.seat.group, []).append(run)
    for group in by_group.values():
        memo: dict[Any, Any] = {}  # one copy of an observation for both tracks
        copies = {run.seat.track: StepCopies(canonical[run.seat.track], memo) for run in group}
        seats_of = [r.seat for r in group]
        for run, context in zip(
            group, contexts(seats_of, [declared[id(s)] for s in seats_of], episode, copies), strict=True
        ):
            start = getattr(run.seat.policy, "start_episode", None)
            if start is not None:
                start(context)
        for run in group:
            track = run.seat.track
            player = stepper(run, 0, limits, record_actions)
            next(player)
            try:  # the steps fed from C (map), one after another
                deque(map(player.send, zip(copies[track].all(), canonical[track], repeat(None))), 0)
            except StopIteration:  # stopped by a limit
                pass
    return runs


def stepper(
    run: PlayedRun, first_t: int, limits: RunLimits, record: bool, reasons: bool = True
) -> Generator[None, Any, None]:
    """Play ``run`` one timestep per ``send((shown, canonical, sink))``, from ``first_t`` on.

    At each timestep the policy is shown ``shown`` and every action it yields is normalised
    and judged on ``canonical`` at once. A limit crossed stops the run (``run.error``) and ends
    the generator (the next ``send`` raises ``StopIteration``). With a ``sink`` list, every
    action is also appended to it as ``[kind, target_t, delta, delta_is_json, reason,
    accepted]`` (what a policy's process reports in isolated evaluation), its reason left out
    unless ``reasons`` (only an action log or a memory the caller keeps shows them: without,
    most actions travel as ``wire.ONE_WRITE``, which costs both sides of the pipe less). In process the
    steps are fed in a loop (``play``); in a policy's process one per message — the same code.

    Time is read before a timestep's first action, every 64 actions and when it ends; steps
    fed back to back, as ``play`` does, are timed from the end of the one before. A policy's
    process, which waits for its next step, times its runs with an interval timer instead
    (``wpb_gym.evaluation.isolated.policy_process``).

    Actions of exact built-in types (a ``MemoryAction`` as its constructors build it, naming
    the shown step) go to the store directly: reading them cannot run a policy's code, so they
    need no normalising. Everything else, and every action when ``record`` is set, takes
    ``normalise`` and ``apply``; tests check that both ways leave the same memory.
    """
    policy, store, name = run.seat.policy, run.store, run.name
    select, view = policy.select, store.view()
    max_actions = limits.max_actions_per_step or _NEVER
    max_seconds = limits.max_seconds_per_step or _NEVER
    write, expire, skip = store.write, store.expire, store.skip
    t = first_t - 1
    started = perf_counter()
    try:
        while True:
            shown_t, canonical, sink = yield
            t += 1
            actions = select(shown_t, view)
            if not actions:
                ended = perf_counter()
                if ended - started > max_seconds:
                    raise _over_time(name, t, max_seconds)
                started = ended  # where one timestep ends the next begins: one clock reading each
                continue
            iterator = iter(actions)
            count = 0
            try:
                for action in iterator:
                    count += 1
                    if count > max_actions:
                        raise PolicyLimitError(name, t, f"yielded more than {max_actions} actions at one timestep")
                    # Before the first action (a policy that thought too long yields nothing
                    # more), then every 64 (a slow, long stream).
                    if (count == 1 or not count & 63) and perf_counter() - started > max_seconds:
                        raise _over_time(name, t, max_seconds)
                    if type(action) is MemoryAction and not record:
                        kind, reason = action.action, action.reason
                        if type(kind) is str and (reason is None or type(reason) is str):
                            if kind == "WRITE" and action.step is shown_t and action.codec is None:
                                decision = write(canonical, t, reason, shown=shown_t)
                                if sink is not None:
                                    said = reason if reasons else None
                                    sink.append(encode_action(("WRITE", None, None, said), decision.accepted))
                                continue
                            target = action.target_t
                            if kind == "EXPIRE" and type(target) is int:
                                decision = expire(target, t)
                                if sink is not None:
                                    said = reason if reasons else None
                                    sink.append(encode_action(("EXPIRE", target, None, said), decision.accepted))
                                continue
                            if kind == "SKIP":
                                skip(t)
                                if sink is not None:
                                    sink.append(encode_action(_SKIP, True))
                                continue
                    plain = normalise(action, shown_t, t, name)
                    decision = apply(store, plain, t, canonical, shown_t)
                    if record:
                        run.actions.append(LoggedAction(t, as_action(plain, canonical), decision))
                    if sink is not None:
                        if plain[0] == "MERGE" and _longer_than_step(plain[2], canonical):
                            # It cannot be the canonical delta (part of the observation); sent as
                            # not JSON, it is judged alike and a reply stays within its bound.
                            plain = (plain[0], plain[1], NOT_JSON, plain[3])
                        sink.append(encode_action(plain if reasons else (*plain[:3], None), decision.accepted))
            except PolicyLimitError:
                _close(iterator)
                raise
            ended = perf_counter()
            if ended - started > max_seconds:
                raise _over_time(name, t, max_seconds)
            started = ended
    except PolicyLimitError as error:
        run.error = error


_NEVER = float("inf")
_SKIP = ("SKIP", None, None, None)


def _longer_than_step(delta: Any, canonical: Step) -> bool:
    """Whether a MERGE's plain delta is longer, as JSON, than the step's WRITE text."""
    return delta is not None and delta is not NOT_JSON and json_len(delta) > estimate_bytes(canonical)


def _over_time(name: str, t: int, seconds: float) -> PolicyLimitError:
    return PolicyLimitError(name, t, f"spent more than {seconds:g} s deciding one timestep")


def _close(iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # noqa: BLE001 - a stopped policy's generator may refuse to close
            pass


def score(run: PlayedRun, episode: Episode, oracle_utility: float | None = None) -> EpisodeRun:
    """The metrics of a played run (``oracle_utility``: U*(B) on its track, within the seat's
    kind budgets or write time if it has them, computed if not given)
    and, when the episode has queries, its query score. ``run.store`` must be a
    ``ByteMemoryStore`` for an episode with queries: they are answered from what memory held
    at each checkpoint."""
    seat = run.seat
    if seat.compression is not None:
        refuse_queries(episode)
    if oracle_utility is None:
        oracle_utility = utility_within(track_costs(episode, seat.track), episode.utilities, seat.budget,
                                        seat.kinds, seat.write_time, step_kinds(episode) if seat.kinds else None,
                                        seat.compression,
                                        compressed_costs(episode, seat.track) if seat.compression else None)
    metrics = compute_metrics(episode, run.store, oracle_utility=oracle_utility)
    queries = score_queries(episode, run.store) if has_queries(episode) else None
    return EpisodeRun(
        metrics=metrics,
        store=run.store,
        actions=tuple(run.actions),
        error=run.error,
        diverged_at=run.diverged_at,
        queries=queries,
    )


def outcome_metrics(result: EpisodeRun) -> dict[str, float]:
    """What a policy's ``end_episode`` is told: the metric row and, for an episode with
    queries, its ``query_accuracy``."""
    metrics = result.metrics.as_row()
    if result.queries is not None:
        metrics["query_accuracy"] = result.queries.accuracy
    return metrics


def end_episode(run: PlayedRun, result: EpisodeRun) -> None:
    """Tell the run's policy how it did (a policy stopped by a limit is not called again)."""
    if run.error is None:
        end = getattr(run.seat.policy, "end_episode", None)
        if end is not None:
            end(EpisodeOutcome(metrics=outcome_metrics(result), rewards=None))
