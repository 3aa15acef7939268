"""The package versions a training run records in its ``config.json``."""

from __future__ import annotations

from wpb_gym.core.version import __version__


def package_versions() -> dict[str, str]:
    import gymnasium
    import sb3_contrib
    import stable_baselines3
    import torch

    return {
        "writepolicybench_gym": __version__,
        "gymnasium": gymnasium.__version__,
        "stable_baselines3": stable_baselines3.__version__,
        "sb3_contrib": sb3_contrib.__version__,
        "torch": torch.__version__,
    }
