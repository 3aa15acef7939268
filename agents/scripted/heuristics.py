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
    """

    name = "breaking_detector"
    aliases = ()
    description = "Writes breaking changes (params removed/required, deprecations, renames), expires reverted ones."
    track = "unprivileged"
    kind = "scripted"
    _param_names = ()

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

    @staticmethod
    def _write(step: Step, store: StoreView, reason: str) -> list[MemoryAction]:
        cost = estimate_bytes(step)
        if cost > store.max_bytes:
            return []
        # With hierarchical budgets the step must fit its kind's limit too, and only items of
        # its own kind make room there.
        limits = store.kind_budgets
        kind = content_kind(step.observation) if limits else None
        limit = limits.limit(kind) if limits and kind is not None else None
        if limit is not None and cost > limit:
            return []
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
            return []
        return [
            *(MemoryAction.expire(t, reason="make room (largest first)") for t in plan),
            MemoryAction.write(step, reason=reason),
        ]
