"""The compiled dynamics: ``WritePolicyBenchEnv.advance`` and ``ObservationEncoder.update`` for
many sub-envs in one call, on the flat arrays of ``episode_arrays`` (numba, nopython).

Each function mirrors a piece of the single env, named in its docstring; the differential
tests (``tests/envs/test_vector_env.py``) play both on the same seeds and actions and require
every output to be equal, bit for bit. The features the single env keeps as flags on stored
rows are read from the memory instead: ``superseded`` (not its family's newest item) and
``orphan`` (a MERGE delta whose base is gone).
"""

from __future__ import annotations

import math

import numpy as np

from .arenas import episode
from .borrowing import borrowing
from .compile_cache import cached
from .comparisons import added, col, compare_versions, fat, fields_changed, merge_cost, reverted, since_seen
from .layout import (
    API,
    API_HEAD,
    CHILDREN,
    COMPRESSED,
    COMPRESSING,
    CONTENT,
    COST,
    CRITICAL,
    DEPRECATED,
    EMPTY_DELTA,
    EMPTY_SLOT,
    ENDPOINT,
    EXPIRE_CAP,
    F_CREDIT,
    F_KEPT_CRITICAL,
    F_KEPT_UTILITY,
    F_PAID,
    F_PENALTIES,
    F_POTENTIAL,
    FAMILY,
    FAMILY_HEAD,
    FAMILY_LIVE,
    FAMILY_PREV,
    H_APIS,
    H_FAMILIES,
    H_LENGTH,
    H_STATE,
    ITEM_COST,
    KIND,
    KINDS_LIMITED,
    LOG,
    MERGE_OK,
    METRIC_F1,
    METRIC_UTILITY,
    N_FLOATS,
    N_KINDS,
    N_MEMORY,
    N_SLOT,
    N_STEP,
    NEXT,
    NOT_COMPRESSIBLE,
    NOT_COMPRESSIBLE_STEP,
    NOT_SAME_ENDPOINT,
    NOTHING_TO_COMPRESS,
    ORACLE_PREFIX,
    ORPHAN,
    OUT_OF_WRITE_TIME,
    OVER_BUDGET,
    OVER_KIND_BUDGET,
    PARAMS,
    PARENT,
    PRIORITY,
    REQUIRED,
    REVERTED,
    S_BUDGET,
    S_CRITICAL_BEFORE,
    S_DECIDED,
    S_EXPIRES,
    S_EXPIRES_NOW,
    S_HEAD,
    S_ITEMS,
    S_KEPT,
    S_KIND_LIMITS,
    S_KIND_USED,
    S_LENGTH,
    S_LOG,
    S_MERGE_ITEMS,
    S_MERGES,
    S_REVERTED_EXPIRED,
    S_SHOWN,
    S_SLOTS,
    S_T,
    S_TAIL,
    S_TICKS,
    S_USED,
    S_WRITES,
    SAME_API,
    SAME_FAMILY,
    SLOT_CONTEXT,
    SLOT_KIND,
    SLOT_KINDS,
    STEP_COMPARE,
    STEP_KIND,
    SUMMARY,
    SUMMARY_COST,
    SUMMARY_KIND,
    SUPERSEDED,
    TARGET_NOT_BASE,
    UTILITY,
    WT_PER_KB,
    WT_PER_WRITE,
    WT_TOTAL,
)
from .memory import cost_budget, largest, remove, st, store


@borrowing
def _slots(static, state, scalars, K, oldest, family, family_live):
    """``ObservationEncoder._relevant_slots`` (or the K oldest items): into the scalars' slot
    columns; returns how many are shown."""
    if scalars[S_ITEMS] == 0:
        return 0
    nxt = st(static, NEXT)
    shown = 0
    if oldest:
        s = scalars[S_HEAD]
        while s >= 0 and shown < K:
            scalars[S_SLOTS + shown] = s
            shown += 1
            s = state[nxt + s]
        return shown
    big = largest(static, state, scalars)
    scalars[S_SLOTS] = big
    shown = 1
    if K == 1:
        return shown
    if family >= 0 and family_live > 0:
        older = st(static, FAMILY_PREV)
        s = state[st(static, FAMILY_HEAD) + family]
        while s >= 0 and shown < K:
            if s != big:
                scalars[S_SLOTS + shown] = s
                shown += 1
            s = state[older + s]
        s = scalars[S_HEAD]
        while s >= 0 and shown < K:
            if col(static, FAMILY, s) != family and s != big:
                scalars[S_SLOTS + shown] = s
                shown += 1
            s = state[nxt + s]
        return shown
    s = scalars[S_HEAD]
    while s >= 0 and shown < K:
        if s != big:
            scalars[S_SLOTS + shown] = s
            shown += 1
        s = state[nxt + s]
    return shown


