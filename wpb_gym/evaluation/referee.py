"""How the evaluator takes an action from a policy: read once, made plain, judged on its own data.

A policy hands the evaluator objects of its own making. Before anything is judged, each
action is **normalised once** (``normalise``): its fields are read exactly once, into exact
built-in types (``str`` action, ``int`` target, plain JSON delta, ``str`` reason), so an
object that answers differently on a second reading (a ``str`` or ``MemoryAction`` subclass,
a property) has no second reading to exploit. A WRITE or MERGE names the step the policy was
shown; the store is then handed the evaluator's **canonical** copy of that step, taken before
any policy saw it, and judges and prices that copy only (``apply``).

``RunLimits`` bounds what one policy may do at one timestep: a number of actions and a wall
time. A policy over a limit is stopped (``PolicyLimitError`` names it and the timestep): the
rest of its episode counts as SKIP and the run records the error.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from typing import Any

from ..core.checks import finite
from ..core.store import ByteMemoryStore, Decision
from ..core.types import ACTION_TYPES, COMPRESSION_CODEC, MemoryAction, Step, frozen_instance

__all__ = [
    "ACTION_KINDS",
    "DEFAULT_LIMITS",
    "MalformedActionError",
    "NotAnActionError",
    "PlainAction",
    "PolicyError",
    "PolicyLimitError",
    "RunLimits",
    "apply",
    "normalise",
]

# (action, target_t, delta, reason): an action in exact built-in types, the step left implicit
# (a WRITE or MERGE always stores the current step). A WRITE has no delta: its third field is
# its codec instead (None, or COMPRESSION_CODEC for a compressed WRITE).
PlainAction = tuple[str, int | None, Any, str | None]

ACTION_KINDS = {kind: kind for kind in ACTION_TYPES}  # maps an equal str to the interned constant


class _NotJson:
    """A supplied MERGE delta that is not JSON: it can never equal the canonical delta."""

    def __repr__(self) -> str:
        return "<not JSON>"


NOT_JSON = _NotJson()


# The interval timer of isolated evaluation takes at most about 24 days; a day is plenty.
MAX_SECONDS_PER_STEP = 86_400.0


@dataclass(frozen=True)
class RunLimits:
    """What one policy may do at one timestep, in one run.

    ``max_actions_per_step``: actions yielded at one timestep (accepted or not); an honest
    policy needs at most one per stored item plus one. ``max_seconds_per_step``: wall time
    spent in the policy's code at one timestep. ``None`` switches a limit off. In process,
    time is read before a timestep's first action, every 64 actions and when it ends; only isolated evaluation
    (``isolate=True``) interrupts a policy that blocks inside one call.
    """

    max_actions_per_step: int | None = 10_000
    max_seconds_per_step: float | None = 10.0

    def __post_init__(self) -> None:
        n = self.max_actions_per_step
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"max_actions_per_step must be a positive int or None, got {n!r}")
        s = self.max_seconds_per_step
        if s is not None and (
            isinstance(s, bool) or not isinstance(s, (int, float)) or not finite(s) or s <= 0
            or s > MAX_SECONDS_PER_STEP
        ):
            raise ValueError(
                f"max_seconds_per_step must be a positive number of seconds up to {MAX_SECONDS_PER_STEP:g} "
                f"(a day) or None, got {s!r}"
            )


DEFAULT_LIMITS = RunLimits()


class PolicyError(RuntimeError):
    """A policy failed: it went over a limit, yielded something that is not a well-formed
    action, or raised in its own process (isolated evaluation; the message carries the
    traceback)."""

    def __init__(self, policy: str, t: int | None, message: str) -> None:
        super().__init__(policy, t, message)  # the arguments, so that the error pickles as it is
        self.policy, self.t, self.message = policy, t, message

    def __str__(self) -> str:
        where = f" at t={self.t}" if self.t is not None else ""
        return f"policy {self.policy!r}{where}: {self.message}"


class PolicyLimitError(PolicyError):
    """A policy went over a ``RunLimits`` limit at timestep ``t`` and was stopped there."""


class NotAnActionError(PolicyError, TypeError):
    """A policy yielded something that is not a ``MemoryAction``."""


MAX_REASON_CHARS = 1000


class MalformedActionError(PolicyError, ValueError):
    """A policy yielded a ``MemoryAction`` that is not well formed (unknown type, a target that
    is not an int, a step other than the one it was shown)."""


def _plain_json(value: Any) -> Any:
    # One reading of a supplied delta, as plain JSON: whatever the object does when read
    # happens here, once. Anything that is not JSON cannot equal the canonical delta.
    try:
        return json.loads(json.dumps(value, sort_keys=True, allow_nan=False))
    except Exception:  # noqa: BLE001 - a policy's object may raise anything when read
        return NOT_JSON


def _plain_int(value: Any) -> int | None:
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # exact int for int subclasses and numpy integers
    except Exception:  # noqa: BLE001 - a policy's object may raise anything
        return None


def normalise(action: Any, shown: Step, t: int, policy: str) -> PlainAction:
    """``action``, as yielded by ``policy`` when shown ``shown`` at ``t``, in exact built-in types.

    Raises ``PolicyError`` for what is not a well-formed action, as ``MemoryAction`` itself
    would; a well-formed action the memory does not allow is left to the store to reject.
    """
    if not isinstance(action, MemoryAction):
        raise NotAnActionError(policy, t, f"yielded {action!r}; select() must yield MemoryAction objects")
    try:
        kind = action.action
        kind = ACTION_KINDS.get(str.__str__(kind) if isinstance(kind, str) else None)
        if kind is None:
            raise MalformedActionError(policy, t, f"yielded an action of unknown type; expected one of {ACTION_TYPES}")
        if kind == "SKIP":
            return ("SKIP", None, None, None)
        reason = action.reason
        if reason is not None:
            reason = str.__str__(reason) if isinstance(reason, str) else str(reason)
            if len(reason) > MAX_REASON_CHARS:  # reasons are kept, unpriced, with the item
                raise MalformedActionError(
                    policy, t, f"gave a reason of {len(reason)} characters; at most {MAX_REASON_CHARS} are kept"
                )
        if kind != "WRITE":
            raw_target = action.target_t
            target = _plain_int(raw_target)
            if target is None:
                raise MalformedActionError(policy, t, f"{kind} needs an int target_t, got {raw_target!r}")
            if kind == "EXPIRE":
                return ("EXPIRE", target, None, reason)
        step = action.step
        if step is not shown and not (isinstance(step, Step) and step == shown):
            raise MalformedActionError(
                policy,
                t,
                f"tried to {kind} a step other than the one it was shown; only the current step, as shown, "
                "can be stored",
            )
        if kind == "WRITE":
            codec = getattr(action, "codec", None)
            if codec is not None:
                if not isinstance(codec, str) or str.__str__(codec) != COMPRESSION_CODEC:
                    raise MalformedActionError(policy, t, f"asked for codec {codec!r}; the only codec is "
                                                          f"{COMPRESSION_CODEC!r}")
                codec = COMPRESSION_CODEC
            return ("WRITE", None, codec, reason)
        delta = action.delta
        return ("MERGE", target, None if delta is None else _plain_json(delta), reason)
    except PolicyError:
        raise
    except Exception as error:  # noqa: BLE001 - reading a policy's object may raise anything
        raise MalformedActionError(policy, t, f"yielded a malformed action ({type(error).__name__}: {error})") from None


def apply(store: ByteMemoryStore, plain: PlainAction, t: int, canonical: Step, shown: Step | None) -> Decision:
    """Apply a normalised action at ``t``: the store judges ``canonical``; the item presents ``shown``."""
    kind, target, delta, reason = plain
    if kind == "SKIP":
        return store.skip(t)
    if kind == "EXPIRE":
        return store.expire(target, t)
    if kind == "WRITE":
        if delta is not None:  # the codec of a compressed WRITE
            return store.write_compressed(canonical, t, reason, shown=shown or canonical)
        return store.write(canonical, t, reason, shown=shown or canonical)
    merge = frozen_instance(MemoryAction, {"action": "MERGE", "step": canonical, "target_t": target, "delta": delta,
                                           "reason": reason, "codec": None})
    return store.execute(merge, t, shown=shown or canonical)


def as_action(plain: PlainAction, canonical: Step) -> MemoryAction:
    """The ``MemoryAction`` a normalised action stands for (for action logs)."""
    kind, target, delta, reason = plain
    step = canonical if kind in ("WRITE", "MERGE") else None
    codec = delta if kind == "WRITE" else None
    return frozen_instance(MemoryAction, {"action": kind, "step": step, "target_t": target,
                                          "delta": None if kind == "WRITE" else delta, "reason": reason,
                                          "codec": codec})
