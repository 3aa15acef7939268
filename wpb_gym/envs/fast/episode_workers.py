"""Made episodes prepared ahead in worker processes: a sub-env's reset finds its arrays ready.

The core compiles the episodes of the paper regimes and of the contract regimes without text
from their draws, but an episode it has to make (one with documentation sections, guides or
renames, one under compression, one past the compiled bounds) is made, read and compiled when
its sub-env resets: about as long as a single env's reset, while the other sub-envs wait.
With ``episode_workers=k`` the core tells ``k`` worker processes, as soon as such a sub-env
starts an episode, which episode its next autoreset will choose
(``EpisodeSampler.peek``), and they make, read and compile it on other cores. At the reset a
prepared episode is taken only if it is the one chosen (same recipe, same budget) and has
arrived; anything else (a seeded reset, options, a worker still busy with it, a worker that
failed) is prepared by the core itself, as without workers. Both run ``episode_arrays.read_and_compile``, so a prepared
episode's arrays are the core's own but for the ids, which the kernel compares within an
episode only (each worker numbers with its own ``ContentMemo``).

A worker is a fresh interpreter (``python -P -m wpb_gym.envs.fast.episode_workers``) talking
pickles over two pipes: it does not import the user's ``__main__`` (as ``spawn`` would) nor
inherit locks held by other threads (as ``fork`` would: torch starts threads), and it imports
this very package (``-P``: not one in the working directory), which its first message
confirms. It is started with a vector env whose episodes it would prepare (its interpreter
loads while the first episodes play), else at the first wish (a pickled copy), and stops when
the vector env closes, is collected, or its process ends (the pipes close). A worker that fails (it
cannot start, dies, or is interrupted while this process talks to it) is dropped with the others,
and the core prepares every episode itself from then on; ``report`` warns why, once. POSIX
systems only.
"""

from __future__ import annotations

import os
import pickle
import signal
import site
import struct
import subprocess
import sys
import time
import warnings
import weakref
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any


# Jobs sent to a worker and not answered yet: enough that it has the next one when it finishes
# one, few enough that the pipe towards it never fills (a send would then block this process)
# and that the newest wishes go first (see ``pump``).
_IN_FLIGHT = 2
# No new job is sent while the prepared episodes waiting for their sub-env's reset hold more
# than this, counted by their pickled size (at T = 10,000 about 1.3 MB each; in memory their
# Python lists take a little more).
_MAX_HELD = 128 * 2**20
_PACKAGE = Path(__file__).resolve().parents[2]  # this wpb_gym, as the handshake names it
# The package's folder as its modules' frames name it (not resolved: a symlinked home stays one).
_FRAMES_INSIDE = str(Path(__file__).parents[2]) + os.sep
_START_TIMEOUT = 120.0  # seconds a worker may take to name its package
_HEADER = struct.Struct("<Q")  # a result's length, before its pickle


