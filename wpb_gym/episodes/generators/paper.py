"""Synthetic drift regimes (paper §3, Table 1): streams of API snapshots with labelled drift.

A pool of ``api_pool`` endpoints, each with a version, a parameter list and a deprecated
flag. Every step shows one endpoint's current snapshot (spec §1.3)::

    {"api": "api.v3.endpoint_5", "deprecated": false, "params": ["p5_0", "p5_2", "p5_6"], "version": 3}

At a step, with probability ``drift_prob`` (``burst_drift_prob`` inside a burst window) the
endpoint *drifts* before it is shown: its version rises by one (the ``api`` string carries
it), one parameter is removed (probability ``remove_param_prob``, never the last one) or a
new one added, and the deprecated flag is redrawn (true with probability ``deprecate_prob``)
and kept until the next drift. Drift steps are the critical steps; a drift that removes a
parameter or newly deprecates the endpoint is also a breaking change.

Regimes (``REGIMES``):

* ``default`` — each step shows a uniformly drawn endpoint; drift i.i.d. at ``drift_prob``.
* ``burst_drift`` — steps with ``t % burst_interval < burst_len`` drift at ``burst_drift_prob``.
* ``redundancy`` — with probability ``redundancy_prob`` a step shows the previous step's
  endpoint again (usually with identical content).
* ``burst_redundancy`` — both.

Discriminative regimes (``change_model="contract"``, see ``contracts.py``): every
change raises the version but only breaking changes still in force at the end are critical;
64 endpoints, each shown once in a warm-up of the first 64 steps (``warmup``: unscored, it
shows every endpoint's starting state, so every later change can be classified from the
stream); priority hint with latent correlation 0.8 (``priority_correlation``).

* ``breaking`` — breaking (param removed / made required, deprecation) vs cosmetic
  (param added, requirement relaxed) changes, half each; ``drift_prob`` 0.2.
* ``reverts`` — ``breaking`` with ``drift_prob`` 0.3 and half the revertible changes rolled
  back within 1–60 steps (``revert_prob``, ``revert_window``).
* ``noisy_priority`` — ``breaking`` with ``priority_correlation`` 0.5.
* ``mixed_sizes`` — ``breaking`` plus renames whose migration guides (1–3 KB) are critical
  and documentation sections (1–5 KB, utility 1.5) at ``doc_prob`` 0.2.
* ``contract_mix`` — everything above at once (``reverts`` + ``mixed_sizes``); with
  ``length`` 1,000 or 10,000 it is the long-stream setting (env ids ``*-Long1k-*`` and
  ``*-Long10k-*``).

Utilities (hidden): a drift step is worth 6 inside a burst window and 5 elsewhere; an
ordinary step 1; a step whose observation repeats the previous step's exactly 0.5.

Privileged metadata: ``priority = clip(utility / 6, 0, 1)`` (the paper's surrogate). With
``priority_correlation = rho < 1`` it is ``Phi(rho * z + sqrt(1 - rho^2) * N(0, 1))``, where
``z`` is the episode's standardised utility and ``Phi`` the normal CDF: the latent's Pearson
correlation with utility is ``rho`` and ``Phi`` keeps its order, so a threshold on priority
is a hint, not the answer. With ``priority_noise = s > 0`` it becomes ``clip(priority +
N(0, s^2), 0, 1)``. Both draw from a random stream of their own, so the episode itself does
not change with them.

Optional content of realistic size (spec §1.3, §2.2), off by default so the paper's regimes
are reproduced: with ``doc_prob`` a step is a documentation section of 1–5 KB
(``{"section", "content", "last_updated"}``, utility ``doc_utility``, not critical); with
``migration_guides`` the step after an endpoint is deprecated is a migration guide
(``{"old_api", "new_api", "deadline", "notes"}``, listed in ``labels["migration_guide_steps"]``),
worth as much as the deprecation but not critical: R and ``total_drift_events`` count drift
events only, so F1 and drift coverage keep their meaning while the oracle values the guides.

Labels: ``critical_steps`` (drift steps), ``total_drift_events`` (their number),
``breaking_changes``, ``deprecated_apis`` (the number of distinct API versions — ``api``
strings — the episode shows as deprecated: every drift that leaves the endpoint deprecated
publishes one), ``utility_by_step``, ``max_utility`` (their sum, as in the paper's files),
``episode_id``, ``mode`` (the regime) and ``seed``.

Determinism: episode ``index`` of a set with ``seed`` draws from
``numpy.random.SeedSequence([seed, regime_key], spawn_key=(index,))`` where ``regime_key``
comes from the sha256 of the regime name, so it is the same in any process and independent
of every other (regime, seed, index).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterator

import numpy as np
from scipy import special

from ...core.checks import finite, require_int
from ...core.setting_values import MAX_LENGTH
from ...core.types import MAX_UTILITY, Episode
from . import paper_structure
from .contracts import contract_structure, generate_contract_steps
from .text import filler_text, stream_date

PRIORITY_SCALE = 6.0

_INT_LIMIT = 2**31
_DOC_TOPICS = ("overview", "authentication", "errors", "pagination", "rate-limits", "webhooks", "examples")


@dataclass(frozen=True)
class GeneratorConfig:
    """Every knob of the synthetic stream. Defaults are the paper's Table 1."""

    regime: str = "default"
    length: int = 200
    api_pool: int = 8
    drift_prob: float = 0.08
    bursts: bool = False
    burst_interval: int = 50
    burst_len: int = 8
    burst_drift_prob: float = 0.6
    redundancy: bool = False
    redundancy_prob: float = 0.7
    min_params: int = 2
    max_params: int = 6
    remove_param_prob: float = 0.5
    deprecate_prob: float = 0.3
    priority_noise: float = 0.0
    doc_prob: float = 0.0
    doc_min_bytes: int = 1024
    doc_max_bytes: int = 5120
    doc_utility: float = 1.0
    migration_guides: bool = False
    guide_min_bytes: int = 1024
    guide_max_bytes: int = 3072
    # The contract change model (contracts.py); "paper" keeps the paper's streams.
    change_model: str = "paper"
    breaking_prob: float = 0.5
    renames: bool = False
    revert_prob: float = 0.0
    revert_window: int = 30
    initially_deprecated: float = 0.0
    priority_correlation: float = 1.0
    # The contract model's warm-up (contracts.py): every endpoint's starting state first.
    warmup: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            expected = {"str": str, "int": int, "float": (int, float), "bool": bool}[f.type]
            if not isinstance(value, expected) or (f.type != "bool" and isinstance(value, bool)):
                raise ValueError(f"GeneratorConfig.{f.name}: expected {f.type}, got {value!r}")
            # Frozen sets record their config in JSON, which has no NaN or infinity; numpy's
            # generators take sizes and seeds below 2**31.
            if f.type == "float" and not finite(value):
                raise ValueError(f"GeneratorConfig.{f.name}: expected a finite number, got {value!r}")
            if f.type == "int" and not -_INT_LIMIT < value < _INT_LIMIT:
                raise ValueError(f"GeneratorConfig.{f.name}: expected an integer below 2**31 in size, got {value}")
        for name in (
            "drift_prob",
            "burst_drift_prob",
            "redundancy_prob",
            "remove_param_prob",
            "deprecate_prob",
            "doc_prob",
            "breaking_prob",
            "revert_prob",
            "initially_deprecated",
            "priority_correlation",
        ):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"GeneratorConfig.{name}: expected a probability in [0, 1], got {getattr(self, name)}")
        if self.change_model not in CHANGE_MODELS:
            raise ValueError(
                f"GeneratorConfig.change_model: expected one of {CHANGE_MODELS}, got {self.change_model!r}"
            )
        for name in (
            "length",
            "api_pool",
            "burst_interval",
            "min_params",
            "doc_min_bytes",
            "guide_min_bytes",
            "revert_window",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"GeneratorConfig.{name}: expected >= 1, got {getattr(self, name)}")
        if not 0 <= self.burst_len <= self.burst_interval:
            raise ValueError(f"GeneratorConfig.burst_len: expected 0..burst_interval, got {self.burst_len}")
        for lo, hi in (
            ("min_params", "max_params"),
            ("doc_min_bytes", "doc_max_bytes"),
            ("guide_min_bytes", "guide_max_bytes"),
        ):
            if getattr(self, hi) < getattr(self, lo):
                raise ValueError(
                    f"GeneratorConfig.{hi}: expected >= {lo} ({getattr(self, lo)}), got {getattr(self, hi)}"
                )
        self._check_size()
        if self.warmup and self.change_model != "contract":
            raise ValueError("GeneratorConfig.warmup: only the contract change model has a warm-up")
        if self.warmup and self.length <= self.api_pool:
            raise ValueError(
                f"GeneratorConfig.length: regime {self.regime!r} opens with a warm-up that shows each of its "
                f"{self.api_pool} endpoints (api_pool) once, so expected more than {self.api_pool} steps, "
                f"got {self.length} (warmup=False turns the warm-up off)"
            )
        if self.priority_noise < 0 or self.doc_utility < 0:
            raise ValueError("GeneratorConfig.priority_noise and doc_utility must be >= 0")
        if self.doc_utility > MAX_UTILITY:
            raise ValueError(f"GeneratorConfig.doc_utility: expected at most {MAX_UTILITY:g} (the most a step may be "
                             f"worth: beyond it the oracle's sums are no longer exact), got {self.doc_utility!r}")

    def _check_size(self) -> None:
        # Named before anything is drawn: past these an episode (or the arrays it is drawn
        # from) no longer fits in memory, and numpy would try the allocation and fail.
        for name, ceiling in SIZE_CEILINGS.items():
            if getattr(self, name) > ceiling:
                raise ValueError(f"GeneratorConfig.{name}: expected at most {ceiling:,}, got {getattr(self, name):,}")
        texts = [("doc_max_bytes", self.doc_prob > 0), ("guide_max_bytes", self.migration_guides)]
        products = [("api_pool", "max_params", True), ("length", "max_params", True)]
        products += [("length", name, used) for name, used in texts]
        for a, b, used in products:
            ceiling = PRODUCT_CEILINGS[a, b]
            if used and getattr(self, a) * getattr(self, b) > ceiling:
                raise ValueError(
                    f"GeneratorConfig.{a} x {b}: expected at most {ceiling:,} together, got "
                    f"{getattr(self, a):,} x {getattr(self, b):,} = {getattr(self, a) * getattr(self, b):,}"
                )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GeneratorConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown generator option(s) {unknown}; known: {sorted(known)}")
        return cls(**data)


