"""A MaskablePPO policy for the query tier's env that reads its observation row by row.

``QueryTierEnv``'s observation is a global part, the candidate's row and ``K`` slot rows, each
row an endpoint's stream statistics (and, with ``word_buckets``, its hashed words). An MLP over
the flat vector must learn the same reading of an endpoint once per position; here one network
encodes the candidate's row and one, shared by all slots, each slot's row (with the global
part), as pointer-style policies over sets do.

A row's words enter through two numbers, its *word estimates* (with a flag for whether it has
words of a breaking change): one linear function of the bag of its first contract's words and
one of the bag of what its latest breaking change touched (0 before any). That is the form the
generator gives them (an endpoint's integrations and a burst's size follow a weighted sum of
words, ``wpb_gym.episodes.generators.query_process``), so imitation sets them to ridge
regressions of the hidden draws on the bags, as ``value_keeper``'s word estimates are fitted,
and the encoders read three numbers instead of ``2 B``. No loss moves the estimates. From the
encodings:

* ``row_values`` gives a number per row (the candidate's, then each slot's) from its encoding,
  which imitation fits to the teacher's value of the endpoint (``agents.sb3.query_imitation``):
  the encodings are then shaped by what each endpoint is worth, not only by which action the
  teacher took; with ``value_spread``, beside it the log variance of that number's error, which
  a fit by the Gaussian likelihood reads;
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

from typing import Any, NamedTuple

import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from torch import nn

from wpb_gym.envs.query_env import CANDIDATE_FEATURES, GLOBAL_FEATURES, SLOT_FEATURES

_PRESENT = SLOT_FEATURES.index("present")
# The hidden draws a row's words estimate: its integrations' and its latest burst's.
WORD_ESTIMATES = 2


def observation_width(slots: int, word_buckets: int) -> int:
    """The length of ``QueryTierEnv``'s observation with these ``slots`` and ``word_buckets``."""
    words = 2 * word_buckets
    return len(GLOBAL_FEATURES) + len(CANDIDATE_FEATURES) + words + slots * (len(SLOT_FEATURES) + words)


def most_likely(probabilities: th.Tensor) -> th.Tensor:
    """Each row's action: the most likely of SKIP, WRITE, MERGE and EXPIRE (the slots' total),
    and for EXPIRE the most likely slot. ``probabilities`` is ``(n, 3 + slots)``."""
    kinds = th.cat([probabilities[:, :3], probabilities[:, 3:].sum(1, keepdim=True)], 1).argmax(1)
    return th.where(kinds == 3, 3 + probabilities[:, 3:].argmax(1), kinds)


class Encoded(NamedTuple):
    """The body's reading of a batch: the global part (and a copy per slot), the candidate's and
    each slot's encoding, the slots' mean encoding, which slots hold an item, and every row's
    word estimates (the candidate's first)."""

    g: th.Tensor
    g_k: th.Tensor
    h_c: th.Tensor
    h_s: th.Tensor
    pooled: th.Tensor
    present: th.Tensor
    words: th.Tensor


def _mlp(inputs: int, outputs: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, outputs))


