"""The run's pictures (matplotlib, drawn off-screen): per regime and episode length,

* ``f1_vs_budget[_<regime>_T<length>].png`` (a regime name that is not plain text is
  rewritten, see ``file_names.name_part``): mean F1 against the budget (log scale), one
  line per policy, shaded bootstrap 95% intervals, one panel per track (paper Fig. 1a-b);
* ``regret_curve[_<regime>_T<length>].png``: mean WRITE-only regret against the budget, the
  same way (paper Fig. 1d).

Every policy has one colour and marker in every figure of every run: the shipped agents a
fixed one, any other policy (a learned model, a user's agent) one chosen from its label, drawn
thick and on top so that it stands out. Oracle policies (they read the hidden labels: bounds
such as ``oracle_optimal``, or privileged references such as ``causal_privileged``) are drawn
dashed and named "(oracle)". The legend is under the panels.
Markers are hollow and of different sizes, so curves that coincide stay visible.
"""

from __future__ import annotations

import io
import re
import textwrap
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...core.file_names import name_part
from ...core.policy import ORACLE
from ...core.tracks import TRACKS
from .intervals import bootstrap_cis
from .markdown import shown


# The legend goes under the panels, in as many columns of this width (inches) as fit: beside
# them it took a third of a one-panel figure.
_LEGEND_COLUMN = 2.1
_LEGEND_ROW = 0.19
_PANEL = 5.4


