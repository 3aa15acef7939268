"""A slow, literal reference for the observation, the action mask and the rewards.

Each value is computed the way the env's docstring states it, from the episode as a policy
on the track sees it and from the memory store's public reading API, with no table, cache,
mirror or packing. It exists to check the fast encoder (``encoder.py``): a differential test
drives both over random reachable states and compares them. It is also a readable
definition of every feature.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np

from ...core.accounting import estimate_bytes, json_text
from ...core.store import ByteMemoryStore, Reason
from ...core.tracks import PRIVILEGED, policy_step, track_costs
from ...core.types import Episode, MemoryAction, MemoryItem, Step
from ...scoring.oracle import oracle_utility
from .features import MEMORY_FEATURES, ObservationLayout


@dataclass
class ReferenceView:
    """One observation, by feature name, with the slot layout and the mask."""

    step: dict[str, float]
    memory: dict[str, float]
    slots: list[int]  # the timestep of the item each shown slot holds
    slot_rows: list[dict[str, float]]
    mask: np.ndarray

    def vector(self, layout: ObservationLayout) -> np.ndarray:
        """The flat observation in the layout's order (empty slots are all 0)."""
        values = [self.step[name] for name in layout.step_features]
        values += [self.memory[name] for name in MEMORY_FEATURES]
        for k in range(layout.slots):
            row = self.slot_rows[k] if k < len(self.slot_rows) else {}
            values += [row.get(name, 0.0) for name in layout.slot_features]
        return np.asarray(values, dtype=np.float32)


def family(observation: Any) -> tuple[str, str] | None:
    """An observation's family: the endpoint with version segments (``v`` + digits between
    ``.``/``/`` separators or at an end) removed from ``api``; a documentation section's title;
    a migration guide's ``old_api`` family. None: no family."""
    if not isinstance(observation, dict):
        return None
    if "api" in observation:
        return ("api", _typed(_unversioned(observation["api"])))
    if "section" in observation:
        return ("section", _typed(observation["section"]))
    if "old_api" in observation or "new_api" in observation:
        return ("guide", _typed(_unversioned(observation.get("old_api"))))
    return None


def kind(observation: Any) -> str:
    if isinstance(observation, dict):
        if "api" in observation:
            return "endpoint"
        if "section" in observation:
            return "doc"
        if "old_api" in observation or "new_api" in observation:
            return "guide"
    return "other"


def _unversioned(api: Any) -> Any:
    return re.sub(r"(^|[./])v\d+(?=[./]|$)", r"\1", api) if isinstance(api, str) else api


def _typed(value: Any) -> str:
    """Equal for equal values of equal types (1, 1.0 and True differ)."""
    return json.dumps([type(value).__name__, value], sort_keys=True, default=str)


def _api(observation: Any) -> str | None:
    return _typed(observation["api"]) if isinstance(observation, dict) and "api" in observation else None


def version(observation: dict) -> Any:
    return observation["version"] if "version" in observation else observation.get("last_updated")


def later(current: Any, reference: Any) -> int | None:
    """+1 later, -1 earlier, 0 equal: numbers by value, strings as text; None: not comparable."""
    if type(current) is type(reference) and current == reference:
        return 0
    numbers = all(isinstance(v, Real) and not isinstance(v, bool) for v in (current, reference))
    if numbers or (isinstance(current, str) and isinstance(reference, str)):
        return 1 if current > reference else -1 if current < reference else 0
    return None


def _set(observation: dict, key: str) -> set[str] | None:
    values = observation.get(key)
    return {_typed(v) for v in values} if isinstance(values, list) else None


def share_missing(a: set | None, b: set | None) -> float:
    """|a - b| / |a|; 0 when either is missing or a is empty."""
    return len(a - b) / len(a) if a and b is not None else 0.0


def flag(observation: Any, key: str) -> float:
    return 1.0 if isinstance(observation, dict) and observation.get(key) is True else 0.0


