"""Training RLlib's PPO (new API stack) with action masking on ``WritePolicyBench-v0``.

``train_rllib_ppo(out_dir, env_kwargs, iterations, seed)`` trains ``MaskedPPOTorchRLModule``
(``agents.rllib.module``) on the env in the masked observation layout (``agents.rllib.env``)
and writes to ``out_dir``:

- ``checkpoint/``: the algorithm checkpoint (``Algorithm.save_to_path``); ``wpb eval --agents
  rllib:OUT/checkpoint`` evaluates its policy (with the env arguments its config stores, so the
  folder can be moved alone), and ``Algorithm.from_checkpoint`` restores it to train further;
  (a query-tier run's, ``query_tier=True``, restores with ``Algorithm.from_checkpoint``; ``wpb
  eval`` plays ``WritePolicyBenchEnv`` checkpoints only);
- ``progress.jsonl``: one line of metrics per training iteration;
- ``config.json``: the arguments of the run and the package versions.

``masked_ppo_config`` builds the ``PPOConfig`` alone, for training it another way (Ray Tune,
more env runners, other hyperparameters).

Torch gets ``torch_threads`` threads (1 by default) in this process, where the learner and,
with ``num_env_runners=0``, the env runner live: on 2 cores PyTorch's default threads train
several times slower. Arguments are checked, ``ppo_options`` against ``PPOConfig.training``
included, before Ray starts; ``out_dir`` is written only once the algorithm is built, and a run
that fails or is interrupted removes what it wrote, so the same folder can be used again.
Everything needs ``pip install -e '.[rllib]'``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from wpb_gym.core.atomic_files import write_atomic
from wpb_gym.core.checks import finite, require_int
from wpb_gym.core.messages import did_you_mean, one_line
from wpb_gym.core.version import __version__

from ..option_checks import type_problem
from .env import (
    RLlibQueryTierEnv,
    RLlibWritePolicyBenchEnv,
    make_rllib_env,
    make_rllib_query_env,
    quiet_rllib_deprecations,
    require_rllib,
)

# Dense rewards: the episode's F1 paid as it accrues rather than only on the last step (the same
# total), as in the SB3 recipes; a given env argument overrides it.
# 8 slots and no EXPIRE cost: the settings the documented run was measured with (the env's own
# defaults are 2 slots and 0.03 per EXPIRE since package 0.4.0).
DEFAULT_ENV_KWARGS: dict[str, Any] = {"budget_bytes": 10240, "dense_reward": True, "slots": 8, "expire_cost": 0.0}
# The query tier's (QueryTierEnv's rewards are dense already); its budget is 10240 unless
# env_kwargs give budget_bytes or budget_fraction.
DEFAULT_QUERY_ENV_KWARGS: dict[str, Any] = {"slots": 8, "expire_cost": 0.0}
# The numbers of a training result kept in progress.jsonl and returned: where they sit in RLlib's
# nested result dict.
_METRICS = {
    "training_iteration": ("training_iteration",),
    "env_steps": ("env_runners", "num_env_steps_sampled_lifetime"),
    "episodes": ("env_runners", "num_episodes_lifetime"),
    "episode_return_mean": ("env_runners", "episode_return_mean"),
    "episode_len_mean": ("env_runners", "episode_len_mean"),
    "total_loss": ("learners", "default_policy", "total_loss"),
    "policy_loss": ("learners", "default_policy", "policy_loss"),
    "vf_loss": ("learners", "default_policy", "vf_loss"),
    "entropy": ("learners", "default_policy", "entropy"),
    "mean_kl_loss": ("learners", "default_policy", "mean_kl_loss"),
    "seconds": ("time_total_s",),
}
_COUNTS = {"training_iteration", "env_steps", "episodes"}


class RLlibTraining(NamedTuple):
    """What ``train_rllib_ppo`` returns: the checkpoint folder and the last iteration's metrics."""

    checkpoint: Path
    metrics: dict[str, Any]


