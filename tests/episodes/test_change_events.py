"""The change-event log format: canonical round trip and errors that name line and field."""

from __future__ import annotations

import json

import pytest

from wpb_gym.episodes.real.change_events import (
    ChangeEvent,
    ChangeEventError,
    dumps_event,
    endpoint_key,
    order_changes,
    read_events,
    write_events,
)

LOG = [
    {
        "date": "2021-01-01T00:00:00Z",
        "version": "v1",
        "commit": "aaaaaaaaaa",
        "seq": 0,
        "api": "GET /a/{id}",
        "operation_id": "GetA",
        "params": ["expand", "limit"],
        "required": [],
        "deprecated": False,
        "change": ["initial"],
        "breaking": False,
    },
    {
        "date": "2021-01-01T00:00:00Z",
        "version": "v1",
        "commit": "aaaaaaaaaa",
        "seq": 0,
        "api": "POST /b",
        "operation_id": None,
        "params": ["x"],
        "required": ["x"],
        "deprecated": False,
        "change": ["initial"],
        "breaking": False,
    },
    {
        "date": "2021-02-01T00:00:00Z",
        "version": "v2",
        "commit": "bbbbbbbbbb",
        "seq": 1,
        "api": "GET /a/{id}",
        "operation_id": "GetA",
        "params": ["expand"],
        "required": [],
        "deprecated": False,
        "change": ["param_removed"],
        "breaking": True,
        "removed": ["limit"],
        "reverted_after_days": 3.5,
    },
    {
        "date": "2021-02-01T00:00:00Z",
        "version": "v2",
        "commit": "bbbbbbbbbb",
        "seq": 1,
        "api": "GET /c",
        "operation_id": "GetC",
        "params": [],
        "required": [],
        "deprecated": True,
        "change": ["endpoint_added", "deprecated"],
        "breaking": True,
    },
    {
        "date": "2021-02-04T12:00:00Z",
        "version": "v2",
        "commit": "cccccccccc",
        "seq": 2,
        "api": "GET /a/{key}",
        "operation_id": "GetA",
        "params": ["expand", "limit"],
        "required": [],
        "deprecated": False,
        "change": ["param_added", "path_param_renamed"],
        "breaking": False,
        "added": ["limit"],
        "previous_api": "GET /a/{id}",
    },
    {
        "date": "2021-02-05T00:00:00Z",
        "version": "v3",
        "commit": "dddddddddd",
        "seq": 3,
        "api": "POST /b",
        "operation_id": None,
        "params": ["x"],
        "required": ["x"],
        "deprecated": False,
        "change": ["endpoint_removed"],
        "breaking": True,
    },
]


def write_raw(path, records) -> None:
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records), encoding="utf-8")


def test_round_trip_is_byte_identical(tmp_path):
    src, out = tmp_path / "log.jsonl", tmp_path / "again.jsonl.gz"
    write_raw(src, LOG)
    events = read_events(src)
    assert [e.seq for e in events] == [0, 0, 1, 1, 2, 3]
    assert events[2].removed == ("limit",) and events[2].reverted_after_days == 3.5
    assert events[4].endpoint_key == "GET /a/{}" == endpoint_key("GET /a/{id}")
    assert events[5].removed_endpoint and events[3].breaking
    assert write_events(out, events) == len(LOG)
    assert read_events(out) == events
    assert [dumps_event(e) for e in events] == [json.dumps(r, separators=(",", ":")) for r in LOG]


def test_canonical_change_order():
    assert order_changes(["nested_param_added", "param_added", "param_added"]) == (
        "param_added",
        "nested_param_added",
    )


@pytest.mark.parametrize(
    ("line", "edit", "field", "message"),
    [
        (3, {"breaking": False}, "breaking", "expected true"),
        (3, {"change": ["param_removed", "param_added"]}, "change", "order"),
        (3, {"change": ["renamed_everything"]}, "change", "unknown change type"),
        (3, {"params": ["limit", "expand"]}, "params", "sorted"),
        (3, {"seq": -1}, "seq", "non-negative"),
        (3, {"date": "2021-02-01"}, "date", "ISO 8601"),
        (3, {"colour": "red"}, "colour", "unknown field"),
        (2, {"required": ["y"]}, "required", "not in params"),
        (
            4,
            {"reverted_after_days": 2.0, "breaking": False, "change": ["endpoint_added"], "deprecated": False},
            "reverted_after_days",
            "only breaking",
        ),
        (5, {"date": "2021-01-15T00:00:00Z"}, "date", "goes back"),
        (4, {"seq": 0, "change": ["initial"], "breaking": False, "deprecated": False}, "seq", "goes back"),
        (
            4,
            {"api": "GET /a/{x}", "change": ["endpoint_added"], "deprecated": False, "breaking": False},
            "api",
            "already changed",
        ),
        (6, {"api": "POST /zzz"}, "api", "does not exist"),
        (
            4,
            {"api": "POST /b", "change": ["endpoint_added"], "deprecated": False, "breaking": False},
            "change",
            "exists",
        ),
    ],
)
def test_errors_name_line_and_field(tmp_path, line, edit, field, message):
    records = [dict(r) for r in LOG]
    records[line - 1].update(edit)
    path = tmp_path / "bad.jsonl"
    write_raw(path, records)
    with pytest.raises(ChangeEventError, match=message) as info:
        read_events(path)
    assert (info.value.line, info.value.field) == (line, field)
    assert str(info.value).startswith(f"{path}:{line}: {field}: ")


def test_missing_field_and_bad_json(tmp_path):
    path = tmp_path / "bad.jsonl"
    record = dict(LOG[0])
    del record["operation_id"]
    write_raw(path, [record])
    with pytest.raises(ChangeEventError, match="operation_id: missing"):
        read_events(path)
    path.write_text('{"date": \n', encoding="utf-8")
    with pytest.raises(ChangeEventError, match=":1: malformed JSON"):
        read_events(path)
    path.write_text("", encoding="utf-8")
    with pytest.raises(ChangeEventError, match="holds no events"):
        read_events(path)


def test_failed_write_leaves_no_file(tmp_path):
    event = ChangeEvent(**{**LOG[0], "params": tuple(LOG[0]["params"]), "required": (), "change": ("initial",)})

    def events():
        yield event
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_events(tmp_path / "out.jsonl", events())
    assert list(tmp_path.iterdir()) == []