def contract(observation: Any) -> tuple | None:
    """Parameters, required parameters (none when absent), deprecated, removed; None without
    a parameter list."""
    if not isinstance(observation, dict) or _set(observation, "params") is None:
        return None
    required = _set(observation, "required") or set()
    return (frozenset(_set(observation, "params")), frozenset(required), flag(observation, "deprecated"),
            flag(observation, "removed"))


def contract_changes(obs: Any, other: Any, suffix: str) -> dict[str, float]:
    """``params_added`` ... ``undeprecated`` of ``obs`` against ``other``, named with ``suffix``."""
    values = {
        "params_added": share_missing(_set(obs, "params"), _set(other, "params")),
        "params_removed": share_missing(_set(other, "params"), _set(obs, "params")),
        "required_added": share_missing(_set(obs, "required"), _set(other, "required")),
        "required_removed": share_missing(_set(other, "required"), _set(obs, "required")),
        "newly_deprecated": 1.0 if flag(obs, "deprecated") > flag(other, "deprecated") else 0.0,
        "undeprecated": 1.0 if flag(other, "deprecated") > flag(obs, "deprecated") else 0.0,
    }
    return {name + suffix: value for name, value in values.items()}


def fields_changed(current: Any, reference: Any) -> float:
    if not isinstance(current, dict) or not isinstance(reference, dict) or not current:
        return 1.0 if current != reference else 0.0
    return sum(1 for k, v in current.items() if k not in reference or reference[k] != v) / len(current)


def priority(step: Step) -> float:
    p = step.metadata.get("priority")
    if isinstance(p, Real) and not isinstance(p, bool) and not math.isnan(p):
        return min(1.0, max(0.0, float(p)))
    return 0.0


