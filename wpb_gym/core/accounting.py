"""Byte accounting (spec §2.2, §3.1): what WRITE and MERGE cost.

The formulas are the paper's, which its published tables depend on:

* WRITE: ``len(json.dumps(observation, sort_keys=True)) + len(json.dumps(metadata,
  sort_keys=True)) + 32`` (item header) ``+ 16`` (index entry).
* MERGE: ``len(json.dumps(delta, sort_keys=True)) + 16`` where ``delta`` is the canonical
  shallow diff of the incoming observation against its base item, without ``"api"``.

``json.dumps`` keeps its defaults (``", "``/``": "`` separators, ASCII escapes), so a cost
is the length of the text the reference implementation produced.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .types import Episode, Step

HEADER_BYTES = 32
INDEX_BYTES = 16
MERGE_OVERHEAD_BYTES = 16
MERGE_KEY = "api"


# ``json.dumps(value, sort_keys=True)`` builds this same encoder at every call; one is kept.
_sorted_json = json.JSONEncoder(sort_keys=True).encode


def json_text(value: Any) -> str:
    """``json.dumps(value, sort_keys=True)``: the text every byte cost is the length of."""
    return _sorted_json(value)


def json_len(value: Any) -> int:
    return len(_sorted_json(value))


def observation_json(step: Step) -> str:
    """``json.dumps(step.observation, sort_keys=True)``, computed once per step object.

    The text both prices a WRITE and identifies equal observations (equal text, equal
    value), so the environment reads it instead of serialising twice.
    """
    cached = step.__dict__.get("_observation_json")
    if cached is None:
        cached = _sorted_json(step.observation)
        step.__dict__["_observation_json"] = cached
    return cached


def write_cost(observation_text: str, metadata: Any) -> int:
    """The WRITE formula, from the observation's JSON text and the metadata as seen."""
    return len(observation_text) + json_len(metadata) + HEADER_BYTES + INDEX_BYTES


def estimate_bytes(step: Step) -> int:
    """Bytes charged for WRITE of ``step`` (pass the step as the policy sees it)."""
    # Policies, masks and the store all ask for the same step's cost; it is computed once
    # per step object. Steps are immutable, so the cached value cannot go stale.
    cached = step.__dict__.get("_write_cost")
    if cached is None:
        cached = write_cost(observation_json(step), step.metadata)
        step.__dict__["_write_cost"] = cached
    return cached


def same_api(a: Any, b: Any) -> bool:
    """MERGE's "exactly equal" endpoint identity: equal values of the same type (1 is not True)."""
    return type(a) is type(b) and a == b


def identity_key(value: Any) -> Any:
    """A hashable key with ``same_api``'s equality: the value with its type (1 and True differ).

    Unhashable values (a list used as an ``"api"``) are keyed by their JSON text.
    """
    try:
        hash(value)
        return (type(value), value)
    except TypeError:
        return (type(value), json.dumps(value, sort_keys=True, default=str))


def canonical_delta(new_observation: Any, base_observation: Any) -> dict[str, Any] | None:
    """The canonical MERGE delta ``{k: new[k] for k in new if k != "api" and new[k] != base.get(k)}``.

    Returns None when MERGE is impossible on these observations: either is not a dict, one
    lacks ``"api"``, or the ``"api"`` values differ. An empty dict means "nothing changed"
    (which MERGE rejects).
    """
    if not isinstance(new_observation, dict) or not isinstance(base_observation, dict):
        return None
    if MERGE_KEY not in new_observation or MERGE_KEY not in base_observation:
        return None
    if not same_api(new_observation[MERGE_KEY], base_observation[MERGE_KEY]):
        return None
    return {k: v for k, v in new_observation.items() if k != MERGE_KEY and v != base_observation.get(k)}


def merge_cost(delta: dict[str, Any]) -> int:
    """Bytes charged for a MERGE item holding ``delta``."""
    return json_len(delta) + MERGE_OVERHEAD_BYTES


def episode_costs(episode: Episode) -> np.ndarray:
    """WRITE cost of every step of ``episode`` as an int64 array (apply a track view first)."""
    return np.fromiter((estimate_bytes(s) for s in episode.steps), dtype=np.int64, count=len(episode.steps))
