"""What an evaluation run writes: results.csv, run.json and leaderboard.md, each atomically.

Every file is written to a temporary name in the same folder and renamed into place, so an
interrupted run never leaves a file that looks complete. Confidence intervals are bootstrap
95% intervals over episodes (``scipy.stats.bootstrap``, seeded: the same rows give the same
intervals).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...core.policy import ORACLE
from ..grid import (
    EPISODE_HASH,
    ERROR_COLUMN,
    INT_COLUMNS,
    COMPRESSION_COLUMN,
    KIND_BUDGETS_COLUMN,
    LIMIT_COLUMNS,
    QUERY_COLUMNS,
    ROW_COLUMNS,
    WRITE_TIME_COLUMN,
)
from .intervals import bootstrap_ci, bootstrap_cis
from .markdown import markdown_code, markdown_text

LEADERBOARD_METRICS = (
    ("recall", "Recall"),
    ("f1", "F1"),
    ("utility_per_kb", "Util/KB"),
    ("avg_staleness", "Avg Staleness"),
)


RUN_COLUMNS = ("seed", "version", "git_commit", "config_hash")


def results_csv(rows: Sequence[dict[str, Any]], run: dict[str, Any]) -> str:
    """The rows as CSV text: ``grid.ROW_COLUMNS``, then the run's seed, version, commit and
    config hash on every row. Floats keep full precision; a value that is absent (the query
    columns of an episode without queries) is an empty cell."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=ROW_COLUMNS + RUN_COLUMNS, extrasaction="raise", lineterminator="\n")
    writer.writeheader()
    extra = {k: ("" if run.get(k) is None else run[k]) for k in RUN_COLUMNS}
    for row in rows:
        writer.writerow({**{k: _cell(k, v) for k, v in row.items()}, **extra})
    return out.getvalue()


def _cell(column: str, value: Any) -> Any:
    if column in QUERY_COLUMNS and not present(value):
        return ""
    return repr(value) if isinstance(value, float) else value


