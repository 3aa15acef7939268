"""Generated episodes of the paper's change model, compiled from their draws without being made.

Such an episode without text (no documentation sections, no migration guides: the paper's four
regimes) is a function of three arrays of draws (``paper.structure_draws``) and its priorities.
``compile_drawn`` runs the generator's own loop (``paper_structure.play``, compiled) on the
draws and writes the arrays ``episode_arrays`` would make of the generated episode
(``describe_episode``, then ``compile_episode``), with no observation dict, JSON text or
description in between: every observation is an endpoint snapshot
``{"api": "api.v<V>.endpoint_<i>", "deprecated": <bool>, "params": [<names>], "version": <V>}``,
so its JSON length and its fields follow from (endpoint, version, deprecated, parameter list).

Ids are this module's own, as ``episode_arrays`` leaves them free (they are compared within one
episode only): a field's value id is equal exactly when Python's ``==`` is (ints by value, so
``True`` and version 1 share one, as they do there), a parameter's id is its endpoint and
number, and a content's equality id is unique. Everything else (families, apis, contracts and
parameter sets numbered in first-shown order, version ranks) is numbered as there. The
differential tests compare the two, ids renamed, and play both.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ...core.accounting import HEADER_BYTES, INDEX_BYTES, json_len
from ...core.kind_budgets import KINDS
from ...core.tracks import PRIVILEGED
from ...episodes.generators import paper_structure
from ...episodes.generators.paper import GeneratorConfig, episode_priorities, structure_draws
from ...episodes.sources import EpisodeRecipe
from . import layout as L
from .compile_cache import cached
from .episode_arrays import float_array, float_sections

# A parameter's id is endpoint * stride + number (int32); a regime whose ids would not fit is
# played from the made episode.
_MAX_PARAMETER_IDS = 2**24
_MAX_STATIC = 2**31


def drawn_compilable(recipe: Any) -> bool:
    """Whether ``compile_drawn`` plays this episode: a generated one of the paper's change model
    without text, whose parameter ids fit. Its utilities are then all halves (0.5, 1, 5, 6), which
    ``drawn_batches.end_drawn`` relies on to score it in half units."""
    c = recipe.config if isinstance(recipe, EpisodeRecipe) else None
    return (isinstance(c, GeneratorConfig) and c.change_model == "paper" and c.doc_prob == 0 and not c.migration_guides
            and c.api_pool * (c.max_params + c.length + 1) <= _MAX_PARAMETER_IDS)


class DrawnLabels:
    """A drawn episode's labels as a made episode has them (``metrics.metrics_of_labels``): its
    length, critical steps, per-step utilities and number of drift events; and its WRITE costs,
    for U*(B). The core scores drawn episodes on their arrays (``drawn_batches.end_drawn``); the
    labels are what the tests compare with the made episode's, and what
    ``benchmarks/episode_preparation.py`` finds U*(B) from."""

    __slots__ = ("critical_steps", "utilities", "total_drift_events", "costs")

    def __init__(self, critical_steps: tuple[int, ...], utilities: np.ndarray, costs: np.ndarray) -> None:
        self.critical_steps = critical_steps
        self.utilities = utilities
        self.total_drift_events = len(critical_steps)
        self.costs = costs

    def __len__(self) -> int:
        return len(self.utilities)


def compile_drawn(recipe: EpisodeRecipe, track: str, reward_fn: Any, budget: int, limits: Any = None):
    """``(static, floats, state)`` of the recipe's episode on ``track`` and its ``DrawnLabels``,
    ``reward_fn`` started on it (under ``limits``, a ``StoreLimits``, if given: it then knows
    U*(B) at once); None when the arrays are too large for int32."""
    c = recipe.config
    T = c.length
    n_params, uniforms, endpoints = structure_draws(c, recipe.seed, recipe.index)
    if track != PRIVILEGED:
        # Play and arrays in one compiled call: the metadata is the same text at every step.
        compiled = unprivileged_arrays(n_params, uniforms, endpoints, *unprivileged_settings(c))
        priorities = None
    else:
        structure = compiled_play(n_params, uniforms, endpoints, paper_structure.dynamics(c))
        priorities = episode_priorities(c, recipe.seed, recipe.index, structure.utility)
        metadata = metadata_lengths(c.regime, priorities, T)
        compiled = _compile(structure, metadata, c.max_params + c.length + 1, HEADER_BYTES + INDEX_BYTES)
    static, floats, state_size, utility, costs, critical = compiled
    return started_arrays(static, floats, state_size, utility, costs, critical, priorities, reward_fn, budget, limits)


def started_arrays(static, floats, state_size, utility, costs, critical, priorities, reward_fn, budget, limits=None):
    """A drawn episode's ``(static, floats, state)`` and ``DrawnLabels`` from its compiled arrays
    (None for an empty ``static``: too large for int32), ``reward_fn`` started on it and its
    floats completed with its priorities (``priorities``: the privileged track's) and oracle."""
    if not len(static):
        return None
    T = len(utility)
    critical_steps = tuple(np.flatnonzero(critical).tolist())
    utility.setflags(write=False)
    if not limits:
        reward_fn.start_labels(T, critical_steps, utility, costs, budget)
    else:  # U*(B) under the limits, now: the class search at the episode's end counts bytes alone
        kinds = limits.kinds_at(budget)
        at = int(static[L.H_STATIC + L.KIND])
        of_steps = [KINDS[k] for k in static[at:at + T].tolist()] if kinds else None
        reward_fn.start_labels(T, critical_steps, utility, costs, budget, (of_steps, kinds) if kinds else None,
                               limits.write_time)
        reward_fn.oracle_utility()
    if priorities is not None or reward_fn.oracle_prefix is not None or reward_fn.known_oracle is not None:
        # A priority as the table reads it: clipped to [0, 1], with -0.0 read as 0.0.
        clipped = None if priorities is None else np.where(priorities > 0, np.minimum(priorities, 1.0), 0.0)
        floats = float_array(utility, clipped, floats[deprecated_section(T)], None, reward_fn)
    return (static, floats, np.zeros(state_size, dtype=np.int32)), DrawnLabels(critical_steps, utility, costs)


def unprivileged_settings(c: Any) -> tuple[Any, ...]:
    """``unprivileged_arrays``'s arguments after the draws, for episodes of config ``c``."""
    return c.max_params, c.length, paper_structure.dynamics(c), regime_metadata(c.regime), HEADER_BYTES + INDEX_BYTES


def deprecated_section(T: int) -> slice:
    """Where the per-step deprecated flags sit in an episode's floats."""
    start = L.N_FLOATS + 1 + 2 * T
    return slice(start, start + T)


@functools.lru_cache(maxsize=64)
def regime_metadata(regime: str) -> np.ndarray:
    return np.array([json_len({"mode": regime})], dtype=np.int64)


def metadata_lengths(regime: str, priorities: np.ndarray | None, T: int) -> np.ndarray:
    """The JSON length of each step's visible metadata: ``{"mode": regime}`` (one length for
    all), and its priority on the privileged track (one text per distinct float; by bits, as
    -0.0 prints apart from 0.0)."""
    if priorities is None:
        return regime_metadata(regime)
    bits, inverse = np.unique(priorities.view(np.int64), return_inverse=True)
    lengths = [json_len({"mode": regime, "priority": p}) for p in bits.view(np.float64).tolist()]
    return np.asarray(lengths, dtype=np.int64)[inverse.reshape(T)]


# The generator's own loop, compiled: the paper model's rules are stated once, in the generator.
compiled_play = cached()(paper_structure.play)

state_sizes = cached()(L.state_sizes)


# ``_compile`` and ``unprivileged_arrays`` are inlined into their compiled callers: each function numba
# compiles on its own adds about a second to the first run's compilation.
@cached(inline="always")
def _compile(structure, metadata, stride, entry_bytes):
    """``(static, floats, state size, utility, costs, critical)`` of an episode's ``Structure``
    (``metadata`` as ``_static`` takes it), its floats without priorities or any oracle;
    an empty ``static`` when the arrays are too large for int32. The state is left to the caller
    to make (the arenas give it room without an array of its own)."""
    content_of, utility, critical = structure.content_of, structure.utility, structure.critical
    endpoint, param_start, param_numbers = structure.endpoint, structure.param_start, structure.param_numbers
    T = content_of.shape[0]
    n = endpoint.shape[0]
    # At most: the header, 8 sections per step, 24 entries per content and its own parameter set;
    # and a memory with as many families as contents.
    if (L.HEADER_SIZE + 8 * T + 25 * n + 2 + param_numbers.shape[0] >= _MAX_STATIC
            or sum(state_sizes(T, n, n)) >= _MAX_STATIC):
        return np.zeros(0, dtype=np.int32), np.zeros(0), 0, utility, np.zeros(0, dtype=np.int64), critical
    static, costs, step_deprecated = _static(content_of, critical, metadata, endpoint, structure.version,
                                             structure.deprecated, param_start, param_numbers, stride, entry_bytes)
    position = 0
    for k, size in enumerate(state_sizes(T, np.int64(static[L.H_FAMILIES]), n)):
        static[L.H_STATE + k] = position
        position += size
    none = np.zeros(0, dtype=np.float64)
    floats = float_sections(utility, none, step_deprecated, none, none, np.nan)
    return static, floats, position, utility, costs, critical


@cached(inline="always")
def unprivileged_arrays(n_params, uniforms, endpoints, max_params, T, dynamics, metadata, entry_bytes):
    """``_compile`` of the episode of these draws (``paper.structure_draws``) and ``dynamics``
    (``paper_structure.Dynamics``): an episode off the privileged track, made ready in one call."""
    return _compile(compiled_play(n_params, uniforms, endpoints, dynamics), metadata, max_params + T + 1, entry_bytes)


@cached(inline="always")
def static_sizes(T, n, n_fields, n_masks, mask_bits):
    """Each static section's size (``layout``): T per step, one per content (and an offset
    more), ``n_fields`` per field section, the parameter sets' offsets and members."""
    sizes = np.zeros(L.N_STATIC, dtype=np.int64)
    for name in (L.COST, L.KIND, L.FAMILY, L.API, L.CONTENT, L.PREVIOUS, L.CRITICAL, L.RETURNS):
        sizes[name] = T
    for name in (L.VERSION_KIND, L.VERSION_RANK, L.PARAMS, L.REQUIRED, L.CONTRACT, L.IS_DICT, L.EQUALITY):
        sizes[name] = n
    sizes[L.FIELD_OFFSETS] = n + 1
    for name in (L.FIELD_KEYS, L.FIELD_VALUES, L.FIELD_LENGTHS, L.FIELD_IS_API):
        sizes[name] = n_fields
    sizes[L.MASK_OFFSETS] = n_masks + 1
    sizes[L.MASK_BITS] = mask_bits
    return sizes


@cached(inline="always")
def version_ranks(versions):
    """Per version up to the largest of ``versions`` (ints from 1), how many distinct ones of
    them are lower: its rank among the episode's versions."""
    top = versions.max()
    present = np.zeros(top + 1, dtype=np.bool_)
    for c in range(versions.shape[0]):
        present[versions[c]] = True
    rank = np.zeros(top + 1, dtype=np.int64)
    for v in range(1, top + 1):
        rank[v] = rank[v - 1] + present[v - 1]
    return rank


@cached(inline="always")
def static_array(T, n_families, n_apis, none_value, sizes):
    """An episode's static array of sections of ``sizes`` with its header filled but for the
    state's offsets, and each section's offset."""
    static = np.zeros(L.HEADER_SIZE + sizes.sum(), dtype=np.int32)
    static[L.H_LENGTH], static[L.H_FAMILIES] = T, n_families
    static[L.H_APIS], static[L.H_NONE_VALUE] = n_apis, none_value
    at = np.empty(L.N_STATIC, dtype=np.int64)
    position = L.HEADER_SIZE
    for name in range(L.N_STATIC):
        at[name] = static[L.H_STATIC + name] = position
        position += sizes[name]
    return static, at


@cached(inline="always")
def snapshot_step(static, at, t, cost, family, content, previous, critical, returns):
    """Step ``t``'s entries in the static array of an episode of endpoint snapshots only, each
    content with an api of its own (``at``: the sections' offsets)."""
    static[at[L.COST] + t] = cost
    static[at[L.KIND] + t] = L.KIND_ENDPOINT
    static[at[L.FAMILY] + t] = family
    static[at[L.API] + t] = content
    static[at[L.CONTENT] + t] = content
    static[at[L.PREVIOUS] + t] = previous
    static[at[L.CRITICAL] + t] = critical
    static[at[L.RETURNS] + t] = returns


@cached(inline="always")
def digits(n):
    count = 1
    while n >= 10:
        n //= 10
        count += 1
    return count


@cached()
def _text_lengths(endpoint, version, deprecated, param_start, param_numbers):
    """``len(json.dumps(snapshot, sort_keys=True))`` of each content: 69 characters of keys,
    quotes and separators, the version twice, the endpoint, the flag, and each parameter name
    ``"p<i>_<k>"`` with the ", " before all but the first."""
    n = endpoint.shape[0]
    lengths = np.empty(n, dtype=np.int64)
    for c in range(n):
        idigits = digits(endpoint[c])
        total = 69 + 2 * digits(version[c]) + idigits + (4 if deprecated[c] else 5)
        for j in range(param_start[c], param_start[c + 1]):
            total += 6 + idigits + digits(param_numbers[j])
        lengths[c] = total - 2
    return lengths


@cached()
def _first_parameter_sets(endpoint, param_start, param_numbers):
    """For each content, the first content of its endpoint with the same parameter list (itself
    if none is earlier), through an open-addressing table keyed by a hash of the numbers alone
    (endpoints that start alike share it, and are told apart when compared). A list is always in
    ascending order of its numbers (the next number is appended, removals keep the order), so
    equal lists are equal sets."""
    n = endpoint.shape[0]
    size = 1
    while size < 2 * n:
        size *= 2
    table = np.full(size, -1, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    for c in range(n):
        a0, a1 = param_start[c], param_start[c + 1]
        h = np.int64(a1 - a0)
        for j in range(a0, a1):
            h = h * 1000003 + param_numbers[j]
        slot = h & (size - 1)
        first[c] = c
        while table[slot] >= 0:
            other = table[slot]
            b0, b1 = param_start[other], param_start[other + 1]
            if endpoint[other] == endpoint[c] and b1 - b0 == a1 - a0 and np.all(
                    param_numbers[b0:b1] == param_numbers[a0:a1]):
                first[c] = other
                break
            slot = (slot + 1) & (size - 1)
        if first[c] == c:
            table[slot] = c
    return first


@cached()
def _static(content_of, critical, metadata, endpoint, version, deprecated, param_start, param_numbers, stride,
            entry_bytes):
    """The static array ``compile_episode`` makes of the episode (header's state offsets left to
    the caller), from an episode's ``Structure``; and per step its WRITE cost (its JSON text with its
    metadata's, ``metadata`` one length or one per step, and an item's ``entry_bytes``) and
    deprecated flag."""
    T = content_of.shape[0]
    n = endpoint.shape[0]
    text = _text_lengths(endpoint, version, deprecated, param_start, param_numbers)
    costs = np.empty(T, dtype=np.int64)
    step_deprecated = np.empty(T, dtype=np.float64)
    for t in range(T):
        costs[t] = text[content_of[t]] + metadata[t if metadata.shape[0] > 1 else 0] + entry_bytes
        step_deprecated[t] = 1.0 if deprecated[content_of[t]] else 0.0
    # Families (endpoints) numbered as first shown; apis are the contents themselves (each
    # snapshot has a version of its own, so an "api" string of its own).
    family_of_endpoint = np.full(endpoint.max() + 1, -1, dtype=np.int64)
    n_families = 0
    for c in range(n):
        if family_of_endpoint[endpoint[c]] < 0:
            family_of_endpoint[endpoint[c]] = n_families
            n_families += 1
    # Parameter sets (and lists, the same: see _first_parameter_sets): equal ones share an id,
    # numbered as first shown.
    first_set = _first_parameter_sets(endpoint, param_start, param_numbers)
    mask_of = np.empty(n, dtype=np.int64)
    mask_rep = np.empty(n, dtype=np.int64)  # a mask id's first content
    n_masks = 0
    mask_bits = 0
    for c in range(n):
        if first_set[c] == c:
            mask_of[c] = n_masks
            mask_rep[n_masks] = c
            n_masks += 1
            mask_bits += param_start[c + 1] - param_start[c]
        else:
            mask_of[c] = mask_of[first_set[c]]
    # Contracts: (parameter set, no required list, deprecated, not removed), numbered as first shown.
    contract_of = np.empty(n, dtype=np.int64)
    contract_ids = np.full(2 * n_masks, -1, dtype=np.int64)
    n_contracts = 0
    for c in range(n):
        key = 2 * mask_of[c] + (1 if deprecated[c] else 0)
        if contract_ids[key] < 0:
            contract_ids[key] = n_contracts
            n_contracts += 1
        contract_of[c] = contract_ids[key]
    rank = version_ranks(version)
    # Value ids: ints by value (deprecated 0 / 1, versions), then the api strings, parameter lists and None.
    api_base = rank.shape[0]
    list_base = api_base + n
    none_value = list_base + n
    static, at = static_array(T, n_families, n, none_value, static_sizes(T, n, 4 * n, n_masks, mask_bits))

    last_of_family = np.full(n_families, -1, dtype=np.int64)
    # The literal path asks whether an earlier step of the family showed the contract; a
    # contract's parameter names carry its endpoint, so its first step anywhere is that step.
    first_of_contract = np.full(n_contracts, -1, dtype=np.int64)
    for t in range(T):
        c = content_of[t]
        family = family_of_endpoint[endpoint[c]]
        previous = last_of_family[family]
        contract = contract_of[c]
        returns = (previous >= 0 and contract != contract_of[content_of[previous]]
                   and first_of_contract[contract] >= 0)
        snapshot_step(static, at, t, costs[t], family, c, previous, critical[t], returns)
        if first_of_contract[contract] < 0:
            first_of_contract[contract] = t
        last_of_family[family] = t
    for c in range(n):
        static[at[L.VERSION_KIND] + c] = L.VERSION_NUMBER
        static[at[L.VERSION_RANK] + c] = rank[version[c]]
        static[at[L.PARAMS] + c] = mask_of[c]
        static[at[L.REQUIRED] + c] = -1
        static[at[L.CONTRACT] + c] = contract_of[c]
        static[at[L.IS_DICT] + c] = 1
        static[at[L.EQUALITY] + c] = -2 - c
        static[at[L.FIELD_OFFSETS] + c + 1] = 4 * (c + 1)
        # The fields in key order (api, deprecated, params, version): each length is the key's
        # text and ": " plus the value's JSON text.
        idigits = digits(endpoint[c])
        names = 0
        for j in range(param_start[c], param_start[c + 1]):
            names += 4 + idigits + digits(param_numbers[j])
        f = at[L.FIELD_KEYS] + 4 * c
        v = at[L.FIELD_VALUES] + 4 * c
        g = at[L.FIELD_LENGTHS] + 4 * c
        for k in range(4):
            static[f + k] = k
        static[v], static[v + 1], static[v + 2], static[v + 3] = (
            api_base + c, 1 if deprecated[c] else 0, list_base + first_set[c], version[c])
        static[g] = 7 + 17 + digits(version[c]) + idigits
        static[g + 1] = 14 + (4 if deprecated[c] else 5)
        static[g + 2] = 10 + names + 2 * (param_start[c + 1] - param_start[c])
        static[g + 3] = 11 + digits(version[c])
        static[at[L.FIELD_IS_API] + 4 * c] = 1
    bits = at[L.MASK_BITS]
    for m in range(n_masks):
        c = mask_rep[m]
        for j in range(param_start[c], param_start[c + 1]):
            static[bits] = endpoint[c] * stride + param_numbers[j]
            bits += 1
        static[at[L.MASK_OFFSETS] + m + 1] = bits - at[L.MASK_BITS]
    return static, costs, step_deprecated
