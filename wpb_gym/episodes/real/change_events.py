"""Change-event logs: the chronological drift stream of a real API, one JSON object per line.

A log is what ``wpb ingest openapi`` writes from the git history of an OpenAPI description and
what ``wpb episodes from-events`` cuts into episodes. Each line is one endpoint that changed in
one spec commit (``seq``), carrying the endpoint's full state after the change:

=============  ==============================================================================
field          meaning
=============  ==============================================================================
date           commit date, UTC, ISO 8601 (``2020-08-27T17:01:02Z``); never goes backwards
version        the API version label of the snapshot (Stripe's ``info.version``, a release tag)
commit         the commit's first 10 hex characters
seq            index of the spec commit in the walked history, from 0
api            ``METHOD path`` (path parameter names as the spec spells them)
operation_id   the spec's operationId, or null
params         sorted non-path parameter names (query, header, cookie, request-body properties)
required       sorted names of the required ones
deprecated     the operation's own ``deprecated`` flag
change         change types, in the canonical order of ``CHANGE_TYPES``; ``["initial"]`` at seq 0
breaking       true when any change type is in ``BREAKING_TYPES``
=============  ==============================================================================

Optional detail fields, in this order when present: ``added``, ``removed``, ``newly_required``,
``no_longer_required``, ``newly_deprecated_params``, ``nested_added``, ``nested_removed``,
``nested_newly_required``, ``nested_no_longer_required`` (sorted name lists), ``previous_api``
(for ``path_param_renamed``) and ``reverted_after_days`` (breaking events only: days until the
breaking content was fully undone on the same endpoint, one decimal).

Lines are written compactly (no spaces) with the fields in the order above, so a log read and
written again is byte-identical. Replaying the stream from the ``initial`` lines (dropping an
endpoint on ``endpoint_removed``, otherwise overwriting it) reproduces every snapshot.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Iterable, Iterator

from ...core.strict_json import MAX_NESTING, json_nesting_within
from ..jsonl import open_text, write_lines_atomically

#: Every change type, in the order an event lists them.
CHANGE_TYPES: tuple[str, ...] = (
    "initial",
    "endpoint_added",
    "endpoint_removed",
    "param_added",
    "param_removed",
    "required_added",
    "required_removed",
    "deprecated",
    "undeprecated",
    "param_deprecated",
    "nested_param_added",
    "nested_param_removed",
    "nested_required_added",
    "nested_required_removed",
    "path_param_renamed",
)

#: Change types that break an existing client.
BREAKING_TYPES: frozenset[str] = frozenset(
    {
        "endpoint_removed",
        "param_removed",
        "required_added",
        "deprecated",
        "param_deprecated",
        "nested_param_removed",
        "nested_required_added",
    }
)

_CHANGE_ORDER = {name: i for i, name in enumerate(CHANGE_TYPES)}
_NAME_LIST_DETAILS = (
    "added",
    "removed",
    "newly_required",
    "no_longer_required",
    "newly_deprecated_params",
    "nested_added",
    "nested_removed",
    "nested_newly_required",
    "nested_no_longer_required",
)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


class ChangeEventError(ValueError):
    """A change-event log that breaks the format; ``path``, ``line`` and ``field`` say where."""

    def __init__(self, path: str | os.PathLike[str], line: int | None, field: str | None, message: str) -> None:
        self.path, self.line, self.field = str(path), line, field
        where = self.path + (f":{line}" if line is not None else "")
        super().__init__(f"{where}: {field + ': ' if field else ''}{message}")


@dataclass(frozen=True)
class ChangeEvent:
    """One line of a change-event log (see the module docstring for the fields)."""

    date: str
    version: str
    commit: str
    seq: int
    api: str
    operation_id: str | None
    params: tuple[str, ...]
    required: tuple[str, ...]
    deprecated: bool
    change: tuple[str, ...]
    breaking: bool
    added: tuple[str, ...] | None = None
    removed: tuple[str, ...] | None = None
    newly_required: tuple[str, ...] | None = None
    no_longer_required: tuple[str, ...] | None = None
    newly_deprecated_params: tuple[str, ...] | None = None
    nested_added: tuple[str, ...] | None = None
    nested_removed: tuple[str, ...] | None = None
    nested_newly_required: tuple[str, ...] | None = None
    nested_no_longer_required: tuple[str, ...] | None = None
    previous_api: str | None = None
    reverted_after_days: float | None = None

    @property
    def method(self) -> str:
        return self.api.split(" ", 1)[0]

    @property
    def path(self) -> str:
        return self.api.split(" ", 1)[1]

    @property
    def endpoint_key(self) -> str:
        """The endpoint's identity: method and path with every ``{name}`` replaced by ``{}``."""
        return endpoint_key(self.api)

    @property
    def initial(self) -> bool:
        """A line of the starting state (seq 0), not a change."""
        return self.change == ("initial",)

    @property
    def removed_endpoint(self) -> bool:
        return "endpoint_removed" in self.change

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this event, fields in the canonical order, absent details left out."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name not in _REQUIRED_FIELDS:
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