class _Worker:
    """A worker process, the pipe its jobs go down and the one its results come up, read
    without blocking: a result arrives in pieces (a long episode's is megabytes, more than a
    pipe holds), and a worker stopped mid-result (a debugger, a frozen cgroup) must not stop
    the vector env."""

    __slots__ = ("process", "results", "send", "busy", "confirmed", "pending", "started")

    def __init__(self, process: subprocess.Popen, results: int, send: Connection) -> None:
        self.process, self.results, self.send = process, results, send
        os.set_blocking(results, False)
        self.busy = 0  # jobs in flight
        self.confirmed = False  # its first message named this package
        self.started = time.monotonic()
        self.pending = bytearray()  # bytes read of results not complete yet

    def messages(self) -> list[bytes]:
        """The results that have arrived in full since the last call (EOFError: the worker is gone)."""
        while True:
            try:
                chunk = os.read(self.results, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                raise EOFError("the worker's pipe closed")
            self.pending += chunk
        complete = []
        while len(self.pending) >= _HEADER.size:
            size = _HEADER.unpack_from(self.pending)[0]
            if len(self.pending) < _HEADER.size + size:
                break
            complete.append(bytes(self.pending[_HEADER.size:_HEADER.size + size]))
            del self.pending[:_HEADER.size + size]
        return complete

    def close(self) -> None:
        """Close both pipes: the worker reads end-of-file and exits."""
        self.send.close()
        if self.results >= 0:
            os.close(self.results)
            self.results = -1


class EpisodeWorkers:
    """``count`` worker processes preparing the next episode of sub-envs (see the module docstring)."""

    def __init__(self, count: int, track: str, reward_fn: Any, limits: Any = None) -> None:
        self.count = count
        self.track = track
        self.reward_fn = reward_fn.fresh()  # its settings; each job starts a fresh copy
        self.limits = limits  # the env's ``StoreLimits`` (None: none), which U*(B) respects
        self.asked = self.served = 0  # episodes ``take`` was asked for, and those it had ready
        self.failure: str | None = None  # why the workers were dropped, until ``report`` says it
        self._failed = self._closed = False  # either: no worker is started again
        self._reset_state()

    def _reset_state(self) -> None:
        self._workers: list[_Worker] = []
        self._queue: dict[int, tuple[Any, int]] = {}  # jobs not sent yet: job -> (recipe, budget)
        self._wanted: dict[int, tuple[int, Any, int]] = {}  # sub-env -> (job, recipe, budget)
        self._ready: dict[int, tuple[tuple[Any, ...] | None, int]] = {}  # job -> (result or None, pickled size)
        self._held = 0  # pickled bytes of the results in _ready
        self._next_job = 0
        self._finalizer: weakref.finalize | None = None
        self._owner = os.getpid()  # the process that started the workers

    def __getstate__(self) -> dict[str, Any]:
        # A copy starts its own workers when it needs them.
        return {"count": self.count, "track": self.track, "reward_fn": self.reward_fn, "limits": self.limits}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.asked = self.served = 0
        self.failure, self._failed, self._closed = None, False, False
        self._reset_state()

    @property
    def processes(self) -> list[subprocess.Popen]:
        return [worker.process for worker in self._workers]

    def want(self, i: int, recipe: Any, budget: int) -> None:
        """Sub-env ``i``'s next episode will likely be ``recipe`` at ``budget``: prepare it."""
        if self._failed or self._closed:
            return
        self.forget(i)
        job = self._next_job
        self._next_job += 1
        self._wanted[i] = (job, recipe, budget)
        self._queue[job] = (recipe, budget)
        self.pump()

    def forget(self, i: int) -> None:
        """Drop sub-env ``i``'s wish (its single env started an episode of its own, or it wishes again)."""
        wanted = self._wanted.pop(i, None)
        if wanted is not None:
            self._queue.pop(wanted[0], None)
            self._drop(wanted[0])

    def take(self, i: int, recipe: Any, budget: int) -> tuple[Any, ...] | None:
        """Sub-env ``i``'s prepared ``(static, floats, state size, labels, reward function)`` if
        its chosen episode is ``recipe`` at ``budget`` and has arrived, else None (the caller
        prepares it); the sub-env's wish is spent either way."""
        self.asked += 1
        if i not in self._wanted:
            return None
        self.pump()  # before the wish is spent: a result arriving now is kept
        wanted = self._wanted.pop(i, None)
        if wanted is None:  # the workers failed
            return None
        job, wanted_recipe, wanted_budget = wanted
        self._queue.pop(job, None)
        result = self._drop(job)
        if result is None or wanted_budget != budget or wanted_recipe != recipe:
            return None
        self.served += 1
        return result

    def _drop(self, job: int) -> tuple[Any, ...] | None:
        result, size = self._ready.pop(job, (None, 0))
        self._held -= size
        return result

    def report(self) -> None:
        """Say why the workers were dropped (a ``RuntimeWarning`` naming the first caller outside
        ``wpb_gym``), once."""
        if self.failure is not None:
            failure, self.failure = self.failure, None
            frame, level = sys._getframe(1), 2  # level 1 is this function, 2 its caller
            while frame.f_back is not None and frame.f_code.co_filename.startswith(_FRAMES_INSIDE):
                frame, level = frame.f_back, level + 1
            warnings.warn(failure, RuntimeWarning, stacklevel=level)

    def settle(self, timeout: float = 120.0) -> None:
        """Wait until every wish is prepared, or as many as may be held (tests and benchmarks;
        the vector env never waits)."""
        deadline = time.monotonic() + timeout
        self.pump()
        while any(worker.busy for worker in self._workers) or (self._queue and self._held < _MAX_HELD):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the episode workers did not finish within {timeout} s")
            time.sleep(0.001)
            self.pump()

    def start(self) -> None:
        """Start the workers before any wish: their interpreters load while the first episodes
        are chosen and played (about a second)."""
        if self._workers or self._failed or self._closed:
            return
        try:
            self._start()
        except Exception as error:
            self._fail(f"an episode worker could not start ({error!r})")

    def pump(self) -> None:
        """Receive what the workers finished and send them more, without waiting. Never raises
        but for an interrupt: a failure drops the workers (``failure``)."""
        if self._failed or not (self._queue or self._workers):
            return
        if self._workers and os.getpid() != self._owner:  # a forked child: the workers are its parent's
            self._disown()
            return
        what = "stopped"
        try:
            if not self._workers:
                what = "could not start"
                self._start()
                what = "stopped"
            self._exchange()
        except Exception as error:
            self._fail(f"an episode worker {what} ({error!r})")
        except BaseException:  # an interrupt, perhaps mid-message: the pipes can no longer be read
            self._fail("an episode worker was interrupted")
            raise

    def _exchange(self) -> None:
        live = None
        for worker in self._workers:
            if not worker.confirmed and time.monotonic() - worker.started > _START_TIMEOUT:
                raise TimeoutError(f"it did not start within {_START_TIMEOUT:g} s")
            for data in worker.messages():
                message = pickle.loads(data)
                if not worker.confirmed:
                    if message != ("package", str(_PACKAGE)):
                        raise RuntimeError(f"it imports another wpb_gym ({message!r}; this process: {_PACKAGE})")
                    worker.confirmed = True
                    continue
                job, result = message
                worker.busy -= 1
                live = {job for job, _, _ in self._wanted.values()} if live is None else live
                if job in live:  # else its sub-env reset before it arrived
                    self._ready[job] = (result, len(data))
                    self._held += len(data)
        # Newest first (a dict pops its last item): when the workers cannot keep up, the
        # oldest wishes are the sub-envs that reset soonest, which a worker would serve too late.
        while self._queue and self._held < _MAX_HELD:
            worker = min(self._workers, key=lambda w: w.busy)
            if worker.busy >= _IN_FLIGHT:
                break
            job, (recipe, budget) = self._queue.popitem()
            worker.send.send((job, recipe, budget))
            worker.busy += 1

    def _start(self) -> None:
        environment = child_environment()
        # Stops the workers started so far, should a later one fail; not in a forked child.
        self._owner = os.getpid()
        self._finalizer = weakref.finalize(self, _stop, self._workers, self._owner)
        for _ in range(self.count):
            jobs_read, jobs_write = os.pipe()
            results_read, results_write = os.pipe()
            try:
                process = subprocess.Popen(
                    [sys.executable, "-P", "-m", __name__, str(jobs_read), str(results_write)],
                    pass_fds=(jobs_read, results_write), env=environment, stdin=subprocess.DEVNULL,
                )
            except BaseException:
                os.close(jobs_write)
                os.close(results_read)
                raise
            finally:  # the worker's ends
                os.close(jobs_read)
                os.close(results_write)
            worker = _Worker(process, results_read, Connection(jobs_write, readable=False))
            self._workers.append(worker)
            worker.send.send((self.track, self.reward_fn, self.limits))

    def _fail(self, message: str) -> None:
        self._stop_workers()
        self._failed = True
        self.failure = f"{message}; the vector env prepares its episodes itself from now on"

    def close(self) -> None:
        """Stop the workers for good (a pickled copy starts its own)."""
        self._stop_workers()
        self._closed = True

    def _stop_workers(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._reset_state()

    def _disown(self) -> None:
        """In a forked child: drop the parent's workers without stopping them (the child starts its own)."""
        if self._finalizer is not None:
            self._finalizer.detach()
        for worker in self._workers:
            worker.close()  # this process's copies of the pipes
        self._reset_state()


def _stop(workers: list[_Worker], owner: int) -> None:
    if os.getpid() != owner:  # a forked child's copy: the workers are its parent's
        return
    for worker in workers:
        worker.close()
    for worker in workers:
        # Nothing a worker holds is worth waiting for (a long episode takes seconds), and a
        # stopped one would keep a SIGTERM pending: SIGKILL. A process that does not go at once
        # (a frozen cgroup) is reaped by subprocess later.
        worker.process.kill()
        try:
            worker.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass


def child_environment() -> dict[str, str]:
    """The environment of a ``python -P -m`` child that must import this wpb_gym: a checkout's
    folder goes on its path (``-P`` leaves the working folder off it)."""
    environment = dict(os.environ)
    if not _in_site_packages(_PACKAGE.parent):
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_PACKAGE.parent), environment.get("PYTHONPATH")]))
    return environment


