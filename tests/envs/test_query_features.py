"""The query tier's stream statistics, against a literal count over the stream."""

from __future__ import annotations

import numpy as np
import pytest

from wpb_gym.core.contracts import contract_of, endpoint_family, is_breaking
from wpb_gym.envs.observation.query_features import ENDPOINT_FEATURES, QueryStreamTracker
from wpb_gym.episodes.generators.queries import generate_query_episode, query_config

SMALL = {"endpoints": 24, "families": 3, "length": 24 + 10 * 12, "checkpoint_interval": 12,
         "queries_per_checkpoint": 40, "summary_max_bytes": 700, "max_params": 8}
INDEX = {name: k for k, name in enumerate(ENDPOINT_FEATURES)}


def _stream():
    episode = generate_query_episode(query_config("queries_easy", **SMALL), 4, 0)
    return episode.columns()


def test_query_shares_and_breaks_are_the_streams():
    observations, metadata = _stream()
    tracker = QueryStreamTracker()
    last_share: dict[str, float] = {}
    slow: dict[str, float] = {}
    previous: dict[str, tuple] = {}
    broke: dict[str, bool] = {}
    for obs, meta in zip(observations, metadata, strict=True):
        tracker.step(obs, meta)
        if "queries" in obs:
            asked = [q[0] for q in obs["queries"]]
            last_share = {api: asked.count(api) / len(asked) for api in set(asked)}
            for api in set(slow) | set(asked):  # the slow average, literally
                slow[api] = 0.95 * slow.get(api, 0.0) + 0.05 * asked.count(api) / len(asked)
        else:
            contract = contract_of(obs)
            broke[obs["api"]] = obs["api"] in previous and is_breaking(previous[obs["api"]], contract)
            previous[obs["api"]] = contract
    for api in previous:
        row = tracker.features(api)
        assert row[INDEX["asked_last"]] == pytest.approx(min(1.0, 10 * last_share.get(api, 0.0)), abs=1e-6)
        assert row[INDEX["asked_slow"]] == pytest.approx(min(1.0, 10 * slow.get(api, 0.0)), abs=1e-5)
        assert row[INDEX["broke"]] == float(broke[api])
        assert row.dtype == np.float32 and ((0 <= row) & (row <= 1)).all()


def test_family_lags_count_the_queries_after_breaking_changes_of_the_family():
    observations, metadata = _stream()
    tracker = QueryStreamTracker()
    breaks_at: list[tuple[str, int]] = []  # (api, checkpoints passed when it broke)
    checkpoints: list[list[str]] = []
    previous: dict[str, tuple] = {}
    for obs, meta in zip(observations, metadata, strict=True):
        tracker.step(obs, meta)
        if "queries" in obs:
            checkpoints.append([q[0] for q in obs["queries"]])
        else:
            contract = contract_of(obs)
            if obs["api"] in previous and is_breaking(previous[obs["api"]], contract):
                breaks_at.append((obs["api"], len(checkpoints)))
            previous[obs["api"]] = contract
    for family in {endpoint_family(api) for api in previous}:
        api = next(a for a in previous if endpoint_family(a) == family)
        row = tracker.features(api)
        for lag in range(6):
            shares = [checkpoints[at + lag].count(a) / len(checkpoints[at + lag]) for a, at in breaks_at
                      if endpoint_family(a) == family and at + lag < len(checkpoints)]
            expected = min(1.0, 10 * np.mean(shares)) if shares else 0.0
            assert row[INDEX[f"family_lag_{lag}"]] == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(("api", "family"), [("api.billing.endpoint_3", "billing"),
                                             ("POST /v1/charges/{charge}/refunds", "refunds")])
def test_an_endpoints_family(api, family):
    assert endpoint_family(api) == family


@pytest.mark.parametrize("history", [None, 3])
def test_kept_features_are_those_computed_afresh_at_every_step(history):
    # Medium streams break and revert, so every invalidation (checkpoints, shows in a family)
    # is exercised; asking at every step makes a stale row show up at once.
    episode = generate_query_episode(query_config("queries_medium", **SMALL), 2, 0)
    kept, fresh = QueryStreamTracker(history), QueryStreamTracker(history, cache=False)
    seen: list[str] = []
    for obs, meta in zip(*episode.columns(), strict=True):
        kept.step(obs, meta)
        fresh.step(obs, meta)
        if "api" in obs and obs["api"] not in seen:
            seen.append(obs["api"])
        for api in seen:
            assert np.array_equal(kept.features(api), fresh.features(api)), (obs, api)
    assert kept.features(seen[0]) is kept.features(seen[0])
    with pytest.raises(ValueError, match="read-only"):
        kept.features(seen[0])[0] = 1.0
    assert fresh.features(seen[0]) is not fresh.features(seen[0])
