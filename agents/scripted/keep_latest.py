"""Keep the latest state of the endpoints worth most: scripted policies for the query tier.

A query-tier stream shows an endpoint only when it changes, and the reader answers from the
newest item memory holds of it, so every policy here keeps at most one item per endpoint,
its latest snapshot, and decides two things when an endpoint is shown:

* an endpoint memory already holds is always brought up to date (its old item is expired,
  the new snapshot written, after evicting others if the new one is larger);
* an endpoint memory does not hold is *admitted* when its value exceeds the value of what
  must be evicted to make room for it. Items are evicted lowest value per byte first
  (lowest value first with ``size_aware=False``).

The policies differ only in how they value an endpoint, from what any policy may read: the
queries the checkpoint steps show (``queries`` of each checkpoint observation), the
``traffic`` of each change step's metadata, and the stream's own history (each endpoint's
previous contract, as ``breaking_detector`` keeps it).

========================  ===================================================================
name                      an endpoint's value
========================  ===================================================================
``keep_latest_lru``       the checkpoint it was last asked about (always admitted: classic LRU)
``keep_latest_lfu``       its query count, decayed by ``decay`` at every checkpoint
``keep_latest_traffic``   that, plus ``traffic_weight`` times its traffic, decayed alike
``keep_latest_breaking``  that, plus ``break_boost`` for ``hold`` checkpoints after a breaking
                          change (a parameter removed or made required, the endpoint
                          deprecated or removed)
``keep_latest_family``    that, plus ``break_boost`` times its family's mean share of the
                          queries at the ``window`` checkpoints after its breaking changes, for
                          ``hold`` checkpoints after a breaking change of its own
``keep_latest_migration`` its decayed query count, plus, in the ``lags`` checkpoints after a
                          breaking change, ``migration_weight`` times its mean traffic times the
                          queries per unit of traffic its family's earlier breaking changes drew
                          at each lag (the best mean over the lags ahead)
========================  ===================================================================

A family is the second segment of ``api`` (``api.billing.endpoint_17``: ``billing``). Values
are in queries per checkpoint; ``prior`` is every endpoint's value before it is asked about.
With ``tuned=True`` (the default) a keeper plays each episode with the parameters tuned for
the stream's tier (its ``mode``) and the budget on training seeds, where there are any
(``agents.scripted.keeper_params``); ``tuned=False`` plays the constructor's.
"""

from __future__ import annotations

from abc import abstractmethod
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np

from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.contracts import Contract, contract_of, endpoint_family, is_breaking
from wpb_gym.core.policy import EpisodeContext
from wpb_gym.core.store import StoreView
from wpb_gym.core.types import MemoryAction, Step

from ..base import BaselineAgent
from .keeper_params import tuned_params


def family_of(api: Any) -> str:
    return endpoint_family(api) if isinstance(api, str) else str(api)


