"""``envs.fast.arenas`` against a literal reference: a dict of each sub-env's own arrays. Whatever
sequence of placements, growths, writes and releases, every sub-env reads back what it holds,
and no two sub-envs' segments overlap."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym.envs.fast.arenas import Arenas
from wpb_gym.envs.fast.core import CompiledCore  # noqa: F401  (binds numba's cache folder)

_N = 5
_operations = st.lists(st.tuples(
    st.sampled_from(["put", "write", "release"]), st.integers(0, _N - 1),
    st.integers(0, 3000), st.integers(0, 3000), st.integers(0, 3000), st.integers(0, 2**31 - 1)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(operations=_operations)
def test_each_sub_env_reads_back_its_own_arrays(operations):
    arenas, held = Arenas(_N), {}
    for operation, i, n_static, n_floats, n_state, seed in operations:
        rng = np.random.default_rng(seed)
        if operation == "put":
            static = rng.integers(-2**31, 2**31, n_static, dtype=np.int32)
            floats = rng.random(n_floats)
            arenas.put(i, static, floats, n_state)
            state = arenas.views(i)[2]
            state[:] = rng.integers(0, 100, n_state, dtype=np.int32)  # as the kernel's start and steps write it
            held[i] = (static.copy(), floats.copy(), state.copy())
        elif operation == "write" and i in held:
            state = arenas.views(i)[2]
            state[:] = rng.integers(0, 100, len(state), dtype=np.int32)
            held[i] = (*held[i][:2], state.copy())
        elif operation == "release":
            arenas.release(i)
            held.pop(i, None)
        for j, arrays in held.items():
            for got, want in zip(arenas.views(j), arrays, strict=True):
                assert got.dtype == want.dtype and np.array_equal(got, want)
        for kind, buffer in enumerate(arenas.buffers):
            spans = sorted((int(arenas.spans[j, 2 * kind]), int(arenas.capacity[j, kind])) for j in held)
            for (at, room), (next_at, _) in zip(spans, spans[1:]):
                assert at + room <= next_at
            assert all(at + room <= len(buffer) for at, room in spans)
            assert all(arenas.spans[j, 2 * kind + 1] <= arenas.capacity[j, kind] for j in held)


def test_a_sub_env_whose_next_arrays_fit_keeps_its_segments():
    arenas = Arenas(2)
    arenas.put(0, np.arange(100, dtype=np.int32), np.ones(50), 80)
    before = arenas.spans[0, ::2].copy()
    arenas.put(0, np.arange(110, dtype=np.int32), np.ones(40), 90)  # within the quarter's headroom
    assert np.array_equal(arenas.spans[0, ::2], before) and arenas.spans[0, 1::2].tolist() == [110, 40, 90]
    arenas.put(0, np.arange(1000, dtype=np.int32), np.ones(40), 90)
    assert arenas.spans[0, 0] != before[0] and arenas.capacity[0, 0] == 1250


def test_a_buffer_that_cannot_grow_leaves_the_sub_env_without_arrays_and_the_others_as_they_were(monkeypatch):
    arenas = Arenas(2)
    arenas.put(0, np.arange(100, dtype=np.int32), np.ones(50), 80)
    arenas.put(1, np.arange(7, dtype=np.int32), np.zeros(3), 5)

    def no_memory(self, kind, room):
        raise MemoryError("no room")

    monkeypatch.setattr(Arenas, "_compact", no_memory)
    with pytest.raises(MemoryError):
        arenas.put(1, np.arange(10_000, dtype=np.int32), np.zeros(3), 5)
    assert arenas.spans[1].tolist() == [0] * 6 and arenas.capacity[1].tolist() == [0] * 3
    static, floats, state = arenas.views(0)
    assert np.array_equal(static, np.arange(100)) and np.array_equal(floats, np.ones(50)) and len(state) == 80
