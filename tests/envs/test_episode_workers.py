"""Episode workers (``episode_workers=k``): the next made episode of each sub-env prepared in
other processes, taken at its reset only if it is the one chosen. Whatever the workers do,
the vector env must play exactly what single envs play."""

from __future__ import annotations

import faulthandler
import fcntl
import os
import pickle
import select
import signal
import sys
import time
import warnings
from multiprocessing.connection import Connection
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from test_vector_env import same

import wpb_gym  # noqa: F401  (registers the ids)
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.vector import WritePolicyBenchVectorEnv
from wpb_gym.episodes.generators.contracts import NAMES_BEFORE_NUMBERING
from python_path import python_env

# The core compiles the episodes of the paper's four regimes and of the contract regimes without
# text from their draws, and makes every other generated episode: those with sections or guides,
# and contract ones whose endpoints may have more names than the word pairs give (``NUMBERED``).
# The tests play made ones.
PAPER_TEXT = {"regime": "default", "doc_prob": 0.3, "migration_guides": True}
CONTRACT_TEXT = {"regime": "contract_mix"}
MADE = [PAPER_TEXT, {"regime": "burst_redundancy", "doc_prob": 0.3}, CONTRACT_TEXT]
NUMBERED = {"regime": "breaking", "min_params": 1, "max_params": NAMES_BEFORE_NUMBERING + 1}
SMALL = {"length": 40, "api_pool": 6, "budget_bytes": 1500, "dense_reward": True}



def _pair(n: int, mode=AutoresetMode.NEXT_STEP, **kwargs):
    return _pair_with(1, n, mode, **kwargs)


def _pair_with(workers: int, n: int, mode=AutoresetMode.NEXT_STEP, **kwargs):
    vector = WritePolicyBenchVectorEnv(n, autoreset_mode=mode, episode_workers=workers, **kwargs)
    sync = SyncVectorEnv([lambda: python_env(**kwargs) for _ in range(n)], autoreset_mode=mode)
    return vector, sync


def _step_both(vector, sync, rng, settle: bool = True):
    """One step of both with the same random valid actions (after the workers finished, if
    ``settle``); returns Sync's outcome."""
    if settle and vector.core.workers is not None:
        vector.core.workers.settle()
    actions = np.array([rng.choice(np.flatnonzero(row)) for row in vector.action_masks()])
    got, want = vector.step(actions), sync.step(actions)
    same(got, want)
    return want


def _reset_both(vector, sync, **kwargs) -> None:
    same(vector.reset(**kwargs), sync.reset(**kwargs))


def _ended(vector, sync, seed: int, steps: int) -> int:
    """Reset both with ``seed`` and play them alike for ``steps`` steps; the episodes that ended."""
    _reset_both(vector, sync, seed=seed)
    rng, ended = np.random.default_rng(seed), 0
    for _ in range(steps):
        ended += int(_step_both(vector, sync, rng)[2].sum())
    return ended


