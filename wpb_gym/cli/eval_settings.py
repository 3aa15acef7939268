"""The settings of ``wpb eval`` and ``wpb ablate`` (see ``settings`` for how they are merged)."""

from __future__ import annotations

from functools import partial
from typing import Any

from ..core.checks import InputError
from ..core.compression import Compression
from ..core.kind_budgets import KindShares
from ..core.store_limits import LIMIT_NAMES, StoreLimits
from ..core.write_time import WriteTime
from ..core.setting_values import (
    MAX_LENGTH,
    budget_text,
    input_error,
    parse_budget,
    parse_budgets,
    parse_choice,
    parse_int,
    parse_ints,
    parse_names,
    parse_path,
    parse_seconds,
    parse_text,
)
from ..core.tracks import TRACKS
from ..episodes.generators.queries import QUERY_REGIMES
from ..episodes.generators.regimes import ALL_REGIMES
from ..evaluation.isolated.sandbox import Sandbox
from ..evaluation.ray_backend import BACKENDS
from ..evaluation.referee import DEFAULT_LIMITS, MAX_SECONDS_PER_STEP, RunLimits
from .settings import CommandSettings, Setting, Settings, switch

DEFAULT_BUDGETS = (1024, 10240, 102400, 1048576)
_SANDBOX = Sandbox()  # its defaults are the settings'



DRAW = "draw"  # --seed draw: wpb eval draws the seed itself
# Bits of a drawn seed: too many to try them all against the episodes a policy is shown, or
# against the episode hashes of published results.
DRAWN_SEED_BITS = 63
# Digits of a seed read from a file (a seed of 128 bits has 39).
_MOST_SEED_DIGITS = 40


def parse_seed(value: Any, where: str) -> int | str:
    """A seed (an integer >= 0) or ``draw``."""
    if isinstance(value, str) and value.strip().lower() == DRAW:
        return DRAW
    if isinstance(value, str) and not value.strip().lstrip("+-").isdigit():
        raise input_error(where, f"expected an integer >= 0 or {DRAW}, got {value!r}")
    return parse_int(value, where, 0)