def _in_site_packages(folder: Path) -> bool:
    """Whether ``folder`` is one of this interpreter's site-packages (a worker finds an installed
    package there by itself: put first, it would shadow the standard library)."""
    sites = [*getattr(site, "getsitepackages", list)(), site.getusersitepackages()]
    return any(folder == Path(place).resolve() for place in sites)


def _write(results: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(results, view):]


def serve(jobs: Connection, results: int) -> None:
    """A worker's loop: name its package, read the settings, then prepare each job until the
    pipe closes."""
    from .contents import ContentMemo
    from .contract_episodes import make
    from .episode_arrays import read_and_compile, scored_labels
    _write(results, ("package", str(_PACKAGE)))
    track, reward_fn, limits = jobs.recv()
    memo = ContentMemo()
    while True:
        try:
            job, recipe, budget = jobs.recv()
        except EOFError:
            return
        try:
            episode = make(recipe)
            fresh = reward_fn.fresh()
            arrays = read_and_compile(episode, track, memo, fresh, budget, recipe, limits)
            result = None if arrays is None else (arrays[0], arrays[1], len(arrays[2]), scored_labels(episode), fresh)
        except Exception:  # the core prepares it again and meets the error itself
            result = None
        try:
            _write(results, (job, result))
        except BrokenPipeError:
            return


if __name__ == "__main__":
    # Ctrl-C reaches the whole process group: the vector env's process handles it, and the
    # worker ends when that process closes the pipes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(Connection(int(sys.argv[1]), writable=False), int(sys.argv[2]))
