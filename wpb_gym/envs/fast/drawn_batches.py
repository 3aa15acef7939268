"""Episodes played from their draws, started and ended a step's worth at a time.

At T = 200 a vector step of 256 sub-envs ends and starts a few episodes. One by one, each costs
several compiled calls and the Python between them; here the paper regimes' episodes a step
starts with the same generator config off the privileged track are made ready, placed
(``arenas``) and observed in one call (``start_drawn``), and the drawn episodes it ends are
counted, U*(B) included, in one call (``end_drawn``). What they compute is what the one-by-one
path computes: ``paper_episodes.unprivileged_arrays`` and ``kernel.start`` / ``observe``;
``kernel.retained`` and ``oracle_by_class.class_optimum``.
"""

from __future__ import annotations

import numpy as np

from .arenas import episode
from .compile_cache import cached
from .kernel import observe, retained, start
from .layout import COST, CRITICAL, H_LENGTH, H_STATIC, N_KINDS, S_BUDGET, UTILITY
from .oracle_by_class import class_optimum
from .paper_episodes import unprivileged_arrays

# The drawn episodes are played without limits beside the byte budget (see ``core``).
_NO_KIND_LIMITS = np.full(N_KINDS, -1, dtype=np.int64)

# The counts ``end_drawn`` gives per episode, in this order.
KEPT, KEPT_CRITICAL, KEPT_HALF_UNITS, STALENESS, CRITICAL_STEPS, ORACLE_HALF_UNITS = range(6)


@cached()
def start_drawn(indices, n_params, uniforms, endpoints, budgets, max_params, T, dynamics, metadata, entry_bytes,
                statics, floats, states, spans, capacity, scalars, fscalars, masks, observations, K, cap, oldest,
                privileged, limits):
    """Sub-env ``indices[j]`` starts the episode whose structure NumPy drew as ``n_params[j]``,
    ``uniforms[j]`` and ``endpoints[j]`` (``paper.structure_draws``), with budget ``budgets[j]``:
    its arrays made (``paper_episodes.unprivileged_arrays``), copied into its segments
    (``arenas``), started and observed. Returns per episode 1 if it started, 0 if its arrays
    would not fit int32, -1 if they do not fit its segments, with the sizes they need."""
    outcome = np.zeros(indices.shape[0], dtype=np.int64)
    need = np.zeros((indices.shape[0], 3), dtype=np.int64)
    for j in range(indices.shape[0]):
        i = indices[j]
        static, fl, state_size, _, _, _ = unprivileged_arrays(n_params[j], uniforms[j], endpoints[j], max_params, T,
                                                              dynamics, metadata, entry_bytes)
        if static.shape[0] == 0:
            continue
        need[j, 0], need[j, 1], need[j, 2] = static.shape[0], fl.shape[0], state_size
        if need[j, 0] > capacity[i, 0] or need[j, 1] > capacity[i, 1] or need[j, 2] > capacity[i, 2]:
            outcome[j] = -1
            continue
        spans[i, 1], spans[i, 3], spans[i, 5] = need[j, 0], need[j, 1], need[j, 2]
        held_static, held_floats, held_state = episode(statics, floats, states, spans, i)
        held_static[:] = static
        held_floats[:] = fl
        start(held_static, held_state, scalars[i], fscalars[i], budgets[j], _NO_KIND_LIMITS, 1.0)
        observe(held_static, held_floats, held_state, scalars[i], K, cap, oldest, privileged, limits,
                observations[i], masks[i])
        outcome[j] = 1
    return outcome, need


@cached()
def end_drawn(indices, statics, floats, states, spans, scalars, search, max_combinations):
    """What sub-env ``indices[j]``'s finished drawn episode is scored on: how many steps its
    memory retains (W, ``kernel.retained``), how many of them are critical, their utility in
    half units (every utility of the regimes played from their draws is a half: the sum is exact) and their
    staleness (``T - 1 - t``) summed, its number of critical steps, and U*(B) in half units
    where ``search[j]`` (-1: not searched, or more than ``max_combinations`` to try)."""
    out = np.empty((indices.shape[0], 6), dtype=np.int64)
    for j in range(indices.shape[0]):
        i = indices[j]
        static, fl, state = episode(statics, floats, states, spans, i)
        row = scalars[i]
        T = static[H_LENGTH]
        critical = static[H_STATIC + CRITICAL]
        at = int(fl[UTILITY])
        utilities = fl[at:at + T]
        kept = retained(static, state, row)
        tp, units, staleness = 0, 0, 0
        for t in kept:
            tp += static[critical + t]
            units += np.int64(np.rint(2.0 * utilities[t]))
            staleness += T - 1 - t
        relevant = 0
        for t in range(T):
            relevant += static[critical + t]
        best = -1
        if search[j]:
            costs = static[static[H_STATIC + COST]:static[H_STATIC + COST] + T].astype(np.int64)
            best = class_optimum(utilities, costs, row[S_BUDGET], max_combinations)
        out[j, KEPT], out[j, KEPT_CRITICAL], out[j, KEPT_HALF_UNITS] = kept.shape[0], tp, units
        out[j, STALENESS], out[j, CRITICAL_STEPS], out[j, ORACLE_HALF_UNITS] = staleness, relevant, best
    return out
