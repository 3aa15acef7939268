"""The byte-accurate external memory (spec §2–3).

``ByteMemoryStore.apply(action, current_t)`` is the only way to change memory. Every action
is first judged by ``check`` — the same function answers "would this be accepted?" for
action masks — and a rejected action leaves the store exactly as it was.

Rules (spec §3.2, made precise where it is silent):

* WRITE stores the current step (``step.t == current_t``) if no item holds that timestep,
  charging ``estimate_bytes(step)``.
* MERGE appends a delta item at the current timestep to the *base* (WRITE) item at
  ``target_t``; both observations are dicts with exactly equal ``"api"``; the delta is the
  canonical shallow diff, must be non-empty and, when the action supplies one, must equal it
  (compared as canonical JSON text); cost ``len(json(delta)) + 16``.
* EXPIRE removes the item at ``target_t < current_t`` and credits its exact cost.
* SKIP always succeeds. Anything over budget is rejected.
* With kind budgets (``wpb_gym.core.kind_budgets``), a WRITE or MERGE that would take its
  content kind past that kind's limit is rejected too (``OVER_KIND_BUDGET``; the total is
  judged first); a MERGE delta counts against its base item's kind.
* With a write-time budget (``wpb_gym.core.write_time``), a WRITE or MERGE whose ticks exceed
  the time left is rejected (``OUT_OF_WRITE_TIME``, judged after the bytes); an accepted one
  spends its ticks for good (EXPIRE gives none back).
* A compressed WRITE (``MemoryAction.codec``, ``wpb_gym.core.compression``) is rejected
  unless the store allows compression (``COMPRESSION_OFF``) and the codec can compress the
  step (``NOT_COMPRESSIBLE``, ``NOTHING_TO_COMPRESS``); then it is a WRITE of the step's
  summary, priced by the WRITE formula on it, and the item holds that summary.

One item per timestep, so an item is addressed by its timestep. Items enter in increasing
``t`` (only the current step can be stored and time never goes back), which keeps "oldest",
"newest" and "newest base item of an endpoint" amortised O(1) with lazily cleaned indexes.
"""

from __future__ import annotations

import json
import weakref
from collections import Counter, deque
from enum import Enum
from typing import Any, Iterator, NamedTuple

from .accounting import MERGE_KEY, canonical_delta, estimate_bytes, identity_key, merge_cost
from .budget import ByteBudget
from .compression import Compression, compressed_step, refusal
from .kind_budgets import KindBudgets, content_kind
from .store_view import StoreView
from .types import COMPRESSION_CODEC, FrozenMapping, MemoryAction, MemoryItem, Step, frozen_instance
from .write_time import WriteTime


class Reason(str, Enum):
    """Why ``check``/``apply`` accepted or rejected an action."""

    ACCEPTED = "accepted"
    OVER_BUDGET = "over_budget"
    OVER_KIND_BUDGET = "over_kind_budget"  # past its content kind's own limit (hierarchical budgets)
    OUT_OF_WRITE_TIME = "out_of_write_time"  # the episode's write time would run out
    NOT_CURRENT_STEP = "not_current_step"  # WRITE/MERGE of a step other than the current one
    TIMESTEP_OCCUPIED = "timestep_occupied"  # an item already holds the current timestep
    TARGET_MISSING = "target_missing"  # no item at target_t
    TARGET_NOT_BASE = "target_not_base"  # MERGE target is itself a MERGE item
    NOT_SAME_ENDPOINT = "not_same_endpoint"  # MERGE across different / missing "api"
    EMPTY_DELTA = "empty_delta"  # MERGE that changes nothing
    DELTA_MISMATCH = "delta_mismatch"  # supplied delta differs from the canonical one
    TARGET_NOT_OLDER = "target_not_older"  # EXPIRE of an item written at the current timestep
    COMPRESSION_OFF = "compression_off"  # a compressed WRITE where the run does not allow compression
    NOT_COMPRESSIBLE = "not_compressible"  # a compressed WRITE of an observation that is not an object
    NOTHING_TO_COMPRESS = "nothing_to_compress"  # a compressed WRITE whose summary would drop nothing


