"""RLlib policies in the data-only format: masked PPO's RLModule, described and rebuilt.

The policy ``agents.rllib.training`` trains is a ``MaskedPPOTorchRLModule`` (``agents.rllib.module``)
over the env in RLlib's masked layout: an actor and a critic encoder of fully connected
layers and their heads. ``policy.json`` keeps the module's ``model_config`` (layer widths,
activations by RLlib's names, whether the critic shares the actor's layers); the initializers
it may name are left out, as the weights replace what they draw. A module of another class, or
a ``model_config`` asking for more (an LSTM, convolutions), is refused at export.

Rebuilding needs Ray RLlib (the ``rllib`` extra), but starts no Ray.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .folder import Fields, PolicyFileError, WeightsHeader, check_size, mlp_numbers
from .sb3 import ACTIVATIONS as SB3_ACTIVATIONS

MODULE = "MaskedPPOTorchRLModule"
# The model_config keys the format keeps, by the kind of value each takes.
WIDTHS = ("fcnet_hiddens", "head_fcnet_hiddens")
NAMES = ("fcnet_activation", "head_fcnet_activation")
SWITCHES = ("vf_share_layers", "fcnet_use_layernorm", "head_fcnet_use_layernorm", "free_log_std")
NUMBERS = ("log_std_clip_param",)
# The activations NAMES may give: RLlib's own names, and torch.nn's activation classes as the SB3
# format names them. RLlib looks any other name up with getattr(torch.nn, name) and calls it for
# every layer: "Transformer" built a 44-million-parameter model per layer, outside the size check.
ACTIVATIONS = ("linear", "relu", "tanh", "elu", "swish", "silu", *SB3_ACTIVATIONS)
# Keys that only shape the initial weights, which the exported weights replace.
_INITIALIZERS = ("_kernel_initializer", "_bias_initializer", "_kernel_initializer_kwargs", "_bias_initializer_kwargs")


def describe(module: Any) -> dict[str, Any]:
    """The ``rllib`` part of ``policy.json`` for the loaded RLlib ``module``; a ``ValueError``
    saying why for a module the format cannot rebuild."""
    import dataclasses

    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from ..rllib.module import MaskedPPOTorchRLModule

    if type(module) is not MaskedPPOTorchRLModule:
        raise ValueError(f"its module is a {type(module).__module__}.{type(module).__name__}; the data-only "
                         f"format rebuilds agents.rllib.module.{MODULE}")
    config = dict(module.model_config or {}) if not dataclasses.is_dataclass(module.model_config) else \
        dataclasses.asdict(module.model_config)
    defaults = {f.name: f.default for f in dataclasses.fields(DefaultModelConfig)}
    kept = {}
    for key, value in config.items():
        if key in NAMES and value not in ACTIVATIONS:
            raise ValueError(f"its model_config sets {key}={value!r}; the data-only format knows the activations "
                             f"{', '.join(ACTIVATIONS)}")
        if key in (*WIDTHS, *NAMES, *SWITCHES, *NUMBERS):
            kept[key] = list(value) if key in WIDTHS else value
        elif key.endswith(_INITIALIZERS):
            continue
        elif key not in defaults or value != defaults[key]:
            raise ValueError(f"its model_config sets {key}={value!r}; the data-only format rebuilds feed-forward "
                             f"masked PPO modules (model_config keys {', '.join((*WIDTHS, *NAMES, *SWITCHES, *NUMBERS))})")
    return {"module": MODULE, "model_config": kept}


class RLlibPolicy:
    """An exported masked PPO module, greedy on its masked logits as ``agents.rllib.agent.RLlibAgent``."""

    def __init__(self, manifest: Fields, header: WeightsHeader, observation_space: Any, action_space: Any) -> None:
        import torch
        from gymnasium.spaces import flatdim
        from ray.rllib.core.columns import Columns

        from ..rllib.env import quiet_rllib_deprecations, require_rllib
        from .folder import read_weights, tensor_table

        require_rllib()
        from ..rllib.module import MaskedPPOTorchRLModule

        part = manifest.mapping("rllib")
        part.text("module", (MODULE,))
        config = _model_config(part.mapping("model_config"))
        features = flatdim(observation_space["observations"])
        check_size(_numbers(config, features, int(action_space.n)), header, manifest.where)
        try:
            with quiet_rllib_deprecations():
                module = MaskedPPOTorchRLModule(observation_space=observation_space, action_space=action_space,
                                                inference_only=False, model_config=config)
        except (TypeError, ValueError, KeyError, AttributeError, RuntimeError) as error:
            raise PolicyFileError(f"{part.where}: {MODULE} cannot be built from it: "
                                  f"{type(error).__name__}: {error}") from None
        module.load_state_dict(read_weights(header, tensor_table(module.state_dict())), strict=True)
        module.eval()
        self.module, self._torch = module, torch
        self._obs_key, self._logits_key = Columns.OBS, Columns.ACTION_DIST_INPUTS

    def reset(self) -> None:
        pass  # feed-forward: nothing carries from one decision to the next

    def act(self, observation: Any, mask: np.ndarray, deterministic: bool) -> int:
        from ..rllib.env import masked_observation

        torch = self._torch
        batch = {k: torch.from_numpy(v)[None] for k, v in masked_observation(observation, mask).items()}
        with torch.no_grad():
            logits = self.module.forward_inference({self._obs_key: batch})[self._logits_key]
        return int(torch.argmax(logits[0]))


def _model_config(fields: Fields) -> dict[str, Any]:
    unknown = sorted(set(fields.values) - {*WIDTHS, *NAMES, *SWITCHES, *NUMBERS})
    if unknown:
        raise PolicyFileError(f"{fields.where}: unknown key(s) {unknown}")
    config: dict[str, Any] = {}
    for key in fields.values:
        if key in WIDTHS:
            config[key] = fields.widths(key)
        elif key in NAMES:
            config[key] = fields.text(key, ACTIVATIONS)
        elif key in SWITCHES:
            config[key] = fields.boolean(key)
        else:
            value = fields.values[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise PolicyFileError(f"{fields.where}: {key}: expected a number, got {type(value).__name__} {value!r}")
            config[key] = value
    return config


def _numbers(config: dict[str, Any], features: int, actions: int) -> int:
    """How many numbers the module holds (see ``agents.exported.sb3.Architecture.numbers``)."""
    body = config.get("fcnet_hiddens", [256, 256])
    heads = config.get("head_fcnet_hiddens", [])
    encoder, last = mlp_numbers(features, body, config.get("fcnet_use_layernorm", False))
    encoders = encoder * (1 if config.get("vf_share_layers", True) else 2)
    head, last_head = mlp_numbers(last, heads, config.get("head_fcnet_use_layernorm", False))
    return encoders + 2 * head + (last_head + 1) * (actions + 1) + 2
