"""The adversarial-policy suite: a policy changes its score only through the actions it yields.

Each attack (``tests/evaluation/adversaries.py``) runs with and without its tampering, in process and
in isolated evaluation (every policy in its own process); the two must score alike, and no
other policy's score may move. The attacks that one Python process cannot stop (the store
behind the view, the labels through frames or the garbage collector, patching shared code)
are checked in isolated evaluation only.
"""

from __future__ import annotations

import json
import time
from functools import partial

import adversaries as adv
import pytest

from agents.registry import agent_entry, make_agent
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.evaluation.grid import PolicySpec, generated_refs, run_grid
from wpb_gym.evaluation.isolated import isolation
from wpb_gym.evaluation.referee import PolicyError, RunLimits
from wpb_gym.evaluation.runner import run_episode

MODES = ("in-process", "isolated")
BUDGETS = (0, 1024, 10240)
TRACKS = ("unprivileged", "privileged")
METRICS = ("f1", "recall", "precision", "policy_utility", "bytes_used", "write_actions", "expire_actions", "tp", "fp")

# label -> factory; every attacker beside its honest twin.
ATTACKS = {
    "forge": partial(adv.ForgeMerge, True),
    "forge-honest": partial(adv.ForgeMerge, False),
    "zero-cost": partial(adv.ZeroCost, True),
    "zero-cost-honest": partial(adv.ZeroCost, False),
    "flip-str": partial(adv.KindFlip, True, "str"),
    "flip-attr": partial(adv.KindFlip, True, "attr"),
    "flip-honest": partial(adv.KindFlip, False),
    "thief-item": partial(adv.BudgetThief, True, "item_cost"),
    "thief-item-honest": partial(adv.BudgetThief, False, "item_cost"),
    "thief-store": partial(adv.BudgetThief, True, "store"),
    "thief-release": partial(adv.BudgetThief, True, "release"),
    "thief-honest": partial(adv.BudgetThief, False, "store"),
    "decision": partial(adv.DecisionEditor, True),
    "decision-honest": partial(adv.DecisionEditor, False),
    "impostor": partial(adv.StepImpostor, True),
    "impostor-honest": partial(adv.StepImpostor, False),
    "target": partial(adv.TargetLiar, True),
    "target-honest": partial(adv.TargetLiar, False),
    "peeker": partial(adv.LabelPeeker, True),
    "patcher": partial(adv.StorePatcher, True),
    "patcher-honest": partial(adv.StorePatcher, False),
    "forged-reply": partial(adv.ForgedReply, True),
    "write-all": adv.WriteAll,
}
# What an attack may not change: the scores of the policies evaluated after it.
VICTIMS = ("change_detector", "priority_threshold", "last_kb")
# Attacks closed only by isolated evaluation (one process cannot hide its own memory).
ISOLATED_ONLY = {"thief-store", "thief-release", "peeker", "patcher", "forged-reply"}


def _specs(labels):
    specs = [PolicySpec(label, ATTACKS[label], ATTACKS[label]().track) for label in labels]
    specs += [PolicySpec(n, partial(make_agent, n), agent_entry(n).track) for n in VICTIMS]
    return specs


def _table(rows):
    return {(r["policy"], r["budget_bytes"], r["track"]): r for r in rows}


@pytest.fixture(scope="module", params=MODES)
def graded(request):
    """Every attack and every victim over one episode of the default regime, in one mode."""
    mode = request.param
    labels = [label for label in ATTACKS if mode == "isolated" or label not in ISOLATED_ONLY]
    refs = generated_refs(["default"], [200], 1, seed=0)
    rows = run_grid(refs, _specs(labels), BUDGETS, TRACKS, isolate=mode == "isolated")
    return mode, _table(rows)


def _same(table, attack, honest):
    for budget in BUDGETS:
        for track in TRACKS:
            a, h = table[attack, budget, track], table[honest, budget, track]
            assert {m: a[m] for m in METRICS} == {m: h[m] for m in METRICS}, (attack, budget, track)


def test_1_forged_merge_by_editing_the_observation_has_no_effect(graded):
    mode, table = graded
    _same(table, "forge", "forge-honest")
    # On the attack's own terms (1 KB, unprivileged) it used to lift F1 from 0.43 to 0.98.
    assert table["forge", 1024, "unprivileged"]["f1"] < 0.1


def test_2_a_cached_write_cost_set_to_zero_has_no_effect(graded):
    mode, table = graded
    _same(table, "zero-cost", "zero-cost-honest")
    assert table["zero-cost", 1024, "unprivileged"]["bytes_used"] > 0


