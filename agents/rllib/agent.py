"""A PPO policy trained with RLlib (``agents.rllib.training``) as an agent of the offline evaluator.

``make_agent("rllib", path=CHECKPOINT)`` or ``wpb eval --agents rllib:CHECKPOINT`` loads the
policy's RLModule from an RLlib algorithm checkpoint folder (no Ray is started) and plays it
greedily: the action with the largest masked logit, so the same checkpoint on the same
episodes gives the same metrics. Like an SB3 model it decides from the env's observation
through a private env kept in step with the evaluator (``agents.model_agent``), observed as in
training (``agents.rllib.env.MaskedObservation``).

The env arguments that shape the observation come from, first to last: ``env_kwargs``;
``<checkpoint>.env.json`` beside the folder (an override, as for SB3 models); the
``env_config`` of the algorithm config the checkpoint itself stores, so a checkpoint folder
moved or copied alone plays as it was trained. A folder with none of them (an RLModule's own
checkpoint) is refused rather than played with default arguments.

Importing this module needs no Ray; building the agent needs ``pip install -e '.[rllib]'``.
"""

from __future__ import annotations

import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..model_agent import OBSERVATION_KWARGS, ModelAgent, env_kwargs_path, fit_slots, read_env_kwargs
from .env import make_rllib_env, masked_observation, quiet_rllib_deprecations, require_rllib

# Where an algorithm checkpoint keeps the RLModule of its (single-agent) policy.
MODULE_FOLDER = Path("learner_group", "learner", "rl_module")
DEFAULT_MODULE_ID = "default_policy"
# What a checkpoint folder of RLlib's Checkpointable API holds: how to construct the object (for an
# algorithm: its config's state) and the object's state.
CTOR_FILE = "class_and_ctor_args.pkl"
MODULE_STATE_FILE = "module_state.pkl"


def load_rllib_module(path: str | Path, module_id: str = DEFAULT_MODULE_ID, torch_threads: int | None = 1) -> Any:
    """The RLModule ``module_id`` of the RLlib algorithm checkpoint at ``path`` (or the module's own
    checkpoint folder), on the CPU, without starting Ray.

    ``torch_threads`` sets PyTorch's threads for this process (None leaves them): one
    observation at a time gains nothing from more, and evaluation workers that each keep
    PyTorch's default oversubscribe the cores.
    """
    require_rllib()
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModule

    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    # RLlib hands the path to pyarrow, which takes only absolute paths (a relative one is a URI
    # without a scheme to it).
    path = Path(path).resolve()
    if path.is_file():
        hint = f"; a Stable-Baselines3 model? evaluate it as sb3:{path}" if zipfile.is_zipfile(path) else ""
        raise ValueError(f"{path} is a file; rllib: reads the checkpoint folder train_rllib_ppo writes{hint}")
    folder = path / MODULE_FOLDER / module_id
    if not folder.is_dir():
        if not (path / MODULE_STATE_FILE).is_file():
            raise FileNotFoundError(
                f"no RLlib checkpoint at {path}: expected the folder train_rllib_ppo (Algorithm.save_to_path) "
                f"wrote, holding {MODULE_FOLDER / module_id}"
            )
        folder = path
    try:
        with quiet_rllib_deprecations():
            module = RLModule.from_checkpoint(folder)
    except Exception as error:  # a corrupt or foreign folder fails while unpickling
        raise ValueError(_why_unreadable(folder, error)) from None
    module.eval()
    return module


def _why_unreadable(folder: Path, error: Exception) -> str:
    """What is wrong with a module folder RLlib failed to read. RLlib unpickles through a pyarrow
    stream, whose failure on a corrupt file is a bare ``UnsupportedOperation``: reading the files
    again with ``pickle`` names the file and what is wrong with it."""
    for name in (CTOR_FILE, MODULE_STATE_FILE):
        file = folder / name
        if not file.is_file():
            return f"{folder} is not an RLlib RLModule checkpoint: it has no {name}"
        try:
            with file.open("rb") as stream:
                pickle.load(stream)
        except Exception as problem:  # noqa: BLE001 - whatever it is, it is the file's fault
            return f"{file}: damaged, not the pickle RLlib wrote ({type(problem).__name__}: {problem})"
    why = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return f"{folder} is not an RLlib RLModule checkpoint: {why}"


