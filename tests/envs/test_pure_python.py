"""The vector env with numba's JIT off (``NUMBA_DISABLE_JIT=1``, the way to debug its core in
Python) plays exactly what the compiled core plays."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_vector_env import same

from wpb_gym.envs.vector import WritePolicyBenchVectorEnv

# The core's start paths: the paper regimes' batched start from their draws; a contract regime's
# episode made and read, with the oracle's U*(B) at start (privileged, dense); SameStep's reset
# inside a step.
CASES = {
    "default": ({"length": 30}, "NextStep"),
    "breaking": ({"regime": "breaking", "length": 30, "api_pool": 6, "track": "privileged",
                  "dense_reward": True}, "NextStep"),
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


def _play_without_jit(case: str, out: Path) -> None:
    """Run ``play(case)`` in a fresh interpreter (numba reads the variable as it is imported)."""
    code = ("import pickle, sys\n"
            "from numba.core import config\n"
            "assert config.DISABLE_JIT\n"
            "from test_pure_python import play\n"
            f"pickle.dump(play({case!r}), open(sys.argv[1], 'wb'))\n")
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
