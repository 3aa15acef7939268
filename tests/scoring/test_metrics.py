"""Golden tests of the episode metrics (spec §4, paper §6; ``wpb_gym.scoring.metrics`` docstring table).

Every expected value is worked out by hand from the definitions, with the arithmetic written
in the test, and compared with every field of ``EpisodeMetrics``.
"""

import dataclasses
import itertools
import json

import pytest

from wpb_gym import (
    ByteMemoryStore,
    Episode,
    EpisodeMetrics,
    MemoryAction,
    Step,
    compute_metrics,
    episode_oracle,
    score_episode,
)
from wpb_gym.scoring.metrics import CONFUSION_NAMES, METRIC_NAMES

META = {"mode": "default"}
META_LEN = len('{"mode": "default"}')  # 19
OVERHEAD = 32 + 16  # item header + index entry


def snap(i, params=("a", "b"), deprecated=False, version=1):
    return {"api": f"api.v{version}.endpoint_{i}", "deprecated": deprecated, "params": list(params), "version": version}


def jlen(value):
    return len(json.dumps(value, sort_keys=True))


def write_cost(obs, meta=META):
    return jlen(obs) + jlen(meta) + OVERHEAD


def make_episode(observations, critical, utilities, total_drift_events=None, meta=META):
    steps = [Step(t, obs, dict(meta)) for t, obs in enumerate(observations)]
    labels = {"critical_steps": list(critical), "utility_by_step": dict(utilities)}
    if total_drift_events is not None:
        labels["total_drift_events"] = total_drift_events
    return Episode(steps=steps, labels=labels)


def expected_metrics(**fields):
    """Fill an EpisodeMetrics from hand-computed fields (fails if one is missing)."""
    return EpisodeMetrics(**fields)


def assert_metrics_equal(got, want):
    for f in dataclasses.fields(EpisodeMetrics):
        g, w = getattr(got, f.name), getattr(want, f.name)
        if isinstance(w, float):
            assert g == pytest.approx(w, rel=1e-12, abs=1e-12), f.name
        else:
            assert g == w, f.name
            assert type(g) is type(w), f.name


# ----------------------------------------------------------------------------- the mixed case
# Eight steps; every snapshot text below is
#   {"api": "api.v1.endpoint_I", "deprecated": false, "params": ["a", "b"], "version": 1}
#   = 1 + 7+21 ("api": "...") + 2 + 19 ("deprecated": false) + 2 + 20 ("params": ["a", "b"])
#     + 2 + 12 ("version": 1) + 1 = 85 characters.
MIXED_OBS = [
    snap(0),  # t0: WRITE
    snap(1),  # t1: WRITE, later EXPIREd
    snap(0, deprecated=True),  # t2: MERGE into t0 (base present at the end) -> retained
    snap(1, params=("a",)),  # t3: MERGE into t1 (base expired at t4) -> orphan, not retained
    snap(2),  # t4: EXPIRE t1; a MERGE of this step into t0 is rejected (other endpoint)
    snap(3),  # t5: WRITE
    snap(4, params=tuple(f"param_{k}" for k in range(30))),  # t6: WRITE rejected (over budget)
    snap(5),  # t7: WRITE
]
MIXED_CRITICAL = [0, 2, 3, 6]
MIXED_UTILITY = {0: 5.0, 1: 1.0, 2: 6.0, 3: 5.0, 4: 1.0, 5: 0.5, 6: 5.0, 7: 1.0}
MIXED_BUDGET = 600


