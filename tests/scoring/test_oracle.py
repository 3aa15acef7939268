"""The oracle against brute force: U*(B), the prefix curve U*(B, t), the optimal set, the F1 bound."""

import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wpb_gym import (
    episode_costs,
    episode_oracle,
    generate_episode,
    hindsight_f1_bound,
    make_config,
    oracle_curve,
    oracle_utility,
    oracle_write_set,
    policy_episode,
)
from wpb_gym.core.types import MAX_UTILITY


def brute_force(costs, utilities, budget):
    best = 0.0
    n = len(costs)
    for mask in range(1 << n):
        chosen = [i for i in range(n) if mask >> i & 1]
        if sum(costs[i] for i in chosen) <= budget:
            best = max(best, math.fsum(utilities[i] for i in chosen))
    return best


def brute_force_f1(costs, critical, budget):
    relevant = set(critical)
    best = 0.0
    for mask in range(1 << len(costs)):
        chosen = {i for i in range(len(costs)) if mask >> i & 1}
        if not chosen or sum(costs[i] for i in chosen) > budget or not relevant:
            continue
        tp = len(chosen & relevant)
        if tp:
            p, r = tp / len(chosen), tp / len(relevant)
            best = max(best, 2 * p * r / (p + r))
    return best


@st.composite
def instances(draw, unit_utilities):
    n = draw(st.integers(1, 9))
    costs = draw(st.lists(st.integers(0, 80), min_size=n, max_size=n))
    if unit_utilities:
        values = st.sampled_from([0.0, 0.5, 1.0, 5.0, 6.0, 1 / 3, 2.25, 0.1, 0.2, 0.3, 0.7, 0.001])
    else:
        values = st.floats(0, 10, allow_nan=False, allow_infinity=False)
    utilities = draw(st.lists(values, min_size=n, max_size=n))
    budgets = draw(
        st.lists(st.one_of(st.integers(0, 400), st.integers(10**9, 2**70)), min_size=1, max_size=3, unique=True)
    )
    return costs, utilities, budgets


@pytest.mark.parametrize("method", ["auto", "utility", "bytes"])
@given(case=instances(unit_utilities=True))
def test_curve_and_set_equal_brute_force_with_unit_utilities(method, case):
    check_against_brute_force(*case, method=method)


@pytest.mark.parametrize("method", ["auto", "bytes"])
@given(case=instances(unit_utilities=False))
def test_curve_and_set_equal_brute_force_with_arbitrary_utilities(method, case):
    check_against_brute_force(*case, method=method)


def check_against_brute_force(costs, utilities, budgets, method):
    curve = oracle_curve(costs, utilities, budgets, method=method)
    assert curve.prefix.shape == (len(budgets), len(costs))
    for j, budget in enumerate(budgets):
        for t in range(len(costs)):
            assert curve.prefix[j, t] == pytest.approx(
                brute_force(costs[: t + 1], utilities[: t + 1], budget), abs=1e-9
            )
        assert curve.final[j] == curve.prefix[j, -1] == pytest.approx(curve.at(budget))
        chosen = oracle_write_set(costs, utilities, budget, method=method)
        assert list(chosen) == sorted(set(chosen))
        assert sum(costs[i] for i in chosen) <= budget
        assert math.fsum(utilities[i] for i in chosen) == pytest.approx(curve.final[j], abs=1e-9)


def test_utility_method_refuses_utilities_without_a_common_unit():
    with pytest.raises(ValueError, match="common unit"):
        oracle_curve([10, 20], [0.1234567891, math.pi], [30], method="utility")
    with pytest.raises(ValueError, match="method"):
        oracle_curve([10], [1.0], [30], method="greedy")


def test_exact_where_density_greedy_fails():
    # Greedy by utility/byte takes the 6-byte item first and then nothing else fits.
    costs, utilities = [6, 5, 5], [7.0, 5.0, 5.0]
    assert oracle_utility(costs, utilities, 10) == 10.0
    assert oracle_write_set(costs, utilities, 10) == (1, 2)


def test_prefix_curve_is_monotone_and_ends_at_the_final_value():
    episode = generate_episode(make_config("burst_drift", length=300), seed=4, index=0)
    costs = episode_costs(policy_episode(episode, "privileged"))
    budgets = [1024, 10240, 102400]
    curve = oracle_curve(costs, episode.utilities, budgets)
    assert (np.diff(curve.prefix, axis=1) >= 0).all()  # more steps never hurt
    assert (np.diff(curve.final) >= 0).all()  # more budget never hurts
    # With 100 KB every step fits: U* is the total utility.
    assert curve.at(102400) == pytest.approx(episode.utilities.sum())


def test_both_dps_agree_on_a_realistic_episode():
    episode = generate_episode(make_config("redundancy", length=400), seed=1, index=2)
    costs = episode_costs(policy_episode(episode, "unprivileged"))
    budgets = [512, 1024, 4096, 10240]
    by_utility = oracle_curve(costs, episode.utilities, budgets, method="utility")
    by_bytes = oracle_curve(costs, episode.utilities, budgets, method="bytes")
    np.testing.assert_allclose(by_utility.prefix, by_bytes.prefix, atol=1e-9)
    chosen = oracle_write_set(costs, episode.utilities, 4096)
    assert costs[list(chosen)].sum() <= 4096
    assert episode.utilities[list(chosen)].sum() == pytest.approx(by_bytes.at(4096))


