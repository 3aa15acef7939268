"""Rewards of ``WritePolicyBench-v0``: the benchmark's metrics, at the end or spread over the episode.

A reward specification is a metric name or a weighted mix of them:

* ``"f1"`` — the episode's F1 (default);
* ``"utility"`` — policy utility / oracle utility U*(B) (1 when U*(B) = 0: nothing could be
  kept, so nothing was missed). It can exceed 1: the oracle is WRITE-only and MERGE items
  keep steps for fewer bytes;
* ``"neg_regret"`` — ``-regret_write_only / U*(B)`` (0 when U*(B) = 0), in [-1, 0];
* a mix: ``{"f1": 0.5, "utility": 0.5}`` or the string ``"f1:0.5,utility:0.5"``.

Terminal mode pays the metric once, on the last step. Dense mode pays the change of a
potential after every action: the metric as if the episode ended now, scored against the
steps already decided (F1 against the critical steps seen so far, utility kept so far,
regret against the prefix oracle U*(B, t)). The final reward closes the sum, so the rewards
of an episode add up to the terminal metric exactly (in the left-to-right float sum that
``Monitor`` and ``RecordEpisodeStatistics`` compute).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

REWARD_METRICS: tuple[str, ...] = ("f1", "utility", "neg_regret")


def parse_reward(spec: str | Mapping[str, float]) -> dict[str, float]:
    """Weights of a reward specification, e.g. ``"f1"`` → ``{"f1": 1.0}``."""
    if isinstance(spec, str):
        if ":" not in spec and "," not in spec:
            weights: dict[str, Any] = {spec.strip(): 1.0}
        else:
            weights = {}
            for part in spec.split(","):
                name, sep, value = part.partition(":")
                if not sep:
                    raise ValueError(f"reward {spec!r}: expected NAME:WEIGHT pairs separated by commas, got {part!r}")
                try:
                    weights[name.strip()] = float(value)
                except ValueError:
                    raise ValueError(
                        f"reward {spec!r}: weight of {name.strip()!r} is not a number: {value!r}"
                    ) from None
    elif isinstance(spec, Mapping):
        weights = dict(spec)
    else:
        raise ValueError(f"reward must be a metric name, 'NAME:W,...' or a mapping, got {spec!r}")
    if not weights:
        raise ValueError("reward: no metric given")
    out = {}
    for name, weight in weights.items():
        if name not in REWARD_METRICS:
            raise ValueError(f"reward: unknown metric {name!r}; expected one of {REWARD_METRICS}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise ValueError(f"reward: weight of {name!r} must be a finite number, got {weight!r}")
        out[name] = float(weight)
    return out


def utility_ratio(policy_utility: float, oracle_utility: float) -> float:
    return policy_utility / oracle_utility if oracle_utility > 0 else 1.0


def neg_regret_ratio(regret: float, oracle_utility: float) -> float:
    return -regret / oracle_utility if oracle_utility > 0 else 0.0


def terminal_reward(weights: Mapping[str, float], metrics: Mapping[str, float]) -> float:
    """The weighted metric an episode ends with (``metrics`` as in ``EpisodeMetrics.as_row``)."""
    values = {
        "f1": metrics["f1"],
        "utility": utility_ratio(metrics["policy_utility"], metrics["oracle_utility"]),
        "neg_regret": neg_regret_ratio(metrics["regret_write_only"], metrics["oracle_utility"]),
    }
    return math.fsum(w * values[name] for name, w in weights.items())


def closing_reward(target: float, paid: float) -> float:
    """The last reward r such that ``paid + r == target`` in floating point.

    ``target - paid`` rounds, so the sum can land one ulp off; the nudges fix that (for
    targets that share ``paid``'s magnitude, which metric values in [-1, 1] do).
    """
    r = target - paid
    for _ in range(8):
        total = paid + r
        if total == target:
            break
        r = math.nextafter(r, math.inf if total < target else -math.inf)
    return r