def _figure(rows: Sequence[dict[str, Any]], metric: str, label: str, title: str, note: str = "") -> bytes:
    # The object API on the Agg canvas (no pyplot state), and fixed margins computed here:
    # tight_layout and loc="best" took most of the drawing time.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    tracks = [t for t in TRACKS if any(r["track"] == t for r in rows)]
    all_budgets = sorted({r["budget_bytes"] for r in rows})
    policies = {r["policy"] for r in rows}
    width = _PANEL * len(tracks) + 0.9
    columns = max(1, min(len(policies), int((width - 0.4) // _LEGEND_COLUMN)))
    note_lines = textwrap.wrap(note, width=int(width * 17)) if note else []
    note_height = 0.13 * len(note_lines) + (0.08 if note_lines else 0.0)
    legend = _LEGEND_ROW * -(-len(policies) // columns)
    # Inches: the title and the panels' titles above; the ticks, the axis label, the legend and the note below.
    panel_top, panel_bottom = 0.8, 0.62 + legend + note_height + 0.08
    height = 3.4 + panel_top + panel_bottom
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(tracks), squeeze=False, sharey=True)
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.15 / width, bottom=panel_bottom / height,
                        top=1 - panel_top / height, wspace=0.08)
    # Every interval of the figure in one batch, then the lines.
    lines = []
    for track in tracks:
        chosen = [r for r in rows if r["track"] == track]
        for policy in sorted({r["policy"] for r in chosen}):
            prows = [r for r in chosen if r["policy"] == policy]
            budgets = sorted({r["budget_bytes"] for r in prows})
            samples = [[r[metric] for r in prows if r["budget_bytes"] == b] for b in budgets]
            lines.append((track, policy, prows[0]["policy_track"] == ORACLE, budgets, samples))
    intervals = iter(bootstrap_cis([s for *_, samples in lines for s in samples]))
    for ax, track in zip(axes[0], tracks, strict=True):
        for line_track, policy, oracle, budgets, samples in lines:
            if line_track != track:
                continue
            means, lows, highs = [], [], []
            for values in samples:
                means.append(float(np.mean(values)))
                low, high = next(intervals)
                lows.append(means[-1] if np.isnan(low) else low)
                highs.append(means[-1] if np.isnan(high) else high)
            colour, marker, size, highlighted = policy_style(policy)
            ax.plot(
                budgets,
                means,
                color=colour,
                marker=marker,
                ms=size,
                mfc="none",
                mew=1.3,
                lw=2.6 if highlighted else 1.2,
                zorder=3 if highlighted else 2,
                ls="--" if oracle else "-",
                label=_plain(f"{policy} (oracle)" if oracle else policy),
            )
            ax.fill_between(budgets, lows, highs, color=colour, alpha=0.15, lw=0)
        if all_budgets[0] > 0:
            ax.set_xscale("log")
        else:  # a log axis has no place for a budget of 0 (store nothing): linear up to the next budget
            ax.set_xscale("symlog", linthresh=all_budgets[1] if len(all_budgets) > 1 else 1)
        ax.set_xticks(all_budgets, [_bytes_label(b) for b in all_budgets], rotation=45 if len(all_budgets) > 6 else 0)
        ax.minorticks_off()
        ax.set_xlabel("budget (bytes; 1KB = 1,024 B)")
        ax.set_title(_plain(f"{track} track"))
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel(label)
    handles: dict[str, Any] = {}
    for ax in axes[0]:
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(name, handle)  # a policy's line looks the same in every panel
    fig.legend(handles.values(), handles.keys(), fontsize=7, ncol=columns, loc="lower center",
               bbox_to_anchor=(0.5, (note_height + 0.04) / height), frameon=False, columnspacing=1.2,
               borderaxespad=0.0)
    if note_lines:
        fig.text(0.5, 0.06 / height, "\n".join(note_lines), ha="center", va="bottom", fontsize=7, color="0.3")
    fig.suptitle(_plain(title))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">", "h", "p", "d")
# The shipped agents, each with its own colour of tab20 (then tab20b) and a marker.
SHIPPED_AGENTS = (
    "no_mem",
    "fifo_store_all",
    "uniform_sample",
    "last_kb",
    "random",
    "merge_aggressive",
    "expire_oldest",
    "change_detector",
    "priority_threshold",
    "priority_greedy",
    "breaking_detector",
    "utility_greedy",
    "oracle_optimal",
    # the query tier's
    "keep_latest_lru",
    "keep_latest_lfu",
    "keep_latest_traffic",
    "keep_latest_breaking",
    "keep_latest_family",
    "keep_latest_migration",
    "causal_privileged",
    # compression's
    "breaking_compressor",
    "breaking_rationer",
)


# The registered learners: fixed styles too, highlighted like every learned policy.
LEARNER_AGENTS = ("epsilon_greedy", "bandit_ucb", "value_keeper")


def policy_style(policy: str) -> tuple[tuple[float, ...], str, float, bool]:
    """The colour, marker, marker size and highlighting of ``policy`` in every figure.

    A shipped agent's are fixed (the same agent with other parameters, ``last_kb(...)``, keeps
    its colour under another marker). A learner, and any other label (a learned model), is
    highlighted in one of the colours the shipped agents leave free: the registered learners
    with fixed ones, any other label with a colour and marker chosen from its text.
    """
    from matplotlib import colormaps

    palette = colormaps["tab20"].colors + colormaps["tab20b"].colors
    free = palette[len(SHIPPED_AGENTS) :]
    if policy in SHIPPED_AGENTS:
        i = SHIPPED_AGENTS.index(policy)
        return palette[i], _MARKERS[i % len(_MARKERS)], 4.0 + 1.5 * (i % 4), False
    if policy in LEARNER_AGENTS:
        i = LEARNER_AGENTS.index(policy)
        return free[i], _MARKERS[i], 7.0, True
    base = policy.split("(")[0].split(":")[0]
    if base in SHIPPED_AGENTS:
        return palette[SHIPPED_AGENTS.index(base)], _MARKERS[zlib.crc32(policy.encode()) % len(_MARKERS)], 6.0, False
    # Seeds of one agent (``mppo_s0``, ``mppo_s1``...) share its colour, each with its own marker.
    seeded = re.fullmatch(r"(.+?)[_-]?s(?:eed)?(\d+)", policy)
    group, n = (seeded.group(1), int(seeded.group(2))) if seeded else (policy, 0)
    g = zlib.crc32(group.encode("utf-8"))
    colours = free[len(LEARNER_AGENTS) :]
    return colours[g % len(colours)], _MARKERS[(g + n) % len(_MARKERS)], 7.0, True


def _plain(text: str) -> str:
    """``text`` drawn as it is, on one line: regime names and agent labels come from files, and
    matplotlib would read a '$' in them as the start of a formula and break the title at a line
    break (which ``shown`` writes as ``\\n``, like every other character that does not show)."""
    text = shown(text).replace("$", r"\$")
    return text if len(text) <= 120 else text[:117] + "..."


def _bytes_label(b: int) -> str:
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return f"{b >> 20}MB"
    if b >= 1024 and b % 1024 == 0:
        return f"{b >> 10}KB"
    return f"{b}B"


PICTURES = {
    "f1_vs_budget": ("f1", "mean F1 (0 to 1)", "F1 vs budget", ""),
    "regret_curve": (
        "regret_write_only",
        "mean regret: U*(B) − utility kept",
        "Regret vs budget",
        "Regret is in utility, the sum of the steps' u_t the memory holds, short of the best WRITE-only memory's "
        "U*(B); F1 counts critical steps only, so the best F1 can still leave regret.",
    ),
}


def condition_picture(rows: Sequence[dict[str, Any]], mode: Any, steps: int, kind: str) -> bytes:
    """One figure (``kind``, a key of ``PICTURES``) of one regime and episode length, as PNG."""
    metric, label, title, note = PICTURES[kind]
    return _figure(rows, metric, label, f"{title}: {mode}, T={steps}", note)


def condition_pictures(rows: Sequence[dict[str, Any]], mode: Any, steps: int) -> dict[str, bytes]:
    """The figures of one regime and episode length: ``{"f1_vs_budget": PNG, "regret_curve": PNG}``."""
    return {kind: condition_picture(rows, mode, steps, kind) for kind in PICTURES}


def picture_name(kind: str, mode: Any, steps: int, several: bool) -> str:
    """``kind.png``, or with several conditions in the run ``kind_<regime>_T<length>.png``."""
    return f"{kind}_{name_part(mode)}_T{steps}.png" if several else f"{kind}.png"  # the regime comes from the data


def run_pictures(rows: Sequence[dict[str, Any]]) -> dict[str, bytes]:
    """File name -> PNG bytes for every regime and length of the run."""
    conditions = sorted({(r["mode"], r["steps"]) for r in rows})
    pictures = {}
    for mode, steps in conditions:
        chosen = [r for r in rows if r["mode"] == mode and r["steps"] == steps]
        for kind, data in condition_pictures(chosen, mode, steps).items():
            pictures[picture_name(kind, mode, steps, len(conditions) > 1)] = data
    return pictures


def write_pictures(rows: Sequence[dict[str, Any]], folder: str | Path) -> list[Path]:
    from ...core.atomic_files import write_atomic_bytes

    return [write_atomic_bytes(Path(folder) / name, data) for name, data in run_pictures(rows).items()]
