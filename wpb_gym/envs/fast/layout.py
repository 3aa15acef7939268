"""Where things sit in the compiled core's flat arrays: shared by ``episode_arrays`` (which
fills them) and ``kernel`` (which reads them; numba takes module-level ints as constants)."""

from __future__ import annotations

from ..observation.features import MEMORY_FEATURES, SEEN_FEATURES, SLOT_CONTEXT_FEATURES, SLOT_FEATURES, STEP_FEATURES
from ..observation.stream_table import KIND_ENDPOINT, KIND_OTHER

# ---- static (int32): a header, then one section per name below, in this order.
(COST, KIND, FAMILY, API, CONTENT, PREVIOUS, CRITICAL, RETURNS,  # per timestep
 VERSION_KIND, VERSION_RANK, PARAMS, REQUIRED, CONTRACT, IS_DICT, EQUALITY, FIELD_OFFSETS,  # per content
 FIELD_KEYS, FIELD_VALUES, FIELD_LENGTHS, FIELD_IS_API,  # per field of a content
 MASK_OFFSETS, MASK_BITS,  # per parameter set
 SUMMARY, SUMMARY_COST, SUMMARY_KIND) = range(25)  # per timestep, with compression only (else empty)
N_STATIC = 25
# SUMMARY holds the content of the step's ``summary/1`` form (``core.compression``), or why the
# codec refuses the step; SUMMARY_COST and SUMMARY_KIND the compressed WRITE's bytes and content kind.
NOT_COMPRESSIBLE_STEP, NOTHING_TO_COMPRESS_STEP = -1, -2
H_LENGTH, H_FAMILIES, H_APIS, H_NONE_VALUE = range(4)
H_STATIC = 4  # the static sections' offsets
N_STATE = 15
H_STATE = H_STATIC + N_STATIC  # the state sections' offsets
HEADER_SIZE = H_STATE + N_STATE

# ---- floats (float64): offsets of these sections, U*(B) (NaN: not computed), then the sections.
UTILITY, PRIORITY, DEPRECATED, REMOVED, ORACLE_PREFIX = range(5)
N_FLOATS = 5

VERSION_NUMBER, VERSION_STRING, VERSION_OTHER = 0, 1, 2

# ---- state (int32), per sub-env: the memory.
(ITEM_COST,  # bytes of the item holding step t (-1: none)
 PARENT,  # a MERGE item's base (-1: a WRITE item; COMPRESSED: a compressed WRITE item)
 NEXT, PREV,  # store order (oldest first)
 FAMILY_PREV, FAMILY_NEXT,  # the items of a family (PREV: older)
 API_PREV, API_NEXT,  # the WRITE items of an api
 CHILDREN,  # a WRITE item's stored MERGE deltas
 FAMILY_HEAD, FAMILY_LIVE,  # per family: newest item, items stored
 API_HEAD,  # per api: newest WRITE item
 HEAP_COST, HEAP_T,  # items by size (a heap; expired items leave it lazily)
 LOG) = range(N_STATE)  # the actions taken this episode, and what each did (see kernel.decisions)


COMPRESSED = -2


def state_sizes(T: int, families: int, apis: int) -> list[int]:
    per_step = [T] * 9
    return per_step + [families, families, apis, T, T, 2 * (2 * T + 2)]


# ---- scalars (int64), per sub-env: one row of the vector env's scalar table.
(S_T, S_LENGTH, S_BUDGET, S_USED, S_ITEMS, S_MERGE_ITEMS, S_HEAD, S_TAIL, S_EXPIRES_NOW, S_REVERTED_EXPIRED,
 S_WRITES, S_EXPIRES, S_MERGES, S_KEPT, S_CRITICAL_BEFORE, S_DECIDED, S_HEAP, S_SHOWN,
 S_LOG, S_TICKS) = range(20)  # S_TICKS: write time spent
# Per content kind (``stream_table.KIND_*``, ``core.kind_budgets.KINDS``'s order), its limit in
# bytes (-1: none) and the bytes its items use; then the K shown items.
N_KINDS = 4
S_KIND_LIMITS = S_TICKS + 1
S_KIND_USED = S_KIND_LIMITS + N_KINDS
S_SLOTS = S_KIND_USED + N_KINDS


def n_scalars(K: int) -> int:
    return S_SLOTS + K


