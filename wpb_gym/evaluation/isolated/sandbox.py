"""The sandbox of a policy's process in isolated evaluation: Linux namespaces and resource limits.

A process of its own keeps a policy out of the evaluator's memory, but not out of the machine:
from there it could read the evaluator's command line and memory under ``/proc``, open the
episode files and the run folder, reach the network, and leave a process behind that rewrites
the results once the run is over. Where the platform allows it (Linux with unprivileged user
namespaces), each policy's process enters namespaces of its own before the policy is built:

* **its own processes only** (a PID namespace): ``/proc`` lists the policy's process (PID 1)
  and what it starts; when that process ends, or is killed, the kernel kills every process in
  the namespace, so nothing it starts outlives it;
* **no network** (a network namespace with a loopback interface that is down);
* **its own file system view** (a mount namespace and a fresh root): a read-only view of the
  system's libraries and programs (``/usr``, ``/lib``...), the Python installation and its
  site-packages, the packages ``wpb_gym`` and ``agents``, the modules its factory refers to
  and the model file its ``path`` parameter names (with the files beside it that share its
  stem, such as an SB3 model's ``.env.json``); a private, writable ``/tmp`` (a small
  ``tmpfs``); a minimal ``/dev``; a ``/proc`` of its own namespace. Nothing else of the
  machine's files is there: not the episode files, the run folder, the configs, the data
  folder nor the evaluator's ``/tmp``, and a path the evaluator names as hidden
  (``Sandbox.hidden``) is covered by an empty one even inside a read-only part;
* **no privileges**: it runs as an unprivileged user of its own user namespace (the host's
  ``nobody`` where the evaluator runs as root), with no capabilities, an empty capability
  bounding set and ``no_new_privs``, and it cannot create user namespaces of its own;
* **resource limits** (``setrlimit``): address space, CPU time, processes and file size
  (``Sandbox``; ``wpb eval --sandbox-memory`` etc.);
* **nothing of the evaluator's invocation**: the evaluator's command line never reaches it, its
  environment is emptied (but for a few variables that only set thread counts), ``/proc/1``
  shows neither, and what it prints goes through a relay that stops after ``_MAX_OUTPUT`` bytes
  and shows it line by line, marked as the policy's, with no control character (``output``).

The policy's factory is unpickled and called only once all of this is in place, so the code a
model file carries (an SB3 zip or an RLlib checkpoint unpickles) runs only inside.

How: the policy's ``multiprocessing`` process (forked from the fork server, as without the
sandbox) forks a child that calls ``unshare(2)`` for new user, mount, PID, network, IPC and UTS
namespaces; the parent, still outside, writes the child's user and group mapping; the child
forks the policy's process proper, PID 1 of the new PID namespace, which builds the new root
(``mount(2)``, ``pivot_root(2)``), drops its privileges, sets its limits and serves the pipe as
before. The two processes above it wait; the first relays the policy's output and passes its
exit status on, so the evaluator sees one process that ends as the policy's does. The policy's
process and the one between die with their parent (``PR_SET_PDEATHSIG``, asked again after each
change of user, which clears it), the first with the evaluator (``child_processes``), so killing
the evaluator's handle, or the evaluator, kills the policy and, with it, its namespace. Running
this inside the forked process (rather than
starting a program such as ``bwrap`` for every policy) keeps what makes isolated evaluation
cheap: a policy's process is a fork of an interpreter that has already imported the package,
not a fresh interpreter importing numpy and the package again.

What the sandbox does not do: it does not filter system calls (the kernel's whole interface is
there, as for any unprivileged process; namespaces expose somewhat more of it), it does not
bound memory the kernel holds for the process outside its address space (pipes, the private
``/tmp``, bounded by its size) nor disk or CPU *rate* (a policy can keep a core busy within its
time limits), and it cannot hide what a policy's process inherits from the interpreter it was
forked from: the modules imported there, and the main script of the evaluation (as
``__mp_main__``, as in any ``multiprocessing`` child): keep secrets out of that script's
globals. It needs Linux with unprivileged user namespaces (``problem()`` says why not).
"""

from __future__ import annotations

import ctypes
import json
import os
import pickle
import platform
import re
import resource
import select
import signal
import site
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.messages import shown
from .output import PolicyLines
from .processes import CONTEXT, start_fork_server

__all__ = [
    "AUTO",
    "IN_PROCESS",
    "NAMESPACES",
    "PROCESS_ONLY",
    "Plan",
    "Sandbox",
    "enter",
    "isolation_level",
    "modules_of",
    "plan",
    "problem",
    "resolve_sandbox",
]

