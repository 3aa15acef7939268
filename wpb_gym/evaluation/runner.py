"""``run_episode``: one policy over one episode at one budget, in this process or isolated."""

from __future__ import annotations

from typing import Any

from ..core.compression import Compression
from ..core.kind_budgets import KindBudgets, KindShares
from ..core.store_limits import StoreLimits
from ..core.tracks import UNPRIVILEGED
from ..core.types import Episode
from ..core.write_time import WriteTime
from .isolated.isolation import run_isolated
from .isolated.sandbox import AUTO, Sandbox
from .playing import EpisodeRun, Seat, end_episode, play, score
from .referee import DEFAULT_LIMITS, RunLimits

__all__ = ["run_episode"]


def run_episode(
    policy: Any,
    episode: Episode,
    budget_bytes: int,
    track: str = UNPRIVILEGED,
    *,
    oracle_utility: float | None = None,
    record_actions: bool = True,
    limits: RunLimits = DEFAULT_LIMITS,
    isolate: bool = False,
    sandbox: Sandbox | None | str = AUTO,
    kind_budgets: KindBudgets | dict[str, int] | None = None,
    write_time: WriteTime | None = None,
    compression: Compression | None = None,
) -> EpisodeRun:
    """Run ``policy`` over ``episode`` with a ``budget_bytes`` memory on ``track``.

    ``oracle_utility`` (U*(B) on ``track``) may be passed when it is already known, e.g. when
    several policies share an episode; it is computed otherwise. With ``record_actions``
    False the run keeps no action log (``actions`` is empty; the store still counts them).
    ``isolate=True`` runs the policy in its own process (``wpb_gym.evaluation.isolated.isolation``): the policy
    object is pickled there, and what it learns in that process does not come back. There the
    process is sandboxed (``wpb_gym.evaluation.isolated.sandbox``): by default wherever the
    platform allows; ``sandbox=None`` for a process without one, a ``Sandbox`` for other limits.
    ``kind_budgets`` (bytes per content kind, ``wpb_gym.core.kind_budgets``) or ``write_time``
    (``wpb_gym.core.write_time``) limit the memory beside its budget, and ``compression``
    (``wpb_gym.core.compression``) allows compressed WRITEs; the metrics' bounds respect them.
    """
    kinds = KindBudgets.of(kind_budgets)
    beside = StoreLimits(KindShares(kinds.limits) if kinds else None, write_time,
                         None if compression is None else Compression.parse(compression, "compression"))
    seat = Seat.within(policy, budget_bytes, track, None, None, beside)
    if isolate:
        return run_isolated(
            episode, seat, oracle_utility=oracle_utility, limits=limits, record_actions=record_actions, sandbox=sandbox
        )
    (run,) = play(episode, [seat], limits=limits, record_actions=record_actions)
    result = score(run, episode, oracle_utility)
    end_episode(run, result)
    return result
