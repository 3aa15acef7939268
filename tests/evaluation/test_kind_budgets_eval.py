"""Hierarchical budgets through evaluation: the grid, isolated play, results, reports and the CLI."""

from __future__ import annotations

import pytest
from limits_grid import assert_isolated_rows_match, specs

from wpb_gym.core.kind_budgets import KindShares
from wpb_gym.core.store_limits import StoreLimits
from wpb_gym.evaluation.grid import generated_refs, run_grid
from wpb_gym.evaluation.reports.report import leaderboard, read_results

SHARES = KindShares.parse("endpoint=40%,doc=25%,guide=10%")
BUDGETS = (2048, 10240)
AGENTS = ("breaking_detector", "oracle_optimal", "utility_greedy", "last_kb", "change_detector")


@pytest.fixture(scope="module")
def refs():
    return generated_refs(["mixed_sizes", "contract_mix"], [120], 2, seed=5)


@pytest.fixture(scope="module")
def kind_rows(refs):
    return run_grid(refs, specs(AGENTS), BUDGETS, ("privileged",), store_limits=StoreLimits(SHARES))


def test_the_oracle_policies_plan_within_the_limits_and_meet_the_bound(kind_rows):
    for row in kind_rows:
        if row["policy"] in ("oracle_optimal", "utility_greedy"):
            assert row["rejected_actions"] == 0, row  # every WRITE they planned fit its kind
        if row["policy"] == "oracle_optimal":
            assert row["regret_write_only"] == pytest.approx(0.0, abs=1e-9)
            assert row["policy_utility"] == pytest.approx(row["oracle_utility"])
    assert {row["kind_budgets"] for row in kind_rows} == {SHARES.resolve(b).text() for b in BUDGETS}


def test_breaking_detector_makes_room_in_its_own_kind_and_is_never_refused(kind_rows, refs):
    ours = [row for row in kind_rows if row["policy"] == "breaking_detector"]
    assert ours and all(row["rejected_actions"] == 0 for row in ours)
    # last_kb writes every step and meets the limits: refused WRITEs, which breaking_detector avoids.
    assert sum(row["rejected_actions"] for row in kind_rows if row["policy"] == "last_kb") > 0


def test_the_limits_lower_the_bound_and_the_scores(kind_rows, refs):
    plain = run_grid(refs, specs(("breaking_detector",)), BUDGETS, ("privileged",))
    limited = {(r["mode"], r["episode_index"], r["budget_bytes"]): r for r in kind_rows
               if r["policy"] == "breaking_detector"}
    for row in plain:
        other = limited[row["mode"], row["episode_index"], row["budget_bytes"]]
        assert other["oracle_f1"] <= row["oracle_f1"]
        assert other["oracle_utility"] <= row["oracle_utility"]
        assert other["f1"] <= other["oracle_f1"] + 1e-12
        assert row["kind_budgets"] == ""


def test_isolated_play_gives_the_same_rows(refs, kind_rows):
    assert_isolated_rows_match(refs, kind_rows, ("breaking_detector", "oracle_optimal", "last_kb"), BUDGETS,
                               StoreLimits(SHARES))


def test_the_leaderboard_says_the_kind_budgets(kind_rows):
    text = leaderboard(kind_rows, 10240)
    assert f"Limits beside the budget, kind budgets (bytes per content kind): 10KB: `{SHARES.resolve(10240).text()}`." \
        in text



TINY = ["--regimes", "mixed_sizes", "--lengths", "80", "--episodes-per-condition", "2", "--budgets", "2KB",
        "--tracks", "unprivileged", "--quiet", "--agents", "breaking_detector,last_kb"]


def test_wpb_eval_records_the_kind_budgets_and_compare_refuses_unlike_runs(wpb_run, tmp_path):
    code, _, err = wpb_run("eval", *TINY, "--kind-budgets", "endpoint=50%,doc=1KB", "--out", str(tmp_path / "k"))
    assert code == 0, err
    rows = read_results(tmp_path / "k" / "results.csv")
    assert {row["kind_budgets"] for row in rows} == {"endpoint=1024,doc=1024"}
    assert '"kind_budgets": "endpoint=50%,doc=1024"' in (tmp_path / "k" / "run.json").read_text()
    code, _, err = wpb_run("eval", *TINY, "--out", str(tmp_path / "plain"))
    assert code == 0, err
    code, _, err = wpb_run("compare", str(tmp_path / "plain"), str(tmp_path / "k"), "--metric", "f1")
    assert code == 2
    assert "kind budgets none" in err and "endpoint=1024,doc=1024" in err and "Traceback" not in err


@pytest.mark.parametrize("value, named", [
    ("docs=10%", "--kind-budgets: unknown kind 'docs'"),
    ("doc=150%", "at most 100%"),
    ("doc", "KIND=SHARE"),
])
def test_bad_kind_budgets_exit_2_naming_the_option(wpb_run, tmp_path, value, named):
    code, _, err = wpb_run("eval", *TINY, "--kind-budgets", value, "--out", str(tmp_path / "bad"))
    assert code == 2 and named in err and "Traceback" not in err
    assert not (tmp_path / "bad").exists()
