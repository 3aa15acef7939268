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
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from ...core.policy import ORACLE
from ..grid import ERROR_COLUMN, INT_COLUMNS, ROW_COLUMNS
from .intervals import bootstrap_ci, bootstrap_cis

LEADERBOARD_METRICS = (
    ("recall", "Recall"),
    ("f1", "F1"),
    ("utility_per_kb", "Util/KB"),
    ("avg_staleness", "Avg Staleness"),
)


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename."""
    return write_atomic_bytes(path, text.encode("utf-8"))


def write_atomic_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """``write_atomic`` for bytes (pictures)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


RUN_COLUMNS = ("seed", "version", "git_commit", "config_hash")


def results_csv(rows: Sequence[dict[str, Any]], run: dict[str, Any]) -> str:
    """The rows as CSV text: ``grid.ROW_COLUMNS``, then the run's seed, version, commit and
    config hash on every row. Floats keep full precision."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=ROW_COLUMNS + RUN_COLUMNS, extrasaction="raise", lineterminator="\n")
    writer.writeheader()
    extra = {k: ("" if run.get(k) is None else run[k]) for k in RUN_COLUMNS}
    for row in rows:
        writer.writerow({**{k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()}, **extra})
    return out.getvalue()


def _cell(values: Sequence[float], digits: int, interval: tuple[float, float] | None = None) -> str:
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
        "Oracle policies read the hidden labels: they are upper bounds, not competitors.",
    ]
    groups: dict[tuple, dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        if r["budget_bytes"] == budget:
            groups.setdefault((r["mode"], r["steps"], r["track"]), {}).setdefault(r["policy"], []).append(r)
    header = "| Policy | " + " | ".join(
        f"{name}@{at}" if key in ("recall", "f1") else name for key, name in LEADERBOARD_METRICS
    )
    for (mode, steps, track), by_policy in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        lines += ["", f"## {mode}, T={steps}, {track} track", "", header + " | Episodes |", "|---" * 6 + "|"]
        ranked = sorted(by_policy.items(), key=lambda kv: (-float(np.mean([r["f1"] for r in kv[1]])), kv[0]))
        samples = [[r[key] for r in prows] for _, prows in ranked for key, _ in LEADERBOARD_METRICS]
        intervals = iter(bootstrap_cis(samples))
        for policy, prows in ranked:
            name = f"{policy} (oracle bound)" if prows[0]["policy_track"] == ORACLE else policy
            cells = [
                _cell([r[key] for r in prows], 2 if key == "avg_staleness" else 3, next(intervals))
                for key, _ in LEADERBOARD_METRICS
            ]
            if any(r.get(ERROR_COLUMN) for r in prows):
                name += " †"
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {len(prows)} |")
    return "\n".join(lines + _error_notes(rows)) + "\n"


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
            f"- `{policy}`: {len(prows)} of {sum(r['policy'] == policy for r in rows)} runs; first: "
            f"{first['mode']}, episode {first['episode_index']}, {budget_label(first['budget_bytes'])}, "
            f"{first['track']} track: {first[ERROR_COLUMN]}"
        )
    return lines


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
_TEXT_COLUMNS = {"mode", "track", "policy", "policy_track", "episode_id", ERROR_COLUMN}
_OPTIONAL_COLUMNS = {ERROR_COLUMN: ""}  # absent from results written by earlier versions


def read_results(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a ``results.csv`` with their types; errors name the file, line and column."""
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


