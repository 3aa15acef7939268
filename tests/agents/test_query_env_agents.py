"""Scripted agents in the query tier's env (``QueryEnvDriver``): as the offline evaluator scores them,
and in an endless stream."""

from __future__ import annotations

import pytest

from agents.env_adapter import run_agent_in_env
from agents.registry import make_agent
from wpb_gym.envs.query_env import QueryTierEnv
from wpb_gym.evaluation.runner import run_episode

SMALL = {"endpoints": 30, "families": 4, "checkpoint_interval": 15, "queries_per_checkpoint": 25,
         "summary_max_bytes": 900, "max_params": 10}
FIXED = {**SMALL, "length": 30 + 12 * 15}


def endless_env(**kwargs) -> QueryTierEnv:
    return QueryTierEnv(regime="queries_easy", endless=True, **{**SMALL, **kwargs})


def test_a_keeper_plays_an_endless_stream_and_an_oracle_is_refused():
    env = endless_env(budget_bytes=3000, endless_threshold=0.6, endless_window=3)
    played = run_agent_in_env(make_agent("keep_latest_family"), env, seed=0)
    assert played.info["checkpoints"] >= 3 and played.metrics["rolling_accuracy"] < 0.6
    assert sum(played.rewards) == pytest.approx(played.metrics["query_accuracy"] * played.info["checkpoints"])
    with pytest.raises(ValueError, match="endless stream has no whole episode"):
        run_agent_in_env(make_agent("causal_privileged"), endless_env(track="privileged"), seed=0)


def test_scripted_agents_in_the_env_score_what_the_offline_evaluator_scores():
    for name, track in (("keep_latest_family", "unprivileged"), ("causal_privileged", "privileged")):
        env = QueryTierEnv(regime="queries_easy", budget_bytes=2048, track=track, **FIXED)
        for i in range(2):
            played = run_agent_in_env(make_agent(name), env, seed=i, options={"episode_index": i})
            offline = run_episode(make_agent(name), env.episode, 2048, track=track)
            assert played.metrics["query_accuracy"] == offline.queries.accuracy
            assert sum(played.rewards) == pytest.approx(offline.queries.accuracy)


