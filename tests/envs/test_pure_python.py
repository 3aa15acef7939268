"""The vector env and the single env with numba's JIT off (``NUMBA_DISABLE_JIT=1``, the way to
debug their core in Python) play exactly what the compiled core plays."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_vector_env import same

from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.vector import WritePolicyBenchVectorEnv

# The core's start paths: the paper regimes' batched start from their draws; a contract regime's
# episode started alone from its draws, with the oracle's U*(B) at start (privileged, dense); one
# with text, made (its rules compiled) and read; SameStep's reset inside a step.
CASES = {
    "default": ({"length": 30}, "NextStep"),
    "breaking": ({"regime": "breaking", "length": 30, "api_pool": 6, "track": "privileged",
                  "dense_reward": True}, "NextStep"),
    "contract_mix": ({"regime": "contract_mix", "length": 30, "api_pool": 6, "dense_reward": True}, "NextStep"),
    "default_same_step": ({"regime": "burst_redundancy", "length": 30}, "SameStep"),
}


def play(case: str, n: int = 3, steps: int = 120, cases: dict | None = None) -> list:
    """Every output of ``n`` sub-envs reset with seed 11 and stepped with seeded random valid
    actions (a few refused ones too), through several episodes; ``case`` names the env's
    arguments and autoreset mode in ``cases`` (``CASES``)."""
    kwargs, mode = (cases or CASES)[case]
    env = WritePolicyBenchVectorEnv(n, autoreset_mode=mode, **kwargs)
    outputs = [env.reset(seed=11)]
    rng = np.random.default_rng(len(case))
    info = outputs[0][1]
    for _ in range(steps):
        actions = np.array([rng.choice(np.flatnonzero(row)) for row in info["action_mask"]])
        wrong = rng.random(n) < 0.05
        actions[wrong] = rng.integers(0, env.n_actions, wrong.sum())
        outputs.append(env.step(actions))
        info = outputs[-1][4]
    assert env.core.compiled.all()  # the core stepped them, not the single envs
    return outputs


def play_single(case: str) -> list:
    """Every output of a single env through three episodes of ``CASES[case]``'s arguments, with
    seeded random actions (a few refused), items exposed, and its memory read back."""
    env = WritePolicyBenchEnv(**CASES[case][0])
    rng = np.random.default_rng(3)
    outputs = []
    for episode in range(3):
        outputs.append(env.reset(seed=episode))
        info, ended = outputs[-1][1], False
        while not ended:
            hidden = sorted(set(env.store.timesteps()) - set(env.slot_timesteps))
            if hidden and rng.random() < 0.2:
                outputs.append((env.expose_item(hidden[0]), env.action_masks()))
            valid = np.flatnonzero(env.action_masks())
            action = int(rng.choice(valid)) if rng.random() > 0.05 else int(rng.integers(env.n_actions))
            outputs.append(env.step(action))
            info, ended = outputs[-1][4], outputs[-1][2]
            outputs.append((env.store.timesteps(), env.store.bytes_used))
    return outputs


def _play_without_jit(case: str, out: Path, function: str = "play") -> None:
    """Run ``function(case)`` in a fresh interpreter (numba reads the variable as it is imported)."""
    code = ("import pickle, sys\n"
            "from numba.core import config\n"
            "assert config.DISABLE_JIT\n"
            f"from test_pure_python import {function}\n"
            f"pickle.dump({function}({case!r}), open(sys.argv[1], 'wb'))\n")
    here = Path(__file__).parent
    path = os.pathsep.join([str(here), str(here.parent.parent), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1", "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code, str(out)],
                          check=False, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("case", list(CASES))
def test_without_the_jit_the_vector_env_plays_what_the_compiled_core_plays(case, tmp_path):
    out = tmp_path / "outputs.pickle"
    _play_without_jit(case, out)
    with open(out, "rb") as f:
        in_python = pickle.load(f)
    compiled = play(case)
    assert sum(int(terminated.sum()) for _, _, terminated, _, _ in compiled[1:]) >= 3
    for step, (a, b) in enumerate(zip(in_python, compiled, strict=True)):
        same(a, b, f"step {step}")


@pytest.mark.parametrize("case", ["default", "breaking"])
def test_without_the_jit_the_single_env_plays_what_the_compiled_core_plays(case, tmp_path):
    out = tmp_path / "outputs.pickle"
    _play_without_jit(case, out, "play_single")
    with open(out, "rb") as f:
        in_python = pickle.load(f)
    compiled = play_single(case)
    assert len(compiled) > 150 and any(len(output) == 2 and isinstance(output[0], int) for output in compiled)
    for step, (a, b) in enumerate(zip(in_python, compiled, strict=True)):
        same(a, b, f"output {step}")
