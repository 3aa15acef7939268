"""``wpb train``'s optimizer default: PyTorch's fused Adam wherever the policy's optimizer is SB3's Adam.

SB3 builds ``torch.optim.Adam`` with its default implementation, which on a CPU is a Python loop
of about ten tensor operations per parameter tensor and step. The fused implementation runs one
kernel per tensor: the same algorithm with the same settings (SB3's ``eps`` of 1e-5 for
actor-critic policies included), rounded differently, so trained weights are close to, not bit
for bit, those of the loop. With MaskablePPO's small networks the optimizer step is a large
share of each update, so the whole training runs faster, the more so the more samples per
rollout (``docs/training.md`` gives the figures).

A model given another optimizer class (from Python), or ``optimizer_kwargs`` that choose
``fused``, ``foreach`` or ``differentiable`` themselves, is left as it is; so is A2C, whose
default optimizer is RMSprop.
"""

from __future__ import annotations

from typing import Any

# The ``eps`` SB3's actor-critic policies give their Adam when no ``optimizer_kwargs`` are given
# ("small values to avoid NaN"); its DQN policy keeps torch's default.
ACTOR_CRITIC_EPS = 1e-5
# Adam's flags that the fused kernel takes as bool only.
FUSED_FLAGS = ("amsgrad", "maximize", "capturable", "decoupled_weight_decay")


def with_fused_adam(algo_class: type, policy: Any, hyperparams: dict[str, Any]) -> dict[str, Any]:
    """``hyperparams`` of ``algo_class`` with ``policy`` (a name such as ``"MlpPolicy"`` or a
    class), with ``policy_kwargs.optimizer_kwargs`` asking for fused Adam where SB3 would build
    its default Adam and the recipe chose no implementation: SB3's own optimizer settings plus
    ``fused: true``. Anything else is returned unchanged; the input is not modified."""
    import torch
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
    from stable_baselines3 import A2C
    from stable_baselines3.common.policies import ActorCriticPolicy
    from stable_baselines3.dqn.policies import DQNPolicy

    policy_kwargs = hyperparams.get("policy_kwargs")
    policy_kwargs = {} if policy_kwargs is None else policy_kwargs
    if not isinstance(policy_kwargs, dict):
        return hyperparams  # SB3 refuses it when the model is made
    explicit = "optimizer_class" in policy_kwargs
    if policy_kwargs.get("optimizer_class", torch.optim.Adam) is not torch.optim.Adam:
        return hyperparams
    if issubclass(algo_class, A2C) and hyperparams.get("use_rms_prop", True) is not False and not explicit:
        return hyperparams  # A2C replaces the optimizer with RMSprop
    policy_class = algo_class.policy_aliases.get(policy) if isinstance(policy, str) else policy
    if not isinstance(policy_class, type):
        return hyperparams  # an unknown policy name: SB3 refuses it when the model is made
    optimizer_kwargs = policy_kwargs.get("optimizer_kwargs")
    if optimizer_kwargs is None:
        if issubclass(policy_class, (ActorCriticPolicy, MaskableActorCriticPolicy)):
            optimizer_kwargs = {"eps": ACTOR_CRITIC_EPS}
        elif issubclass(policy_class, DQNPolicy):
            optimizer_kwargs = {}
        else:
            return hyperparams  # a policy whose defaults this does not know
    if not isinstance(optimizer_kwargs, dict) or {"fused", "foreach"} & set(optimizer_kwargs):
        return hyperparams
    if optimizer_kwargs.get("differentiable"):
        return hyperparams  # torch has no fused differentiable Adam
    if any(not isinstance(optimizer_kwargs[key], bool) for key in FUSED_FLAGS if key in optimizer_kwargs):
        return hyperparams  # the loop takes any truth value here, the fused kernel only a bool
    return {**hyperparams,
            "policy_kwargs": {**policy_kwargs, "optimizer_kwargs": {**optimizer_kwargs, "fused": True}}}


def optimizer_record(model: Any) -> dict[str, Any]:
    """What ``model``'s policy trains with: the optimizer's class and its settings (``config.json``
    keeps it, since a resumed or ``--init-from`` model brings its own)."""
    optimizer = model.policy.optimizer
    settings = {key: value for key, value in optimizer.param_groups[0].items() if key != "params"}
    return {"class": f"{type(optimizer).__module__}.{type(optimizer).__qualname__}", **settings}
