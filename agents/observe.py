"""What an unprivileged agent can tell about a step from the stream and the memory alone.

``StreamObserver`` remembers, per endpoint family, the last observation the agent has *seen*
(stored or not): an agent that skips a snapshot still knows it was shown. ``describe``
compares the current step with that memory of the stream and with what the store holds;
it reads only the observation, the store view and the agent's own past, never labels or
``priority``. Families are the environment's (``wpb_gym.stream_table.kind_and_family``:
the ``api`` with its version segments removed, a doc ``section``, a guide's old endpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wpb_gym.accounting import estimate_bytes
from wpb_gym.store import StoreView
from wpb_gym.stream_table import KIND_NAMES, compare_versions, kind_and_family
from wpb_gym.types import Step


@dataclass(frozen=True)
class StepChange:
    """How the current step relates to the stream seen so far and to the memory."""

    kind: str  # "endpoint", "doc", "guide" or "other"
    family: Any  # hashable family key, None when the step has no family
    seen_before: bool  # a step of this family was shown earlier in the episode
    changed: bool  # it differs from the last step of its family that was shown
    version_up: bool
    params_added: bool
    params_removed: bool
    deprecation_changed: bool
    in_memory: bool  # memory holds an item of this family
    cost: int  # WRITE cost of the step as the agent sees it
    fits: bool  # the WRITE fits in the remaining budget now


def as_set(values: Any) -> frozenset | None:
    if not isinstance(values, list):
        return None
    try:
        return frozenset(values)
    except TypeError:  # unhashable entries: compare as JSON-like text
        return frozenset(repr(v) for v in values)


class StreamObserver:
    """Per-episode memory of the stream; call ``reset`` at every episode start."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._last_seen: dict[Any, Any] = {}
        # Per family, past timesteps that may still be in memory. A past step that memory does
        # not hold can never enter it again (only the current step is stored), so pruning
        # keeps each list to the family's stored items plus the latest step.
        self._maybe_stored: dict[Any, list[int]] = {}

    def describe(self, step: Step, store: StoreView) -> StepChange:
        obs = step.observation
        kind, family = kind_and_family(obs)
        previous = self._last_seen.get(family) if family is not None else None
        seen = family is not None and family in self._last_seen
        changed = seen and previous != obs
        version_up = params_added = params_removed = deprecation_changed = False
        if changed and isinstance(obs, dict) and isinstance(previous, dict):
            version = obs.get("version", obs.get("last_updated"))
            before = previous.get("version", previous.get("last_updated"))
            version_up = compare_versions(version, before) == 1
            now, then = as_set(obs.get("params")), as_set(previous.get("params"))
            if now is not None and then is not None:
                params_added, params_removed = bool(now - then), bool(then - now)
            deprecation_changed = bool(obs.get("deprecated")) != bool(previous.get("deprecated"))
        cost = estimate_bytes(step)
        return StepChange(
            kind=KIND_NAMES[kind],
            family=family,
            seen_before=seen,
            changed=changed,
            version_up=version_up,
            params_added=params_added,
            params_removed=params_removed,
            deprecation_changed=deprecation_changed,
            in_memory=family is not None and self._in_memory(family, store),
            cost=cost,
            fits=cost <= store.remaining(),
        )

    def remember(self, step: Step) -> None:
        """Record that ``step`` was shown (call once per step, after ``describe``)."""
        family = family_of(step)
        if family is not None:
            self._last_seen[family] = step.observation
            self._maybe_stored.setdefault(family, []).append(step.t)

    def _in_memory(self, family: Any, store: StoreView) -> bool:
        candidates = self._maybe_stored.get(family)
        if not candidates:
            return False
        candidates[:] = [t for t in candidates if t in store]
        return bool(candidates)


def family_of(step: Step) -> Any:
    return kind_and_family(step.observation)[1]
