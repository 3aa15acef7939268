"""``WritePolicyBench-v0`` in the observation layout RLlib's action masking expects.

RLlib's masking RLModules (``agents.rllib.module``) read a ``Dict`` observation of two keys:
``"observations"``, what the network sees (the env's flat ``box`` observation), and
``"action_mask"``, 1.0 for each action the store would accept now (``env.action_masks()``) and
0.0 for the others. ``MaskedObservation`` wraps an env into that layout.

RLlib builds its envs from ``env_config`` (any ``WritePolicyBenchEnv`` argument: ``regime``,
``budget_bytes``, ``length``...). ``RLlibWritePolicyBenchEnv`` is such an env class; a config
that names the class (as ``agents.rllib.training`` does) restores from a checkpoint in any
process that can import this module::

    config.environment(RLlibWritePolicyBenchEnv, env_config={"regime": "default", "budget_bytes": 10240})

``register_rllib_env`` registers the creator ``make_rllib_env`` under ``RLLIB_ENV_NAME`` for
configs that name the env by a string (Ray Tune's ``param_space={"env": ...}``); the registry
lives in one Ray session, so call it again before such a config is built or restored anew.

The query tier (``QueryTierEnv``, ``WritePolicyBench-Queries*-v0``) has the same three:
``RLlibQueryTierEnv``, whose ``env_config`` takes every ``QueryTierEnv`` argument (``regime``
``queries_easy``/``medium``/``hard``, ``track``, ``budget_fraction``, ``endless``...),
``make_rllib_query_env`` and ``register_rllib_env(RLLIB_QUERY_ENV_NAME, query_tier=True)``.
Its rewards are dense already (each checkpoint pays its share of the accuracy).

Nothing here imports Ray but ``require_rllib`` and ``register_rllib_env``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.query_env import QueryTierEnv

RLLIB_ENV_NAME = "WritePolicyBench-Masked-v0"
"""The name ``register_rllib_env`` gives the env creator in RLlib's (Ray Tune's) registry."""
RLLIB_QUERY_ENV_NAME = "WritePolicyBench-Queries-Masked-v0"
"""The name ``register_rllib_env(query_tier=True)`` gives the query tier's env creator."""

INSTALL_HINT = "pip install -e '.[rllib]'"


def require_rllib() -> None:
    """Import RLlib and PyTorch, or raise an ``ImportError`` naming what is missing and the extra
    that installs it (RLlib's own error names one module and not the extra)."""
    try:
        import ray.rllib  # noqa: F401
        import torch  # noqa: F401
    except ImportError as error:
        missing = getattr(error, "name", None) or str(error)
        raise ImportError(f"RLlib training and rllib: agents need Ray RLlib and PyTorch ({missing} is missing): "
                          f"{INSTALL_HINT}") from None


@contextmanager
def quiet_rllib_deprecations() -> Iterator[None]:
    """Within it, RLlib's deprecation warnings are not logged: building any RLModule warns that
    RLlib's own base class makes a deprecated config object, which no user can act on."""
    logger = logging.getLogger("ray._common.deprecation")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def masked_space(observation_space: spaces.Space, n_actions: int) -> spaces.Dict:
    """The ``Dict`` space of ``MaskedObservation`` for an env's ``box`` space and ``n_actions``."""
    return spaces.Dict(
        {
            "action_mask": spaces.Box(0.0, 1.0, shape=(n_actions,), dtype=np.float32),
            "observations": observation_space,
        }
    )


def masked_observation(observation: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """One observation of the masked layout from the env's box observation and ``action_masks()``."""
    return {"action_mask": np.asarray(mask, dtype=np.float32), "observations": observation}


class MaskedObservation(gym.ObservationWrapper):
    """A ``WritePolicyBenchEnv`` (``observation_mode="box"``) whose observations are
    ``{"action_mask": float32 0/1 per action, "observations": the box observation}``.

    The mask is the one for the observation it comes with: the actions the store accepts in
    the state the observation shows. The base env is ``env.unwrapped``.
    """

    def __init__(self, env: gym.Env) -> None:
        base = env.unwrapped
        if isinstance(base, QueryTierEnv):  # its observation is a flat box already
            super().__init__(env)
            self.observation_space = masked_space(base.observation_space, int(base.action_space.n))
            return
        if not isinstance(base, WritePolicyBenchEnv):
            raise TypeError(f"MaskedObservation wraps a WritePolicyBenchEnv or a QueryTierEnv, got "
                            f"{type(base).__name__}")
        if base.observation_mode != "box":
            raise ValueError(
                f"observation_mode={base.observation_mode!r}: RLlib's masking reads the flat 'box' observation "
                "(the adapter adds the action mask itself)"
            )
        super().__init__(env)
        self.observation_space = masked_space(base.observation_space, base.n_actions)

    def observation(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        return masked_observation(observation, self.env.unwrapped.action_masks())


class RLlibWritePolicyBenchEnv(MaskedObservation):
    """``WritePolicyBenchEnv(**env_config)`` in the masked layout, built as RLlib builds envs.

    ``env_config`` takes every argument of ``WritePolicyBenchEnv`` (``regime``,
    ``budget_bytes``, ``length``, ``episode_seed``, ``reward``...). RLlib passes an
    ``EnvContext``, a dict that also knows the env runner's index: every env runner plays the
    same episode source, and RLlib seeds each env's resets differently.
    """

    def __init__(self, env_config: Mapping[str, Any] | None = None) -> None:
        super().__init__(WritePolicyBenchEnv(**dict(env_config or {})))


class RLlibQueryTierEnv(MaskedObservation):
    """``QueryTierEnv(**env_config)`` in the masked layout, built as RLlib builds envs.

    ``env_config`` takes every argument of ``QueryTierEnv`` (``regime``, ``track``,
    ``budget_bytes`` or ``budget_fraction``, ``endless``, query-tier generator options...). An
    endless stream without a time limit may run long: RLlib samples by steps, not episodes, so
    it trains all the same, but its episode metrics wait for an episode to end.
    """

    def __init__(self, env_config: Mapping[str, Any] | None = None) -> None:
        super().__init__(QueryTierEnv(**dict(env_config or {})))


def make_rllib_env(env_config: Mapping[str, Any] | None = None) -> RLlibWritePolicyBenchEnv:
    """RLlib's env creator: ``RLlibWritePolicyBenchEnv(env_config)``."""
    return RLlibWritePolicyBenchEnv(env_config)


def make_rllib_query_env(env_config: Mapping[str, Any] | None = None) -> RLlibQueryTierEnv:
    """RLlib's env creator for the query tier: ``RLlibQueryTierEnv(env_config)``."""
    return RLlibQueryTierEnv(env_config)


def register_rllib_env(name: str | None = None, *, query_tier: bool = False) -> str:
    """Register ``make_rllib_env`` (``make_rllib_query_env`` with ``query_tier``) in RLlib's env
    registry under ``name`` (``RLLIB_ENV_NAME`` or ``RLLIB_QUERY_ENV_NAME`` by default) and return
    the name (before or after ``ray.init``: Ray hands the registry to its workers when it starts)."""
    require_rllib()
    from ray.tune.registry import register_env

    if name is None:
        name = RLLIB_QUERY_ENV_NAME if query_tier else RLLIB_ENV_NAME
    register_env(name, make_rllib_query_env if query_tier else make_rllib_env)
    return name
