"""``wpb``: the command-line face of the benchmark.

This is the one module allowed to join ``wpb_gym`` and ``agents`` (later subcommands run
agents); the benchmark core never imports them.

Subcommands:

* ``wpb freeze`` — generate a frozen episode set (a folder with ``MANIFEST.json``).
* ``wpb inspect`` — summarise episode files or frozen sets: sizes, drift, and what the
  exact hindsight oracle can reach at each budget (U*(B) and the WRITE-only F1 bound).
* ``wpb ingest openapi`` — turn the git history of an OpenAPI description into a change-event log.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from .frozen import FrozenSetError, freeze_set, open_frozen_set
from .generator import PAPER_REGIMES, REGIMES, GeneratorConfig
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


def _cmd_episodes_from_events(args: argparse.Namespace) -> int:
    from .real_episodes import RealEpisodeOptions, episodes_from_events, parse_windows, period_summary

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
    except (FileExistsError, FileNotFoundError, ValueError) as exc:
        print(f"wpb episodes from-events: error: {exc}", file=sys.stderr)
        return 2
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


EVAL_DEFAULTS: dict[str, Any] = {
    "agents": None,
    "episodes": None,
    "regimes": ["default"],
    "lengths": [200],
    "episodes_per_condition": 10,
    "seed": 0,
    "budgets": list(DEFAULT_BUDGETS),
    "tracks": list(TRACKS),
    "jobs": 1,
}


def _eval_config(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: defaults, then the YAML file (if any), then the command line."""
    from .settings import read_settings

    config = dict(EVAL_DEFAULTS)
    if args.config is not None:
        try:
            loaded = read_settings(args.config, EVAL_DEFAULTS)
        except (FileNotFoundError, ValueError) as error:
            raise SystemExit(f"wpb eval: {error}") from None
        for key, value in loaded.items():
            config[key] = (
                _csv(str, value) if key in ("agents", "regimes", "tracks") and isinstance(value, str) else value
            )
    for key in EVAL_DEFAULTS:
        value = getattr(args, key, None)
        if value is not None:
            config[key] = value
    if not config["agents"]:
        raise SystemExit("wpb eval: name the agents (--agents NAME[,NAME...] or 'agents:' in the config)")
    for key in ("budgets", "lengths"):
        values = config[key]
        if (
            not isinstance(values, list)
            or not values
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values)
        ):
            raise SystemExit(f"wpb eval: {key} must be a non-empty list of non-negative integers, got {values!r}")
    for track in config["tracks"]:
        if track not in TRACKS:
            raise SystemExit(f"wpb eval: unknown track {track!r}; known: {', '.join(TRACKS)}")
    for regime in config["regimes"]:
        if regime not in REGIMES:
            raise SystemExit(f"wpb eval: unknown regime {regime!r}; known: {', '.join(REGIMES)}")
    return config


def _policy_specs(names: Sequence[Any]) -> list[Any]:
    """Grid policies from agent entries: a name or alias, ``sb3:PATH`` (``LABEL=sb3:PATH`` to name it),
    or (in YAML) a mapping ``{name: ..., label: ..., <parameter>: <value>...}`` for an agent with
    other parameters."""
    from functools import partial

    from agents.registry import agent_entry, make_agent  # the CLI joins the packages

    from .grid import PolicySpec

    specs = []
    for item in names:
        if isinstance(item, dict):
            params = dict(item)
            name, label = params.pop("name", None), params.pop("label", None)
            if not isinstance(name, str):
                raise SystemExit(f"wpb eval: an agent given as a mapping needs 'name': {item!r}")
        elif isinstance(item, str):
            name, label, params = item, None, {}
            prefix, sep, rest = item.partition("=")
            if sep and rest.startswith("sb3:") and prefix:
                name, label = rest, prefix
        else:
            raise SystemExit(f"wpb eval: an agent is a name or a mapping with 'name', got {item!r}")
        if name.startswith("sb3:"):
            params["path"] = name[4:]
            name, label = "sb3", label or f"sb3:{Path(name[4:]).stem}"
        try:
            entry = agent_entry(name)
            factory = partial(make_agent, entry.name, **params)
            track = factory().track  # builds one now: bad parameters fail here, with their names
        except (KeyError, TypeError, ValueError, FileNotFoundError) as error:
            raise SystemExit(f"wpb eval: agent {item!r}: {error.args[0] if error.args else error}") from None
        if label is None:
            label = entry.name + (f"({', '.join(f'{k}={v!r}' for k, v in params.items())})" if params else "")
        specs.append(PolicySpec(str(label), factory, track, only_own_track=entry.kind == "sb3"))
    labels = [spec.label for spec in specs]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise SystemExit(f"wpb eval: agents {repeated} appear twice; give one of them a 'label' in the config")
    return specs


