"""The base class of every agent: the spec's policy interface plus what tables and tools need.

An agent is a policy (``wpb_gym.core.policy``): ``select(step, store)`` yields ``MemoryAction``s,
applied as they are yielded. On top of that every agent has

* ``name`` / ``description`` (class attributes, shown by the registry and in tables),
* ``track``: ``"unprivileged"``, ``"privileged"`` (reads ``priority``) or ``"oracle"``
  (reads hidden labels; an upper bound),
* ``kind``: ``"scripted"``, ``"learner"``, ``"oracle"``, or ``"sb3"`` / ``"rllib"`` / ``"policy"``
  (a trained model read from a file, deciding from the env's observation: its track is the
  model's; ``"policy"`` is one exported to the data-only format),
* ``start_episode(context)`` / ``end_episode(outcome)`` hooks (no-ops here),
* ``params()``: the constructor parameters, for the registry and result tables,
* SB3's predictor protocol, ``predict(obs, state, episode_start, deterministic,
  action_masks)``, once ``attach(env)`` has bound the agent to the environment it acts in.

Rules every agent follows so that it behaves identically in the offline evaluator and in
``WritePolicyBench-v0``: at most one WRITE or MERGE per step, and it is the last action the
agent yields for that step (in the environment it ends the timestep); EXPIREs come before it.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np

from wpb_gym.core.policy import EpisodeContext, EpisodeOutcome
from wpb_gym.core.store import StoreView
from wpb_gym.core.types import MemoryAction, Step

AGENT_KINDS = ("scripted", "learner", "oracle", "sb3", "rllib", "policy", "external")
EXTERNAL_KINDS = ("external",)  # another program (exec:PATH): evaluated isolated, always
MODEL_KINDS = ("sb3", "rllib", "policy")  # a saved model: its track is the one it was trained on
# Models read from pickles (an SB3 zip, an RLlib checkpoint): loading one runs the code it names.
# An exported policy ("policy", wpb export) is data only.
PICKLED_KINDS = ("sb3", "rllib")


class Agent(ABC):
    name: ClassVar[str] = "agent"
    aliases: ClassVar[tuple[str, ...]] = ()  # the spec's names for the paper's agents
    description: ClassVar[str] = ""
    track: ClassVar[str] = "unprivileged"
    kind: ClassVar[str] = "scripted"
    needs_stream: ClassVar[bool] = False

    def start_episode(self, context: EpisodeContext) -> None:  # noqa: B027 - an optional hook: no-op by default
        """Called before the first step of every episode."""

    @abstractmethod
    def select(self, step: Step, store: StoreView) -> Iterable[MemoryAction]:
        """The actions for ``step``: EXPIREs first, then at most one WRITE or MERGE, last."""

    def end_episode(self, outcome: EpisodeOutcome) -> None:  # noqa: B027 - an optional hook: no-op by default
        """Called after the last step of every episode."""

    def params(self) -> dict[str, Any]:
        """The constructor parameters of this agent (for tables and the registry)."""
        return {}

    # ---------------------------------------------------------------- SB3 predictor protocol
    def attach(self, env: Any) -> Agent:
        """Bind the agent to ``env`` (a WritePolicyBench env, wrapped or not, or a DummyVecEnv of
        them) so that ``predict`` can read the current step and memory of each sub-env."""
        from .env_adapter import EnvDrivers

        self._drivers = EnvDrivers(self, env)
        return self

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, None]:
        """SB3's predictor protocol: the env actions this agent takes now (one per sub-env).

        The observation is not read: the agent decides from the step and the memory of the
        env it was attached to (``attach``), exactly as in the offline evaluator.
        """
        drivers = getattr(self, "_drivers", None)
        if drivers is None:
            raise RuntimeError(
                f"agent {self.name!r} is not attached to an environment: call agent.attach(env) "
                "(a WritePolicyBench env or a DummyVecEnv of them) before predict()"
            )
        return drivers.predict(observation, episode_start), None

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


# ---------------------------------------------------------------------------- the baselines' common parts
def plan_oldest_evictions(store: StoreView, need: int, keep: int | None = None) -> list[int] | None:
    """Timesteps of the oldest items whose removal frees at least ``need`` bytes.

    Items are taken oldest first, passing over the item at ``keep``. Returns ``[]`` when
    nothing needs freeing and ``None`` when even removing every candidate frees too little
    (then nothing should be expired).
    """
    if need <= 0:
        return []
    plan: list[int] = []
    freed = 0
    for item in store.iter_items():  # oldest first; the plan is complete before any action is yielded
        if item.t == keep:
            continue
        plan.append(item.t)
        freed += item.byte_cost
        if freed >= need:
            return plan
    return None


def step_priority(step: Step) -> float:
    """The privileged ``priority`` hint of ``step``; a clear error when the step lacks it."""
    metadata = step.metadata if isinstance(step.metadata, dict) else {}
    if "priority" not in metadata:
        raise ValueError(
            f"step t={step.t} has no 'priority' metadata: privileged agents need the privileged "
            "track of an episode that carries the priority hint"
        )
    return float(metadata["priority"])


def episode_seed(seed: int, episode_id: Any, length: int) -> np.random.SeedSequence:
    """The seed sequence of an episode: from ``seed``, ``episode_id`` (any JSON-like value) and ``length``.

    ``episode_id`` enters through the sha256 of its JSON text (with its type name, so ``0`` and
    ``"0"`` differ), which is the same in every process.
    """
    text = json.dumps([type(episode_id).__name__, episode_id], sort_keys=True, default=repr)
    key = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    return np.random.SeedSequence([int(seed), key, int(length)])


def require_probability(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


class BaselineAgent(Agent):
    """Common parts of the baselines: spec aliases and ``params()`` from ``_param_names``."""

    aliases: ClassVar[tuple[str, ...]] = ()
    _param_names: ClassVar[tuple[str, ...]] = ()

    def params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._param_names}
