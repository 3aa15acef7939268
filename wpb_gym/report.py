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

from .grid import ROW_COLUMNS
from .policy import ORACLE

LEADERBOARD_METRICS = (
    ("recall", "Recall"),
    ("f1", "F1"),
    ("utility_per_kb", "Util/KB"),
    ("avg_staleness", "Avg Staleness"),
)


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
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


def bootstrap_ci(values: Sequence[float], confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """A bootstrap ``confidence`` interval of the mean (BCa; percentile when BCa is undefined).

    With fewer than 2 values there is no interval (NaN, NaN); equal values give (v, v).
    """
    data = np.asarray(values, dtype=float)
    if data.size < 2:
        return (math.nan, math.nan)
    if np.all(data == data[0]):
        return (float(data[0]), float(data[0]))
    rng = np.random.default_rng(seed)
    for method in ("BCa", "percentile"):
        result = stats.bootstrap(
            (data,), np.mean, confidence_level=confidence, n_resamples=2000, method=method, random_state=rng
        )
        low, high = result.confidence_interval
        if math.isfinite(low) and math.isfinite(high):
            return (float(low), float(high))
    return (math.nan, math.nan)  # pragma: no cover - percentile intervals are finite for finite data


def _cell(values: Sequence[float], digits: int) -> str:
    mean = float(np.mean(values))
    low, high = bootstrap_ci(values)
    if math.isnan(low):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def leaderboard(rows: Sequence[dict[str, Any]], budget: int = 10240) -> str:
    """Spec §6.4's leaderboard per (regime, length, track) at ``budget``: mean [95% CI]."""
    budgets = sorted({r["budget_bytes"] for r in rows})
    if not budgets:
        return "# Leaderboard\n\nNo results.\n"
    if budget not in budgets:
        budget = min(budgets, key=lambda b: (abs(b - budget), b))
    at = f"{budget // 1024}KB" if budget % 1024 == 0 else f"{budget}B"
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
        for policy, prows in ranked:
            name = f"{policy} (oracle bound)" if prows[0]["policy_track"] == ORACLE else policy
            cells = [
                _cell([r[key] for r in prows], 2 if key == "avg_staleness" else 3) for key, _ in LEADERBOARD_METRICS
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {len(prows)} |")
    return "\n".join(lines) + "\n"


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
