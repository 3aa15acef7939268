"""Made episodes prepared ahead in worker processes: a sub-env's reset finds its arrays ready.

The core compiles a paper-regime episode from its draws in microseconds, but an episode it
has to make (the contract change model's) is made, read and compiled when its sub-env resets:
about as long as a single env's reset, while the other sub-envs wait. With
``episode_workers=k`` the core tells ``k`` worker processes, as soon as such a sub-env starts
an episode, which episode its next autoreset will choose (``EpisodeSampler.peek``), and they
make, read and compile it on other cores. At the reset a prepared episode is taken only if
it is the one chosen (same recipe, same budget) and has arrived; anything else (a seeded
reset, options, a worker still busy with it, a worker that failed) is prepared by the core
itself, as without workers. Both run ``episode_arrays.read_and_compile``, so a prepared
episode's arrays are the core's own but for the ids, which the kernel compares within an
episode only (each worker numbers with its own ``ContentMemo``).

A worker is a fresh interpreter (``python -m wpb_gym.envs.fast.episode_workers``) talking
pickles over two pipes: it does not import the user's ``__main__`` (as ``spawn`` would) nor
inherit locks held by other threads (as ``fork`` would: torch starts threads). It is started
at the first episode there is to prepare, and stops when the vector env closes, is collected,
or its process ends (the pipes close). POSIX systems only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
import weakref
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .compile_cache import keyed_on_these_sources

# Jobs sent to a worker and not answered yet: enough that it never waits for the next one,
# few enough that the pipe towards it never fills (a send would then block this process).
_IN_FLIGHT = 2
# Prepared episodes waiting for their sub-env's reset, at most this many bytes of arrays: no new
# job is sent beyond (at T = 10,000 a prepared episode holds about 1.2 MB, 256 of them 300 MB).
_MAX_HELD = 128 * 2**20


class EpisodeWorkers:
    """``count`` worker processes preparing the next episode of sub-envs (see the module docstring)."""

    def __init__(self, count: int, track: str, reward_fn: Any) -> None:
        self.count = count
        self.track = track
        self.reward_fn = reward_fn.fresh()  # its settings; each job starts a fresh copy
        self.asked = self.served = 0  # episodes ``take`` was asked for, and those it had ready
        self._reset_state()

    def _reset_state(self) -> None:
        self._workers: list[tuple[subprocess.Popen, Connection, Connection]] = []
        self._busy: list[int] = []  # jobs in flight per worker
        self._queue: dict[int, tuple[Any, int]] = {}  # jobs not sent yet: job -> (recipe, budget)
        self._wanted: dict[int, tuple[int, Any, int]] = {}  # sub-env -> (job, recipe, budget)
        self._ready: dict[int, tuple[Any, ...] | None] = {}  # job -> its result (None: the worker failed)
        self._held = 0  # bytes of the arrays in _ready
        self._next_job = 0
        self._failed = False
        self._finalizer: weakref.finalize | None = None

    def __getstate__(self) -> dict[str, Any]:
        # A copy starts its own workers when it needs them.
        return {"count": self.count, "track": self.track, "reward_fn": self.reward_fn, "asked": 0, "served": 0}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_state()

    def want(self, i: int, recipe: Any, budget: int) -> None:
        """Sub-env ``i``'s next episode will likely be ``recipe`` at ``budget``: prepare it."""
        if self._failed:
            return
        if i in self._wanted:  # a wish never taken (its sub-env was handed over, say)
            self._queue.pop(self._wanted[i][0], None)
            self._drop(self._wanted[i][0])
        job = self._next_job
        self._next_job += 1
        self._wanted[i] = (job, recipe, budget)
        self._queue[job] = (recipe, budget)
        self.pump()

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
        result = self._ready.pop(job, None)
        self._held -= _size(result)
        return result

    def settle(self, timeout: float = 120.0) -> None:
        """Wait until every wish is prepared, or as many as may be held (tests and benchmarks;
        the vector env never waits)."""
        deadline = time.monotonic() + timeout
        self.pump()
        while any(self._busy) or (self._queue and self._held < _MAX_HELD):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the episode workers did not finish within {timeout} s")
            time.sleep(0.001)
            self.pump()

    def pump(self) -> None:
        """Receive what the workers finished and send them more, without waiting."""
        if self._failed or not (self._queue or any(self._busy)):
            return
        if not self._workers:
            try:
                self._start()
            except (OSError, EOFError) as error:
                self._fail(f"an episode worker could not start ({error!r})")
                return
        try:
            live = None
            for w, (_, receive, _) in enumerate(self._workers):
                while self._busy[w] and receive.poll():
                    job, result = receive.recv()
                    self._busy[w] -= 1
                    live = {job for job, _, _ in self._wanted.values()} if live is None else live
                    if job in live:  # else its sub-env reset before it arrived
                        self._ready[job] = result
                        self._held += _size(result)
            # Newest first (a dict pops its last item): when the workers cannot keep up, the
            # oldest wishes are the sub-envs that reset soonest, which a worker would serve too late.
            while self._queue and self._held < _MAX_HELD:
                w = min(range(len(self._workers)), key=self._busy.__getitem__)
                if self._busy[w] >= _IN_FLIGHT:
                    break
                job, (recipe, budget) = self._queue.popitem()
                self._workers[w][2].send((job, recipe, budget))
                self._busy[w] += 1
        except (OSError, EOFError) as error:  # a worker died: the core prepares every episode itself
            self._fail(f"an episode worker stopped ({error!r})")

    def _start(self) -> None:
        package_root = str(Path(__file__).resolve().parents[3])
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, environment.get("PYTHONPATH")]))
        self._finalizer = weakref.finalize(self, _stop, self._workers)  # those started, should the next fail
        for _ in range(self.count):
            jobs_read, jobs_write = os.pipe()
            results_read, results_write = os.pipe()
            try:
                process = subprocess.Popen(
                    [sys.executable, "-m", __name__, str(jobs_read), str(results_write)],
                    pass_fds=(jobs_read, results_write), env=environment, stdin=subprocess.DEVNULL,
                )
            except BaseException:
                os.close(jobs_write)
                os.close(results_read)
                raise
            finally:  # the worker's ends
                os.close(jobs_read)
                os.close(results_write)
            send = Connection(jobs_write, readable=False)
            send.send((self.track, self.reward_fn))
            self._workers.append((process, Connection(results_read, writable=False), send))
            self._busy.append(0)

    def _fail(self, message: str) -> None:
        warnings.warn(f"{message}; the vector env prepares its episodes itself from now on", RuntimeWarning,
                      stacklevel=3)
        self.close()
        self._failed = True

    def close(self) -> None:
        """Stop the workers (they are started again if an episode is wanted after)."""
        if self._finalizer is not None:
            self._finalizer()
        self._reset_state()

    @property
    def processes(self) -> list[subprocess.Popen]:
        return [process for process, _, _ in self._workers]


