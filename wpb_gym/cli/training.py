"""``wpb train`` and ``wpb agents``: training agents and listing the registered ones."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..evaluation.run_folder import check_folder_path
from . import flags
from .inputs import (
    InputError,
    check_env_kwargs,
    read_episode_source,
)


def _cmd_train(args: argparse.Namespace) -> int:
    from agents.learner_training import LEARNER_ALGOS, train_learner_run
    from agents.train import (  # the CLI joins the packages
        HELD_OUT_SEED_OFFSET,
        load_config,
        parse_env_kwargs,
        recipe_path,
        train,
    )

    check_folder_path(Path(args.out))
    # The training episodes' seed is --seed; held-out episodes use another, derived from it.
    reserved = {"episode_seed": f"set by --seed (held-out episodes use --seed + {HELD_OUT_SEED_OFFSET})"}
    learner = args.algo in LEARNER_ALGOS
    config: dict[str, Any] = {"env": {}}
    try:
        env_kwargs = check_env_kwargs(parse_env_kwargs(args.env_kwargs), "--env-kwargs", reserved)
        if learner:
            for flag in ("config", "resume", "init_from", "subproc"):
                if getattr(args, flag):
                    raise ValueError(f"--{flag.replace('_', '-')} is for the SB3 algorithms, not {args.algo}")
        else:
            # Without --config, the shipped recipe of the regime (configs/train/, agents.train.RECIPES).
            recipe = recipe_path(args.algo, env_kwargs.get("regime"))
            config_file = args.config or (recipe if recipe.is_file() else None)
            config = load_config(args.algo, config_file)
            where = config_file or f"the {args.algo} defaults"
            config["env"] = check_env_kwargs(config["env"], f"{where}: env", reserved)
    except (FileNotFoundError, ValueError) as error:
        raise InputError(str(error)) from None
    # Episode files are read here first, so that their errors name them (and come before any
    # worker process of --subproc starts).
    for source in {env_kwargs.get("episodes"), config["env"].get("episodes"), args.eval_episodes} - {None}:
        if isinstance(source, str):
            read_episode_source(source)
    if args.subproc:
        config["vec_env"] = "subproc"
    try:
        if learner:
            saved = train_learner_run(
                args.algo,
                args.out,
                env_kwargs=env_kwargs,
                timesteps=args.timesteps,
                seed=args.seed,
                progress=not args.quiet,
                eval_episodes=args.eval_episodes,
            )
            print(f"trained {args.algo} for {saved['timesteps']} steps -> {args.out}/learner.json")
            return 0
        saved = train(
            args.algo,
            args.out,
            config=config,
            env_kwargs=env_kwargs,
            timesteps=args.timesteps,
            seed=args.seed,
            resume=args.resume,
            progress=not args.quiet,
            eval_episodes=args.eval_episodes,
            init_from=args.init_from,
        )
    except (FileNotFoundError, ValueError) as error:
        raise InputError(str(error)) from None
    print(f"trained {args.algo} ({where}) for {saved['timesteps']} steps -> {args.out}/best_model.zip, final_model.zip")
    return 0


def _cmd_agents(args: argparse.Namespace) -> int:
    from agents.registry import registry_table  # the CLI is the one module that joins the packages

    print(registry_table())
    return 0


def add_commands(sub: Any) -> None:
    """Add agents, tr to the ``wpb`` subcommands ``sub``."""
    agents = sub.add_parser("agents", help="list the registered agents (name, aliases, track, kind, parameters)")
    agents.set_defaults(func=_cmd_agents, prog=agents.prog)

    tr = sub.add_parser(
        "train", help="train an SB3 agent on WritePolicyBench-v0 (best model kept on held-out episodes)"
    )
    tr.add_argument(
        "--algo",
        required=True,
        choices=["ppo", "maskable_ppo", "a2c", "dqn", "recurrent_ppo", "epsilon_greedy", "bandit_ucb"],
        help="an SB3 algorithm, or a bandit learner (trained for --timesteps decisions, 200,000 by default)",
    )
    tr.add_argument(
        "--config",
        type=flags.path,
        help="YAML settings (default: the shipped recipe of the regime given in --env-kwargs, else "
        "configs/train/ALGO.yaml)",
    )
    tr.add_argument("--env-kwargs", nargs="*", metavar="KEY=VALUE", help="env arguments, e.g. regime=burst_drift")
    tr.add_argument("--timesteps", type=flags.int_at_least(1), help="total environment steps (default: the config's)")
    tr.add_argument(
        "--seed", type=flags.int_at_least(0), default=0, help="training seed (held-out episodes use another)"
    )
    tr.add_argument(
        "--out", type=flags.path, required=True, help="run folder: models, checkpoints, TensorBoard logs, config.json"
    )
    tr.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    tr.add_argument("--subproc", action="store_true", help="SubprocVecEnv instead of DummyVecEnv")
    tr.add_argument(
        "--eval-episodes",
        type=flags.path,
        help="held-out episode file or set for model selection (required when --env-kwargs has episodes=PATH)",
    )
    tr.add_argument(
        "--init-from", type=flags.path, help="start from this model (e.g. one trained on synthetic regimes)"
    )
    tr.add_argument("--quiet", action="store_true", help="no progress bar")
    tr.set_defaults(func=_cmd_train, prog=tr.prog)
