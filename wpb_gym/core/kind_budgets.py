"""Hierarchical budgets (spec §8): a byte budget per content kind beside the total.

A step's *content kind* is read from its observation: ``endpoint`` (it has ``"api"``), ``doc``
(a documentation section: ``"section"``), ``guide`` (a migration guide: ``"old_api"`` or
``"new_api"``), or ``other``. A MERGE delta belongs to its base item's kind (MERGE joins
equal ``"api"``, so always ``endpoint``).

``KindBudgets`` holds the limit of each kind that has one; a kind without one is limited by
the total only. The store refuses a WRITE or MERGE that would take its kind past its limit
(``Reason.OVER_KIND_BUDGET``) exactly as it refuses one past the total; EXPIRE credits both.

``KindShares`` is how a user states them once for every budget of a grid: each kind's limit
as a share of the total (``doc=30%``) or in bytes (``doc=3KB``), resolved against a total by
``resolve``. Shares need not add up to 100%: the total binds as well, so ``endpoint=80%,
doc=80%`` lets either kind take most of memory but not both.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from .accounting import MERGE_KEY
from .checks import InputError
from .setting_values import MAX_BUDGET, input_error, parse_budget, parse_pairs

KINDS = ("endpoint", "doc", "guide", "other")


def content_kind(observation: Any) -> str:
    """The content kind of an observation: ``endpoint``, ``doc``, ``guide`` or ``other``."""
    if isinstance(observation, dict):
        if MERGE_KEY in observation:
            return "endpoint"
        if "section" in observation:
            return "doc"
        if "old_api" in observation or "new_api" in observation:
            return "guide"
    return "other"


@dataclass(frozen=True)
class KindBudgets:
    """Byte limits of some content kinds (``{"endpoint": 6144, "doc": 3072}``), each ≥ 0."""

    limits: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        seen = set()
        for kind, limit in self.limits:
            if kind not in KINDS:
                raise ValueError(f"kind budgets: unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
            if kind in seen:
                raise ValueError(f"kind budgets: {kind!r} is given twice")
            if type(limit) is not int or not 0 <= limit <= MAX_BUDGET:
                raise ValueError(f"kind budgets: {kind}'s limit must be an int of bytes from 0 to {MAX_BUDGET}, "
                                 f"got {limit!r}")
            seen.add(kind)
        # One order whatever order they were given in: equal budgets compare and hash equal.
        object.__setattr__(self, "limits", tuple(sorted(self.limits, key=lambda pair: KINDS.index(pair[0]))))

    @classmethod
    def of(cls, limits: Mapping[str, int] | KindBudgets | None) -> KindBudgets | None:
        """``limits`` as ``KindBudgets`` (None or empty: none)."""
        if limits is None or isinstance(limits, KindBudgets):
            return limits or None
        if not isinstance(limits, Mapping):
            raise TypeError(f"kind budgets: expected a mapping of kind -> bytes, got {type(limits).__name__}")
        return cls(tuple(limits.items())) or None

    def __bool__(self) -> bool:
        return bool(self.limits)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.limits)

    def limit(self, kind: str) -> int | None:
        for name, limit in self.limits:
            if name == kind:
                return limit
        return None

    def as_dict(self) -> dict[str, int]:
        return dict(self.limits)

    def text(self) -> str:
        """``endpoint=6144,doc=3072`` (bytes), the form results rows carry."""
        return ",".join(f"{kind}={limit}" for kind, limit in self.limits)


# At most six decimals: every share has an exact decimal text, the same in every process.
_SHARE = re.compile(r"([0-9]{1,3}(?:\.[0-9]{1,6})?)\s*%")
_LONGEST_AMOUNT = 40  # characters of one amount: a longer one is not a size anyone means


@dataclass(frozen=True)
class KindShares:
    """Kind limits as stated by a user: a share of the total (a ``Fraction``) or bytes, per kind."""

    parts: tuple[tuple[str, Fraction | int], ...]

    @classmethod
    def parse(cls, value: Any, where: str = "") -> KindShares:
        """``"endpoint=60%,doc=30%,guide=10%"``, ``"doc=3KB"``, or a mapping of the same values.

        Raises ``InputError`` naming ``where`` for an unknown kind, a repeated one, a share
        outside 0-100% or a malformed size."""
        if isinstance(value, KindShares):
            return value
        if isinstance(value, KindBudgets):
            return cls(tuple(value.limits))
        pairs = parse_pairs(value, where, "endpoint=60%,doc=3KB (KIND=SHARE)")
        if not pairs:
            raise input_error(where, "expected at least one KIND=SHARE")
        parts: list[tuple[str, Fraction | int]] = []
        for name, amount in pairs:
            if name not in KINDS:
                raise input_error(where, f"unknown kind {name!r}; expected one of {', '.join(KINDS)}")
            if any(name == seen for seen, _ in parts):
                raise input_error(where, f"kind {name!r} is given twice")
            here = f"{where}: {name}" if where else name
            if isinstance(amount, str) and len(amount) > _LONGEST_AMOUNT:
                raise input_error(here, f"expected a share such as 30% or bytes such as 3KB, got {len(amount)} "
                                        "characters")
            share = _SHARE.fullmatch(amount) if isinstance(amount, str) else None
            if share is not None:
                fraction = Fraction(share.group(1)) / 100
                if fraction > 1:
                    raise input_error(where, f"{name}: a share is at most 100% of the total, got {amount!r}")
                parts.append((name, fraction))
                continue
            if isinstance(amount, str) and "%" in amount:
                raise input_error(here, f"expected a share from 0% to 100% with at most 6 decimals, such as 30% "
                                        f"or 12.5%, got {amount!r}")
            if isinstance(amount, str) and not amount.isascii():
                raise input_error(here, f"expected a share such as 30% or bytes such as 3KB in ASCII digits, "
                                        f"got {amount!r}")
            try:
                parts.append((name, parse_budget(amount, here)))
            except InputError as error:
                raise input_error(here, f"expected a share such as 30% or bytes such as 3KB; "
                                        f"{str(error).removeprefix(here + ': ')}") from None
        return cls(tuple(sorted(parts, key=lambda pair: KINDS.index(pair[0]))))

    def resolve(self, total: int) -> KindBudgets:
        """The limits in bytes for a total of ``total``: a share rounds down to whole bytes."""
        return KindBudgets(tuple((kind, int(amount * total) if isinstance(amount, Fraction) else amount)
                                 for kind, amount in self.parts))

    def text(self) -> str:
        """The canonical text (``endpoint=60%,doc=3072``), which ``parse`` reads back."""
        return ",".join(f"{kind}={_percent(amount)}" if isinstance(amount, Fraction) else f"{kind}={amount}"
                        for kind, amount in self.parts)


def _percent(fraction: Fraction) -> str:
    # Shares are parsed from decimals, so this decimal is exact.
    value = Decimal(fraction.numerator * 100) / Decimal(fraction.denominator)
    return f"{value.normalize():f}%"
