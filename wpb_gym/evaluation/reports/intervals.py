"""Bootstrap confidence intervals of means, for every table and figure of a run.

``bootstrap_cis`` computes many intervals in one vectorised ``scipy.stats.bootstrap`` call per
sample size. Every interval resamples with the same seed, so an interval does not depend on
which others were computed with it: ``bootstrap_ci(x)`` equals ``bootstrap_cis([..., x, ...])[i]``
up to floating-point rounding (the last digit of a float, from summing in another order).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

N_RESAMPLES = 2000
# Values resampled per scipy call: bounds the memory of one call (8 bytes each) while keeping
# the calls few.
_CHUNK_VALUES = 2_000_000


def _stats():
    # Imported when an interval is computed, not with this module: ``wpb eval``'s process
    # imports the report's modules before its grid, and leaves the statistics (a third of a
    # second of imports) to its report worker, which imports them while the grid runs.
    from scipy import stats

    return stats


def bootstrap_ci(values: Sequence[float], confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """A bootstrap ``confidence`` interval of the mean (BCa; percentile when BCa is undefined).

    With fewer than 2 values there is no interval (NaN, NaN); equal values give (mean, mean).
    """
    return bootstrap_cis([values], confidence, seed)[0]


def bootstrap_cis(
    samples: Sequence[Sequence[float]], confidence: float = 0.95, seed: int = 0
) -> list[tuple[float, float]]:
    """``bootstrap_ci`` of every sample, the samples of one size resampled together."""
    out: list[tuple[float, float]] = [(math.nan, math.nan)] * len(samples)
    by_size: dict[int, list[tuple[int, np.ndarray]]] = {}
    for i, values in enumerate(samples):
        data = np.asarray(values, dtype=float)
        if data.size < 2:
            continue
        if np.all(data == data[0]):  # no spread: the interval is the mean (which sums may round)
            mean = float(np.mean(data))
            out[i] = (mean, mean)
        else:
            by_size.setdefault(data.size, []).append((i, data))
    chunks = [
        items[start : start + max(1, _CHUNK_VALUES // (N_RESAMPLES * size))]
        for size, items in by_size.items()
        for start in range(0, len(items), max(1, _CHUNK_VALUES // (N_RESAMPLES * size)))
    ]
    for items in chunks:
        data = np.stack([d for _, d in items])
        low = np.full(len(items), math.nan)
        high = np.full(len(items), math.nan)
        for method in ("BCa", "percentile"):
            todo = ~(np.isfinite(low) & np.isfinite(high))
            if not todo.any():
                break
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # BCa's degenerate-data warnings: the percentile follows
                result = _stats().bootstrap(
                    (data[todo],),
                    np.mean,
                    axis=-1,
                    vectorized=True,
                    confidence_level=confidence,
                    n_resamples=N_RESAMPLES,
                    method=method,
                    random_state=np.random.default_rng(seed),
                )
            low[todo] = result.confidence_interval.low
            high[todo] = result.confidence_interval.high
        for (i, _), lo, hi in zip(items, low, high, strict=True):
            if math.isfinite(lo) and math.isfinite(hi):
                out[i] = (float(lo), float(hi))
    return out