CHANGE_MODELS = ("paper", "contract")

# The largest episode the generator makes (the ceilings a config is checked against before
# anything is drawn). A million steps of the default regime take about 0.5 GB; an endpoint's
# parameter lists and every changed copy of them are held for the whole episode, so the
# parameters count against both the pool and the length; a documentation section or migration
# guide is text of up to its max_bytes, possibly at every step.
SIZE_CEILINGS: dict[str, int] = {
    "length": MAX_LENGTH,
    "api_pool": 1_000_000,
    "max_params": 1_000_000,
    "doc_max_bytes": 1 << 20,
    "guide_max_bytes": 1 << 20,
}
PRODUCT_CEILINGS: dict[tuple[str, str], int] = {
    ("api_pool", "max_params"): 1 << 24,
    ("length", "max_params"): 1 << 26,
    ("length", "doc_max_bytes"): 1 << 33,
    ("length", "guide_max_bytes"): 1 << 33,
}

# The contract regimes' shared settings: 64 endpoints, each shown once in a warm-up (so that
# every change comes at an endpoint seen before and can be classified from the stream), a
# tenth of them deprecated from the start, and a priority hint whose latent has correlation
# 0.8 with utility.
_CONTRACT = {
    "change_model": "contract",
    "api_pool": 64,
    "drift_prob": 0.2,
    "initially_deprecated": 0.1,
    "priority_correlation": 0.8,
    "warmup": True,
}

