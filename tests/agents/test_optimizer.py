"""``wpb train``'s optimizer default: fused Adam with SB3's settings where SB3 would use its Adam
loop, the recipe's own choice everywhere else."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import A2C, DQN, PPO
from test_train import TINY

from agents.sb3.optimizer import with_fused_adam
from agents.sb3.train import build_vec_env
from wpb_gym.cli import main as wpb

FUSED = {"optimizer_kwargs": {"fused": True}}
ACTOR_CRITIC = {"optimizer_kwargs": {"eps": 1e-5, "fused": True}}  # SB3's eps for actor-critic Adam


@pytest.mark.parametrize(
    ("algo", "hyperparams", "expected"),
    [
        (MaskablePPO, {}, {"policy_kwargs": ACTOR_CRITIC}),
        (PPO, {"n_steps": 8}, {"n_steps": 8, "policy_kwargs": ACTOR_CRITIC}),
        (RecurrentPPO, {}, {"policy_kwargs": ACTOR_CRITIC}),
        (DQN, {}, {"policy_kwargs": FUSED}),
        (MaskablePPO, {"policy_kwargs": None}, {"policy_kwargs": ACTOR_CRITIC}),
        (MaskablePPO, {"policy_kwargs": {"optimizer_kwargs": None}}, {"policy_kwargs": ACTOR_CRITIC}),
        # the recipe's own Adam settings replace SB3's (as SB3 does), and its other settings stay
        (MaskablePPO, {"policy_kwargs": {"net_arch": [32], "optimizer_kwargs": {"weight_decay": 0.1}}},
         {"policy_kwargs": {"net_arch": [32], "optimizer_kwargs": {"weight_decay": 0.1, "fused": True}}}),
        (PPO, {"policy_kwargs": {"optimizer_class": torch.optim.Adam}},
         {"policy_kwargs": {"optimizer_class": torch.optim.Adam, **ACTOR_CRITIC}}),
        # A2C trains with RMSprop unless told otherwise
        (A2C, {}, {}),
        (A2C, {"use_rms_prop": True}, {"use_rms_prop": True}),
        (A2C, {"use_rms_prop": False}, {"use_rms_prop": False, "policy_kwargs": ACTOR_CRITIC}),
        (A2C, {"policy_kwargs": {"optimizer_class": torch.optim.Adam}},
         {"policy_kwargs": {"optimizer_class": torch.optim.Adam, **ACTOR_CRITIC}}),
        # the recipe chose: left as it is
        (MaskablePPO, {"policy_kwargs": {"optimizer_kwargs": {"fused": False}}},
         {"policy_kwargs": {"optimizer_kwargs": {"fused": False}}}),
        (PPO, {"policy_kwargs": {"optimizer_kwargs": {"foreach": True}}},
         {"policy_kwargs": {"optimizer_kwargs": {"foreach": True}}}),
        (PPO, {"policy_kwargs": {"optimizer_kwargs": {"differentiable": True}}},
         {"policy_kwargs": {"optimizer_kwargs": {"differentiable": True}}}),
        (PPO, {"policy_kwargs": {"optimizer_class": torch.optim.SGD}},
         {"policy_kwargs": {"optimizer_class": torch.optim.SGD}}),
        # flags the fused kernel takes only as bool, where SB3's loop takes any truth value
        (PPO, {"policy_kwargs": {"optimizer_kwargs": {"amsgrad": 1}}},
         {"policy_kwargs": {"optimizer_kwargs": {"amsgrad": 1}}}),
        (PPO, {"policy_kwargs": {"optimizer_kwargs": {"maximize": None}}},
         {"policy_kwargs": {"optimizer_kwargs": {"maximize": None}}}),
        (PPO, {"policy_kwargs": {"optimizer_kwargs": {"amsgrad": True}}},
         {"policy_kwargs": {"optimizer_kwargs": {"amsgrad": True, "fused": True}}}),
        # not what SB3 takes: it refuses it when the model is made, with its own message
        (PPO, {"policy_kwargs": "net_arch"}, {"policy_kwargs": "net_arch"}),
        (PPO, {"policy_kwargs": []}, {"policy_kwargs": []}),
    ],
)
def test_fused_adam_is_added_only_where_sb3_would_use_its_adam_loop(algo, hyperparams, expected):
    policy = "MlpLstmPolicy" if algo is RecurrentPPO else "MlpPolicy"
    before = json.dumps(hyperparams, default=str)
    assert with_fused_adam(algo, policy, hyperparams) == expected
    assert json.dumps(hyperparams, default=str) == before  # the recipe's own mapping is not changed
    assert with_fused_adam(algo, policy, expected) == expected  # applying it twice changes nothing


@pytest.mark.parametrize(
    ("algo", "policy", "hyperparams"),
    [
        (MaskablePPO, "MlpPolicy", {"n_steps": 32}),
        (MaskablePPO, "MultiInputPolicy", {"n_steps": 32}),
        (PPO, "MlpPolicy", {"n_steps": 32}),
        (RecurrentPPO, "MlpLstmPolicy", {"n_steps": 32}),
        (A2C, "MlpPolicy", {"use_rms_prop": False}),
        (DQN, "MlpPolicy", {"learning_starts": 16}),
    ],
)
def test_the_fused_optimizer_has_sb3s_settings(algo, policy, hyperparams):
    env_kwargs = {"observation_mode": "dict"} if policy == "MultiInputPolicy" else {}
    stock, fused = (algo(policy, build_vec_env(env_kwargs, 1, 0, "dummy"), device="cpu", seed=0, **h)
                    for h in (hyperparams, with_fused_adam(algo, policy, hyperparams)))
    assert type(fused.policy.optimizer) is type(stock.policy.optimizer) is torch.optim.Adam
    assert fused.policy.optimizer.defaults == {**stock.policy.optimizer.defaults, "fused": True}


def test_fused_adam_trains_sb3s_model_up_to_rounding():
    """MaskablePPO trained with fused Adam ends within rounding of SB3's loop (not with another
    ``eps``, which moves the weights by about 1e-2 here)."""
    from agents.sb3.masked_policy import as_wpb_train

    hyper = {"n_steps": 128, "batch_size": 64, "n_epochs": 2}
    weights = []
    for h in (hyper, with_fused_adam(MaskablePPO, "MlpPolicy", hyper)):
        model = MaskablePPO("MlpPolicy", build_vec_env({}, 4, 0, "native"), device="cpu", seed=0, **h)
        with as_wpb_train(model):
            model.learn(2048)
        weights.append(model.policy.state_dict())
    apart = max((weights[0][k] - weights[1][k]).abs().max().item() for k in weights[0])
    assert 0 < apart < 1e-5  # measured: 4e-7; another eps: about 1e-2


@pytest.mark.parametrize(
    ("algo", "hyperparams", "optimizer", "fused"),
    [
        ("maskable_ppo", TINY["hyperparams"], "torch.optim.adam.Adam", True),
        ("dqn", {"learning_starts": 16, "buffer_size": 500}, "torch.optim.adam.Adam", True),
        ("a2c", {"n_steps": 8}, "torch.optim.rmsprop.RMSprop", None),
        ("maskable_ppo", {**TINY["hyperparams"], "policy_kwargs": {"optimizer_kwargs": {"fused": False}}},
         "torch.optim.adam.Adam", False),
    ],
)
def test_wpb_train_builds_and_records_the_optimizer(tmp_path, algo, hyperparams, optimizer, fused):
    from agents.sb3.train import algo_class

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY, "hyperparams": hyperparams, "timesteps": 64}))
    out = tmp_path / "run"
    assert wpb(["train", "--algo", algo, "--config", str(config), "--out", str(out), "--quiet"]) == 0
    model = algo_class(algo).load(out / "final_model.zip", device="cpu")
    recorded = json.loads((out / "config.json").read_text())["optimizer"]
    assert recorded["class"] == optimizer
    assert recorded.get("fused") is model.policy.optimizer.defaults.get("fused") is fused


def test_a_resumed_run_records_the_optimizer_its_model_brings(tmp_path):
    """A checkpoint keeps its optimizer (here SB3's loop): ``config.json`` says so, not the default."""
    config = tmp_path / "tiny.yaml"
    loop = {**TINY["hyperparams"], "policy_kwargs": {"optimizer_kwargs": {"eps": 1e-5, "fused": False}}}
    config.write_text(yaml.safe_dump({**TINY, "hyperparams": loop, "timesteps": 128}))
    out = tmp_path / "run"
    assert wpb(["train", "--algo", "maskable_ppo", "--config", str(config), "--out", str(out), "--quiet"]) == 0
    config.write_text(yaml.safe_dump({**TINY, "timesteps": 256}))  # the default optimizer now
    argv = ["train", "--algo", "maskable_ppo", "--config", str(config), "--out", str(out), "--resume", "--quiet"]
    assert wpb(argv) == 0
    recorded = json.loads((out / "config.json").read_text())["optimizer"]
    assert recorded["fused"] is False and recorded["eps"] == 1e-5


def test_optimizer_settings_torch_refuses_are_one_line_errors(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    bad = {**TINY["hyperparams"], "policy_kwargs": {"optimizer_kwargs": {"betas": [0.9]}}}  # Adam needs two
    config.write_text(yaml.safe_dump({**TINY, "hyperparams": bad, "timesteps": 64}))
    capsys.readouterr()
    argv = ["train", "--algo", "maskable_ppo", "--config", str(config), "--out", str(tmp_path / "run"), "--quiet"]
    assert wpb(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hyperparams or policy of MaskablePPO" in err and "betas" in err, err
    assert not (tmp_path / "run").exists()
