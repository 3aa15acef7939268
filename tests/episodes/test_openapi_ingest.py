"""``wpb ingest openapi``: spec reading, change labelling, revert times and the git walk.

Every git repository here is built by the test in ``tmp_path`` with fixed dates, so commit
hashes and event dates are deterministic; nothing reads the network or shared data.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wpb_gym.cli import main
from wpb_gym.episodes.real.change_events import BREAKING_TYPES, read_events
from wpb_gym.episodes.real.openapi_changes import (
    Snapshot,
    StateTimeline,
    days_between,
    diff_endpoints,
    initial_events,
    replay_events,
    top_level,
    with_revert_times,
)
from wpb_gym.episodes.real.openapi_ingest import UNRELEASED, IngestError, SpecSource, ingest_openapi, path_matches
from wpb_gym.episodes.real.openapi_spec import (
    EndpointState,
    SpecError,
    endpoint_states,
    load_document,
    spec_version_label,
)

# --- building specs ---------------------------------------------------------------------------


def spec(paths: dict[str, Any], version: str = "v1", **extra: Any) -> dict[str, Any]:
    return {"openapi": "3.0.3", "info": {"title": "t", "version": version}, "paths": paths, **extra}


def query(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": {"type": "string"}, **extra}


def body(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = required
    return {"content": {"application/x-www-form-urlencoded": {"schema": schema}}}


def obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


S = {"type": "string"}


def states(document: dict[str, Any], **kwargs: Any) -> dict[str, EndpointState]:
    return endpoint_states(document, "spec.json", "c0ffee", **kwargs)


def one(document: dict[str, Any], **kwargs: Any) -> EndpointState:
    (state,) = states(document, **kwargs).values()
    return state


def nested(state: EndpointState) -> set[str]:
    return {".".join(path) for path in state.nested}


SNAP = Snapshot(seq=1, commit="abcdef0123456789", date="2021-01-02T00:00:00Z", version="v2")


def events_between(a: dict[str, Any], b: dict[str, Any]) -> list:
    return diff_endpoints(states(a), states(b), SNAP)


def only_event(a: dict[str, Any], b: dict[str, Any]):
    (event,) = events_between(a, b)
    return event


# --- reading a document -----------------------------------------------------------------------


def test_params_are_non_path_parameters_and_body_properties():
    doc = spec(
        {
            "/v1/items/{id}": {
                "post": {
                    "operationId": "PostItem",
                    "parameters": [
                        {"name": "id", "in": "path", "required": True},
                        query("expand"),
                        {"name": "Idempotency-Key", "in": "header", "required": True},
                        {"name": "session", "in": "cookie"},
                    ],
                    "requestBody": body({"amount": S, "currency": S}, required=["amount"]),
                }
            }
        }
    )
    state = one(doc)
    assert state.api == "POST /v1/items/{id}" and state.key == "POST /v1/items/{}"
    assert state.operation_id == "PostItem"
    assert state.params == {"expand", "Idempotency-Key", "session", "amount", "currency"}
    assert state.required == {"Idempotency-Key", "amount"}
    assert not state.deprecated


def test_path_level_parameters_merge_and_the_operation_wins_on_name_and_location():
    doc = spec(
        {
            "/v1/a": {
                "parameters": [query("limit"), query("shared", required=False), {"name": "x", "in": "header"}],
                "get": {"parameters": [query("shared", required=True), {"name": "limit", "in": "header"}]},
                "delete": {},
            }
        }
    )
    by_key = states(doc)
    get, delete = by_key["GET /v1/a"], by_key["DELETE /v1/a"]
    assert get.params == {"limit", "shared", "x"} and get.required == {"shared"}
    assert delete.params == {"limit", "shared", "x"} and delete.required == frozenset()


def test_refs_are_followed_for_parameters_bodies_and_schemas():
    doc = spec(
        {
            "/a": {
                "post": {
                    "parameters": [{"$ref": "#/components/parameters/Limit"}],
                    "requestBody": {"$ref": "#/components/requestBodies/B"},
                }
            }
        },
        components={
            "parameters": {"Limit": query("limit", required=True)},
            "requestBodies": {
                "B": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Body"}}}}
            },
            "schemas": {
                "Body": {
                    "type": "object",
                    "properties": {"card": {"$ref": "#/components/schemas/Card"}},
                    "required": ["card"],
                },
                "Card": obj({"number": S, "exp": obj({"month": S, "year": S})}, required=["number"]),
                "a/b~c": obj({"z": S}),
            },
        },
    )
    state = one(doc)
    assert state.params == {"limit", "card"} and state.required == {"limit", "card"}
    assert nested(state) == {"card.number", "card.exp", "card.exp.month", "card.exp.year"}
    assert {".".join(p) for p in state.nested_required} == {"card.number"}
    # JSON-pointer escapes (~1 for "/", ~0 for "~") are undone
    escaped = spec(
        {"/a": {"post": {"requestBody": body({"x": {"$ref": "#/components/schemas/a~1b~0c"}})}}},
        components=doc["components"],
    )
    assert nested(one(escaped)) == {"x.z"}


def test_allof_merges_and_anyof_oneof_union_but_only_allof_and_top_requirements_count():
    schema = {
        "type": "object",
        "properties": {"top": S},
        "required": ["top"],
        "allOf": [obj({"from_all": S}, required=["from_all"])],
        "anyOf": [obj({"from_any": S}, required=["from_any"])],
        "oneOf": [obj({"from_one": S}, required=["from_one"]), {"type": "string"}],
    }
    state = one(spec({"/a": {"post": {"requestBody": {"content": {"application/json": {"schema": schema}}}}}}))
    assert state.params == {"top", "from_all", "from_any", "from_one"}
    assert state.required == {"top", "from_all"}


def test_every_media_type_of_the_body_counts():
    content = {"application/json": {"schema": obj({"a": S})}, "multipart/form-data": {"schema": obj({"b": S}, ["b"])}}
    state = one(spec({"/a": {"put": {"requestBody": {"content": content}}}}))
    assert state.params == {"a", "b"} and state.required == {"b"}


def test_nested_names_go_two_levels_below_a_param_through_arrays_and_branches():
    deep = obj({"l2": obj({"l3": obj({"l4": S})}, required=["l3"])}, required=["l2"])
    listed = {"type": "array", "items": obj({"item_field": S}, required=["item_field"])}
    emptyable = {"anyOf": [obj({"opt": S}, required=["opt"]), {"type": "string", "enum": [""]}]}
    doc = spec(
        {
            "/a": {
                "post": {
                    "parameters": [{"name": "created", "in": "query", "schema": obj({"gt": S, "lt": S})}],
                    "requestBody": body({"deep": deep, "listed": listed, "emptyable": emptyable}),
                }
            }
        }
    )
    state = one(doc)
    assert nested(state) == {
        "created.gt",
        "created.lt",
        "deep.l2",
        "deep.l2.l3",
        "listed.item_field",
        "emptyable.opt",
    }  # no depth 4 (deep.l2.l3.l4)
    # a requirement inside an anyOf branch does not count (rule 4), at depth 2 as at the top
    assert {".".join(p) for p in state.nested_required} == {"deep.l2", "deep.l2.l3", "listed.item_field"}


def test_recursive_schemas_terminate():
    components = {
        "schemas": {
            "Node": {"type": "object", "properties": {"child": {"$ref": "#/components/schemas/Node"}, "v": S}},
            "Loop": {"allOf": [{"$ref": "#/components/schemas/Loop"}, obj({"w": S})]},
        }
    }
    doc = spec(
        {
            "/a": {
                "post": {
                    "requestBody": body(
                        {"node": {"$ref": "#/components/schemas/Node"}, "loop": {"$ref": "#/components/schemas/Loop"}}
                    )
                }
            }
        },
        components=components,
    )
    state = one(doc)
    assert nested(state) == {"node.child", "node.v", "node.child.child", "node.child.v", "loop.w"}


def test_deprecation_of_operation_parameter_and_body_property():
    doc = spec(
        {
            "/a": {
                "post": {
                    "deprecated": True,
                    "parameters": [query("old", deprecated=True), query("fine")],
                    "requestBody": body({"legacy": {"$ref": "#/components/schemas/Legacy"}, "ok": S}),
                    "description": "Deprecated: prose is never read",
                }
            }
        },
        components={"schemas": {"Legacy": {"type": "string", "deprecated": True}}},
    )
    state = one(doc)
    assert state.deprecated and state.deprecated_params == {"old", "legacy"}


def test_host_comes_from_the_nearest_servers_with_variables_filled_in():
    doc = spec(
        {
            "/v1/op": {"get": {"servers": [{"url": "https://op.example.com/"}]}},
            "/v1/path": {
                "servers": [{"url": "https://{region}.example.com", "variables": {"region": {"default": "eu"}}}],
                "get": {},
            },
            "/v1/doc": {"get": {}},
        },
        servers=[{"url": "https://api.example.com"}],
    )
    assert sorted(states(doc, with_host=True)) == [
        "GET api.example.com/v1/doc",
        "GET eu.example.com/v1/path",
        "GET op.example.com/v1/op",
    ]
    assert sorted(states(doc)) == ["GET /v1/doc", "GET /v1/op", "GET /v1/path"]


def test_paths_differing_only_in_parameter_names_keep_the_first():
    doc = spec({"/a/{id}": {"get": {"operationId": "First"}}, "/a/{name}": {"get": {"operationId": "Second"}}})
    assert {k: s.operation_id for k, s in states(doc).items()} == {"GET /a/{}": "First"}


YAML_SPEC = """\
openapi: 3.0.0
info: {title: t, version: '2017-08-15'}
paths:
  /v1/a/{id}:
    post:
      operationId: PostA
      parameters:
        - {name: a, in: query}
