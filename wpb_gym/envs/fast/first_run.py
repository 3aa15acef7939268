"""The core's first run with an empty compile cache: numba compiles in a background process
while the core runs the same functions as Python.

Compiling the core takes tens of seconds, once per machine and version of these sources
(``compile_cache``). So that a newcomer's first ``make_vec`` does not wait for it, the first
core a process makes, when the cache lacks the mark a finished compile leaves, starts
``python -m wpb_gym.envs.fast.first_run``: it plays small vector envs (the default regime on
both tracks, a contract regime) until numba has compiled and cached every function they call,
then writes the mark. Until that process ends the core calls the same sources imported a
second time with numba's JIT off: the path ``NUMBA_DISABLE_JIT=1`` takes, tested output for
output against the compiled one. When it has ended the core calls the compiled functions, which
numba loads from its cache (a function it did not compile is compiled then, as without this).
The state the functions work on is the core's arrays, so the switch changes nothing else.

``WPB_GYM_COMPILE=here`` compiles in the process that needs the code instead, as numba does.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import numpy as np
from numba.core import config

from ...core.atomic_files import write_atomic
from .compile_cache import cache_folder
from .episode_workers import child_environment

# The modules whose functions the core calls (the core's entry points into compiled code).
ENTRY_MODULES = ("kernel", "contract_episodes", "drawn_batches", "episode_arrays", "numpy_streams",
                 "paper_episodes", "paper_text_episodes")
MARK = "compiled-by-first-run"
VARIABLE = "WPB_GYM_COMPILE"
_PACKAGE = __name__.rpartition(".")[0]
_PYTHON_PACKAGE = _PACKAGE + "_as_python"


def compiled_mark() -> Path:
    """The file a finished background compile writes in the cache folder of these sources."""
    return cache_folder() / MARK


class _WrappingAround:
    """A Python twin module whose functions run with NumPy's overflow warnings off: the hashes
    and PCG64 streams let 64-bit integers wrap around on purpose, as the machine code does."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._module, name)
        if not callable(found):
            return found

        def quietly(*args: Any, **kwargs: Any) -> Any:
            with np.errstate(over="ignore"):
                return found(*args, **kwargs)

        return quietly


def python_modules() -> dict[str, Any]:
    """``ENTRY_MODULES`` imported again from the same files, under another package name, with
    numba's JIT off while they are defined: their functions are the sources run as Python."""
    if _PYTHON_PACKAGE not in sys.modules:
        folder = Path(__file__).parent
        spec = importlib.util.spec_from_file_location(_PYTHON_PACKAGE, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        package = importlib.util.module_from_spec(spec)
        sys.modules[_PYTHON_PACKAGE] = package
        spec.loader.exec_module(package)
    before = config.DISABLE_JIT
    config.DISABLE_JIT = True  # read by njit as it decorates
    try:
        return {name: _WrappingAround(importlib.import_module(f"{_PYTHON_PACKAGE}.{name}")) for name in ENTRY_MODULES}
    finally:
        config.DISABLE_JIT = before


def _launch() -> subprocess.Popen:
    log = compiled_mark().with_name("first-run.log")  # what went wrong, should it fail
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as errors:
        # Its own session: a Ctrl-C meant for the user's script does not stop the compile midway.
        return subprocess.Popen([sys.executable, "-P", "-m", __name__], env=child_environment(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
                                start_new_session=True)


def _say_on_stderr(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class CoreCode:
    """The entry modules the core calls now (``code.kernel``, ...): the compiled ones, or their
    Python twins while a background process compiles (see the module docstring)."""

    def __init__(self, compiled: dict[str, Any]) -> None:
        self.compiled = compiled  # the compiled entry modules, by name
        self._now = compiled
        self._compiling: Any = None
        self._started = False

    @property
    def compiling(self) -> bool:
        """Whether the background compile is still running (the Python twins are in use)."""
        self._check()
        return self._compiling is not None

    def start(self, say: Callable[[str], None] = _say_on_stderr,
              launch: Callable[[], Any] | None = None) -> None:
        """As the first core of the process is made: start the background compile when the cache
        lacks its mark (and numba's JIT is on, and ``WPB_GYM_COMPILE`` is not ``here``), and
        call the Python twins until it ends. ``say`` writes the one note about it; ``launch``
        starts the compile and returns its process (``subprocess.Popen``'s ``poll``)."""
        choice = os.environ.get(VARIABLE, "background")
        if choice not in ("background", "here"):
            raise ValueError(f"{VARIABLE}={choice!r}: expected 'background' (the default) or 'here'")
        if self._started:
            return
        self._started = True
        if config.DISABLE_JIT or choice == "here" or compiled_mark().exists():
            return
        twins = python_modules()
        try:
            self._compiling = (launch or _launch)()
        except OSError:
            return  # no process to spare: numba compiles here, as it does by default
        self._now = twins
        say(f"wpb_gym: numba is compiling the vector env's core in a background process, as it does the first"
            f" time it runs with these sources (tens of seconds); until it is done the core runs the same code"
            f" as Python, slower. It is cached in {cache_folder()} (NUMBA_CACHE_DIR sets where);"
            f" {VARIABLE}=here compiles in this process instead.")

    def _check(self) -> None:
        if self._compiling is not None and self._compiling.poll() is not None:
            # Ended, well or not: a function it did not cache compiles here when first called.
            self._compiling = None
            self._now = self.compiled

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        self._check()
        try:
            return self._now[name]
        except KeyError:
            raise AttributeError(f"{name!r} is not one of the core's entry modules {ENTRY_MODULES}") from None


def compile_everything() -> None:
    """Play small vector envs until every sub-env has ended an episode and started the next, on
    the paths a first run takes (the default regime on both tracks, with dense rewards on the
    privileged one; a contract regime), so numba compiles and caches their functions; then
    write the mark."""
    import gymnasium as gym

    os.environ[VARIABLE] = "here"  # this process is the compile
    settings = ({"length": 20}, {"length": 20, "track": "privileged", "dense_reward": True},
                {"regime": "contract_mix", "length": 80, "api_pool": 6})
    for kwargs in settings:
        env = gym.make_vec("WritePolicyBench-v0", num_envs=2, vectorization_mode="vector_entry_point", **kwargs)
        _, info = env.reset(seed=0)
        rng, ended = np.random.default_rng(0), np.zeros(2, dtype=bool)
        for _ in range(10_000):
            actions = np.array([rng.choice(np.flatnonzero(mask)) for mask in info["action_mask"]])
            _, _, terminated, truncated, info = env.step(actions)
            if ended.all():
                break  # this step started the next episodes
            ended |= terminated | truncated
        env.close()
    write_atomic(compiled_mark(), "numba has compiled and cached the vector env's core for these sources\n")


if __name__ == "__main__":
    compile_everything()
