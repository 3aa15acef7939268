"""Training SB3 agents on ``WritePolicyBench-v0`` (``wpb train``).

A run folder gets:
- ``config.json``: the exact settings and seeds, and the package versions;
- ``tb/``: TensorBoard logs;
- ``checkpoints/``: periodic models (``--resume`` continues from the newest);
- ``best_model.zip``: the best model on held-out episodes, from periodic evaluation
  (``MaskableEvalCallback`` for the masked algorithm);
- ``final_model.zip``;
- ``eval/evaluations.npz``.

Every model file has an ``<model>.env.json`` beside it, holding the env arguments that shape
the observation, so ``make_agent("sb3", path=...)`` and ``wpb eval --agents sb3:PATH``
rebuild the right env.

Held-out episodes come from another episode seed (``seed + HELD_OUT_SEED_OFFSET``) than the
training episodes (``seed``), so evaluation never sees a training episode. When the training
episodes come from files (``episodes=`` in the env arguments, e.g. the training period of a
real-drift set), the held-out ones must be given too (``eval_episodes``, ``--eval-episodes``):
every one of them is evaluated, in order, at each evaluation.

``init_from`` (``--init-from MODEL.zip``) starts from another run's model, for example one
trained on synthetic regimes and then trained further on real episodes. The model keeps the
hyperparameters it was saved with (SB3's ``load``); ``config.json`` then records them under
``init_from_hyperparams`` beside the config file's, which were not used.

Torch gets ``torch_threads`` threads (1 by default): on 2 cores, PyTorch's default threads
train PPO several times slower. While the model learns, torch's distributions skip their
argument checks (the logits come from the policy and the masks from the env, valid by
construction), and MaskablePPO's policy masks its logits directly instead of building three
distributions per batch (``agents.sb3.masked_policy``: the same rollouts and weights, bit for bit).
A new model's Adam is PyTorch's fused one (``agents.sb3.optimizer``: SB3's settings, rounded
differently); ``config.json`` records the optimizer the model trains with under ``optimizer``.
``benchmarks/vector_env.py --part train`` measures all three against MaskablePPO as SB3 runs
it. A policy whose logits turn NaN then fails at sampling (torch's multinomial).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from wpb_gym.core.atomic_files import write_atomic
from wpb_gym.core.setting_values import parse_int
from wpb_gym.core.settings_files import read_settings

from ..held_out import HELD_OUT_SEED_OFFSET, held_out_env_kwargs, validation_env_kwargs
from ..option_checks import mistyped
from ..versions import package_versions

ALGOS = ("ppo", "maskable_ppo", "a2c", "dqn", "recurrent_ppo")
# The shipped recipes: package data, found wherever the package is installed.
RECIPE_FOLDER: Traversable = files(__package__) / "recipes"

DEFAULTS: dict[str, Any] = {
    "policy": "MlpPolicy",
    "n_envs": 4,
    # "native": one WritePolicyBenchVectorEnv behind SB3's VecEnv (NativeVecEnv); "dummy" and
    # "subproc": SB3's DummyVecEnv / SubprocVecEnv over single envs. Same episodes and results.
    "vec_env": "native",
    # Processes preparing the native vector env's next made episodes (those it does not compile
    # from their draws: those with sections, guides or renames): "auto" is one where
    # this process may use more CPUs than torch's threads take. It starts only if the env's
    # episodes are made.
    "episode_workers": "auto",
    "timesteps": 200_000,
    "torch_threads": 1,
    "hyperparams": {},
    "env": {"budget_bytes": 10240, "dense_reward": True},
    "eval": {"episodes": 20, "every_steps": 20_000},
    "checkpoint_every_steps": 50_000,
    "imitation": None,  # a mapping (``agents.sb3.imitation.DEFAULTS``): DAgger before RL (maskable_ppo, ppo)
    # True: the query tier's own env (QueryTierEnv) and agents.sb3.query_imitation (maskable_ppo):
    # ``env`` holds QueryTierEnv's arguments, ``imitation`` that module's settings.
    "query_env": False,
}
IMITATION_ALGOS = ("maskable_ppo", "ppo")
# What a query_env recipe does not read (it plays the query tier's env, one at a time).
QUERY_UNREAD = {"n_envs", "vec_env", "episode_workers", "eval", "checkpoint_every_steps", "policy", "hyperparams"}


def algo_class(algo: str) -> type:
    from sb3_contrib import MaskablePPO, RecurrentPPO
    from stable_baselines3 import A2C, DQN, PPO

    classes = {"ppo": PPO, "maskable_ppo": MaskablePPO, "a2c": A2C, "dqn": DQN, "recurrent_ppo": RecurrentPPO}
    if algo not in classes:
        raise ValueError(f"unknown algorithm {algo!r}; expected one of {ALGOS}")
    return classes[algo]


# The shipped recipe of an (algorithm, regime) where it is not the algorithm's own.
RECIPES: dict[tuple[str, str], str] = {
    **{("maskable_ppo", regime): "maskable_ppo_imitation.yaml" for regime in ("breaking", "reverts", "contract_mix")},
    **{("maskable_ppo", regime): "maskable_ppo_imitation_short.yaml" for regime in ("noisy_priority", "mixed_sizes")},
    **{("maskable_ppo", regime): "maskable_ppo_real.yaml" for regime in ("real:stripe", "real:twilio")},
    **{("maskable_ppo", regime): "maskable_ppo_queries.yaml"
       for regime in ("queries_easy", "queries_medium", "queries_hard")},
}
# The algorithms' own recipes, for the regimes RECIPES does not name. An algorithm missing here
# has none and trains on DEFAULTS with SB3's hyperparameters.
ALGO_RECIPES: dict[str, str] = {"maskable_ppo": "maskable_ppo.yaml"}


def recipe_path(algo: str, regime: str | None) -> Traversable | None:
    """The shipped recipe of ``algo`` for ``regime`` (``RECIPES``, else ``ALGO_RECIPES``) in the
    package's ``recipes`` folder, or None where there is none (the run uses ``DEFAULTS``).

    A recipe named here but absent from the package raises ``FileNotFoundError``: an install
    that lost its package data must not train on the defaults while looking like the recipe."""
    name = RECIPES.get((algo, str(regime))) or ALGO_RECIPES.get(algo)
    if name is None:
        return None
    file = RECIPE_FOLDER / name
    if not file.is_file():
        raise FileNotFoundError(
            f"the shipped recipe of {algo}" + (f" for regime {regime}" if regime is not None else "")
            + f", {name}, is missing from {RECIPE_FOLDER}: the package is incomplete; reinstall it, "
            "or give a recipe with --config"
        )
    return file


def defaults_note(algo: str, regime: str | None) -> str:
    """What a run without a recipe trains with, for the user to see before it starts."""
    on = f" on regime {regime}" if regime is not None else ""
    return (f"note: no shipped recipe for {algo}{on}: training with the {algo} defaults "
            f"(agents.sb3.train.DEFAULTS: {DEFAULTS['n_envs']} envs, {DEFAULTS['timesteps']:,} timesteps, "
            "SB3's hyperparameters); give one with --config")


def load_config(algo: str, path: str | Path | Traversable | None = None, regime: str | None = None) -> dict[str, Any]:
    """The defaults, then ``path`` or else the shipped recipe (``recipe_path(algo, regime)``);
    the defaults alone where neither exists (``defaults_note`` says so to the user)."""
    if algo not in ALGOS:
        raise ValueError(f"unknown algorithm {algo!r}; expected one of {ALGOS}")
    config = json.loads(json.dumps(DEFAULTS))  # a deep copy
    if path is None:
        file = recipe_path(algo, regime)
    else:
        file = Path(path) if isinstance(path, (str, os.PathLike)) else path
    where = file if file is not None else f"the {algo} defaults"
    if file is not None:
        loaded = read_settings(file, DEFAULTS)
        if loaded.get("query_env") is True:  # the defaults' env arguments are WritePolicyBenchEnv's
            config["env"] = {}
            config["timesteps"] = 0
            unread = sorted(set(loaded) & QUERY_UNREAD)
            if unread:
                raise ValueError(f"{file}: {', '.join(unread)}: a query_env recipe trains by imitation on the "
                                 f"query tier's env and does not read {'them' if len(unread) > 1 else 'it'}")
        for key, value in loaded.items():
            if key == "imitation":
                config[key] = value
            elif isinstance(config[key], dict):
                if not isinstance(value, dict):
                    raise ValueError(f"{file}: {key}: expected a mapping, got {type(value).__name__} {value!r}")
                config[key].update(value)
            else:
                config[key] = value
    check_config(config, where)
    # SB3 would take a number written as text for a schedule, or train on an infinite rate into
    # NaN weights. Unknown names are refused when the model is made, with the names it accepts.
    wrong = mistyped(algo_class(algo), config["hyperparams"])
    if wrong:
        raise ValueError(f"{where}: hyperparams.{wrong[0]}: {wrong[1]!r} for {algo}: {wrong[2]}")
    return config


def check_config(config: dict[str, Any], file: Path | Traversable | str) -> None:
    """Refuse settings SB3 would choke on later, naming the file (or flags) and key."""
    for key in ("n_envs", "torch_threads", "checkpoint_every_steps"):
        parse_int(config[key], f"{file}: {key}", 1)
    # 0 steps of RL: the imitation student is the result (a recipe may stop there).
    parse_int(config["timesteps"], f"{file}: timesteps", 0 if config["imitation"] is not None or config["query_env"]
              is True else 1)
    unknown = sorted(set(config["eval"]) - set(DEFAULTS["eval"]))
    if unknown:
        raise ValueError(f"{file}: eval: unknown setting(s) {unknown}; known: {sorted(DEFAULTS['eval'])}")
    for key in DEFAULTS["eval"]:
        parse_int(config["eval"][key], f"{file}: eval.{key}", 1)
    if config["vec_env"] not in VEC_ENVS:
        raise ValueError(f"{file}: vec_env must be one of {', '.join(VEC_ENVS)}, got {config['vec_env']!r}")
    workers = config["episode_workers"]
    if workers != "auto":
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f'{file}: episode_workers: expected "auto" or an integer >= 0, got {workers!r}')
        if workers > int(config["n_envs"]):
            raise ValueError(f"{file}: episode_workers: {workers} is more than n_envs ({config['n_envs']}): "
                             "a worker prepares one env's next episode at a time")
        if workers and config["vec_env"] != "native":
            raise ValueError(f"{file}: episode_workers: {workers} needs vec_env native (SB3's {config['vec_env']} "
                             "steps single envs); use 0 or \"auto\"")
    if not isinstance(config["policy"], str):
        raise ValueError(f"{file}: policy: expected a policy name such as MlpPolicy, got {config['policy']!r}")
    if any(not isinstance(key, str) for key in config["hyperparams"]):
        raise ValueError(f"{file}: hyperparams: expected names, got {sorted(map(repr, config['hyperparams']))}")
    if not isinstance(config["query_env"], bool):
        raise ValueError(f"{file}: query_env: expected true or false, got {config['query_env']!r}")
    if config["query_env"]:
        from .query_imitation import settings as query_settings

        if config["timesteps"] != 0:
            raise ValueError(f"{file}: timesteps: a query_env recipe trains by imitation only; set timesteps: 0 "
                             f"(got {config['timesteps']!r})")
        if config["imitation"] is None:
            config["imitation"] = {}
        _check_imitation(config, file, query_settings)
    elif config["imitation"] is not None:
        from .imitation import settings

        _check_imitation(config, file, settings)


def _check_imitation(config: dict[str, Any], file: Path | Traversable | str, settings: Any) -> None:
    """The ``imitation:`` section, checked and completed by ``settings`` (errors name ``file``)."""
    if not isinstance(config["imitation"], dict):
        raise ValueError(f"{file}: imitation: expected a mapping of settings, got {config['imitation']!r}")
    try:
        config["imitation"] = settings(config["imitation"])
    except ValueError as error:
        raise ValueError(f"{file}: {error}") from None


VEC_ENVS = ("native", "dummy", "subproc")


def episode_workers(config: Mapping[str, Any]) -> int:
    """The recipe's ``episode_workers`` as a count ("auto": one where this process may use more
    CPUs than torch's threads take)."""
    if config["episode_workers"] != "auto":
        return int(config["episode_workers"])
    return int(config["vec_env"] == "native" and usable_cpus() > int(config["torch_threads"]) and os.name == "posix")


