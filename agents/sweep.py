"""``wpb sweep``: a grid of training trials (algorithm x regime x seed x hyperparameters) on Ray
Tune, each model evaluated on held-out episodes, and the learned-vs-baselines table.

A trial trains with ``agents.sb3.train`` (or ``agents.learners.training`` for the bandit learners)
into ``OUT/trials/NAME/`` and evaluates its model on the held-out episodes of its regime
(generated from the eval seed, never used in training or model selection); it returns its
mean metrics to Tune and leaves its rows in ``rows.json``. Baselines are evaluated once per
regime on the same episodes. ``collect`` turns the rows into ``results.csv`` and ``table.md``
(``wpb seeds``' statistics: the training seed is the unit of variation). ``run_trial`` is the
same function Tune calls, so a sweep without Ray gives the same rows (tested).

``check_trials`` applies, before anything runs, the checks ``wpb train`` applies to each
trial's full training config (its recipe with the sweep's hyperparameters and timesteps, its
env arguments, the model they build), so that a bad value is named by the sweep file, the
grid entry and the field rather than failing inside a Ray trial.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import itertools
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from wpb_gym.core.atomic_files import write_atomic
from wpb_gym.core.messages import did_you_mean
from wpb_gym.core.tracks import PRIVILEGED, UNPRIVILEGED
from wpb_gym.evaluation.grid import PolicySpec, generated_refs, run_grid

from .option_checks import type_problem
from .registry import agent_entry, make_agent

SWEEP_DEFAULTS: dict[str, Any] = {
    "algos": ["maskable_ppo"],
    "regimes": ["default"],
    "seeds": [0, 1, 2],
    "timesteps": None,  # None: each recipe's own
    "hyperparams": {},  # name -> list of values: every combination is a trial (SB3 algorithms only)
    "env": {},
    "eval": {"episodes": 30, "seed": 777, "budgets": [10240], "tracks": ["unprivileged"],
             "baselines": ["breaking_detector", "change_detector"], "references": None},
    "cpus_per_trial": 1,
}
LENGTH = 200
LEARNERS = ("epsilon_greedy", "bandit_ucb")
# The settings of the sweep in its folder, so that --resume continues that sweep and no other.
SETTINGS_FILE = "sweep.json"
# Arguments of an SB3 algorithm that ``agents.sb3.train`` sets itself: not hyperparameters.
SET_BY_TRAIN = ("policy", "env", "seed", "device", "tensorboard_log", "verbose", "_init_setup_model")


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


def learned_track(settings: Mapping[str, Any]) -> str:
    """The track the trained agents act on: their env's (``env: {track: ...}``), else unprivileged."""
    return settings["env"].get("track", UNPRIVILEGED)


def default_references(settings: Mapping[str, Any]) -> list[str]:
    """Every baseline, on the learned agents' track where it runs there, else on the privileged
    track (``NAME@privileged``): a privileged or oracle baseline never runs on the unprivileged one."""
    track = learned_track(settings)
    return [
        name if PolicySpec(name, make_agent, agent_entry(name).track).runs_on(track) else f"{name}@{PRIVILEGED}"
        for name in settings["eval"]["baselines"]
    ]


def held_out_refs(settings: Mapping[str, Any], regime: str) -> list[Any]:
    evaluation = settings["eval"]
    return generated_refs([regime], [LENGTH], evaluation["episodes"], evaluation["seed"])


def trial_config(trial: Trial, settings: Mapping[str, Any]) -> tuple[dict[str, Any], Traversable | None]:
    """The training config of an SB3 trial and its recipe file: the shipped recipe of its
    algorithm and regime (None: the algorithm's defaults, which ``defaults_notes`` names), with
    the sweep's hyperparameters and timesteps."""
    from .sb3.train import load_config, recipe_path

    file = recipe_path(trial.algo, trial.regime)
    config = load_config(trial.algo, file)
    config["hyperparams"].update(dict(trial.hyperparams))
    if settings["timesteps"] is not None:
        config["timesteps"] = settings["timesteps"]
    return config, file


