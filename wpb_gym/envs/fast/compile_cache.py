"""Where numba caches the compiled core, and the note it prints while it compiles. numba keys a
cached function on its own file only, and a caller's machine code holds its callees', so the
cache lives in a folder named after the digest of all of this package's sources and of the
modules compiled in from elsewhere: an edit to any of them compiles everything afresh.
The first run on a machine compiles (tens of seconds); later processes load (about 1 s).
``CompileNotice`` says so on stderr, once, when a compilation runs past a second."""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from numba import njit
from numba.core import config, event

from ...episodes.generators import contract_structure, paper_structure

_HERE = Path(__file__).parent
_GENERATORS = _HERE.parent.parent / "episodes" / "generators"
# The modules outside this package whose functions the core compiles (the notice names them too).
COMPILED_FROM_ELSEWHERE = (paper_structure.__name__, contract_structure.__name__)
# Compiled in from elsewhere: layout.py's feature positions and kind codes, and the generators'
# rules (paper_structure.py, contract_structure.py) with the utilities they take as constants.
COMPILED_SOURCES = (_HERE.parent / "observation" / "features.py", _HERE.parent / "observation" / "stream_table.py",
                  Path(paper_structure.__file__), Path(contract_structure.__file__), _GENERATORS / "utility_scale.py")


@functools.cache
def _sources_digest() -> str:
    digest = hashlib.sha256()
    for path in [*sorted(_HERE.glob("*.py")), *COMPILED_SOURCES]:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def cache_folder() -> Path:
    """The folder of this package's compiled code for its present sources: under
    ``NUMBA_CACHE_DIR`` if set, else beside these sources (``~/.cache/wpb_gym`` where that is
    read-only)."""
    base = Path(config.CACHE_DIR) if config.CACHE_DIR else _HERE / "__pycache__"
    if not os.access(base if base.exists() else base.parent, os.W_OK):
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "wpb_gym"
    return base / f"numba-{_sources_digest()}"


def cached(**options: Any) -> Callable[[Callable], Callable]:
    """numba's ``njit(**options)``, cached in ``cache_folder()``.

    numba binds a function's cache folder as it decorates it, and its default folder is keyed on
    the function's own file alone, though its machine code holds its callees' from other files.
    Binding the folder here, in the decorator, keys every compiled function of the core on all
    its sources whichever module imports it first (a module imported on its own once cached
    code beside the sources that outlived an edit of a callee)."""
    def decorate(function: Callable) -> Callable:
        dispatcher = njit(**options)(function)
        if not hasattr(dispatcher, "enable_caching"):  # NUMBA_DISABLE_JIT: the function itself
            return dispatcher
        before = config.CACHE_DIR
        config.CACHE_DIR = str(cache_folder())
        try:
            dispatcher.enable_caching()
        finally:
            config.CACHE_DIR = before
        return dispatcher
    return decorate


def _say_on_stderr(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class CompileNotice(event.Listener):
    """A numba listener that writes, once per process, what is compiling when a compilation of
    a function of ``package`` or of the modules ``also`` (its callees' included) has run
    ``after`` seconds, and that it is cached in ``folder``.

    numba broadcasts ``numba:compile`` only when it compiles, not when it loads a function from
    its cache, so a warm cache says nothing. The note is due either at a nested compilation's
    start or, for a function whose own optimisation runs long without nested events, when a
    timer (``timer(seconds, callback)``, started with the outermost compilation) fires.
    """

    def __init__(self, package: str, folder: Path, after: float = 1.0, write: Callable[[str], None] = _say_on_stderr,
                 clock: Callable[[], float] = time.monotonic,
                 timer: Callable[[float, Callable[[], None]], Any] | None = None, also: tuple[str, ...] = ()) -> None:
        self.package, self.folder, self.after, self.clock = package, folder, after, clock
        self.also = also
        self._write = write
        self._timer_factory = timer or self._thread_timer
        self._lock = threading.Lock()  # numba compiles in whichever thread calls; the timer is another
        self._depth = 0
        self._began: float | None = None
        self._first = ""
        self._timer: Any = None
        self.said = False

    @staticmethod
    def _thread_timer(seconds: float, callback: Callable[[], None]) -> threading.Timer:
        timer = threading.Timer(seconds, callback)
        timer.daemon = True  # never keeps the process alive
        timer.start()
        return timer

    def _ours(self, ev: event.Event) -> str | None:
        function = getattr(ev.data.get("dispatcher"), "py_func", None)
        module = getattr(function, "__module__", "") or ""
        if module != self.package and not module.startswith(self.package + ".") and module not in self.also:
            return None
        return f"{module.rpartition('.')[2]}.{function.__qualname__}"

    def on_start(self, ev: event.Event) -> None:
        name = self._ours(ev)
        if name is None:
            return
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                self._began, self._first = self.clock(), name
                if not self.said:
                    self._timer = self._timer_factory(self.after, self._timer_fired)
        self._say_if_due()

    def on_end(self, ev: event.Event) -> None:
        if self._ours(ev) is None:
            return
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self._began = None
                timer, self._timer = self._timer, None
                if timer is not None:
                    timer.cancel()

    def _timer_fired(self) -> None:
        self._say_if_due(now=True)

    def _say_if_due(self, now: bool = False) -> None:
        with self._lock:
            if self.said or self._began is None or (not now and self.clock() - self._began < self.after):
                return
            self.said = True
            first = self._first
        self._write(f"wpb_gym: numba is compiling the env's compiled core ({first} first), as it does the first"
                    f" time it runs with these sources: tens of seconds."
                    f" It is cached in {self.folder} (NUMBA_CACHE_DIR sets where) and loads in about a second"
                    f" afterwards.")


_notice: CompileNotice | None = None


def say_when_compiling(package: str) -> None:
    """Register the process's ``CompileNotice`` for ``package`` (once)."""
    global _notice
    if _notice is None:
        _notice = CompileNotice(package, cache_folder(), also=COMPILED_FROM_ELSEWHERE)
        event.register("numba:compile", _notice)
