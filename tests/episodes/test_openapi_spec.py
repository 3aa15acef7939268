"""Reading an OpenAPI document into endpoint states (episodes/real/openapi_spec.py)."""

from __future__ import annotations

import re

import pytest
from test_openapi_ingest import YAML_SPEC, S, body, nested, obj, one, query, spec, states

from wpb_gym.episodes.real.openapi_spec import (
    SpecError,
    load_document,
    spec_version_label,
)

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