# A container's CPU quota (cgroup v2, as a container sees its own cgroup): "max 100000" or "150000 100000".
CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def usable_cpus() -> float:
    """The CPUs this process may use (for episode workers beside training): those it may run on,
    fewer under a CPU quota (``docker --cpus``), which the affinity does not show."""
    usable: float = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = CPU_MAX.read_text().split()[:2]
        if quota != "max":
            usable = min(usable, int(quota) / int(period))
    except (OSError, ValueError):  # no cgroup v2 file, or one this does not read: the affinity stands
        pass
    return usable


def build_vec_env(env_kwargs: Mapping[str, Any], n_envs: int, seed: int, vec_env: str, *,
                  monitor_dir: Path | None = None, workers: int = 0):
    """``n_envs`` envs of ``WritePolicyBenchEnv(**env_kwargs)`` as one SB3 ``VecEnv``, as ``wpb
    train`` builds them: ``vec_env`` is ``native`` (``NativeVecEnv``), ``dummy`` or ``subproc``
    (SB3's ``DummyVecEnv`` / ``SubprocVecEnv``); env i's first reset uses ``seed + i``. With
    ``monitor_dir``, SB3's monitor logs of their episodes there; ``workers``: the native vector
    env's episode workers."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from wpb_gym.envs.env import WritePolicyBenchEnv

    if vec_env == "native":
        from .native_vec_env import make_native_vec_env

        return make_native_vec_env(n_envs, env_kwargs, seed, None if monitor_dir is None else str(monitor_dir),
                                   workers)
    return make_vec_env(
        WritePolicyBenchEnv,
        n_envs=n_envs,
        seed=seed,
        env_kwargs=dict(env_kwargs),
        vec_env_cls=SubprocVecEnv if vec_env == "subproc" else DummyVecEnv,
        monitor_dir=None if monitor_dir is None else str(monitor_dir),
    )


def save_env_kwargs(model_path: Path, env_kwargs: Mapping[str, Any]) -> None:
    # (Models of package 0.3.0 and before name only the arguments given; model_agent.fit_slots
    # reads their slots from the model's own observation space.)
    from ..model_agent import env_kwargs_path, recorded_env_kwargs

    kept = recorded_env_kwargs(env_kwargs)
    write_atomic(env_kwargs_path(model_path), json.dumps(kept, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True)
class TrainingRun:
    """What one run trains, on what and from where: settled before any env or model is built."""

    algo: str
    out: Path
    config: Mapping[str, Any]  # the recipe with the flags applied
    env: Mapping[str, Any]  # the training env's arguments
    held_out_env: Mapping[str, Any]  # the held-out env's, before its validation episodes are made
    eval_episodes: str | Path | None
    seed: int
    resume: bool
    init_from: str | Path | None

    @property
    def n_envs(self) -> int:
        return 1 if self.algo == "dqn" else int(self.config["n_envs"])


@dataclass(frozen=True)
class TrainingEnvs:
    """The envs a run trains on, and the one it picks its best model on."""

    train: Any  # SB3's VecEnv of the training episodes
    validation: Any  # a one-env VecEnv playing the validation episodes in turn
    validation_kwargs: dict[str, Any]  # its env arguments (imitation validates on them too)

    @property
    def validation_episodes(self) -> int:
        return len(self.validation_kwargs["episodes"])

    def close(self) -> None:
        try:
            self.train.close()
        finally:  # a training env that fails to close must not leave the validation env open
            self.validation.close()


@dataclass(frozen=True)
class StartingModel:
    """The model a run trains: new, resumed from its newest checkpoint, or another run's."""

    model: Any
    steps_done: int  # the resumed checkpoint's steps, else 0
    resumed: bool
    init_from_hyperparams: dict[str, Any] | None  # those the other run's model keeps (--init-from)


