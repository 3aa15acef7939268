"""The observation's features: their names in the order they are packed, what each holds
(the tables below are the one description; the env's docstring and ``docs/environment.md``
show them, and a test keeps the page equal to them), and the layout of one configuration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from ...core.checks import require_int

STEP_TABLE = (
    ('cost_budget', 'WRITE cost / budget'),
    ('cost_remaining', 'WRITE cost / bytes remaining (1 if it does not fit)'),
    ('fits', '1 if WRITE would be accepted'),
    ('kind_endpoint', '1 for an endpoint snapshot (observation has ``api``)'),
    ('kind_doc', '1 for a documentation section (``section``)'),
    ('kind_guide', '1 for a migration guide (``old_api`` / ``new_api``)'),
    ('kind_other', '1 for anything else'),
    ('family_in_memory', '1 if a reference item exists'),
    ('api_in_memory', '1 if a WRITE item with exactly this ``api`` is stored (a MERGE target)'),
    ('identical_to_memory', "1 if the observation equals the reference item's"),
    ('version_up', "1 if ``version`` (else ``last_updated``) is later than the reference's"),
    ('version_down', '1 if it is earlier (a revert)'),
    ('version_changed', '1 if it differs at all'),
    ('params_added', 'parameters not in the reference / parameters of the step'),
    ('params_removed', 'reference parameters missing now / parameters of the reference'),
    ('required_added', 'as params_added, for the ``required`` list'),
    ('required_removed', 'as params_removed, for the ``required`` list'),
    ('deprecated', '1 if the step says ``deprecated: true``'),
    ('newly_deprecated', '1 if deprecated now and not in the reference'),
    ('undeprecated', '1 if the reference was deprecated and the step is not'),
    ('fields_changed', "fraction of the step's fields whose value differs from the reference's"),
    ('merge_ok', '1 if MERGE into the newest WRITE item of this ``api`` would be accepted'),
    ('merge_cost', 'cost of that MERGE / WRITE cost (0 when no MERGE is possible: no base, or nothing changed)'),
    ('reference_age', '(t - reference t) / T'),
    ('family_items', 'stored items of the family / K (clipped)'),
    ('family_seen', '1 if a step of this family was shown before (stored or not)'),
    ('changed_since_seen', '1 if the observation differs from the last shown step of its family'),
    ('version_up_since_seen', "1 if its version is later than that last shown step's"),
    ('version_down_since_seen', '1 if it is earlier'),
    ('params_added_since_seen', 'as params_added, against the last shown step of the family'),
    ('params_removed_since_seen', 'as params_removed, against that step'),
    ('required_added_since_seen', 'as required_added, against that step'),
    ('required_removed_since_seen', 'as required_removed, against that step'),
    ('newly_deprecated_since_seen', '1 if deprecated now and not in that step'),
    ('undeprecated_since_seen', '1 if that step was deprecated and this one is not'),
    ('removed', '1 if the step shows ``removed: true`` (an endpoint removed from the API)'),
    ('newly_removed_since_seen', '1 if removed now and not in that step'),
    ('restored_since_seen', '1 if that step showed it removed and this one does not'),
    (
        "returns_to_earlier",
        "1 if the contract differs from that step's but equals one the family showed before it (a revert)",
    ),
    ('priority', 'privileged track only: the ``priority`` hint'),
)
MEMORY_TABLE = (
    ('remaining', 'bytes remaining / budget'),
    ('items', 'n / (n + K) for n stored items'),
    ('hidden_items', 'fraction of stored items not shown in a slot'),
    ('merge_items', 'fraction of stored items that are MERGE deltas'),
    ('time', 't / T'),
    ('expires_left', 'EXPIREs still allowed this timestep / cap (1 when uncapped, 0 once the episode is over)'),
    ('reverted_expired', '1 if an item flagged ``reverted`` was expired at this timestep'),
    ('fits_if_larger_expired', '1 if WRITE fits, or would fit once every stored item larger than the step is expired'),
)
SLOT_TABLE = (
    ('present', '1 if the slot holds an item (every feature of an empty slot is 0)'),
    ('age', '(t - item t) / T'),
    ('cost_budget', "the item's bytes / budget"),
    ('is_merge', '1 for a MERGE delta, 0 for a base (WRITE) item'),
    ('kind_endpoint', 'as for the current step'),
    ('kind_doc', 'as for the current step'),
    ('kind_guide', 'as for the current step'),
    ('deprecated', '1 if the stored step said ``deprecated: true``'),
    ('priority', "privileged track only: the stored step's ``priority``"),
    ('orphan', '1 for a MERGE delta whose base was expired (it no longer counts as retained)'),
    ('same_family', "1 if of the current step's family"),
    ('same_api', "1 if its ``api`` equals the current step's exactly (0 without an ``api``)"),
    ('superseded', '1 if a newer item of its family is stored'),
    ('merge_ok', '1 if MERGE of the current step into this slot would be accepted'),
    (
        "reverted",
        "1 if the current step shows the contract its family had before this item was shown (the item's change "
        "was undone; for an item that was its family's first sighting and showed it removed: the endpoint is back)",
    ),
)

# The step features in observation order; priority (privileged track only) comes last.
STEP_FEATURES: tuple[str, ...] = tuple(name for name, _ in STEP_TABLE if name != "priority")
# The step features from family_seen on compare the step with the stream shown so far.
SEEN_FEATURES: tuple[str, ...] = STEP_FEATURES[STEP_FEATURES.index("family_seen") :]
MEMORY_FEATURES: tuple[str, ...] = tuple(name for name, _ in MEMORY_TABLE)
# Slot rows: present, age, the item's fixed features (its priority last, privileged track
# only), then the features that depend on the current step.
_SLOT_NAMES = tuple(name for name, _ in SLOT_TABLE)
SLOT_FEATURES: tuple[str, ...] = _SLOT_NAMES[: _SLOT_NAMES.index("priority")]
SLOT_CONTEXT_FEATURES: tuple[str, ...] = _SLOT_NAMES[_SLOT_NAMES.index("priority") + 1 :]
PRIORITY_FEATURE = "priority"


def feature_tables(indent: str = "") -> str:
    """The three tables of what each feature holds, as Markdown (the env's docstring and
    ``docs/environment.md`` show them)."""
    blocks = []
    for title, rows in (("Current step", STEP_TABLE), ("Memory", MEMORY_TABLE), ("Slot (K rows)", SLOT_TABLE)):
        width = max(len(title), *(len(name) for name, _ in rows))
        lines = [f"| {title:<{width}} | Value |", f"|{'-' * (width + 2)}|-------|"]
        lines += [f"| {name:<{width}} | {meaning} |" for name, meaning in rows]
        blocks.append("\n".join(indent + line for line in lines))
    return "\n\n".join(blocks)


SLOT_ORDERS = ("relevance", "oldest")
OBSERVATION_MODES = ("box", "dict")
# Far more slots than a budget holds entries: a few MB of observation, where a mistyped number
# would ask for terabytes.
MAX_SLOTS = 1 << 16


def check_encoder_arguments(
    slots: Any, slot_order: Any, observation_mode: Any, max_expires_per_step: Any
) -> tuple[int, str, str, int | None]:
    """The env's observation arguments, each checked (a ``ValueError`` names the argument)."""
    for name, value, choices in (("slot_order", slot_order, SLOT_ORDERS), ("observation_mode", observation_mode,
                                                                         OBSERVATION_MODES)):
        if value not in choices:
            raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    cap = max_expires_per_step
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
        raise ValueError(f"max_expires_per_step must be None or a non-negative int, got {cap!r}")
    K = require_int(slots, "slots", 1)
    if K > MAX_SLOTS:
        raise ValueError(f"slots must be at most {MAX_SLOTS}, got {K}")
    return K, slot_order, observation_mode, cap