# ---- float scalars (float64), per sub-env. The critical steps kept count as floats: a compressed
# one counts its credit (F_CREDIT: what a compressed item is worth, with compression).
F_KEPT_UTILITY, F_KEPT_CRITICAL, F_POTENTIAL, F_PAID, F_PENALTIES, F_CREDIT = range(6)
N_FLOAT_SCALARS = 6

# Integers up to 2**53 convert to float64 exactly: the core plays budgets and EXPIRE caps below it
# (it divides in float64).
EXACT_INTS = 2**53

# ---- rejection reasons (0: accepted), as the single env names them.
REASONS = ("accepted", "over_budget", "empty_slot", "expire_cap", "target_not_base", "not_same_endpoint",
           "empty_delta", "out_of_write_time", "over_kind_budget", "not_compressible", "nothing_to_compress")
(OVER_BUDGET, EMPTY_SLOT, EXPIRE_CAP, TARGET_NOT_BASE, NOT_SAME_ENDPOINT, EMPTY_DELTA, OUT_OF_WRITE_TIME,
 OVER_KIND_BUDGET, NOT_COMPRESSIBLE, NOTHING_TO_COMPRESS) = range(1, len(REASONS))

# ---- the limits beside the byte budget, an int64 array the kernel is handed: the write time
# (``core.write_time``: the episode's ticks, negative for none; a write's fixed ticks; its ticks
# per KB), whether the content kinds have limits (``core.kind_budgets``: 1, and the
# observation shows each kind's room; each sub-env's own limits are in its scalars), and
# whether compressed WRITEs are allowed (``core.compression``: 1, the last action; the credit
# is each sub-env's F_CREDIT).
WT_TOTAL, WT_PER_WRITE, WT_PER_KB, KINDS_LIMITED, COMPRESSING = range(5)
N_LIMITS = 5

# ---- where features sit in an observation row (features.py's order; priority adds one column
# after the step features and one in each slot row, before the slot's context features).
N_STEP = len(STEP_FEATURES)
N_MEMORY = len(MEMORY_FEATURES)
N_SLOT = len(SLOT_FEATURES) + len(SLOT_CONTEXT_FEATURES)
STEP_COMPARE = STEP_FEATURES.index("family_in_memory")  # the 18 features comparing the step with memory
STEP_SEEN = STEP_FEATURES.index("family_seen")
N_SEEN = len(SEEN_FEATURES)
# The *_since_seen features, as positions in an observation row.
(SEEN_FAMILY, SEEN_CHANGED, SEEN_VERSION_UP, SEEN_VERSION_DOWN, SEEN_PARAMS_ADDED, SEEN_PARAMS_REMOVED,
 SEEN_REQUIRED_ADDED, SEEN_REQUIRED_REMOVED, SEEN_NEWLY_DEPRECATED, SEEN_UNDEPRECATED, SEEN_REMOVED,
 SEEN_NEWLY_REMOVED, SEEN_RESTORED, SEEN_RETURNS) = (
    STEP_SEEN + SEEN_FEATURES.index(name) for name in (
        "family_seen", "changed_since_seen", "version_up_since_seen", "version_down_since_seen",
        "params_added_since_seen", "params_removed_since_seen", "required_added_since_seen",
        "required_removed_since_seen", "newly_deprecated_since_seen", "undeprecated_since_seen", "removed",
        "newly_removed_since_seen", "restored_since_seen", "returns_to_earlier"))
STEP_KIND = STEP_FEATURES.index("kind_endpoint")  # four kind flags, in KIND_* order
SLOT_KIND = SLOT_FEATURES.index("kind_endpoint")  # three kind flags, then deprecated
SLOT_CONTEXT = len(SLOT_FEATURES)
ORPHAN, SAME_FAMILY, SAME_API, SUPERSEDED, MERGE_OK, REVERTED = (
    SLOT_CONTEXT_FEATURES.index(name) for name in ("orphan", "same_family", "same_api", "superseded", "merge_ok",
                                                   "reverted"))
ENDPOINT, SLOT_KINDS = KIND_ENDPOINT, KIND_OTHER  # a slot row flags the kinds before "other"
# ---- reward metrics, by code.
METRIC_CODES = {"f1": 0, "utility": 1, "neg_regret": 2}
METRIC_F1, METRIC_UTILITY = METRIC_CODES["f1"], METRIC_CODES["utility"]