class Decision(NamedTuple):
    """Outcome of judging an action: accepted or not, why, and its bytes.

    ``byte_delta`` is the change in bytes used an accepted action makes (positive for WRITE
    and MERGE, minus the item's cost for EXPIRE, 0 for SKIP). For a rejection it is what the
    action would have charged when that is known (so OVER_BUDGET says by how much), else 0.

    A tuple, so that nobody holding a decision (``StoreView.check`` hands them to policies,
    and equal ones are shared) can change what the store reads from it later.
    """

    accepted: bool
    reason: Reason
    byte_delta: int = 0
    delta: dict[str, Any] | None = None  # the canonical delta of an accepted MERGE

    def __bool__(self) -> bool:
        return self.accepted


_SKIP_ACCEPTED = Decision(True, Reason.ACCEPTED)


# Decisions are immutable: equal ones are shared (7% of the paper grid's time, measured).
_ACCEPTED_DECISIONS: dict[int, Decision] = {}
_DECISION_CACHE_LIMIT = 65536
_REASON_CACHE_LIMIT = 4096  # reasons whose metadata a store shares (14% of the paper grid's time)


def _accepted(byte_delta: int) -> Decision:
    """``Decision(True, Reason.ACCEPTED, byte_delta)``, one object per byte change."""
    decision = _ACCEPTED_DECISIONS.get(byte_delta)
    if decision is None:
        if len(_ACCEPTED_DECISIONS) >= _DECISION_CACHE_LIMIT:
            _ACCEPTED_DECISIONS.clear()
        decision = _ACCEPTED_DECISIONS[byte_delta] = Decision(True, Reason.ACCEPTED, byte_delta)
    return decision


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _json_copy(value: Any) -> Any:
    # A private copy of JSON-like data: what a policy does to the items it is shown cannot
    # change how the store judges later actions. Immutable scalars are shared, not visited.
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {k: v if type(v) in _ATOMS else _json_copy(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _ATOMS else _json_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_json_copy(v) for v in value)
    return value


def _same_json(supplied: Any, canonical: dict[str, Any]) -> bool:
    try:
        return json.dumps(supplied, sort_keys=True) == json.dumps(canonical, sort_keys=True)
    except (TypeError, ValueError):  # not JSON at all: it cannot be the canonical delta
        return False


class ByteMemoryStore:
    """Append-only memory under a ``ByteBudget``; see the module docstring for the rules."""

    def __init__(self, budget: ByteBudget | int, kind_budgets: KindBudgets | dict[str, int] | None = None,
                 write_time: WriteTime | None = None, compression: Compression | None = None) -> None:
        self.budget = budget if isinstance(budget, ByteBudget) else ByteBudget(budget)
        if self.budget.used:
            raise ValueError("ByteMemoryStore needs a fresh ByteBudget (used == 0)")
        self.kind_budgets = KindBudgets.of(kind_budgets)
        # With kind budgets: each kind's limit (None: the total only), bytes used and items.
        self._kind_limits: dict[str, int] | None = self.kind_budgets.as_dict() if self.kind_budgets else None
        self._kind_used: dict[str, int] = {}
        self._item_kinds: dict[int, str] = {}
        if write_time is not None and not isinstance(write_time, WriteTime):
            raise TypeError(f"write_time: expected a WriteTime, got {type(write_time).__name__}")
        self.write_time = write_time
        self.time_used = 0  # ticks the accepted writes took (counted only with a write-time budget)
        if compression is not None and not isinstance(compression, Compression):
            raise TypeError(f"compression: expected a Compression, got {type(compression).__name__}")
        self.compression = compression
        self._compressed: set[int] = set()  # timesteps whose item is a compressed WRITE
        # What policies are shown (``get``, ``items``...). Nothing the store judges is read from
        # these: a policy can reach an item's fields (object.__setattr__), not the records.
        self._items: dict[int, MemoryItem] = {}
        # The store's own record of every item, which every rule and every credit reads: its
        # byte cost, and for a MERGE item, its parent's timestep and endpoint identity key.
        self._costs: dict[int, int] = {}
        self._merges: dict[int, tuple[int, Any]] = {}
        # Rules are judged on these private copies of base observations, never on the items
        # handed to policies.
        self._base_observations: dict[int, Any] = {}
        self._order: deque[int] = deque()
        self._bases_by_api: dict[Any, list[int]] = {}
        self._clock: int | None = None
        self._expired: list[tuple[MemoryItem, int]] = []  # expired items, with the timestep they left at
        # Item metadata mappings, per store: an item's mapping is shared with no other store's.
        self._reason_metadata: dict[Any, FrozenMapping] = {None: FrozenMapping()}
        self.accepted_counts: Counter[str] = Counter()
        self.rejected_counts: Counter[str] = Counter()
        # The view refers back to the store; a weak reference here keeps the two out of a
        # cycle, so a store is freed as soon as it is dropped (an evaluation drops thousands),
        # not left to the cyclic garbage collector.
        self._view: weakref.ref[StoreView] | None = None

    # ---------------------------------------------------------------- judging and applying
    def check(self, action: MemoryAction, current_t: int) -> Decision:
        """Judge ``action`` at timestep ``current_t`` without changing anything."""
        self._check_clock(current_t)
        kind = action.action
        if kind == "SKIP":
            return _SKIP_ACCEPTED
        if kind == "EXPIRE":
            return self._check_expire(action.target_t, current_t)
        if kind == "WRITE":
            if action.codec is not None:
                return self._check_compressed(action.step, current_t)[0]
            return self._check_write(action.step, current_t)
        step = action.step
        if step.t != current_t:
            return Decision(False, Reason.NOT_CURRENT_STEP)
        if current_t in self._items:
            return Decision(False, Reason.TIMESTEP_OCCUPIED)
        if action.target_t not in self._costs:
            return Decision(False, Reason.TARGET_MISSING)
        if action.target_t in self._merges:
            return Decision(False, Reason.TARGET_NOT_BASE)
        delta = canonical_delta(step.observation, self._base_observations.get(action.target_t))
        if delta is None:
            return Decision(False, Reason.NOT_SAME_ENDPOINT)
        if not delta:
            return Decision(False, Reason.EMPTY_DELTA)
        if action.delta is not None and not _same_json(action.delta, delta):
            return Decision(False, Reason.DELTA_MISMATCH)
        cost = merge_cost(delta)
        if not self.budget.can_afford(cost):
            return Decision(False, Reason.OVER_BUDGET, cost)
        if self._kind_limits is not None and not self._kind_affords(self._item_kinds[action.target_t], cost):
            return Decision(False, Reason.OVER_KIND_BUDGET, cost)
        if self.write_time is not None and not self._time_affords(cost):
            return Decision(False, Reason.OUT_OF_WRITE_TIME, cost)
        return Decision(True, Reason.ACCEPTED, cost, delta)

    def _time_affords(self, cost: int) -> bool:
        return self.time_used + self.write_time.ticks(cost) <= self.write_time.total  # type: ignore[union-attr]

    def _kind_affords(self, kind: str, cost: int) -> bool:
        limit = self._kind_limits.get(kind)  # type: ignore[union-attr]
        return limit is None or self._kind_used.get(kind, 0) + cost <= limit

    def _check_clock(self, current_t: int) -> None:
        if self._clock is not None and current_t < self._clock:
            raise ValueError(
                f"current_t={current_t} is before the store's clock ({self._clock}): time only moves forward"
            )

    def _check_expire(self, target_t: int, current_t: int) -> Decision:
        cost = self._costs.get(target_t)
        if cost is None:
            return Decision(False, Reason.TARGET_MISSING)
        if target_t >= current_t:
            return Decision(False, Reason.TARGET_NOT_OLDER)
        return _accepted(-cost)

    def _check_write(self, step: Step, current_t: int) -> Decision:
        if step.t != current_t:
            return Decision(False, Reason.NOT_CURRENT_STEP)
        if current_t in self._items:
            return Decision(False, Reason.TIMESTEP_OCCUPIED)
        cost = estimate_bytes(step)
        if not self.budget.can_afford(cost):
            return Decision(False, Reason.OVER_BUDGET, cost)
        if self._kind_limits is not None and not self._kind_affords(content_kind(step.observation), cost):
            return Decision(False, Reason.OVER_KIND_BUDGET, cost)
        if self.write_time is not None and not self._time_affords(cost):
            return Decision(False, Reason.OUT_OF_WRITE_TIME, cost)
        return _accepted(cost)

    def _check_compressed(self, step: Step, current_t: int) -> tuple[Decision, Step | None]:
        """The decision on a compressed WRITE of ``step``, and the summary it would store."""
        if step.t != current_t:
            return Decision(False, Reason.NOT_CURRENT_STEP), None
        if self.compression is None:
            return Decision(False, Reason.COMPRESSION_OFF), None
        summary = compressed_step(step)
        if summary is None:
            return Decision(False, Reason(refusal(step))), None
        return self._check_write(summary, current_t), summary

    def would_accept(self, action: MemoryAction, current_t: int) -> bool:
        return self.check(action, current_t).accepted

    def execute(self, action: MemoryAction, current_t: int, *, shown: Step | None = None) -> Decision:
        """Apply ``action`` at ``current_t`` and return the full decision (reason, bytes).

        ``shown``: for a WRITE or MERGE, the policy's own copy of the step, which the new item
        presents (``item.step``). The action's step is then the caller's private, canonical
        copy — the one the store judges and prices — and the store keeps it without copying
        (the evaluator's runner passes both; see ``wpb_gym.evaluation.playing``). Without ``shown`` the
        item presents the action's step, and the store judges later MERGEs on a private copy.
        """
        decision = self.check(action, current_t)
        kind = action.action
        if not self._record(kind, decision, current_t):
            return decision
        if kind == "WRITE":
            if action.codec is not None:
                self._store_compressed(action.step, current_t, decision.byte_delta, action.reason, shown)
            else:
                self._store_write(action.step, current_t, decision.byte_delta, action.reason, shown)
        elif kind == "MERGE":
            self._store_merge(action, current_t, decision, shown)
        elif kind == "EXPIRE":
            self._remove(action.target_t)
        return decision

    # The three shortcuts below are ``execute`` for one kind of action without building a
    # ``MemoryAction`` (the environment calls them at every step); same rules, same counts.
    def skip(self, current_t: int) -> Decision:
        """``execute(MemoryAction.skip(), current_t)``."""
        self._check_clock(current_t)
        self._clock = current_t
        self.accepted_counts["SKIP"] += 1
        return _SKIP_ACCEPTED

    def write(self, step: Step, current_t: int, reason: str | None = None, *, shown: Step | None = None) -> Decision:
        """``execute(MemoryAction.write(step, reason), current_t, shown=shown)``."""
        self._check_clock(current_t)
        decision = self._check_write(step, current_t)
        if self._record("WRITE", decision, current_t):
            self._store_write(step, current_t, decision.byte_delta, reason, shown)
        return decision

    def write_compressed(self, step: Step, current_t: int, reason: str | None = None, *,
                         shown: Step | None = None) -> Decision:
        """``execute(MemoryAction.write_compressed(step, reason), current_t, shown=shown)``."""
        self._check_clock(current_t)
        decision, _ = self._check_compressed(step, current_t)
        if self._record("WRITE", decision, current_t):
            self._store_compressed(step, current_t, decision.byte_delta, reason, shown)
        return decision

    def expire(self, target_t: int, current_t: int) -> Decision:
        """``execute(MemoryAction.expire(target_t), current_t)``."""
        self._check_clock(current_t)
        decision = self._check_expire(target_t, current_t)
        if self._record("EXPIRE", decision, current_t):
            self._remove(target_t)
        return decision

    def _record(self, kind: str, decision: Decision, current_t: int) -> bool:
        self._clock = current_t
        if decision.accepted:
            self.accepted_counts[kind] += 1
            return True
        self.rejected_counts[kind] += 1
        return False

    def _store_compressed(self, step: Step, current_t: int, cost: int, reason: str | None,
                          shown: Step | None) -> None:
        # The summary of the policy's copy is what the item presents; the summary of the
        # canonical copy is what later rules (MERGE deltas) are judged on.
        summary = compressed_step(step)
        self._store_write(summary, current_t, cost, reason, None if shown is None else compressed_step(shown),
                          COMPRESSION_CODEC)
        self._compressed.add(current_t)

    def _store_write(self, step: Step, current_t: int, cost: int, reason: str | None, shown: Step | None,
                     codec: str | None = None) -> None:
        self.budget.consume(cost)
        obs = step.observation
        if shown is None:
            private = _json_copy(obs) if isinstance(obs, dict) else None
            shown_api = private.get(MERGE_KEY) if private is not None else None
        else:  # the caller's canonical copy, which no policy holds
            private = obs if isinstance(obs, dict) else None
            shown_api = private.get(MERGE_KEY) if private is not None else None
            if type(shown_api) not in _ATOMS:  # a container: the item presents the policy's copy of it
                shown_obs = shown.observation
                shown_api = shown_obs.get(MERGE_KEY) if isinstance(shown_obs, dict) else None
        if private is not None:
            self._base_observations[current_t] = private
            if MERGE_KEY in private:
                self._bases_by_api.setdefault(identity_key(private[MERGE_KEY]), []).append(current_t)
        self._costs[current_t] = cost
        if self._kind_limits is not None:
            self._add_kind(current_t, content_kind(obs), cost)
        if self.write_time is not None:
            self.time_used += self.write_time.ticks(cost)
        metadata = self._reason_metadata.get(reason) if reason is None or type(reason) is str else None
        self._items[current_t] = frozen_instance(
            MemoryItem,
            {
                "step": step if shown is None else shown,
                "written_at": current_t,
                "byte_cost": cost,
                "metadata": self._metadata(reason) if metadata is None else metadata,
                "kind": "WRITE",
                "merge_parent_t": None,
                "delta": None,
                "api": shown_api,
                "codec": codec,
            },
        )
        self._order.append(current_t)

    def _metadata(self, reason: Any) -> FrozenMapping:
        # Policies repeat a few reasons: their mappings are shared within this store.
        try:
            metadata = self._reason_metadata.get(reason)
        except TypeError:  # an unhashable reason
            return FrozenMapping({"reason": reason})
        if metadata is None:
            metadata = FrozenMapping({"reason": reason})
            if type(reason) is str and len(self._reason_metadata) < _REASON_CACHE_LIMIT:
                self._reason_metadata[reason] = metadata
        return metadata

    def _store_merge(self, action: MemoryAction, current_t: int, decision: Decision, shown: Step | None) -> None:
        self.budget.consume(decision.byte_delta)
        parent_t = action.target_t
        self._costs[current_t] = decision.byte_delta
        if self._kind_limits is not None:
            self._add_kind(current_t, self._item_kinds[parent_t], decision.byte_delta)
        if self.write_time is not None:
            self.time_used += self.write_time.ticks(decision.byte_delta)
        self._merges[current_t] = (parent_t, identity_key(self._base_observations[parent_t][MERGE_KEY]))
        self._items[current_t] = MemoryItem(
            action.step if shown is None else shown,
            current_t,
            decision.byte_delta,
            self._metadata(action.reason),
            kind="MERGE",
            merge_parent_t=parent_t,
            delta=_json_copy(decision.delta),
            api=self._items[parent_t].api,  # MERGE only joins an equal "api"
        )
        self._order.append(current_t)

    def _add_kind(self, t: int, kind: str, cost: int) -> None:
        self._item_kinds[t] = kind
        self._kind_used[kind] = self._kind_used.get(kind, 0) + cost

    def _remove(self, target_t: int) -> None:
        cost = self._costs.pop(target_t)
        if self._kind_limits is not None:
            kind = self._item_kinds.pop(target_t)
            self._kind_used[kind] -= cost
        self._merges.pop(target_t, None)
        self._compressed.discard(target_t)
        # Kept with the timestep it left at: what memory held at an earlier moment can be read
        # back (``held_at``), as the query tier's checkpoints read it.
        self._expired.append((self._items.pop(target_t), self._clock))
        self._base_observations.pop(target_t, None)
        self.budget.release(cost)

    def apply(self, action: MemoryAction, current_t: int) -> bool:
        """Apply ``action`` at timestep ``current_t``; True if accepted (spec §6.3)."""
        return self.execute(action, current_t).accepted

    # ---------------------------------------------------------------- reading
    @property
    def bytes_used(self) -> int:
        return self.budget.used

    @property
    def max_bytes(self) -> int:
        return self.budget.max_bytes

    def remaining(self) -> int:
        return self.budget.remaining()

    def time_remaining(self) -> int | None:
        """Ticks of write time left this episode (None without a write-time budget)."""
        return None if self.write_time is None else self.write_time.total - self.time_used

    def kind_used(self, kind: str) -> int:
        """Bytes the items of content ``kind`` use (0 without kind budgets: they are not counted)."""
        return self._kind_used.get(kind, 0)

    def kind_remaining(self, kind: str) -> int:
        """Bytes a WRITE of ``kind`` may still take: the least of the total's and the kind's room."""
        limit = self._kind_limits.get(kind) if self._kind_limits is not None else None
        room = self.budget.remaining()
        return room if limit is None else min(room, limit - self._kind_used.get(kind, 0))

    @property
    def clock(self) -> int | None:
        """The last ``current_t`` an action was applied at (None before the first)."""
        return self._clock

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, t: object) -> bool:
        return t in self._items

    def get(self, t: int) -> MemoryItem | None:
        return self._items.get(t)

    def items(self) -> tuple[MemoryItem, ...]:
        """Stored items, oldest first (a snapshot: safe to iterate while applying actions)."""
        return tuple(self._items.values())

    def timesteps(self) -> tuple[int, ...]:
        return tuple(self._items)

    def iter_items(self) -> Iterator[MemoryItem]:
        """Stored items, oldest first, without a copy (do not apply actions while iterating)."""
        return iter(self._items.values())

    def held_at(self, t: int) -> tuple[MemoryItem, ...]:
        """The items memory held when timestep ``t`` arrived, before any action at ``t``: those
        written before ``t`` and not expired before ``t`` (oldest first)."""
        held = [item for item, left in self._expired if item.t < t <= left]
        held.extend(item for item in self._items.values() if item.t < t)
        held.sort(key=lambda item: item.t)
        return tuple(held)

    def forget_before(self, t: int) -> None:
        """Forget what only a reading of a moment before ``t`` needs: the expired items that left
        before ``t`` (``held_at`` of ``t`` or later never returns them; ``expired_items`` no
        longer lists them), and the bookkeeping of items no longer held. A store that runs
        without end (an endless query stream) calls it now and then, so that it stays the size
        of what it holds."""
        self._expired = [(item, left) for item, left in self._expired if left >= t]
        self._order = deque(k for k in self._order if k in self._items)
        for key, stack in list(self._bases_by_api.items()):
            live = [k for k in stack if k in self._items]
            if live:
                self._bases_by_api[key] = live
            else:
                del self._bases_by_api[key]

    def expired_items(self) -> tuple[tuple[MemoryItem, int], ...]:
        """Every expired item with the timestep it was expired at, in the order they left."""
        return tuple(self._expired)

    def oldest_item(self) -> MemoryItem | None:
        order = self._order
        while order and order[0] not in self._items:
            order.popleft()
        return self._items[order[0]] if order else None

    def newest_item(self) -> MemoryItem | None:
        order = self._order
        while order and order[-1] not in self._items:
            order.pop()
        return self._items[order[-1]] if order else None

    def newest_base_item(self, api: Any) -> MemoryItem | None:
        """The most recent stored WRITE item whose ``observation["api"] == api``."""
        stack = self._bases_by_api.get(identity_key(api))
        if not stack:
            return None
        while stack and stack[-1] not in self._items:
            stack.pop()
        return self._items[stack[-1]] if stack else None

    def compressed_timesteps(self) -> tuple[int, ...]:
        """The timesteps whose item is a compressed WRITE, sorted."""
        return tuple(sorted(self._compressed))

    def retained_timesteps(self) -> tuple[int, ...]:
        """The retained set W (spec §4.1), sorted.

        WRITE items count; a MERGE item counts only while its parent base item is present
        and has the same endpoint identity (``"api"``) as the merged step.
        """
        merges = self._merges
        if not merges:
            return tuple(self._costs)
        retained = []
        for t in self._costs:
            merge = merges.get(t)
            if merge is None:
                retained.append(t)
                continue
            parent_t, key = merge
            base = self._base_observations.get(parent_t)
            if parent_t not in merges and base is not None and identity_key(base.get(MERGE_KEY)) == key:
                retained.append(t)
        return tuple(retained)

    def retained_loss(self, target_t: int) -> tuple[int, ...]:
        """The items that would leave the retained set W if item ``target_t`` were expired: the
        item itself if it is retained, and for a base item its MERGE deltas (() if absent)."""
        if target_t not in self._costs:
            return ()
        if target_t in self._merges:
            return (target_t,) if self._retained(target_t) else ()
        if not self._merges:
            return (target_t,)
        children = [t for t, (parent_t, _) in self._merges.items() if parent_t == target_t and self._retained(t)]
        return (target_t, *children)

    def _retained(self, t: int) -> bool:
        """Whether stored item ``t`` is in W (``retained_timesteps``' rule for one item)."""
        merge = self._merges.get(t)
        if merge is None:
            return True
        parent_t, key = merge
        base = self._base_observations.get(parent_t)
        return parent_t not in self._merges and base is not None and identity_key(base.get(MERGE_KEY)) == key

    def __getstate__(self) -> dict[str, Any]:
        # The view is a cache of the one policies hold: a copy (pickle, deepcopy) makes its own,
        # rather than failing on the weak reference or handing out the original's.
        return {**self.__dict__, "_view": None}

    def view(self) -> StoreView:
        """A read-only view for policies."""
        view = self._view() if self._view is not None else None
        if view is None:
            view = StoreView(self)
            self._view = weakref.ref(view)
        return view

    def __repr__(self) -> str:
        return f"ByteMemoryStore(items={len(self._items)}, used={self.bytes_used}, max_bytes={self.max_bytes})"