"""


def test_yaml_is_read_and_an_unquoted_date_version_stays_text():
    text = YAML_SPEC.replace("'2017-08-15'", "2020-08-27").encode()
    document = load_document(text, "openapi/spec3.yaml")
    assert one(document).params == {"a"} and one(document).operation_id == "PostA"
    assert spec_version_label(document, "openapi/spec3.yaml") == "2020-08-27"


@pytest.mark.parametrize(
    ("data", "path", "expected"),
    [
        (b'{"openapi": "3.0.0", "paths": {', "spec/a.json", "spec/a.json at commit c0ffee: expected JSON"),
        (b"openapi: [3.0\n  bad", "spec/a.yaml", "spec/a.yaml at commit c0ffee: expected YAML"),
        (b"[1, 2]", "spec/a.json", "spec/a.json at commit c0ffee: expected an OpenAPI document (a mapping), got list"),
    ],
)
def test_unreadable_documents_name_file_commit_and_expectation(data, path, expected):
    with pytest.raises(SpecError, match="^" + re.escape(expected)):
        load_document(data, path, "c0ffee")


def test_a_document_without_paths_has_no_endpoints_and_bad_paths_are_named():
    assert states({"openapi": "3.1.0", "paths": None}) == {}
    with pytest.raises(SpecError, match=r"spec\.json at commit c0ffee: paths: expected a mapping of paths, got list"):
        states({"openapi": "3.0.0", "paths": ["/a"]})
    with pytest.raises(SpecError, match=r"expected an 'openapi: 3\.x' field, got 'none'"):
        states({"paths": {}})


def test_swagger_2_and_dangling_refs_are_refused_clearly():
    with pytest.raises(SpecError, match=r"Swagger 2\.0 is not supported; expected OpenAPI 3\.x"):
        states({"swagger": "2.0", "paths": {}})
    with pytest.raises(SpecError, match=r"paths\./a\.post.*\$ref '#/components/schemas/Nope' points at nothing"):
        states(spec({"/a": {"post": {"requestBody": body({"x": {"$ref": "#/components/schemas/Nope"}})}}}))
    with pytest.raises(SpecError, match=r"expected a local \$ref"):
        states(spec({"/a": {"get": {"parameters": [{"$ref": "other.yaml#/P"}]}}}))


# --- labelling changes ------------------------------------------------------------------------

BASE = spec(
    {
        "/v1/a/{id}": {
            "post": {
                "operationId": "PostA",
                "parameters": [query("expand")],
                "requestBody": body({"amount": S, "card": obj({"number": S, "exp": obj({"month": S})})}),
            }
        }
    }
)


def edit(doc: dict[str, Any], fn) -> dict[str, Any]:
    copy = json.loads(json.dumps(doc))
    fn(copy["paths"]["/v1/a/{id}"]["post"])
    return copy


def body_props(op: dict[str, Any]) -> dict[str, Any]:
    return op["requestBody"]["content"]["application/x-www-form-urlencoded"]["schema"]


def test_initial_events_list_every_endpoint_in_key_order():
    doc = spec({"/b": {"get": {}}, "/a/{x}": {"post": {}, "get": {}}})
    events = initial_events(states(doc), Snapshot(0, "f" * 40, "2021-01-01T00:00:00Z", "v1"))
    assert [e.api for e in events] == ["GET /a/{x}", "GET /b", "POST /a/{x}"]
    assert all(e.change == ("initial",) and not e.breaking and e.seq == 0 and e.commit == "f" * 10 for e in events)


def test_endpoint_added_and_added_already_deprecated():
    new = json.loads(json.dumps(BASE))
    new["paths"]["/v1/b"] = {"get": {"operationId": "GetB"}, "delete": {"deprecated": True}}
    added = {e.api: e for e in events_between(BASE, new)}
    assert added["GET /v1/b"].change == ("endpoint_added",) and not added["GET /v1/b"].breaking
    assert added["DELETE /v1/b"].change == ("endpoint_added", "deprecated") and added["DELETE /v1/b"].breaking
    assert added["GET /v1/b"].added is None  # an added endpoint lists no param details


def test_endpoint_removed_carries_the_last_state():
    new = spec({})
    event = only_event(BASE, new)
    assert event.change == ("endpoint_removed",) and event.breaking
    assert (event.api, event.operation_id) == ("POST /v1/a/{id}", "PostA")
    assert event.params == ("amount", "card", "expand") and event.date == SNAP.date and event.seq == 1


def test_params_added_and_removed():
    def change(op):
        op["parameters"] = [query("limit")]

    event = only_event(BASE, edit(BASE, change))
    assert event.change == ("param_added", "param_removed") and event.breaking
    assert event.added == ("limit",) and event.removed == ("expand",)
    assert event.params == ("amount", "card", "limit")


def test_required_added_for_an_existing_and_a_new_param_and_required_removed():
    def require(op):
        body_props(op)["required"] = ["amount", "fresh"]
        body_props(op)["properties"]["fresh"] = S

    event = only_event(BASE, edit(BASE, require))
    assert event.change == ("param_added", "required_added") and event.breaking
    assert event.newly_required == ("amount", "fresh") and event.required == ("amount", "fresh")

    relaxed = only_event(edit(BASE, require), BASE)
    # 'fresh' was required and is gone: removed, not relaxed; 'amount' stays and is relaxed
    assert relaxed.change == ("param_removed", "required_removed")
    assert relaxed.no_longer_required == ("amount",) and relaxed.removed == ("fresh",)


def test_operation_deprecated_and_undeprecated():
    deprecated = edit(BASE, lambda op: op.update(deprecated=True))
    event = only_event(BASE, deprecated)
    assert event.change == ("deprecated",) and event.breaking and event.deprecated
    back = only_event(deprecated, BASE)
    assert back.change == ("undeprecated",) and not back.breaking


def test_param_deprecated_counts_kept_params_only_and_lifting_emits_nothing():
    def deprecate(op):
        op["parameters"] = [query("expand", deprecated=True), query("born_old", deprecated=True)]

    event = only_event(BASE, edit(BASE, deprecate))
    assert event.change == ("param_added", "param_deprecated") and event.breaking
    assert event.newly_deprecated_params == ("expand",)
    assert (
        events_between(
            edit(BASE, deprecate), edit(BASE, lambda op: op.update(parameters=[query("expand"), query("born_old")]))
        )
        == []
    )


def test_nested_changes_are_reported_under_a_parent_present_on_both_sides():
    def change(op):
        props = body_props(op)["properties"]
        props["card"] = obj({"exp": obj({"year": S}, ["year"]), "cvc": S, "fresh": obj({"inner": S})}, required=["cvc"])
        props["brand_new"] = obj({"child": S})  # children of an added param are not listed
        del props["amount"]

    event = only_event(BASE, edit(BASE, change))
    assert event.change == (
        "param_added",
        "param_removed",
        "nested_param_added",
        "nested_param_removed",
        "nested_required_added",
    )
    # 'card.fresh.inner' is not listed: its parent 'card.fresh' is itself new
    assert event.nested_added == ("card.cvc", "card.exp.year", "card.fresh")
    assert event.nested_removed == ("card.exp.month", "card.number")
    # newly required names count whether new ('card.cvc') or under a kept parent ('card.exp.year')
    assert event.nested_newly_required == ("card.cvc", "card.exp.year")
    assert event.breaking

    back = only_event(edit(BASE, change), BASE)
    assert "nested_required_removed" not in back.change  # the required names went away entirely
    relax = only_event(
        edit(BASE, change), edit(edit(BASE, change), lambda op: body_props(op)["properties"]["card"].pop("required"))
    )
    assert relax.change == ("nested_required_removed",) and relax.nested_no_longer_required == ("card.cvc",)
    assert not relax.breaking


def test_nested_changes_below_depth_three_are_not_seen():
    def deeper(op):
        body_props(op)["properties"]["card"]["properties"]["exp"]["properties"]["month"] = obj({"l4": S})

    assert events_between(BASE, edit(BASE, deeper)) == []


def test_path_param_renamed_alone_carries_previous_api():
    renamed = spec({"/v1/a/{account}": json.loads(json.dumps(BASE["paths"]["/v1/a/{id}"]))})
    event = only_event(BASE, renamed)
    assert event.change == ("path_param_renamed",) and not event.breaking
    assert event.api == "POST /v1/a/{account}" and event.previous_api == "POST /v1/a/{id}"
    renamed["paths"]["/v1/a/{account}"]["post"]["deprecated"] = True
    combined = only_event(BASE, renamed)  # with other changes, the event just shows the new spelling
    assert (
        combined.change == ("deprecated",) and combined.previous_api is None and combined.api == "POST /v1/a/{account}"
    )


def test_operation_id_change_alone_emits_nothing():
    assert events_between(BASE, edit(BASE, lambda op: op.update(operationId="Renamed"))) == []


# --- revert times -----------------------------------------------------------------------------


def state(
    params=("a", "b"),
    required=(),
    deprecated=False,
    nested_=(),
    nested_required_=(),
    deprecated_params=(),
    api="GET /x",
):
    return EndpointState(
        api=api,
        operation_id=None,
        params=frozenset(params),
        required=frozenset(required),
        deprecated=deprecated,
        nested=frozenset(tuple(n.split(".")) for n in nested_),
        nested_required=frozenset(tuple(n.split(".")) for n in nested_required_),
        deprecated_params=frozenset(deprecated_params),
    )


def run_history(history: list[tuple[str, dict[str, EndpointState]]]):
    timeline, events, before = StateTimeline(), [], {}
    for seq, (date, now) in enumerate(history):
        snap = Snapshot(seq, f"{seq:040d}", date, "v")
        events += initial_events(now, snap) if seq == 0 else diff_endpoints(before, now, snap)
        timeline.record(seq, date, now)
        before = now
    return with_revert_times(events, timeline)


def test_revert_time_counts_days_to_the_full_restore():
    events = run_history(
        [
            ("2021-01-01T00:00:00Z", {"GET /x": state()}),
            ("2021-01-02T12:00:00Z", {"GET /x": state(params=())}),  # a and b removed
            ("2021-01-03T00:00:00Z", {"GET /x": state(params=("a",))}),  # partial restore
            ("2021-01-05T06:00:00Z", {"GET /x": state(params=("a", "b", "c"))}),  # full restore
        ]
    )
    removal = events[1]
    assert removal.change == ("param_removed",) and removal.reverted_after_days == 2.8
    assert events[2].reverted_after_days is None and not events[2].breaking


def test_partial_restore_is_no_revert():
    events = run_history(
        [
            ("2021-01-01T00:00:00Z", {"GET /x": state()}),
            ("2021-01-02T00:00:00Z", {"GET /x": state(params=(), required=())}),
            ("2021-01-09T00:00:00Z", {"GET /x": state(params=("a",))}),
        ]
    )
    assert events[1].breaking and events[1].reverted_after_days is None


def test_revert_of_removed_endpoint_new_requirement_and_deprecations():
    events = run_history(
        [
            ("2021-01-01T00:00:00Z", {"GET /x": state(), "GET /y": state(api="GET /y")}),
            (
                "2021-01-02T00:00:00Z",
                {"GET /x": state(required=("a",), deprecated=True, deprecated_params=("b",))},  # /y removed
            ),
            # 'a' removed, the operation undeprecated, b still deprecated
            ("2021-01-03T00:00:00Z", {"GET /x": state(params=("b",), deprecated_params=("b",))}),
            ("2021-01-04T00:00:00Z", {"GET /x": state(params=("b",)), "GET /y": state(api="GET /y")}),
        ]
    )
    by = {(e.seq, e.api): e for e in events}
    assert by[(1, "GET /y")].reverted_after_days == 2.0
    assert by[(1, "GET /x")].change == ("required_added", "deprecated", "param_deprecated")
    # restored at seq 3, where b's deprecation is lifted (no event says so; the timeline does)
    assert by[(1, "GET /x")].reverted_after_days == 2.0
    assert by[(2, "GET /x")].change == ("param_removed", "undeprecated")
    assert by[(2, "GET /x")].reverted_after_days is None  # 'a' never comes back


def test_nested_removal_reverts_when_the_names_are_back():
    events = run_history(
        [
            ("2021-01-01T00:00:00Z", {"GET /x": state(nested_=("a.p", "a.q"))}),
            ("2021-01-01T00:00:00Z", {"GET /x": state(nested_=("a.q",))}),
            ("2021-01-31T00:00:00Z", {"GET /x": state(nested_=("a.p", "a.q", "a.r"))}),
        ]
    )
    assert events[1].change == ("nested_param_removed",) and events[1].reverted_after_days == 30.0


def test_a_nested_requirement_is_undone_by_relaxing_or_removing_the_name_not_its_parent():
    def with_card(*names, required=()):
        return {"GET /x": state(params=("card", "other"), nested_=names, nested_required_=required)}

    events = run_history(
        [
            ("2021-01-01T00:00:00Z", with_card("card.name")),
            ("2021-01-02T00:00:00Z", with_card("card.name", required=("card.name",))),
            ("2021-01-03T00:00:00Z", {"GET /x": state(params=("other",))}),  # the parent param goes
            ("2021-01-04T00:00:00Z", with_card("card.name", required=("card.name",))),  # and comes back
            ("2021-01-06T00:00:00Z", with_card("card.cvc")),  # the name itself removed: undone
        ]
    )
    assert events[1].change == ("nested_required_added",) and events[1].reverted_after_days == 4.0


def test_an_endpoint_removal_does_not_revert_a_new_requirement():
    events = run_history(
        [
            ("2021-01-01T00:00:00Z", {"GET /x": state()}),
            ("2021-01-02T00:00:00Z", {"GET /x": state(required=("a",))}),
            ("2021-01-03T00:00:00Z", {}),
        ]
    )
    assert events[1].reverted_after_days is None and events[2].reverted_after_days is None


def test_days_are_rounded_to_one_decimal():
    assert days_between("2018-03-29T00:00:00Z", "2018-03-29T19:12:00Z") == 0.8
    assert days_between("2020-01-01T00:00:00Z", "2020-07-17T07:12:00Z") == 198.3


# --- properties -------------------------------------------------------------------------------

NAMES = st.sampled_from(["a", "b", "c", "d"])
NESTED_PATHS = st.sampled_from([("a", "x"), ("a", "y"), ("b", "x"), ("a", "x", "z"), ("a", "y", "z")])


@st.composite
def endpoint_states_strategy(draw):
    result = {}
    for path in draw(st.sets(st.sampled_from(["/p/{id}", "/p/{name}", "/q", "/r/{k}"]), max_size=3)):
        params = draw(st.frozensets(NAMES))
        state_ = EndpointState(
            api=f"GET {path}",
            operation_id=draw(st.sampled_from([None, "Op"])),
            params=params,
            required=draw(st.frozensets(NAMES)) & params,
            deprecated=draw(st.booleans()),
            nested=draw(st.frozensets(NESTED_PATHS)),
            nested_required=draw(st.frozensets(NESTED_PATHS)),
            deprecated_params=draw(st.frozensets(NAMES)) & params,
        )
        result.setdefault(state_.key, state_)
    return result


@given(endpoint_states_strategy(), endpoint_states_strategy())
def test_replaying_a_diff_reaches_the_new_state_and_breaking_matches_the_types(before, after):
    events = diff_endpoints(before, after, SNAP)
    assert top_level(replay_events(events, before)) == top_level(after)
    assert [e.endpoint_key for e in events] == sorted(e.endpoint_key for e in events)
    for event in events:
        assert event.breaking == any(c in BREAKING_TYPES for c in event.change)
        assert set(event.required) <= set(event.params)


@given(endpoint_states_strategy(), endpoint_states_strategy())
def test_a_change_and_its_undoing_revert_every_breaking_event(a, b):
    events = run_history([("2021-01-01T00:00:00Z", a), ("2021-01-02T00:00:00Z", b), ("2021-01-04T00:00:00Z", a)])
    for event in events:
        # (an endpoint added already deprecated is undone by its removal, which lifts nothing)
        if event.breaking and event.seq == 1 and "endpoint_added" not in event.change:
            assert event.reverted_after_days == 2.0


# --- the git walk -----------------------------------------------------------------------------


class Repo:
    """A throwaway git repository with deterministic commits."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.day = 0
        root.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str, date: str | None = None) -> str:
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com",
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        if date:
            env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
        done = subprocess.run(["git", "-C", str(self.root), *args], env=env, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def commit(self, files: dict[str, Any], *, days: float = 1.0, message: str = "change") -> str:
        """Write (dict: JSON, str: raw text, None: delete) and commit ``days`` after the last one."""
        for name, content in files.items():
            path = self.root / name
            if content is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content if isinstance(content, str) else json.dumps(content, indent=1), encoding="utf-8")
        self.day += days
        date = f"{int(1609459200 + self.day * 86400)} +0000"  # from 2021-01-01
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message, date=date)
        return self.git("rev-parse", "HEAD")


