"""Diff consecutive endpoint states into change events, and time how long each breaking change lasted.

``initial_events`` labels the first snapshot, ``diff_endpoints`` every later one (rule 7 of the
apidrift reference data: one event per changed endpoint, in identity-key order). After the whole
walk, ``with_revert_times`` sets ``reverted_after_days`` on the breaking events (rule 9) from a
``StateTimeline`` that recorded every state each endpoint went through.

``replay_events`` is the inverse at the top level: from the ``initial`` events, applying each
event reproduces the api, params, required and deprecated fields of every snapshot.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Iterable, Iterator, Mapping, Sequence

from .change_events import BREAKING_TYPES, ChangeEvent, apply_event, order_changes
from .openapi_spec import EndpointState, dotted

#: The change type each detail field of an event explains.
_DETAIL_TYPES = {
    "added": "param_added",
    "removed": "param_removed",
    "newly_required": "required_added",
    "no_longer_required": "required_removed",
    "newly_deprecated_params": "param_deprecated",
    "nested_added": "nested_param_added",
    "nested_removed": "nested_param_removed",
    "nested_newly_required": "nested_required_added",
    "nested_no_longer_required": "nested_required_removed",
}


@dataclass(frozen=True)
class Snapshot:
    """One walked spec version: the fields every event of that version carries."""

    seq: int
    commit: str
    date: str  # UTC, 2020-08-27T17:01:02Z
    version: str


def initial_events(states: Mapping[str, EndpointState], snapshot: Snapshot) -> list[ChangeEvent]:
    """One ``initial`` event per endpoint of the first snapshot, in key order."""
    return [_event(states[key], snapshot, ("initial",)) for key in sorted(states)]


def diff_endpoints(
    before: Mapping[str, EndpointState], after: Mapping[str, EndpointState], snapshot: Snapshot
) -> list[ChangeEvent]:
    """The events that turn snapshot ``before`` into ``after``: one per changed endpoint, key order.

    A change of the operationId alone, or a param's deprecation being lifted, has no change type
    and emits nothing; the next event of that endpoint carries the new state.
    """
    events = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old is None and new is not None:
            changes = ("endpoint_added", "deprecated") if new.deprecated else ("endpoint_added",)
            events.append(_event(new, snapshot, changes))
        elif new is None and old is not None:
            events.append(_event(old, snapshot, ("endpoint_removed",)))
        elif old is not None and new is not None and old != new:
            event = _changed_event(old, new, snapshot)
            if event is not None:
                events.append(event)
    return events


def _changed_event(old: EndpointState, new: EndpointState, snapshot: Snapshot) -> ChangeEvent | None:
    kept = old.params & new.params
    # Nested names are reported only under a parent present on both sides: the children of an
    # added or removed param (or depth-2 name) are implied by their parent's own change.
    kept_parents = {(name,) for name in kept} | (old.nested & new.nested)

    def under_kept_parent(paths: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
        return dotted(path for path in paths if path[:-1] in kept_parents)

    details = {
        "added": sorted(new.params - old.params),
        "removed": sorted(old.params - new.params),
        "newly_required": sorted(new.required - old.required),
        # A required param that disappears is reported as removed, not as relaxed.
        "no_longer_required": sorted((old.required - new.required) & new.params),
        # A param added already deprecated breaks no existing call, so only kept params count.
        "newly_deprecated_params": sorted((new.deprecated_params - old.deprecated_params) & kept),
        "nested_added": under_kept_parent(new.nested - old.nested),
        "nested_removed": under_kept_parent(old.nested - new.nested),
        "nested_newly_required": under_kept_parent(new.nested_required - old.nested_required),
        "nested_no_longer_required": under_kept_parent((old.nested_required - new.nested_required) & new.nested),
    }
    changes = [_DETAIL_TYPES[field] for field, names in details.items() if names]
    if new.deprecated != old.deprecated:
        changes.append("deprecated" if new.deprecated else "undeprecated")
    if changes:
        listed = {field: tuple(names) for field, names in details.items() if names}
        return _event(new, snapshot, changes, **listed)
    if new.api != old.api:
        # Labelled only when the rename is the whole change, as in the reference logs; alongside
        # other changes the event's api simply shows the new spelling.
        return _event(new, snapshot, ["path_param_renamed"], previous_api=old.api)
    return None


def _event(state: EndpointState, snapshot: Snapshot, changes: Sequence[str], **details) -> ChangeEvent:
    ordered = order_changes(changes)
    return ChangeEvent(
        date=snapshot.date,
        version=snapshot.version,
        commit=snapshot.commit[:10],
        seq=snapshot.seq,
        api=state.api,
        operation_id=state.operation_id,
        params=tuple(sorted(state.params)),
        required=tuple(sorted(state.required)),
        deprecated=state.deprecated,
        change=ordered,
        breaking=any(change in BREAKING_TYPES for change in ordered),
        **details,
    )


# --- how long a breaking change lasted --------------------------------------------------------


class StateTimeline:
    """Every state each endpoint went through, recorded snapshot by snapshot (``None``: absent).

    Events do not show every change (a lifted param deprecation has no change type), so the
    revert rule reads this full record rather than the events.
    """

    def __init__(self) -> None:
        self._current: dict[str, EndpointState] = {}
        self._history: dict[str, list[tuple[int, str, EndpointState | None]]] = {}

    def record(self, seq: int, date: str, states: Mapping[str, EndpointState]) -> None:
        """Note snapshot ``seq``: the endpoints whose state differs from the last snapshot."""
        for key in self._current.keys() | states.keys():
            old, new = self._current.get(key), states.get(key)
            if old != new:
                self._history.setdefault(key, []).append((seq, date, new))
        self._current = dict(states)

    def at(self, key: str, seq: int) -> EndpointState | None:
        """The endpoint's state in snapshot ``seq`` (``None`` when absent)."""
        history = self._history.get(key, [])
        index = bisect.bisect_right([entry[0] for entry in history], seq)
        return history[index - 1][2] if index else None

    def after(self, key: str, seq: int) -> Iterator[tuple[str, EndpointState | None]]:
        """``(date, state)`` of the endpoint's state changes after snapshot ``seq``, in order."""
        history = self._history.get(key, [])
        start = bisect.bisect_right([entry[0] for entry in history], seq)
        for _, date, state in history[start:]:
            yield date, state


