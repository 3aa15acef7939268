"""The bandit learners (``agents.learners.bandits``): they learn from env rewards, and only from them.

Training runs through ``agents.env_adapter.run_agent_in_env`` in ``WritePolicyBench-v0`` with
dense rewards (generated set ``episode_seed=0``); held-out scores come from the offline
evaluator on another generated set (seed 1000). Every seed is pinned.
"""

from __future__ import annotations

import json
import math
import re

import gymnasium as gym
import pytest

from agents.env_adapter import run_agent_in_env
from agents.learners.training import held_out_f1, make_training_env, train_learner
from agents.learners.bandits import (
    ARMS,
    LEARNERS,
    BanditLearner,
    BanditUCBAgent,
    EpsilonGreedyAgent,
    eviction_plan,
    make_learner,
)
from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.policy import EpisodeOutcome
from wpb_gym.core.store import ByteMemoryStore
from wpb_gym.core.tracks import policy_episode
from wpb_gym.core.types import Episode, MemoryAction, Step
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.evaluation.runner import run_episode

NAMES = tuple(LEARNERS)  # ("epsilon_greedy", "bandit_ucb")
LEARNING_REGIMES = ("default", "burst_redundancy")
ALL_REGIMES = ("default", "burst_drift", "redundancy", "burst_redundancy")
BUDGET = 10240
TRAIN_EPISODES = 30
HELD_OUT = 12
HELD_OUT_SEED = 1000
MARGIN = 0.25


@pytest.fixture(scope="module")
def trained():
    """One trained learner per (name, regime)."""
    return {
        (name, regime): train_learner(name, TRAIN_EPISODES, regime=regime, budget_bytes=BUDGET, seed=0)[0]
        for name in NAMES
        for regime in LEARNING_REGIMES
    }


def random_baseline():
    """The ``random`` baseline: WRITE with probability 0.1 if the step fits."""
    from agents.registry import make_agent

    agent = make_agent("random")
    assert agent.params()["p"] == 0.1
    return agent


def action_log(agent, episode, budget=BUDGET):
    run = run_episode(agent, episode, budget, "unprivileged")
    return [(a.t, a.action.action, a.action.target_t, a.decision.accepted) for a in run.actions], run


def episodes(regime, n, seed=7, length=200):
    config = make_config(regime, length=length)
    return [generate_episode(config, seed=seed, index=i) for i in range(n)]


# ---------------------------------------------------------------------------- learning
@pytest.mark.parametrize("regime", LEARNING_REGIMES)
@pytest.mark.parametrize("name", NAMES)
def test_trained_learners_beat_their_untrained_selves_and_random_on_held_out_episodes(trained, name, regime):
    def score(agent):
        return held_out_f1(agent, regime, HELD_OUT, seed=HELD_OUT_SEED, budget_bytes=BUDGET)

    learned = score(trained[name, regime])
    untrained = score(make_learner(name))  # evaluation mode: greedy on empty tables
    exploring = score(make_learner(name).train())  # training mode, but offline: nothing to learn from
    random_f1 = score(random_baseline())
    assert untrained == 0.0
    assert learned > max(untrained, exploring, random_f1) + MARGIN, (learned, untrained, exploring, random_f1)
    assert learned > 0.6


def test_training_learns_to_write_changed_snapshots_and_skip_unchanged_ones(trained):
    for (name, regime), agent in trained.items():
        table = agent.policy_table()
        assert 5 <= len(table) <= 100, (name, regime, len(table))  # a small discrete context space
        for ctx, arm in table.items():
            if ctx[1] == "same" and sum(agent.counts[ctx]) >= 100:
                assert arm != "WRITE", (name, regime, ctx)
            if ctx[1].startswith("changed") and agent.counts[ctx][1] >= 20:
                assert arm == "WRITE", (name, regime, ctx)


def test_fit_returns_per_episode_metrics_and_leaves_eval_mode():
    agent = EpsilonGreedyAgent(seed=3)
    env = make_training_env("default", length=60)
    history = agent.fit(env, 4, seed=5)
    assert len(history) == 4 and all("f1" in row for row in history)
    assert agent.training is False and agent.episodes_trained == 4 and agent.updates == 4 * 60


def test_fit_needs_dense_rewards():
    env = gym.make("WritePolicyBench-v0", length=40, dense_reward=False)
    with pytest.raises(ValueError, match="dense_reward=True"):
        BanditUCBAgent().fit(env, 1)


