"""NumPy's seeded draws replayed in compiled code (``envs.fast.numpy_streams``) against NumPy itself:
every seed state, integer and float must be equal, and so must the paper generator's structural
draws of an episode."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from wpb_gym.envs.fast.core import CompiledCore  # noqa: F401  (binds numba's cache folder)
from wpb_gym.envs.fast.numpy_streams import (
    _draws_as_numpy,
    entropy_words,
    integers_fill,
    pcg64,
    random_fill,
    seed_state,
    structure_draws,
    words,
)
from wpb_gym.episodes.generators import paper
from wpb_gym.episodes.generators.paper import PAPER_REGIMES, make_config

_INTS = st.one_of(st.integers(0, 3), st.integers(0, 2**32 + 1), st.integers(0, 2**64 + 5), st.integers(0, 2**130))


@settings(max_examples=300, deadline=None)
@given(entropy=st.lists(_INTS, min_size=1, max_size=4).map(tuple),
       spawn_key=st.lists(_INTS, min_size=1, max_size=3).map(tuple))
@example(entropy=(0,), spawn_key=(0,))
@example(entropy=(0, 0, 0, 0, 0), spawn_key=(2**32 - 1,))  # past the pool: mixed in after it
def test_the_seed_state_is_numpys(entropy, spawn_key):
    expected = np.random.SeedSequence(list(entropy), spawn_key=spawn_key).generate_state(4, np.uint64)
    assert np.array_equal(seed_state(entropy_words(entropy, spawn_key)), expected)


@settings(max_examples=300, deadline=None)
@given(seed=_INTS, index=_INTS,
       calls=st.lists(st.tuples(st.sampled_from(["random", "integers"]), st.integers(0, 40),
                                st.integers(-5, 10), st.sampled_from([1, 2, 3, 7, 400, 2**31, 2**32 - 1, 2**32,
                                                 # NumPy rejects and redraws about half, a quarter of these draws
                                                 2**31 + 1, 3 * 2**30])),
                      max_size=6))
@example(seed=0, index=0, calls=[("integers", 3, 0, 5), ("random", 1, 0, 1), ("integers", 3, 0, 5)])
def test_draws_in_any_order_are_numpys(seed, index, calls):
    """Calls interleaved as a generator would make them: 32-bit draws keep the other half of a
    64-bit output for the next one, across calls and around float draws; ranges up to 2**32."""
    sequence = np.random.SeedSequence([seed, 7], spawn_key=(index,))
    numpy_rng = np.random.default_rng(sequence)
    state = pcg64(seed_state(entropy_words((seed, 7), (index,))))
    for kind, size, low, span in calls:
        if kind == "random":
            got = np.empty((size % 7, size // 7), dtype=np.float64)
            random_fill(state, got)
            assert np.array_equal(got, numpy_rng.random(got.shape))
        else:
            got = np.empty(size, dtype=np.int64)
            integers_fill(state, low, low + span, got)
            assert np.array_equal(got, numpy_rng.integers(low, low + span, size=size))


@settings(max_examples=120, deadline=None)
@given(regime=st.sampled_from(PAPER_REGIMES), seed=_INTS, index=st.integers(0, 2**70),
       length=st.integers(1, 300), api_pool=st.integers(1, 500), params=st.tuples(st.integers(1, 12),
                                                                                  st.integers(1, 12)))
def test_an_episodes_structure_draws_are_the_generators(regime, seed, index, length, api_pool, params):
    config = make_config(regime, length=length, api_pool=api_pool, min_params=min(params), max_params=max(params))
    for got, want in zip(structure_draws(config, seed, index), paper.structure_draws(config, seed, index),
                         strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_a_negative_seed_or_index_is_refused_with_numpys_error():
    config = make_config("default", length=5)
    for seed, index in ((-1, 0), (0, -1)):
        with pytest.raises(ValueError, match="expected non-negative integer"):
            structure_draws(config, seed, index)
    assert words(0) == [0] and words(2**32 + 5) == [5, 1]
    with pytest.raises(ValueError, match="non-negative"):
        words(-1)


def test_it_leaves_the_draws_to_numpy_when_it_would_draw_otherwise(monkeypatch):
    """Checked once per process against the installed NumPy (which may change its algorithms)."""
    assert _draws_as_numpy()
    config = make_config("default", length=5)
    monkeypatch.setattr("wpb_gym.envs.fast.numpy_streams._draws_as_numpy", lambda: False)
    monkeypatch.setattr("wpb_gym.envs.fast.numpy_streams.paper_structure", None)  # would fail if called
    for got, want in zip(structure_draws(config, 3, 4), paper.structure_draws(config, 3, 4), strict=True):
        assert np.array_equal(got, want)


def test_a_range_it_does_not_draw_is_refused():
    state = pcg64(seed_state(entropy_words((1,), (2,))))
    for low, high in ((3, 3), (3, 2), (0, 2**32 + 1)):
        with pytest.raises(ValueError, match="ranges of 1 to 2"):
            integers_fill(state, low, high, np.empty(2, dtype=np.int64))
