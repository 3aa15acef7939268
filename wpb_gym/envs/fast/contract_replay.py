"""The contract change model's episodes replayed from their draws in compiled code.

``play_contract`` makes the draws ``contracts.generate_contract_steps`` makes
(``contracts.contract_draws``, then the name stream's word pairs; the text stream's in compiled
code, ``numpy_streams``) and ``_play`` replays the generator's loop on them: which endpoint
each step shows, each change, rename and revert, each documentation section and migration
guide, and what each snapshot holds, as arrays (``contract_episodes`` turns them into the
compiled core's). Nothing else differs from the generator: the tests compare every episode the
two make.

A parameter is a word pair, its id its index in ``contracts._PAIR_NAMES``. The words are
sorted and "_" sorts before every letter, so the pairs' order is the order Python sorts their
names in, and a snapshot's sorted lists are its ids sorted. The names are consumed as the
generator consumes them: one stream of pairs, an endpoint skipping the names it has had. The
name stream is drawn in three blocks: the starting names and the warm-up's order as many as the
generator draws there, then the added names, more than it draws. NumPy's bounded integers take
the bit generator's words in order, so one block draws what the generator's block and single
draws draw, and nothing draws from the stream after the added names. When those run short the
stream is drawn further and the episode played again (from a copy of the text stream's
generator).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...episodes.generators import paper, text
from ...episodes.generators.contracts import _PAIR_NAMES, NAMES_BEFORE_NUMBERING, contract_draws, draw_pairs
from ...episodes.generators.utility_scale import (
    UTILITY_BURST_DRIFT,
    UTILITY_COSMETIC,
    UTILITY_DRIFT,
    UTILITY_ORDINARY,
    UTILITY_REPEAT,
    UTILITY_WARMUP,
)
from ...episodes.sources import EpisodeRecipe
from ..observation.stream_table import KIND_DOC, KIND_ENDPOINT, KIND_GUIDE
from .numpy_streams import _draws_as_numpy, entropy_words, integers_fill, pcg64, seed_state

N_PAIRS = len(_PAIR_NAMES)
# _play's outcomes.
_PLAYED, _SHORT, _NUMBERED = 0, 1, 2
# A change's kind, as _play codes it: the breaking ones first, the revertible ones first among them.
_REMOVE, _REQUIRE, _DEPRECATE, _RENAME, _ADD, _RELAX = range(6)
# A content's columns: its kind (KIND_ENDPOINT, KIND_DOC or KIND_GUIDE), endpoint, version and
# renames (a guide: its new api's), deprecated flag, day (a section's ``last_updated``, a
# guide's ``deadline``: days after ``text.BASE_DATE``), its text's start and length, a guide's
# old api's renames (its version is the new one's less one) and a section's topic (an index
# into the topics the episode's sections take: the contract model's "docs" alone).
C_KIND, C_ENDPOINT, C_VERSION, C_NAME, C_DEPRECATED, C_DAY, C_TEXT, C_TEXT_LENGTH, C_OLD_NAME, C_TOPIC = range(10)
N_COLUMNS = 10
# The filler text's words, end to end, and where each starts (``text.filler_text``).
VOCABULARY = np.frombuffer("".join(text.VOCABULARY).encode("ascii"), dtype=np.uint8).copy()
WORD_STARTS = np.cumsum([0, *map(len, text.VOCABULARY)]).astype(np.int64)


def play_contract(recipe: EpisodeRecipe) -> tuple[np.ndarray, ...] | None:
    """``_play``'s arrays for the recipe's episode (None: it names a parameter by number, or its
    text stream is NumPy's to draw)."""
    c = recipe.config
    n_params, n_required, uniforms, endpoint_draw, revert_delay, name_rng, first_versions, deprecated = (
        contract_draws(c, paper._structure_rng(c, recipe.seed, recipe.index)))
    texts = text_stream(c, recipe.seed, recipe.index, c.doc_prob > 0 or c.renames)
    if texts is None:
        return None
    # The starting names: the generator draws one pair per parameter, then one at a time while
    # an endpoint meets a name it has; each missing name takes a pair at least, so drawing as
    # many more as are missing draws no pair the generator would not.
    pairs = draw_pairs(name_rng, int(n_params.sum()))
    while True:
        initial, missing = _initial_names(pairs, n_params)
        if not missing:
            break
        pairs = np.concatenate((pairs, draw_pairs(name_rng, missing)))
    order = name_rng.permutation(c.api_pool) if c.warmup else np.zeros(0, dtype=np.int64)
    # Nothing draws from the name stream after the added names: a longer block is the same names.
    later = draw_pairs(name_rng, c.length // 4 + 16)
    settings = (bool(c.bursts), int(c.burst_interval), int(c.burst_len), bool(c.redundancy),
                float(c.redundancy_prob), float(c.drift_prob), float(c.burst_drift_prob), float(c.breaking_prob),
                float(c.revert_prob), float(c.doc_prob), int(c.doc_min_bytes), int(c.doc_max_bytes),
                int(c.guide_min_bytes), int(c.guide_max_bytes), bool(c.renames), float(c.doc_utility))
    while True:
        played = _play(n_params, n_required, uniforms, endpoint_draw, revert_delay, first_versions, deprecated,
                       initial, order, later, settings, texts.copy(), VOCABULARY, WORD_STARTS)
        outcome = played[-1]
        if outcome == _PLAYED:
            return played[:-1]
        if outcome == _NUMBERED:
            return None
        later = np.concatenate((later, draw_pairs(name_rng, len(later))))


def text_stream(c, seed: int, index: int, drawn: bool) -> np.ndarray | None:
    """The generator of the episode's text stream (``numpy_streams``'s state; unused unless
    ``drawn``: the episode has text), None when NumPy draws otherwise than ``numpy_streams`` or
    refuses the seed (the envs refuse it first)."""
    if not drawn:
        return np.zeros(6, dtype=np.uint64)
    if seed < 0 or index < 0 or not _draws_as_numpy():
        return None
    entropy, spawn_key = paper.stream_entropy(c.regime, seed, index, 2)
    return pcg64(seed_state(entropy_words(entropy, spawn_key)))


@njit(cache=True)
def _initial_names(pairs, n_params):
    """Each endpoint's starting names, end to end: the next pairs of the stream, an endpoint
    skipping those it has taken (``_ParamNames.take``); and how many names are still missing
    when the pairs run short (each takes one more pair at least)."""
    names = np.empty(n_params.sum(), dtype=np.int64)
    taken = np.zeros(N_PAIRS, dtype=np.bool_)
    at, out = 0, 0
    for i in range(n_params.shape[0]):
        first = out
        while out - first < n_params[i]:
            if at >= pairs.shape[0]:
                return names, names.shape[0] - out
            name = pairs[at]
            at += 1
            if not taken[name]:
                taken[name] = True
                names[out] = name
                out += 1
        for j in range(first, out):
            taken[names[j]] = False
    return names, 0


@njit(cache=True)
def wider(array):
    """``array`` (2-D) with twice its columns, the new ones unset."""
    out = np.empty((array.shape[0], 2 * array.shape[1]), dtype=array.dtype)
    out[:, :array.shape[1]] = array
    return out


@njit(cache=True)
def grown(array, need):
    if need <= array.shape[0]:
        return array
    out = np.empty(max(need, 2 * array.shape[0]), dtype=array.dtype)
    out[:array.shape[0]] = array
    return out


@njit(cache=True)
def filler_text(g, n_bytes, vocabulary, starts, arena, used):
    """``text.filler_text(rng, n_bytes)`` on the text stream ``g``: the start of ``n_bytes // 3 + 1``
    words drawn uniformly, joined by spaces, written into ``arena`` from ``used``; the arena
    (grown if need be)."""
    picks = np.empty(n_bytes // 3 + 1, dtype=np.int64)
    integers_fill(g, 0, starts.shape[0] - 1, picks)
    arena = grown(arena, used + n_bytes)
    out = 0
    for word in picks:
        for k in range(starts[word], starts[word + 1]):
            if out == n_bytes:
                return arena
            arena[used + out] = vocabulary[k]
            out += 1
        if out == n_bytes:
            return arena
        arena[used + out] = 32  # a space
        out += 1
    return arena


@njit(cache=True)
def _play(n_params, n_required, uniforms, endpoint_draw, revert_delay, first_versions, initially_deprecated, initial,
          order, later, settings, text_stream, vocabulary, starts):
    """``generate_contract_steps`` on its draws: per step its content (numbered as first shown),
    utility and whether it is critical; per content its ``C_*`` columns (``contents``), its sorted
    parameter and required ids (between offsets: none for a section or a guide) and its text
    (in ``text``); and the outcome (``_SHORT``: ``later`` ran out; ``_NUMBERED``: an endpoint
    took as many names as the pairs allow). ``settings``: the config's, in ``_SETTINGS`` order;
    ``text_stream``: the text stream's generator (``numpy_streams``), drawn only by episodes
    with text."""
    (bursts, burst_interval, burst_len, redundancy, redundancy_prob, drift_prob, burst_drift_prob, breaking_prob,
     revert_prob, doc_prob, doc_min, doc_max, guide_min, guide_max, renames, doc_utility) = settings
    T = endpoint_draw.shape[0]
    pool = n_params.shape[0]
    warmup = order.shape[0]
    # Each endpoint's lists, in list order, and every name it was given (widened as they grow).
    params = np.empty((pool, n_params.max() + 8), dtype=np.int64)
    required = np.empty((pool, n_params.max() + 8), dtype=np.int64)
    given = np.empty((pool, n_params.max() + 8), dtype=np.int64)
    plen = np.empty(pool, dtype=np.int64)
    rlen = np.empty(pool, dtype=np.int64)
    n_taken = np.empty(pool, dtype=np.int64)
    version = first_versions.astype(np.int64)
    deprecated = initially_deprecated.copy()
    name = np.zeros(pool, dtype=np.int64)  # renames so far
    frozen = np.full(pool, -1, dtype=np.int64)  # a revert is pending until this step
    shown = np.zeros(pool, dtype=np.bool_)
    snapshot = np.full(pool, -1, dtype=np.int64)  # its current snapshot's content (-1: not shown yet)
    at = 0
    for i in range(pool):
        for k in range(n_params[i]):
            params[i, k] = given[i, k] = initial[at + k]
        for k in range(n_required[i]):
            required[i, k] = initial[at + k]
        at += n_params[i]
        plen[i] = n_taken[i] = n_params[i]
        rlen[i] = n_required[i]
    # Contents, as first shown: a snapshot when first shown (a renamed endpoint's is made at the
    # rename and shown at its next sighting, as it was), a section or guide at its step.
    contents = np.zeros((T, N_COLUMNS), dtype=np.int64)
    p_start = np.zeros(T + 1, dtype=np.int64)
    r_start = np.zeros(T + 1, dtype=np.int64)
    p_flat = np.empty(max(16, 2 * int(n_params.sum())), dtype=np.int64)
    r_flat = np.empty(max(16, int(n_params.sum())), dtype=np.int64)
    text = np.empty(1024 if doc_prob > 0 or renames else 0, dtype=np.uint8)
    text_used = 0
    # Pending reverts, by the step they come at: the endpoint, the change's step, the contract restored.
    rev_endpoint = np.full(T, -1, dtype=np.int64)
    rev_changed = np.empty(T, dtype=np.int64)
    rev_deprecated = np.empty(T, dtype=np.bool_)
    rev_at = np.empty(T, dtype=np.int64)  # where its lists start in b_flat: params, then required
    rev_plen = np.empty(T, dtype=np.int64)
    rev_rlen = np.empty(T, dtype=np.int64)
    b_flat = np.empty(64, dtype=np.int64)
    b_used = 0
    # Requirements (step, endpoint, parameter), in step order.
    req_t = np.empty(T, dtype=np.int64)
    req_i = np.empty(T, dtype=np.int64)
    req_p = np.empty(T, dtype=np.int64)
    n_req = 0
    content_of = np.empty(T, dtype=np.int64)
    utility = np.empty(T, dtype=np.float64)
    breaking = np.zeros(T, dtype=np.bool_)
    reverted = np.zeros(T, dtype=np.bool_)  # a change a revert rolled back
    kinds = np.empty(4, dtype=np.int64)
    size = np.empty(1, dtype=np.int64)
    n_contents, prev_endpoint, prev_content, next_name = 0, -1, -1, 0
    made = -1
    for t in range(T):
        kind, content = -1, -1
        new_text = -1  # the kind of a section or guide this step shows
        if t < warmup:
            i = prev_endpoint = order[t]
            shown[i] = True
            utility[t] = UTILITY_WARMUP
        else:
            in_burst = bursts and (t % burst_interval) < burst_len
            change_value = UTILITY_BURST_DRIFT if in_burst else UTILITY_DRIFT
            i = rev_endpoint[t]
            if i >= 0:  # a revert: the contract before the change, a version higher
                version[i] += 1
                b = rev_at[t]
                plen[i], rlen[i] = rev_plen[t], rev_rlen[t]
                params[i, :plen[i]] = b_flat[b:b + plen[i]]
                required[i, :rlen[i]] = b_flat[b + plen[i]:b + plen[i] + rlen[i]]
                deprecated[i] = rev_deprecated[t]
                reverted[rev_changed[t]] = True
                utility[rev_changed[t]] = UTILITY_COSMETIC
                utility[t] = UTILITY_COSMETIC
                content = snapshot[i] = -1
                prev_endpoint = i
            elif doc_prob > 0 and uniforms[6, t] < doc_prob:  # a documentation section (no endpoint moves)
                i = endpoint_draw[t]
                integers_fill(text_stream, doc_min, doc_max + 1, size)
                new_text = KIND_DOC
                utility[t] = doc_utility
            else:
                if redundancy and prev_endpoint >= 0 and uniforms[0, t] < redundancy_prob:
                    i = prev_endpoint
                else:
                    i = endpoint_draw[t]
                drift = (uniforms[1, t] < (burst_drift_prob if in_burst else drift_prob) and t > frozen[i]
                         and (shown[i] or warmup == 0))
                shown[i] = True
                if drift:
                    n_kinds = 0
                    if uniforms[2, t] < breaking_prob:
                        if plen[i] > 1:
                            kinds[n_kinds] = _REMOVE
                            n_kinds += 1
                        if plen[i] > rlen[i]:
                            kinds[n_kinds] = _REQUIRE
                            n_kinds += 1
                        if not deprecated[i]:
                            kinds[n_kinds] = _DEPRECATE
                            n_kinds += 1
                        if renames:
                            kinds[n_kinds] = _RENAME
                            n_kinds += 1
                    else:
                        kinds[n_kinds] = _ADD
                        n_kinds += 1
                        if rlen[i] > 0:
                            kinds[n_kinds] = _RELAX
                            n_kinds += 1
                    if n_kinds:
                        kind = kinds[int(uniforms[3, t] * n_kinds)]
                if kind < 0:
                    content = snapshot[i]
                    utility[t] = UTILITY_REPEAT if content >= 0 and content == prev_content else UTILITY_ORDINARY
                elif kind == _RENAME:  # the step shows the migration guide; the new name's snapshot comes later
                    name[i] += 1
                    shown[i] = False
                    version[i] += 1
                    snapshot[i] = -1
                    integers_fill(text_stream, guide_min, guide_max + 1, size)
                    new_text = KIND_GUIDE
                    breaking[t] = True
                    utility[t] = change_value
                else:
                    content = snapshot[i] = -1
                    if kind <= _DEPRECATE and uniforms[5, t] < revert_prob:
                        back = t + revert_delay[t]
                        while back < T and rev_endpoint[back] >= 0:  # one revert per step
                            back += 1
                        frozen[i] = back
                        if back < T:
                            b_flat = grown(b_flat, b_used + plen[i] + rlen[i])
                            b_flat[b_used:b_used + plen[i]] = params[i, :plen[i]]
                            b_flat[b_used + plen[i]:b_used + plen[i] + rlen[i]] = required[i, :rlen[i]]
                            rev_endpoint[back], rev_changed[back], rev_deprecated[back] = i, t, deprecated[i]
                            rev_at[back], rev_plen[back], rev_rlen[back] = b_used, plen[i], rlen[i]
                            b_used += plen[i] + rlen[i]
                    which = uniforms[4, t]
                    if kind == _REMOVE:
                        victim = params[i, int(which * plen[i])]
                        plen[i] = _without(params[i], plen[i], victim)
                        rlen[i] = _without(required[i], rlen[i], victim)
                    elif kind == _REQUIRE:
                        n_optional = plen[i] - rlen[i]
                        pick = int(which * n_optional)
                        for k in range(plen[i]):  # the pick-th optional one, in list order
                            if not _holds(required[i], rlen[i], params[i, k]):
                                if pick == 0:
                                    made = params[i, k]
                                    break
                                pick -= 1
                        required[i, rlen[i]] = made
                        rlen[i] += 1
                        req_t[n_req], req_i[n_req], req_p[n_req] = t, i, made
                        n_req += 1
                    elif kind == _DEPRECATE:
                        deprecated[i] = True
                    elif kind == _ADD:
                        while True:
                            if next_name >= later.shape[0]:
                                return (content_of, utility, breaking, contents, p_start, p_flat, r_start, r_flat,
                                        text, _SHORT)
                            pair = later[next_name]
                            next_name += 1
                            if n_taken[i] >= NAMES_BEFORE_NUMBERING:
                                return (content_of, utility, breaking, contents, p_start, p_flat, r_start, r_flat,
                                        text, _NUMBERED)
                            if not _holds(given[i], n_taken[i], pair):
                                break
                        if n_taken[i] == given.shape[1]:
                            given = wider(given)
                        given[i, n_taken[i]] = pair
                        n_taken[i] += 1
                        if plen[i] == params.shape[1]:
                            params, required = wider(params), wider(required)
                        params[i, plen[i]] = pair
                        plen[i] += 1
                    else:  # relax
                        victim = required[i, int(which * rlen[i])]
                        rlen[i] = _without(required[i], rlen[i], victim)
                    version[i] += 1
                    if kind <= _DEPRECATE:
                        breaking[t] = True
                        utility[t] = change_value
                    else:
                        utility[t] = UTILITY_COSMETIC
                prev_endpoint = i
        if new_text >= 0:  # a section or a guide: a content of its own, its text drawn now
            content = n_contents
            n_contents += 1
            row = contents[content]
            row[C_KIND], row[C_ENDPOINT], row[C_VERSION], row[C_NAME] = new_text, i, version[i], name[i]
            row[C_DAY] = t if new_text == KIND_DOC else t + 90
            row[C_TEXT], row[C_TEXT_LENGTH] = text_used, size[0]
            if new_text == KIND_GUIDE:
                row[C_OLD_NAME] = name[i] - 1
            text = filler_text(text_stream, size[0], vocabulary, starts, text, text_used)
            text_used += size[0]
            p_start[n_contents], r_start[n_contents] = p_start[content], r_start[content]
        elif content < 0:  # endpoint i's current snapshot, shown for the first time
            content = snapshot[i] = n_contents
            n_contents += 1
            row = contents[content]
            row[C_KIND], row[C_ENDPOINT], row[C_VERSION], row[C_NAME] = KIND_ENDPOINT, i, version[i], name[i]
            row[C_DEPRECATED] = deprecated[i]
            p_flat = grown(p_flat, p_start[content] + plen[i])
            p_flat[p_start[content]:p_start[content] + plen[i]] = np.sort(params[i, :plen[i]])
            p_start[n_contents] = p_start[content] + plen[i]
            r_flat = grown(r_flat, r_start[content] + rlen[i])
            r_flat[r_start[content]:r_start[content] + rlen[i]] = np.sort(required[i, :rlen[i]])
            r_start[n_contents] = r_start[content] + rlen[i]
        content_of[t] = content
        prev_content = content
    # A requirement stays in force only if its parameter is required at the end and no later
    # requirement of it (after a relax in between) replaced it; the others are undone.
    claimed = np.full(2 * n_req + 2, -1, dtype=np.int64)  # (endpoint, parameter) keys, open addressing
    for r in range(n_req - 1, -1, -1):
        t = req_t[r]
        if reverted[t]:
            continue
        i, p = req_i[r], req_p[r]
        key = i * N_PAIRS + p
        slot = key % claimed.shape[0]
        while claimed[slot] >= 0 and claimed[slot] != key:
            slot = (slot + 1) % claimed.shape[0]
        if _holds(required[i], rlen[i], p) and claimed[slot] < 0:
            claimed[slot] = key
        else:
            reverted[t] = True  # undone: not in force at the end either
            utility[t] = UTILITY_COSMETIC
    critical = breaking & ~reverted
    return (content_of, utility, critical, contents[:n_contents], p_start[:n_contents + 1],
            p_flat[:p_start[n_contents]], r_start[:n_contents + 1], r_flat[:r_start[n_contents]], text[:text_used],
            _PLAYED)


@njit(cache=True, inline="always")
def _holds(values, n, value):
    for k in range(n):
        if values[k] == value:
            return True
    return False


@njit(cache=True, inline="always")
def _without(values, n, value):
    """Remove ``value`` from the first ``n`` of ``values`` (if there), keeping the order; the new count."""
    out = 0
    for k in range(n):
        if values[k] != value:
            values[out] = values[k]
            out += 1
    return out
