"""The env's fast observation encoder against the literal reference (``envs.observation.reference``).

Over hypothesis-generated reachable states of every generated regime (with documents, migration
guides or more drift mixed in) and of hand-made MERGE-heavy and mixed-content episodes (removed
and restored endpoints, reverts, free text), each on both tracks, with both slot orders, capped
and uncapped EXPIREs and random actions that include invalid ones, the env's observation, slot
layout, mask, reward and info must equal what the reference computes from the docstring's
definitions and the store's public state.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_env_properties import _labels, actions_until_done, choices, merge_episode, pick

from wpb_gym import REGIMES, Episode, MemoryAction, Step
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.observation.reference import ReferenceEncoder, potential, terminal_value

REWARDS = ("f1", "utility", "neg_regret", {"f1": 0.5, "utility": 0.5})


def mixed_episode(seed: int, T: int) -> Episode:
    """Every kind of content in few families, so that items of the current step's family are
    often in memory: documentation sections and migration guides that recur, endpoints that
    are removed and restored, revert to earlier contracts, change version type or lose their
    parameter list, and free text."""
    rng = random.Random(seed)
    contracts = [(["a"], ["a"], False), (["a", "b"], ["a"], False), (["a", "b"], [], True), (["b"], None, False)]
    steps = []
    for t in range(T):
        r = rng.random()
        if r < 0.25:
            obs = {
                "section": rng.choice(("intro", "errors")),
                "content": "z" * rng.randint(5, 60),
                "last_updated": rng.choice((f"2024-0{rng.randint(1, 9)}", rng.randint(1, 3))),
            }
        elif r < 0.4:
            obs = {
                "old_api": rng.choice(("GET /v1/a", "GET /v2/a")),
                "new_api": "GET /v3/a",
                "content": "y" * rng.randint(5, 40),
            }
        elif r < 0.45:
            obs = rng.choice(("free text", ["a", "list"], 7))
        else:
            params, required, deprecated = rng.choice(contracts)
            obs = {"api": rng.choice(("GET /v1/a", "GET /v2/a", "GET /b")), "version": rng.choice((1, 2, 3, "2"))}
            if rng.random() < 0.9:
                obs["params"] = params
            if required is not None:
                obs["required"] = required
            obs["deprecated"] = deprecated
            if rng.random() < 0.2:
                obs["removed"] = True
        metadata = {"mode": "m", "priority": rng.choice((0.0, 0.5, 1.0, 2.0, "high", float("nan")))}
        steps.append(Step(t, obs, metadata))
    return Episode(steps=steps, labels=_labels(rng, T))


SOURCES = (*sorted(REGIMES), "merge_episode", "mixed_episode")
GENERATOR_OPTIONS = ({}, {"doc_prob": 0.3}, {"migration_guides": True}, {"drift_prob": 0.4})


@st.composite
def configs(draw, source: str, track: str) -> dict:
    kwargs = {
        "track": track,
        "slots": draw(st.integers(1, 6)),
        "slot_order": draw(st.sampled_from(("relevance", "oldest"))),
        "max_expires_per_step": draw(st.sampled_from((None, 0, 1, 2))),
        "budget_bytes": draw(st.integers(0, 4000)),
        "observation_mode": draw(st.sampled_from(("box", "dict"))),
        "reward": draw(st.sampled_from(REWARDS)),
        "dense_reward": draw(st.booleans()),
        "invalid_action_penalty": draw(st.sampled_from((0.0, 0.25))),
        "expire_cost": draw(st.sampled_from((0.0, 0.03))),
    }
    if source in ("merge_episode", "mixed_episode"):
        make = merge_episode if source == "merge_episode" else mixed_episode
        kwargs["episodes"] = [make(draw(st.integers(0, 10_000)), draw(st.integers(10, 40)))]
    else:
        kwargs["regime"] = source
        kwargs["length"] = draw(st.integers(10, 50))
        kwargs["api_pool"] = draw(st.integers(1, 9))  # below the length: the contract regimes' warm-up shows them all
        kwargs["episode_seed"] = draw(st.integers(0, 5))
        kwargs.update(draw(st.sampled_from(GENERATOR_OPTIONS)))
    return kwargs


def flat(observation) -> np.ndarray:
    if isinstance(observation, dict):
        return np.concatenate([observation["step"], observation["memory"], observation["slots"]])
    return observation


def expected_reason(view, env: WritePolicyBenchEnv, a: int, expires: int) -> str:
    if view.mask[a]:
        return "accepted"
    K = env.K
    k = (a - 2) % K
    if a >= 2 and k >= len(view.slots):
        return "empty_slot"
    if a >= 2 + K and env.max_expires_per_step is not None and expires >= env.max_expires_per_step:
        return "expire_cap"
    step = env.current_step
    if a == 1:
        action = MemoryAction("WRITE", step=step)
    elif a < 2 + K:
        action = MemoryAction("MERGE", step=step, target_t=view.slots[k])
    else:
        action = MemoryAction("EXPIRE", target_t=view.slots[k])
    return env.store.check(action, env.t).reason.value


@pytest.mark.parametrize("track", ["unprivileged", "privileged"])
@pytest.mark.parametrize("source", SOURCES)
@settings(max_examples=15)
@given(data=st.data(), choice_list=choices, seed=st.integers(0, 1000))
def test_the_fast_encoder_equals_the_literal_reference(source, track, data, choice_list, seed):
    kwargs = data.draw(configs(source, track))
    env = WritePolicyBenchEnv(**kwargs)
    observation, info = env.reset(seed=seed)
    reference = ReferenceEncoder(
        env.episode, env.track, slots=env.K, slot_order=env.slot_order, max_expires_per_step=env.max_expires_per_step
    )
    weights = {kwargs["reward"]: 1.0} if isinstance(kwargs["reward"], str) else kwargs["reward"]
    expires, reverted_expired, paid, penalties = 0, False, 0.0, 0.0
    for choice in actions_until_done(choice_list):
        view = reference.observe(env.store, env.t, expires_this_step=expires, reverted_expired=reverted_expired)
        assert list(env.slot_timesteps[: len(view.slots)]) == view.slots
        assert env.slot_timesteps[len(view.slots) :] == (None,) * (env.K - len(view.slots))
        np.testing.assert_allclose(flat(observation), view.vector(reference.layout), rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(env.action_masks(), view.mask)
        np.testing.assert_array_equal(info["action_mask"], view.mask)
        assert info["t"] == env.t and info["bytes_used"] == env.store.bytes_used

        a = pick(env, choice)
        reason = expected_reason(view, env, a, expires)
        is_expire = a >= 2 + env.K and view.mask[a]
        flagged = is_expire and view.slot_rows[a - 2 - env.K]["reverted"] == 1.0
        decided = env.t
        before = potential(env.episode, env.store, decided, weights, env.track)
        observation, reward, terminated, truncated, info = env.step(a)
        assert (info["accepted"], info["reason"]) == (bool(view.mask[a]), reason)
        assert not truncated
        penalty = kwargs["expire_cost"] if is_expire else 0.0 if view.mask[a] else kwargs["invalid_action_penalty"]
        penalties += penalty
        if terminated:
            assert reward == pytest.approx(terminal_value(weights, info["metrics"]) - penalties - paid, abs=1e-9)
            break
        gained = potential(env.episode, env.store, env.t, weights, env.track) - before if kwargs["dense_reward"] else 0
        assert reward == pytest.approx(gained - penalty, abs=1e-9)
        paid += reward
        if is_expire:
            expires += 1
            reverted_expired = reverted_expired or flagged
        elif env.t != decided:
            expires, reverted_expired = 0, False
