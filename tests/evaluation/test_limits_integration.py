"""Limits beside the budget reach every way an agent plays: trained models' private memories,
agents driven through the env, the query bound, and the report pages."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.env_adapter import run_agent_in_env
from agents.model_agent import ModelAgent
from agents.registry import make_agent
from wpb_gym.core.compression import Compression
from wpb_gym.core.kind_budgets import KindBudgets, KindShares
from wpb_gym.core.write_time import WriteTime
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.evaluation.grid import generated_refs, query_bounds
from wpb_gym.evaluation.playing import Seat, play
from wpb_gym.scoring.query_bound import query_bound


class GreedyModel(ModelAgent):
    """Stands in for a trained model read from a file: WRITE whenever its private env allows."""

    name = "greedy_model"

    def _act(self, observation, mask):
        self.seen_shape = np.shape(observation)
        return 1 if mask[1] else 0


class CompressingModel(ModelAgent):
    """Stands in for a model trained with compression: the compressed WRITE whenever allowed,
    else an EXPIRE of the first slot's item (which does not end the timestep), else SKIP."""

    name = "compressing_model"

    def _act(self, observation, mask):
        k = self._env.K
        return len(mask) - 1 if mask[-1] else (2 + k if mask[2 + k] else 0)


@pytest.mark.parametrize("kinds, write_time, compression", [
    (KindBudgets.of({"endpoint": 2048, "doc": 1024}), None, None),
    (None, WriteTime(10, 1, 1), None),
    (None, None, Compression(0.5)),
])
def test_a_trained_models_private_memory_keeps_the_evaluators_limits(kinds, write_time, compression):
    episode = generated_refs(["contract_mix"], [200], 1, seed=0)[0].load()
    agent = GreedyModel("unused-path", env_kwargs={})
    seat = Seat(agent, 10240, "unprivileged", kinds=kinds, write_time=write_time, compression=compression)
    (run,) = play(episode, [seat])
    assert run.error is None and run.diverged_at is None
    assert run.store.timesteps() == agent._env.store.timesteps()
    assert sum(run.store.rejected_counts.values()) == 0
    # Trained without limits: it is shown the observation it knows, without their features.
    assert agent.seen_shape == WritePolicyBenchEnv().observation_space.shape


def test_a_model_trained_with_limits_needs_them():
    episode = generated_refs(["breaking"], [80], 1, seed=0)[0].load()
    agent = GreedyModel("model.zip", env_kwargs={"write_time": "total=5"})
    with pytest.raises(ValueError, match="was trained with write_time=; play it under that limit too"):
        play(episode, [Seat(agent, 10240, "unprivileged")])
    agent = GreedyModel("model.zip", env_kwargs={"compression": "credit=0.5"})
    with pytest.raises(ValueError, match="was trained with compression=; .* --compression"):
        play(episode, [Seat(agent, 10240, "unprivileged", write_time=WriteTime(5))])


def test_a_model_trained_with_compression_compresses_and_keeps_step():
    episode = generated_refs(["contract_mix"], [120], 1, seed=0)[0].load()
    agent = CompressingModel("model.zip", env_kwargs={"compression": "credit=0.5", "slots": 2})
    (run,) = play(episode, [Seat(agent, 2048, "unprivileged", compression=Compression(0.5))], record_actions=True)
    assert run.error is None and run.diverged_at is None
    assert run.store.compressed_timesteps() and run.store.timesteps() == agent._env.store.timesteps()
    assert {logged.action.action for logged in run.actions} >= {"WRITE", "EXPIRE"}
    assert sum(run.store.rejected_counts.values()) == 0


@pytest.mark.parametrize("limits", [{"kind_budgets": "endpoint=40%,doc=25%,guide=10%"},
                                    {"write_time": "total=20,per_write=1,per_kb=1"},
                                    {"compression": "credit=0.75"}])
