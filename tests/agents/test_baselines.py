"""Scripted and oracle baselines: golden action logs on hand-made episodes, the per-step action
rule on every regime, determinism, and the track checks."""

import re
from functools import cache

import numpy as np
import pytest

from agents.scripted.baselines import (
    BASELINES,
    AlwaysWrite,
    ChangeDetector,
    ExpireOldest,
    MergeAggressive,
    NeverWrite,
    OracleOptimal,
    PriorityGreedy,
    PriorityThreshold,
    RandomPolicy,
    RecencyBias,
    UniformSample,
    UtilityGreedy,
)
from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.policy import EpisodeContext
from wpb_gym.core.tracks import track_costs
from wpb_gym.core.types import Episode, Step
from wpb_gym.episodes.generators.paper import REGIMES, generate_episode, make_config
from wpb_gym.evaluation.runner import run_episode
from wpb_gym.scoring.oracle import oracle_utility, oracle_write_set

PRIVILEGED = "privileged"
UNPRIVILEGED = "unprivileged"
PAD = 10


# ---------------------------------------------------------------------------- helpers
def mk(t, api="a", extra=0, priority=0.1, **fields):
    """A step whose WRITE cost is ``C + extra`` (one-decimal priorities keep the cost fixed)."""
    return Step(t, {"api": api, "x": "0" * (PAD + extra), **fields}, {"priority": priority})


C = estimate_bytes(mk(0))  # the cost of a plain step


def episode(steps, critical=(), utilities=None):
    utilities = utilities or {}
    return Episode(
        steps=steps,
        labels={"critical_steps": list(critical), "utility_by_step": {s.t: utilities.get(s.t, 1.0) for s in steps}},
    )


def log(run):
    """The run's actions as (t, kind, target_t) — WRITE and SKIP have no target — all accepted."""
    assert all(entry.decision.accepted for entry in run.actions), [
        (e.t, e.action, e.decision.reason) for e in run.actions if not e.decision.accepted
    ]
    out = []
    for entry in run.actions:
        a = entry.action
        out.append((entry.t, a.action[0], a.target_t) if a.action in ("EXPIRE", "MERGE") else (entry.t, a.action[0]))
    return out


def memory(run):
    return run.store.timesteps()


@cache
def generated(regime, index=0, length=200):
    return generate_episode(make_config(regime, length=length), seed=0, index=index)


def tracks_of(cls):
    return (UNPRIVILEGED, PRIVILEGED) if cls.track == UNPRIVILEGED else (PRIVILEGED,)


# ---------------------------------------------------------------------------- metadata
def test_names_aliases_tracks_and_params():
    names = [cls.name for cls in BASELINES]
    aliases = [a for cls in BASELINES for a in cls.aliases]
    assert len(set(names)) == len(names) == 12
    assert len(set(aliases)) == len(aliases) and not set(aliases) & set(names)
    assert {"NeverWrite", "AlwaysWrite", "UniformSample", "RecencyBias", "RandomPolicy", "PriorityThreshold"} <= set(
        aliases
    )
    for cls in BASELINES:
        agent = cls()
        assert cls.track in (UNPRIVILEGED, PRIVILEGED, "oracle")
        assert cls.kind == ("oracle" if cls.track == "oracle" else "scripted")
        assert cls.description and "\n" not in cls.description
        params = agent.params()
        assert type(agent)(**params).params() == params
        assert repr(agent).startswith(type(agent).__name__ + "(")
    assert UniformSample().params() == {"N": 10}
    assert RandomPolicy().params() == {"p": 0.1, "seed": 0}
    assert PriorityThreshold().params() == {"tau": 0.5}
    assert ExpireOldest().params() == {"max_age": 50}
    assert RecencyBias().params() == {"max_expires": None}
    assert ChangeDetector().params() == {"kinds": ("endpoint",), "trigger": "changed"}


