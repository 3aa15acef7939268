"""The common part of agents that are trained models deciding from the env's observation
(``sb3:MODEL.zip``, ``rllib:CHECKPOINT``, and ``policy:DIR``, either exported by ``wpb export``).

A model reads ``WritePolicyBenchEnv``'s observation, which the offline evaluator does not
produce, so such an agent keeps a private copy of the env in step with the evaluator: it is
built at every episode start from the stream (the steps as the track shows them, never the
labels), and every action the model picks is yielded to the evaluator and then stepped in the
private env. The two memories apply the same rules to the same actions, so they stay equal.

The env arguments the model was trained with (slots, track, observation mode...) are read
from ``<model>.env.json`` beside the model (file or folder) when it exists, or given as
``env_kwargs``.
"""

from __future__ import annotations

import dataclasses
import json
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from wpb_gym.core.policy import EpisodeContext
from wpb_gym.core.readonly import thaw
from wpb_gym.core.store import StoreView
from wpb_gym.core.store_limits import LIMIT_NAMES, StoreLimits
from wpb_gym.core.types import Episode, MemoryAction, Step
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.query_env import QueryTierEnv
from wpb_gym.episodes.generators.paper import GeneratorConfig

from .base import Agent

# Env arguments that decide what the model observes: saved beside every model file.
OBSERVATION_KWARGS = ("track", "slots", "slot_order", "observation_mode", "max_expires_per_step")
# Arguments that choose episodes or rewards: the evaluator decides those, not the model.
IGNORED_ENV_KWARGS = {
    "episodes",
    "episode_seed",
    "episode_order",
    "regime",
    "length",
    "budget_bytes",
    "reward",
    "dense_reward",
    "invalid_action_penalty",
    "expire_cost",
    "render_mode",
} | {f.name for f in dataclasses.fields(GeneratorConfig)}  # options that only shaped training episodes