def test_agents_driven_through_the_env_are_told_its_limits(limits):
    env = WritePolicyBenchEnv(regime="contract_mix", budget_bytes=1024, track="privileged", **limits)
    metrics = run_agent_in_env(make_agent("oracle_optimal"), env, seed=0).metrics
    assert metrics["policy_utility"] == pytest.approx(metrics["oracle_utility"])


@pytest.mark.parametrize("name", ["breaking_compressor", "breaking_rationer"])
def test_compressing_agents_driven_through_the_env_score_as_in_the_evaluator(name):
    from wpb_gym import run_episode

    env = WritePolicyBenchEnv(regime="contract_mix", budget_bytes=1024, compression="credit=0.75")
    in_env = run_agent_in_env(make_agent(name), env, seed=3).metrics
    evaluated = run_episode(make_agent(name), env.episode, 1024, compression=Compression(0.75)).metrics.as_row()
    assert in_env["f1"] == pytest.approx(evaluated["f1"]) and in_env["bytes_used"] == evaluated["bytes_used"]
    assert env.store.compressed_timesteps()


def test_the_query_bound_is_solved_in_the_endpoint_room():
    episode = generated_refs(["queries_easy"], [2000], 1, seed=0)[0].load()
    shares = KindShares.parse("endpoint=10%")
    limited = query_bounds(episode, [("unprivileged", 10240)], shares)[("unprivileged", 10240)]
    assert limited == query_bound(episode, 1024, "unprivileged", time_limit=0.0)
    assert limited.upper < query_bounds(episode, [("unprivileged", 10240)])[("unprivileged", 10240)].upper



TINY = ["--lengths", "80", "--episodes-per-condition", "2", "--budgets", "2KB", "--tracks", "unprivileged",
        "--quiet", "--agents", "breaking_detector,last_kb"]


def test_transfer_refuses_runs_of_other_limits_and_report_pages_name_them(wpb_run, tmp_path):
    assert wpb_run("eval", *TINY, "--regimes", "breaking", "--kind-budgets", "endpoint=30%",
                "--out", str(tmp_path / "a"))[0] == 0
    assert wpb_run("eval", *TINY, "--regimes", "reverts", "--out", str(tmp_path / "b"))[0] == 0
    code, _, err = wpb_run("report", str(tmp_path / "a"), "--transfer", str(tmp_path / "b"))
    assert code == 2 and "different conditions" in err and "Traceback" not in err
    assert wpb_run("report", str(tmp_path / "a"), "--f1-by-budget")[0] == 0
    page = (tmp_path / "a" / "f1_by_budget.md").read_text()
    assert "Limits beside the budget, kind budgets (bytes per content kind): 2KB: `endpoint=614`." in page


@pytest.mark.parametrize("argv, named", [
    (["--write-time", "total=5,per_write=100000000000000000000"], "--write-time: per_write"),
    (["--write-time", "total=5,per_kb=36028797018963968"], "--write-time: per_kb"),
    (["--kind-budgets", "endpoint=12.49999999999999999999999999999%"], "at most 6 decimals"),
    (["--kind-budgets", "endpoint=５０%"], "at most 6 decimals"),
    (["--kind-budgets", "endpoint=" + "1" * 5000], "expected a share such as 30% or bytes such as 3KB"),
])
def test_extreme_limits_exit_2_naming_the_option(wpb_run, tmp_path, argv, named):
    code, _, err = wpb_run("eval", *TINY, "--regimes", "breaking", *argv, "--out", str(tmp_path / "x"))
    assert code == 2 and named in err and "Traceback" not in err


