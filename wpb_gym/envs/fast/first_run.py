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

One compile runs at a time per cache folder: it holds an exclusive lock on a file there for
as long as it runs, and every process (a forked one too) that finds the lock held waits for
its release on the Python path instead of starting another. The mark is named after the
Python and numba versions and the sources' folder, as numba's own cache entries are, so a
moved checkout or an upgraded numba compiles afresh, in the background too. The compile
outlives the script that started it if that ends first (it finishes filling the cache).

``WPB_GYM_COMPILE=here`` compiles in the process that needs the code instead, as numba does.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
from numba.core import config

try:  # POSIX: the lock that lets one compile run at a time
    import fcntl
except ImportError:  # pragma: no cover - elsewhere numba compiles in the process, as by default
    fcntl = None

from ...core.atomic_files import write_atomic
from .compile_cache import cache_folder
from .episode_workers import child_environment

# The modules whose functions the core calls (the core's entry points into compiled code).
ENTRY_MODULES = ("kernel", "drawn_batches", "episode_arrays", "paper_episodes", "contract_episodes")
VARIABLE = "WPB_GYM_COMPILE"
_HERE = Path(__file__).parent
_PYTHON_PACKAGE = __name__.rpartition(".")[0] + "_as_python"


def compiled_mark() -> Path:
    """The file a finished background compile writes in the cache folder of these sources, for
    this Python, this numba and this folder of sources."""
    where = hashlib.sha256(str(_HERE.resolve()).encode()).hexdigest()[:12]
    python = f"{sys.version_info.major}{sys.version_info.minor}"
    return cache_folder() / f"compiled-py{python}-numba{numba.__version__}-{where}"


def _lock_path() -> Path:
    return cache_folder() / "first-run.lock"


def compile_running(lock: Path) -> bool:
    """Whether a background compile holds ``lock`` now (any process may ask)."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the shared lock if it was taken
    return False


def python_modules() -> dict[str, Any]:
    """``ENTRY_MODULES`` imported again from the same files, under another package name, with
    numba's JIT off while they are defined: their functions are the sources run as Python."""
    # As under NUMBA_DISABLE_JIT (see ``core``): the parameter sets' hashes let 64-bit integers
    # wrap around on purpose, as the machine code does, which NumPy's scalars warn of.
    warnings.filterwarnings("ignore", "overflow encountered in scalar", RuntimeWarning,
                            re.escape(_PYTHON_PACKAGE) + r"\.")
    if _PYTHON_PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(_PYTHON_PACKAGE, _HERE / "__init__.py",
                                                      submodule_search_locations=[str(_HERE)])
        package = importlib.util.module_from_spec(spec)
        sys.modules[_PYTHON_PACKAGE] = package
        spec.loader.exec_module(package)
    before = config.DISABLE_JIT
    config.DISABLE_JIT = True  # read by njit as it decorates
    try:
        return {name: importlib.import_module(f"{_PYTHON_PACKAGE}.{name}") for name in ENTRY_MODULES}
    finally:
        config.DISABLE_JIT = before


