"""An SB3 model saved to a file becomes an agent of the offline evaluator."""

from __future__ import annotations

import json

import pytest

from agents.registry import make_agent
from agents.sb3.agent import SB3Agent, env_kwargs_path
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.evaluation.runner import run_episode

ENV_KWARGS = {"slots": 4, "track": "privileged"}  # tiny_sb3_model's (tests/conftest.py)


@pytest.fixture
def model_path(tiny_sb3_model):
    return tiny_sb3_model


def test_the_model_as_agent_makes_the_models_decisions(model_path):
    from sb3_contrib import MaskablePPO

    model = MaskablePPO.load(model_path, device="cpu")
    agent = make_agent("sb3", path=str(model_path))
    assert agent.track == "privileged" and agent.kind == "sb3"
    for index in range(2):
        episode = generate_episode(make_config("default", length=60), seed=1, index=index)
        offline = run_episode(agent, episode, 10240, "privileged")
        # The same model stepping the env itself.
        env = WritePolicyBenchEnv(episodes=[episode], budget_bytes=10240, **ENV_KWARGS)
        obs, _ = env.reset(seed=0)
        terminated = False
        while not terminated:
            action, _ = model.predict(obs, deterministic=True, action_masks=env.action_masks())
            obs, _, terminated, _, info = env.step(int(action))
        assert info["metrics"] == offline.metrics.as_row()
        assert env.store.timesteps() == offline.store.timesteps()


def test_the_model_agent_refuses_wrong_files_and_arguments(model_path, tmp_path):
    with pytest.raises(FileNotFoundError, match="no SB3 model"):
        SB3Agent(tmp_path / "missing.zip")
    with pytest.raises(ValueError, match="expects observations"):
        SB3Agent(model_path, env_kwargs={"slots": 8})
    broken = tmp_path / "m.zip"
    broken.write_bytes(model_path.read_bytes())
    env_kwargs_path(broken).write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="m.env.json: not valid JSON"):
        SB3Agent(broken)
    episode = generate_episode(make_config("default", length=10), seed=1, index=0)
    with pytest.raises(ValueError, match="cannot run on the unprivileged track"):
        run_episode(SB3Agent(model_path), episode, 1024, "unprivileged")


def test_the_model_agent_matches_in_the_env_and_through_predict(model_path):
    from agents.env_adapter import run_agent_in_env

    episode = generate_episode(make_config("default", length=50), seed=2, index=0)
    offline = run_episode(SB3Agent(model_path), episode, 4096, "privileged")
    env = WritePolicyBenchEnv(episodes=[episode], budget_bytes=4096, track="privileged")
    assert run_agent_in_env(SB3Agent(model_path), env).metrics == offline.metrics.as_row()


def test_the_model_agent_runs_on_its_own_track_only_and_ignores_generator_options(model_path, tmp_path):
    episode = generate_episode(make_config("default", length=10), seed=1, index=0)
    unprivileged = tmp_path / "u.zip"
    unprivileged.write_bytes(model_path.read_bytes())
    # Generator options in the sidecar only shaped training episodes; the evaluator's episode wins.
    env_kwargs_path(unprivileged).write_text(json.dumps({**ENV_KWARGS, "doc_prob": 0.3, "length": 40}), "utf-8")
    run_episode(SB3Agent(unprivileged), episode, 1024, "privileged")
    env_kwargs_path(unprivileged).write_text(json.dumps({"slots": 4}), "utf-8")  # an unprivileged layout
    with pytest.raises(ValueError, match="expects observations"):
        SB3Agent(unprivileged)  # the model was trained with the priority feature
    with pytest.raises(ValueError, match="not a PPO model"):
        SB3Agent(tmp_path / "u.env.json", algo="PPO")


def test_the_model_agent_refuses_another_tracks_byte_costs(model_path):
    from wpb_gym.core.policy import EpisodeContext

    episode = generate_episode(make_config("default", length=10), seed=1, index=0)
    context = EpisodeContext(length=10, budget_bytes=1024, track="unprivileged", stream=episode)
    with pytest.raises(ValueError, match="trained on the privileged track"):
        SB3Agent(model_path).start_episode(context)


