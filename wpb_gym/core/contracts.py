"""An endpoint's contract as a policy reads it off a snapshot, what makes a change breaking, and
which family an endpoint is in: stated once for the env's observation, the agents and the
episode tools."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# params, required params, deprecated, removed
Contract = tuple[frozenset, frozenset, bool, bool]

_PATH_PARAMETER = re.compile(r"^\{.*\}$")


def value_set(values: Any) -> frozenset | None:
    """A snapshot's list as a set (unhashable entries by their text); None for anything but a list."""
    if not isinstance(values, list):
        return None
    try:
        return frozenset(values)
    except TypeError:
        return frozenset(repr(v) for v in values)


def contract_of(observation: Mapping[str, Any]) -> Contract | None:
    """The snapshot's contract, or None when its ``params`` or ``required`` is not a list."""
    params, required = value_set(observation.get("params")), value_set(observation.get("required", []))
    if params is None or required is None:
        return None
    return params, required, bool(observation.get("deprecated")), observation.get("removed") is True


def is_breaking(before: Contract, after: Contract) -> bool:
    """A parameter removed, a parameter newly required, or the endpoint newly deprecated or removed."""
    params_before, required_before, deprecated_before, removed_before = before
    params_after, required_after, deprecated_after, removed_after = after
    return (
        bool(params_before - params_after)
        or bool(required_after - required_before)
        or (deprecated_after and not deprecated_before)
        or (removed_after and not removed_before)
    )


def endpoint_family(api: str) -> str:
    """An endpoint's family: the second segment of a generated ``api`` (``api.billing.endpoint_7``:
    ``billing``), else its resource, the last path segment that is not a path parameter, without
    ``.json`` (``POST /v1/charges/{charge}/refunds``: ``refunds``)."""
    parts = api.split(".")
    if len(parts) == 3 and parts[0] == "api":
        return parts[1]
    path = api.split(" ", 1)[-1]
    segments = [s for s in path.split("/") if s and not _PATH_PARAMETER.match(s)]
    return segments[-1].removesuffix(".json") if segments else path