@pytest.mark.parametrize(
    "make",
    [
        lambda: UniformSample(N=0),
        lambda: RandomPolicy(p=1.5),
        lambda: RandomPolicy(seed=-1),
        lambda: ExpireOldest(max_age=-1),
        lambda: RecencyBias(max_expires=0),
        lambda: PriorityThreshold(tau=float("nan")),
        lambda: ChangeDetector(kinds=("endpoints",)),
        lambda: ChangeDetector(trigger="sometimes"),
    ],
)
def test_bad_parameters_are_refused(make):
    with pytest.raises(ValueError):
        make()


# ---------------------------------------------------------------------------- golden runs
def test_no_mem_never_acts():
    run = run_episode(NeverWrite(), episode([mk(t) for t in range(5)]), 10 * C, PRIVILEGED)
    assert log(run) == [] and memory(run) == ()


def test_fifo_store_all_fills_then_stops():
    ep = episode([mk(0), mk(1), mk(2), mk(3, extra=C), mk(4)])
    run = run_episode(AlwaysWrite(), ep, 3 * C, PRIVILEGED)
    assert log(run) == [(0, "W"), (1, "W"), (2, "W")]


def test_uniform_sample_writes_t_mod_N():
    run = run_episode(UniformSample(), episode([mk(t) for t in range(25)]), 100 * C, PRIVILEGED)
    assert memory(run) == (0, 10, 20)
    run = run_episode(UniformSample(N=3), episode([mk(t) for t in range(10)]), 100 * C, PRIVILEGED)
    assert memory(run) == (0, 3, 6, 9)
    run = run_episode(UniformSample(N=3), episode([mk(t) for t in range(10)]), C, PRIVILEGED)
    assert log(run) == [(0, "W")]  # t=3 does not fit and nothing is evicted


def _last_kb_episode():
    # t=3 costs 2C, so it needs the two oldest items gone; t=4 (4C) exceeds the whole budget
    return episode([mk(0), mk(1), mk(2), mk(3, extra=C), mk(4, extra=3 * C)])


def test_last_kb_expires_the_oldest_items_until_the_step_fits():
    run = run_episode(RecencyBias(), _last_kb_episode(), 3 * C, PRIVILEGED)
    assert log(run) == [(0, "W"), (1, "W"), (2, "W"), (3, "E", 0), (3, "E", 1), (3, "W")]
    assert memory(run) == (2, 3)  # t=4 alone exceeds the budget: skipped, nothing expired


def test_last_kb_with_one_expire_per_step():
    run = run_episode(RecencyBias(max_expires=1), _last_kb_episode(), 3 * C, PRIVILEGED)
    assert log(run) == [(0, "W"), (1, "W"), (2, "W"), (3, "E", 0)]
    assert memory(run) == (1, 2)


def test_random_extremes_and_seeding():
    ep = _last_kb_episode()
    assert log(run_episode(RandomPolicy(p=0.0), ep, 3 * C, PRIVILEGED)) == []
    assert log(run_episode(RandomPolicy(p=1.0), ep, 3 * C, PRIVILEGED)) == log(run_episode(AlwaysWrite(), ep, 3 * C))
    big = generated("default")
    seed0 = memory(run_episode(RandomPolicy(seed=0), big, 10**6))
    assert seed0 == memory(run_episode(RandomPolicy(seed=0), big, 10**6))
    assert seed0 != memory(run_episode(RandomPolicy(seed=1), big, 10**6))
    assert 5 <= len(seed0) <= 40  # p = 0.1 of 200 steps


def test_priority_threshold_is_strict_and_never_evicts():
    steps = [mk(t, priority=p) for t, p in enumerate([0.4, 0.5, 0.6, 0.9, 1.0])]
    run = run_episode(PriorityThreshold(), episode(steps), 2 * C, PRIVILEGED)
    assert log(run) == [(2, "W"), (3, "W")]


