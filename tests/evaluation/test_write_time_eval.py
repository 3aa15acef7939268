"""Write time through evaluation: the grid, isolated play, results, reports and the CLI."""

from __future__ import annotations

import pytest
from limits_grid import assert_isolated_rows_match, by_run, specs

from agents.registry import make_agent
from wpb_gym.core.store_limits import StoreLimits
from wpb_gym.core.write_time import WriteTime
from wpb_gym.evaluation.grid import generated_refs, run_grid
from wpb_gym.evaluation.reports.report import leaderboard, read_results

TIME = WriteTime(total=10, per_write=1, per_kb=1)
BUDGETS = (2048, 10240)
AGENTS = ("breaking_detector", "oracle_optimal", "utility_greedy", "last_kb")


@pytest.fixture(scope="module")
def refs():
    return generated_refs(["breaking", "contract_mix"], [120], 2, seed=7)


@pytest.fixture(scope="module")
def rows(refs):
    return run_grid(refs, specs(AGENTS), BUDGETS, ("privileged",), store_limits=StoreLimits(write_time=TIME))


def test_the_oracle_policies_plan_within_the_write_time_and_meet_the_bound(rows):
    for row in rows:
        assert row["write_time"] == TIME.text() and row["kind_budgets"] == ""
        if row["policy"] in ("oracle_optimal", "utility_greedy"):
            assert row["rejected_actions"] == 0, row
        if row["policy"] == "oracle_optimal":
            assert row["regret_write_only"] == pytest.approx(0.0, abs=1e-9)
        assert row["f1"] <= row["oracle_f1"] + 1e-12


def test_scarce_write_time_lowers_the_bound_and_refuses_what_does_not_fit(rows, refs):
    plain = by_run(run_grid(refs, specs(("breaking_detector", "last_kb")), BUDGETS, ("privileged",)))
    lower = 0
    for row in rows:
        other = plain.get((row["mode"], row["episode_index"], row["budget_bytes"], row["policy"]))
        if other is not None:
            assert row["oracle_f1"] <= other["oracle_f1"]
            lower += row["oracle_f1"] < other["oracle_f1"]
    assert lower > 0
    assert sum(r["rejected_actions"] for r in rows if r["policy"] == "last_kb") > 0


def test_isolated_play_gives_the_same_rows(refs, rows):
    assert_isolated_rows_match(refs, rows, ("breaking_detector", "oracle_optimal", "last_kb"), BUDGETS,
                               StoreLimits(write_time=TIME))


def test_the_leaderboard_says_the_write_time(rows):
    assert (f"Limits beside the budget, write time (ticks per episode and per write): 10KB: `{TIME.text()}`."
            in leaderboard(rows, 10240))



TINY = ["--regimes", "breaking", "--lengths", "80", "--episodes-per-condition", "2", "--budgets", "2KB",
        "--tracks", "unprivileged", "--quiet", "--agents", "breaking_detector,last_kb"]


def test_wpb_eval_records_the_write_time_and_seeds_refuse_unlike_runs(wpb_run, tmp_path):
    code, _, err = wpb_run("eval", *TINY, "--write-time", "total=6,per_kb=1", "--out", str(tmp_path / "w"))
    assert code == 0, err
    assert {r["write_time"] for r in read_results(tmp_path / "w" / "results.csv")} == {"total=6,per_write=1,per_kb=1"}
    assert '"write_time": "total=6,per_write=1,per_kb=1"' in (tmp_path / "w" / "run.json").read_text()
    assert wpb_run("eval", *TINY, "--out", str(tmp_path / "plain"))[0] == 0
    code, _, err = wpb_run("seeds", str(tmp_path / "plain"), str(tmp_path / "w"), "--learned",
                        "x=breaking_detector,last_kb,breaking_detector")
    assert code == 2 and "write time none" in err and "Traceback" not in err


@pytest.mark.parametrize("extra, named", [
    (["--write-time", "per_kb=1"], "--write-time: expected total=TICKS"),
    (["--write-time", "total=4,speed=1"], "unknown field 'speed'"),
    (["--write-time", "total=4", "--kind-budgets", "doc=10%"], "one at a time"),
])
def test_bad_write_time_exits_2_naming_the_option(wpb_run, tmp_path, extra, named):
    code, _, err = wpb_run("eval", *TINY, *extra, "--out", str(tmp_path / "bad"))
    assert code == 2 and named in err and "Traceback" not in err
    assert not (tmp_path / "bad").exists()


def test_run_episode_takes_either_limit_in_process_and_isolated():
    from wpb_gym import run_episode
    from wpb_gym.episodes.generators.paper import make_config
    from wpb_gym.episodes.sources import GeneratedEpisodes

    episode = GeneratedEpisodes(make_config("contract_mix", length=120), 1).episode(0)
    for isolate in (False, True):
        timed = run_episode(make_agent("oracle_optimal"), episode, 10240, "privileged",
                            write_time=WriteTime(8, 1, 1), isolate=isolate, sandbox=None)
        assert timed.metrics.as_row()["regret_write_only"] == pytest.approx(0.0, abs=1e-9)
        limited = run_episode(make_agent("breaking_detector"), episode, 10240, kind_budgets={"endpoint": 1500},
                              isolate=isolate, sandbox=None)
        writes = [logged for logged in limited.actions if logged.action.action == "WRITE"]
        assert writes and all(logged.decision.accepted for logged in writes)  # it makes room in its kind
        assert limited.store.kind_used("endpoint") <= 1500
        assert limited.store.kind_used("endpoint") == sum(
            item.byte_cost for item in limited.store.iter_items() if "api" in item.step.observation)
    with pytest.raises(ValueError, match="one at a time"):
        run_episode(make_agent("last_kb"), episode, 1024, kind_budgets={"doc": 1}, write_time=WriteTime(3))
