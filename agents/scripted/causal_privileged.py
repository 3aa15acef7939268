"""``causal_privileged``: the query tier's privileged baseline, which knows the hidden state but not the future.

It reads the generator's hidden state from the labels (``labels["hidden"]``: popularity levels
and their jumps, each endpoint's integrations, each family's change weight, volatility and
migration bursts, each breaking change's burst) **as of the current step only**: an entry
stamped after the current step is never read (``tests/agents/test_causal_privileged.py``
perturbs everything after a step and checks the decisions up to it are unchanged). It does
not read the queries.

It keeps the latest state of the endpoints with the highest expected value per byte, with
the engine of the keepers (``agents.scripted.keep_latest``), valuing an endpoint's latest
state by its expected queries per checkpoint: for each of the next ``horizon`` checkpoints,
the number of queries times the endpoint's expected share of the traffic then (its level, or
a fresh draw after a jump, plus its scheduled migration burst) times the chance its state is
still current (no change of the endpoint before then, no revert of a fresh breaking change);
the value is the best average of that over the next 1..``horizon`` checkpoints, so a burst
that starts later counts for the time it takes to come.

``knows`` takes hidden factors away, to measure what each is worth: ``"all"`` (the default),
``"none"`` or a ``+``-joined subset of ``HIDDEN_FACTORS``. A factor it does not know is replaced by its
prior mean, which the tier's knobs state:

* ``levels``: each endpoint's everyday popularity and its jumps (without: ``E[exp(level)]`` for
  every endpoint at every step);
* ``integrations``: each endpoint's number of client integrations (without: their mean, 1);
* ``burst_draws``: each breaking change's own burst size ``e`` (without: its mean, 1, so the
  burst is the family's boost; the families' boosts and delays stay known).

``causal_privileged:knows=levels+burst_draws`` is then the privileged policy that must guess
integrations; the difference from the full one is what knowing them is worth.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from wpb_gym.core.policy import EpisodeContext

from .keep_latest import KeepLatest

BREAKING_KINDS = frozenset({"remove_param", "require_param", "deprecate", "remove_endpoint"})
HIDDEN_FACTORS = ("levels", "integrations", "burst_draws")


def known_factors(knows: str) -> frozenset[str]:
    """The factors named by ``knows``: ``"all"``, ``"none"`` or a ``+``-joined subset of ``HIDDEN_FACTORS``."""
    expected = f"knows: expected 'all', 'none' or factors joined by '+' from {list(HIDDEN_FACTORS)}, got {knows!r}"
    if not isinstance(knows, str):
        raise ValueError(expected)
    if knows in ("all", "none"):
        return frozenset(HIDDEN_FACTORS if knows == "all" else ())
    names = knows.split("+")
    if any(n not in HIDDEN_FACTORS for n in names) or len(set(names)) != len(names):
        raise ValueError(expected)
    return frozenset(names)


class CausalPrivileged(KeepLatest):
    """``causal_privileged``: expected queries per byte from the hidden generator state, causally."""

    name = "causal_privileged"
    description = "Query tier: keeps the states worth most per byte by the hidden popularity (no future)."
    track = "oracle"
    kind = "oracle"
    _param_names = ("horizon", "knows")

    def __init__(self, *, horizon: int = 20, knows: str = "all") -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be at least 1 checkpoint, got {horizon}")
        self.horizon = horizon
        self.knows = knows
        self._known = known_factors(knows)
        super().__init__(size_aware=True, prior=0.0, tuned=False)

    def start_episode(self, context: EpisodeContext | None) -> None:
        super().start_episode(context)
        self._hidden = None
        self._stream_api: dict[int, Any] = {}  # step -> the endpoint it showed
        labels = context.episode.labels if context is not None and context.episode is not None else {}
        hidden = labels.get("hidden")
        if not isinstance(hidden, dict) or "endpoints" not in hidden:
            return  # not a query-tier episode: every value is 0 and nothing is written
        _check_hidden(hidden)
        if "burst_draws" not in self._known and "burst_families" not in hidden:
            raise ValueError(f"causal_privileged(knows={self.knows!r}): guessing each burst's draw needs "
                             f"labels.hidden.burst_families (each family's boost), which this episode lacks")
        self._config = hidden["process"]
        self._index = {api: i for i, api in enumerate(hidden["endpoints"])}
        families = hidden["families"]
        family = np.array(hidden["endpoint_families"], dtype=int)
        weight = np.array([f[1] for f in families])[family]
        self._revert = np.array([f[2] for f in families])[family]
        self._hazard = weight / weight.sum()  # the chance a change step changes this endpoint
        self._level = np.exp(np.array(hidden["popularity_levels"], dtype=float))
        if "levels" not in self._known:
            self._level[:] = np.exp(self._config["popularity_spread"] ** 2 / 2)
        self._integrations = np.array(hidden["integrations"], dtype=float)
        if "integrations" not in self._known:
            self._integrations[:] = 1.0  # integrations are log-normal with mean 1
        # A breaking change's burst is its family's boost times its own draw e (mean 1).
        if "burst_draws" not in self._known:
            self._family_boost = np.array([f[1] for f in hidden["burst_families"]], dtype=float)[family]
        self._burst = np.zeros(len(self._index))
        self._burst_start = np.zeros(len(self._index))
        self._jumps = _timed(hidden["popularity_jumps"])
        self._bursts = _timed(hidden["migration_boosts"])
        self._kinds = _timed(labels.get("change_kinds", []))
        self._state_breaking_at = np.full(len(self._index), -1.0)  # step of the current state's breaking change
        # The checkpoints come on a fixed schedule (every checkpoint_interval steps after the
        # warm-up, and the last step): the one thing of the future the labels state that anyone knows.
        self._checkpoints = np.array(hidden["checkpoint_steps"], dtype=float)
        self._hidden = hidden
        self._values: dict[Any, float] = {}

    def _advance(self, t: int) -> None:
        """Read every hidden entry stamped at or before ``t``, and none after."""
        for _, i, level in self._jumps.upto(t):
            if "levels" in self._known:
                self._level[i] = np.exp(level)
        for _, i, size, start in self._bursts.upto(t):
            known = "burst_draws" in self._known or size == 0
            self._burst[i], self._burst_start[i] = (size if known else self._family_boost[i]), start
        for step, kind in self._kinds.upto(t):
            api = self._stream_api.get(step)
            if api is not None and api in self._index:
                self._state_breaking_at[self._index[api]] = step if kind in BREAKING_KINDS else -1.0

    def observe(self, step: Any) -> bool:
        obs = step.observation
        if self._hidden is not None and isinstance(obs, dict) and "api" in obs:
            self._stream_api[step.t] = obs["api"]
        return super().observe(step)

    def prepare(self, apis: list[Any], t: int) -> None:
        if self._hidden is None:
            self._values = {}
            return
        self._advance(t)
        c = self._config
        known = [api for api in apis if api in self._index]
        idx = np.array([self._index[api] for api in known], dtype=int)
        ahead = self._checkpoints[self._checkpoints > t][: self.horizon]
        if idx.size == 0 or ahead.size == 0:
            self._values = dict.fromkeys(apis, 0.0)
            return
        k = np.arange(ahead.size)
        no_jump = (1.0 - c["popularity_jump_prob"]) ** k  # jumps come at checkpoints, after their queries
        fresh = np.exp(c["popularity_spread"] ** 2 / 2)  # E[exp(level)] of a fresh draw
        level = self._level[idx, None] * no_jump + fresh * (1.0 - no_jump)
        since = ahead[None, :] - self._burst_start[idx, None]
        decay = np.where(since >= 0, np.exp2(-np.maximum(since, 0) / c["migration_half_life"]), 0.0)
        weight = level + self._integrations[idx, None] * self._burst[idx, None] * decay
        now = t - self._burst_start
        total = (self._level + self._integrations * self._burst *
                 np.where(now >= 0, np.exp2(-np.maximum(now, 0) / c["migration_half_life"]), 0.0)).sum()
        changes = (ahead - t) * (c["checkpoint_interval"] - 1) / c["checkpoint_interval"]
        alive = (1.0 - self._hazard[idx, None]) ** changes[None, :]
        broke = self._state_breaking_at[idx]
        fresh_break = broke >= 0
        if fresh_break.any():
            waited = (ahead[None, :] - broke[:, None]) / self._hidden["revert_window"]
            reverted = self._revert[idx, None] * np.minimum(waited, 1.0)
            alive = np.where(fresh_break[:, None], alive * (1.0 - reverted), alive)
        expected = c["queries_per_checkpoint"] * weight / total * alive
        best = (np.cumsum(expected, axis=1) / (k + 1)[None, :]).max(axis=1)
        self._values = dict.fromkeys(apis, 0.0)
        self._values.update(zip(known, best.tolist(), strict=True))

    def value(self, api: Any) -> float:
        return self._values.get(api, 0.0)


class _timed:
    """Entries ``[t, ...]`` in step order, handed out up to a step, each once."""

    def __init__(self, entries: Sequence[Sequence[Any]]) -> None:
        self.entries = sorted((list(e) for e in entries), key=lambda e: e[0])
        self.at = 0

    def upto(self, t: int) -> list[list[Any]]:
        start = self.at
        while self.at < len(self.entries) and self.entries[self.at][0] <= t:
            self.at += 1
        return self.entries[start:self.at]


_PER_ENDPOINT = ("endpoint_families", "popularity_levels", "integrations")
_LISTS = ("families", "popularity_jumps", "migration_boosts", "checkpoint_steps")
_PROCESS = ("popularity_jump_prob", "popularity_spread", "migration_half_life", "checkpoint_interval",
            "queries_per_checkpoint")


def _check_hidden(hidden: dict[str, Any]) -> None:
    """The hidden state this policy reads, present and of one size per endpoint: a hand-made or
    damaged file gets an error naming the field, not a KeyError deep in NumPy."""
    endpoints = hidden["endpoints"]
    if not isinstance(endpoints, list):
        raise ValueError(f"labels.hidden.endpoints: expected a list of endpoint names, got {type(endpoints).__name__}")
    for key in _PER_ENDPOINT + _LISTS:
        if not isinstance(hidden.get(key), list):
            raise ValueError(f"labels.hidden.{key}: expected a list, got {type(hidden.get(key)).__name__}")
    for key in _PER_ENDPOINT:
        if len(hidden[key]) != len(endpoints):
            raise ValueError(f"labels.hidden.{key}: expected one entry per endpoint ({len(endpoints)}), "
                             f"got {len(hidden[key])}")
    families = len(hidden["families"])
    if any(not isinstance(f, int) or isinstance(f, bool) or not 0 <= f < families for f in hidden["endpoint_families"]):
        raise ValueError(f"labels.hidden.endpoint_families: expected family indices below {families}")
    if any(not isinstance(f, list) or len(f) < 3 or not all(_number(x) and x >= 0 for x in f[1:3])
           for f in hidden["families"]):
        raise ValueError("labels.hidden.families: expected [name, change weight >= 0, revert probability >= 0, "
                         "...] each")
    if families and not sum(f[1] for f in hidden["families"]) > 0:
        raise ValueError("labels.hidden.families: expected some family with a positive change weight")
    endpoints_n = len(endpoints)
    for key, width in (("popularity_jumps", 3), ("migration_boosts", 4)):
        for k, entry in enumerate(hidden[key]):
            if (not isinstance(entry, list) or len(entry) != width or not all(_number(x) for x in entry)
                    or not (isinstance(entry[1], int) and 0 <= entry[1] < endpoints_n)):
                raise ValueError(f"labels.hidden.{key}[{k}]: expected [t, endpoint index below {endpoints_n}"
                                 f"{', level' if width == 3 else ', size, start'}] of numbers, got {entry!r}")
    process = hidden.get("process")
    if not isinstance(process, dict):
        raise ValueError(f"labels.hidden.process: expected the process's knobs, got {type(process).__name__}")
    missing = [key for key in _PROCESS if key not in process]
    if missing:
        raise ValueError(f"labels.hidden.process: missing {', '.join(missing)}")
    if "revert_window" not in hidden:
        raise ValueError("labels.hidden.revert_window: missing")
    boosts = hidden.get("burst_families")
    if boosts is not None and (not isinstance(boosts, list) or len(boosts) != families or any(
            not isinstance(f, list) or len(f) < 2 or not (_number(f[1]) and f[1] >= 0) for f in boosts)):
        raise ValueError(f"labels.hidden.burst_families: expected one [name, boost >= 0, ...] per family "
                         f"({families})")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)

