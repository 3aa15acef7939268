"""The benchmark's data model (spec §1–3): steps, episodes, memory items and actions.

Everything here is a frozen dataclass. Observations and metadata are plain JSON-like
values (dicts, lists, strings, numbers) so that byte accounting is a function of the
JSON text and episodes survive a JSONL round trip unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from typing import Any, Iterable, Iterator, Literal, Mapping, Sequence, TypeVar

import numpy as np

T = TypeVar("T")
ActionType = Literal["SKIP", "WRITE", "MERGE", "EXPIRE"]
ACTION_TYPES: tuple[str, ...] = ("SKIP", "WRITE", "MERGE", "EXPIRE")

ItemKind = Literal["WRITE", "MERGE"]

# The one codec a compressed WRITE may name (``wpb_gym.core.compression`` defines it).
COMPRESSION_CODEC = "summary/1"

# The largest utility a step may have: the loader refuses more, and so does the oracle.
# Sums of utilities that are multiples of a binary unit such as 0.5 stay exact in float64 up
# to 2**53 (9.0e15), so with every step at this bound episodes of 9,000 steps are still
# scored exactly (longer ones to float precision), and nothing a metric sums can overflow.
# The oracle's integer DPs scale utilities to units in int64 and hand over to its float DP
# well before a sum of units could overflow (see oracle.py).
MAX_UTILITY = 1e12


@dataclass(frozen=True)
class Step:
    """One element of the stream: timestep ``t``, a JSON-like ``observation`` and ``metadata``.

    Treat ``observation`` and ``metadata`` as immutable: values derived from them (the byte
    cost) are cached on the step.
    """

    t: int
    observation: Any
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"metadata": self.metadata, "observation": self.observation, "t": self.t}


@dataclass(frozen=True)
class Episode:
    """A finite stream of steps ``t = 0..T-1`` and its hidden ``labels``.

    ``labels`` keeps what the file holds, with ``utility_by_step`` keyed by ``int``
    (JSON turns those keys into strings; the loader turns them back). Derived views of the
    labels (``critical_steps``, ``utilities``...) are computed once and cached.

    ``Episode.from_columns`` builds an episode whose ``Step`` objects are only made when
    ``steps`` is first read: the environment reads the columns (``columns()``) and a reset
    that generates an episode then makes no step objects at all.
    """

    steps: Sequence[Step]
    labels: dict[str, Any]

    def __post_init__(self) -> None:
        # A tuple makes the stream immutable; the spec types it as a list, which we accept.
        if not isinstance(self.steps, tuple):
            object.__setattr__(self, "steps", tuple(self.steps))

    @classmethod
    def from_columns(cls, observations: list[Any], metadata: list[dict[str, Any]], labels: dict[str, Any]) -> Episode:
        """The episode of steps ``Step(t, observations[t], metadata[t])``, built on first use.

        The lists are kept, not copied: like a step's observation, treat them as immutable.
        """
        if len(observations) != len(metadata):
            raise ValueError(f"{len(observations)} observations but {len(metadata)} metadata dicts: one each per step")
        episode = object.__new__(cls)
        episode.__dict__.update({"labels": labels, "_columns": (observations, metadata)})
        return episode

    def __getattr__(self, name: str) -> Any:
        # Only reached when the attribute is missing: the steps of an episode made by
        # from_columns, built now and kept.
        columns = self.__dict__.get("_columns") if name == "steps" else None
        if columns is None:
            # The normal lookup again, so that its own error surfaces (an AttributeError raised
            # inside a property, or a missing name with Python's "did you mean" hint).
            return object.__getattribute__(self, name)
        observations, metadata = columns
        steps = tuple(
            frozen_instances(
                Step,
                [
                    {"t": t, "observation": obs, "metadata": m}
                    for t, obs, m in zip(range(len(observations)), observations, metadata, strict=True)
                ],
            )
        )
        self.__dict__["steps"] = steps
        return steps

    def columns(self) -> tuple[list[Any], list[Any]]:
        """(the observation of every step, the metadata of every step), without making steps
        that are not made yet. Read-only: the lists may be the episode's own."""
        columns = self.__dict__.get("_columns")
        if columns is not None:
            return columns
        return [step.observation for step in self.steps], [step.metadata for step in self.steps]

    def __len__(self) -> int:
        columns = self.__dict__.get("_columns")
        return len(self.steps) if columns is None else len(columns[0])

    @property
    def length(self) -> int:
        return len(self)

    @cached_property
    def critical_steps(self) -> tuple[int, ...]:
        """Sorted relevant timesteps R (``labels["critical_steps"]``)."""
        return tuple(sorted(int(t) for t in self.labels.get("critical_steps", ())))

    @cached_property
    def total_drift_events(self) -> int:
        """``labels["total_drift_events"]``, or ``|R|`` when the file does not give it."""
        value = self.labels.get("total_drift_events")
        return len(self.critical_steps) if value is None else int(value)

    @cached_property
    def utilities(self) -> np.ndarray:
        """Hidden per-step utility ``u_t`` as a read-only float64 array of length T."""
        values = [0.0] * len(self)  # filled as a list: one array at the end
        for t, value in self.labels.get("utility_by_step", {}).items():
            values[int(t)] = float(value)
        u = np.array(values, dtype=np.float64)
        u.setflags(write=False)
        return u

    @property
    def regime(self) -> str | None:
        """The regime name: ``labels["mode"]`` (the paper's key), else the first step's ``mode``."""
        mode = self.labels.get("mode")
        if mode is None and self.steps and isinstance(self.steps[0].metadata, dict):
            mode = self.steps[0].metadata.get("mode")
        return mode

    @property
    def episode_id(self) -> Any:
        return self.labels.get("episode_id")

    def to_dict(self) -> dict[str, Any]:
        return {"labels": self.labels, "steps": [s.to_dict() for s in self.steps]}


