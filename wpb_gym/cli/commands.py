"""``wpb``: the command-line face of the benchmark.

This is the one module allowed to join ``wpb_gym`` and ``agents`` (later subcommands run
agents); the benchmark core never imports them.

Subcommands:

* ``wpb freeze`` — generate a frozen episode set (a folder with ``MANIFEST.json``).
* ``wpb inspect`` — summarise episode files or frozen sets: sizes, drift, and what the
  exact hindsight oracle can reach at each budget (U*(B) and the WRITE-only F1 bound).
* ``wpb ingest openapi`` — turn the git history of an OpenAPI description into a change-event log.
* ``wpb seeds`` — a learned agent over its training seeds: IQM, lifts, probability of
  improvement and optimality gap with bootstrap intervals (``wpb_gym.evaluation.seed_stats``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ..core.file_names import name_part
from ..core.policy import POLICY_TRACKS
from ..core.tracks import TRACKS, track_costs
from ..core.types import Episode
from ..core.version import __version__
from ..episodes.frozen import FrozenSetError, freeze_set, open_frozen_set
from ..episodes.generators.paper import PAPER_REGIMES, REGIMES, GeneratorConfig
from ..episodes.jsonl import EpisodeFormatError, iter_jsonl
from ..evaluation.run_folder import check_folder_path
from ..scoring.oracle import episode_oracle
from .eval_settings import DEFAULT_BUDGETS, EVAL_DEFAULTS, eval_settings, run_limits
from .inputs import (
    MAX_LENGTH,
    InputError,
    OneLineParser,
    budget_text,
    check_env_kwargs,
    check_policies,
    did_you_mean,
    flag_type,
    one_line,
    parse_budget,
    parse_budgets,
    parse_ints,
    parse_names,
    parse_path,
    parse_seconds,
    read_episode_source,
    read_run,
    reading,
)

__all__ = ["DEFAULT_BUDGETS", "EVAL_DEFAULTS", "build_parser", "main"]


_regimes = flag_type(parse_names, REGIMES)
_seconds = flag_type(parse_seconds)
_positive_ints = flag_type(parse_ints, 1, MAX_LENGTH)
_names = flag_type(parse_names)
_tracks = flag_type(parse_names, TRACKS)
_budgets = flag_type(parse_budgets)
_path = flag_type(parse_path)


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
        _table(
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
    print(_table(list(rows[0]), [list(r.values()) for r in rows]))
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
    from ..evaluation.decidability import decidability

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
    print("the others (wpb_gym.evaluation.decidability).")
    print(_table(header, rows))
    return 0


def _eval_config(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: defaults, then the YAML file (if any), then the command line."""
    return eval_settings(args.config, {key: getattr(args, key, None) for key in EVAL_DEFAULTS})


def _policy_specs(names: Sequence[Any], isolate: bool = False, limits: Any = None) -> list[Any]:
    """Grid policies from agent entries: a name or alias, ``NAME:PATH`` for an agent read from a file
    (``sb3:MODEL.zip``, ``epsilon_greedy:learner.json``; ``LABEL=NAME:PATH`` to name it),
    or (in YAML) a mapping ``{name: ..., label: ..., <parameter>: <value>...}`` for an agent with
    other parameters. Each agent is built once to check its parameters: here, or, with
    ``isolate``, in its own process (an agent's code never runs in this one)."""
    from functools import partial

    from agents.registry import agent_entry, make_agent  # the CLI joins the packages

    from ..evaluation.grid import PolicySpec

    specs = []
    for item in names:
        if isinstance(item, dict):
            params = dict(item)
            name, label = params.pop("name", None), params.pop("label", None)
            if not isinstance(name, str):
                raise InputError(f"an agent given as a mapping needs 'name': {item!r}")
        elif isinstance(item, str):
            name, label, params = item, None, {}
            prefix, sep, rest = item.partition("=")
            if sep and ":" in rest and prefix:
                name, label = rest, prefix
        else:
            raise InputError(f"an agent is a name or a mapping with 'name', got {item!r}")
        head, colon, path = name.partition(":")
        if colon:  # NAME:PATH, an agent read from a file: an SB3 model or a trained learner
            if not path:
                raise InputError(f"agent {item!r}: {head}:PATH needs the path of a file")
            params["path"] = path
            name, label = head, label or f"{head}:{Path(path).stem}"
        try:
            entry = agent_entry(name)
            factory = partial(make_agent, entry.name, **params)
            # Isolated: the registry's word on the track (a model's is its file's, read in its process).
            track = (entry.track if entry.track in POLICY_TRACKS else None) if isolate else factory().track
        except (KeyError, TypeError, ValueError, OSError) as error:
            hint = did_you_mean(name, _agent_names()) if isinstance(error, KeyError) else ""
            raise InputError(f"agent {item!r}: {error.args[0] if error.args else error}{hint}") from None
        if label is None:
            label = entry.name + (f"({', '.join(f'{k}={v!r}' for k, v in params.items())})" if params else "")
        specs.append(PolicySpec(str(label), factory, track or "unprivileged", only_own_track=entry.kind == "sb3"))
    labels = [spec.label for spec in specs]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise InputError(f"agents {repeated} appear twice; give one of them a 'label' in the config")
    if isolate:
        from dataclasses import replace

        from ..evaluation.grid import isolated_info
        from ..evaluation.referee import PolicyError

        try:
            infos = isolated_info(specs, limits)
        except PolicyError as error:
            last = error.message.strip().splitlines()[-1]  # the exception, not the traceback
            raise InputError(f"agent {error.policy!r}: {one_line(last)}") from None
        specs = [replace(spec, track=info["track"]) for spec, info in zip(specs, infos, strict=True)]
    return specs


