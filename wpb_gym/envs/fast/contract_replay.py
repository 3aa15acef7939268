"""The contract change model's episodes without text, replayed from their draws in compiled code.

``play_contract`` makes the draws ``contracts.generate_contract_steps`` makes
(``contracts.contract_draws``, then the name stream's word pairs) and ``_play`` replays the
generator's loop on them: which endpoint each step shows, each change and revert, and what each
snapshot holds, as arrays (``contract_episodes`` turns them into the compiled core's). Nothing
else differs from the generator: the tests compare every episode the two make.

A parameter is a word pair, its id its index in ``contracts._PAIR_NAMES``. No word is a prefix
of another, so the pairs' order is the order Python sorts their names in, and a snapshot's
sorted lists are its ids sorted. The names are consumed as the generator consumes them: one
stream of pairs, an endpoint skipping the names it has had. The name stream is drawn in three
blocks (the starting names, the warm-up's order, the added names), each as long as the
generator's draws in that stretch: NumPy's bounded integers take the bit generator's words in
order, so one block draws what the generator's block and single draws draw. When the added
names run short the stream is drawn further and the episode played again.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...episodes.generators.contracts import _PAIR_NAMES, NAMES_BEFORE_NUMBERING, contract_draws, draw_pairs
from ...episodes.generators.paper import _structure_rng
from ...episodes.generators.utility_scale import (
    UTILITY_BURST_DRIFT,
    UTILITY_COSMETIC,
    UTILITY_DRIFT,
    UTILITY_ORDINARY,
    UTILITY_REPEAT,
    UTILITY_WARMUP,
)
from ...episodes.sources import EpisodeRecipe

N_PAIRS = len(_PAIR_NAMES)
# _play's outcomes.
_PLAYED, _SHORT, _NUMBERED = 0, 1, 2
# A change's kind, as _play codes it.
_REMOVE, _REQUIRE, _DEPRECATE, _ADD, _RELAX = range(5)


def play_contract(recipe: EpisodeRecipe) -> tuple[np.ndarray, ...] | None:
    """``_play``'s arrays for the recipe's episode (None: it names a parameter by number)."""
    c = recipe.config
    n_params, n_required, uniforms, endpoint_draw, revert_delay, name_rng, first_versions, deprecated = (
        contract_draws(c, _structure_rng(c, recipe.seed, recipe.index)))
    # The starting names: the generator draws one pair per parameter, then one at a time while
    # an endpoint meets a name it has (the count is known once they are placed).
    pairs = draw_pairs(name_rng, int(n_params.sum()))
    while True:
        initial = _initial_names(pairs, n_params)
        if initial.shape[0]:
            break
        pairs = np.concatenate((pairs, draw_pairs(name_rng, 1)))
    order = name_rng.permutation(c.api_pool) if c.warmup else np.zeros(0, dtype=np.int64)
    # Nothing draws from the name stream after the added names: a longer block is the same names.
    later = draw_pairs(name_rng, c.length // 4 + 16)
    while True:
        played = _play(n_params, n_required, uniforms, endpoint_draw, revert_delay, first_versions, deprecated,
                       initial, order, later, c.bursts, c.burst_interval, c.burst_len, c.redundancy,
                       c.redundancy_prob, c.drift_prob, c.burst_drift_prob, c.breaking_prob, c.revert_prob)
        outcome = played[-1]
        if outcome == _PLAYED:
            return played[:-1]
        if outcome == _NUMBERED:
            return None
        later = np.concatenate((later, draw_pairs(name_rng, len(later))))


@njit(cache=True)
def _initial_names(pairs, n_params):
    """Each endpoint's starting names, end to end: the next pairs of the stream, an endpoint
    skipping those it has taken (``_ParamNames.take``); empty when the pairs run short."""
    names = np.empty(n_params.sum(), dtype=np.int64)
    taken = np.zeros(N_PAIRS, dtype=np.bool_)
    at, out = 0, 0
    for i in range(n_params.shape[0]):
        first = out
        while out - first < n_params[i]:
            if at >= pairs.shape[0]:
                return np.zeros(0, dtype=np.int64)
            name = pairs[at]
            at += 1
            if not taken[name]:
                taken[name] = True
                names[out] = name
                out += 1
        for j in range(first, out):
            taken[names[j]] = False
    return names


@njit(cache=True)
def _grown(array, need):
    if need <= array.shape[0]:
        return array
    grown = np.empty(max(need, 2 * array.shape[0]), dtype=array.dtype)
    grown[:array.shape[0]] = array
    return grown


@njit(cache=True)
def _play(n_params, n_required, uniforms, endpoint_draw, revert_delay, first_versions, initially_deprecated, initial,
          order, later, bursts, burst_interval, burst_len, redundancy, redundancy_prob, drift_prob, burst_drift_prob,
          breaking_prob, revert_prob):
    """``generate_contract_steps`` without text, on its draws: per step its content (an endpoint
    snapshot, numbered as first shown), utility and whether it is critical; per content its
    endpoint, version, deprecated flag, and its sorted parameter and required ids (between
    offsets); and the outcome (``_SHORT``: ``later`` ran out; ``_NUMBERED``: an endpoint took
    as many names as the pairs allow)."""
    T = endpoint_draw.shape[0]
    pool = n_params.shape[0]
    warmup = order.shape[0]
    cap = n_params.max() + T + 1  # an added parameter per step at most
    params = np.empty((pool, cap), dtype=np.int64)  # each endpoint's lists, in list order
    required = np.empty((pool, cap), dtype=np.int64)
    plen = np.empty(pool, dtype=np.int64)
    rlen = np.empty(pool, dtype=np.int64)
    taken = np.zeros((pool, N_PAIRS), dtype=np.bool_)
    n_taken = np.empty(pool, dtype=np.int64)
    version = first_versions.astype(np.int64)
    deprecated = initially_deprecated.copy()
    frozen = np.full(pool, -1, dtype=np.int64)  # a revert is pending until this step
    shown = np.zeros(pool, dtype=np.bool_)
    snapshot = np.full(pool, -1, dtype=np.int64)
    at = 0
    for i in range(pool):
        for k in range(n_params[i]):
            params[i, k] = initial[at + k]
            taken[i, initial[at + k]] = True
        for k in range(n_required[i]):
            required[i, k] = initial[at + k]
        at += n_params[i]
        plen[i] = n_taken[i] = n_params[i]
        rlen[i] = n_required[i]
    # Contents, as first shown (every snapshot is shown when it is made).
    c_endpoint = np.empty(T, dtype=np.int64)
    c_version = np.empty(T, dtype=np.int64)
    c_deprecated = np.empty(T, dtype=np.bool_)
    p_start = np.zeros(T + 1, dtype=np.int64)
    r_start = np.zeros(T + 1, dtype=np.int64)
    p_flat = np.empty(max(16, 2 * int(n_params.sum())), dtype=np.int64)
    r_flat = np.empty(max(16, int(n_params.sum())), dtype=np.int64)
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
    n_contents, prev_endpoint, prev_content, next_name = 0, -1, -1, 0
    made = -1
    for t in range(T):
        kind = -1
        if t < warmup:
            i = order[t]
            content = -1
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
                content = -1
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
                else:
                    content = -1
                    if kind <= _DEPRECATE and uniforms[5, t] < revert_prob:
                        back = t + revert_delay[t]
                        while back < T and rev_endpoint[back] >= 0:  # one revert per step
                            back += 1
                        frozen[i] = back
                        if back < T:
                            b_flat = _grown(b_flat, b_used + plen[i] + rlen[i])
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
                                return (content_of, utility, breaking, c_endpoint, c_version, c_deprecated, p_start,
                                        p_flat, r_start, r_flat, _SHORT)
                            name = later[next_name]
                            next_name += 1
                            if n_taken[i] >= NAMES_BEFORE_NUMBERING:
                                return (content_of, utility, breaking, c_endpoint, c_version, c_deprecated, p_start,
                                        p_flat, r_start, r_flat, _NUMBERED)
                            if not taken[i, name]:
                                break
                        taken[i, name] = True
                        n_taken[i] += 1
                        params[i, plen[i]] = name
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
        if content < 0:  # a new snapshot of endpoint i
            content = snapshot[i] = n_contents
            n_contents += 1
            c_endpoint[content], c_version[content], c_deprecated[content] = i, version[i], deprecated[i]
            p_flat = _grown(p_flat, p_start[content] + plen[i])
            p_flat[p_start[content]:p_start[content] + plen[i]] = np.sort(params[i, :plen[i]])
            p_start[n_contents] = p_start[content] + plen[i]
            r_flat = _grown(r_flat, r_start[content] + rlen[i])
            r_flat[r_start[content]:r_start[content] + rlen[i]] = np.sort(required[i, :rlen[i]])
            r_start[n_contents] = r_start[content] + rlen[i]
        content_of[t] = content
        prev_endpoint, prev_content = i, content
    # A requirement stays in force only if its parameter is required at the end and no later
    # requirement of it (after a relax in between) replaced it; the others are undone.
    claimed = np.zeros((pool, N_PAIRS), dtype=np.bool_)
    for r in range(n_req - 1, -1, -1):
        t = req_t[r]
        if reverted[t]:
            continue
        i, p = req_i[r], req_p[r]
        if _holds(required[i], rlen[i], p) and not claimed[i, p]:
            claimed[i, p] = True
        else:
            reverted[t] = True  # undone: not in force at the end either
            utility[t] = UTILITY_COSMETIC
    critical = breaking & ~reverted
    return (content_of, utility, critical, c_endpoint[:n_contents], c_version[:n_contents],
            c_deprecated[:n_contents], p_start[:n_contents + 1], p_flat[:p_start[n_contents]],
            r_start[:n_contents + 1], r_flat[:r_start[n_contents]], _PLAYED)


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
