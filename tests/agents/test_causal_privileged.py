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


def _decisions(agent_params, episode, budget=2048):
    run = run_episode(make_agent("causal_privileged", **agent_params), episode, budget, "privileged")
    return [(a.t, a.action.action, a.action.target_t, a.decision.accepted) for a in run.actions]


def _with_hidden(episode: Episode, change) -> Episode:
    labels = copy.deepcopy(episode.labels)
    change(labels["hidden"])
    return Episode(steps=episode.steps, labels=labels)


def _scale_integrations(hidden):
    hidden["integrations"] = [x * (1 + 7 * (k % 3)) for k, x in enumerate(hidden["integrations"])]


def _shuffle_levels(hidden):
    hidden["popularity_levels"] = [-x for x in hidden["popularity_levels"]]
    hidden["popularity_jumps"] = [[t, i, -level] for t, i, level in hidden["popularity_jumps"]]


def _redraw_bursts(hidden):
    hidden["migration_boosts"] = [[t, i, size * (0.01 if k % 2 else 30.0), start]
                                  for k, (t, i, size, start) in enumerate(hidden["migration_boosts"])]


@pytest.mark.parametrize(("factor", "change"), [("integrations", _scale_integrations), ("levels", _shuffle_levels),
                                                ("burst_draws", _redraw_bursts)])
def test_a_factor_it_does_not_know_does_not_move_its_decisions(factor, change):
    # Without the factor its decisions are blind to it; with it, they follow it (the test has teeth).
    episode = generate_query_episode(CONFIG, 5, 0)
    assert episode.labels["hidden"]["migration_boosts"]
    changed = _with_hidden(episode, change)
    rest = "+".join(f for f in ("levels", "integrations", "burst_draws") if f != factor)
    assert _decisions({"knows": rest}, episode) == _decisions({"knows": rest}, changed)
    assert _decisions({}, episode) != _decisions({}, changed)
    assert _decisions({"knows": "all"}, episode) == _decisions({}, episode)


@pytest.mark.parametrize("knows", ["none", "integrations", "levels+burst_draws"])
def test_without_some_factors_it_still_sees_no_future(knows):
    episode = generate_query_episode(CONFIG, 4, 0)
    changed = _perturbed_after(episode, 230, random.Random(1))
    early = [[d for d in _decisions({"knows": knows}, e, 4096) if d[0] <= 230] for e in (episode, changed)]
    assert early[0] == early[1]


@pytest.mark.parametrize("knows", ["", "levels+", "popularity", "levels+levels", "ALL", 3])
def test_a_bad_knows_is_refused_naming_the_factors(knows):
    with pytest.raises(ValueError, match="knows: expected 'all', 'none' or factors joined by"):
        make_agent("causal_privileged", knows=knows)


def test_guessing_bursts_without_the_families_boosts_is_refused():
    episode = _with_hidden(generate_query_episode(CONFIG, 5, 0), lambda hidden: hidden.pop("burst_families"))
    run_episode(make_agent("causal_privileged"), episode, 2048, "privileged")  # the full policy does not need them
    with pytest.raises(ValueError, match="needs labels.hidden.burst_families"):
        run_episode(make_agent("causal_privileged", knows="levels+integrations"), episode, 2048, "privileged")
