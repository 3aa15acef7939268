"""``QueryTierEnv``: the query tier's dynamics over the core store, checked against its scorer."""

from __future__ import annotations

import pickle
import zlib

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import wpb_gym  # noqa: F401  (registers the ids)
from wpb_gym.core.contracts import contract_of, is_breaking
from wpb_gym.core.tracks import policy_episode
from wpb_gym.core.types import MemoryAction
from wpb_gym.envs.query_env import CANDIDATE_FEATURES, MERGE, SKIP, SLOT_FEATURES, WRITE, QueryTierEnv
from wpb_gym.episodes.generators.query_process import touched
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


def _literal_mask(env: QueryTierEnv) -> np.ndarray:
    """What the store accepts now, asked afresh through the public API."""
    step, store, t = env.current_step(), env.store, env.t
    mask = np.zeros(env.action_space.n, dtype=bool)
    mask[SKIP] = True
    mask[WRITE] = store.check(MemoryAction.write(step), t).accepted
    merge = env.decode_action(MERGE)
    mask[MERGE] = merge.action == "MERGE" and store.check(merge, t).accepted
    for k, item in enumerate(env.slot_items()):
        mask[3 + k] = item is not None and item.t < t
    return mask


@pytest.mark.parametrize("seed", range(3))
def test_the_mask_follows_every_change_of_state_however_it_is_asked(seed):
    # The env answers the mask once per state: after an accepted, a rejected or an EXPIRE
    # action, an item exposed in a slot, a reset, and a caller that wrote into a mask it got.
    env = small_env(budget_bytes=6000, slots=2)  # more items held than slots show
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    exposed = 0
    for n in range(400):
        mask = env.action_masks()
        assert np.array_equal(mask, _literal_mask(env)) and np.array_equal(info["action_mask"], mask)
        mask[:] = False  # the caller's copy: the env's answer does not move
        assert np.array_equal(env.action_masks(), _literal_mask(env))
        held = env.store.items()
        if held and rng.random() < 0.4:
            shown = {item.t for item in env.slot_items() if item is not None}
            item = held[int(rng.integers(len(held)))]
            env.expose_item(item.t)
            exposed += item.t not in shown
            assert np.array_equal(env.action_masks(), _literal_mask(env))
            info["action_mask"] = env.action_masks()
        choice = rng.random()
        action = int(rng.integers(env.action_space.n)) if choice < 0.3 else int(rng.choice(np.flatnonzero(
            env.action_masks())))
        _, _, done, _, info = env.step(action)
        if done or n == 200:
            _, info = env.reset(seed=seed + n)
    assert exposed >= 5


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


def _literal_bag(words: list[str], buckets: int) -> np.ndarray:
    counts = np.zeros(buckets)
    for word in words:
        counts[zlib.crc32(word.encode("utf-8")) % buckets] += 1
    return np.minimum(counts / np.sqrt(len(words)), 1.0) if words else counts


def _literal_words(steps, api: str, buckets: int) -> np.ndarray:
    """The word features of ``api`` from the steps shown so far, read afresh."""
    shows = [s.observation for s in steps if isinstance(s.observation, dict) and s.observation.get("api") == api]
    first = [w for name in shows[0].get("params") or () for w in str(name).lower().split("_") if w] if shows else []
    touched_last: list[str] = []
    for before, after in zip(shows, shows[1:]):
        old, new = contract_of(before), contract_of(after)
        if old is not None and new is not None and is_breaking(old, new):
            change = touched(before, after)
            names = ([change[1]] if change is not None and change[0] in ("has_param", "required")
                     and change[1] is not None else after.get("params") or ())
            touched_last = [w for name in names for w in str(name).lower().split("_") if w]
    return np.concatenate([_literal_bag(first, buckets), _literal_bag(touched_last, buckets)])


