"""Compressed writes in the store: the codec (golden), the rules, the metrics' credit, the text form."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym.core.accounting import HEADER_BYTES, INDEX_BYTES, estimate_bytes
from wpb_gym.core.checks import InputError
from wpb_gym.core.compression import (
    CODEC,
    SUMMARY_TEXT_LIMIT,
    Compression,
    compressed_cost,
    compressed_step,
    summary_observation,
)
from wpb_gym.core.store import ByteMemoryStore, Reason
from wpb_gym.core.store_limits import StoreLimits
from wpb_gym.core.types import Episode, MemoryAction, Step
from wpb_gym.core.write_time import WriteTime
from wpb_gym.scoring.metrics import compute_metrics

HALF = Compression(0.5)


def snapshot(t, api="api.v1.a", version=1, params=("x", "y"), required=("x",)):
    return Step(t, {"api": api, "version": version, "deprecated": False, "params": list(params),
                    "required": list(required)}, {"mode": "breaking"})


def test_the_summary_keeps_scalars_and_short_text_in_order_and_drops_the_rest():
    observation = {"api": "api.v2.a", "params": ["x"], "version": 2, "deprecated": True, "removed": None,
                   "weight": 0.5, "note": "n" * SUMMARY_TEXT_LIMIT, "body": "b" * (SUMMARY_TEXT_LIMIT + 1),
                   "schema": {"x": 1}}
    summary = summary_observation(observation)
    assert list(summary) == ["api", "version", "deprecated", "removed", "weight", "note"]
    assert summary["note"] == "n" * SUMMARY_TEXT_LIMIT
    assert summary_observation(["not", "an", "object"]) is None
    assert summary_observation("text") is None


def test_a_compressed_write_costs_the_write_formula_on_its_summary():
    step = snapshot(0)
    summary = {"api": "api.v1.a", "version": 1, "deprecated": False}
    expected = len(json.dumps(summary, sort_keys=True)) + len(json.dumps(step.metadata, sort_keys=True)) \
        + HEADER_BYTES + INDEX_BYTES
    assert compressed_cost(step) == expected == 122
    assert estimate_bytes(step) == 163 and compressed_cost(step) < estimate_bytes(step)
    assert compressed_step(step).observation == summary and compressed_step(step).t == 0


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=6), st.one_of(st.none(), st.booleans(), st.integers(),
                                                      st.text(max_size=80), st.lists(st.integers(), max_size=3)),
                       max_size=6))
def test_a_compressed_write_never_costs_more_than_a_plain_one(observation):
    step = Step(0, observation, {})
    cost = compressed_cost(step)
    if cost is None:  # nothing to drop
        assert summary_observation(observation) == observation
    else:
        assert cost < estimate_bytes(step)


def test_the_store_keeps_the_summary_and_counts_it_compressed():
    store = ByteMemoryStore(10_000, compression=HALF)
    decision = store.execute(MemoryAction.write_compressed(snapshot(0), reason="tight"), 0)
    assert decision.accepted and decision.byte_delta == 122 == store.bytes_used
    item = store.get(0)
    assert item.codec == CODEC and item.kind == "WRITE" and item.api == "api.v1.a"
    assert item.step.observation == {"api": "api.v1.a", "version": 1, "deprecated": False}
    assert item.metadata["reason"] == "tight"
    assert store.compressed_timesteps() == (0,) and store.retained_timesteps() == (0,)
    assert store.view().compressed_timesteps() == (0,) and store.view().compression == HALF
    assert store.apply(MemoryAction.expire(0), 1)
    assert store.compressed_timesteps() == () and store.bytes_used == 0


def test_a_merge_into_a_compressed_item_is_priced_against_its_summary():
    store = ByteMemoryStore(10_000, compression=HALF)
    assert store.apply(MemoryAction.write_compressed(snapshot(0)), 0)
    merged = store.execute(MemoryAction.merge(snapshot(1, version=2), 0), 1)
    # The summary lost the parameters: the delta must carry them again.
    assert merged.accepted and merged.delta == {"version": 2, "params": ["x", "y"], "required": ["x"]}
    plain = ByteMemoryStore(10_000)
    assert plain.apply(MemoryAction.write(snapshot(0)), 0)
    assert plain.execute(MemoryAction.merge(snapshot(1, version=2), 0), 1).delta == {"version": 2}


def test_refusals_name_why():
    off = ByteMemoryStore(10_000)
    assert off.check(MemoryAction.write_compressed(snapshot(0)), 0).reason is Reason.COMPRESSION_OFF
    store = ByteMemoryStore(10_000, compression=HALF)
    text = Step(0, "plain text", {})
    assert store.check(MemoryAction.write_compressed(text), 0).reason is Reason.NOT_COMPRESSIBLE
    flat = Step(0, {"api": "a", "version": 1}, {})
    assert store.check(MemoryAction.write_compressed(flat), 0).reason is Reason.NOTHING_TO_COMPRESS
    assert store.check(MemoryAction.write_compressed(snapshot(1)), 0).reason is Reason.NOT_CURRENT_STEP
    tight = ByteMemoryStore(121, compression=HALF)
    over = tight.check(MemoryAction.write_compressed(snapshot(0)), 0)
    assert (over.reason, over.byte_delta) == (Reason.OVER_BUDGET, 122)
    assert store.apply(MemoryAction.write(snapshot(0)), 0)
    assert store.check(MemoryAction.write_compressed(snapshot(0)), 0).reason is Reason.TIMESTEP_OCCUPIED
    assert len(store) == 1 and store.compressed_timesteps() == ()


def test_malformed_compressed_actions_are_refused_when_made():
    with pytest.raises(ValueError, match="only WRITE"):
        MemoryAction("MERGE", step=snapshot(1), target_t=0, codec=CODEC)
    with pytest.raises(ValueError, match="codec must be 'summary/1'"):
        MemoryAction("WRITE", step=snapshot(0), codec="zstd")
    with pytest.raises(ValueError, match="needs step"):
        MemoryAction.write_compressed(None)
    with pytest.raises(TypeError, match="expected a Compression"):
        ByteMemoryStore(100, compression=0.5)


def test_the_metrics_count_a_compressed_critical_step_at_its_credit():
    steps = [snapshot(0), snapshot(1, api="api.v1.b"), snapshot(2, api="api.v1.c")]
    episode = Episode(steps, {"critical_steps": [0, 1], "utility_by_step": {0: 2.0, 1: 4.0, 2: 1.0}})
    store = ByteMemoryStore(10_000, compression=Compression(0.25))
    assert store.apply(MemoryAction.write(steps[0]), 0)
    assert store.apply(MemoryAction.write_compressed(steps[1]), 1)
    assert store.apply(MemoryAction.write_compressed(steps[2]), 2)
    m = compute_metrics(episode, store, oracle_utility=6.0)
    assert (m.tp, m.fp, m.fn) == (2, 1, 0)  # the counts still count items
    assert m.precision == pytest.approx(1.25 / 3) and m.recall == pytest.approx(1.25 / 2)
    assert m.f1 == pytest.approx(2 * 1.25 / (3 + 2))
    assert m.policy_utility == pytest.approx(2.0 + 0.25 * 4.0 + 0.25 * 1.0)
    assert m.drift_coverage == pytest.approx(1.25 / 2)
    full = ByteMemoryStore(10_000, compression=Compression(1.0))
    for step in steps:
        assert full.apply(MemoryAction.write_compressed(step), step.t)
    assert compute_metrics(episode, full, oracle_utility=6.0).f1 == pytest.approx(0.8)


def test_the_setting_reads_its_text_and_names_bad_input():
    assert Compression.parse("credit=0.75") == Compression(0.75)
    assert Compression.parse({"credit": 1}) == Compression(1.0)
    assert Compression.parse(Compression.parse("credit=0.1").text()) == Compression(0.1)
    for text, message in [("credit=1.5", r"--compression: credit: expected a number in \[0, 1\]"),
                          ("credit=nan", "--compression: credit: expected a finite number"),
                          ("ratio=0.5", "--compression: unknown field 'ratio'"),
                          ("credit=0.5,credit=0.6", "'credit' is given twice"),
                          ("on", "expected NAME=VALUE items"),
                          ({}, "expected credit=CREDIT")]:
        with pytest.raises(InputError, match=message):
            Compression.parse(text, "--compression")
    with pytest.raises(ValueError, match="credit must be a number in"):
        Compression(True)


def test_compression_goes_with_no_other_limit_and_crosses_as_text():
    limits = StoreLimits(compression=Compression(0.75))
    assert StoreLimits.from_text(limits.text()) == limits and bool(limits)
    assert limits.store(1024).compression == Compression(0.75)
    with pytest.raises(ValueError, match="one at a time"):
        StoreLimits(write_time=WriteTime(5), compression=Compression(0.5))
