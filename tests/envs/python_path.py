"""Single envs stepped by their Python parts (the store, the encoder, the reward function): the
statement the compiled core is played against. A subclassed part is never compiled
(``WritePolicyBenchEnv.plays_compiled``), so an encoder of this subclass keeps an env there."""

from __future__ import annotations

from typing import Any

from wpb_gym.core.tracks import PRIVILEGED
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.observation.encoder import ObservationEncoder
from wpb_gym.envs.observation.features import ObservationLayout, check_encoder_arguments


class PythonEncoder(ObservationEncoder):
    """``ObservationEncoder`` itself, under a name the compiled core does not play."""


def python_env(**kwargs: Any) -> WritePolicyBenchEnv:
    """``WritePolicyBenchEnv(**kwargs)`` on its Python parts."""
    K, order, mode, cap = check_encoder_arguments(
        kwargs.pop("slots", 2), kwargs.pop("slot_order", "relevance"), kwargs.pop("observation_mode", "box"),
        kwargs.pop("max_expires_per_step", None))
    layout = ObservationLayout(K, kwargs.get("track") == PRIVILEGED)
    encoder = PythonEncoder(layout, slot_order=order, max_expires_per_step=cap, observation_mode=mode)
    env = WritePolicyBenchEnv(observation_encoder=encoder, **kwargs)
    assert not env.plays_compiled
    return env
