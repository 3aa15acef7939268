"""The query tier: contract queries answered from memory, asked by hidden, drifting traffic.

The paper's regimes and the contract regimes score the memory left at the end against
critical steps. Here memory is *used*: at checkpoints during the stream, and at its end,
hidden queries ask about the current contract of endpoints (does endpoint E have parameter p,
is p required, is E deprecated or removed, which version is it at), and a fixed reader
(``wpb_gym.core.queries``) answers each from memory alone. The headline score is the
fraction answered right (``wpb_gym.scoring.queries``).

The stream
----------
``endpoints`` endpoints in ``families`` families. An endpoint's snapshot::

    {"api": "api.billing.endpoint_17", "deprecated": false, "params": ["card_token", "email_limit"],
     "removed": false, "required": ["email_limit"], "summary": "the request returns ...", "version": 4}

``api`` names the endpoint and never changes, so MERGE can join an endpoint's snapshots; a
share ``summary_prob`` of endpoints carry a ``summary`` of ``summary_min_bytes`` ..
``summary_max_bytes`` (log-uniform) that never changes, so snapshots run from about 200 B to
32 KB. The stream opens with a warm-up that shows every endpoint's starting snapshot once, in
a random order. After it the stream is a change feed: each step shows one endpoint just
after it changed, except every ``checkpoint_interval``-th step and the last step, which are
checkpoints. An endpoint is shown only when it changes, so a state a policy did not store
when it was shown cannot be stored later: an endpoint whose state memory lacks is answered
wrongly until it changes again.

Which endpoint changes is drawn with its family's change weight. A change is breaking with
probability ``breaking_prob`` (a parameter removed or made required, the endpoint deprecated,
or, four times rarer, removed) and cosmetic otherwise (a parameter added, a requirement
relaxed). A breaking change may be rolled back (a *revert*: the previous contract again, at a
higher version) 1..``revert_window`` steps later; the endpoint does not change in between.

Checkpoint steps show ``{"checkpoint": k, "queries": [[api, fact, argument], ...]}``: the
``queries_per_checkpoint`` queries just asked, which memory answered *as it was when the
checkpoint step arrived* (before any action at that step). The answers are in the labels
only. A query asks, with probability ``recent_fact_prob``, about what its endpoint's latest
change touched (a parameter, the deprecation or the removal); otherwise the version (with
probability ``version_fact_prob``), the deprecated or removed flag, or about a parameter of
the contract.

Hidden structure
----------------
Each query draws its endpoint with probability proportional to its *weight*,
``exp(level) + integrations * burst``:

* ``level``, the endpoint's everyday popularity, is drawn from ``N(0, popularity_spread**2)``
  and after every checkpoint jumps to a fresh draw with probability ``popularity_jump_prob``.
* ``integrations``, how many clients call it (log-normal, mean 1, spread
  ``integration_spread``), shows in the ``traffic`` metadata of every step that shows the
  endpoint: Poisson with mean ``traffic_scale * integrations``.
* ``burst``: a breaking change of an endpoint in a *migrating* family (a share
  ``migrating_share`` of families) sets off migration traffic of size ``family boost * e``,
  the family's boost uniform in ``migration_boost_min`` .. ``migration_boost_max`` and
  ``e`` log-normal (mean 1, spread ``burst_spread``), which starts ``delay`` steps later (the
  family's, a multiple of ``checkpoint_interval`` up to ``max_burst_delay`` of them) and then
  halves every ``migration_half_life`` steps.

Families also differ in how often their endpoints change (log-normal change weights, spread
``change_spread``) and in volatility: a share ``volatile_share`` revert a breaking change
with probability ``volatile_revert_prob``, the others with ``stable_revert_prob``. All of it
is in ``labels["hidden"]``, which only the causal privileged baseline reads, and only as of
the current step. What any policy can observe of it: the traffic, the queries each checkpoint
shows, and each family's history (how often its changes are reverted, whether and when its
breaking changes draw queries).

Without an end
--------------
``QueryStream`` makes the stream one step at a time; ``generate_query_episode`` runs it for
``length`` steps (``horizon``), and ``query_stream(config, seed, index)`` without a horizon
runs the same hidden process for as long as it is read, with a checkpoint every
``checkpoint_interval`` steps (the endless streams of ``QueryTierEnv(endless=True)``). The two
agree step for step up to the first breaking change whose revert would fall past the fixed
episode's end (``QueryStream.dropped_revert_at``), and up to that episode's final checkpoint.
An endless stream keeps no log; what grows as it runs is the endpoints' contracts themselves,
since changes add parameters a little more often than they remove them.

Labels: ``queries`` (``[t, api, fact, argument, answer]`` of every query, in order),
``checkpoint_steps``, ``hidden``, ``change_kinds``, ``revert_steps`` with the aligned
``reverted_changes``, ``warmup_steps``. For F1, ``critical_steps`` are the steps that show the
final state of each endpoint the last checkpoint asks about (what the end-of-stream queries
need memory to hold at the end); ``utility_by_step`` gives each endpoint-showing step the
number of queries its state is current for.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterator, NamedTuple

import numpy as np

from ...core.checks import finite, require_int
from ...core.setting_values import MAX_LENGTH
from ...core.types import Episode
from .query_process import PARAM_WORDS, QueryProcess, at_later_default
from .text import filler_text

BREAKING_KINDS = ("remove_param", "require_param", "deprecate", "remove_endpoint")
COSMETIC_KINDS = ("add_param", "relax_param", "restore_endpoint")
# How much likelier the other breaking kinds are than an endpoint's removal.
_REMOVAL_WEIGHT = 0.25
FIRST_VERSION_MAX = 5
FAMILY_NAMES = (
    "billing charges customers invoices payments refunds subscriptions accounts messages calls "
    "numbers webhooks files reports tokens events disputes payouts prices products coupons quotes "
    "sessions transfers"
).split()
PARAM_NAMES = tuple(f"{a}_{b}" for a in PARAM_WORDS for b in PARAM_WORDS)
_INT_LIMIT = 2**31


@dataclass(frozen=True)
class QueryTierConfig:
    """Every knob of a query-tier stream; the defaults are the ``queries_medium`` tier."""

    regime: str = "queries_medium"
    length: int = 7000
    endpoints: int = 2048
    families: int = 64
    checkpoint_interval: int = 100
    queries_per_checkpoint: int = 300
    min_params: int = 2
    max_params: int = 40
    summary_prob: float = 0.45
    summary_min_bytes: int = 500
    summary_max_bytes: int = 32000
    breaking_prob: float = 0.5
    change_spread: float = 0.7
    volatile_share: float = 0.5
    volatile_revert_prob: float = 0.9
    stable_revert_prob: float = 0.05
    revert_window: int = 30
    migrating_share: float = 0.4
    max_burst_delay: int = 4
    migration_boost_min: float = 50.0
    migration_boost_max: float = 10000.0
    migration_half_life: int = 100
    popularity_spread: float = 1.5
    integration_spread: float = 2.0
    burst_spread: float = 1.75
    popularity_jump_prob: float = 0.1
    traffic_scale: float = 1.0
    integration_content: float = 0.0
    burst_content: float = 0.0
    recent_fact_prob: float = 0.5
    version_fact_prob: float = 0.4

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            expected = {"str": str, "int": int, "float": (int, float)}[f.type]
            if not isinstance(value, expected) or isinstance(value, bool):
                raise ValueError(f"QueryTierConfig.{f.name}: expected {f.type}, got {value!r}")
            if f.type == "float" and not finite(value):
                raise ValueError(f"QueryTierConfig.{f.name}: expected a finite number, got {value!r}")
            if f.type == "int" and not -_INT_LIMIT < value < _INT_LIMIT:
                raise ValueError(f"QueryTierConfig.{f.name}: expected an integer below 2**31 in size, got {value}")
        for name in ("breaking_prob", "volatile_share", "volatile_revert_prob", "stable_revert_prob",
                     "migrating_share", "popularity_jump_prob", "recent_fact_prob", "version_fact_prob",
                     "summary_prob", "integration_content", "burst_content"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"QueryTierConfig.{name}: expected a probability in [0, 1], got {getattr(self, name)}")
        for name in ("endpoints", "families", "checkpoint_interval", "queries_per_checkpoint", "min_params",
                     "revert_window", "migration_half_life"):
            if getattr(self, name) < 1:
                raise ValueError(f"QueryTierConfig.{name}: expected >= 1, got {getattr(self, name)}")
        if self.checkpoint_interval < 2:
            raise ValueError(f"QueryTierConfig.checkpoint_interval: expected >= 2 (a checkpoint and a change at "
                             f"least), got {self.checkpoint_interval}")
        if self.families > self.endpoints:
            raise ValueError(f"QueryTierConfig.families: expected at most endpoints ({self.endpoints}), "
                             f"got {self.families}")
        if self.max_params < self.min_params:
            raise ValueError(f"QueryTierConfig.max_params: expected >= min_params ({self.min_params}), "
                             f"got {self.max_params}")
        if self.max_params > len(PARAM_NAMES) // 2:
            raise ValueError(f"QueryTierConfig.max_params: expected at most {len(PARAM_NAMES) // 2}, "
                             f"got {self.max_params}")
        if self.length < self.endpoints + 2:
            raise ValueError(f"QueryTierConfig.length: the warm-up shows each of the {self.endpoints} endpoints "
                             f"once, then at least one change and the final checkpoint, so expected at least "
                             f"{self.endpoints + 2} steps, got {self.length}")
        for name in ("change_spread", "popularity_spread", "integration_spread", "burst_spread",
                     "traffic_scale", "migration_boost_min", "max_burst_delay", "summary_min_bytes",
                     "summary_max_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"QueryTierConfig.{name}: expected >= 0, got {getattr(self, name)}")
        # Ceilings where NumPy's draws stop being numbers (exp of a spread's draw overflows,
        # Poisson's mean passes 1e18) or an episode no longer fits in memory.
        for name, ceiling in _CEILINGS.items():
            if getattr(self, name) > ceiling:
                most = f"{ceiling:,}" if isinstance(ceiling, int) else f"{ceiling:g}"
                raise ValueError(f"QueryTierConfig.{name}: expected at most {most}, got {getattr(self, name)}")
        if self.endpoints * self.max_params > MAX_PARAM_CELLS:
            raise ValueError(f"QueryTierConfig.endpoints x max_params: expected at most {MAX_PARAM_CELLS:,} together, "
                             f"got {self.endpoints:,} x {self.max_params:,} = {self.endpoints * self.max_params:,}")
        queries = len(range(self.endpoints + self.checkpoint_interval - 1, self.length - 1, self.checkpoint_interval))
        queries = (queries + 1) * self.queries_per_checkpoint
        if queries > MAX_QUERIES:
            raise ValueError(f"QueryTierConfig.queries_per_checkpoint: {self.queries_per_checkpoint:,} at each of the "
                             f"checkpoints of length {self.length:,} and checkpoint_interval {self.checkpoint_interval:,} "
                             f"make {queries:,} queries; expected at most {MAX_QUERIES:,}")
        if self.summary_max_bytes < self.summary_min_bytes:
            raise ValueError(f"QueryTierConfig.summary_max_bytes: expected >= summary_min_bytes "
                             f"({self.summary_min_bytes}), got {self.summary_max_bytes}")
        if self.migration_boost_max < self.migration_boost_min:
            raise ValueError(f"QueryTierConfig.migration_boost_max: expected >= migration_boost_min "
                             f"({self.migration_boost_min}), got {self.migration_boost_max}")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not at_later_default(k, v)}

    def checkpoints(self) -> list[int]:
        """The checkpoint steps: every ``checkpoint_interval``-th step after the warm-up, and the last."""
        first = self.endpoints + self.checkpoint_interval - 1
        steps = list(range(first, self.length - 1, self.checkpoint_interval))
        return [*steps, self.length - 1]


_CEILINGS: dict[str, float] = {
    "change_spread": 5.0, "popularity_spread": 5.0, "integration_spread": 5.0, "burst_spread": 5.0,
    "traffic_scale": 1000.0, "migration_boost_max": 1e9, "summary_max_bytes": 1_000_000,
    "queries_per_checkpoint": 100_000, "endpoints": 1_000_000, "length": MAX_LENGTH,
}
# Every checkpoint's queries are drawn and held, and every endpoint's parameter list: their
# counts multiply.
MAX_QUERIES = 1 << 24
MAX_PARAM_CELLS = 1 << 24

# The medium and hard tiers' traffic follows the words of the contracts (fixed weights a policy
# can learn from training episodes, not read from one stream), with bursts large and uneven
# enough that knowing which change sets off which burst is worth 0.15 and more at every budget.
_WORDS: dict[str, Any] = {"integration_content": 0.95, "burst_content": 0.95, "burst_spread": 2.25,
                          "migration_boost_max": 100_000.0}
_TIERS: dict[str, dict[str, Any]] = {
    "queries_easy": {"length": 512 + 40 * 50, "endpoints": 512, "families": 16, "checkpoint_interval": 50,
                     "burst_spread": 1.0, "migration_boost_max": 1000.0, "max_burst_delay": 1,
                     "popularity_jump_prob": 0.01, "popularity_spread": 1.0, "migrating_share": 0.5},
    "queries_medium": {**_WORDS},
    "queries_hard": {**_WORDS, "endpoints": 3072, "families": 96, "popularity_jump_prob": 0.12},
}
QUERY_REGIMES: tuple[str, ...] = tuple(_TIERS)


def query_config(regime: str = "queries_medium", **overrides: Any) -> QueryTierConfig:
    """The named tier's configuration with ``overrides`` applied (any ``QueryTierConfig`` field)."""
    if regime not in _TIERS:
        raise ValueError(f"unknown query tier {regime!r}; known: {sorted(_TIERS)}")
    known = {f.name for f in fields(QueryTierConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown query-tier option(s) {unknown}; known: {sorted(known)}")
    return QueryTierConfig(**{"regime": regime, **_TIERS[regime], **overrides})


def query_episode_seed(regime: str, seed: int, index: int) -> np.random.SeedSequence:
    key = int.from_bytes(hashlib.sha256(regime.encode("utf-8")).digest()[:8], "little")
    return np.random.SeedSequence([seed, key], spawn_key=(index,))


class _Flags(NamedTuple):
    """Every endpoint's ``removed`` flag and ``frozen_until`` step (a revert is pending until
    then; -1: none), as arrays: each change step draws its endpoint among those free and not
    removed, a comparison of whole arrays rather than a pass over thousands of endpoints."""

    removed: np.ndarray
    frozen_until: np.ndarray

    @classmethod
    def of(cls, n: int) -> _Flags:
        return cls(np.zeros(n, dtype=bool), np.full(n, -1, dtype=np.int64))


class _Endpoint:
    __slots__ = ("index", "api", "family", "version", "params", "required", "deprecated", "names", "snapshot_obj",
                 "summary", "_flags")

    def __init__(self, index: int, api: str, family: int, version: int, params: list[str], n_required: int,
                 names: list[str], flags: _Flags) -> None:
        self.index = index
        self.api = api
        self.family = family
        self.version = version
        self.params = params
        self.required = params[:n_required]
        self.deprecated = False
        self.names = names  # fresh names for added parameters, in the order they are used
        self.snapshot_obj: dict[str, Any] | None = None
        self.summary: str | None = None
        self._flags = flags

    @property
    def removed(self) -> bool:
        return bool(self._flags.removed[self.index])

    @removed.setter
    def removed(self, value: bool) -> None:
        self._flags.removed[self.index] = value

    @property
    def frozen_until(self) -> int:
        return int(self._flags.frozen_until[self.index])

    @frozen_until.setter
    def frozen_until(self, step: int) -> None:
        self._flags.frozen_until[self.index] = step

    def contract(self) -> tuple[list[str], list[str], bool, bool]:
        return list(self.params), list(self.required), self.deprecated, self.removed

    def restore(self, contract: tuple[list[str], list[str], bool, bool]) -> None:
        self.params, self.required, self.deprecated, self.removed = contract

    def snapshot(self) -> dict[str, Any]:
        self.snapshot_obj = {
            "api": self.api,
            "deprecated": self.deprecated,
            "params": sorted(self.params),
            "removed": self.removed,
            "required": sorted(self.required),
            "version": self.version,
        }
        if self.summary is not None:
            self.snapshot_obj["summary"] = self.summary
        return self.snapshot_obj


def _applicable(e: _Endpoint, breaking: bool) -> tuple[list[str], list[float]]:
    if breaking:
        kinds, weights = [], []
        if len(e.params) > 1:
            kinds.append("remove_param")
            weights.append(1.0)
        if len(e.required) < len(e.params):
            kinds.append("require_param")
            weights.append(1.0)
        if not e.deprecated:
            kinds.append("deprecate")
            weights.append(1.0)
        kinds.append("remove_endpoint")
        weights.append(_REMOVAL_WEIGHT)
        return kinds, weights
    kinds = ["add_param"]
    if e.required:
        kinds.append("relax_param")
    return kinds, [1.0] * len(kinds)


class StreamStep(NamedTuple):
    """One step of a ``QueryStream``: what it shows (``observation``, ``metadata``) and what the
    labels say of it: the queries a checkpoint asks (``[api, fact, argument, answer]`` each; None
    at a change step), the change a change step shows (None in the warm-up and at checkpoints),
    and for a revert the step of the change it rolls back."""

    t: int
    observation: dict[str, Any]
    metadata: dict[str, Any]
    asked: list[list[Any]] | None
    change_kind: str | None
    reverted_change: int | None


class QueryStream:
    """The query tier's stream made one step at a time (see the module docstring): iterate it.

    ``horizon`` is the stream's length: its last step is a checkpoint and a revert due after it
    is never scheduled, which is exactly the fixed-length episode. ``horizon=None`` runs the
    same hidden process without an end: checkpoints every ``checkpoint_interval`` steps
    forever. Both draw the same numbers in the same order, so the two streams of one seed are
    equal up to the first breaking change whose revert would fall past the horizon
    (``dropped_revert_at``; the fixed stream leaves that endpoint free to change again, the
    endless one freezes it until the revert), and up to the fixed stream's final checkpoint.

    Without a horizon nothing grows with the steps taken: the hidden process's logs of jumps
    and bursts are handed out with the step that made them and then dropped. ``jump_ramp``
    makes popularity jumps likelier as the stream goes on (see ``QueryProcess``).
    """

    def __init__(self, c: QueryTierConfig, stream_rng: np.random.Generator, query_rng: np.random.Generator,
                 *, horizon: int | None, jump_ramp: float = 0.0) -> None:
        rng = stream_rng
        N = c.endpoints
        if horizon is not None and horizon < N + 2:
            raise ValueError(f"horizon: expected at least endpoints + 2 = {N + 2} steps, got {horizon}")
        self.c, self.rng, self.horizon = c, rng, horizon
        family_of = np.arange(N) % c.families
        rng.shuffle(family_of)
        self.family_names = [FAMILY_NAMES[f] if f < len(FAMILY_NAMES) else f"family_{f}" for f in range(c.families)]
        self.change_weight = np.exp(rng.normal(0.0, c.change_spread, size=c.families))
        volatile = rng.random(c.families) < c.volatile_share
        self.revert_prob = np.where(volatile, c.volatile_revert_prob, c.stable_revert_prob)

        self.endpoints: list[_Endpoint] = []
        self._flags = _Flags.of(N)
        for i in range(N):
            n_params = int(np.exp(rng.uniform(np.log(c.min_params), np.log(c.max_params + 1))))
            n_params = min(max(n_params, c.min_params), c.max_params)
            # Names for its starting parameters and for the ones changes may add, never repeated.
            picks = rng.choice(len(PARAM_NAMES), size=min(len(PARAM_NAMES), 2 * c.max_params), replace=False)
            names = [PARAM_NAMES[k] for k in picks.tolist()]
            n_required = int(rng.integers(0, n_params + 1)) // 2
            self.endpoints.append(_Endpoint(i, f"api.{self.family_names[family_of[i]]}.endpoint_{i}",
                                            int(family_of[i]), int(rng.integers(1, FIRST_VERSION_MAX + 1)),
                                            names[:n_params], n_required, names[n_params:], self._flags))
        if c.summary_max_bytes > 0:
            lo, hi = max(c.summary_min_bytes, 1), c.summary_max_bytes + 1
            has_summary = rng.random(N) < c.summary_prob
            sizes = rng.uniform(np.log(lo), np.log(hi), N)
            for e, has, size in zip(self.endpoints, has_summary, sizes, strict=True):
                if has:
                    e.summary = filler_text(rng, int(np.exp(size)))
        self.index_of = {e.api: e.index for e in self.endpoints}
        self.process = QueryProcess(c, query_rng, [e.api for e in self.endpoints], family_of.tolist(),
                                    self.family_names, jump_ramp=jump_ramp)
        self._warmup: list[int] | None = rng.permutation(N).tolist()
        self._family_weights = self.change_weight[family_of]
        self._pending: dict[int, tuple[int, tuple[list[str], list[str], bool, bool], int]] = {}
        self._first_checkpoint = N + c.checkpoint_interval - 1
        self.t = 0
        self.checkpoints_done = 0
        self.dropped_revert_at: int | None = None

    def is_checkpoint(self, t: int) -> bool:
        """Whether step ``t`` is a checkpoint (a fixed schedule, known to everyone)."""
        if self.horizon is not None and t >= self.horizon - 1:
            return t == self.horizon - 1
        return t >= self._first_checkpoint and (t - self._first_checkpoint) % self.c.checkpoint_interval == 0

    def __iter__(self) -> QueryStream:
        return self

    def __next__(self) -> StreamStep:
        t = self.t
        if self.horizon is not None and t >= self.horizon:
            raise StopIteration
        self.t += 1
        c = self.c
        if t < c.endpoints:
            assert self._warmup is not None
            step = self._show(t, self.endpoints[self._warmup[t]], False, None, None)
            if t == c.endpoints - 1:
                self._warmup = None
            return step
        if self.is_checkpoint(t):
            asked = self.process.checkpoint(t)
            observation = {"checkpoint": self.checkpoints_done, "queries": [query[:3] for query in asked]}
            self.checkpoints_done += 1
            self._forget()
            return StreamStep(t, observation, {"mode": c.regime}, asked, None, None)
        rng, endpoints, pending = self.rng, self.endpoints, self._pending
        i = None if t in pending else _draw_changing(rng, self._flags, self._family_weights, t)
        breaking = False
        reverted_change = None
        if i is None:  # a revert due now, or every endpoint waits for one: the first comes now
            i, before, reverted_change = pending.pop(t if t in pending else min(pending))
            e = endpoints[i]
            e.restore(before)
            e.frozen_until = t
            e.version += 1
            kind = "revert"
        elif endpoints[i].removed:  # drawn only when every other endpoint is removed or waiting
            e = endpoints[i]
            e.removed = False
            e.version += 1
            kind = "restore_endpoint"
        else:
            e = endpoints[i]
            kinds, kind_weights = _applicable(e, bool(rng.random() < c.breaking_prob))
            p = np.asarray(kind_weights) / sum(kind_weights)
            kind = kinds[int(rng.choice(len(kinds), p=p))]
            before = e.contract()
            _apply_change(rng, e, kind)
            e.version += 1
            breaking = kind in BREAKING_KINDS
            if breaking and rng.random() < self.revert_prob[e.family]:
                at = t + int(rng.integers(1, c.revert_window + 1))
                while at in pending or self.is_checkpoint(at):
                    at += 1
                if self.horizon is None or at < self.horizon - 1:
                    e.frozen_until = at
                    pending[at] = (i, before, t)
                elif self.dropped_revert_at is None:  # a revert after the stream ends does not freeze it
                    self.dropped_revert_at = t
        step = self._show(t, e, breaking, kind, reverted_change)
        self._forget()
        return step

    def _show(self, t: int, e: _Endpoint, breaking: bool, kind: str | None, reverted_change: int | None) -> StreamStep:
        snapshot = e.snapshot()
        traffic = self.process.show(t, e.api, snapshot, breaking)
        return StreamStep(t, snapshot, {"mode": self.c.regime, "traffic": traffic}, None, kind, reverted_change)

    def _forget(self) -> None:
        # An endless stream keeps no log: what the hidden process stamped is read as it happens.
        if self.horizon is None:
            self.process.forget_history()

    def families(self) -> list[list[Any]]:
        """Each family's ``[name, change weight, revert probability]`` (part of the hidden state)."""
        return [[self.family_names[f], float(self.change_weight[f]), float(self.revert_prob[f])]
                for f in range(self.c.families)]


def generate_query_steps(c: QueryTierConfig, stream_rng: np.random.Generator,
                         query_rng: np.random.Generator) -> tuple[list[Any], list[dict], dict]:
    """The observations, metadata and labels of one query-tier episode (see the module docstring):
    the change feed draws from ``stream_rng``, the query process (``query_process``) from ``query_rng``."""
    T, N = c.length, c.endpoints
    stream = QueryStream(c, stream_rng, query_rng, horizon=T)
    observations: list[Any] = []
    metadata: list[dict[str, Any]] = []
    shows: list[list[int]] = [[] for _ in range(N)]  # the steps that show each endpoint's states
    change_kinds: list[list[Any]] = []
    revert_steps: list[int] = []
    reverted: list[int] = []
    queries: list[list[Any]] = []
    for step in stream:
        observations.append(step.observation)
        metadata.append(step.metadata)
        if step.asked is not None:
            queries.extend([step.t, *query] for query in step.asked)
            continue
        shows[stream.index_of[step.observation["api"]]].append(step.t)
        if step.change_kind is not None:
            change_kinds.append([step.t, step.change_kind])
        if step.reverted_change is not None:
            revert_steps.append(step.t)
            reverted.append(step.reverted_change)

    checkpoints = c.checkpoints()
    labels = query_labels(T, queries, shows, stream.index_of, checkpoints)
    hidden = stream.process.hidden(checkpoints)
    hidden.update({
        "config": c.to_dict(),
        "families": stream.families(),
        "revert_window": c.revert_window,
    })
    labels.update({
        "change_kinds": change_kinds,
        "checkpoint_steps": checkpoints,
        "hidden": dict(sorted(hidden.items())),
        "queries": queries,
        "revert_steps": revert_steps,
        "reverted_changes": reverted,
        "warmup_steps": N,
    })
    return observations, metadata, labels


def _draw_changing(rng: np.random.Generator, flags: _Flags, weights: np.ndarray, t: int) -> int | None:
    """An endpoint that may change at ``t``, drawn with its family's change weight (None when
    every endpoint waits for a revert)."""
    free = flags.frozen_until < t
    live = free & ~flags.removed
    if not live.any():  # every endpoint removed or waiting for a revert: the removed ones come back
        live = free
    if not live.any():
        return None
    w = np.where(live, weights, 0.0)
    return int(rng.choice(len(weights), p=w / w.sum()))


def _apply_change(rng: np.random.Generator, e: _Endpoint, kind: str) -> None:
    if kind == "remove_param":
        victim = e.params[int(rng.integers(len(e.params)))]
        e.params = [p for p in e.params if p != victim]
        e.required = [p for p in e.required if p != victim]
    elif kind == "require_param":
        required = set(e.required)
        optional = [p for p in e.params if p not in required]
        chosen = optional[int(rng.integers(len(optional)))]
        e.required = [*e.required, chosen]
    elif kind == "deprecate":
        e.deprecated = True
    elif kind == "remove_endpoint":
        e.removed = True
    elif kind == "add_param":
        name = e.names.pop() if e.names else f"param_{e.version}_{len(e.params)}"
        e.params = [*e.params, name]
    else:  # relax_param
        chosen = e.required[int(rng.integers(len(e.required)))]
        e.required = [p for p in e.required if p != chosen]


def query_labels(T: int, queries: list[list[Any]], shows: list[list[int]], index_of: dict[str, int],
                 checkpoints: list[int]) -> dict[str, Any]:
    """F1's critical steps and each step's utility: how many queries its state is current for."""
    utility = np.zeros(T)
    for t, api, _fact, _argument, _truth in queries:
        steps = shows[index_of[api]]
        current = steps[int(np.searchsorted(steps, t, side="left")) - 1]  # the latest show before t
        utility[current] += 1.0
    final = checkpoints[-1]
    asked_at_end = sorted({index_of[api] for t, api, *_ in queries if t == final})
    critical = sorted(shows[i][-1] for i in asked_at_end)
    return {
        "critical_steps": critical,
        "total_drift_events": len(critical),
        "utility_by_step": dict(enumerate(utility.tolist())),
        "max_utility": float(utility.sum()),
    }


def generate_query_episode(config: QueryTierConfig, seed: int, index: int = 0) -> Episode:
    """Episode ``index`` of the query-tier set ``(config, seed)``."""
    seed, index = require_int(seed, "seed"), require_int(index, "index")
    stream, process = query_episode_seed(config.regime, seed, index).spawn(2)
    observations, metadata, labels = generate_query_steps(config, np.random.default_rng(stream),
                                                          np.random.default_rng(process))
    labels.update({"episode_id": index, "mode": config.regime, "seed": seed})
    return Episode.from_columns(observations, metadata, dict(sorted(labels.items())))


def query_stream(config: QueryTierConfig, seed: int, index: int = 0, *, horizon: int | None = None,
                 jump_ramp: float = 0.0) -> QueryStream:
    """Episode ``index`` of the set ``(config, seed)`` as a ``QueryStream``: without a horizon,
    the endless continuation of the same hidden process (``horizon=config.length`` makes the
    steps of ``generate_query_episode``)."""
    seed, index = require_int(seed, "seed"), require_int(index, "index")
    if horizon is not None:
        horizon = require_int(horizon, "horizon", config.endpoints + 2)
    stream, process = query_episode_seed(config.regime, seed, index).spawn(2)
    return QueryStream(config, np.random.default_rng(stream), np.random.default_rng(process), horizon=horizon,
                       jump_ramp=jump_ramp)


def generate_query_episodes(config: QueryTierConfig, seed: int, n: int, start: int = 0) -> Iterator[Episode]:
    for index in range(start, start + n):
        yield generate_query_episode(config, seed, index)
