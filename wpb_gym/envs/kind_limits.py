"""Hierarchical budgets in the environment (``kind_budgets=``): the mask and the observation's
kind features.

The store refuses a WRITE or MERGE past its content kind's limit (``wpb_gym.core.kind_budgets``);
``KindLimits.mask`` clears those actions from the encoder's mask, asking the store itself, so
the mask stays the store's verdict. The observation gains ``KIND_FEATURES``: each kind's room
(what a WRITE of that kind may still take, over the budget; 1 with no limit and an empty
memory) and whether the current step fits its own kind's room.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from ..core.kind_budgets import KINDS, KindShares, content_kind
from ..core.store import ByteMemoryStore
from ..core.types import MemoryAction, Step

KIND_FEATURES = (*(f"kind_room_{kind}" for kind in KINDS), "fits_kind")


class KindLimits:
    """The env's kind limits: resolved at each episode's budget, applied to mask and observation."""

    def __init__(self, shares: KindShares) -> None:
        self.shares = shares

    def store(self, budget: int) -> ByteMemoryStore:
        return ByteMemoryStore(budget, self.shares.resolve(budget))

    @staticmethod
    def box_space(space: spaces.Box) -> spaces.Box:
        """A flat observation space with the kind features appended."""
        n = space.shape[0] + len(KIND_FEATURES)
        return spaces.Box(0.0, 1.0, (n,), np.float32)

    @staticmethod
    def features(store: ByteMemoryStore, step: Step | None, cost: int) -> np.ndarray:
        """``KIND_FEATURES`` of the state: each kind's room over the budget, and whether the
        current step (None once the episode is over) fits its kind's room."""
        budget = max(store.max_bytes, 1)
        rooms = [min(1.0, max(0.0, store.kind_remaining(kind) / budget)) for kind in KINDS]
        fits = 0.0
        if step is not None:
            fits = float(cost <= store.kind_remaining(content_kind(step.observation)))
        return np.asarray([*rooms, fits], dtype=np.float32)

    @staticmethod
    def mask(mask: bytes, store: ByteMemoryStore, step: Step | None, slots: list[int], t: int, k: int) -> bytes:
        """``mask`` without the WRITE and MERGE actions the store refuses (their kind is full)."""
        if step is None:
            return mask
        out = bytearray(mask)
        if out[1] and not store.check(MemoryAction.write(step), t).accepted:
            out[1] = 0
        for slot in range(k):
            if out[2 + slot] and not store.check(MemoryAction("MERGE", step=step, target_t=slots[slot]), t).accepted:
                out[2 + slot] = 0
        return bytes(out)
