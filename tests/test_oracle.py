"""The oracle against brute force: U*(B), the prefix curve U*(B, t), the optimal set, the F1 bound."""

import itertools
import math

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