def masked_ppo_config(
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
    *,
    train_batch_size: int = 2000,
    # 4 passes of 250-step minibatches: with RLlib's 10 passes of 128 the policy, nearly
    # deterministic after 20 iterations, took one large step and fell from 0.97 to 0.39 F1.
    minibatch_size: int = 250,
    num_epochs: int = 4,
    lr: float = 3e-4,
    hidden_sizes: Sequence[int] = (256, 256),
    num_env_runners: int = 0,
    ppo_options: Mapping[str, Any] | None = None,
    query_tier: bool = False,
) -> Any:
    """RLlib's ``PPOConfig`` for ``MaskedPPOTorchRLModule`` on the env made from ``env_kwargs``
    (over ``DEFAULT_ENV_KWARGS``; the training episodes' seed is ``seed`` unless ``episode_seed``
    is given).

    ``train_batch_size`` env steps are sampled per iteration and trained on for ``num_epochs``
    passes in minibatches of ``minibatch_size``; ``hidden_sizes`` are the layers of the policy
    and value networks; ``ppo_options`` are further ``PPOConfig.training`` arguments (e.g.
    ``{"entropy_coeff": 0.01}``; not those set by the arguments here). With ``query_tier`` the
    env is the query tier's (``RLlibQueryTierEnv``; ``env_kwargs`` are ``QueryTierEnv``
    arguments, over ``DEFAULT_QUERY_ENV_KWARGS``). Bad arguments raise a ``ValueError`` naming
    them (checked here and by RLlib's ``validate``), without starting Ray.
    """
    require_rllib()
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from .module import MaskedPPOTorchRLModule

    seed = require_int(seed, "seed")
    if not isinstance(query_tier, bool):
        raise ValueError(f"query_tier must be True or False, got {query_tier!r}")
    env_config = env_config_for(env_kwargs, seed, query_tier=query_tier)
    train_batch_size = require_int(train_batch_size, "train_batch_size", 1)
    minibatch_size = require_int(minibatch_size, "minibatch_size", 1)
    if minibatch_size > train_batch_size:
        raise ValueError(f"minibatch_size ({minibatch_size}) must be at most train_batch_size ({train_batch_size})")
    num_epochs = require_int(num_epochs, "num_epochs", 1)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < math.inf:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if isinstance(hidden_sizes, (str, bytes)) or not isinstance(hidden_sizes, Sequence) or not hidden_sizes:
        raise ValueError(f"hidden_sizes must be a non-empty list of layer widths, got {hidden_sizes!r}")
    hidden = [require_int(width, "hidden_sizes[]", 1) for width in hidden_sizes]
    num_env_runners = require_int(num_env_runners, "num_env_runners")
    config = (
        PPOConfig()
        .environment(RLlibQueryTierEnv if query_tier else RLlibWritePolicyBenchEnv, env_config=env_config)
        .env_runners(num_env_runners=num_env_runners)
        .training(train_batch_size_per_learner=train_batch_size, minibatch_size=minibatch_size,
                  num_epochs=num_epochs, lr=float(lr))
        .rl_module(rl_module_spec=RLModuleSpec(module_class=MaskedPPOTorchRLModule),
                   model_config={"fcnet_hiddens": hidden})
        # No CPU/GPU usage thread: it only adds numbers to the results (and a notice asking for GPUtil).
        .debugging(seed=seed, log_sys_usage=False)
    )
    options = check_ppo_options(ppo_options)
    # RLlib's own checks (choices, schedules; those of the whole config in validate) need no Ray:
    # run here, they name a bad option before Ray starts rather than in a traceback from it.
    try:
        config.training(**options)
        with quiet_rllib_deprecations(), _logger_without(_CONFIG_LOGGER, _NEW_STACK_NOTICE):
            config.validate()
    except (TypeError, ValueError) as error:
        # RLlib's message names the option in backquotes, and ends in a hint about turning its checks off.
        message = one_line(str(error)).split("To suppress all validation errors")[0].rstrip("; ")
        named = [name for name in options if f"`{name}`" in message]
        where = f"ppo_options.{named[0]}" if named else "ppo_options"
        raise ValueError(f"{where}: RLlib refuses it: {message}") from None
    return config


# PPOConfig.training arguments this module sets from its own arguments, which check them: given in
# ppo_options they would skip those checks.
_OWN_ARGUMENTS = {
    "train_batch_size": "train_batch_size",
    "train_batch_size_per_learner": "train_batch_size",
    "minibatch_size": "minibatch_size",
    "num_epochs": "num_epochs",
    "num_sgd_iter": "num_epochs",
    "lr": "lr",
}
# Options whose default is a number but which also take RLlib's schedule, [[timestep, value], ...].
_SCHEDULES = {"entropy_coeff"}
# Options RLlib defaults to None (off) that take a number.
_NUMBER_OR_NONE = {"grad_clip"}
# Ranges RLlib's validate leaves unchecked: out of them a run trains on nonsense or fails mid-training.
_UNIT_INTERVAL = {"gamma", "lambda_"}
_NON_NEGATIVE = {"kl_coeff", "kl_target", "vf_loss_coeff", "entropy_coeff", "clip_param", "vf_clip_param",
                 "grad_clip"}


