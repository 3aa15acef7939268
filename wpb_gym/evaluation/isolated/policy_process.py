"""The policy's side of isolated evaluation: the loop that runs in a policy's own process.

The evaluator (``wpb_gym.evaluation.isolated.isolation``) sends pickled messages; this process answers each with
one JSON object (never pickle: the evaluator must not run code this process chose).

* ``("probe",)`` → ``{"name", "track", "needs_stream", "limits"}``: builds the policy once
  (``limits``: those beside the budget a trained model needs, ``ModelAgent.trained_limits``).
* ``("begin", episodes)`` → ``{"ok": true}``: a fresh policy per run, ``start_episode``.
  Each episode says its number ``e``, length, id, runs ``(k, track, budget)``, whether
  actions go back with their reasons (``reasons``: for an action log or a kept memory) and, only for a
  policy that asks for them, the unlabelled stream (``needs_stream``) or, for an oracle
  policy, the labelled episode.
* ``("step", t, {episode: {track: (number, metadata, cost[, observation])}})`` → ``{"writes": [k, ...],
  "actions": [[k, [action, ...]], ...], "stopped": [[k, message], ...]}``: step ``t`` of every
  episode still running. ``writes`` names the runs whose only action was an accepted WRITE of the
  step (``wire.ONE_WRITE``), ``actions`` gives the others' actions; runs that took no action are
  left out. An observation comes once, with its
  number, the first time a step shows it; later steps that show the same object send only
  the number (since the last ``begin``). ``cost`` is the step's WRITE cost, priced by the
  evaluator;
  each live run is shown its read-only copy and plays it on a replica of its memory (the same
  store code, its own actions) within the limits. Actions travel in their wire form
  (``wpb_gym.evaluation.isolated.wire``).
* ``("end", {k: metrics})`` → ``{"ok": true}``: ``end_episode`` of every run not stopped.

Anything a policy raises goes back as ``{"error": traceback}``.
"""

from __future__ import annotations

import gc
import json
import pickle
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from ...core.accounting import observation_json
from ...core.policy import EpisodeContext, EpisodeOutcome, PolicyFailure, check_can_run, policy_name, policy_track
from ...core.store_limits import StoreLimits
from ...core.types import Episode, Step
from ..playing import PlayedRun, Seat, StepCopies, stepper
from ..referee import PolicyLimitError, RunLimits
from .sandbox import Plan, enter
from .wire import ONE_WRITE

__all__ = ["serve"]


class _Timeout(BaseException):
    """Raised by the interval timer inside a policy that overran its time (a BaseException,
    so that a policy's ``except Exception`` does not swallow it)."""


@dataclass
class _Run:
    index: int
    policy: Any
    played: PlayedRun  # its replica store and, once stopped, why
    key: tuple[int, str]  # (episode, track)
    send: Any = None  # its stepper's send: one timestep per call
    stopped: bool = False


