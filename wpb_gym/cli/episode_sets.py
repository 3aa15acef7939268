"""``wpb freeze``, ``wpb episodes from-events`` and ``wpb inspect``: making episode sets and
looking into them."""

from __future__ import annotations

import json
import sys
import zlib
from functools import partial
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ..core.checks import InputError
from ..core.setting_values import (
    MAX_LENGTH,
    budget_text,
    input_error,
    parse_bool,
    parse_float,
    parse_int,
    parse_ints,
    parse_names,
    parse_path,
    parse_text,
    underflows,
)
from ..core.tracks import TRACKS, track_costs
from ..core.types import Episode
from ..core.version import __version__
from ..episodes.frozen import FrozenSetError, freeze_set, open_frozen_set
from ..episodes.generators.paper import PAPER_REGIMES, GeneratorConfig
from ..episodes.generators.queries import BREAKING_KINDS, QueryTierConfig
from ..episodes.generators.regimes import ALL_REGIMES, RegimeConfig, make_config
from ..episodes.jsonl import iter_jsonl
from ..evaluation.reports.markdown import markdown_text
from ..evaluation.run_folder import check_folder_path
from ..scoring.oracle import episode_oracle
from ..scoring.queries import queried_state_bytes
from .eval_settings import BUDGETS, TRACKS_SETTING
from .inputs import reading
from .settings import CommandSettings, Setting, Settings, switch


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A padded Markdown table; its cells (file names, regime names from the files) are written
    through ``markdown_text``, so none can end a row or open a cell."""
    cells = [[markdown_text(h) for h in header]] + [[markdown_text(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


class _FreezeStats:
    """Progress bar and per-file statistics, gathered from the episodes as they are written."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], dict[str, list[float]]] = {}

    def __call__(self, stream: Iterable[Episode], total: int, config: RegimeConfig) -> Iterator[Episode]:
        from tqdm import tqdm

        stats = self.rows.setdefault(
            (config.regime, config.length),
            {"critical": [], "breaking": [], "queries": [], "queried_state": [], **{t: [] for t in TRACKS}},
        )
        label = f"freeze {config.regime} T={config.length}"
        for episode in tqdm(stream, total=total, desc=label, unit="ep", leave=False, file=sys.stderr):
            stats["critical"].append(len(episode.critical_steps))
            stats["breaking"].append(_breaking_changes(episode))
            stats["queries"].append(len(episode.labels.get("queries", ())))
            stats["queried_state"].append(queried_state_bytes(episode))
            for track in TRACKS:
                stats[track].append(float(track_costs(episode, track).mean()))
            yield episode


def _breaking_changes(episode: Episode) -> int:
    """The episode's breaking changes: listed in its labels (``breaking_changes``), or for the
    query tier counted among its changes (``change_kinds``; reverts not counted)."""
    labels = episode.labels
    if "breaking_changes" in labels:
        return len(labels["breaking_changes"])
    return sum(1 for _, kind in labels.get("change_kinds", ()) if kind in BREAKING_KINDS)


def _cmd_freeze(args: Settings) -> int:
    check_folder_path(Path(args.out))
    overrides = dict(args.set or [])
    for regime in args.regimes:  # each file's generator options, named as the user gave them
        for length in args.lengths:
            try:
                make_config(regime, length=length, **overrides)
            except ValueError as exc:
                message = str(exc).removeprefix("GeneratorConfig.").removeprefix("QueryTierConfig.")
                given = "" if args.origin_of("set") == "default" else f" with the options of {args.origin_of('set')}"
                print(f"wpb freeze: error: regime {regime}, length {length}{given}: {message}", file=sys.stderr)
                return 2
    stats = _FreezeStats()
    try:
        frozen = freeze_set(
            args.out,
            args.regimes,
            args.lengths,
            args.episodes,
            args.seed,
            overrides=overrides,
            compress=args.gzip,
            force=args.force,
            progress=stats,
        )
    except (FileExistsError, ValueError) as exc:
        print(f"wpb freeze: error: {exc}", file=sys.stderr)
        return 2
    # The query tier's files also say how many queries their episodes ask (a column the other sets lack).
    queried = any(np.mean(row["queries"]) > 0 for row in stats.rows.values())
    rows = []
    for f in sorted(frozen.files, key=lambda f: (args.regimes.index(f.regime), f.length)):
        row = stats.rows[(f.regime, f.length)]
        asks = np.mean(row["queries"]) > 0
        queries = [f"{np.mean(row['queries']):.0f}" if asks else "",
                   f"{np.mean(row['queried_state']) / 1024:.0f} KB" if asks else ""] if queried else []
        rows.append(
            [
                f.regime,
                f.length,
                f.episodes,
                f"{np.mean(row['critical']):.1f}",
                f"{np.mean(row['breaking']):.1f}",
                *queries,
                f"{np.mean(row['unprivileged']):.0f} / {np.mean(row['privileged']):.0f}",
                f"{f.path.stat().st_size / 1024:.0f} KB",
                f.sha256[:12],
            ]
        )
    print(f"Frozen set {frozen.root} ({frozen.total_episodes} episodes, seed {args.seed}, wpb_gym {__version__})")
    # Queried state: what a checkpoint's queries need memory to hold (a budget is a fraction of it).
    header = ["regime", "T", "episodes", "critical/ep", "breaking/ep",
              *(["queries/ep", "queried state"] if queried else [])]
    print(markdown_table([*header, "bytes/step unpriv / priv", "file", "sha256"], rows))
    return 0


