"""``exec:PATH``: a write policy that is another program, spoken to in ``wpb-agent/1``.

``ExecAgent(path=...)`` starts the executable at ``path`` (with ``args``) the first time an
episode begins, says hello, and then, for every episode, tells it the episode, asks it for
the actions of each step and tells it the episode's metrics (``agents.external.protocol``). One
program serves every episode this object plays (``wpb eval`` makes one object per run); it is
started again after an error.

The program is started with an environment holding only ``PATH`` and the thread-count
variables (``OMP_NUM_THREADS``...), in its own folder, and ends with this process (on Linux
the kernel kills it when its parent dies). ``wpb eval`` runs ``exec:`` agents isolated, in the
sandbox of isolated Python policies (``wpb_gym.evaluation.isolated.sandbox``): there the
program sees its own file and the files beside it that share its stem
(``agent.js``, ``agent.model.json``), the system's programs and libraries, no network and no
other file of the machine. ``timeout`` bounds each answer (seconds): an agent that does not
answer in time, ends, or answers outside the protocol stops the run with an error naming it.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wpb_gym.core.policy import EpisodeContext, EpisodeOutcome, PolicyFailure
from wpb_gym.core.store import StoreView
from wpb_gym.core.tracks import TRACKS
from wpb_gym.core.types import MemoryAction, Step

from ..base import BaselineAgent
from . import protocol
from .protocol import ProtocolError

MAX_LINE = 64 << 20  # bytes of one answer: more is an error, not a reason to grow without bound
_KEPT_ENVIRONMENT = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_PR_SET_PDEATHSIG = 1
_EXIT_GRACE = 0.2  # seconds a program has to exit once its input closes (a run ends; others wait)


class ProgramError(PolicyFailure):
    """The program ended, or did not answer in time."""


class ExecAgent(BaselineAgent):
    """``exec``: the program at ``path`` decides (see the module docstring)."""

    name = "exec"
    description = ("Any program speaking the wpb-agent/1 protocol on stdin/stdout (docs/agent-protocol.md); "
                   "wpb eval --agents exec:PATH runs it isolated.")
    kind = "external"
    _param_names = ("path", "args", "track", "timeout")

    def __init__(self, *, path: str, args: Sequence[str] = (), track: str = "unprivileged",
                 timeout: float = 10.0) -> None:
        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise ValueError(f"exec: path must name an executable file, got {path!r}")
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"exec: args must be a list of strings, got {args!r}")
        if track not in TRACKS:  # an oracle reads labels, which the protocol never sends
            raise ValueError(f"exec: track must be one of {', '.join(TRACKS)}, got {track!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 86400:
            raise ValueError(f"exec: timeout must be a number of seconds in (0, 86400], got {timeout!r}")
        executable = Path(path)
        if executable.is_dir():
            raise IsADirectoryError(f"exec: {path}: is a folder; expected an executable file")
        if not executable.is_file():
            raise FileNotFoundError(f"exec: {path}: no such file")
        if not os.access(executable, os.X_OK):
            raise PermissionError(f"exec: {path}: not executable (chmod +x it; a script needs a #! line naming "
                                  f"its interpreter)")
        self.path = str(path)
        self.args = list(args)
        self.track = track
        self.timeout = float(timeout)
        self._process: subprocess.Popen[bytes] | None = None
        self._buffer = bytearray()

    # ---------------------------------------------------------------- the policy
    def start_episode(self, context: EpisodeContext) -> None:
        if self._process is None or self._process.poll() is not None:
            self._start()
        self._send(protocol.episode_message(context))

    def select(self, step: Step, store: StoreView) -> list[MemoryAction]:
        if self._process is None:  # played without start_episode (e.g. stepped by hand)
            self._start()
        self._nothing_unasked(f"step {step.t}")
        self._send(protocol.step_message(step, store))
        return self._checked(lambda: protocol.actions(self._answer(f"step {step.t}"), step))

    def end_episode(self, outcome: EpisodeOutcome) -> None:
        if self._process is not None:
            self._send(protocol.end_message(outcome))

    def close(self) -> None:
        """End the program: its input closes (it should exit at once), then it is killed."""
        process, self._process = self._process, None
        self._buffer.clear()
        if process is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(timeout=_EXIT_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def __del__(self) -> None:
        if getattr(self, "_process", None) is not None:  # (not when __init__ refused its settings)
            self.close()

    def __getstate__(self) -> dict[str, Any]:  # a copy starts a program of its own
        return {**self.__dict__, "_process": None, "_buffer": bytearray()}

    # ---------------------------------------------------------------- the program
    def _start(self) -> None:
        self.close()
        executable = str(Path(self.path).absolute())
        env = {k: os.environ[k] for k in _KEPT_ENVIRONMENT if k in os.environ}
        env["PATH"] = os.environ.get("PATH") or _DEFAULT_PATH
        try:
            self._process = subprocess.Popen(
                [executable, *self.args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                cwd=os.path.dirname(executable), preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        except OSError as exc:
            hint = ""
            if isinstance(exc, FileNotFoundError) and Path(executable).exists():  # the #! interpreter is missing
                hint = "; its #! line names an interpreter that is not there (in the sandbox: only the system's paths)"
            elif exc.errno == 8:  # ENOEXEC: a script without a #! line
                hint = "; a script needs a #! line naming its interpreter"
            raise ProgramError(f"exec: {self.path}: cannot start it ({exc.strerror or exc}{hint})") from None
        self._send(protocol.hello())
        self._checked(lambda: protocol.check_hello(self._answer("hello")))

    def _send(self, message: dict[str, Any]) -> None:
        process = self._process
        assert process is not None and process.stdin is not None
        try:
            process.stdin.write(protocol.line(message))
            process.stdin.flush()
        except (BrokenPipeError, ConnectionResetError):
            raise self._ended(f"the {message['type']} message") from None

    def _answer(self, what: str) -> bytes:
        process = self._process
        assert process is not None and process.stdout is not None
        fd = process.stdout.fileno()
        deadline = time.monotonic() + self.timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise ProgramError(f"exec: {self.path}: no answer to {what} within {self.timeout:g} s (does it "
                                   "flush its output after each line?)")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._ended(what)
            self._buffer += chunk
            if len(self._buffer) > MAX_LINE:
                self.close()
                raise ProtocolError(f"an answer longer than {MAX_LINE >> 20} MiB to {what}")
        end = self._buffer.index(b"\n")
        answer = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return answer

    def _nothing_unasked(self, what: str) -> None:
        """Refuse a line the program wrote that nothing asked for (an answer to ``episode`` or
        ``end``): read as the next step's answer, it would shift every decision by one."""
        process = self._process
        assert process is not None and process.stdout is not None
        if not self._buffer and select.select([process.stdout.fileno()], [], [], 0)[0]:
            chunk = os.read(process.stdout.fileno(), 1 << 16)
            if not chunk:
                raise self._ended(f"the message of {what}")
            self._buffer += chunk
        if self._buffer:
            shown = bytes(self._buffer[:80]).decode("utf-8", errors="replace")
            self.close()
            raise ProtocolError(f"exec: {self.path}: wrote {shown!r} before {what} was sent; only hello and step "
                                "messages are answered")

    def _checked(self, parse: Any) -> Any:
        try:
            return parse()
        except ProtocolError as exc:
            self.close()  # what it would say next is out of step
            raise ProtocolError(f"exec: {self.path}: {exc}") from None

    def _ended(self, what: str) -> ProgramError:
        process = self._process
        status = None
        if process is not None:
            try:
                status = process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        self.close()
        shown = f"exit status {status}" if status is not None and status >= 0 else (
            f"killed by signal {-status}" if status is not None else "its output closed")
        return ProgramError(f"exec: {self.path}: ended ({shown}) before reading or answering {what}")


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """In the child before it runs the program: the kernel kills it when the thread that started
    it ends (the evaluator's policy process starts programs from its main thread). The function
    is looked up in the parent: between fork and exec the child only calls it."""
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