@borrowing
def observe(static, floats, state, scalars, K, cap, oldest, privileged, limits, obs, mask):
    """``ObservationEncoder.update``: the slots, the observation row ``obs`` and the mask."""
    t = scalars[S_T]
    family = col(static, FAMILY, t) if t < scalars[S_LENGTH] else -1
    family_live = state[st(static, FAMILY_LIVE) + family] if family >= 0 else 0
    scalars[S_SHOWN] = _slots(static, state, scalars, K, oldest, family, family_live)
    describe(static, floats, state, scalars, K, cap, privileged, limits, obs, mask)


@borrowing
def expose(static, floats, state, scalars, K, cap, privileged, limits, obs, mask, s):
    """``WritePolicyBenchEnv.expose_item`` of stored item ``s`` not shown (the layout is full):
    it takes the last slot until the next step; the observation row and the mask follow."""
    scalars[S_SLOTS + K - 1] = s
    scalars[S_SHOWN] = K
    describe(static, floats, state, scalars, K, cap, privileged, limits, obs, mask)


@borrowing
def _kind_room(scalars, kind, remaining):
    """``ByteMemoryStore.kind_remaining``: the bytes a WRITE of content ``kind`` may still take."""
    limit = scalars[S_KIND_LIMITS + kind]
    if limit < 0:
        return remaining
    return min(remaining, limit - scalars[S_KIND_USED + kind])


@borrowing
def _kind_affords(scalars, kind, n_bytes):
    """Whether content ``kind``'s limit (if it has one) has room for ``n_bytes`` more."""
    limit = scalars[S_KIND_LIMITS + kind]
    return limit < 0 or scalars[S_KIND_USED + kind] + n_bytes <= limit


@borrowing
def ticks(limits, n_bytes):
    """``WriteTime.ticks``: the ticks a WRITE or MERGE storing ``n_bytes`` takes."""
    return limits[WT_PER_WRITE] + (n_bytes * limits[WT_PER_KB] + 1023) // 1024


@borrowing
def _time_affords(limits, scalars, n_bytes):
    """Whether the episode's write time has room for a write of ``n_bytes`` (always, without a
    write-time budget)."""
    total = limits[WT_TOTAL]
    return total < 0 or scalars[S_TICKS] + ticks(limits, n_bytes) <= total


@borrowing
def _item_content(static, state, s):
    """The content item ``s`` holds: its step's, or the summary a compressed WRITE holds."""
    if state[st(static, PARENT) + s] == COMPRESSED:
        return col(static, SUMMARY, s)
    return col(static, CONTENT, s)


@borrowing
def _item_kind(static, state, s):
    """The content kind item ``s`` counts in (``ByteMemoryStore``'s item kinds): its step's, or
    its summary's for a compressed WRITE (a MERGE's step has its base's kind: the same api)."""
    if state[st(static, PARENT) + s] == COMPRESSED:
        return col(static, SUMMARY_KIND, s)
    return col(static, KIND, s)


@borrowing
def _merges_into_summary(static, s):
    """Whether compressed item ``s``'s summary kept the step's api (a MERGE joins it then)."""
    return col(static, SUMMARY_KIND, s) == ENDPOINT


