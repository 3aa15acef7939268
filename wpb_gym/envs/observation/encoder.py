"""The observation encoder: the fast path from the env's state to its observation and mask.

Every speed device of the environment lives here, and nowhere else:

* per-episode tables (``StreamTable``) and, per timestep, what does not depend on memory
  (``_seen``, ``_step_middle``), computed once at ``start``;
* indexes of the stored items by family and by endpoint, kept as items come and go
  (``stored``, ``expired``), so a decision reads a few list entries instead of scanning
  memory; they index the store's items and are checked against the store by the tests;
* each stored item's slot row, packed as float32 when it is stored and repacked only when
  one of its flags changes; rows and masks that recur are packed once per environment.

``reference.py`` computes the same observation literally, and a differential test
(``tests/envs/test_reference_encoder.py``) compares the two on random reachable states.
"""

from __future__ import annotations

import heapq
import struct
from itertools import islice
from typing import Any

import numpy as np

from ...core.accounting import canonical_delta, merge_cost
from ...core.store import ByteMemoryStore, Reason
from ...core.types import Episode, MemoryAction, MemoryItem
from .comparisons import KIND_FLAGS, SLOT_KIND_FLAGS, compare, contracts, no_reference, reverted, seen_features
from .features import MEMORY_FEATURES, SLOT_CONTEXT_FEATURES, STEP_FEATURES, ObservationLayout
from .stream_table import KIND_ENDPOINT, ObservationShapes, StreamTable


