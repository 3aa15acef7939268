"""What an unprivileged agent can tell about a step from the stream and the memory alone.

``StreamObserver`` remembers, per endpoint family, the last observation the agent has *seen*
(stored or not): an agent that skips a snapshot still knows it was shown. ``describe``
compares the current step with that memory of the stream and with what the store holds;
it reads only the observation, the store view and the agent's own past, never labels or
``priority``. Families are the environment's (``wpb_gym.envs.observation.stream_table.kind_and_family``:
the ``api`` with its version segments removed, a doc ``section``, a guide's old endpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.store import StoreView
from wpb_gym.core.types import Step
from wpb_gym.envs.observation.stream_table import KIND_NAMES, compare_versions, kind_and_family


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
    # The contract comparisons the environment's observation makes (``*_since_seen``):
    required_added: bool = False
    required_removed: bool = False
    newly_deprecated: bool = False
    undeprecated: bool = False
    removed: bool = False  # the step shows the endpoint removed
    newly_removed: bool = False
    restored: bool = False  # the last shown step showed it removed, this one does not
    returns_to_earlier: bool = False  # the contract is one the family showed before the last step (a revert)


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
        self._contracts: dict[Any, list[Any]] = {}  # family -> the contracts it showed, in order
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
        required_added = required_removed = newly_deprecated = undeprecated = False
        newly_removed = restored = returns_to_earlier = False
        removed = isinstance(obs, dict) and obs.get("removed") is True
        if changed and isinstance(obs, dict) and isinstance(previous, dict):
            version = obs.get("version", obs.get("last_updated"))
            before = previous.get("version", previous.get("last_updated"))
            version_up = compare_versions(version, before) == 1
            now, then = as_set(obs.get("params")), as_set(previous.get("params"))
            if now is not None and then is not None:
                params_added, params_removed = bool(now - then), bool(then - now)
            now, then = as_set(obs.get("required")), as_set(previous.get("required"))
            if now is not None and then is not None:
                required_added, required_removed = bool(now - then), bool(then - now)
            deprecated, was_deprecated = bool(obs.get("deprecated")), bool(previous.get("deprecated"))
            deprecation_changed = deprecated != was_deprecated
            newly_deprecated, undeprecated = deprecated and not was_deprecated, was_deprecated and not deprecated
            was_removed = previous.get("removed") is True
            newly_removed, restored = removed and not was_removed, was_removed and not removed
            contract, history = _contract(obs), self._contracts.get(family, [])
            returns_to_earlier = contract != history[-1] and contract in history[:-1]
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
            required_added=required_added,
            required_removed=required_removed,
            newly_deprecated=newly_deprecated,
            undeprecated=undeprecated,
            removed=removed,
            newly_removed=newly_removed,
            restored=restored,
            returns_to_earlier=returns_to_earlier,
        )

    def remember(self, step: Step) -> None:
        """Record that ``step`` was shown (call once per step, after ``describe``)."""
        family = family_of(step)
        if family is not None:
            self._last_seen[family] = step.observation
            self._maybe_stored.setdefault(family, []).append(step.t)
            self._contracts.setdefault(family, []).append(_contract(step.observation))

    def _in_memory(self, family: Any, store: StoreView) -> bool:
        candidates = self._maybe_stored.get(family)
        if not candidates:
            return False
        candidates[:] = [t for t in candidates if t in store]
        return bool(candidates)


def _contract(obs: Any) -> Any:
    """An endpoint's contract: its parameters, required parameters, deprecated and removed flags."""
    if not isinstance(obs, dict):
        return None
    params, required = as_set(obs.get("params")), as_set(obs.get("required"))
    return (params, required, bool(obs.get("deprecated")), obs.get("removed") is True)


def family_of(step: Step) -> Any:
    return kind_and_family(step.observation)[1]
