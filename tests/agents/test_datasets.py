"""Minari datasets of agents' trajectories: what is recorded replays exactly, and scores as the evaluator does."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

minari = pytest.importorskip("minari")

from agents.datasets import RECORDED_DEFAULTS, record_dataset  # noqa: E402
from agents.registry import make_agent  # noqa: E402
from wpb_gym.cli import main  # noqa: E402
from wpb_gym.evaluation.runner import run_episode  # noqa: E402

KWARGS = {"regime": "contract_mix", "length": 20, "api_pool": 8, "dense_reward": True}


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    return tmp_path / "datasets"


def test_a_recorded_dataset_loads_replays_and_scores_as_the_evaluator_does(root):
    path = record_dataset("wpb/contract_mix-breaking_detector-v0", lambda: make_agent("breaking_detector"), KWARGS, 4,
                          seed=3, algorithm_name="breaking_detector")
    assert path == root / "wpb" / "contract_mix-breaking_detector-v0"
    dataset = minari.load_dataset("wpb/contract_mix-breaking_detector-v0")
    assert dataset.total_episodes == 4 and dataset.storage.metadata["algorithm_name"] == "breaking_detector"
    env = dataset.recover_environment()
    # Every argument that shapes the recording is named, defaults included.
    assert env.spec.kwargs == {**RECORDED_DEFAULTS, **KWARGS, "episode_seed": 3, "track": "unprivileged"}
    assert env.spec.kwargs["slots"] == 2 and env.spec.kwargs["expire_cost"] == 0.03
    for i, episode in enumerate(dataset.iterate_episodes()):
        steps = len(episode.actions)
        assert episode.observations.shape == (steps + 1, env.observation_space.shape[0])
        assert episode.infos["action_mask"].shape == (steps + 1, env.action_space.n)
        # Replaying the recorded actions gives back every observation, reward and mask.
        observation, info = env.reset(seed=3 + i, options={"episode_index": i})
        assert np.array_equal(observation, episode.observations[0])
        for k, action in enumerate(episode.actions):
            assert info["action_mask"][action]  # the agent only took actions the env allowed
            observation, reward, terminated, _, info = env.step(int(action))
            assert np.array_equal(observation, episode.observations[k + 1])
            assert reward == episode.rewards[k] and terminated == episode.terminations[k]
            assert np.array_equal(info["action_mask"], episode.infos["action_mask"][k + 1])
        assert terminated and episode.terminations[-1] and not episode.truncations.any()
        f1 = episode.infos["metrics"]["f1"]
        assert all(math.isnan(value) for value in f1[:-1]) and f1[-1] == info["metrics"]["f1"]
        # The final metrics are the offline evaluator's for the same agent, episode and budget.
        offline = run_episode(make_agent("breaking_detector"), env.unwrapped.episode, 10240)
        assert f1[-1] == pytest.approx(offline.metrics.f1, abs=1e-12)
        assert episode.rewards.sum() == pytest.approx(f1[-1], abs=1e-9)  # dense rewards sum to the F1


def test_privileged_and_oracle_agents_record_on_the_privileged_track(root):
    for name in ("priority_threshold", "oracle_optimal"):
        record_dataset(f"wpb/{name}-v0", lambda name=name: make_agent(name), {**KWARGS, "track": "privileged"}, 2)
        dataset = minari.load_dataset(f"wpb/{name}-v0")
        assert dataset.spec.env_spec.kwargs["track"] == "privileged" and dataset.total_episodes == 2


def test_an_existing_dataset_is_replaced_only_with_force_and_only_once_the_new_one_is_complete(root):
    def agent():
        return make_agent("fifo_store_all")

    record_dataset("wpb/x-v0", agent, KWARGS, 2)
    with pytest.raises(FileExistsError, match="exists"):
        record_dataset("wpb/x-v0", agent, KWARGS, 3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_argument'"):  # the old one stays
        record_dataset("wpb/x-v0", agent, {**KWARGS, "no_such_argument": 1}, 3, force=True)
    assert minari.load_dataset("wpb/x-v0").total_episodes == 2
    record_dataset("wpb/x-v0", agent, KWARGS, 3, force=True)
    assert minari.load_dataset("wpb/x-v0").total_episodes == 3
    assert [p.name for p in root.iterdir()] == ["wpb"]  # no staging folder left


def test_wpb_dataset_records_and_names_bad_input(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "datasets"
    relative = ["dataset", "--agent", "no_mem", "--dataset-id", "wpb/rel-v0", "--episodes", "1", "--out", "rel"]
    assert main([*relative, "--env-kwargs", "length=5", "--quiet"]) == 0  # --out relative to the current folder
    assert (tmp_path / "rel" / "wpb" / "rel-v0").is_dir()
    (tmp_path / "afile").write_text("x")
    assert main([*relative[:-1], "afile", "--quiet"]) == 2
    assert "--out " in capsys.readouterr().err
    argv = ["dataset", "--agent", "change_detector", "--episodes", "2", "--env-kwargs", "length=10", "--out", str(out)]
    assert main([*argv, "--dataset-id", "wpb/cd-v0", "--quiet"]) == 0
    assert (out / "wpb" / "cd-v0").is_dir()
    for extra, named in [
        (["--dataset-id", "wpb/cd-v0"], "exists; pass force=True (--force)"),
        (["--dataset-id", "bad id"], "--dataset-id: expected NAMESPACE/NAME-vVERSION"),
        (["--dataset-id", "wpb/t-v0", "--env-kwargs", "track=privileged"], "--env-kwargs: track is the agent's"),
    ]:
        argv_extra = [a for a in argv if a not in ("--env-kwargs", "length=10")] if "--env-kwargs" in extra else argv
        assert main([*argv_extra, *extra, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert named in err and len(err.strip().splitlines()) == 1, err


def test_bad_env_kwargs_values_and_too_many_episodes_name_the_option_value_and_expectation(tmp_path, capsys):
    files, out = tmp_path / "set", tmp_path / "datasets"
    freeze = ["freeze", "--regimes", "breaking", "--lengths", "10", "--set", "api_pool=4", "--episodes", "2"]
    assert main([*freeze, "--out", str(files)]) == 0
    capsys.readouterr()
    argv = ["dataset", "--agent", "no_mem", "--dataset-id", "wpb/f-v0", "--out", str(out), "--quiet"]
    config = tmp_path / "d.yaml"
    config.write_text("env_kwargs: {length: abc}\n")
    for extra, named in [
        (["--episodes", "3", "--env-kwargs", f"episodes={files}"],
         f"--episodes 3: more episodes than the source episodes={files} holds (2); expected at most 2"),
        (["--env-kwargs", "length=abc"], "--env-kwargs: length must be a positive int, got 'abc'"),
        (["--config", str(config)], f"'env_kwargs:' in {config}: length must be a positive int, got 'abc'"),
        (["--env-kwargs", "slots=0"], "--env-kwargs: slots must be a positive int, got 0"),
    ]:
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert named in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()  # refused before anything was played or written
    with pytest.raises(ValueError, match="episodes: 3 asked, but the episode source holds 2; expected at most 2"):
        record_dataset("wpb/f-v0", lambda: make_agent("no_mem"), {"episodes": str(files)}, 3, root=out)


def test_ctrl_c_during_wpb_dataset_is_one_line_exit_130_and_leaves_no_partial_dataset(root, capsys, monkeypatch):
    import agents.datasets as datasets

    argv = ["dataset", "--agent", "no_mem", "--dataset-id", "wpb/c-v0", "--episodes", "3", "--env-kwargs", "length=5"]
    assert main([*argv, "--quiet"]) == 0
    capsys.readouterr()
    played = datasets.run_agent_in_env

    def interrupted_at_the_second_episode(agent, env, **kwargs):
        if kwargs["seed"] == 1:
            raise KeyboardInterrupt
        return played(agent, env, **kwargs)

    monkeypatch.setattr(datasets, "run_agent_in_env", interrupted_at_the_second_episode)
    for dataset_id, state in [("wpb/new-v0", "nothing was written (no dataset at"),
                              ("wpb/c-v0", "nothing was written: the dataset")]:
        assert main([*argv[:4], dataset_id, *argv[5:], "--force", "--quiet"]) == 130
        err = capsys.readouterr().err
        assert err.startswith(f"wpb dataset: interrupted; {state}") and len(err.strip().splitlines()) == 1, err
    monkeypatch.setattr(datasets, "run_agent_in_env", played)

    def interrupted_while_writing(dataset_id, buffers, **kwargs):  # Minari half-way through its files
        folder = Path(os.environ["MINARI_DATASETS_PATH"]) / dataset_id / "data"
        folder.mkdir(parents=True)
        (folder / "main_data.hdf5").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(minari, "create_dataset_from_buffers", interrupted_while_writing)
    assert main([*argv, "--force"]) == 130
    assert "interrupted; nothing was written: the dataset" in capsys.readouterr().err
    assert not (root / "wpb" / "new-v0").exists() and [p.name for p in (root / "wpb").iterdir()] == ["c-v0"]
    assert minari.load_dataset("wpb/c-v0").total_episodes == 3 and [p.name for p in root.iterdir()] == ["wpb"]


# A background job of a non-interactive shell (nohup ... &) starts with SIGINT ignored, and so
# does every process it starts: there Ctrl-C cannot be tried at all.
needs_sigint = pytest.mark.skipif(
    signal.getsignal(signal.SIGINT) is signal.SIG_IGN, reason="SIGINT is ignored in this process (a background job)"
)


@needs_sigint
def test_a_real_sigint_during_wpb_dataset_prints_no_traceback(tmp_path):
    env = {**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "datasets")}
    argv = [sys.executable, "-m", "wpb_gym.cli", "dataset", "--agent", "no_mem", "--dataset-id", "wpb/s-v0"]
    child = subprocess.Popen([*argv, "--episodes", "100000", "--env-kwargs", "length=50"], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stderr is not None
    started = ""
    while "ep/s]" not in started and child.poll() is None:  # the progress bar: episodes are being played
        started += child.stderr.read(1)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130, err[-2000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("wpb dataset: interrupted; nothing")
    assert not (tmp_path / "datasets").exists() and out == ""  # not even the datasets folder


def test_force_moves_the_old_dataset_aside_before_the_new_one_takes_its_place(root, monkeypatch):
    def agent():
        return make_agent("fifo_store_all")

    target = record_dataset("wpb/x-v0", agent, KWARGS, 2)
    renamed = Path.rename
    during: list[tuple[bool, list[int]]] = []  # as the new one moves in: is the target free, what is aside

    def rename(path, to):
        if Path(to) == target and Path(path).name != ".replaced":  # not the old one moving back
            aside = root.glob(".wpb-dataset-*/.replaced/**/metadata.json")
            aside = [json.loads(metadata.read_text())["total_episodes"] for metadata in aside]
            during.append((target.exists(), aside))
            if len(during) == 1:
                raise OSError(28, "No space left on device")
        return renamed(path, to)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OSError, match="No space left"):  # the new one cannot move in: the old one moves back
        record_dataset("wpb/x-v0", agent, KWARGS, 3, force=True)
    assert minari.load_dataset("wpb/x-v0").total_episodes == 2 and [p.name for p in root.iterdir()] == ["wpb"]
    record_dataset("wpb/x-v0", agent, KWARGS, 3, force=True)
    # Both times the old dataset was on disk, renamed aside, while the new one moved in (a crash
    # there would have left both); it is deleted only after.
    assert during == [(False, [2]), (False, [2])]
    assert minari.load_dataset("wpb/x-v0").total_episodes == 3 and [p.name for p in root.iterdir()] == ["wpb"]


@needs_sigint
def test_ctrl_c_during_the_swap_is_held_until_the_new_dataset_is_in_place(root, monkeypatch):
    def agent():
        return make_agent("no_mem")

    target = record_dataset("wpb/x-v0", agent, KWARGS, 2)
    renamed = Path.rename

    def rename(path, to):
        if Path(to) == target:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C between moving the old one aside and the new one in
        return renamed(path, to)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(KeyboardInterrupt):  # delivered once the swap is done
        record_dataset("wpb/x-v0", agent, KWARGS, 3, force=True)
    monkeypatch.setattr(Path, "rename", renamed)
    assert minari.load_dataset("wpb/x-v0").total_episodes == 3 and [p.name for p in root.iterdir()] == ["wpb"]


# ---------------------------------------------------------------------------- the query tier
QUERY_KWARGS = {"endpoints": 30, "families": 4, "length": 30 + 12 * 15, "checkpoint_interval": 15,
                "queries_per_checkpoint": 25, "summary_max_bytes": 900, "max_params": 10, "budget_fraction": 0.5}


def test_a_query_tier_dataset_of_the_privileged_baseline_replays_and_scores_as_the_evaluator_does(root):
    from agents.datasets import QUERY_METRICS

    env_id = "WritePolicyBench-QueriesEasy-Privileged-v0"
    record_dataset("wpb/queries-causal-v0", lambda: make_agent("causal_privileged"), QUERY_KWARGS, 2, seed=5,
                   env_id=env_id, algorithm_name="causal_privileged")
    dataset = minari.load_dataset("wpb/queries-causal-v0")
    assert dataset.spec.env_spec.id == env_id and dataset.total_episodes == 2
    env = dataset.recover_environment()
    assert env.spec.kwargs == {"regime": "queries_easy", "track": "privileged", "episode_seed": 5, "slots": 8,
                               "expire_cost": 0.0, "invalid_action_penalty": 0.0, **QUERY_KWARGS}
    for i, episode in enumerate(dataset.iterate_episodes()):
        observation, info = env.reset(seed=5 + i, options={"episode_index": i})
        assert np.array_equal(observation, episode.observations[0])
        for k, action in enumerate(episode.actions):
            assert info["action_mask"][action]
            observation, reward, terminated, _, info = env.step(int(action))
            assert np.array_equal(observation, episode.observations[k + 1]) and reward == episode.rewards[k]
        assert terminated and episode.terminations[-1]
        assert set(episode.infos["metrics"]) == set(QUERY_METRICS)
        accuracy = episode.infos["metrics"]["query_accuracy"][-1]
        offline = run_episode(make_agent("causal_privileged"), env.unwrapped.episode, info["budget_bytes"],
                              track="privileged")
        assert accuracy == offline.queries.accuracy and episode.rewards.sum() == pytest.approx(accuracy)
        assert (episode.infos["budget_bytes"] == info["budget_bytes"]).all()


def test_an_endless_query_dataset_ends_by_accuracy_or_by_its_time_limit(root):
    kwargs = {k: v for k, v in QUERY_KWARGS.items() if k != "length"}
    record_dataset("wpb/endless-v0", lambda: make_agent("keep_latest_family"),
                   {**kwargs, "endless": True, "endless_threshold": 0.99, "endless_window": 2}, 1,
                   env_id="WritePolicyBench-QueriesEasy-v0", max_episode_steps=5000)
    record_dataset("wpb/endless-limited-v0", lambda: make_agent("keep_latest_family"),
                   {**kwargs, "endless": True, "endless_threshold": 0.0}, 1,
                   env_id="WritePolicyBench-QueriesEasy-v0", max_episode_steps=300)
    (ended,) = minari.load_dataset("wpb/endless-v0").iterate_episodes()
    assert ended.terminations[-1] and not ended.truncations.any()
    assert ended.infos["metrics"]["checkpoints_survived"][-1] == ended.infos["metrics"]["checkpoints"][-1] - 1
    limited = minari.load_dataset("wpb/endless-limited-v0")
    assert limited.spec.env_spec.max_episode_steps == 300
    (cut,) = limited.iterate_episodes()
    assert len(cut.actions) == 300 and cut.truncations[-1] and not cut.terminations.any()


def test_wpb_dataset_records_a_query_tier_id_and_names_a_wrong_one(tmp_path, capsys):
    out = tmp_path / "datasets"
    sizes = [f"{k}={v}" for k, v in QUERY_KWARGS.items()]
    argv = ["dataset", "--episodes", "1", "--out", str(out), "--quiet"]
    assert main([*argv, "--env-kwargs", *sizes, "--agent", "keep_latest_family", "--dataset-id", "wpb/q-v0",
                 "--env-id", "WritePolicyBench-QueriesEasy-Privileged-v0"]) == 0
    dataset = minari.load_dataset(str(out / "wpb" / "q-v0"))
    # A privileged id stays privileged for an unprivileged agent.
    assert dataset.spec.env_spec.kwargs["track"] == "privileged"
    capsys.readouterr()
    for extra, named in [
        (["--agent", "causal_privileged", "--env-id", "WritePolicyBench-QueriesEasy-v0"],
         ("--env-id WritePolicyBench-QueriesEasy-v0: causal_privileged runs on the oracle track only; expected a "
          "privileged id (WritePolicyBench-QueriesEasy-Privileged-v0)")),
        (["--agent", "no_mem", "--env-id", "WritePolicyBench-Nope-v0"],
         "--env-id WritePolicyBench-Nope-v0: env_id: expected a WritePolicyBench id"),
        (["--agent", "no_mem", "--env-id", "WritePolicyBench-QueriesEasy-v0", "--env-kwargs", *sizes, "api_pool=3"],
         "--env-kwargs: unknown env argument 'api_pool'"),
    ]:
        assert main([*argv, "--dataset-id", "wpb/bad-v0", *extra]) == 2
        err = capsys.readouterr().err
        assert named in err and len(err.strip().splitlines()) == 1, err
