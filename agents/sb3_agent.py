"""A trained Stable-Baselines3 model as an agent of the offline evaluator.

The model decides from the environment's observation, so the agent keeps a private copy of
``WritePolicyBenchEnv`` in step with the evaluator: it is built at every episode start from
the stream (the steps as the track shows them, never the labels), and every action the
model picks is yielded to the evaluator and then stepped in the private env. The two
memories apply the same rules to the same actions, so they stay equal.

The env arguments the model was trained with (slots, track, observation mode...) are read
from ``<model>.env.json`` beside the model file when it exists, or given as ``env_kwargs``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from wpb_gym.core.policy import EpisodeContext
from wpb_gym.core.readonly import thaw
from wpb_gym.core.store import StoreView
from wpb_gym.core.types import Episode, MemoryAction, Step
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.episodes.generators.paper import GeneratorConfig

from .base import Agent

# Arguments that choose episodes or rewards: the evaluator decides those, not the model.
_IGNORED_ENV_KWARGS = {
    "episodes",
    "episode_seed",
    "episode_order",
    "regime",
    "length",
    "budget_bytes",
    "reward",
    "dense_reward",
    "invalid_action_penalty",
    "render_mode",
} | {f.name for f in dataclasses.fields(GeneratorConfig)}  # options that only shaped training episodes


def env_kwargs_path(model_path: str | Path) -> Path:
    """Where the env arguments of a saved model live: ``<model>.env.json``."""
    path = Path(model_path)
    return path.with_name(path.name.removesuffix(".zip") + ".env.json")


def load_sb3_model(path: str | Path, algo: str = "auto", torch_threads: int | None = 1) -> Any:
    """Load an SB3 / sb3-contrib model; ``algo`` names its class (auto: RecurrentPPO if the file says
    so, else MaskablePPO, then PPO, A2C, DQN).

    ``torch_threads`` sets PyTorch's threads for this process (None leaves them): predicting
    one observation at a time gains nothing from more threads, and evaluation workers that
    each keep PyTorch's default oversubscribe the cores many times over.
    """
    import torch

    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    from sb3_contrib import MaskablePPO, RecurrentPPO
    from stable_baselines3 import A2C, DQN, PPO

    classes = {"MaskablePPO": MaskablePPO, "PPO": PPO, "A2C": A2C, "DQN": DQN, "RecurrentPPO": RecurrentPPO}
    path = Path(path)
    if not path.is_file() and not path.with_suffix(".zip").is_file():
        raise FileNotFoundError(f"no SB3 model at {path}")
    if algo == "auto" and _is_recurrent(path):
        algo = "RecurrentPPO"
    if algo != "auto":
        if algo not in classes:
            raise ValueError(f"algo must be 'auto' or one of {sorted(classes)}, got {algo!r}")
        try:
            return classes[algo].load(path, device="cpu")
        except Exception as error:
            raise ValueError(f"{path} is not a {algo} model: {type(error).__name__}: {error}") from None
    errors = []
    for name in ("MaskablePPO", "PPO", "A2C", "DQN"):
        try:
            return classes[name].load(path, device="cpu")
        except Exception as error:  # the wrong class fails while loading its policy
            errors.append(f"{name}: {type(error).__name__}: {error}")
    raise ValueError(f"{path} is not a model of MaskablePPO, PPO, A2C or DQN:\n  " + "\n  ".join(errors))


def _is_recurrent(path: Path) -> bool:
    # SB3 saves its arguments as JSON in the zip's "data" member; a recurrent policy's class
    # lives in sb3_contrib's recurrent module.
    file = path if path.is_file() else path.with_suffix(".zip")
    try:
        with zipfile.ZipFile(file) as archive:
            data = archive.read("data").decode("utf-8", "replace")
    except (zipfile.BadZipFile, KeyError, OSError):
        return False  # not an SB3 file: the loaders say why
    return "recurrent" in data.lower() and "lstm" in data.lower()


class SB3Agent(Agent):
    name = "sb3"
    aliases = ()
    description = "a trained Stable-Baselines3 model (by path), acting through the env's observation"
    kind = "sb3"
    needs_stream = True

    def __init__(
        self,
        path: str | Path,
        env_kwargs: dict[str, Any] | None = None,
        deterministic: bool = True,
        algo: str = "auto",
    ) -> None:
        self.path = str(path)
        self.deterministic = bool(deterministic)
        self.algo = algo
        if env_kwargs is None:
            sidecar = env_kwargs_path(path)
            if sidecar.is_file():
                try:
                    env_kwargs = json.loads(sidecar.read_text(encoding="utf-8"))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{sidecar}: not valid JSON ({error})") from None
                if not isinstance(env_kwargs, dict):
                    raise ValueError(f"{sidecar}: expected a JSON object of env arguments")
            else:
                env_kwargs = {}
        self.env_kwargs = {k: v for k, v in env_kwargs.items() if k not in _IGNORED_ENV_KWARGS}
        self.track = self.env_kwargs.get("track", "unprivileged")
        self.model = load_sb3_model(path, algo)
        probe = WritePolicyBenchEnv(**self.env_kwargs)
        if probe.observation_space != self.model.observation_space:
            raise ValueError(
                f"{self.path}: the model expects observations {self.model.observation_space}, but the env built "
                f"from {self.env_kwargs or 'the default arguments'} gives {probe.observation_space}; pass the "
                f"env_kwargs it was trained with (or put them in {env_kwargs_path(path)})"
            )
        self._maskable = "action_masks" in inspect.signature(self.model.predict).parameters
        # A recurrent policy carries its LSTM state from one decision to the next within an
        # episode; episode_start resets it at the first decision.
        self._recurrent = "episode_start" in inspect.signature(self.model.predict).parameters
        self._state: Any = None
        self._episode_start = np.ones((1,), dtype=bool)
        self._env: WritePolicyBenchEnv | None = None

    def params(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "env_kwargs": self.env_kwargs,
            "deterministic": self.deterministic,
            "algo": self.algo,
        }

    def start_episode(self, context: EpisodeContext) -> None:
        if context.stream is None:
            raise ValueError("SB3Agent needs the episode's stream at start_episode (needs_stream = True)")
        if context.track != self.track:
            # Byte costs depend on the track: the model's private memory would drift apart.
            raise ValueError(
                f"{self.path} was trained on the {self.track} track; evaluate it on that track, not {context.track}"
            )
        # The evaluator shows read-only copies; the env reads plain JSON fastest, so the model's
        # private env gets a plain copy of them.
        steps = [Step(s.t, thaw(s.observation), thaw(s.metadata)) for s in context.stream.steps]
        stream = Episode(steps=steps, labels={})
        self._env = WritePolicyBenchEnv(**self.env_kwargs, episodes=[stream], budget_bytes=context.budget_bytes)
        self._obs, _ = self._env.reset(seed=0, options={"episode_index": 0})
        self._state = None
        self._episode_start = np.ones((1,), dtype=bool)

    def select(self, step: Step, store: StoreView) -> Iterable[MemoryAction]:
        env = self._env
        if env is None:
            raise RuntimeError("SB3Agent.select before start_episode")
        if env.t != step.t:
            raise RuntimeError(f"SB3Agent's env is at t={env.t}, the evaluator at t={step.t}: they went out of step")
        while True:
            mask = env.action_masks()
            if self._maskable:
                action, _ = self.model.predict(self._obs, deterministic=self.deterministic, action_masks=mask)
            elif self._recurrent:
                action, self._state = self.model.predict(
                    self._obs, state=self._state, episode_start=self._episode_start, deterministic=self.deterministic
                )
                self._episode_start = np.zeros((1,), dtype=bool)
            else:
                action, _ = self.model.predict(self._obs, deterministic=self.deterministic)
            a = int(np.asarray(action).reshape(-1)[0])
            if not mask[a]:
                a = 0  # the env treats an invalid action as SKIP
            if a != 0:
                chosen = env.decode_action(a)
                if chosen.action == "WRITE":
                    chosen = MemoryAction.write(step)  # the step as the evaluator showed it
                elif chosen.action == "MERGE":
                    chosen = MemoryAction.merge(step, chosen.target_t)
                yield chosen
            self._obs, _, _, _, _ = env.step(a)
            if a < 2 + env.K:  # SKIP, WRITE or MERGE: the timestep is over
                return
