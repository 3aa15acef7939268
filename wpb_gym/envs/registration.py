"""The registered environment ids: one per regime, two long-stream variants, and their privileged variants.

``import wpb_gym`` registers them; ``gym.make("wpb_gym:WritePolicyBench-v0")`` imports the
package first, so it works without an import. Every id accepts every argument of
``WritePolicyBenchEnv`` as a ``gym.make`` keyword.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

ENTRY_POINT = "wpb_gym.envs.env:WritePolicyBenchEnv"
# gym.make_vec(id, num_envs=N) builds the native vector env (envs/vector.py); "sync" and "async"
# still build Gymnasium's vector envs over single envs.
VECTOR_ENTRY_POINT = "wpb_gym.envs.vector:WritePolicyBenchVectorEnv"

_REGIME_NAMES = {
    "default": "",
    "burst_drift": "BurstDrift-",
    "redundancy": "Redundancy-",
    "burst_redundancy": "BurstRedundancy-",
    "breaking": "Breaking-",
    "reverts": "Reverts-",
    "noisy_priority": "NoisyPriority-",
    "mixed_sizes": "MixedSizes-",
    "contract_mix": "ContractMix-",
}
# Long streams of the combined contract regime, with budgets that bind: storing every step
# would take about 9x the budget (documentation sections of 1-5 KB are a fifth of the steps).
_LONG_STREAMS = {
    "Long1k-": {"regime": "contract_mix", "length": 1_000, "budget_bytes": 102_400},
    "Long10k-": {"regime": "contract_mix", "length": 10_000, "budget_bytes": 1_048_576},
}


def _ids() -> dict[str, dict[str, Any]]:
    ids: dict[str, dict[str, Any]] = {}
    # The base id names no regime: it generates the default regime, and given episode files
    # (real-drift episodes, say) it takes every episode in them rather than only "default" ones.
    variants = [(name, {"regime": regime} if name else {}) for regime, name in _REGIME_NAMES.items()]
    variants += list(_LONG_STREAMS.items())
    for name, kwargs in variants:
        for track, suffix in (("unprivileged", ""), ("privileged", "Privileged-")):
            ids[f"WritePolicyBench-{name}{suffix}v0"] = {**kwargs, "track": track}
    return ids


ENV_IDS: dict[str, dict[str, Any]] = _ids()
"""Registered id -> its default keyword arguments."""

QUERY_ENTRY_POINT = "wpb_gym.envs.query_env:QueryTierEnv"
QUERY_ENV_IDS: dict[str, dict[str, Any]] = {
    f"WritePolicyBench-Queries{tier}-{suffix}v0": {"regime": f"queries_{tier.lower()}", "track": track}
    for tier in ("Easy", "Medium", "Hard")
    for track, suffix in (("unprivileged", ""), ("privileged", "Privileged-"))
}
"""The query tier's ids (``QueryTierEnv``; ``gym.make_vec`` steps them with Gymnasium's ``SyncVectorEnv``).
Variants are keyword arguments, not ids: ``endless=True`` (with ``endless_threshold``,
``endless_window``, ``endless_ramp``) and ``budget_fraction``."""


def register_envs() -> None:
    for env_id, kwargs in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(
                id=env_id, entry_point=ENTRY_POINT, vector_entry_point=VECTOR_ENTRY_POINT, kwargs=dict(kwargs)
            )
    for env_id, kwargs in QUERY_ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=QUERY_ENTRY_POINT, kwargs=dict(kwargs))
