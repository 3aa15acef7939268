"""Offline-RL and imitation datasets: any agent's trajectories in ``WritePolicyBench-v0`` (or
another registered id, the query tier's ``WritePolicyBench-Queries*-v0`` included) as a Minari
dataset (``pip install 'writepolicybench-gym[offline]'``).

The agent plays through the env (``agents.env_adapter``), so a scripted agent, the exact
oracle or a trained model is recorded with the env's own observations and actions. Each
episode holds ``T + 1`` observations, the actions, the env's rewards, terminations and
truncations, and per step the infos ``action_mask``, ``accepted``, ``bytes_used``, ``t`` and
``metrics`` (every benchmark metric: NaN until the episode's last step, then the final value
the offline scorer computes). Episode i is the source's episode i, reset with seed
``seed + i``; the dataset records the env's id and arguments, so
``dataset.recover_environment()`` rebuilds it.

In the query tier's envs the agent plays through ``agents.env_adapter.QueryEnvDriver`` (a
keeper, or ``causal_privileged`` on a privileged id); the infos add ``budget_bytes``,
``queries_answered`` and ``queries_asked``, and ``metrics`` holds ``query_accuracy`` beside
the others (an endless stream's: ``ENDLESS_METRICS``).

Written by hand here: a small recorder wrapper. Minari's ``DataCollector`` does the same but
needs JAX (``minari[create]``, several hundred MB) for its tree utilities; the recorder builds
Minari's own ``EpisodeBuffer``s and hands them to ``minari.create_dataset_from_buffers``.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import signal
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from wpb_gym.core.checks import require_int
from wpb_gym.core.version import __version__
from wpb_gym.envs.query_env import DEFAULT_BUDGET_BYTES, ENDLESS_METRICS, QueryTierEnv
from wpb_gym.envs.registration import ENV_IDS, QUERY_ENV_IDS
from wpb_gym.scoring.metrics import METRIC_NAMES

from .env_adapter import run_agent_in_env
from .model_agent import env_defaults

DEFAULT_ENV_ID = "WritePolicyBench-v0"
QUERY_METRICS: tuple[str, ...] = (*METRIC_NAMES, "query_accuracy")
_QUERY_COUNTS = ("budget_bytes", "queries_answered", "queries_asked")


def _info_row(info: Mapping[str, Any], metric_names: tuple[str, ...] = METRIC_NAMES,
              counts: tuple[str, ...] = ()) -> dict[str, Any]:
    """The info of one step in a fixed structure (Minari stores the same keys at every step)."""
    metrics = info.get("metrics")
    row = {
        "action_mask": np.asarray(info["action_mask"], dtype=np.bool_),
        "accepted": bool(info["accepted"]),
        "bytes_used": int(info["bytes_used"]),
        "t": int(info["t"]),
        "metrics": {name: float(metrics[name]) if metrics else math.nan for name in metric_names},
    }
    row.update((name, int(info[name])) for name in counts)
    return row


def _columns(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-step dicts as one dict of per-key lists (nested dicts alike)."""
    return {
        key: _columns([row[key] for row in rows]) if isinstance(value, dict) else [row[key] for row in rows]
        for key, value in rows[0].items()
    }


class _Recorder(gym.Wrapper):
    """Keeps every finished episode of the env it wraps as a Minari ``EpisodeBuffer``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.episodes: list[Any] = []
        base = env.unwrapped
        if isinstance(base, QueryTierEnv):
            self._row = {"metric_names": ENDLESS_METRICS if base.endless else QUERY_METRICS,
                         "counts": _QUERY_COUNTS}
        else:
            self._row = {}

    def _info_row(self, info: Mapping[str, Any]) -> dict[str, Any]:
        row = dict(info)
        if "action_mask" not in row:  # the last step's info: no action is left to mask
            row["action_mask"] = self.env.unwrapped.action_masks()
        return _info_row(row, **self._row)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = self.env.reset(seed=seed, options=options)
        self._reset = (seed, options)
        self._steps: dict[str, list[Any]] = {"observations": [observation], "actions": [], "rewards": [],
                                            "terminations": [], "truncations": [], "infos": [self._info_row(info)]}
        return observation, info

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(action)
        steps = self._steps
        for key, value in (("observations", observation), ("actions", int(action)), ("rewards", float(reward)),
                           ("terminations", bool(terminated)), ("truncations", bool(truncated)),
                           ("infos", self._info_row(info))):
            steps[key].append(value)
        if terminated or truncated:
            from minari.data_collector.episode_buffer import EpisodeBuffer

            seed, options = self._reset
            self.episodes.append(
                EpisodeBuffer(
                    id=len(self.episodes), seed=seed, options=options, **{**steps, "infos": _columns(steps["infos"])}
                )
            )
        return observation, reward, terminated, truncated, info


@contextlib.contextmanager
def _datasets_root(root: Path) -> Iterator[None]:
    """Minari reads where its datasets live from ``MINARI_DATASETS_PATH`` at every call."""
    before = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        yield
    finally:
        if before is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = before


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) held until the block has run, then delivered: the swap of an old dataset
    for the new one is never cut in half. Only the main thread receives signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)


def _swap(new: Path, target: Path, aside: Path) -> None:
    """Put the complete dataset ``new`` at ``target``: an existing one is first moved to ``aside``
    (renamed, not deleted; the caller deletes it once this returns) and moved back if the new
    one cannot take its place. At no moment is neither on disk."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with _interrupts_held():
        if target.exists():
            target.rename(aside)
        try:
            new.rename(target)
        except BaseException:
            if aside.exists() and not target.exists():
                aside.rename(target)
            raise


