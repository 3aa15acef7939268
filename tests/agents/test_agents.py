"""Every agent runs identically through the offline evaluator and through the environment.

Like MiniGrid's tests over every env id, the main test goes over every registered agent:
same episode, same budget, same track, the metrics must be equal whether the agent is driven
by ``wpb_gym.evaluation.runner.run_episode``, by ``agents.env_adapter.run_agent_in_env`` or by SB3's
``evaluate_policy`` through the predictor protocol.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from agents.base import AGENT_KINDS, MODEL_KINDS, Agent
from agents.env_adapter import EnvDriver, run_agent_in_env
from agents.registry import agent_entry, list_agents, make_agent, registry_table
from wpb_gym.cli import main as wpb_main
from wpb_gym.core.types import Episode, MemoryAction, Step
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.evaluation.runner import run_episode

REGIMES = ("default", "burst_redundancy")
BUDGETS = (1024, 10240)
# The external agent runs the JavaScript example (where Node.js is installed): another program,
# spoken to over its pipes, held to the same checks as every agent.
EXTERNAL = {"path": str(Path(__file__).resolve().parents[2] / "agents" / "external" / "examples" / "last_kb.js")}
ENTRIES = [e for e in list_agents() if e.kind not in MODEL_KINDS and (e.kind != "external" or shutil.which("node"))]


def make(entry):
    return make_agent(entry.name, **(EXTERNAL if entry.kind == "external" else {}))


def run_track(entry) -> str:
    return "unprivileged" if entry.track == "unprivileged" else "privileged"


def episodes(regime: str, n: int = 2, length: int = 120):
    config = make_config(regime, length=length)
    return [generate_episode(config, seed=3, index=i) for i in range(n)]


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_every_agent_gets_the_same_metrics_offline_and_in_the_env(entry):
    track = run_track(entry)
    for regime in REGIMES:
        eps = episodes(regime)
        for budget in BUDGETS:
            env = WritePolicyBenchEnv(episodes=eps, budget_bytes=budget, track=track, episode_order="cycle")
            for i, episode in enumerate(eps):
                offline = run_episode(make(entry), episode, budget, track)
                in_env = run_agent_in_env(make(entry), env, options={"episode_index": i})
                assert env.episode is episode
                assert in_env.metrics == offline.metrics.as_row(), (entry.name, regime, budget, i)
                assert env.store.timesteps() == offline.store.timesteps()
                assert env.store.retained_timesteps() == offline.store.retained_timesteps()


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_every_agent_is_an_sb3_predictor(entry):
    """``evaluate_policy`` (SB3 and sb3-contrib) accepts an attached agent; each episode's return
    (the F1 reward) is the agent's offline F1, on one env and on a DummyVecEnv of two."""
    from sb3_contrib.common.maskable.evaluation import evaluate_policy as maskable_evaluate
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    track = run_track(entry)
    eps = episodes("default", n=2, length=60)
    expected = sorted(run_episode(make(entry), ep, 10240, track).metrics.f1 for ep in eps)

    def make_env():
        # No cost per EXPIRE: the return is then exactly the F1.
        return Monitor(
            gym.make("WritePolicyBench-v0", episodes=eps, track=track, episode_order="cycle", expire_cost=0.0)
        )

    env = make_env()
    returns, _ = evaluate_policy(
        make(entry).attach(env), env, n_eval_episodes=2, return_episode_rewards=True
    )
    assert sorted(returns) == pytest.approx(expected, abs=2e-6)  # Monitor rounds returns to 6 decimals
    vec = DummyVecEnv([make_env, make_env])
    agent = make(entry).attach(vec)
    returns, _ = maskable_evaluate(agent, vec, n_eval_episodes=2, return_episode_rewards=True, use_masking=False)
    assert all(any(r == pytest.approx(e, abs=2e-6) for e in expected) for r in returns)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.track != "unprivileged"], ids=lambda e: e.name)
def test_privileged_and_oracle_agents_refuse_the_unprivileged_track(entry):
    episode = episodes("default", n=1, length=20)[0]
    with pytest.raises(ValueError, match="cannot run on the unprivileged track"):
        run_episode(make_agent(entry.name), episode, 1024, "unprivileged")
    env = WritePolicyBenchEnv(episodes=[episode])
    with pytest.raises(ValueError, match="cannot run on the unprivileged track"):
        run_agent_in_env(make_agent(entry.name), env)
    with pytest.raises(ValueError, match="cannot run on the unprivileged track"):
        make_agent(entry.name).attach(env)


