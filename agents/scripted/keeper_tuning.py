"""Tune the keepers' parameters per query tier and budget on training episodes.

    python -m agents.scripted.keeper_tuning --tiers queries_medium,queries_hard \\
        --budgets 1KB,10KB,100KB --seed 0 --episodes 8 --jobs 2

``--from-file FILE`` tunes on a file's episodes instead, keyed by their regime (for real
drift with generated queries: the training period's file of ``wpb episodes add-queries``).

For each keeper, tier and budget it searches the keeper's parameters by coordinate ascent
(each parameter over its grid in ``GRIDS``, the others held, two rounds, starting from the
constructor's values) for the highest mean query accuracy over episodes ``0..episodes-1`` of
the generated set ``(tier, seed)``, and writes the best to
``agents/scripted/tuned_keepers.json`` (merged into what it holds), which the keepers read
(``agents.scripted.keeper_params``). Training episodes are never the evaluation's: the
evaluations of the query tier use other seeds (``docs/query-tier.md``).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from wpb_gym.core.atomic_files import write_atomic
from wpb_gym.core.setting_values import parse_budget
from wpb_gym.core.types import Episode
from wpb_gym.episodes.generators.queries import QUERY_REGIMES, generate_query_episode, query_config
from wpb_gym.episodes.sources import read_episodes
from wpb_gym.evaluation.runner import run_episode

from .keep_latest import (
    KeepLatestBreaking,
    KeepLatestFamily,
    KeepLatestLFU,
    KeepLatestLRU,
    KeepLatestMigration,
    KeepLatestTraffic,
)
from .keeper_params import TUNED_FILE

KEEPERS = {cls.name: cls for cls in (KeepLatestLRU, KeepLatestLFU, KeepLatestTraffic, KeepLatestBreaking,
                                      KeepLatestFamily, KeepLatestMigration)}
GRIDS: dict[str, tuple[Any, ...]] = {
    "decay": (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98),
    "traffic_weight": (0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0),
    "break_boost": (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0),
    "hold": (0, 1, 2, 3, 4, 5, 6),
    "window": (1, 2, 3, 4, 5, 6),
    "size_aware": (True, False),
    "prior": (0.0, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0),
    "migration_weight": (0.1, 0.3, 1.0, 3.0, 10.0, 30.0),
    "lags": (2, 3, 4, 6, 8),
}
ROUNDS = 2


@functools.lru_cache(maxsize=64)
def _episode(source: str, seed: int, index: int) -> Episode:
    """Episode ``index`` of a tier's generated set ``(source, seed)``, or of the episode file ``source``."""
    if source in QUERY_REGIMES:
        return generate_query_episode(query_config(source), seed, index)
    return _file(source)[index]


@functools.lru_cache(maxsize=4)
def _file(path: str) -> list[Episode]:
    return read_episodes(path)


def _accuracy(job: tuple[str, dict[str, Any], str, int, int, int]) -> float:
    keeper, params, source, seed, index, budget = job
    episode = _episode(source, seed, index)
    agent = KEEPERS[keeper](**params, tuned=False)
    run = run_episode(agent, episode, budget, "unprivileged", record_actions=False)
    return run.queries.accuracy


def tune(keeper: str, tier: str, budget: int, seed: int, episodes: int, pool: ProcessPoolExecutor,
         log: Any = None) -> dict[str, Any]:
    """The best parameters found for ``keeper`` on ``tier`` at ``budget`` and their training accuracy."""
    cls = KEEPERS[keeper]
    start = cls(tuned=False)
    params = {name: getattr(start, name) for name in cls._param_names}
    seen: dict[tuple, float] = {}

    def score(candidate: dict[str, Any]) -> float:
        key = tuple(sorted(candidate.items()))
        if key not in seen:
            jobs = [(keeper, candidate, tier, seed, i, budget) for i in range(episodes)]
            seen[key] = float(np.mean(list(pool.map(_accuracy, jobs))))
            if log is not None:
                print(f"  {keeper} {tier} {budget}: {candidate} -> {seen[key]:.4f}", file=log, flush=True)
        return seen[key]

    best = score(params)
    for _ in range(ROUNDS):
        improved = False
        for name in cls._param_names:
            for value in GRIDS[name]:
                candidate = {**params, name: value}
                accuracy = score(candidate)
                if accuracy > best + 1e-12:
                    best, params, improved = accuracy, candidate, True
        if not improved:
            break
    return {"params": params, "accuracy": round(best, 6), "seed": seed, "episodes": episodes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.scripted.keeper_tuning", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiers", default=",".join(QUERY_REGIMES), help="comma-separated query tiers")
    parser.add_argument("--from-file", default=None,
                        help="tune on this file's episodes instead (e.g. a real-drift set's train.jsonl made by wpb "
                             "episodes add-queries), keyed by their regime")
    parser.add_argument("--budgets", default="1KB,10KB,100KB", help="comma-separated budgets")
    parser.add_argument("--keepers", default=",".join(KEEPERS), help="comma-separated keepers")
    parser.add_argument("--seed", type=int, default=0, help="the training set's seed")
    parser.add_argument("--episodes", type=int, default=8, help="training episodes per tier")
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    parser.add_argument("--out", default=str(Path(__file__).with_name(TUNED_FILE)), help="the JSON file to merge into")
    args = parser.parse_args(argv)
    tiers = args.tiers.split(",")
    keepers = args.keepers.split(",")
    if args.from_file is not None:
        try:
            episodes = read_episodes(args.from_file)
        except (OSError, ValueError) as exc:
            parser.error(str(exc))
        modes = sorted({str(e.regime) for e in episodes})
        if len(modes) != 1 or not any(q for e in episodes for q in e.labels.get("queries", ())[:1]):
            parser.error(f"{args.from_file}: expected query-tier episodes of one regime, got {modes}")
        tiers = [args.from_file]
        args.episodes = min(args.episodes, len(episodes))
        keys = {args.from_file: modes[0]}
    else:
        keys = {tier: tier for tier in tiers}
    for name, known in (("tier", tuple(keys) if args.from_file else QUERY_REGIMES), ("keeper", tuple(KEEPERS))):
        for given in tiers if name == "tier" else keepers:
            if given not in known:
                parser.error(f"unknown {name} {given!r}; expected one of {', '.join(known)}")
    budgets = [parse_budget(b, "--budgets") for b in args.budgets.split(",")]
    out = Path(args.out)
    with ProcessPoolExecutor(args.jobs) as pool:
        for tier in tiers:
            for budget in budgets:
                for keeper in keepers:
                    entry = tune(keeper, tier, budget, args.seed, args.episodes, pool, log=sys.stderr)
                    if args.from_file:
                        entry.update(seed=None, file=Path(args.from_file).name)
                    # Read what the file holds now, not at the start: another tuning may have
                    # merged its entries since.
                    table = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
                    table.setdefault(keeper, {}).setdefault(keys[tier], {})[str(budget)] = entry
                    print(f"{keeper} {keys[tier]} {budget}: {entry['params']} accuracy {entry['accuracy']:.4f}",
                          flush=True)
                    write_atomic(out, json.dumps(table, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
