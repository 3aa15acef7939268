"""Isolated evaluation: every policy in its own process, handed only what it may see.

In one process a policy can reach what the evaluator holds (the store behind its view, the
labels through the interpreter's frames or the garbage collector). Here each policy runs in a
process of its own that holds nothing of the evaluator's memory (forked from a fork server,
itself a fresh interpreter, or spawned where there is none), and the evaluator sends it, one
timestep at a time, only the step as the policy's track shows it — never a label, never a
later step. In its process the policy reads a replica of its memory, kept by the same store
code from its own actions; it sends its actions back as plain JSON, and the evaluator judges
them on its own canonical memory (``wpb_gym.evaluation.isolated.judging``). Whatever the policy
does to its process (its replica included) changes nothing that is scored; a run whose replica no
longer agrees with the evaluator's decisions is reported as diverged.

Per timestep, ``RunLimits`` bounds each run's actions and wall time. Time is enforced inside
the policy's process (an interval timer interrupts a policy that blocks), and the evaluator
stops a process that does not answer at all: its runs on that episode are stopped and a fresh
process serves the next episode. Nothing hangs, and a policy's process ends with the
evaluator's (``wpb_gym.evaluation.child_processes``).

What crosses back is JSON, decoded without ``pickle``: a policy's process cannot run code in
the evaluator. A process alone is not a sandbox (it could read the evaluator's command line
under ``/proc``, the episode files and the run folder, and leave processes behind): where the
platform allows, each policy's process also runs in a sandbox of Linux namespaces and resource
limits (``wpb_gym.evaluation.isolated.sandbox``), which it enters before its factory is
unpickled. The runs of one policy share its process and advance in lockstep (every budget and
track of a batch of episodes at once), so none is shown a step before its time; a policy that
follows the rules gets exactly the results it gets in process (``wpb_gym.evaluation.playing``).
"""

from __future__ import annotations

import json
import os
import pickle
import select
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from math import ceil
from time import monotonic, sleep
from typing import Any

from ...core.accounting import estimate_bytes
from ...core.store_limits import LIMIT_NAMES, StoreLimits
from ...core.policy import ORACLE, POLICY_TRACKS, policy_name, policy_track
from ...core.readonly import thaw
from ...core.tracks import plain_track, policy_episode
from ...core.types import Episode, Step
from ...scoring.queries import has_queries
from ..playing import EpisodeRun, PlayedRun, Seat, outcome_metrics, score
from ..referee import DEFAULT_LIMITS, MAX_REASON_CHARS, PolicyError, PolicyLimitError, RunLimits
from .judging import Backlog, judge_on_ledger, judge_on_store, take
from .output import quoted
from .policy_process import serve
from .processes import CONTEXT, start_fork_server
from .sandbox import AUTO, Sandbox, modules_of, resolve_sandbox
from .sandbox import plan as sandbox_plan

__all__ = ["IsolatedPolicies", "PickledPolicy", "run_isolated"]


_MAX_REPLY_BYTES = 1 << 28  # a reply larger than this is refused, not read into memory
# What one action can take on the wire, beyond its reason and a MERGE's delta (the widest form,
# [2,false,null,<a 64-bit target>,null,false], is 46 characters), and the reply's own fields
# besides its actions (the list of runs that wrote, the stops and their messages).
_ACTION_BYTES = 64
_REPLY_SLACK = 1 << 20
# The actions a batch keeps, over all its runs, before judging them (``judging.take``): past
# it, a run holding more than _RUN_HELD_ACTIONS (honest runs take one or two actions a step)
# is judged on its store when its process next replies, and from then on as its actions come. A
# policy may take RunLimits' max_actions_per_step at every step (10,000 by default, say 9,999
# refused EXPIREs): kept to the end of the batch, four 200-step runs of it held 8 million
# actions, about a gigabyte.
_MAX_HELD_ACTIONS = 1 << 18
_RUN_HELD_ACTIONS = 1 << 12
_GRACE_SECONDS = 5.0  # beyond the policies' own limits, before a silent process is stopped
_START_SECONDS = 120.0  # to start a process and build the policy once (imports, model files)

_TRANSFER_SECONDS = 10.0  # a message, once it has begun to cross the pipe, crosses within this
_NEVER = float("inf")



