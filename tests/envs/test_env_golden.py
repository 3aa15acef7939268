"""Golden feature values on hand-made episodes, derived by hand from the env docstring feature tables."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wpb_gym import (
    Episode,
    Step,
)
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.observation.features import MEMORY_FEATURES, STEP_FEATURES
from wpb_gym.envs.observation.stream_table import endpoint_family

# ---------------------------------------------------------------------------- 9. golden features
OBS = [
    {"api": "GET /v1/a", "params": ["x", "y"], "version": 1, "deprecated": False},
    {"api": "GET /v1/a", "params": ["x", "z"], "version": 2, "deprecated": True},
    {"api": "GET /v2/a", "params": ["x"], "version": 3, "deprecated": False},
    {"api": "GET /b", "params": ["q"], "version": 1, "deprecated": False},
]
PRIORITIES = [0.5, 1.0, 0.25, 0.0]
# The slot features the docstring documents (the order is ``env.slot_features``).
SLOT_NAMES = (
    "present",
    "age",
    "cost_budget",
    "is_merge",
    "orphan",
    "kind_endpoint",
    "kind_doc",
    "kind_guide",
    "same_family",
    "same_api",
    "superseded",
    "deprecated",
    "merge_ok",
    "reverted",
)


def golden_episode() -> Episode:
    steps = [
        Step(t, obs, {"mode": "m", "priority": p}) for t, (obs, p) in enumerate(zip(OBS, PRIORITIES, strict=False))
    ]
    labels = {"critical_steps": [1], "total_drift_events": 1, "utility_by_step": {0: 1, 1: 5, 2: 1, 3: 1}, "mode": "m"}
    return Episode(steps=steps, labels=labels)


def write_cost(obs, metadata) -> int:
    # spec §2.2: JSON of the observation + JSON of the visible metadata + 32 (header) + 16 (index).
    return len(json.dumps(obs, sort_keys=True)) + len(json.dumps(metadata, sort_keys=True)) + 48


def split(env: WritePolicyBenchEnv, obs: np.ndarray):
    """The Box observation as (step features, memory features, slot rows) by the documented layout."""
    n_step, n_mem, n_slot = len(env.step_features), len(MEMORY_FEATURES), len(env.slot_features)
    assert obs.shape == (n_step + n_mem + env.K * n_slot,)
    step = dict(zip(env.step_features, obs[:n_step].tolist(), strict=True))
    memory = dict(zip(MEMORY_FEATURES, obs[n_step : n_step + n_mem].tolist(), strict=True))
    rows = obs[n_step + n_mem :].reshape(env.K, n_slot)
    slots = [dict(zip(env.slot_features, row.tolist(), strict=True)) for row in rows]
    return step, memory, slots


def check(features: dict, expected: dict) -> None:
    """Every named feature as expected; the unnamed ones are 0."""
    assert set(expected) <= set(features)
    full = {name: 0.0 for name in features} | expected
    assert features == pytest.approx(full, rel=1e-6, abs=1e-7)


def test_golden_features_on_a_hand_made_episode():
    B, K, T = 10_000, 2, 4
    # Terminal rewards without costs: the last reward is the episode's F1.
    env = WritePolicyBenchEnv(
        episodes=[golden_episode()], budget_bytes=B, slots=K, max_expires_per_step=2, dense_reward=False, expire_cost=0
    )
    assert env.step_features == STEP_FEATURES and set(env.slot_features) == set(SLOT_NAMES)
    meta = {"mode": "m"}  # the unprivileged view of the metadata
    cost = [write_cost(obs, meta) for obs in OBS]
    delta = {"deprecated": True, "params": ["x", "z"], "version": 2}  # step 1 against step 0
    mcost = len(json.dumps(delta, sort_keys=True)) + 16
    empty_slot = {name: 0.0 for name in env.slot_features}

    # t = 0: empty memory.
    obs, info = env.reset(seed=0)
    step, memory, slots = split(env, obs)
    check(step, {"cost_budget": cost[0] / B, "cost_remaining": cost[0] / B, "fits": 1, "kind_endpoint": 1})
    check(memory, {"remaining": 1, "expires_left": 1, "fits_if_larger_expired": 1})
    assert slots == [empty_slot, empty_slot]
    assert info["action_mask"].tolist() == [True, True, False, False, False, False]

    # WRITE step 0. t = 1: same api, version up, x,y -> x,z, newly deprecated.
    obs, *_ = env.step(1)
    step, memory, slots = split(env, obs)
    check(
        step,
        {
            "cost_budget": cost[1] / B,
            "cost_remaining": cost[1] / (B - cost[0]),
            "fits": 1,
            "kind_endpoint": 1,
            "family_in_memory": 1,
            "api_in_memory": 1,
            "version_up": 1,
            "version_changed": 1,
            "params_added": 0.5,  # z of {x, z}
            "params_removed": 0.5,  # y of {x, y}
            "deprecated": 1,
            "newly_deprecated": 1,
            "fields_changed": 0.75,  # params, version, deprecated of the 4 fields
            "merge_ok": 1,
            "merge_cost": mcost / cost[1],
            "reference_age": 1 / T,
            "family_items": 1 / K,
            # Against the stream: step 0 of the family was shown, version 1 -> 2.
            "family_seen": 1,
            "changed_since_seen": 1,
            "version_up_since_seen": 1,
            "params_added_since_seen": 0.5,
            "params_removed_since_seen": 0.5,
            "newly_deprecated_since_seen": 1,
        },
    )
    check(
        memory,
        {"remaining": (B - cost[0]) / B, "items": 1 / (1 + K), "time": 1 / T, "expires_left": 1}
        | {"fits_if_larger_expired": 1},
    )
    check(
        slots[0],
        {
            "present": 1,
            "age": 1 / T,
            "cost_budget": cost[0] / B,
            "kind_endpoint": 1,
            "same_family": 1,
            "same_api": 1,
            "merge_ok": 1,
        },
    )
    assert slots[1] == empty_slot
    assert env.slot_timesteps == (0, None)
    assert env.action_masks().tolist() == [True, True, True, False, True, False]

    # MERGE step 1 into slot 0. t = 2: GET /v2/a is another api of the same family (GET //a).
    obs, _, _, _, info = env.step(2)
    assert info["accepted"] and env.store.get(1).kind == "MERGE" and env.store.get(1).delta == delta
    assert endpoint_family("GET /v2/a") == endpoint_family("GET /v1/a") != endpoint_family("GET /b")
    step, memory, slots = split(env, obs)
    check(
        step,
        {
            "cost_budget": cost[2] / B,
            "cost_remaining": cost[2] / (B - cost[0] - mcost),
            "fits": 1,
            "kind_endpoint": 1,
            "family_in_memory": 1,  # the reference is step 1 (the newest item of the family)
            "version_up": 1,
            "version_changed": 1,
            "params_removed": 0.5,  # z of {x, z}; nothing added
            "undeprecated": 1,
            "fields_changed": 1,  # api, params, version, deprecated
            "reference_age": 1 / T,
            "family_items": 2 / K,
            "family_seen": 1,
            "changed_since_seen": 1,
            "version_up_since_seen": 1,  # version 2 -> 3
            "params_removed_since_seen": 0.5,  # z of {x, z}
            "undeprecated_since_seen": 1,
        },
    )
    check(
        memory,
        {"remaining": (B - cost[0] - mcost) / B, "items": 2 / (2 + K), "merge_items": 0.5, "time": 2 / T}
        | {"expires_left": 1, "fits_if_larger_expired": 1},
    )
    assert cost[0] > mcost
    assert env.slot_timesteps == (0, 1)  # relevance: the largest item, then the family newest first
    check(
        slots[0],
        {"present": 1, "age": 2 / T, "cost_budget": cost[0] / B, "kind_endpoint": 1, "same_family": 1, "superseded": 1},
    )
    check(
        slots[1],
        {
            "present": 1,
            "age": 1 / T,
            "cost_budget": mcost / B,
            "is_merge": 1,
            "kind_endpoint": 1,
            "same_family": 1,
            "deprecated": 1,
        },
    )
    assert env.action_masks().tolist() == [True, True, False, False, True, True]

    # WRITE step 2. t = 3: GET /b, a family memory does not hold: the slots show the oldest.
    obs, *_ = env.step(1)
    step, memory, slots = split(env, obs)
    used = cost[0] + mcost + cost[2]
    check(
        step,
        {"cost_budget": cost[3] / B, "cost_remaining": cost[3] / (B - used), "fits": 1, "kind_endpoint": 1},
    )
    check(
        memory,
        {"remaining": (B - used) / B, "items": 3 / (3 + K), "hidden_items": 1 / 3, "merge_items": 1 / 3}
        | {"time": 3 / T, "expires_left": 1, "fits_if_larger_expired": 1},
    )
    assert env.slot_timesteps == (0, 1)
    check(slots[0], {"present": 1, "age": 3 / T, "cost_budget": cost[0] / B, "kind_endpoint": 1, "superseded": 1})
    check(
        slots[1],
        {"present": 1, "age": 2 / T, "cost_budget": mcost / B, "is_merge": 1, "kind_endpoint": 1}
        | {"superseded": 1, "deprecated": 1},
    )

    # EXPIRE slot 0 (the base of the MERGE delta): the delta becomes an orphan.
    obs, _, _, _, info = env.step(2 + K)
    assert info["accepted"] and env.t == 3 and 0 not in env.store
    step, memory, slots = split(env, obs)
    used -= cost[0]
    check(
        memory,
        {"remaining": (B - used) / B, "items": 2 / (2 + K), "merge_items": 0.5, "time": 3 / T, "expires_left": 0.5}
        | {"fits_if_larger_expired": 1},
    )
    assert cost[2] > mcost
    assert env.slot_timesteps == (2, 1)  # the largest first
    check(slots[0], {"present": 1, "age": 1 / T, "cost_budget": cost[2] / B, "kind_endpoint": 1})
    check(
        slots[1],
        {"present": 1, "age": 2 / T, "cost_budget": mcost / B, "is_merge": 1, "orphan": 1, "kind_endpoint": 1}
        | {"superseded": 1, "deprecated": 1},
    )
    assert env.store.retained_timesteps() == (2,)

    # A second EXPIRE (of the orphan) uses up the cap of 2: EXPIRE is masked, and trying it acts as SKIP.
    obs, *_ = env.step(2 + K + 1)
    assert env.slot_timesteps == (2, None)
    _, memory, _ = split(env, obs)
    assert memory["expires_left"] == 0.0
    assert env.action_masks().tolist() == [True, True, False, False, False, False]
    obs, reward, terminated, _, info = env.step(2 + K)
    assert not info["accepted"] and info["reason"] == "expire_cap"
    assert terminated and env.t == T and env.store.timesteps() == (2,)
    assert info["metrics"]["tp"] == 0 and info["metrics"]["fp"] == 1 and reward == 0.0
    # After the end: no current step, every feature of the step row 0, time 1.
    step, memory, slots = split(env, obs)
    assert set(step.values()) == {0.0}
    assert memory["time"] == 1.0 and memory["expires_left"] == 0.0


def test_golden_features_oldest_order_and_privileged_priority():
    B, K = 10_000, 3
    env = WritePolicyBenchEnv(
        episodes=[golden_episode()], budget_bytes=B, slots=K, slot_order="oldest", track="privileged"
    )
    assert env.step_features == STEP_FEATURES + ("priority",)
    assert set(env.slot_features) == set(SLOT_NAMES) | {"priority"}
    cost = [write_cost(obs, {"mode": "m", "priority": p}) for obs, p in zip(OBS, PRIORITIES, strict=False)]
    obs, _ = env.reset(seed=0)
    step, _, _ = split(env, obs)
    assert step["priority"] == 0.5 and step["cost_budget"] == pytest.approx(cost[0] / B)
    env.step(1)
    env.step(2)  # MERGE step 1 into step 0
    obs, *_ = env.step(1)  # WRITE step 2
    assert env.slot_timesteps == (0, 1, 2)  # oldest first, whatever the family
    step, memory, slots = split(env, obs)
    assert step["priority"] == 0.0 and step["family_in_memory"] == 0.0
    assert [row["priority"] for row in slots] == [0.5, 1.0, 0.25]
    assert [row["superseded"] for row in slots] == [1.0, 1.0, 0.0]
    assert [row["same_family"] for row in slots] == [0.0, 0.0, 0.0]
    assert memory["hidden_items"] == 0.0 and memory["items"] == pytest.approx(3 / (3 + K))
    assert env.store.get(2).byte_cost == cost[2]