class ReferenceEncoder:
    """The observation, mask and rewards of one episode, computed literally."""

    def __init__(self, episode: Episode, track: str, *, slots: int, slot_order: str,
                 max_expires_per_step: int | None) -> None:
        self.episode = episode
        self.track = track
        self.shown = [policy_step(step, track) for step in episode.steps]
        self.layout = ObservationLayout(slots, track == PRIVILEGED)
        self.slot_order = slot_order
        self.cap = max_expires_per_step

    # ---------------------------------------------------------------- pieces
    def observation_of(self, t: int) -> Any:
        return self.shown[t].observation

    def last_shown_of_family(self, t: int) -> int | None:
        fam = family(self.observation_of(t))
        if fam is None:
            return None
        earlier = [s for s in range(t) if family(self.observation_of(s)) == fam]
        return earlier[-1] if earlier else None

    def slot_layout(self, store: ByteMemoryStore, t: int) -> list[int]:
        stored = [item.t for item in store.items()]  # oldest first
        K = self.layout.slots
        if self.slot_order == "oldest" or not stored:
            return stored[:K]
        largest = max(stored, key=lambda s: (store.get(s).byte_cost, -s))
        fam = family(self.observation_of(t)) if t < len(self.shown) else None
        rest = [s for s in stored if s != largest]
        same = [s for s in rest if fam is not None and family(self.observation_of(s)) == fam]
        return ([largest] + same[::-1] + [s for s in rest if s not in same])[:K]

    def reverted(self, s: int, t: int) -> bool:
        """Step ``t`` shows the contract its family had before stored item ``s`` was shown, and
        ``s`` showed another (for a family's first sighting: ``s`` showed it removed, ``t`` not)."""
        now = contract(self.observation_of(t))
        if now is None or contract(self.observation_of(s)) == now:
            return False
        before = self.last_shown_of_family(s)
        if before is not None:
            return contract(self.observation_of(before)) == now
        return flag(self.observation_of(s), "removed") > flag(self.observation_of(t), "removed")

    def _merge(self, store: ByteMemoryStore, t: int, target: int):
        return store.check(MemoryAction("MERGE", step=self.shown[t], target_t=target), t)

    # ---------------------------------------------------------------- the observation
    def observe(self, store: ByteMemoryStore, t: int, *, expires_this_step: int,
                reverted_expired: bool) -> ReferenceView:
        T = len(self.shown)
        K = self.layout.slots
        live = t < T
        budget = store.max_bytes
        remaining = store.remaining()
        slots = self.slot_layout(store, t) if store.items() else []
        items = store.items()
        n = len(items)
        step = dict.fromkeys(self.layout.step_features, 0.0)
        cost = estimate_bytes(self.shown[t]) if live else 0
        fits = live and store.check(MemoryAction("WRITE", step=self.shown[t]), t).accepted
        if live:
            step.update(self._step_features(store, t, cost, budget, remaining, fits))
        freed = sum(item.byte_cost for item in items if item.byte_cost > cost)
        memory = {
            "remaining": remaining / budget if budget else 0.0,
            "items": n / (n + K),
            "hidden_items": (n - len(slots)) / n if n else 0.0,
            "merge_items": sum(item.kind == "MERGE" for item in items) / n if n else 0.0,
            "time": t / T if live else 1.0,
            "expires_left": (1.0 if self.cap is None else (self.cap - expires_this_step) / self.cap)
            if live and self.cap != 0 else 0.0,
            "reverted_expired": 1.0 if reverted_expired else 0.0,
            "fits_if_larger_expired": 1.0 if fits or (live and cost <= budget and cost <= remaining + freed) else 0.0,
        }
        rows = [self._slot_row(store, store.get(s), t, T, budget) for s in slots]
        mask = np.zeros(self.layout.n_actions, dtype=bool)
        mask[0] = True
        mask[1] = fits
        can_expire = live and (self.cap is None or expires_this_step < self.cap)
        for k, s in enumerate(slots):
            mask[2 + k] = live and self._merge(store, t, s).accepted
            mask[2 + K + k] = can_expire
        return ReferenceView(step, memory, slots, rows, mask)

    def _step_features(self, store: ByteMemoryStore, t: int, cost: int, budget: int, remaining: int,
                       fits: bool) -> dict[str, float]:
        T = len(self.shown)
        obs = self.observation_of(t)
        f: dict[str, float] = {
            "cost_budget": min(1.0, cost / budget) if budget else 1.0,
            "cost_remaining": min(1.0, cost / remaining) if remaining > 0 else (0.0 if cost == 0 else 1.0),
            "fits": 1.0 if fits else 0.0,
            f"kind_{kind(obs)}": 1.0,
            "deprecated": flag(obs, "deprecated"),
            "removed": flag(obs, "removed"),
        }
        if self.layout.privileged:
            f["priority"] = priority(self.shown[t])
        fam = family(obs)
        of_family = [item for item in store.items() if fam is not None and family(item.step.observation) == fam]
        if of_family:
            ref = of_family[-1]  # the newest
            ref_obs = ref.step.observation
            identical = json_text(obs) == json_text(ref_obs)
            order = 0 if identical else later(version(obs), version(ref_obs))
            bases = [i for i in store.items() if i.kind == "WRITE" and _api(i.step.observation) == _api(obs)
                     and _api(obs) is not None]
            f.update({
                "family_in_memory": 1.0,
                "api_in_memory": 1.0 if bases else 0.0,
                "identical_to_memory": 1.0 if identical else 0.0,
                "version_up": 1.0 if order == 1 else 0.0,
                "version_down": 1.0 if order == -1 else 0.0,
                "version_changed": 0.0 if order == 0 else 1.0,
                **contract_changes(obs, ref_obs, ""),
                "fields_changed": 0.0 if identical else fields_changed(obs, ref_obs),
                "reference_age": (t - ref.t) / T,
                "family_items": min(1.0, len(of_family) / self.layout.slots),
            })
            if bases:
                decision = self._merge(store, t, bases[-1].t)
                if decision.reason in (Reason.ACCEPTED, Reason.OVER_BUDGET):
                    f["merge_ok"] = 1.0 if decision.accepted else 0.0
                    f["merge_cost"] = min(1.0, decision.byte_delta / cost) if cost else 1.0
        previous = self.last_shown_of_family(t)
        if previous is not None:
            before = self.observation_of(previous)
            order = later(version(obs), version(before))
            now = contract(obs)
            family_contracts = {contract(self.observation_of(s)) for s in range(previous)
                                if family(self.observation_of(s)) == fam} - {None}
            f.update({
                "family_seen": 1.0,
                "changed_since_seen": 1.0 if json_text(obs) != json_text(before) else 0.0,
                "version_up_since_seen": 1.0 if order == 1 else 0.0,
                "version_down_since_seen": 1.0 if order == -1 else 0.0,
                **contract_changes(obs, before, "_since_seen"),
                "newly_removed_since_seen": 1.0 if flag(obs, "removed") > flag(before, "removed") else 0.0,
                "restored_since_seen": 1.0 if flag(before, "removed") > flag(obs, "removed") else 0.0,
                "returns_to_earlier": 1.0 if now is not None and now != contract(before)
                and now in family_contracts else 0.0,
            })
        return f

    def _slot_row(self, store: ByteMemoryStore, item: MemoryItem, t: int, T: int, budget: int) -> dict[str, float]:
        s = item.t
        obs = item.step.observation
        live = t < T
        current = self.observation_of(t) if live else None
        same_family = live and family(obs) is not None and family(obs) == family(current)
        row = {
            "present": 1.0,
            "age": ((t if live else T) - s) / T,
            "cost_budget": min(1.0, item.byte_cost / budget) if budget else 1.0,
            "is_merge": 1.0 if item.kind == "MERGE" else 0.0,
            f"kind_{kind(obs)}": 1.0,
            "deprecated": flag(obs, "deprecated"),
            "orphan": 1.0 if item.kind == "MERGE" and item.merge_parent_t not in store else 0.0,
            "same_family": 1.0 if same_family else 0.0,
            "same_api": 1.0 if same_family and _api(obs) is not None and _api(obs) == _api(current) else 0.0,
            "superseded": 1.0 if any(family(i.step.observation) == family(obs) and i.t > s
                                     for i in store.items()) and family(obs) is not None else 0.0,
            "merge_ok": 1.0 if live and self._merge(store, t, s).accepted else 0.0,
            "reverted": 1.0 if same_family and kind(obs) == "endpoint" and self.reverted(s, t) else 0.0,
        }
        row.pop("kind_other", None)  # a slot row has no "other" flag
        if self.layout.privileged:
            row["priority"] = priority(item.step)
        return row


