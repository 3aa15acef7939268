"""``causal_privileged`` knows the hidden state of the query tier, and nothing of the future."""

from __future__ import annotations

import copy
import random

import pytest

from agents.registry import make_agent
from wpb_gym.core.types import Episode, Step
from wpb_gym.episodes.generators.queries import generate_query_episode, query_config
from wpb_gym.evaluation.runner import run_episode
from wpb_gym.scoring.queries import score_queries

CONFIG = query_config("queries_medium", endpoints=60, families=8, length=60 + 20 * 25, checkpoint_interval=25,
                      queries_per_checkpoint=60, max_burst_delay=2)


def _perturbed_after(episode: Episode, t0: int, rng: random.Random) -> Episode:
    """The episode with everything stamped after ``t0`` changed: steps, queries and hidden entries."""
    other = generate_query_episode(CONFIG, 999, 0)
    observations, metadata = episode.columns()
    theirs, their_metadata = other.columns()
    steps = [Step(t, observations[t], metadata[t]) if t <= t0 else Step(t, theirs[t], their_metadata[t])
             for t in range(len(episode))]
    labels = copy.deepcopy(episode.labels)
    hidden = labels["hidden"]
    n = len(hidden["endpoints"])
    later = range(t0 + 1, len(episode))
    hidden["popularity_jumps"] = [e for e in hidden["popularity_jumps"] if e[0] <= t0] + sorted(
        [rng.choice(later), rng.randrange(n), rng.uniform(-3, 3)] for _ in range(50))
    hidden["migration_boosts"] = [e for e in hidden["migration_boosts"] if e[0] <= t0] + sorted(
        [t, rng.randrange(n), rng.uniform(1, 5000), t + rng.randrange(100)] for t in rng.sample(later, 40))
    labels["change_kinds"] = [e for e in labels["change_kinds"] if e[0] <= t0] + [
        [t, rng.choice(["deprecate", "add_param", "revert"])] for t in later]
    labels["queries"] = [q for q in labels["queries"] if q[0] <= t0] + [
        [q[0], rng.choice(hidden["endpoints"]), "version", None, rng.randrange(9)] for q in labels["queries"]
        if q[0] > t0]
    return Episode(steps=steps, labels=labels)


@pytest.mark.parametrize("t0", [80, 230, 400])
def test_its_decisions_up_to_a_step_do_not_change_when_everything_after_it_does(t0):
    episode = generate_query_episode(CONFIG, 4, 0)
    changed = _perturbed_after(episode, t0, random.Random(t0))
    logs = []
    for played in (episode, changed):
        run = run_episode(make_agent("causal_privileged"), played, 4096, "privileged")
        logs.append([(a.t, a.action.action, a.action.target_t, a.decision.accepted) for a in run.actions if a.t <= t0])
    assert logs[0] == logs[1]
    assert any(kind == "WRITE" for _, kind, _, _ in logs[0])  # it decided something up to t0


def test_it_is_an_oracle_track_agent_and_answers_more_than_the_keepers():
    agent = make_agent("causal_privileged")
    assert agent.track == "oracle"
    privileged, lfu = [], []
    for seed in range(4):
        episode = generate_query_episode(CONFIG, seed, 0)
        privileged.append(score_queries(episode, run_episode(agent, episode, 2048, "privileged").store).accuracy)
        lfu.append(score_queries(episode, run_episode(make_agent("keep_latest_lfu"), episode, 2048).store).accuracy)
    assert sum(privileged) > sum(lfu) + 0.4  # by 0.1 a episode on average
    with pytest.raises(ValueError, match="cannot run on the unprivileged track"):
        run_episode(make_agent("causal_privileged"), episode, 4096, "unprivileged")


def test_on_an_episode_without_hidden_state_it_writes_nothing():
    from wpb_gym.episodes.generators.paper import generate_episode, make_config

    episode = generate_episode(make_config("breaking"), 0, 0)
    run = run_episode(make_agent("causal_privileged"), episode, 10240, "privileged")
    assert len(run.store) == 0


def test_a_horizon_below_one_checkpoint_is_refused():
    with pytest.raises(ValueError, match="horizon must be at least 1"):
        make_agent("causal_privileged", horizon=0)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda h: h.pop("process"), "labels.hidden.process: expected the process's knobs"),
        (lambda h: h.update(popularity_levels=h["popularity_levels"][:3]),
         r"labels.hidden.popularity_levels: expected one entry per endpoint \(20\), got 3"),
        (lambda h: h["process"].pop("migration_half_life"), "labels.hidden.process: missing migration_half_life"),
        (lambda h: h.update(endpoint_families=[99] * 20), "labels.hidden.endpoint_families: expected family indices"),
        (lambda h: h.update(popularity_jumps=[[150, 99, 0.5]]), r"labels.hidden.popularity_jumps\[0\]: expected"),
        (lambda h: h.update(migration_boosts=[[150, 1, 2.0]]), r"labels.hidden.migration_boosts\[0\]: expected"),
        (lambda h: [f.__setitem__(1, 0.0) for f in h["families"]], "some family with a positive change weight"),
    ],
)
def test_a_damaged_hidden_state_is_named(damage, message):
    episode = generate_query_episode(query_config("queries_easy", endpoints=20, families=4, length=200,
                                                  checkpoint_interval=10), 0, 0)
    labels = copy.deepcopy(episode.labels)
    damage(labels["hidden"])
    with pytest.raises(ValueError, match=message):
        run_episode(make_agent("causal_privileged"), Episode(steps=episode.steps, labels=labels), 2000, "privileged")