def present(value: Any) -> bool:
    """Whether a row's value is there: not None (a run's rows) and not NaN (rows read back)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def has_query_accuracy(rows: Iterable[dict[str, Any]]) -> bool:
    """Whether any row holds a query accuracy (an episode of the query tier)."""
    return any(present(r.get("query_accuracy")) for r in rows)


def present_values(rows: Iterable[dict[str, Any]], key: str) -> list[float]:
    """The values of ``key`` the rows hold (absent ones left out)."""
    return [float(r[key]) for r in rows if present(r.get(key))]


def per_episode(rows: Iterable[dict[str, Any]], key: str) -> list[float]:
    """One value of ``key`` per episode (a bound is the same for every policy of an episode)."""
    seen: dict[Any, float] = {}
    for r in rows:
        if present(r.get(key)):
            seen.setdefault(r["episode_index"], float(r[key]))
    return list(seen.values())


def mean_cell(values: Sequence[float], digits: int, interval: tuple[float, float] | None = None) -> str:
    """``mean [low, high]`` (the interval computed here unless given)."""
    mean = float(np.mean(values))
    low, high = bootstrap_ci(values) if interval is None else interval
    if math.isnan(low):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def budget_label(budget: int) -> str:
    """``10240`` -> ``"10KB"``; budgets that are not whole KB stay in bytes."""
    return f"{budget // 1024}KB" if budget % 1024 == 0 else f"{budget}B"


def leaderboard(rows: Sequence[dict[str, Any]], budget: int = 10240) -> str:
    """Spec §6.4's leaderboard per (regime, length, track) at ``budget``: mean [95% CI]."""
    budgets = sorted({r["budget_bytes"] for r in rows})
    if not budgets:
        return "# Leaderboard\n\nNo results.\n"
    if budget not in budgets:
        budget = min(budgets, key=lambda b: (abs(b - budget), b))
    at = budget_label(budget)
    lines = [
        "# Leaderboard",
        "",
        f"Means over episodes at a budget of {at}, with bootstrap 95% confidence intervals in brackets.",
        "Policies marked (oracle) read the hidden labels: bounds such as `oracle_optimal` or privileged "
        "references such as `causal_privileged`, not competitors.",
        "",
        COLUMN_NOTE,
    ]
    lines[3:3] = limits_lines([r for r in rows if r["budget_bytes"] == budget])
    groups: dict[tuple, dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        if r["budget_bytes"] == budget:
            groups.setdefault((r["mode"], r["steps"], r["track"]), {}).setdefault(r["policy"], []).append(r)
    header = "| Policy | " + " | ".join(
        f"{name}@{at}" if key in ("recall", "f1") else name for key, name in LEADERBOARD_METRICS
    )
    for (mode, steps, track), by_policy in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        if has_query_accuracy(r for prows in by_policy.values() for r in prows):
            lines += _query_group(mode, steps, track, at, by_policy)
            continue
        heading = f"## {markdown_text(mode)}, T={steps}, {markdown_text(track)} track"
        lines += ["", heading, "", header + " | Episodes |", "|---" * 6 + "|"]
        ranked = sorted(by_policy.items(), key=lambda kv: (-float(np.mean([r["f1"] for r in kv[1]])), kv[0]))
        samples = [_column_values(prows, key) for _, prows in ranked for key, _ in LEADERBOARD_METRICS]
        intervals, values = iter(bootstrap_cis(samples)), iter(samples)
        for policy, prows in ranked:
            name = markdown_text(policy) + (" (oracle)" if prows[0]["policy_track"] == ORACLE else "")
            cells = [_cell_text(key, next(values), next(intervals)) for key, _ in LEADERBOARD_METRICS]
            if any(r.get(ERROR_COLUMN) for r in prows):
                name += " †"
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {len(prows)} |")
    return "\n".join(lines + _error_notes(rows)) + "\n"


def _query_group(mode: Any, steps: Any, track: str, at: str, by_policy: dict[str, list[dict[str, Any]]]) -> list[str]:
    """A leaderboard group of the query tier: query accuracy first, policies ranked by it, and
    the hindsight bound on it above the table."""
    every = [r for prows in by_policy.values() for r in prows]
    upper, feasible = per_episode(every, "query_bound"), per_episode(every, "query_feasible")
    lines = ["", f"## {markdown_text(mode)}, T={steps}, {markdown_text(track)} track", ""]
    if upper:
        lines += [
            f"Hindsight bound on query accuracy: {mean_cell(upper, 3)} (a schedule found with hindsight reaches "
            f"{np.mean(feasible):.3f}); mean over {len(upper)} episodes. Oracle-track policies read the hidden "
            "state, not the future.",
            "",
        ]
    metric_names = [f"{name}@{at}" if key in ("recall", "f1") else name for key, name in LEADERBOARD_METRICS]
    lines += ["| Policy | " + " | ".join([f"Query acc.@{at}", *metric_names]) + " | Episodes |", "|---" * 7 + "|"]

    def accuracy(prows: list[dict[str, Any]]) -> float:
        values = present_values(prows, "query_accuracy")
        return float(np.mean(values)) if values else -math.inf

    ranked = sorted(by_policy.items(), key=lambda kv: (-accuracy(kv[1]), kv[0]))
    keys = ["query_accuracy", *(key for key, _ in LEADERBOARD_METRICS)]
    samples = [_column_values(prows, key) for _, prows in ranked for key in keys]
    intervals = iter(bootstrap_cis(samples))
    values = iter(samples)
    for policy, prows in ranked:
        name = markdown_text(policy) + (" (oracle)" if prows[0]["policy_track"] == ORACLE else "")
        cells = [_cell_text(key, next(values), next(intervals)) for key in keys]
        if any(r.get(ERROR_COLUMN) for r in prows):
            name += " †"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {len(prows)} |")
    return lines


COLUMN_NOTE = (
    "Columns: Recall and F1 count the episode's critical steps (its drift events) that the final memory "
    "holds; Query acc. (query tier) is the share of the episode's queries memory answered right; Util/KB is "
    "the utility the memory holds per KB it uses; Avg Staleness is the mean age in steps (T − 1 − t) of the "
    "items it holds, over the episodes where it holds any (n/a: it never held anything). Staleness describes a "
    "memory: lower is not better by itself."
)


def _column_values(rows: Sequence[dict[str, Any]], key: str) -> list[float]:
    """A leaderboard column's per-episode values. An empty memory has no age: its staleness (0 by
    the spec's convention) is left out rather than shown as the freshest memory."""
    if key == "avg_staleness":
        return [float(r[key]) for r in rows if present(r.get(key)) and int(r["tp"]) + int(r["fp"]) > 0]
    return present_values(rows, key)


def _cell_text(key: str, values: Sequence[float], interval: tuple[float, float]) -> str:
    if not values:
        return "n/a" if key == "avg_staleness" else ""
    return mean_cell(values, 2 if key == "avg_staleness" else 3, interval)


def _error_notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """A section on the runs the evaluator stopped or found diverged (†), if there are any."""
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get(ERROR_COLUMN):
            by_policy.setdefault(r["policy"], []).append(r)
    if not by_policy:
        return []
    lines = [
        "",
        "## † Runs with errors",
        "",
        "A policy over a limit is stopped: the rest of its episode counts as SKIP. The `error` column of "
        "results.csv has every message.",
        "",
    ]
    for policy, prows in sorted(by_policy.items()):
        first = prows[0]
        lines.append(
            f"- {markdown_code(policy)}: {len(prows)} of {sum(r['policy'] == policy for r in rows)} runs; first: "
            f"{markdown_text(first['mode'])}, episode {first['episode_index']}, {budget_label(first['budget_bytes'])}, "
            f"{markdown_text(first['track'])} track: {markdown_text(first[ERROR_COLUMN])}"
        )
    return lines


def limits_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """A paragraph naming the limits beside the budget the rows ran under (none: no lines)."""
    parts = []
    for column, what in ((KIND_BUDGETS_COLUMN, "kind budgets (bytes per content kind)"),
                         (WRITE_TIME_COLUMN, "write time (ticks per episode and per write)"),
                         (COMPRESSION_COLUMN, "compressed writes (what a compressed critical step is worth)")):
        by_budget: dict[int, set[str]] = {}
        for r in rows:
            by_budget.setdefault(r["budget_bytes"], set()).add(r.get(column) or "")
        if any(values != {""} for values in by_budget.values()):
            shown = "; ".join(f"{budget_label(b)}: " + ", ".join(f"`{v}`" if v else "none" for v in sorted(values))
                              for b, values in sorted(by_budget.items()))
            parts.append(f"Limits beside the budget, {what}: {shown}.")
    if not parts:
        return []
    return [" ".join(parts) + " The hindsight bounds respect them.", ""]


def with_limits_note(text: str, rows: Sequence[dict[str, Any]]) -> str:
    """``text`` (a Markdown table page) with ``limits_lines`` after its title."""
    note = limits_lines(rows)
    if not note:
        return text
    title, _, rest = text.partition("\n")
    return "\n".join([title, "", *note]) + ("\n" + rest.lstrip("\n") if rest else "\n")


def config_hash(config: dict[str, Any]) -> str:
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def git_commit(where: str | os.PathLike[str] | None = None) -> str | None:
    """The commit of the git checkout holding ``where`` (this package by default), if any."""
    folder = Path(where) if where is not None else Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit or None


def run_metadata(config: dict[str, Any], notes: Iterable[str], version: str) -> dict[str, Any]:
    return {
        "seed": config.get("seed"),
        "config": config,
        "config_hash": config_hash(config),
        "version": version,
        "git_commit": git_commit(),
        "notes": list(notes),
    }


# ---------------------------------------------------------------------------- reading results back
_INT_COLUMNS = INT_COLUMNS
_TEXT_COLUMNS = {"mode", "track", "policy", "policy_track", "episode_id", EPISODE_HASH, ERROR_COLUMN,
                 *LIMIT_COLUMNS}
# Absent from results written by earlier versions (the query columns then read as NaN, the
# episode hash as "": nothing then says which episodes such a run played).
_OPTIONAL_COLUMNS = {EPISODE_HASH: "", ERROR_COLUMN: "", **dict.fromkeys(LIMIT_COLUMNS, ""),
                     **dict.fromkeys(QUERY_COLUMNS, "")}


def read_results(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a ``results.csv`` with their types; errors name the file, line and column.

    The query columns of an episode without queries (empty cells), or of results written
    before those columns existed, read as NaN; the episode hash of results written before it
    existed reads as ""."""
    path = Path(path)
    try:
        handle = open(path, newline="", encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such results file (run `wpb eval --out ...` first)") from None
    rows = []
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in ROW_COLUMNS if c not in (reader.fieldnames or []) and c not in _OPTIONAL_COLUMNS]
        if missing:
            raise ValueError(f"{path}: not a results.csv of wpb eval; missing columns {missing}")
        for line, raw in enumerate(reader, start=2):
            row: dict[str, Any] = {}
            for column in ROW_COLUMNS:
                text = raw.get(column, _OPTIONAL_COLUMNS.get(column))
                try:
                    if column in _TEXT_COLUMNS:
                        row[column] = text
                    elif column in QUERY_COLUMNS and text == "":  # an episode without queries
                        row[column] = math.nan
                    elif column in _INT_COLUMNS:
                        row[column] = int(text)
                    else:
                        row[column] = float(text)
                except (TypeError, ValueError):
                    raise ValueError(
                        f"{path}, line {line}, column {column!r}: expected a number, got {text!r}"
                    ) from None
            rows.append(row)
    return rows


# ---------------------------------------------------------------------------- aggregates
def ordering(key: tuple) -> tuple:
    """The order of condition keys in every table: ints by value, anything else as text."""
    return tuple(str(x) if not isinstance(x, int) else f"{x:020d}" for x in key)


def grouped(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[tuple, list[dict[str, Any]]]:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    return dict(sorted(groups.items(), key=lambda kv: ordering(kv[0])))


CONDITION = ("mode", "steps", "track", "policy", "budget_bytes")


def recall_at_budget_csv(rows: Sequence[dict[str, Any]]) -> str:
    """Recall vs budget (spec §6.4): mean and bootstrap 95% CI per condition and policy."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CONDITION, "recall_mean", "recall_ci_low", "recall_ci_high", "episodes"])
    groups = grouped(rows, CONDITION)
    samples = [[r["recall"] for r in group] for group in groups.values()]
    for key, values, (low, high) in zip(groups, samples, bootstrap_cis(samples), strict=True):
        writer.writerow([*key, repr(float(np.mean(values))), repr(low), repr(high), len(values)])
    return out.getvalue()


def utility_per_kb_json(rows: Sequence[dict[str, Any]]) -> str:
    """Utility per KB by episode type (regime and length), track, policy and budget."""
    tree: dict[str, Any] = {}
    groups = grouped(rows, CONDITION)
    samples = [[r["utility_per_kb"] for r in group] for group in groups.values()]
    for (mode, steps, track, policy, budget), values, (low, high) in zip(
        groups, samples, bootstrap_cis(samples), strict=True
    ):
        node = tree.setdefault(f"{mode}/T={steps}", {}).setdefault(track, {}).setdefault(policy, {})
        node[str(budget)] = {
            "mean": float(np.mean(values)),
            "ci95": [None if math.isnan(low) else low, None if math.isnan(high) else high],
            "episodes": len(values),
        }
    return json.dumps(tree, indent=2) + "\n"


def confusion_matrix_csv(rows: Sequence[dict[str, Any]]) -> str:
    """Confusion counts summed over episodes, with the micro precision and recall they give."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CONDITION, "tp", "fp", "fn", "tn", "precision_micro", "recall_micro", "episodes"])
    for key, group in grouped(rows, CONDITION).items():
        tp, fp, fn, tn = (sum(r[c] for r in group) for c in ("tp", "fp", "fn", "tn"))
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        writer.writerow([*key, tp, fp, fn, tn, repr(precision), repr(recall), len(group)])
    return out.getvalue()


# Every condition's metrics; the query columns follow them in the conditions whose rows hold them.
SUMMARY_METRICS = tuple(
    c
    for c in ROW_COLUMNS
    if c not in CONDITION
    and c not in ("policy_track", "episode_id", "episode_index", EPISODE_HASH, ERROR_COLUMN, *LIMIT_COLUMNS)
    and c not in QUERY_COLUMNS
)


SUMMARY_HEADER = ",".join([*CONDITION, "metric", "mean", "ci_low", "ci_high", "episodes"]) + "\n"


def summary_csv(rows: Sequence[dict[str, Any]], seed: int = 0) -> str:
    """Every metric per condition and agent: mean and bootstrap 95% CI over episodes (BCa, and
    the percentile interval where BCa is undefined; equal values give their mean, a single episode
    no interval), all computed together (``bootstrap_cis``). The query columns are summarised
    where the condition's rows hold them (over the episodes that do), and left out elsewhere.
    The rows of each (regime, length) are ``summary_body`` of its rows alone, so the body can
    be computed a regime at a time."""
    return SUMMARY_HEADER + summary_body(rows, seed)


def summary_body(rows: Sequence[dict[str, Any]], seed: int = 0) -> str:
    """``summary_csv`` without its header."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    groups = grouped(rows, CONDITION)
    metrics = {
        key: SUMMARY_METRICS + tuple(m for m in QUERY_COLUMNS if any(present(r.get(m)) for r in group))
        for key, group in groups.items()
    }
    samples = [
        present_values(group, m) if m in QUERY_COLUMNS else [float(r[m]) for r in group]
        for key, group in groups.items()
        for m in metrics[key]
    ]
    intervals = iter(bootstrap_cis(samples, seed=seed))
    values = iter(samples)
    for key in groups:
        for metric in metrics[key]:
            data = next(values)
            low, high = next(intervals)
            writer.writerow([*key, metric, repr(float(np.mean(data))), repr(low), repr(high), len(data)])
    return out.getvalue()
