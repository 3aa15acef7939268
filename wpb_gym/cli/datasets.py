"""``wpb dataset``: an agent's trajectories as a Minari dataset, for offline RL and imitation."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

from ..core.checks import InputError
from ..core.messages import one_line
from ..core.setting_values import parse_int, parse_path, parse_text
from ..envs.registration import QUERY_ENV_IDS
from ..evaluation.run_folder import check_folder_path
from .inputs import check_env_kwargs, check_regime, parse_env_kwarg, read_episode_source
from .settings import CommandSettings, Setting, Settings, switch

INTERRUPTED = 130  # the exit code of a command stopped by Ctrl-C (128 + SIGINT)


def _identity(path: Path) -> tuple[int, int] | None:
    """What tells a dataset folder from another put in its place (None: there is none)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _check_env(env_id: str, env_kwargs: dict[str, Any], settings: Settings) -> None:
    """Build the env once, so that a bad env argument, or more --episodes than its episode
    source holds, is named before any episode is played."""
    import gymnasium as gym

    where = settings.origin_of("env_kwargs")
    try:
        env = gym.make(env_id, **{"episode_seed": settings.seed, **env_kwargs})
    except (ValueError, TypeError) as error:
        raise InputError(f"{'--env-kwargs' if where == 'default' else where}: {one_line(str(error))}") from None
    available = env.unwrapped.sampler.source.size  # None: generated, as many as asked
    env.close()
    if available is not None and settings.episodes > available:
        raise InputError(
            f"{settings.origin_of('episodes')} {settings.episodes}: more episodes than the source "
            f"episodes={env_kwargs.get('episodes')} holds ({available}); expected at most {available}"
        )


def _cmd_dataset(settings: Settings) -> int:
    try:
        from agents.datasets import (  # the CLI joins the packages
            check_dataset_id,
            check_env_id,
            default_root,
            record_dataset,
        )
    except ImportError as error:  # minari is in the offline extra
        raise InputError(f"wpb dataset needs Minari: pip install 'writepolicybench-gym[offline]' ({error})") from None
    from tqdm import tqdm

    from .evaluation import policy_specs

    try:
        check_dataset_id(settings.dataset_id)
    except ValueError as error:
        raise InputError(f"{settings.origin_of('dataset_id')}: {error}") from None
    where = settings.origin_of("env_kwargs")  # the flag, or the config file's key
    reserved = {"episode_seed": "set by --seed", "track": "the agent's: privileged for privileged and oracle agents"}
    try:
        env_id = check_env_id(settings.env_id)
    except ValueError as error:
        raise InputError(f"{settings.origin_of('env_id')} {settings.env_id}: {one_line(str(error))}") from None
    env_kwargs = check_env_kwargs(dict(settings.env_kwargs or ()), where, reserved,
                                  query_tier=env_id in QUERY_ENV_IDS)
    check_regime(env_kwargs, where)
    if isinstance(env_kwargs.get("episodes"), str):
        read_episode_source(env_kwargs["episodes"])  # its errors name the file
    (spec,) = policy_specs([settings.agent])
    # A privileged id stays privileged (an unprivileged agent runs there too); an unprivileged id
    # of the query tier cannot host an agent that needs more.
    id_track = QUERY_ENV_IDS.get(env_id, {}).get("track")
    if id_track == "unprivileged" and spec.track != "unprivileged":
        privileged = env_id.replace("-v0", "-Privileged-v0")
        raise InputError(f"{settings.origin_of('env_id')} {env_id}: {spec.label} runs on the {spec.track} track only; "
                         f"expected a privileged id ({privileged})")
    env_kwargs["track"] = "unprivileged" if spec.track == "unprivileged" and id_track != "privileged" else "privileged"
    max_steps = settings.max_episode_steps
    root = Path(settings.out).resolve() if settings.out else default_root()
    check_folder_path(root)  # a file, under a file, or not writable: named before any episode is played
    _check_env(env_id, env_kwargs, settings)
    target = root.resolve() / settings.dataset_id
    before = _identity(target)

    def progress(episodes):
        return tqdm(episodes, desc=f"dataset {spec.label}", unit="ep", file=sys.stderr, disable=settings.quiet)

    try:
        path = record_dataset(
            settings.dataset_id,
            spec.factory,
            env_kwargs,
            settings.episodes,
            seed=settings.seed,
            root=root,
            algorithm_name=spec.label,
            description=f"{env_id} trajectories of {spec.label}, recorded by wpb dataset",
            force=settings.force,
            progress=progress,
            env_id=env_id,
            max_episode_steps=max_steps,
        )
    except FileExistsError as error:
        raise InputError(str(error)) from None
    except KeyboardInterrupt:  # record_dataset leaves no partial dataset (its staging folder is removed)
        after = _identity(target)
        if after is not None and after != before:
            left = f"interrupted once the new dataset was complete: {target} holds it"
        elif before is not None:
            left = f"interrupted; nothing was written: the dataset {target} is as it was"
        else:
            left = f"interrupted; nothing was written (no dataset at {target})"
        print(("" if settings.quiet else "\n") + f"wpb dataset: {left}", file=sys.stderr)
        return INTERRUPTED
    except ValueError as error:  # Minari's refusal of the id, or the env's of an argument
        raise InputError(f"{one_line(str(error))}") from None
    print(f"{settings.episodes} episodes of {spec.label} -> {path} (minari.load_dataset({settings.dataset_id!r}) "
          f"with MINARI_DATASETS_PATH={root})")
    return 0


DATASET = CommandSettings(
    "wpb dataset",
    (
        Setting(
            "agent",
            parse_text,
            "the agent to record: a name or alias, or NAME:PATH for one read from a file (sb3:MODEL.zip)",
            required=True,
        ),
        Setting(
            "dataset_id",
            parse_text,
            "Minari's id of the dataset, NAMESPACE/NAME-vVERSION, e.g. wpb/contract_mix-breaking_detector-v0",
            required=True,
        ),
        Setting("episodes", partial(parse_int, minimum=1), "episodes to record (episode i of the source)", default=10),
        Setting(
            "env_id",
            parse_text,
            "the env's registered id: WritePolicyBench-v0, or the query tier's, e.g. "
            "WritePolicyBench-QueriesEasy-Privileged-v0",
            default="WritePolicyBench-v0",
        ),
        Setting(
            "max_episode_steps",
            partial(parse_int, minimum=1),
            "truncate each episode after this many env steps (Gymnasium's TimeLimit; bounds an endless stream)",
            default=None,
        ),
        Setting("seed", partial(parse_int, minimum=0), "episode seed of generated episodes and reset seeds", default=0),
        Setting(
            "env_kwargs",
            parse_env_kwarg,
            "env arguments, e.g. regime=contract_mix budget_bytes=10KB dense_reward=true (the track is the agent's)",
            many=True,
            pairs=True,
            metavar="KEY=VALUE",
        ),
        Setting(
            "out",
            parse_path,
            "Minari's datasets folder to write in (default: $MINARI_DATASETS_PATH, else ~/.minari/datasets)",
            in_config=False,
        ),
        switch("force", "replace an existing dataset of that id (once the new one is complete)", in_config=False),
        switch("quiet", "no progress bar", in_config=False),
    ),
)


def add_commands(sub: Any) -> None:
    """Add dataset to the ``wpb`` subcommands ``sub``."""
    dataset = sub.add_parser("dataset", help="record an agent's trajectories as a Minari dataset (offline RL)")
    DATASET.add_to(dataset)
    dataset.set_defaults(func=_cmd_dataset, prog=dataset.prog, settings=DATASET)