# What run.json records as the run's isolation.
NAMESPACES = "sandbox: namespaces"
PROCESS_ONLY = "process only"
IN_PROCESS = "in process"

GiB, MiB = 1 << 30, 1 << 20


@dataclass(frozen=True)
class Sandbox:
    """What a sandboxed policy's process may use. ``None`` switches a limit off.

    * ``memory_bytes``: its address space (``RLIMIT_AS``): an allocation past it fails with
      ``MemoryError``, which stops the run being played (its ``error`` says so). A policy's
      process maps about 270 MB before its policy allocates anything (760 MB with PyTorch).
    * ``cpu_seconds``: CPU time of the process over its whole life (``RLIMIT_CPU``; a
      process serves one policy for a whole grid): past it the kernel kills it.
    * ``processes``: processes and threads it may have at once (``RLIMIT_NPROC``; numerical
      libraries start a thread per core).
    * ``file_bytes``: the largest file it may write (``RLIMIT_FSIZE``).
    * ``tmp_bytes``: the size of its private ``/tmp``.
    * ``read_only``: more paths it may read (a policy's own data, a module its factory imports
      late).
    * ``hidden``: paths it must not see even where they lie inside what it may read
      (``wpb eval`` names its run folder and its episode files).
    """

    memory_bytes: int | None = 4 * GiB
    cpu_seconds: int | None = 3600
    processes: int | None = 256
    file_bytes: int | None = 64 * MiB
    tmp_bytes: int = 64 * MiB
    read_only: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "cpu_seconds", "processes", "file_bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"Sandbox.{name} must be a positive int or None, got {value!r}")
        if isinstance(self.tmp_bytes, bool) or not isinstance(self.tmp_bytes, int) or self.tmp_bytes < 4096:
            raise ValueError(f"Sandbox.tmp_bytes must be an int of at least 4096, got {self.tmp_bytes!r}")
        object.__setattr__(self, "read_only", tuple(str(p) for p in self.read_only))
        object.__setattr__(self, "hidden", tuple(str(p) for p in self.hidden))


AUTO = "auto"
_WARNED: list[bool] = []


def resolve_sandbox(sandbox: Sandbox | None | str) -> Sandbox | None:
    """The sandbox isolated evaluation uses for ``sandbox``: a ``Sandbox`` as it is (a
    ``RuntimeError`` saying why where the platform cannot give one), ``None`` for none (a
    process of its own only), ``AUTO`` (the default) for ``Sandbox()`` where the platform gives
    one and none elsewhere, with a warning, once per process, that says why."""
    if sandbox is None or isinstance(sandbox, Sandbox):
        if sandbox is not None and problem() is not None:
            raise RuntimeError(f"policies cannot be sandboxed here: {problem()}")
        return sandbox
    if sandbox != AUTO:
        raise ValueError(f"sandbox must be a Sandbox, None or {AUTO!r}, got {sandbox!r}")
    if problem() is None:
        return Sandbox()
    if not _WARNED:
        import warnings

        _WARNED.append(True)
        warnings.warn(f"isolated policies run without a sandbox (a process each only): {problem()}", stacklevel=3)
    return None


def isolation_level(isolate: bool, sandbox: Sandbox | None) -> str:
    """What run.json records: ``in process``, ``process only`` or ``sandbox: namespaces``."""
    if not isolate:
        return IN_PROCESS
    return NAMESPACES if sandbox is not None else PROCESS_ONLY


# ------------------------------------------------------------------------------------ the plan
# The read-only part of the system every policy gets, where it exists. /etc is left out but for
# what the dynamic loader and the time zone read: it holds the machine's accounts and secrets.
_SYSTEM = (
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
    "/bin",
    "/sbin",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
)
_DEVICES = ("null", "zero", "full", "random", "urandom")
# Environment variables a policy's process keeps: they set thread counts, nothing else.
_KEPT_ENVIRONMENT = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
_USER = 1000  # the policy's user and group inside its namespace (owning nothing of the host's)
_NOBODY = 65534  # outside: the host's unprivileged user, where the evaluator may map it (as root)


@dataclass(frozen=True)
class Plan:
    """One policy's sandbox as the evaluator works it out (``plan``) and its process builds it
    (``enter``): read-only ``(path inside, path on the host)`` binds, symbolic links to make,
    paths to cover, the working directory, and the limits."""

    binds: tuple[tuple[str, str], ...]
    links: tuple[tuple[str, str], ...]
    hidden: tuple[str, ...]
    cwd: str
    sandbox: Sandbox = field(default_factory=Sandbox)


