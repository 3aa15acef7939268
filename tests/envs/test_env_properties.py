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
* the final ``info["metrics"]`` is what the offline scorer computes on a replayed store;
* dense rewards add up exactly to the terminal reward and the terminal metric;
* reset options do what the docstring says;
* golden feature values on a hand-made episode, derived by hand from the docstring.
"""

from __future__ import annotations

import copy
import json
import math
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
    generate_episode,
    make_config,
    oracle_utility,
    score_episode,
    track_costs,
    write_jsonl,
)
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.observation.features import MEMORY_FEATURES, STEP_FEATURES
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
        expected = copy.deepcopy(obs)
        mask = env.action_masks()
        for array in arrays:
            array[...] = 1
        env.action_masks()[:] = False
        assert_same_obs(env._encoder.observation(), expected)
        np.testing.assert_array_equal(env.action_masks(), mask)
        internal = env._encoder._mask_arrays[env._encoder.mask]
        assert not any(np.shares_memory(array, internal) for array in [*arrays, info["action_mask"]])
        previous = arrays
        obs, _, terminated, _, info = env.step(pick(env, choice, mask))
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


# ---------------------------------------------------------------------------- 7. dense rewards
def terminal_metric(spec, metrics) -> float:
    weights = {spec: 1.0} if isinstance(spec, str) else spec
    oracle = metrics["oracle_utility"]
    values = {
        "f1": metrics["f1"],
        "utility": metrics["policy_utility"] / oracle if oracle > 0 else 1.0,
        "neg_regret": -metrics["regret_write_only"] / oracle if oracle > 0 else 0.0,
    }
    return math.fsum(w * values[name] for name, w in weights.items())


def potential(env: WritePolicyBenchEnv, spec) -> float:
    """The metric as if the episode ended now, scored against the steps already decided."""
    weights = {spec: 1.0} if isinstance(spec, str) else spec
    episode, t = env.episode, env.t
    retained = env.store.retained_timesteps()
    decided_critical = {c for c in episode.critical_steps if c < t}
    kept_utility = math.fsum(float(episode.utilities[s]) for s in retained)
    costs = track_costs(episode, env.track)
    oracle = oracle_utility(costs, episode.utilities, env.store.max_bytes)
    total = 0.0
    for name, w in weights.items():
        if name == "f1":
            denominator = len(retained) + len(decided_critical)
            tp = sum(1 for s in retained if s in decided_critical)
            value = 2 * tp / denominator if denominator else 0.0
        elif not oracle:
            value = 0.0
        elif name == "utility":
            value = kept_utility / oracle
        else:
            prefix = oracle_utility(costs[:t], episode.utilities[:t], env.store.max_bytes)
            value = -max(0.0, prefix - kept_utility) / oracle
        total += w * value
    return total


@pytest.mark.parametrize("spec", REWARDS, ids=str)
@settings(max_examples=25)
@given(kwargs=env_configs(), choice_list=choices, seed=st.integers(0, 1000))
def test_dense_rewards_add_up_to_the_terminal_reward(spec, kwargs, choice_list, seed):
    dense = make_env(kwargs, reward=spec, dense_reward=True)
    terminal = make_env(kwargs, reward=spec, dense_reward=False)
    dense.reset(seed=seed)
    terminal.reset(seed=seed)
    dense_rewards, terminal_rewards = [], []
    for choice in actions_until_done(choice_list):
        a = pick(dense, choice)
        _, r_dense, done, _, info = dense.step(a)
        _, r_terminal, done_terminal, _, info_terminal = terminal.step(a)
        assert done == done_terminal
        dense_rewards.append(r_dense)
        terminal_rewards.append(r_terminal)
        if done:
            break
        assert r_terminal == 0.0
        # The running sum is the potential of the memory so far (up to float rounding).
        assert sum(dense_rewards) == pytest.approx(potential(dense, spec), abs=1e-9)
    assert info["metrics"] == info_terminal["metrics"]
    total = 0.0
    for r in dense_rewards:
        total += r
    assert total == sum(dense_rewards) == terminal_rewards[-1]
    assert terminal_rewards[-1] == terminal_metric(spec, info["metrics"])


# ---------------------------------------------------------------------------- 8. reset options
def test_reset_same_seed_same_episode_and_observation():
    kwargs = {"length": 30, "budget_bytes": 1000, "slots": 3, "regime": "burst_redundancy", "doc_prob": 0.3}
    env_a, env_b = WritePolicyBenchEnv(**kwargs), WritePolicyBenchEnv(**kwargs)
    obs_a, _ = env_a.reset(seed=11)
    obs_b, _ = env_b.reset(seed=11)
    np.testing.assert_array_equal(obs_a, obs_b)
    assert env_a.episode.to_dict() == env_b.episode.to_dict()
    assert env_a.episode_index == env_b.episode_index
    for a in (1, 1, 0, 1):
        env_a.step(a)
    obs_c, _ = env_a.reset(seed=11)
    np.testing.assert_array_equal(obs_a, obs_c)
    assert env_a.episode.to_dict() == env_b.episode.to_dict()
    # Different seeds draw (almost surely) different episodes.
    indices = set()
    for s in range(5):
        env_a.reset(seed=s)
        indices.add(env_a.episode_index)
    assert len(indices) > 1


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("options", GENERATOR_OPTIONS, ids=str)
def test_reset_episode_index_matches_the_generator(regime, options):
    env = WritePolicyBenchEnv(regime=regime, length=40, episode_seed=3, **options)
    for i in (0, 7, 123):
        env.reset(options={"episode_index": i})
        expected = generate_episode(make_config(regime, length=40, **options), 3, i)
        assert env.episode.to_dict() == expected.to_dict()
        assert env.episode_index == i


def test_reset_budget_regime_and_length_options_apply_to_one_episode():
    env = WritePolicyBenchEnv(length=30, budget_bytes=1000, doc_prob=0.3)
    env.reset(seed=0, options={"budget_bytes": 777})
    assert env.store.max_bytes == 777
    done = False
    while not done:
        _, _, done, _, info = env.step(1)
    assert info["metrics"]["budget_bytes"] == 777
    env.reset()
    assert env.store.max_bytes == 1000

    env.reset(options={"regime": "redundancy", "episode_index": 2})
    assert env.episode.regime == "redundancy" == env.episode.labels["mode"]
    assert env.episode.to_dict() == generate_episode(make_config("redundancy", length=30, doc_prob=0.3), 0, 2).to_dict()
    env.reset()
    assert env.episode.regime == "default" and len(env.episode) == 30

    env.reset(options={"length": 12})
    assert len(env.episode) == 12
    env.reset()
    assert len(env.episode) == 30


@pytest.mark.parametrize("options", [{"seed": 1}, {"budget": 10}, {"episode_index": 0, "foo": 1}])
def test_reset_unknown_option_raises(options):
    env = WritePolicyBenchEnv(length=20)
    with pytest.raises(ValueError):
        env.reset(options=options)


@pytest.mark.parametrize("kind", ["list", "file"])
def test_cycle_order_visits_episodes_in_order_and_wraps(kind, tmp_path):
    episodes = [generate_episode(make_config("default", length=20 + i), 5, i) for i in range(3)]
    if kind == "list":
        source = episodes
    else:
        source = tmp_path / "episodes.jsonl"
        write_jsonl(source, episodes)
    env = WritePolicyBenchEnv(episodes=source, episode_order="cycle", slots=2)
    seen = []
    for _ in range(7):
        env.reset()
        seen.append(env.episode_index)
        assert env.episode.to_dict() == episodes[env.episode_index].to_dict()
    assert seen == [0, 1, 2, 0, 1, 2, 0]
    env.reset(seed=9)  # a seeded reset restarts the cycle
    assert env.episode_index == 0
    env.reset()
    assert env.episode_index == 1


def test_cycle_order_on_generated_episodes_counts_up():
    env = WritePolicyBenchEnv(length=20, episode_order="cycle", episode_seed=2)
    indices = []
    for _ in range(4):
        env.reset()
        indices.append(env.episode_index)
        assert env.episode.to_dict() == generate_episode(make_config(length=20), 2, env.episode_index).to_dict()
    assert indices == [0, 1, 2, 3]


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
    np.testing.assert_array_equal(obs, env._encoder.observation())
    return step, memory, slots


def check(features: dict, expected: dict) -> None:
    """Every named feature as expected; the unnamed ones are 0."""
    assert set(expected) <= set(features)
    full = {name: 0.0 for name in features} | expected
    assert features == pytest.approx(full, rel=1e-6, abs=1e-7)


def test_golden_features_on_a_hand_made_episode():
    B, K, T = 10_000, 2, 4
    env = WritePolicyBenchEnv(episodes=[golden_episode()], budget_bytes=B, slots=K, max_expires_per_step=2)
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