def frozen_instance(cls: type[T], fields: dict[str, Any]) -> T:
    """An instance of the frozen dataclass ``cls`` holding ``fields`` (every field, in order).

    What ``cls(**fields)`` returns, built without ``__init__``: a frozen dataclass sets each
    field through ``object.__setattr__``, which costs more than everything else the store
    does for a WRITE. Only for classes without ``__post_init__`` (nothing to validate).
    """
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


def frozen_instances(cls: type[T], field_dicts: Iterable[dict[str, Any]]) -> list[T]:
    """``[frozen_instance(cls, fields) for fields in field_dicts]``, each dict becoming the
    instance's ``__dict__`` itself (so do not reuse them): a lazy episode builds its T steps at once."""
    dicts = list(field_dicts)
    instances = list(map(object.__new__, repeat(cls, len(dicts))))
    for _ in map(object.__setattr__, instances, repeat("__dict__"), dicts):
        pass
    return instances


class FrozenMapping(Mapping[str, Any]):
    """A read-only mapping that, unlike ``types.MappingProxyType``, survives pickling."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data = dict(data or {})

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenMapping({self._data!r})"


@dataclass(frozen=True)
class MemoryItem:
    """An item held by the store.

    ``kind`` is ``"WRITE"`` for a base item holding the full step, ``"MERGE"`` for a delta
    item appended to the base item at ``merge_parent_t``. ``written_at`` is the timestep
    the item was stored (always ``step.t``: only the current step can be stored).
    """

    step: Step
    written_at: int
    byte_cost: int
    metadata: Mapping[str, Any] = field(default_factory=dict)
    kind: ItemKind = "WRITE"
    merge_parent_t: int | None = None
    delta: dict[str, Any] | None = None
    api: Any = None  # the step's observation["api"] when stored (MERGE's endpoint identity), or None
    codec: str | None = None  # the codec a compressed WRITE item went through (``step`` is then its summary)

    @property
    def t(self) -> int:
        return self.step.t


@dataclass(frozen=True)
class MemoryAction:
    """A memory operation requested by a policy (spec §3.3).

    ``step`` is required for WRITE and MERGE, ``target_t`` for MERGE and EXPIRE; ``delta``
    is optional for MERGE (when given it must equal the canonical delta); ``codec`` asks a
    WRITE to store the step compressed (``wpb_gym.core.compression``; only ``"summary/1"``,
    and only where the run allows compression). Malformed actions
    (unknown type, missing required field) raise ``ValueError`` here; actions that are
    well formed but not allowed in the current memory state are *rejected* by the store.
    """

    action: ActionType
    step: Step | None = None
    target_t: int | None = None
    delta: dict[str, Any] | None = None
    reason: str | None = None
    codec: str | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTION_TYPES:
            raise ValueError(f"MemoryAction.action must be one of {ACTION_TYPES}, got {self.action!r}")
        if self.action in ("WRITE", "MERGE") and self.step is None:
            raise ValueError(f"MemoryAction({self.action}) needs step=")
        if self.action in ("MERGE", "EXPIRE") and self.target_t is None:
            raise ValueError(f"MemoryAction({self.action}) needs target_t=")
        if self.delta is not None and self.action != "MERGE":
            raise ValueError(f"MemoryAction({self.action}) takes no delta (only MERGE does)")
        if self.codec is not None:
            if self.action != "WRITE":
                raise ValueError(f"MemoryAction({self.action}) takes no codec (only WRITE does)")
            if self.codec != COMPRESSION_CODEC:
                raise ValueError(f"MemoryAction: codec must be {COMPRESSION_CODEC!r}, got {self.codec!r}")

    # The constructors below build well-formed actions by construction, so they skip the
    # validation of ``__init__`` (see frozen_instance): policies call them at every step.
    @classmethod
    def skip(cls, reason: str | None = None) -> MemoryAction:
        return _action(cls, "SKIP", None, None, None, reason)

    @classmethod
    def write(cls, step: Step, reason: str | None = None) -> MemoryAction:
        if step is None:
            raise ValueError("MemoryAction(WRITE) needs step=")
        return _action(cls, "WRITE", step, None, None, reason)

    @classmethod
    def write_compressed(cls, step: Step, reason: str | None = None) -> MemoryAction:
        """WRITE ``step`` through the ``summary/1`` codec (``wpb_gym.core.compression``)."""
        if step is None:
            raise ValueError("MemoryAction(WRITE) needs step=")
        return _action(cls, "WRITE", step, None, None, reason, COMPRESSION_CODEC)

    @classmethod
    def merge(
        cls, step: Step, target_t: int, delta: dict[str, Any] | None = None, reason: str | None = None
    ) -> MemoryAction:
        if step is None or target_t is None:
            raise ValueError("MemoryAction(MERGE) needs step= and target_t=")
        return _action(cls, "MERGE", step, target_t, delta, reason)

    @classmethod
    def expire(cls, target_t: int, reason: str | None = None) -> MemoryAction:
        if target_t is None:
            raise ValueError("MemoryAction(EXPIRE) needs target_t=")
        return _action(cls, "EXPIRE", None, target_t, None, reason)


def _action(cls: type, action: str, step: Any, target_t: Any, delta: Any, reason: Any, codec: Any = None) -> Any:
    if cls is not MemoryAction:  # a subclass may validate more: let it
        return cls(action, step=step, target_t=target_t, delta=delta, reason=reason, codec=codec)
    return frozen_instance(
        MemoryAction,
        {"action": action, "step": step, "target_t": target_t, "delta": delta, "reason": reason, "codec": codec},
    )