_REQUIRED_FIELDS = (
    "date",
    "version",
    "commit",
    "seq",
    "api",
    "operation_id",
    "params",
    "required",
    "deprecated",
    "change",
    "breaking",
)
_ALL_FIELDS = tuple(f.name for f in fields(ChangeEvent))


def endpoint_key(api: str) -> str:
    """``"GET /v1/a/{id}"`` -> ``"GET /v1/a/{}"``: renaming a path parameter keeps the endpoint."""
    return re.sub(r"\{[^}]*\}", "{}", api)


def apply_event(states: dict[str, Any], event: ChangeEvent, value: Any) -> None:
    """Replay ``event`` onto ``states`` (endpoint key -> what is kept of the endpoint): a renamed
    endpoint leaves its old key, a removed one its key, and any other event sets ``value``."""
    if event.previous_api is not None:
        states.pop(endpoint_key(event.previous_api), None)
    if event.removed_endpoint:
        states.pop(event.endpoint_key, None)
    else:
        states[event.endpoint_key] = value


def order_changes(changes: Iterable[str]) -> tuple[str, ...]:
    """Change types deduplicated and in canonical order (raises ``KeyError`` on an unknown type)."""
    return tuple(sorted(set(changes), key=_CHANGE_ORDER.__getitem__))