def ops(*names: str, version: str = "v1", **extra: Any) -> dict[str, Any]:
    """A spec whose one endpoint ``POST /v1/a/{id}`` has query params ``names``."""
    return spec(
        {"/v1/a/{id}": {"post": {"operationId": "PostA", "parameters": [query(n) for n in names]}}}, version, **extra
    )


def test_walk_labels_versions_skips_other_commits_and_seq_counts_silent_versions(tmp_path):
    repo = Repo(tmp_path / "r")
    first = repo.commit({"openapi/spec3.json": ops("a", "b")})
    repo.commit({"README.md": "docs only"})
    silent = ops("a", "b")
    silent["info"]["description"] = "prose only"
    repo.commit({"openapi/spec3.json": silent})  # a version with no endpoint change: seq 1, no event
    third = repo.commit({"openapi/spec3.json": ops("a", version="v2")}, days=0.5)
    result = ingest_openapi(repo.root, ["openapi/spec3.json"])
    assert result.versions == 3
    assert [(e.seq, e.commit, e.change, e.version) for e in result.events] == [
        (0, first[:10], ("initial",), "v1"),
        (2, third[:10], ("param_removed",), "v2"),
    ]
    assert result.events[0].date == "2021-01-02T00:00:00Z" and result.events[1].date == "2021-01-04T12:00:00Z"


