"""``wpb freeze``, ``wpb episodes from-events`` and ``wpb inspect``: making episode sets and
looking into them."""

from __future__ import annotations

import argparse
import sys
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ..core.tracks import TRACKS, track_costs
from ..core.types import Episode
from ..core.version import __version__
from ..episodes.frozen import FrozenSetError, freeze_set, open_frozen_set
from ..episodes.generators.paper import PAPER_REGIMES, GeneratorConfig
from ..episodes.jsonl import iter_jsonl
from ..evaluation.run_folder import check_folder_path
from ..scoring.oracle import episode_oracle
from . import flags
from .eval_settings import DEFAULT_BUDGETS
from .inputs import (
    InputError,
    budget_text,
    reading,
)


class _FreezeStats:
    """Progress bar and per-file statistics, gathered from the episodes as they are written."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], dict[str, list[float]]] = {}

    def __call__(self, stream: Iterable[Episode], total: int, config: GeneratorConfig) -> Iterator[Episode]:
        from tqdm import tqdm

        stats = self.rows.setdefault(
            (config.regime, config.length), {"critical": [], "breaking": [], **{t: [] for t in TRACKS}}
        )
        label = f"freeze {config.regime} T={config.length}"
        for episode in tqdm(stream, total=total, desc=label, unit="ep", leave=False, file=sys.stderr):
            stats["critical"].append(len(episode.critical_steps))
            stats["breaking"].append(len(episode.labels.get("breaking_changes", ())))
            for track in TRACKS:
                stats[track].append(float(track_costs(episode, track).mean()))
            yield episode


def _cmd_freeze(args: argparse.Namespace) -> int:
    check_folder_path(Path(args.out))
    stats = _FreezeStats()
    try:
        frozen = freeze_set(
            args.out,
            args.regimes,
            args.lengths,
            args.episodes,
            args.seed,
            overrides=dict(args.set or []),
            compress=args.gzip,
            force=args.force,
            progress=stats,
        )
    except (FileExistsError, ValueError) as exc:
        print(f"wpb freeze: error: {exc}", file=sys.stderr)
        return 2
    rows = []
    for f in sorted(frozen.files, key=lambda f: (args.regimes.index(f.regime), f.length)):
        row = stats.rows[(f.regime, f.length)]
        rows.append(
            [
                f.regime,
                f.length,
                f.episodes,
                f"{np.mean(row['critical']):.1f}",
                f"{np.mean(row['breaking']):.1f}",
                f"{np.mean(row['unprivileged']):.0f} / {np.mean(row['privileged']):.0f}",
                f"{f.path.stat().st_size / 1024:.0f} KB",
                f.sha256[:12],
            ]
        )
    print(f"Frozen set {frozen.root} ({frozen.total_episodes} episodes, seed {args.seed}, wpb_gym {__version__})")
    print(
        flags.markdown_table(
            ["regime", "T", "episodes", "critical/ep", "breaking/ep", "bytes/step unpriv / priv", "file", "sha256"],
            rows,
        )
    )
    return 0


def _cmd_episodes_from_events(args: argparse.Namespace) -> int:
    from ..episodes.real.episodes import RealEpisodeOptions, episodes_from_events, parse_windows, period_summary

    check_folder_path(Path(args.out))
    if not Path(args.events).is_file():
        what = "is a folder" if Path(args.events).is_dir() else "no such file"
        raise InputError(f"{args.events}: {what}; expected a change-event log (.jsonl or .jsonl.gz)")
    cuts = []
    try:
        options = RealEpisodeOptions(
            source=args.source,
            length=args.length,
            stride=args.stride,
            revert_window_days=args.revert_window_days,
            count_reverted=args.count_reverted,
            min_critical=args.min_critical,
            priority_correlation=args.priority_correlation,
            seed=args.seed,
        )
        periods = None if args.windows == "auto" else parse_windows(args.windows)
        frozen = episodes_from_events(
            args.events,
            args.out,
            options,
            periods,
            heldout_fraction=args.heldout_fraction,
            compress=args.gzip,
            force=args.force,
            on_period=cuts.append,
        )
    except UnicodeDecodeError:
        raise InputError(f"{args.events}: not UTF-8 text; expected a change-event log") from None
    except (FileExistsError, FileNotFoundError, ValueError) as exc:
        print(f"wpb episodes from-events: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, EOFError, zlib.error) as exc:  # a .gz log that is not gzip, or is cut short
        raise InputError(f"{getattr(exc, 'filename', None) or args.events}: cannot read: {exc}") from None
    rows = period_summary(cuts)
    print(f"Frozen set {frozen.root} ({frozen.total_episodes} episodes of {options.regime}, T={options.length})")
    print(flags.markdown_table(list(rows[0]), [list(r.values()) for r in rows]))
    for f in frozen.files:
        print(f"  {f.path.name}: {f.episodes} episodes, sha256 {f.sha256[:12]}")
    return 0


def _episode_sources(paths: Sequence[str]) -> list[tuple[str, list[Path]]]:
    sources = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            frozen = open_frozen_set(path)
            sources.append((str(path), [f.path for f in frozen.files]))
        elif path.is_file():
            sources.append((str(path), [path]))
        else:
            raise FileNotFoundError(f"{path}: no such file or folder")
    return sources


def _cmd_inspect(args: argparse.Namespace) -> int:
    budgets, tracks = args.budgets, args.tracks
    try:
        sources = _episode_sources(args.paths)
    except (FileNotFoundError, FrozenSetError, ValueError) as exc:
        print(f"wpb inspect: error: {exc}", file=sys.stderr)
        return 2
    from ..evaluation.reports.decidability import decidability

    header = ["file", "regime", "T", "eps", "critical/ep", "track", "undecidable"]
    header += [f"U*@{budget_text(b)}" for b in budgets] + [f"F1 bound@{budget_text(b)}" for b in budgets]
    header += [f"decidable@{budget_text(b)}" for b in budgets]
    rows = []
    for _, files in sources:
        for path in files:  # frozen sets list files by name; rows are sorted below
            with reading(path):
                episodes = list(iter_jsonl(path))
            if not episodes:
                print(f"wpb inspect: error: {path}: no episodes in the file", file=sys.stderr)
                return 2
            for track in tracks:
                oracles = [episode_oracle(e, budgets, track) for e in episodes]
                utility = [np.mean([o.utility(b) for o in oracles]) for b in budgets]
                bound = [np.mean([o.f1_bounds[b].f1 for o in oracles]) for b in budgets]
                decided = [decidability(e, budgets, track) for e in episodes]
                undecidable = sum(d.undecidable for d in decided) / max(1, sum(d.critical for d in decided))
                reachable = [np.mean([d.decidable_bounds[b] for d in decided]) for b in budgets]
                rows.append(
                    [
                        path.name if len(path.name) <= 48 else path.name[:45] + "...",
                        episodes[0].regime,
                        len(episodes[0]),
                        len(episodes),
                        f"{np.mean([len(e.critical_steps) for e in episodes]):.1f}",
                        track,
                        f"{undecidable:.1%}",
                    ]
                    + [f"{u:.1f}" for u in utility]
                    + [f"{f:.3f}" for f in bound]
                    + [f"{f:.3f}" for f in reachable]
                )
    rows.sort(key=lambda r: (str(r[1]), int(r[2]), r[5]))
    print("Exact hindsight oracle per file (means over episodes): U*(B) = best retained utility,")
    print("F1 bound = best F1 a WRITE-only policy can reach within B; undecidable = share of critical steps")
    print("a stream-only policy cannot tell (endpoint first sightings); decidable = the F1 bound keeping only")
    print("the others (wpb_gym.evaluation.reports.decidability).")
    print(flags.markdown_table(header, rows))
    return 0


def add_commands(sub: Any) -> None:
    """Add freeze, episodes, inspect to the ``wpb`` subcommands ``sub``."""
    freeze = sub.add_parser("freeze", help="generate a frozen episode set (folder + MANIFEST.json)")
    freeze.add_argument(
        "--regimes", type=flags.regimes, default=list(PAPER_REGIMES), help="comma-separated (default: the paper's four)"
    )
    freeze.add_argument("--lengths", type=flags.positive_ints, default=[200], help="episode lengths T (default: 200)")
    freeze.add_argument(
        "--episodes", type=flags.int_at_least(1), default=10, help="episodes per (regime, length) (default: 10)"
    )
    freeze.add_argument("--seed", type=flags.int_at_least(0), default=0, help="set seed (default: 0)")
    freeze.add_argument("--out", type=flags.path, required=True, help="output folder (must not exist unless --force)")
    freeze.add_argument(
        "--set", type=flags.generator_override, action="append", metavar="KEY=VALUE", help="generator option override"
    )
    freeze.add_argument("--gzip", action="store_true", help="write .jsonl.gz files")
    freeze.add_argument("--force", action="store_true", help="replace an existing output folder")
    freeze.set_defaults(func=_cmd_freeze, prog=freeze.prog)

    episodes = sub.add_parser("episodes", help="episode sets from other sources (real API drift)")
    episodes_sub = episodes.add_subparsers(dest="action", required=True)
    from_events = episodes_sub.add_parser(
        "from-events",
        help="cut a change-event log (wpb ingest openapi) into a frozen set of real episodes, one file per period",
    )
    from_events.add_argument("events", type=flags.path, help="the change-event log (.jsonl or .jsonl.gz)")
    from_events.add_argument("--source", required=True, help="the API's name; the regime is real:SOURCE")
    from_events.add_argument(
        "--out", type=flags.path, required=True, help="output folder (must not exist unless --force)"
    )
    from_events.add_argument(
        "--length", type=flags.int_at_least(1), default=200, help="change events per episode (200)"
    )
    from_events.add_argument(
        "--windows",
        default="auto",
        help="periods NAME=START..END (UTC days, inclusive, either end may be empty), comma-separated and not "
        "overlapping, e.g. train=..2021-06-30,heldout=2021-07-01..; 'auto' (default): train, then heldout = the "
        "last --heldout-fraction of the change events",
    )
    from_events.add_argument(
        "--heldout-fraction", type=float, default=0.3, help="share of change events held out by --windows auto (0.3)"
    )
    from_events.add_argument(
        "--stride", type=flags.int_at_least(1), help="events between episode starts (default: --length, no overlap)"
    )
    from_events.add_argument(
        "--min-critical", type=flags.int_at_least(0), default=1, help="leave out windows with fewer critical steps (1)"
    )
    from_events.add_argument(
        "--revert-window-days",
        type=float,
        default=30.0,
        help="a breaking change reverted within this many days is not critical (30)",
    )
    from_events.add_argument(
        "--count-reverted", action="store_true", help="every breaking change is critical, reverted or not"
    )
    from_events.add_argument(
        "--priority-correlation", type=float, default=0.8, help="latent correlation of the privileged hint (0.8)"
    )
    from_events.add_argument("--seed", type=flags.int_at_least(0), default=0, help="seed of the priority hint (0)")
    from_events.add_argument("--gzip", action="store_true", help="write .jsonl.gz files")
    from_events.add_argument("--force", action="store_true", help="replace an existing output set")
    from_events.set_defaults(func=_cmd_episodes_from_events, prog=from_events.prog)

    inspect = sub.add_parser("inspect", help="summarise episode files / frozen sets and their oracle bounds")
    inspect.add_argument(
        "paths", type=flags.path, nargs="+", help="JSONL files (.jsonl, .jsonl.gz) or frozen-set folders"
    )
    inspect.add_argument(
        "--budgets",
        type=flags.budgets,
        default=list(DEFAULT_BUDGETS),
        help="comma-separated, e.g. 1KB,10KB (1KB = 1024 B)",
    )
    inspect.add_argument("--tracks", type=flags.tracks, default=list(TRACKS), help="comma-separated tracks")
    inspect.set_defaults(func=_cmd_inspect, prog=inspect.prog)
