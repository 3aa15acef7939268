"""An exported policy as an agent of the offline evaluator: ``policy:DIR``.

``load_policy(DIR)`` reads a folder ``wpb export`` wrote (``agents.exported``) and rebuilds its
policy; ``make_agent("policy", path=DIR)`` or ``wpb eval --agents policy:DIR`` plays it. Like an
SB3 model or an RLlib checkpoint it decides from the env's observation through a private env
kept in step with the evaluator (``agents.model_agent``), built from the env arguments
``policy.json`` holds; unlike them nothing of it is unpickled, so ``wpb eval
--data-only-models`` accepts it where it refuses those.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wpb_gym.core.store_limits import LIMIT_NAMES

from ..model_agent import OBSERVATION_KWARGS, ModelAgent
from . import spaces
from .folder import Fields, PolicyFileError, read_manifest, read_weights_header


@dataclass(frozen=True)
class ExportedPolicy:
    """A policy folder read back: where, of which library and algorithm, the env arguments its
    observations come from, and the rebuilt policy (``act(observation, mask, deterministic)``,
    ``reset()`` at each episode start)."""

    path: Path
    library: str
    algorithm: str
    env_kwargs: dict[str, Any]
    policy: Any


def load_policy(path: str | Path, torch_threads: int | None = 1) -> ExportedPolicy:
    """The exported policy in the folder ``path``; a ``PolicyFileError`` naming the file and what
    is wrong with it otherwise. ``torch_threads`` as for ``agents.sb3.agent.load_sb3_model``."""
    folder = Path(path)
    manifest = read_manifest(folder)
    library = manifest.values["library"]
    algorithm = manifest.text("algorithm")
    env_kwargs = _env_kwargs(manifest)
    header = read_weights_header(folder, manifest)
    import torch

    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    env = _env(library, env_kwargs, manifest.where)
    try:
        for name, space in (("observation_space", env.observation_space), ("action_space", env.action_space)):
            recorded = manifest.mapping(name).values
            if spaces.describe(space) != recorded:
                raise PolicyFileError(
                    f"{manifest.where}: {name}: the env its env_kwargs build has {_summary(spaces.describe(space))}, "
                    f"the file records {_summary(recorded)}: not the policy's env arguments"
                )
        if library == "sb3":
            from .sb3 import SB3Policy

            policy: Any = SB3Policy(manifest, header, env.observation_space, env.action_space)
        else:
            from .rllib import RLlibPolicy

            policy = RLlibPolicy(manifest, header, env.observation_space, env.action_space)
    finally:
        env.close()
    return ExportedPolicy(folder, library, algorithm, env_kwargs, policy)


def _env_kwargs(manifest: Fields) -> dict[str, Any]:
    env_kwargs = manifest.plain("env_kwargs")
    unknown = sorted(set(env_kwargs) - set(OBSERVATION_KWARGS) - set(LIMIT_NAMES))
    if unknown:
        raise PolicyFileError(f"{manifest.where}: env_kwargs: {unknown} are not env arguments that shape the "
                              f"observation ({', '.join(OBSERVATION_KWARGS + LIMIT_NAMES)}); the evaluator decides "
                              "the others")
    return env_kwargs


def _env(library: str, env_kwargs: dict[str, Any], where: str) -> Any:
    """The env the policy observes (RLlib's masked layout for an RLlib policy)."""
    try:
        if library == "rllib":
            from ..rllib.env import make_rllib_env, require_rllib

            require_rllib()
            return make_rllib_env(env_kwargs)
        from wpb_gym.envs.env import WritePolicyBenchEnv

        return WritePolicyBenchEnv(**env_kwargs)
    except (TypeError, ValueError) as error:
        raise PolicyFileError(f"{where}: env_kwargs: {error}") from None


def _summary(described: Any) -> str:
    if not isinstance(described, dict):
        return repr(described)[:60]
    if described.get("type") == "Dict" and isinstance(described.get("spaces"), dict):
        return "Dict(" + ", ".join(f"{k}: {_summary(v)}" for k, v in described["spaces"].items()) + ")"
    sizes = described.get("shape", described.get("n", described.get("nvec")))
    return f"{described.get('type')}({sizes})"


class ExportedPolicyAgent(ModelAgent):
    name = "policy"
    aliases = ()
    description = "a policy exported by wpb export (JSON and safetensors: loading runs no code from it)"
    kind = "policy"

    def __init__(self, path: str | Path, deterministic: bool = True) -> None:
        exported = load_policy(path)
        # Evaluation workers may run elsewhere than the caller's folder.
        super().__init__(Path(path).resolve(), exported.env_kwargs)
        self.exported = exported
        self.deterministic = bool(deterministic)

    def params(self) -> dict[str, Any]:
        return {"path": self.path, "deterministic": self.deterministic}

    def _start_policy(self) -> None:
        self.exported.policy.reset()

    def _act(self, observation: Any, mask: np.ndarray) -> int:
        return self.exported.policy.act(observation, mask, self.deterministic)