def test_word_features_are_the_hashed_bags_of_the_words_shown_and_leave_the_rest_as_it_was():
    buckets, K = 16, 4
    plain, worded = small_env(slots=K, budget_bytes=3000), small_env(slots=K, budget_bytes=3000, word_buckets=buckets)
    G, C, S, W = 6, len(CANDIDATE_FEATURES), len(SLOT_FEATURES), 2 * buckets
    assert worded.observation_space.shape == (G + C + W + K * (S + W),)
    a, _ = plain.reset(seed=4)
    b, _ = worded.reset(seed=4)
    steps = policy_episode(worded.episode, worded.track).steps
    rng = np.random.default_rng(4)
    checked = 0
    while True:
        rows = [b[G:G + C + W]] + [b[G + C + W + k * (S + W): G + C + W + (k + 1) * (S + W)] for k in range(K)]
        assert np.array_equal(a, np.concatenate([b[:G]] + [row[:-W] for row in rows]))
        shown = steps[: worded.t + 1]
        apis = [worded.current_step().observation["api"]] + [i.api if i is not None else None
                                                               for i in worded.slot_items()]
        for row, api in zip(rows, apis, strict=True):
            expected = np.zeros(W) if api is None else _literal_words(shown, api, buckets)
            assert np.allclose(row[-W:], expected, atol=1e-6), (worded.t, api)
            checked += api is not None and expected.any()
        action = int(rng.choice(np.flatnonzero(worded.action_masks())))
        a, _, done, _, _ = plain.step(action)
        b, _, done_b, _, _ = worded.step(action)
        assert done == done_b
        if done:
            break
    assert checked > 100  # rows with words, not only empty ones


def test_word_buckets_must_be_a_non_negative_int():
    for bad in (-1, 1.5, True, "8"):
        with pytest.raises(ValueError, match="word_buckets"):
            small_env(word_buckets=bad)


def test_word_buckets_are_crc32_of_the_word_the_same_everywhere():
    from wpb_gym.envs.observation.query_words import word_bucket
    from wpb_gym.episodes.generators.query_process import PARAM_WORDS

    assert word_bucket("card", 2**32) == 0x161498D3  # zlib.crc32(b"card"): fixed, not Python's salted hash
    # What docs/query-tier.md says of the generated tiers' 50 words.
    assert len({word_bucket(w, 256) for w in PARAM_WORDS}) == 41
    assert len({word_bucket(w, 64) for w in PARAM_WORDS}) == 32


def test_answers_false_plays_the_stream_a_policy_sees_with_the_same_observations_and_no_rewards():
    from wpb_gym.core.types import Episode

    env = small_env(budget_bytes=2048, word_buckets=8)
    env.reset(seed=6)
    stream = Episode(steps=list(policy_episode(env.episode, env.track).steps), labels={})
    blind = QueryTierEnv(regime="queries_easy", budget_bytes=2048, word_buckets=8, answers=False, episodes=[stream])
    a, _ = env.reset(seed=6)
    b, _ = blind.reset(seed=0)
    rng, total = np.random.default_rng(6), 0.0
    while True:
        assert np.array_equal(a, b) and np.array_equal(env.action_masks(), blind.action_masks())
        action = int(rng.choice(np.flatnonzero(env.action_masks())))
        assert blind.decode_action(action) == env.decode_action(action)
        a, r, done, _, info = env.step(action)
        b, r_blind, done_blind, _, blind_info = blind.step(action)
        total += r
        assert r_blind == 0.0 and done == done_blind
        if done:
            break
    assert info["queries_asked"] > 0 and total == pytest.approx(info["query_accuracy"])
    assert blind_info["metrics"] == {} and "query_accuracy" not in blind_info and blind_info["queries_asked"] == 0
    with pytest.raises(ValueError, match="has no queries"):  # a stream without checkpoints
        QueryTierEnv(regime="queries_easy", answers=False, episodes=[Episode(steps=stream.steps[:5], labels={})]).reset()
    with pytest.raises(ValueError, match="answers must be True or False"):
        small_env(answers="no")
    with pytest.raises(ValueError, match="answers=False: budget_fraction"):
        small_env(answers=False, budget_fraction=0.5)
