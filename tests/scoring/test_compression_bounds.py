"""The hindsight bounds with compression, against brute force over every choice on small episodes."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym.core.compression import compressed_cost
from wpb_gym.core.tracks import policy_episode, track_costs
from wpb_gym.episodes.generators.paper import make_config
from wpb_gym.episodes.sources import GeneratedEpisodes
from wpb_gym.scoring import compression_bounds
from wpb_gym.scoring.compression_bounds import (
    compressed_costs,
    compression_f1_bound,
    compression_oracle_utility,
    compression_oracle_write_set,
)
from wpb_gym.scoring.oracle import hindsight_f1_bound, oracle_utility, oracle_write_set


@functools.lru_cache(maxsize=None)
def _choices(n):
    """Every choice of n steps: 0 skip, 1 plain, 2 compressed (one row each)."""
    return np.array(list(itertools.product((0, 1, 2), repeat=n)), dtype=np.int64).reshape(3**n, n)


def brute_force(costs, compressed, utilities, critical, budget, credit):
    """The best utility and the best F1 of any choice of plain, compressed or no write per step."""
    choices = _choices(len(costs))
    plain, small = choices == 1, choices == 2
    w, c = np.asarray(costs, dtype=np.int64), np.asarray(compressed, dtype=np.int64)
    allowed = ~(small & (c < 0)).any(axis=1)
    fits = allowed & (plain @ w + small @ np.maximum(c, 0) <= budget)
    u = np.asarray(utilities, dtype=np.float64)
    utility = plain @ u + credit * (small @ u)
    crit = sorted(critical)
    kept = (plain | small).sum(axis=1)
    hits = plain[:, crit].sum(axis=1) + credit * small[:, crit].sum(axis=1)
    f1 = np.where(kept > 0, 2 * hits / np.maximum(kept + len(crit), 1), 0.0)
    return float(utility[fits].max()), float(f1[fits].max())


def worth(choice, compressed, utilities, budget, costs, credit):
    """The utility of a (plain, compressed) choice, after checking that it fits."""
    plain, small = choice
    assert plain == sorted(plain) and small == sorted(small) and not set(plain) & set(small)
    assert all(compressed[t] >= 0 for t in small)
    assert sum(costs[t] for t in plain) + sum(compressed[t] for t in small) <= budget
    return math.fsum([utilities[t] for t in plain] + [credit * utilities[t] for t in small])


# 0.3 and 1/3: their products with the utilities are not exact floats (0.3 * 1.5), the units still are.
_CREDITS = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 0.3, 1 / 3])
_CASES = dict(costs=st.lists(st.integers(0, 3000), max_size=8), data=st.data(), budget=st.integers(0, 9000),
              credit=_CREDITS)


def _draw(data, n, values=(0.0, 0.25, 0.5, 1.0, 1.5, 3.0)):
    # Compressed costs independent of the plain ones: cheaper, dearer, zero or refused.
    compressed = data.draw(st.lists(st.one_of(st.just(-1), st.integers(0, 3000)), min_size=n, max_size=n))
    utilities = data.draw(st.lists(st.sampled_from(values), min_size=n, max_size=n))
    critical = set(data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=n))) if n else set()
    return compressed, utilities, critical


def _f1_is_consistent(bound, relevant):
    """precision, recall and F1 describe one choice of ``bound.kept`` items."""
    assert bound.relevant == relevant
    if bound.kept == 0:
        assert (bound.f1, bound.recall, bound.precision) == (0.0, 0.0, 0.0)
        return
    hits = bound.recall * relevant
    assert abs(bound.precision * bound.kept - hits) < 1e-9
    assert abs(bound.f1 - 2 * hits / (bound.kept + relevant)) < 1e-9


@settings(max_examples=200, deadline=None)
@given(**_CASES)
def test_the_bounds_and_the_oracle_choice_equal_brute_force(costs, data, budget, credit):
    compressed, utilities, critical = _draw(data, len(costs))
    best_utility, best_f1 = brute_force(costs, compressed, utilities, critical, budget, credit)
    bound = compression_oracle_utility(costs, compressed, utilities, budget, credit)
    assert bound.exact and abs(bound.utility - best_utility) < 1e-9
    f1 = compression_f1_bound(costs, compressed, critical, budget, credit)
    assert abs(f1.f1 - best_f1) < 1e-12
    _f1_is_consistent(f1, len(critical))
    choice = compression_oracle_write_set(costs, compressed, utilities, budget, credit)
    assert abs(worth(choice, compressed, utilities, budget, costs, credit) - best_utility) < 1e-9


@settings(max_examples=100, deadline=None)
@given(**_CASES)
def test_without_a_common_unit_the_byte_programme_is_exact(costs, data, budget, credit):
    # 1/7 and 2/9973 share no unit with a small denominator: the DP over bytes answers.
    compressed, utilities, _ = _draw(data, len(costs), values=(0.0, 1 / 7, 0.123456789, 2 / 9973))
    best_utility, _ = brute_force(costs, compressed, utilities, set(), budget, credit)
    bound = compression_oracle_utility(costs, compressed, utilities, budget, credit)
    assert bound.exact and abs(bound.utility - best_utility) < 1e-9
    choice = compression_oracle_write_set(costs, compressed, utilities, budget, credit)
    assert abs(worth(choice, compressed, utilities, budget, costs, credit) - best_utility) < 1e-9


@settings(max_examples=100, deadline=None)
@given(**_CASES, weird=st.booleans())
def test_beyond_the_cell_limit_the_answer_bounds_from_above_and_the_choice_fits(costs, data, budget, credit, weird):
    values = (0.0, 1 / 7, 0.123456789, 2 / 9973) if weird else (0.0, 0.25, 0.5, 1.0, 1.5, 3.0)
    compressed, utilities, _ = _draw(data, len(costs), values=values)
    best_utility, _ = brute_force(costs, compressed, utilities, set(), budget, credit)
    # No programme fits: every answer that compression could change takes the upper-bound path.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compression_bounds, "_MAX_CELLS", 0)
        bound = compression_oracle_utility(costs, compressed, utilities, budget, credit)
        choice = compression_oracle_write_set(costs, compressed, utilities, budget, credit)
    assert bound.utility >= best_utility - 1e-9
    assert worth(choice, compressed, utilities, budget, costs, credit) <= best_utility + 1e-9


def test_beyond_the_cell_limit_the_answer_says_it_is_not_exact(monkeypatch):
    monkeypatch.setattr(compression_bounds, "_MAX_CELLS", 0)
    bound = compression_oracle_utility([10, 10, 10], [4, 4, 4], [4.0, 3.0, 1.0], 18, 0.5)
    # At the cheaper cost with full utility all three fit (12 bytes, 8.0). The LP over the six
    # writes by utility per byte: step 0 compressed (2.0 for 4) and plain (4.0 for 10), then 4
    # bytes of step 1 compressed (1.5): 7.5, the lesser, above U* = 6.0.
    assert not bound.exact and bound.utility == 7.5
    # The plain oracle's step 0, then the others compressed while they fit: here the optimum.
    assert compression_oracle_write_set([10, 10, 10], [4, 4, 4], [4.0, 3.0, 1.0], 18, 0.5) == ([0], [1, 2])


@settings(max_examples=100, deadline=None)
@given(**_CASES)
def test_without_compression_the_bounds_are_the_plain_oracles(costs, data, budget, credit):
    n = len(costs)
    compressed, utilities, critical = _draw(data, n)
    refused = [-1] * n
    assert compression_f1_bound(costs, refused, critical, budget, credit) == \
        hindsight_f1_bound(costs, critical, budget)
    assert compression_oracle_utility(costs, refused, utilities, budget, credit).utility == \
        oracle_utility(costs, utilities, budget)
    assert compression_oracle_write_set(costs, refused, utilities, budget, credit) == \
        (list(oracle_write_set(costs, utilities, budget)), [])
    # A compressed item that earns nothing only lowers precision, and adds no utility.
    assert compression_f1_bound(costs, compressed, critical, budget, 0.0) == \
        hindsight_f1_bound(costs, critical, budget)
    assert compression_oracle_utility(costs, compressed, utilities, budget, 0.0).utility == \
        oracle_utility(costs, utilities, budget)
    # At full credit a step costs the cheaper of its two writes.
    cheaper = [min(w, c) if c >= 0 else w for w, c in zip(costs, compressed, strict=True)]
    assert compression_f1_bound(costs, compressed, critical, budget, 1.0) == \
        hindsight_f1_bound(cheaper, critical, budget)


def test_mixing_plain_and_compressed_writes_beats_either_alone():
    costs, compressed, utilities = [10, 10, 10], [4, 4, 4], [4.0, 3.0, 1.0]
    # 18 bytes: plain alone keeps one step (4.0), compressed alone all three (4.0); the best
    # writes the most useful step plain and the two others compressed: 4 + 1.5 + 0.5.
    assert compression_oracle_utility(costs, compressed, utilities, 18, 0.5).utility == 6.0
    assert compression_oracle_write_set(costs, compressed, utilities, 18, 0.5) == ([0], [1, 2])
    assert oracle_utility(costs, utilities, 18) == 4.0
    # F1: one plain and two compressed critical steps, 2 hits of 3 items: 4/6; plain alone 2/4,
    # compressed alone 3/6.
    bound = compression_f1_bound(costs, compressed, [0, 1, 2], 18, 0.5)
    assert (bound.kept, bound.relevant) == (3, 3)
    assert bound.f1 == pytest.approx(2 / 3) and bound.precision == pytest.approx(2 / 3)
    assert bound.recall == pytest.approx(2 / 3)


def test_the_step_compression_saves_least_on_is_the_one_written_plain():
    # Compressed costs do not follow the plain ones: writing step 1 compressed (1 byte) and
    # step 0 plain (5) fits 10 bytes; the other way round (9 + 4) does not.
    bound = compression_f1_bound([5, 9], [4, 1], [0, 1], 10, 0.5)
    assert (bound.kept, bound.f1, bound.precision, bound.recall) == (2, 0.75, 0.75, 0.75)
    assert compression_oracle_write_set([5, 9], [4, 1], [1.0, 1.0], 10, 0.5) == ([0], [1])


def test_of_equally_good_choices_the_bound_keeps_the_fewest_items():
    # 11 bytes: one plain and one compressed (1.5 hits of 2 items) or four compressed (2 of 4):
    # F1 is 3/6 = 4/8 either way.
    bound = compression_f1_bound([10, 10, 10, 10], [1, 1, 1, 1], [0, 1, 2, 3], 11, 0.5)
    assert (bound.f1, bound.kept, bound.precision, bound.recall) == (0.5, 2, 0.75, 0.375)


def test_a_step_the_codec_refuses_can_only_be_written_plain():
    costs, utilities = [10, 10], [1.0, 1.0]
    # 8 bytes fit both compressed writes (1.0), or only step 1's when step 0 is refused (0.5).
    assert compression_oracle_utility(costs, [4, 4], utilities, 8, 0.5).utility == 1.0
    assert compression_oracle_utility(costs, [-1, 4], utilities, 8, 0.5).utility == 0.5
    assert compression_oracle_write_set(costs, [-1, 4], utilities, 8, 0.5) == ([], [1])
    assert compression_f1_bound(costs, [4, 4], [0, 1], 8, 0.5).f1 == 0.5
    refused = compression_f1_bound(costs, [-1, 4], [0, 1], 8, 0.5)
    assert (refused.kept, refused.f1) == (1, pytest.approx(1 / 3))


def test_no_critical_steps_and_nothing_that_fits():
    assert compression_f1_bound([5, 5], [1, 1], [], 10, 0.5) == hindsight_f1_bound([5, 5], [], 10)
    assert compression_f1_bound([5, 5], [3, 3], [0, 1], 2, 0.5).kept == 0
    assert compression_oracle_utility([], [], [], 10, 0.5).utility == 0.0
    assert compression_oracle_write_set([5], [3], [1.0], 2, 0.5) == ([], [])


def test_an_episodes_compressed_costs_and_its_bounds():
    episode = GeneratedEpisodes(make_config("contract_mix", length=400), 3).episode(0)
    costs = compressed_costs(episode, "unprivileged")
    view = policy_episode(episode, "unprivileged")
    assert costs is compressed_costs(episode, "unprivileged") and not costs.flags.writeable
    assert costs.tolist() == [-1 if compressed_cost(s) is None else compressed_cost(s) for s in view.steps]
    plain = track_costs(episode, "unprivileged")
    assert ((costs <= plain) | (costs == -1)).all() and (costs >= 0).any()
    for budget in (1024, 10240):
        bound = compression_oracle_utility(plain, costs, episode.utilities, budget, 0.5)
        assert bound.exact and bound.utility >= oracle_utility(plain, episode.utilities, budget)
        choice = compression_oracle_write_set(plain, costs, episode.utilities, budget, 0.5)
        assert abs(worth(choice, costs, episode.utilities, budget, plain, 0.5) - bound.utility) < 1e-9
        f1 = compression_f1_bound(plain, costs, episode.critical_steps, budget, 0.5)
        assert f1.f1 >= hindsight_f1_bound(plain, episode.critical_steps, budget).f1
    # Compression pays at 1 KB: its items cost about half.
    assert compression_oracle_utility(plain, costs, episode.utilities, 1024, 0.5).utility > \
        oracle_utility(plain, episode.utilities, 1024)


def test_many_critical_steps_stay_cheap():
    rng = np.random.default_rng(0)
    costs = rng.integers(100, 400, 600)
    compressed = np.where(rng.random(600) < 0.1, -1, rng.integers(50, 200, 600))
    bound = compression_f1_bound(costs, compressed, range(600), 60_000, 0.5)
    assert 0 < bound.kept <= 600 and bound.f1 > hindsight_f1_bound(costs, range(600), 60_000).f1


@pytest.mark.parametrize(("call", "named"), [
    (lambda: compression_f1_bound([1, 2], [1], [0], 5, 0.5), "compressed differ in length"),
    (lambda: compression_oracle_utility([1, 2], [1, 1], [1.0], 5, 0.5), "utilities differ in length"),
    (lambda: compression_oracle_utility([1], [-2], [1.0], 5, 0.5), "compressed costs"),
    (lambda: compression_oracle_utility([-1], [0], [1.0], 5, 0.5), "costs must be non-negative"),
    (lambda: compression_oracle_write_set([1], [1], [1.0], -1, 0.5), "budget"),
    (lambda: compression_f1_bound([1], [1], [0], 2.5, 0.5), "budget"),
    (lambda: compression_f1_bound([1], [1], [0], 5, 1.5), "credit"),
    (lambda: compression_oracle_utility([1], [1], [1.0], 5, float("nan")), "credit"),
    (lambda: compression_oracle_write_set([1], [1], [1.0], 5, True), "credit"),
    (lambda: compression_f1_bound([1, 2], [1, 1], [2], 5, 0.5), "critical_steps"),
    (lambda: compression_oracle_utility([1], [1], [-1.0], 5, 0.5), "utilities"),
])
def test_bad_inputs_are_refused_by_name(call, named):
    with pytest.raises(ValueError, match=named):
        call()
