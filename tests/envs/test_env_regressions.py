"""Regression tests of the environment: each pins a bug that was found and fixed."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from test_env_golden import golden_episode, split, write_cost
from test_env_properties import expected_mask

from wpb_gym import (
    Episode,
    Step,
)
from wpb_gym.envs.env import WritePolicyBenchEnv


# ---------------------------------------------------------------------------- regressions
def test_writing_to_info_action_mask_does_not_change_the_env():
    """info["action_mask"] used to be the env's own mask array: writing to it (e.g. a wrapper
    post-processing info in place) changed which actions step() accepted, and the forced WRITE
    then raised AssertionError("store rejected ... that the mask allowed")."""
    env = WritePolicyBenchEnv(episodes=[golden_episode()], budget_bytes=60, slots=2)
    _, info = env.reset(seed=0)
    assert not env.action_masks()[1]  # WRITE does not fit in 60 bytes
    info["action_mask"][1] = True
    assert not env.action_masks()[1]
    _, _, _, _, info = env.step(1)
    assert info["accepted"] is False and info["reason"] == "over_budget"
    info["action_mask"][:] = True  # step 1 does not fit either, and memory is empty
    assert env.action_masks().tolist() == [True, False, False, False, False, False]


def test_merge_mask_with_nan_observation_values():
    """The MERGE mask used to treat equal JSON text as 'nothing to merge'; with NaN (NaN != NaN)
    the store's canonical delta is not empty, so the store accepted a MERGE the mask forbade."""
    steps = [Step(t, {"api": "a", "v": float("nan")}, {"mode": "m"}) for t in range(3)]
    episode = Episode(steps=steps, labels={"critical_steps": [], "utility_by_step": {0: 1, 1: 1, 2: 1}})
    env = WritePolicyBenchEnv(episodes=[episode], budget_bytes=5000, slots=2)
    env.reset(seed=0)
    env.step(1)
    np.testing.assert_array_equal(env.action_masks(), expected_mask(env, 0))
    assert env.action_masks()[2]
    _, _, _, _, info = env.step(2)
    assert info["accepted"] and env.store.get(1).kind == "MERGE"
    np.testing.assert_array_equal(env.action_masks(), expected_mask(env, 0))


@pytest.mark.parametrize(
    "base, new",
    [
        ({"api": "a", "p": ["x"]}, {"api": "a", "p": ("x",)}),  # same JSON text, tuple != list
        ({"api": "a", "n": {"1": 2}}, {"api": "a", "n": {1: 2}}),  # same JSON text, key 1 != "1"
        ({"api": "a", "p": ["x"]}, {"api": "a", "p": ["x"]}),  # plain JSON, equal: nothing to merge
        ({"api": "a", "p": ["x"]}, {"api": "a", "p": ["y"]}),
    ],
)
def test_merge_mask_when_equal_json_text_hides_different_values(base, new):
    """The env prices MERGE by content (equal JSON text, equal delta); values that print alike
    but compare unequal must still get the store's own verdict."""
    # Step 1 has base's value and text, step 2 new's: a verdict cached for (text, text) at
    # step 1 must not be reused for step 2.
    steps = [Step(0, base, {"mode": "m"}), Step(1, copy.deepcopy(base), {"mode": "m"}), Step(2, new, {"mode": "m"})]
    episode = Episode(steps=steps, labels={"critical_steps": [], "utility_by_step": {0: 1, 1: 1, 2: 1}})
    env = WritePolicyBenchEnv(episodes=[episode], budget_bytes=5000, slots=2)
    env.reset(seed=0)
    env.step(1)
    np.testing.assert_array_equal(env.action_masks(), expected_mask(env, 0))
    env.step(0)
    np.testing.assert_array_equal(env.action_masks(), expected_mask(env, 0))
    if env.action_masks()[2]:
        _, _, _, _, info = env.step(2)
        assert info["accepted"] and env.store.get(2).kind == "MERGE"


def test_stream_features_see_a_change_that_memory_does_not_hold():
    """Skipping step 0 leaves memory without the family; the stream features still show that
    step 1 changed against what was shown, which is what lets a policy find drifts."""
    env = WritePolicyBenchEnv(episodes=[golden_episode()], budget_bytes=10_000, slots=2)
    obs, _ = env.reset(seed=0)
    step, _, _ = split(env, obs)
    assert (step["family_seen"], step["changed_since_seen"], step["version_up_since_seen"]) == (0.0, 0.0, 0.0)
    obs, *_ = env.step(0)  # SKIP step 0
    step, _, _ = split(env, obs)
    assert step["family_in_memory"] == 0.0 and step["version_up"] == 0.0
    assert (step["family_seen"], step["changed_since_seen"], step["version_up_since_seen"]) == (1.0, 1.0, 1.0)
    env.step(0)
    obs, *_ = env.step(0)  # t = 3: GET /b, a family never shown
    step, _, _ = split(env, obs)
    assert step["family_seen"] == 0.0


