"""What the evaluator does with the replies of a policy's process in isolated evaluation.

A reply is the policy's data: ``take`` checks it field by field and keeps each run's actions
on a backlog; once a batch of episodes is over, each run's backlog is judged on the
evaluator's own memory, run by run (a memory's decisions depend only on its own actions, so
the result is the same as judging timestep by timestep, and one run's memory stays in the
processor's caches while it is judged: on a replay of the paper grid's actions, about a third
less time than interleaved).

Two judges share the rules of spec §6.3. ``judge_on_store`` applies the actions to a
``ByteMemoryStore``: it handles MERGE and keeps items and an action log. ``judge_on_ledger``
is for when only the metrics are wanted (an evaluation grid): a ``Ledger`` holds which
timesteps are stored and what each costs, nothing more (a WRITE of the current step is
accepted when its timestep is free and its cost fits; an EXPIRE when its target is stored
and older than the current step; a SKIP always). That halved the evaluator's time on the
paper grid (``benchmarks/eval_grid.py --isolate``). A run that merges goes to the store.
``tests/evaluation/test_judging.py`` checks that both judges agree on every decision, the
memory they leave and the counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ...core.types import Step
from ..playing import LoggedAction, PlayedRun
from ..referee import PolicyError, PolicyLimitError, apply, as_action
from .wire import ONE_WRITE, WROTE, decode_action

__all__ = ["Ledger", "judge_on_ledger", "judge_on_store", "take"]

# One run's actions as kept from the replies, in the order taken: (t, actions), where
# actions is None for ``wire.ONE_WRITE``, one accepted WRITE of the step.
Backlog = list[tuple[int, Any]]


def take(
    reply: dict[str, Any],
    runs: Sequence[PlayedRun],
    mine: set[int],
    t: int,
    backlog: Sequence[Backlog],
    label: str,
    max_actions: float,
    held: list[int],
) -> tuple[bool, int]:
    """Check one process's reply for ``t`` field by field and put each run's actions on its
    backlog (``runs[k]``, ``backlog[k]`` and ``held[k]``, the number of actions its backlog
    holds, for run ``k``; ``mine``: the runs the process plays). A run over ``max_actions`` or
    stopped in its process gets its ``error``, and none of its actions at ``t`` is kept.
    Returns whether a run was stopped and how many actions were kept; a malformed reply is a
    ``PolicyError``."""
    writes, actions, stopped = reply.get("writes"), reply.get("actions"), reply.get("stopped")
    if type(writes) is not list or type(actions) is not list or type(stopped) is not list:
        raise PolicyError(label, t, "its process sent a reply without 'writes', 'actions' and 'stopped' lists")
    seen: set[int] = set()
    any_stopped = False
    kept = len(writes)
    for k in writes:  # one accepted WRITE of the step each (wire.ONE_WRITE): most runs, most steps
        if type(k) is not int or k not in mine or k in seen:
            _run_entry([k, ()], mine, seen, label, t)  # raises, naming what is wrong
        seen.add(k)
        backlog[k].append((t, None))
        held[k] += 1
    for entry in actions:
        k, taken = _run_entry(entry, mine, seen, label, t)
        if len(taken) > max_actions:
            runs[k].error = PolicyLimitError(label, t, f"yielded more than {max_actions} actions at one timestep")
            any_stopped = True
            continue
        backlog[k].append((t, taken))
        held[k] += len(taken)
        kept += len(taken)
    for entry in stopped:
        k, text = _run_entry(entry, mine, set(), label, t)
        if not isinstance(text, str):
            raise PolicyError(label, t, "its process sent a malformed stop")
        runs[k].error = PolicyLimitError(label, t, text)
        any_stopped = True
    return any_stopped, kept


def judge_on_store(run: PlayedRun, backlog: Backlog, steps: Sequence[Step], record: bool) -> None:
    """Apply one run's actions to its store (``run.store``), in the order taken; ``steps``:
    the run's canonical steps. Sets ``run.diverged_at`` where the policy's replica decided
    otherwise and, with ``record``, logs every action (``run.actions``)."""
    store, label = run.store, run.name
    write = store.write
    for t, taken in backlog:
        step = steps[t]
        if taken is None and not record:  # wire.ONE_WRITE
            if not write(step, t, None, shown=step).accepted and run.diverged_at is None:
                run.diverged_at = t
            continue
        for raw in ONE_WRITE if taken is None else taken:
            decoded = decode_action(raw)
            if decoded is None:
                raise PolicyError(label, t, f"its process sent a malformed action: {raw!r:.200}")
            plain, accepted = decoded
            if plain[0] == "WRITE" and plain[2] is None and not record:
                decision = write(step, t, plain[3], shown=step)
            else:
                decision = apply(store, plain, t, step, step)
                if record:
                    run.actions.append(LoggedAction(t, as_action(plain, step), decision))
            if decision.accepted is not accepted and run.diverged_at is None:
                run.diverged_at = t


class Ledger:
    """What the metrics of a run read from its final memory (``compute_metrics``): the stored
    timesteps, the bytes they use, the budget, and the accepted and rejected actions by kind."""

    def __init__(self, max_bytes: int, costs: dict[int, int], counts: tuple[Counter[str], Counter[str]]) -> None:
        self.max_bytes = max_bytes
        self._costs = costs  # timestep -> cost, in the order written (so, by timestep)
        self.bytes_used = sum(costs.values())
        self.accepted_counts, self.rejected_counts = counts

    def timesteps(self) -> tuple[int, ...]:
        return tuple(self._costs)

    def retained_timesteps(self) -> tuple[int, ...]:
        return tuple(self._costs)  # without MERGE items, every stored item counts (spec §4.1)

    def __len__(self) -> int:
        return len(self._costs)


def judge_on_ledger(
    backlog: Sequence[tuple[int, Any]], costs: Sequence[int], budget: int, label: str
) -> tuple[Ledger, int | None] | None:
    """Judge one run's actions, in the order taken, on a ``Ledger``.

    ``backlog``: as ``take`` keeps it; ``costs[t]``: the WRITE cost of step ``t``
    on the run's track. Returns the ledger and the first timestep at which the policy's replica
    decided otherwise (None if never), or None when the run merges or compresses (the store
    judges it then).
    A malformed action is a ``PolicyError``, as in the store's judge.
    """
    held: dict[int, int] = {}
    used = 0
    counts = dict.fromkeys(("WRITE", "EXPIRE", "SKIP"), 0)  # accepted, by kind
    refused = dict.fromkeys(("WRITE", "EXPIRE", "SKIP"), 0)
    diverged_at = None
    for t, taken in backlog:
        if taken is None:  # wire.ONE_WRITE: most runs, most timesteps
            cost = costs[t]
            if t not in held and cost <= budget - used:
                held[t] = cost
                used += cost
                counts["WRITE"] += 1
            else:
                refused["WRITE"] += 1
                if diverged_at is None:
                    diverged_at = t
            continue
        for raw in taken:
            if type(raw) is int and raw >= WROTE:  # an accepted EXPIRE or WRITE: read undecoded
                kind = "EXPIRE" if raw >= 0 else "WRITE"
                target, claimed = raw, True
            else:
                decoded = decode_action(raw)
                if decoded is None:
                    raise PolicyError(label, t, f"its process sent a malformed action: {raw!r:.200}")
                (kind, target, extra, _), claimed = decoded
                if kind == "MERGE" or extra is not None:  # a MERGE, or a compressed WRITE
                    return None
            if kind == "WRITE":
                cost = costs[t]
                ok = t not in held and cost <= budget - used
                if ok:
                    held[t] = cost
                    used += cost
            elif kind == "EXPIRE":
                cost = held.get(target)
                ok = cost is not None and target < t
                if ok:
                    del held[target]
                    used -= cost
            else:
                ok = True
            if ok:
                counts[kind] += 1
            else:
                refused[kind] += 1
            if ok is not claimed and diverged_at is None:
                diverged_at = t
    accepted = Counter({kind: n for kind, n in counts.items() if n})
    rejected = Counter({kind: n for kind, n in refused.items() if n})
    return Ledger(budget, held, (accepted, rejected)), diverged_at


def _run_entry(entry: Any, mine: set[int], seen: set[int], label: str, t: int) -> tuple[int, Any]:
    if type(entry) is not list or len(entry) != 2:
        raise PolicyError(label, t, "its process sent a malformed reply")
    k, taken = entry
    if type(k) is not int or k not in mine:  # (a JSON true would pass as 1 without the type check)
        raise PolicyError(label, t, "its process named a run that is not its own")
    if k in seen:
        raise PolicyError(label, t, "its process answered twice for one run")
    seen.add(k)
    if type(taken) is not list and type(taken) is not str:
        raise PolicyError(label, t, "its process sent malformed actions")
    return k, taken
