"""Attacks found by reviewing the evaluator after the first adversarial suite; each runs in
the modes it concerns, beside its honest twin (see ``tests/evaluation/test_adversarial.py``)."""

from __future__ import annotations

from functools import partial

import adversaries as adv
import pytest

from agents.registry import make_agent
from wpb_gym.core.readonly import freeze
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.evaluation.grid import PolicySpec, generated_refs, run_grid
from wpb_gym.evaluation.referee import MalformedActionError, PolicyError
from wpb_gym.evaluation.runner import run_episode

METRICS = ("f1", "precision", "recall", "bytes_used", "write_actions", "tp", "fp")


def _episode():
    return generate_episode(make_config("default", length=200), 0, 0)


def test_a_policy_that_declares_the_oracle_track_once_gets_no_labels_in_process():
    """Its track was read twice: unprivileged for the check, oracle for the context."""
    episode = _episode()
    cheat = run_episode(adv.TrackTurncoat(True, "reads"), episode, 2048)
    honest = run_episode(adv.TrackTurncoat(False, "reads"), episode, 2048)
    assert {m: getattr(cheat.metrics, m) for m in METRICS} == {m: getattr(honest.metrics, m) for m in METRICS}
    assert cheat.metrics.precision < 0.5  # with the labels it wrote the critical steps only (precision 1.0)


def test_a_policy_process_that_declares_the_oracle_track_gets_no_labels_when_isolated():
    """Its process answered the start-up question with "oracle" and got the labels, while its
    grid entry (and its row) said unprivileged."""
    refs = generated_refs(["default"], [200], 1, seed=0)
    spec = PolicySpec("turncoat", partial(adv.TrackTurncoat, True, "first"), "unprivileged")
    with pytest.raises(PolicyError, match="declares the oracle track, the evaluator knows it as unprivileged"):
        run_grid(refs, [spec], [2048], ["unprivileged"], isolate=True)


@pytest.mark.parametrize("isolate", [False, True])
def test_the_store_values_behind_check_cannot_be_edited(isolate):
    """A MERGE of a made-up step whose values compare with the store's (``__ne__``) was handed
    the evaluator's canonical observation values, and every later policy saw them edited."""
    refs = generated_refs(["breaking"], [200], 1, seed=0)
    victims = [PolicySpec(n, partial(make_agent, n)) for n in ("breaking_detector", "change_detector")]
    rows = {}
    for first in ("grab", "honest"):
        factory = partial(adv.CanonicalGrabber, first == "grab")
        specs = [PolicySpec(first, factory), *victims]
        for row in run_grid(refs, specs, [4096, 10**6], ["unprivileged"], isolate=isolate):
            rows[first, row["policy"], row["budget_bytes"]] = {m: row[m] for m in METRICS}
    for victim in ("breaking_detector", "change_detector"):
        for budget in (4096, 10**6):
            assert rows["grab", victim, budget] == rows["honest", victim, budget]
    assert rows["grab", "grab", 4096] == rows["honest", "honest", 4096]


def test_check_refuses_a_merge_of_values_of_a_policys_own_types():
    episode = _episode()

    class Peek:
        def select(self, step, store):
            from wpb_gym.core.types import MemoryAction, Step

            if step.t == 0:
                yield MemoryAction.write(step)
                return
            fake = Step(step.t, {"api": store.get(0).api, "params": adv._Grab()}, {})
            store.check(MemoryAction.merge(fake, 0), step.t)
            yield MemoryAction.skip()

    with pytest.raises(TypeError, match="JSON values of plain types, got _Grab"):
        run_episode(Peek(), episode, 4096)


def test_a_reason_longer_than_the_limit_is_a_named_error():
    """Reasons are kept with items, unpriced: 8 MB each grew the evaluator by 337 MB in 40 steps."""
    with pytest.raises(MalformedActionError, match="reason of 1048576 characters; at most 1000"):
        run_episode(adv.LongReason(True), _episode(), 10240)
    assert run_episode(adv.LongReason(False), _episode(), 10240).metrics.write_actions > 0


def test_a_long_reason_from_a_policy_process_is_refused():
    with pytest.raises(PolicyError, match="malformed action"):
        run_episode(adv.LongReason(True), _episode(), 10240, isolate=True)


def test_read_only_containers_cannot_be_refilled_through_init():
    obs = freeze({"a": [1, 2], "b": 3})
    obs.__init__(b=99)
    obs["a"].__init__([7])
    assert obs == {"a": [1, 2], "b": 3}
