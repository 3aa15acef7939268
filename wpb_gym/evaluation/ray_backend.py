"""The evaluation grid's tasks as Ray tasks: the same tasks as ``--jobs``, on this machine or a cluster.

``pip install 'writepolicybench-gym[scale]'``. Without an address, a local Ray is started with
``jobs`` CPUs for the grid and shut down after it; with ``address`` (``"auto"`` or
``"ray://HOST:10001"``) the grid runs on that cluster, whose workers must have this package
installed (a Ray ``runtime_env`` can install it), on as many of its CPUs as Ray schedules
(``jobs`` plays no part there: ``wpb eval`` refuses ``--jobs`` with ``--address``; the tasks
are sized to the cluster's CPUs). Results arrive in task order, so progress,
checkpoints and the rows are those of the process pool: ``tests/evaluation/test_ray_backend.py``
compares them.

Ray is driven from a child process (a fresh interpreter) that ends with the grid. A process
that has started and stopped Ray twice forks children that crash in Ray's native code when
they free what they inherited, and a fork of a process that once ran Ray hangs in
``ray.init`` (both seen with Ray 2.60), so this process never starts Ray itself. A Ray the
caller already initialised in this process is used in it, as it is.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import pickle
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .child_processes import end_with_parent

BACKENDS = ("processes", "ray")


class RayBackendError(RuntimeError):
    """The grid failed in the Ray driver process (Ray could not start or connect, or a task
    failed); ``str()`` is the exception's last line, ``details`` the whole traceback."""

    def __init__(self, details: str) -> None:
        lines = [line for line in details.strip().splitlines() if line.strip()]
        super().__init__(lines[-1] if lines else "the Ray driver failed")
        self.details = details
_END = "end"
_ERROR = "error"
# Where Ray 2.5x logs, at every start of a new local Ray, that it turned token authentication on.
_AUTH_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"


def init_ray(ray: Any, address: str | None, **kwargs: Any) -> None:
    """``ray.init``: a new local Ray (``address`` None) or the cluster at ``address``.

    A new local Ray turns token authentication on and says so on stderr at every start; the
    notice is held back (authentication stays on: ``RAY_AUTH_MODE=disabled`` would leave the
    local cluster's ports open to anyone who can reach this machine). For a cluster at
    ``address`` Ray's messages about its authentication are shown, as they are the user's."""
    if address is not None:
        ray.init(address=address, **kwargs)
        return
    notice = logging.getLogger(_AUTH_NOTICE_LOGGER)
    level = notice.level
    notice.setLevel(logging.ERROR)
    try:
        ray.init(**kwargs)
    finally:
        notice.setLevel(level)


def ray_map(function: Callable[[Any], Any], items: Sequence[Any], *, jobs: int,
            address: str | None = None) -> Iterator[Any]:
    """``map(function, items)`` as Ray tasks of a few items each, yielded in order."""
    if importlib.util.find_spec("ray") is None:
        raise ImportError("the ray backend needs Ray: pip install 'writepolicybench-gym[scale]'")
    ray = sys.modules.get("ray")  # imported only where it is used: the driver process
    if ray is not None and ray.is_initialized():
        yield from _ordered(ray, function, items, jobs)
        return
    # A fresh interpreter (not a fork: a fork of a process that once ran Ray hangs in ray.init),
    # started as a module so that no caller's script is imported again; it sees this process's
    # import path.
    read_end, write_end = os.pipe()
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    driver = subprocess.Popen(
        [sys.executable, "-m", __name__, str(write_end), str(os.getpid())],  # (this process's id, read now)
        stdin=subprocess.PIPE,
        pass_fds=(write_end,),
        env=environment,
    )
    os.close(write_end)
    results = os.fdopen(read_end, "rb")
    try:
        assert driver.stdin is not None
        pickle.dump((function, items, jobs, address), driver.stdin)
        driver.stdin.close()
        while True:
            try:
                kind, payload = pickle.load(results)
            except EOFError:
                raise RuntimeError(
                    f"the Ray driver process ended without its results (exit code {driver.wait()})"
                ) from None
            if kind == _END:
                break
            if kind == _ERROR:
                raise RayBackendError(payload)
            yield from payload
    finally:
        results.close()
        try:
            driver.wait(timeout=30)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait()


def _drive(fd: int, parent: int) -> None:
    """In the driver process: read the work from stdin, start Ray (or attach to the address),
    send each chunk's results in order to ``fd``, stop Ray; end with ``parent``, the process
    that started this one."""
    end_with_parent(parent)
    out = os.fdopen(fd, "wb")
    try:
        function, items, jobs, address = pickle.load(sys.stdin.buffer)
        import ray

        if address is None:
            init_ray(ray, None, num_cpus=jobs, include_dashboard=False, log_to_driver=False, configure_logging=False)
        else:
            init_ray(ray, address, log_to_driver=False, configure_logging=False)
            jobs = max(1, int(ray.cluster_resources().get("CPU", 1)))  # the tasks sized to the cluster
        try:
            for chunk in _chunks(ray, function, items, jobs):
                _send(out, ("chunk", chunk))
        finally:
            ray.shutdown()
        _send(out, (_END, None))
    except BrokenPipeError:  # the caller stopped reading (it failed, or was interrupted)
        pass
    except BaseException:  # noqa: BLE001 - reported to the caller, whatever it was
        with contextlib.suppress(BrokenPipeError):
            _send(out, (_ERROR, traceback.format_exc()))
    finally:
        with contextlib.suppress(BrokenPipeError):
            out.close()


def _send(out: Any, message: tuple[str, Any]) -> None:
    pickle.dump(message, out)
    out.flush()


def _chunks(ray: Any, function: Callable[[Any], Any], items: Sequence[Any], jobs: int) -> Iterator[list[Any]]:
    # Chunks as the process pool's: a task per item would spend more on scheduling than work.
    size = max(1, len(items) // (4 * jobs))
    run_chunk = ray.remote(_run_chunk)
    futures = [run_chunk.remote(function, items[i : i + size]) for i in range(0, len(items), size)]
    for i in range(len(futures)):
        results, futures[i] = ray.get(futures[i]), None
        yield results


def _ordered(ray: Any, function: Callable[[Any], Any], items: Sequence[Any], jobs: int) -> Iterator[Any]:
    for results in _chunks(ray, function, items, jobs):
        yield from results


def _run_chunk(function: Callable[[Any], Any], chunk: Sequence[Any]) -> list[Any]:
    return [function(item) for item in chunk]


if __name__ == "__main__":
    _drive(int(sys.argv[1]), int(sys.argv[2]))