def dumps_event(event: ChangeEvent) -> str:
    """The canonical compact one-line JSON of an event."""
    return json.dumps(event.to_dict(), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def event_from_dict(data: Any, *, path: str | os.PathLike[str] = "<events>", line: int | None = None) -> ChangeEvent:
    """Validate one decoded JSON object and build its ``ChangeEvent``."""

    def fail(field: str | None, message: str) -> ChangeEventError:
        return ChangeEventError(path, line, field, message)

    def names(field: str) -> tuple[str, ...]:
        value = data[field]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise fail(field, f"expected a list of strings, got {value!r}")
        if value != sorted(set(value)):
            raise fail(field, "expected sorted, distinct names")
        return tuple(value)

    if not isinstance(data, dict):
        raise fail(None, f"expected a JSON object per line, got {type(data).__name__}")
    unknown = [k for k in data if k not in _ALL_FIELDS]
    if unknown:
        raise fail(unknown[0], f"unknown field (a change event has {', '.join(_ALL_FIELDS)})")
    for field in _REQUIRED_FIELDS:
        if field not in data:
            raise fail(field, "missing")
    for field in ("date", "version", "commit", "api"):
        if not isinstance(data[field], str) or not data[field]:
            raise fail(field, f"expected a non-empty string, got {data[field]!r}")
    if not _DATE.match(data["date"]):
        raise fail("date", f"expected an ISO 8601 UTC time like 2020-08-27T17:01:02Z, got {data['date']!r}")
    if " " not in data["api"]:
        raise fail("api", f"expected 'METHOD path', got {data['api']!r}")
    seq = data["seq"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise fail("seq", f"expected a non-negative integer, got {seq!r}")
    if data["operation_id"] is not None and not isinstance(data["operation_id"], str):
        raise fail("operation_id", f"expected a string or null, got {data['operation_id']!r}")
    for field in ("deprecated", "breaking"):
        if not isinstance(data[field], bool):
            raise fail(field, f"expected true or false, got {data[field]!r}")
    change = data["change"]
    if not isinstance(change, list) or not change:
        raise fail("change", f"expected a non-empty list of change types, got {change!r}")
    for name in change:
        if name not in _CHANGE_ORDER:
            raise fail("change", f"unknown change type {name!r} (known: {', '.join(CHANGE_TYPES)})")
    if tuple(change) != order_changes(change):
        raise fail("change", f"expected distinct types in the order {list(order_changes(change))}")
    if "initial" in change and len(change) > 1:
        raise fail("change", "'initial' stands alone")
    breaking = any(name in BREAKING_TYPES for name in change)
    if data["breaking"] != breaking:
        raise fail("breaking", f"expected {str(breaking).lower()} for change {change}")
    values: dict[str, Any] = {
        field: data[field]
        for field in ("date", "version", "commit", "seq", "api", "operation_id", "deprecated", "breaking")
    }
    values["params"], values["required"], values["change"] = names("params"), names("required"), tuple(change)
    stray = sorted(set(values["required"]) - set(values["params"]))
    if stray:
        raise fail("required", f"{stray[0]!r} is required but not in params")
    for field in _NAME_LIST_DETAILS:
        if field in data:
            values[field] = names(field)
    if "previous_api" in data:
        if not isinstance(data["previous_api"], str) or " " not in data["previous_api"]:
            raise fail("previous_api", f"expected 'METHOD path', got {data['previous_api']!r}")
        values["previous_api"] = data["previous_api"]
    if "reverted_after_days" in data:
        days = data["reverted_after_days"]
        if not isinstance(days, (int, float)) or isinstance(days, bool) or not days >= 0:
            raise fail("reverted_after_days", f"expected a non-negative number of days, got {days!r}")
        if not breaking:
            raise fail("reverted_after_days", "only breaking events carry a revert time")
        values["reverted_after_days"] = float(days)
    order = [k for k in data]
    if order != [k for k in _ALL_FIELDS if k in data]:
        raise fail(None, f"fields out of order: expected {[k for k in _ALL_FIELDS if k in data]}")
    return ChangeEvent(**values)


def iter_events(path: str | os.PathLike[str]) -> Iterator[ChangeEvent]:
    """Stream and validate the events of a ``.jsonl`` / ``.jsonl.gz`` log.

    Beyond each line's own fields this checks the stream: ``seq`` and ``date`` never go back,
    a commit has one ``seq``, an endpoint appears at most once per commit, the ``initial`` lines
    are exactly those of ``seq`` 0, and every event after them names an endpoint that exists
    unless it adds one.
    """
    path = Path(path)
    last: ChangeEvent | None = None
    seen_in_commit: set[str] = set()
    live: dict[str, None] = {}  # the endpoints that exist, replayed by apply_event
    with open_text(path, "r") as fh:
        for lineno, text in enumerate(fh, start=1):
            if not text.strip():
                raise ChangeEventError(path, lineno, None, "empty line (one event per line)")
            try:
                data = json.loads(text)
                deep = not json_nesting_within(text, MAX_NESTING)  # an event is 3 levels deep
            except json.JSONDecodeError as exc:
                raise ChangeEventError(path, lineno, None, f"malformed JSON: {exc.msg} at column {exc.colno}") from None
            except RecursionError:
                deep = True
            if deep:  # refused before anything walks it: it would break whatever recursed over it later
                raise ChangeEventError(path, lineno, None, f"nested more than {MAX_NESTING} levels deep")
            event = event_from_dict(data, path=path, line=lineno)
            if last is not None:
                if event.seq < last.seq:
                    raise ChangeEventError(path, lineno, "seq", f"goes back from {last.seq} to {event.seq}")
                if event.date < last.date:
                    raise ChangeEventError(path, lineno, "date", f"goes back from {last.date} to {event.date}")
                if event.seq == last.seq and event.commit != last.commit:
                    raise ChangeEventError(path, lineno, "commit", f"seq {event.seq} already has commit {last.commit}")
            if last is None or event.seq != last.seq:
                seen_in_commit = set()
            key = event.endpoint_key
            if key in seen_in_commit:
                raise ChangeEventError(path, lineno, "api", f"{event.api!r} already changed in seq {event.seq}")
            seen_in_commit.add(key)
            if event.initial != (event.seq == 0):
                raise ChangeEventError(path, lineno, "change", "'initial' lines are exactly those of seq 0")
            if event.seq > 0:
                exists = key in live or (event.previous_api is not None and endpoint_key(event.previous_api) in live)
                if "endpoint_added" in event.change and key in live:
                    raise ChangeEventError(path, lineno, "change", f"endpoint_added but {event.api!r} exists")
                if "endpoint_added" not in event.change and not exists:
                    raise ChangeEventError(path, lineno, "api", f"{event.api!r} changes but does not exist")
            apply_event(live, event, None)
            last = event
            yield event
    if last is None:
        raise ChangeEventError(path, None, None, "holds no events")


def read_events(path: str | os.PathLike[str]) -> list[ChangeEvent]:
    """Every event of a log, validated (see ``iter_events``)."""
    return list(iter_events(path))


def write_events(path: str | os.PathLike[str], events: Iterable[ChangeEvent]) -> int:
    """Write a log atomically (no partial file on failure); returns the number of events."""
    return write_lines_atomically(path, (dumps_event(event) for event in events))
