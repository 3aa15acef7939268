"""``wpb train`` and ``wpb agents``: training agents and listing the registered ones."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

from ..core.checks import InputError
from ..core.messages import one_line
from ..core.setting_values import parse_choice, parse_int, parse_path
from ..core.store_limits import LIMIT_NAMES
from ..evaluation.run_folder import check_folder_path
from .inputs import check_env_kwargs, check_regime, parse_env_kwarg, read_placed_episode_source
from .settings import CommandSettings, Setting, Settings, switch


def _parse_workers(value: Any, where: str = "") -> str | int:
    """--episode-workers: "auto" or a count."""
    if value == "auto":
        return value
    if not (isinstance(value, str) and value.strip().isascii() and value.strip().isdigit()):
        raise InputError(f'expected "auto" or an integer >= 0, got {value!r}')
    return int(value)


def _training_run(settings: Settings) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The env arguments, the training config and where it came from: the algorithm's defaults,
    then its recipe (``--config`` or the shipped recipe of the regime), then the flags."""
    from agents.held_out import HELD_OUT_SEED_OFFSET  # the CLI joins the packages
    from agents.learners.training import LEARNER_ALGOS
    from agents.sb3.train import check_config, defaults_note, load_config, recipe_path

    from ..envs.env import WritePolicyBenchEnv
    from ..episodes.generators.queries import QUERY_REGIMES

    # The training episodes' seed is --seed; held-out episodes use another, derived from it.
    reserved = {"episode_seed": f"set by --seed (held-out episodes use --seed + {HELD_OUT_SEED_OFFSET})"}
    given = dict(settings.env_kwargs or ())
    # Limits beside the budget: the SB3 algorithms train under one given in the env arguments
    # (the model then needs it in evaluation: wpb eval --kind-budgets / --write-time /
    # --compression); value_keeper, the bandit learners and a recipe on the query tier's own env
    # train without them, and wpb eval evaluates what they train under one.
    def unlimited(trainer: str) -> dict[str, str]:
        return {**reserved, **{name: f"not taken: {trainer} trains without limits beside the budget (wpb eval "
                                     f"--{name.replace('_', '-')} evaluates what it trains under one)"
                               for name in LIMIT_NAMES}}

    if settings.algo == "value_keeper" or settings.algo in LEARNER_ALGOS:
        reserved = unlimited(settings.algo)
    if settings.algo == "value_keeper":
        for name in ("config", "resume", "init_from", "vec_env", "episode_workers"):
            if settings[name] is not None and settings[name] is not False:
                raise InputError(f"--{name.replace('_', '-')} is for the SB3 algorithms, not value_keeper")
        if settings.timesteps == 0:
            raise InputError("--timesteps: value_keeper records at least 1 of the teacher's decisions, got 0")
        env_kwargs = _value_keeper_env(given, reserved)
        check_regime(env_kwargs, "--env-kwargs")
        _check_env(env_kwargs, "--env-kwargs")
        return env_kwargs, {"env": {}}, "the value_keeper defaults"
    # The other algorithms train WritePolicyBenchEnv, which plays a query tier's episodes too:
    # its arguments, with the tier's knobs (QueryTierConfig's) as the generator options.
    def env_arguments(kwargs: dict[str, Any], where: str, regime: Any) -> dict[str, Any]:
        return check_env_kwargs(kwargs, where, reserved, query_tier=regime in QUERY_REGIMES,
                                env_class=WritePolicyBenchEnv)

    if settings.algo in LEARNER_ALGOS:
        for name in ("config", "resume", "init_from", "vec_env", "episode_workers"):
            if settings[name] is not None and settings[name] is not False:  # --episode-workers 0 too
                raise InputError(f"--{name.replace('_', '-')} is for the SB3 algorithms, not {settings.algo}")
        if settings.timesteps == 0:
            raise InputError("--timesteps: a bandit learner trains for at least 1 decision, got 0")
        env_kwargs = env_arguments(given, "--env-kwargs", given.get("regime"))
        check_regime(env_kwargs, "--env-kwargs")
        _check_env(env_kwargs, "--env-kwargs")
        return env_kwargs, {"env": {}}, f"the {settings.algo} defaults"
    regime = given.get("regime")
    if settings.config is None:  # the regime picks the recipe: a misspelt one is named, not the recipe
        check_regime(given, "--env-kwargs")
    try:
        config_file = settings.config or recipe_path(settings.algo, regime)
        config = load_config(settings.algo, config_file)
    except (FileNotFoundError, ValueError) as error:
        raise InputError(str(error)) from None
    if config_file is None:
        print(defaults_note(settings.algo, regime), file=sys.stderr)
    where = config_file or f"the {settings.algo} defaults"
    regime = given.get("regime", config["env"].get("regime") if isinstance(config["env"], dict) else None)
    if config.get("query_env") is True:
        return _query_env_run(settings, given, config, str(where), unlimited(f"{where}, on the query tier's own env,"))
    env_kwargs = env_arguments(given, "--env-kwargs", regime)  # the knobs are those of the regime trained
    config["env"] = {**env_arguments(config["env"], f"{where}: env", regime), **env_kwargs}
    check_regime(config["env"], "--env-kwargs" if "regime" in env_kwargs else f"{where}: env")
    if config["env"].get("compression") is not None and regime in QUERY_REGIMES:
        named = "--env-kwargs" if "compression" in env_kwargs else f"{where}: env"
        raise InputError(f"{named}: compression: the query tier ({regime}) has no bound with compressed writes; "
                         "train on a regime without queries")
    if settings.timesteps is not None:
        config["timesteps"] = settings.timesteps
    if settings.vec_env is not None:
        config["vec_env"] = settings.vec_env
    if settings.episode_workers is not None:
        config["episode_workers"] = settings.episode_workers
    flags = [settings.origin_of(name) for name in ("timesteps", "vec_env", "episode_workers")
             if settings[name] is not None]
    try:  # the recipe with the flags applied, checked as one (e.g. 0 RL steps only after imitation)
        check_config(config, f"{where} with {', '.join(flags)}" if flags else str(where))
    except ValueError as error:
        raise InputError(str(error)) from None
    _check_env(config["env"], f"{where}: env" + (" with --env-kwargs" if env_kwargs else ""))
    return env_kwargs, config, str(where)