class ObservationEncoder:
    """Observations and masks of one environment's episodes, one episode at a time.

    ``start`` begins an episode; ``stored`` and ``expired`` follow the store's accepted
    actions; ``update`` computes the slot layout, the observation and the mask of the
    current state: ``slots`` (the timestep of each shown item, slot 0 first), ``obs_bytes``
    (float32) and ``mask`` (a byte per action); ``observation()``, ``mask_array()`` copy them.
    """

    def __init__(self, layout: ObservationLayout, *, slot_order: str, max_expires_per_step: int | None,
                 observation_mode: str) -> None:
        self.layout = layout
        self.K = K = layout.slots
        self.privileged = layout.privileged
        self.slot_order = slot_order
        self.cap = max_expires_per_step
        self.observation_mode = observation_mode
        self._n_step, self._n_mem, self._n_slot = layout.n_step, layout.n_memory, layout.n_slot
        # Columns of a stored item's packed row (the slot row after present and age).
        n_static = self._n_slot - len(SLOT_CONTEXT_FEATURES) - 2
        columns = [n_static + i for i in range(len(SLOT_CONTEXT_FEATURES))]  # in SLOT_CONTEXT_FEATURES' order
        self._col_orphan, self._col_same_family, self._col_same_api = columns[:3]
        self._col_superseded, self._col_merge_ok, self._col_reverted = columns[3:]
        self._step_format = f"={self._n_step}f"  # format strings, not Structs: Structs do not pickle
        self._tail_format = f"={self._n_slot - 2}f"
        self._pad = [bytes(4 * self._n_slot * (K - n)) for n in range(K + 1)]
        # Packed rows shared by the episodes of this environment (see _prepare_step_features).
        self._middle_format = f"={len(STEP_FEATURES) - 3}f"
        self._middle_rows: dict[tuple[int, float, tuple[float, ...]], bytes] = {}
        self._write_rows: dict[tuple[Any, ...], tuple[tuple[float, ...], bytes]] = {}  # see stored
        self._slot_heads_by_length: dict[int, list[bytes]] = {}
        self._final_step_row = bytes(4 * self._n_step)  # every step feature is 0 once the episode is over
        # The mask without MERGE bits, by [WRITE fits][EXPIREs allowed]: SKIP, WRITE, then
        # EXPIRE for the first n slots.
        self._mask_templates = [
            [bytes([1, fits, *[0] * K, *[1] * n, *[0] * (K - n)]) for n in range(K + 1)] for fits in (0, 1)
        ]
        self._mask_arrays: dict[bytes, np.ndarray] = {}  # few masks recur: each is built once
        self._shapes = ObservationShapes()  # observation descriptions shared by the episodes
        self.slots: list[int] = []
        self.obs_bytes = b""
        self.mask = b""

    def fresh(self) -> ObservationEncoder:
        """An encoder of the same settings, with empty caches and no episode."""
        settings = {"slot_order": self.slot_order, "observation_mode": self.observation_mode}
        return type(self)(self.layout, max_expires_per_step=self.cap, **settings)

    def start(self, episode: Episode, track: str, store: ByteMemoryStore) -> StreamTable:
        """Begin ``episode`` on ``track`` with the empty ``store``; returns the episode's table."""
        self._table = StreamTable(episode, track, self._shapes)
        self._store = store
        self._budget = store.max_bytes
        self._T = len(episode)
        self._inv_T = 1.0 / self._T
        self._prepare_step_features()
        self._family_items: dict[int, list[int]] = {}
        self._family_live: dict[int, int] = {}
        self._family_newest: dict[int, int] = {}  # family -> newest stored item (absent: none)
        self._merge_parent: dict[int, int] = {}  # stored MERGE item -> its base
        self._api_bases: dict[int, list[int]] = {}
        self._api_live: dict[int, int] = {}
        self._row_values: dict[int, list[float]] = {}  # stored item -> its slot row
        self._rows: dict[int, bytes] = {}  # the same rows, packed as float32, in the store's order
        self._item_bytes: dict[int, int] = {}  # stored item -> its bytes
        self._by_size: list[tuple[int, int]] = []  # heap of (-bytes, t); expired items leave it lazily
        self._merge_costs: dict[tuple[int, int], int | None] = {}  # (content, content) -> MERGE bytes
        self._comparisons: dict[tuple[int, int], tuple[float, ...]] = {}  # (content, content) -> comparisons.compare
        self._merges = 0
        return self._table

    # ---------------------------------------------------------------- following the store
    def stored(self, t: int, merge_target: int | None, cost: int) -> None:
        """The store accepted WRITE (``merge_target`` None) or MERGE of step ``t`` for ``cost`` bytes."""
        tab = self._table
        fam = tab.families[t]
        if fam >= 0:
            self._family_items.setdefault(fam, []).append(t)
            self._family_live[fam] = self._family_live.get(fam, 0) + 1
            previous = self._family_newest.get(fam)
            if previous is not None:
                self._set_row_flag(previous, self._col_superseded, 1.0)
            self._family_newest[fam] = t
        # The item's slot row, kept packed: only age and the features that compare it with
        # the current step change from step to step; orphan and superseded are set later.
        if merge_target is None:
            api = tab.apis[t]
            if api >= 0:
                self._api_bases.setdefault(api, []).append(t)
                self._api_live[api] = self._api_live.get(api, 0) + 1
            # A WRITE costs the step's cost: its row depends on the step alone, and steps that
            # show one observation share it (packed once per environment).
            priority = tab.priorities[t] if self.privileged else None
            key = (self._cost_budget[t], tab.kinds[t], tab.deprecated[t], priority)
            row = self._write_rows.get(key)
            if row is None:
                if len(self._write_rows) >= _ROW_CACHE_LIMIT:
                    self._write_rows.clear()
                values = self._slot_row(key[0], False, t)
                row = self._write_rows[key] = (values, struct.pack(self._tail_format, *values))
            self._row_values[t] = list(row[0])
            self._rows[t] = row[1]
        else:
            self._merge_parent[t] = merge_target
            self._merges += 1
            budget = self._budget
            values = self._slot_row(min(1.0, cost / budget) if budget else 1.0, True, t)
            self._row_values[t] = list(values)
            self._rows[t] = struct.pack(self._tail_format, *values)
        self._item_bytes[t] = cost
        heapq.heappush(self._by_size, (-cost, t))

    def expired(self, item: MemoryItem, dropped: tuple[int, ...]) -> None:
        """The store expired ``item``; ``dropped``: the items that left the retained set with it
        (``ByteMemoryStore.retained_loss``): a base's MERGE deltas become orphans."""
        s = item.t
        tab = self._table
        store = self._store
        del self._rows[s]
        del self._row_values[s]
        del self._item_bytes[s]
        fam = tab.families[s]
        if fam >= 0:
            live = self._family_live[fam] - 1
            self._family_live[fam] = live
            stack = self._family_items[fam]
            if len(stack) > 2 * live + 16:  # drop expired entries now and then: lookups stay O(K)
                stack[:] = [x for x in stack if x in store]
            if self._family_newest[fam] == s:
                newest = self._newest_live(stack)
                if newest is None:
                    del self._family_newest[fam]
                else:
                    self._family_newest[fam] = newest
                    self._set_row_flag(newest, self._col_superseded, 0.0)
        if item.kind == "WRITE":
            api = tab.apis[s]
            if api >= 0:
                live = self._api_live[api] - 1
                self._api_live[api] = live
                bases = self._api_bases[api]
                if len(bases) > 2 * live + 16:
                    bases[:] = [x for x in bases if x in store]
            for c in dropped:
                if c != s:
                    self._set_row_flag(c, self._col_orphan, 1.0)
        else:
            self._merges -= 1
            del self._merge_parent[s]

    @property
    def table(self) -> StreamTable:
        return self._table

    def reverted(self, s: int, t: int) -> bool:
        """Whether step ``t`` undoes stored item ``s``'s change (the slot feature ``reverted``)."""
        return reverted(self._table, self._contracts, s, t)

    def _prepare_step_features(self) -> None:
        """Per timestep, what of the observation does not depend on memory, computed once per
        episode: ``_cost_budget``, ``_seen`` (the three comparisons with the last shown step of
        the family) and ``_step_middle`` (the step features after the first three, packed, as
        they are when memory holds nothing of the step's family); and ``_slot_heads``, a
        slot's present and age features, packed, per age in steps."""
        tab = self._table
        budget = self._budget
        # min(1, cost / budget), without a call per step
        self._cost_budget = [c / budget if c < budget else 1.0 for c in tab.costs] if budget else [1.0] * self._T
        self._contracts = contracts(tab)
        self._seen = seen = seen_features(tab, self._contracts)
        # Without priority the middle row takes few values (kind, deprecated, seen): each is
        # packed once per environment.
        middles = self._middle_rows
        if len(middles) > _ROW_CACHE_LIMIT:
            middles.clear()
        rows = list(map(middles.get, zip(tab.kinds, tab.deprecated, seen, strict=True)))
        if None in rows:  # a combination this environment has not packed yet
            for t, key in enumerate(zip(tab.kinds, tab.deprecated, seen, strict=True)):
                row = middles.get(key)
                if row is None:
                    kind, deprecated, seen_t = key
                    values = (*KIND_FLAGS[kind], *no_reference(deprecated), *seen_t)
                    row = middles[key] = struct.pack(self._middle_format, *values)
                rows[t] = row
        if self.privileged:
            rows = [row + _pack_f(p) for row, p in zip(rows, tab.priorities, strict=True)]
        self._step_middle = rows
        self._slot_heads = self._slot_heads_for(self._T)

    def _slot_heads_for(self, T: int) -> list[bytes]:
        """A slot's present and age features, packed, for every age 0..T in steps (kept per T)."""
        heads = self._slot_heads_by_length.get(T)
        if heads is None:
            if len(self._slot_heads_by_length) >= _LENGTH_CACHE_LIMIT:
                self._slot_heads_by_length.clear()
            inv_T = 1.0 / T
            heads = self._slot_heads_by_length[T] = [_pack_slot_head(1.0, age * inv_T) for age in range(T + 1)]
        return heads

    def _slot_row(self, cost_budget: float, is_merge: bool, t: int) -> tuple[float, ...]:
        """The slot row after present and age of a new item holding step ``t``."""
        tab = self._table
        return (
            cost_budget,
            1.0 if is_merge else 0.0,
            *SLOT_KIND_FLAGS[tab.kinds[t]],
            tab.deprecated[t],
            *((tab.priorities[t],) if self.privileged else ()),
            0.0,  # orphan
            0.0,  # same_family
            0.0,  # same_api
            0.0,  # superseded
            0.0,  # merge_ok
            0.0,  # reverted
        )

    def _set_row_flag(self, s: int, index: int, value: float) -> None:
        row = self._row_values[s]
        if row[index] != value:
            row[index] = value
            self._rows[s] = struct.pack(self._tail_format, *row)

    def _newest_live(self, stack: list[int] | None) -> int | None:
        if not stack:
            return None
        contains = self._store.__contains__
        while stack and not contains(stack[-1]):
            stack.pop()
        return stack[-1] if stack else None

    def _largest_item(self) -> int:
        """The stored item with the most bytes (the oldest of those), memory not being empty."""
        heap, rows = self._by_size, self._rows
        while heap[0][1] not in rows:
            heapq.heappop(heap)
        return heap[0][1]

    def _relevant_slots(self, fam: int) -> list[int]:
        """The ``"relevance"`` layout: the largest item, then the items of the current step's
        family ``fam`` (-1: none) newest first, then the other items oldest first."""
        K = self.K
        rows = self._rows
        largest = self._largest_item()
        shown: list[int] = [largest]
        if K == 1:
            return shown
        if fam >= 0 and self._family_live.get(fam, 0):
            for s in reversed(self._family_items[fam]):
                if s in rows and s != largest:
                    shown.append(s)
                    if len(shown) == K:
                        return shown
            families = self._table.families
            for s in rows:
                if families[s] != fam and s != largest:
                    shown.append(s)
                    if len(shown) == K:
                        break
            return shown
        for s in rows:
            if s != largest:
                shown.append(s)
                if len(shown) == K:
                    break
        return shown

    def _merge_cost(self, t: int, s: int) -> int | None:
        """Bytes a MERGE of step ``t`` into the base item ``s`` would charge; None if the store
        would refuse it whatever the budget (another endpoint, or nothing changed)."""
        tab = self._table
        ct, cs = tab.contents[t], tab.contents[s]
        if ct > 0 and cs > 0:  # plain JSON: equal text pairs give equal deltas
            if ct == cs:  # the same text: nothing changed, which MERGE refuses
                return None
            key = (ct, cs)
            cost = self._merge_costs.get(key, _UNKNOWN)
            if cost is _UNKNOWN:
                delta = canonical_delta(tab.observation(t), tab.observation(s))
                cost = self._merge_costs[key] = merge_cost(delta) if delta else None
            return cost
        decision = self._store.check(MemoryAction("MERGE", step=tab.step(t), target_t=s), t)
        return decision.byte_delta if decision.reason in _MERGE_COSTED else None

    def update(self, t: int, expires_this_step: int, reverted_expired: bool, slots: list[int] | None = None) -> None:
        """Compute the slots (unless given), the observation and the mask of the state at
        timestep ``t`` after ``expires_this_step`` EXPIREs in it."""
        # Hot path: ``_rows`` holds one entry per stored item, in the store's order, so it
        # answers "which items" without a call into the store.
        tab = self._table
        rows = self._rows
        live = t < self._T
        fam = tab.families[t] if live else -1
        fam_live = self._family_live.get(fam, 0) if fam >= 0 else 0
        if slots is None:
            if not rows:
                slots = []
            elif self.slot_order == "relevance":
                slots = self._relevant_slots(fam)
            else:
                slots = list(islice(rows, self.K))
        self.slots = slots
        n_slots = len(slots)
        budget = self._budget
        remaining = budget - self._store.budget.used
        cap = self.cap
        if cap is None:
            cap_left = 1.0 if live else 0.0
        else:
            cap_left = (cap - expires_this_step) / cap if live and cap else 0.0
        # The mask but for MERGE, from the templates: SKIP, WRITE if it fits, EXPIRE per shown item.
        expirable = n_slots if live and (cap is None or expires_this_step < cap) else 0
        cost = tab.costs[t] if live else 0
        fits = live and cost <= remaining
        mask = self._mask_templates[fits][expirable]
        n_items = len(rows)
        if fits:
            fits_if_larger_expired = 1.0
        elif live and cost <= budget:
            freed = sum(b for b in self._item_bytes.values() if b > cost)
            fits_if_larger_expired = 1.0 if cost <= remaining + freed else 0.0
        else:
            fits_if_larger_expired = 0.0
        memory = _pack_memory(
            remaining / budget if budget else 0.0,
            n_items / (n_items + self.K),
            (n_items - n_slots) / n_items if n_items else 0.0,
            self._merges / n_items if n_items else 0.0,
            t * self._inv_T if live else 1.0,
            cap_left,
            1.0 if reverted_expired else 0.0,
            fits_if_larger_expired,
        )
        if not live:
            parts = [self._final_step_row, memory]
        elif fam_live:
            parts = [self._step_row(t, fam, fam_live, remaining), memory]
        else:
            # The first three step features; the others are fixed per timestep when memory holds
            # nothing of the step's family, packed at reset (_step_middle).
            start = _pack_step_start(
                self._cost_budget[t],
                min(1.0, cost / remaining) if remaining > 0 else (0.0 if cost == 0 else 1.0),
                1.0 if cost <= remaining else 0.0,
            )
            parts = [start, self._step_middle[t], memory]

        # ---- slots: present and age (packed per age at reset), then the item's packed row.
        # The features that compare an item with the current step are packed afresh for the
        # items of the current family; no other item has them set.
        slot_heads = self._slot_heads
        age_now = t if live else self._T
        if fam_live:
            merge_slots = []
            for k, s in enumerate(slots):
                if tab.families[s] == fam:
                    tail, merge_ok = self._family_slot_row(t, s, remaining)
                    if merge_ok:
                        merge_slots.append(k)
                else:
                    tail = rows[s]
                parts.append(slot_heads[age_now - s])
                parts.append(tail)
            if merge_slots:
                mask = bytearray(mask)
                for k in merge_slots:
                    mask[2 + k] = 1
                mask = bytes(mask)
        else:
            for s in slots:
                parts.append(slot_heads[age_now - s])
                parts.append(rows[s])
        parts.append(self._pad[n_slots])
        self.obs_bytes = b"".join(parts)
        self.mask = mask

    def _step_row(self, t: int, fam: int, fam_live: int, remaining: int) -> bytes:
        """Every step feature, when memory holds items of the step's family ``fam``."""
        tab = self._table
        api = tab.apis[t]
        cost = tab.costs[t]
        ref = self._family_newest[fam]
        base = None
        if api >= 0:
            stack = self._api_bases.get(api)
            if stack:
                base = stack[-1] if stack[-1] in self._rows else self._newest_live(stack)
        merge_ok, merge_share = 0.0, 0.0
        if base is not None:
            delta_cost = self._merge_cost(t, base)
            if delta_cost is not None:
                merge_ok = 1.0 if delta_cost <= remaining else 0.0
                merge_share = min(1.0, delta_cost / cost) if cost else 1.0
        ct, cr = tab.contents[t], tab.contents[ref]
        if ct > 0 and cr > 0:  # plain JSON: the comparison depends on the two texts alone
            comparison = self._comparisons.get((ct, cr))
            if comparison is None:
                comparison = self._comparisons[ct, cr] = compare(tab, t, ref)
        else:
            comparison = compare(tab, t, ref)
        return struct.pack(
            self._step_format,
            self._cost_budget[t],
            min(1.0, cost / remaining) if remaining > 0 else (0.0 if cost == 0 else 1.0),
            1.0 if cost <= remaining else 0.0,
            *KIND_FLAGS[tab.kinds[t]],
            1.0,
            1.0 if base is not None else 0.0,
            *comparison,
            merge_ok,
            merge_share,
            (t - ref) * self._inv_T,
            min(1.0, fam_live / self.K),
            *self._seen[t],
            *((tab.priorities[t],) if self.privileged else ()),
        )

    def _family_slot_row(self, t: int, s: int, remaining: int) -> tuple[bytes, bool]:
        """The packed row of stored item ``s`` of the current step's family, and whether MERGE
        of step ``t`` into it would be accepted."""
        tab = self._table
        row = self._row_values[s][:]
        row[self._col_same_family] = 1.0
        if tab.kinds[s] == KIND_ENDPOINT and reverted(tab, self._contracts, s, t):
            row[self._col_reverted] = 1.0
        merge_ok = False
        if tab.apis[t] >= 0 and tab.apis[s] == tab.apis[t]:  # documents and guides have no api
            row[self._col_same_api] = 1.0
            if s not in self._merge_parent:  # a base item: a MERGE target
                delta_cost = self._merge_cost(t, s)
                if delta_cost is not None and delta_cost <= remaining:
                    row[self._col_merge_ok] = 1.0
                    merge_ok = True
        return struct.pack(self._tail_format, *row), merge_ok

    def mask_array(self) -> np.ndarray:
        """A new bool array holding the current mask."""
        cached = self._mask_arrays.get(self.mask)
        if cached is None:
            if len(self._mask_arrays) >= _MASK_CACHE_LIMIT:
                self._mask_arrays.clear()
            cached = self._mask_arrays[self.mask] = np.frombuffer(self.mask, np.bool_)
        return cached.copy()

    def observation(self) -> np.ndarray | dict[str, np.ndarray]:
        # A copy of the private buffer: every call returns a new, writable array.
        buf = bytearray(self.obs_bytes)
        if self.observation_mode == "box":
            return np.frombuffer(buf, np.float32)  # dtype by position: measurably faster
        n_step, n_mem = self._n_step, self._n_mem
        return {
            "step": np.frombuffer(buf, dtype=np.float32, count=n_step),
            "memory": np.frombuffer(buf, dtype=np.float32, count=n_mem, offset=4 * n_step),
            "slots": np.frombuffer(buf, dtype=np.float32, offset=4 * (n_step + n_mem)),
            "action_mask": self.mask_array().view(np.int8),
        }


_LENGTH_CACHE_LIMIT = 16
_UNKNOWN = object()
# Module-level Structs (an env attribute holding one would not pickle).
_pack_step_start = struct.Struct("=3f").pack
_pack_slot_head = struct.Struct("=2f").pack
_pack_f = struct.Struct("=f").pack
_pack_memory = struct.Struct(f"={len(MEMORY_FEATURES)}f").pack
_MASK_CACHE_LIMIT = 4096
_ROW_CACHE_LIMIT = 4096
_MERGE_COSTED = (Reason.ACCEPTED, Reason.OVER_BUDGET)
