"""Write time (spec §8, "write latency: penalize slow writes (async budget)"): every WRITE or
MERGE takes time from a per-episode budget, so a write made now is one that cannot be made
later, and a policy must ration its writes before it knows which steps will matter.

Time is counted in whole *ticks*: a WRITE or MERGE storing ``n`` bytes takes ``per_write +
ceil(n * per_kb / 1024)`` ticks (a fixed latency, and a transfer time per KB), and an
episode's writes together may take at most ``total`` ticks. Time spent is spent: EXPIRE gives
no ticks back, and a refused action takes none. SKIP and EXPIRE take no time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from .setting_values import input_error, parse_fields, parse_int

_FIELDS = ("total", "per_write", "per_kb")
# The most ticks each field may hold: far beyond any episode's needs, and within int64 however
# large a step (a write's ticks reach MAX_PER * (1 + MAX_BUDGET / 1024), about 1e15).
_MOST = {"total": 10**9, "per_write": 10**6, "per_kb": 10**6}


@dataclass(frozen=True)
class WriteTime:
    """A per-episode write-time budget: ``total`` ticks; each write ``per_write`` ticks plus
    ``per_kb`` ticks per KB it stores, rounded up to a whole tick."""

    total: int
    per_write: int = 1
    per_kb: int = 0

    def __post_init__(self) -> None:
        for name in _FIELDS:
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value <= _MOST[name]:
                raise ValueError(f"write time: {name} must be an int of ticks from 0 to {_MOST[name]}, got {value!r}")

    def ticks(self, n_bytes: int) -> int:
        """The ticks a write storing ``n_bytes`` takes."""
        return self.per_write + -(-n_bytes * self.per_kb // 1024)

    @classmethod
    def parse(cls, value: Any, where: str = "") -> WriteTime:
        """``"total=40"``, ``"total=60,per_write=1,per_kb=2"``, or a mapping of the same; an
        ``InputError`` naming ``where`` for a missing total, an unknown field or a bad number."""
        if isinstance(value, WriteTime):
            return value
        parsers = {name: partial(parse_int, minimum=0, maximum=_MOST[name]) for name in _FIELDS}
        fields = parse_fields(value, where, "total=40,per_write=1,per_kb=0 (FIELD=TICKS)", parsers)
        if "total" not in fields:
            raise input_error(where, "expected total=TICKS (the episode's write time), e.g. total=40")
        return cls(**fields)

    def text(self) -> str:
        """``total=40,per_write=1,per_kb=0``, which ``parse`` reads back."""
        return ",".join(f"{name}={getattr(self, name)}" for name in _FIELDS)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in _FIELDS}
