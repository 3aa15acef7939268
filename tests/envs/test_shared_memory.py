"""SharedMemoryEnv: PettingZoo's own API tests, the rules of a shared memory (golden), scores
against their definitions, and the scripted policies and single-agent view."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test

from agents.scripted.shared_memory import POLICIES, play
from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.types import Episode, Step
from wpb_gym.envs.shared_memory import (
    EXPIRE_OLDEST,
    N_ACTIONS,
    SKIP,
    WRITE,
    WRITE_EXPIRING_LARGER,
    WRITE_MAKING_ROOM,
    SharedMemoryEnv,
    SingleAgentView,
    env,
    f1_score,
    family_agent,
    parallel_env,
)
from wpb_gym.envs.observation.stream_table import kind_and_family


@pytest.mark.parametrize("agents", [1, 2, 3])
def test_pettingzoos_parallel_and_aec_api_tests_pass(agents):
    parallel_api_test(parallel_env(regime="contract_mix", length=120, num_agents=agents), num_cycles=300)
    api_test(env(regime="contract_mix", length=120, num_agents=agents), num_cycles=300)
    parallel_seed_test(lambda: parallel_env(regime="reverts", length=120, num_agents=agents), num_cycles=100)


def _episode(observations, critical=()):
    steps = [Step(t, obs, {"mode": "test"}) for t, obs in enumerate(observations)]
    return Episode(steps=steps, labels={"critical_steps": list(critical), "utility_by_step": {t: 1.0 for t in range(len(steps))},
                                        "mode": "test"})


def _api(name, version=1, params=("x",)):
    return {"api": f"api.v{version}.{name}", "params": list(params), "required": [], "deprecated": False}


def _two_families():
    """Two endpoint names whose families interest agent_0 and agent_1."""
    names = [f"endpoint_{i}" for i in range(50)]
    by_agent = {}
    for name in names:
        by_agent.setdefault(family_agent(kind_and_family(_api(name))[1], 2), name)
    return by_agent[0], by_agent[1]


def test_a_step_two_agents_write_belongs_to_the_first_in_the_rotating_order():
    a, _ = _two_families()
    episode = _episode([_api(a), _api(a, 2)], critical=[0, 1])
    shared = SharedMemoryEnv(episodes=[episode], budget_bytes=10_000)
    shared.reset(seed=0)
    _, _, _, _, infos = shared.step({"agent_0": WRITE, "agent_1": WRITE})  # t = 0: agent_0 first
    assert infos["agent_0"]["accepted"] and not infos["agent_1"]["accepted"]
    assert infos["agent_1"]["reason"] == "timestep_occupied"
    _, _, _, _, infos = shared.step({"agent_0": WRITE, "agent_1": WRITE})  # t = 1: agent_1 first
    assert infos["agent_1"]["items"] == 1 and infos["agent_0"]["items"] == 1


def test_agents_expire_only_their_own_items_and_make_room_from_them():
    a, b = _two_families()
    wide = [f"p{i}" for i in range(40)]
    episode = _episode([_api(a), _api(b), _api(a, 2, wide), _api(b, 2, wide)], critical=[2, 3])
    small, big = estimate_bytes(episode.steps[0]), estimate_bytes(episode.steps[3])  # what a WRITE of each costs
    assert big >= 2 * small
    budget = big + small // 2  # two small items fit; a big one only in an otherwise empty memory
    shared = SharedMemoryEnv(episodes=[episode], budget_bytes=budget, mode="competitive")
    shared.reset(seed=0)
    shared.step({"agent_0": WRITE, "agent_1": SKIP})
    _, _, _, _, infos = shared.step({"agent_0": SKIP, "agent_1": WRITE})
    # t = 2: the big step does not fit, and agent_0's own item is not enough room: only its own
    # items may go.
    mask = infos["agent_0"]["action_mask"]
    assert (mask[WRITE], mask[WRITE_MAKING_ROOM], mask[EXPIRE_OLDEST]) == (0, 0, 1)
    shared.step({"agent_0": EXPIRE_OLDEST, "agent_1": SKIP})
    assert 0 not in shared.store and 1 in shared.store  # its own, not agent_1's
    # t = 3: agent_1 writes its family's next version, making room from its own (older) item.
    _, rewards, terminations, _, infos = shared.step({"agent_0": SKIP, "agent_1": WRITE_MAKING_ROOM})
    assert all(terminations.values()) and shared.agents == []
    assert set(shared.store.timesteps()) == {3}
    assert infos["agent_1"]["f1"] == rewards["agent_1"] == f1_score({3}, shared._labels["agent_1"]) > 0
    assert rewards["agent_0"] == 0.0


def _single(observations, critical=(), budget=10_000):
    shared = SharedMemoryEnv(episodes=[_episode(observations, critical)], budget_bytes=budget, num_agents=1)
    return shared


def _kept_by(policy, shared):
    obs, infos = shared.reset(seed=0)
    while shared.agents:
        obs, _, _, _, infos = shared.step({"agent_0": policy(obs["agent_0"], infos["agent_0"]["action_mask"])})
    return sorted(shared.store.timesteps())


@pytest.mark.parametrize("contracts, critical", [
    # A removed parameter, then the one before it removed: the first change stays, the second is written.
    ([("x", "y", "z"), ("x", "y"), ("x",), ("x", "y")], [1]),
    # A requirement added, removed, added again: the second addition is breaking, nothing is held to revert.
    ([(), ("r",), (), ("r",)], [1, 3]),
    ([("a", "b"), ("a",), ("a", "b"), ("a",)], [3]),
])
def test_own_breaking_alone_keeps_what_breaking_detector_keeps(contracts, critical):
    from agents.registry import make_agent
    from wpb_gym.evaluation.runner import run_episode

    observations = []
    for version, spec in enumerate(contracts, start=1):
        params = [p for p in spec if p != "r"] or ["x"]
        observations.append({"api": f"api.v{version}.e", "params": sorted(set(params) | {"r"}) if "r" in spec else params,
                             "required": ["r"] if "r" in spec else [], "deprecated": False})
    shared = _single(observations, critical)
    detector = run_episode(make_agent("breaking_detector"), shared.sampler.choose(np.random.default_rng(0), {})[0],
                           10_000, record_actions=False)
    assert _kept_by(POLICIES["own_breaking"], shared) == sorted(detector.store.timesteps())


def test_own_breaking_alone_matches_breaking_detector_on_generated_episodes():
    from agents.registry import make_agent
    from wpb_gym.evaluation.runner import run_episode

    for regime in ("reverts", "contract_mix"):
        shared = SharedMemoryEnv(regime=regime, budget_bytes=4096, num_agents=1, episode_seed=11, episode_order="cycle")
        for index in range(3):
            obs, infos = shared.reset(seed=11, options={"episode_index": index})
            episode = shared.episode
            while shared.agents:
                action = POLICIES["own_breaking"](obs["agent_0"], infos["agent_0"]["action_mask"])
                obs, _, _, _, infos = shared.step({"agent_0": action})
            detector = run_episode(make_agent("breaking_detector"), episode, 4096, record_actions=False)
            assert sorted(shared.store.timesteps()) == sorted(detector.store.timesteps()), (regime, index)


def test_scores_follow_their_definitions_and_stay_under_the_bounds():
    for mode in ("cooperative", "competitive"):
        shared = SharedMemoryEnv(regime="contract_mix", length=200, budget_bytes=4096, mode=mode, episode_seed=3,
                                 episode_order="cycle")
        for scores in play(shared, [POLICIES["own_breaking"], POLICIES["any_breaking"]], 4, 3):
            for agent, score in scores.items():
                assert 0.0 <= score["f1"] <= score["bound"] + 1e-12
        kept = set(shared.store.retained_timesteps())
        critical = set(shared.episode.critical_steps)
        final = shared.scores()
        if mode == "cooperative":
            assert final["agent_0"]["f1"] == final["agent_1"]["f1"] == f1_score(kept, critical)
        else:
            for i, agent in enumerate(shared.possible_agents):
                own = {t for t in kept if shared._owner[t] == i}
                assert final[agent]["f1"] == f1_score(own, shared._labels[agent])
        assert set().union(*shared._labels.values()) == critical  # every critical step is someone's


def test_the_mask_says_what_the_store_accepts_when_an_agent_acts_alone():
    shared = SharedMemoryEnv(regime="contract_mix", length=200, budget_bytes=3000, num_agents=1)
    rng = np.random.default_rng(0)
    obs, infos = shared.reset(seed=1)
    while shared.agents:
        mask = infos["agent_0"]["action_mask"]
        assert mask.shape == (N_ACTIONS,) and mask[SKIP] == 1
        action = int(rng.choice(np.flatnonzero(mask)))
        obs, _, _, _, infos = shared.step({"agent_0": action})
        if shared.agents or action != SKIP:
            assert infos["agent_0"]["accepted"], (action, infos["agent_0"]["reason"])
        assert shared.store.bytes_used <= 3000
    assert WRITE_EXPIRING_LARGER < N_ACTIONS


def test_the_single_agent_view_plays_the_others_and_serves_masks():
    view = SingleAgentView(SharedMemoryEnv(regime="contract_mix", length=120), "agent_0",
                           {"agent_1": POLICIES["own_breaking"]})
    obs, info = view.reset(seed=0)
    total, done = 0.0, False
    while not done:
        mask = view.action_masks()
        obs, reward, done, truncated, info = view.step(int(np.flatnonzero(mask)[-1]))
        total += reward
    assert total == info["f1"]
    with pytest.raises(ValueError, match="others: expected a policy for each of"):
        SingleAgentView(SharedMemoryEnv(), "agent_0", {})


@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "friendly"}, "mode must be one of cooperative, competitive"),
    ({"num_agents": 0}, "num_agents"),
    ({"render_mode": "human"}, "render_mode must be None or 'ansi'"),
    ({"budget_bytes": "ten"}, "budget_bytes"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SharedMemoryEnv(**kwargs)


def test_step_refuses_missing_or_bad_actions_before_applying_any():
    shared = SharedMemoryEnv(regime="contract_mix", length=120)
    with pytest.raises(RuntimeError, match="no episode is running"):
        shared.step({"agent_0": 0, "agent_1": 0})
    shared.reset(seed=0)
    with pytest.raises(ValueError, match="missing"):
        shared.step({"agent_0": 0})
    with pytest.raises(ValueError, match="Discrete"):
        shared.step({"agent_0": WRITE, "agent_1": 9})
    assert len(shared.store) == 0
    _, _, _, _, infos = shared.step({"agent_0": WRITE, "agent_1": SKIP})
    assert infos["agent_0"]["accepted"]
    with pytest.raises(TypeError, match="SharedMemoryEnv got an unexpected keyword argument 'num_agent'"):
        SharedMemoryEnv(num_agent=3)


def test_steps_out_of_order_are_refused():
    steps = [Step(t, _api("e", t + 1), {"mode": "test"}) for t in (0, 1, 5)]
    shared = SharedMemoryEnv(episodes=[Episode(steps=steps, labels={"critical_steps": [], "mode": "test",
                                                                     "utility_by_step": {}})])
    with pytest.raises(ValueError, match="step 2 says t=5"):
        shared.reset(seed=0)


@pytest.mark.parametrize("mode", ["cooperative", "competitive"])
def test_dense_rewards_add_up_to_the_final_f1(mode):
    dense = SharedMemoryEnv(regime="contract_mix", length=200, budget_bytes=4096, mode=mode)
    sparse = SharedMemoryEnv(regime="contract_mix", length=200, budget_bytes=4096, mode=mode, dense_reward=False)
    policies = [POLICIES["own_breaking"], POLICIES["any_breaking"]]
    for shared in (dense, sparse):
        obs, infos = shared.reset(seed=4)
        totals = dict.fromkeys(shared.possible_agents, 0.0)
        paid_before_end = 0.0
        while shared.agents:
            actions = {a: policies[k](obs[a], infos[a]["action_mask"]) for k, a in enumerate(shared.possible_agents)}
            obs, rewards, terminations, _, infos = shared.step(actions)
            for agent, reward in rewards.items():
                totals[agent] += reward
                paid_before_end += 0 if all(terminations.values()) else abs(reward)
        for agent in shared.possible_agents:
            assert totals[agent] == pytest.approx(infos[agent]["f1"])
        assert (paid_before_end > 0) == shared.dense_reward


def test_without_pettingzoo_the_error_names_the_extra(monkeypatch):
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "pettingzoo", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "wpb_gym.envs.shared_memory")
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'writepolicybench-gym\[multiagent\]'"):
        importlib.import_module("wpb_gym.envs.shared_memory")