def _newest_checkpoint(folder: Path) -> tuple[Path, int] | None:
    found = []
    for path in folder.glob("model_*_steps.zip"):
        match = re.fullmatch(r"model_(\d+)_steps\.zip", path.name)
        if match:
            found.append((int(match.group(1)), path))
    if not found:
        return None
    steps, path = max(found)
    return path, steps


def _checkpoint_to_resume(run: TrainingRun) -> tuple[Path, int] | None:
    """The newest checkpoint of a resumed run, and its steps; the monitor logs so far are set
    aside beside the resumed run's (SB3 rewrites its files), each under a name of its own."""
    if not run.resume:
        return None
    newest = _newest_checkpoint(run.out / "checkpoints")
    if newest is None:  # before anything in the folder is touched
        raise FileNotFoundError(f"--resume: no checkpoint in {run.out / 'checkpoints'}")
    for log in sorted((run.out / "monitor").glob("*.monitor.csv")):
        if ".until_" not in log.name:
            stem, again = log.name.replace(".monitor.csv", f".until_{newest[1]}"), 1
            target = log.with_name(f"{stem}.monitor.csv")
            while target.exists():  # a resume that failed after setting its logs aside
                again += 1
                target = log.with_name(f"{stem}.{again}.monitor.csv")
            log.rename(target)
    return newest


