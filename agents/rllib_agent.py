"""A PPO policy trained with RLlib (``agents.rllib_training``) as an agent of the offline evaluator.

``make_agent("rllib", path=CHECKPOINT)`` or ``wpb eval --agents rllib:CHECKPOINT`` loads the
policy's RLModule from an RLlib algorithm checkpoint folder (no Ray is started) and plays it
greedily: the action with the largest masked logit, so the same checkpoint on the same
episodes gives the same metrics. Like an SB3 model it decides from the env's observation
through a private env kept in step with the evaluator (``agents.model_agent``), observed as in
training (``agents.rllib_env.MaskedObservation``); the env arguments it was trained with are
read from ``<checkpoint>.env.json`` beside the folder, which ``train_rllib_ppo`` writes.

Importing this module needs no Ray; building the agent needs ``pip install -e '.[rllib]'``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .model_agent import ModelAgent, env_kwargs_path
from .rllib_env import make_rllib_env, masked_observation, quiet_rllib_deprecations, require_rllib

# Where an algorithm checkpoint keeps the RLModule of its (single-agent) policy.
MODULE_FOLDER = Path("learner_group", "learner", "rl_module")
DEFAULT_MODULE_ID = "default_policy"


def load_rllib_module(path: str | Path, module_id: str = DEFAULT_MODULE_ID, torch_threads: int | None = 1) -> Any:
    """The RLModule ``module_id`` of the RLlib algorithm checkpoint at ``path`` (or the module's own
    checkpoint folder), on the CPU, without starting Ray.

    ``torch_threads`` sets PyTorch's threads for this process (None leaves them): one
    observation at a time gains nothing from more, and evaluation workers that each keep
    PyTorch's default oversubscribe the cores.
    """
    require_rllib()
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModule

    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    path = Path(path)
    folder = path / MODULE_FOLDER / module_id
    if not folder.is_dir():
        if not (path / "module_state.pkl").is_file():
            raise FileNotFoundError(
                f"no RLlib checkpoint at {path}: expected the folder train_rllib_ppo (Algorithm.save_to_path) "
                f"wrote, holding {MODULE_FOLDER / module_id}"
            )
        folder = path
    try:
        with quiet_rllib_deprecations():
            module = RLModule.from_checkpoint(folder)
    except Exception as error:  # a corrupt or foreign folder fails while unpickling
        raise ValueError(f"{folder} is not an RLlib RLModule checkpoint: {type(error).__name__}: {error}") from None
    module.eval()
    return module


class RLlibAgent(ModelAgent):
    name = "rllib"
    aliases = ()
    description = "a PPO policy trained with RLlib (checkpoint folder), greedy on the masked logits"
    kind = "rllib"

    def __init__(
        self, path: str | Path, env_kwargs: Mapping[str, Any] | None = None, module_id: str = DEFAULT_MODULE_ID
    ) -> None:
        super().__init__(path, env_kwargs)
        self.module_id = module_id
        self.module = load_rllib_module(path, module_id)
        probe = make_rllib_env(self.env_kwargs)
        if probe.observation_space != self.module.observation_space:
            raise ValueError(
                f"{self.path}: the policy expects observations {self.module.observation_space}, but the env built "
                f"from {self.env_kwargs or 'the default arguments'} gives {probe.observation_space}; pass the "
                f"env_kwargs it was trained with (or put them in {env_kwargs_path(path)})"
            )
        import torch
        from ray.rllib.core.columns import Columns

        self._torch, self._obs_key, self._logits_key = torch, Columns.OBS, Columns.ACTION_DIST_INPUTS

    def params(self) -> dict[str, Any]:
        return {"path": self.path, "env_kwargs": self.env_kwargs, "module_id": self.module_id}

    def _act(self, observation: Any, mask: np.ndarray) -> int:
        torch = self._torch
        batch = {k: torch.from_numpy(v)[None] for k, v in masked_observation(observation, mask).items()}
        with torch.no_grad():
            logits = self.module.forward_inference({self._obs_key: batch})[self._logits_key]
        return int(torch.argmax(logits[0]))
