"""The tables ``wpb report`` writes from a run folder: the paper's Tables 2-4 layout, the
headroom table (the hindsight bound against the best policy per track; for the query tier, on
query accuracy), every policy's F1 by budget, and the transfer table (rank agreement between
real and synthetic regimes)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
from scipy import stats

from ...core.policy import ORACLE
from ...core.tracks import PRIVILEGED, UNPRIVILEGED
from .markdown import markdown_code as code
from .markdown import markdown_text as md
from .report import budget_label, grouped, mean_cell, per_episode, present, present_values


def paper_tables(rows: Sequence[dict[str, Any]], track: str = "privileged", diagnostics_budget: int = 10240) -> str:
    """The paper's Tables 2-3 layout (mean F1 vs budget, per regime) and Table 4 (diagnostics)."""
    lines = [f"# Paper tables ({md(track)} track; means over episodes)"]
    chosen = [r for r in rows if r["track"] == track]
    if not chosen:
        return lines[0] + f"\n\nNo results on the {md(track)} track.\n"
    budgets = sorted({r["budget_bytes"] for r in chosen})
    for (mode, steps), group in grouped(chosen, ("mode", "steps")).items():
        lines += ["", f"## Mean F1 vs memory budget: {md(mode)}, T={steps}", ""]
        lines.append("| Policy | " + " | ".join(str(b) for b in budgets) + " |")
        lines.append("|---" * (len(budgets) + 1) + "|")
        for policy, prows in grouped(group, ("policy",)).items():
            cells = []
            for b in budgets:
                values = [r["f1"] for r in prows if r["budget_bytes"] == b]
                cells.append(f"{np.mean(values):.3f}" if values else "")
            lines.append(f"| {code(policy[0])} | " + " | ".join(cells) + " |")
    diag = ("utilization", "write_density", "expire_rate", "avg_staleness", "drift_coverage")
    at = [r for r in chosen if r["budget_bytes"] == diagnostics_budget]
    for (mode, steps), group in grouped(at, ("mode", "steps")).items():
        lines += ["", f"## Memory diagnostics at {diagnostics_budget} bytes: {md(mode)}, T={steps}", ""]
        lines.append("| Policy | " + " | ".join(diag) + " |")
        lines.append("|---" * (len(diag) + 1) + "|")
        for policy, prows in grouped(group, ("policy",)).items():
            cells = [
                f"{np.mean([r[d] for r in prows]):.1f}"
                if d == "avg_staleness"
                else f"{np.mean([r[d] for r in prows]):.3f}"
                for d in diag
            ]
            lines.append(f"| {md(policy[0])} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def headroom_table(
    rows: Sequence[dict[str, Any]],
    highlight: Sequence[str] = (),
    gap_budget: int = 10240,
    run: str = "RUN",
    learned: Collection[str] = (),
) -> str:
    """Per regime and budget: the hindsight F1 bound against the best policy of each track.

    The bound is the mean of ``oracle_f1`` (the best F1 any WRITE-only policy could reach
    with the budget, from the labels; a policy that MERGEs can pass it) on the unprivileged
    track. "Best" is the policy with the
    highest mean F1 on its own track, among the run's non-oracle policies; ``highlight``
    names policies shown in columns of their own. ``learned`` names the learned agents'
    labels (learners and trained models), which are never "best": the best columns are the
    references a learned agent is measured against. The gap is the bound minus the best mean
    F1 of any policy shown; a benchmark leaves room for learning where it is large.

    Rows of the query tier (those with a query accuracy) get ``query_headroom_table`` instead,
    after the F1 table of the other regimes (``run`` names the run folder in its heading).
    """
    queried = [r for r in rows if present(r.get("query_accuracy"))]
    learned = frozenset(learned)
    if not queried:
        return _f1_headroom(rows, highlight, gap_budget, learned)
    others = [r for r in rows if not present(r.get("query_accuracy"))]
    head = _f1_headroom(others, highlight, gap_budget, learned) + "\n" if others else ""
    return head + query_headroom_table(queried, highlight, run, learned)


