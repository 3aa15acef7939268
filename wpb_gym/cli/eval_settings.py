"""The settings of ``wpb eval`` and ``wpb ablate``: the defaults, then a YAML file, then the flags.

Each setting is checked by one function (``cli_inputs``) wherever it comes from, so a value
the command line refuses is refused in a config too, and the other way round.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.tracks import TRACKS
from ..episodes.generators.paper import REGIMES
from ..evaluation.referee import DEFAULT_LIMITS, RunLimits
from .inputs import (
    MAX_LENGTH,
    InputError,
    parse_bool,
    parse_budgets,
    parse_int,
    parse_ints,
    parse_names,
    parse_path,
    parse_seconds,
)
from .settings import read_settings

DEFAULT_BUDGETS = (1024, 10240, 102400, 1048576)

EVAL_DEFAULTS: dict[str, Any] = {
    "agents": None,
    "episodes": None,
    "regimes": ["default"],
    "lengths": [200],
    "episodes_per_condition": 10,
    "seed": 0,
    "budgets": list(DEFAULT_BUDGETS),
    "tracks": list(TRACKS),
    "jobs": 1,
    # Every policy in its own process (what a leaderboard submission must use); 0 switches a
    # limit off.
    "isolate": False,
    "max_actions_per_step": DEFAULT_LIMITS.max_actions_per_step,
    "max_seconds_per_step": DEFAULT_LIMITS.max_seconds_per_step,
}


def check_setting(key: str, value: Any, where: str) -> Any:
    """``value`` of the eval setting ``key``, checked and normalised; errors start with ``where``."""
    if key == "agents":
        return check_agents(value, where)
    if key == "episodes":
        return None if value is None else parse_path(value, where)
    if key == "regimes":
        return parse_names(value, where, REGIMES)
    if key == "tracks":
        return parse_names(value, where, TRACKS)
    if key == "lengths":
        return parse_ints(value, where, 1, MAX_LENGTH)
    if key == "budgets":
        return parse_budgets(value, where)
    if key in ("episodes_per_condition", "jobs"):
        return parse_int(value, where, 1)
    if key in ("seed", "max_actions_per_step"):
        return parse_int(value, where, 0)
    if key == "isolate":
        return parse_bool(value, where)
    if key == "max_seconds_per_step":
        return parse_seconds(value, where)
    raise InputError(f"{where}: unknown setting")  # pragma: no cover - read_settings refuses unknown keys


def check_agents(value: Any, where: str) -> list[Any]:
    """Agent entries: names (a list or comma-separated text) or mappings with a string ``name``."""
    items = parse_names(value, where) if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise InputError(f"{where}: expected a non-empty list of agents, got {value!r}")
    for item in items:
        if isinstance(item, dict):
            if not isinstance(item.get("name"), str):
                raise InputError(f"{where}: an agent given as a mapping needs a string 'name', got {item!r}")
            if "label" in item and (not isinstance(item["label"], str) or not item["label"]):
                raise InputError(f"{where}: an agent's 'label' must be a non-empty string, got {item!r}")
        elif not isinstance(item, str) or not item:
            raise InputError(f"{where}: an agent is a name or a mapping with 'name', got {item!r}")
    return items


def run_limits(settings: dict[str, Any]) -> RunLimits:
    """The ``RunLimits`` of the settings (a limit of 0 is no limit)."""
    return RunLimits(settings["max_actions_per_step"] or None, settings["max_seconds_per_step"] or None)


def eval_settings(config: str | Path | None, flags: dict[str, Any]) -> dict[str, Any]:
    """The run's settings: the defaults, then the YAML file ``config`` (if any), then the
    flags that were given (``None``: not given; flags are checked by their parsers)."""
    settings = dict(EVAL_DEFAULTS)
    if config is not None:
        try:
            loaded = read_settings(config, EVAL_DEFAULTS)
        except (FileNotFoundError, ValueError) as error:
            raise InputError(str(error)) from None
        for key, value in loaded.items():
            settings[key] = check_setting(key, value, f"{config}: {key}")
    for key in EVAL_DEFAULTS:
        if flags.get(key) is not None:
            settings[key] = flags[key]
    if not settings["agents"]:
        raise InputError("name the agents (--agents NAME[,NAME...] or 'agents:' in the config)")
    return settings
