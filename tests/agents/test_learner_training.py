"""The bandit learners on the SB3 agents' footing: the env's contract comparisons in their
contexts, ``wpb train --algo epsilon_greedy|bandit_ucb``, and trained learners in ``wpb eval``."""

from __future__ import annotations

import json

import pytest

from agents.learners.bandits import BanditUCBAgent, EpsilonGreedyAgent, change_status
from agents.scripted.observe import StreamObserver
from agents.registry import make_agent
from wpb_gym.cli import main as wpb
from wpb_gym.core.store import ByteMemoryStore
from wpb_gym.core.types import Step


def statuses(observations):
    observer, store = StreamObserver(), ByteMemoryStore(10_000)
    out = []
    for t, obs in enumerate(observations):
        step = Step(t, obs, {})
        out.append(change_status(observer.describe(step, store.view())))
        observer.remember(step)
    return out


def test_contexts_carry_the_contract_comparisons_of_the_observation():
    a = {"api": "api.v1.a", "params": ["x", "y"], "required": [], "version": 1}
    assert statuses(
        [
            a,
            {**a, "version": 2, "params": ["x"]},  # a parameter removed
            {**a, "version": 3, "required": ["x", "y"]},  # one added back, both required now
            {**a, "version": 4},  # the first contract again: a revert
            {**a, "version": 5, "deprecated": True},
            {**a, "version": 6, "deprecated": True, "removed": True},
            {**a, "version": 7},
            {"api": "api.v1.b", "params": [], "removed": True},  # a first sighting, removed
            a,  # an older version of the same contract: changed, no flag
            a,
        ]
    ) == [
        "new",
        "changed:vr",
        "changed:vaq",
        "changed:voe",
        "changed:vd",
        "changed:vx",
        "changed:vube",
        "new:removed",
        "changed:",
        "same",
    ]


def test_a_trained_learner_is_an_agent_of_wpb_eval(tmp_path, capsys):
    out = tmp_path / "eg"
    argv = ["train", "--algo", "epsilon_greedy", "--env-kwargs", "regime=breaking", "length=50", "api_pool=16"]
    assert wpb([*argv, "--timesteps", "2000", "--seed", "4", "--out", str(out), "--quiet"]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["timesteps"] == 2000 and saved["episodes"] == 40 and saved["seed"] == 4
    assert 0.0 <= saved["validation_f1"] <= 1.0 and saved["contexts"] > 0
    trained = make_agent("epsilon_greedy", path=str(out / "learner.json"))
    assert trained.training is False and trained.seed == 4 and trained.counts
    assert type(make_agent("bandit_ucb")).__name__ == "BanditUCBAgent"
    with pytest.raises(ValueError, match="holds a 'epsilon_greedy' learner, not 'bandit_ucb'"):
        BanditUCBAgent(path=str(out / "learner.json"))
    config = tmp_path / "eval.yaml"
    config.write_text(
        f"agents: [{{name: epsilon_greedy, label: eg_trained, path: {out / 'learner.json'}}}, epsilon_greedy]\n"
        "regimes: [breaking]\nlengths: [80]\nbudgets: [10240]\nepisodes_per_condition: 3\ntracks: [unprivileged]\n"
    )
    run = tmp_path / "run"
    assert wpb(["eval", "--config", str(config), "--out", str(run), "--quiet"]) == 0
    rows = (run / "results.csv").read_text().splitlines()
    assert {line.split(",")[4] for line in rows[1:]} == {"eg_trained", "epsilon_greedy"}
    assert EpsilonGreedyAgent(path=str(out / "learner.json")).state_dict()["table"]


def test_learner_training_refuses_the_sb3_options(tmp_path, capsys):
    capsys.readouterr()
    argv = ["train", "--algo", "bandit_ucb", "--resume", "--out", str(tmp_path / "r"), "--quiet"]
    assert wpb(argv) == 2
    assert "--resume is for the SB3 algorithms, not bandit_ucb" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_generator_options_train_against_held_out_files(tmp_path):
    # The options that generated the training episodes do not apply to held-out files.
    from wpb_gym.episodes.frozen import freeze_set

    held = freeze_set(tmp_path / "held", ["breaking"], [20], 3, seed=5, overrides={"api_pool": 8})
    argv = ["train", "--algo", "epsilon_greedy", "--env-kwargs", "regime=breaking", "api_pool=8", "length=20"]
    argv += ["--eval-episodes", str(held.root), "--timesteps", "500", "--out", str(tmp_path / "eg"), "--quiet"]
    assert wpb(argv) == 0
    assert json.loads((tmp_path / "eg" / "config.json").read_text())["held_out_episodes"] == str(held.root)
