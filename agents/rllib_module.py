"""The RLModule class of RLlib checkpoints written before it moved to ``agents.rllib.module``:
their module spec names it by this path."""

from .rllib.module import MaskedPPOTorchRLModule  # noqa: F401
