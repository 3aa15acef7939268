"""The tables ``wpb report`` writes from a run folder: the paper's Tables 2-4 layout, the
headroom table (the hindsight bound against the best policy per track), every policy's F1 by
budget, and the transfer table (rank agreement between real and synthetic regimes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from ...core.policy import ORACLE
from .report import budget_label, grouped, mean_cell


def paper_tables(rows: Sequence[dict[str, Any]], track: str = "privileged", diagnostics_budget: int = 10240) -> str:
    """The paper's Tables 2-3 layout (mean F1 vs budget, per regime) and Table 4 (diagnostics)."""
    lines = [f"# Paper tables ({track} track; means over episodes)"]
    chosen = [r for r in rows if r["track"] == track]
    if not chosen:
        return lines[0] + f"\n\nNo results on the {track} track.\n"
    budgets = sorted({r["budget_bytes"] for r in chosen})
    for (mode, steps), group in grouped(chosen, ("mode", "steps")).items():
        lines += ["", f"## Mean F1 vs memory budget: {mode}, T={steps}", ""]
        lines.append("| Policy | " + " | ".join(str(b) for b in budgets) + " |")
        lines.append("|---" * (len(budgets) + 1) + "|")
        for policy, prows in grouped(group, ("policy",)).items():
            cells = []
            for b in budgets:
                values = [r["f1"] for r in prows if r["budget_bytes"] == b]
                cells.append(f"{np.mean(values):.3f}" if values else "")
            lines.append(f"| `{policy[0]}` | " + " | ".join(cells) + " |")
    diag = ("utilization", "write_density", "expire_rate", "avg_staleness", "drift_coverage")
    at = [r for r in chosen if r["budget_bytes"] == diagnostics_budget]
    for (mode, steps), group in grouped(at, ("mode", "steps")).items():
        lines += ["", f"## Memory diagnostics at {diagnostics_budget} bytes: {mode}, T={steps}", ""]
        lines.append("| Policy | " + " | ".join(diag) + " |")
        lines.append("|---" * (len(diag) + 1) + "|")
        for policy, prows in grouped(group, ("policy",)).items():
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

    for (mode, steps, budget), group in sorted(grouped(rows, ("mode", "steps", "budget_bytes")).items()):
        bound_rows = [r for r in group if r["track"] == "unprivileged"] or group
        bound = float(np.mean([r["oracle_f1"] for r in bound_rows]))
        best: dict[str, tuple[str, float] | None] = {}
        for track in ("unprivileged", "privileged"):
            own = grouped([r for r in group if r["track"] == track and r["policy_track"] == track], ("policy",))
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


def f1_by_budget_table(rows: Sequence[dict[str, Any]]) -> str:
    """Per regime: every (policy, track) with its mean F1 [bootstrap 95% CI] at each budget, and the bound.

    Policies run on their own track (and unprivileged policies on the privileged one too, as
    the eval grid does); rows are ranked by mean F1 over the budgets. The bound row is the mean
    of ``oracle_f1`` on the unprivileged track.
    """
    lines = ["# F1 by budget (mean over episodes [bootstrap 95% CI])"]
    if not rows:
        return lines[0] + "\n\nNo results.\n"
    for (mode, steps), group in sorted(grouped(rows, ("mode", "steps")).items()):
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
        bound = [mean_cell(_per_episode(bound_rows, b, "oracle_f1"), 3) for b in budgets]
        entries = []
        for (policy, track), prows in grouped(group, ("policy", "track")).items():
            if prows[0]["policy_track"] == ORACLE:
                continue
            cells = [[r["f1"] for r in prows if r["budget_bytes"] == b] for b in budgets]
            mean = float(np.mean([np.mean(c) for c in cells if c]))
            entries.append((-mean, policy, track, [mean_cell(c, 3) if c else "" for c in cells]))
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
    for (mode, steps, budget, policy, track), prows in grouped(rows, keys).items():
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