def _cmd_episodes_from_events(args: Settings) -> int:
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
            warmup=args.warmup,
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
    print(markdown_table(list(rows[0]), [list(r.values()) for r in rows]))
    for f in frozen.files:
        print(f"  {f.path.name}: {f.episodes} episodes, sha256 {f.sha256[:12]}")
    return 0


def _cmd_episodes_add_queries(args: Settings) -> int:
    from ..episodes.real.queries import RealQueryConfig, add_queries_to_set

    check_folder_path(Path(args.out))
    try:
        config = RealQueryConfig(**dict(args.set or []))
        frozen = add_queries_to_set(args.episodes, args.out, config, args.seeds, compress=args.gzip, force=args.force)
    except (FileExistsError, FileNotFoundError, ValueError) as exc:
        message = str(exc).removeprefix("RealQueryConfig.")
        print(f"wpb episodes add-queries: error: {message}", file=sys.stderr)
        return 2
    print(f"Frozen set {frozen.root} ({frozen.total_episodes} episodes with queries)")
    for f in frozen.files:
        print(f"  {f.path.name}: {f.episodes} episodes of {f.regime}, T={f.length}, sha256 {f.sha256[:12]}")
    return 0


def _real_query_override(value: Any, where: str) -> tuple[str, Any]:
    from ..episodes.real.queries import RealQueryConfig

    key, parsed = _key_value(value, where)
    known = list(RealQueryConfig.__dataclass_fields__)
    if key not in known:
        raise input_error(where, f"unknown query-process option {key!r}; options: {', '.join(known)}")
    return key, parsed


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


def _cmd_inspect(args: Settings) -> int:
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
    print("a stream-only policy cannot tell (endpoint first sightings, and repeats whose change does not show);")
    print("decidable = the F1 bound keeping only the others (wpb_gym.evaluation.reports.decidability).")
    print(markdown_table(header, rows))
    return 0


def _override(value: Any, where: str) -> tuple[str, Any]:
    """A generator option: ``KEY=VALUE`` text (VALUE read as JSON, else text) or a (key, value) pair."""
    key, parsed = _key_value(value, where)
    every = (*GeneratorConfig.__dataclass_fields__, *QueryTierConfig.__dataclass_fields__)
    known = [k for k in dict.fromkeys(every) if k not in ("regime", "length")]
    if key not in known:
        raise input_error(where, f"unknown generator option {key!r}; options: {', '.join(known)}")
    return key, parsed


def _key_value(value: Any, where: str) -> tuple[str, Any]:
    """``KEY=VALUE`` text (VALUE read as JSON, else text) or a (key, value) pair."""
    if isinstance(value, tuple) and len(value) == 2:
        key, parsed = value
    elif isinstance(value, str) and "=" in value:
        key, raw = value.split("=", 1)
        if underflows(raw):
            raise input_error(where, f"{value!r}: {raw.strip()} is too small to tell from 0")
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            parsed = raw
    else:
        raise input_error(where, f"expected KEY=VALUE, got {value!r}")
    return key, parsed


def _share(value: Any, where: str) -> float:
    share = parse_float(value, where, 0.0, 1.0)
    if share in (0.0, 1.0):
        raise input_error(where, f"expected a share strictly between 0 and 1, got {value!r}")
    return share


FREEZE = CommandSettings(
    "wpb freeze",
    (
        Setting("regimes", partial(parse_names, known=ALL_REGIMES), "comma-separated", default=list(PAPER_REGIMES)),
        Setting("lengths", partial(parse_ints, minimum=1, maximum=MAX_LENGTH), "episode lengths T", default=[200]),
        Setting("episodes", partial(parse_int, minimum=1), "episodes per (regime, length)", default=10),
        Setting("seed", partial(parse_int, minimum=0), "set seed", default=0),
        Setting(
            "set",
            _override,
            "generator option override (repeat for several; in a config, a mapping)",
            many=True,
            repeat=True,
            pairs=True,
            metavar="KEY=VALUE",
        ),
        switch("gzip", "write .jsonl.gz files"),
        Setting("out", parse_path, "output folder (must not exist unless --force)", required=True, in_config=False),
        switch("force", "replace an existing output folder", in_config=False),
    ),
)

