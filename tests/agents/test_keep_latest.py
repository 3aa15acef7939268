"""The keepers: the latest state of each endpoint at most, valued by what any policy may read."""

from __future__ import annotations

import numpy as np
import pytest

from agents.registry import make_agent
from agents.scripted import keeper_params
from wpb_gym.core.store import ByteMemoryStore
from wpb_gym.core.types import Step
from wpb_gym.episodes.generators.queries import generate_query_episode, query_config
from wpb_gym.evaluation.runner import run_episode
from wpb_gym.scoring.queries import score_queries

KEEPERS = ("keep_latest_lru", "keep_latest_lfu", "keep_latest_traffic", "keep_latest_breaking", "keep_latest_family",
           "keep_latest_migration")
CONFIG = query_config("queries_medium", endpoints=60, families=8, length=60 + 20 * 25, checkpoint_interval=25,
                      queries_per_checkpoint=60)


@pytest.mark.parametrize("name", KEEPERS)
@pytest.mark.parametrize("budget", [1024, 8192])
def test_memory_holds_at_most_the_latest_state_of_each_endpoint(name, budget):
    episode = generate_query_episode(CONFIG, 1, 0)
    agent = make_agent(name)
    store = ByteMemoryStore(budget)
    view = store.view()
    latest: dict[str, int] = {}
    agent.start_episode(type("Context", (), {"budget_bytes": budget, "episode": None})())
    for step in episode.steps:
        for action in agent.select(step, view):
            assert store.execute(action, step.t).accepted, (name, step.t, action)
        if "api" in step.observation:
            latest[step.observation["api"]] = step.t
            # an endpoint memory held is brought up to date whatever its value
        apis = [item.api for item in store.items()]
        assert len(apis) == len(set(apis))
        assert all(item.t == latest[item.api] for item in store.items())
    assert score_queries(episode, store).correct > 0


def test_an_endpoint_held_is_always_updated():
    agent = make_agent("keep_latest_lfu", prior=0.0, tuned=False)
    store = ByteMemoryStore(10_000)
    view = store.view()
    snapshot = {"api": "api.x.endpoint_0", "deprecated": False, "params": ["a"], "removed": False, "required": [],
                "version": 1}
    # Asked about once: worth keeping.
    list(agent.select(Step(0, {"checkpoint": 0, "queries": [["api.x.endpoint_0", "version", None]]}, {}), view))
    for t, version in ((1, 1), (2, 2)):
        for action in agent.select(Step(t, {**snapshot, "version": version}, {}), view):
            store.execute(action, t)
    assert [item.t for item in store.items()] == [2]


def test_lfu_keeps_the_endpoint_asked_about_most_when_one_fits():
    agent = make_agent("keep_latest_lfu", prior=0.0, size_aware=False, tuned=False)
    store = ByteMemoryStore(200)
    view = store.view()
    snapshot = {"deprecated": False, "params": ["a"], "removed": False, "required": [], "version": 1}
    asked = [["hot", "version", None]] * 3 + [["cold", "version", None]]
    list(agent.select(Step(0, {"checkpoint": 0, "queries": asked}, {}), view))
    for t, api in ((1, "cold"), (2, "hot"), (3, "cold")):
        for action in agent.select(Step(t, {**snapshot, "api": api}, {}), view):
            store.execute(action, t)
    assert [item.api for item in store.items()] == ["hot"]


def test_migration_values_a_breaking_change_by_its_traffic_and_its_familys_earlier_bursts():
    agent = make_agent("keep_latest_migration", decay=0.5, migration_weight=1.0, lags=3, prior=0.0, tuned=False)
    view = ByteMemoryStore(10_000).view()
    v1 = {"deprecated": False, "params": ["a", "b"], "removed": False, "required": [], "version": 1}
    v2 = {**v1, "params": ["a"], "version": 2}  # a parameter removed: breaking
    t = 0

    def show(api, snapshot, traffic):
        nonlocal t
        list(agent.select(Step(t, {**snapshot, "api": api}, {"traffic": traffic}), view))
        t += 1

    def checkpoint(asked):
        nonlocal t
        list(agent.select(Step(t, {"checkpoint": t, "queries": [[api, "version", None] for api in asked]}, {}), view))
        t += 1

    for api in ("api.pay.one", "api.pay.two", "api.pay.three", "api.misc.four"):
        show(api, v1, 4)
    show("api.pay.one", v2, 4)  # breaks; its family's migration comes one checkpoint later
    checkpoint([])
    checkpoint(["api.pay.one"] * 20)
    checkpoint([])
    checkpoint([])
    assert agent.value("api.pay.two") == agent.value("api.misc.four") == 0.0  # nothing broke there
    show("api.pay.two", v2, 4)
    show("api.misc.four", v2, 4)
    # pay's breaking change drew 20 queries per unit of the endpoint's mean traffic (shrunk:
    # (4 + 4 + 0.5) / 3) at the second checkpoint after it; misc's have drawn nothing yet.
    assert agent.value("api.misc.four") == 0.0
    assert agent.value("api.pay.two") > 0.0
    ahead = [0.0, 20 / ((4 + 4 + 0.5) / 3), 0.0]
    expected = ((4 + 4 + 0.5) / 3) * max(ahead[0], sum(ahead[:2]) / 2, sum(ahead) / 3)
    assert agent.value("api.pay.two") == pytest.approx(expected)


