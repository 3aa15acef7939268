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
regressions of the hidden draws on the bags, as ``value_keeper``'s word estimates are fitted.
No loss moves them. Everything else reads the *compact* observation, each row's ``2 B`` bag
numbers replaced by those three (``QueryRows.compact``), which is also how imitation keeps its
states. From it:

* each row's value (``log1p`` of what its endpoint is worth) comes from ``value_members``
  networks of their own, one function for every row, reading what ``value_keeper`` reads (the
  endpoint's stream statistics, the episode's progress, the word estimates); imitation fits
  each to the teacher's values (``agents.sb3.query_imitation``), and the heads read their mean,
  which no action loss moves. On the validation episodes, the teacher's own rule played on
  these values came within 0.021 of ``value_keeper`` at 1 and 10 KB (0.209 against 0.230 on
  ``queries_hard`` at 1 KB), where the same rule on values read off the policy's encodings (its
  earlier form) lost up to 0.123 (0.107 there; ``docs/query-tier.md``);
* the encoders (one for the candidate's row, one shared by the slots', each with the global
  part) give each row an encoding;
* the heads are given that rule played on the values (``rule_inputs``): whether the candidate
  fits, whether evicting items in view can make room for it, the margin of its value over what
  those evictions lose, whether that margin is positive with room to be had, and for each slot
  whether the rule evicts it and whether first. What
  the teacher decides is that comparison made on its own values, so a head that has the rule's
  reading of the student's values needs to learn only when to trust it;
* SKIP, WRITE and MERGE come from the candidate's encoding, the mean encoding of the slots
  holding an item, the global part, the row values (the candidate's, the slots' lowest and
  mean) and the rule's reading; EXPIRE of slot ``k`` from slot ``k``'s encoding beside the
  candidate's, their two values and their difference, and the rule's reading of slot ``k``, so
  one set of weights scores every slot, wherever the env put the item;
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

from wpb_gym.envs.observation.query_features import ENDPOINT_FEATURES
from wpb_gym.envs.query_env import CANDIDATE_FEATURES, GLOBAL_FEATURES, SKIP, SLOT_FEATURES, WRITE

_PRESENT = SLOT_FEATURES.index("present")
_PROGRESS = GLOBAL_FEATURES.index("progress")
# Candidate and slot rows both begin with the endpoint's stream statistics.
assert CANDIDATE_FEATURES[:len(ENDPOINT_FEATURES)] == SLOT_FEATURES[:len(ENDPOINT_FEATURES)] == ENDPOINT_FEATURES
# The hidden draws a row's words estimate: its integrations' and its latest burst's.
WORD_ESTIMATES = 2
# What a value member reads of a row: its endpoint's statistics, the episode's progress, its word
# estimates (in units of 4 standard deviations, clipped at 1, as value_keeper scales them) and
# whether it has words of a breaking change.
VALUE_INPUTS = len(ENDPOINT_FEATURES) + 1 + WORD_ESTIMATES + 1


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
    each slot's encoding, the slots' mean encoding, which slots hold an item, and what the
    value members read of every row (the candidate's first)."""

    g: th.Tensor
    g_k: th.Tensor
    h_c: th.Tensor
    h_s: th.Tensor
    pooled: th.Tensor
    present: th.Tensor
    value_inputs: th.Tensor
    rows: tuple[th.Tensor, th.Tensor]  # the candidate's compact row and the slots'


class Fitted(NamedTuple):
    """A batch's action logits ``(n, 3 + slots)``, each value member's row values ``(n, members,
    1 + slots)``, their log variances with ``value_spread`` (else None), and the teacher's rule's
    action on the members' mean values ``(n,)`` (``QueryRows.rule_actions``)."""

    logits: th.Tensor
    values: th.Tensor
    spread: th.Tensor | None
    rule: th.Tensor


def _mlp(inputs: int, outputs: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, outputs))