def _training_envs(run: TrainingRun) -> TrainingEnvs:
    config = run.config
    train_env = build_vec_env({**run.env, "episode_seed": run.seed}, run.n_envs, run.seed, config["vec_env"],
                              monitor_dir=run.out / "monitor", workers=episode_workers(config))
    try:
        validation = validation_env_kwargs(run.held_out_env, run.eval_episodes, run.seed,
                                           int(config["eval"]["episodes"]))
        # Of the training env's kind (SB3 warns otherwise); one env, so never a subprocess.
        kind = "native" if config["vec_env"] == "native" else "dummy"
        return TrainingEnvs(train_env, build_vec_env(validation, 1, run.seed + HELD_OUT_SEED_OFFSET, kind), validation)
    except BaseException:
        train_env.close()
        raise


def _refuse_other_limits(init_from: str | Path, env_config: Mapping[str, Any]) -> None:
    """A model trained under a limit beside the budget observes its features (and with
    compression has one more action): it goes on training under the same kind of limit only."""
    from wpb_gym.core.store_limits import StoreLimits

    from ..model_agent import read_env_kwargs

    theirs = sorted(StoreLimits.of_arguments(read_env_kwargs(init_from, None)).arguments())
    ours = sorted(StoreLimits.of_arguments(env_config).arguments())
    if theirs != ours:
        def named(limits: list[str]) -> str:
            return f"under {limits[0]}=" if limits else "without limits beside the budget"

        raise ValueError(f"--init-from {init_from}: the model was trained {named(theirs)}, this run trains "
                         f"{named(ours)}: its observation has a limit's features only if it was trained under "
                         "it; give the same kind of limit in --env-kwargs")


