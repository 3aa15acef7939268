"""How the compiled step's functions are compiled: ``borrowing`` (and ``borrowing_inline``).

They read and write arrays their caller holds, allocate none and return none, so numba's
reference counting of those arrays is left out of them (numba's ``_nrt=False``): an atomic
increment and decrement each time a function is handed an array or a slice of one. The vector
env at N = 256 steps 1.265x as fast without it on the default regime and 1.188x on
``breaking`` (``benchmarks/vector_env_versus.py`` against a checkout with counting). ``kernel.step_batch`` and
``start_batch`` are handed the arenas' buffers by Python, which holds them while they run, and
slice each sub-env's arrays out of them (``arenas.episode``). numba refuses to compile an
allocation without counting, so a function that starts allocating fails at its first
compilation rather than leaking. A numba without the option compiles them with counting, as
any other function.
"""

from __future__ import annotations

from .compile_cache import cached

try:  # the options numba's CPU target reads (an unknown one would fail every compilation)
    from numba.core.cpu import CPUTargetOptions
except ImportError:  # pragma: no cover - a numba that moved it: counting, as any function
    CPUTargetOptions = None
_WITHOUT_COUNTING = {"_nrt": False} if hasattr(CPUTargetOptions, "_nrt") else {}

borrowing = cached(**_WITHOUT_COUNTING)
borrowing_inline = cached(inline="always", **_WITHOUT_COUNTING)
