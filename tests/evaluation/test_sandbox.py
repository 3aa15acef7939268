"""Attacks on the machine from a policy's process, and the sandbox that stops them.

In isolated evaluation each policy's process runs in a sandbox of Linux namespaces
(``wpb_gym.evaluation.isolated.sandbox``). Each test here is an attack a policy made from its own
process without one: reading the evaluator's command line under ``/proc`` (the seed, and so
the episodes), opening the episode files or the run folder, leaving a process behind that
rewrites ``results.csv`` once the run is over, reaching the network, exhausting the machine,
or running code from a model file outside. The policies report what they found in the reason
of their first WRITE (the action log carries it back). Tests that need the sandbox skip, saying
why, where the platform has none; the command-line tests run everywhere.
"""

from __future__ import annotations

import base64
import csv
import ctypes
import json
import os
import pickle
import re
import socket
import subprocess
import sys
import textwrap
import time
import zipfile
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agents.registry import make_agent
from wpb_gym.core.types import MemoryAction
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.episodes.jsonl import write_jsonl
from wpb_gym.evaluation.grid import PolicySpec, generated_refs, run_grid
from wpb_gym.evaluation.isolated import sandbox as sandboxing
from wpb_gym.evaluation.isolated.processes import fork_server_started
from wpb_gym.evaluation.isolated.sandbox import Sandbox
from wpb_gym.evaluation.referee import PolicyError, RunLimits
from wpb_gym.evaluation.runner import run_episode

EPISODE = generate_episode(make_config("default", length=12), seed=0, index=0)
SECRET = "--seed=424242"  # what an evaluator's command line would give away


@pytest.fixture
def sandboxed():
    why = sandboxing.problem()
    if why is not None:
        print(f"skipped: no sandbox on this platform: {why}")
        pytest.skip(f"no sandbox on this platform: {why}")


def _report(run: Any) -> dict[str, Any]:
    """What the policy found: the reason of the WRITE at its attack."""
    return json.loads(next(logged.action.reason for logged in run.actions if logged.action.reason))


class Hostile:
    """At timestep ``at``, ``attack()``; WRITE every step, that one with what it found."""

    track = "unprivileged"
    at = 0

    def __init__(self) -> None:
        self.name = type(self).__name__
        self.found: dict[str, Any] | None = None

    def select(self, step: Any, view: Any):
        if step.t == self.at:
            self.found = self.attack()
            yield MemoryAction.write(step, reason=json.dumps(self.found)[:1000])
            return
        yield MemoryAction.write(step)

    def attack(self) -> dict[str, Any]:
        raise NotImplementedError


def _try(call: Any) -> str:
    """``ok`` or the name of the error ``call()`` raised."""
    try:
        call()
    except OSError as error:
        return type(error).__name__
    return "ok"


# ------------------------------------------------------------------- the evaluator's processes
class ProcWalker(Hostile):
    """Read /proc/1/cmdline, walk /proc for every process and its ancestors, and look in each
    command line and environment for the evaluator's (the seed on it)."""

    def attack(self) -> dict[str, Any]:
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        secret, memory = False, 0
        for pid in pids:
            for name in ("cmdline", "environ"):
                try:
                    text = Path(f"/proc/{pid}/{name}").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                secret |= SECRET in text or "pytest" in text
            if pid != os.getpid():  # another process's memory
                memory += _try(lambda pid=pid: open(f"/proc/{pid}/mem", "rb").close()) == "ok"
        ancestors, pid = [], os.getpid()
        while pid > 0:  # up the tree as far as the process can see
            ancestors.append(pid)
            status = Path(f"/proc/{pid}/status").read_text()
            pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        return {
            "pids": pids[:10],
            "processes": len(pids),
            "ancestors": ancestors[:10],
            "secret": secret,
            "memory_opened": memory,
            "argv": SECRET in sys.argv,
            "environment": "WPB_SECRET" in os.environ,
        }


def test_a_policy_walking_proc_finds_no_evaluator_process_nor_its_command_line(sandboxed, monkeypatch):
    monkeypatch.setattr(sys, "argv", [*sys.argv, SECRET])
    monkeypatch.setenv("WPB_SECRET", SECRET)
    found = _report(run_episode(ProcWalker(), EPISODE, 2048, isolate=True))
    assert found["pids"] == [1] and found["processes"] == 1  # its own process alone: PID 1 of its namespace
    assert found["ancestors"] == [1]  # whose parent is out of sight
    assert found == {**found, "secret": False, "memory_opened": 0, "argv": False, "environment": False}
    # Without the sandbox the same policy finds the evaluator's command line (the attack, as it was).
    unsandboxed = _report(run_episode(ProcWalker(), EPISODE, 2048, isolate=True, sandbox=None))
    assert unsandboxed["secret"] and unsandboxed["processes"] > 1 and len(unsandboxed["ancestors"]) > 1


