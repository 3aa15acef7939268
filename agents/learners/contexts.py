"""The bandit learners' contexts and the scripted parts of their decisions (``agents.learners.bandits``).

A context is what an unprivileged policy sees of a step (``agents.scripted.observe``), as a small
discrete tuple ``(kind, status, in_memory, fits, budget_bucket)``; ``eviction_plan`` and
``merge_target`` are what a WRITE that does not fit and a MERGE need.
"""

from __future__ import annotations

from wpb_gym.core.store import StoreView
from wpb_gym.core.types import MemoryAction, Step

from ..scripted.observe import StepChange

DEFAULT_BUDGET_BUCKETS = 3

Context = tuple[str, str, int, int, int]


# The change flags of a context, in order: the contract comparisons of the env's observation.
CHANGE_FLAGS: tuple[tuple[str, str], ...] = (
    ("v", "version_up"),
    ("a", "params_added"),
    ("r", "params_removed"),
    ("q", "required_added"),
    ("o", "required_removed"),
    ("d", "newly_deprecated"),
    ("u", "undeprecated"),
    ("x", "newly_removed"),
    ("b", "restored"),
    ("e", "returns_to_earlier"),
)


def change_status(change: StepChange) -> str:
    """``"new"`` (``"new:removed"`` for a first sighting showing the endpoint removed), ``"same"``
    or ``"changed:<flags>"`` with the ``CHANGE_FLAGS`` that hold."""
    if not change.seen_before:
        return "new:removed" if change.removed else "new"
    if not change.changed:
        return "same"
    return "changed:" + "".join(flag for flag, field in CHANGE_FLAGS if getattr(change, field))


def budget_bucket(store: StoreView, buckets: int) -> int:
    """``floor(remaining / budget * buckets)``, capped at ``buckets - 1`` (0 for a zero budget)."""
    max_bytes = store.max_bytes
    if max_bytes <= 0:
        return 0
    return min(buckets - 1, store.remaining() * buckets // max_bytes)


def step_context(change: StepChange, store: StoreView, buckets: int = DEFAULT_BUDGET_BUCKETS) -> Context:
    """The learners' context of a step: only what an unprivileged policy can see."""
    return (change.kind, change_status(change), int(change.in_memory), int(change.fits), budget_bucket(store, buckets))


def eviction_plan(store: StoreView, cost: int, t: int) -> list[int] | None:
    """Timesteps to expire, oldest first, so that ``cost`` bytes fit at ``t``.

    ``[]`` when it fits already; None when it cannot fit (more than the budget, or not
    enough bytes held by items older than ``t``).
    """
    need = cost - store.remaining()
    if need <= 0:
        return []
    if cost > store.max_bytes:
        return None
    plan = []
    for item in store.items():  # oldest first
        if need <= 0:
            break
        if item.t >= t:
            break
        plan.append(item.t)
        need -= item.byte_cost
    return plan if need <= 0 else None


def merge_target(step: Step, store: StoreView) -> int | None:
    """The newest base item of the step's ``api`` if the store would accept the MERGE now."""
    obs = step.observation
    if not isinstance(obs, dict) or "api" not in obs:
        return None
    try:
        base = store.newest_base_item(obs["api"])
    except TypeError:  # an api value that cannot be an identity key
        return None
    if base is None:
        return None
    if not store.would_accept(MemoryAction("MERGE", step=step, target_t=base.t), step.t):
        return None
    return base.t
