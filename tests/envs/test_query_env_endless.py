"""The query tier's endless stream and budgets as a fraction of the queried state, as a user drives them."""

from __future__ import annotations

import hashlib
import itertools
import math
import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wpb_gym  # noqa: F401  (registers the ids)
from wpb_gym.envs.query_env import ENDLESS_METRICS, QueryTierEnv
from wpb_gym.episodes.generators.queries import generate_query_episode, query_config, query_stream
from wpb_gym.episodes.jsonl import dumps_episode
from wpb_gym.scoring.queries import queried_state_bytes

SMALL = {"endpoints": 30, "families": 4, "checkpoint_interval": 15, "queries_per_checkpoint": 25,
         "summary_max_bytes": 900, "max_params": 10}
FIXED = {**SMALL, "length": 30 + 12 * 15}


def endless_env(**kwargs) -> QueryTierEnv:
    return QueryTierEnv(regime="queries_easy", endless=True, **{**SMALL, **kwargs})


def _first_writer(env: QueryTierEnv) -> int:
    mask = env.action_masks()
    return 1 if mask[1] else 0


# ---------------------------------------------------------------------------- the generator
# sha256 of dumps_episode before the stream was made step by step (QueryStream): fixed-length
# episodes must stay byte for byte what they were. The options pin the knobs whose presets
# changed since (summaries up to 8 KB, traffic 3x integrations then).
GOLDEN = {
    ("queries_easy", 0, (("summary_max_bytes", 8000), ("traffic_scale", 3.0))): "9826241c09a02746ad1add4980977de616dbae2756426f5d319db91d1003e0b4",
    ("queries_easy", 0, (("checkpoint_interval", 10), ("endpoints", 16), ("families", 4), ("length", 123),
                         ("max_params", 12), ("queries_per_checkpoint", 20), ("summary_max_bytes", 600),
                         ("traffic_scale", 3.0))):
        "e969d39b79501af392fd5fc91454bbe1ebc61f1e4f44951a0ef6c0f909dce612",
    ("queries_easy", 0, (("breaking_prob", 0.9), ("checkpoint_interval", 10), ("endpoints", 16), ("families", 4),
                         ("length", 116), ("max_params", 12), ("queries_per_checkpoint", 20), ("revert_window", 8),
                         ("stable_revert_prob", 1.0), ("summary_max_bytes", 600), ("traffic_scale", 3.0),
                         ("volatile_revert_prob", 1.0))):
        "284867afba3be58a279d17f4bf8340d458b7cab62045e7b6d83965e947a36543",
}


@pytest.mark.parametrize("key", list(GOLDEN))
def test_fixed_length_episodes_are_byte_for_byte_what_they_were(key):
    regime, seed, overrides = key
    episode = generate_query_episode(query_config(regime, **dict(overrides)), seed, 1)
    assert hashlib.sha256(dumps_episode(episode).encode()).hexdigest() == GOLDEN[key]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**20), index=st.integers(0, 50), extra=st.integers(0, 14),
       revert_prob=st.sampled_from([0.05, 0.9]))
def test_the_endless_stream_begins_as_the_fixed_length_episode(seed, index, extra, revert_prob):
    config = query_config("queries_medium", **{**FIXED, "length": FIXED["length"] + extra,
                                               "volatile_revert_prob": revert_prob})
    observations, metadata = generate_query_episode(config, seed, index).columns()
    fixed = query_stream(config, seed, index, horizon=config.length)
    steps = list(fixed)
    assert [s.observation for s in steps] == observations and [s.metadata for s in steps] == metadata
    # The endless stream is the same process without an end: equal up to the first breaking change
    # whose revert falls past the fixed episode (dropped there, kept here), and up to its final checkpoint.
    agree = config.length - 1 if fixed.dropped_revert_at is None else fixed.dropped_revert_at + 1
    endless = list(itertools.islice(query_stream(config, seed, index), config.length))
    assert [s.observation for s in endless[:agree]] == observations[:agree]
    assert [s.metadata for s in endless[:agree]] == metadata[:agree]


