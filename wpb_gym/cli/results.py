"""``wpb report``, ``wpb compare``, ``wpb seeds`` and ``wpb baseline set``: reading the results
of runs."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path
from typing import Any, Sequence

from ..core.atomic_files import write_atomic
from ..core.checks import InputError
from ..core.messages import one_line
from ..core.setting_values import budget_text, parse_budget, parse_choice, parse_names, parse_path, parse_text
from ..core.tracks import TRACKS
from ..episodes.generators.queries import QUERY_REGIMES
from ..evaluation.run_folder import check_folder_path
from ..scoring.metrics import METRIC_NAMES
from .inputs import check_policies, check_same_limits, read_run
from .settings import CommandSettings, Setting, Settings, switch

DEFAULT_BASELINE_STORE = "runs/baseline"


def _learned_in(run: Path) -> set[str]:
    """The labels of the run's learned agents, from the agents its run.json records."""
    from .evaluation import learned_labels

    try:
        config = json.loads((run / "run.json").read_text(encoding="utf-8")).get("config", {})
        agents = config.get("agents")
        if not isinstance(agents, list):
            raise ValueError("no list of agents")
        return learned_labels(agents)
    except (OSError, ValueError, AttributeError, InputError) as error:
        print(f"note: {run / 'run.json'}: cannot read the run's agents ({one_line(str(error))}): learned agents "
              "are not told apart from the others in the best columns", file=sys.stderr)
        return set()


def _cmd_report(args: Settings) -> int:
    from ..evaluation.run_folder import claim

    run = Path(args.run)
    for name, table in (("highlight", "headroom"), ("track", "paper_tables"), ("diagnostics_budget", "paper_tables")):
        if not args[table] and args.origin_of(name) != "default":
            raise InputError(f"{args.origin_of(name)}: applies to --{table.replace('_', '-')} only")
    if not run.is_dir():
        read_run(run)  # its error says what is missing; claim would make the folder
    # The tables are written into the run folder: not while a wpb eval (or another report)
    # writes it, and from the results as they are while it is held.
    with claim(run, "RUN"):
        text = _report_text(args, run, read_run(run))
    print(text, end="")
    return 0


def _report_text(args: Settings, run: Path, rows: list[dict[str, Any]]) -> str:
    """Write the table ``wpb report`` was asked for into ``run``; its text."""
    from ..evaluation.reports.report import with_limits_note
    from ..evaluation.reports.tables import f1_by_budget_table, headroom_table, paper_tables, transfer_table

    if args.headroom:
        check_policies(args.highlight or (), rows, run, "--highlight")
        text = headroom_table(rows, highlight=args.highlight or (), run=str(run), learned=_learned_in(run))
        text = with_limits_note(text, rows)
        write_atomic(run / "headroom.md", text)
    elif args.f1_by_budget:
        text = with_limits_note(f1_by_budget_table(rows), rows)
        write_atomic(run / "f1_by_budget.md", text)
    elif args.transfer:
        runs = [(path, read_run(Path(path))) for path in args.transfer]
        check_same_limits([(run, rows), *runs], across_regimes=True)
        sources = [r for _, source_rows in runs for r in source_rows]
        text = with_limits_note(transfer_table(rows, sources), rows)
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
        text = with_limits_note(text, rows)
        write_atomic(run / "paper_tables.md", text)
    return text


def _diagnostics_budget(args: Settings, rows: Sequence[dict[str, Any]], run: Path) -> int:
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


def _cmd_compare(args: Settings) -> int:
    from ..evaluation.grid import EPISODE_HASH
    from ..evaluation.reports.compare import compare_runs, comparison_markdown
    from ..evaluation.reports.pairing import SAME_EPISODES, unhashed

    if args.versus and args.against_baseline:
        raise InputError("--versus compares agents within one run; --against-baseline compares a run with the "
                         "baseline: give one of them")
    if not args.against_baseline and args.origin_of("store") != "default":
        raise InputError(f"{args.origin_of('store')}: the baseline folder is read only with --against-baseline")
    if args.versus:
        if len(args.runs) != 1:
            raise InputError("--versus AGENT takes one run folder")
        rows = read_run(Path(args.runs[0]))
        _check_metric(args, rows, args.runs[0])
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
            try:  # two agents of one run: rows without an episode hash pair by index
                comparisons += compare_runs(a, b, metric=args.metric, names=(other, args.versus), one_run=True)
            except ValueError as error:
                raise InputError(f"{args.runs[0]}: {error}") from None
        text = comparison_markdown(comparisons, args.metric, "each other agent (A)", f"{args.versus} (B)", "worse",
                                   wide=args.wide)
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
    check_same_limits([(run_a, rows_a), (run_b, rows_b)])
    _check_metric(args, rows_a, run_a)
    _check_metric(args, rows_b, run_b)
    check_policies(args.agents or (), rows_a + rows_b, f"{run_a} or {run_b}", "--agents")
    hint = SAME_EPISODES
    if args.against_baseline:
        record = f"wpb baseline set RUN --store {run_a}"
        hint += f", or record as the baseline a run on this run's episodes ({record})"
        if not all(row[EPISODE_HASH] for row in rows_a):
            raise InputError(f"{unhashed(run_a)}, then record it as the baseline again ({record})")
    try:
        comparisons = compare_runs(
            rows_a, rows_b, metric=args.metric, agents=args.agents, names=(str(run_a), str(run_b)), hint=hint
        )
    except ValueError as error:  # not the same episodes: a paired comparison would mean nothing
        raise InputError(str(error)) from None
    if not comparisons:
        raise InputError("the two runs share no (condition, agent)")
    print(comparison_markdown(comparisons, args.metric, str(run_a), str(run_b), wide=args.wide), end="")
    regressions = [c for c in comparisons if c.regression]
    if args.against_baseline:
        print(f"\n{len(regressions)} regression(s) against the baseline in {run_a}")
        return 1 if regressions else 0
    return 0


