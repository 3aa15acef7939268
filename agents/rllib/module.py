"""PPO's default torch RLModule with action masking, for RLlib's new API stack.

``MaskedPPOTorchRLModule`` reads the observations of ``agents.rllib.env.MaskedObservation``
(``{"action_mask", "observations"}``): its policy and value networks see ``"observations"``
only, and the logits of the actions whose mask is 0 are replaced by ``MASKED_LOGIT`` in every
forward pass (sampling, greedy inference and the training loss alike), so PPO never samples an
action the store would reject and the loss never pushes probability towards one. Use it in a
config with::

    config.rl_module(rl_module_spec=RLModuleSpec(module_class=MaskedPPOTorchRLModule))

Importing this module imports Ray RLlib and PyTorch (``pip install -e '.[rllib]'``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gymnasium import spaces

from .env import require_rllib

require_rllib()

from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402

# Far below any logit a network produces: softmax gives these actions probability 0 exactly,
# while their log-probabilities stay finite, so PPO's KL and entropy terms never meet inf - inf.
MASKED_LOGIT = -1e9


class MaskedPPOTorchRLModule(DefaultPPOTorchRLModule):
    """PPO's default actor-critic (``DefaultPPOTorchRLModule``) built for the ``"observations"``
    part of a ``Dict`` observation space, with the logits of masked actions set to
    ``MASKED_LOGIT``. The value function reads ``"observations"`` as well; the mask only
    constrains the policy."""

    def __init__(self, *, observation_space: spaces.Space | None = None, **kwargs: Any) -> None:
        if not (isinstance(observation_space, spaces.Dict)
                and set(observation_space.spaces) == {"action_mask", "observations"}):
            raise ValueError(
                "MaskedPPOTorchRLModule needs a Dict observation space of 'action_mask' and 'observations' "
                f"(agents.rllib.env.MaskedObservation), got {observation_space}"
            )
        super().__init__(observation_space=observation_space["observations"], **kwargs)
        # The networks are built for the observations alone; the module keeps the env's space,
        # which RLlib compares with the env's and saves in checkpoints to rebuild the module.
        self.observation_space = observation_space

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        mask, batch = _split(batch)
        return _mask_logits(super()._forward(batch, **kwargs), mask)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        mask, batch = _split(batch)
        return _mask_logits(super()._forward_train(batch, **kwargs), mask)

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> Any:
        if embeddings is None:  # given embeddings were computed from the observations already
            _, batch = _split(batch)
        return super().compute_values(batch, embeddings)


def _split(batch: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The action mask and a shallow copy of ``batch`` whose observations are the network's part
    (the caller's batch is left as it is: RLlib reads it again after the forward pass)."""
    observation = batch[Columns.OBS]
    if not isinstance(observation, Mapping) or not {"action_mask", "observations"} <= set(observation):
        raise ValueError(
            "MaskedPPOTorchRLModule: the batch's observations are not {'action_mask', 'observations'}; "
            "build the env with agents.rllib.env.make_rllib_env"
        )
    return observation["action_mask"], {**batch, Columns.OBS: observation["observations"]}


def _mask_logits(output: dict[str, Any], mask: Any) -> dict[str, Any]:
    logits = output[Columns.ACTION_DIST_INPUTS]
    output[Columns.ACTION_DIST_INPUTS] = logits.masked_fill(mask < 0.5, MASKED_LOGIT)
    return output