# What value_keeper reads of --env-kwargs besides the regime's generator options.
_VALUE_KEEPER_ENV = ("regime", "length", "episodes", "budget_bytes")


def _query_env_run(settings: Settings, given: dict[str, Any], config: dict[str, Any], where: str,
                   reserved: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any], str]:
    """A recipe on the query tier's own env (``query_env: true``): its arguments are
    ``QueryTierEnv``'s and the tier's knobs; the budgets and episodes are the recipe's."""
    from agents.sb3.query_imitation import SET_BY_TRAINING
    from agents.sb3.train import check_config

    from ..envs.query_env import QueryTierEnv

    if settings.algo != "maskable_ppo":
        raise InputError(f"--algo {settings.algo}: {where} is a query_env recipe, which trains maskable_ppo")
    for name in ("resume", "init_from", "vec_env", "episode_workers", "eval_episodes"):
        if settings[name] is not None and settings[name] is not False:
            raise InputError(f"--{name.replace('_', '-')}: {where} trains by imitation on the query tier's env, "
                             f"which takes no --{name.replace('_', '-')}")
    if settings.timesteps is not None and settings.timesteps != 0:
        raise InputError(f"--timesteps: {where} trains by imitation only (its rounds and minutes are in its "
                         f"imitation: section); leave --timesteps out")
    reserved = {**SET_BY_TRAINING, **reserved}  # the CLI says more of --seed
    env_kwargs = check_env_kwargs(given, "--env-kwargs", reserved, query_tier=True, env_class=QueryTierEnv)
    config["env"] = {**check_env_kwargs(config["env"], f"{where}: env", reserved, query_tier=True,
                                        env_class=QueryTierEnv), **env_kwargs}
    check_regime(config["env"], "--env-kwargs")
    try:
        check_config(config, where)
        QueryTierEnv(**config["env"])
    except (ValueError, TypeError) as error:
        raise InputError(f"{where}: {one_line(str(error))}") from None
    return env_kwargs, config, where


def _value_keeper_env(given: dict[str, Any], reserved: dict[str, str]) -> dict[str, Any]:
    """``--env-kwargs`` of value_keeper: its episodes and budget, and the tier's knobs."""
    from agents.learners.value_training import DEFAULT_ENV

    from ..episodes.generators.queries import QUERY_REGIMES
    from ..episodes.generators.regimes import config_options

    # Without episode files, value_keeper trains on its default tier unless told another.
    regime = given.get("regime", None if "episodes" in given else DEFAULT_ENV["regime"])
    env_kwargs = check_env_kwargs(given, "--env-kwargs", reserved, query_tier=regime in QUERY_REGIMES)
    knobs = config_options(regime) if regime in QUERY_REGIMES else ()
    for key in env_kwargs:
        if key not in _VALUE_KEEPER_ENV and key not in knobs:
            raise InputError(f"--env-kwargs: value_keeper does not read {key}: it takes "
                             f"{', '.join(_VALUE_KEEPER_ENV)} and a query tier's generator options")
    return env_kwargs if regime is None else {"regime": regime, **env_kwargs}