def _cmd_baseline(args: Settings) -> int:
    run = Path(args.run)
    read_run(run)  # a complete, readable run only
    store = Path(args.store)
    check_folder_path(store, "--store")
    for name in ("run.json", "results.csv"):  # results.csv last: a half-copied baseline is not one
        source = run / name
        if source.exists():
            write_atomic(store / name, source.read_text(encoding="utf-8"))
        elif (store / name).exists():  # the earlier baseline's, which would describe another run
            (store / name).unlink()
    print(f"baseline recorded in {store} (from {run})")
    return 0


def _cmd_seeds(args: Settings) -> int:
    from ..evaluation.grid import EPISODE_HASH
    from ..evaluation.reports.pairing import unhashed
    from ..evaluation.reports.seed_stats import seed_table, seed_table_markdown

    runs = [(run, read_run(Path(run))) for run in args.runs]
    check_same_limits(runs)
    rows = [row for _, run_rows in runs for row in run_rows]
    where = ", ".join(map(str, args.runs))
    _check_metric(args, rows, where)
    if len(runs) > 1:  # rows of one run pair by index without a hash; of several, only by the hash
        for run, run_rows in runs:
            if not all(row[EPISODE_HASH] for row in run_rows):
                raise InputError(f"{unhashed(run)}; or give `wpb seeds` that run alone")
    groups: dict[str, list[str]] = {}
    for item in args.learned:
        name, sep, labels = item.partition("=")
        name = name.strip()
        seeds = [label.strip() for label in labels.split(",") if label.strip()]
        if not sep or not name or not seeds:
            raise InputError(f"--learned expects NAME=LABEL,LABEL,..., got {item!r}")
        if name in groups:
            raise InputError(f"--learned: {name} is given twice")
        if len(set(seeds)) != len(seeds):
            raise InputError(f"--learned {name}: a seed's label is given twice in {item!r}")
        check_policies(seeds, rows, where, f"--learned {name}")
        groups[name] = seeds
    references = [r.strip() for r in args.versus.split(",") if r.strip()]
    if not references:
        raise InputError(f"--versus: expected references (LABEL, LABEL@TRACK or best@TRACK), got {args.versus!r}")
    for reference in references:
        _, at, track = reference.partition("@")
        if at and track not in TRACKS:
            raise InputError(f"--versus {reference!r}: unknown track {track!r}; tracks: {', '.join(TRACKS)}")
    named = [r.partition("@")[0] for r in references if r.partition("@")[0] != "best"]
    check_policies(named, rows, where, "--versus")
    try:
        results = seed_table(rows, groups, references, metric=args.metric, one_run=len(runs) == 1)
        text = seed_table_markdown(results, args.metric)
    except ValueError as error:
        raise InputError(f"{where}: {error}") from None
    print(text, end="")
    if args.out:
        write_atomic(args.out, text)
    return 0


def _check_metric(args: Settings, rows: Sequence[dict[str, Any]], where: Any) -> None:
    """Refuse a query metric for results that hold none (no episode of the query tier)."""
    from ..evaluation.reports.report import has_query_accuracy

    if args.metric == QUERY_METRIC and not has_query_accuracy(rows):
        regimes = ", ".join(sorted({str(r["mode"]) for r in rows}))
        raise InputError(
            f"{args.origin_of('metric')} {QUERY_METRIC}: {where} has no query-tier results (its regimes: {regimes}); "
            f"query accuracy is scored on {', '.join(QUERY_REGIMES)} only"
        )


QUERY_METRIC = "query_accuracy"  # the query tier's headline score (empty for other regimes)
METRICS = ("f1", "recall", "precision", "utility_per_kb", "regret_write_only", "policy_utility", "drift_coverage")
METRICS += (QUERY_METRIC,)
SEED_METRICS = (*METRIC_NAMES, QUERY_METRIC)
RUN_HELP = "a run folder written by wpb eval"

