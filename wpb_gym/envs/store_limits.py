"""Limits beside the byte budget in the environment (``kind_budgets=`` or ``write_time=``): the
mask and the observation's extra features.

The store refuses a WRITE or MERGE past its content kind's limit (``wpb_gym.core.kind_budgets``)
or past the episode's write time (``wpb_gym.core.write_time``); ``EnvLimits.mask`` clears those
actions from the encoder's mask by asking the store itself, so the mask stays the store's
verdict. The observation gains ``KIND_FEATURES`` (each kind's room over the budget, 1 with no
limit and an empty memory, and whether the current step fits its own kind's room) or
``TIME_FEATURES`` (the share of the write time left, and whether a WRITE of the current step
fits in it).
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from ..core.kind_budgets import KINDS, content_kind
from ..core.store import ByteMemoryStore
from ..core.store_limits import StoreLimits
from ..core.types import MemoryAction, Step

KIND_FEATURES = (*(f"kind_room_{kind}" for kind in KINDS), "fits_kind")
TIME_FEATURES = ("time_left", "fits_time")


class EnvLimits:
    """The env's limits: a store under them at each episode's budget, the mask and the features."""

    def __init__(self, limits: StoreLimits) -> None:
        if not limits:
            raise ValueError("EnvLimits needs kind budgets or a write time")
        self.limits = limits
        self.names = KIND_FEATURES if limits.kinds is not None else TIME_FEATURES

    def store(self, budget: int) -> ByteMemoryStore:
        return self.limits.store(budget)

    def box_space(self, space: spaces.Box) -> spaces.Box:
        """A flat observation space with the features appended."""
        return spaces.Box(0.0, 1.0, (space.shape[0] + len(self.names),), np.float32)

    def features_space(self) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (len(self.names),), np.float32)

    def features(self, store: ByteMemoryStore, step: Step | None, cost: int) -> np.ndarray:
        """The features of the state (``step``: the current one, None once the episode is over)."""
        if self.limits.kinds is not None:
            budget = max(store.max_bytes, 1)
            values = [min(1.0, max(0.0, store.kind_remaining(kind) / budget)) for kind in KINDS]
            fits = step is not None and cost <= store.kind_remaining(content_kind(step.observation))
        else:
            write_time = store.write_time
            left = store.time_remaining()
            values = [left / write_time.total if write_time.total else 0.0]  # type: ignore[union-attr, operator]
            fits = step is not None and write_time.ticks(cost) <= left  # type: ignore[union-attr, operator]
        return np.asarray([*values, float(fits)], dtype=np.float32)

    @staticmethod
    def mask(mask: bytes, store: ByteMemoryStore, step: Step | None, slots: list[int], t: int, k: int) -> bytes:
        """``mask`` without the WRITE and MERGE actions the store refuses."""
        if step is None:
            return mask
        out = bytearray(mask)
        if out[1] and not store.check(MemoryAction.write(step), t).accepted:
            out[1] = 0
        for slot in range(k):
            if out[2 + slot] and not store.check(MemoryAction("MERGE", step=step, target_t=slots[slot]), t).accepted:
                out[2 + slot] = 0
        return bytes(out)
