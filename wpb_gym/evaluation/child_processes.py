"""Child processes that end with their parent.

A worker of ``wpb eval --jobs N`` (or a policy's own process in isolated evaluation) waits on
a queue or a pipe its parent feeds. If the parent is killed (SIGKILL cannot be caught, so no
clean-up of the parent's runs), nothing would ever tell the worker to stop: it would live on,
holding memory and, for a policy stuck in a loop, a core. ``end_with_parent`` starts a thread
in the child that exits the process as soon as it has been re-parented.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["end_with_parent"]

_POLL_SECONDS = 0.25


def end_with_parent() -> None:
    """In a child process: exit (status 1) soon after the parent process dies.

    Meant as a ``ProcessPoolExecutor`` initializer or the first call of a process target.
    Polling ``os.getppid`` works on every POSIX system and needs no signal (a policy's code
    may install its own handlers); on Windows, where the parent id does not change, it does
    nothing.
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(_POLL_SECONDS)
            if os.getppid() != parent:
                os._exit(1)  # no clean-up: the parent that owned the results is gone

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()