class _Modules(pickle.Pickler):
    """Pickles to nowhere, noting the module of every class and function the object refers to."""

    def __init__(self) -> None:
        import io

        super().__init__(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL)
        self.names: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type) or callable(obj):
            module = getattr(obj, "__module__", None)
            if isinstance(module, str):
                self.names.add(module)
        extra = getattr(type(obj), "_sandbox_modules", None)  # e.g. a PickledPolicy's own policy
        if extra is not None and not isinstance(obj, type):
            self.names.update(extra(obj))
        return NotImplemented


def modules_of(obj: Any) -> tuple[str, ...]:
    """The modules whose classes and functions pickling ``obj`` refers to (its factory's code)."""
    pickler = _Modules()
    pickler.dump(obj)
    return tuple(sorted(pickler.names))


def _module_paths(names: Sequence[str]) -> list[str]:
    """Where the top-level packages (or single-file modules) of ``names`` are, as loaded here."""
    paths = []
    for top in sorted({name.split(".")[0] for name in names} - {"__main__", "__mp_main__", "builtins"}):
        module = sys.modules.get(top)
        if module is None:
            continue
        locations = list(getattr(module, "__path__", None) or [])  # a package (or namespace package)
        if not locations and getattr(module, "__file__", None):
            locations = [module.__file__]
        paths += [str(p) for p in locations if p and os.path.exists(p)]
    return paths


def _model_paths(factory: Any) -> list[str]:
    """The file or folder a registry factory's ``path`` parameter names (``sb3:MODEL.zip``), with
    the files beside a file that share its stem (``files_shown_with``)."""
    from functools import partial

    keywords = factory.keywords if isinstance(factory, partial) else {}
    path = keywords.get("path")
    if not isinstance(path, (str, os.PathLike)) or not os.path.exists(path):
        return []
    return [str(p) for p in files_shown_with(path)]


def files_shown_with(path: str | os.PathLike[str]) -> list[Path]:
    """What a policy's sandbox shows of the model file or folder at ``path``: the folder, or the
    file and the files beside it that share its stem (an SB3 model's ``MODEL.env.json``, an
    external agent's ``agent.weights.json``). A file beside it that is a symbolic link out of
    its folder is not shown: it came with the model, not from whoever named the model, and
    would show the policy any file of the machine."""
    import glob

    path = Path(path).absolute()
    if path.is_dir():
        return [path]
    stem = path.name.split(".")[0]
    folder = os.path.realpath(path.parent)
    beside = [
        p for p in sorted(path.parent.glob(f"{glob.escape(stem)}.*"))  # the stem is a name, not a pattern
        if p.is_file() and p != path and os.path.dirname(os.path.realpath(p)) == folder
    ]
    return [path, *beside]


def _python_paths() -> list[str]:
    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, *site.getsitepackages()]
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user_site:
        paths.append(user_site)
    return paths + _distribution_packages()