# -------------------------------------------------------------------- rewards
def potential(episode: Episode, store: ByteMemoryStore, decided: int, weights: dict[str, float], track: str) -> float:
    """The weighted metric as if the episode ended after ``decided`` steps: F1 of the retained
    set against the critical steps among those decided, utility kept against U*(B), regret
    against the oracle of the decided prefix U*(B, decided)."""
    retained = store.retained_timesteps()
    critical = {c for c in episode.critical_steps if c < decided}
    kept_utility = math.fsum(float(episode.utilities[s]) for s in retained)
    costs = track_costs(episode, track)
    oracle = oracle_utility(costs, episode.utilities, store.max_bytes)
    total = 0.0
    for name, weight in weights.items():
        if name == "f1":
            denominator = len(retained) + len(critical)
            value = 2 * sum(1 for s in retained if s in critical) / denominator if denominator else 0.0
        elif not oracle:
            value = 0.0
        elif name == "utility":
            value = kept_utility / oracle
        else:
            prefix = oracle_utility(costs[:decided], episode.utilities[:decided], store.max_bytes)
            value = -max(0.0, prefix - kept_utility) / oracle
        total += weight * value
    return total


def terminal_value(weights: dict[str, float], metrics: dict[str, float]) -> float:
    """The weighted metric a finished episode pays (``metrics`` as ``info["metrics"]``)."""
    oracle = metrics["oracle_utility"]
    values = {
        "f1": metrics["f1"],
        "utility": metrics["policy_utility"] / oracle if oracle > 0 else 1.0,
        "neg_regret": -metrics["regret_write_only"] / oracle if oracle > 0 else 0.0,
    }
    return math.fsum(weight * values[name] for name, weight in weights.items())