# ------------------------------------------------------------------- the held-out seed
_DIGITS = re.compile(rb"[0-9]{15,40}")


class SeedHunter:
    """Look everywhere a process can for the evaluator's seed: every process's command line and
    environment under ``/proc``, its own environment, the seed file whose path it was told
    (``wpb eval --seed-file`` is on the command line), and every readable byte of its own
    memory. It knows only what results publish of a seed, its fingerprint, and tests every run
    of digits it finds against it (a canary of its own proves the memory scan finds digits).
    It raises at its first step with what it found, which the evaluator's error carries out."""

    track = "unprivileged"
    name = "hunter"

    def __init__(self, seed_file: str, fingerprint: str) -> None:
        self.seed_file, self.fingerprint = seed_file, fingerprint
        self.canary = "".join(str(d) for d in (4, 0, 9, 6, 1, 7, 3, 5, 5, 8, 2, 1, 9, 0, 4, 7, 7, 3, 6))

    def matches(self, data: bytes) -> bool:
        from wpb_gym.cli.eval_settings import seed_fingerprint

        for run in set(_DIGITS.findall(data)):
            for width in range(15, min(len(run), 20) + 1):
                for start in range(len(run) - width + 1):
                    if seed_fingerprint(int(run[start:start + width])) == self.fingerprint:
                        return True
        return False

    def select(self, step: Any, view: Any):
        found = {"proc": [], "environment": False, "file": "ok", "memory": False}
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            for name in ("cmdline", "environ"):
                try:
                    if self.matches(Path(f"/proc/{pid}/{name}").read_bytes().replace(b"\0", b" ")):
                        found["proc"].append(f"{pid}/{name}")
                except OSError:
                    pass
        found["environment"] = self.matches(" ".join(f"{k}={v}" for k, v in os.environ.items()).encode())
        try:
            found["file"] = "read: seed found" if self.matches(Path(self.seed_file).read_bytes()) else "read"
        except OSError as error:
            found["file"] = type(error).__name__
        canary_seen, scanned = False, 0
        for chunk in _own_memory():
            scanned += len(chunk)
            canary_seen |= self.canary.encode() in chunk
            found["memory"] |= self.matches(chunk)
        found.update(canary=canary_seen, scanned_mb=scanned >> 20)
        raise RuntimeError("FOUND " + json.dumps(found))


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


