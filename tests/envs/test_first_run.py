"""A first run with numba's cache empty: the core runs its sources as Python while a background
process compiles them, then switches to the compiled functions; both play what the compiled
core plays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from test_pure_python import CASES, play
from test_vector_env import same

from wpb_gym.envs.fast import core, first_run

CASES = {**CASES, "contract_mix": ({"regime": "contract_mix", "length": 60, "api_pool": 6}, "NextStep")}


class Compiling:
    """A background compile that ends, with ``code``, at its ``polls``-th poll."""

    def __init__(self, polls: int, code: int = 0) -> None:
        self.polls, self.code, self.asked = polls, code, 0

    def poll(self) -> int | None:
        self.asked += 1
        return self.code if self.asked >= self.polls else None


@pytest.fixture
def fresh_code(monkeypatch):
    """A core code holder of its own, as a new process has (the session's may be either)."""
    def make(choice: str) -> first_run.CoreCode:
        monkeypatch.setenv(first_run.VARIABLE, choice)
        code = first_run.CoreCode(core.CODE.compiled)
        monkeypatch.setattr(core, "CODE", code)
        return code

    return make


@pytest.mark.parametrize("case", list(CASES))
def test_python_until_compiled_then_compiled_plays_what_the_compiled_core_plays(case, fresh_code, monkeypatch,
                                                                               tmp_path):
    fresh_code("here")
    compiled = play(case, cases=CASES)
    code = fresh_code("background")
    monkeypatch.setattr(first_run, "compiled_mark", lambda: tmp_path / "not-there")
    said, process = [], Compiling(polls=60)
    code.start(say=said.append, launch=lambda: process)
    assert code.compiling and code.kernel is not code.compiled["kernel"]
    assert len(said) == 1 and "background process" in said[0] and "WPB_GYM_COMPILE=here" in said[0]
    both = play(case, cases=CASES)
    assert process.asked == 60  # it ended during the play (the play asks some 140 times)
    assert not code.compiling and code.kernel is code.compiled["kernel"]
    for step, (a, b) in enumerate(zip(both, compiled, strict=True)):
        same(a, b, f"step {step}")


def test_a_failed_compile_leaves_it_to_numba_here(fresh_code, monkeypatch, tmp_path):
    code = fresh_code("background")
    monkeypatch.setattr(first_run, "compiled_mark", lambda: tmp_path / "not-there")
    code.start(say=lambda text: None, launch=lambda: Compiling(polls=1, code=1))
    assert not code.compiling and code.kernel is code.compiled["kernel"]
    code.start(say=lambda text: None, launch=lambda: pytest.fail("started twice"))  # once per process


@pytest.mark.parametrize("choice", ["here", "background"])
def test_nothing_starts_when_told_so_or_when_the_cache_is_complete(choice, fresh_code, monkeypatch, tmp_path):
    (tmp_path / "mark").write_text("done\n")
    monkeypatch.setattr(first_run, "compiled_mark", lambda: tmp_path / "mark")
    code = fresh_code(choice)
    code.start(say=lambda text: pytest.fail(text), launch=lambda: pytest.fail("started"))
    assert not code.compiling and code.kernel is code.compiled["kernel"]


def test_an_unknown_choice_is_named(fresh_code):
    fresh_code("later")
    with pytest.raises(ValueError, match="WPB_GYM_COMPILE='later': expected 'background' .* or 'here'"):
        gym.make_vec("WritePolicyBench-v0", num_envs=2, vectorization_mode="vector_entry_point", length=20)


_NEWCOMER = """
import json, sys, time
import numpy as np, gymnasium as gym
from wpb_gym.envs.fast import core, first_run
env = gym.make_vec("WritePolicyBench-v0", num_envs=4, vectorization_mode="vector_entry_point", length=30)
_, info = env.reset(seed=0)
rng = np.random.default_rng(0)
def act(info):
    return np.array([rng.choice(np.flatnonzero(mask)) for mask in info["action_mask"]])
info = env.step(act(info))[4]
in_python = core.CODE.compiling
waited = time.monotonic()
while core.CODE.compiling and time.monotonic() - waited < 600:
    info = env.step(act(info))[4]
    time.sleep(0.01)
for _ in range(100):
    info = env.step(act(info))[4]
print(json.dumps({"in_python": in_python, "compiling": core.CODE.compiling,
                  "mark": first_run.compiled_mark().exists(),
                  "cached": len(list(first_run.compiled_mark().parent.rglob("*.nbi")))}))
"""


def test_a_newcomers_first_vector_env_steps_before_numba_has_compiled(tmp_path):
    """The real thing, with an empty cache: the first step is played in Python, the background
    compile fills the cache and marks it, and the env steps on compiled; the next process
    starts nothing."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), first_run.VARIABLE: "background"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parents[2]), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", _NEWCOMER], env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"in_python": True, "compiling": False, "mark": True, "cached": found["cached"]}
    assert found["cached"] >= 5
    assert "compiling the vector env's core in a background process" in done.stderr
    again = subprocess.run([sys.executable, "-c", _NEWCOMER], env=env, capture_output=True, text=True, timeout=900,
                           check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["in_python"] is False
    assert "background process" not in again.stderr
