"""Labelling the changes between two spec versions and their revert times (episodes/real/openapi_changes.py)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from test_openapi_ingest import BASE, SNAP, S, edit, events_between, obj, only_event, query, spec, states

from wpb_gym.episodes.real.change_events import BREAKING_TYPES
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
from wpb_gym.episodes.real.openapi_spec import (
    EndpointState,
)

# --- labelling changes ------------------------------------------------------------------------

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