class KeepLatest(BaselineAgent):
    """The engine every keeper shares: subclasses say what an endpoint is worth (``value``)."""

    track = "unprivileged"
    kind = "scripted"
    always_admit: ClassVar[bool] = False
    _tunable: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, size_aware: bool = True, prior: float = 0.01, tuned: bool = True) -> None:
        self.size_aware = size_aware
        self.prior = prior
        self.tuned = tuned
        self._own = {name: getattr(self, name) for name in self._param_names}
        self._budget: int | None = None
        self.start_episode(None)

    def start_episode(self, context: EpisodeContext | None) -> None:
        self._budget = context.budget_bytes if context is not None else None
        self._mode_seen = False
        self.checkpoint = 0
        self._contracts: dict[Any, Contract] = {}

    def _tune(self, mode: Any) -> None:
        """With ``tuned``, take the parameters tuned for this stream's tier and this budget (when
        there are any; the constructor's otherwise)."""
        self._mode_seen = True
        values = dict(self._own)
        if self.tuned and self._budget is not None:
            values.update(tuned_params(self.name, mode, self._budget))
        for name, value in values.items():
            setattr(self, name, value)

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        return iter(self.plan(step, store) if self.observe(step) else ())

    def observe(self, step: Step) -> bool:
        """Take the next step of the stream into the policy's own memory of it (once per step, in
        order); True for an endpoint snapshot, which ``plan`` decides on."""
        obs = step.observation
        if not self._mode_seen:
            self._tune(step.metadata.get("mode"))
        if not isinstance(obs, dict):
            return False
        if "queries" in obs and "api" not in obs:
            self.checkpoint += 1
            self.on_checkpoint(step.t, [q[0] for q in obs["queries"] if isinstance(q, list) and q])
            return False
        api = obs.get("api")
        contract = contract_of(obs)
        if api is None or contract is None:
            return False
        before = self._contracts.get(api)
        self._contracts[api] = contract
        self.on_show(step.t, api, step.metadata.get("traffic", 0), before is not None and is_breaking(before, contract))
        return True

    def plan(self, step: Step, store: StoreView) -> list[MemoryAction]:
        """What to do with the endpoint snapshot ``step`` (already observed) given memory as it is
        now: EXPIREs, then the WRITE if any. Changes nothing: it may be asked again."""
        return self._admit(step, store, step.observation["api"])

    # ---------------------------------------------------------------- what subclasses say
    def on_checkpoint(self, t: int, asked: list[Any]) -> None:
        """The endpoints the checkpoint just passed asked about (one entry per query)."""

    def on_show(self, t: int, api: Any, traffic: Any, breaking: bool) -> None:
        """An endpoint was shown: its traffic, and whether its change was breaking."""

    def prepare(self, apis: list[Any], t: int) -> None:
        """Called before ``value`` is asked of these endpoints at step ``t`` (to value them at once)."""

    @abstractmethod
    def value(self, api: Any) -> float:
        """What holding the endpoint's latest state is worth, in queries per checkpoint."""

    # ---------------------------------------------------------------- the engine
    def _admit(self, step: Step, store: StoreView, api: Any) -> list[MemoryAction]:
        cost = estimate_bytes(step)
        actions = []
        held = []
        room = store.remaining()
        for item in store.iter_items():
            if item.api == api:  # its old state: stale now, whatever comes next
                actions.append(MemoryAction.expire(item.t, reason="superseded"))
                room += item.byte_cost
            else:
                held.append(item)
        if cost > store.max_bytes:
            return actions
        self.prepare([item.api for item in held] + [api], step.t)
        if cost > room:
            replacing = bool(actions)
            mine = self.value(api)
            order = sorted(held, key=self._eviction_key)
            victims, lost = [], 0.0
            for item in order:
                if room >= cost:
                    break
                victims.append(item)
                room += item.byte_cost
                lost += self.value(item.api)
            if room < cost or not (replacing or self.always_admit or mine > lost):
                return actions
            actions += [MemoryAction.expire(item.t, reason="evicted") for item in victims]
        elif not actions and not self.always_admit and self.value(api) <= 0:
            return actions
        actions.append(MemoryAction.write(step, reason="latest state"))
        return actions

    def _eviction_key(self, item: Any) -> float:
        value = self.value(item.api)
        return value / item.byte_cost if self.size_aware else value


class KeepLatestLRU(KeepLatest):
    """``keep_latest_lru``: always admit the new state; evict the endpoint asked about least recently."""

    name = "keep_latest_lru"
    description = "Keeps each shown endpoint's latest state; evicts the least recently asked about."
    always_admit = True
    _param_names = ("size_aware",)

    def __init__(self, *, size_aware: bool = False, tuned: bool = True) -> None:
        super().__init__(size_aware=size_aware, prior=0.0, tuned=tuned)

    def start_episode(self, context: EpisodeContext | None) -> None:
        super().start_episode(context)
        self._last: dict[Any, float] = {}

    def on_checkpoint(self, t: int, asked: list[Any]) -> None:
        for api in asked:
            self._last[api] = float(self.checkpoint)

    def on_show(self, t: int, api: Any, traffic: Any, breaking: bool) -> None:
        self._last.setdefault(api, float(self.checkpoint) - 0.5)  # written now: more recent than the unasked

    def value(self, api: Any) -> float:
        return self._last.get(api, -1.0) + 1.0


class KeepLatestLFU(KeepLatest):
    """``keep_latest_lfu``: value an endpoint by its decayed query count."""

    name = "keep_latest_lfu"
    description = "Keeps the latest states of the endpoints asked about most (decayed counts), per byte."
    _param_names = ("decay", "size_aware", "prior")

    def __init__(self, *, decay: float = 0.8, size_aware: bool = True, prior: float = 0.01,
                 tuned: bool = True) -> None:
        self.decay = decay
        super().__init__(size_aware=size_aware, prior=prior, tuned=tuned)

    def start_episode(self, context: EpisodeContext | None) -> None:
        super().start_episode(context)
        self._counts: dict[Any, float] = defaultdict(float)
        self._scale = 1.0  # counts are kept divided by decay**checkpoints: one multiply per query

    def on_checkpoint(self, t: int, asked: list[Any]) -> None:
        self._scale *= self.decay
        if self._scale < 1e-200:  # renormalise before it underflows
            for key in self._counts:
                self._counts[key] *= self._scale
            self._scale = 1.0
        weight = (1.0 - self.decay) / self._scale if self.decay < 1 else 1.0
        for api in asked:
            self._counts[api] += weight

    def add(self, api: Any, amount: float) -> None:
        """Add ``amount`` (in the units of a query at this checkpoint) to the endpoint's count."""
        self._counts[api] += amount * ((1.0 - self.decay) / self._scale if self.decay < 1 else 1.0)

    def value(self, api: Any) -> float:
        return self._counts.get(api, 0.0) * self._scale + self.prior


