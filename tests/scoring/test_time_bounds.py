"""The hindsight bounds under a write-time budget, against brute force on small episodes."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym.core.store_limits import StoreLimits
from wpb_gym.core.write_time import WriteTime
from wpb_gym.episodes.generators.paper import make_config
from wpb_gym.episodes.sources import GeneratedEpisodes
from wpb_gym.scoring.limited_bounds import episode_oracle_within
from wpb_gym.scoring.oracle import hindsight_f1_bound, oracle_utility
from wpb_gym.scoring.time_bounds import (
    step_ticks,
    time_f1_bound,
    time_oracle_utility,
    time_oracle_write_set,
)


def brute_force(costs, ticks, utilities, critical, budget, total):
    best_utility, best_kept = 0.0, 0
    for size in range(len(costs) + 1):
        for chosen in itertools.combinations(range(len(costs)), size):
            if sum(costs[t] for t in chosen) > budget or sum(ticks[t] for t in chosen) > total:
                continue
            best_utility = max(best_utility, sum(utilities[t] for t in chosen))
            if all(t in critical for t in chosen):
                best_kept = max(best_kept, len(chosen))
    return best_utility, best_kept


_TIMES = st.builds(WriteTime, st.integers(0, 12), st.integers(0, 3), st.integers(0, 3))


@settings(max_examples=200, deadline=None)
@given(costs=st.lists(st.integers(0, 3000), max_size=8), data=st.data(), budget=st.integers(0, 9000), time=_TIMES)
def test_the_bounds_and_the_oracle_set_equal_brute_force(costs, data, budget, time):
    n = len(costs)
    utilities = data.draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 3.0]), min_size=n, max_size=n))
    critical = set(data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=n))) if n else set()
    ticks = [int(x) for x in step_ticks(np.asarray(costs, dtype=np.int64), time)]
    best_utility, best_kept = brute_force(costs, ticks, utilities, critical, budget, time.total)
    bound = time_oracle_utility(costs, utilities, budget, time)
    assert bound.exact and abs(bound.utility - best_utility) < 1e-9
    assert time_f1_bound(costs, critical, budget, time).kept == best_kept
    chosen = time_oracle_write_set(costs, utilities, budget, time)
    assert sum(costs[t] for t in chosen) <= budget and sum(ticks[t] for t in chosen) <= time.total
    assert abs(sum(utilities[t] for t in chosen) - best_utility) < 1e-9


@settings(max_examples=100, deadline=None)
@given(costs=st.lists(st.integers(0, 3000), max_size=8), data=st.data(), budget=st.integers(0, 9000), time=_TIMES)
def test_without_a_common_unit_the_answer_bounds_from_above_and_the_set_fits(costs, data, budget, time):
    n = len(costs)
    utilities = data.draw(st.lists(st.sampled_from([0.0, 1 / 7, 0.123456789, 2 / 9973]), min_size=n, max_size=n))
    ticks = [int(x) for x in step_ticks(np.asarray(costs, dtype=np.int64), time)]
    best_utility, _ = brute_force(costs, ticks, utilities, set(), budget, time.total)
    assert time_oracle_utility(costs, utilities, budget, time).utility >= best_utility - 1e-9
    chosen = time_oracle_write_set(costs, utilities, budget, time)
    assert sum(costs[t] for t in chosen) <= budget and sum(ticks[t] for t in chosen) <= time.total


def test_with_ample_time_the_bounds_are_the_byte_budgets_and_scarce_time_lowers_them():
    episode = GeneratedEpisodes(make_config("contract_mix", length=200), 3).episode(0)
    ample = episode_oracle_within(episode, [1024, 10240], "unprivileged", StoreLimits(write_time=WriteTime(10_000)))
    scarce = episode_oracle_within(episode, [1024, 10240], "unprivileged",
                                   StoreLimits(write_time=WriteTime(total=8, per_kb=1)))
    for budget in (1024, 10240):
        assert ample.utility(budget) == oracle_utility(ample.costs, episode.utilities, budget)
        assert ample.f1_bounds[budget] == hindsight_f1_bound(ample.costs, episode.critical_steps, budget)
        assert scarce.utility(budget) <= ample.utility(budget)
    assert scarce.utility(10240) < ample.utility(10240)
    assert scarce.f1_bounds[10240].kept < ample.f1_bounds[10240].kept


def test_write_time_that_cannot_bind_leaves_the_byte_bound_and_its_rows_stop_where_the_steps_do():
    # A billion ticks: the programme keeps only as many rows as the useful steps' ticks add up to.
    episode = GeneratedEpisodes(make_config("breaking", length=80), 0).episode(0)
    costs = episode_oracle_within(episode, [1024], "unprivileged", StoreLimits(write_time=WriteTime(10**9))).costs
    bound = time_oracle_utility(costs, episode.utilities, 1024, WriteTime(10**9, per_write=7, per_kb=3))
    assert bound.exact and bound.utility == oracle_utility(costs, episode.utilities, 1024)
