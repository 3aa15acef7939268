"""Real drift with generated queries: the query tier's process over a real API's change feed.

``add_queries(episode, config, seed)`` takes an episode cut from a real change-event log
(``episodes.py``: a warm-up showing each endpoint it touches, then the change events) and
makes it a query-tier episode: ``ceil(T / checkpoint_interval)`` checkpoint steps, spread
evenly over the change events and the last at the end (so every episode of a set of length
``T`` has the same length), each ask ``queries_per_checkpoint`` queries, drawn by the query
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

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from ...core.checks import finite, require_int
from ...core.contracts import endpoint_family
from ...core.types import Episode, Step, frozen_instance
from ..frozen import FrozenSet, open_frozen_set, sha256_file, write_frozen_set
from ..generators.queries import query_episode_seed, query_labels
from ..generators.query_process import ProcessKnobs, QueryProcess, at_later_default
from ..jsonl import iter_jsonl, write_jsonl


@dataclass(frozen=True)
class RealQueryConfig:
    """The query process's knobs over a real feed: the tiers' process, with checkpoints and
    bursts scaled to real-drift episodes of a few hundred steps."""

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
    integration_content: float = 0.0
    burst_content: float = 0.0
    recent_fact_prob: float = 0.5
    version_fact_prob: float = 0.4

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not finite(value):
                raise ValueError(f"RealQueryConfig.{f.name}: expected a finite number, got {value!r}")
            if value < 0:
                raise ValueError(f"RealQueryConfig.{f.name}: expected >= 0, got {value!r}")
        for name in ("migrating_share", "popularity_jump_prob", "recent_fact_prob", "version_fact_prob",
                     "integration_content", "burst_content"):
            if getattr(self, name) > 1:
                raise ValueError(f"RealQueryConfig.{name}: expected a probability in [0, 1], got {getattr(self, name)}")
        for name in ("checkpoint_interval", "queries_per_checkpoint", "migration_half_life"):
            if getattr(self, name) < (2 if name == "checkpoint_interval" else 1):
                raise ValueError(f"RealQueryConfig.{name}: expected >= {2 if name == 'checkpoint_interval' else 1}, "
                                 f"got {getattr(self, name)}")
        if self.migration_boost_max < self.migration_boost_min:
            raise ValueError("RealQueryConfig.migration_boost_max: expected >= migration_boost_min")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not at_later_default(k, v)}


assert {f.name for f in fields(RealQueryConfig)} >= set(ProcessKnobs.__annotations__)


def add_queries(episode: Episode, config: RealQueryConfig, seed: int) -> Episode:
    """``episode`` (cut from a real log, with its warm-up) with checkpoints and generated queries."""
    seed = require_int(seed, "seed")
    labels = episode.labels
    warmup = int(labels.get("warmup_steps", 0))
    observations, _ = episode.columns()
    source = str(labels.get("mode", "real:unknown")).removeprefix("real:")
    mode = f"real_queries:{source}"
    apis = list(dict.fromkeys(o["api"] for o in observations if isinstance(o, dict) and "api" in o))
    names = sorted({endpoint_family(api) for api in apis})
    family_of = [names.index(endpoint_family(api)) for api in apis]
    rng = np.random.default_rng(query_episode_seed(f"{mode}/{labels.get('episode_id')}", seed, 0))
    process = QueryProcess(config, rng, apis, family_of, names)
    breaking = set(labels.get("breaking_events", ()))

    out_obs: list[Any] = []
    out_meta: list[dict[str, Any]] = []
    shows: list[list[int]] = [[] for _ in apis]
    index = {api: i for i, api in enumerate(apis)}
    queries: list[list[Any]] = []
    checkpoints: list[int] = []
    changes = len(observations) - warmup
    n = -(-len(observations) // config.checkpoint_interval)  # ceil
    # After which change events the checkpoints come (the last one after the last event).
    after = {round((j + 1) * changes / n) for j in range(n - 1)} - {0, changes}
    seen = 0

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
            seen += 1
            if seen in after:
                checkpoint()
    while len(checkpoints) < n:  # the last, and any a short feed had no room for, at the end
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


def add_queries_to_set(source: str | os.PathLike[str], out_dir: str | os.PathLike[str], config: RealQueryConfig,
                       seeds: Sequence[int], *, compress: bool = False, force: bool = False) -> FrozenSet:
    """A frozen set of ``add_queries(episode, config, seed)`` for every episode of ``source`` (a set of
    real episodes, verified, or one episode file) and every seed: a file per file of ``source``."""
    source = Path(source)
    if Path(out_dir).exists() and not force:  # before the work, not after it
        raise FileExistsError(f"{out_dir} already exists (pass force=True / --force to replace it)")
    if source.is_dir():
        inputs = [(f.path, f.sha256) for f in open_frozen_set(source).files]
    elif source.is_file():
        inputs = [(source, sha256_file(source))]
    else:
        raise FileNotFoundError(f"{source}: no such episode file or frozen set")
    batches = []
    for path, digest in inputs:
        real = list(iter_jsonl(path))
        if not real:
            raise ValueError(f"{path}: holds no episodes")
        for k, episode in enumerate(real):
            if not str(episode.labels.get("mode", "")).startswith("real:"):
                raise ValueError(f"{path}: episode {k} is of regime {episode.labels.get('mode')!r}, not real drift "
                                 f"(wpb episodes from-events makes real-drift sets)")
        episodes = [add_queries(episode, config, seed) for episode in real for seed in seeds]
        modes = sorted({e.labels["mode"] for e in episodes})
        name = path.name.removesuffix(".gz").removesuffix(".jsonl") + (".jsonl.gz" if compress else ".jsonl")
        batches.append((name, path.name, digest, episodes, modes))
    lengths = sorted({len(e) for _, _, _, episodes, _ in batches for e in episodes})

    def write_files(folder: Path) -> dict[str, Any]:
        files = {}
        for name, origin, digest, episodes, modes in batches:
            files[name] = {
                "episodes": write_jsonl(folder / name, episodes),
                "generator": {"config": config.to_dict(), "from": origin, "from_sha256": digest,
                              "seeds": list(seeds), "source": "add-queries"},
                "length": max(len(e) for e in episodes),
                "regime": modes[0] if len(modes) == 1 else ",".join(modes),
                "seed": int(seeds[0]),
                "sha256": sha256_file(folder / name),
            }
        return files

    manifest = {
        "created_by": "wpb episodes add-queries",
        "lengths": lengths,
        "regimes": sorted({m for *_, modes in batches for m in modes}),
        "seed": int(seeds[0]),
        "total_episodes": sum(len(episodes) for _, _, _, episodes, _ in batches),
    }
    write_frozen_set(out_dir, write_files, manifest, force=force)
    return open_frozen_set(out_dir)