def _distribution_packages() -> list[str]:
    """Where the top-level packages installed with this one are (its distribution's: ``wpb_gym``
    and the agents a policy's module may import), found without importing any of them."""
    from importlib.metadata import packages_distributions
    from importlib.util import find_spec

    ours = __name__.split(".")[0]
    tops = packages_distributions()
    distributions = set(tops.get(ours, ())) or {ours}
    paths = [str(Path(__file__).resolve().parents[2])]  # this package, installed or not
    for top, owners in sorted(tops.items()):
        if top != ours and distributions & set(owners):
            spec = find_spec(top)
            if spec is not None:
                paths += list(spec.submodule_search_locations or ([spec.origin] if spec.origin else []))
    return paths


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def plan(sandbox: Sandbox, factory: Any) -> Plan:
    """What the sandbox of the policy ``factory`` builds holds: the system and Python paths,
    the modules ``factory`` refers to, its model file, ``sandbox.read_only``; and which of
    ``sandbox.hidden`` lie inside them."""
    wanted = [*_SYSTEM, *_python_paths(), *_module_paths(modules_of(factory)), *_model_paths(factory)]
    wanted += [os.path.abspath(p) for p in sandbox.read_only]
    binds: dict[str, str] = {}
    links: dict[str, str] = {}
    for path in wanted:
        path = os.path.abspath(path)
        # A link on the way (e.g. /lib -> usr/lib, or a .venv linked in from elsewhere) is made
        # as a link, and what lies past it is bound where it really is: a bind through a link
        # the new root also holds would be made through that link before the root is switched.
        for ancestor in (*reversed(Path(path).parents), Path(path)):
            # (A link beneath another comes along with what that one names: .venv/lib64 -> lib.)
            if os.path.islink(ancestor) and os.path.realpath(ancestor.parent) == str(ancestor.parent):
                links[str(ancestor)] = os.readlink(ancestor)
        path = os.path.realpath(path)
        if os.path.exists(path):
            binds[path] = path
    if "/" in binds:
        raise ValueError("a sandbox that shows the whole file system is none: '/' is among its read-only paths")
    # A path inside another one is there already (its source, resolved, inside the other's).
    kept = sorted(binds, key=lambda p: (p.count("/"), p))
    binds = {p: binds[p] for i, p in enumerate(kept) if not any(_inside(p, q) for q in kept[:i])}
    links = {p: t for p, t in links.items() if p not in binds and not any(_inside(p, q) for q in binds)}
    hidden = []
    for path in sandbox.hidden:
        real = os.path.realpath(path)
        for target, source in binds.items():
            if _inside(real, source) and real != source:  # a bound path itself: hidden means not bound
                if not os.path.exists(real):  # (there is no covering what is not there yet)
                    raise ValueError(f"{path} is to be hidden from the policy, but lies inside {source}, which it "
                                     "may read: keep it elsewhere")
                hidden.append(target + real[len(source) :])
    for path in sandbox.hidden:  # a hidden path is never bound, nor a model inside it read
        real = os.path.realpath(path)
        binds = {t: s for t, s in binds.items() if not _inside(s, real)}
    return Plan(tuple(sorted(binds.items())), tuple(sorted(links.items())), tuple(sorted(hidden)), os.getcwd(), sandbox)


# ---------------------------------------------------------------------------- the system calls
_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 1024, 2048, 1 << 21
_MNT_DETACH = 2
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
_CAP_VERSION_3 = 0x20080522
# pivot_root and capset have no glibc wrapper: their numbers, per architecture.
_SYSCALLS = {"x86_64": {"pivot_root": 155, "capset": 126}, "aarch64": {"pivot_root": 41, "capset": 91}}
# statvfs flags a read-only remount must keep (the kernel refuses to drop a locked one).
_KEPT_FLAGS = ((os.ST_NOSUID, _MS_NOSUID), (os.ST_NODEV, _MS_NODEV), (os.ST_NOEXEC, _MS_NOEXEC),
               (os.ST_NOATIME, _MS_NOATIME), (os.ST_NODIRATIME, _MS_NODIRATIME), (os.ST_RELATIME, _MS_RELATIME))
_MAX_OUTPUT = 1 << 20  # bytes of a policy's output relayed to the evaluator's; the rest is dropped
_LINE_WAIT = 0.05  # seconds the relay waits for the rest of a line before showing what it has

_libc: Any = None