REGIMES: dict[str, dict[str, Any]] = {
    # The paper's four (Table 1).
    "default": {},
    "burst_drift": {"bursts": True},
    "redundancy": {"redundancy": True},
    "burst_redundancy": {"bursts": True, "redundancy": True},
    # Discriminative regimes (contracts.py).
    "breaking": dict(_CONTRACT),
    "reverts": {**_CONTRACT, "drift_prob": 0.3, "revert_prob": 0.5, "revert_window": 60},
    "noisy_priority": {**_CONTRACT, "priority_correlation": 0.5},
    "mixed_sizes": {**_CONTRACT, "renames": True, "doc_prob": 0.2, "doc_utility": 1.5},
    "contract_mix": {
        **_CONTRACT,
        "drift_prob": 0.3,
        "revert_prob": 0.5,
        "revert_window": 60,
        "renames": True,
        "doc_prob": 0.2,
        "doc_utility": 1.5,
    },
}
PAPER_REGIMES = ("default", "burst_drift", "redundancy", "burst_redundancy")
CONTRACT_REGIMES = ("breaking", "reverts", "noisy_priority", "mixed_sizes", "contract_mix")


def make_config(regime: str = "default", **overrides: Any) -> GeneratorConfig:
    """The named regime's configuration with ``overrides`` applied (any ``GeneratorConfig`` field)."""
    if regime not in REGIMES:
        raise ValueError(f"unknown regime {regime!r}; known regimes: {sorted(REGIMES)}")
    return GeneratorConfig.from_dict({"regime": regime, **REGIMES[regime], **overrides})


