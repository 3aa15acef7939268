"""The contract change model's rules (``contracts``), as loops over arrays: which endpoint each
step shows, whether it changes and how, what is reverted or undone later, and what each step is
worth.

``take_names`` gives the endpoints their starting parameter names from the name stream's word
pairs, and ``play`` plays an episode's draws (``contracts.contract_draws``) and its
``Dynamics``, giving its ``Structure``: per step its kind (an endpoint snapshot, a documentation
section or a rename's migration guide), the endpoint state it shows, its change, its utility
and whether it is critical; per endpoint state its endpoint, name, version, deprecated flag
and parameter and required lists; per parameter name its word pair. The observations — names as
text, lists sorted, documentation and guide text — are rendered from these by
``contracts.generate_contract_steps``.

A name is a word pair (an index into ``contracts``' pair names) and a suffix: -1, or the number
of names its endpoint had taken when the pairs ran short (``NAMES_BEFORE_NUMBERING``); two names
are equal exactly when both are. The name stream's pairs are drawn by the caller, which cannot
know ahead how many a retry (a pair the endpoint has taken already) will use: each function says
when the pairs ran short, and the caller draws more and plays again.

Both are plain Python over NumPy arrays in the subset numba compiles: the generator runs them
as they are, and the vector env's core compiles these same functions, so the rules are written
once.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .paper_structure import typed_settings
from .utility_scale import (
    UTILITY_BURST_DRIFT,
    UTILITY_COSMETIC,
    UTILITY_DRIFT,
    UTILITY_ORDINARY,
    UTILITY_REPEAT,
    UTILITY_WARMUP,
)

# A step's kind.
SNAPSHOT, DOC, GUIDE = 0, 1, 2
# A step's change, as the labels name them (-1: none).
CHANGE_NAMES = ("remove_param", "require_param", "deprecate", "rename", "add_param", "relax_param", "revert",
                "doc_edit")
REMOVE_PARAM, REQUIRE_PARAM, DEPRECATE, RENAME, ADD_PARAM, RELAX_PARAM, REVERT, DOC_EDIT = range(8)
NO_CHANGE = -1
# Every word pair (``contracts``' 49 words, two by two).
PAIRS = 49 * 49
# An endpoint that has taken this many names numbers the next ones.
NAMES_BEFORE_NUMBERING = PAIRS // 2


class Dynamics(NamedTuple):
    """The settings ``play`` reads (``GeneratorConfig``'s fields of the same names)."""

    bursts: bool
    burst_interval: int
    burst_len: int
    redundancy: bool
    redundancy_prob: float
    drift_prob: float
    burst_drift_prob: float
    breaking_prob: float
    renames: bool
    revert_prob: float
    doc_prob: float
    doc_utility: float
    warmup: bool


def dynamics(config: Any) -> Dynamics:
    """The ``Dynamics`` of a ``GeneratorConfig``."""
    return typed_settings(Dynamics, config)


class Structure(NamedTuple):
    """A contract episode without its text (see the module docstring).

    Per step: ``kind``; ``content_of``, the endpoint state shown (on a guide step, the state the
    rename made; -1 on a documentation step); ``renamed_from``, on a guide step the state before
    the rename (else -1); ``endpoint``, the endpoint shown or documented; ``change`` (a
    ``CHANGE_NAMES`` index, or -1); ``utility``; ``critical`` (a breaking change still in force at
    the end, or a rename); ``undone`` (a requirement relaxed, removed or required again later);
    ``reverted_change``, on a revert step the step of the change it rolls back (else -1).

    Per endpoint state (the endpoints' starting states first, by endpoint, then one per change):
    ``state_endpoint``, ``state_renames``, ``state_version``, ``state_deprecated``, and its
    parameter and required names ``params[param_start[s]:param_start[s + 1]]`` and
    ``required[required_start[s]:required_start[s + 1]]`` in list order (indices into the names).
    Per name: ``name_pair`` and ``name_suffix``.

    ``lacking``: 0, or the steps left when the added names' pairs ran out: as many pairs more
    usually suffice (a step adds one name at most, but a name may take more than one pair); play
    it again with more."""

    kind: np.ndarray
    content_of: np.ndarray
    renamed_from: np.ndarray
    endpoint: np.ndarray
    change: np.ndarray
    utility: np.ndarray
    critical: np.ndarray
    undone: np.ndarray
    reverted_change: np.ndarray
    state_endpoint: np.ndarray
    state_renames: np.ndarray
    state_version: np.ndarray
    state_deprecated: np.ndarray
    param_start: np.ndarray
    params: np.ndarray
    required_start: np.ndarray
    required: np.ndarray
    name_pair: np.ndarray
    name_suffix: np.ndarray
    lacking: int


def take_names(pairs: np.ndarray, n_params: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The endpoints' starting names, endpoint after endpoint, made of the name stream's first
    ``pairs``: each name the next pair, unless the endpoint has it already (then the pair after),
    numbered once the endpoint has taken ``NAMES_BEFORE_NUMBERING``. Their pairs and suffixes,
    how many names are still to take when the pairs run out (0: none; each needs a pair more at
    least), and how many pairs the names took."""
    total = 0
    for i in range(n_params.shape[0]):
        total += n_params[i]
    pair = np.empty(total, dtype=np.int64)
    suffix = np.empty(total, dtype=np.int64)
    taken = {np.int64(-1)}  # endpoint * PAIRS + pair of each plain name taken
    at = 0
    k = 0
    for i in range(n_params.shape[0]):
        count = 0
        while count < n_params[i]:
            if at >= pairs.shape[0]:
                return pair, suffix, total - k, at
            p = pairs[at]
            at += 1
            if count >= NAMES_BEFORE_NUMBERING:
                pair[k], suffix[k] = p, count  # a numbered name is new: its number is the count
            elif i * PAIRS + p in taken:
                continue
            else:
                taken.add(i * PAIRS + p)
                pair[k], suffix[k] = p, -1
            k += 1
            count += 1
    return pair, suffix, 0, at


def play(n_params: np.ndarray, n_required: np.ndarray, uniforms: np.ndarray, endpoint_draw: np.ndarray,
         revert_delay: np.ndarray, first_versions: np.ndarray, initially_deprecated: np.ndarray, order: np.ndarray,
         name_pair: np.ndarray, name_suffix: np.ndarray, added_pairs: np.ndarray, d: Dynamics) -> Structure:
    """The ``Structure`` of the episode drawn as these arrays (``contracts.contract_draws``): its
    starting names (``take_names``), the warm-up's ``order`` of endpoints, and the name stream's
    pairs after them, ``added_pairs``, that added parameters are named from."""
    T = endpoint_draw.shape[0]
    pool = n_params.shape[0]
    u_repeat, u_drift, u_class, u_kind, u_which, u_revert, u_doc = (
        uniforms[0], uniforms[1], uniforms[2], uniforms[3], uniforms[4], uniforms[5], uniforms[6])
    n_start = name_pair.shape[0]
    # The names: the starting ones, then one per added parameter.
    pairs = np.empty(n_start + T, dtype=np.int64)
    suffixes = np.empty(n_start + T, dtype=np.int64)
    taken = {np.int64(-1)}
    n_taken = np.empty(pool, dtype=np.int64)
    k = 0
    for i in range(pool):
        n_taken[i] = n_params[i]
        for _ in range(n_params[i]):
            pairs[k], suffixes[k] = name_pair[k], name_suffix[k]
            if name_suffix[k] < 0:
                taken.add(i * PAIRS + name_pair[k])
            k += 1
    n_names = n_start
    used = 0  # added_pairs used

    # The endpoint states: each endpoint's starting one, then one per change.
    capacity = pool + T
    state_endpoint = np.empty(capacity, dtype=np.int64)
    state_renames = np.zeros(capacity, dtype=np.int64)
    state_version = np.empty(capacity, dtype=np.int64)
    state_deprecated = np.empty(capacity, dtype=np.bool_)
    param_start = np.zeros(capacity + 1, dtype=np.int64)
    required_start = np.zeros(capacity + 1, dtype=np.int64)
    params = np.empty(max(16, 2 * n_start), dtype=np.int64)
    required = np.empty(max(16, 2 * n_start), dtype=np.int64)
    current = np.empty(pool, dtype=np.int64)  # each endpoint's state
    k = 0
    position = 0
    required_position = 0
    for i in range(pool):
        for j in range(n_params[i]):
            params[position + j] = k + j
        for j in range(n_required[i]):  # the first n_required parameters
            required[required_position + j] = k + j
        k += n_params[i]
        position += n_params[i]
        required_position += n_required[i]
        state_endpoint[i], state_version[i], state_deprecated[i] = i, first_versions[i], initially_deprecated[i]
        param_start[i + 1], required_start[i + 1] = position, required_position
        current[i] = i
    n_states = pool
    is_required = np.zeros(n_start + T, dtype=np.bool_)  # scratch: a state's required names

    kind = np.zeros(T, dtype=np.int8)
    content_of = np.full(T, -1, dtype=np.int64)
    renamed_from = np.full(T, -1, dtype=np.int64)
    step_endpoint = np.full(T, -1, dtype=np.int64)
    change = np.full(T, NO_CHANGE, dtype=np.int8)
    utility = np.empty(T, dtype=np.float64)
    breaking = np.zeros(T, dtype=np.bool_)
    required_name = np.full(T, -1, dtype=np.int64)  # the name a require_param made required
    reverted_change = np.full(T, -1, dtype=np.int64)
    # Reverts due at a step (one per step): the endpoint, the state before the change, its step.
    due_endpoint = np.full(T, -1, dtype=np.int64)
    due_state = np.empty(T, dtype=np.int64)
    due_change = np.empty(T, dtype=np.int64)
    frozen_until = np.full(pool, -1, dtype=np.int64)  # a revert is pending until this step
    shown = np.zeros(pool, dtype=np.bool_)  # its current name's snapshot has been shown
    documented = np.zeros(pool, dtype=np.bool_)  # its documentation section has been shown

    prev_endpoint = -1
    prev_content = -1  # the state the previous step showed as a snapshot (-1: a section or a guide)
    warmup = pool if d.warmup else 0
    for t in range(warmup):
        i = order[t]
        kind[t], content_of[t], step_endpoint[t], utility[t] = SNAPSHOT, current[i], i, UTILITY_WARMUP
        shown[i] = True
        prev_endpoint, prev_content = i, current[i]

    for t in range(warmup, T):
        in_burst = d.bursts and (t % d.burst_interval) < d.burst_len
        change_value = UTILITY_BURST_DRIFT if in_burst else UTILITY_DRIFT
        if due_endpoint[t] >= 0:  # a revert: the contract before the change, at a new version
            i = due_endpoint[t]
            before, was = due_state[t], current[i]
            made = n_states
            n_states += 1
            a, b = param_start[before], param_start[before + 1]
            ra, rb = required_start[before], required_start[before + 1]
            if position + (b - a) > params.shape[0]:
                grown = np.empty(2 * (position + b - a), dtype=np.int64)
                for j in range(position):
                    grown[j] = params[j]
                params = grown
            if required_position + (rb - ra) > required.shape[0]:
                grown = np.empty(2 * (required_position + rb - ra), dtype=np.int64)
                for j in range(required_position):
                    grown[j] = required[j]
                required = grown
            for j in range(a, b):
                params[position] = params[j]
                position += 1
            for j in range(ra, rb):
                required[required_position] = required[j]
                required_position += 1
            param_start[made + 1], required_start[made + 1] = position, required_position
            state_endpoint[made], state_renames[made] = i, state_renames[was]
            state_version[made], state_deprecated[made] = state_version[was] + 1, state_deprecated[before]
            current[i] = made
            kind[t], content_of[t], step_endpoint[t], change[t] = SNAPSHOT, made, i, REVERT
            reverted_change[t] = due_change[t]
            utility[due_change[t]] = UTILITY_COSMETIC  # no longer in force at the end
            utility[t] = UTILITY_COSMETIC
            prev_endpoint, prev_content = i, made
            continue
        if d.doc_prob > 0 and u_doc[t] < d.doc_prob:
            i = endpoint_draw[t]
            kind[t], step_endpoint[t], utility[t] = DOC, i, d.doc_utility
            if documented[i]:
                change[t] = DOC_EDIT
            documented[i] = True
            prev_content = -1
            continue
        if d.redundancy and prev_endpoint >= 0 and u_repeat[t] < d.redundancy_prob:
            i = prev_endpoint
        else:
            i = endpoint_draw[t]
        was = current[i]
        drift = u_drift[t] < (d.burst_drift_prob if in_burst else d.drift_prob) and t > frozen_until[i]
        # With a warm-up, a renamed endpoint is shown under its new name before it changes again.
        drift = drift and (shown[i] or not d.warmup)
        shown[i] = True
        step_endpoint[t] = i
        prev_endpoint = i
        a, b = param_start[was], param_start[was + 1]
        ra, rb = required_start[was], required_start[was + 1]
        n, n_req = b - a, rb - ra
        kind_of = NO_CHANGE
        if drift:
            # Drawn uniformly among the kinds that apply, in CHANGE_NAMES' order. A deprecated
            # one-parameter endpoint with nothing optional cannot break further.
            if u_class[t] < d.breaking_prob:
                count = (1 if n > 1 else 0) + (1 if n > n_req else 0) + (0 if state_deprecated[was] else 1) + (
                    1 if d.renames else 0)
                if count > 0:
                    pick = int(u_kind[t] * count)
                    for candidate in range(4):
                        applies = ((candidate == REMOVE_PARAM and n > 1) or (candidate == REQUIRE_PARAM and n > n_req)
                                   or (candidate == DEPRECATE and not state_deprecated[was])
                                   or (candidate == RENAME and d.renames))
                        if applies:
                            if pick == 0:
                                kind_of = candidate
                                break
                            pick -= 1
            else:
                kind_of = ADD_PARAM if n_req == 0 or int(u_kind[t] * 2) == 0 else RELAX_PARAM
        if kind_of == NO_CHANGE:
            kind[t], content_of[t] = SNAPSHOT, was
            utility[t] = UTILITY_REPEAT if was == prev_content else UTILITY_ORDINARY
            prev_content = was
            continue
        # A change: a new state, the endpoint's lists copied and changed.
        made = n_states
        n_states += 1
        state_endpoint[made], state_renames[made] = i, state_renames[was]
        state_version[made], state_deprecated[made] = state_version[was] + 1, state_deprecated[was]
        if position + n + 1 > params.shape[0]:
            grown = np.empty(2 * (position + n + 1), dtype=np.int64)
            for j in range(position):
                grown[j] = params[j]
            params = grown
        if required_position + n_req + 1 > required.shape[0]:
            grown = np.empty(2 * (required_position + n_req + 1), dtype=np.int64)
            for j in range(required_position):
                grown[j] = required[j]
            required = grown
        victim = -1  # a parameter removed, or a required one relaxed
        if kind_of == REMOVE_PARAM:
            victim = params[a + int(u_which[t] * n)]
        elif kind_of == RELAX_PARAM:
            victim = required[ra + int(u_which[t] * n_req)]
        for j in range(a, b):
            if not (kind_of == REMOVE_PARAM and params[j] == victim):
                params[position] = params[j]
                position += 1
        for j in range(ra, rb):
            if required[j] != victim:
                required[required_position] = required[j]
                required_position += 1
        if kind_of == REQUIRE_PARAM:
            # The optional parameters in list order, one picked.
            for j in range(ra, rb):
                is_required[required[j]] = True
            pick = int(u_which[t] * (n - n_req))
            chosen = -1
            for j in range(a, b):
                if not is_required[params[j]]:
                    if pick == 0:
                        chosen = params[j]
                        break
                    pick -= 1
            for j in range(ra, rb):
                is_required[required[j]] = False
            required[required_position] = chosen
            required_position += 1
            required_name[t] = chosen
        elif kind_of == DEPRECATE:
            state_deprecated[made] = True
        elif kind_of == ADD_PARAM:
            # A fresh name: the next pair, unless the endpoint has it (then the one after), numbered
            # once the endpoint has taken NAMES_BEFORE_NUMBERING.
            while True:
                if used >= added_pairs.shape[0]:
                    return Structure(kind, content_of, renamed_from, step_endpoint, change, utility, breaking,
                                      breaking, reverted_change, state_endpoint[:n_states], state_renames[:n_states],
                                      state_version[:n_states], state_deprecated[:n_states],
                                      param_start[:n_states + 1], params[:position], required_start[:n_states + 1],
                                      required[:required_position], pairs[:n_names], suffixes[:n_names], T - t)
                p = added_pairs[used]
                used += 1
                if n_taken[i] >= NAMES_BEFORE_NUMBERING:
                    pairs[n_names], suffixes[n_names] = p, n_taken[i]
                    break
                if i * PAIRS + p not in taken:
                    taken.add(i * PAIRS + p)
                    pairs[n_names], suffixes[n_names] = p, -1
                    break
            n_taken[i] += 1
            params[position] = n_names
            position += 1
            n_names += 1
        elif kind_of == RENAME:
            state_renames[made] += 1
            shown[i] = False
        param_start[made + 1], required_start[made + 1] = position, required_position
        current[i] = made
        change[t], content_of[t] = kind_of, made
        if kind_of == RENAME:  # the step shows the migration guide
            kind[t], renamed_from[t] = GUIDE, was
            prev_content = -1
        else:
            kind[t] = SNAPSHOT
            prev_content = made
        if kind_of <= RENAME:  # breaking
            breaking[t] = True
            utility[t] = change_value
            if kind_of != RENAME and u_revert[t] < d.revert_prob:
                at = t + revert_delay[t]
                while at < T and due_endpoint[at] >= 0:  # one revert per step
                    at += 1
                frozen_until[i] = at
                if at < T:
                    due_endpoint[at], due_state[at], due_change[at] = i, was, t
        else:
            utility[t] = UTILITY_COSMETIC

    # A requirement is in force at the end only if its parameter is required then and no later
    # requirement of the same parameter replaced it (after a relax in between).
    reverted = np.zeros(T, dtype=np.bool_)
    for t in range(T):
        if reverted_change[t] >= 0:
            reverted[reverted_change[t]] = True
    undone = np.zeros(T, dtype=np.bool_)
    later = {np.int64(-1)}  # endpoint * names + name of the requirements seen, from the end
    for t in range(T - 1, -1, -1):
        if change[t] != REQUIRE_PARAM or reverted[t]:
            continue
        i, name = step_endpoint[t], required_name[t]
        final = current[i]
        in_force = False
        for j in range(required_start[final], required_start[final + 1]):
            if required[j] == name:
                in_force = True
        key = i * n_names + name
        if not in_force or key in later:
            undone[t] = True
            utility[t] = UTILITY_COSMETIC
        later.add(key)
    critical = np.zeros(T, dtype=np.bool_)
    for t in range(T):
        critical[t] = breaking[t] and not reverted[t] and not undone[t]
    return Structure(kind, content_of, renamed_from, step_endpoint, change, utility, critical, undone,
                      reverted_change, state_endpoint[:n_states], state_renames[:n_states], state_version[:n_states],
                      state_deprecated[:n_states], param_start[:n_states + 1], params[:position],
                      required_start[:n_states + 1], required[:required_position], pairs[:n_names],
                      suffixes[:n_names], 0)
