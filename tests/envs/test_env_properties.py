"""Property and exactness tests of the Gymnasium environment ``WritePolicyBench-v0``.

Over random reachable states (random configurations, generated and hand-made episodes,
random action sequences that include invalid actions):

* the action mask is exactly the set of actions the store would accept (plus the env's own
  rules: the per-step EXPIRE cap and empty slots), everywhere it is exposed;
* an invalid action never raises, changes no memory, advances time like SKIP and costs
  exactly the penalty;
* the budget, byte accounting, observation space and slot layout invariants hold after
  every step, and observations are fresh arrays;
* every stored item can be reached through the slots and expired;
* hidden labels never reach observations or masks (nor does ``priority`` on the
  unprivileged track);
* the final ``info["metrics"]`` is what the offline scorer computes on a replayed store.

Dense rewards are in ``test_env_rewards.py``, reset options in ``test_env_reset.py``, golden
feature values in ``test_env_golden.py``; the strategies and models here serve them too.
"""

from __future__ import annotations

import copy
import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym import (
    ByteMemoryStore,
    Episode,
    MemoryAction,
    Step,
    score_episode,
)
from wpb_gym.envs.env import WritePolicyBenchEnv
from python_path import python_env
from wpb_gym.envs.observation.stream_table import endpoint_family

REGIMES = ("default", "burst_drift", "redundancy", "burst_redundancy")
GENERATOR_OPTIONS = ({}, {"doc_prob": 0.3}, {"migration_guides": True}, {"priority_noise": 0.2}, {"drift_prob": 0.3})
REWARDS = ("f1", "utility", "neg_regret", {"f1": 0.5, "utility": 0.5})
ENV_LEVEL_REASONS = ("empty_slot", "expire_cap")


