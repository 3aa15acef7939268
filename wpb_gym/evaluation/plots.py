"""The run's pictures (matplotlib, drawn off-screen): per regime and episode length,

* ``f1_vs_budget[_<regime>_T<length>].png`` (a regime name that is not plain text is
  rewritten, see ``file_names.name_part``): mean F1 against the budget (log scale), one
  line per policy, shaded bootstrap 95% intervals, one panel per track (paper Fig. 1a-b);
* ``regret_curve[_<regime>_T<length>].png``: mean WRITE-only regret against the budget, the
  same way (paper Fig. 1d).

Oracle policies are drawn dashed: they are bounds.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.file_names import name_part
from ..core.policy import ORACLE
from ..core.tracks import TRACKS
from .report import bootstrap_ci


def _figure(rows: Sequence[dict[str, Any]], metric: str, label: str, title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    tracks = [t for t in TRACKS if any(r["track"] == t for r in rows)]
    # One colour and marker per policy in every panel.
    policies = sorted({r["policy"] for r in rows})
    colours = plt.get_cmap("tab10" if len(policies) <= 10 else "tab20").colors
    style = {p: (colours[i % len(colours)], _MARKERS[i % len(_MARKERS)]) for i, p in enumerate(policies)}
    all_budgets = sorted({r["budget_bytes"] for r in rows})
    fig, axes = plt.subplots(1, len(tracks), figsize=(6.2 * len(tracks), 4.6), squeeze=False, sharey=True)
    for ax, track in zip(axes[0], tracks, strict=True):
        chosen = [r for r in rows if r["track"] == track]
        for policy in sorted({r["policy"] for r in chosen}):
            prows = [r for r in chosen if r["policy"] == policy]
            budgets = sorted({r["budget_bytes"] for r in prows})
            means, lows, highs = [], [], []
            for b in budgets:
                values = [r[metric] for r in prows if r["budget_bytes"] == b]
                means.append(float(np.mean(values)))
                low, high = bootstrap_ci(values)
                lows.append(means[-1] if np.isnan(low) else low)
                highs.append(means[-1] if np.isnan(high) else high)
            oracle = prows[0]["policy_track"] == ORACLE
            colour, marker = style[policy]
            ax.plot(
                budgets,
                means,
                color=colour,
                marker=marker,
                ms=4,
                ls="--" if oracle else "-",
                label=_plain(f"{policy} (bound)" if oracle else policy),
            )
            ax.fill_between(budgets, lows, highs, color=colour, alpha=0.15, lw=0)
        if all_budgets[0] > 0:
            ax.set_xscale("log")
        else:  # a log axis has no place for a budget of 0 (store nothing): linear up to the next budget
            ax.set_xscale("symlog", linthresh=all_budgets[1] if len(all_budgets) > 1 else 1)
        ax.set_xticks(all_budgets, [_bytes_label(b) for b in all_budgets])
        ax.minorticks_off()
        ax.set_xlabel("budget")
        ax.legend(fontsize=7, loc="best")
        ax.set_title(f"{track} track")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel(label)
    fig.suptitle(_plain(title))
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">")


def _plain(text: str) -> str:
    """``text`` drawn as it is: regime names and agent labels come from files, and matplotlib
    would read a '$' in them as the start of a formula."""
    text = text.replace("\x00", "").replace("$", r"\$")
    return text if len(text) <= 120 else text[:117] + "..."


def _bytes_label(b: int) -> str:
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return f"{b >> 20}MB"
    if b >= 1024 and b % 1024 == 0:
        return f"{b >> 10}KB"
    return f"{b}B"


def run_pictures(rows: Sequence[dict[str, Any]]) -> dict[str, bytes]:
    """File name -> PNG bytes for every regime and length of the run."""
    conditions = sorted({(r["mode"], r["steps"]) for r in rows})
    pictures = {}
    for mode, steps in conditions:
        chosen = [r for r in rows if r["mode"] == mode and r["steps"] == steps]
        suffix = "" if len(conditions) == 1 else f"_{name_part(mode)}_T{steps}"  # the regime comes from the data
        pictures[f"f1_vs_budget{suffix}.png"] = _figure(chosen, "f1", "mean F1", f"F1 vs budget: {mode}, T={steps}")
        pictures[f"regret_curve{suffix}.png"] = _figure(
            chosen, "regret_write_only", "mean WRITE-only regret", f"Regret vs budget: {mode}, T={steps}"
        )
    return pictures


def write_pictures(rows: Sequence[dict[str, Any]], folder: str | Path) -> list[Path]:
    from .report import write_atomic_bytes

    return [write_atomic_bytes(Path(folder) / name, data) for name, data in run_pictures(rows).items()]