def check_ppo_options(ppo_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``ppo_options`` checked against ``PPOConfig.training``: a ``ValueError`` naming
    ``ppo_options.NAME``, the value and what was expected for an unknown or deprecated name, one
    this module sets itself (``num_epochs``...: use its argument), or a value of the wrong type
    (numbers and switches, against the defaults of ``PPOConfig``) or out of range."""
    import inspect

    from ray._common.deprecation import DEPRECATED_VALUE
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.rllib.algorithms.ppo import PPOConfig

    if ppo_options is None:
        return {}
    if not isinstance(ppo_options, Mapping):
        raise ValueError(f"ppo_options must be a mapping of PPOConfig.training arguments, got {ppo_options!r}")
    defaults = PPOConfig()
    # Deprecated names are in the signatures still (with the DEPRECATED_VALUE default, or no attribute).
    known = {
        name for cls in (PPOConfig, AlgorithmConfig) for name in inspect.signature(cls.training).parameters
        if name not in ("self", "kwargs") and hasattr(defaults, name)
        and not _same(getattr(defaults, name), DEPRECATED_VALUE)
    }
    for name, value in ppo_options.items():
        where = f"ppo_options.{name}"
        if name in _OWN_ARGUMENTS:
            raise ValueError(f"{where}: set it with the {_OWN_ARGUMENTS[name]} argument of train_rllib_ppo "
                             "(masked_ppo_config), which checks it, not in ppo_options")
        if name not in known:
            raise ValueError(f"{where}: not a PPOConfig.training argument of this RLlib (or a deprecated one)"
                             f"{did_you_mean(str(name), sorted(known))}")
        if name in _NUMBER_OR_NONE:
            number = isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value)
            problem = None if value is None or number else "expected a number, or None (its default: off)"
        else:
            schedule = name in _SCHEDULES
            note = " (or a schedule [[timestep, value], ...])" if schedule else ""
            problem = type_problem(value, getattr(defaults, name), sequences=schedule, note=note)
        if problem is None and isinstance(value, (int, float)) and not isinstance(value, bool):
            if name in _UNIT_INTERVAL and not 0 <= value <= 1:
                problem = "expected a number from 0 to 1"
            elif name in _NON_NEGATIVE and value < 0:
                problem = "expected a number of at least 0"
        if problem:
            raise ValueError(f"{where}: {value!r}: {problem}")
    return dict(ppo_options)


def _same(value: Any, deprecated: Any) -> bool:
    # RLlib marks deprecated settings with the int -1: a float or bool default is never that mark.
    return type(value) is type(deprecated) and value == deprecated


def env_config_for(env_kwargs: Mapping[str, Any] | None, seed: int, *, query_tier: bool = False) -> dict[str, Any]:
    """The env arguments of a training run, checked by building the env once (so that a bad one
    is named here, not in an env runner's traceback)."""
    env_name = "QueryTierEnv" if query_tier else "WritePolicyBenchEnv"
    if env_kwargs is not None and not isinstance(env_kwargs, Mapping):
        raise ValueError(f"env_kwargs must be a mapping of {env_name} arguments, got {env_kwargs!r}")
    given = dict(env_kwargs or {})
    defaults = dict(DEFAULT_QUERY_ENV_KWARGS) if query_tier else dict(DEFAULT_ENV_KWARGS)
    if query_tier and given.get("budget_fraction") is None and given.get("budget_bytes") is None:
        defaults["budget_bytes"] = DEFAULT_ENV_KWARGS["budget_bytes"]
    env_config = {**defaults, "episode_seed": seed, **given}
    try:
        (make_rllib_query_env if query_tier else make_rllib_env)(env_config).close()
    except TypeError as error:  # an argument WritePolicyBenchEnv does not take
        raise ValueError(f"env_kwargs: {error}") from None
    except ValueError as error:
        raise ValueError(f"env_kwargs: {error}") from None
    return env_config


def train_rllib_ppo(
    out_dir: str | os.PathLike[str],
    env_kwargs: Mapping[str, Any] | None = None,
    iterations: int = 10,
    seed: int = 0,
    *,
    num_cpus: int = 1,
    torch_threads: int | None = 1,
    progress: bool = False,
    **ppo: Any,
) -> RLlibTraining:
    """Train masked PPO for ``iterations`` RLlib iterations and save the result in ``out_dir``
    (which must be empty or absent); return the checkpoint folder and the last iteration's metrics.

    ``env_kwargs`` are ``WritePolicyBenchEnv`` arguments (``regime``, ``budget_bytes``,
    ``length``, ``track``, ``slots``...), or ``QueryTierEnv``'s with ``query_tier=True``; ``ppo``
    takes the keyword arguments of ``masked_ppo_config`` (``train_batch_size``,
    ``minibatch_size``, ``num_epochs``, ``lr``, ``hidden_sizes``, ``num_env_runners``,
    ``ppo_options``, ``query_tier``). A local Ray with ``num_cpus`` CPUs
    is started for the run and stopped after it, unless this process already runs Ray (then
    that one is used, and left running); ``num_env_runners`` env runners each take a CPU of it
    (0, the default: sampling happens in this process). ``progress`` prints a line per iteration.
    Bad arguments raise a ``ValueError`` before Ray starts; ``out_dir`` is written once the
    algorithm is built, and emptied again (or removed, if this call made it) when the run fails.
    """
    iterations = require_int(iterations, "iterations", 1)
    num_cpus = require_int(num_cpus, "num_cpus", 1)
    if torch_threads is not None:
        torch_threads = require_int(torch_threads, "torch_threads", 1)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"out_dir {out}: not an empty folder; choose another (runs are never mixed)")
    config = masked_ppo_config(dict(env_kwargs or {}), seed, **ppo)
    if config.num_env_runners > num_cpus:
        raise ValueError(f"num_env_runners ({config.num_env_runners}) needs at least as many CPUs: num_cpus={num_cpus}")
    import ray
    import torch

    from wpb_gym.evaluation.ray_backend import init_ray

    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    created = not out.exists()
    started = not ray.is_initialized()
    if started:
        init_ray(ray, None, num_cpus=num_cpus, include_dashboard=False, log_to_driver=progress,
                 configure_logging=False)
    try:
        with quiet_rllib_deprecations(), _logger_without(_CONFIG_LOGGER, _NEW_STACK_NOTICE):
            algo = config.build_algo()
        try:
            out.mkdir(parents=True, exist_ok=True)
            _write_json(out / "config.json", _run_record(config, iterations, seed, num_cpus, torch_threads, ppo))
            with (out / "progress.jsonl").open("w", encoding="utf-8") as log:
                for _ in range(iterations):
                    metrics = _metrics(algo.train())
                    log.write(json.dumps(metrics, allow_nan=False) + "\n")
                    log.flush()
                    if progress:
                        print(", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                        for k, v in metrics.items()), flush=True)
            checkpoint = Path(algo.save_to_path(str((out / "checkpoint").resolve())))
        finally:
            algo.stop()
    except BaseException:
        # A run without its checkpoint cannot be resumed or evaluated: it only blocks the folder.
        _discard(out, created)
        raise
    finally:
        if started:
            ray.shutdown()
    return RLlibTraining(checkpoint, metrics)


# RLlib's notice that PPO runs on the new API stack, which this module chose on purpose.
_CONFIG_LOGGER = "ray.rllib.algorithms.algorithm_config"
_NEW_STACK_NOTICE = "You are running PPO on the new API stack"


@contextmanager
def _logger_without(name: str, prefix: str) -> Iterator[None]:
    """Within it, the logger ``name`` drops the records whose message starts with ``prefix``."""

    class Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not record.getMessage().startswith(prefix)

    logger, drop = logging.getLogger(name), Drop()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def _discard(out: Path, created: bool) -> None:
    """Remove what a failed run wrote to ``out`` (empty or absent when it began)."""
    if created:
        shutil.rmtree(out, ignore_errors=True)
    elif out.is_dir():
        for child in out.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def _metrics(result: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers of ``_METRICS`` from one training result (None where RLlib has none yet, e.g.
    the return before any episode has ended)."""
    metrics: dict[str, Any] = {}
    for name, keys in _METRICS.items():
        value: Any = result
        for key in keys:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is not None:
            value = float(value)
            value = None if not math.isfinite(value) else int(value) if name in _COUNTS else value
        metrics[name] = value
    return metrics


def _run_record(config: Any, iterations: int, seed: int, num_cpus: int, torch_threads: int | None,
                ppo: Mapping[str, Any]) -> dict[str, Any]:
    import ray
    import torch

    return {
        "algo": "rllib_ppo",
        "env": dict(config.env_config),
        "iterations": iterations,
        "seed": seed,
        "num_cpus": num_cpus,
        "torch_threads": torch_threads,
        "ppo": {k: list(v) if isinstance(v, tuple) else v for k, v in ppo.items()},
        "versions": {"writepolicybench-gym": __version__, "ray": ray.__version__, "torch": torch.__version__},
    }


def _write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=repr) + "\n")
