"""Worker processes end with the evaluation that started them, however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor

import psutil
import pytest

from wpb_gym.evaluation.grid import blas_threads, start_worker

# A grid long enough to be killed in the middle: two workers (and, isolated, their policies' own
# processes) are running when the parent dies.
GRID = textwrap.dedent(
    """
    import sys
    from functools import partial
    from agents.registry import make_agent
    from wpb_gym.evaluation.grid import PolicySpec, generated_refs, isolated_info, run_grid

    if __name__ == "__main__":
        policies = [PolicySpec(n, partial(make_agent, n)) for n in ("last_kb", "fifo_store_all")]
        if sys.argv[1] == "isolate":  # as wpb eval --isolate does: ask each policy here first
            isolated_info(policies)
        refs = generated_refs(["default"], [200], 400, seed=0)
        print("started", flush=True)
        isolate = sys.argv[1] == "isolate"  # (isolated, jobs count the policies' processes: 2 workers of 2)
        run_grid(refs, policies, [1024, 10240], ["unprivileged"], jobs=4 if isolate else 2, isolate=isolate)
    """
)


def _descendants(pid: int, expected: int, seconds: float = 60.0) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        children = psutil.Process(pid).children(recursive=True)
        if len(children) >= expected:
            return children
        time.sleep(0.1)
    pytest.fail(f"the grid started {len(children)} processes, expected {expected}")


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_14_workers_end_with_a_killed_parent(tmp_path, sig, isolate):
    script = tmp_path / "grid.py"
    script.write_text(GRID, encoding="utf-8")
    parent = subprocess.Popen(
        [sys.executable, str(script), "isolate" if isolate else "in-process"],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    children: list[psutil.Process] = []
    try:
        assert parent.stdout.readline().strip() == b"started"
        # Two pool workers; isolated, each also starts one process per policy.
        children = _descendants(parent.pid, 2 + (4 if isolate else 0))
        time.sleep(1.0)
        parent.send_signal(sig)
        parent.wait(10)
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"orphaned workers still running: {[p.pid for p in alive]}"
    finally:
        if parent.poll() is None:
            children += psutil.Process(parent.pid).children(recursive=True)
            parent.kill()
        # Only the grid's processes: this process's own helpers (the fork server and resource
        # tracker that isolated tests before this one started) must live on.
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass


def _marked(mark: str) -> list[psutil.Process]:
    """Every live process whose environment holds ``mark`` (re-parented ones included)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("WPB_TEST_MARK") == mark and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


# Each moment of start-up once, and each signal at a moment where the other is not tried.
@pytest.mark.parametrize(("sig", "delay"), [(signal.SIGKILL, 0.3), (signal.SIGTERM, 1.0), (signal.SIGKILL, 2.0)],
                         ids=["SIGKILL-0.3", "SIGTERM-1.0", "SIGKILL-2.0"])
def test_14_workers_killed_while_they_start_end_with_the_parent(tmp_path, sig, delay):
    """Killed while its spawned workers were still starting (wpb eval --isolate --jobs 6), the
    parent left workers, and the resource tracker they hold, running under init: each read its
    parent's id only once started, when that parent was already gone. Whatever the moment of
    the kill, every process the run started ends (found by a mark in their environment, since
    they are no longer the parent's children)."""
    script = tmp_path / "grid.py"
    script.write_text(GRID.replace("jobs=4 if isolate", "jobs=6 if isolate"), encoding="utf-8")
    mark = f"{os.getpid()}-{tmp_path.name}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "WPB_TEST_MARK": mark}
    parent = subprocess.Popen([sys.executable, str(script), "isolate"], stdout=subprocess.PIPE, env=env)
    try:
        assert parent.stdout.readline().strip() == b"started"
        time.sleep(delay)
        parent.send_signal(sig)
        parent.wait(10)
        deadline = time.monotonic() + 15
        while _marked(mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        alive = _marked(mark)
        assert not alive, f"still running after the parent died: {[(p.pid, p.cmdline()[-2:]) for p in alive]}"
    finally:
        if parent.poll() is None:
            parent.kill()
        for process in _marked(mark):
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass


def _blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [pool["num_threads"] for pool in threadpool_info()]


def test_grid_workers_keep_their_blas_pools_to_their_share_of_the_cores():
    assert blas_threads(1) == max(1, len(os.sched_getaffinity(0)))
    assert blas_threads(10**6) == 1
    with ProcessPoolExecutor(1, initializer=start_worker, initargs=(os.getpid(), 1)) as pool:
        threads = pool.submit(_blas_threads).result(timeout=60)
    assert threads and set(threads) == {1}  # NumPy's BLAS at least, one thread
