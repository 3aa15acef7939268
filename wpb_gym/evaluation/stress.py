"""Adversarial drift: for each policy, the generator settings of a regime where it does worst.

``wpb stress`` searches, for each policy, the knobs of a regime's generator (``KNOBS``: the
drift rates, burst shapes, breaking and revert rates the regime uses, within ranges every
setting of which is valid) for the setting where the policy falls furthest below the
hindsight F1 bound (the best F1 any policy reaches with that budget, ``oracle_f1`` of a run's
rows), on average over ``search_episodes`` episodes, with Optuna's TPE sampler (seeded: the
same settings give the same search). The shortfall, not the F1, is what is searched: a stream
with no drift at all leaves nothing to catch, and every policy's F1 there is 0 and so is the
bound's. The regime's switches (bursts, redundancy, the change model, renames, the
warm-up), its endpoint pool and sizes stay as they are: the search moves how the stream
drifts, not what kind of stream it is.

The best of a few noisy scores overstates how bad a setting is (the search's winner is partly
its luck), so the ``CANDIDATES`` worst trials are scored again on as many episodes of a
validation seed, and the worst there is chosen. It is frozen as the policy's **stress set**
(``wpb freeze``'s format, with its manifest and hashes) from a third seed, so the set is not
the episodes the choice was made on, and every policy is played on every stress set and on
the regime's own episodes of that seed. The report says how far each falls on each, and marks
a stress set that did not turn out harder for its own policy than the regime as it is.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.atomic_files import atomic_folder
from ..core.file_names import name_part
from ..core.tracks import TRACKS
from ..core.types import Episode
from ..episodes.frozen import freeze_set, open_frozen_set
from ..episodes.generators.paper import REGIMES, GeneratorConfig, generate_episodes, make_config
from ..scoring.oracle import episode_oracle
from .runner import run_episode

STRESS_JSON = "stress.json"

# (knob, kind, low, high, applies): ``applies(config, track)`` says whether a policy on the
# track meets the knob in the regime (the priority hint is shown on the privileged track only).
Knob = tuple[str, str, float, float, Callable[[GeneratorConfig, str], bool]]


def _paper(c: GeneratorConfig, track: str) -> bool:
    return c.change_model == "paper"


def _contract(c: GeneratorConfig, track: str) -> bool:
    return c.change_model == "contract"


KNOBS: tuple[Knob, ...] = (
    ("drift_prob", "float", 0.02, 0.6, lambda c, track: True),
    ("remove_param_prob", "float", 0.0, 1.0, _paper),
    ("deprecate_prob", "float", 0.0, 1.0, _paper),
    ("burst_interval", "int", 10, 200, lambda c, track: c.bursts),
    ("burst_len", "int", 1, 10, lambda c, track: c.bursts),
    ("burst_drift_prob", "float", 0.0, 1.0, lambda c, track: c.bursts),
    ("redundancy_prob", "float", 0.0, 1.0, lambda c, track: c.redundancy),
    ("breaking_prob", "float", 0.0, 1.0, _contract),
    ("revert_prob", "float", 0.0, 0.8, lambda c, track: _contract(c, track) and c.revert_prob > 0),
    ("revert_window", "int", 5, 120, lambda c, track: _contract(c, track) and c.revert_prob > 0),
    ("priority_correlation", "float", 0.0, 1.0, lambda c, track: _contract(c, track) and track != "unprivileged"),
    ("doc_prob", "float", 0.0, 0.6, lambda c, track: c.doc_prob > 0),
)
SEARCH_SEED_OFFSET = 0  # the search draws episodes of --seed; the sets, of --seed + SET_SEED_OFFSET
VALIDATION_SEED_OFFSET = 500_000  # and the candidates are scored again on --seed + this
SET_SEED_OFFSET = 1_000_000
CANDIDATES = 3


def search_space(config: GeneratorConfig, track: str) -> list[Knob]:
    """The knobs ``config``'s regime uses that a policy on ``track`` meets (``KNOBS``)."""
    return [knob for knob in KNOBS if knob[4](config, track)]