class KeepLatestTraffic(KeepLatestLFU):
    """``keep_latest_traffic``: the decayed query count plus the endpoint's decayed traffic."""

    name = "keep_latest_traffic"
    description = "Like keep_latest_lfu, counting each change's traffic as well (traffic_weight each)."
    _param_names = ("decay", "traffic_weight", "size_aware", "prior")

    def __init__(self, *, decay: float = 0.8, traffic_weight: float = 0.3, size_aware: bool = True,
                 prior: float = 0.01, tuned: bool = True) -> None:
        self.traffic_weight = traffic_weight
        super().__init__(decay=decay, size_aware=size_aware, prior=prior, tuned=tuned)

    def on_show(self, t: int, api: Any, traffic: Any, breaking: bool) -> None:
        if isinstance(traffic, (int, float)) and not isinstance(traffic, bool) and traffic > 0:
            self.add(api, self.traffic_weight * float(traffic))


class KeepLatestBreaking(KeepLatestTraffic):
    """``keep_latest_breaking``: the decayed query count (and traffic), plus a boost after a breaking change."""

    name = "keep_latest_breaking"
    description = "Like keep_latest_traffic, valuing an endpoint more for a while after a breaking change."
    _param_names = ("decay", "traffic_weight", "break_boost", "hold", "size_aware", "prior")

    def __init__(self, *, decay: float = 0.8, traffic_weight: float = 0.0, break_boost: float = 3.0, hold: int = 1,
                 size_aware: bool = True, prior: float = 0.01, tuned: bool = True) -> None:
        self.break_boost = break_boost
        self.hold = hold
        super().__init__(decay=decay, traffic_weight=traffic_weight, size_aware=size_aware, prior=prior, tuned=tuned)

    def start_episode(self, context: EpisodeContext | None) -> None:
        super().start_episode(context)
        self._broken_at: dict[Any, int] = {}

    def on_show(self, t: int, api: Any, traffic: Any, breaking: bool) -> None:
        super().on_show(t, api, traffic, breaking)
        if breaking:
            self._broken_at[api] = self.checkpoint

    def boost(self, api: Any) -> float:
        return self.break_boost

    def value(self, api: Any) -> float:
        broken = self._broken_at.get(api)
        value = super().value(api)
        if broken is not None and self.checkpoint - broken <= self.hold:
            value += self.boost(api)
        return value


def _no_response() -> list[float]:
    return [0.0, 0.0]


class KeepLatestFamily(KeepLatestBreaking):
    """``keep_latest_family``: the breaking boost scaled by how much its family's breaking changes drew."""

    name = "keep_latest_family"
    description = ("Like keep_latest_breaking, scaling the boost by the queries its family's earlier "
                   "breaking changes drew.")
    _param_names = ("decay", "traffic_weight", "break_boost", "hold", "window", "size_aware", "prior")

    def __init__(self, *, decay: float = 0.8, traffic_weight: float = 0.0, break_boost: float = 1.0, hold: int = 3,
                 window: int = 3, size_aware: bool = True, prior: float = 0.01, tuned: bool = True) -> None:
        self.window = window
        super().__init__(decay=decay, traffic_weight=traffic_weight, break_boost=break_boost, hold=hold,
                         size_aware=size_aware, prior=prior, tuned=tuned)

    def start_episode(self, context: EpisodeContext | None) -> None:
        super().start_episode(context)
        # family -> [queries its breaking changes drew within the window, breaking changes measured]
        self._response: dict[str, list[float]] = defaultdict(_no_response)
        self._watching: list[tuple[Any, str, int]] = []  # (endpoint, family, checkpoint it broke at)

    def on_show(self, t: int, api: Any, traffic: Any, breaking: bool) -> None:
        super().on_show(t, api, traffic, breaking)
        if breaking:
            self._watching.append((api, family_of(api), self.checkpoint))

    def on_checkpoint(self, t: int, asked: list[Any]) -> None:
        super().on_checkpoint(t, asked)
        counts = Counter(asked)
        watching = []
        for api, family, broken in self._watching:
            response = self._response[family]
            response[0] += counts.get(api, 0)
            if self.checkpoint - broken >= self.window:
                response[1] += 1
            else:
                watching.append((api, family, broken))
        self._watching = watching

    def boost(self, api: Any) -> float:
        drawn, measured = self._response.get(family_of(api), (0.0, 0.0))
        return self.break_boost * (drawn + 1.0) / (measured + 1.0)