def _f1_headroom(rows: Sequence[dict[str, Any]], highlight: Sequence[str], gap_budget: int,
                 learned: frozenset[str] = frozenset()) -> str:
    lines = [
        "# Headroom (mean F1 over episodes; bound = hindsight F1 bound)",
        "",
        f"Gap = bound - best policy shown; regimes where every policy is 0.15 or more below the bound at "
        f"{gap_budget} bytes leave room for learning.",
    ]
    if not rows:
        return lines[0] + "\n\nNo results.\n"
    extra = " | ".join(code(name) for name in highlight)
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
            own = grouped([r for r in group if r["track"] == track and r["policy_track"] == track
                           and r["policy"] not in learned], ("policy",))
            scored = [(policy[0], mean_f1(prows)) for policy, prows in own.items()]
            best[track] = max(scored, key=lambda item: (item[1], item[0])) if scored else None
        cells, shown = [], [b[1] for b in best.values() if b is not None]
        for name in highlight:
            prows = [r for r in group if r["policy"] == name and r["track"] == r["policy_track"]]
            if prows:
                shown.append(mean_f1(prows))
            cells.append(f"{mean_f1(prows):.3f}" if prows else "")
        at = budget_label(budget)
        best_cells = [f"{b[1]:.3f} ({code(b[0])})" if b else "" for b in best.values()]
        gap = f"{bound - max(shown):+.3f}" if shown else ""
        lines.append(f"| {md(mode)} | {steps} | {at} | {bound:.3f} | " + " | ".join(best_cells + cells) + f" | {gap} |")
    return "\n".join(lines) + "\n"


QUERY_GATES = (
    "Best unpriv. / bound",
    "Priv. − best unpriv.",
    "(Priv. − best unpriv.) / (bound − best unpriv.)",
)


