"""RLlib's PPO with action masking: a few training iterations, the checkpoint restored, the masked
module never choosing a masked action, and the trained policy evaluated by ``wpb eval`` (from a
relative path, and from a copy of the checkpoint folder alone)."""

from __future__ import annotations

import csv
import json
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

pytest.importorskip("ray.rllib", reason="RLlib is not installed: pip install -e '.[rllib]'")

from agents.registry import make_agent  # noqa: E402
from agents.rllib.agent import RLlibAgent, load_rllib_module  # noqa: E402
from agents.rllib.env import (  # noqa: E402
    INSTALL_HINT,
    RLLIB_ENV_NAME,
    make_rllib_env,
    masked_observation,
    register_rllib_env,
    require_rllib,
)
from agents.rllib.training import DEFAULT_ENV_KWARGS, masked_ppo_config, train_rllib_ppo  # noqa: E402
from wpb_gym.cli import main as wpb_main  # noqa: E402
from wpb_gym.core.policy import EpisodeContext  # noqa: E402
from wpb_gym.episodes.generators.paper import generate_episode, make_config  # noqa: E402
from wpb_gym.evaluation.runner import run_episode  # noqa: E402

# No EXPIRE: an env argument that changes what the policy may do but not the observation's shape,
# so a checkpoint played with the wrong env arguments is not caught by its observation space.
ENV_KWARGS = {"regime": "default", "length": 50, "budget_bytes": 10240, "max_expires_per_step": 0}
# A few hundred env steps: two iterations of 200 steps, small networks.
PPO = {"train_batch_size": 200, "minibatch_size": 50, "num_epochs": 2, "hidden_sizes": [32, 32]}

TRAIN_AND_RESTORE = """
import json, sys
import ray
from ray.rllib.algorithms.algorithm import Algorithm
from agents.rllib.agent import load_rllib_module
from agents.rllib.training import train_rllib_ppo

out, env_kwargs, ppo = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
run = train_rllib_ppo(out, env_kwargs, iterations=2, seed=0, **ppo)
# The whole algorithm restores from the checkpoint (to train further), with the weights the
# agent loads (its env runner's module is the inference part of the learner's).
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
algo = Algorithm.from_checkpoint(str(run.checkpoint))
restored = algo.get_module().state_dict()
saved = load_rllib_module(run.checkpoint).state_dict()
same = bool(restored) and set(restored) <= set(saved) and all((restored[k] == saved[k]).all() for k in restored)
algo.stop()
ray.shutdown()
print(json.dumps({"checkpoint": str(run.checkpoint), "metrics": run.metrics, "restored": bool(same)}))
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Two training iterations, in a process of its own: Ray is started there, not in the test
    process (whose later process pools a Ray started and stopped here could break)."""
    out = tmp_path_factory.mktemp("rllib") / "run"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TRAIN_AND_RESTORE), str(out), json.dumps(ENV_KWARGS), json.dumps(PPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return out, result


def test_training_writes_a_checkpoint_that_restores(run):
    out, result = run
    assert result["restored"]
    assert result["checkpoint"] == str(out / "checkpoint")
    metrics = result["metrics"]
    assert metrics["training_iteration"] == 2 and metrics["env_steps"] == 400
    lines = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    assert [line["training_iteration"] for line in lines] == [1, 2] and lines[-1] == metrics
    config = json.loads((out / "config.json").read_text())
    assert config["env"] == {**DEFAULT_ENV_KWARGS, **ENV_KWARGS, "episode_seed": 0} and config["seed"] == 0
    assert DEFAULT_ENV_KWARGS == {"budget_bytes": 10240, "dense_reward": True, "slots": 8, "expire_cost": 0.0}
    assert not (out / "checkpoint.env.json").exists()  # the checkpoint holds its env arguments


def test_checkpoints_name_their_classes_by_paths_that_keep_resolving(run):
    # A checkpoint pickles its env and RLModule classes by module path: those that checkpoints
    # written before the modules moved into agents.rllib name still give the same classes.
    from agents.rllib.env import RLlibWritePolicyBenchEnv
    from agents.rllib.module import MaskedPPOTorchRLModule

    out, _ = run
    records = [(out / "checkpoint" / "class_and_ctor_args.pkl").read_bytes()]
    records.append((out / "checkpoint" / "learner_group" / "learner" / "rl_module" / "default_policy"
                    / "class_and_ctor_args.pkl").read_bytes())
    assert b"agents.rllib.env" in records[0] and b"agents.rllib.module" in records[1]
    for old, cls in (("agents.rllib_env", RLlibWritePolicyBenchEnv), ("agents.rllib_module", MaskedPPOTorchRLModule)):
        assert pickle.loads(f"c{old}\n{cls.__name__}\n.".encode()) is cls


def test_the_masked_module_never_picks_a_masked_action(run):
    import torch
    from ray.rllib.core.columns import Columns

    from agents.rllib.module import MASKED_LOGIT

    out, _ = run
    module = load_rllib_module(out / "checkpoint")
    env = make_rllib_env({**ENV_KWARGS, "slots": 8})
    generator = torch.Generator().manual_seed(0)
    for seed in range(2):
        obs, _ = env.reset(seed=seed)
        masked, terminated = 0, False
        while not terminated:
            mask = env.unwrapped.action_masks()
            assert np.array_equal(obs["action_mask"], mask.astype(np.float32))
            batch = {Columns.OBS: {k: torch.from_numpy(v)[None] for k, v in obs.items()}}
            with torch.no_grad():
                for forward in (module.forward_inference, module.forward_exploration, module.forward_train):
                    logits = forward(batch)[Columns.ACTION_DIST_INPUTS][0]
                    assert (logits[torch.from_numpy(~mask)] == MASKED_LOGIT).all()
                    assert (logits[torch.from_numpy(mask)] > MASKED_LOGIT).all()
                sampled = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
            greedy = int(torch.argmax(logits))
            assert mask[greedy] and mask[sampled]
            masked += int((~mask).sum())
            obs, _, terminated, _, _ = env.step(sampled if seed else greedy)
        assert masked > 0  # the episode did offer actions to mask


def test_the_agent_plays_the_modules_greedy_decisions(run):
    import torch
    from ray.rllib.core.columns import Columns

    out, _ = run
    agent = make_agent("rllib", path=str(out / "checkpoint"))
    assert isinstance(agent, RLlibAgent) and agent.track == "unprivileged" and agent.kind == "rllib"
    assert agent.env_kwargs == {"max_expires_per_step": 0, "slots": 8}  # read from the checkpoint's config
    module = load_rllib_module(out / "checkpoint")
    for index in range(2):
        episode = generate_episode(make_config("default", length=50), seed=5, index=index)
        offline = run_episode(agent, episode, 10240, "unprivileged")
        env = make_rllib_env({"episodes": [episode], "budget_bytes": 10240, "max_expires_per_step": 0, "slots": 8})
        obs, _ = env.reset(seed=0)
        terminated = False
        while not terminated:
            batch = {Columns.OBS: {k: torch.from_numpy(v)[None] for k, v in obs.items()}}
            with torch.no_grad():
                action = int(torch.argmax(module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS][0]))
            obs, _, terminated, _, info = env.step(action)
        assert info["metrics"] == offline.metrics.as_row()


