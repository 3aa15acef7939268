"""``QueryTierEnv``: the query tier's dynamics over the core store, checked against its scorer."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import wpb_gym  # noqa: F401  (registers the ids)
from wpb_gym.core.types import MemoryAction
from wpb_gym.envs.query_env import MERGE, SKIP, WRITE, QueryTierEnv
from wpb_gym.envs.registration import QUERY_ENV_IDS
from wpb_gym.scoring.queries import score_queries

SMALL = {"endpoints": 30, "families": 4, "length": 30 + 12 * 15, "checkpoint_interval": 15,
         "queries_per_checkpoint": 25, "summary_max_bytes": 900, "max_params": 10}


def small_env(**kwargs) -> QueryTierEnv:
    return QueryTierEnv(regime="queries_easy", **{**SMALL, **kwargs})


def _play(env: QueryTierEnv, seed: int, rng: np.random.Generator) -> tuple[float, dict, list]:
    obs, info = env.reset(seed=seed)
    total, seen = 0.0, []
    while True:
        mask = env.action_masks()
        assert np.array_equal(mask, info["action_mask"])
        action = int(rng.choice(np.flatnonzero(mask)))
        seen.append(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        assert env.observation_space.contains(obs) and not truncated
        total += reward
        if terminated:
            return total, info, seen


@pytest.mark.parametrize("seed", range(3))
def test_rewards_sum_to_the_query_accuracy_the_scorer_gives_the_same_memory(seed):
    env = small_env(budget_bytes=2048)
    total, info, _ = _play(env, seed, np.random.default_rng(seed))
    score = score_queries(env.episode, env.store)
    assert total == pytest.approx(score.accuracy) == pytest.approx(info["query_accuracy"])
    assert info["metrics"]["query_accuracy"] == info["query_accuracy"]
    assert info["queries_asked"] == score.asked and info["queries_answered"] == score.correct


def test_the_mask_is_what_the_store_accepts_and_slots_show_the_endpoint_first():
    env = small_env(budget_bytes=1500, slots=4)
    env.reset(seed=1)
    rng = np.random.default_rng(1)
    for _ in range(300):
        mask = env.action_masks()
        step, store, t = env.current_step(), env.store, env.t
        assert mask[SKIP]
        assert mask[WRITE] == store.check(MemoryAction.write(step), t).accepted
        bases = [i for i in store.items() if i.kind == "WRITE" and i.api == step.observation["api"]]
        expected_merge = bool(bases) and store.check(MemoryAction.merge(step, max(i.t for i in bases)), t).accepted
        assert mask[MERGE] == expected_merge
        slots = env.slot_items()
        shown = [item for item in slots if item is not None]
        assert len(shown) == min(len(store), 4)
        same = [item.api == step.observation["api"] for item in shown]
        assert same == sorted(same, reverse=True)  # the endpoint's own items come first
        assert all(mask[3 + k] == (item is not None) for k, item in enumerate(slots))
        _, _, done, _, _ = env.step(int(rng.choice(np.flatnonzero(mask))))
        if done:
            break


def test_an_invalid_action_is_a_skip_with_its_penalty():
    env = small_env(budget_bytes=0, invalid_action_penalty=0.25)
    env.reset(seed=0)
    t = env.t
    _, reward, _, _, info = env.step(WRITE)  # nothing fits in 0 bytes
    assert not info["accepted"] and reward <= -0.25 + 1e-12 and env.t > t and len(env.store) == 0


def test_the_same_seed_replays_the_same_episode_and_observations():
    a = _play(small_env(), 5, np.random.default_rng(0))
    b = _play(small_env(), 5, np.random.default_rng(0))
    assert a[0] == b[0] and all(np.array_equal(x, y) for x, y in zip(a[2], b[2], strict=True))


def test_it_passes_gymnasiums_checker_pickles_and_vectorises():
    check_env(gym.make("wpb_gym:WritePolicyBench-QueriesEasy-v0", **SMALL).unwrapped)
    env = small_env()
    env.reset(seed=3)
    copy = pickle.loads(pickle.dumps(env))
    assert np.array_equal(copy.action_masks(), env.action_masks())
    vec = gym.make_vec("wpb_gym:WritePolicyBench-QueriesEasy-v0", num_envs=2, vectorization_mode="sync", **SMALL)
    obs, _ = vec.reset(seed=0)
    assert obs.shape == (2, env.observation_space.shape[0])
    vec.close()


def test_every_query_id_makes_its_tier_and_track():
    for env_id, kwargs in QUERY_ENV_IDS.items():
        env = gym.make(f"wpb_gym:{env_id}", **SMALL).unwrapped
        assert isinstance(env, QueryTierEnv) and env.track == kwargs["track"]
        assert env.sampler.regime == kwargs["regime"]


def test_episodes_without_queries_and_bad_arguments_are_refused():
    from wpb_gym.episodes.generators.paper import generate_episode, make_config

    env = small_env()
    with pytest.raises(ValueError, match="has no queries"):
        env.reset(options={"episode": generate_episode(make_config("default"), 0, 0)})
    with pytest.raises(ValueError, match="reset options"):
        env.reset(options={"regime": "queries_hard"})
    with pytest.raises(ValueError, match="slots"):
        small_env(slots=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'drift_prob'"):
        small_env(drift_prob=0.1)