def _ref_name(ref: Any) -> str:
    return f"{ref.mode}__T{ref.steps}__{ref.index}"


def _cmd_eval(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .grid import generated_refs, given_refs, run_grid, skipped
    from .plots import write_pictures
    from .report import (
        confusion_matrix_csv,
        leaderboard,
        recall_at_budget_csv,
        results_csv,
        run_metadata,
        summary_csv,
        utility_per_kb_json,
        write_atomic,
    )
    from .sources import read_episodes

    config = _eval_config(args)
    out = Path(args.out)
    if (out / "results.csv").exists():
        if not args.force:
            raise SystemExit(f"wpb eval: {out} already holds results.csv; pass --force to replace it")
        (out / "results.csv").unlink()  # until the new run completes, the folder must not look complete
    policies = _policy_specs(config["agents"])
    if config["episodes"] is not None:
        try:
            episodes = read_episodes(config["episodes"])
        except (OSError, ValueError, EpisodeFormatError, FrozenSetError) as error:
            raise SystemExit(f"wpb eval: {error}") from None
        refs = given_refs(episodes, str(config["episodes"]))
    else:
        refs = generated_refs(config["regimes"], config["lengths"], config["episodes_per_condition"], config["seed"])
    notes = skipped(policies, config["tracks"])
    for note in notes:
        print(f"note: {note}", file=sys.stderr)

    def progress(results, total):
        return tqdm(results, total=total, desc="episodes", unit="ep", file=sys.stderr, disable=args.quiet)

    recorded = {k: v for k, v in config.items() if k != "jobs"}  # jobs never changes results
    run = run_metadata(recorded, notes, __version__)
    # Each episode's rows are checkpointed as they arrive; --resume reuses those of the same
    # configuration (same hash) and runs the rest.
    partial = out / f".partial-{run['config_hash']}"
    done: dict[str, list[dict[str, Any]]] = {}
    if args.resume and partial.is_dir():
        for file in sorted(partial.glob("*.json")):
            try:
                done[file.stem] = json.loads(file.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                continue  # a checkpoint cut short: its episode runs again
        print(f"resuming: {len(done)} of {len(refs)} episodes already done", file=sys.stderr)
    elif partial.is_dir():
        shutil.rmtree(partial)
    todo = [ref for ref in refs if _ref_name(ref) not in done]

    def checkpoint(ref, chunk):
        write_atomic(partial / f"{_ref_name(ref)}.json", json.dumps(chunk))

    rows = run_grid(
        todo,
        policies,
        config["budgets"],
        config["tracks"],
        jobs=config["jobs"],
        progress=progress,
        on_episode_done=checkpoint,
    )
    if done:
        from .grid import row_key

        rows = sorted(rows + [row for chunk in done.values() for row in chunk], key=row_key)
    write_atomic(out / "run.json", json.dumps(run, indent=2, sort_keys=True) + "\n")
    write_atomic(out / "leaderboard.md", leaderboard(rows))
    write_atomic(out / "summary.csv", summary_csv(rows))
    write_atomic(out / "recall_at_budget.csv", recall_at_budget_csv(rows))
    write_atomic(out / "utility_per_kb.json", utility_per_kb_json(rows))
    write_atomic(out / "confusion_matrix.csv", confusion_matrix_csv(rows))
    pictures = write_pictures(rows, out)
    # results.csv last: its presence says the run is complete.
    write_atomic(out / "results.csv", results_csv(rows, run))
    shutil.rmtree(partial, ignore_errors=True)
    print(f"{len(rows)} rows over {len(refs)} episodes -> {out}/ (results.csv, leaderboard.md, {len(pictures)} plots)")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from .report import f1_by_budget_table, headroom_table, paper_tables, read_results, transfer_table, write_atomic

    run = Path(args.run)
    try:
        rows = read_results(run / "results.csv")
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"wpb report: {error}") from None
    if args.headroom:
        text = headroom_table(rows, highlight=args.highlight or ())
        write_atomic(run / "headroom.md", text)
    elif args.f1_by_budget:
        text = f1_by_budget_table(rows)
        write_atomic(run / "f1_by_budget.md", text)
    elif args.transfer:
        sources = [r for path in args.transfer for r in _read_run(Path(path), "report")]
        text = transfer_table(rows, sources)
        write_atomic(run / "transfer.md", text)
    else:
        text = paper_tables(rows, track=args.track, diagnostics_budget=args.diagnostics_budget)
        write_atomic(run / "paper_tables.md", text)
    print(text, end="")
    return 0


DEFAULT_BASELINE_STORE = "runs/baseline"


def _read_run(path: Path, command: str) -> list[dict[str, Any]]:
    from .report import read_results

    try:
        return read_results(path / "results.csv")
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"wpb {command}: {error}") from None


