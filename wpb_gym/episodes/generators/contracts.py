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

from . import contract_structure as S

if TYPE_CHECKING:  # for annotations only: the generator imports this module, not the reverse
    from .paper import GeneratorConfig

BREAKING_KINDS = S.CHANGE_NAMES[S.REMOVE_PARAM:S.RENAME + 1]
COSMETIC_KINDS = S.CHANGE_NAMES[S.ADD_PARAM:S.RELAX_PARAM + 1]
REVERTIBLE_KINDS = S.CHANGE_NAMES[S.REMOVE_PARAM:S.DEPRECATE + 1]
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
# An endpoint that has taken this many names numbers the next ones (``contract_structure``).
NAMES_BEFORE_NUMBERING = S.NAMES_BEFORE_NUMBERING
assert len(_PAIR_NAMES) == S.PAIRS


def pair_names() -> list[str]:
    """Every word pair's name, by its index (``contract_structure``'s names are word pairs)."""
    return list(_PAIR_NAMES)


def _draw_pairs(rng: np.random.Generator, pairs: int, block: bool = True) -> np.ndarray:
    """The next ``pairs`` word pairs of a name stream, as ``_PAIR_NAMES`` indices. numpy's bounded
    integers take the bit generator's 32-bit words in order, so ``integers(0, n, size=2)`` called
    k times draws what ``integers(0, n, size=2 * k)`` draws once (``block=False`` draws pair by
    pair, the literal reference the tests compare with)."""
    if not block:
        return np.array([_draw_pairs(rng, 1)[0] for _ in range(pairs)], dtype=np.int64)
    words = rng.integers(0, len(_PARAM_WORDS), size=(pairs, 2))
    return words[:, 0] * len(_PARAM_WORDS) + words[:, 1]


def contract_draws(c: GeneratorConfig, rng: np.random.Generator, block_draws: bool = True) -> tuple[Any, ...]:
    """An episode's draws up to its names, in the generator's order: per endpoint its number of
    parameters and of required ones; per step seven uniforms (repeat, drift, class, kind, which
    parameter, revert, doc) as rows, the drawn endpoint and a revert's delay; then the name
    stream (its own, drawn last, so the draws above keep their order) after it drew each
    endpoint's first version and initial deprecated flag, and those two.
    ``block_draws=False``: the same draws one NumPy call at a time."""
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