def _own_memory():
    """Every readable mapping of this process, in pieces of 16 MB, read with
    ``process_vm_readv`` (a page that cannot be read fails the call, it does not kill the
    process; ``/proc/self/mem`` is closed to a process that is not dumpable)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    buffer = ctypes.create_string_buffer(1 << 24)
    with open("/proc/self/maps") as maps:
        regions = [line.split() for line in maps]
    for fields in regions:
        if "r" not in fields[1] or fields[-1] in ("[vvar]", "[vsyscall]", "[vvar_vclock]"):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        for at in range(start, end, 1 << 24):
            size = min(1 << 24, end - at)
            local, remote = _Iovec(ctypes.addressof(buffer), size), _Iovec(at, size)
            got = libc.process_vm_readv(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
            if got <= 0:
                break
            yield buffer.raw[:got]


def _hunt(monkeypatch, capsys, tmp_path: Path, seed_argv: list[str], fingerprint: str, *extra: str) -> dict:
    """What a SeedHunter found, run by ``wpb eval --isolate`` with ``seed_argv``."""
    from wpb_gym.cli import evaluation as cli_evaluation
    from wpb_gym.cli import main as wpb

    seed_file = next((arg for arg, before in zip(seed_argv[1:], seed_argv) if before == "--seed-file"), "/nowhere")
    hunter = PolicySpec("hunter", partial(SeedHunter, seed_file, fingerprint), "unprivileged")
    monkeypatch.setattr(cli_evaluation, "policy_specs", lambda *args, **kwargs: [hunter])
    argv = ["eval", "--agents", "last_kb", "--isolate", "--lengths", "12", "--episodes-per-condition", "1"]
    argv += ["--budgets", "2KB", "--max-seconds-per-step", "0", *seed_argv, *extra]
    capsys.readouterr()
    assert wpb([*argv, "--out", str(tmp_path / "run"), "--quiet"]) == 1
    err = capsys.readouterr().err
    match = re.search(r"FOUND (\{.*?\})", err)
    assert match, err
    return json.loads(match.group(1))


HELD_OUT = 8231675309123456789


def test_a_sandboxed_policy_finds_no_trace_of_a_seed_read_from_a_file(sandboxed, tmp_path, monkeypatch, capsys):
    from wpb_gym.cli.eval_settings import seed_fingerprint

    seed_file = tmp_path / "held_out_seed"
    seed_file.write_text(f"{HELD_OUT}\n", encoding="utf-8")
    found = _hunt(monkeypatch, capsys, tmp_path, ["--seed-file", str(seed_file)], seed_fingerprint(HELD_OUT))
    assert found["canary"] and found["scanned_mb"] > 50  # the scan reads memory, and finds digits there
    assert found == {**found, "proc": [], "environment": False, "memory": False}
    assert found["file"] in ("FileNotFoundError", "PermissionError")
    # Without the sandbox the same policy reads the file (the attack is real).
    monkeypatch.setattr(sandboxing, "problem", lambda: "user namespaces are switched off")
    unsandboxed = _hunt(monkeypatch, capsys, tmp_path / "weaker", ["--seed-file", str(seed_file)],
                        seed_fingerprint(HELD_OUT), "--accept-weaker-isolation")
    assert unsandboxed["file"] == "read: seed found"


def test_a_sandboxed_policy_finds_no_trace_of_a_seed_the_evaluator_drew(sandboxed, tmp_path, monkeypatch, capsys):
    import secrets

    from wpb_gym.cli.eval_settings import seed_fingerprint

    monkeypatch.setattr(secrets, "randbits", lambda bits: HELD_OUT)  # in the evaluator's process only
    found = _hunt(monkeypatch, capsys, tmp_path, ["--seed", "draw"], seed_fingerprint(HELD_OUT))
    assert found["canary"] and found == {**found, "proc": [], "environment": False, "memory": False}


# ------------------------------------------------------------------- the evaluator's files
class FileReader(Hostile):
    """Open each of ``paths`` (files read, folders listed)."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__()
        self.paths = paths

    def attack(self) -> dict[str, Any]:
        def read(path: str) -> None:
            if os.path.isdir(path):
                os.listdir(path)
            else:
                Path(path).read_bytes()

        return {path: _try(lambda path=path: read(path)) for path in self.paths}


def test_a_policy_opening_the_episode_file_or_the_run_folder_gets_an_error(sandboxed, tmp_path):
    episodes = tmp_path / "episodes.jsonl"
    write_jsonl(episodes, [EPISODE])
    run_folder = tmp_path / "run"
    run_folder.mkdir()
    (run_folder / "results.csv").write_text("policy,f1\n", encoding="utf-8")
    repository = Path(__file__).resolve().parents[2]
    paths = [
        str(episodes),
        str(run_folder),
        str(run_folder / "results.csv"),
        str(repository / "configs"),
        str(repository / "data"),
        str(repository / "pyproject.toml"),
        "/etc/passwd",
        "/etc/shadow",
        str(Path.home() / ".bashrc"),
    ]
    found = _report(run_episode(FileReader(paths), EPISODE, 2048, isolate=True))
    assert all(found[path] in ("FileNotFoundError", "PermissionError") for path in paths), found


def test_a_path_hidden_inside_what_a_policy_may_read_cannot_be_read(sandboxed, tmp_path):
    shared = tmp_path / "shared"
    (shared / "secret").mkdir(parents=True)
    (shared / "model.json").write_text("{}", encoding="utf-8")
    (shared / "episodes.jsonl").write_text("{}", encoding="utf-8")
    paths = [str(shared / "model.json"), str(shared / "episodes.jsonl"), str(shared / "secret")]
    walls = Sandbox(read_only=(str(shared),), hidden=(str(shared / "episodes.jsonl"), str(shared / "secret")))
    found = _report(run_episode(FileReader(paths), EPISODE, 2048, isolate=True, sandbox=walls))
    assert found == {paths[0]: "ok", paths[1]: "PermissionError", paths[2]: "PermissionError"}