def _check_env(env_kwargs: dict[str, Any], where: str) -> None:
    """Build a generated-episode env once, so that a bad env value is named with where it came
    from before anything is written (episode files are read, and named, before training)."""
    from ..envs.env import WritePolicyBenchEnv

    if "episodes" not in env_kwargs:
        try:
            WritePolicyBenchEnv(**env_kwargs)
        except (ValueError, TypeError) as error:
            raise InputError(f"{where}: {one_line(str(error))}") from None


def _check_distinct_episodes(training: str | None, origin: str, held_out: str | None) -> None:
    """Read the training and held-out episode files, refusing an episode given twice in either,
    or in both, naming both places: a repeat is drawn twice as often, or weighs twice in
    choosing the best model, and one in both sets has the best model chosen on what it trained on."""
    from ..episodes.identity import refuse_repeated_episodes

    sources = [(training, origin, "it would be drawn twice as often as the others in training"),
               (held_out, "--eval-episodes", "it would weigh twice in choosing the best model")]
    read = {}
    for path, where, harm in sources:
        if path is None:
            continue
        placed = read_placed_episode_source(path)
        try:
            refuse_repeated_episodes([episode for _, episode in placed], where, [place for place, _ in placed], harm)
        except ValueError as error:
            raise InputError(str(error)) from None
        read[where] = placed
    if len(read) == 2 and not _nested(Path(training), Path(held_out)):  # (nested: training names it)
        both = read[origin] + read["--eval-episodes"]
        try:
            refuse_repeated_episodes([episode for _, episode in both], f"{origin} and --eval-episodes",
                                     [place for place, _ in both],
                                     "the best model would be chosen on an episode it trained on")
        except ValueError as error:
            raise InputError(str(error)) from None


def _nested(a: Path, b: Path) -> bool:
    a, b = a.resolve(), b.resolve()
    return a == b or a in b.parents or b in a.parents


def _cmd_train(settings: Settings) -> int:
    from agents.learners.training import LEARNER_ALGOS, train_learner_run
    from agents.sb3.train import train  # the CLI joins the packages

    out = Path(settings.out)
    check_folder_path(out)
    env_kwargs, config, where = _training_run(settings)
    if out.is_dir() and any(out.iterdir()) and not settings.resume:  # never mix two runs' files
        raise InputError(f"--out {out}: the folder is not empty; continue its run with --resume, or choose another")
    # Episode files are read here first, so that their errors name them (and come before any
    # worker process of --vec-env subproc starts).
    training = config["env"].get("episodes", env_kwargs.get("episodes"))
    origin = "--env-kwargs episodes" if "episodes" in env_kwargs else f"{where}: env: episodes"
    _check_distinct_episodes(training if isinstance(training, str) else None, origin, settings.eval_episodes)
    try:
        if config.get("query_env") is True:
            from agents.sb3.query_imitation import train_queries

            saved = train_queries(settings.out, config=config, env_kwargs=config["env"], seed=settings.seed,
                                  progress=not settings.quiet)
            print(f"trained maskable_ppo ({where}) by imitation on {saved['states']:,} labelled states (best "
                  f"validation query accuracy {saved['best_validation_accuracy']:.3f}) -> {settings.out}/best_model.zip")
            return 0
        if settings.algo == "value_keeper":
            from agents.learners.value_training import train_value_keeper_run

            given = {} if settings.timesteps is None else {"timesteps": settings.timesteps}
            saved = train_value_keeper_run(settings.out, env_kwargs=env_kwargs, seed=settings.seed, settings=given,
                                           eval_episodes=settings.eval_episodes, progress=not settings.quiet)
            accuracy = saved["validation_query_accuracy"]
            print(f"trained value_keeper on {saved['timesteps']} of causal_privileged's decisions "
                  f"(validation query accuracy {accuracy:.3f}) -> {settings.out}/learner.json")
            return 0
        if settings.algo in LEARNER_ALGOS:
            saved = train_learner_run(
                settings.algo,
                settings.out,
                env_kwargs=env_kwargs,
                timesteps=settings.timesteps,
                seed=settings.seed,
                progress=not settings.quiet,
                eval_episodes=settings.eval_episodes,
            )
            print(f"trained {settings.algo} for {saved['timesteps']} steps -> {settings.out}/learner.json")
            return 0
        saved = train(
            settings.algo,
            settings.out,
            config=config,
            seed=settings.seed,
            resume=settings.resume,
            progress=not settings.quiet,
            eval_episodes=settings.eval_episodes,
            init_from=settings.init_from,
        )
    except (FileNotFoundError, ValueError) as error:
        raise InputError(str(error)) from None
    print(
        f"trained {settings.algo} ({where}) for {saved['trained_timesteps']:,} steps -> {settings.out}/best_model.zip, "
        "final_model.zip"
    )
    return 0