# (policy index, track, budget): one run of a plan
Plan = Sequence[tuple[int, str, int]]


class PickledPolicy:
    """A policy factory that rebuilds one pickled policy object: each call a fresh copy."""

    def __init__(self, policy: Any) -> None:
        try:
            self.data = pickle.dumps(policy)
        except Exception as error:  # noqa: BLE001 - pickling runs the policy's own code
            raise ValueError(
                f"policy {policy_name(policy)!r} cannot be sent to its own process: it does not pickle "
                f"({type(error).__name__}: {error}); define it at module level, with picklable attributes"
            ) from None

        self.modules = modules_of(policy)  # the code it needs: shown read-only in a sandbox

    def __call__(self) -> Any:
        return pickle.loads(self.data)

    def _sandbox_modules(self) -> tuple[str, ...]:
        return self.modules


class _NoAnswer(Exception):
    pass


class _TooLong(PolicyLimitError):
    """A reply longer than the limits allow, refused unread: its process is out of step."""


class _Watchdog:
    """Stops a policy's process that holds the evaluator in a pipe transfer. Once a reply has
    begun (``poll`` said readable) reading it cannot time out, and a message to a process that
    stops reading fills the pipe and blocks: a process can stall either on purpose (a length
    header and no body). A thread of the evaluator's (one per process, started on first use)
    kills the process when a transfer outlasts ``_TRANSFER_SECONDS``; the transfer then ends
    with an error naming the policy."""

    def __init__(self) -> None:
        self.watched: tuple[Any, float] | None = None  # (process, when to stop it)
        self.stopped: set[int] = set()  # pids it stopped
        self._pid: int | None = None

    def watch(self, process: Any) -> None:
        if self._pid != os.getpid():  # (a forked child has no thread of its parent's)
            self._pid = os.getpid()
            threading.Thread(target=self._run, name="wpb-pipe-watchdog", daemon=True).start()
        self.watched = (process, monotonic() + _TRANSFER_SECONDS)

    def _run(self) -> None:
        while True:
            sleep(0.1)
            watched = self.watched
            if watched is not None and monotonic() > watched[1]:
                self.stopped.add(watched[0].pid)
                watched[0].kill()


_WATCHDOG = _Watchdog()


