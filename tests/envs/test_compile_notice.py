"""The note the vector env writes while numba compiles its core: once, only when a compilation
runs past the threshold, never when numba loads from its cache."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba.core import event

from wpb_gym.envs.fast.compile_cache import CompileNotice

PACKAGE = "wpb_notice_probe"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Timers:
    """Timers that fire when the test says, not on another thread."""

    def __init__(self) -> None:
        self.started: list[list] = []  # [seconds, callback, cancelled]

    def __call__(self, seconds, callback):
        entry = [seconds, callback, False]
        self.started.append(entry)

        class Handle:
            def cancel(self) -> None:
                entry[2] = True

        return Handle()

    def fire(self, i: int = -1) -> None:
        _, callback, cancelled = self.started[i]
        if not cancelled:
            callback()


class Dispatcher:
    def __init__(self, module: str, name: str) -> None:
        def function():
            pass

        function.__module__, function.__qualname__ = module, name
        self.py_func = function


def compile_event(status, module=f"{PACKAGE}.kernel", name="step_batch"):
    return event.Event("numba:compile", status, data={"dispatcher": Dispatcher(module, name)})


def start(notice, **where):
    notice.notify(compile_event(event.EventStatus.START, **where))


def end(notice, **where):
    notice.notify(compile_event(event.EventStatus.END, **where))


@pytest.fixture
def probe():
    clock, timers, said = Clock(), Timers(), []
    notice = CompileNotice(PACKAGE, Path("/cache/numba-x"), after=1.0, write=said.append, clock=clock, timer=timers)
    return notice, clock, timers, said


def test_a_compilation_past_a_second_is_named_once_with_its_cache(probe):
    notice, clock, _, said = probe
    start(notice)
    clock.now = 0.5
    start(notice, module=f"{PACKAGE}.memory", name="store")  # a callee, nested
    end(notice, module=f"{PACKAGE}.memory", name="store")
    assert said == []
    clock.now = 1.2
    start(notice, module=f"{PACKAGE}.memory", name="remove")
    assert len(said) == 1 and said[0].startswith("wpb_gym: numba is compiling the env's compiled core")
    assert "kernel.step_batch first" in said[0] and "/cache/numba-x" in said[0]
    end(notice, module=f"{PACKAGE}.memory", name="remove")
    end(notice)
    clock.now = 5.0
    start(notice, name="start_batch")  # a later compilation of the same process: said already
    clock.now = 9.0
    start(notice, module=f"{PACKAGE}.memory", name="store")
    assert len(said) == 1


def test_the_timer_says_it_for_a_function_with_no_nested_compilation(probe):
    notice, clock, timers, said = probe
    start(notice)
    assert [seconds for seconds, _, _ in timers.started] == [1.0]
    clock.now = 1.0
    timers.fire()
    assert len(said) == 1
    end(notice)


def test_a_short_compilation_says_nothing_and_its_timer_is_cancelled(probe):
    notice, clock, timers, said = probe
    start(notice)
    clock.now = 0.3
    end(notice)
    assert timers.started[0][2]  # cancelled
    timers.fire()
    clock.now = 10.0  # time between compilations does not count
    start(notice, name="start_batch")
    clock.now = 10.4
    end(notice, name="start_batch")
    assert said == []


def test_functions_it_compiles_from_another_package_are_named_too():
    clock, said = Clock(), []
    notice = CompileNotice(PACKAGE, Path("/cache/numba-x"), after=1.0, write=said.append, clock=clock,
                           timer=Timers(), also=("generators.paper_structure",))
    start(notice, module="generators.paper_structure", name="play")
    clock.now = 1.5
    start(notice, module="generators.paper_structure", name="nested")
    assert len(said) == 1 and "paper_structure.play first" in said[0]


def test_the_core_compiles_the_generators_own_loops_and_names_them():
    from wpb_gym.envs.fast import compile_cache, contract_episodes, paper_episodes
    from wpb_gym.episodes.generators import contract_structure, paper_structure

    assert paper_episodes.compiled_play.py_func is paper_structure.play
    assert contract_episodes.compiled_play.py_func is contract_structure.play
    assert contract_episodes.compiled_take.py_func is contract_structure.take_names
    for module in (paper_structure, contract_structure):
        assert module.__name__ in compile_cache.COMPILED_FROM_ELSEWHERE
        # An edit of the module compiles the core afresh.
        assert Path(module.__file__) in compile_cache.COMPILED_SOURCES


def test_compilations_of_other_packages_are_not_its_business(probe):
    notice, clock, timers, said = probe
    for module in ("numba.np.arrayobj", "wpb_notice_probe_other", "user_code"):
        start(notice, module=module)
        clock.now += 5.0
        start(notice, module=module, name="nested")
    assert said == [] and timers.started == []


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_numba_tells_it_when_it_compiles_and_not_when_it_loads_from_its_cache(tmp_path, monkeypatch):
    from numba.core import config

    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "probe_source.py"
    source.write_text("from numba import njit\n\n\n@njit(cache=True)\ndef twice(x):\n    return 2 * x\n")
    said = []
    notice = CompileNotice(PACKAGE, tmp_path, after=0.0, write=said.append)  # after 0 s: at its start
    event.register("numba:compile", notice)
    try:
        first = _load(source, f"{PACKAGE}.first")
        assert first.twice(3) == 6 and len(said) == 1 and "first.twice first" in said[0]
        assert first.twice(4) == 8 and len(said) == 1
        notice.said = False  # as a new process would be
        second = _load(source, f"{PACKAGE}.second")  # the same source: numba loads it from its cache
        assert second.twice(5) == 10 and said == [said[0]]
        assert second.twice.stats.cache_hits
        other = _load(source, "someone_else.probe")
        other.twice(2.5)  # compiles (a new signature): not ours
        assert len(said) == 1
    finally:
        event.unregister("numba:compile", notice)
        for name in (f"{PACKAGE}.first", f"{PACKAGE}.second", "someone_else.probe"):
            sys.modules.pop(name, None)


def test_a_module_imported_on_its_own_caches_in_the_folder_keyed_on_all_sources(tmp_path):
    # numba's own folder is keyed on one file's stamp: code cached there by a module imported
    # before the core outlived edits of its callees in other files, and ran with stale sizes.
    script = ("from wpb_gym.envs.fast import paper_episodes, compile_cache\n"
              "paper_episodes.state_sizes(3, 2, 2)\n"
              "print(compile_cache.cache_folder())\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "NUMBA_DISABLE_JIT": "0"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    written = sorted(tmp_path.rglob("*.nbi"))
    assert written and folder.parent == tmp_path
    assert [path for path in written if folder not in path.parents] == []