@borrowing
def describe(static, floats, state, scalars, K, cap, privileged, limits, obs, mask):
    """The observation row ``obs`` and the mask of the items the scalars' slot columns show
    (with a write-time budget or limits per content kind, ``store_limits.TIME_FEATURES`` or
    ``KIND_FEATURES`` after the slots, and the WRITE and MERGE bits only where they have room;
    with compression, ``compression_features`` after the slots and the compressed WRITE's bit
    last, a MERGE into a compressed item priced against its summary, its features against the
    step it was written from, as ``store_limits.EnvLimits`` has them)."""
    T = scalars[S_LENGTH]
    t = scalars[S_T]
    live = t < T
    budget = scalars[S_BUDGET]
    remaining = budget - scalars[S_USED]
    n_items = scalars[S_ITEMS]
    family = col(static, FAMILY, t) if live else -1
    family_live = state[st(static, FAMILY_LIVE) + family] if family >= 0 else 0
    shown = scalars[S_SHOWN]
    inv_T = 1.0 / T
    n_step = N_STEP + privileged
    n_slot = N_SLOT + privileged
    obs[:] = 0.0
    mask[:] = False
    mask[0] = True
    expires_now = scalars[S_EXPIRES_NOW]
    cost = col(static, COST, t) if live else 0
    fits = live and cost <= remaining
    kind = col(static, KIND, t) if live else 0
    mask[1] = fits and _kind_affords(scalars, kind, cost) and _time_affords(limits, scalars, cost)
    if live and (cap < 0 or expires_now < cap):
        for k in range(shown):
            mask[2 + K + k] = True
    if cap < 0:
        cap_left = 1.0 if live else 0.0
    else:
        cap_left = (cap - expires_now) / cap if live and cap else 0.0
    if fits:
        fits_if_larger = 1.0
    elif live and cost <= budget:
        freed = 0
        costs, nxt = st(static, ITEM_COST), st(static, NEXT)
        s = scalars[S_HEAD]
        while s >= 0:
            if state[costs + s] > cost:
                freed += state[costs + s]
            s = state[nxt + s]
        fits_if_larger = 1.0 if cost <= remaining + freed else 0.0
    else:
        fits_if_larger = 0.0
    m = n_step
    obs[m] = remaining / budget if budget else 0.0
    obs[m + 1] = n_items / (n_items + K)
    obs[m + 2] = (n_items - shown) / n_items if n_items else 0.0
    obs[m + 3] = scalars[S_MERGE_ITEMS] / n_items if n_items else 0.0
    obs[m + 4] = t * inv_T if live else 1.0
    obs[m + 5] = cap_left
    obs[m + 6] = 1.0 if scalars[S_REVERTED_EXPIRED] else 0.0
    obs[m + 7] = fits_if_larger
    end = n_step + N_MEMORY + K * n_slot  # the limits' features follow the slots
    total = limits[WT_TOTAL]
    if total >= 0:
        obs[end] = (total - scalars[S_TICKS]) / total if total else 0.0
        obs[end + 1] = 1.0 if live and _time_affords(limits, scalars, cost) else 0.0
    if limits[KINDS_LIMITED]:
        scale = budget if budget > 1 else 1
        for k in range(N_KINDS):
            obs[end + k] = min(1.0, max(0.0, _kind_room(scalars, k, remaining) / scale))
        obs[end + N_KINDS] = 1.0 if live and cost <= _kind_room(scalars, kind, remaining) else 0.0
    content = col(static, CONTENT, t) if live else 0
    api = col(static, API, t) if live else -1
    if live:
        obs[0] = cost_budget(cost, budget)
        if remaining > 0:
            obs[1] = min(1.0, cost / remaining)
        else:
            obs[1] = 0.0 if cost == 0 else 1.0
        obs[2] = 1.0 if cost <= remaining else 0.0
        obs[STEP_KIND + kind] = 1.0
        deprecated = fat(floats, DEPRECATED, t)
        if family_live:
            _compare_with_memory(static, floats, state, t, family, family_live, api, cost, remaining, K, inv_T, obs)
        else:
            obs[STEP_COMPARE + 10] = deprecated
        since_seen(static, floats, t, obs)
        if privileged:
            obs[N_STEP] = fat(floats, PRIORITY, t)
    age_now = t if live else T
    costs, parents = st(static, ITEM_COST), st(static, PARENT)
    heads = st(static, FAMILY_HEAD)
    for k in range(shown):
        s = scalars[S_SLOTS + k]
        r = n_step + N_MEMORY + k * n_slot
        parent = state[parents + s]
        obs[r] = 1.0
        obs[r + 1] = (age_now - s) * inv_T
        if parent < 0:
            obs[r + 2] = cost_budget(col(static, COST, s), budget)
        else:
            obs[r + 2] = min(1.0, state[costs + s] / budget) if budget else 1.0
            obs[r + 3] = 1.0
        item_kind = col(static, KIND, s)
        if item_kind < SLOT_KINDS:
            obs[r + SLOT_KIND + item_kind] = 1.0
        obs[r + SLOT_KIND + SLOT_KINDS] = fat(floats, DEPRECATED, s)
        c = r + SLOT_CONTEXT
        if privileged:
            obs[c] = fat(floats, PRIORITY, s)
            c += 1
        if parent >= 0 and state[costs + parent] < 0:
            obs[c + ORPHAN] = 1.0
        item_family = col(static, FAMILY, s)
        if item_family >= 0 and state[heads + item_family] != s:
            obs[c + SUPERSEDED] = 1.0
        if family_live and item_family == family:
            obs[c + SAME_FAMILY] = 1.0
            if item_kind == ENDPOINT and reverted(static, floats, s, t):
                obs[c + REVERTED] = 1.0
            if api >= 0 and col(static, API, s) == api:
                obs[c + SAME_API] = 1.0
                if parent < 0:
                    delta_cost = merge_cost(static, content, col(static, CONTENT, s))
                    if delta_cost >= 0 and delta_cost <= remaining:
                        obs[c + MERGE_OK] = 1.0
                        if parent != COMPRESSED:
                            mask[2 + k] = (_kind_affords(scalars, item_kind, delta_cost)
                                           and _time_affords(limits, scalars, delta_cost))
                    if parent == COMPRESSED and _merges_into_summary(static, s):
                        delta_cost = merge_cost(static, content, col(static, SUMMARY, s))
                        mask[2 + k] = (0 <= delta_cost <= remaining
                                       and _kind_affords(scalars, col(static, SUMMARY_KIND, s), delta_cost)
                                       and _time_affords(limits, scalars, delta_cost))
    if limits[COMPRESSING]:
        _compression_features(static, state, scalars, K, limits, live, t, cost, remaining, obs, mask, end)