def episode_seed(regime: str, seed: int, index: int) -> np.random.SeedSequence:
    return np.random.SeedSequence(list(_entropy(regime, seed)), spawn_key=(index,))


def _entropy(regime: str, seed: int) -> tuple[int, int]:
    # The regime name is part of the entropy so that the regimes of one set draw independent
    # streams (otherwise default and redundancy would share their drift schedule).
    return seed, _regime_key(regime)


@functools.lru_cache(maxsize=256)
def _regime_key(regime: str) -> int:
    return int.from_bytes(hashlib.sha256(regime.encode("utf-8")).digest()[:8], "little")


def _episode_stream(regime: str, seed: int, index: int, child: int) -> np.random.SeedSequence:
    """``episode_seed(regime, seed, index).spawn(3)[child]``, without building the parent and
    its other children (a reset needs one stream of three in the paper's regimes)."""
    return np.random.SeedSequence(list(_entropy(regime, seed)), spawn_key=(index, child))


def generate_episode(config: GeneratorConfig, seed: int, index: int = 0, **compiled: Any) -> Episode:
    """Episode ``index`` of the set ``(config, seed)``; see the module docstring. ``compiled``: a
    contract regime's ``take_names`` and ``play`` (``contract_structure``'s, compiled)."""
    seed, index = require_int(seed, "seed"), require_int(index, "index")
    c = config
    # The three streams of episode_seed(...).spawn(3): structure, priority noise, text.
    rng = _structure_rng(c, seed, index)
    if c.change_model == "contract":
        text_rng = np.random.default_rng(_episode_stream(c.regime, seed, index, 2))
        steps_obs, utility, labels = generate_contract_steps(c, rng, text_rng, filler_text, stream_date, **compiled)
    else:
        # Only documentation sections and migration guides draw text: no generator without them.
        text_rng = (
            np.random.default_rng(_episode_stream(c.regime, seed, index, 2))
            if c.doc_prob > 0 or c.migration_guides
            else None
        )
        steps_obs, utility, labels = _paper_steps(c, rng, text_rng)

    priority = episode_priorities(c, seed, index, utility)
    mode = c.regime
    # Steps are made when something reads episode.steps; an environment reset reads the columns.
    metadata = [{"mode": mode, "priority": p} for p in priority.tolist()]
    labels.update(
        {
            "episode_id": index,
            "max_utility": float(utility.sum()),
            "mode": c.regime,
            "seed": seed,
            "utility_by_step": dict(enumerate(utility.tolist())),
        }
    )
    episode = Episode.from_columns(steps_obs, metadata, dict(sorted(labels.items())))
    # The array the cached ``utilities`` property would rebuild from utility_by_step.
    utility.setflags(write=False)
    episode.__dict__["utilities"] = utility
    return episode


def episode_priorities(c: GeneratorConfig, seed: int, index: int, utility: np.ndarray) -> np.ndarray:
    """The ``priority`` of each step of episode ``index`` of ``(c, seed)`` whose utilities are ``utility``."""
    if c.priority_correlation < 1.0 or c.priority_noise > 0:
        noise_ss = _episode_stream(c.regime, seed, index, 1)
    if c.priority_correlation < 1.0:
        # A child stream: priority_noise keeps drawing from noise_ss itself, as it always has.
        priority = correlated_priority(utility, c.priority_correlation, np.random.default_rng(noise_ss.spawn(1)[0]))
    else:
        priority = utility / PRIORITY_SCALE
    if c.priority_noise > 0:
        priority = priority + np.random.default_rng(noise_ss).normal(0.0, c.priority_noise, size=len(utility))
    return np.clip(priority, 0.0, 1.0)  # a doc_utility above 6 must not leave [0, 1]


def correlated_priority(utility: np.ndarray, rho: float, rng: np.random.Generator) -> np.ndarray:
    """``Phi(rho * z(u) + sqrt(1 - rho^2) * N(0, 1))``: a hint whose latent has correlation ``rho`` with utility."""
    spread = float(utility.std())
    z = (utility - utility.mean()) / spread if spread > 0 else np.zeros_like(utility)
    latent = rho * z + np.sqrt(1.0 - rho * rho) * rng.standard_normal(utility.shape[0])
    return special.ndtr(latent)