def read_seed_file(path: str, where: str) -> int:
    """The seed held in the file ``path``: one integer >= 0, alone but for white space. Errors
    never quote what the file holds: it is a secret."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MOST_SEED_DIGITS + 64)
    except OSError as error:
        raise InputError(f"{where} {path}: cannot read: {error.strerror or error}") from None
    text = data.decode("ascii", "replace").strip()
    if not (text.isascii() and text.isdigit() and len(text) <= _MOST_SEED_DIGITS):
        raise InputError(
            f"{where} {path}: expected one integer >= 0 of at most {_MOST_SEED_DIGITS} digits alone in the file "
            f"(what it holds is not shown: it is the secret seed)"
        )
    return int(text)


def seed_fingerprint(seed: int) -> str:
    """What results record of a seed read from a file: its sha256, which tells runs on the same
    seed apart from others without giving the seed away (a seed of a small range can be found
    by trying each one against it, as against the episode hashes: draw the file's from a large one)."""
    import hashlib

    return "sha256:" + hashlib.sha256(f"wpb-eval-seed:{seed}".encode("ascii")).hexdigest()[:16]


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


# Shared with wpb inspect.
BUDGETS = Setting(
    "budgets",
    parse_budgets,
    "comma-separated, e.g. 1KB,10KB (1KB = 1024 bytes)",
    default=list(DEFAULT_BUDGETS),
    default_text=",".join(map(budget_text, DEFAULT_BUDGETS)),
)
TRACKS_SETTING = Setting("tracks", partial(parse_names, known=TRACKS), "comma-separated tracks", default=list(TRACKS))

# What a run records (and hashes, for --resume): every setting that can change its results.
# ``jobs`` never does; the rest are how to write the run.
EVAL_SETTINGS = (
    Setting(
        "agents",
        check_agents,
        "agent names or aliases, or NAME:PATH for one read from a file (sb3:MODEL.zip, "
        "epsilon_greedy:learner.json; exec:PROGRAM for another program, run isolated; LABEL=NAME:PATH names it); "
        "in a config also {name: ..., label: ..., "
        "<parameter>: <value>} for an agent with other parameters",
        required=True,
    ),
    Setting(
        "episodes", parse_path, "a frozen set, a folder of JSONL files or one JSONL file (default: generated)"
    ),
    Setting("regimes", partial(parse_names, known=ALL_REGIMES), "generated regimes", default=["default"]),
    Setting("lengths", partial(parse_ints, minimum=1, maximum=MAX_LENGTH), "generated episode lengths", default=[200]),
    Setting(
        "episodes_per_condition",
        partial(parse_int, minimum=1),
        "generated episodes per regime and length",
        default=10,
    ),
    Setting(
        "seed",
        parse_seed,
        "seed of the generated episodes, or draw: a fresh one drawn by wpb eval, recorded in run.json and "
        "results.csv only (--resume continues with the seed the interrupted run drew)",
        default=0,
    ),
    Setting(
        "seed_file",
        parse_path,
        "read the seed of the generated episodes from this file (one integer) before any agent's process "
        "starts, so that it is on no command line; the sandbox hides the file, and run.json and results.csv "
        "record a fingerprint of the seed, not the seed",
    ),
    BUDGETS,
    TRACKS_SETTING,
    Setting(
        "kind_budgets",
        lambda value, where: KindShares.parse(value, where).text(),
        "hierarchical budgets: a limit per content kind beside the total, as a share of each budget or in "
        "bytes, e.g. endpoint=60%%,doc=30%%,guide=1KB (kinds: endpoint, doc, guide, other; a kind left out is "
        "limited by the total only); the bounds respect them too",
        metavar="KIND=SHARE,...",
    ),
    Setting(
        "write_time",
        lambda value, where: WriteTime.parse(value, where).text(),
        "write time: a per-episode budget of ticks every WRITE or MERGE spends (per_write ticks each, plus "
        "per_kb per KB it stores, rounded up), e.g. total=40,per_write=1,per_kb=1; the bounds respect it too "
        "(not with --kind-budgets)",
        metavar="total=TICKS,...",
    ),
    Setting(
        "compression",
        lambda value, where: Compression.parse(value, where).text(),
        "compressed writes: an agent may WRITE a step as its summary (the summary/1 codec: scalar fields "
        "only), which costs fewer bytes and counts CREDIT of a kept critical step (and CREDIT times its "
        "utility), e.g. credit=0.75; the bounds respect it too (not with --kind-budgets or --write-time, "
        "nor on the query tier)",
        metavar="credit=CREDIT",
    ),
    Setting(
        "jobs",
        partial(parse_int, minimum=1),
        "worker processes; with --isolate, the agents' processes (each worker runs one per agent, so there "
        "are --jobs // agents workers, at least one); results do not depend on it",
        default=1,
    ),
    Setting(
        "backend",
        partial(parse_choice, choices=BACKENDS),
        "where the grid's tasks run: processes (a pool of --jobs workers) or ray (Ray tasks: a local Ray "
        "of --jobs CPUs, or the cluster at --address; the scale extra); results do not depend on it",
        default="processes",
    ),
    Setting(
        "address",
        parse_text,
        "with --backend ray: the Ray cluster to use (auto, or ray://HOST:10001); the tasks run on its CPUs, "
        "so --jobs is refused with it",
    ),
    switch(
        "isolate",
        "run every agent in its own process, shown only what it may see (for untrusted code, leaderboards)",
    ),
    Setting(
        "max_actions_per_step",
        partial(parse_int, minimum=0),
        "stop an agent that yields more actions at one timestep (0: no limit)",
        default=DEFAULT_LIMITS.max_actions_per_step,
    ),
    Setting(
        "max_seconds_per_step",
        partial(parse_seconds, maximum=MAX_SECONDS_PER_STEP),
        "stop an agent that takes longer over one timestep, in seconds (0: no limit)",
        default=DEFAULT_LIMITS.max_seconds_per_step,
    ),
    switch(
        "data_only_models",
        "refuse trained models given as pickles (sb3:MODEL.zip, rllib:CHECKPOINT: loading one runs the code it "
        "holds); accept exported ones only (policy:DIR, wpb export) (for leaderboards: generated episodes then "
        "need --seed-file or --seed draw, or an explicit --seed, not the public default)",
    ),
    # The sandbox of --isolate (wpb_gym.evaluation.isolated.sandbox): each agent's process's limits.
    Setting(
        "sandbox_memory",
        parse_budget,
        "with --isolate: the address space each agent's sandboxed process may map, e.g. 4GB; an allocation "
        "past it stops the run (0: no limit)",
        default=_SANDBOX.memory_bytes,
        default_text=budget_text(_SANDBOX.memory_bytes),
    ),
    Setting(
        "sandbox_cpu_seconds",
        partial(parse_int, minimum=0),
        "with --isolate: the CPU seconds each agent's sandboxed process may use in the whole run (0: no limit)",
        default=_SANDBOX.cpu_seconds,
    ),
    Setting(
        "sandbox_processes",
        partial(parse_int, minimum=0),
        "with --isolate: the processes and threads each agent's sandbox may hold at once (0: no limit)",
        default=_SANDBOX.processes,
    ),
    Setting(
        "sandbox_file_size",
        parse_budget,
        "with --isolate: the largest file each agent's sandboxed process may write, e.g. 64MB (0: no limit)",
        default=_SANDBOX.file_bytes,
        default_text=budget_text(_SANDBOX.file_bytes),
    ),
)
# Where the tasks run never changes results: not recorded, not hashed. Nor does where the seed
# file lies (its seed is, as a fingerprint), nor which kinds of model files are accepted (run.json
# says it beside the isolation). Kind budgets and write time change results: they are recorded when given
# (``recorded_settings``), so that a run without them keeps the key it always had.
NOT_RECORDED = ("jobs", "backend", "address", "seed_file", "data_only_models", *LIMIT_NAMES)
RECORDED = tuple(s.name for s in EVAL_SETTINGS if s.name not in NOT_RECORDED)
GENERATED_ONLY = ("regimes", "lengths", "episodes_per_condition", "seed", "seed_file")


def recorded_settings(config: Settings) -> dict[str, Any]:
    """What a run records of its settings (and hashes, for --resume)."""
    recorded = {k: config[k] for k in RECORDED}
    for name in LIMIT_NAMES:
        if config[name] is not None:
            recorded[name] = config[name]
    return recorded


def store_limits(config: Settings) -> StoreLimits:
    """The run's limits beside its budgets: kind budgets, write time or compression (or none)."""
    given = [name for name in LIMIT_NAMES if config[name] is not None]
    if len(given) > 1:
        raise InputError(f"{' and '.join(config.origin_of(name) for name in given)}: one at a time; together "
                         "they have no exact bound here")
    if config["compression"] is not None and config["episodes"] is None:
        queried = [regime for regime in config["regimes"] if regime in QUERY_REGIMES]
        if queried:
            raise InputError(f"{config.origin_of('compression')}: the query tier ({', '.join(queried)}) has no "
                             "bound with compressed writes; run compression on the other regimes")
    return StoreLimits(None if config["kind_budgets"] is None else KindShares.parse(config["kind_budgets"]),
                       None if config["write_time"] is None else WriteTime.parse(config["write_time"]),
                       None if config["compression"] is None else Compression.parse(config["compression"]))

EVAL = CommandSettings(
    "wpb eval",
    EVAL_SETTINGS
    + (
        Setting(
            "out",
            parse_path,
            "run folder for results.csv, leaderboard.md, run.json",
            required=True,
            in_config=False,
        ),
        switch("force", "replace the results of an earlier run in --out", in_config=False),
        switch("resume", "continue an interrupted run of the same settings", in_config=False),
        switch("quiet", "no progress bar", in_config=False),
        switch(
            "accept_weaker_isolation",
            "with --isolate where the platform cannot sandbox the agents' processes (no Linux namespaces): "
            "run them in a process each, unsandboxed, rather than refuse",
            in_config=False,
        ),
    ),
)

ABLATE = CommandSettings(
    "wpb ablate",
    (
        Setting(
            "config_a",
            parse_path,
            "YAML settings of variant A (as for wpb eval --config)",
            positional=True,
            required=True,
            in_config=False,
        ),
        Setting(
            "config_b", parse_path, "YAML settings of variant B", positional=True, required=True, in_config=False
        ),
        Setting("seeds", partial(parse_int, minimum=2), "seeds 0..N-1 of the generated episodes", default=5),
        Setting("jobs", partial(parse_int, minimum=1), "worker processes (default: each config's)"),
        Setting("out", parse_path, "also write the markdown table to this file", in_config=False),
    ),
)


def sandbox_of(settings: Settings, hidden: tuple[str, ...] = ()) -> Sandbox:
    """The ``Sandbox`` of the settings (a limit of 0 is no limit), hiding ``hidden`` from the agents."""
    return Sandbox(
        memory_bytes=settings["sandbox_memory"] or None,
        cpu_seconds=settings["sandbox_cpu_seconds"] or None,
        processes=settings["sandbox_processes"] or None,
        file_bytes=settings["sandbox_file_size"] or None,
        hidden=hidden,
    )


def run_limits(settings: Settings) -> RunLimits:
    """The ``RunLimits`` of the settings (a limit of 0 is no limit)."""
    return RunLimits(settings["max_actions_per_step"] or None, settings["max_seconds_per_step"] or None)


def eval_config_file(path: str) -> Settings:
    """The eval settings of one YAML file alone (``wpb ablate``'s variants)."""
    return EVAL.resolve({"config": path}, file_only=True)
