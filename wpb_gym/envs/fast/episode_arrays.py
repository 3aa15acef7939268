"""One episode, as the compiled core reads it: flat arrays built from what does not depend on memory.

The vector env's sub-env chooses the episode and its budget as a single env's reset does; the
core then reads it as the single env's ``StreamTable`` would (``describe_episode``: each distinct
observation once, through ``contents.ContentMemo``, the steps as array operations), starts the
reward function on it, and ``compile_episode`` turns both into three flat arrays per sub-env,
with the offsets of their sections in a header:

* ``static`` (int32): per timestep its cost, kind, family, api, content, the last shown step
  of its family, ``returns_to_earlier`` and the other ids the kernel compares; per distinct
  observation (content) its version rank, parameter and contract ids and its top-level
  fields; per parameter set its sorted members (the kernel derives the other
  ``*_since_seen`` features from these, ``comparisons.since_seen``);
* ``floats`` (float64): utilities, priorities, flags and the prefix oracle;
* ``state`` (int32, zeros): room for the memory the kernel keeps (linked lists of items, a
  heap of sizes, the action log), its size known from the episode.

Equality follows Python's, as the single env compares values: ``1 == 1.0 == True`` inside
lists and dicts, a missing key is ``None`` for a MERGE delta but not for ``fields_changed``.
Episodes the core does not mirror are not described (``describe_episode`` returns None: an
observation that is not plain JSON, a list or dict ``"api"``, a step whose ``t`` is not its
position) and the vector env plays them with the single env.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np

from ...core.accounting import HEADER_BYTES, INDEX_BYTES, json_text, observation_json
from ...core.compression import summary_observation
from ...core.tracks import PRIVILEGED
from ..observation.stream_table import plain_json, step_priorities, visible_metadata_lengths
from . import contents as C
from . import layout as L
from .compile_cache import cached
from .contents import ContentMemo, equality_key, first_met


class EpisodeColumns:
    """What ``describe_episode`` reads from an episode: per distinct observation (content, in
    first-shown order) its description (``contents.ContentMemo.content``), per step its content
    and the columns the table would hold."""

    __slots__ = ("length", "contents", "content_of", "costs", "kinds", "families", "n_families", "apis", "n_apis",
                 "previous", "deprecated", "removed", "priorities", "summaries")


class Summaries:
    """With compression, per step: the content of its ``summary/1`` form (``core.compression``),
    appended to the episode's contents, or why the codec refuses the step
    (``layout.NOT_COMPRESSIBLE_STEP``, ``NOTHING_TO_COMPRESS_STEP``); the compressed WRITE's bytes
    (-1 where refused, as ``compression_bounds.compressed_costs`` gives them) and content kind."""

    __slots__ = ("content", "costs", "kinds")

    def __init__(self, content: np.ndarray, costs: np.ndarray, kinds: np.ndarray) -> None:
        self.content, self.costs, self.kinds = content, costs, kinds


def describe_episode(episode: Any, track: str, memo: ContentMemo, generated: bool = False,
                     untexted: bool = False, compressing: bool = False) -> EpisodeColumns | None:
    """The columns of ``episode`` on ``track`` (``StreamTable``'s, ids renumbered per episode),
    or None when the core does not mirror it. ``generated``: made by this package's generator,
    whose observations are plain JSON without floats by construction (not checked again).
    ``untexted``: a generated episode whose texts are not met again (one with sections or guides),
    read without writing them when ``ContentMemo.without_texts`` can. ``compressing``: with each
    step's summary (``summaries``), which a MERGE into a compressed item is priced against."""
    observations, metadatas = episode.columns()
    raw = episode.__dict__.get("steps")
    T = len(observations)
    if raw is not None and any(step.t != t for t, step in enumerate(raw)):
        return None  # the store refuses to WRITE a step whose t is not the current timestep
    memo.start()
    # Work per distinct observation object (generated steps share one per endpoint state), in
    # the order they are first shown; equal texts are one content.
    object_ids = list(map(id, observations))
    first_shown = dict(zip(reversed(object_ids), range(T - 1, -1, -1), strict=True))
    objects = list(dict.fromkeys(object_ids))
    firsts = list(map(first_shown.__getitem__, objects))
    shown = list(map(observations.__getitem__, firsts))
    read = memo.without_texts(shown) if untexted and generated and raw is None and not compressing else None
    if read is not None:
        described, text_lengths, keys = read
        if None in described:
            return None
        contents_shown = first_met(keys)
        if len(contents_shown) and contents_shown[-1] != len(contents_shown) - 1:  # equal texts: one content
            kept = dict(zip(reversed(contents_shown), reversed(range(len(shown))), strict=True))
            firsts_of = list(map(kept.__getitem__, range(len(kept))))
            described = list(map(described.__getitem__, firsts_of))
            text_lengths = list(map(text_lengths.__getitem__, firsts_of))
    else:
        shown_texts = list(map(json_text, shown)) if raw is None else [observation_json(raw[t]) for t in firsts]
        if not generated and any("NaN" in text or not plain_json(obs)
                                 for text, obs in zip(shown_texts, shown, strict=True)):
            return None
        contents_shown = first_met(shown_texts)
        texts = list(dict.fromkeys(shown_texts))
        if len(texts) == len(shown):
            distinct = shown
        else:  # each content's first observation
            first_of = dict(zip(reversed(contents_shown), reversed(shown), strict=True))
            distinct = list(map(first_of.__getitem__, range(len(texts))))
        described = memo.contents(texts, distinct)
        if None in described:
            return None
        text_lengths = list(map(len, texts))
    by_object = dict(zip(objects, contents_shown, strict=True))
    content_of = np.fromiter(map(by_object.__getitem__, object_ids), dtype=np.int32, count=T)
    family_ids: dict[Any, int] = {}
    api_ids: dict[Any, int] = {}
    per_content = np.array(
        [(d[C.KIND], -1 if d[C.FAMILY_KEY] is None else family_ids.setdefault(d[C.FAMILY_KEY], len(family_ids)),
          -1 if d[C.API_KEY] is None else api_ids.setdefault(d[C.API_KEY], len(api_ids)), len_text)
         for d, len_text in zip(described, text_lengths, strict=True)], dtype=np.int64).reshape(-1, 4)
    flags = np.array([(d[C.DEPRECATED], d[C.REMOVED]) for d in described], dtype=np.float64).reshape(-1, 2)
    lengths, _ = visible_metadata_lengths(metadatas, track)
    entry_bytes = np.asarray(lengths, dtype=np.int64) + (HEADER_BYTES + INDEX_BYTES)
    ep = EpisodeColumns()
    ep.summaries = None
    if compressing:  # the texted path ran: ``texts`` and ``distinct`` are the contents'
        summarised = _summarise(memo, texts, distinct)
        if summarised is None:
            return None
        of_content, summary_lengths, more = summarised
        summary = of_content[content_of]
        refused = summary < 0
        costs = np.where(refused, -1, summary_lengths[content_of] + entry_bytes)
        kinds = np.array([d[C.KIND] for d in described] + [d[C.KIND] for d in more], dtype=np.int64)
        ep.summaries = Summaries(summary, costs, np.where(refused, 0, kinds[np.maximum(summary, 0)]))
        described = described + more  # after the originals: their ids are as without compression
    ep.length = T
    ep.contents = described
    ep.content_of = content_of
    ep.costs = per_content[content_of, 3] + entry_bytes
    ep.kinds = per_content[content_of, 0]
    ep.families = families = per_content[content_of, 1].astype(np.int32)
    ep.n_families = len(family_ids)
    ep.apis = per_content[content_of, 2].astype(np.int32)
    ep.n_apis = len(api_ids)
    # The previous step of the same family (-1: none): neighbours once the steps are grouped by family.
    order = np.argsort(families, kind="stable")
    grouped = families[order]
    same = (grouped[1:] == grouped[:-1]) & (grouped[1:] >= 0)
    ep.previous = np.full(T, -1, dtype=np.int32)
    ep.previous[order[1:][same]] = order[:-1][same]
    ep.deprecated = flags[content_of, 0]
    ep.removed = flags[content_of, 1]
    ep.priorities = step_priorities(metadatas) if track == PRIVILEGED else None
    return ep


def _summarise(memo: ContentMemo, texts: list[str],
               distinct: list[Any]) -> tuple[np.ndarray, np.ndarray, list[Any]] | None:
    """Each content's summary (``core.compression.summary_observation``): its content (one of
    ``texts`` when its text is one of theirs, else a new one, numbered after them) or why the
    codec refuses it, its JSON text's length, and the new contents' descriptions (None: one is
    not described)."""
    index = {text: c for c, text in enumerate(texts)}
    of_content = np.zeros(len(texts), dtype=np.int64)
    lengths = np.zeros(len(texts), dtype=np.int64)
    fresh_texts: list[str] = []
    fresh: list[Any] = []
    for c, obs in enumerate(distinct):
        if type(obs) is not dict:
            of_content[c] = L.NOT_COMPRESSIBLE_STEP
            continue
        summary = summary_observation(obs)
        if len(summary) == len(obs):
            of_content[c] = L.NOTHING_TO_COMPRESS_STEP
            continue
        text = json_text(summary)
        found = index.get(text)
        if found is None:
            found = index[text] = len(texts) + len(fresh)
            fresh_texts.append(text)
            fresh.append(summary)
        of_content[c] = found
        lengths[c] = len(text)
    more = memo.contents(fresh_texts, fresh) if fresh else []
    return None if None in more else (of_content, lengths, more)


def _version_codes(versions: list[Any]) -> tuple[list[int], list[int]]:
    """Each version as (kind, rank) so that ``compare_versions`` is a comparison of ints: numbers
    (not bools) and strings ranked among their own kind, anything else by identity."""
    kinds, ranks = [], []
    numbers = sorted({v for v in versions if type(v) in (int, float)})
    strings = sorted({v for v in versions if type(v) is str})
    number_rank, rank, last = {}, -1, None
    for v in numbers:
        if last is None or v > last:
            rank += 1
            last = v
        number_rank[v] = rank
    string_rank = {v: i for i, v in enumerate(strings)}
    others: dict[tuple[str, str], int] = {}
    for v in versions:
        if type(v) in (int, float):
            kinds.append(L.VERSION_NUMBER)
            ranks.append(number_rank[v])
        elif type(v) is str:
            kinds.append(L.VERSION_STRING)
            ranks.append(string_rank[v])
        else:
            kinds.append(L.VERSION_OTHER)
            ranks.append(others.setdefault((type(v).__name__, equality_key(v)), len(others)))
    return kinds, ranks


def _returns_to_earlier(families: np.ndarray, content_of: np.ndarray, previous: np.ndarray,
                        contract_of_content: np.ndarray) -> np.ndarray:
    """``returns_to_earlier`` of every step (``comparisons.seen_features``): its contract differs
    from the last shown step's of its family and some earlier step of the family showed it."""
    T = len(families)
    steps = np.arange(T)
    contract = contract_of_content[content_of]
    known = (families >= 0) & (contract >= 0)
    # (family, contract) as one key; steps without one get a key of their own.
    keys = np.where(known, families.astype(np.int64) * (len(contract_of_content) + 1) + contract, -1 - steps)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    before = np.where(previous >= 0, contract[np.maximum(previous, 0)], -1)
    return (known & (previous >= 0) & (contract != before) & (first[inverse] < steps)).astype(np.int32)


def _flat(parts: list[Any]) -> np.ndarray:
    return np.fromiter(chain.from_iterable(parts), dtype=np.int32)


def compile_episode(ep: EpisodeColumns, reward_fn: Any,
                    memo: ContentMemo) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(static, floats, state) of an episode from its columns and the reward function started
    on it (None: a cost or the arrays too large for int32)."""
    T = ep.length
    described = ep.contents
    if T and ep.costs.max() >= 2**31:
        return None  # (a compressed WRITE never costs more than a plain one)
    version_kind, version_rank = _version_codes([d[C.VERSION] for d in described])
    mask_ids: dict[tuple[int, ...], int] = {}
    contract_ids: dict[Any, int] = {}

    def mask_id(members: tuple[int, ...] | None) -> int:
        return -1 if members is None else mask_ids.setdefault(members, len(mask_ids))

    params = [mask_id(d[C.PARAMS]) for d in described]
    required = [mask_id(d[C.REQUIRED]) for d in described]
    # A contract as ``comparisons.contracts`` states it (a missing "required" is an empty one).
    contract = [-1 if d[C.PARAMS] is None else contract_ids.setdefault(
        (d[C.PARAMS], d[C.REQUIRED] or (), d[C.DEPRECATED], d[C.REMOVED]), len(contract_ids)) for d in described]
    field_offsets = np.zeros(len(described) + 1, dtype=np.int32)
    field_offsets[1:] = np.cumsum([len(d[C.FIELD_KEYS]) for d in described])
    masks = list(mask_ids)
    mask_offsets = np.zeros(len(masks) + 1, dtype=np.int32)
    mask_offsets[1:] = np.cumsum([len(m) for m in masks])
    n_families, n_apis = ep.n_families, ep.n_apis
    content_of, previous = ep.content_of, ep.previous
    sections = {
        L.COST: ep.costs,
        L.KIND: ep.kinds,
        L.FAMILY: ep.families,
        L.API: ep.apis,
        L.CONTENT: content_of,
        L.PREVIOUS: previous,
        L.CRITICAL: reward_fn.critical,
        L.RETURNS: _returns_to_earlier(ep.families, content_of, previous, np.asarray(contract, dtype=np.int64)),
        L.VERSION_KIND: version_kind,
        L.VERSION_RANK: version_rank,
        L.PARAMS: params,
        L.REQUIRED: required,
        L.CONTRACT: contract,
        L.IS_DICT: [d[C.IS_DICT] for d in described],
        L.EQUALITY: [d[C.EQUALITY] for d in described],
        L.FIELD_OFFSETS: field_offsets,
        L.FIELD_KEYS: _flat([d[C.FIELD_KEYS] for d in described]),
        L.FIELD_VALUES: _flat([d[C.FIELD_VALUES] for d in described]),
        L.FIELD_LENGTHS: _flat([d[C.FIELD_LENGTHS] for d in described]),
        L.FIELD_IS_API: _flat([d[C.FIELD_IS_API] for d in described]),
        L.MASK_OFFSETS: mask_offsets,
        L.MASK_BITS: _flat(masks),
        L.SUMMARY: _NO_STEPS if ep.summaries is None else ep.summaries.content,
        L.SUMMARY_COST: _NO_STEPS if ep.summaries is None else ep.summaries.costs,
        L.SUMMARY_KIND: _NO_STEPS if ep.summaries is None else ep.summaries.kinds,
    }
    header = np.zeros(L.HEADER_SIZE, dtype=np.int64)
    header[L.H_LENGTH] = T
    header[L.H_FAMILIES] = n_families
    header[L.H_APIS] = n_apis
    header[L.H_NONE_VALUE] = memo.none_id()
    arrays = [np.asarray(sections[name], dtype=np.int32) for name in range(L.N_STATIC)]
    position = L.HEADER_SIZE
    for name, array in enumerate(arrays):
        header[L.H_STATIC + name] = position
        position += len(array)
    # The kernel's memory: sections sized by the episode (layout.state_sizes).
    sizes = L.state_sizes(T, n_families, n_apis)
    state_position = 0
    for name, size in enumerate(sizes):
        header[L.H_STATE + name] = state_position
        state_position += size
    if position >= 2**31 or state_position >= 2**31:
        return None
    static = np.concatenate([header.astype(np.int32), *arrays]) if arrays else header.astype(np.int32)
    floats = float_array(np.asarray(reward_fn.utilities, dtype=np.float64),
                         None if ep.priorities is None else np.asarray(ep.priorities, dtype=np.float64),
                         ep.deprecated, ep.removed, reward_fn)
    state = np.zeros(state_position, dtype=np.int32)
    return static, floats, state


def read_and_compile(episode: Any, track: str, memo: ContentMemo, reward_fn: Any, budget: int,
                     recipe: Any = None, limits: Any = None,
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(static, floats, state, costs) of ``episode`` on ``track`` at ``budget``, with ``reward_fn``
    started on it (under ``limits``, a ``StoreLimits``, if given; None: the core cannot play
    it); ``recipe``: the ``EpisodeRecipe`` the episode was made from, if it was. The core and its
    episode workers (``episode_workers``) both read episodes through this one function."""
    # The texts of a generated episode the core makes (past the bounds of those it compiles from
    # their draws) do not come back in later episodes: its observations are read without writing
    # their JSON texts (measured: 930 against 1,210 us per paper episode with sections and guides,
    # of a 3.8 ms reset), its snapshots described again rather than looked up by text.
    generated = recipe is not None
    compressing = bool(limits) and limits.compression is not None
    columns = describe_episode(episode, track, memo, generated=generated, untexted=generated,
                               compressing=compressing)
    if columns is None:
        return None
    reward_fn.start(episode, columns.costs, budget,
                    **limited(limits, budget, columns.summaries.costs if compressing else None))
    arrays = compile_episode(columns, reward_fn, memo)
    return None if arrays is None else (*arrays, columns.costs)


def limited(limits: Any, budget: int, compressed: np.ndarray | None = None) -> dict[str, Any]:
    """``RewardFunction.start``'s keywords for the limits ``limits`` (a ``StoreLimits``, or None)
    at ``budget`` (with compression, each step's compressed cost ``compressed``, -1 where the
    codec refuses it): U*(B) respects them."""
    if not limits:
        return {}
    return {"kinds": limits.kinds_at(budget), "write_time": limits.write_time, "compression": limits.compression,
            "compressed": compressed}


def summary_costs(static: np.ndarray) -> np.ndarray:
    """Each step's compressed cost (-1: refused) from an episode's static array compiled with
    compression (``limited``'s ``compressed``)."""
    T, at = int(static[L.H_LENGTH]), int(static[L.H_STATIC + L.SUMMARY_COST])
    return static[at:at + T].astype(np.int64)


def scored_labels(episode: Any) -> tuple[int, tuple[int, ...], np.ndarray, int]:
    """What ``metrics_of_labels`` scores an episode on: its length, critical steps, utilities
    and number of drift events."""
    return len(episode), episode.critical_steps, episode.utilities, episode.total_drift_events


def float_array(utilities: np.ndarray, priorities: np.ndarray | None, deprecated: np.ndarray,
                removed: np.ndarray | None, reward_fn: Any) -> np.ndarray:
    """An episode's ``floats`` (``float_sections``) with the reward function's U*(B) and prefix
    oracle (dense ``neg_regret`` only): None for what it has not computed."""
    prefix = reward_fn.oracle_prefix
    known = reward_fn.known_oracle
    return float_sections(utilities, _NONE if priorities is None else priorities, deprecated,
                          _NONE if removed is None else removed, _NONE if prefix is None else prefix,
                          np.nan if known is None else known)


_NONE = np.zeros(0, dtype=np.float64)
_NO_STEPS = np.zeros(0, dtype=np.int32)


@cached()
def float_sections(utilities, priorities, deprecated, removed, prefix, known):
    """An episode's ``floats``: the sections' offsets and U*(B) (``known``; NaN: not computed
    yet), then per step its utility, priority (0 off the privileged track), deprecated and
    removed flags, and the prefix oracle. An empty ``priorities``, ``removed`` or ``prefix``:
    zeros, none removed, no prefix."""
    T = utilities.shape[0]
    start = L.N_FLOATS + 1
    floats = np.zeros(start + 4 * T + prefix.shape[0], dtype=np.float64)
    for k in range(L.N_FLOATS):  # four sections of T, then the prefix
        floats[k] = start + T * k
    floats[L.N_FLOATS] = known
    floats[start:start + T] = utilities
    if priorities.shape[0]:
        floats[start + T:start + 2 * T] = priorities
    floats[start + 2 * T:start + 3 * T] = deprecated
    if removed.shape[0]:
        floats[start + 3 * T:start + 4 * T] = removed
    floats[start + 4 * T:] = prefix
    return floats
