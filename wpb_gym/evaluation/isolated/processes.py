"""How the isolated evaluator starts policy processes: one ``multiprocessing`` context for all
of them, and the fork server they are forked from, started with a reduced environment.

Both the evaluator (``isolation``) and the sandbox's availability probe (``sandbox``) start
processes this way, so it lives below both.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Any


def start_method() -> Any:
    """``forkserver`` where there is one (POSIX), else ``spawn``.

    Either way a policy's process starts from a fresh interpreter, not a copy of this one:
    the fork server is itself a fresh interpreter, which imports this package (and, like
    ``spawn``, the main script) once; each policy's process is then a cheap fork of it instead
    of a new interpreter importing numpy, scipy and the package again (0.7 s each here).
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # Only read when the fork server starts: a server already running (started by other
    # code) keeps its own list, which costs time, not correctness.
    context.set_forkserver_preload(["__main__", "wpb_gym.evaluation.isolated.policy_process"])
    return context


CONTEXT = start_method()


def fork_server_started() -> bool:
    """Whether this process has started ``multiprocessing``'s fork server (a process forked
    from it cannot use that server, nor start its own)."""
    from multiprocessing import forkserver

    return forkserver._forkserver._forkserver_pid is not None


# What of this process's environment the fork server (and so every policy's process) is given,
# when a sandbox starts it: the locale, paths, Python's own settings and thread counts; not the
# rest, where a machine keeps its keys and tokens (a policy's process is a fork of the server's
# memory, and emptying its environment there would not wipe what the memory once held).
_SERVER_ENVIRONMENT = ("PATH", "HOME", "LANG", "TZ", "TMPDIR", "CUDA_VISIBLE_DEVICES")
_SERVER_PREFIXES = ("LC_", "PYTHON")
_SERVER_SUFFIXES = ("_NUM_THREADS",)


def start_fork_server() -> None:
    """Start the fork server, if none runs yet, with only ``_SERVER_ENVIRONMENT`` (and the
    variables of those prefixes and suffixes) of this process's environment."""
    from multiprocessing import forkserver

    if CONTEXT.get_start_method() != "forkserver" or fork_server_started():
        return  # none to start (spawned processes get what they are given), or it runs already
    saved = dict(os.environ)
    kept = {
        k: v
        for k, v in saved.items()
        if k in _SERVER_ENVIRONMENT or k.startswith(_SERVER_PREFIXES) or k.endswith(_SERVER_SUFFIXES)
    }
    os.environ.clear()
    os.environ.update(kept)
    try:
        forkserver.ensure_running()
    finally:
        os.environ.clear()
        os.environ.update(saved)
