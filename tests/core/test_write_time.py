"""Write time in the store: the rules (golden), their invariant (hypothesis), the text form."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.checks import InputError
from wpb_gym.core.store import ByteMemoryStore, Reason
from wpb_gym.core.store_limits import StoreLimits
from wpb_gym.core.kind_budgets import KindShares
from wpb_gym.core.types import MemoryAction, Step
from wpb_gym.core.write_time import WriteTime


def endpoint(t, api="api.v1.a", params=("x",)):
    return Step(t, {"api": api, "params": list(params)}, {})


def test_ticks_are_a_latency_plus_a_transfer_time_per_kb_rounded_up():
    time = WriteTime(total=10, per_write=2, per_kb=3)
    assert [time.ticks(n) for n in (0, 1, 341, 342, 1024, 1025, 2048)] == [2, 3, 3, 4, 5, 6, 8]
    assert WriteTime(total=5).ticks(10_000) == 1  # defaults: one tick a write, whatever its size


def test_writes_spend_time_that_expire_does_not_give_back_and_the_last_tick_is_usable():
    store = ByteMemoryStore(100_000, write_time=WriteTime(total=2))
    assert store.apply(MemoryAction.write(endpoint(0)), 0)
    assert store.apply(MemoryAction.expire(0), 1)
    assert store.time_remaining() == 1 and store.time_used == 1
    assert store.apply(MemoryAction.write(endpoint(1)), 1)
    refused = store.execute(MemoryAction.write(endpoint(2, "api.v1.b")), 2)
    assert (refused.accepted, refused.reason) == (False, Reason.OUT_OF_WRITE_TIME)
    assert refused.byte_delta == estimate_bytes(endpoint(2, "api.v1.b"))
    assert store.time_remaining() == 0 and len(store) == 1  # a refused write takes no time
    assert store.apply(MemoryAction.skip(), 3) and store.apply(MemoryAction.expire(1), 3)


def test_a_merge_spends_the_ticks_of_its_delta_and_bytes_are_judged_first():
    base, newer = endpoint(0, params=("x",)), endpoint(1, params=("x", "y"))
    store = ByteMemoryStore(100_000, write_time=WriteTime(total=4, per_write=1, per_kb=1))
    assert store.apply(MemoryAction.write(base), 0)  # 1 + ceil(bytes / 1024) = 2 ticks
    merged = store.execute(MemoryAction("MERGE", step=newer, target_t=0), 1)
    assert merged.accepted and merged.byte_delta < 1024
    assert store.time_used == 4 and store.time_remaining() == 0
    tiny = ByteMemoryStore(10, write_time=WriteTime(total=0))
    assert tiny.check(MemoryAction.write(base), 0).reason is Reason.OVER_BUDGET


def test_a_merge_past_the_time_left_is_refused():
    base, newer = endpoint(0, params=("x",)), endpoint(1, params=("x", "y"))
    store = ByteMemoryStore(100_000, write_time=WriteTime(total=1))
    assert store.apply(MemoryAction.write(base), 0)
    assert store.check(MemoryAction("MERGE", step=newer, target_t=0), 1).reason is Reason.OUT_OF_WRITE_TIME


def test_a_store_without_write_time_has_none():
    store = ByteMemoryStore(100)
    assert store.write_time is None and store.time_remaining() is None and store.view().time_remaining() is None


@pytest.mark.parametrize("text, message", [
    ("per_write=1", "expected total=TICKS"),
    ("total=4,speed=2", "unknown field 'speed'"),
    ("total=4,total=5", "'total' is given twice"),
    ("total=-1", "total: expected"),
    ("total", "FIELD=TICKS"),
])
def test_bad_write_time_is_named(text, message):
    with pytest.raises(InputError, match=message) as error:
        WriteTime.parse(text, "--write-time")
    assert str(error.value).startswith("--write-time")


def test_the_text_form_reads_back_and_limits_are_one_at_a_time():
    time = WriteTime.parse("per_kb=2, total=40")
    assert time == WriteTime(40, 1, 2) and WriteTime.parse(time.text()) == time
    limits = StoreLimits(write_time=time)
    assert StoreLimits.from_text(limits.text()) == limits
    with pytest.raises(ValueError, match="one at a time"):
        StoreLimits(KindShares.parse("doc=10%"), time)
    with pytest.raises(ValueError, match="per_kb must be an int of ticks from 0 to 1000000"):
        WriteTime(total=3, per_kb=-1)
    with pytest.raises(ValueError, match="total must be an int of ticks from 0 to 1000000000"):
        WriteTime(total=10**10)


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 5), min_size=1, max_size=25),
    ops=st.lists(st.integers(0, 2), min_size=25, max_size=25),
    total=st.integers(0, 30),
    per_write=st.integers(0, 3),
    per_kb=st.integers(0, 40),
)
def test_the_ticks_spent_are_those_of_the_accepted_writes_and_never_exceed_the_total(
    sizes, ops, total, per_write, per_kb
):
    """Differential: accepted exactly when the store without write time accepts and the ticks fit."""
    time = WriteTime(total, per_write, per_kb)
    store, plain = ByteMemoryStore(2_000, write_time=time), ByteMemoryStore(2_000)
    spent = 0
    for t, size in enumerate(sizes):
        step = endpoint(t, f"api.v1.e{t % 3}", [f"p{i}" for i in range(size)])
        held = store.timesteps()
        action = MemoryAction.expire(held[0]) if ops[t] == 1 and held else (
            MemoryAction.skip() if ops[t] == 2 else MemoryAction.write(step))
        expected = plain.check(action, t)
        fits = action.action != "WRITE" or spent + time.ticks(expected.byte_delta) <= total
        decision = store.execute(action, t)
        assert decision.accepted == (expected.accepted and fits)
        if decision.accepted:
            plain.execute(action, t)
            if action.action == "WRITE":
                spent += time.ticks(decision.byte_delta)
        assert store.time_used == spent <= total