REPORT = CommandSettings(
    "wpb report",
    (
        Setting("run", parse_path, RUN_HELP, positional=True, required=True),
        switch("paper_tables", "F1 vs budget and diagnostics -> paper_tables.md"),
        switch("headroom", "hindsight F1 bound vs the best policy per track -> headroom.md"),
        switch(
            "f1_by_budget",
            "every policy's mean F1 [95%% CI] at each budget, and the hindsight bound -> f1_by_budget.md",
        ),
        Setting(
            "transfer",
            parse_path,
            "rank agreement of the policies between RUN's regimes and those of these runs -> transfer.md",
            many=True,
            metavar="SYNTHETIC_RUN",
        ),
        Setting("highlight", parse_names, "with --headroom: policies shown in columns of their own"),
        Setting(
            "track", partial(parse_choice, choices=TRACKS), "the track to tabulate", default="privileged"
        ),
        Setting("diagnostics_budget", parse_budget, "Table 4's budget (default: 10KB, else the nearest)"),
    ),
    one_of=(("paper_tables", "headroom", "f1_by_budget", "transfer"),),
)

COMPARE = CommandSettings(
    "wpb compare",
    (
        Setting(
            "runs",
            parse_path,
            "RUN_A RUN_B, or the new RUN with --against-baseline",
            positional=True,
            many=True,
            required=True,
        ),
        Setting("agents", parse_names, "only these agents"),
        Setting("metric", partial(parse_choice, choices=METRICS), f"one of {', '.join(METRICS)}", default="f1"),
        switch(
            "against_baseline",
            "compare RUN with the recorded baseline; exit 1 if any metric dropped beyond its CI",
        ),
        Setting("store", parse_path, "baseline folder", default=DEFAULT_BASELINE_STORE),
        Setting("versus", parse_text, "in one run: AGENT against every other agent, paired", metavar="AGENT"),
        switch("wide", "add each side's IQM, pooled recall and rejected-action rate to the table"),
    ),
)

SEEDS = CommandSettings(
    "wpb seeds",
    (
        Setting(
            "runs",
            parse_path,
            "run folders written by wpb eval (one table for all)",
            positional=True,
            many=True,
            required=True,
        ),
        Setting(
            "learned",
            parse_text,
            "a learned agent and the policy labels of its seeds in the run (repeat for several)",
            many=True,
            repeat=True,
            required=True,
            metavar="NAME=LABEL,LABEL,...",
        ),
        Setting(
            "versus",
            parse_text,
            "references: policy labels, LABEL@TRACK, or best@TRACK",
            default="breaking_detector,best@privileged",
            metavar="REF,...",
        ),
        Setting(
            "metric", partial(parse_choice, choices=SEED_METRICS), f"one of {', '.join(SEED_METRICS)}", default="f1"
        ),
        Setting("out", parse_path, "also write the table to this file", in_config=False),
    ),
)

BASELINE_SET = CommandSettings(
    "wpb baseline set",
    (
        Setting("run", parse_path, RUN_HELP, positional=True, required=True),
        Setting("store", parse_path, "baseline folder", default=DEFAULT_BASELINE_STORE),
    ),
)


def add_commands(sub: Any) -> None:
    """Add report, compare, seeds and baseline to the ``wpb`` subcommands ``sub``."""
    report = sub.add_parser("report", help="tables of a run folder (the paper's Tables 2-4 layout, or headroom)")
    REPORT.add_to(report)
    report.set_defaults(func=_cmd_report, prog=report.prog, settings=REPORT)

    compare = sub.add_parser("compare", help="paired comparison of two runs (lift, P(improvement), IQM, exact CIs)")
    COMPARE.add_to(compare)
    compare.set_defaults(func=_cmd_compare, prog=compare.prog, settings=COMPARE)

    seeds = sub.add_parser(
        "seeds",
        help="learned agents over their training seeds: IQM, lifts, P(improvement), optimality gap (rliable)",
        description="Per condition, a learned agent's seeds (the unit of variation) on the run's held-out "
        "episodes: per-seed means, IQM with a stratified bootstrap CI, paired lifts against references with "
        "two-level bootstrap CIs, probability of improvement and the optimality gap against the hindsight bound.",
    )
    SEEDS.add_to(seeds)
    seeds.set_defaults(func=_cmd_seeds, prog=seeds.prog, settings=SEEDS)

    baseline = sub.add_parser("baseline", help="record an accepted run as the regression baseline")
    baseline_sub = baseline.add_subparsers(dest="action", required=True)
    baseline_set = baseline_sub.add_parser("set", help="record RUN as the baseline")
    BASELINE_SET.add_to(baseline_set)
    baseline_set.set_defaults(func=_cmd_baseline, prog=baseline_set.prog, settings=BASELINE_SET)