# ------------------------------------------------------------------- a process left behind
def _named(name: bytes) -> None:
    ctypes.CDLL(None).prctl(15, name, 0, 0, 0)  # PR_SET_NAME: what /proc/PID/comm shows


class DoubleForker(Hostile):
    """Double-fork a grandchild (re-parented, in its own session) that sleeps, then keeps
    writing forged results into ``target`` for a few seconds."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target

    def attack(self) -> dict[str, Any]:
        child = os.fork()
        if child == 0:
            if os.fork() == 0:
                os.setsid()
                _named(b"wpb-grandchild")
                time.sleep(1.0)
                for _ in range(50):
                    try:
                        Path(self.target).write_text("policy,f1\nDoubleForker,1.0\n", encoding="utf-8")
                    except OSError:
                        pass
                    time.sleep(0.1)
            os._exit(0)
        os.waitpid(child, 0)
        return {"forked": True}


def _grandchildren() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and Path(f"/proc/{entry}/comm").read_text().strip() == "wpb-grandchild":
                found.append(int(entry))
        except OSError:
            pass  # ended meanwhile
    return found


def test_a_double_forked_grandchild_dies_with_the_policy_and_never_rewrites_results(sandboxed, tmp_path):
    results = tmp_path / "run" / "results.csv"
    results.parent.mkdir()
    results.write_text("policy,f1\nhonest,0.5\n", encoding="utf-8")
    before = results.read_text(encoding="utf-8")
    refs = generated_refs(["default"], [12], 1, seed=0)
    specs = [PolicySpec("forker", partial(DoubleForker, str(results)), "unprivileged")]
    rows = run_grid(refs, specs, (2048,), ("unprivileged",), isolate=True)
    assert [row["error"] for row in rows] == [""]
    time.sleep(2.5)  # past the grandchild's first attempt
    assert _grandchildren() == []
    assert results.read_text(encoding="utf-8") == before


# ------------------------------------------------------------------- the network
class Caller(Hostile):
    """Connect to ``port`` on the machine's loopback, and resolve a name."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port

    def attack(self) -> dict[str, Any]:
        def connect() -> None:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                pass

        return {"connect": _try(connect), "resolve": _try(lambda: socket.getaddrinfo("localhost", 80))}


def test_a_policy_that_opens_a_socket_cannot_connect(sandboxed):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        found = _report(run_episode(Caller(listener.getsockname()[1]), EPISODE, 2048, isolate=True))
        assert found["connect"] != "ok"
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing came through


# ------------------------------------------------------------------- what a policy prints
# A policy that writes a terminal's escape sequences (clear the screen, set the window's title,
# colour what follows) and a line that reads as wpb's own, on its standard output and error.
PRINTER = textwrap.dedent(
    """
    import sys
    import time

    from wpb_gym.core.types import MemoryAction


    class Printer:
        track = "unprivileged"
        name = "Printer"

        def select(self, step, view):
            if step.t == 1:
                print("\\x1b[2J\\x1b]0;pwned\\x07cleared\\n12 rows over 1 episodes -> runs/board/", flush=True)
                sys.stderr.write("\\x1b[31mred\\r\\n\\u202eno end")  # a line left open
                sys.stderr.flush()
            if step.t == 2:
                time.sleep(0.5)  # the open line is shown while the policy pauses
            yield MemoryAction.write(step)


    class Flooder(Printer):
        def select(self, step, view):
            if step.t == 1:
                for _ in range(15_000):  # 1.5 MB
                    print("x" * 99)
            yield MemoryAction.write(step)


    if __name__ == "__main__":
        from wpb_gym.episodes.generators.paper import generate_episode, make_config
        from wpb_gym.evaluation.runner import run_episode

        policy = Flooder() if sys.argv[1:] == ["flood"] else Printer()
        run_episode(policy, generate_episode(make_config("default", length=12), 0, 0), 2048, isolate=True)
        print("evaluator: done", flush=True)
    """
)