# ---------------------------------------------------------------------------- the driver's rules
class ScriptAgent(Agent):
    """Yields what a script says for each timestep."""

    name = "script"

    def __init__(self, script):
        self.script = script

    def select(self, step, store):
        for make in self.script.get(step.t, ()):
            yield make(step, store)


def tiny_episode(n: int = 4, size: int = 10) -> Episode:
    steps = [Step(t, {"api": f"e{t}", "body": "x" * size}, {"mode": "m"}) for t in range(n)]
    return Episode(steps=steps, labels={"critical_steps": [1], "utility_by_step": {t: 1 for t in range(n)}})


def write(step, store):
    return MemoryAction.write(step)


def test_an_action_after_the_write_is_an_error_in_the_env():
    agent = ScriptAgent({0: [write, lambda step, store: MemoryAction.skip()]})
    run_episode(agent, tiny_episode(), 1000)  # the offline evaluator allows it
    with pytest.raises(RuntimeError, match="must come last"):
        run_agent_in_env(agent, WritePolicyBenchEnv(episodes=[tiny_episode()], budget_bytes=1000))


def test_rejected_actions_are_dropped_as_the_store_drops_them():
    # WRITE over budget, EXPIRE of nothing, MERGE across endpoints: all rejected, then a valid WRITE.
    agent = ScriptAgent(
        {
            0: [write],
            1: [
                lambda step, store: MemoryAction.expire(0 if 0 not in store else 3),
                lambda step, store: MemoryAction.merge(step, 0),
                lambda step, store: MemoryAction.expire(7),
                write,
            ],
        }
    )
    episode = tiny_episode()
    offline = run_episode(agent, episode, 10_000)
    env = WritePolicyBenchEnv(episodes=[episode], budget_bytes=10_000)
    in_env = run_agent_in_env(agent, env)
    assert in_env.metrics == offline.metrics.as_row()
    assert env.store.timesteps() == offline.store.timesteps() == (0, 1)


def test_an_item_the_slots_do_not_show_can_still_be_expired():
    # One slot: the newest item is not shown when the current step has no family in memory.
    script = {t: [write] for t in range(3)}
    script[3] = [lambda step, store: MemoryAction.expire(1), write]
    episode = tiny_episode()
    env = WritePolicyBenchEnv(episodes=[episode], budget_bytes=10_000, slots=1)
    in_env = run_agent_in_env(ScriptAgent(script), env)
    offline = run_episode(ScriptAgent(script), episode, 10_000)
    assert env.store.timesteps() == offline.store.timesteps() == (0, 2, 3)
    assert in_env.metrics == offline.metrics.as_row()


def test_expose_item_shows_the_item_and_updates_the_mask():
    env = WritePolicyBenchEnv(episodes=[tiny_episode()], budget_bytes=10_000, slots=1)
    env.reset(seed=0)
    env.step(1)
    env.step(1)
    assert env.slot_timesteps == (0,)
    assert env.expose_item(1) == 0 and env.slot_timesteps == (1,)
    assert env.action_masks()[2 + env.K]
    with pytest.raises(ValueError, match="no item at timestep 3"):
        env.expose_item(3)


def test_driver_refuses_an_expire_cap_and_non_actions():
    with pytest.raises(ValueError, match="max_expires_per_step=None"):
        EnvDriver(ScriptAgent({}), WritePolicyBenchEnv(episodes=[tiny_episode()], max_expires_per_step=1))
    agent = ScriptAgent({0: [lambda step, store: "WRITE"]})
    with pytest.raises(TypeError, match="must yield MemoryAction"):
        run_agent_in_env(agent, WritePolicyBenchEnv(episodes=[tiny_episode()]))
    with pytest.raises(TypeError, match="must yield MemoryAction"):
        run_episode(agent, tiny_episode(), 1000)


def test_predict_needs_attach():
    with pytest.raises(RuntimeError, match="attach"):
        make_agent("no_mem").predict(np.zeros(3))


