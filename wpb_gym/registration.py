"""The registered environment ids: the default env, one per paper regime, and their privileged variants.

``import wpb_gym`` registers them; ``gym.make("wpb_gym:WritePolicyBench-v0")`` imports the
package first, so it works without an import. Every id accepts every argument of
``WritePolicyBenchEnv`` as a ``gym.make`` keyword.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

ENTRY_POINT = "wpb_gym.env:WritePolicyBenchEnv"

_REGIME_NAMES = {
    "default": "",
    "burst_drift": "BurstDrift-",
    "redundancy": "Redundancy-",
    "burst_redundancy": "BurstRedundancy-",
}


def _ids() -> dict[str, dict[str, Any]]:
    ids: dict[str, dict[str, Any]] = {}
    for regime, name in _REGIME_NAMES.items():
        for track, suffix in (("unprivileged", ""), ("privileged", "Privileged-")):
            ids[f"WritePolicyBench-{name}{suffix}v0"] = {"regime": regime, "track": track}
    return ids


ENV_IDS: dict[str, dict[str, Any]] = _ids()
"""Registered id -> its default keyword arguments."""


def register_envs() -> None:
    for env_id, kwargs in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs=dict(kwargs))