def checkpoint_env_kwargs(path: str | Path) -> dict[str, Any] | None:
    """The env arguments stored in the RLlib algorithm checkpoint at ``path``: the ``env_config``
    of its algorithm config, restored as ``Algorithm.from_checkpoint`` restores it (from
    ``class_and_ctor_args.pkl``, with ``AlgorithmConfig.from_state``; no Ray is started),
    without those the evaluator decides; None when ``path`` holds no algorithm config (an
    RLModule's own checkpoint folder)."""
    require_rllib()
    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    file = Path(path).resolve() / CTOR_FILE
    if not file.is_file():
        return None
    try:
        with file.open("rb") as stream:
            record = pickle.load(stream)
        algo_class, (args, _) = record["class"], record["ctor_args_and_kwargs"]
    except Exception as error:  # noqa: BLE001 - a damaged file, whatever its damage
        raise ValueError(f"{file}: not the constructor record RLlib writes ({type(error).__name__}: {error})") from None
    if not (isinstance(algo_class, type) and issubclass(algo_class, Algorithm)):
        return None  # e.g. an RLModule's record: it knows nothing of the env
    state = args[0] if args else None
    if not isinstance(state, Mapping) or "class" not in state:
        raise ValueError(f"{file}: holds no algorithm config (an RLlib checkpoint of another version?)")
    env_config = dict(AlgorithmConfig.from_state(dict(state)).env_config or {})
    if env_config.get("observation_encoder") is not None:
        raise ValueError(f"{file}: the env was trained with its own observation_encoder; pass the env_kwargs to "
                         "build it (an encoder object is not read from the checkpoint)")
    return {k: v for k, v in env_config.items() if k in OBSERVATION_KWARGS}


def _env_kwargs_of(path: Path, env_kwargs: Mapping[str, Any] | None) -> tuple[dict[str, Any], str]:
    """The env arguments of the checkpoint at ``path`` and where they come from (for messages)."""
    if env_kwargs is not None:
        if not isinstance(env_kwargs, Mapping):
            raise ValueError(f"env_kwargs must be a mapping of WritePolicyBenchEnv arguments, got {env_kwargs!r}")
        return dict(env_kwargs), "env_kwargs"
    sidecar = env_kwargs_path(path)
    if sidecar.is_file():
        return read_env_kwargs(path, None), str(sidecar)
    stored = checkpoint_env_kwargs(path)
    if stored is None:
        raise ValueError(
            f"{path}: no env arguments to build the policy's env: not an algorithm checkpoint (no algorithm config "
            f"in {CTOR_FILE}) and no {sidecar}; write that file (a JSON object, {{}} for the defaults) or pass "
            "env_kwargs"
        )
    return stored, f"the env_config stored in {path / CTOR_FILE}"


class RLlibAgent(ModelAgent):
    name = "rllib"
    aliases = ()
    description = "a PPO policy trained with RLlib (checkpoint folder), greedy on the masked logits"
    kind = "rllib"

    def __init__(
        self, path: str | Path, env_kwargs: Mapping[str, Any] | None = None, module_id: str = DEFAULT_MODULE_ID
    ) -> None:
        path = Path(path).resolve()  # evaluation workers may run elsewhere than the caller's folder
        self.module_id = module_id
        self.module = load_rllib_module(path, module_id)
        given, source = _env_kwargs_of(path, env_kwargs)
        super().__init__(path, given)
        try:
            self.env_kwargs, probe = fit_slots(
                self.module.observation_space, self.env_kwargs, lambda **kwargs: make_rllib_env(kwargs)
            )
        except (TypeError, ValueError) as error:  # a bad argument: named with the file it came from
            raise ValueError(f"{source}: {error}") from None
        if probe.observation_space != self.module.observation_space:
            raise ValueError(
                f"{self.path}: the policy expects observations {self.module.observation_space}, but the env built "
                f"from {source} ({self.env_kwargs or 'the default arguments'}) gives {probe.observation_space}; "
                f"pass the env_kwargs it was trained with (or put them in {env_kwargs_path(path)})"
            )
        import torch
        from ray.rllib.core.columns import Columns

        self._torch, self._obs_key, self._logits_key = torch, Columns.OBS, Columns.ACTION_DIST_INPUTS

    def params(self) -> dict[str, Any]:
        return {"path": self.path, "env_kwargs": self.env_kwargs, "module_id": self.module_id}

    def _act(self, observation: Any, mask: np.ndarray) -> int:
        torch = self._torch
        batch = {k: torch.from_numpy(v)[None] for k, v in masked_observation(observation, mask).items()}
        with torch.no_grad():
            logits = self.module.forward_inference({self._obs_key: batch})[self._logits_key]
        return int(torch.argmax(logits[0]))
