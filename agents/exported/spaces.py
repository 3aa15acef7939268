"""Gymnasium spaces as JSON, for ``policy.json`` to record and a loader to compare.

A loaded policy is never built from the spaces its file describes: the env arguments of the
file build the env, whose spaces the policy is built for, and the file's description of them
must be exactly ``describe(env's space)``. A description read back is therefore only compared,
never turned into a space. Bounds that are equal everywhere are written once; infinite ones
as ``"inf"`` / ``"-inf"`` (JSON has no infinity).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces


def describe(space: spaces.Space) -> dict[str, Any]:
    """``space`` as a JSON object; a ``ValueError`` for a kind of space no policy here reads."""
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec).tolist()}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {key: describe(part) for key, part in space.spaces.items()}}
    raise ValueError(f"a {type(space).__name__} space cannot be described in the data-only format")


def _bound(values: np.ndarray) -> Any:
    flat = np.asarray(values, dtype=np.float64).ravel()
    if flat.size and (flat == flat[0]).all():
        return _number(flat[0])
    return [_number(v) for v in flat]


def _number(value: float) -> Any:
    if np.isinf(value):
        return "inf" if value > 0 else "-inf"
    return int(value) if float(value).is_integer() else float(value)
