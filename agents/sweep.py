"""``wpb sweep``: a grid of training trials (algorithm x regime x seed x hyperparameters) on Ray
Tune, each model evaluated on held-out episodes, and the learned-vs-baselines table.

A trial trains with ``agents.train`` (or ``agents.learner_training`` for the bandit learners)
into ``OUT/trials/NAME/`` and evaluates its model on the held-out episodes of its regime
(generated from the eval seed, never used in training or model selection); it returns its
mean metrics to Tune and leaves its rows in ``rows.json``. Baselines are evaluated once per
regime on the same episodes. ``collect`` turns the rows into ``results.csv`` and ``table.md``
(``wpb seeds``' statistics: the training seed is the unit of variation). ``run_trial`` is the
same function Tune calls, so a sweep without Ray gives the same rows (tested).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from wpb_gym.evaluation.grid import PolicySpec, generated_refs, run_grid

from .registry import agent_entry, make_agent

SWEEP_DEFAULTS: dict[str, Any] = {
    "algos": ["maskable_ppo"],
    "regimes": ["default"],
    "seeds": [0, 1, 2],
    "timesteps": None,  # None: each recipe's own
    "hyperparams": {},  # name -> list of values: every combination is a trial
    "env": {},
    "eval": {"episodes": 30, "seed": 777, "budgets": [10240], "tracks": ["unprivileged"],
             "baselines": ["breaking_detector", "change_detector"], "references": None},
    "cpus_per_trial": 1,
}
LENGTH = 200
LEARNERS = ("epsilon_greedy", "bandit_ucb")


@dataclass(frozen=True)
class Trial:
    """One training run of the sweep."""

    algo: str
    regime: str
    seed: int
    hyperparams: tuple[tuple[str, Any], ...]

    @property
    def group(self) -> str:
        """The trial's agent across seeds: algorithm, and hyperparameters if any."""
        if not self.hyperparams:
            return self.algo
        text = json.dumps(dict(self.hyperparams), sort_keys=True)
        return f"{self.algo}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"

    @property
    def name(self) -> str:
        return f"{self.group}_{self.regime}_s{self.seed}"


def trials(settings: Mapping[str, Any]) -> list[Trial]:
    """Every combination of the settings' algorithms, regimes, seeds and hyperparameter values."""
    names = sorted(settings["hyperparams"])
    values = [settings["hyperparams"][name] for name in names]
    return [
        Trial(algo, regime, seed, tuple(zip(names, combination, strict=True)))
        for algo, regime, seed in itertools.product(settings["algos"], settings["regimes"], settings["seeds"])
        for combination in itertools.product(*values)
    ]


def held_out_refs(settings: Mapping[str, Any], regime: str) -> list[Any]:
    evaluation = settings["eval"]
    return generated_refs([regime], [LENGTH], evaluation["episodes"], evaluation["seed"])


def run_trial(trial: Trial, settings: Mapping[str, Any], out: str) -> dict[str, Any]:
    """Train ``trial`` into ``out/trials/NAME`` and evaluate its model on held-out episodes;
    returns the mean of each metric (what Tune records) and writes the rows to ``rows.json``."""
    from .learner_training import train_learner_run
    from .train import load_config, recipe_path, train

    folder = Path(out) / "trials" / trial.name
    env_kwargs = {**settings["env"], "regime": trial.regime}
    if trial.algo in LEARNERS:
        train_learner_run(trial.algo, folder, env_kwargs=env_kwargs, timesteps=settings["timesteps"],
                          seed=trial.seed, progress=False)
        agent = PolicySpec(trial.name, partial(make_agent, trial.algo, path=str(folder / "learner.json")))
    else:
        recipe = recipe_path(trial.algo, trial.regime)
        config = load_config(trial.algo, recipe if recipe.is_file() else None)
        config["hyperparams"].update(dict(trial.hyperparams))
        if settings["timesteps"] is not None:
            config["timesteps"] = settings["timesteps"]
        train(trial.algo, folder, config=config, env_kwargs=env_kwargs, seed=trial.seed, progress=False)
        agent = PolicySpec(trial.name, partial(make_agent, "sb3", path=str(folder / "best_model.zip")),
                           only_own_track=True)
    evaluation = settings["eval"]
    rows = run_grid(held_out_refs(settings, trial.regime), [agent], evaluation["budgets"], evaluation["tracks"])
    (folder / "rows.json").write_text(json.dumps(rows))
    return {"f1": _mean(rows, "f1"), "recall": _mean(rows, "recall"), "precision": _mean(rows, "precision")}