# ---------------------------------------------------------------------------- reproducibility
@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_training(name):
    def train(agent_seed):
        agent = make_learner(name, seed=agent_seed)
        history = agent.fit(make_training_env("burst_redundancy", length=80), 8, seed=2)
        return history, agent.state_dict()

    first = train(4)
    assert first == train(4)
    assert first[1]["table"] and first[1]["episodes_trained"] == 8
    a, history_a = train_learner(name, 5, regime="burst_drift", length=80, seed=1)
    b, history_b = train_learner(name, 5, regime="burst_drift", length=80, seed=1)
    assert history_a == history_b and a.state_dict() == b.state_dict()


def test_exploration_depends_on_the_seed():
    a = EpsilonGreedyAgent(epsilon=0.5, seed=0).train()
    b = EpsilonGreedyAgent(epsilon=0.5, seed=1).train()
    episode = episodes("default", 1)[0]
    assert action_log(a, episode)[0] != action_log(b, episode)[0]


@pytest.mark.parametrize("name", NAMES)
def test_eval_mode_is_deterministic_and_learns_nothing(trained, name):
    agent = trained[name, "default"]
    before = json.dumps(agent.state_dict())
    for episode in episodes("burst_drift", 2):
        first = action_log(agent, episode)[0]
        assert action_log(agent, episode)[0] == first
        assert action_log(agent.from_state(json.loads(before)), episode)[0] == first
    env = make_training_env("default", length=80)
    runs = [run_agent_in_env(agent, env, options={"episode_index": 3}) for _ in range(2)]
    assert runs[0].metrics == runs[1].metrics
    assert json.dumps(agent.state_dict()) == before  # env rewards were given, but eval mode ignores them


@pytest.mark.parametrize("name", NAMES)
def test_no_learning_without_rewards(name):
    agent = make_learner(name, seed=2).train()
    for episode in episodes("default", 2, length=80):
        run_episode(agent, episode, BUDGET, "unprivileged")  # the offline evaluator: rewards=None
    assert agent.counts == {} and agent.means == {} and agent.updates == 0
    assert agent.episodes_trained == 2  # it explored, with a fresh random stream per episode
    agent.start_episode(None)
    step = Step(0, {"api": "api.v1.endpoint_0", "params": ["a"], "version": 1, "deprecated": False}, {})
    list(agent.select(step, ByteMemoryStore(BUDGET).view()))
    agent.end_episode(EpisodeOutcome(metrics={}, rewards=None))
    assert agent.counts == {} and agent.updates == 0
    agent.start_episode(None)
    list(agent.select(step, ByteMemoryStore(BUDGET).view()))
    agent.end_episode(EpisodeOutcome(metrics={}, rewards=(0.25,)))
    assert agent.updates == 1 and sum(agent.counts[ctx][a] for ctx in agent.counts for a in range(len(ARMS))) == 1


def test_only_the_reward_of_the_step_updates_its_arm():
    agent = BanditUCBAgent().train()
    store = ByteMemoryStore(BUDGET)
    steps = [Step(t, {"api": "api.v1.endpoint_0", "params": ["a"], "version": 1}, {}) for t in range(3)]
    agent.start_episode(None)
    chosen = []
    for step in steps:
        for action in agent.select(step, store.view()):
            store.execute(action, step.t)
        chosen.append(agent._choices[-1])
    agent.end_episode(EpisodeOutcome(metrics={}, rewards=(0.5, -0.25, 1.0)))
    # t=0 is "new"; t=1 and t=2 are "same" in one context: UCB tries SKIP, then WRITE.
    assert chosen[0][1][1] == "new" and chosen[1][1] == chosen[2][1]
    assert [arm for _, _, arm in chosen] == [0, 0, 1]
    same = chosen[1][1]
    assert agent.counts[same] == [1, 1, 0] and agent.means[same] == [-0.25, 1.0, 0.0]
    assert agent.means[chosen[0][1]] == [0.5, 0.0, 0.0]


def test_labels_are_never_read(trained):
    """Even a context that carries the episode and its labels (the evaluator gives them to
    oracle agents only) changes nothing a learner does."""
    from wpb_gym.core.policy import EpisodeContext

    agent = trained["bandit_ucb", "burst_redundancy"]
    episode = episodes("burst_redundancy", 1)[0]
    relabelled = Episode(steps=episode.steps, labels={"critical_steps": [0, 1, 2], "utility_by_step": {0: 9.0}})

    def actions(context_episode):
        store = ByteMemoryStore(BUDGET)
        agent.start_episode(EpisodeContext(len(episode), BUDGET, "unprivileged", episode=context_episode))
        log = []
        for step in policy_episode(episode, "unprivileged").steps:
            for action in agent.select(step, store.view()):
                log.append((step.t, action.action, action.target_t, store.apply(action, step.t)))
        return log

    assert actions(None) == actions(episode) == actions(relabelled)
    assert any(kind == "WRITE" for _, kind, _, _ in actions(None))  # a trained agent that acts


