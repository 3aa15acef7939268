"""The policy protocol of the benchmark (spec §6.3) and what a policy is told about an episode.

A policy is any object with ``select(step, store) -> Iterable[MemoryAction]``: ``step`` is
the current step as the policy's track sees it, ``store`` a read-only ``StoreView`` of the
memory. The actions are applied one by one *as they are yielded*: a generator that yields
an EXPIRE sees the memory without that item when it resumes.

Optional attributes and hooks (looked up with ``getattr``, so a bare object with ``select``
is a policy too):

``name``
    How tables and errors name the policy.
``track``
    What the policy reads: ``"unprivileged"`` (the stream and the memory), ``"privileged"``
    (also the ``priority`` hint) or ``"oracle"`` (also the hidden labels: an upper bound,
    never a competitor). Privileged and oracle policies only run on the privileged track.
``needs_stream``
    True for a policy that needs the episode's steps up front (without labels), such as an
    SB3 model that computes the environment's features. Scripted policies never get it.
``start_episode(context)`` / ``end_episode(outcome)``
    Called before the first step and after the last one.

Runs on the unprivileged track never see ``priority``: the step's metadata is the track's
view (``policy_step``), whatever the policy claims.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .store import StoreView
from .tracks import PRIVILEGED, TRACKS, UNPRIVILEGED, plain_track
from .types import Episode, MemoryAction, Step

ORACLE = "oracle"
POLICY_TRACKS: tuple[str, ...] = (UNPRIVILEGED, PRIVILEGED, ORACLE)


@runtime_checkable
class Policy(Protocol):
    def select(self, step: Step, store: StoreView) -> Iterable[MemoryAction]: ...


@dataclass(frozen=True)
class EpisodeContext:
    """What a policy is told before an episode.

    ``episode`` (with its hidden labels) is given to oracle policies only; ``stream`` (the
    steps as the track shows them, no labels) to policies with ``needs_stream`` only.
    """

    length: int
    budget_bytes: int
    track: str
    episode_id: Any = None
    episode: Episode | None = None
    stream: Episode | None = None
    kind_budgets: dict[str, int] | None = None  # hierarchical budgets: bytes per content kind that has a limit
    write_time: dict[str, int] | None = None  # the write-time budget: total, per_write, per_kb (ticks)
    compression: dict[str, float] | None = None  # compressed WRITEs allowed: {"credit": what one is worth}


@dataclass(frozen=True)
class EpisodeOutcome:
    """What a policy is told after an episode.

    ``metrics`` is the episode's metric row (``EpisodeMetrics.as_row()``), with
    ``query_accuracy`` added for an episode of the query tier. ``rewards`` holds,
    per timestep, the sum of the environment's rewards while the policy decided that step,
    when the episode ran through the environment (None in the offline evaluator).
    """

    metrics: dict[str, float]
    rewards: tuple[float, ...] | None = None


class PolicyFailure(RuntimeError):
    """A policy's own failure, said whole by its message (an external agent that ended or
    answered out of protocol): reported without a traceback, which would only show the
    evaluator's code."""


def policy_name(policy: Any) -> str:
    return str(getattr(policy, "name", None) or type(policy).__name__)


def policy_track(policy: Any) -> str:
    """The track ``policy`` declares (unprivileged when it declares none)."""
    track = plain_track(getattr(policy, "track", UNPRIVILEGED))  # read once, as plain text
    if track not in POLICY_TRACKS:
        raise ValueError(f"policy {policy_name(policy)!r} declares track {track!r}; expected one of {POLICY_TRACKS}")
    return track


def check_can_run(policy: Any, track: str) -> str:
    """Raise if ``policy`` cannot run on evaluation ``track``; return the track it declares.

    The declaration is read once: callers decide from the returned value (what a policy
    declares must not change between the check and what it is given); ``track`` is read as
    plain text (``plain_track``)."""
    track = plain_track(track)
    if track not in TRACKS:
        raise ValueError(f"unknown evaluation track {track!r}; expected one of {TRACKS}")
    if not callable(getattr(policy, "select", None)):
        raise TypeError(f"{policy_name(policy)!r} is not a policy: it has no select(step, store) method")
    needs = policy_track(policy)
    if needs != UNPRIVILEGED and track == UNPRIVILEGED:
        raise ValueError(
            f"policy {policy_name(policy)!r} is a {needs}-track policy "
            f"({'it reads the priority hint' if needs == PRIVILEGED else 'it reads the hidden labels'}) "
            f"and cannot run on the unprivileged track; run it with track='privileged'"
        )
    return needs


def episode_context(policy: Any, episode: Episode, stream: Episode, budget_bytes: int, track: str,
                    store: Any = None) -> EpisodeContext:
    """The context ``policy`` may see for ``episode`` (``stream``: its steps on ``track``;
    ``store``: the memory it plays on, whose limits beside the budget it is told)."""
    return EpisodeContext(
        length=len(episode),
        budget_bytes=budget_bytes,
        track=track,
        episode_id=episode.episode_id,
        episode=episode if policy_track(policy) == ORACLE else None,
        stream=Episode(steps=stream.steps, labels={}) if getattr(policy, "needs_stream", False) else None,
        **limit_context(getattr(store, "kind_budgets", None), getattr(store, "write_time", None),
                        getattr(store, "compression", None)),
    )


def limit_context(kinds: Any, write_time: Any, compression: Any) -> dict[str, Any]:
    """What an ``EpisodeContext`` says of the limits beside the budget (``kind_budgets``,
    ``write_time``, ``compression``), as plain values, from the store's settings (None: none)."""
    return {"kind_budgets": kinds.as_dict() if kinds else None,
            "write_time": write_time.as_dict() if write_time else None,
            "compression": {"credit": compression.credit} if compression else None}


def call_hook(policy: Any, hook: str, argument: Any) -> None:
    method = getattr(policy, hook, None)
    if method is not None:
        method(argument)


def check_action(policy: Any, action: Any, step: Step) -> MemoryAction:
    """``action`` as yielded by ``policy`` while deciding ``step``, or a clear error.

    A WRITE or MERGE must carry the step the policy was shown: the store checks only its
    timestep, and a policy must not store a trimmed or edited copy of the stream.
    """
    if not isinstance(action, MemoryAction):
        raise TypeError(
            f"policy {policy_name(policy)!r} yielded {action!r} at t={step.t}; select() must yield MemoryAction objects"
        )
    if action.step is not None and action.step is not step and action.step != step:
        raise ValueError(
            f"policy {policy_name(policy)!r} tried to {action.action} a step other than the one it was shown at "
            f"t={step.t}; only the current step, as shown, can be stored"
        )
    return action