def test_3_an_action_kind_that_reads_differently_twice_is_read_once(graded):
    mode, table = graded
    # A str subclass is read as the text it holds: a WRITE, judged as one.
    _same(table, "flip-str", "flip-honest")
    assert table["flip-str", 0, "unprivileged"]["bytes_used"] == 0  # no free WRITEs at budget 0
    # An action read once is judged and applied as that one reading says: its first
    # reading is SKIP, so it is a SKIP, and nothing is ever written.
    for budget in BUDGETS:
        for track in TRACKS:
            assert table["flip-attr", budget, track]["write_actions"] == 0
            assert table["flip-attr", budget, track]["bytes_used"] == 0


def test_4_an_item_cost_edited_through_the_view_has_no_effect(graded):
    mode, table = graded
    _same(table, "thief-item", "thief-item-honest")


def test_4_the_budget_behind_the_view_is_out_of_reach_in_isolated_evaluation(graded):
    mode, table = graded
    if mode != "isolated":
        pytest.skip("one process cannot hide the store behind a view: isolated evaluation closes it")
    _same(table, "thief-store", "thief-honest")
    _same(table, "thief-release", "thief-honest")
    assert table["thief-store", 0, "unprivileged"]["bytes_used"] == 0
    for label in ("thief-store", "thief-release"):
        assert "diverged" in table[label, 1024, "unprivileged"]["error"]


def test_5_no_attack_moves_another_policys_score(graded):
    mode, table = graded
    refs = generated_refs(["default"], [200], 1, seed=0)
    alone = _table(run_grid(refs, _specs([]), BUDGETS, TRACKS, isolate=mode == "isolated"))
    for key, row in alone.items():
        assert {m: table[key][m] for m in METRICS} == {m: row[m] for m in METRICS}, key


@pytest.mark.parametrize("mode", MODES)
def test_5_a_contaminating_policy_listed_first_changes_no_other_score_nor_the_episode(mode):
    episode = generate_episode(make_config("default", length=200), seed=0, index=0)
    before = json.dumps(episode.to_dict(), sort_keys=True)
    refs = generated_refs(["default"], [200], 1, seed=0)
    refs = [type(refs[0])("default", 200, 0, None, episode)]
    contaminators = {
        "contaminator": partial(adv.Contaminator, True),
        "label-editor": partial(adv.LabelEditor, True),
    }
    specs = [PolicySpec(label, f, f().track) for label, f in contaminators.items()] + _specs([])
    with_them = _table(run_grid(refs, specs, BUDGETS, TRACKS, isolate=mode == "isolated"))
    alone = _table(run_grid(refs, _specs([]), BUDGETS, TRACKS, isolate=mode == "isolated"))
    for key, row in alone.items():
        assert {m: with_them[key][m] for m in METRICS} == {m: row[m] for m in METRICS}, key
    assert json.dumps(episode.to_dict(), sort_keys=True) == before


def test_5_a_careless_edit_of_a_shown_step_fails_loudly_in_process():
    episode = generate_episode(make_config("default", length=20), seed=0, index=0)
    with pytest.raises(TypeError, match="read-only"):
        run_episode(adv.Clumsy(True), episode, 1024)


def test_6_labels_are_out_of_reach_in_isolated_evaluation(graded):
    mode, table = graded
    if mode != "isolated":
        pytest.skip("frames and the garbage collector reach everything in one process")
    for budget in BUDGETS:
        for track in TRACKS:
            assert table["peeker", budget, track]["write_actions"] == 0  # it found no labels


@pytest.mark.parametrize("mode", MODES)
def test_6_a_track_whose_comparisons_lie_gets_no_labels(mode):
    """A policy whose ``track`` is a ``str`` equal to every track read as the oracle where the
    evaluator asked "oracle?", and was handed the labels on the unprivileged track. The track is
    now read as the exact text it holds."""
    episode = generate_episode(make_config("default", length=60), seed=0, index=0)
    assert episode.labels["critical_steps"]  # there is something to find
    for track in ("unprivileged", "privileged"):
        run = run_episode(adv.TrackLiar(), episode, 10240, track, isolate=mode == "isolated")
        assert run.error is None and run.metrics.write_actions == 0, (track, run.metrics)
    refused = ValueError if mode == "in-process" else PolicyError  # (isolated: refused in its process)
    with pytest.raises(refused, match="oracle-track policy .* cannot run on the unprivileged track"):
        run_episode(adv.TrackLiar(True, "oracle"), episode, 10240, isolate=mode == "isolated")
    liar = adv.Liar("unprivileged")  # the evaluation track given as such a str: read as its text
    run = run_episode(adv.TrackLiar(False), episode, 10240, liar, isolate=mode == "isolated")
    assert run.error is None and run.metrics.write_actions == 0
    rows = run_grid(generated_refs(["default"], [60], 1, seed=0),
                    [PolicySpec("liar", adv.TrackLiar)], (10240,), (liar,), isolate=mode == "isolated")
    assert [(r["track"], type(r["track"]), r["write_actions"]) for r in rows] == [("unprivileged", str, 0)]