# ---------------------------------------------------------------------------- episodes
def _labels(rng: random.Random, T: int, *, mode: str = "m") -> dict:
    critical = sorted(rng.sample(range(T), rng.randint(0, max(1, T // 4))))
    return {
        "critical_steps": critical,
        "total_drift_events": len(critical) + rng.randint(0, 2),
        "utility_by_step": {t: rng.choice((0.0, 0.5, 1.0, 5.0, 6.0)) for t in range(T)},
        "mode": mode,
    }


def merge_episode(seed: int, T: int) -> Episode:
    """A hand-made stream where the same ``api`` recurs with changed fields, so MERGE is valid.

    Endpoint families: ``GET /v1/a`` and ``GET /v2/a`` are one family (``GET //a``), ``GET /b``
    another; a few documentation sections and non-dict observations are mixed in.
    """
    rng = random.Random(seed)
    apis = ("GET /v1/a", "GET /v2/a", "GET /b")
    state = {
        api: {"api": api, "params": ["x", "y"], "version": 1, "deprecated": False, "required": ["x"]} for api in apis
    }
    steps = []
    for t in range(T):
        kind = rng.random()
        if kind < 0.08:
            obs = {"section": rng.choice(("intro", "errors")), "content": "z" * rng.randint(10, 200), "last_updated": t}
        elif kind < 0.12:
            obs = "free text " * rng.randint(1, 4)
        else:
            api = rng.choice(apis)
            snap = dict(state[api])
            change = rng.random()
            if change < 0.3:
                snap["version"] = snap["version"] + 1
            elif change < 0.5:
                params = set(snap["params"]) ^ {rng.choice("xyzw")}
                snap["params"] = sorted(params) or ["x"]
            elif change < 0.6:
                snap["deprecated"] = not snap["deprecated"]
            elif change < 0.7:
                snap["required"] = sorted(set(snap["required"]) ^ {rng.choice("xy")})
            state[api] = snap
            obs = dict(snap)
        metadata = {"mode": "m", "priority": rng.choice((0.0, 0.25, 0.5, 1.0))}
        steps.append(Step(t, obs, metadata))
    return Episode(steps=steps, labels=_labels(rng, T))


@st.composite
def env_configs(draw, *, dense: bool | None = False, mode: str | None = "box") -> dict:
    """Keyword arguments of a small, churning environment (budgets bind, memory turns over)."""
    K = draw(st.integers(1, 6))
    kwargs = {
        "slots": K,
        "slot_order": draw(st.sampled_from(("relevance", "oldest"))),
        "max_expires_per_step": draw(st.sampled_from((None, 0, 1, 2))),
        "track": draw(st.sampled_from(("unprivileged", "privileged"))),
        "budget_bytes": draw(st.integers(300, 3000)),
        "observation_mode": mode if mode is not None else draw(st.sampled_from(("box", "dict"))),
    }
    if dense is None:
        kwargs["reward"] = draw(st.sampled_from(REWARDS))
        kwargs["dense_reward"] = draw(st.booleans())
    else:
        kwargs["dense_reward"] = dense
    kwargs["expire_cost"] = 0.0  # (the env's default is 0.03; the tests of costs set their own)
    if draw(st.integers(0, 2)) == 0:
        kwargs["episodes"] = [merge_episode(draw(st.integers(0, 10_000)), draw(st.integers(20, 50)))]
    else:
        kwargs["regime"] = draw(st.sampled_from(REGIMES))
        kwargs["length"] = draw(st.integers(20, 60))
        kwargs["episode_seed"] = draw(st.integers(0, 5))
        kwargs.update(draw(st.sampled_from(GENERATOR_OPTIONS)))
    return kwargs


# Each choice: (kind, r). kind 0-2: a raw action (often invalid), 3-9: a valid action other than
# SKIP when there is one (so memory fills up and turns over), else SKIP.
choices = st.lists(st.tuples(st.integers(0, 9), st.integers(0, 2**16)), min_size=1, max_size=80)


def pick(env: WritePolicyBenchEnv, choice: tuple[int, int], mask: np.ndarray | None = None) -> int:
    kind, r = choice
    if kind < 3:
        return r % env.n_actions
    valid = np.flatnonzero((env.action_masks() if mask is None else mask)[1:]) + 1
    return int(valid[r % len(valid)]) if len(valid) else 0


def pick_invalid(env: WritePolicyBenchEnv, r: int) -> int | None:
    invalid = np.flatnonzero(~env.action_masks())
    return int(invalid[r % len(invalid)]) if len(invalid) else None


def actions_until_done(choice_list):
    """Cycle through the choices for ever (every episode ends: time advances on all but EXPIRE)."""
    i = 0
    while True:
        yield choice_list[i % len(choice_list)]
        i += 1


# ---------------------------------------------------------------------------- models
def family_key(observation):
    """The endpoint family of an observation, written from the docstring (None: no family)."""
    if type(observation) is dict:
        if "api" in observation:
            return ("api", json.dumps(endpoint_family(observation["api"])))
        if "section" in observation:
            return ("section", json.dumps(observation["section"]))
        if "old_api" in observation or "new_api" in observation:
            return ("guide", json.dumps(endpoint_family(observation.get("old_api"))))
    return None


def expected_slots(env: WritePolicyBenchEnv) -> tuple[int, ...]:
    """The slot layout the docstring describes."""
    stored = list(env.store.timesteps())  # oldest first
    K = env.K
    current = env.current_step
    fam = family_key(current.observation) if current is not None else None
    if env.slot_order == "relevance" and stored:
        largest = max(stored, key=lambda s: (env.store.get(s).byte_cost, -s))  # the oldest of the largest
        rest = [s for s in stored if s != largest]
        same = [s for s in rest if fam is not None and family_key(env.store.get(s).step.observation) == fam]
        others = [s for s in rest if s not in same]
        return tuple(([largest] + same[::-1] + others)[:K])
    return tuple(stored[:K])


def expected_mask(env: WritePolicyBenchEnv, expires_this_step: int) -> np.ndarray:
    """Action a is valid iff the store accepts ``decode_action(a)`` now, except an EXPIRE over the
    per-step cap and any MERGE/EXPIRE into an empty slot (which decodes to SKIP)."""
    K = env.K
    cap = env.max_expires_per_step
    out = np.zeros(env.n_actions, dtype=bool)
    for a in range(env.n_actions):
        action = env.decode_action(a)
        if a >= 2:
            k = (a - 2) % K
            target = env.slot_timesteps[k]
            if target is None:
                assert action == MemoryAction("SKIP")
                continue
            assert action.action == ("MERGE" if a < 2 + K else "EXPIRE")
            assert action.target_t == target
            if a >= 2 + K and cap is not None and expires_this_step >= cap:
                continue
        out[a] = env.store.check(action, env.t).accepted
    return out


def store_snapshot(store: ByteMemoryStore):
    return store.bytes_used, store.items(), store.timesteps(), store.retained_timesteps()


def assert_same_obs(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    else:
        np.testing.assert_array_equal(a, b)


def make_env(kwargs: dict, **overrides) -> WritePolicyBenchEnv:
    return WritePolicyBenchEnv(**{**kwargs, **overrides})


# ---------------------------------------------------------------------------- 1. mask exactness
@settings(max_examples=100)
@given(env_configs(mode=None), choices, st.integers(0, 1000))
def test_mask_is_exactly_what_the_store_accepts(kwargs, choice_list, seed):
    env = make_env(kwargs)
    obs, info = env.reset(seed=seed)
    expires = 0
    for choice in actions_until_done(choice_list):
        mask = env.action_masks()
        assert mask.dtype == np.bool_ and mask.shape == (env.n_actions,)
        assert mask[0]
        np.testing.assert_array_equal(mask, expected_mask(env, expires))
        np.testing.assert_array_equal(info["action_mask"], mask)
        if env.observation_mode == "dict":
            np.testing.assert_array_equal(obs["action_mask"], mask.astype(np.int8))
        for a in np.flatnonzero(mask):  # valid actions round-trip through encode_action
            assert env.encode_action(env.decode_action(int(a))) == a
        a = pick(env, choice)
        t_before = env.t
        obs, _, terminated, truncated, info = env.step(a)
        assert not truncated
        expires = expires + 1 if info["accepted"] and a >= 2 + env.K else 0
        assert (env.t == t_before) == (info["accepted"] and a >= 2 + env.K)
        if terminated:
            break
    # After the last decision nothing but SKIP is offered.
    assert env.action_masks().tolist() == [True] + [False] * (env.n_actions - 1)
    np.testing.assert_array_equal(info["action_mask"], env.action_masks())


# ---------------------------------------------------------------------------- 2. invalid actions
@settings(max_examples=50)
@given(env_configs(), choices, st.integers(0, 1000))
def test_invalid_actions_are_rejected_like_skip(kwargs, choice_list, seed):
    """A masked-out action: accepted False with a reason, memory unchanged, time advanced as by
    SKIP (a lock-step twin that SKIPs instead sees the same states), reward -penalty."""
    penalty = 0.25
    env = make_env(kwargs, invalid_action_penalty=penalty, dense_reward=False)
    twin = make_env(kwargs, dense_reward=False)
    env.reset(seed=seed)
    twin.reset(seed=seed)
    rewards, paid_penalties = [], 0.0
    for kind, r in actions_until_done(choice_list):
        invalid = pick_invalid(env, r) if kind < 5 else None
        if invalid is None:
            a = pick(env, (3, r))  # a valid action, so memory churns between the invalid ones
            obs, reward, terminated, _, info = env.step(a)
            tobs, _, tterminated, _, _ = twin.step(a)
            assert info["accepted"] and info["reason"] == "accepted"
        else:
            before = store_snapshot(env.store)
            t = env.t
            if invalid >= 2 and env.slot_timesteps[(invalid - 2) % env.K] is None:
                expected_reason = "empty_slot"
            elif invalid >= 2 + env.K:  # a shown item is always old enough: only the cap forbids it
                assert env.max_expires_per_step is not None
                expected_reason = "expire_cap"
            else:
                expected_reason = env.store.check(env.decode_action(invalid), t).reason.value
                assert expected_reason not in ENV_LEVEL_REASONS
            obs, reward, terminated, _, info = env.step(invalid)
            tobs, _, tterminated, _, _ = twin.step(0)
            paid_penalties += penalty
            assert info["accepted"] is False
            assert isinstance(info["reason"], str) and info["reason"] and info["reason"] != "accepted"
            assert info["reason"] == expected_reason
            assert env.t == t + 1  # like SKIP, even for a rejected EXPIRE
            after = store_snapshot(env.store)
            assert after[0] == before[0] and after[2] == before[2] and after[3] == before[3]
            assert all(x is y for x, y in zip(after[1], before[1], strict=True))
            if not terminated:
                assert reward == -penalty
        rewards.append(reward)
        assert terminated == tterminated
        assert_same_obs(obs, tobs)
        np.testing.assert_array_equal(env.action_masks(), twin.action_masks())
        assert store_snapshot(env.store)[1:] == store_snapshot(twin.store)[1:]
        if terminated:
            break
    # Terminal mode: the rewards add up to the terminal metric minus the penalties paid.
    assert sum(rewards) == info["f1"] - paid_penalties


# ---------------------------------------------------------------------------- 3. invariants
@settings(max_examples=80)
@given(env_configs(mode=None), choices, st.integers(0, 1000))
def test_invariants_after_every_step(kwargs, choice_list, seed):
    env = make_env(kwargs)
    obs, info = env.reset(seed=seed)
    twin = python_env(**kwargs)  # the same episode on the Python parts: what mutating the outputs must not change
    twin.reset(seed=seed)
    previous = None
    for choice in actions_until_done(choice_list):
        store = env.store
        assert store.bytes_used <= store.max_bytes == kwargs["budget_bytes"]
        assert store.bytes_used == sum(item.byte_cost for item in store.items())
        assert env.observation_space.contains(obs)
        slots = env.slot_timesteps
        shown = [s for s in slots if s is not None]
        assert len(slots) == env.K and len(set(shown)) == len(shown)
        assert slots[: len(shown)] == tuple(shown)  # empty slots come last
        assert tuple(shown) == expected_slots(env)
        arrays = list(obs.values()) if isinstance(obs, dict) else [obs]
        for array in arrays:
            assert isinstance(array, np.ndarray)
        for array in arrays[:3]:
            assert array.dtype == np.float32
        if previous is not None:  # a fresh array every step
            for array, old in zip(arrays, previous, strict=False):
                assert array is not old and not np.shares_memory(array, old)
        # Mutating what the env returned changes nothing inside it.
        mask = env.action_masks()
        for array in arrays:
            array[...] = 1
        env.action_masks()[:] = False
        np.testing.assert_array_equal(env.action_masks(), mask)
        previous = arrays
        action = pick(env, choice, mask)
        obs, _, terminated, _, info = env.step(action)
        assert_same_obs(obs, twin.step(action)[0])
        if terminated:
            break
    assert env.observation_space.contains(obs)


# ---------------------------------------------------------------------------- 4. reachability
@pytest.mark.parametrize("slot_order", ["relevance", "oldest"])
@pytest.mark.parametrize("cap", [None, 1, 2])
@pytest.mark.parametrize("source", ["merge", "redundancy"])
def test_every_item_is_reachable_and_expirable(slot_order, cap, source):
    kwargs = {"slots": 2, "slot_order": slot_order, "budget_bytes": 10**6, "max_expires_per_step": cap}
    if source == "merge":
        env = WritePolicyBenchEnv(episodes=[merge_episode(3, 60)], **kwargs)
    else:
        env = WritePolicyBenchEnv(regime="redundancy", length=60, doc_prob=0.3, **kwargs)
    env.reset(seed=0)
    for _ in range(25):  # MERGE when possible (delta items too), else WRITE
        mask = env.action_masks()
        merges = np.flatnonzero(mask[2 : 2 + env.K])
        env.step(2 + int(merges[0]) if len(merges) else 1)
    stored = set(env.store.timesteps())
    assert len(stored) == 25
    seen: set[int] = set()
    expired: set[int] = set()
    expire0 = 2 + env.K
    while len(env.store):
        seen.update(s for s in env.slot_timesteps if s is not None)
        if not env.action_masks()[expire0]:  # the cap is used up: let time move on
            assert cap is not None
            _, _, terminated, _, _ = env.step(0)
            assert not terminated, "time ran out before memory emptied"
            continue
        target = env.slot_timesteps[0]
        assert target == expected_slots(env)[0]
        if slot_order == "oldest":
            assert target == min(env.store.timesteps())
        _, _, _, _, info = env.step(expire0)
        assert info["accepted"] and target not in env.store
        expired.add(target)
    assert seen == stored == expired
    assert env.store.bytes_used == 0


# ---------------------------------------------------------------------------- 5. label independence
def relabel(episode: Episode, seed: int) -> Episode:
    rng = random.Random(seed)
    T = len(episode)
    labels = dict(episode.labels)
    labels.update(_labels(rng, T))
    labels["critical_steps"] = sorted(set(range(T)) - set(episode.critical_steps))[: T // 2]
    labels["total_drift_events"] = int(episode.total_drift_events) + 3
    labels["utility_by_step"] = {t: float(rng.randint(0, 9)) for t in range(T)}
    steps = [Step(s.t, copy.deepcopy(s.observation), dict(s.metadata)) for s in episode.steps]
    return Episode(steps=steps, labels=labels)


def reprioritize(episode: Episode) -> Episode:
    steps = []
    for s in episode.steps:
        metadata = dict(s.metadata)
        metadata["priority"] = 1.0 - float(metadata.get("priority", 0.0))
        steps.append(Step(s.t, copy.deepcopy(s.observation), metadata))
    return Episode(steps=steps, labels=copy.deepcopy(episode.labels))


def source_episode(kwargs: dict, seed: int) -> Episode:
    env = make_env(kwargs)
    env.reset(seed=seed)
    return env.episode


def lockstep(env_a, env_b, choice_list, seed, *, compare: bool = True) -> bool:
    """Play the same actions in two envs; return True if any observation differed."""
    obs_a, _ = env_a.reset(seed=seed)
    obs_b, _ = env_b.reset(seed=seed)
    differed = False
    for choice in actions_until_done(choice_list):
        same = _equal_obs(obs_a, obs_b)
        differed |= not same
        if compare:
            assert same
            np.testing.assert_array_equal(env_a.action_masks(), env_b.action_masks())
        a = pick(env_a, choice)
        obs_a, _, done_a, _, _ = env_a.step(a)
        obs_b, _, done_b, _, _ = env_b.step(a)
        if compare:
            assert done_a == done_b
        if done_a or done_b:
            break
    return differed or not _equal_obs(obs_a, obs_b)


def _equal_obs(a, b) -> bool:
    if isinstance(a, dict):
        return all(np.array_equal(a[k], b[k]) for k in a)
    return np.array_equal(a, b)


def _list_kwargs(kwargs: dict) -> dict:
    keep = ("slots", "slot_order", "max_expires_per_step", "budget_bytes", "observation_mode")
    return {k: kwargs[k] for k in keep}


@settings(max_examples=40)
@given(env_configs(mode=None), choices, st.integers(0, 1000))
def test_labels_never_reach_observations_or_masks(kwargs, choice_list, seed):
    episode = source_episode(kwargs, seed)
    changed = relabel(episode, seed)
    assert changed.critical_steps != episode.critical_steps
    for track in ("unprivileged", "privileged"):
        base = _list_kwargs(kwargs) | {"track": track, "reward": "utility", "dense_reward": True}
        env_a = WritePolicyBenchEnv(episodes=[episode], **base)
        env_b = WritePolicyBenchEnv(episodes=[changed], **base)
        lockstep(env_a, env_b, choice_list, seed)


@settings(max_examples=30)
@given(env_configs(mode=None), choices, st.integers(0, 1000))
def test_priority_is_visible_on_the_privileged_track_only(kwargs, choice_list, seed):
    episode = source_episode(kwargs, seed)
    changed = reprioritize(episode)
    base = _list_kwargs(kwargs)
    env_a = WritePolicyBenchEnv(episodes=[episode], track="unprivileged", **base)
    env_b = WritePolicyBenchEnv(episodes=[changed], track="unprivileged", **base)
    lockstep(env_a, env_b, choice_list, seed)
    # Sanity: on the privileged track the same change shows (priority is a feature there).
    env_a = WritePolicyBenchEnv(episodes=[episode], track="privileged", **base)
    env_b = WritePolicyBenchEnv(episodes=[changed], track="privileged", **base)
    assert lockstep(env_a, env_b, choice_list, seed, compare=False)


# ---------------------------------------------------------------------------- 6. offline scorer
@settings(max_examples=50)
@given(env_configs(dense=None, mode=None), choices, st.integers(0, 1000))
def test_final_metrics_equal_the_offline_scorer(kwargs, choice_list, seed):
    env = make_env(kwargs)
    env.reset(seed=seed)
    replay = ByteMemoryStore(kwargs["budget_bytes"])
    executed = []
    for choice in actions_until_done(choice_list):
        a = pick(env, choice)
        t = env.t
        action = env.decode_action(a)
        step = env.current_step
        _, _, terminated, _, info = env.step(a)
        memory_action = action if info["accepted"] else MemoryAction("SKIP")
        if memory_action.step is not None:
            assert memory_action.step == step
        executed.append((memory_action, t))
        if terminated:
            break
    for memory_action, t in executed:
        assert replay.apply(memory_action, t)
    expected = score_episode(env.episode, replay, track=kwargs["track"]).as_row()
    assert info["metrics"] == expected
    assert {k: info[k] for k in expected} == expected
    assert replay.items() == env.store.items()
