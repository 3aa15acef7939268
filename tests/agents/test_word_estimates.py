"""``value_keeper``'s word estimates: ridge regressions of the hidden integrations and bursts on
the words of parameter names, fitted on training episodes and read from the stream alone."""

from __future__ import annotations

import numpy as np
import pytest

from agents.learners.word_estimates import WordEstimates, examples, fit_word_estimates, hidden_draws
from wpb_gym.core.contracts import contract_of, is_breaking
from wpb_gym.envs.observation.query_words import ContentTracker, touched_words, words_of
from wpb_gym.episodes.generators.queries import generate_query_episode, query_config
from wpb_gym.episodes.generators.query_process import BURST_WORD_WEIGHTS, WORD_WEIGHTS

SMALL = {"endpoints": 200, "families": 8, "length": 200 + 30 * 20, "checkpoint_interval": 20,
         "queries_per_checkpoint": 40, "summary_max_bytes": 900, "max_params": 10, "migrating_share": 1.0}


def test_the_fit_recovers_the_generators_word_weights_from_training_episodes_only():
    config = query_config("queries_medium", integration_content=0.95, burst_content=0.95, **SMALL)
    estimates = fit_word_estimates(generate_query_episode(config, 0, i) for i in range(3))
    words = list(estimates.vocabulary)
    assert len(words) > 40
    # rho of each factor's standard normal follows the words: the weights come back up to that scale.
    assert np.corrcoef(estimates.integration_weights, [WORD_WEIGHTS[w] for w in words])[0, 1] > 0.95
    assert np.corrcoef(estimates.burst_weights, [BURST_WORD_WEIGHTS[w] for w in words])[0, 1] > 0.8
    # And they predict the factors of an episode of another seed, from its stream.
    held_out = generate_query_episode(config, 1, 0)
    integrations, bursts = examples(held_out)
    predicted = [estimates.integrations(w) for w in integrations.words]
    assert np.corrcoef(predicted, integrations.targets)[0, 1] > 0.85
    predicted = [estimates.burst(w) for w in bursts.words]
    assert np.corrcoef(predicted, bursts.targets)[0, 1] > 0.7


def test_without_content_in_the_generator_the_estimates_say_next_to_nothing():
    config = query_config("queries_medium", **SMALL, integration_content=0.0, burst_content=0.0)
    estimates = fit_word_estimates(generate_query_episode(config, 0, i) for i in range(2))
    integrations, _ = examples(generate_query_episode(config, 1, 0))
    predicted = [estimates.integrations(w) for w in integrations.words]
    assert abs(np.corrcoef(predicted, integrations.targets)[0, 1]) < 0.2


def test_the_content_tracker_reads_the_first_contract_and_what_each_breaking_change_touched():
    tracker = ContentTracker()
    a0 = {"api": "api.x.e1", "params": ["card_token", "email_limit"], "required": [], "deprecated": False,
          "removed": False, "version": 1}
    tracker.step(a0)
    assert tracker.first["api.x.e1"] == ["card", "token", "email", "limit"] and "api.x.e1" not in tracker.last_break
    added = {**a0, "params": ["card_token", "email_limit", "tax_code"], "version": 2}  # cosmetic
    tracker.step(added)
    assert "api.x.e1" not in tracker.last_break
    removed = {**added, "params": ["card_token", "tax_code"], "version": 3}  # breaking: email_limit removed
    tracker.step(removed)
    assert tracker.last_break["api.x.e1"] == ["email", "limit"]
    deprecated = {**removed, "deprecated": True, "version": 4}
    tracker.step(deprecated)
    assert tracker.last_break["api.x.e1"] == ["card", "token", "tax", "code"]
    assert tracker.first["api.x.e1"] == ["card", "token", "email", "limit"]  # the first contract's, still
    tracker.step({"checkpoint": 0, "queries": [["api.x.e1", "version", None]]})  # not a snapshot
    assert touched_words(None, a0) == words_of(a0["params"])


def test_word_estimates_round_trip_and_bad_states_are_named():
    estimates = WordEstimates(("card", "token"), np.array([0.5, -1.0]), 0.1, np.array([2.0, 0.0]), -0.2)
    again = WordEstimates.from_state(estimates.state())
    assert again.integrations(["card", "token"]) == pytest.approx(0.1 + (0.5 - 1.0) / np.sqrt(2))
    assert again.burst(["token", "unknown"]) == pytest.approx(-0.2)
    assert again.burst([]) == -0.2
    state = estimates.state()
    for change, message in (({"burst_weights": [1.0]}, "burst_weights: expected 2 finite numbers"),
                            ({"vocabulary": ["card", "card"]}, "listed twice"),
                            ({"integration_bias": "x"}, "weights must be numbers"),
                            ({"integration_bias": "1.0"}, "weights must be numbers"),
                            ({"burst_weights": [True, 0.0]}, "weights must be numbers"),
                            ({"integration_weights": [float("nan"), 1.0]}, "integration_weights: expected 2 finite")):
        with pytest.raises(ValueError, match=message):
            WordEstimates.from_state({**state, **change})
    with pytest.raises(ValueError, match="expected an object with"):
        WordEstimates.from_state({"vocabulary": []})


def test_the_draws_behind_the_words_a_policy_reads_follow_a_literal_replay_of_the_stream():
    config = query_config("queries_medium", **SMALL, integration_content=0.9, burst_content=0.9)
    episode = generate_query_episode(config, 2, 0)
    draws = hidden_draws(episode)
    hidden = episode.labels["hidden"]
    index = {api: i for i, api in enumerate(hidden["endpoints"])}
    spread = hidden["process"]["integration_spread"]
    for api, z in draws.integrations.items():
        assert np.exp(z * spread - spread * spread / 2) == pytest.approx(hidden["integrations"][index[api]])
    sizes = {t: (i, size) for t, i, size, _ in hidden["migration_boosts"]}
    spread = hidden["process"]["burst_spread"]
    shown: dict[str, dict] = {}
    bursts = 0
    for step in episode.steps:
        obs = step.observation
        if not isinstance(obs, dict) or "api" not in obs:
            continue
        api = obs["api"]
        if api not in shown:
            assert draws.first_words[api] == words_of(obs["params"])
        else:
            assert draws.touched_at[step.t] == touched_words(shown[api], obs)
        breaking = api in shown and is_breaking(contract_of(shown[api]), contract_of(obs))
        shown[api] = obs
        if breaking and step.t in sizes and sizes[step.t][1] > 0:
            i, size = sizes[step.t]
            assert hidden["endpoints"][i] == api
            boost = hidden["burst_families"][hidden["endpoint_families"][i]][1]
            assert draws.bursts[step.t] == (api, pytest.approx((np.log(size / boost) + spread * spread / 2) / spread))
            bursts += 1
        else:
            assert step.t not in draws.bursts
    assert bursts == len(draws.bursts) > 30 and set(draws.integrations) == set(shown)