@pytest.mark.parametrize("mode", MODES)
def test_7_a_policy_that_never_stops_yielding_is_stopped_and_recorded(mode):
    episode = generate_episode(make_config("default", length=30), seed=0, index=0)
    limits = RunLimits(max_actions_per_step=500)
    run = run_episode(adv.EndlessYielder(at=3), episode, 10240, limits=limits, isolate=mode == "isolated")
    assert run.error is not None and run.error.t == 3
    assert "EndlessYielder" in str(run.error) and "500 actions" in str(run.error)
    assert run.metrics.write_actions == 3  # t = 0, 1, 2; stopped at 3, nothing after
    refs = generated_refs(["default"], [30], 1, seed=0)
    specs = [PolicySpec("endless", partial(adv.EndlessYielder, 3)), PolicySpec("write-all", adv.WriteAll)]
    rows = _table(run_grid(refs, specs, (10240,), ("unprivileged",), isolate=mode == "isolated", limits=limits))
    assert rows["endless", 10240, "unprivileged"]["error"].startswith("stopped: policy 'endless' at t=3")
    assert rows["write-all", 10240, "unprivileged"]["error"] == ""
    assert rows["write-all", 10240, "unprivileged"]["write_actions"] == 30


@pytest.mark.parametrize("mode", MODES)
def test_7_a_slow_policy_is_stopped_at_the_timestep_it_overran(mode):
    episode = generate_episode(make_config("default", length=10), seed=0, index=0)
    limits = RunLimits(max_seconds_per_step=0.2)
    run = run_episode(adv.Sleeper(at=2, seconds=0.6), episode, 10240, limits=limits, isolate=mode == "isolated")
    assert run.error is not None and run.error.t == 2 and "0.2 s" in str(run.error)
    assert run.metrics.write_actions == 2


def test_7_a_policy_stuck_inside_select_is_interrupted_in_isolated_evaluation():
    episode = generate_episode(make_config("default", length=10), seed=0, index=0)
    limits = RunLimits(max_seconds_per_step=0.3)
    run = run_episode(adv.Spinner(at=4), episode, 10240, limits=limits, isolate=True)
    assert run.error is not None and run.error.t == 4
    assert run.metrics.write_actions == 4


def test_7_a_policy_that_swallows_the_interrupt_has_its_process_stopped(monkeypatch):
    monkeypatch.setattr(isolation, "_GRACE_SECONDS", 0.5)
    episode = generate_episode(make_config("default", length=10), seed=0, index=0)
    limits = RunLimits(max_seconds_per_step=0.3)
    run = run_episode(adv.Spinner(at=4, stubborn=True), episode, 10240, limits=limits, isolate=True)
    assert run.error is not None and run.error.t == 4 and "was stopped" in str(run.error)
    assert run.metrics.write_actions == 4


def test_7_a_policy_that_begins_a_reply_and_never_finishes_it_is_stopped(monkeypatch):
    # Once a reply has begun, reading it cannot time out: the evaluator's watchdog stops the
    # process when the transfer outlasts its limit, and the error names the policy and t.
    monkeypatch.setattr(isolation, "_TRANSFER_SECONDS", 1.0)
    episode = generate_episode(make_config("default", length=10), seed=0, index=0)
    limits = RunLimits(max_seconds_per_step=0.3)
    started = time.monotonic()
    with pytest.raises(PolicyError, match=r"Staller.*t=3.*a message on its pipe .* stalled for 1 s"):
        run_episode(adv.Staller(at=3), episode, 10240, limits=limits, isolate=True)
    assert time.monotonic() - started < 30


