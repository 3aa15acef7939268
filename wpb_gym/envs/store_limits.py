"""Limits beside the byte budget in the environment (``kind_budgets=``, ``write_time=`` or
``compression=``): the mask and the observation's extra features.

The store refuses a WRITE or MERGE past its content kind's limit (``wpb_gym.core.kind_budgets``)
or past the episode's write time (``wpb_gym.core.write_time``); ``EnvLimits.mask`` clears those
actions from the encoder's mask by asking the store itself, so the mask stays the store's
verdict. The observation gains ``KIND_FEATURES`` (each kind's room over the budget, 1 with no
limit and an empty memory, and whether the current step fits its own kind's room) or
``TIME_FEATURES`` (the share of the write time left, and whether a WRITE of the current step
fits in it). With compression the env has one more action, the last: a compressed WRITE of the
current step (``wpb_gym.core.compression``); its mask bit, and the MERGE bits (a MERGE into a
compressed item is priced against its summary), are the store's verdict, and the observation
gains ``COMPRESSION_FEATURES`` (the compressed step's bytes over its plain bytes, 0 when it
cannot be compressed, whether its compressed WRITE fits, and for each slot whether its item
is compressed).
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from ..core.compression import compressed_cost
from ..core.kind_budgets import KINDS, content_kind
from ..core.store import ByteMemoryStore
from ..core.store_limits import StoreLimits
from ..core.types import MemoryAction, Step

KIND_FEATURES = (*(f"kind_room_{kind}" for kind in KINDS), "fits_kind")
TIME_FEATURES = ("time_left", "fits_time")
COMPRESSION_FEATURES = ("compressed_share", "fits_compressed")


def compression_features(k: int) -> tuple[str, ...]:
    """The compression features with ``k`` slots: the step's two, then one per slot."""
    return (*COMPRESSION_FEATURES, *(f"slot_{slot}_compressed" for slot in range(k)))


class EnvLimits:
    """The env's limits: a store under them at each episode's budget, the mask and the features."""

    def __init__(self, limits: StoreLimits, k: int) -> None:
        if not limits:
            raise ValueError("EnvLimits needs kind budgets, a write time or compression")
        self.limits = limits
        self.compressing = limits.compression is not None
        if limits.kinds is not None:
            self.names = KIND_FEATURES
        elif limits.write_time is not None:
            self.names = TIME_FEATURES
        else:
            self.names = compression_features(k)
        # Compression adds one action, the last: a compressed WRITE of the current step.
        self.extra_actions = 1 if self.compressing else 0
        self.compressed_fits = False  # the mask's verdict on it in the current state

    def store(self, budget: int) -> ByteMemoryStore:
        return self.limits.store(budget)

    def box_space(self, space: spaces.Box) -> spaces.Box:
        """A flat observation space with the features appended."""
        return spaces.Box(0.0, 1.0, (space.shape[0] + len(self.names),), np.float32)

    def features_space(self) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (len(self.names),), np.float32)

    def features(self, store: ByteMemoryStore, step: Step | None, cost: int, slots: list[int]) -> np.ndarray:
        """The features of the state (``step``: the current one, None once the episode is over;
        ``slots``: the timesteps of the items the slots show)."""
        if self.compressing:
            small = compressed_cost(step) if step is not None else None
            share = small / cost if small is not None and cost else 0.0
            fits = step is not None and self.compressed_fits  # as the mask judged it, for this state
            k = len(self.names) - len(COMPRESSION_FEATURES)
            held = [float(store.get(t).codec is not None) for t in slots[:k]]
            return np.asarray([share, float(fits), *held, *[0.0] * (k - len(held))], dtype=np.float32)
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

    def mask(self, mask: bytes, store: ByteMemoryStore, step: Step | None, slots: list[int], t: int,
             k: int) -> bytes:
        """``mask`` with the WRITE and MERGE bits the store's verdict (the encoder judges the byte
        budget alone, and prices a MERGE against the step an item was written from, not the
        summary a compressed item holds); with compression, the compressed WRITE's bit appended."""
        out = bytearray(mask)
        self.compressed_fits = False
        if self.compressing:
            out.append(0)
        if step is None:
            return bytes(out)
        out[1] = store.check(MemoryAction.write(step), t).accepted
        for slot in range(k):
            out[2 + slot] = slot < len(slots) and store.check(MemoryAction.merge(step, slots[slot]), t).accepted
        if self.compressing:
            self.compressed_fits = store.check(MemoryAction.write_compressed(step), t).accepted
            out[-1] = self.compressed_fits
        return bytes(out)
