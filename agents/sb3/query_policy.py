"""A MaskablePPO policy for the query tier's env that reads its observation row by row.

``QueryTierEnv``'s observation is a global part, the candidate's row and ``K`` slot rows, each
row an endpoint's stream statistics (and, with ``word_buckets``, its hashed words). An MLP over
the flat vector must learn the same reading of an endpoint once per position; here one network
encodes the candidate's row and one, shared by all slots, each slot's row (with the global
part), as pointer-style policies over sets do. From those:

* ``row_values`` gives a number per row (the candidate's, then each slot's) from its encoding,
  which imitation fits to the teacher's value of the endpoint (``agents.sb3.query_imitation``):
  the encodings are then shaped by what each endpoint is worth, not only by which action the
  teacher took;
* SKIP, WRITE and MERGE come from the candidate's encoding, the mean encoding of the slots
  holding an item, the global part, and the row values of the candidate and of the slots
  (their lowest and their mean);
* EXPIRE of slot ``k`` comes from slot ``k``'s encoding beside the candidate's, their two row
  values and their difference, so one set of weights scores every slot, wherever the env put
  the item. The teacher's choices are comparisons of values (per byte), so the heads are given
  the values the rows are taught to estimate;
* the value (PPO's critic) from the candidate's encoding, the slots' mean and the global part.

Acting deterministically (``predict(..., deterministic=True)``, as ``wpb eval`` does), the
policy first picks the most likely kind of action, counting every EXPIRE as one kind, then the
most likely slot (``most_likely``). The plain argmax would skip a snapshot worth writing
whenever the wish to make room for it is spread over several slots, none alone as likely as
SKIP. On the validation episodes, models of an earlier form of this policy (heads without the
row values) lost that way 0.056 of their accuracy at 100 KB on ``queries_hard`` and 0.016 on
``queries_medium`` (``docs/query-tier.md``).

The layout comes from the env's feature names and the policy's ``slots`` and ``word_buckets``,
which must be those of the env (checked against the observation space). A saved model is a
plain MaskablePPO file; loading it imports this module.
"""

from __future__ import annotations

from typing import Any

import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from torch import nn

from wpb_gym.envs.query_env import CANDIDATE_FEATURES, GLOBAL_FEATURES, SLOT_FEATURES

_PRESENT = SLOT_FEATURES.index("present")


def observation_width(slots: int, word_buckets: int) -> int:
    """The length of ``QueryTierEnv``'s observation with these ``slots`` and ``word_buckets``."""
    words = 2 * word_buckets
    return len(GLOBAL_FEATURES) + len(CANDIDATE_FEATURES) + words + slots * (len(SLOT_FEATURES) + words)


def most_likely(probabilities: th.Tensor) -> th.Tensor:
    """Each row's action: the most likely of SKIP, WRITE, MERGE and EXPIRE (the slots' total),
    and for EXPIRE the most likely slot. ``probabilities`` is ``(n, 3 + slots)``."""
    kinds = th.cat([probabilities[:, :3], probabilities[:, 3:].sum(1, keepdim=True)], 1).argmax(1)
    return th.where(kinds == 3, 3 + probabilities[:, 3:].argmax(1), kinds)


def _mlp(inputs: int, outputs: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, outputs))