def test_wpb_train_trains_under_a_limit_and_its_model_is_evaluated_under_one(wpb_run, tmp_path):
    # The model's file names the limit it was trained under; an evaluation without one is refused
    # before any episode, naming the option; with one (other values) it plays, under them.
    code, _, err = wpb_run("train", "--algo", "maskable_ppo", "--env-kwargs", "compression=credit=0.75", "length=40",
                           "--timesteps", "256", "--out", str(tmp_path / "t"))
    assert code == 0, err
    model = tmp_path / "t" / "final_model.zip"
    assert json.loads((tmp_path / "t" / "final_model.env.json").read_text())["compression"] == "credit=0.75"
    grid = [*TINY[:TINY.index("--agents")], "--regimes", "breaking", "--agents", f"sb3:{model}"]
    for isolated in ([], ["--isolate"]):  # isolated, as the model's own process says
        code, _, err = wpb_run("eval", *grid, *isolated, "--out", str(tmp_path / "plain"))
        assert code == 2 and "trained with compression=" in err and "--compression" in err, err
        assert "Traceback" not in err and not (tmp_path / "plain").exists()
    code, _, err = wpb_run("eval", *grid, "--compression", "credit=0.5", "--out", str(tmp_path / "limited"))
    assert code == 0, err
    assert "credit=0.5" in (tmp_path / "limited" / "leaderboard.md").read_text()
    # Exported, the policy keeps the limit: it decides as the model does under it, and needs it too.
    code, _, err = wpb_run("export", "sb3", str(model), "--out", str(tmp_path / "exported"))
    assert code == 0, err
    assert json.loads((tmp_path / "exported" / "policy.json").read_text())["env_kwargs"]["compression"] == "credit=0.75"
    exported = [*grid[:-1], f"policy:{tmp_path / 'exported'}"]
    code, _, err = wpb_run("eval", *exported, "--out", str(tmp_path / "plain"))
    assert code == 2 and "'policy:exported' was trained with compression=" in err, err
    assert wpb_run("eval", *exported, "--compression", "credit=0.5", "--out", str(tmp_path / "exported_run"))[0] == 0
    # In an ablation, the variant without the limit is named.
    variant = ("agents: ['sb3:{}']\nregimes: [breaking]\nlengths: [80]\nbudgets: [1KB]\ntracks: [unprivileged]\n"
               "episodes_per_condition: 1\n").format(model)
    (tmp_path / "a.yaml").write_text(variant + "compression: credit=0.5\n")
    (tmp_path / "b.yaml").write_text(variant)
    code, _, err = wpb_run("ablate", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), "--seeds", "2")
    assert code == 2 and f"{tmp_path / 'b.yaml'}: agent" in err and "give 'compression:'" in err, err
    # Training goes on from it under the same kind of limit only.
    code, _, err = wpb_run("train", "--algo", "maskable_ppo", "--env-kwargs", "length=40", "--init-from", str(model),
                           "--timesteps", "256", "--out", str(tmp_path / "again"))
    assert code == 2 and "trained under compression=, this run trains without limits" in err, err
    assert not (tmp_path / "again").exists()
    # wpb stress plays without limits: refused, naming wpb eval's option.
    code, _, err = wpb_run("stress", "--agents", f"sb3:{model}", "--regime", "breaking", "--length", "80",
                           "--budget", "1KB", "--trials", "1", "--out", str(tmp_path / "stress"))
    assert code == 2 and "wpb stress plays without limits" in err and "--compression" in err, err
    # A sidecar naming a bad limit value is named with its file.
    sidecar = tmp_path / "t" / "final_model.env.json"
    sidecar.write_text(sidecar.read_text().replace("credit=0.75", "credit=2"))
    code, _, err = wpb_run("eval", *grid, "--compression", "credit=0.5", "--out", str(tmp_path / "bad"))
    assert code == 2 and f"{sidecar}: compression: credit" in err, err


@pytest.mark.parametrize("argv", [["--algo", "value_keeper"],
                                  ["--algo", "maskable_ppo", "--env-kwargs", "regime=queries_medium"]])
def test_wpb_train_refuses_limits_where_they_do_not_apply(wpb_run, tmp_path, argv):
    if "--env-kwargs" in argv:
        argv = [*argv, "kind_budgets=endpoint=50%"]
    else:
        argv = [*argv, "--env-kwargs", "kind_budgets=endpoint=50%"]
    code, _, err = wpb_run("train", *argv, "--out", str(tmp_path / "t"))
    assert code == 2 and "trains without limits beside the budget" in err and "wpb eval --kind-budgets" in err