@dataclass(frozen=True)
class ObservationLayout:
    """Where each feature sits for ``slots`` slots on a track (``privileged`` adds priority)."""

    slots: int
    privileged: bool

    @property
    def step_features(self) -> tuple[str, ...]:
        return STEP_FEATURES + ((PRIORITY_FEATURE,) if self.privileged else ())

    @property
    def memory_features(self) -> tuple[str, ...]:
        return MEMORY_FEATURES

    @property
    def slot_features(self) -> tuple[str, ...]:
        return SLOT_FEATURES + ((PRIORITY_FEATURE,) if self.privileged else ()) + SLOT_CONTEXT_FEATURES

    @property
    def n_step(self) -> int:
        return len(self.step_features)

    @property
    def n_memory(self) -> int:
        return len(MEMORY_FEATURES)

    @property
    def n_slot(self) -> int:
        return len(self.slot_features)

    @property
    def size(self) -> int:
        """The length of the flat (``"box"``) observation."""
        return self.n_step + self.n_memory + self.slots * self.n_slot

    @property
    def n_actions(self) -> int:
        return 2 + 2 * self.slots

    def split(self, flat: np.ndarray, masks: np.ndarray) -> dict[str, np.ndarray]:
        """The ``"dict"`` observation of flat rows (one, or a batch along the leading axes) and
        their bool masks: new arrays, keys in the encoder's order, the mask as int8."""
        step_end = self.n_step
        memory_end = step_end + self.n_memory
        return {"step": flat[..., :step_end].copy(), "memory": flat[..., step_end:memory_end].copy(),
                "slots": flat[..., memory_end:].copy(), "action_mask": masks.view(np.int8).copy()}

    def space(self, mode: str) -> spaces.Space:
        """The observation space: a flat ``Box`` (``"box"``) or a ``Dict`` of the parts and the
        action mask (``"dict"``; the K slot rows flat, row-major, as SB3's MultiInputPolicy
        expects)."""
        if mode == "box":
            return spaces.Box(0.0, 1.0, shape=(self.size,), dtype=np.float32)
        return spaces.Dict(
            {
                "step": spaces.Box(0.0, 1.0, shape=(self.n_step,), dtype=np.float32),
                "memory": spaces.Box(0.0, 1.0, shape=(self.n_memory,), dtype=np.float32),
                "slots": spaces.Box(0.0, 1.0, shape=(self.slots * self.n_slot,), dtype=np.float32),
                "action_mask": spaces.MultiBinary(self.n_actions),
            }
        )
