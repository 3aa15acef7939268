"""``wpb stress``: adversarial drift, each policy's worst setting of a regime's generator.

What it searches and writes: ``wpb_gym.evaluation.stress``. Optuna does the searching (the
``stress`` extra).
"""

from __future__ import annotations

import importlib.util
import shlex
from functools import partial
from pathlib import Path
from typing import Any

from ..core.checks import InputError
from ..core.messages import one_line
from ..core.setting_values import MAX_LENGTH, budget_text, parse_budget, parse_choice, parse_int, parse_path
from ..core.tracks import TRACKS
from ..episodes.generators.paper import REGIMES
from ..evaluation.run_folder import check_folder_path
from .eval_settings import check_agents
from .settings import CommandSettings, Setting, Settings, switch


def _cmd_stress(settings: Settings) -> int:
    from tqdm import tqdm

    from ..evaluation.stress import STRESS_JSON, StressSettings, run_stress
    from .evaluation import external_agents, policy_specs, trained_limits

    if importlib.util.find_spec("optuna") is None:
        raise InputError("wpb stress searches with Optuna: pip install 'writepolicybench-gym[stress]'")
    external = external_agents(settings.agents)
    if external:
        raise InputError(f"--agents {external[0]}: wpb stress plays agents in its own process, and another program is "
                         "only ever run isolated (wpb eval); search a Python agent")
    out = Path(settings.out)
    check_folder_path(out.parent if not out.exists() else out)
    if out.exists() and not (settings.force and (out / STRESS_JSON).is_file()):
        raise InputError(f"--out {out}: already exists" + (" and holds no stress run; refusing to replace it"
                                                           if settings.force else "; pass --force to replace it"))
    try:
        stress = StressSettings(settings.regime, settings.length, settings.budget, settings.track, settings.trials,
                                settings.search_episodes, settings.set_episodes, settings.seed)
    except ValueError as error:
        raise InputError(f"--regime {settings.regime} --length {settings.length}: {one_line(str(error))}") from None
    specs = policy_specs(settings.agents)
    for item, spec in zip(settings.agents, specs, strict=True):
        trained = trained_limits(item, spec, isolated=False)[0]
        if trained:
            raise InputError(f"--agents {spec.label}: was trained with {trained[0]}=, and wpb stress plays without "
                             f"limits beside the budget; evaluate it under one with wpb eval "
                             f"--{trained[0].replace('_', '-')}")
    refused = [spec.label for spec in specs if not spec.runs_on(settings.track)]
    if refused:
        raise InputError(f"--track {settings.track}: {', '.join(refused)} cannot play it (each declares another track)")
    command = _command(settings)
    total = len(specs) * settings.trials
    with tqdm(total=total, unit="trial", disable=settings.quiet, desc="search") as bar:
        run_stress([(spec.label, spec.factory) for spec in specs], stress, out, command=command,
                   force=settings.force, progress=bar.update)
    print(f"stress sets of {len(specs)} policies ({settings.regime}, T={settings.length}, "
          f"{budget_text(settings.budget)}) -> {out}/ (report.md, stress.json, search.csv, sets/)")
    return 0


def _command(settings: Settings) -> str:
    """The command that makes this run again, every setting spelt out (for the report)."""
    agents = [a if isinstance(a, str) else None for a in settings.agents]
    shown = ",".join(agents) if None not in agents else "(the config's)"
    words = ["wpb", "stress", "--agents", shown, "--regime", settings.regime, "--length", str(settings.length),
             "--budget", budget_text(settings.budget), "--track", settings.track, "--trials", str(settings.trials),
             "--search-episodes", str(settings.search_episodes), "--set-episodes", str(settings.set_episodes),
             "--seed", str(settings.seed), "--out", str(settings.out)]
    return shlex.join(words)


STRESS = CommandSettings(
    "wpb stress",
    (
        Setting("agents", check_agents, "the agents to stress (names, NAME:PATH or, in a config, mappings)",
                required=True),
        Setting("regime", partial(parse_choice, choices=sorted(REGIMES)), "the generated regime whose knobs are searched",
                default="breaking"),
        Setting("length", partial(parse_int, minimum=1, maximum=MAX_LENGTH), "episode length", default=200),
        Setting("budget", parse_budget, "the memory budget, e.g. 10KB", default=10240, default_text="10KB"),
        Setting("track", partial(parse_choice, choices=TRACKS), "the track the agents play", default="unprivileged"),
        Setting("trials", partial(parse_int, minimum=1, maximum=100_000), "search trials per agent", default=30),
        Setting("search_episodes", partial(parse_int, minimum=1, maximum=10_000),
                "episodes each trial plays (seed --seed)", default=4),
        Setting("set_episodes", partial(parse_int, minimum=1, maximum=100_000),
                "episodes of each frozen stress set and of the standard set (seed --seed + 1,000,000)", default=20),
        Setting("seed", partial(parse_int, minimum=0, maximum=2**32 - 1 - 1_000_000),
                "the search's episodes and sampler", default=0),
        Setting("out", parse_path, "the folder to write (report.md, stress.json, search.csv, sets/)", required=True,
                in_config=False),
        switch("force", "replace a stress run already in --out (kept until the new one is complete)", in_config=False),
        switch("quiet", "no progress bar", in_config=False),
    ),
)


def add_commands(sub: Any) -> None:
    """Add stress to the ``wpb`` subcommands ``sub``."""
    parser = sub.add_parser(
        "stress",
        help="adversarial drift: each agent's worst setting of a regime's generator, frozen as a stress set",
        description="For each agent, search the regime's generator knobs (Optuna's TPE sampler) for where it falls "
        "furthest below the hindsight F1 bound; freeze each worst setting as a stress set; play every agent on every "
        "set and on the regime's own episodes (report.md).",
    )
    STRESS.add_to(parser)
    parser.set_defaults(func=_cmd_stress, prog=parser.prog, settings=STRESS)