def _cmd_compare(args: argparse.Namespace) -> int:
    from .compare import compare_runs, comparison_markdown

    if args.versus:
        if len(args.runs) != 1:
            raise SystemExit("wpb compare --versus AGENT takes one run folder")
        rows = _read_run(Path(args.runs[0]), "compare")
        ours = [r for r in rows if r["policy"] == args.versus]
        if not ours:
            raise SystemExit(f"wpb compare: no agent {args.versus!r} in {args.runs[0]}")
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
            raise SystemExit("wpb compare --against-baseline takes one run folder (the new run)")
        base = Path(args.store)
        if not (base / "results.csv").exists():
            raise SystemExit(f"wpb compare: no baseline in {base}; record one with `wpb baseline set RUN`")
        run_a, run_b = base, Path(args.runs[0])
    else:
        if len(args.runs) != 2:
            raise SystemExit("wpb compare takes two run folders: RUN_A RUN_B (B is compared with A)")
        run_a, run_b = (Path(r) for r in args.runs)
    rows_a, rows_b = _read_run(run_a, "compare"), _read_run(run_b, "compare")
    comparisons = compare_runs(rows_a, rows_b, metric=args.metric, agents=args.agents)
    if not comparisons:
        raise SystemExit("wpb compare: the two runs share no (condition, agent, episode)")
    print(comparison_markdown(comparisons, args.metric, str(run_a), str(run_b)), end="")
    regressions = [c for c in comparisons if c.regression]
    if args.against_baseline:
        print(f"\n{len(regressions)} regression(s) against the baseline in {run_a}")
        return 1 if regressions else 0
    return 0


def _cmd_baseline(args: argparse.Namespace) -> int:
    from .report import write_atomic

    run = Path(args.run)
    _read_run(run, "baseline")  # a complete, readable run only
    store = Path(args.store)
    for name in ("run.json", "results.csv"):  # results.csv last: a half-copied baseline is not one
        source = run / name
        if source.exists():
            write_atomic(store / name, source.read_text(encoding="utf-8"))
    print(f"baseline recorded in {store} (from {run})")
    return 0


