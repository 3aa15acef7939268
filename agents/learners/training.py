"""``wpb train --algo epsilon_greedy|bandit_ucb``: the bandit learners trained like the SB3 agents.

The learner plays training episodes of a dense-reward env (``episode_seed = --seed``, or the
``episodes=`` files) until it has taken ``timesteps`` decisions, learning from the env's
rewards (``agents.learners.bandits``); then its greedy policy plays the validation episodes (the
held-out seed ``--seed + HELD_OUT_SEED_OFFSET``, or ``--eval-episodes``). The run folder
gets ``learner.json`` (evaluate it with ``{name: epsilon_greedy, path: RUN/learner.json}`` in
a ``wpb eval`` config) and ``config.json`` (settings, training budget, validation F1,
versions).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from wpb_gym.core.atomic_files import write_atomic

from ..held_out import HELD_OUT_SEED_OFFSET, held_out_env_kwargs, validation_env_kwargs
from ..versions import package_versions
from .bandits import BanditLearner, make_learner

LEARNER_ALGOS = ("epsilon_greedy", "bandit_ucb")
DEFAULT_TIMESTEPS = 200_000  # 1,000 episodes of T = 200: about 20 seconds here
# The learners' evictions are scripted, and their contexts read no slot: the env they learn in
# charges nothing for an EXPIRE (the env's default cost would tax every WRITE that evicts).
DEFAULT_ENV = {"budget_bytes": 10240, "expire_cost": 0.0}


def train_learner_run(
    algo: str,
    out: str | Path,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    timesteps: int | None = None,
    seed: int = 0,
    progress: bool = True,
    eval_episodes: str | Path | None = None,
    validation_episodes: int = 30,
) -> dict[str, Any]:
    """Train the learner ``algo`` into the run folder ``out``; returns the saved configuration."""
    from wpb_gym.envs.env import WritePolicyBenchEnv
    if algo not in LEARNER_ALGOS:
        raise ValueError(f"unknown learner {algo!r}; expected one of {LEARNER_ALGOS}")
    env_config = {**DEFAULT_ENV, **dict(env_kwargs or {}), "dense_reward": True, "observation_mode": "box"}
    total = DEFAULT_TIMESTEPS if timesteps is None else int(timesteps)
    validation = validation_env_kwargs(held_out_env_kwargs(env_config, eval_episodes), eval_episodes, seed,
                                       validation_episodes)
    env = WritePolicyBenchEnv(**{**env_config, "episode_seed": seed})
    learner = make_learner(algo, seed=seed)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=f"training {algo}", unit="step")
    steps = episodes = 0
    while steps < total:
        (row,) = learner.fit(env, 1, seed=seed if episodes == 0 else None)
        length = len(env.episode)
        steps, episodes = steps + length, episodes + 1
        if bar is not None:
            bar.update(length)
    if bar is not None:
        bar.close()
    validation_env = WritePolicyBenchEnv(**validation)
    from ..env_adapter import run_agent_in_env

    scores = [run_agent_in_env(learner, validation_env).metrics["f1"] for _ in range(len(validation["episodes"]))]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    learner.save(out / "learner.json")
    saved = {
        "algo": algo,
        "seed": seed,
        "held_out_episode_seed": seed + HELD_OUT_SEED_OFFSET,
        "held_out_episodes": None if eval_episodes is None else str(eval_episodes),
        "timesteps": steps,
        "episodes": episodes,
        "params": learner.params(),
        "contexts": len(learner.counts),
        "validation_f1": float(np.mean(scores)),
        "config": {"env": env_config},
        "versions": package_versions(),
    }
    write_atomic(out / "config.json", json.dumps(saved, indent=2, sort_keys=True, default=str) + "\n")
    return saved


# ---------------------------------------------------------------------------- training from Python
def make_training_env(
    regime: str = "default", budget_bytes: int = 10240, length: int = 200, episode_seed: int = 0, **env_options: Any
) -> Any:
    """A ``WritePolicyBench-v0`` env with dense rewards, for ``fit``."""
    import gymnasium as gym

    import wpb_gym  # noqa: F401  (registers WritePolicyBench-v0)

    options = {"expire_cost": DEFAULT_ENV["expire_cost"], **env_options}  # evictions are the learner's script
    return gym.make(
        "WritePolicyBench-v0",
        regime=regime,
        budget_bytes=budget_bytes,
        length=length,
        episode_seed=episode_seed,
        dense_reward=True,
        **options,
    )


def train_learner(
    agent: BanditLearner | str,
    episodes: int,
    *,
    regime: str = "default",
    budget_bytes: int = 10240,
    length: int = 200,
    episode_seed: int = 0,
    seed: int | None = 0,
    progress: bool = False,
    **env_options: Any,
) -> tuple[BanditLearner, list[dict[str, float]]]:
    """Train ``agent`` (or a new learner of that name) for ``episodes`` episodes of a dense-reward
    env of ``regime`` (``seed`` seeds the env's first reset); return the agent, in evaluation
    mode, and the training metric rows."""
    learner = make_learner(agent) if isinstance(agent, str) else agent
    env = make_training_env(regime, budget_bytes, length, episode_seed, **env_options)
    try:
        history = learner.fit(env, episodes, seed=seed, progress=progress)
    finally:
        env.close()
    return learner, history


def held_out_f1(
    agent: Any,
    regime: str,
    n: int,
    *,
    seed: int = 1000,
    budget_bytes: int = 10240,
    length: int = 200,
) -> float:
    """Mean F1 of ``agent`` in the offline evaluator (unprivileged track) on episodes ``0..n-1``
    of the generated set ``(regime, seed)``; the default seed is not the env's training set."""
    from wpb_gym.episodes.generators.paper import generate_episode, make_config
    from wpb_gym.evaluation.runner import run_episode

    config = make_config(regime, length=length)
    scores = [
        run_episode(agent, generate_episode(config, seed=seed, index=i), budget_bytes, "unprivileged").metrics.f1
        for i in range(n)
    ]
    return float(np.mean(scores)) if scores else 0.0
