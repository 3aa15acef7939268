"""``StoreView``: the read-only face of a ``ByteMemoryStore`` that policies are handed.

It answers every question about memory a policy may ask and judges actions (``check``) without
changing anything; the store itself stays out of reach (a policy that needs more must run in
isolated evaluation, where the view is a replica in its own process).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from .budget import BudgetView
from .compression import Compression
from .kind_budgets import KindBudgets
from .readonly import ReadOnlyDict, ReadOnlyList
from .types import MemoryAction, MemoryItem
from .write_time import WriteTime

if TYPE_CHECKING:  # pragma: no cover
    from .store import ByteMemoryStore, Decision

_JSON_TYPES = frozenset({dict, list, ReadOnlyDict, ReadOnlyList, str, int, float, bool, type(None)})


def _check_json_typed(action: Any) -> None:
    """Refuse a MERGE whose observation or delta holds anything but JSON values of exact types.

    A MERGE is priced by comparing its observation with the stored base's: an object of a
    policy's own type would be handed the store's values by that comparison (``__ne__``), and
    could edit them.
    """
    kind = getattr(action, "action", None)
    if type(kind) is not str:  # a str subclass could read one way here and another in the store
        raise TypeError(f"check(): the action kind must be a str, got {type(kind).__name__}")
    if kind != "MERGE":
        return
    step = getattr(action, "step", None)
    stack = [getattr(step, "observation", None), getattr(action, "delta", None)]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind not in _JSON_TYPES:
            raise TypeError(
                f"check(): a MERGE's observation and delta must hold JSON values of plain types, got {kind.__name__}"
            )
        if kind is dict or kind is ReadOnlyDict:
            if any(type(k) is not str for k in value):
                raise TypeError("check(): a MERGE's observation and delta must have str keys")
            stack.extend(value.values())
        elif kind is list or kind is ReadOnlyList:
            stack.extend(value)


class StoreView:
    """What a policy gets: everything about memory it may read, nothing it could change.

    Mutation happens only through actions the runner applies; the budget is exposed as a
    read-only ``BudgetView``.
    """

    __slots__ = ("_store", "_budget", "_charged", "__weakref__")

    def __init__(self, store: ByteMemoryStore) -> None:
        self._store = store
        self._budget = BudgetView(store.budget)
        self._charged = store.budget  # read here only: policies ask for remaining() at every step

    @property
    def budget(self) -> BudgetView:
        return self._budget

    @property
    def bytes_used(self) -> int:
        return self._store.bytes_used

    @property
    def max_bytes(self) -> int:
        return self._store.max_bytes

    def remaining(self) -> int:
        return self._charged.remaining()

    @property
    def kind_budgets(self) -> KindBudgets | None:
        """The store's limits per content kind (hierarchical budgets), None without them."""
        return self._store.kind_budgets

    def kind_used(self, kind: str) -> int:
        return self._store.kind_used(kind)

    @property
    def write_time(self) -> WriteTime | None:
        """The episode's write-time budget (``wpb_gym.core.write_time``), None without one."""
        return self._store.write_time

    def time_remaining(self) -> int | None:
        """Ticks of write time left (None without a write-time budget)."""
        return self._store.time_remaining()

    @property
    def compression(self) -> Compression | None:
        """Whether compressed WRITEs are allowed, and their credit (``wpb_gym.core.compression``).

        A copy: the store's own setting is what the run is scored with, and a policy holding
        it could change it (``object.__setattr__`` gets past a frozen dataclass)."""
        compression = self._store.compression
        return None if compression is None else Compression(compression.credit)

    def compressed_timesteps(self) -> tuple[int, ...]:
        """The timesteps whose item is a compressed WRITE."""
        return self._store.compressed_timesteps()

    def kind_remaining(self, kind: str) -> int:
        """What a WRITE of content ``kind`` may still take: the least of the total's and the kind's room."""
        return self._store.kind_remaining(kind)

    @property
    def clock(self) -> int | None:
        return self._store.clock

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, t: object) -> bool:
        return t in self._store

    def __iter__(self) -> Iterator[MemoryItem]:
        return iter(self._store.items())

    def get(self, t: int) -> MemoryItem | None:
        return self._store.get(t)

    def items(self) -> tuple[MemoryItem, ...]:
        return self._store.items()

    def iter_items(self) -> Iterator[MemoryItem]:
        """Items oldest first without a copy: finish iterating before yielding any action."""
        return self._store.iter_items()

    def timesteps(self) -> tuple[int, ...]:
        return self._store.timesteps()

    def oldest_item(self) -> MemoryItem | None:
        return self._store.oldest_item()

    def newest_item(self) -> MemoryItem | None:
        return self._store.newest_item()

    def newest_base_item(self, api: Any) -> MemoryItem | None:
        return self._store.newest_base_item(api)

    def retained_timesteps(self) -> tuple[int, ...]:
        return self._store.retained_timesteps()

    def check(self, action: MemoryAction, current_t: int) -> Decision:
        _check_json_typed(action)
        return self._store.check(action, current_t)

    def would_accept(self, action: MemoryAction, current_t: int) -> bool:
        _check_json_typed(action)
        return self._store.would_accept(action, current_t)

    def __repr__(self) -> str:
        return f"StoreView(items={len(self)}, used={self.bytes_used}, max_bytes={self.max_bytes})"