def _size(result: tuple[Any, ...] | None) -> int:
    return 0 if result is None else result[0].nbytes + result[1].nbytes


def _stop(workers: list[tuple[subprocess.Popen, Connection, Connection]]) -> None:
    for process, receive, send in workers:
        for connection in (send, receive):  # the worker reads end-of-file and exits
            try:
                connection.close()
            except OSError:
                pass
    for process, _, _ in workers:  # nothing a worker holds is worth waiting for (a long episode takes seconds)
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def serve(jobs: Connection, results: Connection) -> None:
    """A worker's loop: read the settings, then prepare each job until the pipe closes."""
    with keyed_on_these_sources():  # the compiled code the core's process cached
        from .contents import ContentMemo
        from .episode_arrays import read_and_compile, scored_labels
    track, reward_fn = jobs.recv()
    memo = ContentMemo()
    while True:
        try:
            job, recipe, budget = jobs.recv()
        except EOFError:
            return
        try:
            episode = recipe.make()
            fresh = reward_fn.fresh()
            arrays = read_and_compile(episode, track, memo, fresh, budget, recipe)
            result = None if arrays is None else (arrays[0], arrays[1], len(arrays[2]), scored_labels(episode), fresh)
        except Exception:  # the core prepares it again and meets the error itself
            result = None
        try:
            results.send((job, result))
        except (BrokenPipeError, EOFError):
            return


if __name__ == "__main__":
    # Ctrl-C reaches the whole process group: the vector env's process handles it, and the
    # worker ends when that process closes the pipes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