def run_mixed():
    ep = make_episode(MIXED_OBS, MIXED_CRITICAL, MIXED_UTILITY, total_drift_events=5)
    s = ep.steps
    store = ByteMemoryStore(MIXED_BUDGET)
    assert store.apply(MemoryAction.write(s[0]), current_t=0)
    assert store.apply(MemoryAction.write(s[1]), current_t=1)
    assert store.apply(MemoryAction.merge(s[2], target_t=0), current_t=2)
    assert store.apply(MemoryAction.merge(s[3], target_t=1), current_t=3)
    assert store.apply(MemoryAction.skip(), current_t=4)
    assert not store.apply(MemoryAction.merge(s[4], target_t=0), current_t=4)  # rejected: other endpoint
    assert store.apply(MemoryAction.expire(1), current_t=4)
    assert store.apply(MemoryAction.write(s[5]), current_t=5)
    assert not store.apply(MemoryAction.write(s[6]), current_t=6)  # rejected: over budget
    assert not store.apply(MemoryAction.expire(1), current_t=6)  # rejected: already gone
    assert not store.apply(MemoryAction.expire(7), current_t=6)  # rejected: nothing there
    assert store.apply(MemoryAction.write(s[7]), current_t=7)
    return ep, store


def test_mixed_byte_arithmetic():
    # WRITE of a two-param snapshot: 85 + 19 + 48 = 152.
    assert write_cost(snap(0)) == 85 + META_LEN + OVERHEAD == 152
    # MERGE t2: delta {"deprecated": true} is 20 characters, + 16.
    assert jlen({"deprecated": True}) + 16 == 20 + 16 == 36
    # MERGE t3: delta {"params": ["a"]} is 17 characters, + 16.
    assert jlen({"params": ["a"]}) + 16 == 17 + 16 == 33
    # The big step at t6 costs more than what is left at t6 (600 - (152 + 36 + 33 + 152) = 227).
    assert write_cost(MIXED_OBS[6]) > 600 - (152 + 36 + 33 + 152)


def _mixed_expected(oracle_utility):
    T = 8
    W = [0, 2, 5, 7]  # t3 is an orphan MERGE (its base t1 was expired); t1 was expired
    R = set(MIXED_CRITICAL)
    tp = len([t for t in W if t in R])  # {0, 2} -> 2
    fp = len(W) - tp  # {5, 7} -> 2
    fn = len(R) - tp  # {3, 6} -> 2
    tn = T - tp - fp - fn  # {1, 4} -> 2
    assert (tp, fp, fn, tn) == (2, 2, 2, 2)
    precision = 2 / 4
    recall = 2 / 4
    f1 = 2 * 0.5 * 0.5 / (0.5 + 0.5)
    policy_utility = 5.0 + 6.0 + 0.5 + 1.0  # u0 + u2 + u5 + u7 = 12.5
    # bytes_used: WRITE t0, MERGE t2, MERGE t3 (orphan, still stored), WRITE t5, WRITE t7.
    bytes_used = 152 + 36 + 33 + 152 + 152  # = 525
    return expected_metrics(
        recall=recall,
        precision=precision,
        f1=f1,
        utility_per_kb=12.5 / (525 / 1024),
        regret_write_only=max(0.0, oracle_utility - policy_utility),
        oracle_utility=float(oracle_utility),
        policy_utility=12.5,
        drift_coverage=2 / 5,  # tp / labels["total_drift_events"], not tp / |R| = 2 / 4
        avg_staleness=((7 - 0) + (7 - 2) + (7 - 5) + (7 - 7)) / 4,  # = 3.5
        expire_rate=1 / 4,  # one accepted EXPIRE over the accepted WRITEs t0, t1, t5, t7
        utilization=bytes_used / MIXED_BUDGET,  # 525 / 600 = 0.875
        write_density=4 / 8,
        bytes_used=bytes_used,
        write_actions=4,
        expire_actions=1,
        merge_actions=2,  # the rejected MERGE at t4 does not count
        tp=tp,
        fp=fp,
        fn=fn,
        tn=tn,
        budget_bytes=600,
        steps=8,
        retained=(0, 2, 5, 7),
    )


def test_mixed_case_every_field():
    ep, store = run_mixed()
    assert store.bytes_used == 525
    got = compute_metrics(ep, store, oracle_utility=20.0)
    want = _mixed_expected(20.0)
    assert want.regret_write_only == 7.5
    assert want.utility_per_kb == pytest.approx(24.380952380952381)
    assert_metrics_equal(got, want)


def test_mixed_case_regret_clamped_at_zero():
    ep, store = run_mixed()
    got = compute_metrics(ep, store, oracle_utility=10.0)  # below the policy's 12.5
    assert got.regret_write_only == 0.0
    assert_metrics_equal(got, _mixed_expected(10.0))


