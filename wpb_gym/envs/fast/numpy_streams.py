"""NumPy's ``default_rng(SeedSequence(...))`` draws, in compiled code: what ``paper.paper_draws``
draws for an episode, bit for bit, without the Python calls around them.

Starting one episode's generator (``SeedSequence``, ``PCG64``) and making its three draws
through NumPy's Python interface costs several times the arithmetic itself, and a vector env
at T = 200 starts an episode every few hundred env-steps. The pieces, as NumPy defines them:

* ``SeedSequence(entropy, spawn_key)``: the entropy and spawn key as 32-bit words, mixed into a
  pool of four words by multiply-xorshift hashes; ``generate_state(4, uint64)`` hashes the pool
  out again;
* ``PCG64``: a 128-bit linear congruential state (seeded from those four words), each output
  the xor of its halves rotated (XSL-RR); a 32-bit draw is the low half of a 64-bit output, its
  high half kept for the next 32-bit draw;
* ``random()``: the top 53 bits of an output over 2**53; ``integers(low, high)`` (a range of at
  most 2**32): Lemire's multiply-and-reject on 32-bit draws.

NumPy may change its generators' algorithms between versions (NEP 19): ``structure_draws``
checks once per process that it draws what NumPy draws, and leaves the draws to NumPy if not.

``structure_draws`` makes ``paper.structure_draws``'s three draws with them.
``tests/envs/test_numpy_streams.py`` compares every draw with NumPy's over random seeds, spawn
keys, sizes and ranges, and ``structure_draws`` with ``paper.structure_draws`` over generator settings.
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from types import SimpleNamespace
from typing import Any

import numpy as np
from numba import njit

from ...episodes.generators import paper

_U32 = np.uint64(0xFFFFFFFF)
# SeedSequence's hash constants (pool of 4 words, 16-bit xorshift).
_INIT_A = np.uint64(0x43B0D7E5)
_MULT_A = np.uint64(0x931E8875)
_INIT_B = np.uint64(0x8B51F9DD)
_MULT_B = np.uint64(0x58F38DED)
_MIX_MULT_L = np.uint64(0xCA01F9DD)
_MIX_MULT_R = np.uint64(0x4973F715)
_XSHIFT = np.uint64(16)
_POOL = 4
# PCG64's 128-bit multiplier, as high and low words.
_MULT_HI = np.uint64(2549297995355413924)
_MULT_LO = np.uint64(4865540595714422341)


def words(value: int) -> list[int]:
    """An int as SeedSequence reads it: its 32-bit words, least significant first ([0] for 0)."""
    if value < 0:
        raise ValueError(f"a seed must be non-negative, got {value}")
    out = [value & 0xFFFFFFFF]
    value >>= 32
    while value:
        out.append(value & 0xFFFFFFFF)
        value >>= 32
    return out


@functools.lru_cache(maxsize=256)
def _run_entropy(entropy: tuple[int, ...]) -> tuple[int, ...]:
    run = [w for value in entropy for w in words(value)]
    return tuple(run + [0] * (_POOL - len(run)))  # padded to the pool: the spawn key follows


def entropy_words(entropy: tuple[int, ...], spawn_key: tuple[int, ...]) -> np.ndarray:
    """``SeedSequence(list(entropy), spawn_key=spawn_key)``'s assembled entropy (a non-empty key)."""
    return np.array(_run_entropy(entropy) + tuple(w for value in spawn_key for w in words(value)), dtype=np.uint64)


@njit(cache=True)
def _hashmix(value, hash_const):
    value = (value ^ hash_const[0]) & _U32
    hash_const[0] = (hash_const[0] * _MULT_A) & _U32
    value = (value * hash_const[0]) & _U32
    return value ^ (value >> _XSHIFT)


@njit(cache=True)
def _mix(x, y):
    result = (_MIX_MULT_L * x - _MIX_MULT_R * y) & _U32
    return result ^ (result >> _XSHIFT)