@dataclass(frozen=True)
class StressSettings:
    """One search: ``regime`` at ``length`` steps, ``budget_bytes`` on ``track``."""

    regime: str
    length: int
    budget_bytes: int
    track: str = "unprivileged"
    trials: int = 30
    search_episodes: int = 4
    set_episodes: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        if self.regime not in REGIMES:
            raise ValueError(f"regime {self.regime!r}: the search knows the generated regimes {sorted(REGIMES)}")
        if self.track not in TRACKS:
            raise ValueError(f"track {self.track!r}: expected one of {', '.join(TRACKS)}")
        for name in ("trials", "search_episodes", "set_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        make_config(self.regime, length=self.length)  # a length the regime refuses is refused here

    def config(self, **knobs: Any) -> GeneratorConfig:
        return make_config(self.regime, length=self.length, **knobs)


@dataclass
class Search:
    """A policy's search: every trial's knobs and shortfall, and the worst setting found."""

    label: str
    trials: list[tuple[dict[str, Any], float]] = field(default_factory=list)
    # The CANDIDATES worst trials: (knobs, search shortfall, validation shortfall).
    validated: list[tuple[dict[str, Any], float, float]] = field(default_factory=list)

    @property
    def worst(self) -> tuple[dict[str, Any], float, float]:
        """The candidate worst on the validation episodes."""
        return max(self.validated, key=lambda candidate: candidate[2])


@dataclass(frozen=True)
class Score:
    """A policy's mean F1 over some episodes, the mean hindsight F1 bound, and the shortfall."""

    f1: float
    bound: float

    @property
    def shortfall(self) -> float:
        return self.bound - self.f1


def score(factory: Callable[[], Any], episodes: Sequence[Episode], settings: StressSettings) -> Score:
    """A new policy from ``factory`` played on each of ``episodes``."""
    f1, bound = [], []
    for episode in episodes:
        oracle = episode_oracle(episode, [settings.budget_bytes], settings.track)
        run = run_episode(factory(), episode, settings.budget_bytes, settings.track,
                          oracle_utility=oracle.curve.at(settings.budget_bytes), record_actions=False)
        f1.append(run.metrics.f1)
        bound.append(oracle.f1_bounds[settings.budget_bytes].f1)
    return Score(float(np.mean(f1)), float(np.mean(bound)))


def search_worst(label: str, factory: Callable[[], Any], settings: StressSettings,
                 progress: Callable[[int], None] | None = None) -> Search:
    """Optuna's TPE search (seeded) for the knobs maximising the policy's mean shortfall."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    knobs = search_space(settings.config(), settings.track)
    search = Search(label)

    def objective(trial: Any) -> float:
        values = {}
        for name, kind, low, high, _ in knobs:
            if kind == "int":
                values[name] = trial.suggest_int(name, int(low), int(high))
            else:
                values[name] = trial.suggest_float(name, low, high)
        episodes = list(generate_episodes(settings.config(**values), settings.seed + SEARCH_SEED_OFFSET,
                                          settings.search_episodes))
        value = score(factory, episodes, settings).shortfall
        search.trials.append((values, value))
        if progress is not None:
            progress(1)
        return value

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=settings.seed))
    study.optimize(objective, n_trials=settings.trials)
    ranked = sorted(range(len(search.trials)), key=lambda k: (-search.trials[k][1], k))[:CANDIDATES]
    for k in ranked:
        knobs, value = search.trials[k]
        episodes = list(generate_episodes(settings.config(**knobs), settings.seed + VALIDATION_SEED_OFFSET,
                                          settings.search_episodes))
        search.validated.append((knobs, value, score(factory, episodes, settings).shortfall))
    return search


@dataclass(frozen=True)
class StressTable:
    """Each policy (rows) on the regime's own episodes and on each stress set."""

    labels: tuple[str, ...]
    sets: tuple[str, ...]  # "standard", then each policy's stress set by its label
    values: dict[tuple[str, str], Score]
    worst: dict[str, tuple[dict[str, Any], float, float]]  # knobs, search and validation shortfalls


def cross_table(policies: Sequence[tuple[str, Callable[[], Any]]], searches: Sequence[Search],
                sets: dict[str, Sequence[Episode]], settings: StressSettings) -> StressTable:
    values = {(label, name): score(factory, episodes, settings)
              for label, factory in policies for name, episodes in sets.items()}
    return StressTable(tuple(label for label, _ in policies), tuple(sets), values,
                       {s.label: s.worst for s in searches})


def stress_markdown(table: StressTable, settings: StressSettings, command: str) -> str:
    """The report: each policy's worst setting, and every policy on every set."""
    lines = [
        f"# Adversarial drift: {settings.regime}, T={settings.length}, {settings.budget_bytes} bytes, "
        f"{settings.track} track",
        "",
        f"Written by `{command}`. Each policy's search: {settings.trials} trials of Optuna's TPE sampler over the "
        f"regime's knobs, each scored by the policy's shortfall from the hindsight F1 bound (bound − F1), "
        f"averaged over {settings.search_episodes} episodes of seed {settings.seed}; its {CANDIDATES} worst trials "
        f"scored again on {settings.search_episodes} episodes of seed {settings.seed + VALIDATION_SEED_OFFSET}, and "
        f"the worst there chosen. Its stress set: {settings.set_episodes} episodes of that setting, from seed "
        f"{settings.seed + SET_SEED_OFFSET}; *standard*: {settings.set_episodes} episodes of the regime as it is, "
        f"same seed.",
        "",
        "## The worst setting found for each policy",
        "",
        "Shortfalls (bound − F1): in the search, on the validation episodes, and on the policy's own stress set "
        "against the standard set (*not harder*: the stress set did not turn out worse for it).",
        "",
        "| Policy | search | validation | own set vs standard | knobs |",
        "|---|---|---|---|---|",
    ]
    for label in table.labels:
        knobs, value, validated = table.worst[label]
        own, base = table.values[label, label].shortfall, table.values[label, "standard"].shortfall
        versus = f"{own:.3f} vs {base:.3f}" + ("" if own > base else " (*not harder*)")
        shown = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(knobs.items()))
        lines.append(f"| {label} | {value:.3f} | {validated:.3f} | {versus} | {shown} |")
    lines += [
        "",
        "## Every policy on every set",
        "",
        "Rows: the policy played; columns: the set (a stress set is named by the policy it was searched for). "
        "Each cell: mean F1, and in brackets the shortfall from the bound (bound − F1). The bound of each set "
        "is in the last row.",
        "",
        "| Policy | standard | " + " | ".join(f"stress: {s}" for s in table.sets[1:]) + " |",
        "|---|---|" + "---|" * (len(table.sets) - 1),
    ]
    for label in table.labels:
        cells = [f"{v.f1:.3f} ({v.shortfall:.3f})" for v in (table.values[label, name] for name in table.sets)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    bounds = [f"{table.values[table.labels[0], name].bound:.3f}" for name in table.sets]
    lines.append("| *hindsight F1 bound* | " + " | ".join(bounds) + " |")
    return "\n".join(lines) + "\n"


def run_stress(policies: Sequence[tuple[str, Callable[[], Any]]], settings: StressSettings, out: Path, *,
               command: str, force: bool = False, progress: Callable[[int], None] | None = None) -> StressTable:
    """Search each policy's worst setting, freeze the stress sets, play every policy on every set,
    and write ``out`` whole: ``report.md``, ``stress.json``, ``search.csv`` and ``sets/`` (the
    regime's own episodes as ``standard`` and each policy's stress set, frozen). The folder is
    built beside ``out`` and put in place when complete; an existing ``out`` is replaced only
    with ``force`` and only if it holds a stress run."""
    out = Path(out)
    if out.exists() and not (force and (out / STRESS_JSON).is_file()):
        raise FileExistsError(f"{out} already exists" + (" and holds no stress run; refusing to replace it"
                                                          if force else " (pass --force to replace a stress run)"))
    labels = [label for label, _ in policies]
    folders = {label: name_part(label) for label in labels}  # each set's folder under sets/
    if len(set(folders.values())) != len(folders) or "standard" in folders.values():
        raise ValueError(f"policy labels {labels}: each needs a set folder of its own (and none named 'standard')")
    searches = [search_worst(label, factory, settings, progress) for label, factory in policies]
    folders = {"standard": "standard", **folders}
    with atomic_folder(out) as tmp:
        set_seed = settings.seed + SET_SEED_OFFSET
        sets: dict[str, list[Episode]] = {}
        for name, knobs in [("standard", {}), *((s.label, s.worst[0]) for s in searches)]:
            folder = tmp / "sets" / folders[name]
            freeze_set(folder, [settings.regime], [settings.length], settings.set_episodes, set_seed, overrides=knobs)
            sets[name] = [episode for _, episode in open_frozen_set(folder).iter_episodes()]
        table = cross_table(policies, searches, sets, settings)
        (tmp / "report.md").write_text(stress_markdown(table, settings, command), encoding="utf-8")
        with (tmp / "search.csv").open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["policy", "trial", "shortfall", "knobs"])
            for search in searches:
                for k, (knobs, value) in enumerate(search.trials):
                    writer.writerow([search.label, k, repr(value), json.dumps(knobs, sort_keys=True)])
        summary = {
            "settings": settings.__dict__,
            "set_seed": set_seed,
            "sets": {name: f"sets/{folders[name]}" for name in sets},
            "worst": {label: {"knobs": knobs, "search_value": value, "validation_value": validated}
                      for label, (knobs, value, validated) in table.worst.items()},
            "candidates": {s.label: [{"knobs": k, "search_value": v, "validation_value": w} for k, v, w in s.validated]
                           for s in searches},
            "values": {label: {name: {"f1": table.values[label, name].f1, "bound": table.values[label, name].bound}
                               for name in table.sets} for label in table.labels},
            "command": command,
        }
        (tmp / STRESS_JSON).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return table