def test_the_env_creator_builds_envs_from_env_config_by_name():
    from ray.tune.registry import ENV_CREATOR, _global_registry

    assert register_rllib_env() == RLLIB_ENV_NAME
    config = {"regime": "breaking", "length": 30, "api_pool": 8, "slots": 4}
    env = _global_registry.get(ENV_CREATOR, RLLIB_ENV_NAME)(config)
    obs, _ = env.reset(seed=0)
    assert env.unwrapped.regime == "breaking" and env.unwrapped.K == 4
    assert env.observation_space.contains(obs) and obs["action_mask"].shape == (2 + 2 * 4,)


def _rows(out):
    with open(out / "results.csv", newline="") as file:
        return list(csv.DictReader(file))


def test_wpb_eval_runs_the_policy_beside_a_baseline_reproducibly(run, tmp_path):
    out, _ = run
    argv = ["eval", "--agents", f"rllib:{out / 'checkpoint'},change_detector", "--regimes", "default",
            "--lengths", "50", "--budgets", "10240", "--tracks", "unprivileged", "--episodes-per-condition", "2",
            "--quiet", "--out"]
    assert wpb_main([*argv, str(tmp_path / "a")]) == 0
    rows = _rows(tmp_path / "a")
    assert sorted(row["policy"] for row in rows) == ["change_detector"] * 2 + ["rllib:checkpoint"] * 2
    assert wpb_main([*argv, str(tmp_path / "b"), "--jobs", "2"]) == 0
    metrics = ("f1", "recall", "precision", "policy_utility", "bytes_used", "write_actions", "expire_actions")
    again = _rows(tmp_path / "b")
    assert [[r[k] for k in metrics] for r in rows] == [[r[k] for k in metrics] for r in again]


EVAL_ARGS = ["--regimes", "default", "--lengths", "50", "--budgets", "10240", "--tracks", "unprivileged",
             "--episodes-per-condition", "2", "--quiet", "--out"]