def test_the_endless_stream_runs_on_with_checkpoints_on_schedule_and_keeps_no_log():
    config = query_config("queries_easy", **SMALL)
    stream = query_stream(config, 3, 0)
    first = config.endpoints + config.checkpoint_interval - 1
    for step in itertools.islice(stream, 5000):
        is_checkpoint = step.t >= first and (step.t - first) % config.checkpoint_interval == 0
        assert (step.asked is not None) == is_checkpoint == ("queries" in step.observation)
        assert not stream.process.jumps and not stream.process.bursts  # read as stamped, then dropped
    assert stream.t == 5000 and stream.checkpoints_done == (5000 - first - 1) // config.checkpoint_interval + 1


def test_endless_ramp_raises_the_jump_probability_per_checkpoint():
    config = query_config("queries_easy", **SMALL)
    plain, ramped = query_stream(config, 0, 0), query_stream(config, 0, 0, jump_ramp=0.01)
    for _ in itertools.islice(zip(plain, ramped), 30 + 15 * 20):
        pass
    k = ramped.checkpoints_done
    assert k == 20 and plain.process.current_jump_prob() == config.popularity_jump_prob
    assert ramped.process.current_jump_prob() == pytest.approx(min(1.0, config.popularity_jump_prob + 0.01 * k))
    with pytest.raises(ValueError, match="jump_ramp: expected a finite number >= 0"):
        query_stream(config, 0, 0, jump_ramp=-1.0)


# ---------------------------------------------------------------------------- the env
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(threshold=st.floats(0.05, 1.0), window=st.integers(1, 6), seed=st.integers(0, 1000),
       budget=st.sampled_from([0, 800, 3000]))
def test_an_endless_run_ends_at_the_first_full_window_below_the_threshold(threshold, window, seed, budget):
    env = endless_env(budget_bytes=budget, endless_threshold=threshold, endless_window=window)
    _, info = env.reset(seed=seed)
    accuracies: list[float] = []
    total = 0.0
    for _ in range(20000):
        _, reward, terminated, truncated, info = env.step(_first_writer(env))
        assert not truncated
        total += reward
        if info["checkpoints"] > len(accuracies):  # a checkpoint was answered on the way: it paid its accuracy
            accuracies.append(reward)
            assert info["rolling_accuracy"] == pytest.approx(np.mean(accuracies[-window:]))
        full_and_low = [k for k in range(window, len(accuracies) + 1)
                        if np.mean(accuracies[k - window:k]) < threshold]
        if terminated:
            assert full_and_low and full_and_low[0] == len(accuracies)  # the first time, not later
            break
        assert not full_and_low
    else:
        pytest.fail("an endless run stayed above the threshold for 20,000 steps")
    assert info["checkpoints_survived"] == info["checkpoints"] - 1 == len(accuracies) - 1
    assert total == pytest.approx(sum(accuracies))
    assert info["query_accuracy"] == pytest.approx(info["queries_answered"] / info["queries_asked"])
    assert info["query_accuracy"] == pytest.approx(np.mean(accuracies))  # every checkpoint asks as many
    assert set(info["metrics"]) == set(ENDLESS_METRICS)
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(0)


def test_an_endless_run_is_truncated_only_by_a_time_limit_the_user_asks_for():
    env = gym.make("wpb_gym:WritePolicyBench-QueriesEasy-v0", endless=True, endless_threshold=0.0,
                   max_episode_steps=700, **SMALL)
    env.reset(seed=0)
    for n in range(1, 701):
        _, _, terminated, truncated, info = env.step(0)
        assert not terminated and truncated == (n == 700)
    assert info["checkpoints"] > 0 and info["rolling_accuracy"] == 0.0 and info["t"] > 700


def test_a_long_endless_run_keeps_only_what_memory_holds():
    env = endless_env(budget_bytes=3000, endless_threshold=0.0)
    env.reset(seed=1)
    for k in range(6000):
        mask = env.action_masks()
        env.step(3 if mask[3] and k % 3 == 0 else 1 if mask[1] else 0)
        assert len(env.store.expired_items()) <= 60  # only those expired since the last checkpoint
    assert env.t > 3000 and not env.stream.process.jumps and not env.stream.process.bursts
    assert env.store.bytes_used <= 3000