def _cmd_ablate(args: argparse.Namespace) -> int:
    from .compare import ablation_markdown
    from .grid import generated_refs, run_grid
    from .report import write_atomic

    runs = []
    for path in (args.config_a, args.config_b):
        namespace = build_parser().parse_args(["eval", "--config", path, "--out", "unused"])
        config = _eval_config(namespace)
        if config["episodes"] is not None:
            raise SystemExit(f"wpb ablate: {path} reads episodes from files; ablations vary the seed of generated ones")
        policies = _policy_specs(config["agents"])
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
    from .openapi_ingest import SpecSource

    try:
        return SpecSource.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _cmd_ingest_openapi(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .change_events import write_events
    from .openapi_ingest import IngestError, ingest_openapi

    out = Path(args.out)
    if out.exists() and not args.force:
        raise SystemExit(f"wpb ingest openapi: {out} already exists; pass --force to replace it")

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
        raise SystemExit(f"wpb ingest openapi: {error}") from None
    if not result.events:
        specs = ", ".join("|".join(s.alternatives) for s in args.spec)
        raise SystemExit(f"wpb ingest openapi: no commit in the range has a file matching {specs}; nothing written")
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
    from agents.train import load_config, parse_env_kwargs, train  # the CLI joins the packages

    try:
        config = load_config(args.algo, args.config)
        env_kwargs = parse_env_kwargs(args.env_kwargs)
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"wpb train: {error}") from None
    if args.subproc:
        config["vec_env"] = "subproc"
    try:
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
        raise SystemExit(f"wpb train: {error}") from None
    print(f"trained {args.algo} for {saved['timesteps']} steps -> {args.out}/best_model.zip, final_model.zip")
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
    freeze.add_argument(
        "--regimes", type=_regimes, default=list(PAPER_REGIMES), help="comma-separated (default: the paper's four)"
    )
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

    episodes = sub.add_parser("episodes", help="episode sets from other sources (real API drift)")
    episodes_sub = episodes.add_subparsers(dest="action", required=True)
    from_events = episodes_sub.add_parser(
        "from-events",
        help="cut a change-event log (wpb ingest openapi) into a frozen set of real episodes, one file per period",
    )
    from_events.add_argument("events", help="the change-event log (.jsonl or .jsonl.gz)")
    from_events.add_argument("--source", required=True, help="the API's name; the regime is real:SOURCE")
    from_events.add_argument("--out", required=True, help="output folder (must not exist unless --force)")
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
    from_events.set_defaults(func=_cmd_episodes_from_events)

    inspect = sub.add_parser("inspect", help="summarise episode files / frozen sets and their oracle bounds")
    inspect.add_argument("paths", nargs="+", help="JSONL files (.jsonl, .jsonl.gz) or frozen-set folders")
    inspect.add_argument("--budgets", type=_positive_ints, default=list(DEFAULT_BUDGETS), help="bytes, comma-separated")
    inspect.add_argument("--tracks", type=lambda s: _csv(str, s), default=list(TRACKS), help="comma-separated tracks")
    inspect.set_defaults(func=_cmd_inspect)

    agents = sub.add_parser("agents", help="list the registered agents (name, aliases, track, kind, parameters)")
    agents.set_defaults(func=_cmd_agents)

    ev = sub.add_parser("eval", help="run agents over episodes x budgets x tracks; write results.csv, leaderboard.md")
    ev.add_argument("--config", help="YAML file of settings (e.g. configs/eval/paper.yaml); options override it")
    ev.add_argument(
        "--agents",
        type=lambda s: _csv(str, s),
        help="agent names or aliases, or sb3:PATH to a model (LABEL=sb3:PATH names it)",
    )
    ev.add_argument("--episodes", help="a frozen set, a folder of JSONL files or one JSONL file (default: generated)")
    ev.add_argument("--regimes", type=_regimes, help="generated regimes (default: default)")
    ev.add_argument("--lengths", type=_positive_ints, help="generated episode lengths (default: 200)")
    ev.add_argument("--episodes-per-condition", type=_int_at_least(1), help="generated episodes per regime/length")
    ev.add_argument("--seed", type=_int_at_least(0), help="seed of the generated episodes (default: 0)")
    ev.add_argument("--budgets", type=_positive_ints, help="bytes, comma-separated (default: 1KB,10KB,100KB,1MB)")
    ev.add_argument("--tracks", type=lambda s: _csv(str, s), help="comma-separated tracks (default: both)")
    ev.add_argument("--jobs", type=_int_at_least(1), help="worker processes (results do not depend on it)")
    ev.add_argument("--out", required=True, help="run folder for results.csv, leaderboard.md, run.json")
    ev.add_argument("--force", action="store_true", help="replace the results of an earlier run in --out")
    ev.add_argument("--resume", action="store_true", help="continue an interrupted run of the same settings")
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    ev.set_defaults(func=_cmd_eval)

    report = sub.add_parser("report", help="tables of a run folder (the paper's Tables 2-4 layout, or headroom)")
    report.add_argument("run", help="a run folder written by wpb eval")
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
        nargs="+",
        metavar="SYNTHETIC_RUN",
        help="rank agreement of the policies between RUN's regimes and those of these runs -> transfer.md",
    )
    report.add_argument(
        "--highlight",
        type=lambda s: _csv(str, s),
        default=None,
        help="with --headroom: policies shown in columns of their own",
    )
    report.add_argument(
        "--track", choices=TRACKS, default="privileged", help="the track to tabulate (default: privileged)"
    )
    report.add_argument("--diagnostics-budget", type=_int_at_least(0), default=10240, help="Table 4's budget (bytes)")
    report.set_defaults(func=_cmd_report)

    compare = sub.add_parser("compare", help="paired comparison of two runs (lift, P(improvement), IQM, exact CIs)")
    compare.add_argument("runs", nargs="+", help="RUN_A RUN_B, or the new RUN with --against-baseline")
    compare.add_argument("--agents", type=lambda s: _csv(str, s), help="only these agents")
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
    compare.add_argument("--store", default=DEFAULT_BASELINE_STORE, help=f"baseline folder ({DEFAULT_BASELINE_STORE})")
    compare.add_argument("--versus", metavar="AGENT", help="in one run: AGENT against every other agent, paired")
    compare.set_defaults(func=_cmd_compare)

    baseline = sub.add_parser("baseline", help="record an accepted run as the regression baseline")
    baseline_sub = baseline.add_subparsers(dest="action", required=True)
    baseline_set = baseline_sub.add_parser("set", help="record RUN as the baseline")
    baseline_set.add_argument("run", help="a run folder written by wpb eval")
    baseline_set.add_argument(
        "--store", default=DEFAULT_BASELINE_STORE, help=f"baseline folder ({DEFAULT_BASELINE_STORE})"
    )
    baseline_set.set_defaults(func=_cmd_baseline)

    ingest = sub.add_parser("ingest", help="build a change-event log from a real API's history")
    ingest_sub = ingest.add_subparsers(dest="source", required=True)
    openapi = ingest_sub.add_parser(
        "openapi",
        help="walk the git history of an OpenAPI 3 description into a change-event log",
        description="Walk the first-parent git history of OpenAPI 3 spec file(s), oldest first, and write one "
        "change event per endpoint that changed in each spec version (the apidrift extraction rules).",
    )
    openapi.add_argument("--repo", required=True, help="a git clone holding the spec")
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
    openapi.add_argument("--out", required=True, help="the log to write (.jsonl or .jsonl.gz)")
    openapi.add_argument("--force", action="store_true", help="replace an existing --out")
    openapi.add_argument("--quiet", action="store_true", help="no progress bar")
    openapi.set_defaults(func=_cmd_ingest_openapi)

    ablate = sub.add_parser("ablate", help="two eval configs over N seeds: mean ± std and paired t-tests")
    ablate.add_argument("config_a", help="YAML settings of variant A (as for wpb eval --config)")
    ablate.add_argument("config_b", help="YAML settings of variant B")
    ablate.add_argument("--seeds", type=_int_at_least(2), default=5, help="seeds 0..N-1 of the generated episodes")
    ablate.add_argument("--jobs", type=_int_at_least(1), help="worker processes")
    ablate.add_argument("--out", help="also write the markdown table to this file")
    ablate.set_defaults(func=_cmd_ablate)

    tr = sub.add_parser(
        "train", help="train an SB3 agent on WritePolicyBench-v0 (best model kept on held-out episodes)"
    )
    tr.add_argument("--algo", required=True, choices=["ppo", "maskable_ppo", "a2c", "dqn", "recurrent_ppo"])
    tr.add_argument("--config", help="YAML hyperparameters (default: configs/train/ALGO.yaml)")
    tr.add_argument("--env-kwargs", nargs="*", metavar="KEY=VALUE", help="env arguments, e.g. regime=burst_drift")
    tr.add_argument("--timesteps", type=_int_at_least(1), help="total environment steps (default: the config's)")
    tr.add_argument("--seed", type=_int_at_least(0), default=0, help="training seed (held-out episodes use another)")
    tr.add_argument("--out", required=True, help="run folder: models, checkpoints, TensorBoard logs, config.json")
    tr.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    tr.add_argument("--subproc", action="store_true", help="SubprocVecEnv instead of DummyVecEnv")
    tr.add_argument(
        "--eval-episodes",
        help="held-out episode file or set for model selection (required when --env-kwargs has episodes=PATH)",
    )
    tr.add_argument("--init-from", help="start from this model (e.g. one trained on synthetic regimes)")
    tr.add_argument("--quiet", action="store_true", help="no progress bar")
    tr.set_defaults(func=_cmd_train)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