def recorded_env_kwargs(env_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """What a saved model's sidecar or an exported policy records of its env arguments: every
    argument that shapes the observation, defaults included (a model must observe the same after
    a default of the env changes), and a limit beside the budget it was trained under, as text
    (its features, and with compression an action: an evaluation must then give it)."""
    return {**env_defaults(*OBSERVATION_KWARGS), **{k: v for k, v in env_kwargs.items() if k in OBSERVATION_KWARGS},
            **StoreLimits.of_arguments(env_kwargs).arguments()}


def env_defaults(*names: str) -> dict[str, Any]:
    """The env's default values of the arguments ``names`` (for files that must name every
    argument that shaped them, so that a later change of a default does not change them)."""
    import inspect

    from wpb_gym.envs.env import WritePolicyBenchEnv

    parameters = inspect.signature(WritePolicyBenchEnv).parameters
    return {name: parameters[name].default for name in names}


def fit_slots(space: Any, env_kwargs: Mapping[str, Any], make: Any) -> tuple[dict[str, Any], Any]:
    """``env_kwargs`` and the env ``make(**env_kwargs)`` builds, with ``slots`` added when they
    do not name it and another count is the one whose observations are ``space``: models saved
    before the env's default slots became 2 (package 0.4.0) name only the arguments they were
    given, not the 8 slots they were trained with; their observation space says how many."""
    env_kwargs = dict(env_kwargs)
    probe = make(**env_kwargs)
    if probe.observation_space == space or "slots" in env_kwargs:
        return env_kwargs, probe
    for slots in range(1, 65):
        candidate = make(**{**env_kwargs, "slots": slots})
        if candidate.observation_space == space:
            probe.close()
            return {**env_kwargs, "slots": slots}, candidate
        candidate.close()
    return env_kwargs, probe


def env_kwargs_path(model_path: str | Path) -> Path:
    """Where the env arguments of a saved model live: ``<model>.env.json``."""
    path = Path(model_path)
    return path.with_name(path.name.removesuffix(".zip") + ".env.json")


def model_files(model_path: str | Path) -> list[Path]:
    """What a saved model is read from, of what exists: the model (a file, an RLlib checkpoint
    folder, or ``<path>.zip``, which SB3 reads for a path without the suffix) and
    ``<model>.env.json`` beside it. ``wpb eval`` keys its checkpoints by their content. Only
    files and folders count: a named pipe or a device in their place (a link to ``/dev/zero``)
    would never end being read."""
    path = Path(model_path)
    if not path.exists() and path.with_suffix(".zip").is_file():
        path = path.with_suffix(".zip")
    return [p for p in (path, env_kwargs_path(model_path)) if p.is_file() or p.is_dir()]


def read_env_kwargs(model_path: str | Path, env_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The env arguments that shape a model's observation: ``env_kwargs`` if given, else those of
    ``<model>.env.json`` (none when it is absent), without those the evaluator decides."""
    if env_kwargs is None:
        sidecar = env_kwargs_path(model_path)
        if sidecar.is_file():
            try:
                env_kwargs = json.loads(sidecar.read_text(encoding="utf-8"))
            except json.JSONDecodeError as error:
                raise ValueError(f"{sidecar}: not valid JSON ({error})") from None
            if not isinstance(env_kwargs, dict):
                raise ValueError(f"{sidecar}: expected a JSON object of env arguments")
            try:  # a limit the model was trained under, named with the file
                StoreLimits.of_arguments(env_kwargs, f"{sidecar}: ")
            except ValueError as error:
                raise ValueError(str(error) if str(sidecar) in str(error) else f"{sidecar}: {error}") from None
        else:
            env_kwargs = {}
    return {k: v for k, v in env_kwargs.items() if k not in IGNORED_ENV_KWARGS}


class ModelAgent(Agent):
    """An agent whose decisions come from a model reading a private ``WritePolicyBenchEnv``.

    Subclasses load the model and implement ``_act(observation, mask)``, the env action for the
    private env's current observation and action mask; ``_start_policy`` resets whatever the
    model carries from one decision to the next (a recurrent state) at each episode start.
    """

    needs_stream = True

    def __init__(self, path: str | Path, env_kwargs: Mapping[str, Any] | None = None) -> None:
        self.path = str(path)
        self.env_kwargs = read_env_kwargs(path, env_kwargs)
        # A model of the query tier's own env (QueryTierEnv) says so in its env arguments.
        query_tier = self.env_kwargs.pop("query_tier", False)
        if not isinstance(query_tier, bool):
            raise ValueError(f"{env_kwargs_path(path)}: query_tier: expected true or false, got {query_tier!r}")
        self.query_tier = query_tier
        self.track = self.env_kwargs.get("track", "unprivileged")
        self._env: WritePolicyBenchEnv | QueryTierEnv | None = None
        self._obs: Any = None

    @property
    def trained_limits(self) -> tuple[str, ...]:
        """The limits beside the budget the model was trained under (``kind_budgets``,
        ``write_time``, ``compression``): its observation has their features, so an evaluation
        must give them too (with its own values)."""
        return tuple(name for name in LIMIT_NAMES if self.env_kwargs.get(name) is not None)

    @abstractmethod
    def _act(self, observation: Any, mask: np.ndarray) -> int:
        """The model's env action for ``observation`` (the private env's) with valid actions ``mask``."""

    def _start_policy(self) -> None:  # noqa: B027 - an optional hook: no-op by default
        """Called at every episode start, after the private env's reset."""

    def decide(self, observation: Any, mask: np.ndarray) -> int:
        """The model's env action for an observation of its env and that env's action mask, as
        ``select`` asks it (``wpb export`` compares a model and its export with it)."""
        return self._act(observation, mask)

    def restart(self) -> None:
        """Forget what the model carries from one decision to the next, as at an episode start."""
        self._start_policy()

    def start_episode(self, context: EpisodeContext) -> None:
        if context.stream is None:
            raise ValueError(f"{type(self).__name__} needs the episode's stream at start_episode (needs_stream = True)")
        if context.track != self.track:
            # Byte costs depend on the track: the model's private memory would drift apart.
            raise ValueError(
                f"{self.path} was trained on the {self.track} track; evaluate it on that track, not {context.track}"
            )
        # The evaluator shows read-only copies; the env reads plain JSON fastest, so the model's
        # private env gets a plain copy of them.
        steps = [Step(s.t, thaw(s.observation), thaw(s.metadata)) for s in context.stream.steps]
        stream = Episode(steps=steps, labels={})
        if self.query_tier:
            self._start_query_env(context, stream)
            return
        # Limits beside the budget are the evaluator's: the private memory keeps them, so that it
        # stays the evaluator's. A model trained without them is shown the observation it knows
        # (the features they append are left out); one trained with them needs them.
        trained_with = self.trained_limits
        kwargs = {name: value for name, value in self.env_kwargs.items() if name not in LIMIT_NAMES}
        evaluated_with = {"kind_budgets": context.kind_budgets, "write_time": context.write_time,
                          "compression": context.compression}
        missing = [name for name in trained_with if evaluated_with[name] is None]
        if missing:  # its observation (and with compression, its actions) need that limit
            raise ValueError(f"{self.path} was trained with {missing[0]}=; play it under that limit too "
                             f"(in wpb eval: --{missing[0].replace('_', '-')})")
        # Compression adds an action: only a model trained with it may take it. For one trained
        # without, a memory that refuses compressed writes judges its (plain) actions alike.
        given = {name: value for name, value in evaluated_with.items()
                 if name != "compression" or name in trained_with}
        self._env = WritePolicyBenchEnv(**kwargs, episodes=[stream], budget_bytes=context.budget_bytes,
                                        **{k: v for k, v in given.items() if v is not None})
        self._strip = 0 if trained_with or self._env.limits is None else len(self._env.limits.names)
        self._obs = self._shown(self._env.reset(seed=0, options={"episode_index": 0})[0])
        self._start_policy()

    def _start_query_env(self, context: EpisodeContext, stream: Episode) -> None:
        """The private env of a query-tier model: ``QueryTierEnv`` on the stream, answering
        nothing (the evaluator scores the memory)."""
        limits = [name for name in LIMIT_NAMES if getattr(context, name) is not None]
        if limits:
            raise ValueError(f"{self.path} decides in the query tier's env, which has no {limits[0]}; evaluate it "
                             f"without --{limits[0].replace('_', '-')}")
        # The env picks among its episodes by regime: the stream's (its steps' mode), or any.
        self._env = QueryTierEnv(**self.env_kwargs, regime=stream.regime, episodes=[stream],
                                 budget_bytes=context.budget_bytes, answers=False)
        self._strip = 0
        self._obs = self._env.reset(seed=0, options={"episode_index": 0})[0]
        self._start_policy()

    def _shown(self, observation: Any) -> Any:
        """The private env's observation as the model was trained to read it."""
        if not self._strip:
            return observation
        if isinstance(observation, dict):
            return {k: v for k, v in observation.items() if k != "limits"}
        return observation[: -self._strip]

    def select(self, step: Step, store: StoreView) -> Iterable[MemoryAction]:
        env = self._env
        name = type(self).__name__
        if env is None:
            raise RuntimeError(f"{name}.select before start_episode")
        if self.query_tier and not (isinstance(step.observation, Mapping) and "api" in step.observation):
            return  # a checkpoint: the query tier's env plays it itself
        if env.t != step.t:
            raise RuntimeError(f"{name}'s env is at t={env.t}, the evaluator at t={step.t}: they went out of step")
        while True:
            mask = env.action_masks()
            a = self._act(self._obs, mask)
            if not mask[a]:
                a = 0  # the env treats an invalid action as SKIP
            kind = "SKIP"
            if a != 0:
                chosen = env.decode_action(a)
                kind = chosen.action
                if kind == "WRITE":  # the step as the evaluator showed it
                    chosen = MemoryAction.write(step) if chosen.codec is None else MemoryAction.write_compressed(step)
                elif kind == "MERGE":
                    chosen = MemoryAction.merge(step, chosen.target_t)
                yield chosen
            self._obs = self._shown(env.step(a)[0])
            if kind != "EXPIRE":  # SKIP, WRITE or MERGE: the timestep is over
                return