def _call(what: str, result: int) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    def enc(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    _call(f"mount {target}", _libc.mount(enc(source), enc(target), enc(kind), ctypes.c_ulong(flags), enc(data)))


def _syscall(name: str, *args: Any) -> int:
    return _libc.syscall(ctypes.c_long(_SYSCALLS[platform.machine()][name]), *args)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------- entering it
def enter(plan: Plan, keep: Sequence[int], parent: int | None = None, name: str = "?") -> None:
    """Move this process's work into a new sandbox: returns in the sandbox's first process (PID 1
    of its namespace), where the policy is then built and served; the process that called it,
    and the one between, wait outside and never return (they exit as the policy's process does).

    ``keep``: the file descriptors the policy's process keeps (its pipe to the evaluator);
    every other one is closed there. ``parent``: the evaluator's process id, as
    ``child_processes.end_with_parent`` takes it (this process ends with the evaluator).
    ``name``: the policy's label, which starts every line of its output the evaluator shows.
    Called first thing in a fresh child process (it must be single-threaded for ``unshare``).
    """
    global _libc
    _libc = ctypes.CDLL(None, use_errno=True)
    outer = os.getpid()
    _not_dumpable()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ready_r, ready_w = os.pipe()  # the child says it has its namespaces
    mapped_r, mapped_w = os.pipe()  # and is told how its users are mapped
    child = os.fork()
    if child == 0:
        for fd in (out_r, err_r, ready_r, mapped_w):
            os.close(fd)
        _between(plan, keep, outer, ready_w, mapped_r, out_w, err_w)  # returns only in the policy's process
        return
    for fd in (out_w, err_w, ready_w, mapped_r, *keep):  # the pipe is the policy's alone: its end is its EOF
        os.close(fd)
    how = b"s"  # the child maps its own user (as an unprivileged evaluator must)
    if os.read(ready_r, 1) == b"u":
        how = _map_users(child)
    try:
        os.write(mapped_w, how)
    except OSError:
        pass  # the child failed (and told the evaluator why): its exit is waited for below
    for fd in (ready_r, mapped_w):
        os.close(fd)
    from ..child_processes import end_with_parent

    end_with_parent(parent)  # (a thread: started only now that the forks are done)
    _relay(name, (out_r, 1), (err_r, 2))
    _, status = os.waitpid(child, 0)
    _exit_as(status)


def _map_users(child: int) -> bytes:
    """As root outside: map the child's user and group to the host's ``nobody``, so that the
    kernel counts its processes (``RLIMIT_NPROC`` does not bind root's) and file permissions
    treat it as nobody. Elsewhere the child maps its own user."""
    if os.geteuid() != 0:
        return b"s"
    try:
        _write(f"/proc/{child}/uid_map", f"{_USER} {_NOBODY} 1\n")
        _write(f"/proc/{child}/gid_map", f"{_USER} {_NOBODY} 1\n")
    except OSError:
        return b"s"
    return b"p"


def _between(plan: Plan, keep: Sequence[int], outer: int, ready_w: int, mapped_r: int, out_w: int, err_w: int) -> None:
    """The process between: takes the namespaces, forks the policy's process into the new PID
    namespace, and waits for it."""
    conn = keep[0] if keep else None
    try:
        _die_with_parent(lambda: os.getppid() == outer)
        try:
            _call("unshare", _libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET
                                           | _CLONE_NEWIPC | _CLONE_NEWUTS))
        except OSError:
            os.write(ready_w, b"x")
            raise
        os.write(ready_w, b"u")
        how = os.read(mapped_r, 1)
        if how != b"p":
            _write("/proc/self/setgroups", "deny")  # (required before an unprivileged gid_map)
            _write("/proc/self/uid_map", f"{_USER} {os.geteuid()} 1\n")
            _write("/proc/self/gid_map", f"{_USER} {os.getegid()} 1\n")
        os.close(ready_w)
        os.close(mapped_r)
        alive_r, alive_w = os.pipe()  # readable in the policy's process once this one is gone
        policy = os.fork()
    except BaseException as error:  # noqa: BLE001 - said on the pipe, where the evaluator reads
        _refuse(conn, error)
    if policy == 0:
        os.close(alive_w)
        try:
            def parent_alive() -> bool:
                return not select.select([alive_r], [], [], 0)[0]

            _die_with_parent(parent_alive)
            _build(plan, parent_alive)
            os.close(alive_r)
            _settle(plan, keep, out_w, err_w)
        except BaseException as error:  # noqa: BLE001
            _refuse(conn, error)
        return
    for fd in (alive_r, out_w, err_w, *keep):
        os.close(fd)
    _, status, usage = os.wait4(policy, 0)
    limit = plan.sandbox.cpu_seconds
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    if killed and limit is not None and usage.ru_utime + usage.ru_stime >= limit:
        # Killed at the hard limit of CPU time (the first process of a PID namespace is spared
        # the SIGXCPU of the soft one, as every signal it has no handler for): say so, as a
        # process that exceeds it elsewhere ends, by SIGXCPU.
        status = signal.SIGXCPU  # (a wait status: killed by that signal)
    _exit_as(status)


def _die_with_parent(parent_alive: Callable[[], bool]) -> None:
    _call("prctl", _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0))
    if not parent_alive():  # it died before the signal was asked for
        os._exit(1)