METRICS = ("f1", "recall", "precision", "policy_utility", "bytes_used", "write_actions", "expire_actions")


def test_a_relative_checkpoint_path_is_evaluated(run, tmp_path, monkeypatch):
    out, _ = run
    monkeypatch.chdir(out.parent)
    relative = f"{out.name}/checkpoint"
    assert make_agent("rllib", path=relative).path == str(out / "checkpoint")
    assert wpb_main(["eval", "--agents", f"rllib:{relative}", *EVAL_ARGS, str(tmp_path / "e")]) == 0
    assert [row["policy"] for row in _rows(tmp_path / "e")] == ["rllib:checkpoint"] * 2


def test_a_copy_of_the_checkpoint_folder_alone_plays_as_the_original(run, tmp_path, capsys):
    out, _ = run
    copy = tmp_path / "elsewhere" / "checkpoint"
    shutil.copytree(out / "checkpoint", copy)
    assert make_agent("rllib", path=str(copy)).env_kwargs == {"max_expires_per_step": 0, "slots": 8}
    # Every run's folder is called checkpoint, as every SB3 run's model best_model: two runs need labels.
    assert wpb_main(["eval", "--agents", f"rllib:{out / 'checkpoint'},rllib:{copy}", *EVAL_ARGS,
                     str(tmp_path / "twice")]) == 2
    assert "appear twice" in capsys.readouterr().err
    agents = f"original=rllib:{out / 'checkpoint'},copy=rllib:{copy}"
    assert wpb_main(["eval", "--agents", agents, *EVAL_ARGS, str(tmp_path / "e")]) == 0
    rows = {(row["policy"], row["episode_index"]): [row[k] for k in METRICS] for row in _rows(tmp_path / "e")}
    assert sorted(rows) == [("copy", "0"), ("copy", "1"), ("original", "0"), ("original", "1")]
    assert all(rows["copy", i] == rows["original", i] for i in ("0", "1"))
    # A file beside the folder, or env_kwargs, override what the checkpoint stores.
    # (Without slots, they are read from the policy's own observation space: 8.)
    (copy.parent / "checkpoint.env.json").write_text("{}")
    assert make_agent("rllib", path=str(copy)).env_kwargs == {"slots": 8}
    assert make_agent("rllib", path=str(copy), env_kwargs={"max_expires_per_step": 1}).env_kwargs == {
        "max_expires_per_step": 1, "slots": 8}


def test_bad_training_arguments_are_named_before_ray_starts(tmp_path):
    import ray

    for kwargs, named in [
        ({"iterations": 0}, "iterations must be a positive int"),
        ({"env_kwargs": {"slots": 0}}, "env_kwargs: slots"),
        ({"env_kwargs": {"observation_mode": "dict"}}, "env_kwargs: observation_mode='dict'"),
        ({"env_kwargs": {"bogus": 1}}, "env_kwargs:"),
        ({"minibatch_size": 500, "train_batch_size": 100}, "minibatch_size (500) must be at most"),
        ({"lr": 0}, "lr must be a positive number"),
        ({"ppo_options": "gamma=1"}, "ppo_options must be a mapping"),
        ({"num_env_runners": 2}, "num_env_runners (2) needs at least as many CPUs"),
    ]:
        with pytest.raises(ValueError) as error:
            train_rllib_ppo(tmp_path / "out", **kwargs)
        assert named in str(error.value), (kwargs, str(error.value))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("")
    with pytest.raises(ValueError, match="not an empty folder"):
        train_rllib_ppo(busy)
    assert not ray.is_initialized() and not (tmp_path / "out").exists()
    assert masked_ppo_config(ENV_KWARGS).env_config["episode_seed"] == 0


@pytest.mark.parametrize("option, value, expected", [
    ("gamma", "x", "expected a number, like its default 0.99"),
    ("gamma", 1.5, "expected a number from 0 to 1"),
    ("entropy_coeff", "hi", "expected a number"),
    ("entropy_coeff", [1], "Must be a list of 2 or more"),  # RLlib's validate, before Ray
    ("use_kl_loss", 1, "expected true or false"),
    ("clip_param", float("nan"), "expected a finite number"),
    ("num_aggregator_actors_per_learner", 1.5, "expected an integer"),
    ("grad_clip_by", "sideways", "must be one of"),
    ("lambda", 0.9, "did you mean 'lambda_'"),
    ("num_epochs", 0, "set it with the num_epochs argument"),
    ("minibatch_size", 10_000, "set it with the minibatch_size argument"),
    ("train_batch_size_per_learner", 1, "set it with the train_batch_size argument"),
])
def test_bad_ppo_options_are_named_before_ray_starts(tmp_path, option, value, expected):
    import ray

    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ValueError) as error:
        train_rllib_ppo(out, ppo_options={"entropy_coeff": 0.01, option: value})
    message = str(error.value)
    assert len(message.splitlines()) == 1 and message.startswith(f"ppo_options.{option}: "), message
    value_named = not expected.startswith(("set it with", "did you mean"))  # else the name is wrong
    assert expected in message and (str(value) in message or not value_named), message
    assert not ray.is_initialized() and not any(out.iterdir())