def contract_structure(c: GeneratorConfig, rng: np.random.Generator, block_draws: bool = True,
                       take_names: Callable[..., Any] = S.take_names,
                       play: Callable[..., Any] = S.play) -> S.Structure:
    """The ``contract_structure.Structure`` of the episode whose structure stream is ``rng``:
    its draws, then the name stream's, as many as the names take (``take_names`` and ``play``:
    those of ``contract_structure``, or the same compiled)."""
    n_params, n_required, uniforms, endpoint_draw, revert_delay, name_rng, first_versions, deprecated = (
        contract_draws(c, rng, block_draws))
    # The starting names take a pair each, and one more per retry. The stream must be left where
    # their last pair leaves it, since the warm-up's order is drawn next: when names collided and
    # the pairs ran short, more are drawn ahead (twice as many each time), then the stream is
    # wound back and exactly the pairs the names took are drawn again.
    pairs = _draw_pairs(name_rng, int(n_params.sum()), block_draws)
    name_pair, name_suffix, missing, used = take_names(pairs, n_params)
    if missing:
        state, ahead = name_rng.bit_generator.state, max(int(missing), 16)
        while missing:
            name_rng.bit_generator.state = state
            more = np.concatenate([pairs, _draw_pairs(name_rng, ahead, block_draws)])
            name_pair, name_suffix, missing, used = take_names(more, n_params)
            ahead *= 2
        name_rng.bit_generator.state = state
        _draw_pairs(name_rng, used - len(pairs), block_draws)
    order = name_rng.permutation(c.api_pool) if c.warmup else np.zeros(0, dtype=np.int64)
    # From here on the name stream only names added parameters, so drawing ahead moves no other
    # draw; a quarter of the steps is more names than a stream adds (any more are drawn, and the
    # episode played again).
    dynamics = S.dynamics(c)
    added = _draw_pairs(name_rng, c.length // 4, block_draws)
    while True:
        structure = play(n_params, n_required, uniforms, endpoint_draw, revert_delay, first_versions, deprecated,
                         order, name_pair, name_suffix, added, dynamics)
        if not structure.lacking:
            return structure
        added = np.concatenate([added, _draw_pairs(name_rng, max(int(structure.lacking), c.length // 4 + 1),
                                                   block_draws)])


def generate_contract_steps(
    c: GeneratorConfig,
    rng: np.random.Generator,
    text_rng: np.random.Generator,
    text: Callable[[np.random.Generator, int], str],
    date: Callable[[int], str],
    block_draws: bool = True,
    **compiled: Any,
) -> tuple[list[Any], np.ndarray, dict[str, Any]]:
    """The observations, utilities and labels of one ``contract`` episode (see the module
    docstring): its structure (``contract_structure``) rendered as observations, text drawn in
    step order.

    ``text(rng, n)`` and ``date(t)`` are the paper generator's filler-text and date helpers.
    ``block_draws=False`` makes the same draws one NumPy call at a time (the tests' reference).
    ``compiled``: ``take_names`` and ``play``, ``contract_structure``'s compiled.
    """
    s = contract_structure(c, rng, block_draws, **compiled)
    names = [_PAIR_NAMES[p] if k < 0 else f"{_PAIR_NAMES[p]}_{k}"
             for p, k in zip(s.name_pair.tolist(), s.name_suffix.tolist(), strict=True)]
    endpoint, renames, version = s.state_endpoint.tolist(), s.state_renames.tolist(), s.state_version.tolist()
    deprecated = s.state_deprecated.tolist()
    param_start, params = s.param_start.tolist(), s.params.tolist()
    required_start, required = s.required_start.tolist(), s.required.tolist()

    def api(k: int) -> str:
        suffix = f"_r{renames[k]}" if renames[k] else ""
        return f"api.v{version[k]}.endpoint_{endpoint[k]}{suffix}"

    kinds_of, content_of = s.kind.tolist(), s.content_of.tolist()
    # One object per state shown, shared by the steps that show it: consumers that key work on
    # the observation object (pricing) do it once per state.
    snapshots = {
        k: {
            "api": api(k),
            "deprecated": deprecated[k],
            "params": sorted([names[j] for j in params[param_start[k]:param_start[k + 1]]]),
            "required": sorted([names[j] for j in required[required_start[k]:required_start[k + 1]]]),
            "version": version[k],
        }
        for k in dict.fromkeys(k for k, kind in zip(content_of, kinds_of, strict=True) if kind == S.SNAPSHOT)
    }
    if c.doc_prob == 0 and not c.renames:  # snapshots only
        observations = list(map(snapshots.__getitem__, content_of))
    else:
        observations = []
        step_endpoint, renamed_from = s.endpoint.tolist(), s.renamed_from.tolist()
        for t, (kind, k) in enumerate(zip(kinds_of, content_of, strict=True)):
            if kind == S.SNAPSHOT:
                obs = snapshots[k]
            elif kind == S.DOC:
                size = int(text_rng.integers(c.doc_min_bytes, c.doc_max_bytes + 1))
                obs = {"content": text(text_rng, size), "last_updated": date(t),
                       "section": f"endpoint_{step_endpoint[t]}/docs"}
            else:  # a rename's migration guide
                size = int(text_rng.integers(c.guide_min_bytes, c.guide_max_bytes + 1))
                obs = {"deadline": date(t + 90), "new_api": api(k), "notes": text(text_rng, size),
                       "old_api": api(renamed_from[t])}
            observations.append(obs)

    changed = np.flatnonzero(s.change >= 0)
    kinds = s.change[changed]
    critical = np.flatnonzero(s.critical).tolist()
    revert_steps = np.flatnonzero(s.change == S.REVERT)
    labels = {
        "breaking_changes": critical,
        "change_kinds": [[t, S.CHANGE_NAMES[k]] for t, k in zip(changed.tolist(), kinds.tolist(), strict=True)],
        "cosmetic_changes": changed[(kinds == S.ADD_PARAM) | (kinds == S.RELAX_PARAM)].tolist(),
        "critical_steps": critical,
        "deprecated_apis": sum(map(deprecated.__getitem__, snapshots)),
        "rename_steps": np.flatnonzero(s.change == S.RENAME).tolist(),
        "revert_steps": revert_steps.tolist(),
        "reverted_changes": s.reverted_change[revert_steps].tolist(),
        "total_drift_events": len(critical),
        "undone_changes": np.flatnonzero(s.undone).tolist(),
    }
    if c.warmup:  # only then: episodes without a warm-up stay byte for byte what they were
        labels["warmup_steps"] = c.api_pool
    return observations, s.utility, labels
