"""Comparing two evaluation runs, episode by episode.

For every condition (regime, length, budget, track) and agent present in both runs, the
rows are paired by episode, the same episode content in both (``episode_hash``, see
``pairing``), and compared on one metric:

* lift: mean of B − A over the paired episodes, with a paired bootstrap 95% interval
  (``scipy.stats.bootstrap`` on the differences);
* probability of improvement P(B > A) + ½ P(B = A) over all pairs of episodes, as in rliable
  (the Mann–Whitney U statistic divided by n·m, ``scipy.stats.mannwhitneyu``);
* the interquartile mean (IQM) of each run, as in rliable (``scipy.stats.trim_mean`` with
  25% cut at each end);
* exact Clopper–Pearson 95% intervals (``scipy.stats.binomtest``) for pooled rates:
  recall = Σtp / Σ(tp + fn) and the rejected-action rate = Σrejected / Σactions.

A regression is a comparison whose lift interval lies wholly below zero.

Only episodes both runs played are paired. A condition where the two share none is refused
(``pairing.EpisodeMismatch``): the runs were evaluated on different episodes (another
``--seed``, another episode file), and a paired lift between them would mean nothing. Where
they share some, those are compared and the others are counted (``Comparison.only_a`` and
``only_b``), and the markdown table says how many were left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from ..grid import QUERY_COLUMNS
from .markdown import markdown_text as md
from .pairing import SAME_EPISODES, by_episode, by_index, check_hashed, not_same
from .report import bootstrap_ci, present

CONDITION_KEYS = ("mode", "steps", "budget_bytes", "track", "policy")


@dataclass(frozen=True)
class Comparison:
    condition: tuple
    episodes: int
    mean_a: float
    mean_b: float
    lift: float
    lift_low: float
    lift_high: float
    p_improvement: float
    iqm_a: float
    iqm_b: float
    recall_a: tuple[float, float, float]  # pooled rate, CP low, CP high
    recall_b: tuple[float, float, float]
    rejected_a: tuple[float, float, float]
    rejected_b: tuple[float, float, float]
    only_a: int = 0  # episodes of the condition that A played and B did not: left out
    only_b: int = 0

    @property
    def regression(self) -> bool:
        """B is worse than A beyond the 95% interval of the paired lift."""
        return not math.isnan(self.lift_high) and self.lift_high < 0


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float, float]:
    """(rate, low, high): the exact binomial interval; (nan, nan, nan) without trials."""
    if trials == 0:
        return (math.nan, math.nan, math.nan)
    interval = stats.binomtest(successes, trials).proportion_ci(confidence_level=confidence, method="exact")
    return (successes / trials, float(interval.low), float(interval.high))


def probability_of_improvement(a: Sequence[float], b: Sequence[float]) -> float:
    """P(B > A) + ½ P(B = A) over all pairs (rliable's definition)."""
    if len(a) == 0 or len(b) == 0:
        return math.nan
    u = stats.mannwhitneyu(b, a, alternative="two-sided").statistic
    return float(u) / (len(a) * len(b))


def iqm(values: Sequence[float]) -> float:
    """Interquartile mean: the mean of the middle 50% (rliable's IQM)."""
    return float(stats.trim_mean(np.asarray(values, dtype=float), 0.25)) if len(values) else math.nan


def compare_runs(
    rows_a: Sequence[dict[str, Any]],
    rows_b: Sequence[dict[str, Any]],
    metric: str = "f1",
    agents: Sequence[str] | None = None,
    names: tuple[str, str] = ("A", "B"),
    one_run: bool = False,
    hint: str = SAME_EPISODES,
) -> list[Comparison]:
    """One comparison per condition and agent present in both runs, over the episodes both
    played (paired by episode content). A query column (``query_accuracy``) is compared on the
    rows that hold it: the query tier's.

    ``names`` name the two sides in errors. Raises ``pairing.EpisodeMismatch`` when a condition
    has no episode in common (its message ends with ``hint``: what to do), or when a side's rows
    have no episode hash (results written before rows carried one); ``one_run``: both sides are
    rows of one run (two agents of it), which pair by ``episode_index`` when they lack the hash.
    """
    if not one_run:
        for name, rows in zip(names, (rows_a, rows_b), strict=True):
            check_hashed(rows, name)
    index = by_index([*rows_a, *rows_b], one_run)

    def table(rows, name):
        groups: dict[tuple, list[dict[str, Any]]] = {}
        for r in rows:
            if metric in QUERY_COLUMNS and not present(r.get(metric)):
                continue
            if agents is None or r["policy"] in agents:
                groups.setdefault(tuple(r[k] for k in CONDITION_KEYS), []).append(r)
        return {
            condition: by_episode(group, f"{name}, {_named(condition)}", index) for condition, group in groups.items()
        }

    a_table, b_table = table(rows_a, names[0]), table(rows_b, names[1])
    results = []
    for condition in sorted(set(a_table) & set(b_table), key=lambda c: tuple(map(str, c))):
        a_cell, b_cell = a_table[condition], b_table[condition]
        shared = [episode for episode in a_cell if episode in b_cell]  # in the order of A's episode_index
        if not shared:
            raise not_same(names, _named(condition), a_cell, b_cell, hint)
        a_rows = [a_cell[e] for e in shared]
        b_rows = [b_cell[e] for e in shared]
        a = np.array([r[metric] for r in a_rows], dtype=float)
        b = np.array([r[metric] for r in b_rows], dtype=float)
        low, high = bootstrap_ci(b - a)
        results.append(
            Comparison(
                condition=condition,
                episodes=len(shared),
                mean_a=float(a.mean()),
                mean_b=float(b.mean()),
                lift=float((b - a).mean()),
                lift_low=low,
                lift_high=high,
                p_improvement=probability_of_improvement(a, b),
                iqm_a=iqm(a),
                iqm_b=iqm(b),
                recall_a=_pooled_recall(a_rows),
                recall_b=_pooled_recall(b_rows),
                rejected_a=_pooled_rejections(a_rows),
                rejected_b=_pooled_rejections(b_rows),
                only_a=len(a_cell) - len(shared),
                only_b=len(b_cell) - len(shared),
            )
        )
    return results


def _named(condition: tuple) -> str:
    """``condition (breaking, 1000, 1024, unprivileged), agent X`` for a key of CONDITION_KEYS."""
    *where, policy = condition
    return f"condition ({', '.join(map(str, where))}), agent {policy}"


def _pooled_recall(rows) -> tuple[float, float, float]:
    tp = sum(int(r["tp"]) for r in rows)
    return clopper_pearson(tp, tp + sum(int(r["fn"]) for r in rows))


def _pooled_rejections(rows) -> tuple[float, float, float]:
    return clopper_pearson(sum(int(r["rejected_actions"]) for r in rows), sum(int(r["actions"]) for r in rows))


def _interval(rate: tuple[float, float, float]) -> str:
    value, low, high = rate
    return "n/a" if math.isnan(value) else f"{value:.3f} [{low:.3f}, {high:.3f}]"


def comparison_markdown(
    comparisons: Sequence[Comparison],
    metric: str,
    label_a: str,
    label_b: str,
    flag: str = "**regression**",
    wide: bool = False,
) -> str:
    """The comparisons as a markdown table; ``flag`` marks a lift whose interval is below zero.

    The table has the columns a comparison is read by (the condition, n, both means, the lift
    with its interval, P(B>A) and the flag); ``wide`` adds each side's IQM, pooled recall and
    rejected-action rate with their exact intervals."""
    lines = [
        f"# {md(label_b)} vs {md(label_a)} on {md(metric)}",
        "",
        "Lift = mean of B − A over paired episodes (the same episode content in both) [paired bootstrap 95% CI]; "
        "P(B>A) as in rliable; flag: the lift's interval lies below 0."
        + (" IQM = interquartile mean; recall and rejected-action rate pooled over episodes [exact Clopper–Pearson "
           "95%]." if wide else " --wide adds IQM, pooled recall and rejected-action rates."),
        "",
    ]
    columns = ["regime", "T", "budget", "track", "agent", "n", "A", "B", "lift [95% CI]", "P(B>A)"]
    if wide:
        columns += ["IQM A", "IQM B", "recall A", "recall B", "rejected A", "rejected B"]
    columns.append("flag")
    lines += ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for c in comparisons:
        mode, steps, budget, track, policy = c.condition
        ci = "" if math.isnan(c.lift_low) else f" [{c.lift_low:+.3f}, {c.lift_high:+.3f}]"
        cells = [md(mode), str(steps), str(budget), md(track), md(policy), str(c.episodes), f"{c.mean_a:.3f}",
                 f"{c.mean_b:.3f}", f"{c.lift:+.3f}{ci}", f"{c.p_improvement:.2f}"]
        if wide:
            cells += [f"{c.iqm_a:.3f}", f"{c.iqm_b:.3f}", _interval(c.recall_a), _interval(c.recall_b),
                      _interval(c.rejected_a), _interval(c.rejected_b)]
        cells.append(flag if c.regression else "")
        lines.append("| " + " | ".join(cells) + " |")
    partial = [c for c in comparisons if c.only_a or c.only_b]
    if partial:
        lines += ["", "Episodes that only one run played are left out (n counts the episodes both played):", ""]
        lines += [
            f"- {md(_named(c.condition))}: {c.only_a} of A's {c.episodes + c.only_a} episodes and {c.only_b} of B's "
            f"{c.episodes + c.only_b}"
            for c in partial
        ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- ablations
ABLATION_METRICS = ("f1", "recall", "utility_per_kb", "avg_staleness")
# Both variants play the generated episodes of seeds 0..N-1 of their regimes and lengths.
ABLATION_EPISODES = "the two configs must generate the same episodes for each seed"


def _std(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1)) if values.size > 1 else 0.0


def _where(key: tuple) -> str:
    """A key of ``CONDITION_KEYS`` (or of its first four, without the agent) in an error."""
    return _named(key) if len(key) == len(CONDITION_KEYS) else f"condition ({', '.join(map(str, key))})"


def _cells(rows: Sequence[dict[str, Any]], keys: Sequence[str], name: str) -> dict[tuple, dict]:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    return {key: by_episode(group, f"{name}, {_where(key)}") for key, group in groups.items()}


def ablation_markdown(
    runs_a: Sequence[Sequence[dict[str, Any]]],
    runs_b: Sequence[Sequence[dict[str, Any]]],
    label_a: str,
    label_b: str,
    metrics: Sequence[str] = ABLATION_METRICS,
) -> str:
    """Variant B against A over the same seeds: mean ± std across seeds of each seed's episode
    mean, and a paired t-test over seeds (``scipy.stats.ttest_rel``) per metric.

    Rows are matched by condition and agent; when each variant runs a single agent (an
    ablation of one agent against another), by condition only. A seed's mean is over the
    episodes both variants played on it (by episode content, as in ``compare_runs``): the
    others are listed under the tables, and a seed and condition with none in common is
    refused (``pairing.EpisodeMismatch``).
    """
    seeds = len(runs_a)
    agents_a = {r["policy"] for rows in runs_a for r in rows}
    agents_b = {r["policy"] for rows in runs_b for r in rows}
    by_agent = not (len(agents_a) == 1 and len(agents_b) == 1)
    keys_of = CONDITION_KEYS if by_agent else CONDITION_KEYS[:-1]
    cells_a = [_cells(rows, keys_of, f"{label_a}, seed {s}") for s, rows in enumerate(runs_a)]
    cells_b = [_cells(rows, keys_of, f"{label_b}, seed {s}") for s, rows in enumerate(runs_b)]
    keys = sorted(set.intersection(*(set(c) for c in cells_a + cells_b)), key=lambda c: tuple(map(str, c)))
    shared: dict[tuple[int, tuple], list] = {}
    left_out = []
    for s, (a_cells, b_cells) in enumerate(zip(cells_a, cells_b, strict=True)):
        for key in keys:
            a_cell, b_cell = a_cells[key], b_cells[key]
            shared[s, key] = [episode for episode in a_cell if episode in b_cell]
            if not shared[s, key]:
                raise not_same((label_a, label_b), f"seed {s}, {_where(key)}", a_cell, b_cell, ABLATION_EPISODES)
            only_a, only_b = len(a_cell) - len(shared[s, key]), len(b_cell) - len(shared[s, key])
            if only_a or only_b:
                left_out.append(f"- seed {s}, {md(_where(key))}: {only_a} of A's {len(a_cell)} episodes and {only_b} of "
                                f"B's {len(b_cell)}")
    lines = [
        f"# Ablation: {md(label_b)} (B) vs {md(label_a)} (A), {seeds} seeds",
        "",
        "Per seed, the mean over the episodes both variants played on it; then mean ± std across seeds. p: paired "
        "t-test over seeds (two-sided); * marks p < 0.05.",
    ]
    for metric in metrics:
        lines += [
            "",
            f"## {metric}",
            "",
            "| regime | T | budget | track | agent | A | B | B − A | p |",
            "|---" * 9 + "|",
        ]
        for key in keys:
            a = np.array([np.mean([float(cells_a[s][key][e][metric]) for e in shared[s, key]]) for s in range(seeds)])
            b = np.array([np.mean([float(cells_b[s][key][e][metric]) for e in shared[s, key]]) for s in range(seeds)])
            if seeds > 1 and np.any(a != b):
                p = float(stats.ttest_rel(b, a).pvalue)
            else:
                p = math.nan
            mark = "*" if p < 0.05 else ""
            mode, steps, budget, track = key[:4]
            policy = md(key[4]) if by_agent else f"{md(next(iter(agents_a)))} → {md(next(iter(agents_b)))}"
            p_text = "n/a" if math.isnan(p) else f"{p:.3g}{mark}"
            lines.append(
                f"| {md(mode)} | {steps} | {budget} | {md(track)} | {policy} | {a.mean():.3f} ± {_std(a):.3f} | "
                f"{b.mean():.3f} ± {_std(b):.3f} | {b.mean() - a.mean():+.3f} | {p_text} |"
            )
    if left_out:
        lines += ["", "Episodes that only one variant played are left out of its seed's means:", "", *left_out]
    return "\n".join(lines) + "\n"