def test_priority_greedy_evicts_only_lower_priority_items():
    steps = [
        mk(0, priority=0.2),
        mk(1, priority=0.9),
        mk(2, priority=0.1),
        mk(3, priority=0.5),  # evicts t=2 (the lowest)
        mk(4, extra=C, priority=0.5),  # needs 2C; only t=0 (C) is lower: skip, evict nothing
        mk(5, priority=0.2),  # t=0 has equal priority: not evicted
        mk(6, priority=0.9),  # evicts t=0 (0.2) rather than t=3 (0.5)
    ]
    run = run_episode(PriorityGreedy(), episode(steps), 3 * C, PRIVILEGED)
    assert log(run) == [(0, "W"), (1, "W"), (2, "W"), (3, "E", 2), (3, "W"), (6, "E", 0), (6, "W")]
    assert memory(run) == (1, 3, 6)


def test_priority_greedy_breaks_ties_by_age():
    steps = [mk(0, priority=0.2), mk(1, priority=0.1), mk(2, priority=0.1)] + [mk(t, priority=0.9) for t in (3, 4, 5)]
    run = run_episode(PriorityGreedy(), episode(steps), 3 * C, PRIVILEGED)
    assert log(run)[3:] == [(3, "E", 1), (3, "W"), (4, "E", 2), (4, "W"), (5, "E", 0), (5, "W")]


def test_priority_agents_need_the_priority_hint():
    ep = Episode(steps=[Step(0, {"api": "a"}, {"mode": "default"})], labels={})
    for agent in (PriorityThreshold(), PriorityGreedy()):
        with pytest.raises(ValueError, match="priority"):
            run_episode(agent, ep, 1024, PRIVILEGED)


def test_merge_aggressive_merges_into_the_newest_same_api_base():
    steps = [
        mk(0, v=1),
        mk(1, v=1),  # same api, empty delta: written (as last_kb would), a second base
        mk(2, v=2),  # MERGE into the newest base, t=1
        mk(3, api="b", v=1),  # no base of api "b": written
        mk(4, v=3),  # t=2 is a MERGE item, not a base: MERGE into t=1 again
    ]
    run = run_episode(MergeAggressive(), episode(steps), 100 * C, PRIVILEGED)
    assert log(run) == [(0, "W"), (1, "W"), (2, "M", 1), (3, "W"), (4, "M", 1)]
    assert [entry.action.delta for entry in run.actions if entry.action.action == "MERGE"] == [{"v": 2}, {"v": 3}]
    assert run.store.retained_timesteps() == (0, 1, 2, 3, 4)


def test_merge_aggressive_makes_room_but_keeps_the_base():
    steps = [mk(0, api="b", v=1), mk(1, v=1), mk(2, v=2)]
    run = run_episode(MergeAggressive(), episode(steps), 2 * estimate_bytes(steps[1]) + 10, PRIVILEGED)
    assert log(run) == [(0, "W"), (1, "W"), (2, "E", 0), (2, "M", 1)]


def test_merge_aggressive_falls_back_to_last_kb():
    steps = [mk(0, v=1), mk(1, v=2)]
    # the MERGE (24 bytes) does not fit and nothing but the base could be expired
    run = run_episode(MergeAggressive(), episode(steps), estimate_bytes(steps[0]) + 10, PRIVILEGED)
    assert log(run) == [(0, "W"), (1, "E", 0), (1, "W")]


def test_merge_aggressive_is_last_kb_on_generated_streams():
    ep = generated("burst_redundancy")
    for budget in (1024, 10240):
        assert log(run_episode(MergeAggressive(), ep, budget)) == log(run_episode(RecencyBias(), ep, budget))


def test_expire_oldest_expires_by_age():
    run = run_episode(ExpireOldest(max_age=2), episode([mk(t) for t in range(6)]), 100 * C, PRIVILEGED)
    assert log(run) == [
        (0, "W"),
        (1, "W"),
        (2, "W"),
        (3, "E", 0),
        (3, "W"),
        (4, "E", 1),
        (4, "W"),
        (5, "E", 2),
        (5, "W"),
    ]
    # the WRITE may use the room the age rule just freed; it never evicts beyond that rule
    run = run_episode(ExpireOldest(max_age=1), episode([mk(0), mk(1), mk(2, extra=C)]), 2 * C, PRIVILEGED)
    assert log(run) == [(0, "W"), (1, "W"), (2, "E", 0)]
    run = run_episode(ExpireOldest(max_age=1), episode([mk(0), mk(1), mk(2)]), 2 * C, PRIVILEGED)
    assert log(run) == [(0, "W"), (1, "W"), (2, "E", 0), (2, "W")]


