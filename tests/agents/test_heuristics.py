"""``breaking_detector``: golden action logs on hand-made contract streams, and its scores."""

import pytest

from agents.scripted.heuristics import BreakingDetector, is_breaking
from agents.registry import make_agent
from wpb_gym.core.tracks import track_costs
from wpb_gym.core.types import Episode, Step
from wpb_gym.episodes.generators.paper import CONTRACT_REGIMES, generate_episode, make_config
from wpb_gym.evaluation.runner import run_episode
from wpb_gym.scoring.oracle import hindsight_f1_bound


def snap(t, name="e", version=1, params=("a", "b"), required=(), deprecated=False):
    obs = {
        "api": f"api.v{version}.{name}",
        "deprecated": deprecated,
        "params": list(params),
        "required": list(required),
        "version": version,
    }
    return Step(t, obs, {"mode": "test", "priority": 0.1})


def episode(steps, critical=()):
    return Episode(
        steps=tuple(steps),
        labels={
            "critical_steps": list(critical),
            "total_drift_events": len(critical),
            "utility_by_step": {s.t: 1.0 for s in steps},
            "mode": "test",
        },
    )


def log(ep, budget=10_000):
    run = run_episode(BreakingDetector(), ep, budget, "unprivileged")
    return [
        (a.t, a.action.action, a.action.target_t if a.action.action == "EXPIRE" else None) for a in run.actions
    ], run


def test_is_breaking_is_removal_requirement_deprecation_or_endpoint_removal():
    base = (frozenset("ab"), frozenset(), False, False)
    assert is_breaking(base, (frozenset("a"), frozenset(), False, False))  # removed
    assert is_breaking(base, (frozenset("ab"), frozenset("a"), False, False))  # made required
    assert is_breaking(base, (frozenset("ab"), frozenset(), True, False))  # deprecated
    assert is_breaking(base, (frozenset("ab"), frozenset(), False, True))  # endpoint removed
    assert not is_breaking(base, (frozenset("abc"), frozenset(), False, False))  # added
    assert not is_breaking(
        (frozenset("ab"), frozenset("a"), False, False), (frozenset("ab"), frozenset(), False, False)
    )
    assert not is_breaking((frozenset("ab"), frozenset(), True, False), (frozenset("ab"), frozenset(), True, False))
    assert not is_breaking((frozenset(), frozenset(), False, True), (frozenset("ab"), frozenset(), False, False))


def test_writes_breaking_changes_only_and_never_first_sightings():
    steps = [
        snap(0, params="ab"),  # first sighting: nothing to compare with
        snap(1, version=2, params="abc"),  # added: cosmetic
        snap(2, version=3, params="ac"),  # removed: breaking
        snap(3, version=3, params="ac"),  # unchanged
        snap(4, version=4, params="ac", required="a"),  # made required: breaking
        snap(5, version=5, params="ac", required=""),  # relaxed: the contract before step 4 again
        snap(6, version=6, params="ac", deprecated=True),  # deprecated: breaking
    ]
    actions, run = log(episode(steps, critical=[2, 4, 6]))
    writes = [t for t, a, _ in actions if a == "WRITE"]
    # Step 5 restores the contract step 4 changed: step 4 is expired as reverted, 5 is not written.
    assert writes == [2, 4, 6]
    assert (5, "EXPIRE", 4) in actions
    assert run.metrics.f1 == pytest.approx(0.8)


def test_a_reverted_change_is_expired_when_the_revert_arrives():
    steps = [
        snap(0, params="abc"),
        snap(1, version=2, params="ab"),  # removed c: breaking
        snap(2, name="other", params="x"),
        snap(3, version=3, params="abc"),  # c is back: the change at 1 is reverted
    ]
    actions, run = log(episode(steps, critical=[]))
    assert [(t, a) for t, a, _ in actions] == [(1, "WRITE"), (3, "EXPIRE")]
    assert actions[1][2] == 1
    assert run.store.timesteps() == ()


def test_migration_guides_are_written():
    guide = Step(1, {"old_api": "api.v1.e", "new_api": "api.v2.e2", "deadline": "2024-01-01", "notes": "x"}, {})
    actions, _ = log(episode([snap(0), guide], critical=[1]))
    assert actions == [(1, "WRITE", None)]


def test_when_full_it_evicts_larger_items_and_skips_when_it_cannot():
    big = Step(1, {"old_api": "api.v1.g", "new_api": "api.v2.g2", "deadline": "d", "notes": "n" * 300}, {})
    steps = [snap(0, params="abc"), big, snap(2, version=2, params="ab")]
    costs = track_costs(episode(steps), "unprivileged")  # what the policy is charged
    budget = int(costs[1] + costs[2]) - 1  # both do not fit
    actions, run = log(episode(steps, critical=[1, 2]), budget=budget)
    assert actions == [(1, "WRITE", None), (2, "EXPIRE", 1), (2, "WRITE", None)]
    # The other way round: the large step does not evict the smaller stored one.
    steps = [snap(0, params="abc"), snap(1, version=2, params="ab"), big.__class__(2, big.observation, {})]
    actions, _ = log(episode(steps, critical=[1, 2]), budget=budget)
    assert actions == [(1, "WRITE", None)]


@pytest.mark.parametrize("regime", CONTRACT_REGIMES)
def test_it_beats_the_version_rule_and_stays_below_the_bound(regime):
    for index in range(3):
        ep = generate_episode(make_config(regime), seed=0, index=index)
        strong = run_episode(make_agent("breaking_detector"), ep, 10240, "unprivileged").metrics.f1
        version_rule = run_episode(make_agent("change_detector"), ep, 10240, "unprivileged").metrics.f1
        bound = hindsight_f1_bound(track_costs(ep, "unprivileged"), ep.critical_steps, 10240).f1
        assert version_rule < strong <= bound + 1e-12


def test_endpoint_removals_are_written_even_unseen_and_expired_when_re_added():
    def gone(t, name):
        step = snap(t, name=name, params=())
        return Step(t, {**step.observation, "removed": True}, step.metadata)

    steps = [
        gone(0, "x"),  # never shown before: a removal still breaks every client
        snap(1, name="y"),
        gone(2, "y"),  # shown, then removed: breaking by the diff
        snap(3, name="x", version=2),  # x is back: its removal was undone
        snap(4, name="z"),
    ]
    actions, run = log(episode(steps, critical=(2,)))
    assert actions == [(0, "WRITE", None), (2, "WRITE", None), (3, "EXPIRE", 0)]
    assert run.metrics.f1 == 1.0