@borrowing
def _compression_features(static, state, scalars, K, limits, live, t, cost, remaining, obs, mask, end):
    """``store_limits.compression_features`` from ``end`` on, and the compressed WRITE's bit,
    the last of the mask."""
    a = 2 + 2 * K
    if live and col(static, SUMMARY, t) >= 0:
        small = col(static, SUMMARY_COST, t)
        obs[end] = small / cost if cost else 0.0
        mask[a] = (small <= remaining and _kind_affords(scalars, col(static, SUMMARY_KIND, t), small)
                   and _time_affords(limits, scalars, small))
    obs[end + 1] = 1.0 if mask[a] else 0.0
    parents = st(static, PARENT)
    for k in range(scalars[S_SHOWN]):
        if state[parents + scalars[S_SLOTS + k]] == COMPRESSED:
            obs[end + 2 + k] = 1.0


@borrowing
def _compare_with_memory(static, floats, state, t, family, family_live, api, cost, remaining, K, inv_T, obs):
    """``ObservationEncoder._step_row``'s features from family_in_memory to family_items."""
    ref = state[st(static, FAMILY_HEAD) + family]
    base = state[st(static, API_HEAD) + api] if api >= 0 else -1
    ct, cr = col(static, CONTENT, t), col(static, CONTENT, ref)
    merge_ok, merge_share = 0.0, 0.0
    if base >= 0:
        delta_cost = merge_cost(static, ct, col(static, CONTENT, base))
        if delta_cost >= 0:
            merge_ok = 1.0 if delta_cost <= remaining else 0.0
            merge_share = min(1.0, delta_cost / cost) if cost else 1.0
    identical = ct == cr
    order = 0 if identical else compare_versions(static, ct, cr)
    dep_t, dep_r = fat(floats, DEPRECATED, t), fat(floats, DEPRECATED, ref)
    pt, pr = col(static, PARAMS, ct), col(static, PARAMS, cr)
    qt, qr = col(static, REQUIRED, ct), col(static, REQUIRED, cr)
    c = STEP_COMPARE
    obs[c] = 1.0
    obs[c + 1] = 1.0 if base >= 0 else 0.0
    obs[c + 2] = 1.0 if identical else 0.0
    obs[c + 3] = 1.0 if order == 1 else 0.0
    obs[c + 4] = 1.0 if order == -1 else 0.0
    obs[c + 5] = 0.0 if identical or order == 0 else 1.0
    obs[c + 6] = added(static, pt, pr)
    obs[c + 7] = added(static, pr, pt)
    obs[c + 8] = added(static, qt, qr)
    obs[c + 9] = added(static, qr, qt)
    obs[c + 10] = dep_t
    obs[c + 11] = 1.0 if dep_t > dep_r else 0.0
    obs[c + 12] = 1.0 if dep_r > dep_t else 0.0
    obs[c + 13] = 0.0 if identical else fields_changed(static, ct, cr)
    obs[c + 14] = merge_ok
    obs[c + 15] = merge_share
    obs[c + 16] = (t - ref) * inv_T
    obs[c + 17] = min(1.0, family_live / K)


