"""Shared test settings: property tests are derandomised so every run checks the same cases;
``core_makes_every_episode`` for tests of the episodes the vector env's core makes;
``tiny_sb3_model``, a small trained MaskablePPO file with its env arguments beside it."""

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, settings

# The suite tests the compiled core: with numba's cache empty, a first run would otherwise play
# on the core's Python twins until a background compile ends (tests/envs/test_first_run.py
# tests that path on its own).
os.environ.setdefault("WPB_GYM_COMPILE", "here")


def pytest_configure(config):
    """With numba's cache empty (a fresh clone), compile the core once, before any test runs
    (unless another process is compiling it): else each pytest-xdist worker, and each process
    a test starts before the cache is full, compiles it again, side by side on the same cores."""
    if hasattr(config, "workerinput") or os.environ.get("NUMBA_DISABLE_JIT") == "1":
        return  # a worker: the process that started it compiled
    from wpb_gym.envs.fast.first_run import compiled_mark

    if not compiled_mark().exists():  # in a process of its own, which lowers its priority
        subprocess.run([sys.executable, "-m", "wpb_gym.envs.fast.first_run"], check=True)

settings.register_profile(
    "deterministic",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("deterministic")


# The env arguments ``tiny_sb3_model`` was trained with (written beside it, as wpb train does).
TINY_SB3_ENV = {"slots": 4, "track": "privileged"}


@pytest.fixture(scope="session")
def tiny_sb3_model(tmp_path_factory):
    """A MaskablePPO trained 128 steps on 40-step episodes, saved once for the whole run."""
    import json

    import torch
    from sb3_contrib import MaskablePPO

    from agents.sb3.agent import env_kwargs_path
    from wpb_gym.envs.env import WritePolicyBenchEnv

    torch.set_num_threads(1)  # 2 cores: one thread trains several times faster
    env = WritePolicyBenchEnv(length=40, **TINY_SB3_ENV)
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(128)
    path = tmp_path_factory.mktemp("model") / "tiny.zip"
    model.save(path)
    env_kwargs_path(path).write_text(json.dumps(TINY_SB3_ENV), encoding="utf-8")
    return path