_CANDIDATE_COST = CANDIDATE_FEATURES.index("cost")
_FITS = CANDIDATE_FEATURES.index("fits")
_SLOT_COST = SLOT_FEATURES.index("cost")
_USED = GLOBAL_FEATURES.index("used")
_EXPIRES_NOW = GLOBAL_FEATURES.index("expires_now")
_SAME_ENDPOINT = SLOT_FEATURES.index("same_endpoint")
# What the heads are given of the teacher's rule played on the row values (``rule_inputs``).
HEAD_RULE_INPUTS = 4
EXPIRE_RULE_INPUTS = 2


class QueryRows(nn.Module):
    """The policy's body (SB3's ``mlp_extractor``): the actor's output is the action logits
    (``3 + slots``), the critic's a vector the value head reads.

    Everything reads the *compact* observation (``compact``): each row's bags of words replaced
    by its word estimates and whether it has words of a breaking change, ``WORD_ESTIMATES + 1``
    numbers instead of ``2 B``. Imitation keeps its states so (``compact_width`` numbers each)."""

    def __init__(self, slots: int, word_buckets: int, hidden: int, embedding: int, value_spread: bool = False,
                 value_members: int = 3) -> None:
        super().__init__()
        if value_members < 1:
            raise ValueError(f"QueryRows: value_members must be at least 1, got {value_members}")
        self.slots, self.buckets, self.word_width = slots, word_buckets, 2 * word_buckets
        g, c, s = len(GLOBAL_FEATURES), len(CANDIDATE_FEATURES), len(SLOT_FEATURES)
        self.widths = (g, c + self.word_width, s + self.word_width)
        words = WORD_ESTIMATES + 1
        self.compact_widths = (g, c + words, s + words)
        self.compact_width = g + c + words + slots * (s + words)
        # What the words say, as the generator makes it: linear in the bag, one weight per bucket.
        # Imitation sets them by least squares (query_imitation.fit_words); no loss moves them,
        # here or in a model loaded from a file.
        self.first_words = nn.Linear(max(word_buckets, 1), 1).requires_grad_(False)
        self.break_words = nn.Linear(max(word_buckets, 1), 1).requires_grad_(False)
        self.candidate = _mlp(g + c + words, embedding, hidden)
        self.slot = _mlp(g + s + words, embedding, hidden)
        self.head = _mlp(2 * embedding + g + 3 + HEAD_RULE_INPUTS, 3, hidden)
        self.expire = _mlp(2 * embedding + g + 3 + EXPIRE_RULE_INPUTS, 1, hidden)
        self.critic = _mlp(2 * embedding + g, embedding, hidden)
        # Networks of their own for the row values, one function for every row, reading what
        # value_keeper reads; with value_spread each gives the log variance of its error beside
        # its value, which a fit by the Gaussian likelihood weighs rows by.
        self.value_members = nn.ModuleList(
            _mlp(VALUE_INPUTS, 2 if value_spread else 1, hidden) for _ in range(value_members))
        self.value_spread = value_spread
        self.members = value_members
        self.latent_dim_pi = 3 + slots
        self.latent_dim_vf = embedding

    def _words(self, stats_width: int, row: th.Tensor) -> th.Tensor:
        """The word estimates of rows ``row`` (``(..., stats_width + 2 B)``): the integrations'
        and the latest breaking change's burst draw (0 before any), then whether the row has
        words of a breaking change, ``(..., 3)``."""
        if not self.buckets:
            return row.new_zeros(*row.shape[:-1], WORD_ESTIMATES + 1)
        first = row[..., stats_width:stats_width + self.buckets]
        broke = row[..., stats_width + self.buckets:]
        has_break = (broke.sum(-1, keepdim=True) > 0).float()
        return th.cat([self.first_words(first), self.break_words(broke) * has_break, has_break], -1)

    def compact(self, x: th.Tensor) -> th.Tensor:
        """Observations ``(n, observation_width)`` in the compact form ``(n, compact_width)``:
        every row's bags replaced by ``_words`` of them."""
        g_w, c_w, s_w = self.widths
        c, s = c_w - self.word_width, s_w - self.word_width
        n = x.shape[0]
        candidate = x[:, g_w:g_w + c_w]
        rows = x[:, g_w + c_w:].reshape(n, self.slots, s_w)
        slots = th.cat([rows[:, :, :s], self._words(s, rows)], 2).reshape(n, -1)
        return th.cat([x[:, :g_w], candidate[:, :c], self._words(c, candidate), slots], 1)

    def _split(self, z: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """A compact batch's global part, candidate row and slot rows ``(n, slots, width)``."""
        g_w, c_w, s_w = self.compact_widths
        return z[:, :g_w], z[:, g_w:g_w + c_w], z[:, g_w + c_w:].reshape(z.shape[0], self.slots, s_w)

    def _value_inputs(self, g: th.Tensor, candidate: th.Tensor, rows: th.Tensor) -> th.Tensor:
        """What the value members read of each row (``VALUE_INPUTS``): ``(n, 1 + slots, VALUE_INPUTS)``."""
        f = len(ENDPOINT_FEATURES)
        stats = th.cat([candidate[:, None, :f], rows[:, :, :f]], 1)
        words = th.cat([candidate[:, None, -WORD_ESTIMATES - 1:], rows[:, :, -WORD_ESTIMATES - 1:]], 1)
        progress = g[:, None, _PROGRESS:_PROGRESS + 1].expand(-1, stats.shape[1], 1)
        return th.cat([stats, progress, (words[..., :WORD_ESTIMATES] / 4).clamp(-1.0, 1.0), words[..., -1:]], 2)

    def member_outputs(self, z: th.Tensor) -> th.Tensor:
        """Each value member's outputs for each row of the compact batch ``z``, ``(n, members,
        1 + slots, 1 or 2)``: the value, then with ``value_spread`` the log variance; the
        encoders are not run."""
        return self._member_outputs(self._value_inputs(*self._split(z)))

    def _member_outputs(self, value_inputs: th.Tensor) -> th.Tensor:
        return th.stack([member(value_inputs) for member in self.value_members], 1)

    def present(self, z: th.Tensor) -> th.Tensor:
        """Which rows of the compact batch ``z`` hold an endpoint: the candidate always, then
        the slots holding an item, ``(n, 1 + slots)``."""
        _, _, rows = self._split(z)
        return th.cat([th.ones_like(rows[:, :1, 0]), rows[:, :, _PRESENT]], 1)

    def encode(self, z: th.Tensor) -> Encoded:
        """The compact batch ``z``'s encodings."""
        g, candidate, rows = self._split(z)
        n, k = z.shape[0], self.slots
        h_c = self.candidate(th.cat([g, candidate], 1))
        g_k = g[:, None, :].expand(n, k, g.shape[1])
        h_s = self.slot(th.cat([g_k, rows], 2))
        present = rows[:, :, _PRESENT:_PRESENT + 1]
        pooled = (h_s * present).sum(1) / present.sum(1).clamp(min=1.0)
        return Encoded(g, g_k, h_c, h_s, pooled, present, self._value_inputs(g, candidate, rows), (candidate, rows))

    def forward_actor(self, x: th.Tensor) -> th.Tensor:
        encoded = self.encode(self.compact(x))
        return self._logits(encoded, self._member_outputs(encoded.value_inputs)[..., 0].mean(1))

    def rule_inputs(self, encoded: Encoded, values: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """The teacher's rule (``query_imitation.SlotTeacher``) played on ``values`` (``log1p``
        of each row's, the candidate's first), as numbers the heads read. For the head: whether
        the candidate fits, whether evicting items in view can make room, the margin of its
        value over what the evictions would lose (``log1p`` of each, clipped at 8), and whether
        that margin is positive with room to be had. For each slot: whether the rule evicts it
        to make room, and whether it is the first so evicted (the lowest value per byte). Where
        values per byte tie, the order among them is the sort's, not the teacher's (oldest
        first), and costs are as the observation shows them (a fraction of the budget)."""
        candidate, rows = encoded.rows
        present = encoded.present[:, :, 0] > 0
        worth = th.expm1(values.clamp(min=0.0))
        cost = rows[:, :, _SLOT_COST].clamp(min=1e-6)
        per_byte = th.where(present, worth[:, 1:] / cost, th.full_like(cost, float("inf")))
        order = per_byte.argsort(1)
        sorted_cost = (cost * present).gather(1, order)
        before = sorted_cost.cumsum(1) - sorted_cost
        room = 1.0 - encoded.g[:, _USED:_USED + 1]
        size = candidate[:, _CANDIDATE_COST:_CANDIDATE_COST + 1]  # 1: the whole budget or more, never written
        need = size - room
        chosen_sorted = present.gather(1, order) & (before < need)
        victim = th.zeros_like(chosen_sorted).scatter(1, order, chosen_sorted)
        first = th.zeros_like(chosen_sorted).scatter(1, order[:, :1], chosen_sorted[:, :1])
        enough = (room + (cost * present).sum(1, keepdim=True) >= size) & (size < 1.0)
        lost = (worth[:, 1:] * victim).sum(1, keepdim=True)
        margin = (th.log1p(worth[:, :1]) - th.log1p(lost)).clamp(-8.0, 8.0)
        head = th.cat([candidate[:, _FITS:_FITS + 1], enough.float(), margin, (enough & (margin > 0)).float()], 1)
        return head, th.stack([victim.float(), first.float()], 2)

    def rule_actions(self, encoded: Encoded, values: th.Tensor,
                     rule: tuple[th.Tensor, th.Tensor] | None = None) -> th.Tensor:
        """The action the teacher's rule takes on ``values`` (``log1p`` of each row's, the
        candidate's first) at each state, from what the observation shows, ``(n,)``: EXPIRE a
        slot holding the candidate's endpoint; else WRITE when the candidate fits and is worth
        more than nothing (or memory just dropped its endpoint's state, as any expiry this step
        may mean); else EXPIRE the first victim when the candidate is worth more than the
        evictions lose (or replaces a dropped state) and they make room; else SKIP. This is
        ``SlotTeacher``'s rule without its memory of a step's plan: a later eviction of a step
        is planned afresh on the items then in view."""
        candidate, rows = encoded.rows
        present = encoded.present[:, :, 0] > 0
        same = present & (rows[:, :, _SAME_ENDPOINT] > 0)
        head, expire = self.rule_inputs(encoded, values) if rule is None else rule
        fits, enough, margin = head[:, 0] > 0, head[:, 1] > 0, head[:, 2]
        first = expire[:, :, 1] > 0
        replacing = encoded.g[:, _EXPIRES_NOW] > 0
        write = th.where((values[:, 0] > 0) | replacing, WRITE, SKIP)
        evict = th.where(enough & ((margin > 0) | replacing) & first.any(1), 3 + first.float().argmax(1), SKIP)
        return th.where(same.any(1), 3 + same.float().argmax(1), th.where(fits, write, evict))

    def _logits(self, encoded: Encoded, values: th.Tensor,
                rule: tuple[th.Tensor, th.Tensor] | None = None) -> th.Tensor:
        g, g_k, h_c, h_s, pooled, present = (encoded.g, encoded.g_k, encoded.h_c, encoded.h_s, encoded.pooled,
                                             encoded.present)
        v_c, v_s = values[:, :1], values[:, 1:]
        # The rows' values beside the encodings: what the teacher decides is a comparison of them.
        lowest = th.where(present[:, :, 0] > 0, v_s, th.full_like(v_s, 1e4)).min(1, keepdim=True).values
        lowest = th.where(present.sum(1) > 0, lowest, th.zeros_like(lowest))
        mean = (v_s * present[:, :, 0]).sum(1, keepdim=True) / present[:, :, 0].sum(1, keepdim=True).clamp(min=1.0)
        rule_head, rule_expire = self.rule_inputs(encoded, values) if rule is None else rule
        head = self.head(th.cat([h_c, pooled, g, v_c, lowest, mean, rule_head], 1))
        pair = th.stack([v_c.expand_as(v_s), v_s, v_c - v_s], 2)
        expire = self.expire(th.cat([h_s, h_c[:, None, :].expand_as(h_s), g_k, pair, rule_expire], 2))[:, :, 0]
        return th.cat([head, expire], 1)

    def fit_outputs(self, z: th.Tensor) -> Fitted:
        """What imitation fits, for the compact batch ``z``, from one encoding (``Fitted``). The
        heads read the members' mean, which no action moves: each member is fitted to the
        values on its own."""
        encoded = self.encode(z)
        outputs = self._member_outputs(encoded.value_inputs)
        values = outputs[..., 0]
        mean = values.mean(1).detach()
        rule = self.rule_inputs(encoded, mean)  # read once: the heads' inputs and the labels
        return Fitted(self._logits(encoded, mean, rule), values, outputs[..., 1] if self.value_spread else None,
                      self.rule_actions(encoded, mean, rule))

    def word_estimates(self, x: th.Tensor) -> th.Tensor:
        """Every row's word estimates, the candidate's first: ``(n, 1 + slots, 2)``."""
        _, candidate, rows = self._split(self.compact(x))
        return th.cat([candidate[:, None, -WORD_ESTIMATES - 1:-1], rows[:, :, -WORD_ESTIMATES - 1:-1]], 1)

    def forward_critic(self, x: th.Tensor) -> th.Tensor:
        encoded = self.encode(self.compact(x))
        return self.critic(th.cat([encoded.h_c, encoded.pooled, encoded.g], 1))

    def forward(self, x: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        return self.forward_actor(x), self.forward_critic(x)

    def row_values(self, x: th.Tensor) -> th.Tensor:
        """``log1p`` of each row's value, the members' mean, the candidate's then each slot's:
        ``(n, 1 + slots)``."""
        return self.member_outputs(self.compact(x))[..., 0].mean(1)


class QueryRowsPolicy(MaskableActorCriticPolicy):
    """MaskablePPO's policy for ``QueryTierEnv(slots=K, word_buckets=B)`` (see the module
    docstring); ``hidden`` units per layer, ``embedding`` numbers per row; ``value_spread``: a log
    variance beside each row value."""

    def __init__(self, observation_space: Any, action_space: Any, lr_schedule: Any, *, slots: int,
                 word_buckets: int, hidden: int = 128, embedding: int = 64, value_spread: bool = False,
                 value_members: int = 3, **kwargs: Any) -> None:
        width = observation_width(slots, word_buckets)
        if observation_space.shape != (width,) or action_space.n != 3 + slots:
            raise ValueError(f"QueryRowsPolicy(slots={slots}, word_buckets={word_buckets}) reads observations of "
                             f"{width} numbers and {3 + slots} actions; the env gives {observation_space.shape} and "
                             f"{action_space.n}: give the policy the env's slots and word_buckets")
        self.slots, self.word_buckets, self.hidden, self.embedding = slots, word_buckets, hidden, embedding
        self.value_spread, self.value_members = value_spread, value_members
        kwargs.setdefault("ortho_init", False)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = QueryRows(self.slots, self.word_buckets, self.hidden, self.embedding, self.value_spread,
                                       self.value_members)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        # The body's actor output is already the logits: SB3's linear layer on top goes.
        self.action_net = nn.Identity()
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(slots=self.slots, word_buckets=self.word_buckets, hidden=self.hidden, embedding=self.embedding,
                    value_spread=self.value_spread, value_members=self.value_members)
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
