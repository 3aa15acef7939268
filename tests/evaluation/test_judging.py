"""The two judges of isolated evaluation agree (``wpb_gym.evaluation.isolated.judging``).

An evaluation grid judges a run's reported actions on a ``Ledger`` (timesteps and costs only);
``judge_on_store`` judges them on a ``ByteMemoryStore``, the literal reference. On random
backlogs — WRITEs over budget and twice at one timestep, EXPIREs of missing, current and later
timesteps, SKIPs, several actions at one timestep, timesteps with no action — both must take
the same decision on every action, leave the same memory and the same counts, and so give the
same metrics.
"""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.store import ByteMemoryStore
from wpb_gym.core.tracks import policy_episode
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.evaluation.isolated.judging import judge_on_ledger, judge_on_store
from wpb_gym.evaluation.isolated.wire import ONE_WRITE, decode_action, encode_action
from wpb_gym.evaluation.playing import PlayedRun, Seat
from wpb_gym.evaluation.referee import PolicyError
from wpb_gym.scoring.metrics import compute_metrics

LENGTH = 30


@cache
def episode_and_steps(track: str):
    episode = generate_episode(make_config("contract_mix", length=LENGTH, api_pool=8), seed=11)
    return episode, policy_episode(episode, track).steps


def one_action(t: int):
    claimed = st.booleans()
    return st.one_of(
        st.tuples(st.just(0), claimed).map(list),
        st.tuples(st.just(1), claimed).map(list),
        st.tuples(st.just(1), claimed, st.text(max_size=3)).map(list),
        st.tuples(st.just(3), claimed, st.none(), st.integers(-2, LENGTH + 1)).map(list),
        # an EXPIRE of a recent timestep: the ones most likely to be stored
        st.tuples(st.just(3), claimed, st.none(), st.integers(max(0, t - 4), t)).map(list),
        st.integers(-2, LENGTH + 1),  # the short forms: accepted SKIP (-2), WRITE (-1), EXPIRE (>= 0)
        st.integers(max(0, t - 4), t),
    )


@st.composite
def backlogs(draw):
    backlog = []
    for t in range(LENGTH):
        shape = draw(st.sampled_from(["none", "one_write", "actions", "actions", "both"]))
        if shape in ("actions", "both"):
            backlog.append((t, draw(st.lists(one_action(t), min_size=1, max_size=3))))
        if shape in ("one_write", "both"):  # (never after actions in a reply: a judge must not care)
            backlog.append((t, None))
    return backlog


def on_store(backlog, steps, budget, record=False):
    run = PlayedRun(Seat(None, budget), "p", ByteMemoryStore(budget))
    judge_on_store(run, backlog, steps, record)
    return run


def agreeing(backlog, run, keep_one_writes=False):
    """``backlog`` with every claim set to the store's decision (``run``'s action log); a
    ``wire.ONE_WRITE`` (which claims acceptance) kept as it is if ``keep_one_writes``."""
    decisions = iter(logged.decision.accepted for logged in run.actions)
    out = []
    for t, taken in backlog:
        if taken is None:
            accepted = next(decisions)
            out.append((t, None) if accepted or keep_one_writes else (t, [[1, False]]))
        else:
            out.append((t, [claiming(raw, next(decisions)) for raw in taken]))
    return out


def claiming(raw, accepted):
    """The wire action ``raw`` with its claim replaced."""
    if type(raw) is int:
        return encode_action(decode_action(raw)[0], accepted)
    return [raw[0], accepted, *raw[2:]]


@settings(max_examples=150, deadline=None)
@given(backlogs(), st.sampled_from([0, 40, 300, 1000, 3000, 100_000]), st.sampled_from(["unprivileged", "privileged"]))
def test_the_ledger_judges_every_action_as_the_store_does(backlog, budget, track):
    episode, steps = episode_and_steps(track)
    costs = [estimate_bytes(step) for step in steps]
    reference = on_store(backlog, steps, budget, record=True)
    honest = agreeing(backlog, reference)

    # Claims equal to the store's decisions: neither judge sees a divergence, so the ledger
    # took the store's decision on every action.
    ledger, diverged_at = judge_on_ledger(honest, costs, budget, "p")
    assert diverged_at is None and on_store(honest, steps, budget).diverged_at is None
    store = reference.store
    assert ledger.timesteps() == store.timesteps()
    assert ledger.retained_timesteps() == store.retained_timesteps()
    assert len(ledger) == len(store)
    assert ledger.bytes_used == store.bytes_used <= budget
    assert ledger.max_bytes == store.max_bytes
    assert ledger.accepted_counts == store.accepted_counts
    assert ledger.rejected_counts == store.rejected_counts
    oracle = 1.0
    assert compute_metrics(episode, ledger, oracle_utility=oracle) == compute_metrics(
        episode, store, oracle_utility=oracle
    )

    # The claims as drawn: both judges report the first timestep at which they are wrong, and
    # leave the same memory (the claims change no decision).
    for claims in (backlog, agreeing(backlog, reference, keep_one_writes=True)):
        ledger, diverged_at = judge_on_ledger(claims, costs, budget, "p")
        run = on_store(claims, steps, budget)
        assert diverged_at == run.diverged_at
        assert (ledger.timesteps(), ledger.bytes_used) == (run.store.timesteps(), run.store.bytes_used)
        assert (ledger.accepted_counts, ledger.rejected_counts) == (store.accepted_counts, store.rejected_counts)


@given(backlogs(), st.integers(0, LENGTH - 1))
@settings(max_examples=50, deadline=None)
def test_one_wrong_claim_is_found_at_its_timestep(backlog, pick):
    _, steps = episode_and_steps("unprivileged")
    costs = [estimate_bytes(step) for step in steps]
    honest = agreeing(backlog, on_store(backlog, steps, 1000, record=True))
    later = [i for i, (t, _) in enumerate(honest) if t >= pick]
    if not later:
        return
    t, taken = honest[later[0]]
    first, *rest = ONE_WRITE if taken is None else taken
    honest[later[0]] = (t, [claiming(first, not decode_action(first)[1]), *rest])
    assert judge_on_ledger(honest, costs, 1000, "p")[1] == t == on_store(honest, steps, 1000).diverged_at


def test_a_run_that_merges_goes_to_the_store():
    _, steps = episode_and_steps("unprivileged")
    costs = [estimate_bytes(step) for step in steps]
    backlog = [(0, None), (1, [[2, True, None, 0, None, False]])]
    assert judge_on_ledger(backlog, costs, 10_000, "p") is None


@pytest.mark.parametrize("raw", [[9, True], [1, "yes"], [3, True, None, "0"], "WRITE", [1], -3, True])
def test_a_malformed_action_is_a_policy_error_on_both(raw):
    _, steps = episode_and_steps("unprivileged")
    costs = [estimate_bytes(step) for step in steps]
    backlog = [(0, None), (1, [raw])]
    with pytest.raises(PolicyError, match="malformed action"):
        judge_on_ledger(backlog, costs, 10_000, "p")
    with pytest.raises(PolicyError, match="malformed action"):
        on_store(backlog, steps, 10_000)
