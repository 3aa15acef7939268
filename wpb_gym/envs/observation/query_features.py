"""What a policy can know of the query tier's hidden traffic from the stream: per-endpoint and
per-family statistics, kept step by step from what the stream shows (never the labels).

``QueryStreamTracker.step(observation, metadata)`` takes every step in order;
``features(api)`` then describes an endpoint (``ENDPOINT_FEATURES``, in this order), in
[0, 1]. Checkpoint steps feed the query statistics (the queries each shows), change steps the
rest (the endpoint's traffic, whether its change was breaking, and its family's history).

==========================  ===========================================================
feature                     meaning
==========================  ===========================================================
``asked_fast``              share of the queries about it, decayed by 0.3 a checkpoint (x10)
``asked_mid``               the same, decayed by 0.7
``asked_slow``              the same, decayed by 0.95
``asked_last``              its share of the last checkpoint's queries (x10)
``traffic_last``            log1p of the traffic its last show carried, / 6
``traffic_mean``            log1p of the mean traffic of its shows, / 6
``broke``                   its last change was breaking (a parameter removed or made
                            required, deprecated or removed)
``since_break_0``..``_5``   it broke that many checkpoints ago (one of them, or none)
``since_break_late``        it broke six or more checkpoints ago
``family_lag_0``..``_5``    its family's mean query share at the checkpoint that many
                            checkpoints after each of its breaking changes (x10)
``family_breaks``           log1p of its family's breaking changes so far, / 6
``family_reverts``          share of its family's breaking changes reverted (the contract
                            before came back)
``family_changes``          its family's changes per endpoint per checkpoint (x10)
``own_burst``               the largest share it drew at a checkpoint after its own breaking
                            changes (x10)
==========================  ===========================================================
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core.contracts import Contract, contract_of, endpoint_family, is_breaking

LAGS = 6
DECAYS = (0.3, 0.7, 0.95)
ENDPOINT_FEATURES: tuple[str, ...] = (
    "asked_fast", "asked_mid", "asked_slow", "asked_last", "traffic_last", "traffic_mean", "broke",
    *(f"since_break_{k}" for k in range(LAGS)), "since_break_late",
    *(f"family_lag_{k}" for k in range(LAGS)), "family_breaks", "family_reverts", "family_changes", "own_burst",
)

_EMPTY: Contract = (frozenset(), frozenset(), False, False)


def _lags() -> np.ndarray:
    return np.zeros(LAGS)


class QueryStreamTracker:
    """Causal statistics of one episode's stream (see the module docstring).

    ``history`` bounds the earlier contracts remembered per endpoint (None: all of them), which
    ``family_reverts`` searches for an earlier contract coming back: an endless stream sets
    it, so that the tracker does not grow with the steps (a revert restores the contract
    just before its breaking change, so a few are enough to see it). With a bound, the
    earlier contracts are kept as hashes (only the latest is compared in full), since an
    endless stream's contracts themselves grow as changes add parameters.

    ``features(api)`` is computed once and kept, read-only, until it can move: every
    endpoint's at a checkpoint, the shown endpoint's family's at a show. (A policy valuing the
    endpoints it holds at every step asks for the same rows thousands of times between
    checkpoints.) ``cache=False`` computes them afresh at every call: the plain reference the
    tests and ``benchmarks/value_keeper.py`` compare the cache with."""

    def __init__(self, history: int | None = None, *, cache: bool = True) -> None:
        if history is not None and (isinstance(history, bool) or not isinstance(history, int) or history < 2):
            raise ValueError(f"history: expected None or an int >= 2 (contracts per endpoint), got {history!r}")
        self.history = history
        self.cache = cache
        self._earlier: dict[str, deque[int]] = {}  # with a bound: hashes of the earlier contracts
        self.checkpoint = 0
        self._asked = [defaultdict(float) for _ in DECAYS]
        self._scale = [1.0 for _ in DECAYS]
        self._last: dict[str, float] = {}
        self._traffic_last: dict[str, float] = {}
        self._traffic_sum: dict[str, float] = defaultdict(float)
        self._shows: dict[str, int] = defaultdict(int)
        self._contracts: dict[str, list[Contract]] = {}
        self._broke_at: dict[str, int] = {}
        self._broke: dict[str, bool] = {}
        self._family_lag: dict[str, np.ndarray] = defaultdict(_lags)
        self._family_lag_n: dict[str, np.ndarray] = defaultdict(_lags)
        self._family_breaks: dict[str, int] = defaultdict(int)
        self._family_reverts: dict[str, int] = defaultdict(int)
        self._family_changes: dict[str, int] = defaultdict(int)
        self._family_size: dict[str, set[str]] = defaultdict(set)
        self._own_burst: dict[str, float] = defaultdict(float)
        self._watching: list[tuple[str, str, int]] = []  # (endpoint, family, checkpoint it broke at)
        self._cache: dict[str, np.ndarray] = {}

    def step(self, observation: Any, metadata: Mapping[str, Any]) -> None:
        """Take the next step of the stream."""
        if not isinstance(observation, dict):
            return
        if "queries" in observation and "api" not in observation:
            self._on_checkpoint([q[0] for q in observation["queries"] if isinstance(q, list) and q])
        elif isinstance(observation.get("api"), str):
            traffic = metadata.get("traffic", 0)
            traffic = float(traffic) if isinstance(traffic, (int, float)) and not isinstance(traffic, bool) else 0.0
            self._on_show(observation["api"], observation, max(traffic, 0.0))

    def _on_checkpoint(self, asked: list[str]) -> None:
        self._cache.clear()  # the decayed shares, lags and rates of every endpoint move
        counts: dict[str, int] = defaultdict(int)
        for api in asked:
            counts[api] += 1
        total = max(len(asked), 1)
        for k, decay in enumerate(DECAYS):
            self._scale[k] *= decay
            if self._scale[k] < 1e-100:
                table = self._asked[k]
                for key in table:
                    table[key] *= self._scale[k]
                self._scale[k] = 1.0
            weight = (1.0 - decay) / self._scale[k]
            for api, n in counts.items():
                self._asked[k][api] += weight * n / total
        self._last = {api: n / total for api, n in counts.items()}
        watching = []
        for api, family, broke_at in self._watching:
            lag = self.checkpoint - broke_at
            share = counts.get(api, 0) / total
            self._family_lag[family][lag] += share
            self._family_lag_n[family][lag] += 1
            self._own_burst[api] = max(self._own_burst[api], share)
            if lag + 1 < LAGS:
                watching.append((api, family, broke_at))
        self._watching = watching
        self.checkpoint += 1

    def _on_show(self, api: str, observation: Mapping[str, Any], traffic: float) -> None:
        family = endpoint_family(api)
        self._family_size[family].add(api)
        for member in self._family_size[family]:  # a show moves only its own family's features
            self._cache.pop(member, None)
        self._traffic_last[api] = traffic
        self._traffic_sum[api] += traffic
        self._shows[api] += 1
        contract = contract_of(observation) or _EMPTY
        history = self._contracts.setdefault(api, [])
        broke = False
        if history:
            self._family_changes[family] += 1
            if self.history is None:
                came_back = contract in history[:-1]
            else:
                came_back = hash(contract) in self._earlier.setdefault(api, deque(maxlen=self.history))
            if came_back and history[-1] != contract:  # an earlier contract came back
                self._family_reverts[family] += 1
            broke = is_breaking(history[-1], contract)
        if self.history is None:
            history.append(contract)
        else:
            if history:
                self._earlier.setdefault(api, deque(maxlen=self.history)).append(hash(history[-1]))
            history[:] = [contract]
        self._broke[api] = broke
        if broke:
            self._broke_at[api] = self.checkpoint
            self._family_breaks[family] += 1
            self._watching.append((api, family, self.checkpoint))

    def features(self, api: str) -> np.ndarray:
        """The endpoint's features (``ENDPOINT_FEATURES``), float32 in [0, 1]."""
        cached = self._cache.get(api)
        if cached is not None:
            return cached
        family = endpoint_family(api)
        row = [min(1.0, 10.0 * self._asked[k].get(api, 0.0) * self._scale[k]) for k in range(len(DECAYS))]
        row.append(min(1.0, 10.0 * self._last.get(api, 0.0)))
        shows = self._shows.get(api, 0)
        row.append(min(1.0, math.log1p(self._traffic_last.get(api, 0.0)) / 6))
        row.append(min(1.0, math.log1p(self._traffic_sum[api] / shows) / 6) if shows else 0.0)
        row.append(1.0 if self._broke.get(api) else 0.0)
        since = self.checkpoint - self._broke_at[api] if api in self._broke_at else None
        row += [1.0 if since == k else 0.0 for k in range(LAGS)]
        row.append(1.0 if since is not None and since >= LAGS else 0.0)
        lag = self._family_lag.get(family)
        if lag is None:
            row += [0.0] * LAGS
        else:
            row += np.minimum(1.0, 10.0 * (lag / np.maximum(self._family_lag_n[family], 1.0))).tolist()
        breaks_so_far = self._family_breaks.get(family, 0)
        row.append(min(1.0, math.log1p(breaks_so_far) / 6))
        row.append(self._family_reverts.get(family, 0) / breaks_so_far if breaks_so_far else 0.0)
        size = max(len(self._family_size.get(family, ())), 1)
        row.append(min(1.0, 10.0 * self._family_changes.get(family, 0) / size / max(self.checkpoint, 1)))
        row.append(min(1.0, 10.0 * self._own_burst.get(api, 0.0)))
        features = np.asarray(row, dtype=np.float32)
        features.setflags(write=False)  # shared by every caller until the endpoint's features move
        if self.cache:
            self._cache[api] = features
        return features
