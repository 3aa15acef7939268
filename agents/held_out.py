"""The held-out episodes a training run picks its best model on, kept apart from its training episodes.

Generated training episodes come from the episode seed ``seed``, held-out ones from
``seed + HELD_OUT_SEED_OFFSET``, so validation never sees a training episode. When the training
episodes come from files (``episodes=`` in the env arguments, e.g. the training period of a
real-drift set), the held-out ones must be given too (``--eval-episodes``), and may be neither
the same files nor, for real-drift episodes, overlapping in time. SB3 training
(``agents.sb3.train``) and the bandit learners' (``agents.learners.training``) validate alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

HELD_OUT_SEED_OFFSET = 1_000_003


def validation_env_kwargs(
    eval_config: Mapping[str, Any], eval_episodes: str | Path | None, seed: int, count: int
) -> dict[str, Any]:
    """The env arguments of the validation env that picks the best model: the same episodes at
    every evaluation (the first ``count`` of the held-out seed, or every episode of the
    ``--eval-episodes`` file), scored with the terminal reward (the episode's F1: no cost per
    EXPIRE, whatever the training env charges)."""
    from wpb_gym.envs.env import WritePolicyBenchEnv

    env = WritePolicyBenchEnv(**{**eval_config, "episode_seed": seed + HELD_OUT_SEED_OFFSET, "episode_order": "cycle"})
    if eval_episodes is not None:  # every held-out episode once, in order
        from wpb_gym.episodes.sources import EpisodeList

        held_out = EpisodeList.from_path(eval_episodes)
        count = held_out.select(regime=eval_config.get("regime"), length=eval_config.get("length")).size
    episodes = []
    for index in range(count):
        env.reset(options={"episode_index": index})
        episodes.append(env.episode)
    kept = _given_episodes(eval_config, "regime", "length")  # they chose the episodes, now made
    return {**kept, "episodes": episodes, "episode_order": "cycle", "dense_reward": False, "expire_cost": 0.0}


def held_out_env_kwargs(env_config: Mapping[str, Any], eval_episodes: str | Path | None) -> dict[str, Any]:
    """The env arguments of the held-out evaluation env (refusing held-out episodes that are not)."""
    train_source = env_config.get("episodes")
    if eval_episodes is None:
        if train_source is not None:
            raise ValueError(
                "training on episode files (episodes=...) needs held-out episodes (--eval-episodes PATH): "
                "otherwise the best model would be chosen on the episodes it trained on"
            )
        return dict(env_config)
    if train_source is not None and isinstance(train_source, (str, Path)):
        _check_held_out(Path(train_source), Path(eval_episodes))
    return {**_given_episodes(env_config), "episodes": str(eval_episodes)}


def _given_episodes(env_config: Mapping[str, Any], *also: str) -> dict[str, Any]:
    """``env_config`` for an env given its episodes: the episode source and the generator
    options go (they would only apply to generated episodes; a query tier's are its own), and so
    do ``also``."""
    from wpb_gym.envs.episode_sampler import GENERATOR_OPTIONS
    from wpb_gym.episodes.generators.regimes import QUERY_REGIMES, config_options

    regime = env_config.get("regime")
    options = config_options(regime) if regime in QUERY_REGIMES else GENERATOR_OPTIONS
    return {k: v for k, v in env_config.items() if k not in ("episodes", *options, *also)}


def _check_held_out(train: Path, held: Path) -> None:
    """The held-out source is neither the training source, nor inside it, nor around it, and
    real-drift episodes (``first_date`` / ``last_date`` labels) do not overlap in time."""
    from wpb_gym.episodes.sources import read_episodes

    a, b = train.resolve(), held.resolve()
    if a == b or a in b.parents or b in a.parents:
        raise ValueError(
            f"--eval-episodes {held} and the training source {train} hold the same episodes (one is the "
            "other or inside it); give held-out episodes, e.g. the heldout.jsonl of a real-drift set and train.jsonl"
        )
    spans = []
    for path in (train, held):
        dated = [e.labels for e in read_episodes(path) if "first_date" in e.labels and "last_date" in e.labels]
        spans.append((min(d["first_date"] for d in dated), max(d["last_date"] for d in dated)) if dated else None)
    if spans[0] is not None and spans[1] is not None:
        (train_first, train_last), (held_first, held_last) = spans
        if not (train_last < held_first or held_last < train_first):
            raise ValueError(
                f"--eval-episodes {held} ({held_first[:10]}..{held_last[:10]}) overlaps the training episodes "
                f"{train} ({train_first[:10]}..{train_last[:10]}) in time"
            )