def test_7_thousands_of_refused_actions_a_step_are_judged_without_holding_them_all(monkeypatch):
    """9,999 refused EXPIREs at every step, within the action limit, were kept until the end
    of the batch: four short runs grew the evaluator from 61 to 690 MB. What a batch holds is
    now bounded (here lowered to 20,000 actions); the runs holding most are judged at once, and
    score exactly as in process."""
    monkeypatch.setattr(isolation, "_MAX_HELD_ACTIONS", 20_000, raising=False)
    most = []
    take = isolation.take

    def counting(reply, runs, mine, t, backlog, label, max_actions, *held):
        most.append(sum(len(taken) if taken else 1 for entries in backlog for _, taken in entries))
        return take(reply, runs, mine, t, backlog, label, max_actions, *held)

    monkeypatch.setattr(isolation, "take", counting)
    refs = generated_refs(["default"], [30], 1, seed=0)
    specs = [PolicySpec("refused", partial(adv.Refused, 2_000)), PolicySpec("write-all", adv.WriteAll)]
    tables = {
        mode: _table(run_grid(refs, specs, (1024, 10240), TRACKS, isolate=mode == "isolated")) for mode in MODES
    }
    assert tables["isolated"] == tables["in-process"]
    assert tables["isolated"]["refused", 1024, "unprivileged"]["error"] == ""
    assert max(most) <= 20_000 < 4 * 30 * 2_000  # (kept whole, the batch would have held them all)
    episode = generate_episode(make_config("default", length=30), seed=0, index=0)
    run = run_episode(adv.Refused(2_000), episode, 10240, isolate=True)
    assert run.store.rejected_counts["EXPIRE"] == 30 * 2_000
    assert len(run.actions) == 30 * 2_001  # the action log asked for keeps every action
    assert max(most) <= 20_000


def test_7_a_reply_longer_than_the_limits_allow_is_refused_before_it_is_read():
    """A reply is bounded by what the process's runs may yield at one timestep, from its length
    header: one far longer is refused unread, naming the policy and the timestep, instead of
    being parsed whole and only then found to hold too many actions."""
    episode = generate_episode(make_config("default", length=10), seed=0, index=0)
    limits = RunLimits(max_actions_per_step=10)
    run = run_episode(adv.FloodedReply(at=2), episode, 10240, limits=limits, isolate=True)
    assert run.error is not None and run.error.t == 3, run.error  # (the forging begins with the next reply)
    assert "FloodedReply" in str(run.error) and "sent a reply of more than" in str(run.error)
    assert run.metrics.write_actions == 3  # t = 0, 1, 2; stopped at 3
    honest = run_episode(adv.Refused(10), episode, 10240, limits=RunLimits(max_actions_per_step=11), isolate=True)
    assert honest.error is None and honest.store.rejected_counts["EXPIRE"] == 100


@pytest.mark.parametrize("mode", MODES)
def test_7_a_merge_delta_of_megabytes_is_refused_alike_and_keeps_a_reply_in_bounds(mode):
    """A delta longer than the step cannot be the canonical one: its process sends it as not
    JSON, so a reply stays within what the limits bound it to, and it is refused as in process."""
    episode = generate_episode(make_config("default", length=5), seed=0, index=0)
    run = run_episode(adv.HugeDelta(), episode, 10240, limits=RunLimits(max_actions_per_step=2),
                      isolate=mode == "isolated")
    assert run.error is None and run.diverged_at is None
    assert run.store.rejected_counts["MERGE"] == 4 and run.metrics.write_actions == 1


def test_a_policy_that_ends_its_own_process_gets_a_named_error():
    episode = generate_episode(make_config("default", length=10), seed=0, index=0)
    with pytest.raises(PolicyError, match=r"Exiter.*t=1.*ended unexpectedly \(exit code 3"):
        run_episode(adv.Exiter(at=1), episode, 10240, isolate=True)


def test_a_decision_handed_to_a_policy_cannot_be_edited(graded):
    mode, table = graded
    _same(table, "decision", "decision-honest")


def test_a_step_of_the_policys_own_making_is_never_what_is_judged(graded):
    mode, table = graded
    _same(table, "impostor", "impostor-honest")


def test_an_expire_target_is_read_as_a_plain_int(graded):
    mode, table = graded
    _same(table, "target", "target-honest")


def test_patching_the_rules_in_the_policys_own_process_has_no_effect(graded):
    mode, table = graded
    if mode != "isolated":
        pytest.skip("one process shares its code: isolated evaluation closes it")
    _same(table, "patcher", "patcher-honest")
    assert table["patcher", 0, "unprivileged"]["bytes_used"] == 0


def test_a_forged_reply_is_judged_like_any_action(graded):
    mode, table = graded
    if mode != "isolated":
        pytest.skip("only a policy's own process can forge its replies")
    # Claiming a WRITE it did not yield is no more than yielding it: judged by the rules.
    _same(table, "forged-reply", "write-all")


