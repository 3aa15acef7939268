"""RLlib's PPO with action masking: the env in the layout RLlib masks with (``env``), the
masked RLModule (``module``), training (``training``) and a checkpoint as an agent (``agent``).
Ray is imported only by what needs it."""
