"""Minari datasets of agents' trajectories: what is recorded replays exactly, and scores as the evaluator does."""

from __future__ import annotations

import math

import numpy as np
import pytest

minari = pytest.importorskip("minari")

from agents.datasets import record_dataset  # noqa: E402
from agents.registry import make_agent  # noqa: E402
from wpb_gym.cli import main  # noqa: E402
from wpb_gym.evaluation.runner import run_episode  # noqa: E402

KWARGS = {"regime": "contract_mix", "length": 20, "dense_reward": True}


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
    assert env.spec.kwargs == {**KWARGS, "episode_seed": 3, "track": "unprivileged"}
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
        (["--dataset-id", "bad id"], "--dataset-id: Malformed dataset ID"),
        (["--dataset-id", "wpb/t-v0", "--env-kwargs", "track=privileged"], "--env-kwargs: track is the agent's"),
    ]:
        argv_extra = [a for a in argv if a not in ("--env-kwargs", "length=10")] if "--env-kwargs" in extra else argv
        assert main([*argv_extra, *extra, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert named in err and len(err.strip().splitlines()) == 1, err
    files = tmp_path / "set"
    assert main(["freeze", "--regimes", "breaking", "--lengths", "10", "--episodes", "2", "--out", str(files)]) == 0
    argv = ["dataset", "--agent", "no_mem", "--dataset-id", "wpb/f-v0", "--episodes", "3", "--out", str(out)]
    assert main([*argv, "--env-kwargs", f"episodes={files}", "--quiet"]) == 2
    assert "the episode source holds 2 episodes, fewer than the 3 asked" in capsys.readouterr().err