def test_a_failed_run_leaves_its_folder_reusable(tmp_path, monkeypatch):
    """Ray's start (through ray_backend.init_ray, which holds back its authentication notice) and
    the algorithm are stood in for: the run fails in its first iteration."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from wpb_gym.evaluation import ray_backend

    started = []

    class Failing:
        def train(self):
            raise RuntimeError("the first iteration failed")

        def stop(self):
            pass

    monkeypatch.setattr(ray_backend, "init_ray", lambda ray, address, **kwargs: started.append((address, kwargs)))
    monkeypatch.setattr(PPOConfig, "build_algo", lambda config: Failing())
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (tmp_path / "new" / "run", empty):
        with pytest.raises(RuntimeError, match="first iteration"):
            train_rllib_ppo(out, iterations=1, num_cpus=1)
        assert not out.exists() if out != empty else not any(out.iterdir())
    assert started[0][0] is None and started[0][1]["num_cpus"] == 1


def test_the_agent_refuses_wrong_checkpoints_and_arguments(run, tmp_path, capsys):
    out, _ = run
    with pytest.raises(FileNotFoundError, match="no RLlib checkpoint"):
        RLlibAgent(tmp_path)
    model = tmp_path / "best_model.zip"  # an SB3 model is a zip file
    with zipfile.ZipFile(model, "w") as archive:
        archive.writestr("data", "{}")
    with pytest.raises(ValueError, match=re.escape(f"evaluate it as sb3:{model}")):
        RLlibAgent(model)
    copy = tmp_path / "copy" / "checkpoint"
    shutil.copytree(out / "checkpoint", copy)
    # An RLModule's own folder stores no env arguments: refused, not played with the defaults.
    with pytest.raises(ValueError, match="no env arguments"):
        RLlibAgent(copy / "learner_group" / "learner" / "rl_module" / "default_policy")
    (copy.parent / "checkpoint.env.json").write_text('{"bogus": 1}')
    with pytest.raises(ValueError, match=rf"^{re.escape(str(copy.parent / 'checkpoint.env.json'))}: .*'bogus'"):
        RLlibAgent(copy)
    state = copy / "learner_group" / "learner" / "rl_module" / "default_policy" / "module_state.pkl"
    state.write_bytes(b"not a pickle")
    for argv in (["--agents", f"rllib:{copy}"], ["--agents", "rllib:"]):
        assert wpb_main(["eval", *argv, "--out", str(tmp_path / "e")]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and f"{state}: damaged, not the pickle RLlib wrote (UnpicklingError" in errors[0], errors
    assert "rllib:PATH needs the path of an RLlib checkpoint folder" in errors[1]
    with pytest.raises(ValueError, match="expects observations"):
        RLlibAgent(out / "checkpoint", env_kwargs={"slots": 4})
    episode = generate_episode(make_config("default", length=10), seed=1, index=0)
    context = EpisodeContext(length=10, budget_bytes=1024, track="privileged", stream=episode)
    with pytest.raises(ValueError, match="trained on the unprivileged track"):
        RLlibAgent(out / "checkpoint").start_episode(context)
    assert masked_observation(np.zeros(3, np.float32), np.array([True, False]))["action_mask"].dtype == np.float32


def test_missing_rllib_is_named_with_the_extra_to_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray.rllib", None)  # as if RLlib were not installed
    with pytest.raises(ImportError, match=r"pip install -e '\.\[rllib\]'"):
        require_rllib()
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    assert wpb_main(["eval", "--agents", f"rllib:{checkpoint}", "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert INSTALL_HINT in err and len(err.strip().splitlines()) == 1, err


# ---------------------------------------------------------------------------- the query tier
QUERY_ENV_KWARGS = {"regime": "queries_easy", "endpoints": 30, "families": 4, "length": 30 + 12 * 15,
                    "checkpoint_interval": 15, "queries_per_checkpoint": 25, "summary_max_bytes": 900,
                    "max_params": 10, "budget_fraction": 0.5, "track": "privileged"}

TRAIN_QUERY_TIER = """
import json, sys
from agents.rllib.training import train_rllib_ppo

