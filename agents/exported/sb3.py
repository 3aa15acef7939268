"""SB3 policies in the data-only format: described from a loaded model, rebuilt from the description.

The policies ``wpb train`` trains, and those of the same classes trained otherwise:
MaskablePPO's, PPO's and A2C's actor-critic, DQN's Q-network and RecurrentPPO's LSTM
actor-critic, over a flat (``MlpPolicy``) or a dict observation (``MultiInputPolicy``), with a
``Discrete`` action space. A policy is rebuilt with the library's own class, named in
``policy.json`` and looked up in ``POLICIES`` (never imported by a name the file gives), from
its architecture: layer widths, an activation and a features extractor from fixed tables, the
LSTM's sizes. What only training reads (the optimizer, the learning rate) is not kept. A
policy of another class, or with parts these tables do not name, is refused at export.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from .folder import MAX_LAYERS, Fields, PolicyFileError, WeightsHeader, check_size, mlp_numbers

# The policy classes the format rebuilds: name -> (module, family). A family says which
# constructor arguments the class takes.
POLICIES = {
    "MaskableActorCriticPolicy": ("sb3_contrib.common.maskable.policies", "actor_critic"),
    "MaskableMultiInputActorCriticPolicy": ("sb3_contrib.common.maskable.policies", "actor_critic"),
    "ActorCriticPolicy": ("stable_baselines3.common.policies", "actor_critic"),
    "MultiInputActorCriticPolicy": ("stable_baselines3.common.policies", "actor_critic"),
    "RecurrentActorCriticPolicy": ("sb3_contrib.common.recurrent.policies", "recurrent"),
    "RecurrentMultiInputActorCriticPolicy": ("sb3_contrib.common.recurrent.policies", "recurrent"),
    "DQNPolicy": ("stable_baselines3.dqn.policies", "q"),
    "MultiInputPolicy": ("stable_baselines3.dqn.policies", "q"),  # DQN's, for dict observations
}
ALGORITHMS = ("MaskablePPO", "PPO", "A2C", "DQN", "RecurrentPPO")
ACTIVATIONS = ("Tanh", "ReLU", "LeakyReLU", "ELU", "SELU", "GELU", "SiLU", "Mish", "Sigmoid", "Softplus", "Identity")
EXTRACTORS = ("FlattenExtractor", "CombinedExtractor")


def _policy_class(name: str) -> type:
    module, _ = POLICIES[name]
    return getattr(importlib.import_module(module), name)


def _activation(name: str) -> type:
    from torch import nn

    return getattr(nn, name)


def _extractor(name: str) -> type:
    from stable_baselines3.common import torch_layers

    return getattr(torch_layers, name)


# ------------------------------------------------------------------------------ described
def describe(model: Any) -> dict[str, Any]:
    """The ``sb3`` part of ``policy.json`` for the loaded SB3 ``model``; a ``ValueError`` saying
    why for a policy the format cannot rebuild."""
    from gymnasium import spaces

    algorithm = type(model).__name__
    policy = model.policy
    name = type(policy).__name__
    if algorithm not in ALGORITHMS:
        raise ValueError(f"a {algorithm} model: the data-only format holds policies of {', '.join(ALGORITHMS)}")
    if name not in POLICIES or type(policy) is not _policy_class(name):
        raise ValueError(f"its policy is a {type(policy).__module__}.{name}; the data-only format rebuilds "
                         f"{', '.join(POLICIES)} (the library's own classes, not subclasses)")
    if not isinstance(policy.action_space, spaces.Discrete):
        raise ValueError(f"its action space is {policy.action_space}; the data-only format holds Discrete ones")
    family = POLICIES[name][1]
    given = policy._get_constructor_parameters()  # what SB3 itself saves to rebuild the policy
    activation = given["activation_fn"]
    if activation.__name__ not in ACTIVATIONS or activation is not _activation(activation.__name__):
        raise ValueError(f"its activation is {activation!r}; the data-only format knows torch.nn's "
                         f"{', '.join(ACTIVATIONS)}")
    extractor = given["features_extractor_class"]
    if extractor.__name__ not in EXTRACTORS or extractor is not _extractor(extractor.__name__):
        raise ValueError(f"its features extractor is {extractor!r}; the data-only format knows SB3's "
                         f"{', '.join(EXTRACTORS)}")
    extractor_kwargs = dict(given.get("features_extractor_kwargs") or {})
    if not all(isinstance(v, (bool, int, float, str)) or v is None for v in extractor_kwargs.values()):
        raise ValueError(f"its features extractor's arguments {extractor_kwargs!r} are not numbers or text")
    described: dict[str, Any] = {
        "algorithm": algorithm,
        "policy_class": name,
        "net_arch": given["net_arch"],
        "activation_fn": activation.__name__,
        "normalize_images": bool(given["normalize_images"]),
        "features_extractor": extractor.__name__,
        "features_extractor_kwargs": extractor_kwargs,
    }
    if family != "q":
        if given.get("use_sde"):
            raise ValueError("it uses state-dependent exploration, which a Discrete action space has no use for")
        described.update(ortho_init=bool(given["ortho_init"]),
                         share_features_extractor=bool(given.get("share_features_extractor", True)))
    if family == "recurrent":
        lstm = policy.lstm_actor
        kwargs = dict(policy.lstm_kwargs)
        if not all(isinstance(v, (bool, int, float)) for v in kwargs.values()):
            raise ValueError(f"its LSTM's arguments {kwargs!r} are not numbers")
        described["lstm"] = {"hidden_size": int(lstm.hidden_size), "layers": int(lstm.num_layers),
                             "shared": bool(policy.shared_lstm), "critic_lstm": bool(policy.enable_critic_lstm),
                             "kwargs": kwargs}
    return described


# ------------------------------------------------------------------------------ rebuilt
@dataclass(frozen=True)
class Architecture:
    """The ``sb3`` part of ``policy.json``, every field checked."""

    algorithm: str
    policy_class: str
    family: str
    net_arch: list[int] | dict[str, list[int]]
    activation: str
    normalize_images: bool
    extractor: str
    extractor_kwargs: dict[str, Any]
    ortho_init: bool = True
    share_extractor: bool = True
    lstm: dict[str, Any] | None = None

    @classmethod
    def read(cls, manifest: Fields) -> Architecture:
        part = manifest.mapping("sb3")
        name = part.text("policy_class", tuple(POLICIES))
        family = POLICIES[name][1]
        raw = part.get("net_arch", "layer widths")
        if isinstance(raw, dict) and family != "q":
            arch = part.mapping("net_arch")
            unknown = sorted(set(raw) - {"pi", "vf"})
            if unknown:
                raise PolicyFileError(f"{arch.where}: unknown key(s) {unknown}; expected pi and vf")
            net_arch: Any = {key: arch.widths(key) for key in ("pi", "vf")}
        else:
            net_arch = part.widths("net_arch")
        fields: dict[str, Any] = {
            "algorithm": part.text("algorithm", ALGORITHMS),
            "policy_class": name,
            "family": family,
            "net_arch": net_arch,
            "activation": part.text("activation_fn", ACTIVATIONS),
            "normalize_images": part.boolean("normalize_images"),
            "extractor": part.text("features_extractor", EXTRACTORS),
            "extractor_kwargs": part.plain("features_extractor_kwargs"),
        }
        if family != "q":
            fields.update(ortho_init=part.boolean("ortho_init"), share_extractor=part.boolean("share_features_extractor"))
        if family == "recurrent":
            lstm = part.mapping("lstm")
            kwargs = lstm.plain("kwargs")
            if not all(isinstance(v, (bool, int, float)) for v in kwargs.values()):
                raise PolicyFileError(f"{lstm.where}: kwargs: expected numbers and true/false, got {kwargs!r}")
            fields["lstm"] = {"hidden_size": lstm.integer("hidden_size", 1),
                              "layers": lstm.integer("layers", 1, MAX_LAYERS),
                              "shared": lstm.boolean("shared"), "critic_lstm": lstm.boolean("critic_lstm"),
                              "kwargs": kwargs}
        return cls(**fields)

    def numbers(self, features: int, actions: int) -> int:
        """How many numbers the policy holds for ``features`` inputs and ``actions`` actions (its
        LSTMs' and layers' weights and biases): checked against the weights file before anything
        is built, so that no description makes it allocate more than the file holds."""

        if self.family == "q":  # the Q-network and its target
            body, last = mlp_numbers(features, self.net_arch)  # type: ignore[arg-type]
            return 2 * (body + (last + 1) * actions)
        arch = self.net_arch
        pi, vf = (arch["pi"], arch["vf"]) if isinstance(arch, dict) else (arch, arch)
        total, start = 0, features
        if self.lstm is not None:
            h, layers = self.lstm["hidden_size"], self.lstm["layers"]
            one = 4 * h * (features + h + 2) + (layers - 1) * 4 * h * (2 * h + 2)
            total += one + (one if self.lstm["critic_lstm"] else 0 if self.lstm["shared"] else (features + 1) * h)
            start = h
        actor, last_pi = mlp_numbers(start, pi)
        critic, last_vf = mlp_numbers(start, vf)
        return total + actor + critic + (last_pi + 1) * actions + last_vf + 1

    def build(self, observation_space: Any, action_space: Any, where: str) -> Any:
        kwargs: dict[str, Any] = {
            "net_arch": self.net_arch,
            "activation_fn": _activation(self.activation),
            "normalize_images": self.normalize_images,
            "features_extractor_class": _extractor(self.extractor),
            "features_extractor_kwargs": self.extractor_kwargs,
        }
        if self.family != "q":
            kwargs.update(ortho_init=self.ortho_init, share_features_extractor=self.share_extractor)
        if self.lstm is not None:
            kwargs.update(lstm_hidden_size=self.lstm["hidden_size"], n_lstm_layers=self.lstm["layers"],
                          shared_lstm=self.lstm["shared"], enable_critic_lstm=self.lstm["critic_lstm"],
                          lstm_kwargs=self.lstm["kwargs"])
        try:
            policy = _policy_class(self.policy_class)(observation_space, action_space, _no_learning, **kwargs)
        # SB3 checks its arguments with assert; torch refuses impossible sizes with RuntimeError.
        except (AssertionError, TypeError, ValueError, KeyError, RuntimeError) as error:
            raise PolicyFileError(f"{where}: sb3: {self.policy_class} cannot be built from it: "
                                  f"{type(error).__name__}: {error}") from None
        policy.set_training_mode(False)
        return policy


def _no_learning(progress: float) -> float:
    return 0.0  # the learning rate of an optimizer that never steps


class SB3Policy:
    """An exported SB3 policy, deciding as ``agents.sb3.agent.SB3Agent`` does with the model."""

    def __init__(self, manifest: Fields, header: WeightsHeader, observation_space: Any, action_space: Any) -> None:
        import inspect

        from gymnasium.spaces import flatdim

        from .folder import read_weights, tensor_table

        architecture = Architecture.read(manifest)
        self.algorithm = architecture.algorithm
        numbers = architecture.numbers(flatdim(observation_space), int(action_space.n))
        check_size(numbers, header, manifest.where)
        policy = architecture.build(observation_space, action_space, manifest.where)
        state = policy.state_dict()
        policy.load_state_dict(read_weights(header, tensor_table(state)), strict=True)
        self.policy = policy
        signature = inspect.signature(policy.predict).parameters
        self._maskable = "action_masks" in signature
        self._recurrent = architecture.family == "recurrent"
        self.reset()

    def reset(self) -> None:
        self._state: Any = None
        self._episode_start = np.ones((1,), dtype=bool)

    def act(self, observation: Any, mask: np.ndarray, deterministic: bool) -> int:
        if self._maskable:
            action, _ = self.policy.predict(observation, deterministic=deterministic, action_masks=mask)
        elif self._recurrent:
            action, self._state = self.policy.predict(
                observation, state=self._state, episode_start=self._episode_start, deterministic=deterministic
            )
            self._episode_start = np.zeros((1,), dtype=bool)
        else:
            action, _ = self.policy.predict(observation, deterministic=deterministic)
        return int(np.asarray(action).reshape(-1)[0])
