"""Learned agents across training seeds, the way rliable reports them (Agarwal et al., 2021).

The training seed is the unit of variation: a learned agent is several models (one per seed),
each evaluated on the same held-out episodes. Per condition (regime, T, budget), with ``S[s, e]``
the metric of seed ``s`` on episode ``e``:

* **per-seed means** ``mean_e S[s, e]``;
* **IQM**: the interquartile mean of all ``S[s, e]``, with a 95% interval from the *stratified
  bootstrap* (episodes are the strata, as rliable's tasks: within each episode the seeds are
  drawn again with replacement);
* **lift** against a reference agent ``R[e]`` (deterministic baselines: one score per episode;
  a learned reference: its seed mean): ``mean_{s,e} (S[s, e] - R[e])`` with a 95% interval from a
  two-level bootstrap that draws episodes (paired: the same draw for both) and seeds, so that
  both sources of variation widen it;
* **P(improvement)** over the reference: ``mean_e mean_s ([S > R] + ½[S = R])`` (rliable's
  probability of improvement, episodes as tasks), with the same bootstrap;
* **optimality gap**: ``mean_{s,e} max(0, bound[e] - S[s, e])`` against the hindsight bound of
  each episode on the metric (``BOUNDS``: ``oracle_f1`` for F1 and the other metrics,
  ``query_bound`` for query accuracy), with the same bootstrap.

The bootstraps are written here with numpy: ``scipy.stats.bootstrap`` resamples one level of
independent samples, not seeds within episodes.

Episodes are matched by content (``episode_hash``, see ``pairing``), not by ``episode_index``:
the seeds and references of a learned agent may come from several run folders, and episode 3
of a run on ``--seed 0`` is not episode 3 of one on ``--seed 777``. Every seed and every
reference must hold exactly the same episodes (the statistics need a full seeds x episodes
table, each cell paired with the reference's score of that episode); anything else is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from .markdown import markdown_text as md
from .pairing import Episode, by_episode, by_index, difference
from .report import present as value_present

__all__ = ["GroupResult", "Lift", "seed_table", "seed_table_markdown"]

REPS = 5000
CONFIDENCE = 0.95


def iqm(values: np.ndarray) -> float:
    return float(stats.trim_mean(np.ravel(values), 0.25))


def _interval(samples: np.ndarray) -> tuple[float, float]:
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


def stratified_iqm(scores: np.ndarray, rng: np.random.Generator, reps: int = REPS) -> tuple[float, float, float]:
    """IQM of a (seeds x episodes) array and its stratified-bootstrap 95% interval."""
    seeds, episodes = scores.shape
    draws = rng.integers(seeds, size=(reps, seeds, episodes))
    resampled = np.take_along_axis(np.broadcast_to(scores, (reps, seeds, episodes)), draws, axis=1)
    samples = stats.trim_mean(resampled.reshape(reps, -1), 0.25, axis=1)
    return (iqm(scores), *_interval(samples))


def _two_level(scores: np.ndarray, rng: np.random.Generator, reps: int) -> tuple[np.ndarray, np.ndarray]:
    """Index arrays drawing seeds and (paired) episodes with replacement, ``reps`` times."""
    seeds, episodes = scores.shape
    return rng.integers(seeds, size=(reps, seeds)), rng.integers(episodes, size=(reps, episodes))


@dataclass(frozen=True)
class Lift:
    reference: str
    lift: float
    low: float
    high: float
    p_improvement: float
    p_low: float
    p_high: float


@dataclass(frozen=True)
class GroupResult:
    """One learned agent (its seeds) on one condition."""

    condition: tuple[Any, ...]  # (regime, steps, budget_bytes, track)
    agent: str
    seeds: tuple[str, ...]  # the policy labels of its seeds
    episodes: int
    seed_means: tuple[float, ...]
    iqm: float
    iqm_low: float
    iqm_high: float
    gap: float
    gap_low: float
    gap_high: float
    lifts: tuple[Lift, ...]


def _lift(scores: np.ndarray, reference: np.ndarray, name: str, rng: np.random.Generator, reps: int) -> Lift:
    seed_draws, episode_draws = _two_level(scores, rng, reps)

    def statistics(s: np.ndarray, r: np.ndarray) -> tuple[float, float]:
        diff = s - r
        return float(diff.mean()), float(((s > r) + 0.5 * (s == r)).mean())

    lift, p = statistics(scores, reference[None, :])
    lifts, ps = np.empty(reps), np.empty(reps)
    for i in range(reps):
        s = scores[seed_draws[i]][:, episode_draws[i]]
        lifts[i], ps[i] = statistics(s, reference[episode_draws[i]][None, :])
    return Lift(name, lift, *_interval(lifts), p, *_interval(ps))


BEST = "best"  # a reference "best@TRACK": the best mean on that track, learned agents excluded
# The column holding each metric's hindsight bound (oracle_f1 for the rest).
BOUNDS = {"query_accuracy": "query_bound"}


def seed_table(
    rows: Sequence[Mapping[str, Any]],
    groups: Mapping[str, Sequence[str]],
    references: Sequence[str],
    metric: str = "f1",
    reps: int = REPS,
    seed: int = 0,
    one_run: bool = False,
) -> list[GroupResult]:
    """Per condition, track and learned agent (``groups``: name -> the policy labels of its
    seeds), the statistics of the module docstring against each of ``references``: a policy
    label (its rows on the learned agent's track), ``LABEL@TRACK`` (on another track of the
    same episodes), or ``best@TRACK`` (of the policies that declare that track, the best mean
    there, learned agents excluded: the strongest comparator, chosen on these episodes).

    Raises ValueError when a seed, or a reference, was not evaluated on exactly the episodes
    (by content) another was: the comparison is paired and nothing is silently dropped. Rows
    without an episode hash (results written before rows carried one) are refused
    (``pairing.EpisodeMismatch``) unless ``one_run``: all rows come from one run, where
    ``episode_index`` names the same episode for every agent. For ``query_accuracy`` only the
    query tier's rows count (the others have none), and ValueError says when no row does.
    """
    bound_column = BOUNDS.get(metric, "oracle_f1")
    if metric in BOUNDS:
        rows = [row for row in rows if value_present(row.get(metric))]
        if not rows:
            raise ValueError(f"no results hold {metric} (it is scored on the query tier's episodes only)")
    rng = np.random.default_rng(seed)
    grouped: dict[tuple[Any, ...], dict[tuple[str, str], list[Mapping[str, Any]]]] = {}
    declared: dict[str, str] = {}  # policy -> the track it declares (its kind of information)
    for row in rows:
        condition = (row["mode"], int(row["steps"]), int(row["budget_bytes"]))
        grouped.setdefault(condition, {}).setdefault((row["policy"], row["track"]), []).append(row)
        declared[row["policy"]] = row.get("policy_track", row["track"])
    index = by_index(rows, one_run)
    by_key: dict[tuple[Any, ...], dict[tuple[str, str], dict[Episode, Mapping[str, Any]]]] = {
        condition: {
            (policy, track): by_episode(group, f"{policy} on {condition}, {track} track", index)
            for (policy, track), group in cells.items()
        }
        for condition, cells in grouped.items()
    }
    learned = {label for labels in groups.values() for label in labels}
    results = []
    for condition, policies in sorted(by_key.items()):
        for name, labels in groups.items():
            # A learned agent on the track it declares (an unprivileged one may also have been
            # run on the privileged track, where it sees the same and ignores the hint).
            for track in sorted({t for (label, t) in policies if label in labels and t == declared[label]}):
                present = [label for label in labels if (label, track) in policies]
                if len(present) != len(labels):
                    missing = sorted(set(labels) - set(present))
                    raise ValueError(f"{condition}, {track} track: {name}: no rows for seed(s) {missing}")
                cells = [policies[label, track] for label in labels]
                episodes = list(cells[0])  # in the order of the first seed's episode_index
                for label, cell in zip(labels, cells, strict=True):
                    if set(cell) != set(episodes):
                        raise ValueError(
                            f"{condition}, {track} track: {label} was not evaluated on the same episodes as "
                            f"{labels[0]}: {difference(cells[0], cell, labels[0], label)}"
                        )
                scores = np.array([[float(cell[e][metric]) for e in episodes] for cell in cells])
                bounds = np.array([float(cells[0][e][bound_column]) for e in episodes])
                lifts = []
                for label, cell in _references(references, track, policies, learned, declared, metric):
                    if set(cell) != set(episodes):
                        raise ValueError(
                            f"{condition}, {track} track: {label} was not evaluated on the same episodes as {name}: "
                            f"{difference(cells[0], cell, name, label)}"
                        )
                    lifts.append(_lift(scores, np.array([float(cell[e][metric]) for e in episodes]), label, rng, reps))
                results.append(_result(condition + (track,), name, labels, scores, bounds, lifts, rng, reps))
    return results


def _references(
    specs: Sequence[str],
    track: str,
    policies: Mapping[tuple[str, str], Mapping[Episode, Mapping[str, Any]]],
    learned: set[str],
    declared: Mapping[str, str],
    metric: str,
) -> list[tuple[str, Mapping[Episode, Mapping[str, Any]]]]:
    """Each reference found once, in the order given: a ``best@TRACK`` that names a policy also
    given by name is that one comparison, labelled as the best (two would differ only by their
    bootstrap draws)."""
    found: dict[int, tuple[str, Mapping[Episode, Mapping[str, Any]]]] = {}
    for spec in specs:
        reference = _reference(spec, track, policies, learned, declared, metric)
        if reference is None:
            continue
        label, cell = reference
        if id(cell) not in found or spec.partition("@")[0] == BEST:  # a key kept keeps its place
            found[id(cell)] = (label, cell)
    return list(found.values())


def _reference(
    spec: str,
    track: str,
    policies: Mapping[tuple[str, str], Mapping[Episode, Mapping[str, Any]]],
    learned: set[str],
    declared: Mapping[str, str],
    metric: str,
) -> tuple[str, Mapping[Episode, Mapping[str, Any]]] | None:
    label, _, on = spec.partition("@")
    on = on or track
    if label == BEST:
        means = {
            name: np.mean([float(row[metric]) for row in cell.values()])
            for (name, t), cell in policies.items()
            if t == on and declared[name] == on and name not in learned
        }
        if not means:
            return None
        label = max(sorted(means), key=means.__getitem__)
        cell = policies[label, on]
        return f"{label} (best {on})", cell
    cell = policies.get((label, on))
    if cell is None:
        return None
    return (label if on == track else f"{label} ({on})"), cell


def _result(condition, name, labels, scores, bounds, lifts, rng, reps) -> GroupResult:
    gaps = np.maximum(0.0, bounds[None, :] - scores)
    seed_draws, episode_draws = _two_level(scores, rng, reps)
    gap_samples = np.array([gaps[seed_draws[i]][:, episode_draws[i]].mean() for i in range(reps)])
    value, low, high = stratified_iqm(scores, rng, reps)
    gap_low, gap_high = _interval(gap_samples)
    return GroupResult(
        condition=condition,
        agent=name,
        seeds=tuple(labels),
        episodes=scores.shape[1],
        seed_means=tuple(float(m) for m in scores.mean(axis=1)),
        iqm=value,
        iqm_low=low,
        iqm_high=high,
        gap=float(gaps.mean()),
        gap_low=gap_low,
        gap_high=gap_high,
        lifts=tuple(lifts),
    )


def _bound_named(metric: str) -> str:
    return f" (`{BOUNDS[metric]}`)" if metric in BOUNDS else ""


def seed_table_markdown(results: Sequence[GroupResult], metric: str = "f1") -> str:
    """The results as a Markdown table (one row per learned agent and reference)."""
    lines = [
        f"{md(metric)} on held-out episodes; IQM over seeds x episodes [stratified bootstrap 95% CI]; lift = "
        f"mean of agent - reference [two-level bootstrap 95% CI]; P(improve) = rliable's probability of "
        f"improvement; gap = optimality gap against the hindsight bound{_bound_named(metric)}.",
        "",
        "| regime | T | budget | track | agent | seeds | episodes | per-seed means | IQM [95% CI] | "
        "optimality gap | reference | lift [95% CI] | P(improve) [95% CI] |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        regime, steps, budget, track = r.condition
        head = (
            f"| {md(regime)} | {steps} | {budget} | {md(track)} | {md(r.agent)} | {len(r.seeds)} | {r.episodes} | "
            f"{', '.join(f'{m:.3f}' for m in r.seed_means)} | {r.iqm:.3f} [{r.iqm_low:.3f}, {r.iqm_high:.3f}] | "
            f"{r.gap:.3f} [{r.gap_low:.3f}, {r.gap_high:.3f}]"
        )
        if not r.lifts:
            lines.append(head + " | - | - | - |")
        for lift in r.lifts:
            lines.append(
                f"{head} | {md(lift.reference)} | {lift.lift:+.3f} [{lift.low:+.3f}, {lift.high:+.3f}] | "
                f"{lift.p_improvement:.2f} [{lift.p_low:.2f}, {lift.p_high:.2f}] |"
            )
    return "\n".join(lines) + "\n"
