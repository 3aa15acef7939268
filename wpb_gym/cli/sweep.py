"""``wpb sweep``: training trials on Ray Tune, evaluated on held-out episodes (``agents.sweep``)."""

from __future__ import annotations

import importlib.util
from functools import partial
from pathlib import Path
from typing import Any

from ..core.tracks import TRACKS
from ..episodes.generators.paper import REGIMES
from .inputs import (
    InputError,
    check_env_kwargs,
    parse_budgets,
    parse_int,
    parse_ints,
    parse_names,
    parse_path,
    parse_text,
)
from .settings import CommandSettings, Setting, Settings, read_settings, switch
from .training import ALGOS


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
        "regimes": partial(parse_names, known=REGIMES),
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
    settings["env"] = check_env_kwargs(settings["env"], f"{path}: env", {"regime": "set by regimes"})
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
            agent_entry(name)
        except KeyError as error:
            raise InputError(f"{path}: eval.baselines: {error.args[0]}") from None
    return settings


def _cmd_sweep(options: Settings) -> int:
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("ray.tune") is None:
        raise InputError("wpb sweep needs Ray Tune: pip install 'writepolicybench-gym[scale]'")
    from agents.sweep import run_sweep, trials  # the CLI joins the packages

    settings = sweep_settings(options.sweep)
    out = Path(options.out)
    if out.is_dir() and any(out.iterdir()) and not options.resume:
        raise InputError(f"--out {out}: the folder is not empty; continue its sweep with --resume, or choose another")
    try:
        table = run_sweep(settings, out, address=options.address, resume=options.resume, progress=not options.quiet)
    except (FileNotFoundError, RuntimeError) as error:
        raise InputError(str(error)) from None
    print(table, end="")
    print(f"{len(trials(settings))} trials -> {out}/ (trials/, results.csv, table.md)")
    return 0


SWEEP = CommandSettings(
    "wpb sweep",
    (
        Setting(
            "sweep",
            parse_path,
            "the sweep file (YAML): algos, regimes, seeds, timesteps, hyperparams (lists of values), env, "
            "eval (episodes, seed, budgets, tracks, baselines, references), cpus_per_trial",
            positional=True,
            required=True,
            in_config=False,
        ),
        Setting("out", parse_path, "the sweep's folder: trials/, results.csv, table.md", required=True),
        Setting("address", parse_text, "the Ray cluster to run on (auto, or ray://HOST:10001; default: a local Ray)"),
        switch("resume", "continue an interrupted sweep in --out (Tune's experiment restore)"),
        switch("quiet", "no progress table"),
    ),
    config=False,
)


def add_commands(sub: Any) -> None:
    """Add sweep to the ``wpb`` subcommands ``sub``."""
    sweep = sub.add_parser("sweep", help="training trials on Ray Tune, evaluated on held-out episodes")
    SWEEP.add_to(sweep)
    sweep.set_defaults(func=_cmd_sweep, prog=sweep.prog, settings=SWEEP)