class PolicyServer:
    """Builds a policy per run and plays the steps it is sent.

    ``factory`` arrives pickled and is unpickled here, when first asked for the policy: in a
    sandbox, only once the sandbox is in place (unpickling imports the policy's module).
    ``memory_bytes``: the sandbox's bound on the process's address space, if any; a run that
    runs out of memory is then stopped like one over a limit (its ``error`` says so)."""

    def __init__(self, factory: bytes | Callable[[], Any], limits: RunLimits, memory_bytes: int | None = None) -> None:
        self._factory, self.limits, self.memory_bytes = factory, limits, memory_bytes
        # The interval timer, not the clock between actions, keeps the time in this process.
        self.untimed = RunLimits(limits.max_actions_per_step, None)
        self.runs: list[_Run] = []
        self.copies: dict[tuple[int, str], StepCopies] = {}
        self.canonical: dict[tuple[int, str], list[Step]] = {}
        self.observations: dict[int, tuple[Any, str]] = {}
        self.name = "?"
        self.started = 0.0  # when the run being played started its timestep

    def factory(self) -> Any:
        if isinstance(self._factory, bytes):
            self._factory = pickle.loads(self._factory)
        return self._factory()

    def probe(self) -> dict[str, Any]:
        policy = self.factory()  # bad parameters fail here, in the policy's process
        self.name = policy_name(policy)
        return {
            "name": self.name,
            "track": policy_track(policy),
            "needs_stream": bool(getattr(policy, "needs_stream", False)),
            "limits": [str(name) for name in getattr(policy, "trained_limits", ())],
        }

    def begin(self, episodes: list[dict[str, Any]]) -> dict[str, Any]:
        self.runs, self.copies, self.canonical = [], {}, {}
        self.observations = {}  # number -> (observation, its JSON), for this batch
        for message in episodes:
            e, streams = message["e"], message["streams"]
            memo: dict[Any, Any] = {}  # one copy of an observation for both tracks
            for track in message["tracks"]:
                steps = [Step(t, obs, meta) for t, (obs, meta) in enumerate(streams[track])] if streams else []
                self.canonical[e, track] = steps
                self.copies[e, track] = StepCopies(steps, memo)
            whole = message["episode"]
            episode = None
            if whole is not None:
                episode = Episode(steps=[Step(**s) for s in whole["steps"]], labels=whole["labels"])
            limits = StoreLimits.from_text(message["limits"]) if message["limits"] is not None else StoreLimits()
            for index, track, budget in message["runs"]:
                policy = self.factory()
                check_can_run(policy, track)
                seat = Seat.within(policy, budget, track, None, None, limits)
                played = PlayedRun(seat, self.name, seat.store())
                player = stepper(played, 0, self.untimed, False, message["reasons"])
                next(player)
                self.runs.append(_Run(index, policy, played, (e, track), player.send))
                context = EpisodeContext(
                    length=message["length"],
                    budget_bytes=budget,
                    track=track,
                    episode_id=message["episode_id"],
                    episode=episode,
                    stream=self.copies[e, track].stream() if streams else None,
                    **seat.limit_fields(),
                )
                start = getattr(policy, "start_episode", None)
                if start is not None:
                    start(context)
        return {"ok": True}

    def step(self, t: int, steps: dict[int, dict[str, tuple[Any, ...]]]) -> dict[str, Any]:
        current: dict[tuple[int, str], tuple[Step, Step]] = {}  # (shown, canonical) per key
        observations = self.observations
        for e, by_track in steps.items():
            for track, shown in by_track.items():
                if len(shown) == 4:  # first sight (kept even where this policy has no run)
                    observations[shown[0]] = (shown[3], observation_json(Step(t, shown[3])))
                known = self.canonical.get((e, track))
                if known is None:
                    continue  # no run of this policy there
                if len(known) == t:  # a stream sent up front already has it
                    obs, text = observations[shown[0]]
                    step = Step(t, obs, shown[1])
                    # The evaluator's figures: the same object serialised once, its cost priced there.
                    step.__dict__["_observation_json"] = text
                    step.__dict__["_write_cost"] = shown[2]
                    known.append(step)
                current[e, track] = (self.copies[e, track].step(t), known[t])
        seconds = self.limits.max_seconds_per_step
        writes, replies, stopped = [], [], []
        if seconds is not None:  # one timer for the message: re-armed run by run only when it fires
            self.started = perf_counter()
            signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            for run in self.runs:
                pair = current.get(run.key)
                if run.stopped or pair is None:
                    continue
                sink: list[list[Any]] = []
                self.started = perf_counter()
                try:
                    run.send((pair[0], pair[1], sink))
                except StopIteration:  # a limit stopped it (played.error says which)
                    pass
                except _Timeout:
                    run.played.error = PolicyLimitError(
                        self.name, t, f"spent more than {seconds:g} s deciding one timestep"
                    )
                except MemoryError:
                    if self.memory_bytes is None:
                        raise
                    # The sandbox's limit, as the time limit: this run stops, the others go on.
                    run.played.error = PolicyLimitError(
                        self.name, t, f"ran out of memory (its sandbox allows {_size(self.memory_bytes)} of address space)"
                    )
                if run.played.error is not None:
                    run.stopped = True
                    stopped.append([run.index, run.played.error.message])
                if sink:  # a run that did nothing is not named: most runs, most steps
                    if sink == ONE_WRITE:
                        writes.append(run.index)
                    else:
                        replies.append([run.index, sink])
        finally:
            if seconds is not None:
                signal.setitimer(signal.ITIMER_REAL, 0)
        return {"writes": writes, "actions": replies, "stopped": stopped}

    def on_alarm(self, signum: int, frame: Any) -> None:
        # The run being played is over its time: interrupt it. Otherwise the time went to runs
        # before it, and the timer is set again for what is left of this run's own time.
        left = self.limits.max_seconds_per_step - (perf_counter() - self.started)
        if left <= 0:
            raise _Timeout
        signal.setitimer(signal.ITIMER_REAL, left)

    def end(self, metrics: dict[str, dict[str, float]]) -> dict[str, Any]:
        for run in self.runs:
            end = getattr(run.policy, "end_episode", None)
            if not run.stopped and end is not None and str(run.index) in metrics:
                end(EpisodeOutcome(metrics=metrics[str(run.index)], rewards=None))
        return {"ok": True}


def _size(n: int) -> str:
    return f"{n / (1 << 30):g} GiB" if n >= 1 << 30 else f"{n / (1 << 20):g} MiB"


def serve(
    conn: Any, factory: bytes, limits: RunLimits, plan: Plan | None = None, parent: int | None = None,
    label: str = "?",
) -> None:
    """The policy process's main loop (the target of its ``multiprocessing`` process; ``parent``:
    the evaluator's process id, read there before this process was started; ``label``: the
    policy's, which marks the lines it prints).

    With a sandbox ``plan``, this process first moves into a new sandbox
    (``wpb_gym.evaluation.isolated.sandbox``); the rest, from unpickling the factory on, runs
    there, in the sandbox's first process."""
    if plan is not None:
        enter(plan, [conn.fileno()], parent, label)  # returns inside (the process outside waits, then exits)
    else:
        from ..child_processes import end_with_parent

        end_with_parent(parent)
    # What the process inherited (the fork server's imported modules) is never garbage: kept
    # out of every collection, its pages are not copied by the collector's visits either.
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the evaluator decides when to stop, not a Ctrl-C
    server = PolicyServer(factory, limits, plan.sandbox.memory_bytes if plan is not None else None)
    signal.signal(signal.SIGALRM, server.on_alarm)
    handlers = {"probe": server.probe, "begin": server.begin, "step": server.step, "end": server.end}
    while True:
        try:
            kind, *arguments = pickle.loads(conn.recv_bytes())  # the evaluator's own messages
        except (EOFError, OSError):
            return
        try:
            reply = handlers[kind](*arguments)
        except PolicyFailure as error:  # said whole by its message
            reply = {"error": f"{type(error).__name__}: {error}"}
        except BaseException as error:  # noqa: BLE001 - everything the policy raises goes back as text
            reply = {"error": "".join(traceback.format_exception(error)).rstrip()}
        try:
            text = json.dumps(reply, allow_nan=False, separators=(",", ":"))
        except (ValueError, TypeError) as error:  # e.g. a reason that is not JSON text
            text = json.dumps({"error": f"the policy's reply is not JSON: {error}"})
        try:
            conn.send_bytes(text.encode("utf-8"))
        except OSError:
            return
