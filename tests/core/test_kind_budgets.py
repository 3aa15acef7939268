"""Hierarchical budgets in the store: the rules (golden), their invariants (hypothesis) and the
settings' text form."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.checks import InputError
from wpb_gym.core.kind_budgets import KINDS, KindBudgets, KindShares, content_kind
from wpb_gym.core.store import ByteMemoryStore, Reason
from wpb_gym.core.types import MemoryAction, Step


def endpoint(t, api="api.v1.a", params=("x",)):
    return Step(t, {"api": api, "params": list(params)}, {})


def doc(t, size=100):
    return Step(t, {"section": f"s{t}", "content": "d" * size}, {})


def guide(t):
    return Step(t, {"old_api": "a", "new_api": "b"}, {})


def test_content_kinds_follow_the_observations_keys():
    assert [content_kind(s.observation) for s in (endpoint(0), doc(1), guide(2))] == ["endpoint", "doc", "guide"]
    assert content_kind({"note": 1}) == content_kind("text") == content_kind(None) == "other"
    # "api" wins: a MERGE joins equal "api", so a delta is always an endpoint's.
    assert content_kind({"api": "a", "section": "s"}) == "endpoint"


def test_a_write_past_its_kinds_limit_is_refused_and_the_total_is_judged_first():
    step = doc(0, 300)
    cost = estimate_bytes(step)
    store = ByteMemoryStore(10_000, {"doc": cost - 1})
    decision = store.check(MemoryAction.write(step), 0)
    assert (decision.accepted, decision.reason, decision.byte_delta) == (False, Reason.OVER_KIND_BUDGET, cost)
    assert store.execute(MemoryAction.write(step), 0).reason is Reason.OVER_KIND_BUDGET
    assert len(store) == 0 and store.kind_used("doc") == 0 and store.rejected_counts["WRITE"] == 1
    # Over both: the total's reason.
    small = ByteMemoryStore(cost - 1, {"doc": cost - 1})
    assert small.check(MemoryAction.write(step), 0).reason is Reason.OVER_BUDGET
    # Exactly at the limit: accepted.
    assert ByteMemoryStore(10_000, {"doc": cost}).apply(MemoryAction.write(step), 0)


def test_each_kind_counts_only_its_own_items_and_expire_credits_it():
    a, d, g = endpoint(0), doc(1), guide(2)
    store = ByteMemoryStore(10_000, {"endpoint": estimate_bytes(a), "doc": 5_000})
    for step in (a, d, g):
        assert store.apply(MemoryAction.write(step), step.t)
    assert store.kind_used("endpoint") == estimate_bytes(a)
    assert store.kind_used("doc") == estimate_bytes(d)
    assert store.kind_used("guide") == estimate_bytes(g)  # counted, limited by the total only
    assert store.kind_remaining("endpoint") == 0
    assert store.kind_remaining("guide") == store.remaining()
    assert store.kind_remaining("doc") == min(store.remaining(), 5_000 - estimate_bytes(d))
    refused = store.check(MemoryAction.write(endpoint(3, "api.v1.b")), 3)
    assert refused.reason is Reason.OVER_KIND_BUDGET
    assert store.apply(MemoryAction.expire(0), 3)
    assert store.kind_used("endpoint") == 0
    assert store.apply(MemoryAction.write(endpoint(3, "api.v1.b")), 3)


def test_a_merge_counts_against_its_base_items_kind():
    base, newer = endpoint(0, params=("x",)), endpoint(1, params=("x", "y"))
    store = ByteMemoryStore(10_000, {"endpoint": estimate_bytes(base) + 5})
    assert store.apply(MemoryAction.write(base), 0)
    decision = store.check(MemoryAction("MERGE", step=newer, target_t=0), 1)
    assert decision.reason is Reason.OVER_KIND_BUDGET and decision.byte_delta > 5
    roomy = ByteMemoryStore(10_000, {"endpoint": 10_000, "doc": 0})
    roomy.apply(MemoryAction.write(base), 0)
    merged = roomy.execute(MemoryAction("MERGE", step=newer, target_t=0), 1)
    assert merged.accepted
    assert roomy.kind_used("endpoint") == estimate_bytes(base) + merged.byte_delta
    assert roomy.apply(MemoryAction.expire(1), 2) and roomy.kind_used("endpoint") == estimate_bytes(base)


def test_a_store_without_kind_budgets_counts_no_kinds():
    store = ByteMemoryStore(10_000)
    assert store.kind_budgets is None and store.view().kind_budgets is None
    store.apply(MemoryAction.write(doc(0)), 0)
    assert store.kind_used("doc") == 0 and store.kind_remaining("doc") == store.remaining()


@pytest.mark.parametrize("limits, message", [
    ({"docs": 1}, "unknown kind 'docs'"),
    ({"doc": -1}, "an int of bytes from 0 to"),
    ({"doc": 1.5}, "an int of bytes from 0 to"),
    ({"doc": 2**41}, "an int of bytes from 0 to 1099511627776"),
])
def test_bad_kind_budgets_are_named(limits, message):
    with pytest.raises(ValueError, match=message):
        ByteMemoryStore(100, limits)


def test_shares_read_text_and_resolve_at_each_budget():
    shares = KindShares.parse("guide=1KB, endpoint=60%,doc=12.5%")
    assert shares.parts == (("endpoint", Fraction(3, 5)), ("doc", Fraction(1, 8)), ("guide", 1024))
    assert shares.text() == "endpoint=60%,doc=12.5%,guide=1024"
    assert KindShares.parse(shares.text()) == shares
    assert shares.resolve(1000) == KindBudgets((("endpoint", 600), ("doc", 125), ("guide", 1024)))
    assert shares.resolve(1001).as_dict() == {"endpoint": 600, "doc": 125, "guide": 1024}  # rounds down
    assert KindShares.parse({"doc": "30%"}).resolve(10) == KindBudgets((("doc", 3),))
    assert shares.resolve(1000).text() == "endpoint=600,doc=125,guide=1024"


@pytest.mark.parametrize("text, message", [
    ("endpoints=10%", "unknown kind 'endpoints'"),
    ("doc=10%,doc=20%", "'doc' is given twice"),
    ("doc=120%", "at most 100%"),
    ("doc", "KIND=SHARE"),
    ("doc=", "KIND=SHARE"),
    ("doc=ten", "doc: expected"),
    ("doc=-5%", "doc: expected"),
])
def test_bad_shares_are_named(text, message):
    with pytest.raises(InputError, match=message) as error:
        KindShares.parse(text, "--kind-budgets")
    assert str(error.value).startswith("--kind-budgets")


_STEPS = st.one_of(
    st.builds(lambda api, n: ("endpoint", api, n), st.sampled_from(["a", "b"]), st.integers(1, 4)),
    st.builds(lambda n: ("doc", None, n), st.integers(1, 300)),
    st.builds(lambda n: ("guide", None, n), st.integers(0, 1)),
)


def _make(t, spec):
    kind, api, n = spec
    if kind == "endpoint":
        return endpoint(t, f"api.v1.{api}", [f"p{i}" for i in range(n)])
    if kind == "doc":
        return doc(t, n)
    return guide(t)


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(_STEPS, min_size=1, max_size=25),
    choices=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30)), min_size=25, max_size=25),
    total=st.integers(0, 1500),
    limits=st.dictionaries(st.sampled_from(KINDS), st.integers(0, 800), max_size=4),
)
def test_every_kind_stays_within_its_limit_and_the_rules_are_the_total_ones_plus_the_kinds(
    steps, choices, total, limits
):
    """Differential: the store with kind budgets accepts an action exactly when the same store
    without them does and the action's kind has room; kind use is the sum of its items' costs."""
    store = ByteMemoryStore(total, limits)
    plain = ByteMemoryStore(total)
    for t, spec in enumerate(steps):
        step = _make(t, spec)
        op, pick = choices[t]
        held = store.timesteps()
        if op == 0 or not held:
            action = MemoryAction.write(step)
        elif op == 1:
            action = MemoryAction.expire(held[pick % len(held)])
        elif op == 2:
            action = MemoryAction("MERGE", step=step, target_t=held[pick % len(held)])
        else:
            action = MemoryAction.skip()
        expected = plain.check(action, t)
        kind = None
        if expected.accepted and action.action in ("WRITE", "MERGE"):
            kind = content_kind(step.observation if action.action == "WRITE"
                                else store.get(action.target_t).step.observation)
            limit = limits.get(kind)
            if limit is not None and store.kind_used(kind) + expected.byte_delta > limit:
                expected = None
        decision = store.execute(action, t)
        if expected is None:
            assert decision.reason is Reason.OVER_KIND_BUDGET
        else:
            assert decision.accepted == expected.accepted
            if decision.accepted:
                plain.execute(action, t)
        for name in KINDS:
            own = sum(item.byte_cost for item in store.iter_items() if content_kind(item.step.observation) == name)
            assert store.kind_used(name) == (own if limits else 0)  # counted only with kind budgets
            if name in limits:
                assert own <= limits[name]
        assert store.bytes_used == plain.bytes_used <= total