class PolicyWorker:
    """The evaluator's handle on one policy's process; with a ``sandbox``, that process runs the
    policy in a sandbox of its own (``wpb_gym.evaluation.isolated.sandbox``)."""

    def __init__(
        self, label: str, factory: Callable[[], Any], limits: RunLimits, sandbox: Sandbox | None = None
    ) -> None:
        self.label, self.sandbox = label, sandbox
        # The factory crosses pickled and is unpickled only in the policy's process (in its
        # sandbox, if any): unpickling imports the policy's module, which is the policy's code.
        data = pickle.dumps(factory, protocol=pickle.HIGHEST_PROTOCOL)
        where = sandbox_plan(sandbox, factory) if sandbox is not None else None
        self.conn, child = CONTEXT.Pipe(duplex=True)
        self.process = CONTEXT.Process(
            target=serve, args=(child, data, limits, where, os.getpid(), label), name=f"wpb-policy-{label}", daemon=True
        )
        if sandbox is not None:
            start_fork_server()
        # multiprocessing hands a child this process's command line (sys.argv): the policy's
        # process never gets it (a seed given on it would be the episodes).
        argv, sys.argv = sys.argv, sys.argv[:1]
        try:
            self.process.start()
        finally:
            sys.argv = argv
        child.close()
        self.info: dict[str, Any] = {}

    def send(self, data: bytes) -> None:
        _WATCHDOG.watch(self.process)
        try:
            self.conn.send_bytes(data)
        except OSError:
            pass  # a dead process: receive() says so
        finally:
            _WATCHDOG.watched = None

    def receive(self, timeout: float | None, t: int | None, max_bytes: int = _MAX_REPLY_BYTES) -> dict[str, Any]:
        """The process's next reply; one longer than ``max_bytes`` is refused from its length
        header, before it is read (a ``PolicyLimitError``: the process is then out of step)."""
        try:
            if not self.conn.poll(timeout):
                raise _NoAnswer
            _WATCHDOG.watch(self.process)
            try:
                data = self.conn.recv_bytes(max_bytes)
            finally:
                _WATCHDOG.watched = None
        except OSError as error:
            if str(error) == "bad message length" and self.process.is_alive():  # recv_bytes' word for it
                raise _TooLong(
                    self.label, t, f"its process sent a reply of more than {max_bytes:,} bytes, more than "
                    "the actions the limits allow at one timestep can take"
                ) from None
            raise self._ended(error, t) from None
        except EOFError as error:
            raise self._ended(error, t) from None
        return self._decoded(data, t)

    def _ended(self, error: BaseException, t: int | None) -> PolicyError:
        self.process.join(1.0)
        if self.process.pid in _WATCHDOG.stopped:
            why = f"a message on its pipe (a reply begun, or one sent to it) stalled for {_TRANSFER_SECONDS:g} s"
            return PolicyLimitError(self.label, t, f"its process was stopped: {why}")
        code = self.process.exitcode
        if code == -signal.SIGXCPU and self.sandbox is not None:
            limit = self.sandbox.cpu_seconds
            return PolicyLimitError(
                self.label, t, f"its process was killed for using more than the {limit} s of CPU time its sandbox allows"
            )
        return PolicyError(self.label, t, f"its process ended unexpectedly (exit code {code}; {type(error).__name__})")

    def _decoded(self, data: bytes, t: int | None) -> dict[str, Any]:
        try:
            reply = json.loads(data)
        except Exception:  # noqa: BLE001 - a reply too deep or not JSON at all
            raise PolicyError(self.label, t, "its process sent a reply that is not JSON") from None
        if not isinstance(reply, dict):
            raise PolicyError(self.label, t, "its process sent a reply that is not a JSON object")
        if "error" in reply:
            # The policy's own text (an exception's message is the policy's to choose): quoted as such.
            raise PolicyError(self.label, t, f"raised in its process:\n{quoted(self.label, str(reply['error']))}")
        return reply

    def stop(self) -> None:
        self.conn.close()
        self.process.kill()
        self.process.join(5.0)