@given(
    costs=st.lists(st.integers(1, 60), min_size=1, max_size=9),
    data=st.data(),
    budget=st.integers(0, 300),
)
def test_f1_bound_is_the_best_f1_of_any_write_set(costs, data, budget):
    critical = data.draw(st.lists(st.integers(0, len(costs) - 1), unique=True, max_size=len(costs)))
    bound = hindsight_f1_bound(costs, critical, budget)
    assert bound.f1 == pytest.approx(brute_force_f1(costs, critical, budget))
    assert bound.relevant == len(critical)
    cheapest = sorted(costs[t] for t in critical)
    assert sum(cheapest[: bound.kept]) <= budget
    if bound.kept < len(critical):
        assert sum(cheapest[: bound.kept + 1]) > budget


def test_f1_bound_conventions():
    assert hindsight_f1_bound([10, 10], [], 100).f1 == 0.0  # no relevant steps
    assert hindsight_f1_bound([10, 10], [0, 1], 5).f1 == 0.0  # nothing fits
    bound = hindsight_f1_bound([10, 10, 30], [0, 2], 20)
    assert (bound.kept, bound.recall, bound.precision, bound.f1) == (1, 0.5, 1.0, pytest.approx(2 / 3))


def test_episode_oracle_uses_the_tracks_costs():
    episode = generate_episode(make_config("default", length=60), seed=0, index=0)
    unpriv = episode_oracle(episode, [1024, 2048], "unprivileged")
    priv = episode_oracle(episode, [1024, 2048], "privileged")
    # Privileged steps carry a priority field, so each costs more and fewer fit.
    assert (priv.costs > unpriv.costs).all()
    assert unpriv.utility(1024) >= priv.utility(1024)
    assert unpriv.utility(2048) == pytest.approx(brute_force_small_grouped(unpriv.costs, episode.utilities, 2048))
    assert set(unpriv.f1_bounds) == {1024, 2048}


def brute_force_small_grouped(costs, utilities, budget):
    # Exact knapsack by a plain byte-indexed DP written in Python (independent of the module).
    best = [0.0] * (budget + 1)
    for w, u in zip(costs.tolist(), utilities.tolist(), strict=False):
        for c in range(budget, w - 1, -1):
            best[c] = max(best[c], best[c - w] + u)
    return best[budget]


def test_input_validation():
    with pytest.raises(ValueError, match="differ in length"):
        oracle_curve([1, 2], [1.0], [10])
    with pytest.raises(ValueError, match="non-negative"):
        oracle_curve([1, -2], [1.0, 1.0], [10])
    with pytest.raises(ValueError, match="finite"):
        oracle_curve([1, 2], [1.0, float("nan")], [10])
    with pytest.raises(ValueError, match="budgets"):
        oracle_curve([1], [1.0], [])


def test_all_items_heavier_than_budget_or_worthless():
    assert oracle_utility([500, 600], [5.0, 6.0], 100) == 0.0
    assert oracle_write_set([500, 600], [5.0, 6.0], 100) == ()
    assert oracle_utility([10, 20], [0.0, 0.0], 100) == 0.0
    assert list(itertools.chain(oracle_curve([10], [0.0], [5, 50]).final)) == [0.0, 0.0]


def test_track_views_and_costs_are_built_once_per_episode():
    from wpb_gym import track_costs

    episode = generate_episode(make_config("default", length=40), seed=0, index=0)
    assert policy_episode(episode, "unprivileged") is policy_episode(episode, "unprivileged")
    costs = track_costs(episode, "privileged")
    assert costs is track_costs(episode, "privileged") and not costs.flags.writeable
    assert costs.tolist() == episode_costs(policy_episode(episode, "privileged")).tolist()
    assert (track_costs(episode, "unprivileged") < costs).all()


# --------------------------------------------------------------------------- the utility limit
# Utilities around 9e18 used to wrap around in the int64 units of the utility-indexed methods:
# oracle_utility gave 1.0 (or -9.2e18) instead of 9.3e18, oracle_curve a numpy error.


def exact_brute_force(costs, utilities, budget):
    """U*(budget) in exact rational arithmetic over the floats given."""
    best = Fraction(0)
    for mask in range(1 << len(costs)):
        chosen = [i for i in range(len(costs)) if mask >> i & 1]
        if sum(costs[i] for i in chosen) <= budget:
            best = max(best, sum((Fraction(utilities[i]) for i in chosen), Fraction(0)))
    return best


