"""The hindsight bounds under hierarchical budgets, against brute force on small episodes."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym.core.kind_budgets import KINDS, KindBudgets, KindShares
from wpb_gym.core.store_limits import StoreLimits
from wpb_gym.episodes.generators.paper import make_config
from wpb_gym.episodes.sources import GeneratedEpisodes
from wpb_gym.scoring.kind_bounds import (
    kind_f1_bound,
    kind_oracle_utility,
    kind_oracle_write_set,
    step_kinds,
)
from wpb_gym.scoring.limited_bounds import episode_oracle_within
from wpb_gym.scoring.oracle import episode_oracle, hindsight_f1_bound, oracle_utility


def brute_force(costs, kinds, utilities, critical, budget, limits):
    """The best utility and the most critical steps of any set within the total and the limits."""
    best_utility, best_kept = 0.0, 0
    n = len(costs)
    for size in range(n + 1):
        for chosen in itertools.combinations(range(n), size):
            if sum(costs[t] for t in chosen) > budget:
                continue
            if any(sum(costs[t] for t in chosen if kinds[t] == k) > limit for k, limit in limits.items()):
                continue
            best_utility = max(best_utility, sum(utilities[t] for t in chosen))
            if all(t in critical for t in chosen):
                best_kept = max(best_kept, len(chosen))
    return best_utility, best_kept


_CASES = dict(
    costs=st.lists(st.integers(0, 40), min_size=0, max_size=8),
    data=st.data(),
    budget=st.integers(0, 150),
    limits=st.dictionaries(st.sampled_from(KINDS), st.integers(0, 90), max_size=4),
)


@settings(max_examples=200, deadline=None)
@given(**_CASES)
def test_the_bounds_equal_brute_force(costs, data, budget, limits):
    n = len(costs)
    kinds = data.draw(st.lists(st.sampled_from(KINDS), min_size=n, max_size=n))
    utilities = data.draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 3.0]), min_size=n, max_size=n))
    critical = set(data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=n))) if n else set()
    best_utility, best_kept = brute_force(costs, kinds, utilities, critical, budget, limits)
    bound = kind_oracle_utility(costs, kinds, utilities, budget, KindBudgets.of(limits))
    assert bound.exact and abs(bound.utility - best_utility) < 1e-9
    f1 = kind_f1_bound(costs, kinds, critical, budget, KindBudgets.of(limits))
    assert f1.kept == best_kept and f1.relevant == len(critical)
    chosen = kind_oracle_write_set(costs, kinds, utilities, budget, KindBudgets.of(limits))
    assert sum(costs[t] for t in chosen) <= budget
    assert all(sum(costs[t] for t in chosen if kinds[t] == k) <= limit for k, limit in limits.items())
    assert abs(sum(utilities[t] for t in chosen) - best_utility) < 1e-9


@settings(max_examples=100, deadline=None)
@given(**_CASES)
def test_without_a_common_unit_the_answer_is_an_upper_bound_and_the_set_is_feasible(costs, data, budget, limits):
    n = len(costs)
    kinds = data.draw(st.lists(st.sampled_from(KINDS), min_size=n, max_size=n))
    # 1/7 and 1/9973 share no unit with a small denominator when both are present.
    utilities = data.draw(st.lists(st.sampled_from([0.0, 1 / 7, 0.123456789, 2 / 9973]), min_size=n, max_size=n))
    best_utility, _ = brute_force(costs, kinds, utilities, set(), budget, limits)
    bound = kind_oracle_utility(costs, kinds, utilities, budget, KindBudgets.of(limits))
    assert bound.utility >= best_utility - 1e-9
    chosen = kind_oracle_write_set(costs, kinds, utilities, budget, KindBudgets.of(limits))
    assert sum(costs[t] for t in chosen) <= budget
    assert all(sum(costs[t] for t in chosen if kinds[t] == k) <= limit for k, limit in limits.items())


def test_without_limits_the_bounds_are_the_total_budgets():
    episode = GeneratedEpisodes(make_config("mixed_sizes", length=200), 3).episode(0)
    oracle = episode_oracle(episode, [1024, 10240], "unprivileged")
    costs = oracle.costs
    for budget in (1024, 10240):
        plain = oracle_utility(costs, episode.utilities, budget)
        assert kind_oracle_utility(costs, step_kinds(episode), episode.utilities, budget, None).utility == plain
        assert kind_f1_bound(costs, step_kinds(episode), episode.critical_steps, budget, None) == \
            hindsight_f1_bound(costs, episode.critical_steps, budget)


def test_an_episode_oracle_with_kind_budgets_respects_each_budgets_limits():
    episode = GeneratedEpisodes(make_config("mixed_sizes", length=200), 3).episode(0)
    shares = KindShares.parse("endpoint=30%,doc=20%")
    oracle = episode_oracle_within(episode, [1024, 10240], "unprivileged", StoreLimits(shares))
    kinds = step_kinds(episode)
    assert set(kinds) == {"endpoint", "doc", "guide"}
    for budget in (1024, 10240):
        limits = shares.resolve(budget)
        chosen = kind_oracle_write_set(oracle.costs, kinds, episode.utilities, budget, limits)
        assert abs(oracle.utility(budget) - float(np.asarray(episode.utilities)[list(chosen)].sum())) < 1e-9
        assert oracle.utility(budget) <= oracle.curve.at(budget)  # the total alone bounds it from above
        assert oracle.f1_bounds[budget].f1 <= hindsight_f1_bound(oracle.costs, episode.critical_steps, budget).f1
    # At 10 KB the limits bind: 3 KB for endpoints, 2 KB for documentation sections of 1-5 KB.
    assert oracle.utility(10240) < oracle.curve.at(10240)