FROM_EVENTS = CommandSettings(
    "wpb episodes from-events",
    (
        Setting(
            "events", parse_path, "the change-event log (.jsonl or .jsonl.gz)", positional=True, required=True
        ),
        Setting("source", parse_text, "the API's name; the regime is real:SOURCE", required=True),
        Setting("length", partial(parse_int, minimum=1), "steps per episode, warm-up included", default=200),
        Setting(
            "warmup",
            parse_bool,
            "open each episode with an unscored warm-up showing the state before the window of each endpoint it "
            "changes (--no-warmup: change events only)",
            default=True,
            switch=True,
        ),
        Setting(
            "windows",
            parse_text,
            "periods NAME=START..END (UTC days, inclusive, either end may be empty), comma-separated and not "
            "overlapping, e.g. train=..2021-06-30,heldout=2021-07-01..; 'auto': train, then heldout = the "
            "last --heldout-fraction of the change events",
            default="auto",
        ),
        Setting(
            "heldout_fraction",
            _share,
            "share of change events held out by --windows auto, in (0, 1)",
            default=0.3,
        ),
        Setting(
            "stride",
            partial(parse_int, minimum=1),
            "change events between episode starts (default: each episode starts where the one before ended)",
        ),
        Setting(
            "min_critical", partial(parse_int, minimum=0), "leave out windows with fewer critical steps", default=1
        ),
        Setting(
            "revert_window_days",
            partial(parse_float, minimum=0.0),
            "a breaking change reverted within this many days is not critical",
            default=30.0,
        ),
        switch("count_reverted", "every breaking change is critical, reverted or not"),
        Setting(
            "priority_correlation",
            partial(parse_float, minimum=0.0, maximum=1.0),
            "latent correlation of the privileged hint",
            default=0.8,
        ),
        Setting("seed", partial(parse_int, minimum=0), "seed of the priority hint", default=0),
        switch("gzip", "write .jsonl.gz files"),
        Setting("out", parse_path, "output folder (must not exist unless --force)", required=True, in_config=False),
        switch("force", "replace an existing output set", in_config=False),
    ),
)

ADD_QUERIES = CommandSettings(
    "wpb episodes add-queries",
    (
        Setting("episodes", parse_path, "a real-drift set (wpb episodes from-events) or one of its files",
                positional=True, required=True),
        Setting("seeds", partial(parse_ints, minimum=0), "query seeds: each episode once per seed", default=[0]),
        Setting(
            "set",
            _real_query_override,
            "query-process option (repeat for several; in a config, a mapping)",
            many=True,
            repeat=True,
            pairs=True,
            metavar="KEY=VALUE",
        ),
        switch("gzip", "write .jsonl.gz files"),
        Setting("out", parse_path, "output folder (must not exist unless --force)", required=True, in_config=False),
        switch("force", "replace an existing output set", in_config=False),
    ),
)

INSPECT = CommandSettings(
    "wpb inspect",
    (
        Setting(
            "paths",
            parse_path,
            "JSONL files (.jsonl, .jsonl.gz) or frozen-set folders",
            positional=True,
            many=True,
            required=True,
        ),
        BUDGETS,
        TRACKS_SETTING,
    ),
)


def add_commands(sub: Any) -> None:
    """Add freeze, episodes and inspect to the ``wpb`` subcommands ``sub``."""
    freeze = sub.add_parser("freeze", help="generate a frozen episode set (folder + MANIFEST.json)")
    FREEZE.add_to(freeze)
    freeze.set_defaults(func=_cmd_freeze, prog=freeze.prog, settings=FREEZE)

    episodes = sub.add_parser("episodes", help="episode sets from other sources (real API drift)")
    episodes_sub = episodes.add_subparsers(dest="action", required=True)
    from_events = episodes_sub.add_parser(
        "from-events",
        help="cut a change-event log (wpb ingest openapi) into a frozen set of real episodes, one file per period",
    )
    FROM_EVENTS.add_to(from_events)
    from_events.set_defaults(func=_cmd_episodes_from_events, prog=from_events.prog, settings=FROM_EVENTS)

    add_queries = episodes_sub.add_parser(
        "add-queries",
        help="make real-drift episodes query-tier episodes: checkpoints and queries from generated, hidden traffic",
    )
    ADD_QUERIES.add_to(add_queries)
    add_queries.set_defaults(func=_cmd_episodes_add_queries, prog=add_queries.prog, settings=ADD_QUERIES)

    inspect = sub.add_parser("inspect", help="summarise episode files / frozen sets and their oracle bounds")
    INSPECT.add_to(inspect)
    inspect.set_defaults(func=_cmd_inspect, prog=inspect.prog, settings=INSPECT)
