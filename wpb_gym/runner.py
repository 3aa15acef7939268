"""The offline evaluator's inner loop (spec §6.3): one policy over one episode at one budget.

Each step is shown to the policy as its track sees it; every action is applied the moment
the policy yields it, so a generator resumes on the memory its earlier actions made. The
final memory is scored with the benchmark's metrics against the hidden labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from .metrics import EpisodeMetrics, compute_metrics
from .oracle import oracle_utility as _oracle_utility
from .policy import EpisodeOutcome, call_hook, check_action, check_can_run, episode_context
from .store import ByteMemoryStore, Decision
from .tracks import UNPRIVILEGED, policy_episode, track_costs
from .types import Episode, MemoryAction


class LoggedAction(NamedTuple):
    """An action the policy yielded at ``t`` and the store's decision on it."""

    t: int
    action: MemoryAction
    decision: Decision


@dataclass(frozen=True)
class EpisodeRun:
    """The outcome of ``run_episode``: the metrics, the final memory and every action applied."""

    metrics: EpisodeMetrics
    store: ByteMemoryStore
    actions: tuple[LoggedAction, ...]


def run_episode(
    policy: Any,
    episode: Episode,
    budget_bytes: int,
    track: str = UNPRIVILEGED,
    *,
    oracle_utility: float | None = None,
    record_actions: bool = True,
) -> EpisodeRun:
    """Run ``policy`` over ``episode`` with a ``budget_bytes`` memory on ``track``.

    ``oracle_utility`` (U*(B) on ``track``) may be passed when it is already known, e.g. when
    several policies share an episode; it is computed otherwise. With ``record_actions``
    False the run keeps no action log (``actions`` is empty; the store still counts them).
    """
    check_can_run(policy, track)
    stream = policy_episode(episode, track)
    store = ByteMemoryStore(budget_bytes)
    view = store.view()
    log: list[LoggedAction] = []
    call_hook(policy, "start_episode", episode_context(policy, episode, stream, budget_bytes, track))
    select, execute, record = policy.select, store.execute, log.append
    for step in stream.steps:
        t = step.t
        # A plain for loop asks for the next action only after applying the previous one.
        for action in select(step, view) or ():
            if type(action) is not MemoryAction or (action.step is not None and action.step is not step):
                check_action(policy, action, step)  # raises unless it is a valid action after all
            decision = execute(action, t)
            if record_actions:
                record(LoggedAction(t, action, decision))
    if oracle_utility is None:
        oracle_utility = _oracle_utility(track_costs(episode, track), episode.utilities, budget_bytes)
    metrics = compute_metrics(episode, store, oracle_utility=oracle_utility)
    call_hook(policy, "end_episode", EpisodeOutcome(metrics=metrics.as_row(), rewards=None))
    return EpisodeRun(metrics=metrics, store=store, actions=tuple(log))