def _not_dumpable() -> None:
    # A process killed by a signal that dumps core (SIGXCPU) would hand its memory to the
    # machine's core handler; and a resource limit is no reason to leave core files behind.
    _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _exit_as(status: int) -> None:
    """End this process as the one waited for ended: the same exit code, or the same signal."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        except (OSError, ValueError):
            pass  # SIGKILL: needs neither
        os.kill(os.getpid(), number)
        os.kill(os.getpid(), signal.SIGKILL)  # a signal whose default is to go on (never sent here)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _refuse(conn_fd: int | None, error: BaseException) -> None:
    """A sandbox that could not be built: say so in answer to the evaluator's first message
    (which asks what the policy is) and exit. The policy is never built."""
    if conn_fd is not None:
        from multiprocessing.connection import Connection

        conn = Connection(conn_fd)
        try:
            conn.recv_bytes()
            text = f"its sandbox could not be set up: {type(error).__name__}: {error}"
            conn.send_bytes(json.dumps({"error": text}).encode())
        except (EOFError, OSError):
            pass
    os._exit(70)


def _relay(name: str, *pairs: tuple[int, int]) -> None:
    """Show the policy's output on this process's (the evaluator's) until it ends, up to
    ``_MAX_OUTPUT`` bytes of it: line by line, each line with its control characters escaped
    and marked as the policy's (``output.PolicyLines``)."""
    open_ = dict(pairs)
    lines = {fd: PolicyLines(name) for fd in open_}
    budget = _MAX_OUTPUT
    while open_:
        # An unfinished line is shown once the policy has paused: this process is killed with the
        # policy's, and would take it along unshown.
        pending = budget > 0 and any(lines[fd].pending for fd in open_)
        ready = select.select(list(open_), [], [], _LINE_WAIT if pending else None)[0]
        if not ready:
            for fd in open_:
                budget = budget if _show(open_[fd], lines[fd].end()) else 0
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            if not data:
                if budget > 0:
                    _show(open_[fd], lines[fd].end())
                os.close(fd)
                del open_[fd]
                continue
            if budget > 0:  # past it, what the policy prints is read and dropped
                piece = data[:budget]
                budget -= len(piece)
                text = lines[fd].feed(piece)
                if budget <= 0:
                    for other in open_.keys() - {fd}:  # what the other stream has begun is shown too
                        _show(open_[other], lines[other].end())
                    text += lines[fd].end() + (
                        f"wpb: policy {shown(name)} printed more than {_MAX_OUTPUT:,} bytes: the rest of its output is "
                        "dropped\n"
                    ).encode()
                budget = budget if _show(open_[fd], text) else 0


def _show(fd: int, text: bytes) -> bool:
    """Write all of ``text`` to ``fd``; False if it cannot be (the evaluator's end is closed)."""
    try:
        while text:
            text = text[os.write(fd, text) :]
    except OSError:
        return False
    return True


def _build(plan: Plan, parent_alive: Callable[[], bool]) -> None:
    """In the new namespaces, as their first process (with every capability there): the new root.

    Between the two ``pivot_root`` calls the Python installation is out of reach: nothing here
    may import a module (or look up a codec) that is not loaded yet."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing done here reaches the host's mounts
    # What is bound is opened first, as the evaluator's user: the unprivileged user may not walk
    # to all of it (a Python installed under /root). The binds are then made through these.
    opened = {source: os.open(source, os.O_PATH | os.O_CLOEXEC) for _, source in plan.binds}
    devices = {name: os.open(f"/dev/{name}", os.O_PATH | os.O_CLOEXEC) for name in _DEVICES}
    # Then the unprivileged user (that of the mapping: this namespace has no root, so the
    # capabilities stay until they are dropped): new files must belong to a mapped user.
    try:
        os.setgroups([])
    except OSError:
        pass  # mapped by itself (setgroups denied): keeps the evaluator's groups, no more
    os.setresgid(_USER, _USER, _USER)
    os.setresuid(_USER, _USER, _USER)
    _die_with_parent(parent_alive)  # again: a change of user clears the request
    _libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # its /proc/self/fd its own again, for the binds

    def through(fd: int) -> str:
        return f"/old/proc/self/fd/{fd}"

    # A scratch root holding the new root and, beneath it, the old one.
    _mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0700,size=64k")
    os.mkdir("/tmp/new")
    os.mkdir("/tmp/old")
    # What a hidden file is covered by: empty, and no one's to read (the policy's user owns it,
    # but has no capability to override its mode, nor a writable mount to change it on).
    os.close(os.open("/tmp/hidden", os.O_CREAT | os.O_WRONLY, 0o000))
    _call("pivot_root", _syscall("pivot_root", b"/tmp", b"/tmp/old"))
    os.chdir("/")
    _mount("tmpfs", "/new", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
    sandbox = plan.sandbox
    # Parents first: a path's mounts go over what holds it.
    steps: list[tuple[str, str, str]] = [("tmpfs", "/tmp", ""), ("dev", "/dev", ""), ("proc", "/proc", "")]
    steps += [("bind", target, source) for target, source in plan.binds]
    steps += [("link", path, text) for path, text in plan.links]
    steps += [("hide", path, "") for path in plan.hidden]
    steps.sort(key=lambda step: Path(step[1]).parts)
    for kind, target, source in steps:
        where = "/new" + target
        if kind == "tmpfs":
            os.makedirs(where, 0o755, exist_ok=True)
            _mount("tmpfs", where, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,size={sandbox.tmp_bytes}")
        elif kind == "dev":
            os.makedirs(where, 0o755, exist_ok=True)
            _mount("tmpfs", where, "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=0755,size=64k")
            for name in _DEVICES:
                os.close(os.open(f"{where}/{name}", os.O_CREAT | os.O_WRONLY, 0o666))
                _mount(through(devices[name]), f"{where}/{name}", None, _MS_BIND)
            for name, text in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                               ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
                os.symlink(text, f"{where}/{name}")
        elif kind == "proc":
            os.makedirs(where, 0o555, exist_ok=True)  # mounted once the root is read-only
        elif kind == "bind":
            _point(where, stat.S_ISDIR(os.fstat(opened[source]).st_mode))
            _mount(through(opened[source]), where, None, _MS_BIND | _MS_REC)
        elif kind == "link":
            os.makedirs(os.path.dirname(where), 0o755, exist_ok=True)
            os.symlink(source, where)
        else:  # hide: an empty, read-only folder or file over it
            if os.path.isdir(where):
                _mount("tmpfs", where, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_RDONLY, "mode=0000,size=4k")
            else:
                _mount("/hidden", where, None, _MS_BIND)
    for fd in (*opened.values(), *devices.values()):
        os.close(fd)
    if not os.path.isdir("/new" + plan.cwd):
        _point("/new" + plan.cwd, True)
    # Read-only, every mount of the new root but its /tmp (each bind's submounts included).
    for point in _mount_points("/new"):
        if point in ("/new/tmp", "/new/proc"):
            continue
        flags = os.statvfs(point).f_flag
        kept = sum(ms for st, ms in _KEPT_FLAGS if flags & st)
        _mount(None, point, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | kept)
    # The namespace's own /proc (possible only while the machine's is still in reach).
    _mount("proc", "/new/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    try:  # no user namespaces within (as bwrap's --disable-userns): less of the kernel in reach
        _write("/new/proc/sys/user/max_user_namespaces", "0")
    except OSError:
        pass
    # Into the new root; the old one (the machine's whole tree) is detached for good.
    os.chdir("/new")
    _call("pivot_root", _syscall("pivot_root", b".", b"."))
    _call("umount", _libc.umount2(b".", _MNT_DETACH))
    try:
        os.chdir(plan.cwd)  # where the evaluator was: relative paths read the same (if shown)
    except OSError:
        os.chdir("/tmp")  # (the evaluator's folder is hidden)
    _libc.sethostname(b"wpb-policy", 10)


def _point(where: str, folder: bool) -> None:
    """A mount point at ``where`` in the new root (always on one of its tmpfs, never in a bind)."""
    os.makedirs(os.path.dirname(where), 0o755, exist_ok=True)
    if folder:
        os.makedirs(where, 0o755, exist_ok=True)
    elif not os.path.exists(where):
        os.close(os.open(where, os.O_CREAT | os.O_WRONLY, 0o644))


def _mount_points(under: str) -> list[str]:
    """The mount points at or under ``under``, from the kernel's table (octal escapes undone)."""
    with open("/old/proc/self/mountinfo", encoding="utf-8") as handle:
        points = [line.split()[4] for line in handle]
    points = [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), p) for p in points]
    return sorted({p for p in points if _inside(p, under)}, key=len)