def _endpoint(t, name, v, params, deprecated=False):
    obs = {"api": f"api.v{v}.{name}", "deprecated": deprecated, "params": params, "version": v}
    return Step(t, obs, {})


def _change_stream():
    return episode(
        [
            _endpoint(0, "ep_a", 1, ["x"]),  # first sighting
            _endpoint(1, "ep_a", 1, ["x"]),  # identical repeat
            _endpoint(2, "ep_a", 2, ["x", "y"]),  # new version: changed
            _endpoint(3, "ep_b", 1, ["x"]),  # first sighting
            Step(4, {"section": "s1", "content": "aaa", "last_updated": "2024-01-01"}, {}),
            Step(5, {"section": "s1", "content": "bbb", "last_updated": "2024-01-02"}, {}),  # doc changed
            _endpoint(6, "ep_a", 2, ["x", "y"]),  # identical to t=2
            _endpoint(7, "ep_a", 2, ["x", "y"], deprecated=True),  # changed, same version
            _endpoint(8, "ep_b", 2, ["x"]),  # new version
        ]
    )


def test_change_detector_writes_changes_against_the_last_shown_snapshot():
    ep = _change_stream()
    assert log(run_episode(ChangeDetector(), ep, 10**5)) == [(2, "W"), (7, "W"), (8, "W")]
    assert memory(run_episode(ChangeDetector(trigger="version_up"), ep, 10**5)) == (2, 8)
    assert memory(run_episode(ChangeDetector(kinds=("endpoint", "doc")), ep, 10**5)) == (2, 5, 7, 8)
    # t=8 (124 bytes) needs room: the oldest item (t=2, 129 bytes) goes
    costs = track_costs(ep, UNPRIVILEGED)
    assert (costs[2], costs[7], costs[8]) == (129, 128, 124)
    run = run_episode(ChangeDetector(), ep, 129 + 128)
    assert log(run) == [(2, "W"), (7, "W"), (8, "E", 2), (8, "W")]
    # a change that cannot fit even in an empty memory is skipped and expires nothing
    assert log(run_episode(ChangeDetector(), ep, 128)) == [(7, "W"), (8, "E", 7), (8, "W")]
    assert log(run_episode(ChangeDetector(), ep, 126)) == [(8, "W")]


def test_change_detector_does_not_read_priority():
    ep = generated("burst_redundancy")
    fine = memory(run_episode(ChangeDetector(), ep, 10**6, PRIVILEGED))
    assert fine == memory(run_episode(ChangeDetector(), ep, 10**6, UNPRIVILEGED))
    assert set(fine) <= set(ep.critical_steps)  # every generated change is a drift


def _oracle_episode():
    # t=0 costs 2C; t=1..3 cost C; utilities 5, 5, 5, 1 and 0 for t=4
    steps = [mk(0, extra=C), mk(1), mk(2), mk(3), mk(4)]
    return episode(steps, critical=(0, 1, 2), utilities={0: 5.0, 1: 5.0, 2: 5.0, 3: 1.0, 4: 0.0})


@pytest.mark.parametrize(
    ("budget", "chosen"),
    [
        (C, (1,)),  # equal utility and cost: the earlier step
        (2 * C, (1, 2)),  # cheaper first: t=1 and t=2 before t=0
        (3 * C, (1, 2, 3)),  # t=0 no longer fits: passed over, the scan goes on to t=3
        (100 * C, (0, 1, 2, 3)),  # zero utility is never chosen
    ],
)
def test_utility_greedy_picks_by_utility_then_cost_then_time(budget, chosen):
    agent = UtilityGreedy()
    run = run_episode(agent, _oracle_episode(), budget, PRIVILEGED)
    assert agent.write_set == chosen
    assert log(run) == [(t, "W") for t in chosen]