# ---------------------------------------------------------------------------- the hard rule
PER_STEP = re.compile(r"^(EXPIRE )*((WRITE|MERGE) )?$")


@pytest.mark.parametrize("regime", ALL_REGIMES)
def test_expires_first_then_at_most_one_write_last(trained, regime):
    agents = [make_learner(name, seed=1).train() for name in NAMES]
    agents += [EpsilonGreedyAgent(epsilon=1.0, seed=2).train()]  # always exploring
    agents += [trained[name, "default"] for name in NAMES]
    for budget in (700, 2048, BUDGET):
        for episode in episodes(regime, 2, length=150):
            for agent in agents:
                log, run = action_log(agent, episode, budget)
                assert all(accepted for *_, accepted in log), (agent.name, regime, budget)  # eviction is planned
                per_t: dict[int, str] = {}
                for t, kind, _, _ in log:
                    per_t[t] = per_t.get(t, "") + kind + " "
                for t, kinds in per_t.items():
                    assert PER_STEP.match(kinds), (agent.name, regime, budget, t, kinds)
                    assert "EXPIRE" not in kinds or "WRITE" in kinds  # evictions only make room for a write
                assert run.store.bytes_used <= budget
    # The env raises if anything follows a WRITE/MERGE in a timestep.
    env = make_training_env(regime, budget_bytes=2048, length=120)
    for agent in agents[:3]:
        run_agent_in_env(agent, env, seed=0)


def test_a_step_that_cannot_fit_in_empty_memory_evicts_nothing():
    agent = EpsilonGreedyAgent(epsilon=1.0, seed=0).train()
    episode = episodes("default", 1, length=60)[0]
    smallest = min(estimate_bytes(s) for s in policy_episode(episode, "unprivileged").steps)
    log, run = action_log(agent, episode, smallest - 1)
    assert log == [] and run.store.bytes_used == 0
    store = ByteMemoryStore(500)
    for t in (0, 1):
        assert store.execute(MemoryAction.write(Step(t, {"api": f"e{t}", "v": "a" * 150}, {})), t).accepted
    view = store.view()
    assert 0 < view.remaining() < 500
    assert eviction_plan(view, 501, 2) is None
    assert eviction_plan(view, view.remaining(), 2) == []
    assert eviction_plan(view, view.remaining() + 1, 2) == [0]
    assert eviction_plan(view, 500, 2) == [0, 1]


def test_merge_is_an_arm_when_the_store_accepts_it():
    # Same api, changed params, no version bump: a MERGE into the stored snapshot is valid.
    steps = [Step(t, {"api": "api.v1.e", "params": [f"p{k}" for k in range(t + 1)]}, {}) for t in range(6)]
    episode = Episode(steps=steps, labels={"critical_steps": [2, 4], "utility_by_step": {}})
    agent = EpsilonGreedyAgent(epsilon=1.0, seed=0).train()
    kinds = set()
    for _ in range(20):
        log, _ = action_log(agent, episode)
        assert all(accepted for *_, accepted in log)
        kinds |= {kind for _, kind, _, _ in log}
    assert "MERGE" in kinds
    greedy = EpsilonGreedyAgent()
    ctx = ("endpoint", "changed:a", 1, 1, 2)
    greedy.counts[ctx] = [5, 5, 5]
    greedy.means[ctx] = [-0.1, 0.1, 0.3]
    store = ByteMemoryStore(BUDGET)
    greedy.start_episode(None)
    assert list(greedy.select(steps[0], store.view())) == []  # "new": no data, SKIP
    store.execute(MemoryAction.write(steps[0]), 0)
    actions = list(greedy.select(steps[1], store.view()))
    assert [(a.action, a.target_t) for a in actions] == [("MERGE", 0)]
    other_api = Step(2, {"api": "api.v1.f", "params": ["q"]}, {})
    assert list(greedy.select(other_api, store.view())) == []