def test_only_the_first_parent_history_is_walked(tmp_path):
    repo = Repo(tmp_path / "r")
    repo.commit({"s.json": ops("a")})
    repo.git("checkout", "-q", "-b", "side")
    repo.commit({"s.json": ops("a", "side1")})
    repo.commit({"s.json": ops("a", "side2")})
    repo.git("checkout", "-q", "main")
    repo.commit({"other.txt": "x"})
    repo.git("merge", "-q", "--no-ff", "side", "-m", "merge side", date="1610000000 +0000")
    merge = repo.git("rev-parse", "HEAD")
    result = ingest_openapi(repo.root, ["s.json"])
    assert result.versions == 2
    assert [(e.commit, e.added) for e in result.events[1:]] == [(merge[:10], ("side2",))]


def test_since_and_until_bound_the_walk(tmp_path):
    repo = Repo(tmp_path / "r")
    first = repo.commit({"s.json": ops("a")})
    second = repo.commit({"s.json": ops("a", "b")})
    third = repo.commit({"s.json": ops("a", "b", "c")})
    repo.commit({"s.json": ops("a", "b", "c", "d")})
    result = ingest_openapi(repo.root, ["s.json"], since=first, until=third)
    assert [(e.seq, e.commit, e.change) for e in result.events] == [
        (0, second[:10], ("initial",)),
        (1, third[:10], ("param_added",)),
    ]
    with pytest.raises(IngestError, match="expected a commit 'nope'"):
        ingest_openapi(repo.root, ["s.json"], since="nope")


