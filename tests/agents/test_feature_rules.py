"""The observation carries what a scripted policy may know: ``breaking_detector``'s rule,
read from the env's observation vector alone, takes its decisions."""

from __future__ import annotations

import numpy as np
import pytest

from agents.scripted.feature_rules import BreakingRule, play
from agents.registry import make_agent
from wpb_gym.core.types import Episode, Step
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.evaluation.runner import run_episode

CONTRACT_REGIMES = ("breaking", "reverts", "noisy_priority", "mixed_sizes", "contract_mix")
HELD_OUT_SEED = 777  # episodes no shipped recipe trains on


def _both(env: WritePolicyBenchEnv, options: dict) -> tuple[dict, float, list, list]:
    rule = BreakingRule(env)
    mine = []
    obs, _ = env.reset(options=options)
    done = False
    while not done:
        a = rule(obs)
        action = env.decode_action(a)
        if action.action != "SKIP":
            mine.append((env.t, action.action, action.target_t))
        obs, _, done, _, info = env.step(a)
    run = run_episode(make_agent("breaking_detector"), env.episode, env.budget_bytes, env.track)
    theirs = [(x.t, x.action.action, x.action.target_t) for x in run.actions if x.action.action != "SKIP"]
    return info["metrics"], run.metrics.f1, mine, theirs


@pytest.mark.parametrize("regime", CONTRACT_REGIMES)
@pytest.mark.parametrize("budget", [2048, 10240])
@pytest.mark.parametrize("slots", [8, 2])  # two slots still show what the rule needs (one does not)
def test_the_rule_over_the_observation_reproduces_breaking_detector(regime, budget, slots):
    env = WritePolicyBenchEnv(regime=regime, budget_bytes=budget, episode_seed=HELD_OUT_SEED, slots=slots)
    ours, theirs = [], []
    for i in range(8):
        metrics, f1, mine, logged = _both(env, {"episode_index": i})
        ours.append(metrics["f1"])
        theirs.append(f1)
        assert mine == [(t, kind, None if kind == "WRITE" else target) for t, kind, target in logged], i
    assert abs(np.mean(ours) - np.mean(theirs)) <= 0.01
    assert np.mean(theirs) > 0.3  # the regimes are not trivially empty at this budget


def test_removed_endpoints_and_their_return():
    """Real-drift snapshots show a removed endpoint as ``removed: true``: written at its first
    sighting, expired once it is back."""

    def snap(params, removed=False, version=1):
        obs = {"api": "GET /v1/x", "params": params, "required": [], "version": version}
        return obs | ({"removed": True} if removed else {})

    observations = [
        snap([], removed=True),  # first sighting: removed -> written
        {"api": "GET /v1/y", "params": ["a"], "required": [], "version": 1},
        snap(["a", "b"], version=2),  # back: the removal was undone -> expired
        snap(["a"], version=3),  # b removed: breaking -> written
        snap(["a"], version=3, removed=True),  # removed: breaking -> written
    ]
    steps = [Step(t, obs, {"mode": "real:test"}) for t, obs in enumerate(observations)]
    episode = Episode(steps=steps, labels={"critical_steps": [3], "utility_by_step": {t: 1 for t in range(5)}})
    env = WritePolicyBenchEnv(episodes=[episode], budget_bytes=10_000)
    metrics, f1, mine, logged = _both(env, {})
    assert mine == [(0, "WRITE", None), (2, "EXPIRE", 0), (3, "WRITE", None), (4, "WRITE", None)]
    assert [(t, kind) for t, kind, _ in logged] == [(t, kind) for t, kind, _ in mine]
    assert metrics["f1"] == f1


@pytest.mark.parametrize("limit", [{"compression": "credit=0.75"}, {"kind_budgets": "doc=10%"},
                                   {"write_time": "total=1000"}])
def test_the_rule_reads_the_layout_alone_under_a_limit(limit):
    # A limit appends its features after the slot rows: the rule decides as it does without them
    # (a limit that never binds here changes nothing else).
    plain, limited = (WritePolicyBenchEnv(regime="breaking", budget_bytes=10240, episode_seed=HELD_OUT_SEED, **kw)
                      for kw in ({}, limit))
    assert limited.observation_size > plain.observation_size
    assert _both(limited, {"episode_index": 1})[2] == _both(plain, {"episode_index": 1})[2]


def test_the_rule_needs_box_observations():
    with pytest.raises(ValueError, match="box observations"):
        BreakingRule(WritePolicyBenchEnv(observation_mode="dict"))


def test_play_returns_the_final_metrics():
    env = WritePolicyBenchEnv(regime="breaking", length=50, api_pool=16)
    metrics = play(env, BreakingRule(env), seed=3)
    assert set(metrics) >= {"f1", "recall", "precision"}