def query_headroom_table(rows: Sequence[dict[str, Any]], highlight: Sequence[str] = (), run: str = "RUN",
                         learned: Collection[str] = ()) -> str:
    """Per query-tier regime, length and budget: the hindsight bound on query accuracy against
    the best privileged and the best unprivileged policy, and the headroom gates.

    The bound is the mean over episodes of ``query_bound`` (no policy answers more), shown
    with ``query_feasible`` (a schedule found with hindsight answers that much). "Best
    privileged" is the policy with the highest mean query accuracy among those of the
    privileged and oracle tracks (on the privileged track); "best unprivileged" among the
    policies that read the stream alone (their unprivileged-track rows, or their
    privileged-track rows where they ran only there). The gates: how close the stream gets
    to the bound (best unprivileged / bound), what the hidden state is worth (privileged −
    best unprivileged), and the share of the room above the best unprivileged policy that
    the privileged one takes ((privileged − best unprivileged) / (bound − best unprivileged)).
    ``highlight`` names policies shown in columns of their own.
    """
    lines = [
        "# Query-tier headroom (mean query accuracy over episodes)",
        "",
        f"Written by {code(f'wpb report {run} --headroom')} from its results.csv. Bound = the hindsight bound on query "
        "accuracy (no policy answers more), beside what a schedule found with hindsight reaches (feasible). "
        "Best privileged: of the privileged- and oracle-track policies (they may read the hidden state, never "
        "the future); best unprivileged: of the policies that read the stream alone. Policies are ranked by "
        "mean query accuracy over the episodes.",
    ]
    learned = frozenset(learned)
    present_learned = sorted(learned & {r["policy"] for r in rows})
    if present_learned:
        lines[-1] += (" Learned agents are never best, being measured against the best: "
                      + ", ".join(code(name) for name in present_learned) + " (`--highlight` shows them).")
    if not rows:
        return lines[0] + "\n\nNo results.\n"
    extra = [code(name) for name in highlight]
    header = ["Budget", "Bound", "Feasible", "Best privileged", "Best unprivileged", *QUERY_GATES, *extra, "Episodes"]

    def best(scored: list[tuple[str, float]]) -> tuple[str, float] | None:
        return max(scored, key=lambda item: (item[1], item[0])) if scored else None

    for (mode, steps), condition in grouped(rows, ("mode", "steps")).items():
        lines += ["", f"## {md(mode)}, T={steps}", "", "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
        for (budget,), group in grouped(condition, ("budget_bytes",)).items():
            bound_rows = [r for r in group if r["track"] == UNPRIVILEGED] or group
            upper, feasible = per_episode(bound_rows, "query_bound"), per_episode(bound_rows, "query_feasible")
            bound = float(np.mean(upper)) if upper else math.nan
            privileged = best(
                [(p, mean) for p, mean in _query_means(group, PRIVILEGED).items()
                 if _declared(group, p) != UNPRIVILEGED and p not in learned]
            )
            unprivileged = best([(p, mean) for p, mean in _unprivileged_means(group).items() if p not in learned])
            gates = ["", "", ""]
            if unprivileged is not None and bound > 0:
                gates[0] = f"{unprivileged[1] / bound:.3f}"
            if unprivileged is not None and privileged is not None:
                gap = privileged[1] - unprivileged[1]
                gates[1] = f"{gap:+.3f}"
                room = bound - unprivileged[1]
                gates[2] = f"{gap / room:.3f}" if room > 0 else ""
            cells = [
                budget_label(budget),
                f"{bound:.3f}" if upper else "",
                f"{np.mean(feasible):.3f}" if feasible else "",
                *(f"{b[1]:.3f} ({code(b[0])})" if b else "" for b in (privileged, unprivileged)),
                *gates,
            ]
            for name in highlight:
                mean = _highlighted(group, name)
                cells.append("" if mean is None else f"{mean:.3f}")
            cells.append(str(len({r["episode_index"] for r in group})))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _declared(rows: Sequence[dict[str, Any]], policy: str) -> str:
    return next(r["policy_track"] for r in rows if r["policy"] == policy)


def _query_means(rows: Sequence[dict[str, Any]], track: str) -> dict[str, float]:
    """Mean query accuracy per policy over its rows on ``track``."""
    out = {}
    for (policy,), prows in grouped([r for r in rows if r["track"] == track], ("policy",)).items():
        values = present_values(prows, "query_accuracy")
        if values:
            out[policy] = float(np.mean(values))
    return out


def _unprivileged_means(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean query accuracy of each unprivileged policy: on the unprivileged track, or on the
    privileged track where it ran only there."""
    own = [r for r in rows if r["policy_track"] == UNPRIVILEGED]
    means = _query_means(own, PRIVILEGED)
    means.update(_query_means(own, UNPRIVILEGED))
    return means


def _highlighted(rows: Sequence[dict[str, Any]], policy: str) -> float | None:
    mine = [r for r in rows if r["policy"] == policy]
    if not mine:
        return None
    if mine[0]["policy_track"] == UNPRIVILEGED:
        return _unprivileged_means(mine).get(policy)
    return _query_means(mine, PRIVILEGED).get(policy)


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
            f"## {md(mode)}, T={steps}, {episodes} episodes",
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
            lines.append(f"| {md(policy)} | {md(track)} | " + " | ".join(cells) + " |")
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
            lines += ["", f"## {md(real)}, T={steps}", "", f"No synthetic regime was evaluated at T={steps}."]
            continue
        lines += [
            "",
            f"## {md(real)}, T={steps}",
            "",
            "| Synthetic regime | mean rho | "
            + " | ".join(f"{budget_label(b)}: rho / tau / abs dF1" for b in budgets)
            + " |",
            "|---|---" + "|---" * len(budgets) + "|",
        ]
        for neg_mean, synthetic, cells in sorted(entries):
            lines.append(f"| {md(synthetic)} | {-neg_mean:+.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