def test_items_of_one_observation_keep_their_own_slot_rows():
    """WRITE rows are packed once per (cost, kind, deprecated, priority) and shared by the steps
    that show one observation; each item must still get its own flags (superseded here), also
    in a later episode of the same env with another budget."""
    shown = {"api": "GET /a", "params": ["x"], "version": 1, "deprecated": False}
    steps = [Step(t, shown, {"mode": "m", "priority": 0.5}) for t in range(3)]
    labels = {"critical_steps": [], "total_drift_events": 0, "utility_by_step": {0: 1, 1: 1, 2: 1}, "mode": "m"}
    env = WritePolicyBenchEnv(episodes=[Episode(steps=steps, labels=labels)], slots=2, slot_order="oldest")
    cost = write_cost(shown, {"mode": "m"})
    for budget in (10_000, 5_000):
        env.reset(seed=0, options={"budget_bytes": budget})
        env.step(1)
        obs, *_ = env.step(1)  # t = 2: items 0 and 1, oldest first
        _, _, slots = split(env, obs)
        assert [s["cost_budget"] for s in slots] == pytest.approx([cost / budget] * 2)
        assert [s["superseded"] for s in slots] == [1.0, 0.0]
        obs, *_ = env.step(2 + env.K + 1)  # EXPIRE item 1: item 0 is the newest again
        _, _, slots = split(env, obs)
        assert slots[0]["superseded"] == 0.0 and slots[0]["present"] == 1.0 and slots[1]["present"] == 0.0


def test_privileged_items_of_one_observation_show_their_own_priority():
    """WRITE rows are shared per (cost, kind, deprecated, priority): on the privileged track two
    steps showing one observation with different priorities must show different rows."""
    shown = {"api": "GET /a", "params": ["x"], "version": 1, "deprecated": False}
    steps = [Step(t, shown, {"mode": "m", "priority": p}) for t, p in enumerate([0.25, 0.75, 0.5])]
    labels = {"critical_steps": [], "total_drift_events": 0, "utility_by_step": {0: 1, 1: 1, 2: 1}, "mode": "m"}
    env = WritePolicyBenchEnv(
        episodes=[Episode(steps=steps, labels=labels)], slots=2, slot_order="oldest", track="privileged"
    )
    env.reset(seed=0)
    env.step(1)
    obs, *_ = env.step(1)
    _, _, slots = split(env, obs)
    assert [s["priority"] for s in slots] == pytest.approx([0.25, 0.75])


def test_comparisons_are_not_carried_from_one_episode_to_the_next():
    """The step features comparing the current step with memory are memoised per pair of
    contents within an episode; content ids restart with every episode, so two episodes
    whose ids coincide but whose versions go opposite ways must show opposite features."""
    labels = {"critical_steps": [], "total_drift_events": 0, "utility_by_step": {0: 1, 1: 1}, "mode": "m"}

    def episode(api, versions):
        obs = [{"api": api, "params": ["x"], "version": v, "deprecated": False} for v in versions]
        return Episode(steps=[Step(t, o, {"mode": "m"}) for t, o in enumerate(obs)], labels=labels)

    env = WritePolicyBenchEnv(episodes=[episode("a", [1, 2]), episode("b", [2, 1])], episode_order="cycle")
    seen = []
    for _ in range(2):
        env.reset()
        obs, *_ = env.step(1)  # WRITE step 0: step 1 is compared with it
        step, _, _ = split(env, obs)
        seen.append((step["version_up"], step["version_down"]))
    assert seen == [(1.0, 0.0), (0.0, 1.0)]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"length": 10**9}, "GeneratorConfig.length: expected at most 1,000,000"),
        ({"api_pool": 10**8}, "GeneratorConfig.api_pool: expected at most 1,000,000"),
        ({"api_pool": 10**5, "max_params": 1000}, "GeneratorConfig.api_pool x max_params"),
        ({"query_tier": True, "length": 10**8}, "QueryTierConfig.length: expected at most 1,000,000"),
        ({"query_tier": True, "checkpoint_interval": 2, "queries_per_checkpoint": 100_000},
         "expected at most 16,777,216"),
    ],
)
def test_a_huge_episode_size_from_gym_make_is_named_before_it_is_allocated(kwargs, named):
    """gym.make(length=10**9) used to end in numpy's MemoryError for a 44.7 GiB array."""
    import gymnasium as gym

    import wpb_gym  # noqa: F401 - registers the ids

    env_id = "WritePolicyBench-QueriesEasy-v0" if kwargs.pop("query_tier", False) else "WritePolicyBench-v0"
    with pytest.raises(ValueError, match=named):
        gym.make(env_id, **kwargs).reset(seed=0)


def test_a_huge_length_in_reset_options_is_named_before_it_is_allocated():
    env = WritePolicyBenchEnv(length=20)
    env.reset(seed=0, options={"length": 30})
    with pytest.raises(ValueError, match=r"options\['length'\] must be at most 1,000,000 steps, got 1,000,000,000"):
        env.reset(seed=0, options={"length": 10**9})