def test_version_from_tag_is_the_earliest_tag_containing_the_commit(tmp_path):
    repo = Repo(tmp_path / "r")
    repo.commit({"s.json": ops("a")})
    repo.commit({"s.json": ops("a", "b")})
    repo.git("tag", "1.1.0")
    repo.git("tag", "-a", "1.2.0", "-m", "later annotated tag on the same commit", date="1700000000 +0000")
    repo.commit({"s.json": ops("a", "b", "c")})
    repo.commit({"x.txt": "y"})
    repo.git("tag", "-a", "1.3.0", "-m", "release", date="1710000000 +0000")
    repo.commit({"s.json": ops("a", "b", "c", "d")})
    result = ingest_openapi(repo.root, ["s.json"], version_from="tag")
    assert [(e.seq, e.version) for e in result.events] == [(0, "1.1.0"), (1, "1.1.0"), (2, "1.3.0"), (3, UNRELEASED)]


def test_files_per_product_with_hosts_and_the_first_file_wins_a_shared_key(tmp_path):
    repo = Repo(tmp_path / "r")

    def product(host: str, *names: str, op_id: str = "Op") -> dict[str, Any]:
        item = {
            "servers": [{"url": f"https://{host}"}],
            "post": {"operationId": op_id, "parameters": [query(n) for n in names]},
        }
        return spec({"/v1/Things/{Sid}": item})

    repo.commit(
        {
            "spec/json/twilio_api.json": product("api.twilio.com", "a"),
            "spec/json/twilio_chat.json": product("chat.twilio.com", "b"),
        }
    )
    # a rename keeps the keys (host + path): no event
    repo.commit({"spec/json/twilio_api.json": None, "spec/json/twilio_api_v2010.json": product("api.twilio.com", "a")})
    # a second file declaring the same host, method and path: the first file in name order wins
    repo.commit(
        {
            "spec/json/twilio_zz_copy.json": product("chat.twilio.com", "zzz", op_id="Copy"),
            "spec/json/other.yaml": "not: [matched",
        }
    )
    repo.commit({"spec/json/twilio_chat.json": None})  # now the copy is the only one declaring it
    repo.commit({"spec/json/twilio_zz_copy.json": None})  # the product's file deleted: a sunset
    result = ingest_openapi(repo.root, ["spec/json/twilio_*.json"], with_host=True)
    assert [(e.seq, e.api, e.change) for e in result.events] == [
        (0, "POST api.twilio.com/v1/Things/{Sid}", ("initial",)),
        (0, "POST chat.twilio.com/v1/Things/{Sid}", ("initial",)),
        (3, "POST chat.twilio.com/v1/Things/{Sid}", ("param_added", "param_removed")),
        (4, "POST chat.twilio.com/v1/Things/{Sid}", ("endpoint_removed",)),
    ]
    assert result.events[2].operation_id == "Copy" and result.events[2].added == ("zzz",)