class IsolatedPolicies:
    """One process per policy (``(label, factory)`` pairs) and track it plays, reused episode
    after episode. A policy played on two tracks gets a process for each: runs that share a
    process share the policy's memory, and an unprivileged policy's privileged runs would
    otherwise hand their hints to its unprivileged ones.

    ``play(episode, plan)`` runs the plan's ``(policy index, track, budget)`` runs over
    ``episode``; ``play_many`` several episodes at once (in lockstep: one message per policy
    and timestep for all of them); ``end(runs, results)`` reports the metrics to the policies'
    hooks. Use it as a context manager, or call ``close()``.
    """

    def __init__(
        self,
        policies: Sequence[tuple[str, Callable[[], Any], str | None]],
        limits: RunLimits = DEFAULT_LIMITS,
        sandbox: Sandbox | None = None,
    ) -> None:
        # The track of each policy as the evaluator knows it (its registry entry, or the
        # object it was given): the labels go to a process only on this word, never on the
        # process's own, and a process that declares another track is refused. None: the
        # process's word is taken, except for the oracle track (a model file's track).
        self.policies = [(label, factory) for label, factory, _ in policies]
        self.tracks = [None if track is None else plain_track(track) for _, _, track in policies]
        for (label, _), track in zip(self.policies, self.tracks, strict=True):
            if track is not None and track not in POLICY_TRACKS:
                raise ValueError(f"policy {label!r}: track {track!r}; expected one of {POLICY_TRACKS}")
        self.limits, self.sandbox = limits, sandbox
        # (policy, track) -> its process; (policy, None): one asked what it declares, which has
        # played no run yet and is taken for the first track the policy plays.
        self._workers: dict[tuple[int, str | None], PolicyWorker] = {}

    def __enter__(self) -> IsolatedPolicies:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        while self._workers:
            self._workers.popitem()[1].stop()

    def info(self, index: int) -> dict[str, Any]:
        """What policy ``index`` declares (``name``, ``track``, ``needs_stream``), from its process."""
        for (i, _), worker in self._workers.items():
            if i == index:
                return worker.info
        return self._start([(index, None)])[0].info

    def _start(self, slots: Sequence[tuple[int, str | None]]) -> list[PolicyWorker]:
        fresh = []
        for slot in slots:
            if slot not in self._workers:
                i = slot[0]
                if slot[1] is not None and (i, None) in self._workers:  # asked, never played: any track's
                    self._workers[slot] = self._workers.pop((i, None))
                    continue
                label, factory = self.policies[i]
                self._workers[slot] = PolicyWorker(label, factory, self.limits, self.sandbox)
                fresh.append(self._workers[slot])
        probe = pickle.dumps(("probe",))
        for worker in fresh:  # started together: they import in parallel
            worker.send(probe)
        for worker in fresh:
            try:
                worker.info = _checked_info(worker.receive(_START_SECONDS, None), worker.label)
            except (_NoAnswer, PolicyError) as error:
                self._discard(worker)
                reason = "it did not start in time" if isinstance(error, _NoAnswer) else str(error)
                raise PolicyError(worker.label, None, f"its process could not build the policy: {reason}") from None
            expected = self.tracks[self._slot(worker)[0]]
            if worker.info["track"] != expected and (expected is not None or worker.info["track"] == ORACLE):
                self._discard(worker)
                raise PolicyError(
                    worker.label,
                    None,
                    f"its process declares the {worker.info['track']} track, the evaluator knows it as "
                    f"{expected or 'not an oracle'}",
                )
        return [self._workers[slot] for slot in slots]

    def _slot(self, worker: PolicyWorker) -> tuple[int, str | None]:
        return next(slot for slot, held in self._workers.items() if held is worker)

    def _discard(self, worker: PolicyWorker) -> None:
        worker.stop()
        del self._workers[self._slot(worker)]

    def _timeout(self, runs: int) -> float | None:
        seconds = self.limits.max_seconds_per_step
        return None if seconds is None else seconds * max(1, runs) + _GRACE_SECONDS

    def play(self, episode: Episode, plan: Plan, *, record_actions: bool = False,
             limits: StoreLimits | None = None) -> list[PlayedRun]:
        """Every ``(policy index, track, budget)`` of ``plan`` over ``episode``."""
        return self.play_many([(episode, plan)], record_actions=record_actions, limits=limits)[0]

    def play_many(
        self, items: Sequence[tuple[Episode, Plan]], *, record_actions: bool = False, stores: bool = True,
        limits: StoreLimits | None = None,
    ) -> list[list[PlayedRun]]:
        """``play`` for several episodes at once: their runs advance in lockstep.

        ``stores=False`` when only the metrics (and action counts) are wanted: a run that does
        not merge, on an episode without queries, is then judged on a ``Ledger``
        (``wpb_gym.evaluation.isolated.judging``), which becomes its ``store``; otherwise every
        run's ``store`` is its final ``ByteMemoryStore`` (the query score reads what it held at
        each checkpoint). ``limits``: kind budgets (resolved at each run's budget) or write time;
        the policy's process keeps its replica of memory under the same limits.
        """
        runs: list[PlayedRun] = []
        canonical: dict[tuple[int, str], Sequence[Step]] = {}
        begins: dict[tuple[int, str], list[Any]] = {}  # (policy, track) -> what it is told of each episode
        owned: dict[tuple[int, str], list[int]] = {}  # (policy, track) -> its runs
        for e, (episode, plan) in enumerate(items):
            for track in {track for _, track, _ in plan}:
                canonical[e, track] = policy_episode(episode, track).steps
            mine: dict[tuple[int, str], list[tuple[int, str, int]]] = {}
            for i, track, budget in plan:
                k = len(runs)
                label = self.policies[i][0]
                seat = Seat.within(None, budget, track, (e, i), label, limits)
                runs.append(PlayedRun(seat, label, seat.store()))
                mine.setdefault((i, track), []).append((k, track, budget))
                owned.setdefault((i, track), []).append(k)
            for slot in mine:
                begins.setdefault(slot, []).append((e, episode, mine[slot]))
        workers = dict(zip(owned, self._start(list(owned)), strict=True))
        # Reasons cross when something shows them: an action log, or the stored items.
        self._begin({workers[i]: entries for i, entries in begins.items()}, canonical, record_actions or stores,
                    limits)
        live = dict(owned)
        lengths = [len(episode) for episode, _ in items]

        # Generated streams show one observation object at many steps (25-40 objects in 200
        # steps): each goes over the wire once, then by its number, so that a policy's process
        # unpickles, freezes and serialises it once, as the in-process runner does. The step's
        # WRITE cost goes along: computed here once for every policy (canonical steps cache it).
        numbers: dict[int, int] = {}  # id(observation) -> its number (canonical keeps it alive)

        def shown(step: Step) -> tuple[Any, ...]:
            number = numbers.get(id(step.observation))
            if number is not None:
                return number, step.metadata, estimate_bytes(step)
            number = numbers[id(step.observation)] = len(numbers)
            return number, step.metadata, estimate_bytes(step), step.observation

        def message(t: int) -> bytes:
            steps = {
                e: {track: shown(s[t]) for (f, track), s in canonical.items() if f == e}
                for e, n in enumerate(lengths)
                if t < n
            }
            widest[t] = max((entry[2] for by_track in steps.values() for entry in by_track.values()), default=0)
            return pickle.dumps(("step", t, steps), protocol=pickle.HIGHEST_PROTOCOL)

        def reply_bytes(i: tuple[int, str], t: int) -> int:
            # The most a reply for t can hold within the limits, bounded before it is read: each
            # of the process's runs at most max_actions actions, each with its reason (up to
            # 12 bytes a character, escaped) and, for a MERGE, a delta no longer than the step's
            # WRITE text (the canonical delta is part of the observation; a longer one travels
            # as not JSON: wpb_gym.evaluation.playing.stepper).
            if max_actions == float("inf"):
                return _MAX_REPLY_BYTES
            action = _ACTION_BYTES + (12 * MAX_REASON_CHARS if reasons else 0) + widest[t]
            return min(_MAX_REPLY_BYTES, _REPLY_SLACK + len(live[i]) * int(max_actions) * action)

        # A policy's process gets step t + 1 as soon as its answer for t is in (never earlier, so
        # it cannot look ahead); the answer is checked and kept, and judged when the batch is over.
        # Each process goes at its own pace: replies are taken as they come, so a quick policy is
        # never held back by a slow one (on few cores, that kept a core idle at every timestep).
        longest = max(lengths, default=0)
        ends = set(lengths)  # the timesteps at which an episode of the batch is over
        steps_of = [canonical[run.seat.group[0], run.seat.track] for run in runs]
        mine = {i: set(ks) for i, ks in live.items()}
        backlog: list[Backlog] = [[] for _ in runs]
        max_actions = self.limits.max_actions_per_step or float("inf")
        # Judging waits for the end of the batch (one run's memory at a time), within a bound on
        # what it keeps: the actions each run holds, their total, and the runs judged on their
        # stores as their actions come since the total first passed it.
        held, on_store = [0] * len(runs), set()
        holding = 0
        reasons = record_actions or stores  # (as _begin tells the processes)
        built: dict[int, bytes] = {}  # each timestep's message, until every process has had it
        widest: dict[int, int] = {}  # each timestep's largest WRITE cost, as long as its message is kept
        # Below, ``i`` is a process: a (policy, track) pair.
        at: dict[tuple[int, str], int] = {}  # process -> the timestep it is deciding
        deadline: dict[tuple[int, str], float] = {}  # process -> when it is stopped if still silent

        def send(i: tuple[int, str], t: int) -> None:
            if t not in built:  # in order: a first sight goes in the first message that shows it
                built[t] = message(t)
            at[i] = t
            timeout = self._timeout(len(live[i]))
            deadline[i] = _NEVER if timeout is None else monotonic() + timeout
            workers[i].send(built[t])

        for i, ks in live.items():
            if ks and longest > 0:
                send(i, 0)
        poller, by_fd = select.poll(), {}  # kept for the batch (connection.wait builds one per call)
        for i in at:
            by_fd[workers[i].conn.fileno()] = i
            poller.register(workers[i].conn.fileno(), select.POLLIN)

        def done(i: tuple[int, str]) -> None:
            fd = workers[i].conn.fileno()
            poller.unregister(fd)
            del at[i], deadline[i], by_fd[fd]

        oldest = 0  # the first message still kept
        while at:
            soonest = min(deadline.values())
            ready = poller.poll(None if soonest == _NEVER else max(0, ceil((soonest - monotonic()) * 1000)))
            if min(deadline.values()) <= monotonic():  # processes over their time: stopped, their runs with them
                answered = {by_fd[fd] for fd, _ in ready}  # (even while others keep answering)
                for i in [i for i in at if deadline[i] <= monotonic() and i not in answered]:
                    worker, t = workers[i], at[i]
                    done(i)
                    self._discard(worker)
                    for k in live[i]:
                        runs[k].error = PolicyLimitError(
                            worker.label, t, "its process did not answer within the time limit and was stopped"
                        )
                    live[i], mine[i] = [], set()
            for fd, _ in ready:
                i = by_fd[fd]
                worker, t, ks = workers[i], at[i], live[i]
                try:
                    reply = worker.receive(0.0, t, reply_bytes(i, t))  # ready: an answer, or a dead process (an error)
                except _TooLong as error:  # its process is out of step: stopped, its runs with it
                    done(i)
                    self._discard(worker)
                    for k in ks:
                        runs[k].error = PolicyLimitError(error.policy, error.t, error.message)
                    live[i], mine[i] = [], set()
                    continue
                going = ks if t + 1 not in ends else [k for k in ks if t + 1 < lengths[runs[k].seat.group[0]]]
                stopped, kept = take(reply, runs, mine[i], t, backlog, worker.label, max_actions, held)
                if stopped:
                    going = [k for k in going if runs[k].error is None]
                holding += kept
                if holding > _MAX_HELD_ACTIONS or on_store:
                    over = holding > _MAX_HELD_ACTIONS
                    # Over the bound, any process's runs that hold many (a policy's other track is
                    # another process, whose runs may hold most); else this one's, judged on their
                    # stores, as their actions come.
                    for k in range(len(runs)) if over else ks:
                        if held[k] and (k in on_store or (over and held[k] > _RUN_HELD_ACTIONS)):
                            judge_on_store(runs[k], backlog[k], steps_of[k], record_actions)
                            backlog[k].clear()
                            holding -= held[k]
                            held[k] = 0
                            on_store.add(k)
                if going is not ks:
                    live[i], mine[i] = going, set(going)
                if t + 1 < longest and going:
                    send(i, t + 1)
                else:
                    done(i)
            behind = min(at.values(), default=longest)
            while oldest < behind:  # every process still going has had these
                built.pop(oldest, None)
                widest.pop(oldest, None)
                oldest += 1
        costs = {}
        if not (stores or record_actions or limits):  # the ledger judges the total budget only
            # Queries are answered from what memory held at each checkpoint, which only the store keeps.
            costs = {
                key: [estimate_bytes(step) for step in steps]
                for key, steps in canonical.items()
                if not has_queries(items[key[0]][0])
            }
        for k, (run, taken, steps) in enumerate(zip(runs, backlog, steps_of, strict=True)):
            key = run.seat.group[0], run.seat.track
            if key in costs and k not in on_store:
                judged = judge_on_ledger(taken, costs[key], run.seat.budget, run.name)
                if judged is not None:  # None: the run merges
                    run.store, run.diverged_at = judged
                    continue
            judge_on_store(run, taken, steps, record_actions)
        nested: list[list[PlayedRun]] = [[] for _ in items]
        for run in runs:
            nested[run.seat.group[0]].append(run)
        return nested

    def _begin(self, entries: dict[PolicyWorker, list[tuple[int, Episode, list[tuple[int, str, int]]]]], canonical, record,
               limits: StoreLimits | None = None):
        """Tell each process its runs of the batch: sent to all of them, then answered (each
        builds its policies and calls ``start_episode`` while the others do)."""
        deadlines = {}
        for worker, episodes in entries.items():
            messages = []
            for e, episode, runs in episodes:
                tracks = sorted({track for _, track, _ in runs})
                streams = None
                if worker.info["needs_stream"]:
                    streams = {track: [(s.observation, s.metadata) for s in canonical[e, track]] for track in tracks}
                whole = None
                if self.tracks[self._slot(worker)[0]] == ORACLE:  # an upper bound: it reads the labels
                    whole = {"steps": [s.to_dict() for s in episode.steps], "labels": episode.labels}
                messages.append(
                    {
                        "e": e,
                        "tracks": tracks,
                        "streams": streams,
                        "episode": whole,
                        "length": len(episode),
                        "episode_id": thaw(episode.episode_id),
                        "runs": runs,
                        "reasons": record,  # only an action log or stored items show them
                        "limits": limits.text() if limits else None,
                    }
                )
            timeout = self._timeout(sum(len(m["runs"]) for m in messages))
            deadlines[worker] = None if timeout is None else monotonic() + timeout
            worker.send(pickle.dumps(("begin", messages), protocol=pickle.HIGHEST_PROTOCOL))
        self._gather(deadlines, "start_episode did not return within the time limit")

    def end(self, runs: Sequence[PlayedRun], results: Sequence[EpisodeRun]) -> None:
        """Report each run's metrics to its policy's ``end_episode`` (in the policy's process);
        ``runs`` in the order ``play`` / ``play_many`` returned them (flattened)."""
        by_process: dict[tuple[int, str], dict[str, dict[str, float]]] = {}
        for k, (run, result) in enumerate(zip(runs, results, strict=True)):
            by_process.setdefault((run.seat.group[1], run.seat.track), {})[str(k)] = outcome_metrics(result)
        deadlines = {}
        for slot, metrics in by_process.items():  # sent to all, then answered: they run at once
            worker = self._workers.get(slot)
            if worker is None:
                continue  # stopped during the episode: its runs are not called again
            timeout = self._timeout(len(metrics))
            deadlines[worker] = None if timeout is None else monotonic() + timeout
            worker.send(pickle.dumps(("end", metrics), protocol=pickle.HIGHEST_PROTOCOL))
        self._gather(deadlines, None)

    def _gather(self, deadlines: dict[PolicyWorker, float | None], silence: str | None) -> None:
        """Every answer to a message sent to several processes, each read before the first
        error is raised (an answer left unread would be taken for the next one). A process
        silent past its deadline is stopped: an error saying ``silence``, or none if None."""
        first = None
        for worker, deadline in deadlines.items():
            try:
                worker.receive(None if deadline is None else max(0.0, deadline - monotonic()), None)
            except _NoAnswer:
                self._discard(worker)
                if silence is not None and first is None:
                    first = PolicyError(worker.label, None, silence)
            except PolicyError as error:
                first = first or error
        if first is not None:
            raise first