# What a resumed run must share with the run its folder holds: what decides its episodes, its
# observations and its model's selection. Its number of steps may change; how it runs (the
# VecEnv, episode workers, torch's threads, how often it checkpoints) may change. The model
# brings its own hyperparameters (SB3 loads them with it) and the run its --init-from: both are
# taken from the run.
_RUN_IDENTITY = ("algo", "seed", "held_out_episodes", "config")
_MAY_CHANGE = {"config.timesteps", "config.vec_env", "config.episode_workers", "config.torch_threads",
               "config.checkpoint_every_steps", "config.hyperparams"}
# What a resumed run's config.json keeps of the run's own record.
_KEPT_ON_RESUME = ("init_from", "init_from_hyperparams", "imitation_history")
_ABSENT = object()


def _record_defaults() -> dict[str, Any]:
    """The defaults under each part of a run's record: a setting absent on one side is the same
    as the other side's if that is its default (an env argument written out at its default; a
    recipe setting an older version did not record). The env's are its constructor's, under the
    recipe's own."""
    from wpb_gym.envs.env import WritePolicyBenchEnv

    env = {name: parameter.default for name, parameter in inspect.signature(WritePolicyBenchEnv).parameters.items()
           if parameter.default is not inspect.Parameter.empty}
    recipe = json.loads(json.dumps({**DEFAULTS, "env": {**env, **DEFAULTS["env"]}}, default=str))
    return {"config": recipe}


def _recorded_run(out: Path) -> dict[str, Any] | None:
    """The ``config.json`` of the run ``out`` holds (None: no run started there, no checkpoint
    either); a ValueError naming the file when it is not a run's record."""
    path = out / "config.json"
    if not path.is_file():
        if _newest_checkpoint(out / "checkpoints") is not None:
            raise ValueError(f"--resume: {out} holds checkpoints but no config.json: not a run folder of "
                             "wpb train, or one whose record was removed; its settings cannot be checked")
        return None
    try:
        recorded = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ValueError(f"--resume: {path}: not the settings of a run of wpb train ({error})") from None
    if not isinstance(recorded, dict) or not isinstance(recorded.get("config"), dict):
        raise ValueError(f"--resume: {path}: not the settings of a run of wpb train (no object with its 'config')")
    return recorded