def test_a_policy_printing_escape_sequences_and_fake_lines_reaches_the_terminal_marked_and_escaped(sandboxed,
                                                                                                   tmp_path):
    # In a process of its own, so that the fork server (whose output the policy's relay
    # inherits) writes where this test reads.
    script = tmp_path / "printer.py"
    script.write_text(PRINTER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, timeout=300, check=True)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert "\x1b" not in out + err and "\x07" not in out + err and "\u202e" not in out + err and "\r" not in out + err
    assert out.splitlines() == [
        "[policy Printer] \\x1b[2J\\x1b]0;pwned\\x07cleared",
        "[policy Printer] 12 rows over 1 episodes -> runs/board/",
        "evaluator: done",
    ]
    assert [line for line in err.splitlines() if "Printer" in line] == [
        "[policy Printer] \\x1b[31mred",
        "[policy Printer] \\u202eno end",
    ]


def test_a_policy_printing_more_than_a_megabyte_is_cut_off_there_in_whole_lines(sandboxed, tmp_path):
    script = tmp_path / "printer.py"
    script.write_text(PRINTER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, str(script), "flood"], env=env, capture_output=True, timeout=300,
                          check=True)
    lines = done.stdout.decode().splitlines()
    assert lines[-1] == "evaluator: done" and lines[-2].startswith("wpb: policy Printer printed more than 1,048,576")
    printed = lines[:-2]
    assert all(line.startswith("[policy Printer] x") for line in printed)
    # Exactly the first MiB: every line and its newline, the last line cut short (without one).
    assert sum(len(line) - len("[policy Printer] ") + 1 for line in printed) - 1 == 1 << 20
    assert printed[-1] == "[policy Printer] " + "x" * ((1 << 20) % 100)


class Raiser(Hostile):
    """Raises an exception whose message holds escape sequences and a line that reads as wpb's."""

    at = 1

    def attack(self) -> dict[str, Any]:
        raise ValueError("\x1b[2Jboom\nwpb eval: 12 rows over 1 episodes -> runs/board/")


def test_the_traceback_of_a_policy_is_quoted_as_its_own_text(sandboxed):
    with pytest.raises(PolicyError) as raised:
        run_episode(Raiser(), EPISODE, 2048, isolate=True)
    head, *quoted = str(raised.value).splitlines()
    assert head == "policy 'Raiser' at t=1: raised in its process:"
    assert quoted and all(line.startswith("[policy Raiser] ") for line in quoted), quoted
    assert "\x1b" not in str(raised.value) and "[policy Raiser] ValueError: \\x1b[2Jboom" in quoted
    assert "[policy Raiser] wpb eval: 12 rows over 1 episodes -> runs/board/" in quoted


def test_what_a_policy_prints_is_cut_into_marked_lines_without_control_characters():
    from wpb_gym.evaluation.isolated.output import LONGEST_LINE, PolicyLines, quoted

    lines = PolicyLines("p\x1b")
    assert lines.feed(b"a\x1b[1m") == b""  # a line is shown once it ends
    assert lines.feed(b"b\r\nc\x00\xff\n") == b"[policy p\\x1b] a\\x1b[1mb\n[policy p\\x1b] c\\x00\xef\xbf\xbd\n"
    long = lines.feed(b"x" * (2 * LONGEST_LINE + 5))
    assert long.count(b"\n") == 2 and long.startswith(b"[policy p\\x1b] xxx")
    assert lines.end() == b"[policy p\\x1b] xxxxx\n" and lines.end() == b""
    assert quoted("p", "a\x1b\n\u2028b") == "[policy p] a\\x1b\n[policy p] \\u2028b"


# ------------------------------------------------------------------- resource limits
class Hog(Hostile):
    """At timestep 2, exhaust one resource: ``memory`` (4 GB at once), ``processes`` (fork
    until refused), ``file`` (a 2 MiB file) or ``cpu`` (spin)."""

    at = 2

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def attack(self) -> dict[str, Any]:
        if self.what == "memory":
            hog = bytearray(4 << 30)
            return {"allocated": len(hog)}
        if self.what == "processes":
            children = []
            try:
                for _ in range(200):
                    child = os.fork()
                    if child == 0:
                        time.sleep(30)
                        os._exit(0)
                    children.append(child)
            except OSError as error:
                return {"forked": len(children), "error": type(error).__name__}
            return {"forked": len(children), "error": None}
        if self.what == "file":
            with open("/tmp/big", "wb") as handle:
                return {"file": _try(lambda: handle.write(b"x" * (2 << 20)) and handle.flush())}
        while True:  # cpu
            pass