def test_mixed_case_retained_set_and_orphan():
    ep, store = run_mixed()
    assert store.timesteps() == (0, 2, 3, 5, 7)  # the orphan is still stored...
    got = compute_metrics(ep, store, oracle_utility=0.0)
    assert 3 not in got.retained  # ...but not retained
    assert 2 in got.retained  # a MERGE with its base present is


def test_drift_coverage_falls_back_to_critical_count():
    ep = make_episode(MIXED_OBS, MIXED_CRITICAL, MIXED_UTILITY)  # no total_drift_events label
    _, store = run_mixed()
    got = compute_metrics(ep, store, oracle_utility=0.0)
    assert got.drift_coverage == pytest.approx(2 / 4)


# ----------------------------------------------------------------------------- conventions
def _small_episode(critical=(1,), total=None):
    obs = [snap(0), snap(1), snap(2)]
    return make_episode(obs, critical, {0: 1.0, 1: 5.0, 2: 0.5}, total_drift_events=total)


def test_empty_memory_conventions():
    ep = _small_episode(critical=(1,))
    store = ByteMemoryStore(1000)
    for t in range(3):
        assert store.apply(MemoryAction.skip(), current_t=t)
    got = compute_metrics(ep, store, oracle_utility=5.0)
    want = expected_metrics(
        recall=0.0,  # tp / |R| = 0 / 1
        precision=0.0,  # W empty
        f1=0.0,  # P + R = 0
        utility_per_kb=0.0,  # bytes_used = 0
        regret_write_only=5.0,
        oracle_utility=5.0,
        policy_utility=0.0,
        drift_coverage=0.0,
        avg_staleness=0.0,  # W empty
        expire_rate=0.0,  # no WRITE
        utilization=0 / 1000,
        write_density=0 / 3,
        bytes_used=0,
        write_actions=0,
        expire_actions=0,
        merge_actions=0,
        tp=0,
        fp=0,
        fn=1,
        tn=2,
        budget_bytes=1000,
        steps=3,
        retained=(),
    )
    assert_metrics_equal(got, want)


def test_orphan_only_memory_conventions():
    """W empty while bytes are used: only an orphan MERGE delta is left."""
    obs = [snap(0), snap(0, params=("a",)), snap(1)]
    ep = make_episode(obs, [1], {0: 1.0, 1: 5.0, 2: 1.0}, total_drift_events=1)
    store = ByteMemoryStore(1000)
    assert store.apply(MemoryAction.write(ep.steps[0]), current_t=0)
    assert store.apply(MemoryAction.merge(ep.steps[1], target_t=0), current_t=1)
    assert store.apply(MemoryAction.expire(0), current_t=2)
    got = compute_metrics(ep, store, oracle_utility=6.0)
    merge_bytes = len('{"params": ["a"]}') + 16  # 17 + 16 = 33
    want = expected_metrics(
        recall=0.0,
        precision=0.0,
        f1=0.0,
        utility_per_kb=0.0 / (merge_bytes / 1024),
        regret_write_only=6.0,
        oracle_utility=6.0,
        policy_utility=0.0,
        drift_coverage=0.0,
        avg_staleness=0.0,
        expire_rate=1 / 1,
        utilization=merge_bytes / 1000,
        write_density=0.0,
        bytes_used=33,
        write_actions=1,
        expire_actions=1,
        merge_actions=1,
        tp=0,
        fp=0,
        fn=1,
        tn=2,
        budget_bytes=1000,
        steps=3,
        retained=(),
    )
    assert_metrics_equal(got, want)