@dataclass(frozen=True)
class Breakage:
    """What a breaking event took away from the endpoint's clients (rule 9's restore list)."""

    endpoint: bool = False
    params: frozenset[str] = frozenset()
    nested: frozenset[str] = frozenset()
    required: frozenset[str] = frozenset()
    nested_required: frozenset[tuple[str, ...]] = frozenset()  # property paths, to find their parents
    deprecated: bool = False
    deprecated_params: frozenset[str] = frozenset()

    @classmethod
    def of(cls, event: ChangeEvent, state: EndpointState | None = None) -> Breakage:
        """The breakage of ``event``; ``state`` (the endpoint right after it) spells the newly
        required nested names as paths, which dotted names cannot do when names hold dots."""
        paths = {".".join(path): path for path in (state.nested_required if state else ())}
        return cls(
            endpoint=event.removed_endpoint,
            params=frozenset(event.removed or ()),
            nested=frozenset(event.nested_removed or ()),
            required=frozenset(event.newly_required or ()),
            nested_required=frozenset(paths.get(n, tuple(n.split("."))) for n in event.nested_newly_required or ()),
            deprecated="deprecated" in event.change,
            deprecated_params=frozenset(event.newly_deprecated_params or ()),
        )

    def restored_in(self, state: EndpointState | None) -> bool:
        """True when ``state`` undoes all of it: removed things are back, deprecations are
        lifted, new requirements are relaxed or their params removed. A requirement counts as
        undone only while the endpoint (for a nested name: its parent) is there; losing the
        whole parent restores nothing to a client that used it."""
        if state is None:
            return False
        present_parents = {(name,) for name in state.params} | state.nested
        return (
            self.params <= state.params
            and self.nested <= set(dotted(state.nested))
            and not self.required & state.required
            and all(path[:-1] in present_parents for path in self.nested_required)
            and not self.nested_required & state.nested_required
            and not (self.deprecated and state.deprecated)
            and self.deprecated_params <= state.params - state.deprecated_params
        )


def with_revert_times(events: Sequence[ChangeEvent], timeline: StateTimeline) -> list[ChangeEvent]:
    """The events with ``reverted_after_days`` set on every breaking event that was fully undone:
    the days (one decimal) until the first later state of the same endpoint restoring it all."""
    out = []
    for event in events:
        if event.breaking:
            breakage = Breakage.of(event, timeline.at(event.endpoint_key, event.seq))
            for date, state in timeline.after(event.endpoint_key, event.seq):
                if breakage.restored_in(state):
                    event = replace(event, reverted_after_days=days_between(event.date, date))
                    break
        out.append(event)
    return out


def days_between(start: str, end: str) -> float:
    """Days from ``start`` to ``end`` (ISO UTC times), rounded to one decimal."""
    seconds = (_parse_date(end) - _parse_date(start)).total_seconds()
    return round(seconds / 86400, 1)


def _parse_date(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


# --- replay -----------------------------------------------------------------------------------


def replay_events(
    events: Iterable[ChangeEvent], start: Mapping[str, EndpointState] | None = None
) -> dict[str, EndpointState]:
    """The endpoints after applying ``events`` to ``start`` (default: nothing), by key.

    Events carry the top level only, so the states have no nested names or deprecated params;
    compare them with ``top_level(...)`` of parsed states.
    """
    states = dict(start or {})
    for event in events:
        state = EndpointState(
            api=event.api,
            operation_id=event.operation_id,
            params=frozenset(event.params),
            required=frozenset(event.required),
            deprecated=event.deprecated,
        )
        apply_event(states, event, state)
    return states


def top_level(states: Mapping[str, EndpointState]) -> dict[str, tuple[str, frozenset, frozenset, bool]]:
    """The part of each state a log reproduces exactly: api, params, required, deprecated."""
    return {key: (s.api, s.params, s.required, s.deprecated) for key, s in states.items()}
