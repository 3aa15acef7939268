"""Episode metrics (spec §4, paper §6), computed from the final memory and the hidden labels.

R is ``labels["critical_steps"]``; W is the retained set of the final memory
(``ByteMemoryStore.retained_timesteps``: WRITE items, and MERGE items whose base is still
present with the same ``api``). T is the episode length.

==================  ==========================================  =========================
metric              definition                                  convention when undefined
==================  ==========================================  =========================
precision           |W ∩ R| / |W|                               0 when W is empty
recall              |W ∩ R| / |R|                               0 when R is empty
f1                  2·P·R / (P + R)                             0 when P + R = 0
policy_utility      sum of u_t over W
oracle_utility      U*(B), WRITE-only knapsack (``oracle``)
regret_write_only   max(0, U*(B) − policy_utility)              0 within 1e-9 (relative)
utility_per_kb      policy_utility / (bytes_used / 1024)        0 when bytes_used = 0
drift_coverage      |W ∩ R| / labels["total_drift_events"]      0 when there are none
avg_staleness       mean of (T − 1 − t) over W                  0 when W is empty
expire_rate         accepted EXPIREs / accepted WRITEs          0 when there was no WRITE
utilization         bytes_used / budget                         0 when the budget is 0
write_density       |W| / T
tp, fp, fn, tn      confusion counts over the T timesteps (positive = in W, relevant = in R)
==================  ==========================================  =========================

With compression (``wpb_gym.core.compression``), a compressed item of a critical step counts
``credit`` of one in precision, recall, F1 and drift coverage, and ``credit·u_t`` in the
policy's utility; the confusion counts still count items.

The zero conventions match the paper's ε-smoothed formulas (which give 0 in these cases)
and keep per-episode means finite. bytes_used counts every stored item, orphaned MERGE
deltas included: they still occupy memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.store import ByteMemoryStore
from ..core.tracks import track_costs
from ..core.types import Episode
from .oracle import oracle_utility

# Column order of the paper's per-episode logs.
METRIC_NAMES: tuple[str, ...] = (
    "recall",
    "precision",
    "f1",
    "utility_per_kb",
    "regret_write_only",
    "oracle_utility",
    "policy_utility",
    "drift_coverage",
    "avg_staleness",
    "expire_rate",
    "utilization",
    "write_density",
    "bytes_used",
    "write_actions",
    "expire_actions",
)
CONFUSION_NAMES: tuple[str, ...] = ("tp", "fp", "fn", "tn")


@dataclass(frozen=True)
class EpisodeMetrics:
    recall: float
    precision: float
    f1: float
    utility_per_kb: float
    regret_write_only: float
    oracle_utility: float
    policy_utility: float
    drift_coverage: float
    avg_staleness: float
    expire_rate: float
    utilization: float
    write_density: float
    bytes_used: int
    write_actions: int
    expire_actions: int
    merge_actions: int
    tp: int
    fp: int
    fn: int
    tn: int
    budget_bytes: int
    steps: int
    retained: tuple[int, ...]

    def as_row(self) -> dict[str, float | int]:
        """Scalar metrics and confusion counts (no retained set), for tables and CSV."""
        # Every field is a scalar but ``retained``: a shallow copy (``asdict`` deep-copies).
        row = dict(self.__dict__)
        del row["retained"]
        return row


def _regret(oracle_utility: float, policy_utility: float) -> float:
    # An optimal policy's utility, summed in floats, can sit one rounding step below the
    # oracle's exactly computed value; that is not regret.
    gap = oracle_utility - policy_utility
    return 0.0 if gap <= 1e-9 * max(1.0, abs(oracle_utility)) else gap


def compute_metrics(episode: Episode, store: ByteMemoryStore, *, oracle_utility: float) -> EpisodeMetrics:
    """Score the final ``store`` of a run over ``episode`` against its labels.

    ``oracle_utility`` is U*(B) for the store's budget on the track the policy ran on
    (``episode_oracle``); it is passed in so that it is computed once per (episode, budget,
    track), not once per policy. ``score_episode`` computes it for you.
    """
    T = len(episode)
    stored = store.timesteps()  # every item, orphaned MERGE deltas included: they hold bytes too
    if stored and (stored[0] < 0 or stored[-1] >= T):
        raise ValueError(f"memory holds timesteps outside the episode (0..{T - 1}): {stored[0]}..{stored[-1]}")
    counts = store.accepted_counts
    # (The isolated judge's ledger, which stands for a store, judges plain WRITEs only.)
    compression = getattr(store, "compression", None)
    compressed = store.compressed_timesteps() if compression is not None else ()
    return metrics_of_memory(episode, store.retained_timesteps(), bytes_used=store.bytes_used,
                             budget=store.max_bytes, writes=counts["WRITE"], expires=counts["EXPIRE"],
                             merges=counts["MERGE"], oracle_utility=oracle_utility, compressed=compressed,
                             credit=compression.credit if compressed else 1.0)


def metrics_of_memory(episode: Episode, retained: tuple[int, ...], *, bytes_used: int, budget: int, writes: int,
                      expires: int, merges: int, oracle_utility: float, compressed: Sequence[int] = (),
                      credit: float = 1.0) -> EpisodeMetrics:
    """The metrics of a final memory given by its retained set (sorted), bytes used, budget and
    accepted WRITE, EXPIRE and MERGE counts: ``compute_metrics`` without a store (the vector
    env's compiled core keeps its memory in arrays). ``compressed``: the steps held compressed,
    each worth ``credit``."""
    return metrics_of_labels(len(episode), episode.critical_steps, episode.utilities, episode.total_drift_events,
                             retained, bytes_used=bytes_used, budget=budget, writes=writes, expires=expires,
                             merges=merges, oracle_utility=oracle_utility, compressed=compressed, credit=credit)


def metrics_of_labels(T: int, critical_steps: Sequence[int], u: np.ndarray, total_drift: int,
                      retained: tuple[int, ...], *, bytes_used: int, budget: int, writes: int, expires: int,
                      merges: int, oracle_utility: float, compressed: Sequence[int] = (),
                      credit: float = 1.0) -> EpisodeMetrics:
    """``metrics_of_memory`` of an episode given by what it is scored on: its length, critical
    steps, per-step utilities and number of drift events."""
    relevant = set(critical_steps)
    tp = sum(1 for t in retained if t in relevant)
    if compressed:
        held_compressed = set(compressed)
        worth = [credit if t in held_compressed else 1.0 for t in retained]
        credited = math.fsum(w for t, w in zip(retained, worth) if t in relevant)
        utility = math.fsum(w * float(u[t]) for t, w in zip(retained, worth))
    else:
        credited = None
        utility = math.fsum(float(u[t]) for t in retained)
    row = metric_row(T, len(relevant), total_drift, len(retained), tp, utility,
                     math.fsum(T - 1 - t for t in retained), bytes_used=bytes_used, budget=budget, writes=writes,
                     expires=expires, merges=merges, oracle_utility=oracle_utility, credited_tp=credited)
    return EpisodeMetrics(**row, retained=retained)


def metric_row(T: int, relevant: int, total_drift: int, retained: int, tp: int, policy_utility: float,
               staleness: float, *, bytes_used: int, budget: int, writes: int, expires: int, merges: int,
               oracle_utility: float, credited_tp: float | None = None) -> dict[str, float | int]:
    """``EpisodeMetrics.as_row`` from counts: ``relevant`` critical steps, ``retained`` steps of
    which ``tp`` are critical, their utility and their staleness summed (``T - 1 - t``).
    ``credited_tp``: the critical steps kept, each compressed one counted at its credit (the
    scores read it; ``tp`` stays a count of items); None: ``tp``."""
    fp = retained - tp
    fn = relevant - tp
    hits = tp if credited_tp is None else credited_tp
    precision = hits / retained if retained else 0.0
    recall = hits / relevant if relevant else 0.0
    return {
        "recall": recall,
        "precision": precision,
        "f1": 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0,
        "utility_per_kb": policy_utility / (bytes_used / 1024) if bytes_used else 0.0,
        "regret_write_only": _regret(float(oracle_utility), policy_utility),
        "oracle_utility": float(oracle_utility),
        "policy_utility": policy_utility,
        "drift_coverage": hits / total_drift if total_drift else 0.0,
        "avg_staleness": staleness / retained if retained else 0.0,
        "expire_rate": expires / writes if writes else 0.0,
        "utilization": bytes_used / budget if budget else 0.0,
        "write_density": retained / T,
        "bytes_used": bytes_used,
        "write_actions": writes,
        "expire_actions": expires,
        "merge_actions": merges,
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": T - tp - fp - fn,
        "budget_bytes": budget,
        "steps": T,
    }


def score_episode(episode: Episode, store: ByteMemoryStore, *, track: str) -> EpisodeMetrics:
    """``compute_metrics`` with the oracle computed for the store's budget on ``track``."""
    best = oracle_utility(track_costs(episode, track), episode.utilities, store.max_bytes)
    return compute_metrics(episode, store, oracle_utility=best)