def _checked_info(reply: dict[str, Any], label: str) -> dict[str, Any]:
    info = {"name": reply.get("name"), "track": reply.get("track"), "needs_stream": reply.get("needs_stream"),
            "limits": reply.get("limits", [])}
    if not isinstance(info["name"], str) or info["track"] not in ("unprivileged", "privileged", "oracle"):
        raise PolicyError(label, None, f"its process described the policy as {reply!r:.200}")
    limits = info["limits"]
    if (not isinstance(info["needs_stream"], bool) or not isinstance(limits, list)
            or not all(name in LIMIT_NAMES for name in limits)):
        raise PolicyError(label, None, f"its process described the policy as {reply!r:.200}")
    info["limits"] = tuple(limits)
    return info


def run_isolated(
    episode: Episode,
    seat: Seat,
    *,
    oracle_utility: float | None = None,
    limits: RunLimits = DEFAULT_LIMITS,
    record_actions: bool = True,
    sandbox: Sandbox | None | str = AUTO,
) -> EpisodeRun:
    """``run_episode`` for one policy object, in a process of its own (see the module docstring),
    sandboxed by default where the platform allows (``sandbox``: see ``resolve_sandbox``)."""
    policy = (seat.label or policy_name(seat.policy), PickledPolicy(seat.policy), policy_track(seat.policy))
    with IsolatedPolicies([policy], limits, resolve_sandbox(sandbox)) as pool:
        (run,) = pool.play(episode, [(0, seat.track, seat.budget)], record_actions=record_actions,
                           limits=seat.limits())
        result = score(run, episode, oracle_utility)
        pool.end([run], [result])
    return result
