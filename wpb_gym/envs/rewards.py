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
regret against the prefix oracle U*(B, t)). Costs are paid when they are incurred: a
rejected action's penalty and an accepted EXPIRE's ``expire_cost``. The final reward closes
the sum, so the rewards of an episode add up to the terminal metric less those costs exactly
(in the left-to-right float sum that ``Monitor`` and ``RecordEpisodeStatistics`` compute).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Mapping

import numpy as np

from ..core.checks import finite
from ..core.compression import Compression
from ..core.kind_budgets import KindBudgets
from ..core.types import Episode
from ..core.write_time import WriteTime
from ..scoring.kind_bounds import step_kinds
from ..scoring.limited_bounds import utility_within
from ..scoring.oracle import oracle_curve, oracle_utility

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
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not finite(weight):
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


class RewardFunction:
    """The rewards of one episode at a time: the weighted metric on the last step, or (dense)
    the change of its potential after every action, closed so the sum is the terminal value.

    The env tells it which steps became retained (``kept``), which left the retained set
    (``dropped``, as the store states it) and, with each reward, which step was decided; the
    hidden labels it scores them with never reach the observation.
    """

    def __init__(self, weights: Mapping[str, float], dense: bool, expire_cost: float = 0.0) -> None:
        self.weights = dict(weights)
        if not isinstance(dense, (bool, np.bool_)):  # (bool("no") is True)
            raise ValueError(f"dense_reward must be true or false, got {dense!r}")
        self.dense = bool(dense)
        # What each accepted EXPIRE costs, paid as it is taken and taken off the terminal value
        # as a rejected action's penalty is: a policy that writes what it will expire later
        # pays for it, one that skips it does not.
        if isinstance(expire_cost, bool) or not isinstance(expire_cost, (int, float)) or not (
            0.0 <= expire_cost < math.inf
        ):
            raise ValueError(f"expire_cost must be a finite number >= 0, got {expire_cost!r}")
        self.expire_cost = float(expire_cost)

    @property
    def oracle_at_start(self) -> bool:
        """Whether ``start`` computes U*(B) (a dense reward pays its share of it as it goes)."""
        return self.dense and ("utility" in self.weights or "neg_regret" in self.weights)

    def fresh(self) -> RewardFunction:
        """A new reward function of the same settings, with no episode."""
        return type(self)(self.weights, self.dense, self.expire_cost)

    def start(self, episode: Episode, costs: np.ndarray, budget: int, kinds: KindBudgets | None = None,
              write_time: WriteTime | None = None, compression: Compression | None = None,
              compressed: np.ndarray | None = None) -> None:
        """Start ``episode``; ``kinds`` (hierarchical budgets), ``write_time`` or ``compression``
        (with each step's compressed cost, ``compressed``): limits U*(B) then respects
        (``"neg_regret"``'s prefix oracle has no such form: it is refused with them)."""
        if (kinds or write_time or compression) and "neg_regret" in self.weights:
            raise ValueError("reward 'neg_regret' is measured against the prefix oracle U*(B, t), which "
                             "kind_budgets=, write_time= and compression= do not have; use 'f1' or 'utility'")
        self.start_labels(len(episode), episode.critical_steps, episode.utilities, costs, budget,
                          (step_kinds(episode), kinds) if kinds else None, write_time,
                          (compression, compressed) if compression is not None else None)

    def start_labels(self, T: int, critical_steps: Iterable[int], utilities: np.ndarray, costs: np.ndarray,
                     budget: int, kinds: tuple[list[str], KindBudgets] | None = None,
                     write_time: WriteTime | None = None,
                     compression: tuple[Compression, np.ndarray] | None = None) -> None:
        """``start`` on an episode given by what it is scored on: its length, critical steps and
        per-step utilities (and with hierarchical budgets, each step's content kind and the
        limits; with write time, its budget; with compression, the setting and each step's
        compressed cost)."""
        self._kinds = kinds
        self._write_time = write_time
        self._compression = compression
        self._utility_array = utilities
        self._costs = costs
        self._budget = budget
        self._critical = [False] * T
        for t in critical_steps:
            if 0 <= t < T:
                self._critical[t] = True
        self._utilities = utilities.tolist()
        self._critical_before = 0  # critical steps among those already decided
        self._decided = 0
        self._kept = 0
        self._kept_critical = 0
        self._kept_utility = 0.0
        self._worth: dict[int, float] = {}  # retained steps that count less than one (compressed)
        self._potential = 0.0
        self._paid = 0.0
        self._penalties = 0.0
        self._oracle_value: float | None = None
        self._oracle_prefix: np.ndarray | None = None
        if self.oracle_at_start:
            self._compute_oracle(prefix="neg_regret" in self.weights)

    def _compute_oracle(self, prefix: bool) -> None:
        if self._kinds is not None or self._write_time is not None or self._compression is not None:
            of_steps, limits = self._kinds or (None, None)
            compression, compressed = self._compression or (None, None)
            self._oracle_value = utility_within(self._costs, self._utility_array, self._budget, limits,
                                                self._write_time, of_steps, compression, compressed)
        elif prefix:
            curve = oracle_curve(self._costs, self._utility_array, [self._budget])
            self._oracle_value = curve.at(self._budget)
            self._oracle_prefix = curve.prefix[0]
        else:
            self._oracle_value = oracle_utility(self._costs, self._utility_array, self._budget)

    @property
    def known_oracle(self) -> float | None:
        """U*(B) of the episode if it has been computed (None: not yet)."""
        return self._oracle_value

    @property
    def critical(self) -> list[bool]:
        """Per step of the started episode, whether it is critical (F1's labels). The reward
        function's own list: read it, do not change it."""
        return self._critical

    @property
    def utilities(self) -> list[float]:
        """Per step of the started episode, its utility. The reward function's own list: read it,
        do not change it."""
        return self._utilities

    @property
    def costs(self) -> np.ndarray:
        """Per step of the started episode, what a WRITE of it costs (U*(B)'s weights)."""
        return self._costs

    @property
    def oracle_prefix(self) -> np.ndarray | None:
        """``neg_regret``'s prefix oracle U*(B, t) per step, if ``start`` computed it (a dense
        ``neg_regret`` reward's; None otherwise)."""
        return self._oracle_prefix

    def oracle_utility(self) -> float:
        """U*(B) of the episode at its budget (computed once per episode)."""
        if self._oracle_value is None:
            self._compute_oracle(prefix=False)
        return self._oracle_value

    def kept(self, t: int, worth: float = 1.0) -> None:
        """Step ``t`` joined the retained set (``worth``: what it counts for, below 1 for a
        compressed item)."""
        self._kept += 1
        if worth != 1.0:
            self._worth[t] = worth
        self._kept_critical += self._critical[t] * worth
        self._kept_utility += self._utilities[t] * worth

    def dropped(self, timesteps: Iterable[int]) -> None:
        """These steps left the retained set."""
        for t in timesteps:
            worth = self._worth.pop(t, 1.0)
            self._kept -= 1
            self._kept_critical -= self._critical[t] * worth
            self._kept_utility -= self._utilities[t] * worth

    def reward(self, decided: int | None, penalty: float, metrics: Mapping[str, float] | None) -> float:
        """The reward of the action just taken: ``decided``, the step it decided (None for an
        accepted EXPIRE, which leaves time where it is and costs ``expire_cost``); ``metrics``
        (as ``EpisodeMetrics.as_row``) when it ended the episode."""
        if decided is not None:
            self._decided = decided + 1
            if self._critical[decided]:
                self._critical_before += 1
        elif self.expire_cost:
            penalty += self.expire_cost
        reward = -penalty if penalty else 0.0  # not -0.0
        self._penalties += penalty
        if metrics is not None:
            reward = closing_reward(terminal_reward(self.weights, metrics) - self._penalties, self._paid)
        elif self.dense:
            potential = self._current_potential()
            reward += potential - self._potential
            self._potential = potential
        self._paid += reward
        return reward

    def _current_potential(self) -> float:
        """The weighted metric as if the episode ended now, against the steps already decided."""
        total = 0.0
        for name, weight in self.weights.items():
            if name == "f1":
                denominator = self._kept + self._critical_before
                value = 2.0 * self._kept_critical / denominator if denominator else 0.0
            else:
                oracle = self._oracle_value
                if not oracle:
                    value = 0.0
                elif name == "utility":
                    value = self._kept_utility / oracle
                else:
                    best_so_far = float(self._oracle_prefix[self._decided - 1]) if self._decided else 0.0
                    value = -max(0.0, best_so_far - self._kept_utility) / oracle
            total += weight * value
        return total