def _launch(lock_fd: int) -> subprocess.Popen:
    """The background compile, handed the locked file (it holds the lock until it exits)."""
    with open(_log_path(), "wb") as errors:
        # Its own session: a Ctrl-C meant for the user's script does not stop it midway.
        return subprocess.Popen([sys.executable, "-P", "-m", __name__, str(lock_fd)], pass_fds=(lock_fd,),
                                env=child_environment(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=errors, start_new_session=True)


def _log_path() -> Path:
    return cache_folder() / "first-run.log"


def _say_on_stderr(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class CoreCode:
    """The entry modules the core calls now (``code.kernel``, ...): the compiled ones, or their
    Python twins while a background compile runs (see the module docstring)."""

    def __init__(self, compiled: dict[str, Any]) -> None:
        self.compiled = compiled  # the compiled entry modules, by name
        self._now = compiled
        self._lock: Path | None = None  # the compile's lock, while the twins are in use
        self._process: Any = None  # the compile this process started (reaped when it ends)
        self._owner = os.getpid()
        self._say: Callable[[str], None] = _say_on_stderr
        self._started = False

    @property
    def compiling(self) -> bool:
        """Whether a background compile is still running (the Python twins are in use)."""
        self._check()
        return self._lock is not None

    def start(self, say: Callable[[str], None] = _say_on_stderr,
              launch: Callable[[int], Any] = _launch) -> None:
        """As the first core of the process is made: unless the cache holds the mark (or numba's
        JIT is off, or ``WPB_GYM_COMPILE`` is ``here``), call the Python twins until the
        background compile ends, starting it unless another process runs one. ``say`` writes
        the notes; ``launch(fd)`` starts the compile, handing it the locked file ``fd``."""
        choice = os.environ.get(VARIABLE, "background")
        if choice not in ("background", "here"):
            raise ValueError(f"{VARIABLE}={choice!r}: expected 'background' (the default) or 'here'")
        if self._started:
            return
        self._started = True
        if config.DISABLE_JIT or choice == "here" or fcntl is None or compiled_mark().exists():
            return
        lock = _lock_path()
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return  # no cache folder to share: numba compiles here, as it does by default
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                who = "another process is compiling"
            else:
                try:
                    self._process = launch(fd)
                except OSError:
                    return  # no process to spare: numba compiles here
                who = "numba is compiling"
        finally:
            os.close(fd)  # the compile holds the lock through its own copy
        self._now, self._lock, self._say = python_modules(), lock, say
        say(f"wpb_gym: {who} the env's compiled core in a background process, as it does the first time it runs"
            f" with these sources (tens of seconds); until it is done the core runs the same code as Python, slower."
            f" It is cached in {cache_folder()} (NUMBA_CACHE_DIR sets where); {VARIABLE}=here compiles in this"
            f" process instead.")

    def _check(self) -> None:
        if self._lock is None or compile_running(self._lock):
            return
        if self._process is not None and os.getpid() == self._owner:
            self._process.poll()  # reaped
        self._lock, self._now = None, self.compiled
        if not compiled_mark().exists():
            self._say(f"wpb_gym: the background compile of the env's compiled core did not finish (its log:"
                      f" {_log_path()}); numba compiles what is missing here, as it does the first time.")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        self._check()
        try:
            return self._now[name]
        except KeyError:
            raise AttributeError(f"{name!r} is not one of the core's entry modules {ENTRY_MODULES}") from None


def compile_everything(lock_fd: int | None = None) -> None:
    """Play small vector envs until every sub-env has ended an episode and started the next, on
    the paths a first run takes (the default regime on both tracks, with dense rewards on the
    privileged one and with a utility reward, whose episodes start one by one, on the other; two
    contract regimes, one whose episodes are made and read and one played from its draws), and a
    single env's
    ``expose_item``, so numba compiles and caches their functions; then write the mark.
    ``lock_fd``: the lock file its starter took for it (None: take it here; if another compile
    holds it, there is nothing to do)."""
    import gymnasium as gym
    import numpy as np

    mark = compiled_mark()  # these sources', as numba's cache folder is fixed as the core is imported
    if lock_fd is None:
        _lock_path().parent.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(_lock_path(), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
    try:
        os.nice(10)  # the user's own work goes first
    except OSError:
        pass
    os.environ[VARIABLE] = "here"  # this process is the compile
    # The default regime's episodes started together (f1) and one by one (a reward that needs
    # U*(B) at the start, as limits do), the privileged track's, and a contract regime's made
    # and read, and played from its draws.
    settings = ({"length": 20}, {"length": 20, "reward": "utility"},
                {"length": 20, "track": "privileged", "dense_reward": True},
                {"regime": "contract_mix", "length": 80, "api_pool": 6},
                {"regime": "breaking", "length": 80, "api_pool": 6})
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
    single = gym.make("WritePolicyBench-v0", length=20, slots=1, budget_bytes=100_000).unwrapped
    single.reset(seed=0)
    while len(single.store) < 2:  # expose_item's compiled path needs an item no slot shows
        single.step(1)
    single.expose_item(next(t for t in single.store.timesteps() if t not in single.slot_timesteps))
    write_atomic(mark, "numba has compiled and cached the env's compiled core for these sources\n")


if __name__ == "__main__":
    compile_everything(int(sys.argv[1]) if len(sys.argv) > 1 else None)