def default_root() -> Path:
    """Minari's datasets folder: ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``."""
    return Path(os.environ.get("MINARI_DATASETS_PATH") or Path.home() / ".minari" / "datasets")


RECORDED_DEFAULTS = env_defaults(
    "budget_bytes", "slots", "slot_order", "observation_mode", "max_expires_per_step", "reward", "dense_reward",
    "expire_cost", "invalid_action_penalty",
)


def recorded_defaults(env_id: str, env_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults a dataset of ``env_id`` records beside the arguments it was given: those of the
    env's class that shape what is recorded (the query tier's budget when none is given)."""
    if env_id in QUERY_ENV_IDS:
        import inspect

        parameters = inspect.signature(QueryTierEnv).parameters
        defaults = {name: parameters[name].default for name in ("slots", "expire_cost", "invalid_action_penalty")}
        if env_kwargs.get("budget_bytes") is None and env_kwargs.get("budget_fraction") is None:
            defaults["budget_bytes"] = DEFAULT_BUDGET_BYTES
        return defaults
    return dict(RECORDED_DEFAULTS)


def check_env_id(env_id: Any) -> str:
    """``env_id`` if it is a registered WritePolicyBench id, else a ``ValueError`` listing them."""
    if env_id not in ENV_IDS and env_id not in QUERY_ENV_IDS:
        raise ValueError(f"env_id: expected a WritePolicyBench id ({DEFAULT_ENV_ID}, or one of the query tier's: "
                         f"{', '.join(QUERY_ENV_IDS)}; all: wpb_gym.envs.registration), got {env_id!r}")
    return env_id


# Minari's id, with the version it leaves optional required: a dataset is written under a
# version (``wpb/x-v-1`` has none: its name would be ``x-v-1``, which Minari cannot write).
_DATASET_ID = re.compile(r"(?:[-_\w][-_\w/]*[-_\w]+/)?[-_\w]+?-v\d+", re.ASCII)
DATASET_ID_FORM = "NAMESPACE/NAME-vVERSION (Minari's id, e.g. wpb/contract_mix-breaking_detector-v0)"


def check_dataset_id(dataset_id: Any) -> str:
    """``dataset_id`` if Minari can write a dataset under it (``NAMESPACE/NAME-vVERSION``, the
    namespace optional, the version a whole number), else a ``ValueError`` saying the form."""
    if not isinstance(dataset_id, str) or not _DATASET_ID.fullmatch(dataset_id):
        raise ValueError(f"expected {DATASET_ID_FORM}, got {dataset_id!r}")
    return dataset_id


def record_dataset(
    dataset_id: str,
    make_agent: Callable[[], Any],
    env_kwargs: Mapping[str, Any],
    episodes: int,
    *,
    seed: int = 0,
    root: str | os.PathLike[str] | None = None,
    algorithm_name: str | None = None,
    description: str | None = None,
    force: bool = False,
    progress: Callable[[range], Any] = lambda episodes: episodes,
    env_id: str = DEFAULT_ENV_ID,
    max_episode_steps: int | None = None,
) -> Path:
    """Record ``episodes`` episodes of the agent ``make_agent()`` in
    ``gym.make(env_id, **env_kwargs)`` as the Minari dataset ``dataset_id`` under ``root``
    (Minari's own folder by default); returns the dataset's folder. ``max_episode_steps``
    truncates each episode there (Gymnasium's ``TimeLimit``: how an endless query stream is
    bounded if its rolling accuracy does not end it).

    The dataset is written in a staging folder beside it and moved into place once complete;
    an existing dataset of that id is an error unless ``force``: then it is moved aside into the
    staging folder, the new one renamed into its place, and only then is the old one deleted (a
    crash in between leaves both in the staging folder ``.wpb-dataset-*``). An interruption
    (KeyboardInterrupt) before the swap leaves nothing written; the swap itself is not cut short."""
    import minari

    check_dataset_id(dataset_id)  # a malformed id is refused before any episode is played
    # Absolute: Minari joins a relative datasets folder onto itself.
    root = (Path(root) if root is not None else default_root()).resolve()
    target = root / dataset_id
    if target.exists() and not force:
        raise FileExistsError(f"{target}: the dataset {dataset_id!r} exists; pass force=True (--force) to replace it")
    # Every argument that shapes what was recorded, defaults included, goes into the dataset's
    # env spec: recover_environment() then rebuilds this env even after a default changes.
    env_id = check_env_id(env_id)
    if max_episode_steps is not None:
        max_episode_steps = require_int(max_episode_steps, "max_episode_steps", 1)
    env = gym.make(env_id, max_episode_steps=max_episode_steps,
                   **{"episode_seed": seed, **recorded_defaults(env_id, env_kwargs), **env_kwargs})
    available = env.unwrapped.sampler.source.size  # None: generated, as many as asked
    if available is not None and episodes > available:
        raise ValueError(
            f"episodes: {episodes} asked, but the episode source holds {available}; expected at most {available}"
        )
    recorder = _Recorder(env)
    agent = make_agent()
    for i in progress(range(episodes)):
        run_agent_in_env(agent, recorder, seed=seed + i, options={"episode_index": i})
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".wpb-dataset-", dir=root))
    try:
        with _datasets_root(staging), warnings.catch_warnings():
            # Minari's advice to name an author, an email and a code link: the caller's to give.
            warnings.filterwarnings("ignore", category=UserWarning, module="minari.utils")
            minari.create_dataset_from_buffers(
                dataset_id,
                recorder.episodes,
                env=env,
                eval_env=env.spec,
                algorithm_name=algorithm_name,
                description=description,
                requirements=[f"writepolicybench-gym=={__version__}"],
            )
        _swap(staging / dataset_id, target, staging / ".replaced")
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # the staging folder, and the replaced dataset if any
    return target