# ---------------------------------------------------------------------------- registry
def test_registry_names_aliases_and_parameters():
    names = [e.name for e in list_agents()]
    for required in (
        "no_mem",
        "fifo_store_all",
        "uniform_sample",
        "last_kb",
        "random",
        "priority_threshold",
        "priority_greedy",
        "merge_aggressive",
        "expire_oldest",
        "utility_greedy",
        "oracle_optimal",
        "epsilon_greedy",
        "bandit_ucb",
        "sb3",
        "rllib",
        "policy",
    ):
        assert required in names
    for alias, name in {
        "NeverWrite": "no_mem",
        "AlwaysWrite": "fifo_store_all",
        "UniformSample": "uniform_sample",
        "RecencyBias": "last_kb",
        "RandomPolicy": "random",
        "PriorityThreshold": "priority_threshold",
        "UtilityGreedy": "utility_greedy",
        "MergeAggressive": "merge_aggressive",
        "ExpireOldest": "expire_oldest",
        "OracleOptimal": "oracle_optimal",
        "EpsilonGreedy": "epsilon_greedy",
        "BanditUCB": "bandit_ucb",
    }.items():
        assert agent_entry(alias).name == name
        assert make_agent(alias).name == name
    assert {e.kind for e in list_agents()} <= set(AGENT_KINDS)
    assert {e.name for e in list_agents() if e.track == "oracle"} >= {"utility_greedy", "oracle_optimal"}
    assert all(e.kind == "oracle" for e in list_agents() if e.track == "oracle")
    assert agent_entry("uniform_sample").defaults["N"] == 10
    assert agent_entry("priority_threshold").defaults["tau"] == 0.5
    with pytest.raises(KeyError, match="known agents: .*last_kb"):
        make_agent("lru")
    with pytest.raises(TypeError, match="no parameter"):
        make_agent("last_kb", budget=3)
    for entry in list_agents():
        assert entry.description, entry.name