@pytest.mark.parametrize("total", [0, None])
def test_empty_relevant_set_conventions(total):
    ep = _small_episode(critical=(), total=total)
    assert ep.total_drift_events == 0
    store = ByteMemoryStore(1000)
    assert store.apply(MemoryAction.write(ep.steps[0]), current_t=0)
    assert store.apply(MemoryAction.skip(), current_t=1)
    assert store.apply(MemoryAction.write(ep.steps[2]), current_t=2)
    got = compute_metrics(ep, store, oracle_utility=1.5)
    used = 152 + 152  # two two-param snapshots
    want = expected_metrics(
        recall=0.0,  # R empty
        precision=0 / 2,
        f1=0.0,
        utility_per_kb=(1.0 + 0.5) / (used / 1024),
        regret_write_only=max(0.0, 1.5 - 1.5),
        oracle_utility=1.5,
        policy_utility=1.5,
        drift_coverage=0.0,  # no drift events
        avg_staleness=((2 - 0) + (2 - 2)) / 2,
        expire_rate=0 / 2,
        utilization=used / 1000,
        write_density=2 / 3,
        bytes_used=304,
        write_actions=2,
        expire_actions=0,
        merge_actions=0,
        tp=0,
        fp=2,
        fn=0,
        tn=1,
        budget_bytes=1000,
        steps=3,
        retained=(0, 2),
    )
    assert_metrics_equal(got, want)


def test_zero_budget_conventions():
    ep = _small_episode(critical=(1,))
    store = ByteMemoryStore(0)
    for t in range(3):
        assert not store.apply(MemoryAction.write(ep.steps[t]), current_t=t)  # rejected: over budget
    got = compute_metrics(ep, store, oracle_utility=0.0)
    assert got.utilization == 0.0
    assert got.bytes_used == 0 and got.budget_bytes == 0
    assert got.write_actions == 0  # rejected WRITEs do not count
    assert got.expire_rate == 0.0
    assert (got.tp, got.fp, got.fn, got.tn) == (0, 0, 1, 2)
    assert got.regret_write_only == 0.0


def test_perfect_policy():
    ep = _small_episode(critical=(1,), total=1)
    store = ByteMemoryStore(152)
    assert store.apply(MemoryAction.write(ep.steps[1]), current_t=1)
    got = compute_metrics(ep, store, oracle_utility=5.0)
    assert (got.precision, got.recall, got.f1, got.drift_coverage) == (1.0, 1.0, 1.0, 1.0)
    assert got.utilization == 1.0
    assert got.avg_staleness == 1.0  # T - 1 - t = 3 - 1 - 1
    assert got.utility_per_kb == pytest.approx(5.0 / (152 / 1024))
    assert got.regret_write_only == 0.0


# ----------------------------------------------------------------------------- score_episode
def test_score_episode_uses_unprivileged_oracle():
    utilities = [5.0, 1.0, 6.0, 0.5, 1.0, 5.0, 1.0]
    obs = [
        snap(0),
        snap(1, params=("a", "b", "c")),
        snap(2, version=2),
        snap(2, version=2),
        snap(3, params=("x",)),
        snap(4, params=("a", "b", "c", "d")),
        snap(5),
    ]
    steps = [
        Step(t, o, {"mode": "default", "priority": u / 6}) for t, (o, u) in enumerate(zip(obs, utilities, strict=False))
    ]
    ep = Episode(steps=steps, labels={"critical_steps": [0, 2, 5], "utility_by_step": dict(enumerate(utilities))})
    budget = 500

    # Unprivileged WRITE costs: the policy sees only {"mode": "default"} (19 characters).
    costs = [jlen(o) + META_LEN + OVERHEAD for o in obs]
    assert costs == [152, 157, 152, 152, 147, 162, 152]

    def brute_force(weights):
        best = 0.0
        for r in range(len(weights) + 1):
            for subset in itertools.combinations(range(len(weights)), r):
                if sum(weights[i] for i in subset) <= budget:
                    best = max(best, sum(utilities[i] for i in subset))
        return best

    expected = brute_force(costs)
    assert expected == 16.0  # e.g. steps 0, 2, 5 (5 + 6 + 5) for 152 + 152 + 162 = 466 bytes
    # The privileged costs (priority visible) are larger and only buy 11 here: the track matters.
    privileged_costs = [jlen(o) + jlen(s.metadata) + OVERHEAD for o, s in zip(obs, steps, strict=False)]
    assert brute_force(privileged_costs) == 11.0

    store = ByteMemoryStore(budget)
    assert store.apply(MemoryAction.write(steps[0]), current_t=0)
    assert store.apply(MemoryAction.write(steps[2]), current_t=2)
    got = score_episode(ep, store, track="unprivileged")
    oracle = episode_oracle(ep, [budget], "unprivileged").utility(budget)
    assert oracle == expected
    assert got.oracle_utility == expected
    # The stored steps carry the priority, so on this store they cost the privileged price.
    assert got.bytes_used == privileged_costs[0] + privileged_costs[2]
    assert got.policy_utility == 11.0
    assert got.regret_write_only == 16.0 - 11.0
    assert_metrics_equal(got, compute_metrics(ep, store, oracle_utility=expected))