def _oracle_calls(costs, utilities, budget):
    episode = _episode_with(costs, utilities)
    return {
        "oracle_utility": lambda: oracle_utility(costs, utilities, budget),
        "oracle_curve": lambda: oracle_curve(costs, utilities, [budget]).at(budget),
        "oracle_write_set": lambda: oracle_write_set(costs, utilities, budget),
        "episode_oracle": lambda: episode_oracle(episode, [budget], "unprivileged").utility(budget),
    }


def _episode_with(costs, utilities):
    from wpb_gym import Episode, Step

    steps = [Step(t, {"api": f"e{t}", "pad": "x" * c}) for t, c in enumerate(costs)]
    return Episode(steps, {"critical_steps": [], "utility_by_step": dict(enumerate(utilities))})


@pytest.mark.parametrize("big", [9.3e18, 2.0**63, 1e300, float(np.nextafter(MAX_UTILITY, math.inf))])
@pytest.mark.parametrize("call", ["oracle_utility", "oracle_curve", "oracle_write_set", "episode_oracle"])
def test_oracle_integer_overflow_is_a_named_error_beyond_the_limit(big, call):
    with pytest.raises(ValueError) as excinfo:
        _oracle_calls([100, 100, 100], [1.0, big, 0.5], 1000)[call]()
    message = str(excinfo.value)
    assert "step 1" in message and repr(big) in message and f"{MAX_UTILITY:g}" in message


AT_THE_LIMIT = [
    [MAX_UTILITY, 1.0],
    [MAX_UTILITY, 0.5, 0.0001],  # a unit of 1/10,000: 1e16 units, past what int64 counts exactly
    [MAX_UTILITY, MAX_UTILITY - 0.5, 1 / 3, 0.25],
    [999_999_999_999.9999, 0.5, 2.25],
    [MAX_UTILITY] * 7 + [0.5],
    [4e11, 3e11, 3e11, 1e12, 0.7],
]


@pytest.mark.parametrize("utilities", AT_THE_LIMIT)
@pytest.mark.parametrize("budget", [0, 150, 250, 420, 10_000])
def test_oracle_is_exact_at_the_utility_limit(utilities, budget):
    costs = [(37 * i) % 90 + 60 for i in range(len(utilities))]
    expected = exact_brute_force(costs, utilities, budget)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow or invalid cast on the way
        for method in ("auto", "bytes"):
            value = oracle_curve(costs, utilities, [budget], method=method).at(budget)
            assert math.isclose(value, expected, rel_tol=1e-15, abs_tol=1e-12), (method, value, float(expected))
            chosen = oracle_write_set(costs, utilities, budget, method=method)
            assert sum(costs[i] for i in chosen) <= budget
            assert math.isclose(math.fsum(utilities[i] for i in chosen), expected, rel_tol=1e-15, abs_tol=1e-12)
        assert math.isclose(oracle_utility(costs, utilities, budget), expected, rel_tol=1e-15, abs_tol=1e-12)


def test_many_steps_at_the_limit_do_not_overflow_the_unit_count():
    """1,000 steps at the limit in units of 1/10,000 hold 1e19 units, past int64 (a numpy error before)."""
    costs, utilities = [1] * 1001, [MAX_UTILITY] * 1000 + [0.0001]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for budget in (500, 1000):
            assert oracle_utility(costs, utilities, budget) == budget * MAX_UTILITY
            assert oracle_curve(costs, utilities, [budget]).at(budget) == budget * MAX_UTILITY
            assert len(oracle_write_set(costs, utilities, budget)) == budget


def test_unit_methods_hand_over_before_their_units_overflow():
    from wpb_gym.scoring.oracle import _MAX_UNITS, utility_unit_scale

    assert utility_unit_scale(np.array([1.0, 0.5])) == 2
    assert utility_unit_scale(np.array([MAX_UTILITY, 0.5])) == 2  # 2e12 units: counted exactly
    assert utility_unit_scale(np.array([MAX_UTILITY, 0.0001])) is None  # 1e16 units: too many
    assert _MAX_UNITS < 2**53 < np.iinfo(np.int64).max
    with pytest.raises(ValueError, match="at most"):
        oracle_curve([10, 10], [MAX_UTILITY, 0.0001], [30], method="utility")


def test_the_loaders_limit_is_within_the_oracles(tmp_path):
    """A file the loader accepts can never reach the oracle's limit."""
    from wpb_gym import load_jsonl, write_jsonl
    from wpb_gym.episodes.jsonl import EpisodeFormatError

    episode = generate_episode(make_config("default", length=12), seed=0, index=0)
    episode.labels["utility_by_step"] = {t: MAX_UTILITY for t in range(12)}
    write_jsonl(tmp_path / "at.jsonl", [episode])
    (loaded,) = load_jsonl(tmp_path / "at.jsonl")
    assert episode_oracle(loaded, [10**9], "unprivileged").utility(10**9) == 12 * MAX_UTILITY
    episode.labels["utility_by_step"][3] = float(np.nextafter(MAX_UTILITY, math.inf))
    write_jsonl(tmp_path / "beyond.jsonl", [episode])
    with pytest.raises(EpisodeFormatError, match="at most"):
        load_jsonl(tmp_path / "beyond.jsonl")