def test_fallback_file_where_the_first_is_absent_and_yaml_input(tmp_path):
    repo = Repo(tmp_path / "r")
    yaml_text = YAML_SPEC
    repo.commit({"openapi/spec3.yaml": yaml_text})
    repo.commit({"openapi/spec3.json": ops("a", "b", version="2018-02-05")})
    repo.commit({"openapi/spec3.yaml": yaml_text.replace("- {name: a", "- {name: z")})  # YAML only: not read now
    repo.commit({"openapi/spec3.json": None, "openapi/spec3.yaml": yaml_text})  # back to the YAML
    repo.commit({"README.md": "x"})
    result = ingest_openapi(repo.root, ["openapi/spec3.json|openapi/spec3.yaml"])
    assert [(e.seq, e.version, e.change) for e in result.events] == [
        (0, "2017-08-15", ("initial",)),
        (1, "2018-02-05", ("param_added",)),
        (2, "2017-08-15", ("param_removed",)),
    ]
    assert result.events[2].reverted_after_days is None


def test_a_committer_date_going_back_takes_the_previous_date(tmp_path):
    repo = Repo(tmp_path / "r")
    repo.commit({"s.json": ops("a")})
    repo.commit({"s.json": ops("a", "b")}, days=-0.5)  # e.g. a rebased commit
    result = ingest_openapi(repo.root, ["s.json"])
    assert result.dates_clamped == 1
    assert [e.date for e in result.events] == ["2021-01-02T00:00:00Z", "2021-01-02T00:00:00Z"]