# ----------------------------------------------------------------------------- errors and names
def test_timestep_outside_episode_raises():
    ep = _small_episode()
    store = ByteMemoryStore(1000)
    assert store.apply(MemoryAction.write(Step(5, snap(0), dict(META))), current_t=5)
    with pytest.raises(ValueError, match="outside the episode"):
        compute_metrics(ep, store, oracle_utility=0.0)


def test_negative_timestep_raises():
    ep = _small_episode()
    store = ByteMemoryStore(1000)
    assert store.apply(MemoryAction.write(Step(-1, snap(0), dict(META))), current_t=-1)
    with pytest.raises(ValueError, match="outside the episode"):
        compute_metrics(ep, store, oracle_utility=0.0)


def test_orphan_outside_episode_raises():
    ep = _small_episode()  # T = 3
    store = ByteMemoryStore(1000)
    assert store.apply(MemoryAction.write(Step(3, snap(0), dict(META))), current_t=3)
    assert store.apply(MemoryAction.merge(Step(4, snap(0, params=("a",)), dict(META)), target_t=3), current_t=4)
    assert store.apply(MemoryAction.expire(3), current_t=5)
    assert store.timesteps() == (4,) and store.retained_timesteps() == ()
    with pytest.raises(ValueError, match="outside the episode"):
        compute_metrics(ep, store, oracle_utility=0.0)


def test_metric_names():
    assert METRIC_NAMES == (
        "recall",
        "precision",
        "f1",
        "utility_per_kb",
        "regret_write_only",
        "oracle_utility",
        "policy_utility",
        "drift_coverage",
        "avg_staleness",
        "expire_rate",
        "utilization",
        "write_density",
        "bytes_used",
        "write_actions",
        "expire_actions",
    )
    assert CONFUSION_NAMES == ("tp", "fp", "fn", "tn")


def test_as_row():
    ep, store = run_mixed()
    row = compute_metrics(ep, store, oracle_utility=20.0).as_row()
    assert set(METRIC_NAMES) | {"tp", "fp", "fn", "tn"} <= set(row)
    assert "retained" not in row
    assert (row["tp"], row["fp"], row["fn"], row["tn"]) == (2, 2, 2, 2)
    assert row["bytes_used"] == 525 and row["policy_utility"] == 12.5
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in row.values())


def test_float_rounding_is_not_regret():
    # 0.7 + 0.1 summed in floats is 0.7999999999999999; the oracle says 0.8 exactly.
    steps = [Step(0, {"api": "a"}, {}), Step(1, {"api": "b"}, {})]
    ep = Episode(steps=steps, labels={"critical_steps": [0], "utility_by_step": {0: 0.7, 1: 0.1}})
    store = ByteMemoryStore(10_000)
    for step in steps:
        store.apply(MemoryAction.write(step), step.t)
    metrics = score_episode(ep, store, track="unprivileged")
    assert metrics.oracle_utility == pytest.approx(0.8) and metrics.regret_write_only == 0.0


def test_zero_budget_through_the_oracle():
    ep = _small_episode()
    store = ByteMemoryStore(0)
    for step in ep.steps:
        assert not store.apply(MemoryAction.write(step), step.t)
    metrics = score_episode(ep, store, track="unprivileged")
    assert (metrics.oracle_utility, metrics.regret_write_only, metrics.utilization, metrics.f1) == (0.0, 0.0, 0.0, 0.0)
