"""The wire form of actions between a policy's process and the evaluator (``wpb_gym.evaluation.isolated.wire``)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from wpb_gym.evaluation.isolated.wire import decode_action, encode_action
from wpb_gym.evaluation.referee import NOT_JSON

reasons = st.none() | st.text(max_size=20)
targets = st.integers(min_value=-(2**70), max_value=2**70)
deltas = st.just(NOT_JSON) | st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3)
plain_actions = st.one_of(
    st.tuples(st.just("SKIP"), st.none(), st.none(), reasons),
    st.tuples(st.just("WRITE"), st.none(), st.none(), reasons),
    st.tuples(st.just("EXPIRE"), targets, st.none(), reasons),
    st.tuples(st.just("MERGE"), targets, deltas, reasons),
)


@given(plain_actions, st.booleans())
def test_every_action_round_trips_through_json(plain, accepted):
    kind = plain[0]
    wire = json.loads(json.dumps(encode_action(plain, accepted)))
    expected = ("SKIP", None, None, None) if kind == "SKIP" else plain  # a SKIP's reason stays home
    assert decode_action(wire) == (expected, accepted)


def test_the_wire_forms_are_short():
    # accepted, without a reason: one integer
    assert encode_action(("WRITE", None, None, None), True) == -1
    assert encode_action(("EXPIRE", 7, None, None), True) == 7
    assert encode_action(("EXPIRE", 0, None, None), True) == 0
    assert encode_action(("SKIP", None, None, "why"), True) == -2
    # otherwise a list
    assert encode_action(("WRITE", None, None, None), False) == [1, False]
    assert encode_action(("WRITE", None, None, "fits"), True) == [1, True, "fits"]
    assert encode_action(("WRITE", None, None, "fits"), False) == [1, False, "fits"]
    assert encode_action(("EXPIRE", 7, None, None), False) == [3, False, None, 7]
    assert encode_action(("EXPIRE", -3, None, None), True) == [3, True, None, -3]
    assert encode_action(("MERGE", 2, {"v": 1}, None), True) == [2, True, None, 2, {"v": 1}, True]


def test_every_integer_a_process_sends_is_an_action_or_refused():
    assert decode_action(12) == (("EXPIRE", 12, None, None), True)
    assert decode_action(2**80) == (("EXPIRE", 2**80, None, None), True)  # judged, and refused, as any EXPIRE
    assert decode_action(-1) == (("WRITE", None, None, None), True)
    assert decode_action(-2) == (("SKIP", None, None, None), True)
    for raw in (-3, -(2**80), True, False):
        assert decode_action(raw) is None, raw


def test_what_is_not_an_action_is_refused():
    for raw in (True, -3, 1.0, "1", None, [], [1], [True, True], [1, 1], [3, True, None, "7"], [3, True, None, True],
                [0, True, None, 7], [2, True, None, 7, {}, "yes"], [2, True, None, 7, {"a": 1}, False]):
        assert decode_action(raw) is None, raw
