"""Child processes that end with their parent.

A worker of ``wpb eval --jobs N`` (or a policy's own process in isolated evaluation) waits on
a queue or a pipe its parent feeds. If the parent is killed (SIGKILL cannot be caught, so no
clean-up of the parent's runs), nothing would ever tell the worker to stop: it would live on,
holding memory and, for a policy stuck in a loop, a core (and, through the pipe every child
holds, the parent's ``multiprocessing`` resource tracker). ``end_with_parent`` starts a thread
in the child that exits the process as soon as its parent is gone.

The parent can die before the child gets that far: a spawned worker spends a second or more
importing before its initializer runs. So what identifies the parent is fixed before the child
starts, never read in the child afterwards (by then it may already name init): a
``multiprocessing`` child watches the pipe its parent opened for it before starting it (the
parent's end closes when the parent dies, whoever the child's parent is now: a policy's process
is forked by a fork server), any other child the parent id its parent passed in. A child whose
parent is already gone exits at once.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from multiprocessing.connection import wait

__all__ = ["end_with_parent"]

_POLL_SECONDS = 0.25


def end_with_parent(parent: int | None = None) -> None:
    """In a child process: exit (status 1) as soon as the process that started it has died, at
    once if it already has.

    ``parent``: that process's id, read there before the child was started (``os.getpid()``,
    passed as an initializer argument or to the process's target). A ``multiprocessing`` child
    (spawned, forked, or forked by a fork server) is told instead by the pipe its parent opened
    for it, which no later re-parenting changes; ``parent`` then only has to agree with it. Any
    other child (a subprocess the parent started) polls ``os.getppid``. Meant as a
    ``ProcessPoolExecutor`` initializer or the first call of a process target. Needs no signal
    (a policy's code may install its own handlers); on Windows, where the parent id does not
    change, a child without the pipe is not watched.
    """
    process = multiprocessing.parent_process()
    sentinel = getattr(process, "sentinel", None)
    if sentinel is not None and (parent is None or parent == process.pid):
        if wait([sentinel], 0):  # the parent's end is closed: it died while this process started
            os._exit(1)

        def watch_pipe() -> None:
            wait([sentinel])
            os._exit(1)  # no clean-up: the parent that owned the results is gone

        threading.Thread(target=watch_pipe, name="end-with-parent", daemon=True).start()
        return
    if parent is None:
        parent = os.getppid()  # (a child that was not told: its parent as it is now)
    if os.getppid() != parent:  # re-parented already: the parent died while this process started
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(_POLL_SECONDS)
            if os.getppid() != parent:
                os._exit(1)  # no clean-up: the parent that owned the results is gone

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()