def test_lru_always_admits_and_evicts_the_least_recently_asked():
    agent = make_agent("keep_latest_lru", tuned=False)
    store = ByteMemoryStore(200)
    view = store.view()
    snapshot = {"deprecated": False, "params": ["a"], "removed": False, "required": [], "version": 1}
    for t, api in ((0, "a"), (2, "b")):
        for action in agent.select(Step(t, {**snapshot, "api": api}, {}), view):
            store.execute(action, t)
        if t == 0:
            list(agent.select(Step(1, {"checkpoint": 0, "queries": [["a", "version", None]]}, {}), view))
    assert [item.api for item in store.items()] == ["b"]


def test_the_tuned_parameters_of_the_tier_and_budget_are_taken_unless_tuned_is_false(monkeypatch):
    table = {"keep_latest_lfu": {"queries_medium": {"1024": {"params": {"decay": 0.5, "size_aware": False,
                                                                          "prior": 0.0}, "accuracy": 0.1}}}}
    monkeypatch.setattr(keeper_params, "tuned_table", lambda: table)
    episode = generate_query_episode(CONFIG, 2, 0)
    for tuned, budget, decay in ((True, 1024, 0.5), (True, 2048, 0.9), (False, 1024, 0.9)):
        agent = make_agent("keep_latest_lfu", decay=0.9, tuned=tuned)
        run_episode(agent, episode, budget)
        assert agent.decay == decay
    assert make_agent("keep_latest_lfu").params() == {"decay": 0.8, "size_aware": True, "prior": 0.01}


def test_the_shipped_table_names_known_keepers_tiers_and_parameters():
    from agents.scripted.keeper_tuning import GRIDS
    from agents.scripted.keeper_tuning import KEEPERS as TUNABLE
    from wpb_gym.episodes.generators.queries import QUERY_REGIMES

    for keeper, tiers in keeper_params.tuned_table().items():
        assert keeper in TUNABLE
        for tier, budgets in tiers.items():
            assert tier in QUERY_REGIMES or tier.startswith("real_queries:")
            for budget, entry in budgets.items():
                assert int(budget) > 0 and 0 <= entry["accuracy"] <= 1
                assert set(entry["params"]) == set(TUNABLE[keeper]._param_names)
                assert all(value in GRIDS[name] for name, value in entry["params"].items())


@pytest.mark.parametrize("name", KEEPERS)
def test_a_keeper_pickles_mid_episode_and_plays_on_the_same(name):
    import pickle

    episode = generate_query_episode(CONFIG, 3, 0)
    played = make_agent(name)
    run_episode(played, episode, 4096)
    copy = pickle.loads(pickle.dumps(played))
    assert copy.params() == played.params()
    first = run_episode(make_agent(name), episode, 4096, isolate=True).queries
    second = run_episode(make_agent(name), episode, 4096).queries
    assert first == second


def test_migrations_cached_family_pull_plays_as_the_literal_formula():
    from agents.scripted.keep_latest import KeepLatestMigration
    from wpb_gym.episodes.generators.queries import generate_query_episode, query_config
    from wpb_gym.evaluation.runner import run_episode

    class Literal(KeepLatestMigration):
        def family_pull(self, family, since):  # recomputed at every call, as the docstring states it
            ahead = self._drawn[family][since:] / np.maximum(self._measured[family][since:], 1.0)
            return float(max(sum(ahead[: k + 1]) / (k + 1) for k in range(ahead.size)))

    episode = generate_query_episode(query_config("queries_medium", endpoints=120, families=6, length=120 + 30 * 20,
                                                  checkpoint_interval=20), 3, 0)
    for budget in (2_000, 20_000):
        params = {"decay": 0.5, "migration_weight": 3.0, "lags": 4, "prior": 0.0, "tuned": False}
        fast = run_episode(KeepLatestMigration(**params), episode, budget, "unprivileged")
        plain = run_episode(Literal(**params), episode, budget, "unprivileged")
        assert fast.actions == plain.actions and fast.queries.correct == plain.queries.correct
        assert fast.queries.correct > 0