class QueryRows(nn.Module):
    """The policy's body (SB3's ``mlp_extractor``): the actor's output is the action logits
    (``3 + slots``), the critic's a vector the value head reads."""

    def __init__(self, slots: int, word_buckets: int, hidden: int, embedding: int, value_spread: bool = False) -> None:
        super().__init__()
        self.slots, self.buckets, self.word_width = slots, word_buckets, 2 * word_buckets
        g, c, s = len(GLOBAL_FEATURES), len(CANDIDATE_FEATURES), len(SLOT_FEATURES)
        self.widths = (g, c + self.word_width, s + self.word_width)
        # What the words say, as the generator makes it: linear in the bag, one weight per bucket.
        # Imitation sets them by least squares (query_imitation.fit_words); no loss moves them,
        # here or in a model loaded from a file.
        self.first_words = nn.Linear(max(word_buckets, 1), 1).requires_grad_(False)
        self.break_words = nn.Linear(max(word_buckets, 1), 1).requires_grad_(False)
        self.candidate = _mlp(g + c + WORD_ESTIMATES + 1, embedding, hidden)
        self.slot = _mlp(g + s + WORD_ESTIMATES + 1, embedding, hidden)
        self.head = _mlp(2 * embedding + g + 3, 3, hidden)
        self.expire = _mlp(2 * embedding + g + 3, 1, hidden)
        self.critic = _mlp(2 * embedding + g, embedding, hidden)
        self.candidate_value = nn.Linear(embedding, 1)
        self.slot_value = nn.Linear(embedding, 1)
        if value_spread:  # a log variance per row value: a fit by the Gaussian likelihood weighs rows by it
            self.candidate_spread = nn.Linear(embedding, 1)
            self.slot_spread = nn.Linear(embedding, 1)
        self.value_spread = value_spread
        self.latent_dim_pi = 3 + slots
        self.latent_dim_vf = embedding

    def _words(self, stats_width: int, row: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """The word estimates of rows ``row`` (``(..., stats_width + 2 B)``): the integrations'
        and the latest breaking change's burst draw, ``(..., 2)``, and whether the row has
        words of a breaking change, ``(..., 1)`` (its burst estimate is 0 otherwise)."""
        if not self.buckets:
            zeros = row.new_zeros(*row.shape[:-1], 1)
            return th.cat([zeros, zeros], -1), zeros
        first = row[..., stats_width:stats_width + self.buckets]
        broke = row[..., stats_width + self.buckets:]
        has_break = (broke.sum(-1, keepdim=True) > 0).float()
        return th.cat([self.first_words(first), self.break_words(broke) * has_break], -1), has_break

    def encode(self, x: th.Tensor) -> Encoded:
        g_w, c_w, s_w = self.widths
        n, k = x.shape[0], self.slots
        c, s = c_w - self.word_width, s_w - self.word_width
        g = x[:, :g_w]
        candidate = x[:, g_w:g_w + c_w]
        rows = x[:, g_w + c_w:].reshape(n, k, s_w)
        f_c, b_c = self._words(c, candidate)
        f_s, b_s = self._words(s, rows)
        h_c = self.candidate(th.cat([g, candidate[:, :c], f_c, b_c], 1))
        g_k = g[:, None, :].expand(n, k, g_w)
        h_s = self.slot(th.cat([g_k, rows[:, :, :s], f_s, b_s], 2))
        present = rows[:, :, _PRESENT:_PRESENT + 1]
        pooled = (h_s * present).sum(1) / present.sum(1).clamp(min=1.0)
        return Encoded(g, g_k, h_c, h_s, pooled, present, th.cat([f_c[:, None, :], f_s], 1))

    def forward_actor(self, x: th.Tensor) -> th.Tensor:
        return self._logits(self.encode(x))

    def _logits(self, encoded: Encoded, values: th.Tensor | None = None) -> th.Tensor:
        g, g_k, h_c, h_s, pooled, present = (encoded.g, encoded.g_k, encoded.h_c, encoded.h_s, encoded.pooled,
                                             encoded.present)
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

    def logits_and_row_values(self, x: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """``forward_actor(x)``, ``row_values(x)`` and, with ``value_spread``, the log variance of
        each row value's error ``(n, 1 + slots)`` (else None), from one encoding (imitation fits
        them together)."""
        encoded = self.encode(x)
        values = self._row_values(encoded)
        spread = (th.cat([self.candidate_spread(encoded.h_c), self.slot_spread(encoded.h_s)[:, :, 0]], 1)
                  if self.value_spread else None)
        return self._logits(encoded, values), values, spread

    def word_estimates(self, x: th.Tensor) -> th.Tensor:
        """Every row's word estimates, the candidate's first: ``(n, 1 + slots, 2)``."""
        return self.encode(x).words

    def forward_critic(self, x: th.Tensor) -> th.Tensor:
        encoded = self.encode(x)
        return self.critic(th.cat([encoded.h_c, encoded.pooled, encoded.g], 1))

    def forward(self, x: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        return self.forward_actor(x), self.forward_critic(x)

    def row_values(self, x: th.Tensor) -> th.Tensor:
        """One number per row, the candidate's then each slot's: ``(n, 1 + slots)``."""
        return self._row_values(self.encode(x))

    def _row_values(self, encoded: Encoded) -> th.Tensor:
        return th.cat([self.candidate_value(encoded.h_c), self.slot_value(encoded.h_s)[:, :, 0]], 1)


class QueryRowsPolicy(MaskableActorCriticPolicy):
    """MaskablePPO's policy for ``QueryTierEnv(slots=K, word_buckets=B)`` (see the module
    docstring); ``hidden`` units per layer, ``embedding`` numbers per row; ``value_spread``: a log
    variance beside each row value."""

    def __init__(self, observation_space: Any, action_space: Any, lr_schedule: Any, *, slots: int,
                 word_buckets: int, hidden: int = 128, embedding: int = 64, value_spread: bool = False,
                 **kwargs: Any) -> None:
        width = observation_width(slots, word_buckets)
        if observation_space.shape != (width,) or action_space.n != 3 + slots:
            raise ValueError(f"QueryRowsPolicy(slots={slots}, word_buckets={word_buckets}) reads observations of "
                             f"{width} numbers and {3 + slots} actions; the env gives {observation_space.shape} and "
                             f"{action_space.n}: give the policy the env's slots and word_buckets")
        self.slots, self.word_buckets, self.hidden, self.embedding = slots, word_buckets, hidden, embedding
        self.value_spread = value_spread
        kwargs.setdefault("ortho_init", False)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = QueryRows(self.slots, self.word_buckets, self.hidden, self.embedding, self.value_spread)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        # The body's actor output is already the logits: SB3's linear layer on top goes.
        self.action_net = nn.Identity()
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(slots=self.slots, word_buckets=self.word_buckets, hidden=self.hidden, embedding=self.embedding,
                    value_spread=self.value_spread)
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