@njit(cache=True)
def seed_state(entropy):
    """``SeedSequence``'s ``generate_state(4, uint64)`` of the assembled ``entropy`` (uint64 words < 2**32)."""
    hash_const = np.empty(1, dtype=np.uint64)
    hash_const[0] = _INIT_A
    pool = np.empty(_POOL, dtype=np.uint64)
    for i in range(_POOL):
        pool[i] = _hashmix(entropy[i] if i < entropy.shape[0] else np.uint64(0), hash_const)
    for i_src in range(_POOL):
        for i_dst in range(_POOL):
            if i_src != i_dst:
                pool[i_dst] = _mix(pool[i_dst], _hashmix(pool[i_src], hash_const))
    for i_src in range(_POOL, entropy.shape[0]):
        for i_dst in range(_POOL):
            pool[i_dst] = _mix(pool[i_dst], _hashmix(entropy[i_src], hash_const))
    out = np.empty(4, dtype=np.uint64)
    h = _INIT_B
    for k in range(8):
        value = (pool[k % _POOL] ^ h) & _U32
        h = (h * _MULT_B) & _U32
        value = (value * h) & _U32
        value ^= value >> _XSHIFT
        if k % 2 == 0:
            out[k // 2] = value
        else:
            out[k // 2] |= value << np.uint64(32)
    return out


@njit(cache=True)
def _mul_hi(a, b):
    """The high 64 bits of a * b."""
    a_lo, a_hi = a & _U32, a >> np.uint64(32)
    b_lo, b_hi = b & _U32, b >> np.uint64(32)
    low = a_lo * b_lo
    mid1 = a_hi * b_lo + (low >> np.uint64(32))
    mid2 = a_lo * b_hi + (mid1 & _U32)
    return a_hi * b_hi + (mid1 >> np.uint64(32)) + (mid2 >> np.uint64(32))


@njit(cache=True)
def _step(g):
    """state = state * MULT + inc (mod 2**128); ``g`` holds state hi, lo, inc hi, lo, has_uint32, uinteger."""
    hi, lo = g[0], g[1]
    new_lo = lo * _MULT_LO
    new_hi = _mul_hi(lo, _MULT_LO) + hi * _MULT_LO + lo * _MULT_HI
    summed = new_lo + g[3]
    g[0] = new_hi + g[2] + (np.uint64(1) if summed < new_lo else np.uint64(0))
    g[1] = summed


@njit(cache=True)
def pcg64(state_words):
    """``PCG64`` seeded with ``generate_state(4, uint64)``'s words: its state array."""
    g = np.zeros(6, dtype=np.uint64)
    # inc = (initseq << 1) | 1, initseq = words[2] * 2**64 + words[3]
    g[2] = (state_words[2] << np.uint64(1)) | (state_words[3] >> np.uint64(63))
    g[3] = (state_words[3] << np.uint64(1)) | np.uint64(1)
    _step(g)
    lo = g[1] + state_words[1]  # state += initstate (words[0] * 2**64 + words[1])
    g[0] = g[0] + state_words[0] + (np.uint64(1) if lo < g[1] else np.uint64(0))
    g[1] = lo
    _step(g)
    return g


@njit(cache=True)
def next_uint64(g):
    _step(g)
    hi, lo = g[0], g[1]
    rot = hi >> np.uint64(58)
    x = hi ^ lo
    return (x >> rot) | (x << ((np.uint64(64) - rot) & np.uint64(63)))


@njit(cache=True)
def _next_uint32(g):
    if g[4]:
        g[4] = 0
        return g[5]
    x = next_uint64(g)
    g[4] = 1
    g[5] = x >> np.uint64(32)
    return x & _U32


@njit(cache=True)
def random_fill(g, out):
    """``Generator.random`` into ``out`` (float64, filled in C order)."""
    flat = out.reshape(-1)
    for i in range(flat.shape[0]):
        flat[i] = np.float64(next_uint64(g) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def integers_fill(g, low, high, out):
    """``Generator.integers(low, high, size=len(out))`` (int64; ``high - low`` at most 2**32)."""
    if high <= low or high - low > 2**32:
        raise ValueError("integers_fill draws from ranges of 1 to 2**32 integers")
    span = np.uint64(high - low - 1)
    for i in range(out.shape[0]):
        if span == 0:
            out[i] = low
        elif span == _U32:
            out[i] = low + np.int64(_next_uint32(g))
        else:
            excl = span + np.uint64(1)
            m = _next_uint32(g) * excl
            leftover = m & _U32
            if leftover < excl:
                threshold = (_U32 - span) % excl
                while leftover < threshold:
                    m = _next_uint32(g) * excl
                    leftover = m & _U32
            out[i] = low + np.int64(m >> np.uint64(32))


@njit(cache=True)
def paper_structure(entropy, api_pool, min_params, max_params, length):
    """``paper.paper_draws`` on the generator of ``entropy`` (``entropy_words`` of the episode's
    structure stream): each endpoint's starting number of parameters, the six uniforms of each
    step (rows), each step's drawn endpoint."""
    g = pcg64(seed_state(entropy))
    n_params = np.empty(api_pool, dtype=np.int64)
    integers_fill(g, min_params, max_params + 1, n_params)
    uniforms = np.empty((6, length), dtype=np.float64)
    random_fill(g, uniforms)
    endpoints = np.empty(length, dtype=np.int64)
    integers_fill(g, 0, api_pool, endpoints)
    return n_params, uniforms, endpoints


def structure_draws(c: Any, seed: int, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``paper.structure_draws(c, seed, index)``, drawn in compiled code (a config's ints are below
    2**31, so its ranges are 32-bit ones). A negative seed or index goes to NumPy, which refuses it."""
    entropy = structure_entropy(c, seed, index)
    if entropy is None:
        return paper.structure_draws(c, seed, index)
    return paper_structure(entropy, c.api_pool, c.min_params, c.max_params, c.length)


def structure_entropy(c: Any, seed: int, index: int) -> np.ndarray | None:
    """The assembled entropy ``paper_structure`` draws the episode's structure from; None when
    the draws are NumPy's to make (a negative seed or index, or a NumPy that draws otherwise)."""
    if seed < 0 or index < 0 or not _draws_as_numpy():
        return None
    entropy, spawn_key = paper.stream_entropy(c.regime, seed, index, 0)
    return entropy_words(entropy, spawn_key)


@functools.cache
def _draws_as_numpy() -> bool:
    """Whether this module draws what the installed NumPy draws: a few episodes' structure, one
    with a range whose 32-bit draws NumPy rejects and redraws a quarter of the time."""
    for regime, seed, index, max_params in (("default", 0, 0, 6), ("burst_redundancy", 2**40, 2**33, 3 * 2**29)):
        # Only drawn, never made into an episode: the wide range lies past the generator's size
        # ceilings (GeneratorConfig refuses it), so the config's fields are taken as they are.
        c = SimpleNamespace(**{**asdict(paper.make_config(regime, length=64)), "max_params": max_params})
        entropy, spawn_key = paper.stream_entropy(c.regime, seed, index, 0)
        ours = paper_structure(entropy_words(entropy, spawn_key), c.api_pool, c.min_params, c.max_params, c.length)
        if not all(np.array_equal(a, b) for a, b in zip(ours, paper.structure_draws(c, seed, index), strict=True)):
            return False
    return True
