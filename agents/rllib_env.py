"""The env class of RLlib checkpoints written before it moved to ``agents.rllib.env``: their
algorithm config names it by this path."""

from .rllib.env import RLlibWritePolicyBenchEnv  # noqa: F401