@borrowing
def _rejection(static, state, scalars, a, K, cap, t):
    """``WritePolicyBenchEnv._rejection_reason`` of an action the mask refused."""
    remaining = scalars[S_BUDGET] - scalars[S_USED]
    if a == 1:
        return _over(scalars, col(static, KIND, t), col(static, COST, t), remaining)
    if a == 2 + 2 * K:  # a compressed WRITE
        summary = col(static, SUMMARY, t)
        if summary < 0:
            return NOT_COMPRESSIBLE if summary == NOT_COMPRESSIBLE_STEP else NOTHING_TO_COMPRESS
        return _over(scalars, col(static, SUMMARY_KIND, t), col(static, SUMMARY_COST, t), remaining)
    k = (a - 2) % K
    if k >= scalars[S_SHOWN]:
        return EMPTY_SLOT
    if a >= 2 + K:
        return EXPIRE_CAP
    s = scalars[S_SLOTS + k]
    parent = state[st(static, PARENT) + s]
    if parent >= 0:
        return TARGET_NOT_BASE
    api = col(static, API, t)
    if api < 0 or col(static, API, s) != api or (parent == COMPRESSED and not _merges_into_summary(static, s)):
        return NOT_SAME_ENDPOINT
    delta_cost = merge_cost(static, col(static, CONTENT, t), _item_content(static, state, s))
    if delta_cost < 0:
        return EMPTY_DELTA
    return _over(scalars, _item_kind(static, state, s), delta_cost, remaining)


@borrowing
def _over(scalars, kind, n_bytes, remaining):
    """Why the store refuses a WRITE or MERGE of ``n_bytes`` into content ``kind`` whose target
    and delta it would take: the first limit it runs past, in the store's order."""
    if n_bytes > remaining:
        return OVER_BUDGET
    if not _kind_affords(scalars, kind, n_bytes):
        return OVER_KIND_BUDGET
    return OUT_OF_WRITE_TIME


@borrowing
def _keep(static, floats, scalars, fscalars, t, sign, worth):
    """``RewardFunction.kept`` (sign 1) and ``dropped`` (sign -1) of one step, which counts
    ``worth`` (1, or a compressed item's credit)."""
    scalars[S_KEPT] += sign
    if sign > 0:
        fscalars[F_KEPT_CRITICAL] += col(static, CRITICAL, t) * worth
        fscalars[F_KEPT_UTILITY] += fat(floats, UTILITY, t) * worth
    else:
        fscalars[F_KEPT_CRITICAL] -= col(static, CRITICAL, t) * worth
        fscalars[F_KEPT_UTILITY] -= fat(floats, UTILITY, t) * worth


@borrowing
def _potential(floats, scalars, fscalars, codes, weights):
    """``RewardFunction._current_potential``."""
    total = 0.0
    oracle = floats[N_FLOATS]
    kept_utility = fscalars[F_KEPT_UTILITY]
    for j in range(len(codes)):
        if codes[j] == METRIC_F1:
            denominator = scalars[S_KEPT] + scalars[S_CRITICAL_BEFORE]
            value = 2.0 * fscalars[F_KEPT_CRITICAL] / denominator if denominator else 0.0
        elif math.isnan(oracle) or oracle == 0.0:
            value = 0.0
        elif codes[j] == METRIC_UTILITY:
            value = kept_utility / oracle
        else:
            decided = scalars[S_DECIDED]
            best = fat(floats, ORACLE_PREFIX, decided - 1) if decided else 0.0
            gap = best - kept_utility
            value = -(gap if gap > 0.0 else 0.0) / oracle
        total += weights[j] * value
    return total