def _refuse_another_run(out: Path, saved: dict[str, Any]) -> None:
    """``--resume`` continues the run ``out`` holds: refuse settings other than those its
    ``config.json`` records, naming the first that differ (the checkpoints would go on training
    on other episodes or settings, or fail inside SB3 on another observation's shape). A setting
    given on one side only is the same if the other has it at its default (``_record_defaults``).
    What the run brings of its own (``_KEPT_ON_RESUME``, its hyperparameters) is put
    in ``saved``; a hyperparameter given otherwise here is named on stderr, as SB3 ignores it."""
    recorded = _recorded_run(out)
    if recorded is None:
        return
    try:  # as config.json records them (keys as text, tuples as lists)
        ours = json.loads(json.dumps(saved, default=str))
    except (TypeError, ValueError):
        return  # a recipe JSON cannot record: building the model names what is wrong
    differences: list[str] = []
    defaults = _record_defaults()
    for key in _RUN_IDENTITY:
        _differences(recorded.get(key, _ABSENT), ours.get(key, _ABSENT), key, differences,
                     defaults.get(key, _ABSENT))
    if differences:
        more = f" (and {len(differences) - 3} more)" if len(differences) > 3 else ""
        raise ValueError(f"--resume: {out} holds a run of other settings: {'; '.join(differences[:3])}{more}; "
                         "resume it with its own settings (--timesteps may change), or choose another --out")
    for key in _KEPT_ON_RESUME:
        if key in recorded:
            saved[key] = recorded[key]
    theirs = recorded["config"].get("hyperparams")
    if isinstance(theirs, dict) and theirs != ours["config"].get("hyperparams"):
        print(f"wpb train: the resumed model keeps the hyperparameters it was saved with ({json.dumps(theirs)}); "
              "those given here are not used", file=sys.stderr)
        saved["config"] = {**saved["config"], "hyperparams": theirs}


def _differences(theirs: Any, ours: Any, where: str, found: list[str], default: Any = _ABSENT) -> None:
    """Each setting under ``where`` whose value differs, as ``where: the run's, this one's``;
    ``default``: its default there (a setting absent on one side is the same at it)."""
    if where in _MAY_CHANGE:
        return
    if (theirs is _ABSENT and (ours is _ABSENT or ours == default)) or (ours is _ABSENT and theirs == default):
        return
    if isinstance(theirs, dict) and isinstance(ours, dict):
        defaults = default if isinstance(default, dict) else {}
        for key in sorted(set(theirs) | set(ours)):
            _differences(theirs.get(key, _ABSENT), ours.get(key, _ABSENT), f"{where}.{key}", found,
                         defaults.get(key, _ABSENT))
    elif theirs != ours:
        found.append(f"{where} is {_shown(theirs)} in the run, {_shown(ours)} here")


def _shown(value: Any) -> str:
    return "absent" if value is _ABSENT else repr(value)


def _starting_model(run: TrainingRun, train_env: Any, checkpoint: tuple[Path, int] | None) -> StartingModel:
    cls = algo_class(run.algo)
    config, tensorboard_log = run.config, str(run.out / "tb")
    policy = "MlpLstmPolicy" if run.algo == "recurrent_ppo" and config["policy"] == "MlpPolicy" else config["policy"]
    if checkpoint is not None:
        path, steps = checkpoint
        model = cls.load(path, env=train_env, device="cpu", tensorboard_log=tensorboard_log)
        return StartingModel(model, steps, resumed=True, init_from_hyperparams=None)
    if run.init_from is not None:
        # The other model's weights and hyperparameters; its step count starts again from 0.
        model = cls.load(run.init_from, env=train_env, device="cpu", tensorboard_log=tensorboard_log, seed=run.seed)
        kept = {
            key: getattr(model, key)
            for key in config["hyperparams"]
            if isinstance(getattr(model, key, None), (int, float, str, bool))
        }
        return StartingModel(model, 0, resumed=False, init_from_hyperparams=kept)
    model = new_model(cls, policy, train_env, run.seed, tensorboard_log, config["hyperparams"])
    return StartingModel(model, 0, resumed=False, init_from_hyperparams=None)


