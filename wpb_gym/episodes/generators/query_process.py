"""The query tier's query process: hidden traffic over a stream of endpoint snapshots, and the
queries it asks at checkpoints. The synthetic tiers (``queries``) and real drift with generated
queries (``real_queries``) both run it over their streams.

Each query draws its endpoint with probability proportional to its *weight*,
``exp(level) + integrations * burst``:

* ``level``, the endpoint's everyday popularity, is drawn from ``N(0, popularity_spread**2)``
  and after every checkpoint jumps to a fresh draw with probability ``popularity_jump_prob``.
* ``integrations``, how many clients call it (log-normal, mean 1, spread
  ``integration_spread``), shows as the ``traffic`` metadata of every step that shows the
  endpoint: Poisson with mean ``traffic_scale * integrations``. With ``integration_content``
  (rho, 0 by default) the endpoint's parameters say part of it: its log-normal's standard
  normal is ``rho * content + sqrt(1 - rho**2) * noise``, where ``content`` is the sum of fixed
  weights (``WORD_WEIGHTS``, the same in every episode) of the words of its parameter names
  when it is first shown, scaled to unit variance. Clients integrate endpoints that carry
  money, customers and tokens more than those that carry labels and locales, in a way a
  policy can only learn from training episodes, not read from one rule.
* ``burst``: a breaking change of an endpoint in a *migrating* family (a share
  ``migrating_share`` of families) sets off migration traffic of size ``boost * e``, the
  family's boost uniform in ``migration_boost_min`` .. ``migration_boost_max`` and ``e``
  log-normal (mean 1, spread ``burst_spread``), which starts the family's delay later (a
  multiple of ``checkpoint_interval``, up to ``max_burst_delay`` of them) and then halves
  every ``migration_half_life`` steps. With ``burst_content`` (rho, 0 by default) what the
  change touched says part of ``e``: its standard normal is ``rho * content + sqrt(1 - rho**2)
  * noise``, ``content`` the ``content_score`` (by ``BURST_WORD_WEIGHTS``) of the parameter removed or made required (of
  the whole contract when the endpoint is deprecated or removed). Removing a parameter that
  carries a token or an amount sends more clients to migrate than removing a label.

A query asks, with probability ``recent_fact_prob``, about what its endpoint's latest change
touched (a parameter, the deprecation, the removal); otherwise the version (with probability
``version_fact_prob``), the deprecated or removed flag, or a parameter of the contract. The
answer is the endpoint's latest snapshot's (``wpb_gym.core.queries.answer_of``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ...core.queries import answer_of

# The words parameter names are made of (``word_word``), and each word's fixed weight in an
# endpoint's integrations when ``integration_content`` > 0: standard normal draws of a seed of
# their own, so that they are the same in every episode, tier and stream.
PARAM_WORDS: tuple[str, ...] = tuple((
    "account address amount balance card charge city code country coupon currency customer date "
    "description discount email event expand filter invoice item key label limit locale metadata "
    "method mode name note number order owner page phone plan price product quantity reason "
    "reference region scope source status tax token type url"
).split())
WORD_WEIGHTS: dict[str, float] = dict(zip(
    PARAM_WORDS, np.random.default_rng(20261129).standard_normal(len(PARAM_WORDS)).tolist(), strict=True))
# Each word's fixed weight in the burst a breaking change touching it sets off, when
# ``burst_content`` > 0: drawn apart from ``WORD_WEIGHTS``, since how many clients read a
# parameter is another matter than how many integrate the endpoint.
BURST_WORD_WEIGHTS: dict[str, float] = dict(zip(
    PARAM_WORDS, np.random.default_rng(20261130).standard_normal(len(PARAM_WORDS)).tolist(), strict=True))


# Knobs added after the tiers' first release, and the default that leaves every episode as it
# was: written into an episode's labels only when set, so that episodes (and frozen sets) made
# without them stay byte for byte what they were.
LATER_KNOBS: dict[str, float] = {"integration_content": 0.0, "burst_content": 0.0}


def at_later_default(name: str, value: Any) -> bool:
    """Whether knob ``name`` is one of ``LATER_KNOBS`` at the default that changes nothing."""
    return name in LATER_KNOBS and value == LATER_KNOBS[name]


def content_score(params: Sequence[str], weights_of: Mapping[str, float] = WORD_WEIGHTS) -> float:
    """The weights (``weights_of``) of the words of ``params`` (names ``word_word``; other words
    weigh 0) summed and scaled to unit variance over the known words: standard normal for
    random names."""
    weights = [weights_of[w] for name in params for w in str(name).split("_") if w in weights_of]
    return float(sum(weights) / np.sqrt(len(weights))) if weights else 0.0


class ProcessKnobs(Protocol):
    """The knobs the query process reads (``QueryTierConfig`` and ``RealQueryConfig`` have them)."""

    checkpoint_interval: int
    queries_per_checkpoint: int
    migrating_share: float
    max_burst_delay: int
    migration_boost_min: float
    migration_boost_max: float
    migration_half_life: int
    popularity_spread: float
    integration_spread: float
    burst_spread: float
    popularity_jump_prob: float
    traffic_scale: float
    integration_content: float
    burst_content: float
    recent_fact_prob: float
    version_fact_prob: float


def touched(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> tuple[str, str | None] | None:
    """What a change from snapshot ``before`` to ``after`` touched, as a query's (fact, argument):
    the removal, the deprecation, a parameter that came or went, or one made (not) required."""
    if before is None:
        return None
    if bool(before.get("removed")) != bool(after.get("removed")):
        return "removed", None
    if bool(before.get("deprecated")) != bool(after.get("deprecated")):
        return "deprecated", None
    params_before, params_after = set(before.get("params") or ()), set(after.get("params") or ())
    changed = sorted(params_before ^ params_after)
    if changed:
        return "has_param", changed[0]
    required = sorted(set(before.get("required") or ()) ^ set(after.get("required") or ()))
    if required:
        return "required", required[0]
    return None


class QueryProcess:
    """The hidden traffic of one episode over endpoints ``apis`` in families ``family_of``
    (each endpoint's family index, of ``len(family_names)``), drawing from ``rng``.

    ``jump_ramp`` raises the chance of a popularity jump by that much at every checkpoint
    (``popularity_jump_prob + jump_ramp * k`` after ``k`` checkpoints, at most 1): the endless
    streams' rising difficulty, since the queries of the past then say less of the next ones.
    At 0 the draws are exactly those of a process without it."""

    def __init__(self, c: ProcessKnobs, rng: np.random.Generator, apis: Sequence[str], family_of: Sequence[int],
                 family_names: Sequence[str], *, jump_ramp: float = 0.0) -> None:
        if not (isinstance(jump_ramp, (int, float)) and not isinstance(jump_ramp, bool)
                and 0.0 <= jump_ramp < float("inf")):
            raise ValueError(f"jump_ramp: expected a finite number >= 0, got {jump_ramp!r}")
        self.c = c
        self.jump_ramp = float(jump_ramp)
        self.checkpoints_done = 0
        self.rng = rng
        self.apis = list(apis)
        self.index = {api: i for i, api in enumerate(self.apis)}
        self.family_of = np.asarray(family_of, dtype=np.int64)
        self.family_names = list(family_names)
        n, families = len(self.apis), len(self.family_names)
        migrating = rng.random(families) < c.migrating_share
        boosts = rng.uniform(c.migration_boost_min, c.migration_boost_max, size=families)
        self.family_boost = np.where(migrating, boosts, 0.0)
        self.family_delay = rng.integers(0, c.max_burst_delay + 1, size=families) * c.checkpoint_interval
        self.level = rng.normal(0.0, c.popularity_spread, size=n)
        self.base_level = self.level.copy()
        spread = c.integration_spread
        # Mean 1; the same draws and numbers as exp(rng.normal(-spread**2 / 2, spread, n)).
        self._integration_noise = rng.standard_normal(n)
        self.integrations = np.exp(-spread * spread / 2 + spread * self._integration_noise)
        self._content_set = np.zeros(n, dtype=bool)
        self.burst = np.zeros(n)
        self.burst_at = np.zeros(n, dtype=np.int64)
        self.scheduled: list[tuple[int, int, float]] = []  # (start, endpoint, size), not started yet
        self.jumps: list[list[Any]] = []
        self.bursts: list[list[Any]] = []
        self.snapshots: list[Mapping[str, Any] | None] = [None] * n
        self.last_touched: list[tuple[str, str | None] | None] = [None] * n

    def show(self, t: int, api: str, snapshot: Mapping[str, Any], breaking: bool) -> int:
        """Step ``t`` shows ``snapshot`` of ``api`` (after a breaking change or not): its traffic."""
        i = self.index[api]
        if not self._content_set[i]:
            self._content_set[i] = True
            rho = self.c.integration_content
            if rho > 0:  # fixed at its first show, from the parameters it has then
                spread, params = self.c.integration_spread, snapshot.get("params") or ()
                z = rho * content_score(params) + np.sqrt(1.0 - rho * rho) * self._integration_noise[i]
                self.integrations[i] = np.exp(-spread * spread / 2 + spread * z)
        change = touched(self.snapshots[i], snapshot)
        if change is not None:
            self.last_touched[i] = change
        self.snapshots[i] = snapshot
        if breaking:
            self._burst(t, i, change, snapshot)
        return int(self.rng.poisson(self.c.traffic_scale * self.integrations[i]))

    def _burst(self, t: int, i: int, change: tuple[str, str | None] | None, snapshot: Mapping[str, Any]) -> None:
        family = self.family_of[i]
        spread = self.c.burst_spread
        rho = self.c.burst_content
        # Drawn at every breaking change, so that the draws do not depend on which families migrate.
        if rho > 0:
            touched_param = change is not None and change[0] in ("has_param", "required") and change[1] is not None
            z = content_score([change[1]] if touched_param else snapshot.get("params") or (), BURST_WORD_WEIGHTS)
            draw = rho * z + np.sqrt(1.0 - rho * rho) * self.rng.standard_normal()
            size = float(self.family_boost[family] * np.exp(-spread * spread / 2 + spread * draw))
        else:  # the draws of the streams made before the knob, number for number
            size = float(self.family_boost[family] * np.exp(self.rng.normal(-spread * spread / 2, spread)))
        if size > 0:
            start = t + int(self.family_delay[family])
            self.scheduled.append((start, i, size))
            self.bursts.append([t, i, round(size, 6), start])

    def weights(self, t: int) -> np.ndarray:
        if self.scheduled:
            waiting = []
            for start, i, size in self.scheduled:
                if start <= t:
                    self.burst[i], self.burst_at[i] = size, start
                else:
                    waiting.append((start, i, size))
            self.scheduled = waiting
        decay = np.exp2(-(t - self.burst_at) / self.c.migration_half_life)
        return np.exp(self.level) + self.integrations * self.burst * decay

    def checkpoint(self, t: int) -> list[list[Any]]:
        """The queries asked at checkpoint step ``t``, ``[api, fact, argument, answer]`` each, about
        endpoints shown before ``t``; then the levels jump."""
        weights = self.weights(t)
        shown = np.fromiter((s is not None for s in self.snapshots), dtype=bool, count=len(self.snapshots))
        weights = np.where(shown, weights, 0.0)
        asked = []
        if weights.sum() > 0:
            for i in self.rng.choice(len(weights), size=self.c.queries_per_checkpoint, p=weights / weights.sum()):
                snapshot = self.snapshots[i]
                fact, argument = self._fact(i, snapshot)
                asked.append([self.apis[i], fact, argument, answer_of(snapshot, fact, argument)])
        jump_prob = self.c.popularity_jump_prob
        if self.jump_ramp:
            jump_prob = min(1.0, jump_prob + self.jump_ramp * self.checkpoints_done)
        self.checkpoints_done += 1
        jumping = np.flatnonzero(self.rng.random(len(self.level)) < jump_prob)
        if jumping.size:
            fresh = self.rng.normal(0.0, self.c.popularity_spread, size=jumping.size)
            self.level[jumping] = fresh
            self.jumps.extend([t, int(i), round(float(x), 6)] for i, x in zip(jumping, fresh, strict=True))
        return asked

    def current_jump_prob(self) -> float:
        """The chance each endpoint's level jumps after the next checkpoint."""
        return min(1.0, self.c.popularity_jump_prob + self.jump_ramp * self.checkpoints_done)

    def forget_history(self) -> None:
        """Drop the logs of jumps and bursts (``hidden``'s ``popularity_jumps`` and
        ``migration_boosts``): a stream without an end reads them as they are stamped."""
        self.jumps.clear()
        self.bursts.clear()

    def _fact(self, i: int, snapshot: Mapping[str, Any]) -> tuple[str, str | None]:
        c, rng = self.c, self.rng
        if rng.random() < c.recent_fact_prob and self.last_touched[i] is not None:
            return self.last_touched[i]
        if rng.random() < c.version_fact_prob:
            return "version", None
        v = rng.random()
        params = snapshot.get("params") or []
        if v < 0.15 or not params:
            return ("deprecated", None) if v < 0.1 else ("removed", None)
        param = params[int(rng.integers(len(params)))]
        return ("has_param", param) if v < 0.6 else ("required", param)

    def hidden(self, checkpoints: Sequence[int]) -> dict[str, Any]:
        """What the causal privileged baseline may read (stamped entries as of their step), with
        the checkpoint schedule (``checkpoints``: a fixed rule, not a secret of the future)."""
        return {
            "checkpoint_steps": list(checkpoints),
            "queries_per_checkpoint": self.c.queries_per_checkpoint,
            "process": {name: getattr(self.c, name) for name in ProcessKnobs.__annotations__
                        if not at_later_default(name, getattr(self.c, name))},
            "burst_families": [[name, float(boost), int(delay)] for name, boost, delay
                               in zip(self.family_names, self.family_boost, self.family_delay, strict=True)],
            "endpoint_families": self.family_of.tolist(),
            "endpoints": self.apis,
            "integrations": [round(float(x), 6) for x in self.integrations],
            "migration_boosts": self.bursts,
            "migration_half_life": self.c.migration_half_life,
            "popularity_jumps": self.jumps,
            "popularity_levels": [round(float(x), 6) for x in self.base_level],
        }