def test_greedy_and_optimal_differ_where_greedy_is_not_optimal():
    steps = [mk(0, extra=C), mk(1), mk(2)]
    ep = episode(steps, utilities={0: 6.0, 1: 5.0, 2: 5.0})
    assert memory(run_episode(UtilityGreedy(), ep, 2 * C, PRIVILEGED)) == (0,)
    assert memory(run_episode(OracleOptimal(), ep, 2 * C, PRIVILEGED)) == (1, 2)


@pytest.mark.parametrize("budget", [1024, 10240])
def test_oracle_optimal_writes_the_oracle_set(budget):
    ep = generated("burst_drift")
    agent = OracleOptimal()
    run = run_episode(agent, ep, budget, PRIVILEGED)
    costs = track_costs(ep, PRIVILEGED)
    assert memory(run) == agent.write_set == oracle_write_set(costs, ep.utilities, budget)
    assert run.metrics.policy_utility == pytest.approx(oracle_utility(costs, ep.utilities, budget))
    assert run.metrics.regret_write_only == 0.0


def test_oracle_agents_need_the_labels():
    context = EpisodeContext(length=5, budget_bytes=1024, track=PRIVILEGED)
    for cls in (UtilityGreedy, OracleOptimal):
        with pytest.raises(ValueError, match="hidden labels"):
            cls().start_episode(context)
        with pytest.raises(RuntimeError, match="start_episode"):
            list(cls().select(mk(0), None))


# ---------------------------------------------------------------------------- every agent
STEP_PATTERN = re.compile(r"E*[WMS]?")


@pytest.mark.parametrize("cls", BASELINES, ids=lambda cls: cls.name)
@pytest.mark.parametrize("regime", sorted(REGIMES))
def test_expires_first_then_at_most_one_write_or_merge_last(cls, regime):
    ep = generated(regime)
    for track in tracks_of(cls):
        for budget in (1024, 10240):
            run = run_episode(cls(), ep, budget, track)
            per_step = {}
            for entry in run.actions:
                assert entry.decision.accepted, (entry.t, entry.action, entry.decision.reason)
                per_step[entry.t] = per_step.get(entry.t, "") + entry.action.action[0]
            bad = {t: kinds for t, kinds in per_step.items() if not STEP_PATTERN.fullmatch(kinds)}
            assert bad == {}, (track, budget)


@pytest.mark.parametrize("cls", BASELINES, ids=lambda cls: cls.name)
def test_same_episode_same_actions_in_any_order(cls):
    a, b = generated("burst_redundancy", 0), generated("burst_redundancy", 1)
    track = tracks_of(cls)[-1]
    agent = cls()
    first = log(run_episode(agent, a, 2048, track))
    run_episode(agent, b, 2048, track)
    again = log(run_episode(agent, a, 2048, track))
    fresh = log(run_episode(cls(), a, 2048, track))
    assert first == again == fresh


@pytest.mark.parametrize("cls", [c for c in BASELINES if c.track != UNPRIVILEGED], ids=lambda cls: cls.name)
def test_privileged_and_oracle_agents_refuse_the_unprivileged_track(cls):
    with pytest.raises(ValueError, match="cannot run on the unprivileged track"):
        run_episode(cls(), generated("default"), 1024, track=UNPRIVILEGED)


def test_unprivileged_agents_never_see_priority():
    seen = []

    class Spy(ChangeDetector):
        def select(self, step, store):
            seen.append(dict(step.metadata))
            return super().select(step, store)

    run_episode(Spy(), generated("default"), 1024, UNPRIVILEGED)
    assert seen and all("priority" not in m for m in seen)


def test_f1_ordering_on_generated_default_episodes():
    """A coarse sanity check of the measured table: the informed agents beat the blind ones."""
    eps = [generated("default", i) for i in range(3)]

    def f1(make, track=PRIVILEGED):
        return np.mean([run_episode(make(), e, 10240, track).metrics.f1 for e in eps])

    assert f1(NeverWrite) == 0.0
    assert f1(PriorityThreshold) == 1.0
    assert f1(ChangeDetector, UNPRIVILEGED) > 0.8 > 0.3 > max(f1(AlwaysWrite), f1(RecencyBias), f1(UniformSample))