def run_baselines(settings: Mapping[str, Any], regime: str, jobs: int = 1) -> list[dict[str, Any]]:
    """The baselines' rows on ``regime``'s held-out episodes."""
    evaluation = settings["eval"]
    names = evaluation["baselines"]
    policies = [PolicySpec(name, partial(make_agent, name), agent_entry(name).track) for name in names]
    return run_grid(held_out_refs(settings, regime), policies, evaluation["budgets"], evaluation["tracks"], jobs=jobs)


def collect(settings: Mapping[str, Any], out: str | Path, baseline_rows: Sequence[dict[str, Any]]) -> str:
    """``results.csv`` and ``table.md`` of the finished trials in ``out``; returns the table."""
    from wpb_gym.evaluation.reports.report import results_csv, write_atomic
    from wpb_gym.evaluation.reports.seed_stats import seed_table, seed_table_markdown

    out = Path(out)
    rows = list(baseline_rows)
    groups: dict[str, dict[str, list[str]]] = {}  # regime -> agent -> its seeds' labels
    for trial in trials(settings):
        path = out / "trials" / trial.name / "rows.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: the trial {trial.name} did not finish; run the sweep again with --resume")
        rows += json.loads(path.read_text())
        groups.setdefault(trial.regime, {}).setdefault(trial.group, []).append(trial.name)
    empty_run = dict.fromkeys(("seed", "version", "git_commit", "config_hash"))
    write_atomic(out / "results.csv", results_csv(rows, empty_run))
    # The references of wpb seeds: labels, LABEL@TRACK or best@TRACK (default: every baseline).
    references = list(settings["eval"]["references"] or settings["eval"]["baselines"])
    results = [
        result
        for regime, agents in groups.items()
        for result in seed_table([r for r in rows if r["mode"] == regime], agents, references)
    ]
    text = seed_table_markdown(results)
    write_atomic(out / "table.md", text)
    return text


def _mean(rows: Sequence[Mapping[str, Any]], metric: str) -> float:
    return sum(float(r[metric]) for r in rows) / len(rows) if rows else float("nan")


def run_sweep(settings: Mapping[str, Any], out: str | Path, *, address: str | None = None, resume: bool = False,
              progress: bool = True) -> str:
    """Every trial of ``settings`` on Ray Tune (a local Ray sized to this machine, or the cluster
    at ``address``), then the baselines and ``collect``; returns the table. ``resume`` continues
    an interrupted sweep in ``out`` with Tune's own experiment restore."""
    import ray
    from ray import tune

    out = Path(out).resolve()
    storage = out / "tune"
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=progress, configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as error:  # no cluster there, or not an address
        raise RuntimeError(f"--address {address}: cannot start or reach Ray: {error}") from None
    try:
        trainable = tune.with_resources(
            tune.with_parameters(_tune_trial, settings=dict(settings), out=str(out)),
            {"cpu": settings["cpus_per_trial"]},
        )
        experiment = storage / "sweep"
        if resume and tune.Tuner.can_restore(str(experiment)):
            tuner = tune.Tuner.restore(str(experiment), trainable, resume_errored=True)
        else:
            if resume:
                raise FileNotFoundError(f"--resume: no sweep to continue in {experiment}")
            space = {"trial": tune.grid_search([_as_config(t) for t in trials(settings)])}
            run_config = tune.RunConfig(name="sweep", storage_path=str(storage), verbose=1 if progress else 0)
            tuner = tune.Tuner(trainable, param_space=space, run_config=run_config)
        results = tuner.fit()
        failed = [str(result.error).splitlines()[0] for result in results if result.error is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} trial(s) failed (rerun with --resume): {failed[0]}")
    finally:
        ray.shutdown()
    baseline_rows = [row for regime in settings["regimes"] for row in run_baselines(settings, regime)]
    return collect(settings, out, baseline_rows)


def _as_config(trial: Trial) -> dict[str, Any]:
    return {"algo": trial.algo, "regime": trial.regime, "seed": trial.seed, "hyperparams": list(trial.hyperparams)}


def _tune_trial(config: Mapping[str, Any], settings: Mapping[str, Any], out: str) -> dict[str, Any]:
    spec = config["trial"]
    trial = Trial(spec["algo"], spec["regime"], spec["seed"], tuple(tuple(pair) for pair in spec["hyperparams"]))
    return run_trial(trial, settings, out)