def test_the_endless_env_passes_the_checker_pickles_vectorises_and_renders():
    check_env(endless_env(endless_threshold=0.0))
    env = endless_env(endless_threshold=0.0, render_mode="ansi")
    env.reset(seed=2)
    for _ in range(100):
        env.step(_first_writer(env))
    copy = pickle.loads(pickle.dumps(env))
    for _ in range(200):
        a = _first_writer(env)
        one, two = env.step(a), copy.step(a)
        assert np.array_equal(one[0], two[0]) and one[1] == two[1]
    assert "rolling accuracy" in env.render()
    vec = gym.make_vec("wpb_gym:WritePolicyBench-QueriesEasy-v0", num_envs=2, vectorization_mode="sync",
                       endless=True, **SMALL)
    obs, infos = vec.reset(seed=0)
    assert obs.shape == (2, env.observation_space.shape[0]) and list(infos["checkpoints"]) == [0, 0]
    vec.close()


# ---------------------------------------------------------------------------- budgets as a fraction
@pytest.mark.parametrize("track", ["unprivileged", "privileged"])
def test_budget_fraction_sets_each_episodes_budget_from_its_queried_state(track):
    env = QueryTierEnv(regime="queries_easy", budget_fraction=0.4, track=track, **FIXED)
    for seed in range(3):
        _, info = env.reset(seed=seed)
        expected = math.ceil(0.4 * queried_state_bytes(env.episode, track))
        assert info["budget_bytes"] == env.store.max_bytes == expected
    _, info = env.reset(options={"budget_bytes": 777})  # a reset may still name its budget
    assert info["budget_bytes"] == 777


def test_an_endless_streams_fraction_is_of_its_first_segment():
    env = endless_env(budget_fraction=0.25, length=FIXED["length"])
    _, info = env.reset(seed=4)
    first_segment = generate_query_episode(query_config("queries_easy", **FIXED), 0, env.episode_index)
    assert info["budget_bytes"] == math.ceil(0.25 * queried_state_bytes(first_segment))


def test_without_a_budget_it_is_10240_and_every_info_reports_it():
    env = QueryTierEnv(regime="queries_easy", **FIXED)
    _, info = env.reset(seed=0)
    _, _, _, _, info2 = env.step(0)
    assert info["budget_bytes"] == info2["budget_bytes"] == 10240


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"budget_bytes": 1000, "budget_fraction": 0.5},
     r"budget_bytes \(1000\) and budget_fraction \(0.5\): expected one of them, not both"),
    ({"budget_fraction": 0}, "budget_fraction must be a finite number > 0"),
    ({"budget_fraction": float("nan")}, "budget_fraction must be a finite number > 0"),
    ({"budget_fraction": "half"}, "budget_fraction must be a finite number > 0"),
    ({"endless_threshold": 0.5}, "endless_threshold: shape endless streams only; pass endless=True"),
    ({"endless_window": 3, "endless_ramp": 0.1}, "endless_window, endless_ramp: shape endless streams only"),
    ({"endless": "yes"}, "endless must be True or False, got 'yes'"),
    ({"endless": True, "endless_threshold": 1.5}, r"endless_threshold must be a query accuracy in \[0, 1\]"),
    ({"endless": True, "endless_window": 0}, "endless_window must be a positive int, got 0"),
    ({"endless": True, "endless_ramp": -0.1}, "endless_ramp must be a finite number >= 0"),
])
def test_bad_arguments_name_the_option_and_what_was_expected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        QueryTierEnv(regime="queries_easy", **{**SMALL, **kwargs})


def test_an_endless_stream_refuses_episode_files_and_given_episodes():
    episode = generate_query_episode(query_config("queries_easy", **FIXED), 0, 0)
    with pytest.raises(ValueError, match="endless=True generates its stream"):
        QueryTierEnv(regime="queries_easy", endless=True, episodes=[episode])
    env = endless_env()
    with pytest.raises(ValueError, match=r"options\['episode'\]: an endless stream is generated"):
        env.reset(options={"episode": episode})
    env.reset(seed=0)
    with pytest.raises(RuntimeError, match="an endless stream has no episode object"):
        env.episode  # noqa: B018