def test_a_reply_that_is_not_an_action_gets_a_named_error():
    episode = generate_episode(make_config("default", length=10), seed=0, index=0)
    with pytest.raises(PolicyError, match=r"ForgedReply\(garbage\)' at t=1: its process sent a malformed action"):
        run_episode(adv.ForgedReply(True, "garbage"), episode, 10240, isolate=True)


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ("stranger", "named a run that is not its own"),
        ("twice", "answered twice for one run"),
        ("true", "named a run that is not its own"),
    ],
)
def test_a_forged_list_of_writing_runs_gets_a_named_error(variant, message):
    """The short form of a reply (runs that wrote their step, by number) is checked as closely
    as the long one: only the policy's own runs, each once, numbers of exact type."""
    episode = generate_episode(make_config("default", length=10), seed=0, index=0)
    with pytest.raises(PolicyError, match=rf"ForgedWrites\({variant}\)' at t=0: its process {message}"):
        run_episode(adv.ForgedWrites(True, variant), episode, 10240, isolate=True)
    honest = run_episode(adv.ForgedWrites(False, variant), episode, 10240, isolate=True)
    assert honest.error is None and honest.metrics.write_actions == 0


def test_a_policy_that_does_not_pickle_cannot_be_isolated():
    episode = generate_episode(make_config("default", length=5), seed=0, index=0)
    policy = adv.WriteAll()
    policy.hook = lambda: None
    with pytest.raises(ValueError, match="does not pickle"):
        run_episode(policy, episode, 1024, isolate=True)


# ---------------------------------------------------------------------------- the command line
def test_wpb_eval_isolate_gives_the_in_process_results_and_builds_agents_in_their_own_processes(tmp_path, capsys):
    from wpb_gym.cli import main
    from wpb_gym.evaluation.reports.report import read_results

    # A paper regime and a contract regime with its stateful policy (breaking_detector).
    common = ["--agents", "change_detector,last_kb,priority_greedy,breaking_detector", "--episodes-per-condition", "3"]
    common += ["--budgets", "1KB,10KB", "--regimes", "default,contract_mix", "--quiet"]
    assert main(["eval", *common, "--out", str(tmp_path / "in")]) == 0
    config = tmp_path / "isolated.yaml"
    config.write_text("isolate: true\nmax_actions_per_step: 2000\nmax_seconds_per_step: 5\n", encoding="utf-8")
    assert main(["eval", *common, "--config", str(config), "--out", str(tmp_path / "iso")]) == 0
    run = json.loads((tmp_path / "iso" / "run.json").read_text(encoding="utf-8"))
    assert run["config"]["isolate"] is True and run["config"]["max_actions_per_step"] == 2000
    inside, isolated = read_results(tmp_path / "in" / "results.csv"), read_results(tmp_path / "iso" / "results.csv")
    assert [{m: r[m] for m in METRICS} for r in inside] == [{m: r[m] for m in METRICS} for r in isolated]
    assert all(r["error"] == "" for r in isolated)
    capsys.readouterr()
    assert main(["eval", "--agents", "random", "--isolate", "--out", str(tmp_path / "bad"), "--quiet",
                 "--max-seconds-per-step", "-1"]) == 2
    assert "--max-seconds-per-step" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents: [{name: random, p: 7}]\nisolate: true\n", encoding="utf-8")
    assert main(["eval", "--config", str(bad), "--out", str(tmp_path / "bad"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["wpb eval: error: agent 'random(p=7)': ValueError: p must be a probability in [0, 1], got 7"]
    assert not (tmp_path / "bad").exists()


def test_stopped_runs_are_marked_in_the_leaderboard():
    from wpb_gym.evaluation.reports.report import leaderboard

    refs = generated_refs(["default"], [30], 2, seed=0)
    specs = [PolicySpec("endless", partial(adv.EndlessYielder, 3)), PolicySpec("write-all", adv.WriteAll)]
    rows = run_grid(refs, specs, (10240,), ("unprivileged",), limits=RunLimits(max_actions_per_step=100))
    text = leaderboard(rows)
    assert "| endless † |" in text and "| write-all |" in text
    assert "## † Runs with errors" in text and "`endless`: 2 of 2 runs" in text


def test_10_a_privileged_runs_hints_do_not_reach_the_same_policys_unprivileged_runs():
    """One process served every run of a policy in a batch: an unprivileged policy played on both
    tracks kept the privileged runs' priority hints in its memory and used them in its
    unprivileged runs. Isolated, each track is a process of its own."""
    refs = generated_refs(["default"], [60], 2, seed=0)
    rows = run_grid(refs, [PolicySpec("carrier", adv.HintCarrier, "unprivileged")], (1024, 10240), TRACKS,
                    isolate=True)
    unprivileged = [r for r in rows if r["track"] == "unprivileged"]
    assert len(unprivileged) == 4 and all(r["write_actions"] == 0 for r in unprivileged)
    assert all(r["error"] == "" for r in rows)
