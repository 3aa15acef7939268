"""The byte budget a memory store enforces (spec §2.2: bytes, enforced at write time)."""

from __future__ import annotations

from .checks import require_int


class BudgetExceededError(ValueError):
    """Raised by ``ByteBudget.consume`` when a charge does not fit (the store never lets this happen)."""


class ByteBudget:
    """``max_bytes`` of capacity and the bytes currently charged against it."""

    __slots__ = ("_max_bytes", "_used")

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = require_int(max_bytes, "ByteBudget.max_bytes")
        self._used = 0

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def used(self) -> int:
        return self._used

    def remaining(self) -> int:
        return self._max_bytes - self._used

    def can_afford(self, n_bytes: int) -> bool:
        return n_bytes <= self._max_bytes - self._used

    def consume(self, n_bytes: int) -> None:
        if n_bytes < 0:
            raise ValueError(f"cannot consume a negative number of bytes ({n_bytes})")
        if n_bytes > self._max_bytes - self._used:  # not can_afford (inlined: every WRITE comes here)
            raise BudgetExceededError(
                f"charge of {n_bytes} bytes exceeds the remaining {self.remaining()} of {self._max_bytes}"
            )
        self._used += n_bytes

    def release(self, n_bytes: int) -> None:
        if n_bytes < 0 or n_bytes > self._used:
            raise ValueError(f"cannot release {n_bytes} bytes when {self._used} are in use")
        self._used -= n_bytes

    def view(self) -> BudgetView:
        return BudgetView(self)

    def __repr__(self) -> str:
        return f"ByteBudget(max_bytes={self._max_bytes}, used={self._used})"


class BudgetView:
    """Read-only face of a ``ByteBudget`` handed to policies."""

    __slots__ = ("_budget",)

    def __init__(self, budget: ByteBudget) -> None:
        self._budget = budget

    @property
    def max_bytes(self) -> int:
        return self._budget.max_bytes

    @property
    def used(self) -> int:
        return self._budget.used

    def remaining(self) -> int:
        return self._budget.remaining()

    def can_afford(self, n_bytes: int) -> bool:
        return self._budget.can_afford(n_bytes)

    def __repr__(self) -> str:
        return f"BudgetView(max_bytes={self.max_bytes}, used={self.used})"