def defaults_notes(settings: Mapping[str, Any]) -> list[str]:
    """A note for each SB3 (algorithm, regime) of the sweep without a shipped recipe, whose
    trials train on the algorithm's defaults: said once before the sweep, not per trial."""
    from .sb3.train import defaults_note, recipe_path

    return [
        defaults_note(algo, regime)
        for algo, regime in itertools.product(settings["algos"], settings["regimes"])
        if algo not in LEARNERS and recipe_path(algo, regime) is None
    ]


def run_trial(trial: Trial, settings: Mapping[str, Any], out: str) -> dict[str, Any]:
    """Train ``trial`` into ``out/trials/NAME`` and evaluate its model on held-out episodes;
    returns the mean of each metric (what Tune records) and writes the rows to ``rows.json``."""
    from .learners.training import train_learner_run
    from .sb3.train import train

    folder = Path(out) / "trials" / trial.name
    env_kwargs = {**settings["env"], "regime": trial.regime}
    track = learned_track(settings)
    if trial.algo in LEARNERS:
        train_learner_run(trial.algo, folder, env_kwargs=env_kwargs, timesteps=settings["timesteps"],
                          seed=trial.seed, progress=False)
        agent = PolicySpec(trial.name, partial(make_agent, trial.algo, path=str(folder / "learner.json")), track)
    else:
        config, _ = trial_config(trial, settings)
        train(trial.algo, folder, config=config, env_kwargs=env_kwargs, seed=trial.seed, progress=False)
        agent = PolicySpec(trial.name, partial(make_agent, "sb3", path=str(folder / "best_model.zip")), track,
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
    from wpb_gym.evaluation.reports.report import results_csv
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
    # The references of wpb seeds: labels, LABEL@TRACK or best@TRACK.
    references = list(settings["eval"]["references"] or default_references(settings))
    # One run: every trial and the baselines play held_out_refs(settings, regime), so the rows of a
    # trial finished before rows carried an episode hash still name their episode by its index.
    results = [
        result
        for regime, agents in groups.items()
        for result in seed_table([r for r in rows if r["mode"] == regime], agents, references, one_run=True)
    ]
    text = seed_table_markdown(results)
    write_atomic(out / "table.md", text)
    return text


def _mean(rows: Sequence[Mapping[str, Any]], metric: str) -> float:
    return sum(float(r[metric]) for r in rows) / len(rows) if rows else float("nan")


# ------------------------------------------------------------------ checks before anything runs
def check_trials(settings: Mapping[str, Any], where: str) -> None:
    """Refuse, before any trial runs, what would fail inside one. Per (algorithm, regime), the
    checks of ``wpb train``: the trial's full config (``agents.sb3.train.check_config``), its env
    arguments (the env is built) and, for the SB3 algorithms, each hyperparameter's name and the
    type of its value, and the model they build. Raises ValueError naming ``where`` (the sweep
    file), the grid entry and the field."""
    from .learners.training import DEFAULT_ENV

    learners = [algo for algo in settings["algos"] if algo in LEARNERS]
    if learners and settings["hyperparams"]:
        raise ValueError(
            f"{where}: hyperparams: {', '.join(sorted(settings['hyperparams']))} would be tried on the SB3 "
            f"algorithms only; the bandit learners ({', '.join(learners)}) take none in a sweep, so their trials "
            "would repeat one training under several names: sweep them in a file of their own, without hyperparams"
        )
    for algo in settings["algos"]:
        if algo not in LEARNERS:
            _check_hyperparams(algo, settings["hyperparams"], where)
    built: set[str] = set()
    for algo, regime in itertools.product(settings["algos"], settings["regimes"]):
        if algo in LEARNERS:  # the learner's env (agents.learners.training)
            env = {**DEFAULT_ENV, **settings["env"], "regime": regime, "dense_reward": True, "observation_mode": "box"}
            _build_env(env, 1, "native", f"{where}: env ({algo} on regime {regime})").close()
            continue
        for trial in trials({**settings, "algos": [algo], "regimes": [regime], "seeds": [0]}):
            _check_sb3_trial(trial, settings, where, built)


def _check_sb3_trial(trial: Trial, settings: Mapping[str, Any], where: str, built: set[str]) -> None:
    from .sb3.train import algo_class, check_config, new_model

    entry = f"{trial.algo} on regime {trial.regime}" + (f" with {dict(trial.hyperparams)}" if trial.hyperparams else "")
    config, recipe = trial_config(trial, settings)
    check_config(config, f"{where} ({entry}, recipe {recipe.name if recipe else 'defaults'})")
    env = {**config["env"], **settings["env"], "regime": trial.regime}
    if config["imitation"] is not None and (env.get("observation_mode", "box") != "box"):
        raise ValueError(f"{where}: env: observation_mode: the recipe of {entry} starts from imitation, "
                         "whose teachers read box observations; expected observation_mode=box")
    n_envs = 1 if trial.algo == "dqn" else int(config["n_envs"])
    vec_env = _build_env(env, n_envs, config["vec_env"], f"{where}: env ({entry})")
    try:
        key = json.dumps([trial.algo, config["policy"], config["hyperparams"], n_envs], sort_keys=True, default=str)
        if key not in built:  # the model of these hyperparameters, as wpb train builds it
            policy = config["policy"]  # as agents.sb3.train picks it
            policy = "MlpLstmPolicy" if trial.algo == "recurrent_ppo" and policy == "MlpPolicy" else policy
            new_model(algo_class(trial.algo), policy, vec_env, 0, None, config["hyperparams"])
            built.add(key)
    except ValueError as error:
        raise ValueError(f"{where}: hyperparams ({entry}): {error}") from None
    finally:
        vec_env.close()


def _check_hyperparams(algo: str, hyperparams: Mapping[str, Sequence[Any]], where: str) -> None:
    """Each name a parameter of the algorithm's class, each value of the type of its default."""
    from .sb3.train import algo_class

    cls = algo_class(algo)
    parameters = {
        name: p.default
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    accepted = [name for name in parameters if name not in SET_BY_TRAIN]
    for name, values in hyperparams.items():
        if name in SET_BY_TRAIN:
            raise ValueError(f"{where}: hyperparams.{name}: set by the sweep's trials, not a hyperparameter")
        if name not in parameters:
            raise ValueError(
                f"{where}: hyperparams.{name}: not a parameter of {cls.__name__} (algos: {algo})"
                f"{did_you_mean(name, accepted)}; its parameters: {', '.join(accepted)}"
            )
        default = parameters[name]
        for value in values:
            problem = type_problem(value, default)
            if problem:
                raise ValueError(f"{where}: hyperparams.{name}: {value!r} for {algo}: {problem}")


def _build_env(env_kwargs: Mapping[str, Any], n_envs: int, vec_env: str, where: str) -> Any:
    """The trial's training envs, built (and reset) as ``wpb train`` builds them."""
    from .sb3.train import build_vec_env

    try:
        envs = build_vec_env({**env_kwargs, "episode_seed": 0}, n_envs, 0, vec_env)
        envs.reset()
    except (ValueError, TypeError) as error:
        raise ValueError(f"{where}: {error}") from None
    return envs


def check_cpus(cpus: int, largest: float, where: str, what: str) -> None:
    """Refuse more CPUs per trial than ``what`` (a machine, or a cluster's largest node) has: a
    trial's CPUs are one node's, and Tune would keep the trial pending forever."""
    if cpus > largest:
        expected = f"expected at most {int(largest)}" if largest >= 1 else "it has no CPU to run a trial on"
        raise ValueError(
            f"{where}: cpus_per_trial: {cpus} CPUs per trial, but {what} has {largest:g}, "
            f"so no trial could ever start; {expected}"
        )


def local_cpus() -> float:
    """The CPUs a local Ray started by ``ray.init()`` gets on this machine (Ray's own count)."""
    try:
        from ray._private.utils import get_num_cpus

        return float(get_num_cpus())
    except (ImportError, AttributeError):  # another Ray version: the machine's count
        return float(os.cpu_count() or 1)


# ------------------------------------------------------------------ on Ray Tune
def run_sweep(settings: Mapping[str, Any], out: str | Path, *, address: str | None = None, resume: bool = False,
              progress: bool = True, where: str = "the sweep") -> str:
    """Every trial of ``settings`` on Ray Tune (a local Ray sized to this machine, or the cluster
    at ``address``), then the baselines and ``collect``; returns the table. ``resume`` continues
    an interrupted sweep in ``out`` with Tune's own experiment restore. ``progress=False``:
    Tune prints nothing (a failed trial is reported in the error raised)."""
    import ray
    from ray import tune

    from wpb_gym.evaluation.ray_backend import init_ray

    out = Path(out).resolve()
    storage = out / "tune"
    experiment = storage / "sweep"
    if resume and not tune.Tuner.can_restore(str(experiment)):
        raise FileNotFoundError(f"--resume: no sweep to continue in {experiment}")
    try:
        init_ray(ray, address, include_dashboard=False, log_to_driver=progress, configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as error:  # no cluster there, or not an address
        raise RuntimeError(f"--address {address}: cannot start or reach Ray: {error}") from None
    try:
        nodes = [node.get("Resources", {}).get("CPU", 0) for node in ray.nodes() if node.get("Alive")]
        check_cpus(settings["cpus_per_trial"], max(nodes, default=0), where,
                   "this machine's Ray" if address is None else f"the largest node of the Ray cluster at {address}")
        trainable = tune.with_resources(
            tune.with_parameters(_tune_trial, settings=dict(settings), out=str(out)),
            {"cpu": settings["cpus_per_trial"]},
        )
        with _tune_output(progress):
            if resume:
                tuner = tune.Tuner.restore(str(experiment), trainable, resume_errored=True)
            else:
                space = {"trial": tune.grid_search([_as_config(t) for t in trials(settings)])}
                run_config = tune.RunConfig(name="sweep", storage_path=str(storage), verbose=1 if progress else 0)
                tuner = tune.Tuner(trainable, param_space=space, run_config=run_config)
                out.mkdir(parents=True, exist_ok=True)
                (out / SETTINGS_FILE).write_text(settings_text(settings))
            results = tuner.fit()
        failed = [result for result in results if result.error is not None]
        if failed:
            raise RuntimeError(failure_message(failed, len(results)))
    finally:
        ray.shutdown()
    baseline_rows = [row for regime in settings["regimes"] for row in run_baselines(settings, regime)]
    return collect(settings, out, baseline_rows)


def settings_text(settings: Mapping[str, Any]) -> str:
    """The sweep's settings as ``sweep.json`` records them (compared on --resume)."""
    return json.dumps(settings, indent=2, sort_keys=True, default=str) + "\n"


@contextlib.contextmanager
def _tune_output(progress: bool) -> Iterator[None]:
    """Without ``progress``, Tune's classic reporter at verbosity 0 (the newer one prints its
    configuration box and trial errors whatever the verbosity) and its log lines held back."""
    if progress:
        yield
        return
    before = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    tune_logger = logging.getLogger("ray.tune")
    level = tune_logger.level
    tune_logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        tune_logger.setLevel(level)
        if before is None:
            del os.environ["RAY_AIR_NEW_OUTPUT"]
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = before


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def failure_message(failed: Sequence[Any], total: int) -> str:
    """One line for the failed Tune results: which trial, its own error (not Ray's wrapper), where its log is."""
    first = failed[0]
    error = getattr(first.error, "cause", None) or first.error
    lines = [line.strip() for line in _ANSI.sub("", str(error)).splitlines() if line.strip()]
    text = f"{type(error).__name__}: {lines[-1]}" if lines else type(error).__name__
    spec = (first.config or {}).get("trial", {})
    name = _trial_of(spec).name if spec else "a trial"
    log = f" (log: {Path(first.path) / 'error.txt'})" if getattr(first, "path", None) else ""
    return (f"{len(failed)} of {total} trial(s) failed on Ray; {name}: {text}{log}; the finished trials are kept: "
            "continue with --resume once the cause is fixed")


def _as_config(trial: Trial) -> dict[str, Any]:
    return {"algo": trial.algo, "regime": trial.regime, "seed": trial.seed, "hyperparams": list(trial.hyperparams)}


def _trial_of(spec: Mapping[str, Any]) -> Trial:
    return Trial(spec["algo"], spec["regime"], spec["seed"], tuple(tuple(pair) for pair in spec["hyperparams"]))


def _tune_trial(config: Mapping[str, Any], settings: Mapping[str, Any], out: str) -> dict[str, Any]:
    return run_trial(_trial_of(config["trial"]), settings, out)
