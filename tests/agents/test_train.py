"""``wpb train``: a run folder that evaluation and resumption can use."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil

import numpy as np
import pytest
import yaml

from agents.sb3.agent import SB3Agent
from agents.held_out import HELD_OUT_SEED_OFFSET
from agents.sb3.train import ALGOS, load_config
from wpb_gym.cli import main as wpb
from wpb_gym.cli.inputs import parse_env_kwarg
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.evaluation.runner import run_episode

TINY = {
    "n_envs": 2,
    "timesteps": 256,
    "hyperparams": {"n_steps": 32, "batch_size": 32, "n_epochs": 1},
    "env": {"length": 20, "budget_bytes": 2048, "slots": 4},
    "eval": {"episodes": 2, "every_steps": 128},
    "checkpoint_every_steps": 128,
}


@contextlib.contextmanager
def one_line_error(capsys, pattern: str = ""):
    """The ``wpb`` call inside (``assert 2 == main(...)``) prints one line matching ``pattern``."""
    capsys.readouterr()
    yield
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(pattern, err), err


def tiny_config(tmp_path, **changes):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, **changes}))
    return path


def test_configs_merge_and_explain_their_errors(tmp_path):
    config = load_config("maskable_ppo", tiny_config(tmp_path))
    assert config["n_envs"] == 2 and config["env"]["dense_reward"] is True  # defaults kept under env
    assert config["env"]["slots"] == 4
    shipped = load_config("maskable_ppo")
    assert shipped["hyperparams"]["gamma"] == 1.0 and shipped["torch_threads"] == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text("n_env: 3\n")
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['n_env'\]"):
        load_config("ppo", bad)
    with pytest.raises(ValueError, match="unknown algorithm"):
        load_config("sac")
    assert parse_env_kwargs(["regime=burst_drift", "slots=4", "dense_reward=false"]) == {
        "regime": "burst_drift",
        "slots": 4,
        "dense_reward": False,
    }
    with pytest.raises(ValueError, match="key=value"):
        parse_env_kwargs(["slots"])


def test_a_bad_env_value_is_named_with_the_recipe_and_flags_it_came_from(tmp_path, capsys):
    argv = ["train", "--algo", "ppo", "--config", str(tiny_config(tmp_path)), "--out", str(tmp_path / "o")]
    with one_line_error(capsys, r"tiny\.yaml: env with --env-kwargs: GeneratorConfig\.doc_utility: expected at most"):
        assert wpb([*argv, "--env-kwargs", "doc_utility=2.0e+12"]) == 2
    tiny_config(tmp_path, env={**TINY["env"], "regime": "breaking"})  # rewritten: 20 steps, short of its warm-up
    with one_line_error(capsys, r"tiny\.yaml: env: GeneratorConfig\.length: regime 'breaking' opens with a warm-up"):
        assert wpb(argv) == 2
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("hyperparams", "problem"), [
    ({"learning_rate": float("inf")}, "hyperparams.learning_rate: inf for ppo: expected a finite number"),
    ({"learning_rate": 10**400}, "for ppo: expected a finite number"),  # past float64: no OverflowError
    ({"learning_rate": "1e-3"}, "'1e-3' for ppo: expected a number, got text (YAML reads 1e-3 as text"),
    ({"n_steps": 1.5}, "hyperparams.n_steps: 1.5 for ppo: expected an integer, like its default 2048"),
])
def test_hyperparameters_that_do_not_fit_their_type_are_refused_naming_the_file(tmp_path, hyperparams, problem):
    """SB3 would train on an infinite learning rate into NaN weights, and take text for a schedule."""
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({**TINY, "hyperparams": {**TINY["hyperparams"], **hyperparams}}))
    with pytest.raises(ValueError, match=re.escape(f"{path}: {problem}" if problem.startswith("hyper") else problem)):
        load_config("ppo", path)


def test_wpb_train_writes_a_usable_run_folder(tmp_path):
    out = tmp_path / "run"
    argv = ["train", "--algo", "maskable_ppo", "--config", str(tiny_config(tmp_path)), "--seed", "3"]
    assert wpb([*argv, "--env-kwargs", "regime=burst_drift", "--out", str(out), "--quiet"]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["seed"] == 3 and saved["held_out_episode_seed"] == 3 + HELD_OUT_SEED_OFFSET
    assert saved["config"]["env"]["regime"] == "burst_drift" and saved["versions"]["torch"]
    assert saved["config"]["vec_env"] == "native"  # the native vector env, unless --vec-env says otherwise
    from stable_baselines3.common.monitor import load_results  # pandas, in the train extra

    episodes = load_results(str(out / "monitor"))
    assert len(episodes) >= 1 and set(episodes.columns) >= {"r", "l", "t"}
    for name in ("best_model.zip", "final_model.zip", "eval/evaluations.npz"):
        assert (out / name).is_file(), name
    # Every argument that shapes the observation, defaults included (a later default cannot change it).
    assert json.loads((out / "best_model.env.json").read_text()) == {
        "slots": 4, "track": "unprivileged", "slot_order": "relevance", "observation_mode": "box",
        "max_expires_per_step": None,
    }
    assert any((out / "tb").rglob("events.out.tfevents.*"))
    assert sorted(p.name for p in (out / "checkpoints").glob("*.zip"))
    # The best model is an agent of the offline evaluator.
    agent = SB3Agent(out / "best_model.zip")
    episode = generate_episode(make_config("burst_drift", length=20), seed=99, index=0)
    assert 0.0 <= run_episode(agent, episode, 2048).metrics.f1 <= 1.0
    # ... and of wpb eval, twice under labels of its own (LABEL=sb3:PATH).
    run = tmp_path / "eval"
    models = f"a=sb3:{out / 'best_model.zip'},b=sb3:{out / 'final_model.zip'}"
    argv = ["eval", "--agents", models, "--regimes", "burst_drift", "--lengths", "20", "--budgets", "2048"]
    assert wpb([*argv, "--episodes-per-condition", "1", "--tracks", "unprivileged", "--out", str(run), "--quiet"]) == 0
    assert {line.split(",")[4] for line in (run / "results.csv").read_text().splitlines()[1:]} == {"a", "b"}


def test_wpb_train_resumes_from_the_newest_checkpoint(tmp_path, capsys):
    from sb3_contrib import MaskablePPO

    out = tmp_path / "run"
    config = tiny_config(tmp_path)
    assert (
        wpb(
            [
                "train",
                "--algo",
                "maskable_ppo",
                "--config",
                str(config),
                "--timesteps",
                "128",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    assert (
        wpb(
            [
                "train",
                "--algo",
                "maskable_ppo",
                "--config",
                str(config),
                "--timesteps",
                "256",
                "--out",
                str(out),
                "--resume",
                "--quiet",
            ]
        )
        == 0
    )
    assert MaskablePPO.load(out / "final_model.zip").num_timesteps == 256
    # The first part's monitor log is kept beside the resumed part's; load_results reads both.
    logs = sorted(p.name for p in (out / "monitor").glob("*.monitor.csv"))
    assert logs == ["native.monitor.csv", "native.until_128.monitor.csv"], logs
    # Resuming under other settings is refused, naming them, before anything in the folder changes.
    files = {path: path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()}
    resume = ["train", "--algo", "maskable_ppo", "--config", str(config), "--timesteps", "384", "--out", str(out),
              "--resume", "--quiet"]
    with one_line_error(capsys, r"other settings: config\.env\.regime is absent in the run, 'burst_drift' here"):
        assert 2 == wpb([*resume, "--env-kwargs", "regime=burst_drift"])
    with one_line_error(capsys, r"other settings: seed is 0 in the run, 3 here"):
        assert 2 == wpb([*resume, "--seed", "3"])
    with one_line_error(capsys, r"config\.env\.kind_budgets is absent in the run, 'endpoint=20%' here"):
        assert 2 == wpb([*resume, "--env-kwargs", "kind_budgets=endpoint=20%"])  # another observation
    assert {path: path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()} == files
    # An env argument written out at its default is the same setting.
    assert wpb([*resume, "--env-kwargs", "track=unprivileged", "slot_order=relevance"]) == 0
    # A run without a checkpoint, or without a record, is refused before anything in it changes.
    bare = tmp_path / "bare"
    shutil.copytree(out, bare)
    for checkpoint in (bare / "checkpoints").iterdir():
        checkpoint.unlink()
    kept = {path: path.read_bytes() for path in sorted(bare.rglob("*")) if path.is_file()}
    with one_line_error(capsys, "no checkpoint"):
        assert 2 == wpb([*resume[:-3], str(bare), "--resume", "--quiet"])
    (bare / "config.json").write_text("[1, 2]")
    with one_line_error(capsys, "not the settings of a run of wpb train"):
        assert 2 == wpb([*resume[:-3], str(bare), "--resume", "--quiet"])
    assert {path: path.read_bytes() for path in sorted(bare.rglob("*")) if path.is_file()} == {
        **kept, bare / "config.json": b"[1, 2]"}


def test_a_run_started_from_another_model_resumes_with_its_own_record(tmp_path, capsys):
    config = tiny_config(tmp_path)
    base = ["train", "--algo", "maskable_ppo", "--config", str(config), "--quiet"]
    assert wpb([*base, "--timesteps", "128", "--out", str(tmp_path / "first")]) == 0
    start = tmp_path / "first" / "final_model.zip"
    out = tmp_path / "second"
    assert wpb([*base, "--timesteps", "128", "--init-from", str(start), "--out", str(out)]) == 0
    recorded = json.loads((out / "config.json").read_text())
    changed = tmp_path / "changed.yaml"  # other hyperparameters: the checkpoint keeps its own, and says so
    changed.write_text(yaml.safe_dump({**TINY, "hyperparams": {**TINY["hyperparams"], "n_epochs": 2}}))
    capsys.readouterr()
    resumed = ["train", "--algo", "maskable_ppo", "--config", str(changed), "--quiet", "--timesteps", "256",
               "--out", str(out), "--resume"]
    assert wpb(resumed) == 0
    assert "keeps the hyperparameters it was saved with" in capsys.readouterr().err
    again = json.loads((out / "config.json").read_text())
    assert again["init_from"] == recorded["init_from"] == str(start)
    assert again["init_from_hyperparams"] == recorded["init_from_hyperparams"]
    assert again["config"]["hyperparams"] == recorded["config"]["hyperparams"] and again["trained_timesteps"] == 256
    with one_line_error(capsys, "no checkpoint"):
        assert 2 == wpb(
            [
                "train",
                "--algo",
                "maskable_ppo",
                "--config",
                str(config),
                "--out",
                str(tmp_path / "new"),
                "--resume",
                "--quiet",
            ]
        )


def test_wpb_train_on_episode_files_needs_held_out_files_and_can_start_from_a_model(tmp_path, capsys):
    from sb3_contrib import MaskablePPO

    from wpb_gym.episodes.frozen import freeze_set

    train_set = freeze_set(tmp_path / "train", ["breaking"], [20], 3, seed=1, overrides={"api_pool": 8})
    held_set = freeze_set(tmp_path / "held", ["breaking"], [20], 2, seed=2, overrides={"api_pool": 8})
    train_file, held_file = train_set.files[0].path, held_set.files[0].path
    config = str(tiny_config(tmp_path))
    argv = ["train", "--algo", "maskable_ppo", "--config", config, "--quiet"]
    with one_line_error(capsys, "needs held-out episodes"):
        assert 2 == wpb([*argv, "--env-kwargs", f"episodes={train_file}", "--out", str(tmp_path / "x")])
    with one_line_error(capsys, "hold the same episodes"):
        assert 2 == wpb(
            [
                *argv,
                "--env-kwargs",
                f"episodes={train_file}",
                "--eval-episodes",
                str(train_file),
                "--out",
                str(tmp_path / "x"),
            ]
        )
    synthetic = tmp_path / "synthetic"
    assert wpb([*argv, "--env-kwargs", "regime=breaking", "api_pool=8", "--out", str(synthetic)]) == 0
    tuned = tmp_path / "tuned"
    assert (
        wpb(
            [
                *argv,
                "--env-kwargs",
                f"episodes={train_file}",
                "--eval-episodes",
                str(held_file),
                "--init-from",
                str(synthetic / "final_model.zip"),
                "--timesteps",
                "128",
                "--out",
                str(tuned),
            ]
        )
        == 0
    )
    saved = json.loads((tuned / "config.json").read_text())
    assert saved["held_out_episodes"] == str(held_file) and saved["init_from"].endswith("final_model.zip")
    assert MaskablePPO.load(tuned / "final_model.zip").num_timesteps == 128
    evaluations = np.load(tuned / "eval" / "evaluations.npz")
    assert evaluations["results"].shape[1] == 2  # every held-out episode, once
    with one_line_error(capsys, "no such model file"):
        assert 2 == wpb(
            [
                *argv,
                "--env-kwargs",
                "regime=breaking",
                "api_pool=8",
                "--init-from",
                str(tmp_path / "none.zip"),
                "--out",
                str(tmp_path / "y"),
            ]
        )


@pytest.mark.parametrize("algo", [a for a in ALGOS if a != "maskable_ppo"])
def test_every_algorithm_trains(tmp_path, algo):
    hyper = {
        "ppo": TINY["hyperparams"],
        "a2c": {"n_steps": 8},
        "dqn": {"learning_starts": 16, "buffer_size": 500},
        "recurrent_ppo": {"n_steps": 16, "batch_size": 32, "n_epochs": 1},
    }[algo]
    out = tmp_path / algo
    config = tiny_config(tmp_path, hyperparams=hyper, timesteps=64)
    assert wpb(["train", "--algo", algo, "--config", str(config), "--out", str(out), "--quiet"]) == 0
    assert (out / "final_model.zip").is_file()
    # Every algorithm's model is an agent of the offline evaluator, and scores what the same
    # model scores acting in the env itself (a recurrent one carrying its LSTM state).
    agent = SB3Agent(out / "final_model.zip")
    episode = generate_episode(make_config("default", length=40), seed=99)
    offline = run_episode(agent, episode, 2048, "unprivileged").metrics.as_row()
    assert offline == _rollout(agent.model, agent.env_kwargs, episode, 2048)


def _rollout(model, env_kwargs, episode, budget):
    import inspect

    import numpy as np

    from wpb_gym.envs.env import WritePolicyBenchEnv

    env = WritePolicyBenchEnv(**env_kwargs, episodes=[episode], budget_bytes=budget)
    obs, _ = env.reset(seed=0)
    state, start, done = None, np.ones((1,), dtype=bool), False
    while not done:
        if "episode_start" in inspect.signature(model.predict).parameters:  # RecurrentPPO
            action, state = model.predict(obs, state=state, episode_start=start, deterministic=True)
            start = np.zeros((1,), dtype=bool)
        else:
            action, _ = model.predict(obs, deterministic=True)
        a = int(np.asarray(action).reshape(-1)[0])
        obs, _, done, _, info = env.step(a if env.action_masks()[a] else 0)
    return info["metrics"]


@pytest.mark.parametrize("name", ["ppo", "a2c", "dqn", "ppo_lstm"])
def test_rl_zoo_files_hold_valid_hyperparameters(name):
    """``configs/rl_zoo/*.yml`` build their model (rl-zoo3 itself is not a dependency)."""
    from pathlib import Path

    from sb3_contrib import RecurrentPPO
    from stable_baselines3 import A2C, DQN, PPO

    from wpb_gym.envs.env import WritePolicyBenchEnv

    path = Path(__file__).resolve().parents[2] / "configs" / "rl_zoo" / f"{name}.yml"
    settings = dict(yaml.safe_load(path.read_text())["WritePolicyBench-v0"])
    for key in ("n_envs", "n_timesteps"):
        settings.pop(key, None)
    policy = settings.pop("policy")
    env = WritePolicyBenchEnv(**settings.pop("env_kwargs"))
    algo = {"ppo": PPO, "a2c": A2C, "dqn": DQN, "ppo_lstm": RecurrentPPO}[name]
    model = algo(policy, env, device="cpu", **settings)
    assert model.gamma == settings["gamma"]


def test_a_failed_train_leaves_no_run_folder(tmp_path):
    from agents.sb3.train import train

    out = tmp_path / "run"
    with pytest.raises(ValueError, match="slots must be a positive int"):
        train("ppo", out, config=load_config("ppo"), env_kwargs={"slots": 0}, timesteps=8, progress=False)
    with pytest.raises(ValueError, match=r"hyperparams: PPO has no parameter \['bogus'\]; its parameters: .*n_steps"):
        config = {**load_config("ppo"), "hyperparams": {"bogus": 1}}
        train("ppo", out, config=config, timesteps=8, progress=False)
    with pytest.raises(ValueError, match="hyperparams or policy of PPO: The learning rate schedule"):
        config = {**load_config("ppo"), "hyperparams": {"learning_rate": "abc"}}
        train("ppo", out, config=config, timesteps=8, progress=False)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train("ppo", out, config=load_config("ppo"), timesteps=8, progress=False, resume=True)
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("env: [1]\n", "env: expected a mapping, got list"),
        ("eval: abc\n", "eval: expected a mapping, got str"),
        ("eval: {episodes: 0}\n", r"eval.episodes: expected an integer >= 1, got 0"),
        ("eval: {every: 3}\n", r"eval: unknown setting\(s\) \['every'\]"),
        ("n_envs: abc\n", "n_envs: expected an integer, got 'abc'"),
        ("timesteps: -5\n", "timesteps: expected an integer >= 1, got -5"),
        ("policy: 3\n", "policy: expected a policy name"),
        ("vec_env: threads\n", "vec_env must be one of native, dummy, subproc"),
        ("episode_workers: -1\n", 'episode_workers: expected "auto" or an integer >= 0, got -1'),
        ("episode_workers: many\n", "episode_workers: expected \"auto\" or an integer >= 0, got 'many'"),
        ("episode_workers: true\n", 'episode_workers: expected "auto" or an integer >= 0, got True'),
        ("{vec_env: dummy, episode_workers: 1}\n", "episode_workers: 1 needs vec_env native"),
        ("{n_envs: 2, episode_workers: 3}\n", r"episode_workers: 3 is more than n_envs \(2\)"),
    ],
)
def test_train_configs_are_checked_naming_file_and_key(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"bad.yaml: {message}"):
        load_config("ppo", path)


def parse_env_kwargs(items):
    """``wpb train --env-kwargs ITEM...`` as the command reads it."""
    return dict(parse_env_kwarg(item, "--env-kwargs") for item in items)


def test_env_kwargs_refuse_repeats_and_bad_yaml(tmp_path, capsys):
    assert wpb(["train", "--algo", "ppo", "--env-kwargs", "slots=2", "slots=3", "--out", str(tmp_path / "t")]) == 2
    assert "--env-kwargs: the key slots is given more than once" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"--env-kwargs: 'slots=\[': the value is not valid YAML"):
        parse_env_kwargs(["slots=["])


def test_the_vec_env_flag_overrides_the_recipe_and_is_refused_for_bandit_learners(tmp_path, monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr("agents.sb3.train.train", lambda algo, out, **kw: seen.update(kw) or {"timesteps": 0, "trained_timesteps": 0})
    config = tiny_config(tmp_path, vec_env="dummy")
    argv = ["train", "--algo", "ppo", "--config", str(config), "--out", str(tmp_path / "t")]
    assert wpb(argv) == 0 and seen["config"]["vec_env"] == "dummy"
    assert wpb([*argv, "--vec-env", "subproc"]) == 0 and seen["config"]["vec_env"] == "subproc"
    assert wpb([*argv, "--vec-env", "threads"]) == 2
    assert "--vec-env: expected one of native, dummy, subproc, got 'threads'" in capsys.readouterr().err
    assert wpb(["train", "--algo", "epsilon_greedy", "--vec-env", "dummy", "--out", str(tmp_path / "b")]) == 2
    assert "--vec-env is for the SB3 algorithms, not epsilon_greedy" in capsys.readouterr().err


def test_the_episode_workers_flag_overrides_the_recipe(tmp_path, monkeypatch, capsys):
    from agents.sb3.train import episode_workers

    seen = {}
    monkeypatch.setattr("agents.sb3.train.train", lambda algo, out, **kw: seen.update(kw) or {"timesteps": 0, "trained_timesteps": 0})
    argv = ["train", "--algo", "ppo", "--config", str(tiny_config(tmp_path)), "--out", str(tmp_path / "t")]
    assert wpb(argv) == 0 and seen["config"]["episode_workers"] == "auto"
    assert wpb([*argv, "--episode-workers", "2"]) == 0 and episode_workers(seen["config"]) == 2
    assert wpb([*argv, "--episode-workers", "0"]) == 0 and episode_workers(seen["config"]) == 0
    for bad in ("-1", "abc", "1.5"):
        assert wpb([*argv, "--episode-workers", bad]) == 2
        assert f"""--episode-workers: expected "auto" or an integer >= 0, got '{bad}'""" in capsys.readouterr().err
    assert wpb(["train", "--algo", "epsilon_greedy", "--episode-workers", "0", "--out", str(tmp_path / "b")]) == 2
    assert "--episode-workers is for the SB3 algorithms, not epsilon_greedy" in capsys.readouterr().err
    assert wpb([*argv, "--episode-workers", "1", "--vec-env", "dummy"]) == 2
    assert "episode_workers: 1 needs vec_env native" in capsys.readouterr().err
    auto = {"episode_workers": "auto", "vec_env": "native", "torch_threads": 1}
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert episode_workers(auto) == int(os.name == "posix")
    assert episode_workers({**auto, "vec_env": "dummy"}) == 0
    assert episode_workers({**auto, "torch_threads": 2}) == 0  # torch takes every CPU
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0}, raising=False)
    assert episode_workers(auto) == 0
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    cpu_max = tmp_path / "cpu.max"
    monkeypatch.setattr("agents.sb3.train.CPU_MAX", cpu_max)
    for text, workers in (("max 100000\n", 1), ("150000 100000\n", 1), ("100000 100000\n", 0), ("garbled\n", 1)):
        cpu_max.write_text(text)  # a container's quota: --cpus=1 leaves torch's thread the only one
        assert episode_workers(auto) == int(os.name == "posix") * workers, text


def test_wpb_train_prepares_the_episodes_the_core_makes_in_a_worker(tmp_path, monkeypatch):
    from wpb_gym.envs.fast.episode_workers import EpisodeWorkers

    served = []
    take = EpisodeWorkers.take

    def counted(self, *args):
        result = take(self, *args)
        served.append(result is not None)
        return result

    monkeypatch.setattr(EpisodeWorkers, "take", counted)
    argv = ["train", "--algo", "maskable_ppo", "--config", str(tiny_config(tmp_path, timesteps=3000)),
            "--env-kwargs", "regime=mixed_sizes", "length=80", "api_pool=4",  # made by the core (renames, sections)
            "--episode-workers", "1",
            "--out", str(tmp_path / "run"), "--quiet"]
    assert wpb(argv) == 0
    assert any(served), served  # some resets found their episode prepared (the first ones cannot)


def test_the_command_line_names_the_algorithms_and_vec_envs_of_agents(tmp_path, monkeypatch, capsys):
    from agents.learners.training import LEARNER_ALGOS
    from agents.sb3.train import VEC_ENVS
    from wpb_gym.cli import training

    assert training.ALGOS == (*ALGOS, *LEARNER_ALGOS, "value_keeper") and training.VEC_ENVS == VEC_ENVS
    seen = {}
    monkeypatch.setattr("agents.sb3.train.train", lambda algo, out, **kw: seen.update(kw) or {"timesteps": 0, "trained_timesteps": 0})
    imitation = tiny_config(tmp_path, imitation={"teacher": "breaking_rule", "rounds": 1, "episodes": 2})
    argv = ["train", "--algo", "maskable_ppo", "--timesteps", "0", "--out", str(tmp_path / "t")]
    assert wpb([*argv, "--config", str(imitation)]) == 0 and seen["config"]["timesteps"] == 0
    assert wpb([*argv, "--config", str(tiny_config(tmp_path))]) == 2
    assert "tiny.yaml with --timesteps: timesteps: expected an integer >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("algo", ["maskable_ppo", "ppo", "epsilon_greedy", "value_keeper"])
def test_a_misspelt_regime_is_named_with_the_closest_not_blamed_on_the_recipe(tmp_path, capsys, algo):
    """The regime picks the recipe: a typo in it is the option's fault, whatever the recipe."""
    argv = ["train", "--algo", algo, "--env-kwargs", "regime=contract_mx", "--out", str(tmp_path / "o")]
    with one_line_error(capsys, r"^wpb train: error: --env-kwargs: regime: unknown regime 'contract_mx' "
                                r"\(did you mean 'contract_mix'\?\); known regimes: default, .*contract_mix"):
        assert wpb(argv) == 2
    assert not (tmp_path / "o").exists()


def test_a_misspelt_regime_in_a_recipe_is_named_with_the_recipe(tmp_path, capsys):
    config = tiny_config(tmp_path, env={**TINY["env"], "regime": "breakng"})
    argv = ["train", "--algo", "ppo", "--config", str(config), "--out", str(tmp_path / "o")]
    with one_line_error(capsys, r"tiny\.yaml: env: regime: unknown regime 'breakng' \(did you mean 'breaking'\?\)"):
        assert wpb(argv) == 2
    with one_line_error(capsys, r"^wpb train: error: --env-kwargs: regime: unknown regime 'burst' "):
        assert wpb([*argv, "--env-kwargs", "regime=burst"]) == 2


def test_an_algorithm_without_a_recipe_says_it_trains_on_the_defaults(tmp_path, capsys, monkeypatch):
    from agents.sb3.train import DEFAULTS, recipe_path

    assert recipe_path("ppo", "contract_mix") is None
    seen = {}
    monkeypatch.setattr("agents.sb3.train.train", lambda algo, out, **kw: seen.update(kw) or {"timesteps": 0, "trained_timesteps": 0})
    capsys.readouterr()
    argv = ["train", "--algo", "ppo", "--env-kwargs", "regime=contract_mix", "--out", str(tmp_path / "o")]
    assert wpb(argv) == 0
    out, err = capsys.readouterr()
    assert "note: no shipped recipe for ppo on regime contract_mix: training with the ppo defaults" in err
    assert "trained ppo (the ppo defaults)" in out
    assert seen["config"]["hyperparams"] == DEFAULTS["hyperparams"]
    # A regime with a recipe uses it, and says nothing more.
    assert wpb(["train", "--algo", "maskable_ppo", "--env-kwargs", "regime=contract_mix",
                "--out", str(tmp_path / "m")]) == 0
    out, err = capsys.readouterr()
    assert "maskable_ppo_imitation.yaml" in out and "note:" not in err
    assert seen["config"]["imitation"]["teacher"] == "breaking_rule"


def test_a_recipe_missing_from_the_package_is_an_error_not_the_defaults(tmp_path, capsys, monkeypatch):
    from agents.sb3 import train as training

    monkeypatch.setattr(training, "RECIPE_FOLDER", tmp_path / "recipes")  # an install without its data
    with pytest.raises(FileNotFoundError, match=r"maskable_ppo_imitation\.yaml, is missing from .*reinstall"):
        training.recipe_path("maskable_ppo", "breaking")
    with pytest.raises(FileNotFoundError, match=r"maskable_ppo\.yaml, is missing"):
        training.load_config("maskable_ppo", regime="default")
    monkeypatch.setattr(training, "train", lambda *a, **kw: pytest.fail("trained without its recipe"))
    argv = ["train", "--algo", "maskable_ppo", "--env-kwargs", "regime=breaking", "--out", str(tmp_path / "o")]
    with one_line_error(capsys, r"the shipped recipe of maskable_ppo for regime breaking, "
                                r"maskable_ppo_imitation\.yaml, is missing"):
        assert wpb(argv) == 2


def test_train_without_a_config_takes_the_regimes_recipe_or_says_it_has_none(tmp_path, capsys):
    from agents.sb3.train import train

    with pytest.raises(ValueError, match="slots must be a positive int"):  # fails once the envs are built
        train("ppo", tmp_path / "o", env_kwargs={"regime": "breaking", "slots": 0}, timesteps=8, progress=False)
    assert "note: no shipped recipe for ppo on regime breaking" in capsys.readouterr().err
    with pytest.raises(ValueError, match="slots must be a positive int"):
        train("maskable_ppo", tmp_path / "o", env_kwargs={"regime": "breaking", "slots": 0}, progress=False)
    assert "note:" not in capsys.readouterr().err


@pytest.mark.parametrize("failing", ["model", "learning"])
def test_a_failed_run_closes_its_envs(tmp_path, monkeypatch, failing):
    """Envs hold processes (episode workers, SubprocVecEnv): a run that fails must not leave them."""
    from agents.sb3 import optimizer
    from agents.sb3 import train as training

    built, closed = [], []
    real_build = training.build_vec_env

    def recording(*args, **kwargs):
        env = real_build(*args, **kwargs)
        close = env.close
        env.close = lambda: (closed.append(env), close())[1]
        built.append(env)
        return env

    def boom(*args, **kwargs):
        raise RuntimeError(f"boom in {failing}")

    monkeypatch.setattr(training, "build_vec_env", recording)
    monkeypatch.setattr(*((training, "new_model", boom) if failing == "model" else (optimizer, "optimizer_record", boom)))
    config = load_config("ppo", tiny_config(tmp_path, vec_env="dummy"))
    with pytest.raises(RuntimeError, match=f"boom in {failing}"):
        training.train("ppo", tmp_path / "run", config=config, progress=False)
    assert len(built) == 2 and closed == built  # the training envs and the validation env


def test_closing_training_envs_closes_the_validation_env_even_when_the_training_env_fails_to():
    from agents.sb3.train import TrainingEnvs

    closed = []

    class Env:
        def __init__(self, name, fails):
            self.name, self.fails = name, fails

        def close(self):
            closed.append(self.name)
            if self.fails:
                raise OSError(f"{self.name} would not close")

    envs = TrainingEnvs(Env("train", True), Env("validation", False), {"episodes": []})
    with pytest.raises(OSError, match="train would not close"):
        envs.close()
    assert closed == ["train", "validation"]


def test_fewer_timesteps_than_a_rollout_train_a_whole_rollout_and_say_so(tmp_path, capsys):
    # PPO learns from whole rollouts (n_steps per env): 10 steps asked are a rollout of n_steps x n_envs,
    # and what was trained is what the run reports, not the 10 set.
    from sb3_contrib import MaskablePPO

    out = tmp_path / "run"
    argv = ["train", "--algo", "maskable_ppo", "--config", str(tiny_config(tmp_path)), "--timesteps", "10"]
    assert wpb([*argv, "--out", str(out), "--quiet"]) == 0
    rollout = TINY["hyperparams"]["n_steps"] * TINY["n_envs"]
    captured = capsys.readouterr()
    assert f"learns from whole rollouts of {rollout:,} steps ({TINY['n_envs']} envs): it trains {rollout:,} steps " \
           f"for the 10 timesteps set (by --timesteps, or the recipe)" in captured.err
    assert f"for {rollout:,} steps ->" in captured.out
    saved = json.loads((out / "config.json").read_text())
    assert saved["timesteps"] == 10 and saved["trained_timesteps"] == rollout
    assert MaskablePPO.load(out / "final_model.zip").num_timesteps == rollout
    assert [p.name for p in (out / "checkpoints").glob("*.zip")] == [f"model_{rollout}_steps.zip"]


def test_wpb_train_takes_a_query_tiers_stream_with_its_knobs(tmp_path):
    # The knobs are the tier's generator options: the training env and the validation env (given
    # the held-out episodes made) both take them, and the vector env makes the episodes.
    out = tmp_path / "run"
    argv = ["train", "--algo", "maskable_ppo", "--config", str(tiny_config(tmp_path)), "--env-kwargs",
            "regime=queries_easy", "endpoints=12", "families=3", "length=60", "checkpoint_interval=10",
            "dense_reward=true", "--timesteps", "10", "--out", str(out), "--quiet"]
    assert wpb(argv) == 0  # dense_reward: WritePolicyBenchEnv's argument, which QueryTierEnv does not have
    saved = json.loads((out / "config.json").read_text())
    assert saved["config"]["env"]["regime"] == "queries_easy" and saved["config"]["env"]["endpoints"] == 12
    agent = SB3Agent(str(out / "best_model.zip"))
    from wpb_gym.episodes.generators.regimes import generate_episode as generate_any, make_config as config_of

    episode = generate_any(config_of("queries_easy", endpoints=12, families=3, checkpoint_interval=10, length=60), 7)
    assert run_episode(agent, episode, 2048).queries is not None


def test_a_recipes_query_regime_takes_its_knobs_and_value_keeper_refuses_env_arguments(tmp_path, capsys):
    knobs = {"regime": "queries_easy", "endpoints": 12, "families": 3, "length": 60, "checkpoint_interval": 10,
             "budget_bytes": 2048, "slots": 4}
    out = tmp_path / "run"
    assert wpb(["train", "--algo", "maskable_ppo", "--config", str(tiny_config(tmp_path, env=knobs)), "--env-kwargs",
                "families=4", "--timesteps", "10", "--out", str(out), "--quiet"]) == 0
    assert json.loads((out / "config.json").read_text())["config"]["env"]["families"] == 4
    with one_line_error(capsys, "value_keeper does not read slots: it takes regime, length, episodes, budget_bytes"):
        assert wpb(["train", "--algo", "value_keeper", "--env-kwargs", "regime=queries_easy", "slots=4",
                    "--out", str(tmp_path / "vk")]) == 2
    with one_line_error(capsys, "unknown env argument 'endpoints'"):
        assert wpb(["train", "--algo", "maskable_ppo", "--config", str(tiny_config(tmp_path)), "--env-kwargs",
                    "regime=breaking", "endpoints=12", "--out", str(tmp_path / "b")]) == 2
    assert not (tmp_path / "vk").exists() and not (tmp_path / "b").exists()
    # Without a regime, value_keeper's default tier takes the knobs.
    knob_args = ["endpoints=40", "families=4", "length=280", "checkpoint_interval=20", "queries_per_checkpoint=40",
                 "summary_max_bytes=900", "max_params=10", "budget_bytes=2048"]
    assert wpb(["train", "--algo", "value_keeper", "--env-kwargs", *knob_args, "--timesteps", "200",
                "--out", str(tmp_path / "vk_default"), "--quiet"]) == 0
    assert json.loads((tmp_path / "vk_default" / "config.json").read_text())["config"]["env"]["regime"] == \
        "queries_medium"


def test_a_run_ends_with_one_checkpoint_holding_the_steps_asked(tmp_path):
    # A checkpoint at exactly the steps asked, then the last rollout runs past them: no second,
    # near-identical "final" checkpoint beside it; --resume then has nothing left to do.
    out = tmp_path / "run"
    config = tiny_config(tmp_path, checkpoint_every_steps=96)
    assert wpb(["train", "--algo", "maskable_ppo", "--config", str(config), "--timesteps", "96", "--out", str(out),
                "--quiet"]) == 0
    assert [p.name for p in (out / "checkpoints").glob("*.zip")] == ["model_96_steps.zip"]
    assert json.loads((out / "config.json").read_text())["trained_timesteps"] == 128