def _agent_names() -> list[str]:
    from agents.registry import list_agents

    return [name for entry in list_agents() for name in (entry.name, *entry.aliases)]


def _ref_name(ref: Any) -> str:
    return f"{name_part(ref.mode)}__T{ref.steps}__{ref.index}"  # the regime comes from the data


def _cmd_eval(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..evaluation.grid import ROW_COLUMNS, generated_refs, given_refs, row_key, run_grid, skipped
    from ..evaluation.referee import PolicyError
    from ..evaluation.report import run_metadata, write_atomic
    from ..evaluation.run_folder import (
        RESULTS,
        checkpoint_folder,
        discard,
        episodes_digest,
        other_checkpoints,
        publish,
        read_checkpoints,
        staging_folder,
        write_run,
    )

    # Everything is checked before --out is touched: a typo never costs an earlier run.
    config = _eval_config(args)
    out = Path(args.out)
    check_folder_path(out)
    if (out / RESULTS).exists() and not (out / RESULTS).is_file():
        raise InputError(f"{out / RESULTS} is not a file; expected the results of an earlier run or nothing")
    if (out / RESULTS).exists() and not args.force:
        raise InputError(
            f"{out} already holds {RESULTS}; pass --force to replace it (kept until the new run is complete)"
        )
    limits = run_limits(config)
    policies = _policy_specs(config["agents"], config["isolate"], limits)
    recorded = {k: v for k, v in config.items() if k != "jobs"}  # jobs never changes results
    if config["episodes"] is not None:
        episodes = read_episode_source(config["episodes"])
        try:
            refs = given_refs(episodes, str(config["episodes"]))
        except ValueError as error:
            raise InputError(str(error)) from None
        # The checkpoint key (the config hash) covers what the episodes hold, not only where they
        # are: an edited file never mixes its new rows with checkpointed old ones.
        recorded["episodes_sha256"] = episodes_digest(episodes)
    else:
        refs = generated_refs(config["regimes"], config["lengths"], config["episodes_per_condition"], config["seed"])
    notes = skipped(policies, config["tracks"])
    for note in notes:
        print(f"note: {note}", file=sys.stderr)

    def progress(results, total):
        return tqdm(results, total=total, desc="episodes", unit="ep", file=sys.stderr, disable=args.quiet)

    run = run_metadata(recorded, notes, __version__)
    partial = checkpoint_folder(out, run["config_hash"])
    names = {_ref_name(ref) for ref in refs}
    done: dict[str, list[dict[str, Any]]] = {}
    if args.resume and partial.is_dir():
        done = {k: v for k, v in read_checkpoints(partial, ROW_COLUMNS).items() if k in names}
        print(f"resuming: {len(done)} of {len(refs)} episodes already done", file=sys.stderr)
    elif args.resume:
        others = ", ".join(p.name for p in other_checkpoints(out, run["config_hash"]))
        why = f": its checkpoints ({others}) are of other settings or other episode contents" if others else ""
        print(
            f"note: nothing to resume in {out} for these settings and episodes{why}; starting afresh", file=sys.stderr
        )
    elif partial.is_dir():
        shutil.rmtree(partial)
    todo = [ref for ref in refs if _ref_name(ref) not in done]

    def checkpoint(ref, chunk):
        write_atomic(partial / f"{_ref_name(ref)}.json", json.dumps(chunk))

    try:
        rows = run_grid(
            todo,
            policies,
            config["budgets"],
            config["tracks"],
            jobs=config["jobs"],
            progress=progress,
            on_episode_done=checkpoint,
            isolate=config["isolate"],
            limits=limits,
        )
    except PolicyError as error:  # an agent failed: the checkpoints stay for --resume
        print(f"wpb eval: {error}", file=sys.stderr)
        return 1
    stopped = [row for row in rows if row.get("error")]
    if stopped:
        agents = sorted({row["policy"] for row in stopped})
        print(
            f"warning: {len(stopped)} runs of {', '.join(agents)} were stopped by a limit or diverged; "
            "see the 'error' column of results.csv and leaderboard.md",
            file=sys.stderr,
        )
    if done:
        rows = sorted(rows + [row for chunk in done.values() for row in chunk], key=row_key)
    # The new run is written beside the old one and replaces it only once complete.
    staging = staging_folder(out)
    try:
        pictures = write_run(staging, rows, run)
        publish(staging, out)
    finally:
        discard(staging)
    shutil.rmtree(partial, ignore_errors=True)
    print(f"{len(rows)} rows over {len(refs)} episodes -> {out}/ (results.csv, leaderboard.md, {len(pictures)} plots)")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from ..evaluation.report import f1_by_budget_table, headroom_table, paper_tables, transfer_table, write_atomic

    run = Path(args.run)
    rows = read_run(run)
    if args.headroom:
        check_policies(args.highlight or (), rows, run, "--highlight")
        text = headroom_table(rows, highlight=args.highlight or ())
        write_atomic(run / "headroom.md", text)
    elif args.f1_by_budget:
        text = f1_by_budget_table(rows)
        write_atomic(run / "f1_by_budget.md", text)
    elif args.transfer:
        sources = [r for path in args.transfer for r in read_run(Path(path))]
        text = transfer_table(rows, sources)
        write_atomic(run / "transfer.md", text)
    else:
        chosen = [r for r in rows if r["track"] == args.track]
        if not chosen:
            held = ", ".join(sorted({r["track"] for r in rows}))
            raise InputError(
                f"{run} has no results on the {args.track} track (it holds: {held}); run `wpb eval` with "
                f"--tracks {args.track} and agents of that track (e.g. priority_threshold), or pass --track {held}"
            )
        text = paper_tables(rows, track=args.track, diagnostics_budget=_diagnostics_budget(args, chosen, run))
        write_atomic(run / "paper_tables.md", text)
    print(text, end="")
    return 0


def _diagnostics_budget(args: argparse.Namespace, rows: Sequence[dict[str, Any]], run: Path) -> int:
    """--diagnostics-budget if the run has it; by default 10KB, or the run's nearest budget (said on stderr)."""
    budgets = sorted({r["budget_bytes"] for r in rows})
    wanted = 10240 if args.diagnostics_budget is None else args.diagnostics_budget
    if wanted in budgets:
        return wanted
    labels = ", ".join(budget_text(b) for b in budgets)
    if args.diagnostics_budget is not None:
        raise InputError(
            f"--diagnostics-budget {budget_text(wanted)}: {run} has no results at that budget on the {args.track} "
            f"track; its budgets: {labels}"
        )
    nearest = min(budgets, key=lambda b: (abs(b - wanted), b))
    print(
        f"note: {run} has no results at 10KB; Table 4 is at {budget_text(nearest)} (--diagnostics-budget)",
        file=sys.stderr,
    )
    return nearest


DEFAULT_BASELINE_STORE = "runs/baseline"


def _cmd_compare(args: argparse.Namespace) -> int:
    from ..evaluation.compare import compare_runs, comparison_markdown

    if args.versus:
        if len(args.runs) != 1:
            raise InputError("--versus AGENT takes one run folder")
        rows = read_run(Path(args.runs[0]))
        check_policies([args.versus], rows, args.runs[0], "--versus")
        check_policies(args.agents or (), rows, args.runs[0], "--agents")
        ours = [r for r in rows if r["policy"] == args.versus]
        comparisons = []
        for other in sorted({r["policy"] for r in rows} - {args.versus}):
            if args.agents and other not in args.agents:
                continue
            label = f"{args.versus} vs {other}"
            a = [{**r, "policy": label} for r in rows if r["policy"] == other]
            b = [{**r, "policy": label} for r in ours]
            comparisons += compare_runs(a, b, metric=args.metric)
        text = comparison_markdown(comparisons, args.metric, "each other agent (A)", f"{args.versus} (B)", "worse")
        print(text, end="")
        return 0
    if args.against_baseline:
        if len(args.runs) != 1:
            raise InputError("--against-baseline takes one run folder (the new run)")
        base = Path(args.store)
        if not (base / "results.csv").exists():
            raise InputError(f"no baseline in {base}; record one with `wpb baseline set RUN`")
        run_a, run_b = base, Path(args.runs[0])
    else:
        if len(args.runs) != 2:
            raise InputError("compare takes two run folders: RUN_A RUN_B (B is compared with A)")
        run_a, run_b = (Path(r) for r in args.runs)
    rows_a, rows_b = read_run(run_a), read_run(run_b)
    check_policies(args.agents or (), rows_a + rows_b, f"{run_a} or {run_b}", "--agents")
    comparisons = compare_runs(rows_a, rows_b, metric=args.metric, agents=args.agents)
    if not comparisons:
        raise InputError("the two runs share no (condition, agent, episode)")
    print(comparison_markdown(comparisons, args.metric, str(run_a), str(run_b)), end="")
    regressions = [c for c in comparisons if c.regression]
    if args.against_baseline:
        print(f"\n{len(regressions)} regression(s) against the baseline in {run_a}")
        return 1 if regressions else 0
    return 0


def _cmd_baseline(args: argparse.Namespace) -> int:
    from ..evaluation.report import write_atomic

    run = Path(args.run)
    read_run(run)  # a complete, readable run only
    store = Path(args.store)
    check_folder_path(store, "--store")
    for name in ("run.json", "results.csv"):  # results.csv last: a half-copied baseline is not one
        source = run / name
        if source.exists():
            write_atomic(store / name, source.read_text(encoding="utf-8"))
    print(f"baseline recorded in {store} (from {run})")
    return 0


def _cmd_ablate(args: argparse.Namespace) -> int:
    from ..evaluation.compare import ablation_markdown
    from ..evaluation.grid import generated_refs, run_grid
    from ..evaluation.report import write_atomic

    if args.out is not None and Path(args.out).is_dir():
        raise InputError(f"--out {args.out}: is a folder; expected the markdown file to write")
    if args.out is not None:
        check_folder_path(Path(args.out).parent, f"--out {args.out}: its folder")
    configs = []
    for path in (args.config_a, args.config_b):
        config = eval_settings(path, {})
        if config["episodes"] is not None:
            raise InputError(f"{path} reads episodes from files; ablations vary the seed of generated ones")
        configs.append((config, _policy_specs(config["agents"])))  # both checked before any work
    runs = []
    for config, policies in configs:
        per_seed = []
        for seed in range(args.seeds):
            refs = generated_refs(config["regimes"], config["lengths"], config["episodes_per_condition"], seed)
            per_seed.append(
                run_grid(refs, policies, config["budgets"], config["tracks"], jobs=args.jobs or config["jobs"])
            )
        runs.append(per_seed)
    text = ablation_markdown(runs[0], runs[1], Path(args.config_a).stem, Path(args.config_b).stem)
    if args.out:
        write_atomic(args.out, text)
    print(text, end="")
    return 0


def _spec_source(text: str) -> Any:
    from ..episodes.real.openapi_ingest import SpecSource

    try:
        return SpecSource.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _cmd_ingest_openapi(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..episodes.real.change_events import write_events
    from ..episodes.real.openapi_ingest import IngestError, ingest_openapi

    out = Path(args.out)
    if out.is_dir():
        raise InputError(f"--out {out}: is a folder; expected the change-event log to write (.jsonl or .jsonl.gz)")
    check_folder_path(out.parent, f"--out {out}: its folder")
    if out.exists() and not args.force:
        raise InputError(f"{out} already exists; pass --force to replace it")

    def progress(versions, total):
        return tqdm(versions, total=total, desc="spec versions", unit="version", file=sys.stderr, disable=args.quiet)

    try:
        result = ingest_openapi(
            args.repo,
            args.spec,
            since=args.since,
            until=args.until,
            version_from=args.version_from,
            with_host=args.with_host,
            skip_invalid=args.skip_invalid,
            progress=progress,
        )
    except IngestError as error:
        raise InputError(str(error)) from None
    if not result.events:
        specs = ", ".join("|".join(s.alternatives) for s in args.spec)
        raise InputError(f"no commit in the range has a file matching {specs}; nothing written")
    write_events(out, result.events)  # atomic: an interrupted run leaves no partial log
    for message in result.skipped_invalid:
        print(f"note: skipped unreadable version: {message}", file=sys.stderr)
    if result.commits_without_spec:
        print(f"note: {result.commits_without_spec} commit(s) had no spec file and were skipped", file=sys.stderr)
    if result.dates_clamped:
        print(f"note: {result.dates_clamped} version(s) dated before the previous one took its date", file=sys.stderr)
    breaking = [e for e in result.events if e.breaking]
    reverted = [e.reverted_after_days for e in breaking if e.reverted_after_days is not None]
    first, last = result.events[0].date[:10], result.events[-1].date[:10]
    print(f"{result.versions} spec versions walked ({first} .. {last}) -> {len(result.events)} events in {out}")
    print(
        f"breaking events: {len(breaking)}; reverted within 30 days: {sum(d <= 30 for d in reverted)}, "
        f"ever: {len(reverted)}"
    )
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from agents.learner_training import LEARNER_ALGOS, train_learner_run
    from agents.train import (  # the CLI joins the packages
        HELD_OUT_SEED_OFFSET,
        load_config,
        parse_env_kwargs,
        recipe_path,
        train,
    )

    check_folder_path(Path(args.out))
    # The training episodes' seed is --seed; held-out episodes use another, derived from it.
    reserved = {"episode_seed": f"set by --seed (held-out episodes use --seed + {HELD_OUT_SEED_OFFSET})"}
    learner = args.algo in LEARNER_ALGOS
    config: dict[str, Any] = {"env": {}}
    try:
        env_kwargs = check_env_kwargs(parse_env_kwargs(args.env_kwargs), "--env-kwargs", reserved)
        if learner:
            for flag in ("config", "resume", "init_from", "subproc"):
                if getattr(args, flag):
                    raise ValueError(f"--{flag.replace('_', '-')} is for the SB3 algorithms, not {args.algo}")
        else:
            # Without --config, the shipped recipe of the regime (configs/train/, agents.train.RECIPES).
            recipe = recipe_path(args.algo, env_kwargs.get("regime"))
            config_file = args.config or (recipe if recipe.is_file() else None)
            config = load_config(args.algo, config_file)
            where = config_file or f"the {args.algo} defaults"
            config["env"] = check_env_kwargs(config["env"], f"{where}: env", reserved)
    except (FileNotFoundError, ValueError) as error:
        raise InputError(str(error)) from None
    # Episode files are read here first, so that their errors name them (and come before any
    # worker process of --subproc starts).
    for source in {env_kwargs.get("episodes"), config["env"].get("episodes"), args.eval_episodes} - {None}:
        if isinstance(source, str):
            read_episode_source(source)
    if args.subproc:
        config["vec_env"] = "subproc"
    try:
        if learner:
            saved = train_learner_run(
                args.algo,
                args.out,
                env_kwargs=env_kwargs,
                timesteps=args.timesteps,
                seed=args.seed,
                progress=not args.quiet,
                eval_episodes=args.eval_episodes,
            )
            print(f"trained {args.algo} for {saved['timesteps']} steps -> {args.out}/learner.json")
            return 0
        saved = train(
            args.algo,
            args.out,
            config=config,
            env_kwargs=env_kwargs,
            timesteps=args.timesteps,
            seed=args.seed,
            resume=args.resume,
            progress=not args.quiet,
            eval_episodes=args.eval_episodes,
            init_from=args.init_from,
        )
    except (FileNotFoundError, ValueError) as error:
        raise InputError(str(error)) from None
    print(
        f"trained {args.algo} ({where}) for {saved['timesteps']} steps -> {args.out}/best_model.zip, final_model.zip"
    )
    return 0


def _cmd_seeds(args: argparse.Namespace) -> int:
    from ..evaluation.report import write_atomic
    from ..evaluation.seed_stats import seed_table, seed_table_markdown

    rows = [row for run in args.runs for row in read_run(Path(run))]
    where = ", ".join(map(str, args.runs))
    groups: dict[str, list[str]] = {}
    for item in args.learned:
        name, sep, labels = item.partition("=")
        seeds = [label.strip() for label in labels.split(",") if label.strip()]
        if not sep or not name.strip() or not seeds:
            raise InputError(f"--learned expects NAME=LABEL,LABEL,..., got {item!r}")
        if name in groups:
            raise InputError(f"--learned: {name} is given twice")
        check_policies(seeds, rows, where, f"--learned {name}")
        groups[name.strip()] = seeds
    references = [r.strip() for r in args.versus.split(",") if r.strip()]
    named = [r.partition("@")[0] for r in references if r.partition("@")[0] != "best"]
    check_policies(named, rows, where, "--versus")
    if rows and args.metric not in rows[0]:
        raise InputError(f"--metric {args.metric!r}: the run has no such column")
    try:
        text = seed_table_markdown(seed_table(rows, groups, references, metric=args.metric), args.metric)
    except ValueError as error:
        raise InputError(f"{where}: {error}") from None
    print(text, end="")
    if args.out:
        write_atomic(args.out, text)
    return 0


def _cmd_agents(args: argparse.Namespace) -> int:
    from agents.registry import registry_table  # the CLI is the one module that joins the packages

    print(registry_table())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="wpb", description="WritePolicyBench-Gym command line")
    parser.add_argument("--version", action="version", version=f"wpb {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    freeze = sub.add_parser("freeze", help="generate a frozen episode set (folder + MANIFEST.json)")
    freeze.add_argument(
        "--regimes", type=_regimes, default=list(PAPER_REGIMES), help="comma-separated (default: the paper's four)"
    )
    freeze.add_argument("--lengths", type=_positive_ints, default=[200], help="episode lengths T (default: 200)")
    freeze.add_argument(
        "--episodes", type=_int_at_least(1), default=10, help="episodes per (regime, length) (default: 10)"
    )
    freeze.add_argument("--seed", type=_int_at_least(0), default=0, help="set seed (default: 0)")
    freeze.add_argument("--out", type=_path, required=True, help="output folder (must not exist unless --force)")
    freeze.add_argument("--set", type=_override, action="append", metavar="KEY=VALUE", help="generator option override")
    freeze.add_argument("--gzip", action="store_true", help="write .jsonl.gz files")
    freeze.add_argument("--force", action="store_true", help="replace an existing output folder")
    freeze.set_defaults(func=_cmd_freeze, prog=freeze.prog)

    episodes = sub.add_parser("episodes", help="episode sets from other sources (real API drift)")
    episodes_sub = episodes.add_subparsers(dest="action", required=True)
    from_events = episodes_sub.add_parser(
        "from-events",
        help="cut a change-event log (wpb ingest openapi) into a frozen set of real episodes, one file per period",
    )
    from_events.add_argument("events", type=_path, help="the change-event log (.jsonl or .jsonl.gz)")
    from_events.add_argument("--source", required=True, help="the API's name; the regime is real:SOURCE")
    from_events.add_argument("--out", type=_path, required=True, help="output folder (must not exist unless --force)")
    from_events.add_argument("--length", type=_int_at_least(1), default=200, help="change events per episode (200)")
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
        "--stride", type=_int_at_least(1), help="events between episode starts (default: --length, no overlap)"
    )
    from_events.add_argument(
        "--min-critical", type=_int_at_least(0), default=1, help="leave out windows with fewer critical steps (1)"
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
    from_events.add_argument("--seed", type=_int_at_least(0), default=0, help="seed of the priority hint (0)")
    from_events.add_argument("--gzip", action="store_true", help="write .jsonl.gz files")
    from_events.add_argument("--force", action="store_true", help="replace an existing output set")
    from_events.set_defaults(func=_cmd_episodes_from_events, prog=from_events.prog)

    inspect = sub.add_parser("inspect", help="summarise episode files / frozen sets and their oracle bounds")
    inspect.add_argument("paths", type=_path, nargs="+", help="JSONL files (.jsonl, .jsonl.gz) or frozen-set folders")
    inspect.add_argument(
        "--budgets", type=_budgets, default=list(DEFAULT_BUDGETS), help="comma-separated, e.g. 1KB,10KB (1KB = 1024 B)"
    )
    inspect.add_argument("--tracks", type=_tracks, default=list(TRACKS), help="comma-separated tracks")
    inspect.set_defaults(func=_cmd_inspect, prog=inspect.prog)

    agents = sub.add_parser("agents", help="list the registered agents (name, aliases, track, kind, parameters)")
    agents.set_defaults(func=_cmd_agents, prog=agents.prog)

    ev = sub.add_parser("eval", help="run agents over episodes x budgets x tracks; write results.csv, leaderboard.md")
    ev.add_argument(
        "--config", type=_path, help="YAML file of settings (e.g. configs/eval/paper.yaml); options override it"
    )
    ev.add_argument(
        "--agents",
        type=_names,
        help="agent names or aliases, or NAME:PATH for one read from a file (sb3:MODEL.zip, "
        "epsilon_greedy:learner.json; LABEL=NAME:PATH names it)",
    )
    ev.add_argument(
        "--episodes", type=_path, help="a frozen set, a folder of JSONL files or one JSONL file (default: generated)"
    )
    ev.add_argument("--regimes", type=_regimes, help="generated regimes (default: default)")
    ev.add_argument("--lengths", type=_positive_ints, help="generated episode lengths (default: 200)")
    ev.add_argument("--episodes-per-condition", type=_int_at_least(1), help="generated episodes per regime/length")
    ev.add_argument("--seed", type=_int_at_least(0), help="seed of the generated episodes (default: 0)")
    ev.add_argument("--budgets", type=_budgets, help="comma-separated, 1KB = 1024 bytes (default: 1KB,10KB,100KB,1MB)")
    ev.add_argument("--tracks", type=_tracks, help="comma-separated tracks (default: both)")
    ev.add_argument("--jobs", type=_int_at_least(1), help="worker processes (results do not depend on it)")
    ev.add_argument("--out", type=_path, required=True, help="run folder for results.csv, leaderboard.md, run.json")
    ev.add_argument("--force", action="store_true", help="replace the results of an earlier run in --out")
    ev.add_argument("--resume", action="store_true", help="continue an interrupted run of the same settings")
    ev.add_argument(
        "--isolate",
        action="store_const",
        const=True,
        help="run every agent in its own process, shown only what it may see (for untrusted code, leaderboards)",
    )
    ev.add_argument(
        "--max-actions-per-step",
        type=_int_at_least(0),
        help="stop an agent that yields more actions at one timestep "
        f"(default: {EVAL_DEFAULTS['max_actions_per_step']}; 0: no limit)",
    )
    ev.add_argument(
        "--max-seconds-per-step",
        type=_seconds,
        help="stop an agent that takes longer over one timestep "
        f"(default: {EVAL_DEFAULTS['max_seconds_per_step']:g} s; 0: no limit)",
    )
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    ev.set_defaults(func=_cmd_eval, prog=ev.prog)

    report = sub.add_parser("report", help="tables of a run folder (the paper's Tables 2-4 layout, or headroom)")
    report.add_argument("run", type=_path, help="a run folder written by wpb eval")
    which = report.add_mutually_exclusive_group(required=True)
    which.add_argument("--paper-tables", action="store_true", help="F1 vs budget and diagnostics -> paper_tables.md")
    which.add_argument(
        "--headroom", action="store_true", help="hindsight F1 bound vs the best policy per track -> headroom.md"
    )
    which.add_argument(
        "--f1-by-budget",
        action="store_true",
        help="every policy's mean F1 [95%% CI] at each budget, and the hindsight bound -> f1_by_budget.md",
    )
    which.add_argument(
        "--transfer",
        type=_path,
        nargs="+",
        metavar="SYNTHETIC_RUN",
        help="rank agreement of the policies between RUN's regimes and those of these runs -> transfer.md",
    )
    report.add_argument(
        "--highlight",
        type=_names,
        default=None,
        help="with --headroom: policies shown in columns of their own",
    )
    report.add_argument(
        "--track", choices=TRACKS, default="privileged", help="the track to tabulate (default: privileged)"
    )
    report.add_argument(
        "--diagnostics-budget", type=flag_type(parse_budget), help="Table 4's budget (default: 10KB, else the nearest)"
    )
    report.set_defaults(func=_cmd_report, prog=report.prog)

    compare = sub.add_parser("compare", help="paired comparison of two runs (lift, P(improvement), IQM, exact CIs)")
    compare.add_argument("runs", type=_path, nargs="+", help="RUN_A RUN_B, or the new RUN with --against-baseline")
    compare.add_argument("--agents", type=_names, help="only these agents")
    compare.add_argument(
        "--metric",
        default="f1",
        choices=[
            "f1",
            "recall",
            "precision",
            "utility_per_kb",
            "regret_write_only",
            "policy_utility",
            "drift_coverage",
        ],
        help="metric (default: f1)",
    )
    compare.add_argument(
        "--against-baseline",
        action="store_true",
        help="compare RUN with the recorded baseline; exit 1 if any metric dropped beyond its CI",
    )
    compare.add_argument(
        "--store", type=_path, default=DEFAULT_BASELINE_STORE, help=f"baseline folder ({DEFAULT_BASELINE_STORE})"
    )
    compare.add_argument("--versus", metavar="AGENT", help="in one run: AGENT against every other agent, paired")
    compare.set_defaults(func=_cmd_compare, prog=compare.prog)

    seeds = sub.add_parser(
        "seeds",
        help="learned agents over their training seeds: IQM, lifts, P(improvement), optimality gap (rliable)",
        description="Per condition, a learned agent's seeds (the unit of variation) on the run's held-out "
        "episodes: per-seed means, IQM with a stratified bootstrap CI, paired lifts against references with "
        "two-level bootstrap CIs, probability of improvement and the optimality gap against the hindsight bound.",
    )
    seeds.add_argument("runs", type=_path, nargs="+", help="run folders written by wpb eval (one table for all)")
    seeds.add_argument(
        "--learned",
        action="append",
        required=True,
        metavar="NAME=LABEL,LABEL,...",
        help="a learned agent and the policy labels of its seeds in the run (repeat for several)",
    )
    seeds.add_argument(
        "--versus",
        default="breaking_detector,best@privileged",
        metavar="REF,...",
        help="references: policy labels, LABEL@TRACK, or best@TRACK (default: breaking_detector,best@privileged)",
    )
    seeds.add_argument("--metric", default="f1", help="the metric column (default: f1)")
    seeds.add_argument("--out", type=_path, help="also write the table to this file")
    seeds.set_defaults(func=_cmd_seeds, prog=seeds.prog)

    baseline = sub.add_parser("baseline", help="record an accepted run as the regression baseline")
    baseline_sub = baseline.add_subparsers(dest="action", required=True)
    baseline_set = baseline_sub.add_parser("set", help="record RUN as the baseline")
    baseline_set.add_argument("run", type=_path, help="a run folder written by wpb eval")
    baseline_set.add_argument(
        "--store", type=_path, default=DEFAULT_BASELINE_STORE, help=f"baseline folder ({DEFAULT_BASELINE_STORE})"
    )
    baseline_set.set_defaults(func=_cmd_baseline, prog=baseline_set.prog)

    ingest = sub.add_parser("ingest", help="build a change-event log from a real API's history")
    ingest_sub = ingest.add_subparsers(dest="source", required=True)
    openapi = ingest_sub.add_parser(
        "openapi",
        help="walk the git history of an OpenAPI 3 description into a change-event log",
        description="Walk the first-parent git history of OpenAPI 3 spec file(s), oldest first, and write one "
        "change event per endpoint that changed in each spec version (the apidrift extraction rules).",
    )
    openapi.add_argument("--repo", type=_path, required=True, help="a git clone holding the spec")
    openapi.add_argument(
        "--spec",
        required=True,
        action="append",
        type=_spec_source,
        metavar="FILE_OR_GLOB[|FALLBACK]",
        help="spec file or glob relative to the repo root (e.g. 'spec/json/twilio_*.json'); 'a.json|a.yaml' reads "
        "a.yaml where a.json is absent; repeat to read several (the first declaring an endpoint wins)",
    )
    openapi.add_argument("--since", metavar="REV", help="walk only the commits after REV")
    openapi.add_argument("--until", metavar="REV", default="HEAD", help="walk up to and including REV (HEAD)")
    openapi.add_argument(
        "--version-from",
        choices=["info", "tag"],
        default="info",
        help="version label: the spec's info.version (default) or the earliest tag containing the commit",
    )
    openapi.add_argument(
        "--with-host", action="store_true", help="prefix paths with the server host (one file per product, Twilio)"
    )
    openapi.add_argument(
        "--skip-invalid", action="store_true", help="skip spec versions that cannot be read instead of stopping"
    )
    openapi.add_argument("--out", type=_path, required=True, help="the log to write (.jsonl or .jsonl.gz)")
    openapi.add_argument("--force", action="store_true", help="replace an existing --out")
    openapi.add_argument("--quiet", action="store_true", help="no progress bar")
    openapi.set_defaults(func=_cmd_ingest_openapi, prog=openapi.prog)

    ablate = sub.add_parser("ablate", help="two eval configs over N seeds: mean ± std and paired t-tests")
    ablate.add_argument("config_a", type=_path, help="YAML settings of variant A (as for wpb eval --config)")
    ablate.add_argument("config_b", type=_path, help="YAML settings of variant B")
    ablate.add_argument("--seeds", type=_int_at_least(2), default=5, help="seeds 0..N-1 of the generated episodes")
    ablate.add_argument("--jobs", type=_int_at_least(1), help="worker processes")
    ablate.add_argument("--out", type=_path, help="also write the markdown table to this file")
    ablate.set_defaults(func=_cmd_ablate, prog=ablate.prog)

    tr = sub.add_parser(
        "train", help="train an SB3 agent on WritePolicyBench-v0 (best model kept on held-out episodes)"
    )
    tr.add_argument(
        "--algo",
        required=True,
        choices=["ppo", "maskable_ppo", "a2c", "dqn", "recurrent_ppo", "epsilon_greedy", "bandit_ucb"],
        help="an SB3 algorithm, or a bandit learner (trained for --timesteps decisions, 200,000 by default)",
    )
    tr.add_argument(
        "--config",
        type=_path,
        help="YAML settings (default: the shipped recipe of the regime given in --env-kwargs, else "
        "configs/train/ALGO.yaml)",
    )
    tr.add_argument("--env-kwargs", nargs="*", metavar="KEY=VALUE", help="env arguments, e.g. regime=burst_drift")
    tr.add_argument("--timesteps", type=_int_at_least(1), help="total environment steps (default: the config's)")
    tr.add_argument("--seed", type=_int_at_least(0), default=0, help="training seed (held-out episodes use another)")
    tr.add_argument(
        "--out", type=_path, required=True, help="run folder: models, checkpoints, TensorBoard logs, config.json"
    )
    tr.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    tr.add_argument("--subproc", action="store_true", help="SubprocVecEnv instead of DummyVecEnv")
    tr.add_argument(
        "--eval-episodes",
        type=_path,
        help="held-out episode file or set for model selection (required when --env-kwargs has episodes=PATH)",
    )
    tr.add_argument("--init-from", type=_path, help="start from this model (e.g. one trained on synthetic regimes)")
    tr.add_argument("--quiet", action="store_true", help="no progress bar")
    tr.set_defaults(func=_cmd_train, prog=tr.prog)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``wpb``; bad input (an option, a config, a data file) prints one line and returns 2."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:  # argparse has printed its usage error (2), --help or --version (0)
        return exit.code if isinstance(exit.code, int) else 2
    try:
        return args.func(args)
    except (InputError, EpisodeFormatError, FrozenSetError) as error:
        message = str(error)
    except OSError as error:  # a path given to wpb that cannot be read or written
        message = f"{error.filename}: {error.strerror}" if error.filename and error.strerror else str(error)
    print(f"{args.prog}: error: {one_line(message)}", file=sys.stderr)
    return 2

