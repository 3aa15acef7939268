"""A trained Stable-Baselines3 model as an agent of the offline evaluator.

The model decides from the environment's observation through a private copy of
``WritePolicyBenchEnv`` kept in step with the evaluator (``agents.model_agent``), or of
``QueryTierEnv`` for a model of the query tier's env (``"query_tier": true`` in its env
arguments, as ``agents.sb3.query_imitation`` saves them). The env
arguments the model was trained with (slots, track, observation mode...) are read from
``<model>.env.json`` beside the model file when it exists, or given as ``env_kwargs``.
"""

from __future__ import annotations

import inspect
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.query_env import QueryTierEnv

from ..model_agent import ModelAgent, env_kwargs_path, fit_slots


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


class SB3Agent(ModelAgent):
    name = "sb3"
    aliases = ()
    description = "a trained Stable-Baselines3 model (by path), acting through the env's observation"
    kind = "sb3"

    def __init__(
        self,
        path: str | Path,
        env_kwargs: Mapping[str, Any] | None = None,
        deterministic: bool = True,
        algo: str = "auto",
        through_predict: bool = False,
    ) -> None:
        """``through_predict``: every decision by the model's ``predict``, the literal reference
        (slower, the same actions); by default a box observation of MaskablePPO, PPO or A2C is
        decided by the call ``predict`` makes, without its wrapping (``_act_directly``)."""
        super().__init__(path, env_kwargs)
        self.deterministic = bool(deterministic)
        self.algo = algo
        self.model = load_sb3_model(path, algo)
        env_class = QueryTierEnv if self.query_tier else WritePolicyBenchEnv
        self.env_kwargs, probe = fit_slots(self.model.observation_space, self.env_kwargs, env_class)
        if probe.observation_space != self.model.observation_space:
            raise ValueError(
                f"{self.path}: the model expects observations {self.model.observation_space}, but the env built "
                f"from {self.env_kwargs or 'the default arguments'} gives {probe.observation_space}; pass the "
                f"env_kwargs it was trained with (or put them in {env_kwargs_path(path)})"
            )
        from sb3_contrib import MaskablePPO, RecurrentPPO
        from stable_baselines3 import A2C, PPO

        self._maskable = "action_masks" in inspect.signature(self.model.predict).parameters
        # A recurrent policy carries its LSTM state from one decision to the next within an
        # episode; episode_start resets it at the first decision.
        self._recurrent = isinstance(self.model, RecurrentPPO)
        # Models whose predict is their policy's _predict and no more (DQN's explores around
        # it when not deterministic; a recurrent one threads its state through it).
        self._direct = isinstance(self.model, (MaskablePPO, PPO, A2C)) and not through_predict
        self._state: Any = None
        self._episode_start = np.ones((1,), dtype=bool)
        # Once, not at every decision as predict does; decide may come before any episode.
        self.model.policy.set_training_mode(False)

    def params(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "env_kwargs": {**self.env_kwargs, "query_tier": True} if self.query_tier else self.env_kwargs,
            "deterministic": self.deterministic,
            "algo": self.algo,
        }

    def _start_policy(self) -> None:
        self._state = None
        self._episode_start = np.ones((1,), dtype=bool)

    def _act(self, observation: Any, mask: np.ndarray) -> int:
        if self._direct and isinstance(observation, np.ndarray):
            return self._act_directly(observation, mask)
        if self._maskable:
            action, _ = self.model.predict(observation, deterministic=self.deterministic, action_masks=mask)
        elif self._recurrent:
            action, self._state = self.model.predict(
                observation, state=self._state, episode_start=self._episode_start, deterministic=self.deterministic
            )
            self._episode_start = np.zeros((1,), dtype=bool)
        else:
            action, _ = self.model.predict(observation, deterministic=self.deterministic)
        return int(np.asarray(action).reshape(-1)[0])

    def _act_directly(self, observation: np.ndarray, mask: np.ndarray) -> int:
        """What ``predict`` decides for one box observation, by the call it makes
        (``policy._predict``) without what it does around it: set the modules' mode, copy and
        check the observation, convert the action back. That wrapping was about a seventh of a
        query-tier model's decision (``benchmarks/model_decisions.py``); the actions are the
        same (``tests/agents/test_query_imitation.py``, ``tests/agents/test_sb3_agent.py``)."""
        import torch as th

        policy = self.model.policy
        with th.inference_mode():
            x = th.from_numpy(observation).to(policy.device)[None]
            if self._maskable:
                action = policy._predict(x, deterministic=self.deterministic, action_masks=mask[None])
            else:
                action = policy._predict(x, deterministic=self.deterministic)
        return int(action.reshape(-1)[0])

