"""``wpb sweep``: training trials on Ray Tune, evaluated on held-out episodes (``agents.sweep``).

Everything that can be checked is checked before Ray starts: the sweep file (its keys, each
trial's full training config, env arguments and model: ``agents.sweep.check_trials``), the
references of the table, ``--out`` and ``--resume``, and ``cpus_per_trial`` against the CPUs
of the local Ray (against the cluster's nodes once connected, with ``--address``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

from ..core.checks import InputError
from ..core.messages import did_you_mean
from ..core.setting_values import parse_budgets, parse_int, parse_ints, parse_names, parse_path, parse_text
from ..core.settings_files import read_settings
from ..core.tracks import TRACKS
from ..episodes.generators.regimes import ALL_REGIMES
from ..evaluation.run_folder import check_folder_path
from .inputs import check_env_kwargs
from .settings import CommandSettings, Setting, Settings, switch
from .training import ALGOS

# Env arguments a sweep sets itself, and why.
RESERVED_ENV = {
    "regime": "set by regimes",
    "episode_seed": "set by each trial's seed (seeds)",
    "episodes": "not for a sweep: its trials train on generated episodes of their regime and are evaluated "
    "on held-out ones (eval.seed); train on episode files with wpb train --eval-episodes",
}


def _same_value(a: Any, b: Any) -> bool:
    # 1 and 1.0 train alike; true and 1 do not (an int parameter refuses a bool).
    try:
        return isinstance(a, bool) == isinstance(b, bool) and bool(a == b)
    except Exception:  # noqa: BLE001 - YAML values compare, but be safe with anything else
        return False


def sweep_settings(path: str) -> dict[str, Any]:
    """The sweep file ``path``, checked key by key over ``agents.sweep.SWEEP_DEFAULTS``."""
    from agents.registry import agent_entry  # the CLI joins the packages
    from agents.sweep import SWEEP_DEFAULTS

    try:
        loaded = read_settings(path, SWEEP_DEFAULTS)
    except (FileNotFoundError, ValueError) as error:
        raise InputError(str(error)) from None
    settings = {**SWEEP_DEFAULTS, **loaded, "eval": dict(SWEEP_DEFAULTS["eval"])}
    checks = {
        "algos": partial(parse_names, known=ALGOS),
        "regimes": partial(parse_names, known=ALL_REGIMES),
        "seeds": partial(parse_ints, minimum=0),
        "timesteps": lambda value, where: None if value is None else parse_int(value, where, 1),
        "cpus_per_trial": partial(parse_int, minimum=1),
    }
    for key, check in checks.items():
        settings[key] = check(settings[key], f"{path}: {key}")
    if not isinstance(settings["hyperparams"], dict) or any(
        not isinstance(v, list) or not v for v in settings["hyperparams"].values()
    ):
        raise InputError(f"{path}: hyperparams: expected a mapping of names to non-empty lists of values to try")
    for name, values in settings["hyperparams"].items():
        # A repeated value would train the same trial twice under one name, and only the table
        # at the end would find the two rows: refused before anything trains.
        for i, value in enumerate(values):
            if any(_same_value(value, earlier) for earlier in values[:i]):
                raise InputError(f"{path}: hyperparams.{name}: {value!r} is given more than once (each value "
                                 "may appear once)")
    settings["env"] = check_env_kwargs(settings["env"], f"{path}: env", RESERVED_ENV)
    if settings["env"].get("track", TRACKS[0]) not in TRACKS:
        raise InputError(f"{path}: env: track: expected one of {', '.join(TRACKS)}, got {settings['env']['track']!r}")
    evaluation = loaded.get("eval", {})
    if not isinstance(evaluation, dict):
        raise InputError(f"{path}: eval: expected a mapping, got {evaluation!r}")
    unknown = sorted(set(evaluation) - set(SWEEP_DEFAULTS["eval"]))
    if unknown:
        raise InputError(f"{path}: eval: unknown setting(s) {unknown}; known: {sorted(SWEEP_DEFAULTS['eval'])}")
    eval_checks = {
        "episodes": partial(parse_int, minimum=1),
        "seed": partial(parse_int, minimum=0),
        "budgets": parse_budgets,
        "tracks": partial(parse_names, known=TRACKS),
        "baselines": parse_names,
        "references": lambda value, where: None if value is None else parse_names(value, where),
    }
    for key, check in eval_checks.items():
        settings["eval"][key] = check(evaluation.get(key, SWEEP_DEFAULTS["eval"][key]), f"{path}: eval.{key}")
    for name in settings["eval"]["baselines"]:
        try:
            entry = agent_entry(name)
            _make_baseline(name)
        except KeyError as error:
            raise InputError(f"{path}: eval.baselines: {error.args[0]}") from None
        except (TypeError, ValueError, ImportError) as error:  # e.g. a model, which needs its file
            raise InputError(f"{path}: eval.baselines: {name} ({entry.kind}) cannot be built by name: {error}") \
                from None
    _check_tracks_and_references(settings, path)
    return settings


def _make_baseline(name: str) -> Any:
    from agents.registry import make_agent

    return make_agent(name)


def _check_tracks_and_references(settings: dict[str, Any], path: str) -> None:
    """Every learned agent and baseline has rows on the tracks evaluated, and every reference of
    the table names one that has: none would otherwise be left out of the table silently. Fills
    in the default references (``agents.sweep.default_references``)."""
    from agents.registry import agent_entry
    from agents.sweep import default_references, learned_track

    from ..evaluation.grid import PolicySpec

    evaluation = settings["eval"]
    tracks, learned = evaluation["tracks"], learned_track(settings)
    if learned not in tracks:
        raise InputError(
            f"{path}: eval.tracks: the learned agents act on the {learned} track (their env's), "
            f"which eval.tracks ({', '.join(tracks)}) lacks"
        )
    specs = {name: PolicySpec(name, _make_baseline, agent_entry(name).track) for name in evaluation["baselines"]}
    for name, spec in specs.items():
        if not any(spec.runs_on(track) for track in tracks):
            raise InputError(
                f"{path}: eval.baselines: {name} is a {spec.track} agent: it runs on the privileged track only, "
                f"which eval.tracks ({', '.join(tracks)}) lacks"
            )
    if evaluation["references"] is None:
        evaluation["references"] = default_references(settings)
        return
    where = f"{path}: eval.references"
    known = list(specs)
    for reference in evaluation["references"]:
        label, at, track = reference.partition("@")
        if at and track not in TRACKS:
            raise InputError(f"{where}: {reference!r}: unknown track {track!r}; tracks: {', '.join(TRACKS)}")
        on = track if at else learned
        if on not in tracks:
            raise InputError(f"{where}: {reference!r}: eval.tracks ({', '.join(tracks)}) lacks the {on} track")
        if label == "best":
            if not any(spec.track == on for spec in specs.values()):
                raise InputError(
                    f"{where}: {reference!r}: none of eval.baselines ({', '.join(known)}) is a {on} agent, "
                    f"so there is no best {on} baseline to compare with"
                )
        elif label not in specs:
            raise InputError(
                f"{where}: unknown agent {label!r}{did_you_mean(label, known)}; known: the baselines "
                f"{', '.join(known)} (eval.baselines), LABEL@TRACK and best@TRACK"
            )
        elif not specs[label].runs_on(on):
            raise InputError(
                f"{where}: {reference!r}: {label} is a {specs[label].track} agent, not run on the {on} track "
                f"where the learned agents are compared; give {label}@privileged"
            )


def _check_out(options: Settings, settings: dict[str, Any]) -> Path:
    """``--out`` a folder, new or empty; with ``--resume``, the folder of an interrupted sweep of this file."""
    from agents.sweep import SETTINGS_FILE, settings_text

    out = Path(options.out)
    check_folder_path(out)
    if not options.resume:
        if out.is_dir() and any(out.iterdir()):
            raise InputError(
                f"--out {out}: the folder is not empty; continue its sweep with --resume, or choose another"
            )
        return out
    from ray import tune  # no Ray is started: Tune reads the folder

    if not tune.Tuner.can_restore(str(out.resolve() / "tune" / "sweep")):
        raise InputError(
            f"--resume: {out} holds no sweep to continue (no tune/sweep/ of wpb sweep); "
            "expected the --out folder of an interrupted wpb sweep"
        )
    recorded = out / SETTINGS_FILE
    if recorded.is_file():
        try:
            before = json.loads(recorded.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise InputError(f"--resume: {recorded}: cannot read the sweep's settings: {error}") from None
        now = json.loads(settings_text(settings))
        changed = sorted(key for key in set(before) | set(now) if before.get(key) != now.get(key))
        if changed:
            raise InputError(
                f"--resume: {options.sweep} is not the sweep in {out}: {', '.join(changed)} differ from "
                f"{recorded}; resume with the same sweep file, or start a new sweep in another --out"
            )
    return out


def _cmd_sweep(options: Settings) -> int:
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("ray.tune") is None:
        raise InputError("wpb sweep needs Ray Tune: pip install 'writepolicybench-gym[scale]'")
    # The CLI joins the packages.
    from agents.sweep import check_cpus, check_trials, defaults_notes, local_cpus, run_sweep, trials

    settings = sweep_settings(options.sweep)
    out = _check_out(options, settings)
    try:
        if options.address is None and not os.environ.get("RAY_ADDRESS"):  # the local Ray this command starts
            check_cpus(settings["cpus_per_trial"], local_cpus(), options.sweep, "this machine's Ray")
        check_trials(settings, options.sweep)
        notes = defaults_notes(settings)
    except (FileNotFoundError, ValueError) as error:
        raise InputError(str(error)) from None
    for note in notes:  # even with --quiet: which settings the trials train on is no progress report
        print(note, file=sys.stderr)
    try:
        table = run_sweep(settings, out, address=options.address, resume=options.resume, progress=not options.quiet,
                          where=options.sweep)
    except (FileNotFoundError, RuntimeError, ValueError) as error:
        raise InputError(str(error)) from None
    print(table, end="")
    if not options.quiet:
        print(f"{len(trials(settings))} trials -> {out}/ (trials/, results.csv, table.md)")
    return 0


SWEEP = CommandSettings(
    "wpb sweep",
    (
        Setting(
            "sweep",
            parse_path,
            "the sweep file (YAML): algos, regimes, seeds, timesteps, hyperparams (lists of values, for the SB3 "
            "algorithms), env, eval (episodes, seed, budgets, tracks, baselines, references), cpus_per_trial",
            positional=True,
            required=True,
            in_config=False,
        ),
        Setting("out", parse_path, "the sweep's folder: trials/, results.csv, table.md", required=True),
        Setting("address", parse_text, "the Ray cluster to run on (auto, or ray://HOST:10001; default: a local Ray)"),
        switch("resume", "continue an interrupted sweep of the same file in --out (Tune's experiment restore)"),
        switch("quiet", "print nothing but the table (no Tune progress, no trial logs)"),
    ),
    config=False,
)


def add_commands(sub: Any) -> None:
    """Add sweep to the ``wpb`` subcommands ``sub``."""
    sweep = sub.add_parser("sweep", help="training trials on Ray Tune, evaluated on held-out episodes")
    SWEEP.add_to(sweep)
    sweep.set_defaults(func=_cmd_sweep, prog=sweep.prog, settings=SWEEP)