# ---------------------------------------------------------------------------- state, params, registry
@pytest.mark.parametrize("name", NAMES)
def test_save_load_round_trip_acts_identically(trained, tmp_path, name):
    agent = trained[name, "burst_redundancy"]
    path = agent.save(tmp_path / f"{name}.json")
    state = json.loads(path.read_text(encoding="utf-8"))
    assert state["agent"] == name and state["params"] == agent.params() and state["table"]
    loaded = BanditLearner.load(path)
    assert type(loaded) is type(agent) and loaded.state_dict() == agent.state_dict()
    assert type(agent).load(path).state_dict() == agent.state_dict()
    for regime in ALL_REGIMES:
        for episode in episodes(regime, 2):
            assert action_log(loaded, episode)[0] == action_log(agent, episode)[0]
    # In training mode too: same exploration stream, same updates.
    copies = [BanditLearner.load(path).train(), BanditLearner.load(path).train()]
    copies[0].save(tmp_path / "again.json")
    copies[0] = BanditLearner.load(tmp_path / "again.json").train()
    env = make_training_env("default", length=80)
    runs = [run_agent_in_env(c, env, seed=9) for c in copies]
    assert runs[0].metrics == runs[1].metrics and copies[0].state_dict() == copies[1].state_dict()
    assert copies[0].state_dict() != agent.state_dict()  # they learned from that episode


def test_load_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.json"
    with pytest.raises(FileNotFoundError, match="missing.json"):
        BanditLearner.load(missing)
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="corrupt.json.*invalid JSON"):
        BanditLearner.load(corrupt)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something-else"}), encoding="utf-8")
    with pytest.raises(ValueError, match="other.json"):
        BanditLearner.load(other)
    eps = EpsilonGreedyAgent(epsilon=0.3).save(tmp_path / "eps.json")
    with pytest.raises(ValueError, match="eps.json.*'epsilon_greedy' learner, not 'bandit_ucb'"):
        BanditUCBAgent.load(eps)
    assert EpsilonGreedyAgent.load(eps).epsilon == 0.3
    state = json.loads(eps.read_text(encoding="utf-8"))
    state["table"] = [{"context": ["endpoint", "new"], "counts": [1, 0, 0], "means": [0.0, 0.0, 0.0]}]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(state), encoding="utf-8")
    with pytest.raises(ValueError, match="bad.json.*context"):
        BanditLearner.load(bad)


def test_params_names_and_registry():
    eps = EpsilonGreedyAgent(epsilon=0.2, seed=5, budget_buckets=4)
    assert eps.params() == {"epsilon": 0.2, "seed": 5, "budget_buckets": 4}
    assert EpsilonGreedyAgent(**eps.params()).params() == eps.params()
    ucb = BanditUCBAgent()
    assert ucb.params() == {"c": math.sqrt(2), "seed": 0, "budget_buckets": 3}
    for cls, alias in ((EpsilonGreedyAgent, "EpsilonGreedy"), (BanditUCBAgent, "BanditUCB")):
        assert cls.kind == "learner" and cls.track == "unprivileged" and alias in cls.aliases
        assert cls.description and "\n" not in cls.description
        assert type(make_learner(alias)) is cls and type(make_learner(cls.name)) is cls
    with pytest.raises(ValueError, match="unknown learner"):
        make_learner("q_learning")
    for bad in ({"epsilon": 1.5}, {"seed": -1}, {"budget_buckets": 0}):
        with pytest.raises(ValueError):
            EpsilonGreedyAgent(**bad)
    with pytest.raises(ValueError):
        BanditUCBAgent(c=-1.0)
    from agents.registry import agent_entry, make_agent

    for alias, name in (("EpsilonGreedy", "epsilon_greedy"), ("BanditUCB", "bandit_ucb")):
        assert agent_entry(alias).name == name and agent_entry(name).kind == "learner"
        assert make_agent(alias, seed=3).params()["seed"] == 3


@pytest.mark.parametrize("name", NAMES)
def test_greedy_choices_pool_the_budget_buckets_where_the_context_has_no_data(name):
    # A learner that explored with a full memory meets an empty one only when it evaluates:
    # without pooling, every step of the empty memory's contexts was skipped (F1 0).
    learner = make_learner(name)
    full = ("endpoint", "changed:vr", 0, 1, 0)
    for _ in range(3):
        learner._update(full, 0, 0.0)
        learner._update(full, 1, 0.04)
    empty = (*full[:-1], 2)
    assert learner._greedy(empty, (True, True, False)) == 1
    assert learner._greedy(empty, (True, False, False)) == 0  # WRITE not available
    learner._update(empty, 1, -0.5)  # the context's own data wins where it has some
    assert learner._greedy(empty, (True, True, False)) == 0
    assert learner._greedy(("endpoint", "changed:va", 0, 1, 2), (True, True, False)) == 0  # nothing to borrow
