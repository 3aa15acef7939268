"""Real drift with generated queries: the query tier's process over a real API's change feed.

``add_queries(episode, config, seed)`` takes an episode cut from a real change-event log
(``episodes.py``: a warm-up showing each endpoint it touches, then the change events) and
makes it a query-tier episode: after every ``checkpoint_interval - 1`` change events, and at
the end, a checkpoint step asks ``queries_per_checkpoint`` queries, drawn by the query
process (``generators.query_process``) from generated, hidden traffic over the real
endpoints. The breaking changes that set off migration bursts are the log's breaking events;
an endpoint's family is its resource (the last path segment that is not a parameter:
``POST /v1/charges/{charge}/refunds`` is in ``refunds``). What changes, and when, is real;
who asks about what is generated, with the seed.

The episode keeps the real labels that still hold (dates, window, the source) and gains the
query tier's (``queries``, ``checkpoint_steps``, ``hidden``, ``critical_steps`` as the final
states the last checkpoint asks about); its ``mode`` is ``real_queries:SOURCE``. Change steps
keep their observation and show ``traffic`` in their metadata; ``priority`` is dropped (the
query tier has no such hint).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from ...core.checks import finite, require_int
from ...core.types import Episode, Step, frozen_instance
from ..generators.queries import query_episode_seed, query_labels
from ..generators.query_process import ProcessKnobs, QueryProcess

_PATH_PARAMETER = re.compile(r"^\{.*\}$")


@dataclass(frozen=True)
class RealQueryConfig:
    """The query process's knobs over a real feed; the defaults are the ``queries_medium`` tier's."""

    checkpoint_interval: int = 50
    queries_per_checkpoint: int = 300
    migrating_share: float = 0.5
    max_burst_delay: int = 2
    migration_boost_min: float = 50.0
    migration_boost_max: float = 5000.0
    migration_half_life: int = 100
    popularity_spread: float = 1.5
    integration_spread: float = 2.0
    burst_spread: float = 1.5
    popularity_jump_prob: float = 0.05
    traffic_scale: float = 3.0
    recent_fact_prob: float = 0.5
    version_fact_prob: float = 0.4

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not finite(value):
                raise ValueError(f"RealQueryConfig.{f.name}: expected a finite number, got {value!r}")
            if value < 0:
                raise ValueError(f"RealQueryConfig.{f.name}: expected >= 0, got {value!r}")
        for name in ("migrating_share", "popularity_jump_prob", "recent_fact_prob", "version_fact_prob"):
            if getattr(self, name) > 1:
                raise ValueError(f"RealQueryConfig.{name}: expected a probability in [0, 1], got {getattr(self, name)}")
        for name in ("checkpoint_interval", "queries_per_checkpoint", "migration_half_life"):
            if getattr(self, name) < (2 if name == "checkpoint_interval" else 1):
                raise ValueError(f"RealQueryConfig.{name}: expected >= {2 if name == 'checkpoint_interval' else 1}, "
                                 f"got {getattr(self, name)}")
        if self.migration_boost_max < self.migration_boost_min:
            raise ValueError("RealQueryConfig.migration_boost_max: expected >= migration_boost_min")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


assert {f.name for f in fields(RealQueryConfig)} >= set(ProcessKnobs.__annotations__)


def resource_of(api: str) -> str:
    """An endpoint's family: the last path segment that is not a path parameter, without ``.json``."""
    path = api.split(" ", 1)[-1]
    segments = [s for s in path.split("/") if s and not _PATH_PARAMETER.match(s)]
    return segments[-1].removesuffix(".json") if segments else path


def add_queries(episode: Episode, config: RealQueryConfig, seed: int) -> Episode:
    """``episode`` (cut from a real log, with its warm-up) with checkpoints and generated queries."""
    seed = require_int(seed, "seed")
    labels = episode.labels
    warmup = int(labels.get("warmup_steps", 0))
    observations, _ = episode.columns()
    source = str(labels.get("mode", "real:unknown")).removeprefix("real:")
    mode = f"real_queries:{source}"
    apis = list(dict.fromkeys(o["api"] for o in observations if isinstance(o, dict) and "api" in o))
    names = sorted({resource_of(api) for api in apis})
    family_of = [names.index(resource_of(api)) for api in apis]
    rng = np.random.default_rng(query_episode_seed(f"{mode}/{labels.get('episode_id')}", seed, 0))
    process = QueryProcess(config, rng, apis, family_of, names)
    breaking = set(labels.get("breaking_events", ()))

    out_obs: list[Any] = []
    out_meta: list[dict[str, Any]] = []
    shows: list[list[int]] = [[] for _ in apis]
    index = {api: i for i, api in enumerate(apis)}
    queries: list[list[Any]] = []
    checkpoints: list[int] = []
    changes_since = 0

    def checkpoint() -> None:
        t = len(out_obs)
        asked = process.checkpoint(t)
        queries.extend([t, *query] for query in asked)
        out_obs.append({"checkpoint": len(checkpoints), "queries": [query[:3] for query in asked]})
        out_meta.append({"mode": mode})
        checkpoints.append(t)

    for old_t, obs in enumerate(observations):
        t = len(out_obs)
        traffic = process.show(t, obs["api"], obs, old_t in breaking)
        out_obs.append(obs)
        out_meta.append({"mode": mode, "traffic": traffic})
        shows[index[obs["api"]]].append(t)
        if old_t >= warmup:
            changes_since += 1
            if changes_since == config.checkpoint_interval - 1 and old_t < len(observations) - 1:
                checkpoint()
                changes_since = 0
    checkpoint()
    T = len(out_obs)
    new = query_labels(T, queries, shows, index, checkpoints)
    hidden = process.hidden(checkpoints)
    hidden.update({"families": [[name, 1.0, 0.0] for name in names], "revert_window": 1})
    kept = {k: labels[k] for k in ("first_date", "last_date", "first_seq", "last_seq", "window", "commits")
            if k in labels}
    new.update(kept)
    new.update({
        "checkpoint_steps": checkpoints,
        "episode_id": f"{labels.get('episode_id')}/queries/{seed}",
        "hidden": dict(sorted(hidden.items())),
        "mode": mode,
        "queries": queries,
        "seed": seed,
        "warmup_steps": warmup,
    })
    steps = [frozen_instance(Step, {"t": t, "observation": o, "metadata": m})
             for t, (o, m) in enumerate(zip(out_obs, out_meta, strict=True))]
    return Episode(steps=steps, labels=dict(sorted(new.items())))