def test_a_policy_that_allocates_past_its_memory_limit_has_its_run_stopped_and_recorded(sandboxed):
    run = run_episode(Hog("memory"), EPISODE, 2048, isolate=True)
    assert run.error is not None and run.error.t == 2 and "ran out of memory" in str(run.error)
    assert run.metrics.write_actions == 2  # the evaluator went on; the rest of the run is SKIP
    honest = run_episode(Hog("file"), EPISODE, 2048, isolate=True)  # the next process is whole
    assert honest.error is None


def test_a_policy_cannot_fork_past_its_process_limit(sandboxed):
    found = _report(run_episode(Hog("processes"), EPISODE, 2048, isolate=True, sandbox=Sandbox(processes=8)))
    assert found["error"] == "BlockingIOError" and found["forked"] < 8


def test_a_policy_cannot_write_a_file_past_its_size_limit(sandboxed):
    found = _report(run_episode(Hog("file"), EPISODE, 2048, isolate=True, sandbox=Sandbox(file_bytes=1 << 20)))
    assert found["file"] == "OSError"  # EFBIG


def test_a_policy_past_its_cpu_time_is_killed_with_a_named_error(sandboxed):
    limits = RunLimits(max_seconds_per_step=None)  # nothing but the sandbox stops it
    with pytest.raises(PolicyError, match=r"Hog.*t=2.*more than the 1 s of CPU time its sandbox allows"):
        run_episode(Hog("cpu"), EPISODE, 2048, isolate=True, limits=limits, sandbox=Sandbox(cpu_seconds=1))


# ------------------------------------------------------------------- code in a model file
class _Payload:
    """Unpickled, runs ``code``: what an SB3 zip's pickled members can do."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        return exec, (self.code,)


_PAYLOAD = """
import os
try:
    open(MARKER, 'w').write('ran outside the sandbox')
except OSError:
    pass