@borrowing
def advance(static, floats, state, scalars, fscalars, mask, a, K, cap, dense, codes, weights, invalid_penalty,
            expire_cost, limits):
    """``WritePolicyBenchEnv.advance`` of action ``a``: returns (reward, terminated, reason);
    the reward of the step that ends the episode is closed by the caller (it needs the final
    metrics)."""
    t = scalars[S_T]
    penalty = 0.0
    reason = 0
    expired = False
    target = -1
    if not mask[a]:
        reason = _rejection(static, state, scalars, a, K, cap, t)
        penalty = invalid_penalty
    elif a == 1:
        cost = col(static, COST, t)
        store(static, state, scalars, t, -1, cost)
        scalars[S_TICKS] += ticks(limits, cost)
        scalars[S_KIND_USED + col(static, KIND, t)] += cost
        scalars[S_WRITES] += 1
        _keep(static, floats, scalars, fscalars, t, 1, 1.0)
    elif a == 2 + 2 * K:  # a compressed WRITE: memory holds the step's summary
        cost = col(static, SUMMARY_COST, t)
        store(static, state, scalars, t, COMPRESSED, cost)
        scalars[S_TICKS] += ticks(limits, cost)
        scalars[S_KIND_USED + col(static, SUMMARY_KIND, t)] += cost
        scalars[S_WRITES] += 1
        _keep(static, floats, scalars, fscalars, t, 1, fscalars[F_CREDIT])
    elif 2 <= a < 2 + K:
        target = scalars[S_SLOTS + a - 2]
        cost = merge_cost(static, col(static, CONTENT, t), _item_content(static, state, target))
        store(static, state, scalars, t, target, cost)
        scalars[S_TICKS] += ticks(limits, cost)
        scalars[S_KIND_USED + _item_kind(static, state, target)] += cost  # a MERGE counts in its base's kind
        scalars[S_MERGES] += 1
        _keep(static, floats, scalars, fscalars, t, 1, 1.0)
    elif a >= 2 + K:
        target = scalars[S_SLOTS + a - 2 - K]
        costs, parents = st(static, ITEM_COST), st(static, PARENT)
        parent = state[parents + target]
        # ByteMemoryStore.retained_loss: the item if retained, then a base's MERGE deltas in order.
        if parent < 0 or state[costs + parent] >= 0:
            _keep(static, floats, scalars, fscalars, target, -1, fscalars[F_CREDIT] if parent == COMPRESSED else 1.0)
        if parent < 0:
            left = state[st(static, CHILDREN) + target]
            nxt = st(static, NEXT)
            s = state[nxt + target]
            while left > 0 and s >= 0:
                if state[parents + s] == target:
                    _keep(static, floats, scalars, fscalars, s, -1, 1.0)
                    left -= 1
                s = state[nxt + s]
        if col(static, KIND, target) == ENDPOINT and col(static, FAMILY, target) == col(static, FAMILY, t):
            if not scalars[S_REVERTED_EXPIRED] and reverted(static, floats, target, t):
                scalars[S_REVERTED_EXPIRED] = 1
        scalars[S_KIND_USED + _item_kind(static, state, target)] -= state[costs + target]
        remove(static, state, scalars, target)
        scalars[S_EXPIRES] += 1
        expired = True
    # The log: each action and what it did to memory (the step or item it stored, merged into
    # or expired; -1 for none; -1 - its reason for a refused action), which ``decisions`` reads.
    log = st(static, LOG) + 2 * scalars[S_LOG]
    state[log] = a
    state[log + 1] = -1 - reason if reason else (target if target >= 0 else (t if a != 0 else -1))
    scalars[S_LOG] += 1
    if expired:
        scalars[S_EXPIRES_NOW] += 1
        if expire_cost:
            penalty += expire_cost
    else:
        scalars[S_T] = t + 1
        scalars[S_EXPIRES_NOW] = 0
        scalars[S_REVERTED_EXPIRED] = 0
        scalars[S_DECIDED] = t + 1
        scalars[S_CRITICAL_BEFORE] += col(static, CRITICAL, t)
    terminated = scalars[S_T] >= scalars[S_LENGTH]
    reward = -penalty if penalty else 0.0
    fscalars[F_PENALTIES] += penalty
    if not terminated:
        if dense:
            potential = _potential(floats, scalars, fscalars, codes, weights)
            reward += potential - fscalars[F_POTENTIAL]
            fscalars[F_POTENTIAL] = potential
        fscalars[F_PAID] += reward
    return reward, terminated, reason