class QueryRows(nn.Module):
    """The policy's body (SB3's ``mlp_extractor``): the actor's output is the action logits
    (``3 + slots``), the critic's a vector the value head reads."""

    def __init__(self, slots: int, word_buckets: int, hidden: int, embedding: int) -> None:
        super().__init__()
        self.slots, self.words = slots, 2 * word_buckets
        g, c, s = len(GLOBAL_FEATURES), len(CANDIDATE_FEATURES), len(SLOT_FEATURES)
        self.widths = (g, c + self.words, s + self.words)
        self.candidate = _mlp(g + c + self.words, embedding, hidden)
        self.slot = _mlp(g + s + self.words, embedding, hidden)
        self.head = _mlp(2 * embedding + g + 3, 3, hidden)
        self.expire = _mlp(2 * embedding + g + 3, 1, hidden)
        self.critic = _mlp(2 * embedding + g, embedding, hidden)
        self.candidate_value = nn.Linear(embedding, 1)
        self.slot_value = nn.Linear(embedding, 1)
        self.latent_dim_pi = 3 + slots
        self.latent_dim_vf = embedding

    def encode(self, x: th.Tensor) -> tuple[th.Tensor, ...]:
        g_w, c_w, s_w = self.widths
        n, k = x.shape[0], self.slots
        g = x[:, :g_w]
        rows = x[:, g_w + c_w:].reshape(n, k, s_w)
        h_c = self.candidate(th.cat([g, x[:, g_w:g_w + c_w]], 1))
        g_k = g[:, None, :].expand(n, k, g_w)
        h_s = self.slot(th.cat([g_k, rows], 2))
        present = rows[:, :, _PRESENT:_PRESENT + 1]
        pooled = (h_s * present).sum(1) / present.sum(1).clamp(min=1.0)
        return g, g_k, h_c, h_s, pooled, present

    def forward_actor(self, x: th.Tensor) -> th.Tensor:
        return self._logits(self.encode(x))

    def _logits(self, encoded: tuple[th.Tensor, ...], values: th.Tensor | None = None) -> th.Tensor:
        g, g_k, h_c, h_s, pooled, present = encoded
        values = self._row_values(encoded) if values is None else values
        v_c, v_s = values[:, :1], values[:, 1:]
        # The rows' values beside the encodings: what the teacher decides is a comparison of them.
        lowest = th.where(present[:, :, 0] > 0, v_s, th.full_like(v_s, 1e4)).min(1, keepdim=True).values
        lowest = th.where(present.sum(1) > 0, lowest, th.zeros_like(lowest))
        mean = (v_s * present[:, :, 0]).sum(1, keepdim=True) / present[:, :, 0].sum(1, keepdim=True).clamp(min=1.0)
        head = self.head(th.cat([h_c, pooled, g, v_c, lowest, mean], 1))
        pair = th.stack([v_c.expand_as(v_s), v_s, v_c - v_s], 2)
        expire = self.expire(th.cat([h_s, h_c[:, None, :].expand_as(h_s), g_k, pair], 2))[:, :, 0]
        return th.cat([head, expire], 1)

    def logits_and_row_values(self, x: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """``forward_actor(x)`` and ``row_values(x)`` from one encoding (imitation needs both)."""
        encoded = self.encode(x)
        values = self._row_values(encoded)
        return self._logits(encoded, values), values

    def forward_critic(self, x: th.Tensor) -> th.Tensor:
        g, _, h_c, _, pooled, _ = self.encode(x)
        return self.critic(th.cat([h_c, pooled, g], 1))

    def forward(self, x: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        return self.forward_actor(x), self.forward_critic(x)

    def row_values(self, x: th.Tensor) -> th.Tensor:
        """One number per row, the candidate's then each slot's: ``(n, 1 + slots)``."""
        return self._row_values(self.encode(x))

    def _row_values(self, encoded: tuple[th.Tensor, ...]) -> th.Tensor:
        _, _, h_c, h_s, _, _ = encoded
        return th.cat([self.candidate_value(h_c), self.slot_value(h_s)[:, :, 0]], 1)


class QueryRowsPolicy(MaskableActorCriticPolicy):
    """MaskablePPO's policy for ``QueryTierEnv(slots=K, word_buckets=B)`` (see the module
    docstring); ``hidden`` units per layer, ``embedding`` numbers per row."""

    def __init__(self, observation_space: Any, action_space: Any, lr_schedule: Any, *, slots: int,
                 word_buckets: int, hidden: int = 128, embedding: int = 64, **kwargs: Any) -> None:
        width = observation_width(slots, word_buckets)
        if observation_space.shape != (width,) or action_space.n != 3 + slots:
            raise ValueError(f"QueryRowsPolicy(slots={slots}, word_buckets={word_buckets}) reads observations of "
                             f"{width} numbers and {3 + slots} actions; the env gives {observation_space.shape} and "
                             f"{action_space.n}: give the policy the env's slots and word_buckets")
        self.slots, self.word_buckets, self.hidden, self.embedding = slots, word_buckets, hidden, embedding
        kwargs.setdefault("ortho_init", False)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = QueryRows(self.slots, self.word_buckets, self.hidden, self.embedding)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        # The body's actor output is already the logits: SB3's linear layer on top goes.
        self.action_net = nn.Identity()
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(slots=self.slots, word_buckets=self.word_buckets, hidden=self.hidden, embedding=self.embedding)
        return data

    def _predict(self, observation: th.Tensor, deterministic: bool = False,
                 action_masks: Any = None) -> th.Tensor:
        if not deterministic:
            return super()._predict(observation, deterministic, action_masks)
        return self.most_likely_actions(observation, action_masks)

    def most_likely_actions(self, observation: th.Tensor, action_masks: Any) -> th.Tensor:
        """The actions ``predict(..., deterministic=True)`` takes, for a batch of observations
        and their masks (``most_likely`` of the masked distribution)."""
        return most_likely(self.get_distribution(observation, action_masks).distribution.probs)

    def row_values(self, obs: th.Tensor) -> th.Tensor:
        return self.mlp_extractor.row_values(self.extract_features(obs, self.pi_features_extractor))