def _played(n: int, made: dict, seed: int, steps: int, workers: int = 1, **kwargs):
    """A vector env with episode workers and its SyncVectorEnv, reset with ``seed`` and played
    alike for ``steps`` steps (every reset prepared), and the actions' generator."""
    vector, sync = _pair_with(workers, n, **made, **SMALL, **kwargs)
    _reset_both(vector, sync, seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        _step_both(vector, sync, rng)
    return vector, sync, rng


@pytest.mark.parametrize("made", MADE)
@pytest.mark.parametrize("track", ["unprivileged", "privileged"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_prepared_episodes_play_as_the_single_envs(made, track, mode):
    vector, sync = _pair(3, mode, track=track, **made, **SMALL)
    ended = _ended(vector, sync, seed=11, steps=260)
    workers = vector.core.workers
    # Every autoreset found its episode prepared: the first episodes were chosen before any wish.
    assert ended >= 6 and workers.served == ended and workers.asked == ended + 3, (ended, workers.asked)
    vector.close()


@pytest.mark.parametrize("track", ["unprivileged", "privileged"])
def test_the_query_tiers_episodes_are_prepared_and_play_as_the_single_envs(track):
    knobs = {"regime": "queries_hard", "endpoints": 12, "families": 3, "length": 60, "checkpoint_interval": 10,
             "queries_per_checkpoint": 10, "summary_max_bytes": 600, "budget_bytes": 1500, "track": track}
    vector, sync = _pair(3, **knobs)
    ended = _ended(vector, sync, seed=5, steps=200)
    assert ended >= 6 and vector.core.workers.served == ended
    vector.close()


@pytest.mark.parametrize("limit", [{"write_time": "total=4,per_write=1,per_kb=2"}, {"kind_budgets": "endpoint=20%"},
                                   {"compression": "credit=0.5"}])
def test_episodes_prepared_under_limits_play_as_the_single_envs(limit):
    # The workers start each episode's reward function under the limits, as the core does
    # (with these, U*(B) is not the byte budget's alone).
    vector, sync = _pair(2, **CONTRACT_TEXT, **SMALL, **limit, reward={"f1": 0.5, "utility": 0.5})
    ended = _ended(vector, sync, seed=2, steps=200)
    assert ended >= 6 and vector.core.workers.served == ended
    vector.close()


def test_large_contract_episodes_are_prepared_and_play_as_the_single_envs():
    vector, sync, rng = _played(2, NUMBERED, seed=3, steps=90, track="privileged")
    assert vector.core.workers.served > 0
    vector.close()


def test_seeded_resets_options_and_reads_fall_back_alike():
    """A wish is only a guess: a seeded reset, options, or a step taken before the worker
    finished leave the core to prepare the episode itself, alike; reading a sub-env changes nothing."""
    vector, sync = _pair(3, **CONTRACT_TEXT, **SMALL)
    _reset_both(vector, sync, seed=3)
    rng = np.random.default_rng(3)
    for step in range(300):
        if step == 60:  # seeded: every wish was made for the unseeded sequence
            _reset_both(vector, sync, seed=99)
        if step == 120:
            _reset_both(vector, sync, options={"regime": "reverts", "budget_bytes": 900,
                                               "reset_mask": np.array([True, False, True])})
        if step == 130:  # the episode wished for, at another budget
            vector.core.workers.settle()
            _reset_both(vector, sync, options={"budget_bytes": 700, "reset_mask": np.array([False, True, False])})
        if step in (150, 151):
            assert vector.get_attr("t") == sync.get_attr("t")
        if step == 200:  # reading a sub-env's memory changes nothing
            assert vector.sub_env(1).store.timesteps() == sync.envs[1].store.timesteps()
        _step_both(vector, sync, rng, settle=step % 3 != 0)
    workers = vector.core.workers
    assert 0 < workers.served < workers.asked, (workers.served, workers.asked)
    vector.close()


def test_a_worker_that_dies_leaves_the_core_preparing_alike():
    vector, sync, rng = _played(2, PAPER_TEXT, seed=8, steps=60)
    workers = vector.core.workers
    assert workers.served > 0 and len(workers.processes) == 1
    workers.processes[0].kill()
    workers.processes[0].wait()
    with pytest.warns(RuntimeWarning, match="an episode worker stopped") as said:
        for _ in range(200):
            _step_both(vector, sync, rng, settle=False)
    assert [warning.filename for warning in said] == [__file__]  # it names the caller's line
    served, asked = workers.served, workers.asked
    assert workers.processes == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing more is said
        for _ in range(200):
            _step_both(vector, sync, rng, settle=False)
    assert workers.processes == [] and workers.served == served and workers.asked > asked  # none started again
    vector.close()


def test_the_failure_is_said_once_after_the_step_so_a_warning_made_an_error_leaves_the_env_whole():
    vector, sync, rng = _played(2, CONTRACT_TEXT, seed=5, steps=60, track="privileged")
    vector.core.workers.processes[0].kill()
    raised = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(250):
            actions = np.array([rng.choice(np.flatnonzero(row)) for row in vector.action_masks()])
            try:
                got = vector.step(actions)
            except RuntimeWarning as warning:
                assert "an episode worker stopped" in str(warning)
                raised += 1
                sync.step(actions)  # the vector env stepped all the same
                continue
            same(got, sync.step(actions))
    assert raised == 1
    vector.close()


def test_a_forked_child_leaves_its_parents_workers_running():
    vector, sync, rng = _played(2, PAPER_TEXT, seed=6, steps=30)
    process = vector.core.workers.processes[0]
    child = os.fork()
    if child == 0:  # the child talks to the workers: it lets its parent's go, closing only its own pipes
        workers = vector.core.workers
        workers.pump()
        os._exit(0 if workers.processes == [] and workers._finalizer is None else 1)
    assert os.waitpid(child, 0)[1] == 0
    served = vector.core.workers.served
    for _ in range(100):
        _step_both(vector, sync, rng)
    assert process.poll() is None and vector.core.workers.served > served
    vector.close()


def test_the_worker_imports_this_package_not_one_in_the_working_directory(tmp_path, monkeypatch):
    shadow = tmp_path / "wpb_gym"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the shadow package was imported')\n")
    monkeypatch.chdir(tmp_path)
    vector, sync = _pair(2, **PAPER_TEXT, **SMALL)
    _reset_both(vector, sync, seed=7)
    rng = np.random.default_rng(7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(120):
            _step_both(vector, sync, rng)
    assert vector.core.workers.served > 0
    vector.close()


def test_an_installed_package_is_not_put_ahead_of_the_standard_library(tmp_path):
    """Only a checkout's folder goes on the worker's PYTHONPATH (it comes first there): an
    installed package's site-packages is on the worker's path already."""
    import site

    from wpb_gym.envs.fast.episode_workers import _in_site_packages

    assert _in_site_packages(Path(site.getsitepackages()[0]).resolve())
    assert not _in_site_packages(tmp_path)


def test_a_worker_of_another_package_is_refused(monkeypatch):
    from wpb_gym.envs.fast import episode_workers

    monkeypatch.setattr(episode_workers, "_PACKAGE", episode_workers._PACKAGE.parent / "wpb_gym_elsewhere")
    vector, sync = _pair(2, **CONTRACT_TEXT, **SMALL)
    with pytest.warns(RuntimeWarning, match="an episode worker stopped .*it imports another wpb_gym"):
        _reset_both(vector, sync, seed=2)
        rng = np.random.default_rng(2)
        for _ in range(150):
            _step_both(vector, sync, rng)
    assert vector.core.workers.served == 0 and vector.core.workers.processes == []
    vector.close()


def test_a_worker_that_cannot_start_leaves_the_core_preparing_alike(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    vector, sync = _pair(2, **PAPER_TEXT, **SMALL)
    with pytest.warns(RuntimeWarning, match="an episode worker could not start .*No such file"):
        _reset_both(vector, sync, seed=1)
    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(150):
            _step_both(vector, sync, rng, settle=False)
    assert vector.core.workers.processes == [] and vector.core.workers.served == 0
    vector.close()


def _wait_stopped(pid: int) -> None:
    """Until ``pid`` is stopped: ``kill`` returns once the signal is queued, before the process stops."""
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
        assert time.monotonic() < deadline, "the worker did not stop"
        time.sleep(0.001)


def test_a_worker_stopped_mid_result_does_not_stop_the_vector_env():
    """Results are read without blocking: a long episode's is more than a pipe holds, and a
    worker stopped while writing it (a debugger, a frozen cgroup) leaves the core preparing."""
    faulthandler.dump_traceback_later(240, exit=True)  # a hang fails the run instead of stalling it
    try:
        vector, sync = _pair(2, **CONTRACT_TEXT, length=3000, api_pool=8, budget_bytes=1 << 18)
        _reset_both(vector, sync, seed=9)
        workers = vector.core.workers
        worker, reader = workers.processes[0], workers._workers[0]
        if fcntl.fcntl(reader.results, fcntl.F_GETPIPE_SZ) >= 256 * 1024:
            pytest.skip("this kernel's pipes hold a whole result, which this test must catch in part")
        deadline = time.monotonic() + 120
        # Stopped before anything of a result is read: a pipe holds far less than a result of
        # about 0.5 MB, so what the next read finds is part of one. (Reading while it writes
        # can drain a whole result at once, and then the worker has nothing more to write.)
        while True:
            assert time.monotonic() < deadline, "the worker wrote nothing"
            if reader.busy == 0:  # its jobs not yet sent
                workers.pump()
            if not select.select([reader.results], [], [], 0.05)[0]:
                continue
            os.kill(worker.pid, signal.SIGSTOP)
            _wait_stopped(worker.pid)
            workers.pump()
            if reader.pending:  # caught mid-result, not between the start-up message and a result
                break
            os.kill(worker.pid, signal.SIGCONT)
        complete = len(workers._ready)  # results that arrived whole before it stopped
        rng = np.random.default_rng(9)
        for _ in range(6500):  # through both sub-envs' resets
            _step_both(vector, sync, rng, settle=False)
        assert workers.served <= complete
        vector.close()  # stopped as it is
        assert worker.poll() is not None
    finally:
        faulthandler.cancel_dump_traceback_later()


def test_a_result_is_read_in_pieces_as_they_arrive():
    from wpb_gym.envs.fast.episode_workers import _HEADER, _Worker

    read, write = os.pipe()
    jobs_read, jobs_write = os.pipe()
    worker = _Worker(None, read, Connection(jobs_write, readable=False))
    first, second = pickle.dumps(("package", "x")), b"y" * 200_000
    frames = _HEADER.pack(len(first)) + first + _HEADER.pack(len(second)) + second
    os.write(write, frames[:5])
    assert worker.messages() == []  # a header in part
    os.write(write, frames[5:_HEADER.size + len(first) + 3])
    assert worker.messages() == [first]
    rest = memoryview(frames[_HEADER.size + len(first) + 3:])
    got = []
    while rest:  # more than the pipe holds: read while it is written
        rest = rest[os.write(write, rest[:65536]):]
        got += worker.messages()
    assert got == [second] and worker.pending == b""
    os.write(write, frames[:_HEADER.size + len(first)] * 2)
    assert worker.messages() == [first, first]  # two in one read
    os.close(write)
    with pytest.raises(EOFError):
        worker.messages()
    worker.close()
    worker.close()  # twice is harmless
    os.close(jobs_read)


def test_a_failing_worker_drops_a_stopped_sibling_at_once():
    vector, sync, rng = _played(2, PAPER_TEXT, seed=12, steps=40, workers=2)
    stopped, killed = vector.core.workers.processes
    os.kill(stopped.pid, signal.SIGSTOP)
    killed.kill()
    killed.wait()
    began = time.monotonic()
    with pytest.warns(RuntimeWarning, match="an episode worker stopped"):
        while vector.core.workers.processes:
            _step_both(vector, sync, rng, settle=False)
    assert time.monotonic() - began < 4  # not the 5 s a SIGTERM kept pending would take
    assert stopped.poll() is not None
    vector.close()


def test_a_closed_vector_env_starts_no_worker_again():
    vector, sync = _pair(2, **PAPER_TEXT, **SMALL)
    _reset_both(vector, sync, seed=3)
    vector.close()
    vector.reset(seed=4)
    assert vector.core.workers.processes == []


def test_close_stops_the_workers_and_a_pickled_copy_starts_its_own():
    vector, sync, rng = _played(2, CONTRACT_TEXT, seed=4, steps=70)
    copy = pickle.loads(pickle.dumps(vector))
    process = vector.core.workers.processes[0]
    vector.close()
    assert process.poll() is not None  # stopped
    assert copy.core.workers.processes == []  # started when the copy needs one
    for _ in range(150):  # the copy goes on as the original would have
        _step_both(copy, sync, rng)
    assert copy.core.workers.served > 0 and copy.core.workers.processes[0].pid != process.pid
    copy.close()


def test_workers_start_with_a_vector_env_of_made_episodes_and_only_then():
    made = WritePolicyBenchVectorEnv(2, episode_workers=1, **NUMBERED)
    assert len(made.core.workers.processes) == 1  # loading while the first episodes play
    made.close()
    python = WritePolicyBenchVectorEnv(2, episode_workers=1, observation_encoder=python_env().observation_encoder,
                                       **NUMBERED)
    assert python.core.workers.processes == []  # its single envs' Python parts play every episode
    python.close()
    for kwargs in ({"regime": "contract_mix"}, {"regime": "default", "doc_prob": 0.3},
                   {"regime": "default", "replay_generators": False}):
        made = WritePolicyBenchVectorEnv(2, episode_workers=1, **kwargs)
        assert len(made.core.workers.processes) == 1  # made by their generators
        made.close()
    drawn = WritePolicyBenchVectorEnv(2, episode_workers=1, regime="burst_drift")
    assert drawn.core.workers.processes == []  # compiled from their draws: none made
    drawn.close()
    vector = WritePolicyBenchVectorEnv(4, episode_workers=1, length=30, regime="burst_redundancy")
    _, info = vector.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(120):
        _, _, _, _, info = vector.step(np.array([rng.choice(np.flatnonzero(row)) for row in info["action_mask"]]))
    assert vector.core.workers.processes == [] and vector.core.workers.asked == 0
    vector.close()


@pytest.mark.parametrize("order", ["random", "cycle"])
def test_peek_is_the_next_autoreset_choice_and_moves_nothing(order):
    env = WritePolicyBenchEnv(regime="mixed_sizes", episode_order=order)
    env.reset(seed=2)
    for _ in range(5):
        state = env.np_random.bit_generator.state
        peeked = env.sampler.peek(env.np_random)
        assert env.sampler.peek(env.np_random) == peeked and env.np_random.bit_generator.state == state
        chosen, budget = env.choose_episode(recipe=True)
        assert chosen == peeked and budget == env.budget_bytes
    assert WritePolicyBenchEnv(episodes=[env.episode]).sampler.peek(env.np_random) is None


@pytest.mark.parametrize("value", [-1, True, 1.0, "1"])
def test_episode_workers_must_be_a_non_negative_int(value):
    with pytest.raises(ValueError, match=f"episode_workers must be a non-negative int, got {value!r}"):
        WritePolicyBenchVectorEnv(2, episode_workers=value)
    with pytest.raises(ValueError, match=r"episode_workers must be at most num_envs \(2\), got 3"):
        WritePolicyBenchVectorEnv(2, episode_workers=3)


def test_make_vec_passes_episode_workers():
    vector = gym.make_vec("WritePolicyBench-v0", num_envs=2, vectorization_mode="vector_entry_point",
                          episode_workers=1, length=80, **PAPER_TEXT)
    vector.reset(seed=0)
    assert vector.unwrapped.core.workers.count == 1 and len(vector.unwrapped.core.workers.processes) == 1
    vector.close()


@pytest.mark.parametrize("settings", [{"regime": "default"}, {"regime": "burst_redundancy"}])
@pytest.mark.parametrize("workers", [0, 1])
def test_without_replaying_generators_every_episode_is_made_and_plays_as_single_envs_do(settings, workers):
    replayed = WritePolicyBenchVectorEnv(3, **settings, **SMALL)
    replayed.reset(seed=4)
    assert replayed.core.drawn.all()  # by default the paper regimes' are played from their draws
    replayed.close()
    vector = WritePolicyBenchVectorEnv(3, episode_workers=workers, replay_generators=False, **settings, **SMALL)
    sync = SyncVectorEnv([lambda: python_env(**settings, **SMALL) for _ in range(3)])
    _reset_both(vector, sync, seed=4)
    rng = np.random.default_rng(4)
    ended = 0
    for _ in range(150):
        ended += int(_step_both(vector, sync, rng)[2].sum())
        assert vector.core.compiled.all() and not vector.core.drawn.any()  # made, read, compiled
    assert ended >= 6
    if workers:
        assert vector.core.workers.served > 0
    vector.close()


@pytest.mark.parametrize("value", [0, 1, "false", None])
def test_replay_generators_must_be_a_bool(value):
    with pytest.raises(ValueError, match=f"replay_generators must be True or False, got {value!r}"):
        WritePolicyBenchVectorEnv(2, replay_generators=value)
    vector = gym.make_vec("WritePolicyBench-v0", num_envs=2, vectorization_mode="vector_entry_point",
                          replay_generators=False)
    assert vector.unwrapped.core.replay is False
    vector.close()