@borrowing
def start(static, state, scalars, fscalars, budget, kind_limits, credit):
    """A new episode: empty memory (the state's sections set to "none"), counters at 0, the
    content kinds' limits ``kind_limits`` (bytes; -1: none) and what a compressed item is worth
    (``credit``; with compression)."""
    scalars[:] = 0
    fscalars[:] = 0.0
    fscalars[F_CREDIT] = credit
    scalars[S_LENGTH] = static[H_LENGTH]
    scalars[S_BUDGET] = budget
    for k in range(N_KINDS):
        scalars[S_KIND_LIMITS + k] = kind_limits[k]
    scalars[S_HEAD] = -1
    scalars[S_TAIL] = -1
    state[:] = 0
    T = static[H_LENGTH]
    state[st(static, ITEM_COST): st(static, ITEM_COST) + T] = -1
    heads = st(static, FAMILY_HEAD)
    state[heads: heads + static[H_FAMILIES]] = -1
    heads = st(static, API_HEAD)
    state[heads: heads + static[H_APIS]] = -1


@borrowing
def step_batch(indices, actions, statics, floats, states, spans, scalars, fscalars, masks, observations, rewards,
               terminated, reasons, K, cap, oldest, privileged, dense, codes, weights, invalid_penalties, expire_cost,
               limits):
    """``advance`` then ``observe`` for the sub-envs in ``indices`` (their arrays: ``arenas``);
    returns -1, or the first sub-env whose episode was over (its single env was stepped to the
    end), and then steps none."""
    for j in range(len(indices)):
        i = indices[j]
        if scalars[i, S_T] >= scalars[i, S_LENGTH]:
            return i
    for j in range(len(indices)):
        i = indices[j]
        static, fl, state = episode(statics, floats, states, spans, i)
        row, mask = scalars[i], masks[i]
        reward, done, reason = advance(static, fl, state, row, fscalars[i], mask, actions[i], K, cap, dense, codes,
                                       weights, invalid_penalties[i], expire_cost, limits)
        rewards[i] = reward
        terminated[i] = done
        reasons[i] = reason
        observe(static, fl, state, row, K, cap, oldest, privileged, limits, observations[i], mask)
    return -1


@borrowing
def start_batch(indices, budgets, kind_limits, credit, statics, floats, states, spans, scalars, fscalars, masks,
                observations, K, cap, oldest, privileged, limits):
    """``start`` then ``observe`` for the sub-envs in ``indices`` (their arrays: ``arenas``), with
    budgets ``budgets``, content kinds' limits ``kind_limits`` (a row each) and compressed
    items' ``credit``."""
    for j in range(len(indices)):
        i = indices[j]
        static, fl, state = episode(statics, floats, states, spans, i)
        start(static, state, scalars[i], fscalars[i], budgets[j], kind_limits[j], credit)
        observe(static, fl, state, scalars[i], K, cap, oldest, privileged, limits, observations[i], masks[i])


@cached()
def retained(static, state, scalars):
    """The retained set W of the memory, ascending (``ByteMemoryStore.retained_timesteps``): the
    stored items in store order (their steps, ascending), a MERGE item only while its base is."""
    costs, parents, nxt = st(static, ITEM_COST), st(static, PARENT), st(static, NEXT)
    kept = np.empty(scalars[S_ITEMS], dtype=np.int64)
    n = 0
    s = scalars[S_HEAD]
    while s >= 0:
        parent = state[parents + s]
        if parent < 0 or state[costs + parent] >= 0:
            kept[n] = s
            n += 1
        s = state[nxt + s]
    return kept[:n]


def decisions(static: np.ndarray, state: np.ndarray, scalars: np.ndarray) -> np.ndarray:
    """The episode's actions so far, one row each: the action, then the step or item it stored,
    merged into or expired (-1: none, for SKIP; -1 - the reason's code in ``layout.REASONS``,
    below -1: the action was refused)."""
    log = int(static[H_STATE + LOG])
    return state[log: log + 2 * int(scalars[S_LOG])].reshape(-1, 2)
