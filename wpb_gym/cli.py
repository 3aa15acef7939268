"""``wpb``: the command-line face of the benchmark.

This is the one module allowed to join ``wpb_gym`` and ``agents`` (later subcommands run
agents); the benchmark core never imports them.

Subcommands:

* ``wpb freeze`` — generate a frozen episode set (a folder with ``MANIFEST.json``).
* ``wpb inspect`` — summarise episode files or frozen sets: sizes, drift, and what the
  exact hindsight oracle can reach at each budget (U*(B) and the WRITE-only F1 bound).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from .frozen import FrozenSetError, freeze_set, open_frozen_set
from .generator import REGIMES, GeneratorConfig
from .jsonl import EpisodeFormatError, iter_jsonl
from .oracle import episode_oracle
from .tracks import TRACKS, check_track, track_costs
from .types import Episode
from .version import __version__

DEFAULT_BUDGETS = (1024, 10240, 102400, 1048576)


def _csv(kind: type, text: str) -> list[Any]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    try:
        return [kind(x) for x in items]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__} values, got {text!r}") from None


def _regimes(text: str) -> list[str]:
    names = _csv(str, text)
    unknown = [n for n in names if n not in REGIMES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown regime(s) {unknown}; known: {', '.join(REGIMES)}")
    return names


def _positive_ints(text: str) -> list[int]:
    values = _csv(int, text)
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def _override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    known = GeneratorConfig.__dataclass_fields__
    if key not in known or key in ("regime", "length"):
        options = ", ".join(k for k in known if k not in ("regime", "length"))
        raise argparse.ArgumentTypeError(f"unknown generator option {key!r}; options: {options}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


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


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _cmd_freeze(args: argparse.Namespace) -> int:
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
        _table(
            ["regime", "T", "episodes", "critical/ep", "breaking/ep", "bytes/step unpriv / priv", "file", "sha256"],
            rows,
        )
    )
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
    budgets = args.budgets
    try:
        tracks = [check_track(t) for t in args.tracks]
        sources = _episode_sources(args.paths)
    except (FileNotFoundError, FrozenSetError, ValueError) as exc:
        print(f"wpb inspect: error: {exc}", file=sys.stderr)
        return 2
    header = ["file", "regime", "T", "eps", "critical/ep", "track"]
    header += [f"U*@{_kb(b)}" for b in budgets] + [f"F1 bound@{_kb(b)}" for b in budgets]
    rows = []
    for _, files in sources:
        for path in files:  # frozen sets list files by name; rows are sorted below
            try:
                episodes = list(iter_jsonl(path))
            except EpisodeFormatError as exc:
                print(f"wpb inspect: error: {exc}", file=sys.stderr)
                return 2
            if not episodes:
                print(f"wpb inspect: error: {path}: no episodes in the file", file=sys.stderr)
                return 2
            for track in tracks:
                oracles = [episode_oracle(e, budgets, track) for e in episodes]
                utility = [np.mean([o.utility(b) for o in oracles]) for b in budgets]
                bound = [np.mean([o.f1_bounds[b].f1 for o in oracles]) for b in budgets]
                rows.append(
                    [
                        path.name if len(path.name) <= 48 else path.name[:45] + "...",
                        episodes[0].regime,
                        len(episodes[0]),
                        len(episodes),
                        f"{np.mean([len(e.critical_steps) for e in episodes]):.1f}",
                        track,
                    ]
                    + [f"{u:.1f}" for u in utility]
                    + [f"{f:.3f}" for f in bound]
                )
    rows.sort(key=lambda r: (str(r[1]), int(r[2]), r[5]))
    print("Exact hindsight oracle per file (means over episodes): U*(B) = best retained utility,")
    print("F1 bound = best F1 a WRITE-only policy can reach within B.")
    print(_table(header, rows))
    return 0


def _cmd_agents(args: argparse.Namespace) -> int:
    from agents.registry import registry_table  # the CLI is the one module that joins the packages

    print(registry_table())
    return 0


def _kb(b: int) -> str:
    return f"{b // 1024}KB" if b % 1024 == 0 else f"{b}B"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wpb", description="WritePolicyBench-Gym command line")
    parser.add_argument("--version", action="version", version=f"wpb {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    freeze = sub.add_parser("freeze", help="generate a frozen episode set (folder + MANIFEST.json)")
    freeze.add_argument("--regimes", type=_regimes, default=list(REGIMES), help="comma-separated (default: all four)")
    freeze.add_argument("--lengths", type=_positive_ints, default=[200], help="episode lengths T (default: 200)")
    freeze.add_argument(
        "--episodes", type=_int_at_least(1), default=10, help="episodes per (regime, length) (default: 10)"
    )
    freeze.add_argument("--seed", type=_int_at_least(0), default=0, help="set seed (default: 0)")
    freeze.add_argument("--out", required=True, help="output folder (must not exist unless --force)")
    freeze.add_argument("--set", type=_override, action="append", metavar="KEY=VALUE", help="generator option override")
    freeze.add_argument("--gzip", action="store_true", help="write .jsonl.gz files")
    freeze.add_argument("--force", action="store_true", help="replace an existing output folder")
    freeze.set_defaults(func=_cmd_freeze)

    inspect = sub.add_parser("inspect", help="summarise episode files / frozen sets and their oracle bounds")
    inspect.add_argument("paths", nargs="+", help="JSONL files (.jsonl, .jsonl.gz) or frozen-set folders")
    inspect.add_argument("--budgets", type=_positive_ints, default=list(DEFAULT_BUDGETS), help="bytes, comma-separated")
    inspect.add_argument("--tracks", type=lambda s: _csv(str, s), default=list(TRACKS), help="comma-separated tracks")
    inspect.set_defaults(func=_cmd_inspect)

    agents = sub.add_parser("agents", help="list the registered agents (name, aliases, track, kind, parameters)")
    agents.set_defaults(func=_cmd_agents)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
