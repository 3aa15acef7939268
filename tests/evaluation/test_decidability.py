"""What a stream-only policy can decide: first sightings, changes that do not show, and the
bound that leaves them out."""

from __future__ import annotations

import numpy as np

from agents.scripted.heuristics import BreakingDetector
from wpb_gym.core.types import Episode, Step
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.evaluation.reports.decidability import decidability, undecidable_critical_steps
from wpb_gym.evaluation.runner import run_episode


def episode(observations, critical, utilities=None):
    steps = [Step(t, obs, {}) for t, obs in enumerate(observations)]
    return Episode(
        steps=steps,
        labels={"critical_steps": critical, "utilities": utilities or [1.0] * len(steps),
                "total_drift_events": len(critical)},
    )


def test_a_first_sighting_is_undecidable_unless_it_shows_the_endpoint_removed():
    e = episode(
        [
            {"api": "api.v1.a", "params": ["x"]},  # 0: first sighting of a, critical: undecidable
            {"api": "api.v2.a", "params": []},  # 1: a again, critical: decidable
            {"api": "api.v1.b", "removed": True},  # 2: first sighting of b, removed: decidable
            {"old_api": "api.v1.c", "new_api": "api.v1.d", "notes": "n"},  # 3: a guide: decidable
            {"api": "api.v3.e", "params": []},  # 4: first sighting, not critical
        ],
        critical=[0, 1, 2, 3],
    )
    assert undecidable_critical_steps(e) == (0,)
    d = decidability(e, [10_000, 0])
    assert (d.critical, d.undecidable, d.undecidable_share) == (4, 1, 0.25)
    assert d.bounds[10_000].f1 == 1.0 and d.decidable_bounds[10_000] == 2 * 3 / (3 + 4)
    assert d.decidable_bounds[0] == 0.0


def test_a_repeat_whose_change_does_not_show_is_undecidable():
    e = episode(
        [
            {"api": "GET /v1/a", "params": ["x"], "required": [], "version": 1},  # 0: first sighting, not critical
            {"api": "GET /v1/a", "params": ["x"], "required": [], "version": 2},  # 1: same contract: undecidable
            {"api": "GET /v1/a", "params": ["x"], "required": ["x"], "version": 3},  # 2: required: decidable
            {"api": "api.v1.b", "params": ["y"]},  # 3: first sighting, not critical
            {"api": "api.v2.b", "params": ["y"]},  # 4: the api's version rose: decidable
            {"api": "api.v2.b", "params": ["y"], "deprecated": False},  # 5: same contract: undecidable
            {"api": "api.v2.b", "params": ["y"], "deprecated": True},  # 6: deprecated: decidable
            {"api": "api.v2.b", "removed": True},  # 7: removed: decidable
        ],
        critical=[1, 2, 4, 5, 6, 7],
    )
    assert undecidable_critical_steps(e) == (1, 5)


def test_no_stream_only_policy_of_ours_passes_the_decidable_bound():
    for regime in ("breaking", "reverts", "contract_mix"):
        config = make_config(regime)
        for index in range(4):
            e = generate_episode(config, seed=777, index=index)
            d = decidability(e, [10240])
            f1 = run_episode(BreakingDetector(), e, 10240, record_actions=False).metrics.f1
            assert f1 <= d.decidable_bounds[10240] + 1e-12 <= d.bounds[10240].f1 + 1e-12
    shares = [decidability(generate_episode(make_config("default"), seed=777, index=i), [10240]).undecidable_share
              for i in range(10)]
    assert np.mean(shares) < 0.1  # the paper's regimes are nearly all decidable