def test_commits_without_any_spec_file_are_skipped(tmp_path):
    repo = Repo(tmp_path / "r")
    repo.commit({"s.json": ops("a")})
    repo.commit({"s.json": None})
    repo.commit({"s.json": ops("a", "b")})
    result = ingest_openapi(repo.root, ["s.json"])
    assert result.commits_without_spec == 1 and result.versions == 2
    assert [e.change for e in result.events] == [("initial",), ("param_added",)]


def test_malformed_spec_names_file_and_commit_unless_skipped(tmp_path):
    repo = Repo(tmp_path / "r")
    repo.commit({"s.json": ops("a")})
    bad = repo.commit({"s.json": '{"openapi": "3.0.0", "paths": {'})
    repo.commit({"s.json": ops("a", "b")})
    with pytest.raises(
        IngestError, match=rf"^s\.json at commit {bad[:12]}: expected JSON, got a syntax error at line 1"
    ):
        ingest_openapi(repo.root, ["s.json"])
    result = ingest_openapi(repo.root, ["s.json"], skip_invalid=True)
    assert result.versions == 2 and len(result.skipped_invalid) == 1 and bad[:12] in result.skipped_invalid[0]
    assert [(e.seq, e.change) for e in result.events] == [(0, ("initial",)), (1, ("param_added",))]


