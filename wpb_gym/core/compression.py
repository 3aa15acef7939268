"""Compression (spec §8, "compression: allow compressed writes with a fixed penalty"): a policy
may WRITE a step through a lossy codec, storing fewer bytes that are worth less.

The codec, ``summary/1``, is deterministic and works on the step as the policy sees it:

* the observation must be a JSON object; the compressed observation keeps, in the same order,
  every key whose value is a scalar — a bool, a number, null, or text of at most
  ``SUMMARY_TEXT_LIMIT`` characters — and drops the rest (lists, objects, longer text). An
  endpoint snapshot keeps its ``api``, ``version``, ``deprecated`` and ``removed`` and loses
  its ``params`` and ``required``;
* the metadata is kept;
* the item costs the WRITE formula applied to the compressed observation
  (``accounting.write_cost``). Dropping keys only shortens the JSON text, so a compressed
  write never costs more than a plain one; a step whose summary would drop nothing is refused
  (``nothing_to_compress``), as is one whose observation is not an object
  (``not_compressible``).

The price is fixed per run: a compressed item of a critical step counts ``credit`` (a number
in [0, 1]) of a kept critical step in precision, recall, F1 and drift coverage, and ``credit``
times the step's utility in the policy's utility; it still takes one place in the retained set.
Memory holds only the summary: a policy reading it back and a MERGE computing its delta
against it see the summary alone. The query tier does not take compression: its hindsight
bound has no form for compressed writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from .accounting import estimate_bytes
from .setting_values import input_error, parse_fields, parse_float
from .types import COMPRESSION_CODEC, Step, frozen_instance

CODEC = COMPRESSION_CODEC
SUMMARY_TEXT_LIMIT = 64


def summary_observation(observation: Any) -> dict[str, Any] | None:
    """The ``summary/1`` form of an observation; None when it is not a JSON object."""
    if not isinstance(observation, dict):
        return None
    return {key: value for key, value in observation.items() if _kept(value)}


def _kept(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float)):
        return True
    return isinstance(value, str) and len(value) <= SUMMARY_TEXT_LIMIT


def compressed_step(step: Step) -> Step | None:
    """What memory holds for a compressed WRITE of ``step`` (the policy's view of it): the step
    with its summary as observation; None when the codec refuses it (see ``refusal``)."""
    cached = step.__dict__.get("_compressed")
    if cached is None:
        summary = summary_observation(step.observation)
        if summary is None or len(summary) == len(step.observation):
            cached = False
        else:
            cached = frozen_instance(Step, {"t": step.t, "observation": summary, "metadata": step.metadata})
        step.__dict__["_compressed"] = cached
    return cached or None


def refusal(step: Step) -> str | None:
    """Why the codec cannot compress ``step`` (a store reason), or None when it can."""
    if compressed_step(step) is not None:
        return None
    return "not_compressible" if not isinstance(step.observation, dict) else "nothing_to_compress"


def compressed_cost(step: Step) -> int | None:
    """Bytes charged for a compressed WRITE of ``step`` (the WRITE cost of its summary), or None
    when it cannot be compressed."""
    summary = compressed_step(step)
    return None if summary is None else estimate_bytes(summary)


@dataclass(frozen=True)
class Compression:
    """A run's compression setting: what a compressed critical step is worth (``credit``)."""

    credit: float

    def __post_init__(self) -> None:
        credit = self.credit
        if isinstance(credit, bool) or not isinstance(credit, (int, float)) or not 0.0 <= credit <= 1.0:
            raise ValueError(f"compression: credit must be a number in [0, 1], got {credit!r}")
        object.__setattr__(self, "credit", float(credit))

    @classmethod
    def parse(cls, value: Any, where: str = "") -> Compression:
        """``"credit=0.75"`` or a mapping; an ``InputError`` naming ``where`` for a missing or
        unknown field or a credit outside [0, 1]."""
        if isinstance(value, Compression):
            return value
        fields = parse_fields(value, where, "credit=0.75 (what a compressed critical step is worth, 0 to 1)",
                              {"credit": partial(parse_float, minimum=0.0, maximum=1.0)})
        if "credit" not in fields:
            raise input_error(where, "expected credit=CREDIT (what a compressed critical step is worth, 0 to 1)")
        return cls(**fields)

    def text(self) -> str:
        """``credit=0.75``, which ``parse`` reads back exactly."""
        return f"credit={self.credit!r}"