def train(
    algo: str,
    out: str | Path,
    *,
    config: dict[str, Any] | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    timesteps: int | None = None,
    seed: int = 0,
    resume: bool = False,
    progress: bool = True,
    eval_episodes: str | Path | None = None,
    init_from: str | Path | None = None,
) -> dict[str, Any]:
    """Train ``algo`` into the run folder ``out``; returns the saved configuration."""
    import torch

    if config is None:  # the shipped recipe of the env's regime, as wpb train picks it
        regime = dict(env_kwargs or {}).get("regime")
        if recipe_path(algo, regime) is None:
            print(defaults_note(algo, regime), file=sys.stderr)
        config = load_config(algo, regime=regime)
    env_config = {**config["env"], **dict(env_kwargs or {})}
    total = int(config["timesteps"] if timesteps is None else timesteps)
    eval_config = held_out_env_kwargs(env_config, eval_episodes)
    if resume and init_from is not None:
        raise ValueError("--resume continues this run's own checkpoints; it cannot start --init-from another model")
    if init_from is not None and not Path(init_from).is_file():
        raise FileNotFoundError(f"--init-from: {init_from}: no such model file")
    if init_from is not None:
        _refuse_other_limits(init_from, env_config)
    out = Path(out)
    torch.set_num_threads(int(config["torch_threads"]))

    saved = {
        "algo": algo,
        "seed": seed,
        "held_out_episode_seed": seed + HELD_OUT_SEED_OFFSET,
        "held_out_episodes": None if eval_episodes is None else str(eval_episodes),
        "init_from": None if init_from is None else str(init_from),
        "timesteps": total,
        "config": {**config, "env": env_config},
        "versions": package_versions(),
    }
    imitation = config.get("imitation")
    if imitation is not None:
        if algo not in IMITATION_ALGOS:
            raise ValueError(f"imitation: {algo} cannot start from imitation; it works with {IMITATION_ALGOS}")
        if init_from is not None:
            raise ValueError("imitation trains a fresh model; it cannot start --init-from another model")
        if env_config.get("observation_mode", "box") != "box" or config["policy"] != "MlpPolicy":
            raise ValueError("imitation: its teachers read box observations (observation_mode=box, MlpPolicy)")
    if resume:
        _refuse_another_run(out, saved)
    run = TrainingRun(algo=algo, out=out, config=config, env=env_config, held_out_env=eval_config,
                      eval_episodes=eval_episodes, seed=seed, resume=resume, init_from=init_from)
    created = not out.exists()
    with ExitStack() as cleanup:
        try:
            checkpoint = _checkpoint_to_resume(run)
            envs = _training_envs(run)
            # Closed however the run ends: a native vector env's episode workers are processes,
            # and SubprocVecEnv's envs too, which a failed run must not leave behind.
            cleanup.callback(envs.close)
            start = _starting_model(run, envs.train, checkpoint)
        except BaseException:
            cleanup.close()  # the envs first: their monitor logs are in the folder
            if created:  # the monitor logs' folder: a refused run leaves nothing behind
                shutil.rmtree(out, ignore_errors=True)
            raise
        _learn(run, envs, start, saved, progress)
    return saved


