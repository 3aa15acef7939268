"""Queries about endpoint contracts, and the reader that answers them from memory alone.

An episode of the query tier carries hidden queries (``labels["queries"]``), each a
``Query``: at checkpoint step ``t``, what is ``fact`` of endpoint ``api`` (with ``argument``
for the facts about a parameter), whose true ``answer`` the labels hold. Facts:

===============  =========  ======================================================
fact             argument   the answer a snapshot gives
===============  =========  ======================================================
``version``      none       ``observation["version"]``
``deprecated``   none       ``observation["deprecated"] is true``
``removed``      none       ``observation["removed"] is true`` (absent: false)
``has_param``    parameter  whether the parameter is in ``observation["params"]``
``required``     parameter  whether the parameter is in ``observation["required"]``
===============  =========  ======================================================

The reader (``read_endpoint``) answers from the items memory held when the checkpoint step
arrived, before any action at that step: it takes the **newest** item of the endpoint (the
largest timestep among items whose ``api`` is the query's) and reads its observation — a
WRITE item's observation, or for a MERGE item its base's observation patched with the
item's delta. A MERGE item whose base is no longer held (an orphan) cannot be read and is
passed over. An endpoint with no readable item answers nothing, which is wrong. An answer
is right when it equals the true one and has its type (``True`` is not ``1``).
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .types import MemoryItem

QUERY_FACTS: tuple[str, ...] = ("version", "deprecated", "removed", "has_param", "required")
PARAM_FACTS: tuple[str, ...] = ("has_param", "required")


class Query(NamedTuple):
    """One hidden query: at checkpoint step ``t``, ``fact`` (of ``argument``) of endpoint ``api``."""

    t: int
    api: str
    fact: str
    argument: str | None
    answer: Any


class QueryFormatError(ValueError):
    """A malformed ``labels["queries"]`` entry: ``field`` names it (``labels.queries[3]``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def parse_queries(raw: Iterable[Any], length: int) -> list[Query]:
    """``labels["queries"]`` checked and made ``Query`` tuples; ``QueryFormatError`` names the first bad entry.

    Each entry is ``[t, api, fact, argument, answer]``: ``t`` a step of the episode, in
    non-decreasing order; ``api`` a string; ``fact`` one of ``QUERY_FACTS``; ``argument`` a
    string for the parameter facts and null otherwise; ``answer`` a bool, or an int for
    ``version``.
    """
    if not isinstance(raw, (list, tuple)):
        raise QueryFormatError("labels.queries",
                               f"expected a list of [t, api, fact, argument, answer], got {_shown(raw)}")
    queries = []
    last_t = -1
    for k, entry in enumerate(raw):
        where = f"labels.queries[{k}]"
        if not isinstance(entry, (list, tuple)) or len(entry) != 5:
            raise QueryFormatError(where, f"expected [t, api, fact, argument, answer], got {_shown(entry)}")
        t, api, fact, argument, truth = entry
        if type(t) is not int or not 0 <= t < length:
            raise QueryFormatError(where, f"t must be a step of the episode (0..{length - 1}), got {_shown(t)}")
        if t < last_t:
            raise QueryFormatError(where, f"queries must come in step order, but t={t} follows t={last_t}")
        if not isinstance(api, str):
            raise QueryFormatError(where, f"api must be a string, got {_shown(api)}")
        if fact not in QUERY_FACTS:
            raise QueryFormatError(where, f"fact must be one of {', '.join(QUERY_FACTS)}, got {_shown(fact)}")
        if (fact in PARAM_FACTS) != isinstance(argument, str) or (fact not in PARAM_FACTS and argument is not None):
            expected = "a parameter name (a string)" if fact in PARAM_FACTS else "null"
            raise QueryFormatError(where, f"the argument of {fact!r} must be {expected}, got {_shown(argument)}")
        expected_type = (int,) if fact == "version" else (bool,)
        if type(truth) not in expected_type:
            kind = "an int" if fact == "version" else "a bool"
            raise QueryFormatError(where, f"the answer to {fact!r} must be {kind}, got {_shown(truth)}")
        queries.append(Query(t, api, fact, argument, truth))
        last_t = t
    return queries


def _shown(value: Any) -> str:
    return reprlib.repr(value)


def answer_of(observation: Mapping[str, Any], fact: str, argument: str | None) -> Any:
    """The answer an endpoint snapshot gives to a query (the labels' truth and the reader's rule)."""
    if fact == "version":
        return observation.get("version")
    if fact == "deprecated":
        return observation.get("deprecated") is True
    if fact == "removed":  # real-drift snapshots carry the flag only once the endpoint is removed
        return observation.get("removed") is True
    if fact == "has_param":
        params = observation.get("params")
        return isinstance(params, list) and argument in params
    if fact == "required":
        required = observation.get("required")
        return isinstance(required, list) and argument in required
    raise ValueError(f"unknown query fact {fact!r}; expected one of {', '.join(QUERY_FACTS)}")


def same_answer(got: Any, truth: Any) -> bool:
    """Whether the reader's answer is the true one: equal, and of the same type."""
    return type(got) is type(truth) and got == truth


def read_endpoint(items: Iterable[MemoryItem], api: str) -> dict[str, Any] | None:
    """What memory says endpoint ``api`` is: the newest readable item's observation (see the module
    docstring), or None when memory holds no readable item of it.

    ``items`` are the items memory held at the moment of reading (the reader's rule does not
    depend on their order).
    """
    held = {item.t: item for item in items}
    newest: list[MemoryItem] = sorted((item for item in held.values() if item.api == api), key=lambda i: -i.t)
    for item in newest:
        observation = observation_of(item, held)
        if observation is not None:
            return observation
    return None


def observation_of(item: MemoryItem, held: Mapping[int, MemoryItem]) -> dict[str, Any] | None:
    """The observation an item stands for: a WRITE item's own, a MERGE item's base patched with
    its delta (None for an orphan, whose base is not in ``held``, or an item that is no dict)."""
    if item.kind == "WRITE":
        observation = item.step.observation
        return observation if isinstance(observation, dict) else None
    base = held.get(item.merge_parent_t)
    if base is None or base.kind != "WRITE" or not isinstance(base.step.observation, dict):
        return None
    return {**base.step.observation, **(item.delta or {})}
