"""What a run's store enforces beside its byte budget, as a grid states it once for every budget:
limits per content kind (``kind_budgets``), a write-time budget (``write_time``) or compressed
writes (``compression``), one at a time (together they have no exact bound here)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

from .compression import Compression
from .kind_budgets import KindBudgets, KindShares
from .store import ByteMemoryStore
from .write_time import WriteTime

# The settings that name them, in the env (``gym.make(..., write_time=...)``) and ``wpb eval``.
LIMIT_NAMES = ("kind_budgets", "write_time", "compression")


@dataclass(frozen=True)
class StoreLimits:
    """Kind limits (as shares, resolved at each budget), a write-time budget or compression;
    empty: none."""

    kinds: KindShares | None = None
    write_time: WriteTime | None = None
    compression: Compression | None = None

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.kinds, self.write_time, self.compression)) > 1:
            raise ValueError("kind budgets, write time and compression are one at a time: "
                             "together they have no exact bound here")

    def __bool__(self) -> bool:
        return self.kinds is not None or self.write_time is not None or self.compression is not None

    def kinds_at(self, budget: int) -> KindBudgets | None:
        return self.kinds.resolve(budget) if self.kinds is not None else None

    def store(self, budget: int) -> ByteMemoryStore:
        return ByteMemoryStore(budget, self.kinds_at(budget), self.write_time, self.compression)

    def text(self) -> str:
        """The limits as one line of JSON (``from_text`` reads it back): what crosses to a policy's process."""
        return json.dumps({"kinds": self.kinds.text() if self.kinds else None,
                           "write_time": self.write_time.text() if self.write_time else None,
                           "compression": self.compression.text() if self.compression else None})

    @classmethod
    def from_text(cls, text: str) -> StoreLimits:
        data: dict[str, Any] = json.loads(text)
        return cls(KindShares.parse(data["kinds"]) if data["kinds"] else None,
                   WriteTime.parse(data["write_time"]) if data["write_time"] else None,
                   Compression.parse(data["compression"]) if data.get("compression") else None)

    @classmethod
    def of_arguments(cls, arguments: Mapping[str, Any], where: str = "") -> StoreLimits:
        """The limits an env's arguments give (``kind_budgets=``, ``write_time=``,
        ``compression=``: text, a mapping or the parsed value; None or absent: none), each
        checked as the env checks it (an ``InputError`` naming ``where`` and the field)."""
        parsers = {"kind_budgets": KindShares.parse, "write_time": WriteTime.parse, "compression": Compression.parse}
        values = {name: parsers[name](arguments[name], f"{where}{name}")
                  for name in LIMIT_NAMES if arguments.get(name) is not None}
        return cls(values.get("kind_budgets"), values.get("write_time"), values.get("compression"))

    def arguments(self) -> dict[str, str]:
        """The env arguments of these limits, as text (``of_arguments`` reads them back)."""
        given = {"kind_budgets": self.kinds, "write_time": self.write_time, "compression": self.compression}
        return {name: value.text() for name, value in given.items() if value is not None}