def _learn(run: TrainingRun, envs: TrainingEnvs, start: StartingModel, saved: dict[str, Any], progress: bool) -> None:
    """Imitation if the recipe asks for it, then RL, saving the models into the run folder."""
    from stable_baselines3.common.callbacks import CallbackList, CheckpointCallback, EvalCallback

    from .masked_policy import as_wpb_train
    from .optimizer import optimizer_record

    algo, out, config, env_config, seed = run.algo, run.out, run.config, run.env, run.seed
    imitation, total = config.get("imitation"), int(saved["timesteps"])
    if start.init_from_hyperparams is not None:
        saved["init_from_hyperparams"] = start.init_from_hyperparams
    model, n_envs = start.model, run.n_envs
    # Only now, with the settings, envs and model all accepted, does the run folder appear:
    # a run refused for bad input leaves nothing behind.
    out.mkdir(parents=True, exist_ok=True)
    saved["optimizer"] = optimizer_record(model)
    write_atomic(out / "config.json", json.dumps(saved, indent=2, sort_keys=True, default=str) + "\n")

    imitated = None
    if imitation is not None and not start.resumed:
        from .imitation import dagger

        history = dagger(
            model,
            {**env_config, "episode_seed": seed},
            envs.validation_kwargs,
            {**imitation, "validation_episodes": envs.validation_episodes},
            seed,
            log=print if progress else None,
        )
        imitated = max(record["validation_return"] for record in history)
        saved["imitation_history"] = history
        model.save(out / "imitation_model.zip")
        save_env_kwargs(out / "imitation_model.zip", env_config)
        model.save(out / "best_model.zip")  # until RL finds better on the same validation episodes
        write_atomic(out / "config.json", json.dumps(saved, indent=2, sort_keys=True, default=str) + "\n")
    every = max(1, int(config["eval"]["every_steps"]) // n_envs)
    eval_kwargs = dict(
        n_eval_episodes=envs.validation_episodes,
        eval_freq=every,
        best_model_save_path=str(out),
        log_path=str(out / "eval"),
        deterministic=True,
        verbose=0,
    )
    if algo == "maskable_ppo":
        from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback

        evaluator = MaskableEvalCallback(envs.validation, **eval_kwargs)
    else:
        evaluator = EvalCallback(envs.validation, **eval_kwargs)
    if imitated is not None:
        evaluator.best_mean_reward = imitated
    checkpoints = CheckpointCallback(
        save_freq=max(1, int(config["checkpoint_every_steps"]) // n_envs),
        save_path=str(out / "checkpoints"),
        name_prefix="model",
    )
    steps = whole_rollouts(model, total - start.steps_done)
    if steps != max(total - start.steps_done, 0):
        rollout = whole_rollouts(model, 1)
        print(f"wpb train: {algo} learns from whole rollouts of {rollout:,} steps ({n_envs} envs): it trains "
              f"{steps:,} steps for the {total - start.steps_done:,} timesteps set (by --timesteps, or the recipe)",
              file=sys.stderr)
    if steps > 0:
        with as_wpb_train(model):
            model.learn(
                total_timesteps=steps,
                callback=CallbackList([evaluator, checkpoints]),
                progress_bar=progress,
                reset_num_timesteps=not start.resumed,
                tb_log_name=algo,
            )
    model.save(out / "final_model.zip")
    # A checkpoint at the end, so that --resume of a finished run has nothing left to do, unless
    # one already holds the steps asked (the last rollout may run past them: one is enough).
    newest = _newest_checkpoint(out / "checkpoints")
    if newest is None or newest[1] < total:
        model.save(out / "checkpoints" / f"model_{model.num_timesteps}_steps.zip")
    if not (out / "best_model.zip").exists():  # no evaluation happened (very short runs)
        model.save(out / "best_model.zip")
    for name in ("final_model.zip", "best_model.zip"):
        save_env_kwargs(out / name, env_config)
    saved["trained_timesteps"] = int(model.num_timesteps)
    write_atomic(out / "config.json", json.dumps(saved, indent=2, sort_keys=True, default=str) + "\n")


def whole_rollouts(model: Any, steps: int) -> int:
    """``steps`` rounded up to what ``model.learn`` takes: an on-policy algorithm (PPO, A2C,
    MaskablePPO) collects whole rollouts of ``n_steps`` per env, an off-policy one a step of every
    env at a time; SB3 finishes the last one however few steps were asked."""
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    unit = model.n_envs * (int(model.n_steps) if isinstance(model, OnPolicyAlgorithm) else 1)
    return -(-max(steps, 0) // unit) * unit


def new_model(cls: type, policy: str, env: Any, seed: int, tensorboard_log: str | None, hyperparams: dict[str, Any]):
    """A new model of the SB3 algorithm ``cls`` as ``wpb train`` makes one: on the CPU, with PyTorch's
    fused Adam where the policy's optimizer is SB3's Adam (``agents.sb3.optimizer``). Refuses, with a
    ``ValueError`` naming them, hyperparameters ``cls`` does not take and those it rejects."""
    import inspect

    from .optimizer import with_fused_adam

    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "policy", "env")]
    unknown = sorted(set(hyperparams) - set(accepted))
    if unknown:
        raise ValueError(f"hyperparams: {cls.__name__} has no parameter {unknown}; its parameters: {accepted}")
    try:
        return cls(policy, env, seed=seed, device="cpu", tensorboard_log=tensorboard_log, verbose=0,
                   **with_fused_adam(cls, policy, hyperparams))
    # SB3 checks its arguments with assert; torch refuses impossible layer sizes with RuntimeError,
    # and reads a list setting too short for it (Adam's betas) with IndexError.
    except (AssertionError, TypeError, ValueError, KeyError, IndexError, RuntimeError) as error:
        short = " (a list setting, such as optimizer_kwargs.betas, has too few values)" * isinstance(error, IndexError)
        raise ValueError(f"hyperparams or policy of {cls.__name__}: {error}{short}") from None
