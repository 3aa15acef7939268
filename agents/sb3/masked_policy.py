"""MaskablePPO's policy, masked without building distribution objects: the same numbers, sooner.

For each batch, SB3-contrib's ``MaskableActorCriticPolicy`` builds a ``MaskableCategorical``
and masks it: three ``torch.distributions.Categorical`` constructions, each normalising the
logits, of which the sampled actions, log-probabilities and entropies use two. Per rollout step
of 4 envs that bookkeeping costs more than the policy's network does. ``direct_masking(model)``
gives the model's policy a ``forward`` and an ``evaluate_actions`` that run the tensor
operations those objects run, in the same order: the normalised logits, the masked logits
normalised again, ``torch.multinomial`` on their softmax with the same random stream, the
log-probabilities gathered from them and the masked entropy. Rollouts, losses, gradients and
trained weights are bit for bit those of SB3-contrib's own code (``tests/agents/
test_masked_policy.py`` trains both from one seed and compares every parameter).

Only what training calls changes, and only on that one model, for as long as it lives:
unmasked calls, ``predict`` (evaluation), other action spaces than ``Discrete`` and subclasses
of SB3-contrib's policies keep their code, and a saved model is a plain ``MaskablePPO`` (the
methods are not part of what it saves).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch as th

# SB3-contrib's value for a masked action's logit (``MaskableCategorical.apply_masking``).
MASKED_LOGIT = -1e8


@contextmanager
def as_wpb_train(model: Any) -> Iterator[None]:
    """Train ``model`` as ``wpb train`` does: its MaskablePPO policy masks directly from now on
    (``direct_masking``), and while this is open torch.distributions' argument validation is
    off (the logits come from the policy, the masks from the env; it is process-wide)."""
    from torch.distributions import Distribution

    direct_masking(model)
    before = Distribution._validate_args
    Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        Distribution.set_default_validate_args(before)


def direct_masking(model: Any) -> bool:
    """Give ``model``'s policy the direct masked ``forward`` and ``evaluate_actions`` if it is one
    of SB3-contrib's own masked policies over one ``Discrete`` action; whether it did. A
    subclass may compute its distribution otherwise: it keeps its methods."""
    from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution
    from sb3_contrib.common.maskable.policies import (
        MaskableActorCriticCnnPolicy,
        MaskableActorCriticPolicy,
        MaskableMultiInputActorCriticPolicy,
    )

    policy = getattr(model, "policy", None)
    stock = (MaskableActorCriticPolicy, MaskableActorCriticCnnPolicy, MaskableMultiInputActorCriticPolicy)
    if type(policy) not in stock or type(policy.action_dist) is not MaskableCategoricalDistribution:
        return False
    # Bound to the policy: a deep copy of it is bound to the copy (copy.deepcopy of a method).
    policy.forward = types.MethodType(forward, policy)
    policy.evaluate_actions = types.MethodType(evaluate_actions, policy)
    return True


def forward(self: Any, obs: th.Tensor, deterministic: bool = False, action_masks: Any = None):
    """``MaskableActorCriticPolicy.forward`` (actions, values, log-probabilities), masked directly."""
    if action_masks is None:
        return type(self).forward(self, obs, deterministic=deterministic, action_masks=None)
    latent_pi, latent_vf = _latents(self, obs)
    values = self.value_net(latent_vf)
    logits = _masked_logits(self, latent_pi, action_masks)[0]
    probs = th.softmax(logits, dim=-1)  # Categorical.probs
    if deterministic:
        actions = th.argmax(probs, dim=1)
    else:  # Categorical.sample(): one draw per row, then transposed back
        actions = th.multinomial(probs, 1, True).T.reshape(logits.shape[:-1])
    log_prob = _gathered(logits, actions)
    return actions.reshape((-1, *self.action_space.shape)), values, log_prob


def evaluate_actions(self: Any, obs: th.Tensor, actions: th.Tensor, action_masks: Any = None):
    """``MaskableActorCriticPolicy.evaluate_actions`` (values, log-probabilities, entropies), masked directly."""
    if action_masks is None:
        return type(self).evaluate_actions(self, obs, actions, action_masks=None)
    latent_pi, latent_vf = _latents(self, obs)
    logits, masks = _masked_logits(self, latent_pi, action_masks)
    log_prob = _gathered(logits, actions)
    values = self.value_net(latent_vf)
    # MaskableCategorical.entropy(): masked actions contribute nothing
    p_log_p = logits * th.softmax(logits, dim=-1)
    p_log_p = th.where(masks, p_log_p, th.tensor(0.0, device=logits.device))
    return values, log_prob, -p_log_p.sum(-1)


def _latents(policy: Any, obs: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
    features = policy.extract_features(obs)
    if policy.share_features_extractor:
        return policy.mlp_extractor(features)
    pi_features, vf_features = features
    return policy.mlp_extractor.forward_actor(pi_features), policy.mlp_extractor.forward_critic(vf_features)


def _masked_logits(policy: Any, latent_pi: th.Tensor, action_masks: Any) -> tuple[th.Tensor, th.Tensor]:
    """The normalised masked logits ``MaskableCategorical`` samples from, and the boolean masks."""
    logits = policy.action_net(latent_pi).view(-1, policy.action_dist.action_dim)
    logits = logits - logits.logsumexp(dim=-1, keepdim=True)  # the first Categorical's normalisation
    masks = th.as_tensor(action_masks, dtype=th.bool, device=logits.device).reshape(logits.shape)
    masked = th.where(masks, logits, th.tensor(MASKED_LOGIT, dtype=logits.dtype, device=logits.device))
    return masked - masked.logsumexp(dim=-1, keepdim=True), masks


def _gathered(logits: th.Tensor, actions: th.Tensor) -> th.Tensor:
    """``Categorical.log_prob``: each row's normalised logit at its action."""
    index = actions.long().unsqueeze(-1)
    index, logits = th.broadcast_tensors(index, logits)
    return logits.gather(-1, index[..., :1]).squeeze(-1)