def test_missing_info_version_is_an_error_only_when_it_is_the_label(tmp_path):
    repo = Repo(tmp_path / "r")
    doc = ops("a")
    del doc["info"]["version"]
    repo.commit({"s.json": doc})
    with pytest.raises(
        IngestError, match=r"s\.json at commit \w+: expected info\.version \(or use --version-from tag\)"
    ):
        ingest_openapi(repo.root, ["s.json"])
    assert ingest_openapi(repo.root, ["s.json"], version_from="tag").events[0].version == UNRELEASED


def test_replaying_the_log_reproduces_the_last_parsed_version(tmp_path):
    repo = Repo(tmp_path / "r")
    deprecated = edit(BASE, lambda op: op.update(deprecated=True))
    versions = [
        BASE,
        deprecated,
        spec(
            {
                "/v1/a/{acct}": deprecated["paths"]["/v1/a/{id}"],
                "/v1/b": {"get": {"parameters": [query("q", required=True)]}},
            }
        ),
        spec({"/v1/b": {"get": {"parameters": [query("q")]}, "delete": {}}}),
        spec({"/v1/b": {"get": {}}, "/v1/a/{x}": {"post": {"requestBody": body({"n": S}, ["n"])}}}),
    ]
    for doc in versions:
        repo.commit({"s.json": doc})
    result = ingest_openapi(repo.root, ["s.json"])
    assert top_level(replay_events(result.events)) == top_level(states(versions[-1]))
    kinds = {c for e in result.events for c in e.change}
    assert {"endpoint_added", "endpoint_removed", "deprecated", "path_param_renamed", "required_removed"} <= kinds


def test_spec_sources_and_glob_matching():
    assert SpecSource.parse("./a.json | a.yaml").alternatives == ("a.json", "a.yaml")
    with pytest.raises(ValueError, match="expected FILE_OR_GLOB"):
        SpecSource.parse("a.json|")
    with pytest.raises(ValueError, match="relative to the repository root"):
        SpecSource.parse("/abs/a.json")
    assert path_matches("spec/json/twilio_*.json", "spec/json/twilio_api_v2010.json")
    assert not path_matches("spec/*.json", "spec/json/twilio_api.json")  # '*' stays within a folder
    source = SpecSource.parse("x/*.json|x/*.yaml")
    assert source.select({"x/b.json": "2", "x/a.json": "1", "x/a.yaml": "3"}) == (("x/a.json", "1"), ("x/b.json", "2"))
    assert source.select({"x/a.yaml": "3"}) == (("x/a.yaml", "3"),)


# --- the command line -------------------------------------------------------------------------


def test_cli_writes_a_valid_log_refuses_to_overwrite_and_leaves_nothing_on_error(tmp_path, capsys):
    repo = Repo(tmp_path / "r")
    repo.commit({"s.json": ops("a", "b")})
    repo.commit({"s.json": ops("a")})
    repo.commit({"s.json": ops("a", "b")}, days=3)
    out = tmp_path / "out" / "events.jsonl"
    argv = ["ingest", "openapi", "--repo", str(repo.root), "--spec", "s.json", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    events = read_events(out)
    assert [e.change for e in events] == [("initial",), ("param_removed",), ("param_added",)]
    assert events[1].reverted_after_days == 3.0
    printed = capsys.readouterr().out
    assert "3 spec versions walked" in printed and "breaking events: 1; reverted within 30 days: 1, ever: 1" in printed

    before = out.read_bytes()
    with one_line_error(capsys, "already exists; pass --force"):
        assert 2 == main(argv)
    repo.commit({"s.json": "{not json"})
    with one_line_error(capsys, r"wpb ingest openapi: error: s\.json at commit \w+: expected JSON"):
        assert 2 == main(argv + ["--force"])
    assert out.read_bytes() == before  # the failed run left the old log whole
    fresh = tmp_path / "fresh.jsonl"
    with one_line_error(capsys):
        assert 2 == main(
            ["ingest", "openapi", "--repo", str(repo.root), "--spec", "s.json", "--out", str(fresh), "--quiet"]
        )
    assert not fresh.exists() and list(tmp_path.glob(".fresh.jsonl*")) == []
    assert main(argv + ["--force", "--skip-invalid"]) == 0
    assert "note: skipped unreadable version" in capsys.readouterr().err


def test_cli_rejects_a_folder_that_is_no_repository(tmp_path, capsys):
    with one_line_error(capsys, "expected a git repository"):
        assert 2 == main(
            ["ingest", "openapi", "--repo", str(tmp_path), "--spec", "s.json", "--out", str(tmp_path / "o.jsonl")]
        )


@contextlib.contextmanager
def one_line_error(capsys, pattern: str = ""):
    """The ``wpb`` call inside (``assert 2 == main(...)``) prints one line matching ``pattern``."""
    capsys.readouterr()
    yield
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(pattern, err), err
