"""``wpb export``: a trained model to the data-only format, checked to decide as the model does.

Exporting loads the model the usual way (an SB3 zip or an RLlib checkpoint is unpickled: export
only models you trust, such as your own, on your own machine), writes the policy folder beside
``out`` under a hidden name, reads it back with ``load_policy`` as any evaluator would, and
compares the two policies' decisions: on ``samples`` observations drawn from the observation
space (each with a random action mask, SKIP always allowed; one sequence for a recurrent
policy) and on ``episodes`` generated episodes played by the offline evaluator, action by
action. Only if every decision is the same does the folder move to ``out``; otherwise nothing
is written and ``ExportError`` names the first difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wpb_gym.core.store_limits import StoreLimits

from ..model_agent import ModelAgent, recorded_env_kwargs
from . import spaces
from .folder import FORMAT, FORMAT_VERSION, check_out, discard_staged, publish_policy_folder, stage_policy_folder

# The episodes an export is checked on: the paper's default regime at its length, a budget that
# fills memory, on the model's own track.
CHECK_REGIME, CHECK_LENGTH, CHECK_BUDGET = "default", 200, 10240


class ExportError(ValueError):
    """The exported policy decides otherwise than its model: nothing was written."""


@dataclass(frozen=True)
class Export:
    """What ``export_sb3`` / ``export_rllib`` wrote and checked."""

    out: Path
    library: str
    algorithm: str
    samples: int  # sampled observations on which both decided alike
    episodes: int  # played episodes on which both acted alike
    actions: int  # the actions of those episodes


def export_sb3(model: str | Path, out: str | Path, *, algo: str = "auto", env_kwargs: Mapping[str, Any] | None = None,
               force: bool = False, samples: int = 1000, episodes: int = 3) -> Export:
    """Export the SB3 model file ``model`` (``env_kwargs`` as ``SB3Agent`` takes them: by default
    those of ``<model>.env.json``) to the policy folder ``out``."""
    from ..sb3.agent import SB3Agent
    from .sb3 import describe

    out = Path(out)
    check_out(out, force)
    original = SB3Agent(model, env_kwargs=env_kwargs, algo=algo)
    part = describe(original.model)
    manifest = _manifest("sb3", part["algorithm"], original, Path(model).name, {"sb3": part},
                         original.model.observation_space, original.model.action_space)
    return _checked(out, manifest, original.model.policy.state_dict(), original, samples, episodes)


def export_rllib(checkpoint: str | Path, out: str | Path, *, module_id: str | None = None,
                 env_kwargs: Mapping[str, Any] | None = None, force: bool = False, samples: int = 1000,
                 episodes: int = 3) -> Export:
    """Export the policy ``module_id`` of the RLlib checkpoint folder ``checkpoint`` (its env
    arguments as ``RLlibAgent`` finds them) to the policy folder ``out``."""
    from ..rllib.agent import DEFAULT_MODULE_ID, RLlibAgent
    from .rllib import describe

    out = Path(out)
    check_out(out, force)
    original = RLlibAgent(checkpoint, env_kwargs=env_kwargs, module_id=module_id or DEFAULT_MODULE_ID)
    module = original.module
    manifest = _manifest("rllib", "PPO", original, Path(checkpoint).resolve().name, {"rllib": describe(module)},
                         module.observation_space, module.action_space)
    return _checked(out, manifest, module.state_dict(), original, samples, episodes)


def _manifest(library: str, algorithm: str, original: ModelAgent, source: str, part: dict[str, Any],
              observation_space: Any, action_space: Any) -> dict[str, Any]:
    from wpb_gym.core.version import __version__

    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "library": library,
        "algorithm": algorithm,
        **part,
        "observation_space": spaces.describe(observation_space),
        "action_space": spaces.describe(action_space),
        "env_kwargs": recorded_env_kwargs(original.env_kwargs),
        "exported_from": source,
        "exported_by": f"writepolicybench-gym {__version__}",
    }


def _checked(out: Path, manifest: dict[str, Any], state: Mapping[str, Any], original: ModelAgent, samples: int,
             episodes: int) -> Export:
    from .agent import ExportedPolicyAgent

    staged = stage_policy_folder(out, manifest, state)
    try:
        exported = ExportedPolicyAgent(staged)
        compare_on_samples(original, exported, samples)
        actions = compare_on_episodes(original, exported, episodes)
        publish_policy_folder(staged, out)
    finally:
        discard_staged(staged)
    return Export(out, manifest["library"], manifest["algorithm"], samples, episodes, actions)


def compare_on_samples(original: ModelAgent, exported: ModelAgent, samples: int, seed: int = 0) -> None:
    """Both decide alike on ``samples`` observations of the space, in one sequence (a recurrent
    policy carries its state along it), each with a random action mask that allows SKIP."""
    from wpb_gym.envs.env import WritePolicyBenchEnv

    env = WritePolicyBenchEnv(**recorded_env_kwargs(original.env_kwargs))
    space, n = env.observation_space, env.n_actions
    env.close()
    space.seed(seed)
    rng = np.random.default_rng(seed)
    original.restart()
    exported.restart()
    for i in range(samples):
        observation = space.sample()
        mask = rng.random(n) < 0.5
        mask[0] = True
        a, b = original.decide(observation, mask), exported.decide(observation, mask)
        if a != b:
            raise ExportError(f"the exported policy picks action {b} where the model picks {a} (sampled observation "
                              f"{i}): nothing written")


def compare_on_episodes(original: ModelAgent, exported: ModelAgent, episodes: int) -> int:
    """Both act alike, action by action, on ``episodes`` generated episodes; the actions compared."""
    from wpb_gym.episodes.generators.paper import generate_episode, make_config
    from wpb_gym.evaluation.runner import run_episode

    config = make_config(CHECK_REGIME, length=CHECK_LENGTH)
    limits = StoreLimits.of_arguments(original.env_kwargs)  # a model trained under one plays under it
    beside = {"kind_budgets": limits.kinds_at(CHECK_BUDGET), "write_time": limits.write_time,
              "compression": limits.compression}
    compared = 0
    for index in range(episodes):
        episode = generate_episode(config, 0, index)
        runs = [run_episode(agent, episode, CHECK_BUDGET, original.track, **beside) for agent in (original, exported)]
        a, b = ([(logged.t, logged.action) for logged in run.actions] for run in runs)
        if a != b:
            first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            when = a[first][0] if first < len(a) else b[first][0]
            raise ExportError(f"the exported policy acts otherwise than the model on episode {index} of the "
                              f"{CHECK_REGIME} regime at t={when}: nothing written")
        compared += len(a)
    return compared