class KeepLatestMigration(KeepLatestLFU):
    """``keep_latest_migration``: the decayed query count, plus the queries a breaking change's
    migration is expected to bring: the endpoint's mean traffic times what its family's earlier
    breaking changes drew per unit of traffic at each checkpoint after them."""

    name = "keep_latest_migration"
    description = ("Like keep_latest_lfu, adding after a breaking change its mean traffic times the "
                   "queries per unit of traffic its family's breaking changes drew at each lag.")
    _param_names = ("decay", "migration_weight", "lags", "size_aware", "prior")

    def __init__(self, *, decay: float = 0.5, migration_weight: float = 1.0, lags: int = 6,
                 size_aware: bool = True, prior: float = 0.01, tuned: bool = True) -> None:
        if int(lags) < 1:
            raise ValueError(f"lags must be at least 1 checkpoint, got {lags}")
        self.migration_weight = migration_weight
        self.lags = int(lags)
        super().__init__(decay=decay, size_aware=size_aware, prior=prior, tuned=tuned)

    def start_episode(self, context: EpisodeContext | None) -> None:
        super().start_episode(context)
        self._traffic: dict[Any, float] = defaultdict(float)
        self._shows: dict[Any, int] = defaultdict(int)
        # family -> (queries per unit of traffic at each lag, summed; breaking changes measured there)
        self._drawn: dict[str, np.ndarray] = {}
        self._measured: dict[str, np.ndarray] = {}
        self._watching: list[tuple[Any, str, int]] = []  # (endpoint, family, checkpoint it broke at)
        self._broken_at: dict[Any, int] = {}
        self._pulls: dict[tuple[str, int], float] = {}  # family_pull's, until the next checkpoint

    def _mean_traffic(self, api: Any) -> float:
        # Shrunk towards a small prior: one Poisson draw says little of an endpoint's clients.
        return (self._traffic[api] + 0.5) / (self._shows[api] + 1.0)

    def on_show(self, t: int, api: Any, traffic: Any, breaking: bool) -> None:
        if isinstance(traffic, (int, float)) and not isinstance(traffic, bool) and traffic > 0:
            self._traffic[api] += float(traffic)
        self._shows[api] += 1
        if breaking:
            self._watching.append((api, family_of(api), self.checkpoint))
            self._broken_at[api] = self.checkpoint

    def on_checkpoint(self, t: int, asked: list[Any]) -> None:
        super().on_checkpoint(t, asked)
        counts = Counter(asked)
        watching = []
        for api, family, broken in self._watching:
            lag = self.checkpoint - broken - 1
            if 0 <= lag < self.lags:
                if family not in self._drawn:
                    self._drawn[family], self._measured[family] = np.zeros(self.lags), np.zeros(self.lags)
                self._drawn[family][lag] += counts.get(api, 0) / self._mean_traffic(api)
                self._measured[family][lag] += 1
            if lag + 1 < self.lags:
                watching.append((api, family, broken))
        self._watching = watching
        self._pulls.clear()

    def value(self, api: Any) -> float:
        value = super().value(api)
        broken = self._broken_at.get(api)
        family = family_of(api)
        if broken is None or family not in self._drawn:
            return value
        since = self.checkpoint - broken
        if since >= self.lags:
            return value
        return value + self.migration_weight * self._mean_traffic(api) * self.family_pull(family, since)

    def family_pull(self, family: str, since: int) -> float:
        """The queries per unit of traffic the family's breaking changes drew, as the best mean
        over the next 1..n lags from ``since``: a burst that starts later counts for the
        checkpoints it takes to come. Profiles change only at checkpoints, so each (family,
        lag) is worked out once between them, however many endpoints are valued."""
        key = (family, since)
        pull = self._pulls.get(key)
        if pull is None:
            ahead = self._drawn[family][since:] / np.maximum(self._measured[family][since:], 1.0)
            pull = self._pulls[key] = float(np.max(np.cumsum(ahead) / np.arange(1, ahead.size + 1)))
        return pull
