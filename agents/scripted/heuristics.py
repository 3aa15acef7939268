"""``breaking_detector``: our strong unprivileged heuristic for the contract regimes.

Reads only what a policy may see: the step's observation, the store and its own memory of
the stream (the last snapshot shown per endpoint family, kept outside the byte budget, as a
recurrent agent could keep it in its state).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.compression import compressed_cost
from wpb_gym.core.contracts import Contract, contract_of, is_breaking  # noqa: F401  (Contract: the agents' name)
from wpb_gym.core.kind_budgets import content_kind
from wpb_gym.core.policy import EpisodeContext
from wpb_gym.core.store import StoreView
from wpb_gym.core.types import MemoryAction, Step
from wpb_gym.envs.observation.stream_table import KIND_ENDPOINT, KIND_GUIDE, kind_and_family

from ..base import BaselineAgent

_contract = contract_of


class BreakingDetector(BaselineAgent):
    """``breaking_detector``: WRITE breaking changes and migration guides; EXPIRE a change when it is reverted.

    * An endpoint snapshot is written when, compared with the last snapshot of its family
      that was shown, a parameter disappeared, a parameter became required or the endpoint
      became deprecated or was removed (``"removed": true``, as real-drift episodes show
      it). An endpoint shown removed is written even at its first sighting. Cosmetic changes
      (a parameter added, a requirement relaxed), other first sightings and documentation
      sections are skipped.
    * A migration guide (``old_api`` -> ``new_api``) is written: a rename is breaking.
    * A stored change whose endpoint later shows the contract it had *before* that change
      again has been reverted: it is expired.
    * When a chosen step does not fit, the largest stored items are expired while they are
      larger than the step and until it fits (each retained step counts once in F1, so
      small items are worth keeping); if that cannot make room, the step is skipped. With
      hierarchical budgets (``StoreView.kind_budgets``) it must fit its content kind's limit
      too, and while it does not, only items of its own kind are expired.
    * Where the run allows compressed writes (``StoreView.compression``), a chosen step that
      cannot be made to fit is written compressed if that fits the room left (nothing is
      expired for it: a compressed item is worth less than the plain ones it would replace).
    """

    name = "breaking_detector"
    aliases = ()
    description = "Writes breaking changes (params removed/required, deprecations, renames), expires reverted ones."
    track = "unprivileged"
    kind = "scripted"
    _param_names = ()
    compress_always = False  # compress every chosen step the codec can (breaking_compressor)

    def __init__(self) -> None:
        self.start_episode(None)

    def start_episode(self, context: EpisodeContext | None) -> None:
        self._last_contract: dict[Any, Contract] = {}
        # family -> [(stored change's t, the contract before it, None if unknown)]
        self._changes: dict[Any, list[tuple[int, Contract | None]]] = {}

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        # Not a generator: the stream memory must be updated even if the caller never iterates.
        obs = step.observation
        kind, family = kind_and_family(obs)
        actions: list[MemoryAction] = []
        if kind == KIND_GUIDE:
            actions = self._write(step, store, "migration guide")
        elif kind == KIND_ENDPOINT and isinstance(obs, dict):
            now = _contract(obs)
            before = self._last_contract.get(family)
            if now is not None:
                self._last_contract[family] = now
            if now is not None and before is None and now[3]:
                # A removal breaks every client whatever came before, so no history is needed.
                actions = self._write(step, store, "endpoint removed")
                if actions:  # the contract before is unknown: any re-added endpoint undoes it
                    self._changes[family] = [(step.t, None)]
            elif now is not None and before is not None and now != before:
                changes = [(t, old) for t, old in self._changes.get(family, []) if t in store]
                reverted = [t for t, old in changes if old == now or (old is None and not now[3])]
                actions = [MemoryAction.expire(t, reason="change reverted") for t in reverted]
                changes = [(t, old) for t, old in changes if t not in reverted]
                if not reverted and is_breaking(before, now):
                    writes = self._write(step, store, "breaking change")
                    if writes:
                        changes.append((step.t, before))
                    actions += writes
                self._changes[family] = changes
        return iter(actions)

    def _write(self, step: Step, store: StoreView, reason: str) -> list[MemoryAction]:
        small = compressed_cost(step) if store.compression is not None else None
        if small is not None and self.compress_always:
            plan = self._make_room(small, step, store)
            return [] if plan is None else [*plan, MemoryAction.write_compressed(step, reason=f"{reason}, compressed")]
        plan = self._make_room(estimate_bytes(step), step, store)
        if plan is not None:
            return [*plan, MemoryAction.write(step, reason=reason)]
        if small is not None and store.check(MemoryAction.write_compressed(step), step.t).accepted:
            return [MemoryAction.write_compressed(step, reason=f"{reason}, compressed to fit")]
        return []

    @staticmethod
    def _make_room(cost: int, step: Step, store: StoreView) -> list[MemoryAction] | None:
        """The EXPIREs that make a WRITE of ``cost`` bytes of ``step`` fit, or None if none can."""
        if cost > store.max_bytes:
            return None
        # With hierarchical budgets the step must fit its kind's limit too, and only items of
        # its own kind make room there.
        limits = store.kind_budgets
        kind = content_kind(step.observation) if limits else None
        limit = limits.limit(kind) if limits and kind is not None else None
        if limit is not None and cost > limit:
            return None
        room = store.remaining()
        kind_room = math.inf if limit is None else limit - store.kind_used(kind)  # type: ignore[arg-type]
        plan: list[int] = []
        if cost > room or cost > kind_room:
            for item in sorted(store.iter_items(), key=lambda item: -item.byte_cost):
                if (cost <= room and cost <= kind_room) or item.byte_cost <= cost:
                    break
                same = limit is not None and content_kind(item.step.observation) == kind
                if cost > kind_room and not same:
                    continue
                plan.append(item.t)
                room += item.byte_cost
                kind_room += item.byte_cost if same else 0
        if cost > room or cost > kind_room:
            return None
        return [MemoryAction.expire(t, reason="make room (largest first)") for t in plan]


class BreakingCompressor(BreakingDetector):
    """``breaking_compressor``: ``breaking_detector`` that writes every chosen step compressed
    where the run allows compressed writes (``StoreView.compression``) and the codec can
    compress it, and plainly otherwise: the other end of the trade between bytes and credit.
    Without compression it is ``breaking_detector``."""

    name = "breaking_compressor"
    description = "breaking_detector writing every chosen step compressed where the run allows it."
    compress_always = True


class BreakingRationer(BreakingDetector):
    """``breaking_rationer``: ``breaking_detector`` that rations the room between plain and
    compressed writes where the run allows compressed writes (``StoreView.compression``).

    It counts the steps it has chosen so far and expects the rest of the episode to bring them
    at the same rate, the count seen weighed against ``prior`` chosen steps per 100 steps
    (``prior_weight`` steps' worth of evidence). For the chosen step it then plans the
    remaining room as if each expected step cost what this one does: the numbers of plain and
    of compressed writes that give the best F1 with what memory holds. It writes this step
    plainly if that plan writes any step plainly, compressed if it writes only compressed
    ones, and otherwise falls back on ``breaking_detector``'s rule (which may make room).
    Without compression it is ``breaking_detector``.
    """

    name = "breaking_rationer"
    description = "breaking_detector that plans plain and compressed writes for the chosen steps still to come."
    _param_names = ("prior", "prior_weight")

    def __init__(self, prior: float = 12.0, prior_weight: float = 200.0) -> None:
        self.prior = float(prior)
        self.prior_weight = float(prior_weight)
        super().__init__()

    def start_episode(self, context: EpisodeContext | None) -> None:
        super().start_episode(context)
        self._length = context.length if context is not None else None
        self._chosen = 0

    def _write(self, step: Step, store: StoreView, reason: str) -> list[MemoryAction]:
        self._chosen += 1
        compression = store.compression
        small = compressed_cost(step) if compression is not None else None
        if small is None or self._length is None:
            return super()._write(step, store, reason)
        seen = step.t + 1
        rate = (self._chosen + self.prior * self.prior_weight / 100) / (seen + self.prior_weight)
        coming = max(0, round(rate * (self._length - seen)))  # chosen steps still expected after this one
        plain_held = len(store) - len(store.compressed_timesteps())
        plain, packed = best_mix(store.remaining(), plain_cost=estimate_bytes(step), small_cost=small, n=1 + coming,
                                 plain_held=plain_held, packed_held=len(store.compressed_timesteps()),
                                 credit=compression.credit, relevant=self._chosen + coming)  # type: ignore[union-attr]
        if plain:
            return super()._write(step, store, reason)
        if packed and store.check(MemoryAction.write_compressed(step), step.t).accepted:
            return [MemoryAction.write_compressed(step, reason=f"{reason}, compressed to ration the room")]
        return super()._write(step, store, reason)


def best_mix(room: int, *, plain_cost: int, small_cost: int, n: int, plain_held: int, packed_held: int,
             credit: float, relevant: int) -> tuple[int, int]:
    """The (plain, compressed) writes of ``n`` steps of these costs within ``room`` that give the
    best F1 with the items held (every item counted as a kept critical step, ``relevant`` of
    them expected in all); ties go to fewer plain writes."""
    best, choice = -1.0, (0, 0)
    for plain in range(n + 1):
        left = room - plain * plain_cost
        if left < 0:
            break
        for packed in (0, min(n - plain, left // small_cost)):  # F1 is monotone in it: an end is best
            kept = plain_held + packed_held + plain + packed
            hits = plain_held + plain + credit * (packed_held + packed)
            f1 = 2 * hits / (kept + relevant) if kept + relevant else 0.0
            if f1 > best + 1e-12:
                best, choice = f1, (plain, packed)
    return choice