def _groups(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[tuple, list[dict[str, Any]]]:
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
    groups = _groups(rows, CONDITION)
    samples = [[r["recall"] for r in group] for group in groups.values()]
    for key, values, (low, high) in zip(groups, samples, bootstrap_cis(samples), strict=True):
        writer.writerow([*key, repr(float(np.mean(values))), repr(low), repr(high), len(values)])
    return out.getvalue()


def utility_per_kb_json(rows: Sequence[dict[str, Any]]) -> str:
    """Utility per KB by episode type (regime and length), track, policy and budget."""
    tree: dict[str, Any] = {}
    groups = _groups(rows, CONDITION)
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
    for key, group in _groups(rows, CONDITION).items():
        tp, fp, fn, tn = (sum(r[c] for r in group) for c in ("tp", "fp", "fn", "tn"))
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        writer.writerow([*key, tp, fp, fn, tn, repr(precision), repr(recall), len(group)])
    return out.getvalue()


def paper_tables(rows: Sequence[dict[str, Any]], track: str = "privileged", diagnostics_budget: int = 10240) -> str:
    """The paper's Tables 2-3 layout (mean F1 vs budget, per regime) and Table 4 (diagnostics)."""
    lines = [f"# Paper tables ({track} track; means over episodes)"]
    chosen = [r for r in rows if r["track"] == track]
    if not chosen:
        return lines[0] + f"\n\nNo results on the {track} track.\n"
    budgets = sorted({r["budget_bytes"] for r in chosen})
    for (mode, steps), group in _groups(chosen, ("mode", "steps")).items():
        lines += ["", f"## Mean F1 vs memory budget: {mode}, T={steps}", ""]
        lines.append("| Policy | " + " | ".join(str(b) for b in budgets) + " |")
        lines.append("|---" * (len(budgets) + 1) + "|")
        for policy, prows in _groups(group, ("policy",)).items():
            cells = []
            for b in budgets:
                values = [r["f1"] for r in prows if r["budget_bytes"] == b]
                cells.append(f"{np.mean(values):.3f}" if values else "")
            lines.append(f"| `{policy[0]}` | " + " | ".join(cells) + " |")
    diag = ("utilization", "write_density", "expire_rate", "avg_staleness", "drift_coverage")
    at = [r for r in chosen if r["budget_bytes"] == diagnostics_budget]
    for (mode, steps), group in _groups(at, ("mode", "steps")).items():
        lines += ["", f"## Memory diagnostics at {diagnostics_budget} bytes: {mode}, T={steps}", ""]
        lines.append("| Policy | " + " | ".join(diag) + " |")
        lines.append("|---" * (len(diag) + 1) + "|")
        for policy, prows in _groups(group, ("policy",)).items():
            cells = [
                f"{np.mean([r[d] for r in prows]):.1f}"
                if d == "avg_staleness"
                else f"{np.mean([r[d] for r in prows]):.3f}"
                for d in diag
            ]
            lines.append(f"| {policy[0]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def headroom_table(rows: Sequence[dict[str, Any]], highlight: Sequence[str] = (), gap_budget: int = 10240) -> str:
    """Per regime and budget: the hindsight F1 bound against the best policy of each track.

    The bound is the mean of ``oracle_f1`` (the best F1 any policy could reach with the
    budget, from the labels) on the unprivileged track. "Best" is the policy with the
    highest mean F1 on its own track, among the run's non-oracle policies; ``highlight``
    names policies shown in columns of their own. The gap is the bound minus the best mean
    F1 of any of them; a benchmark leaves room for learning where it is large.
    """
    lines = [
        "# Headroom (mean F1 over episodes; bound = hindsight F1 bound)",
        "",
        f"Gap = bound - best policy shown; regimes where every policy is 0.15 or more below the bound at "
        f"{gap_budget} bytes leave room for learning.",
    ]
    if not rows:
        return lines[0] + "\n\nNo results.\n"
    extra = " | ".join(f"`{name}`" for name in highlight)
    lines += [
        "",
        "| Regime | T | Budget | Bound | Best unprivileged | Best privileged | "
        + (extra + " | " if extra else "")
        + "Gap |",
        "|---" * (7 + len(highlight)) + "|",
    ]

    def mean_f1(group: list[dict[str, Any]]) -> float:
        return float(np.mean([r["f1"] for r in group]))

    for (mode, steps, budget), group in sorted(_groups(rows, ("mode", "steps", "budget_bytes")).items()):
        bound_rows = [r for r in group if r["track"] == "unprivileged"] or group
        bound = float(np.mean([r["oracle_f1"] for r in bound_rows]))
        best: dict[str, tuple[str, float] | None] = {}
        for track in ("unprivileged", "privileged"):
            own = _groups([r for r in group if r["track"] == track and r["policy_track"] == track], ("policy",))
            scored = [(policy[0], mean_f1(prows)) for policy, prows in own.items()]
            best[track] = max(scored, key=lambda item: (item[1], item[0])) if scored else None
        cells, shown = [], [b[1] for b in best.values() if b is not None]
        for name in highlight:
            prows = [r for r in group if r["policy"] == name and r["track"] == r["policy_track"]]
            if prows:
                shown.append(mean_f1(prows))
            cells.append(f"{mean_f1(prows):.3f}" if prows else "")
        at = budget_label(budget)
        best_cells = [f"{b[1]:.3f} (`{b[0]}`)" if b else "" for b in best.values()]
        gap = f"{bound - max(shown):+.3f}" if shown else ""
        lines.append(f"| {mode} | {steps} | {at} | {bound:.3f} | " + " | ".join(best_cells + cells) + f" | {gap} |")
    return "\n".join(lines) + "\n"


SUMMARY_METRICS = tuple(
    c
    for c in ROW_COLUMNS
    if c not in CONDITION and c not in ("policy_track", "episode_id", "episode_index", ERROR_COLUMN)
)


SUMMARY_HEADER = ",".join([*CONDITION, "metric", "mean", "ci_low", "ci_high", "episodes"]) + "\n"


def summary_csv(rows: Sequence[dict[str, Any]], seed: int = 0) -> str:
    """Every metric per condition and agent: mean and bootstrap 95% CI over episodes (BCa, and
    the percentile interval where BCa is undefined; equal values give (v, v), a single episode
    no interval), all computed together (``bootstrap_cis``). The rows of each (regime, length)
    are ``summary_body`` of its rows alone, so the body can be computed a regime at a time."""
    return SUMMARY_HEADER + summary_body(rows, seed)


def summary_body(rows: Sequence[dict[str, Any]], seed: int = 0) -> str:
    """``summary_csv`` without its header."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    groups = _groups(rows, CONDITION)
    samples = [[float(r[m]) for r in group] for group in groups.values() for m in SUMMARY_METRICS]
    intervals = iter(bootstrap_cis(samples, seed=seed))
    values = iter(samples)
    for key in groups:
        for metric in SUMMARY_METRICS:
            data = next(values)
            low, high = next(intervals)
            writer.writerow([*key, metric, repr(float(np.mean(data))), repr(low), repr(high), len(data)])
    return out.getvalue()


def f1_by_budget_table(rows: Sequence[dict[str, Any]]) -> str:
    """Per regime: every (policy, track) with its mean F1 [bootstrap 95% CI] at each budget, and the bound.

    Policies run on their own track (and unprivileged policies on the privileged one too, as
    the eval grid does); rows are ranked by mean F1 over the budgets. The bound row is the mean
    of ``oracle_f1`` on the unprivileged track.
    """
    lines = ["# F1 by budget (mean over episodes [bootstrap 95% CI])"]
    if not rows:
        return lines[0] + "\n\nNo results.\n"
    for (mode, steps), group in sorted(_groups(rows, ("mode", "steps")).items()):
        budgets = sorted({r["budget_bytes"] for r in group})
        episodes = len({r["episode_index"] for r in group})
        lines += [
            "",
            f"## {mode}, T={steps}, {episodes} episodes",
            "",
            "| Policy | Track | " + " | ".join(budget_label(b) for b in budgets) + " |",
            "|---|---" + "|---" * len(budgets) + "|",
        ]
        bound_rows = [r for r in group if r["track"] == "unprivileged"] or group
        bound = [_cell(_per_episode(bound_rows, b, "oracle_f1"), 3) for b in budgets]
        entries = []
        for (policy, track), prows in _groups(group, ("policy", "track")).items():
            if prows[0]["policy_track"] == ORACLE:
                continue
            cells = [[r["f1"] for r in prows if r["budget_bytes"] == b] for b in budgets]
            mean = float(np.mean([np.mean(c) for c in cells if c]))
            entries.append((-mean, policy, track, [_cell(c, 3) if c else "" for c in cells]))
        for _, policy, track, cells in sorted(entries):
            lines.append(f"| {policy} | {track} | " + " | ".join(cells) + " |")
        lines.append("| **hindsight bound** | | " + " | ".join(bound) + " |")
    return "\n".join(lines) + "\n"


def _per_episode(rows: Sequence[dict[str, Any]], budget: int, key: str) -> list[float]:
    """One value per episode (the bound is the same for every policy of an episode)."""
    seen: dict[Any, float] = {}
    for r in rows:
        if r["budget_bytes"] == budget:
            seen.setdefault(r["episode_index"], r[key])
    return list(seen.values())


def agent_means(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, int, int], dict[tuple[str, str], float]]:
    """``{(regime, T, budget): {(policy, track): mean F1}}`` over the non-oracle policies."""
    out: dict[tuple[str, int, int], dict[tuple[str, str], float]] = {}
    keys = ("mode", "steps", "budget_bytes", "policy", "track")
    for (mode, steps, budget, policy, track), prows in _groups(rows, keys).items():
        if prows[0]["policy_track"] != ORACLE:
            out.setdefault((mode, steps, budget), {})[(policy, track)] = float(np.mean([r["f1"] for r in prows]))
    return out


def transfer_table(target_rows: Sequence[dict[str, Any]], source_rows: Sequence[dict[str, Any]]) -> str:
    """Which synthetic regime predicts performance on the target (real) regime(s)?

    For every target regime, source regime and budget they share, at the same episode length
    (a budget is tighter per step in longer episodes), the policies both runs evaluated (same
    name, same track) are compared: Spearman's rank correlation and
    Kendall's tau of their mean F1 (``scipy.stats``), with the p-value of Spearman's, and the
    mean absolute difference of F1. A regime whose ranking of policies matches the real one
    predicts which policy will do best on real drift; a small absolute difference means it
    also predicts the level.
    """
    target, source = agent_means(target_rows), agent_means(source_rows)
    lines = [
        "# Transfer: how well each synthetic regime predicts the real regime's ranking of policies",
        "",
        "Spearman's rho and Kendall's tau between the policies' mean F1 on the synthetic regime and on the",
        "real one (same policies, same track, same budget); abs dF1 is the mean absolute difference of F1.",
        "Rows are sorted by the mean rho over the budgets the two share.",
    ]
    if not target or not source:
        return "\n".join(lines) + "\n\nNo results.\n"
    for real, steps in sorted({(mode, t) for mode, t, _ in target}):
        budgets = sorted(b for mode, t, b in target if (mode, t) == (real, steps))
        entries = []
        for synthetic in sorted({mode for mode, t, _ in source if t == steps} - {real}):
            cells, rhos = [], []
            for budget in budgets:
                a, b = source.get((synthetic, steps, budget), {}), target[(real, steps, budget)]
                common = sorted(set(a) & set(b))
                if len(common) < 3:
                    cells.append("")
                    continue
                x, y = [a[k] for k in common], [b[k] for k in common]
                rho, p = stats.spearmanr(x, y)
                tau = stats.kendalltau(x, y).statistic
                gap = float(np.mean(np.abs(np.subtract(x, y))))
                rhos.append(rho)
                cells.append(f"{rho:+.2f} (p={p:.2g}) / {tau:+.2f} / {gap:.3f} (n={len(common)})")
            if rhos:
                entries.append((-float(np.nanmean(rhos)), synthetic, cells))
        if not entries:
            lines += ["", f"## {real}, T={steps}", "", f"No synthetic regime was evaluated at T={steps}."]
            continue
        lines += [
            "",
            f"## {real}, T={steps}",
            "",
            "| Synthetic regime | mean rho | "
            + " | ".join(f"{budget_label(b)}: rho / tau / abs dF1" for b in budgets)
            + " |",
            "|---|---" + "|---" * len(budgets) + "|",
        ]
        for neg_mean, synthetic, cells in sorted(entries):
            lines.append(f"| {synthetic} | {-neg_mean:+.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
