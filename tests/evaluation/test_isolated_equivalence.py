"""Isolated evaluation gives an honest policy exactly what in-process evaluation gives it.

Isolated evaluation advances a batch of episodes in lockstep, sends most actions in a short
form (runs that wrote their step, by number) and judges every run's actions once the batch is
over, run by run; none of that may change a row or an action log.
"""

from __future__ import annotations

from functools import partial

import adversaries as adv
import pytest

from agents.registry import agent_entry, list_agents, make_agent
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.evaluation.grid import ISOLATED_BATCH, PolicySpec, generated_refs, isolated_workers, run_grid
from wpb_gym.evaluation.referee import RunLimits
from wpb_gym.evaluation.runner import run_episode

BUDGETS = (1024, 4096, 65536)
TRACKS = ("unprivileged", "privileged")
# Every agent that needs no file (learners read their table from a file when given one).
SCRIPTED = [e.name for e in list_agents() if e.kind in ("scripted", "oracle", "learner")]


def test_every_scripted_agent_scores_alike_in_process_and_isolated():
    # More episodes than one batch, and batches of episodes of two lengths: the policies'
    # processes serve several batches, and runs of one batch end at different timesteps.
    refs = generated_refs(["default", "reverts", "contract_mix"], [70, 90], 1, seed=3)
    batches = [refs[i : i + ISOLATED_BATCH] for i in range(0, len(refs), ISOLATED_BATCH)]
    assert len(batches) > 1 and any(len({ref.steps for ref in batch}) > 1 for batch in batches)
    specs = [PolicySpec(n, partial(make_agent, n), agent_entry(n).track) for n in SCRIPTED]
    in_process = run_grid(refs, specs, BUDGETS, TRACKS)
    isolated = run_grid(refs, specs, BUDGETS, TRACKS, isolate=True)
    assert len(in_process) == len(isolated) > 0
    assert all(row["error"] == "" for row in isolated)
    assert in_process == isolated


POLICIES = {
    "last_kb": (partial(make_agent, "last_kb"), "contract_mix", {"WRITE", "EXPIRE"}),
    "expire_oldest": (partial(make_agent, "expire_oldest"), "contract_mix", {"WRITE", "EXPIRE"}),
    "breaking_detector": (partial(make_agent, "breaking_detector"), "contract_mix", {"WRITE", "EXPIRE"}),
    "merge-every-step": (partial(adv.ForgeMerge, False), "default", {"WRITE", "MERGE"}),
    "write-all": (adv.WriteAll, "default", {"WRITE"}),
}


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_action_logs_are_the_same_in_process_and_isolated(policy):
    """Every action and every decision (accepted or not), of every kind, at a small budget."""
    factory, regime, kinds = POLICIES[policy]
    episode = generate_episode(make_config(regime, length=100, api_pool=8), seed=5, index=1)
    here = run_episode(factory(), episode, 2048, record_actions=True)
    there = run_episode(factory(), episode, 2048, record_actions=True, isolate=True)
    assert {a.action.action for a in here.actions} == kinds
    assert [(a.t, a.action, a.decision) for a in here.actions] == [(a.t, a.action, a.decision) for a in there.actions]
    assert here.metrics == there.metrics and there.diverged_at is None and there.error is None


def test_rejected_actions_are_logged_alike():
    episode = generate_episode(make_config("default", length=60), seed=2, index=0)
    for factory in (adv.WriteAll, partial(adv.ForgeMerge, False)):
        here = run_episode(factory(), episode, 1024, record_actions=True)
        there = run_episode(factory(), episode, 1024, record_actions=True, isolate=True)
        assert any(not a.decision.accepted for a in here.actions)
        assert [(a.t, a.action, a.decision) for a in here.actions] == [
            (a.t, a.action, a.decision) for a in there.actions
        ]


def test_an_isolated_grid_on_worker_processes_after_policies_were_asked_here():
    """``wpb eval --isolate --jobs 4`` asks each policy for its track in this process first (its
    policy processes and fork server start here), then runs the grid on worker processes, which
    must start their own (with two policies, two workers: ``isolated_workers``)."""
    from wpb_gym.evaluation.grid import isolated_info

    specs = [PolicySpec(n, partial(make_agent, n), agent_entry(n).track) for n in ("last_kb", "change_detector")]
    # Other limits than the grid's: the policy processes started here are not the grid's.
    assert [info["name"] for info in isolated_info(specs, RunLimits(max_actions_per_step=500))] == [
        "last_kb",
        "change_detector",
    ]
    refs = generated_refs(["default"], [25], 3, seed=1)
    assert isolated_workers(4, len(specs)) == 2
    on_workers = run_grid(refs, specs, (1024,), ("unprivileged",), jobs=4, isolate=True)
    assert on_workers == run_grid(refs, specs, (1024,), ("unprivileged",)) and len(on_workers) == 6


def test_isolated_jobs_count_the_policies_processes():
    # Each worker drives one process per policy: two jobs and seven policies make one worker.
    assert [isolated_workers(jobs, 7) for jobs in (1, 2, 6, 7, 13, 14, 32)] == [1, 1, 1, 1, 1, 2, 4]
    assert [isolated_workers(jobs, 1) for jobs in (1, 2, 8)] == [1, 2, 8]
    assert isolated_workers(3, 0) == 3


@pytest.mark.parametrize("policy", ["change_detector", "breaking_detector"])
def test_the_final_memory_keeps_the_reasons_without_an_action_log(policy):
    # Without an action log, a run's memory is still the caller's: its items keep their reasons.
    episode = generate_episode(make_config("contract_mix", length=60, api_pool=8), seed=4, index=0)
    here = run_episode(make_agent(policy), episode, 2048, record_actions=False)
    there = run_episode(make_agent(policy), episode, 2048, record_actions=False, isolate=True)
    kept = [(item.t, dict(item.metadata)) for item in here.store.items()]
    assert kept == [(item.t, dict(item.metadata)) for item in there.store.items()]
    assert any(metadata.get("reason") for _, metadata in kept)
