"""The ``contract`` change model: breaking vs cosmetic drift, reverts, renames with guides.

The paper's change model (``generator.py``) makes every drift critical and raises the
version in the ``api`` string, so "write when an endpoint's version rises" solves it. Here
every change raises the version too, but only a *breaking* change of the endpoint's contract
is critical, and only if it is still in force at the end of the stream.

An endpoint's snapshot::

    {"api": "api.v4.endpoint_3", "deprecated": false, "params": ["card_token", "email_limit", "page_scope"],
     "required": ["email_limit"], "version": 4}

With ``warmup`` (on in every contract regime) the stream opens with a *warm-up*: its first
``api_pool`` steps show each endpoint's starting snapshot once, in a random order, before
anything changes. Warm-up steps are never critical and have utility 0 (``UTILITY_WARMUP``), so
they are unscored: a policy loses nothing by skipping them, and a WRITE there is a non-critical
write like any other; ``labels["warmup_steps"]`` is their number. After the warm-up every
change to a snapshot comes at an endpoint seen before (a renamed endpoint is shown under its
new name before it changes again), so comparing with what the stream showed can classify it;
a rename shows as its guide, critical whatever came before. Without it (``warmup=False``; the
contract regimes had none before package 0.5.0) some changes come at an endpoint's first
sighting, and no policy can tell them from the stream.

A snapshot seen for the first time carries no trace of its history. Parameter names are
random word pairs and both lists are sorted, so nothing tells when a parameter was added or
which one disappeared. Endpoints start at versions 1..``FIRST_VERSION_MAX``, so a version
does not tell whether the endpoint just changed. With ``initially_deprecated`` an endpoint
starts deprecated with that probability, so a deprecated endpoint may or may not have just
been deprecated.

A change (probability ``drift_prob``, ``burst_drift_prob`` inside bursts) is breaking with
probability ``breaking_prob``; its kind is drawn uniformly among those that apply:

========================  ====================================================  ========
kind                      what changes                                          class
========================  ====================================================  ========
``remove_param``          one parameter disappears (never the last one)         breaking
``require_param``         an optional parameter becomes required                breaking
``deprecate``             the endpoint is marked deprecated                     breaking
``rename``                the endpoint moves to a new name (``renames=True``);  breaking
                          the step shows the migration guide
                          ``{"old_api", "new_api", "deadline", "notes"}``
``add_param``             a new optional parameter                              cosmetic
``relax_param``           a required parameter becomes optional                 cosmetic
========================  ====================================================  ========

A breaking change and a cosmetic one look alike on their own: both raise the version and
change the parameter lists. Telling them apart needs the endpoint's previous snapshot,
which a policy has only if it kept it, in memory or in its own state.

Reverts (``revert_prob``): a ``remove_param`` / ``require_param`` / ``deprecate`` change at
``t`` is rolled back with this probability ``d ~ U{1..revert_window}`` steps later: the
stream then shows the endpoint with its previous contract and a higher version. Until then
the endpoint does not change. A change whose revert arrives within the episode is not
critical (the end state does not carry it); one whose revert would come after the last
step is. The revert itself only restores, so it is cosmetic. Other changes can undo a
change too: a ``require_param`` whose parameter is later relaxed or removed is not in force
at the end either, so it is not critical (``undone_changes``).

Critical steps: breaking changes still in force at the end, and rename guides. Utilities:
``UTILITY_DRIFT`` (``UTILITY_BURST_DRIFT`` in a burst) for those, ``UTILITY_COSMETIC`` for a
cosmetic change, a revert, a reverted or undone change, 1 for an unchanged snapshot, 0.5 for an
exact repeat of the previous step, ``doc_utility`` for a documentation section, 0 for a
warm-up step.
Documentation sections (``doc_prob``, ``doc_min_bytes``..``doc_max_bytes``) are never
critical; a section shown again has new content (a ``doc_edit``, cosmetic).

Labels add to the paper's: ``change_kinds`` (``[step, kind]`` of every change in step order, reverts and doc edits
included; pairs, not an object, so that a JSONL round trip keeps the steps ``int``),
``cosmetic_changes``, ``revert_steps`` and ``reverted_changes`` (aligned: the change that
each revert rolled back), ``undone_changes``, ``rename_steps`` and ``warmup_steps``;
``breaking_changes`` lists the breaking changes in force at the end (the critical steps).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .utility_scale import (
    UTILITY_BURST_DRIFT,
    UTILITY_COSMETIC,
    UTILITY_DRIFT,
    UTILITY_ORDINARY,
    UTILITY_REPEAT,
    UTILITY_WARMUP,
)

if TYPE_CHECKING:  # for annotations only: the generator imports this module, not the reverse
    from .paper import GeneratorConfig

BREAKING_KINDS = ("remove_param", "require_param", "deprecate", "rename")
COSMETIC_KINDS = ("add_param", "relax_param")
REVERTIBLE_KINDS = ("remove_param", "require_param", "deprecate")
# Endpoints start at a version drawn from 1..FIRST_VERSION_MAX, as a crawl finds real ones:
# were they all to start at 1, a first sighting at version 2 would betray a change just made.
FIRST_VERSION_MAX = 5


# Parameter names are word pairs drawn at random, and snapshots list parameters sorted: a
# name or a position says nothing about when the parameter appeared, so a snapshot seen for
# the first time does not betray which parameters were removed, added or made required.
_PARAM_WORDS = (
    "account address amount balance card charge city code country coupon currency customer date "
    "description discount email event expand filter invoice item key label limit locale metadata "
    "method mode name note number order owner page phone plan price product quantity reason "
    "reference region scope source status tax token type url"
).split()


# Every word pair's name, at ``first * len(_PARAM_WORDS) + second``.
_PAIR_NAMES = [f"{a}_{b}" for a in _PARAM_WORDS for b in _PARAM_WORDS]
# An endpoint that has taken this many names numbers the next ones (``_ParamNames.new``).
NAMES_BEFORE_NUMBERING = len(_PAIR_NAMES) // 2


def _draw_pairs(rng: np.random.Generator, pairs: int) -> np.ndarray:
    """The next ``pairs`` word pairs of a name stream, as ``_PAIR_NAMES`` indices."""
    words = rng.integers(0, len(_PARAM_WORDS), size=(pairs, 2))
    return words[:, 0] * len(_PARAM_WORDS) + words[:, 1]


class _NameDraws:
    """The name stream's word pairs, drawn in blocks where the count is known. numpy's bounded
    integers take the bit generator's 32-bit words in order, so ``integers(0, n, size=2)``
    called k times draws what ``integers(0, n, size=2 * k)`` draws once: a block is the same
    names, made without a NumPy call per name (``block=False`` draws pair by pair, the literal
    reference the tests compare with)."""

    __slots__ = ("rng", "block", "pairs", "at")

    def __init__(self, rng: np.random.Generator, block: bool = True) -> None:
        self.rng = rng
        self.block = block
        self.pairs: list[int] = []  # drawn pairs not used yet, from ``at`` on, as _PAIR_NAMES indices
        self.at = 0

    def _draw(self, pairs: int) -> list[int]:
        return _draw_pairs(self.rng, pairs).tolist()

    def reserve(self, pairs: int) -> None:
        """Draw ``pairs`` more pairs now. Only as many as are certain to be used, unless nothing
        else draws from the stream afterwards: a draw ahead moves every later draw."""
        if self.block and pairs > 0:
            self.pairs, self.at = self.pairs[self.at:] + self._draw(pairs), 0

    def name(self) -> str:
        if self.at >= len(self.pairs):
            self.pairs, self.at = self._draw(1), 0
        self.at += 1
        return _PAIR_NAMES[self.pairs[self.at - 1]]

    def drawn(self, count: int) -> list[str]:
        """The names of the next ``count`` pairs already drawn (fewer if fewer are), not used up."""
        return [_PAIR_NAMES[k] for k in self.pairs[self.at:self.at + count]]


class _ParamNames:
    """Fresh parameter names for one endpoint, never repeated within it."""

    __slots__ = ("draws", "taken")

    def __init__(self, draws: _NameDraws) -> None:
        self.draws = draws
        self.taken: set[str] = set()

    def take(self, count: int) -> list[str]:
        """``count`` fresh names, as ``count`` calls of ``new`` make them: in one go when the
        drawn pairs are all new and the pairs do not run short."""
        names = self.draws.drawn(count)
        if (len(names) == count and len(set(names)) == count and self.taken.isdisjoint(names)
                and len(self.taken) + count <= NAMES_BEFORE_NUMBERING):
            self.draws.at += count
            self.taken.update(names)
            return names
        return [self.new() for _ in range(count)]

    def new(self) -> str:
        while True:
            name = self.draws.name()
            if len(self.taken) >= NAMES_BEFORE_NUMBERING:  # the pairs run short: number them instead
                name = f"{name}_{len(self.taken)}"
            if name not in self.taken:
                self.taken.add(name)
                return name


class _Endpoint:
    __slots__ = (
        "name", "version", "params", "required", "deprecated", "param_names", "renames", "frozen_until", "shown"
    )

    def __init__(
        self, index: int, version: int, n_params: int, n_required: int, deprecated: bool, names: _ParamNames
    ) -> None:
        self.name = f"endpoint_{index}"
        self.version = version
        self.param_names = names
        self.params = names.take(n_params)
        self.required = self.params[:n_required]
        self.deprecated = deprecated
        self.renames = 0
        self.frozen_until = -1  # a revert is pending until this step
        self.shown = False  # its current name's snapshot has been shown (the warm-up's rule)

    def api(self) -> str:
        return f"api.v{self.version}.{self.name}"

    def contract(self) -> tuple[list[str], list[str], bool]:
        return list(self.params), list(self.required), self.deprecated

    def snapshot(self) -> dict[str, Any]:
        return {
            "api": self.api(),
            "deprecated": self.deprecated,
            "params": sorted(self.params),
            "required": sorted(self.required),
            "version": self.version,
        }


def _optional(e: _Endpoint) -> list[str]:
    required = set(e.required)  # a set: endpoints may have thousands of parameters
    return [p for p in e.params if p not in required]


def _applicable(e: _Endpoint, breaking: bool, renames: bool) -> list[str]:
    if breaking:
        kinds = []
        if len(e.params) > 1:
            kinds.append("remove_param")
        if _optional(e):
            kinds.append("require_param")
        if not e.deprecated:
            kinds.append("deprecate")
        if renames:
            kinds.append("rename")
        return kinds
    kinds = ["add_param"]
    if e.required:
        kinds.append("relax_param")
    return kinds


def _contract_draws(c: GeneratorConfig, rng: np.random.Generator, block_draws: bool = True) -> tuple[Any, ...]:
    """An episode's draws up to its names, in the generator's order: per endpoint its number of
    parameters and of required ones; per step seven uniforms (repeat, drift, class, kind, which
    parameter, revert, doc) as rows, the drawn endpoint and a revert's delay; then the name
    stream (its own, drawn last, so the draws above keep their order) after it drew each
    endpoint's first version and initial deprecated flag, and those two. The generator plays
    them. ``block_draws=False``: the same draws one NumPy call at a time."""
    T = c.length
    n_params = rng.integers(c.min_params, c.max_params + 1, size=c.api_pool)
    # One bound per endpoint: an array of bounds draws what a call per bound draws, in order.
    n_required = (rng.integers(0, n_params + 1) if block_draws
                  else np.array([int(rng.integers(0, n + 1)) for n in n_params.tolist()], dtype=np.int64))
    uniforms = rng.random((7, T))
    endpoint_draw = rng.integers(0, c.api_pool, size=T)
    revert_delay = rng.integers(1, c.revert_window + 1, size=T)
    name_rng = np.random.default_rng(int(rng.integers(2**63)))
    first_versions = name_rng.integers(1, FIRST_VERSION_MAX + 1, size=c.api_pool)
    initially_deprecated = name_rng.random(c.api_pool) < c.initially_deprecated
    return n_params, n_required, uniforms, endpoint_draw, revert_delay, name_rng, first_versions, initially_deprecated


def generate_contract_steps(
    c: GeneratorConfig,
    rng: np.random.Generator,
    text_rng: np.random.Generator,
    text: Callable[[np.random.Generator, int], str],
    date: Callable[[int], str],
    block_draws: bool = True,
) -> tuple[list[Any], np.ndarray, dict[str, Any]]:
    """The observations, utilities and labels of one ``contract`` episode (see the module docstring).

    ``text(rng, n)`` and ``date(t)`` are the paper generator's filler-text and date helpers.
    ``block_draws=False`` makes the same draws one NumPy call at a time (the tests' reference).
    """
    T = c.length
    draws = _contract_draws(c, rng, block_draws)
    n_params, n_required, uniforms, endpoint_draw, revert_delay, name_rng = draws[:6]
    u_repeat, u_drift, u_class, u_kind, u_which, u_revert, u_doc = uniforms
    first_versions, initially_deprecated = draws[6].tolist(), draws[7].tolist()
    names = _NameDraws(name_rng, block_draws)
    names.reserve(int(n_params.sum()))  # a pair at least per starting parameter
    endpoints = [
        _Endpoint(i, first_versions[i], int(n_params[i]), int(n_required[i]), initially_deprecated[i],
                  _ParamNames(names))
        for i in range(c.api_pool)
    ]
    snapshots: list[dict[str, Any] | None] = [None] * c.api_pool
    # step -> (endpoint, contract to restore, the change's step)
    pending_reverts: dict[int, tuple[int, tuple[list[str], list[str], bool], int]] = {}

    observations: list[Any] = []
    utility = np.empty(T, dtype=np.float64)
    change_kinds: dict[int, str] = {}
    breaking: list[int] = []
    reverted: list[int] = []
    revert_steps: list[int] = []
    renames: list[int] = []
    requirements: list[tuple[int, int, str]] = []  # (step, endpoint, parameter) of each require_param
    doc_sections: set[str] = set()
    prev_obs: Any = None
    prev_endpoint: int | None = None

    # The warm-up takes the first api_pool steps; the stream after it reads the same per-step
    # draws at the same indices as without it.
    warmup = c.api_pool if c.warmup else 0
    if warmup:
        for t, i in enumerate(name_rng.permutation(c.api_pool).tolist()):
            prev_obs = snapshots[i] = endpoints[i].snapshot()
            endpoints[i].shown = True
            observations.append(prev_obs)
            utility[t] = UTILITY_WARMUP
            prev_endpoint = i
    # From here on the name stream only names added parameters, so drawing ahead moves no other
    # draw; a quarter of the steps is more names than a stream adds (any more are drawn singly).
    names.reserve(T // 4)

    for t in range(warmup, T):
        in_burst = c.bursts and (t % c.burst_interval) < c.burst_len
        change_value = UTILITY_BURST_DRIFT if in_burst else UTILITY_DRIFT
        if t in pending_reverts:
            i, (params, required, deprecated), changed_at = pending_reverts.pop(t)
            e = endpoints[i]
            e.version += 1
            e.params, e.required, e.deprecated = params, required, deprecated
            obs = snapshots[i] = e.snapshot()
            reverted.append(changed_at)
            revert_steps.append(t)
            change_kinds[t] = "revert"
            utility[changed_at] = UTILITY_COSMETIC  # no longer in force at the end
            utility[t] = UTILITY_COSMETIC
            prev_endpoint = i
        elif c.doc_prob > 0 and u_doc[t] < c.doc_prob:
            i = int(endpoint_draw[t])
            size = int(text_rng.integers(c.doc_min_bytes, c.doc_max_bytes + 1))
            section = f"endpoint_{i}/docs"
            obs = {"content": text(text_rng, size), "last_updated": date(t), "section": section}
            if section in doc_sections:
                change_kinds[t] = "doc_edit"
            doc_sections.add(section)
            utility[t] = c.doc_utility
        else:
            if c.redundancy and prev_endpoint is not None and u_repeat[t] < c.redundancy_prob:
                i = prev_endpoint
            else:
                i = int(endpoint_draw[t])
            e = endpoints[i]
            drift = u_drift[t] < (c.burst_drift_prob if in_burst else c.drift_prob) and t > e.frozen_until
            # With a warm-up, a renamed endpoint is shown under its new name before it changes again.
            drift = drift and (e.shown or not warmup)
            e.shown = True
            kind = None
            if drift:
                is_breaking = bool(u_class[t] < c.breaking_prob)
                kinds = _applicable(e, is_breaking, c.renames)
                # A deprecated one-parameter endpoint with nothing optional cannot break further.
                kind = kinds[int(u_kind[t] * len(kinds))] if kinds else None
            if kind is None:
                obs = snapshots[i]
                if obs is None:
                    obs = snapshots[i] = e.snapshot()
                utility[t] = UTILITY_REPEAT if obs == prev_obs else UTILITY_ORDINARY
            elif kind == "rename":
                old_api = e.api()
                e.renames += 1
                e.name = f"endpoint_{i}_r{e.renames}"
                e.shown = False
                e.version += 1
                snapshots[i] = e.snapshot()
                size = int(text_rng.integers(c.guide_min_bytes, c.guide_max_bytes + 1))
                obs = {"deadline": date(t + 90), "new_api": e.api(), "notes": text(text_rng, size), "old_api": old_api}
                change_kinds[t] = kind
                renames.append(t)
                breaking.append(t)
                utility[t] = change_value
            else:
                before = e.contract()
                if kind == "remove_param":
                    victim = e.params[int(u_which[t] * len(e.params))]
                    e.params = [p for p in e.params if p != victim]
                    e.required = [p for p in e.required if p != victim]
                elif kind == "require_param":
                    optional = _optional(e)
                    made_required = optional[int(u_which[t] * len(optional))]
                    e.required = [*e.required, made_required]
                    requirements.append((t, i, made_required))
                elif kind == "deprecate":
                    e.deprecated = True
                elif kind == "add_param":
                    e.params = [*e.params, e.param_names.new()]
                else:  # relax_param
                    victim = e.required[int(u_which[t] * len(e.required))]
                    e.required = [p for p in e.required if p != victim]
                e.version += 1
                obs = snapshots[i] = e.snapshot()
                change_kinds[t] = kind
                if kind in BREAKING_KINDS:
                    breaking.append(t)
                    utility[t] = change_value
                    if kind in REVERTIBLE_KINDS and u_revert[t] < c.revert_prob:
                        at = t + int(revert_delay[t])
                        while at in pending_reverts:  # one revert per step
                            at += 1
                        e.frozen_until = at
                        if at < T:
                            pending_reverts[at] = (i, before, t)
                else:
                    utility[t] = UTILITY_COSMETIC
            prev_endpoint = i
        observations.append(obs)
        prev_obs = obs

    reverted_set = set(reverted)
    # A requirement is in force at the end only if its parameter is required then and no later
    # requirement of the same parameter replaced it (after a relax in between).
    in_force: dict[tuple[int, str], int] = {}
    for t, i, param in requirements:
        if t not in reverted_set and param in endpoints[i].required:
            in_force[i, param] = t  # requirements come in step order: the last one stays
    undone = [t for t, i, param in requirements if t not in reverted_set and in_force.get((i, param)) != t]
    utility[undone] = UTILITY_COSMETIC
    dropped = reverted_set.union(undone)
    critical = [t for t in breaking if t not in dropped]
    labels = {
        "breaking_changes": critical,
        "change_kinds": [[t, k] for t, k in sorted(change_kinds.items())],
        "cosmetic_changes": [t for t, k in sorted(change_kinds.items()) if k in COSMETIC_KINDS],
        "critical_steps": critical,
        "deprecated_apis": len({o["api"] for o in observations if isinstance(o, dict) and o.get("deprecated")}),
        "rename_steps": renames,
        "revert_steps": revert_steps,
        "reverted_changes": reverted,
        "total_drift_events": len(critical),
        "undone_changes": undone,
    }
    if warmup:  # only then: episodes without a warm-up stay byte for byte what they were
        labels["warmup_steps"] = warmup
    return observations, utility, labels
