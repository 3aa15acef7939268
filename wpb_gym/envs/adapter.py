"""What agents use beyond Gymnasium's API: the env's actions as ``MemoryAction``s and back,
the slot layout, the current step as a policy sees it, and the action mask.

Scripted agents that think in ``MemoryAction``s drive the env through these
(``agents.env_adapter``); MaskablePPO finds ``action_masks``. Part of
``WritePolicyBenchEnv``, kept apart from its dynamics.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ..core.types import MemoryAction, Step

_SKIP = MemoryAction("SKIP")


class ResetNeeded(gym.error.ResetNeeded, RuntimeError):
    """A method that needs an episode was called before the first ``reset()``.

    Gymnasium's own error (what ``gym.make``'s order-enforcing wrapper raises for ``step``),
    and a ``RuntimeError`` like the env's other call-order errors.
    """


class MemoryActionAdapter:
    """Mixed into ``WritePolicyBenchEnv``: reads its episode state, never changes the store."""

    # The env gives: _require_episode, _now() (t, T), _step_view(t), _shown() (the slots' timesteps),
    # _mask() (the mask, a new bool array), _show(shown), _stored_now(t) and _finished().

    @property
    def current_step(self) -> Step | None:
        """The current step as a policy on this track sees it (None once the episode is over)."""
        self._require_episode("reading env.current_step")
        t, T = self._now()
        return self._step_view(t) if t < T else None

    @property
    def slot_timesteps(self) -> tuple[int | None, ...]:
        """The timestep of the item each slot shows (None for an empty slot)."""
        self._require_episode("reading env.slot_timesteps")
        slots = self._shown()
        return tuple(slots) + (None,) * (self.K - len(slots))

    def action_masks(self) -> np.ndarray:
        """The valid actions now (bool, length 2 + 2K, and one more with compression): exactly
        those the store would accept."""
        self._require_episode("action_masks()")
        return self._mask()

    def decode_action(self, action: int) -> MemoryAction:
        """The ``MemoryAction`` that env action ``action`` stands for now (SKIP for an empty slot)."""
        a = self._check_action(action)
        t, T = self._now()
        if a == 0 or t >= T:
            return _SKIP
        if a == 1:
            return MemoryAction("WRITE", step=self._step_view(t))
        if a == self._compressed_write:
            return MemoryAction.write_compressed(self._step_view(t))
        slots = self._shown()
        k = (a - 2) % self.K
        if k >= len(slots):
            return _SKIP
        if a < 2 + self.K:
            return MemoryAction("MERGE", step=self._step_view(t), target_t=slots[k])
        return MemoryAction("EXPIRE", target_t=slots[k])

    def encode_action(self, action: MemoryAction) -> int | None:
        """The env action for ``action`` in the current slot layout (None if no slot shows its target)."""
        if action.action == "SKIP":
            return 0
        if action.action == "WRITE":
            if action.codec is not None:
                return self._compressed_write if self._compressed_write < self.n_actions else None
            return 1
        try:
            k = self._shown().index(action.target_t)
        except ValueError:
            return None
        return 2 + k if action.action == "MERGE" else 2 + self.K + k

    def expose_item(self, t: int) -> int:
        """Show stored item ``t`` in a slot and return the slot index.

        For adapters that drive the environment with ``MemoryAction``s (scripted agents): an
        item the layout does not show takes the last slot until the next step. The mask, the
        slots and ``action_masks()`` follow; the observation already returned does not.
        """
        if self._finished():
            raise RuntimeError("the episode is over: call reset() first")
        if not self._stored_now(t):
            raise ValueError(f"memory holds no item at timestep {t}")
        slots = self._shown()
        if t in slots:
            return slots.index(t)
        self._show(slots[: self.K - 1] + [t])  # the layout is full: every item would be shown otherwise
        return self.K - 1

    def _check_action(self, action: Any) -> int:
        if type(action) is int and 0 <= action < self.n_actions:
            return action
        try:
            a = int(action)
        except (TypeError, ValueError):
            raise ValueError(f"action must be an int in [0, {self.n_actions}), got {action!r}") from None
        if a != action or not 0 <= a < self.n_actions:
            raise ValueError(f"action must be an int in [0, {self.n_actions}), got {action!r}")
        return a

    def _action_name(self, a: int) -> str:
        if a == 0:
            return "SKIP"
        if a == 1:
            return "WRITE"
        if a < 2 + self.K:
            return f"MERGE slot {a - 2}"
        if a == self._compressed_write:
            return "WRITE compressed"
        return f"EXPIRE slot {a - 2 - self.K}"