def test_wpb_agents_lists_every_agent(capsys):
    assert wpb_main(["agents"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == registry_table().strip()
    for entry in list_agents():
        assert entry.name in out


class LookingAgent(Agent):
    """Expires the oldest item and, when it resumes, records whether memory already lost it."""

    name = "looking"

    def __init__(self):
        self.seen = []

    def select(self, step, store):
        oldest = store.oldest_item()
        if oldest is not None:
            yield MemoryAction.expire(oldest.t)
            self.seen.append(oldest.t in store)  # False: the EXPIRE was applied before resuming
        yield MemoryAction.write(step)


@pytest.mark.parametrize("path", ["offline", "env"])
def test_actions_are_applied_as_they_are_yielded(path):
    agent = LookingAgent()
    episode = tiny_episode()
    if path == "offline":
        run_episode(agent, episode, 10_000)
    else:
        run_agent_in_env(agent, WritePolicyBenchEnv(episodes=[episode], budget_bytes=10_000))
    assert agent.seen == [False, False, False]


# ---------------------------------------------------------------------------- MERGE and hidden items
def stable_api_episode(regime: str, index: int, length: int = 120) -> Episode:
    """A generated episode whose endpoints keep one "api" across versions (as in real API
    histories), so MERGE deltas are non-empty and merge_aggressive really merges."""
    from wpb_gym.envs.observation.stream_table import endpoint_family

    episode = generate_episode(make_config(regime, length=length), seed=5, index=index)
    steps = []
    for step in episode.steps:
        obs = step.observation
        if isinstance(obs, dict) and "api" in obs:
            obs = {**obs, "api": endpoint_family(obs["api"])}
        steps.append(Step(step.t, obs, step.metadata))
    return Episode(steps=steps, labels=episode.labels)


def items(store):
    return [(i.t, i.kind, i.byte_cost, i.merge_parent_t, i.delta, i.step) for i in store.items()]


@pytest.mark.parametrize("if_merge_fails", ["last_kb", "skip"])
@pytest.mark.parametrize("slots", [2, 8])
def test_merging_agents_match_offline_and_in_the_env(if_merge_fails, slots):
    merged = 0
    for regime in ("default", "burst_redundancy"):
        eps = [stable_api_episode(regime, i) for i in range(2)]
        for budget in (1024, 10240):
            env = WritePolicyBenchEnv(episodes=eps, budget_bytes=budget, slots=slots)
            for i, episode in enumerate(eps):
                agent = make_agent("merge_aggressive", if_merge_fails=if_merge_fails)
                offline = run_episode(agent, episode, budget)
                in_env = run_agent_in_env(
                    make_agent("merge_aggressive", if_merge_fails=if_merge_fails), env, options={"episode_index": i}
                )
                assert in_env.metrics == offline.metrics.as_row()
                assert items(env.store) == items(offline.store)  # the env keeps no action reasons
                merged += sum(1 for item in offline.store.items() if item.kind == "MERGE")
    assert merged > 0  # the MERGE path was exercised


def test_expose_item_takes_the_last_slot_when_the_layout_is_full():
    env = WritePolicyBenchEnv(episodes=[tiny_episode(n=6)], budget_bytes=10_000, slots=3)
    env.reset(seed=0)
    for _ in range(5):
        env.step(1)
    shown = env.slot_timesteps
    assert len(shown) == 3 and len(env.store) == 5
    hidden = next(t for t in env.store.timesteps() if t not in shown)
    assert env.expose_item(hidden) == 2
    assert env.slot_timesteps == (*shown[:2], hidden)
    mask = env.action_masks()
    assert mask[2 + env.K + 2] and env.decode_action(2 + env.K + 2) == MemoryAction.expire(hidden)
    env.step(2 + env.K + 2)
    assert hidden not in env.store


def test_a_yielded_none_or_a_forged_step_is_an_error_on_both_paths():
    agent = ScriptAgent({0: [lambda step, store: None, write]})
    with pytest.raises(TypeError, match="must yield MemoryAction"):
        run_episode(agent, tiny_episode(), 1000)
    with pytest.raises(TypeError, match="must yield MemoryAction"):
        run_agent_in_env(agent, WritePolicyBenchEnv(episodes=[tiny_episode()], budget_bytes=1000))
    forged = ScriptAgent({0: [lambda step, store: MemoryAction.write(Step(step.t, {}, {}))]})
    with pytest.raises(ValueError, match="other than the one it was shown"):
        run_episode(forged, tiny_episode(), 1000)
    with pytest.raises(ValueError, match="other than the one it was shown"):
        run_agent_in_env(forged, WritePolicyBenchEnv(episodes=[tiny_episode()], budget_bytes=1000))


def test_predict_across_episodes_of_a_gymnasium_vector_env():
    eps = episodes("default", n=2, length=30)
    vec = gym.make_vec("WritePolicyBench-v0", num_envs=2, vectorization_mode="sync", episodes=eps)
    agent = make_agent("last_kb").attach(vec)
    obs, _ = vec.reset(seed=0)
    finished = 0
    for _ in range(200):  # several episodes per sub-env, through gymnasium's next-step autoreset
        obs, _, terminated, _, _ = vec.step(agent.predict(obs)[0])
        finished += int(terminated.sum())
    assert finished >= 4
    vec.close()


def test_attach_refuses_envs_in_other_processes():
    class RemoteVecEnv:  # what SB3's SubprocVecEnv looks like from here
        num_envs = 2
        unwrapped = None

        def env_method(self, *args, **kwargs):
            raise AssertionError

    with pytest.raises(TypeError, match="another process"):
        make_agent("no_mem").attach(RemoteVecEnv())


@pytest.mark.parametrize("name", ["last_kb", "random", "expire_oldest"])
def test_stream_observer_in_memory_agrees_with_a_scan_of_memory(name):
    from agents.scripted.observe import StreamObserver, family_of

    class Watching(Agent):
        def __init__(self):
            self.inner = make_agent(name)
            self.observer = StreamObserver()
            self.checked = 0

        def start_episode(self, context):
            self.observer.reset()
            self.inner.start_episode(context)

        def select(self, step, store):
            change = self.observer.describe(step, store)
            scanned = change.family is not None and any(family_of(i.step) == change.family for i in store.items())
            assert change.in_memory == scanned
            self.checked += scanned
            self.observer.remember(step)
            yield from self.inner.select(step, store) or ()

    agent = Watching()
    for episode in episodes("burst_redundancy", n=2, length=150):
        run_episode(agent, episode, 2048)
    assert agent.checked > 0