def paper_draws(c: GeneratorConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every structural draw of an episode of the paper's change model, made up front in a fixed
    order (so options that change how a step is used, docs and guides, leave the draws of other
    steps where they were): each endpoint's starting number of parameters; per step the six
    uniforms (repeat, drift, kind, which parameter, deprecated, doc) as rows; per step the drawn
    endpoint. ``paper_structure.play`` plays them, in ``_paper_steps`` as Python and in the vector
    env's core compiled."""
    n_params = rng.integers(c.min_params, c.max_params + 1, size=c.api_pool)
    uniforms = rng.random((6, c.length))
    endpoints = rng.integers(0, c.api_pool, size=c.length)
    return n_params, uniforms, endpoints


def structure_draws(c: GeneratorConfig, seed: int, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``paper_draws`` of episode ``index`` of ``(c, seed)``, from the stream ``generate_episode`` gives it."""
    return paper_draws(c, _structure_rng(c, seed, index))


def contract_episode_structure(c: GeneratorConfig, seed: int, index: int, **compiled: Any) -> Any:
    """``contracts.contract_structure`` of episode ``index`` of ``(c, seed)`` (a contract regime's),
    from the stream ``generate_episode`` gives it; ``compiled``: its ``take_names`` and ``play``."""
    return contract_structure(c, _structure_rng(c, seed, index), True, **compiled)


def _structure_rng(c: GeneratorConfig, seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng(_episode_stream(c.regime, seed, index, 0))


def _paper_steps(c: GeneratorConfig, rng: np.random.Generator, text_rng: np.random.Generator | None):
    """The observations, utilities and labels of one episode of the paper's change model: its
    structure (``paper_structure.play``) rendered as observations, text drawn in step order."""
    n_params, uniforms, endpoints = paper_draws(c, rng)
    s = paper_structure.play(n_params, uniforms, endpoints, paper_structure.dynamics(c))
    endpoint, version, deprecated = s.endpoint.tolist(), s.version.tolist(), s.deprecated.tolist()
    starts, numbers = s.param_start.tolist(), s.param_numbers.tolist()
    # One object per snapshot, shared by the steps that show it: consumers that key work on the
    # observation object (pricing) do it once per state.
    snapshots = [
        {
            "api": f"api.v{v}.endpoint_{i}",
            "deprecated": d,
            "params": [f"p{i}_{k}" for k in numbers[a:b]],
            "version": v,
        }
        for i, v, d, a, b in zip(endpoint, version, deprecated, starts, starts[1:])
    ]
    content_of = s.content_of.tolist()
    critical = np.flatnonzero(s.critical)
    labels: dict[str, Any] = {
        "breaking_changes": np.flatnonzero(s.breaking).tolist(),
        "critical_steps": critical.tolist(),
        # Every drift that leaves its endpoint deprecated publishes a deprecated api string.
        "deprecated_apis": int(np.count_nonzero(s.deprecated[s.content_of[critical]])),
        "total_drift_events": len(critical),
    }
    if c.migration_guides:
        labels["migration_guide_steps"] = np.flatnonzero(s.kind == paper_structure.GUIDE).tolist()
    if text_rng is None:
        return [snapshots[k] for k in content_of], s.utility, labels
    steps_obs: list[Any] = []
    for t, (kind, k) in enumerate(zip(s.kind.tolist(), content_of)):
        if kind == paper_structure.SNAPSHOT:
            obs = snapshots[k]
        elif kind == paper_structure.DOC:
            size = int(text_rng.integers(c.doc_min_bytes, c.doc_max_bytes + 1))
            topic = _DOC_TOPICS[int(text_rng.integers(len(_DOC_TOPICS)))]
            obs = {
                "content": filler_text(text_rng, size),
                "last_updated": stream_date(t),
                "section": f"endpoint_{int(endpoints[t])}/{topic}",
            }
        else:  # the step after a drift that deprecated snapshot k's endpoint
            obs = {
                "deadline": stream_date(t - 1 + 90),
                "new_api": f"api.v{version[k] + 1}.endpoint_{endpoint[k]}",
                "notes": filler_text(text_rng, int(text_rng.integers(c.guide_min_bytes, c.guide_max_bytes + 1))),
                "old_api": snapshots[k]["api"],
            }
        steps_obs.append(obs)
    return steps_obs, s.utility, labels


def generate_episodes(config: GeneratorConfig, seed: int, n: int, start: int = 0) -> Iterator[Episode]:
    """Episodes ``start .. start+n-1`` of the set ``(config, seed)``, lazily."""
    for index in range(start, start + n):
        yield generate_episode(config, seed, index)