os._exit(42 if [p for p in os.listdir('/proc') if p.isdigit()] == ['1'] else 43)
"""


def test_a_model_file_whose_unpickling_runs_code_runs_it_only_inside_the_sandbox(sandboxed, tmp_path, capsys):
    from wpb_gym.cli import main as wpb

    marker = tmp_path / "marker"
    code = _PAYLOAD.replace("MARKER", repr(str(marker)))
    serialized = base64.b64encode(pickle.dumps(_Payload(code))).decode()
    model = tmp_path / "evil.zip"
    with zipfile.ZipFile(model, "w") as archive:  # SB3's format: a "data" member of JSON
        archive.writestr("data", json.dumps({"policy_class": {":type:": "<class 'type'>", ":serialized:": serialized}}))
    argv = ["eval", "--agents", f"sb3:{model}", "--isolate", "--lengths", "12", "--episodes-per-condition", "1"]
    assert wpb([*argv, "--budgets", "2KB", "--out", str(tmp_path / "run"), "--quiet"]) != 0
    # It ran (its exit code says what it saw: its own process alone) while the model loaded...
    assert "ended unexpectedly (exit code 42" in capsys.readouterr().err
    assert not marker.exists()  # ... and what it wrote stayed in the sandbox


def test_a_real_model_loads_and_scores_alike_in_the_sandbox(sandboxed, tiny_sb3_model):
    # Its file and the .env.json beside it are all of the machine's files it may read.
    refs = generated_refs(["default"], [20], 2, seed=0)
    specs = [PolicySpec("sb3", partial(make_agent, "sb3", path=str(tiny_sb3_model)), "privileged")]
    in_process = run_grid(refs, specs, (2048,), ("privileged",))
    sandboxed_rows = run_grid(refs, specs, (2048,), ("privileged",), isolate=True, sandbox=Sandbox())
    assert in_process == sandboxed_rows and all(row["error"] == "" for row in sandboxed_rows)


def test_an_exported_policy_loads_in_the_sandbox_and_scores_as_its_model(sandboxed, tiny_sb3_model, tmp_path):
    from agents.exported.export import export_sb3

    export_sb3(tiny_sb3_model, tmp_path / "exported", samples=100, episodes=1)
    refs = generated_refs(["default"], [20], 2, seed=0)
    track = ("privileged",)
    model = [PolicySpec("m", partial(make_agent, "sb3", path=str(tiny_sb3_model)), "privileged")]
    exported = [PolicySpec("m", partial(make_agent, "policy", path=str(tmp_path / "exported")), "privileged")]
    sandboxed_rows = run_grid(refs, exported, (2048,), track, isolate=True, sandbox=Sandbox())
    assert sandboxed_rows == run_grid(refs, model, (2048,), track) and all(r["error"] == "" for r in sandboxed_rows)


# ------------------------------------------------------------------- what the command says
def _eval(tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    from wpb_gym.cli import main as wpb

    out = tmp_path / "run"
    argv = ["eval", "--agents", "last_kb", "--lengths", "12", "--episodes-per-condition", "1", "--budgets", "2KB"]
    code = wpb([*argv, *extra, "--out", str(out), "--quiet"])
    run = json.loads((out / "run.json").read_text(encoding="utf-8")) if (out / "run.json").exists() else {}
    return code, run


def test_run_json_records_the_isolation_the_agents_had(sandboxed, tmp_path):
    assert _eval(tmp_path / "a", "--isolate")[1]["isolation"] == "sandbox: namespaces"
    assert _eval(tmp_path / "b")[1]["isolation"] == "in process"


def test_isolate_refuses_a_run_folder_inside_what_the_agents_may_read(sandboxed, capsys):
    import wpb_gym
    from wpb_gym.cli import main as wpb

    out = Path(wpb_gym.__file__).parent / "run_of_a_test"  # inside a package the agents read
    argv = ["eval", "--agents", "last_kb", "--lengths", "12", "--episodes-per-condition", "1", "--isolate"]
    assert wpb([*argv, "--out", str(out), "--quiet"]) == 2 and not out.exists()
    assert f"{out} is to be hidden from the policy, but lies inside" in capsys.readouterr().err


def test_without_namespaces_isolate_refuses_unless_weaker_isolation_is_accepted(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sandboxing, "problem", lambda: "user namespaces are switched off")
    code, run = _eval(tmp_path / "a", "--isolate")
    said = capsys.readouterr().err
    assert code != 0 and run == {}
    assert "cannot sandbox the agents' processes here (user namespaces are switched off)" in said
    assert "--accept-weaker-isolation" in said and len(said.strip().splitlines()) == 1
    code, run = _eval(tmp_path / "b", "--isolate", "--accept-weaker-isolation")
    said = capsys.readouterr().err
    assert code == 0 and run["isolation"] == "process only"
    assert "note: --isolate without a sandbox (user namespaces are switched off)" in said
    with open(tmp_path / "b" / "run" / "results.csv", newline="") as handle:
        assert {row["policy"] for row in csv.DictReader(handle)} == {"last_kb"}


def test_the_sandbox_limits_are_settings_of_wpb_eval(tmp_path):
    import argparse

    from wpb_gym.cli.eval_settings import EVAL, sandbox_of

    parser = argparse.ArgumentParser()
    EVAL.add_to(parser)
    flags = ["--agents", "last_kb", "--out", str(tmp_path), "--sandbox-memory", "1GB", "--sandbox-cpu-seconds", "0"]
    walls = sandbox_of(EVAL.resolve(parser.parse_args(flags)), ("/x",))
    assert walls.memory_bytes == 1 << 30 and walls.cpu_seconds is None and walls.hidden == ("/x",)
    assert (walls.processes, walls.file_bytes) == (Sandbox().processes, Sandbox().file_bytes)


# ------------------------------------------------------------------- what a sandbox holds
def test_a_sandbox_shows_a_models_files_and_covers_what_is_hidden_inside_what_it_shows(tmp_path):
    shared = tmp_path / "shared"
    (shared / "run").mkdir(parents=True)
    for name in ("model.zip", "model.env.json", "other.zip"):
        (shared / name).write_text("", encoding="utf-8")
    walls = Sandbox(read_only=(str(shared),), hidden=(str(shared / "run"),))
    factory = partial(make_agent, "sb3", path=str(shared / "model.zip"))
    plan = sandboxing.plan(walls, factory)
    bound = dict(plan.binds)
    assert str(shared) in bound and str(shared / "model.zip") not in bound  # (inside a folder shown)
    assert plan.hidden == (str(shared / "run"),)
    alone = dict(sandboxing.plan(Sandbox(), factory).binds)
    assert {str(shared / "model.zip"), str(shared / "model.env.json")} <= set(alone)
    assert str(shared / "other.zip") not in alone and str(shared) not in alone
    hidden_model = dict(sandboxing.plan(Sandbox(hidden=(str(shared),)), factory).binds)
    assert not any(path.startswith(str(shared)) for path in hidden_model)  # hidden is never shown
    with pytest.raises(ValueError, match="whole file system"):
        sandboxing.plan(Sandbox(read_only=("/",)), factory)
    with pytest.raises(ValueError, match="memory_bytes"):
        Sandbox(memory_bytes=0)


def test_a_symlink_beside_a_model_file_shows_the_policy_no_file_outside_its_folder(tmp_path):
    # A submission's folder holding model.zip and model.leak -> a file elsewhere on the machine:
    # the model's code (it unpickles in the sandbox) could read that file as /its/own/path.
    (tmp_path / "operator").mkdir()
    secret = tmp_path / "operator" / "secret.txt"
    secret.write_text("OPERATOR SECRET", encoding="utf-8")
    sub = tmp_path / "sub"
    sub.mkdir()
    for name in ("model.zip", "model.env.json", "other.txt", "*.zip"):
        (sub / name).write_text("", encoding="utf-8")
    (sub / "model.leak").symlink_to(secret)
    (sub / "model.alias.json").symlink_to(sub / "model.env.json")  # a link within the folder stays
    def shown(model: str) -> set[str]:
        return {source for _, source in sandboxing.plan(Sandbox(), partial(make_agent, "sb3", path=model)).binds}

    bound = shown(str(sub / "model.zip"))
    assert str(secret) not in bound and str(sub / "model.leak") not in bound
    assert {str(sub / "model.zip"), str(sub / "model.env.json")} <= bound
    # A stem is a name, not a glob pattern: a model named '*.zip' shows no other file beside it.
    starred = shown(str(sub / "*.zip"))
    assert str(sub / "*.zip") in starred
    assert str(sub / "other.txt") not in starred and str(sub / "model.zip") not in starred


def test_the_documented_limits_are_the_sandboxs_defaults():
    text = (Path(__file__).resolve().parents[2] / "docs" / "evaluation-integrity.md").read_text(encoding="utf-8")
    walls = Sandbox()
    assert f"| address space | {walls.memory_bytes >> 30} GB | `--sandbox-memory` |" in text
    assert f"| {walls.cpu_seconds:,} s | `--sandbox-cpu-seconds` |" in text
    assert f"| {walls.processes} | `--sandbox-processes` |" in text
    assert f"| {walls.file_bytes >> 20} MB | `--sandbox-file-size` |" in text
    assert f"a private, writable `/tmp` ({walls.tmp_bytes >> 20} MB of memory)" in text
    assert f"up to {sandboxing._MAX_OUTPUT >> 20} MB per process" in text


def test_an_isolated_grid_on_worker_processes_after_the_fork_server_started_here():
    # Trying the sandbox (or any isolated run) starts a fork server in this process, which a
    # forked worker can neither use nor replace: the grid's workers are spawned instead.
    run_episode(make_agent("last_kb"), EPISODE, 2048, isolate=True)
    assert fork_server_started()
    refs = generated_refs(["default"], [20], 4, seed=0)
    specs = [PolicySpec(n, partial(make_agent, n), "unprivileged") for n in ("last_kb", "fifo_store_all")]
    on_workers = run_grid(refs, specs, (1024,), ("unprivileged",), jobs=4, isolate=True)
    assert on_workers == run_grid(refs, specs, (1024,), ("unprivileged",))


class LinkReader(Hostile):
    """Read a file through a linked folder and one bound beneath it."""

    folder = ""

    def attack(self) -> dict[str, Any]:
        linked = Path(self.folder) / "linked"
        return {"top": (linked / "top.txt").read_text(), "deep": (linked / "sub" / "deep.txt").read_text()}


def test_a_path_shown_through_a_linked_folder_and_one_beneath_it_are_both_read(sandboxed, tmp_path):
    # A .venv linked in from elsewhere is such a folder: its site-packages lie beneath the link.
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (real / "top.txt").write_text("top")
    (real / "sub" / "deep.txt").write_text("deep")
    (tmp_path / "linked").symlink_to(real)
    walls = Sandbox(read_only=(str(tmp_path / "linked"), str(tmp_path / "linked" / "sub")))
    made = sandboxing.plan(walls, None)
    assert (str(tmp_path / "linked"), str(real)) in made.links
    assert all(not target.startswith(str(tmp_path / "linked")) for target, _ in made.binds)
    policy = LinkReader()
    policy.folder = str(tmp_path)
    run = run_episode(policy, EPISODE, 4096, isolate=True, sandbox=walls)
    assert _report(run) == {"top": "top", "deep": "deep"}
