"""Training RLlib's PPO (new API stack) with action masking on ``WritePolicyBench-v0``.

``train_rllib_ppo(out_dir, env_kwargs, iterations, seed)`` trains ``MaskedPPOTorchRLModule``
(``agents.rllib_module``) on the env in the masked observation layout (``agents.rllib_env``)
and writes to ``out_dir``:

- ``checkpoint/``: the algorithm checkpoint (``Algorithm.save_to_path``); ``wpb eval --agents
  rllib:OUT/checkpoint`` evaluates its policy, and ``Algorithm.from_checkpoint`` restores it
  to train further;
- ``checkpoint.env.json``: the env arguments that shape the observation, read by the agent;
- ``progress.jsonl``: one line of metrics per training iteration;
- ``config.json``: the arguments of the run and the package versions.

``masked_ppo_config`` builds the ``PPOConfig`` alone, for training it another way (Ray Tune,
more env runners, other hyperparameters).

Torch gets ``torch_threads`` threads (1 by default) in this process, where the learner and,
with ``num_env_runners=0``, the env runner live: on 2 cores PyTorch's default threads train
several times slower. Everything needs ``pip install -e '.[rllib]'``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from wpb_gym.core.checks import require_int
from wpb_gym.core.version import __version__

from .rllib_env import RLlibWritePolicyBenchEnv, make_rllib_env, quiet_rllib_deprecations, require_rllib

# Dense rewards: the episode's F1 paid as it accrues rather than only on the last step (the same
# total), as in the SB3 recipes; a given env argument overrides it.
DEFAULT_ENV_KWARGS: dict[str, Any] = {"budget_bytes": 10240, "dense_reward": True}
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
) -> Any:
    """RLlib's ``PPOConfig`` for ``MaskedPPOTorchRLModule`` on the env made from ``env_kwargs``
    (over ``DEFAULT_ENV_KWARGS``; the training episodes' seed is ``seed`` unless ``episode_seed``
    is given).

    ``train_batch_size`` env steps are sampled per iteration and trained on for ``num_epochs``
    passes in minibatches of ``minibatch_size``; ``hidden_sizes`` are the layers of the policy
    and value networks; ``ppo_options`` are further ``PPOConfig.training`` arguments (e.g.
    ``{"entropy_coeff": 0.01}``). Bad arguments raise a ``ValueError`` naming them, before any
    env runner starts.
    """
    require_rllib()
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from .rllib_module import MaskedPPOTorchRLModule

    seed = require_int(seed, "seed")
    env_config = env_config_for(env_kwargs, seed)
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
        .environment(RLlibWritePolicyBenchEnv, env_config=env_config)
        .env_runners(num_env_runners=num_env_runners)
        .training(train_batch_size_per_learner=train_batch_size, minibatch_size=minibatch_size,
                  num_epochs=num_epochs, lr=float(lr))
        .rl_module(rl_module_spec=RLModuleSpec(module_class=MaskedPPOTorchRLModule),
                   model_config={"fcnet_hiddens": hidden})
        # No CPU/GPU usage thread: it only adds numbers to the results (and a notice asking for GPUtil).
        .debugging(seed=seed, log_sys_usage=False)
    )
    if ppo_options:
        try:
            config.training(**dict(ppo_options))
        except TypeError as error:
            raise ValueError(f"ppo_options: {error}") from None
    return config


def env_config_for(env_kwargs: Mapping[str, Any] | None, seed: int) -> dict[str, Any]:
    """The env arguments of a training run, checked by building the env once (so that a bad one
    is named here, not in an env runner's traceback)."""
    if env_kwargs is not None and not isinstance(env_kwargs, Mapping):
        raise ValueError(f"env_kwargs must be a mapping of WritePolicyBenchEnv arguments, got {env_kwargs!r}")
    env_config = {**DEFAULT_ENV_KWARGS, "episode_seed": seed, **dict(env_kwargs or {})}
    try:
        make_rllib_env(env_config).close()
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
    ``length``, ``track``, ``slots``...); ``ppo`` takes the keyword arguments of
    ``masked_ppo_config`` (``train_batch_size``, ``minibatch_size``, ``num_epochs``, ``lr``,
    ``hidden_sizes``, ``num_env_runners``, ``ppo_options``). A local Ray with ``num_cpus`` CPUs
    is started for the run and stopped after it, unless this process already runs Ray (then
    that one is used, and left running); ``num_env_runners`` env runners each take a CPU of it
    (0, the default: sampling happens in this process). ``progress`` prints a line per iteration.
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

    from .train import save_env_kwargs

    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "config.json", _run_record(config, iterations, seed, num_cpus, torch_threads, ppo))
    started = not ray.is_initialized()
    if started:
        with _logger_without(_AUTH_LOGGER, _AUTH_NOTICE):
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=progress, configure_logging=False)
    try:
        with quiet_rllib_deprecations(), _logger_without(_CONFIG_LOGGER, _NEW_STACK_NOTICE):
            algo = config.build_algo()
        try:
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
    finally:
        if started:
            ray.shutdown()
    save_env_kwargs(checkpoint, config.env_config)
    return RLlibTraining(checkpoint, metrics)


# Ray's notice that it turned on token authentication, its default for a local cluster. Setting
# RAY_AUTH_MODE would silence it too, but "disabled" opens the cluster to anyone on the network,
# and "token" set after Ray was imported leaves the driver without its token.
_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
_AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"
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
    from wpb_gym.evaluation.reports.report import write_atomic

    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=repr) + "\n")