def test_wpb_eval_runs_a_saved_model(model_path, tmp_path):
    import csv

    from wpb_gym.cli import main as wpb

    out = tmp_path / "run"
    argv = ["eval", "--agents", f"sb3:{model_path},last_kb", "--lengths", "30", "--episodes-per-condition", "2"]
    assert wpb([*argv, "--budgets", "2048", "--out", str(out), "--quiet"]) == 0
    with open(out / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    model_rows = [r for r in rows if r["policy"] == "sb3:tiny"]
    # The model was trained on the privileged track: it is skipped on the unprivileged one.
    assert {r["track"] for r in model_rows} == {"privileged"} and len(model_rows) == 2
    episode = generate_episode(make_config("default", length=30), seed=0, index=0)
    expected = run_episode(SB3Agent(model_path), episode, 2048, "privileged").metrics.f1
    assert float(next(r for r in model_rows if r["episode_index"] == "0")["f1"]) == expected


def test_loading_a_model_sets_torch_threads(model_path):
    import torch

    torch.set_num_threads(2)
    SB3Agent(model_path)
    assert torch.get_num_threads() == 1  # evaluation workers must not oversubscribe the cores


def test_a_model_saved_before_the_default_slots_changed_still_loads(model_path, tmp_path):
    """Models of package 0.3.0 and before name only the arguments given at training: one trained
    with the then-default 8 slots has none in its file. Its observation space says how many."""
    import torch
    from sb3_contrib import MaskablePPO

    torch.set_num_threads(1)
    env = WritePolicyBenchEnv(length=20, slots=8)
    old = tmp_path / "old.zip"
    MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu").save(old)
    env_kwargs_path(old).write_text("{}", encoding="utf-8")
    agent = SB3Agent(old)
    assert agent.env_kwargs == {"slots": 8}
    episode = generate_episode(make_config("default", length=30), seed=2)
    assert run_episode(agent, episode, 10240, "unprivileged").metrics.steps == 30
    # Slots that were given are never second-guessed.
    with pytest.raises(ValueError, match="expects observations"):
        SB3Agent(old, env_kwargs={"slots": 3})


@pytest.mark.parametrize("algo", ["PPO", "A2C", "DQN"])
@pytest.mark.parametrize("deterministic", [True, False])
def test_the_agent_decides_as_predict_does_for_each_algorithm(tmp_path, algo, deterministic):
    # PPO and A2C are called without predict's wrapping (SB3Agent._act_directly), DQN through
    # predict (it explores around its policy); on states of an episode and on random
    # observations each takes predict's action, sampled ones drawn from the same seeds.
    import numpy as np
    import stable_baselines3
    import torch

    env = WritePolicyBenchEnv(length=40, **ENV_KWARGS)
    model = getattr(stable_baselines3, algo)("MlpPolicy", env, seed=0, device="cpu")
    if algo == "DQN":
        model.exploration_rate = 0.5  # a fresh DQN's is 0: it would never explore
    model.save(tmp_path / "m.zip")
    env_kwargs_path(tmp_path / "m.zip").write_text(json.dumps(ENV_KWARGS), encoding="utf-8")
    agent = SB3Agent(tmp_path / "m.zip", deterministic=deterministic, algo=algo)
    assert not agent.model.policy.training
    if algo != "DQN":  # the direct call, never predict
        agent.model.predict = None
    rng = np.random.default_rng(0)
    observations = []
    obs, _ = env.reset(seed=0)
    done = False
    while not done:
        observations.append(obs)
        obs, _, done, _, _ = env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
    observations += [env.observation_space.sample() for _ in range(100)]
    mask = np.ones(env.action_space.n, dtype=bool)
    directly, through_predict = [], []
    for i, observation in enumerate(observations):
        for acted, act in ((directly, lambda o: agent.decide(o, mask)),
                           (through_predict, lambda o: int(model.predict(o, deterministic=deterministic)[0]))):
            torch.manual_seed(i)
            np.random.seed(i)  # DQN's exploration draws from NumPy's global generator
            acted.append(act(observation))
    assert directly == through_predict
    assert len(set(directly)) > 1
    if algo != "DQN":  # asked to, the agent decides every observation through predict
        reference = SB3Agent(tmp_path / "m.zip", deterministic=deterministic, algo=algo, through_predict=True)
        predict, calls = reference.model.predict, []
        reference.model.predict = lambda *args, **kwargs: calls.append(1) or predict(*args, **kwargs)
        for i, observation in enumerate(observations[:20]):
            torch.manual_seed(i)
            assert reference.decide(observation, mask) == directly[i]
        assert len(calls) == 20