out, env_kwargs = sys.argv[1], json.loads(sys.argv[2])
run = train_rllib_ppo(out, env_kwargs, iterations=1, seed=0, query_tier=True, train_batch_size=400,
                      minibatch_size=100, num_epochs=1, hidden_sizes=[16])
print(json.dumps({"checkpoint": str(run.checkpoint), "metrics": run.metrics}))
"""


def test_the_query_env_creator_builds_the_query_tier_in_the_masked_layout():
    from ray.tune.registry import ENV_CREATOR, _global_registry

    from agents.rllib.env import RLLIB_QUERY_ENV_NAME
    from wpb_gym.envs.query_env import QueryTierEnv

    assert register_rllib_env(query_tier=True) == RLLIB_QUERY_ENV_NAME
    for extra in ({}, {"endless": True, "endless_threshold": 0.2, "length": None}):
        env = _global_registry.get(ENV_CREATOR, RLLIB_QUERY_ENV_NAME)({**QUERY_ENV_KWARGS, "slots": 4, **extra})
        obs, _ = env.reset(seed=0)
        base = env.unwrapped
        assert isinstance(base, QueryTierEnv) and base.K == 4 and base.endless == bool(extra)
        assert env.observation_space.contains(obs) and obs["action_mask"].shape == (3 + 4,)
        for _ in range(50):  # the mask is the one for the observation it comes with
            action = int(np.flatnonzero(obs["action_mask"])[-1])
            obs, *_ = env.step(action)
            assert np.array_equal(obs["action_mask"], base.action_masks().astype(np.float32))


def test_a_query_tier_training_iteration_runs_and_checkpoints(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TRAIN_QUERY_TIER), str(out), json.dumps(QUERY_ENV_KWARGS)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["metrics"]["training_iteration"] == 1 and result["metrics"]["env_steps"] == 400
    assert (out / "checkpoint").is_dir()
    config = json.loads((out / "config.json").read_text())
    assert config["env"] == {"slots": 8, "expire_cost": 0.0, "episode_seed": 0, **QUERY_ENV_KWARGS}
    assert config["ppo"]["query_tier"] is True


def test_bad_query_tier_training_arguments_are_named_before_ray_starts(tmp_path):
    with pytest.raises(ValueError, match=r"env_kwargs: budget_bytes \(100\) and budget_fraction \(0.5\)"):
        masked_ppo_config({**QUERY_ENV_KWARGS, "budget_bytes": 100}, query_tier=True)
    with pytest.raises(ValueError, match="env_kwargs: QueryTierEnv got an unexpected|env_kwargs: .*dense_reward"):
        masked_ppo_config({**QUERY_ENV_KWARGS, "dense_reward": True}, query_tier=True)
    with pytest.raises(ValueError, match="query_tier must be True or False"):
        masked_ppo_config(QUERY_ENV_KWARGS, query_tier="yes")


def test_an_exported_rllib_policy_decides_exactly_as_its_checkpoint(run, tmp_path, capsys):
    from agents.exported.agent import ExportedPolicyAgent

    checkpoint = run[1]["checkpoint"]
    out = tmp_path / "exported"
    capsys.readouterr()
    assert wpb_main(["export", "rllib", checkpoint, "--out", str(out), "--samples", "0", "--episodes", "0"]) == 0
    original, copy = RLlibAgent(checkpoint), ExportedPolicyAgent(out)
    assert copy.env_kwargs == {**copy.env_kwargs, **original.env_kwargs} and copy.track == original.track
    manifest = json.loads((out / "policy.json").read_text(encoding="utf-8"))
    assert manifest["rllib"] == {"module": "MaskedPPOTorchRLModule",
                                 "model_config": {"vf_share_layers": False, "fcnet_hiddens": [32, 32]}}
    env = make_rllib_env(original.env_kwargs).unwrapped
    space, rng = env.observation_space, np.random.default_rng(0)
    space.seed(0)
    for _ in range(2000):
        observation, mask = space.sample(), rng.random(env.n_actions) < 0.5
        mask[0] = True
        assert copy.decide(observation, mask) == original.decide(observation, mask)
    for index in range(3):
        episode = generate_episode(make_config("default", length=60), seed=4, index=index)
        runs = [run_episode(agent, episode, 4096, original.track) for agent in (original, copy)]
        assert runs[0].actions == runs[1].actions and runs[0].metrics.as_row() == runs[1].metrics.as_row()