def _settle(plan: Plan, keep: Sequence[int], out_w: int, err_w: int) -> None:
    """The policy's process, in its new root: drop every privilege, set the limits, and keep
    nothing of the evaluator's (descriptors, environment, command line)."""
    # No capability left, and no way to get one back (not even by exec).
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text()) if os.path.exists("/proc/sys/kernel/cap_last_cap") else 63
    for cap in range(last + 1):
        _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    _call("prctl", _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _call("capset", _syscall("capset", header, data))
    _not_dumpable()
    sandbox = plan.sandbox
    for limit, value in (
        (resource.RLIMIT_AS, sandbox.memory_bytes),
        (resource.RLIMIT_CPU, sandbox.cpu_seconds),
        (resource.RLIMIT_NPROC, sandbox.processes),
        (resource.RLIMIT_FSIZE, sandbox.file_bytes),
    ):
        if value is not None:
            # CPU: SIGXCPU at the soft limit for the processes it starts, SIGKILL a second later.
            hard = value + 1 if limit == resource.RLIMIT_CPU else value
            resource.setrlimit(limit, (value, hard))
    # Descriptors: its pipe, and the relay for what it prints; nothing else of the evaluator's.
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    kept = sorted({0, 1, 2, *keep})
    for low, high in zip(kept, kept[1:] + [1 << 20], strict=True):
        os.closerange(low + 1, high)
    _forget_invocation()


def _forget_invocation() -> None:
    """Nothing of how the evaluator was started: its environment and its command line are
    emptied here, in Python and in the memory ``/proc/1/environ`` and ``cmdline`` read."""
    import multiprocessing
    import tempfile

    kept = {k: os.environ[k] for k in _KEPT_ENVIRONMENT if k in os.environ}
    os.environ.clear()  # (unsetenv: the C library's table too)
    try:
        import posix

        posix.environ.clear()  # the copy os.environ was made from
    except (ImportError, AttributeError):
        pass
    python = os.path.dirname(sys.executable)
    os.environ.update(
        kept, PATH=f"{python}:/usr/local/bin:/usr/bin:/bin", HOME="/tmp", TMPDIR="/tmp", USER="wpb-policy",
        LANG="C.UTF-8",
    )
    tempfile.tempdir = None
    sys.argv = ["wpb-policy"]
    multiprocessing.current_process().authkey = os.urandom(32)
    # The strings the kernel shows as /proc/1/cmdline and /proc/1/environ: this process's copy of
    # the fork server's, written over (the C library's pointers to them were let go above).
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    arg_start, arg_end, env_start, env_end = (int(v) for v in fields[45:49])
    name = b"wpb-policy\0"
    if arg_end - arg_start >= len(name):
        ctypes.memset(arg_start, 0, arg_end - arg_start)
        ctypes.memmove(arg_start, name, len(name))
    if env_end > env_start:
        ctypes.memset(env_start, 0, env_end - env_start)
    sys.dont_write_bytecode = True


# ------------------------------------------------------------------------------- availability
_PROBLEM: list[str | None] = []  # once per process: [reason or None]


def problem() -> str | None:
    """Why policies cannot be sandboxed here (one line), or None when they can: tried once per
    process by building a sandbox and checking from inside that it hides what it must."""
    if not _PROBLEM:
        _PROBLEM.append(_try())
    return _PROBLEM[0]


def _try() -> str | None:
    if sys.platform != "linux":
        return f"the sandbox needs Linux namespaces; this is {sys.platform}"
    if platform.machine() not in _SYSCALLS:
        return f"the sandbox knows the system calls of {', '.join(_SYSCALLS)}, not {platform.machine()}"
    start_fork_server()
    conn, child = CONTEXT.Pipe(duplex=True)
    process = CONTEXT.Process(target=_probe, args=(child, plan(Sandbox(), None)), name="wpb-sandbox-probe", daemon=True)
    process.start()
    child.close()
    try:
        conn.send_bytes(b"probe")
        if not conn.poll(60.0):
            return "the sandbox did not start within 60 s"
        reply = json.loads(conn.recv_bytes())
    except (EOFError, OSError) as error:
        return f"the sandbox's process ended before it answered ({type(error).__name__}; exit code {process.exitcode})"
    finally:
        conn.close()
        process.join(5.0)
        if process.is_alive():
            process.kill()
    return reply.get("error")


def _probe(conn: Any, plan: Plan) -> None:
    """In a sandbox of the default plan: answer whether it holds what it must."""
    enter(plan, [conn.fileno()])
    import socket

    conn.recv_bytes()
    problems = []
    others = sorted(p for p in os.listdir("/proc") if p.isdigit() and p != "1")
    if others:
        problems.append(f"/proc lists other processes ({', '.join(others)})")
    try:
        with socket.create_connection(("127.0.0.1", 9), timeout=1):
            problems.append("a socket connected")
    except OSError:
        pass
    if os.getuid() != _USER:
        problems.append(f"it runs as user {os.getuid()}")
    text = f"the sandbox does not hold: {'; '.join(problems)}" if problems else None
    conn.send_bytes(json.dumps({"error": text}).encode())
