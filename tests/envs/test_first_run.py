"""A first run with numba's cache empty: the core runs its sources as Python while a background
process compiles them, then switches to the compiled functions; both play what the compiled
core plays."""

from __future__ import annotations

import fcntl
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
from python_path import python_env

CASES = {**CASES, "contract_mix": ({"regime": "contract_mix", "length": 60, "api_pool": 6}, "NextStep")}


class Compiling:
    """A background compile that ends at the ``polls``-th time ``compile_running`` asks, writing
    the mark first if it ``succeeds``."""

    def __init__(self, polls: int, succeeds: bool = True) -> None:
        self.polls, self.succeeds, self.asked = polls, succeeds, 0

    def __call__(self, lock: Path) -> bool:
        self.asked += 1
        if self.asked < self.polls:
            return True
        if self.succeeds:
            first_run.compiled_mark().write_text("done\n")
        return False


@pytest.fixture
def fresh_code(monkeypatch, tmp_path):
    """A core code holder of its own, as a new process has (the session's may be either), with
    numba's cache folder (the mark's and the lock's) empty."""
    from numba.core import config

    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "cache"))

    def make(choice: str) -> first_run.CoreCode:
        monkeypatch.setenv(first_run.VARIABLE, choice)
        code = first_run.CoreCode(core.CODE.compiled)
        monkeypatch.setattr(core, "CODE", code)
        return code

    return make


def _never(fd: int) -> None:
    pytest.fail("a compile was started")


@pytest.mark.parametrize("case", list(CASES))
def test_python_until_compiled_then_compiled_plays_what_the_compiled_core_plays(case, fresh_code, monkeypatch):
    fresh_code("here")
    compiled = play(case, cases=CASES)
    code = fresh_code("background")
    compile_ends = Compiling(polls=60)
    monkeypatch.setattr(first_run, "compile_running", compile_ends)
    said, started = [], []
    code.start(say=said.append, launch=started.append)
    assert len(started) == 1 and code.compiling and code.kernel is not code.compiled["kernel"]
    assert len(said) == 1 and "numba is compiling" in said[0] and "WPB_GYM_COMPILE=here" in said[0]
    both = play(case, cases=CASES)
    assert compile_ends.asked == 60  # it ended during the play (which asks some 140 times)
    assert not code.compiling and code.kernel is code.compiled["kernel"] and len(said) == 1
    for step, (a, b) in enumerate(zip(both, compiled, strict=True)):
        same(a, b, f"step {step}")


def test_a_compile_that_did_not_finish_leaves_it_to_numba_here_and_says_so(fresh_code, monkeypatch):
    code = fresh_code("background")
    monkeypatch.setattr(first_run, "compile_running", Compiling(polls=1, succeeds=False))
    said = []
    code.start(say=said.append, launch=lambda fd: None)
    assert not code.compiling and code.kernel is code.compiled["kernel"]
    assert len(said) == 2 and "did not finish" in said[1] and "first-run.log" in said[1]
    code.start(say=said.append, launch=_never)  # once per process


def test_a_compile_another_process_runs_is_waited_for_by_forked_processes_too(fresh_code):
    code = fresh_code("background")
    lock = first_run.compiled_mark().with_name("first-run.lock")
    lock.parent.mkdir(parents=True)
    holder = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)  # as a running compile does
    said = []
    code.start(say=said.append, launch=_never)
    assert code.compiling and "another process is compiling" in said[0]

    def in_a_fork() -> int:
        pid = os.fork()
        if pid == 0:
            os._exit(3 if code.compiling else 4)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

    assert in_a_fork() == 3
    first_run.compiled_mark().write_text("done\n")
    os.close(holder)  # the compile ended
    assert in_a_fork() == 4
    assert not code.compiling and code.kernel is code.compiled["kernel"] and len(said) == 1


def test_nothing_starts_when_told_so(fresh_code):
    code = fresh_code("here")
    code.start(say=pytest.fail, launch=_never)
    assert not code.compiling and code.kernel is code.compiled["kernel"]


def test_nothing_starts_when_the_cache_has_this_pythons_and_numbas_mark(fresh_code):
    code = fresh_code("background")
    mark = first_run.compiled_mark()
    assert f"py{sys.version_info.major}{sys.version_info.minor}-numba" in mark.name
    mark.parent.mkdir(parents=True)
    mark.write_text("done\n")
    code.start(say=pytest.fail, launch=_never)
    assert not code.compiling and code.kernel is code.compiled["kernel"]


def test_a_vector_env_that_never_runs_the_core_starts_no_compile(fresh_code):
    code = fresh_code("background")
    env = gym.make_vec("WritePolicyBench-v0", num_envs=2, vectorization_mode="vector_entry_point", length=20,
                       observation_encoder=python_env().observation_encoder)  # a subclass: played in Python
    env.reset(seed=0)
    assert not code.compiling and not env.unwrapped.core.compiled.any()
    env.close()


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
    assert "compiling the env's compiled core in a background process" in done.stderr
    again = subprocess.run([sys.executable, "-c", _NEWCOMER], env=env, capture_output=True, text=True, timeout=900,
                           check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["in_python"] is False
    assert "background process" not in again.stderr