def _cmd_agents(args: Settings) -> int:
    from agents.registry import registry_table  # the CLI is the one module that joins the packages

    print(registry_table())
    return 0


# agents.sb3.train's ALGOS and VEC_ENVS and agents.learners.training's LEARNER_ALGOS, named here so
# that building the parser imports no agent code (a test keeps them equal).
ALGOS = ("ppo", "maskable_ppo", "a2c", "dqn", "recurrent_ppo", "epsilon_greedy", "bandit_ucb", "value_keeper")
VEC_ENVS = ("native", "dummy", "subproc")

# --config here is the training recipe (a nested YAML document, ``agents.sb3.train.load_config``),
# so the table has no config file of its own; the recipe's env settings and timesteps are
# overridden by --env-kwargs and --timesteps in ``_training_run``.
TRAIN = CommandSettings(
    "wpb train",
    (
        Setting(
            "algo",
            partial(parse_choice, choices=ALGOS),
            "an SB3 algorithm, or a bandit learner (trained for --timesteps decisions, 200,000 by default): "
            + ", ".join(ALGOS),
            required=True,
        ),
        Setting(
            "config",
            parse_path,
            "YAML training recipe (default: the shipped recipe of the regime given in --env-kwargs, else "
            "ALGO's; they are in agents/sb3/recipes/; an algorithm without one trains on its defaults, "
            "with a note saying so)",
            metavar="FILE",
        ),
        Setting(
            "env_kwargs",
            parse_env_kwarg,
            "env arguments, e.g. regime=burst_drift (override the recipe's env settings)",
            many=True,
            pairs=True,
            metavar="KEY=VALUE",
        ),
        Setting(
            "timesteps",
            partial(parse_int, minimum=0),
            "total environment steps (default: the recipe's; 0 only after the recipe's imitation)",
        ),
        Setting("seed", partial(parse_int, minimum=0), "training seed (held-out episodes use another)", default=0),
        Setting(
            "out", parse_path, "run folder: models, checkpoints, TensorBoard logs, config.json", required=True
        ),
        switch("resume", "continue from the newest checkpoint in --out"),
        Setting(
            "vec_env",
            partial(parse_choice, choices=VEC_ENVS),
            "the training envs: native (one native vector env, batched masks), dummy or subproc (SB3's "
            "DummyVecEnv / SubprocVecEnv over single envs); same episodes and results (default: the recipe's, "
            "native)",
        ),
        Setting(
            "episode_workers",
            _parse_workers,
            "processes preparing the native vector env's next episodes of the contract regimes ahead, on other "
            "CPUs: auto (one where this process may use more CPUs than torch's threads take) or a number, 0 for none "
            "(default: the recipe's, auto)",
        ),
        Setting(
            "eval_episodes",
            parse_path,
            "held-out episode file or set for model selection (required when --env-kwargs has episodes=PATH)",
        ),
        Setting("init_from", parse_path, "start from this model (e.g. one trained on synthetic regimes)"),
        switch("quiet", "no progress bar"),
    ),
    config=False,
)
AGENTS = CommandSettings("wpb agents", (), config=False)


def add_commands(sub: Any) -> None:
    """Add agents and train to the ``wpb`` subcommands ``sub``."""
    agents = sub.add_parser("agents", help="list the registered agents (name, aliases, track, kind, parameters)")
    agents.set_defaults(func=_cmd_agents, prog=agents.prog, settings=AGENTS)

    tr = sub.add_parser(
        "train", help="train an SB3 agent on WritePolicyBench-v0 (best model kept on held-out episodes)"
    )
    TRAIN.add_to(tr)
    tr.set_defaults(func=_cmd_train, prog=tr.prog, settings=TRAIN)
