"""The query tier through evaluation: each run's query accuracy, the hindsight bound beside it in
results.csv, and what the run's tables make of them.

Every figure here is recomputed from the scoring layer (``score_queries``, ``query_bound``)
or from the rows themselves, never typed in.
"""

from __future__ import annotations

from functools import partial

import pytest

from agents.registry import agent_entry, make_agent
from wpb_gym.core.types import Episode
from wpb_gym.episodes.generators.regimes import generate_episode, make_config
from wpb_gym.evaluation.grid import PolicySpec, given_refs, run_grid
from wpb_gym.evaluation.runner import run_episode
from wpb_gym.scoring.queries import score_queries

SMALL = {"endpoints": 20, "families": 4, "length": 20 + 8 * 10, "checkpoint_interval": 10,
         "queries_per_checkpoint": 30, "summary_max_bytes": 800}
BUDGETS = (2048, 4096)
TRACKS = ("unprivileged", "privileged")
AGENTS = ("keep_latest_lfu", "keep_latest_family", "last_kb", "causal_privileged")


def query_episode(regime: str = "queries_medium", index: int = 0, seed: int = 0) -> Episode:
    return generate_episode(make_config(regime, **SMALL), seed, index)


def spec(name: str) -> PolicySpec:
    return PolicySpec(name, partial(make_agent, name), agent_entry(name).track)


@pytest.fixture(scope="module")
def episodes() -> list[Episode]:
    """Three episodes of each of two tiers, and two of a paper regime (no queries)."""
    queried = [query_episode(regime, i) for regime in ("queries_easy", "queries_medium") for i in range(3)]
    paper = [generate_episode(make_config("default", length=60), 0, i) for i in range(2)]
    return queried + paper


@pytest.fixture(scope="module")
def rows(episodes) -> list[dict]:
    return run_grid(given_refs(episodes), [spec(n) for n in AGENTS], BUDGETS, TRACKS)


def queried_rows(rows):
    return [r for r in rows if r["mode"].startswith("queries_")]


# ---------------------------------------------------------------------------- scoring a run
class Recorder:
    """keep_latest_lfu, remembering what its end_episode was told."""

    def __init__(self) -> None:
        self.inner = make_agent("keep_latest_lfu")
        self.name, self.track = "recorder", "unprivileged"
        self.outcomes: list = []

    def start_episode(self, context) -> None:
        self.inner.start_episode(context)

    def select(self, step, store):
        return self.inner.select(step, store)

    def end_episode(self, outcome) -> None:
        self.outcomes.append(outcome)


def test_a_run_of_a_query_episode_carries_its_query_score_and_tells_the_policy():
    episode = query_episode()
    policy = Recorder()
    run = run_episode(policy, episode, 4096)
    assert run.queries == score_queries(episode, run.store)
    assert run.queries.asked == len(episode.labels["queries"]) and 0 < run.queries.correct < run.queries.asked
    (outcome,) = policy.outcomes
    assert outcome.metrics == {**run.metrics.as_row(), "query_accuracy": run.queries.accuracy}


def test_a_run_of_an_episode_without_queries_has_none():
    episode = generate_episode(make_config("default", length=60), 0, 0)
    policy = Recorder()
    run = run_episode(policy, episode, 4096)
    assert run.queries is None
    assert policy.outcomes[0].metrics == run.metrics.as_row()


def test_an_isolated_run_scores_the_queries_as_in_process():
    episode = query_episode(index=1)
    here = run_episode(make_agent("keep_latest_lfu"), episode, 2048)
    there = run_episode(make_agent("keep_latest_lfu"), episode, 2048, isolate=True)
    assert here.queries == there.queries and here.queries.correct > 0
