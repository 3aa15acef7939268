"""Golden tests for every WRITE / MERGE / EXPIRE / SKIP rule of the store (spec §2–3).

Expected byte counts are written out from the JSON text the spec's formula serialises, not
recomputed with the code under test.
"""

import copy
import pickle

import pytest

from wpb_gym import (
    ByteBudget,
    ByteMemoryStore,
    MemoryAction,
    Reason,
    Step,
    canonical_delta,
    estimate_bytes,
    policy_step,
)
from wpb_gym.core.budget import BudgetExceededError

META = {"mode": "default"}
META_TEXT = '{"mode": "default"}'  # 19 characters


def snap(t, api="api.v1.endpoint_0", params=("p0_0", "p0_1"), deprecated=False, version=1):
    return Step(t, {"api": api, "deprecated": deprecated, "params": list(params), "version": version}, dict(META))


def state(store):
    return (
        tuple((i.t, i.kind, i.byte_cost, i.merge_parent_t) for i in store.items()),
        store.bytes_used,
    )


# ---------------------------------------------------------------- byte accounting


def test_estimate_bytes_is_the_papers_formula_on_a_paper_step():
    step = Step(
        0,
        {"api": "api.v1.endpoint_7", "deprecated": False, "params": ["p7_0", "p7_1", "p7_2", "p7_3"], "version": 1},
        {"mode": "default", "priority": 0.16666666666666666},
    )
    obs_text = (
        '{"api": "api.v1.endpoint_7", "deprecated": false, "params": ["p7_0", "p7_1", "p7_2", "p7_3"], "version": 1}'
    )
    meta_text = '{"mode": "default", "priority": 0.16666666666666666}'
    assert estimate_bytes(step) == len(obs_text) + len(meta_text) + 32 + 16 == 207
    # The unprivileged view has no priority, so the same step is cheaper there.
    assert estimate_bytes(policy_step(step, "unprivileged")) == len(obs_text) + len(META_TEXT) + 48 == 174


def test_estimate_bytes_sorts_keys_and_counts_empty_metadata():
    step = Step(3, {"b": 1, "a": "x"}, {})
    assert estimate_bytes(step) == len('{"a": "x", "b": 1}') + len("{}") + 48
    assert estimate_bytes(Step(0, None, {})) == len("null") + len("{}") + 48


def test_canonical_delta_is_the_shallow_diff_without_api():
    base = {"api": "e", "params": ["a"], "deprecated": False, "gone": 1}
    new = {"api": "e", "params": ["a", "b"], "deprecated": False, "extra": None, "fresh": 2}
    # "extra": None equals base.get("extra") (None), so it is not part of the delta (spec formula).
    assert canonical_delta(new, base) == {"params": ["a", "b"], "fresh": 2}
    assert canonical_delta({"api": "e"}, {"api": "e", "x": 1}) == {}
    assert canonical_delta({"api": "e"}, {"api": "f"}) is None
    assert canonical_delta({"x": 1}, {"x": 2}) is None
    assert canonical_delta("text", {"api": "e"}) is None


# ---------------------------------------------------------------- WRITE


def test_write_charges_estimate_bytes_and_stores_the_step():
    store = ByteMemoryStore(ByteBudget(1000))
    step = snap(0)
    cost = len('{"api": "api.v1.endpoint_0", "deprecated": false, "params": ["p0_0", "p0_1"], "version": 1}') + 19 + 48
    decision = store.execute(MemoryAction.write(step, reason="why"), current_t=0)
    assert decision.accepted and decision.reason is Reason.ACCEPTED and decision.byte_delta == cost
    item = store.get(0)
    assert (item.kind, item.written_at, item.byte_cost, item.merge_parent_t, item.step) == (
        "WRITE",
        0,
        cost,
        None,
        step,
    )
    assert item.metadata == {"reason": "why"}
    assert store.bytes_used == cost and store.remaining() == 1000 - cost and len(store) == 1


def test_write_of_exactly_the_remaining_budget_fits_and_one_byte_less_does_not():
    step = snap(0)
    cost = estimate_bytes(step)
    assert ByteMemoryStore(cost).apply(MemoryAction.write(step), 0)
    small = ByteMemoryStore(cost - 1)
    decision = small.execute(MemoryAction.write(step), 0)
    assert not decision.accepted and decision.reason is Reason.OVER_BUDGET
    assert len(small) == 0 and small.bytes_used == 0


def test_write_only_the_current_step_and_only_once():
    store = ByteMemoryStore(10_000)
    assert store.execute(MemoryAction.write(snap(1)), current_t=2).reason is Reason.NOT_CURRENT_STEP
    assert store.apply(MemoryAction.write(snap(2)), current_t=2)
    before = state(store)
    assert store.execute(MemoryAction.write(snap(2)), current_t=2).reason is Reason.TIMESTEP_OCCUPIED
    assert state(store) == before
    assert store.execute(MemoryAction.write(snap(3)), current_t=2).reason is Reason.NOT_CURRENT_STEP


# ---------------------------------------------------------------- MERGE


def merge_fixture():
    store = ByteMemoryStore(10_000)
    base = snap(0, params=("p0_0", "p0_1"))
    assert store.apply(MemoryAction.write(base), 0)
    return store, base


def test_merge_stores_the_canonical_delta_at_its_cost():
    store, _ = merge_fixture()
    new = snap(1, params=("p0_0", "p0_1", "p0_2"), deprecated=True)
    decision = store.execute(MemoryAction.merge(new, target_t=0), current_t=1)
    expected_delta = {"deprecated": True, "params": ["p0_0", "p0_1", "p0_2"]}
    cost = len('{"deprecated": true, "params": ["p0_0", "p0_1", "p0_2"]}') + 16
    assert decision.accepted and decision.byte_delta == cost and decision.delta == expected_delta
    item = store.get(1)
    assert (item.kind, item.merge_parent_t, item.delta, item.byte_cost) == ("MERGE", 0, expected_delta, cost)
    assert store.bytes_used == estimate_bytes(snap(0)) + cost
    assert store.retained_timesteps() == (0, 1)


def test_merge_with_the_spec_example_delta():
    store = ByteMemoryStore(10_000)
    assert store.apply(MemoryAction.write(Step(45, {"api": "charge.create", "params": ["amount"]}, {})), 45)
    new = Step(46, {"api": "charge.create", "params": ["amount"], "new_param": "email"}, {})
    decision = store.execute(MemoryAction.merge(new, target_t=45, delta={"new_param": "email"}), 46)
    assert decision.accepted and decision.byte_delta == len('{"new_param": "email"}') + 16 == 38


def test_merge_with_a_supplied_delta_must_match_exactly():
    store, _ = merge_fixture()
    new = snap(1, params=("p0_0",))
    before = state(store)
    wrong = store.execute(MemoryAction.merge(new, 0, delta={"params": ["p0_1"]}), 1)
    assert not wrong.accepted and wrong.reason is Reason.DELTA_MISMATCH and state(store) == before
    extra = store.execute(MemoryAction.merge(new, 0, delta={"params": ["p0_0"], "version": 1}), 1)
    assert extra.reason is Reason.DELTA_MISMATCH and state(store) == before
    # 1 == True in Python but not in JSON: the comparison is on canonical JSON text.
    store2 = ByteMemoryStore(10_000)
    store2.apply(MemoryAction.write(Step(0, {"api": "e", "flag": 0}, {})), 0)
    step = Step(1, {"api": "e", "flag": 1}, {})
    assert store2.execute(MemoryAction.merge(step, 0, delta={"flag": True}), 1).reason is Reason.DELTA_MISMATCH
    assert store.apply(MemoryAction.merge(new, 0, delta={"params": ["p0_0"]}), 1)


def test_merge_rejections_leave_the_store_unchanged():
    store, _ = merge_fixture()
    before = state(store)
    cases = [
        (MemoryAction.merge(snap(0, params=("z",)), 0), Reason.TIMESTEP_OCCUPIED),
        (MemoryAction.merge(snap(1), 0), Reason.EMPTY_DELTA),  # identical content
        (MemoryAction.merge(snap(1, api="api.v2.endpoint_0", version=2), 0), Reason.NOT_SAME_ENDPOINT),
        (MemoryAction.merge(Step(1, {"params": ["x"]}, {}), 0), Reason.NOT_SAME_ENDPOINT),  # no "api"
        (MemoryAction.merge(Step(1, "plain text", {}), 0), Reason.NOT_SAME_ENDPOINT),
        (MemoryAction.merge(snap(1, params=("z",)), 7), Reason.TARGET_MISSING),
        (MemoryAction.merge(snap(2, params=("z",)), 0), Reason.NOT_CURRENT_STEP),
    ]
    for action, reason in cases:
        t = 0 if action.step.t == 0 else 1
        decision = store.execute(action, current_t=t)
        assert (decision.accepted, decision.reason) == (False, reason), action
        assert state(store) == before


def test_merge_into_a_merge_item_is_rejected_and_one_item_per_timestep():
    store, _ = merge_fixture()
    assert store.apply(MemoryAction.merge(snap(1, params=("a",)), 0), 1)
    # The merge item occupies t=1: neither a WRITE nor another MERGE can join it.
    assert store.execute(MemoryAction.write(snap(1, params=("c",))), 1).reason is Reason.TIMESTEP_OCCUPIED
    assert store.execute(MemoryAction.merge(snap(1, params=("c",)), 0), 1).reason is Reason.TIMESTEP_OCCUPIED
    assert store.execute(MemoryAction.merge(snap(2, params=("b",)), 1), 2).reason is Reason.TARGET_NOT_BASE


def test_merge_over_budget_is_rejected():
    base = snap(0)
    store = ByteMemoryStore(estimate_bytes(base) + 20)
    assert store.apply(MemoryAction.write(base), 0)
    big = snap(1, params=("a_long_parameter_name", "another_one"))
    decision = store.execute(MemoryAction.merge(big, 0), 1)
    assert decision.reason is Reason.OVER_BUDGET and len(store) == 1


# ---------------------------------------------------------------- EXPIRE and SKIP


def test_expire_credits_the_exact_cost_and_only_older_items():
    store = ByteMemoryStore(10_000)
    store.apply(MemoryAction.write(snap(0)), 0)
    cost0 = store.get(0).byte_cost
    store.apply(MemoryAction.write(snap(1, params=("q",))), 1)
    used = store.bytes_used
    same_step = store.execute(MemoryAction.expire(1), current_t=1)
    assert same_step.reason is Reason.TARGET_NOT_OLDER and store.bytes_used == used
    assert store.execute(MemoryAction.expire(5), current_t=1).reason is Reason.TARGET_MISSING
    decision = store.execute(MemoryAction.expire(0), current_t=1)
    assert decision.accepted and decision.byte_delta == -cost0
    assert store.bytes_used == used - cost0 and 0 not in store
    assert store.execute(MemoryAction.expire(0), current_t=2).reason is Reason.TARGET_MISSING


def test_expiring_a_base_orphans_its_merge_items():
    store, _ = merge_fixture()
    store.apply(MemoryAction.merge(snap(1, params=("a",)), 0), 1)
    store.apply(MemoryAction.merge(snap(2, params=("b",)), 0), 2)
    assert store.retained_timesteps() == (0, 1, 2)
    store.apply(MemoryAction.expire(0), 3)
    # Orphans stay in memory (their bytes still count) but leave the retained set.
    assert store.timesteps() == (1, 2) and store.retained_timesteps() == ()
    assert store.bytes_used == store.get(1).byte_cost + store.get(2).byte_cost
    # An orphan can be expired like any item.
    assert store.apply(MemoryAction.expire(1), 3)


def test_skip_always_succeeds_and_changes_nothing():
    store = ByteMemoryStore(0)
    before = state(store)
    assert store.apply(MemoryAction.skip(), 0) and state(store) == before
    assert store.accepted_counts["SKIP"] == 1


def test_counts_of_accepted_and_rejected_actions():
    store = ByteMemoryStore(10_000)
    store.apply(MemoryAction.write(snap(0)), 0)
    store.apply(MemoryAction.write(snap(0)), 0)
    store.apply(MemoryAction.expire(0), 1)
    assert store.accepted_counts == {"WRITE": 1, "EXPIRE": 1}
    assert store.rejected_counts == {"WRITE": 1}


def test_time_only_moves_forward():
    store = ByteMemoryStore(10_000)
    store.apply(MemoryAction.skip(), 5)
    with pytest.raises(ValueError, match="time only moves forward"):
        store.apply(MemoryAction.write(snap(4)), 4)
    with pytest.raises(ValueError):
        store.check(MemoryAction.skip(), 3)


# ---------------------------------------------------------------- indexes and the read-only view


def test_oldest_newest_and_newest_base_item_follow_expirations():
    store = ByteMemoryStore(100_000)
    for t in range(6):
        api = "api.v1.endpoint_0" if t % 2 == 0 else "api.v1.endpoint_1"
        store.apply(MemoryAction.write(snap(t, api=api, params=(f"x{t}",))), t)
    assert store.oldest_item().t == 0 and store.newest_item().t == 5
    assert store.newest_base_item("api.v1.endpoint_0").t == 4
    store.apply(MemoryAction.expire(0), 6)
    store.apply(MemoryAction.expire(4), 6)
    store.apply(MemoryAction.expire(5), 6)
    assert store.oldest_item().t == 1 and store.newest_item().t == 3
    assert store.newest_base_item("api.v1.endpoint_0").t == 2
    assert store.newest_base_item("api.v1.endpoint_1").t == 3
    assert store.newest_base_item("api.v9.nothing") is None
    # A MERGE item is never a base item.
    store.apply(MemoryAction.merge(snap(7, api="api.v1.endpoint_0", params=("y",)), 2), 7)
    assert store.newest_base_item("api.v1.endpoint_0").t == 2 and store.newest_item().t == 7
    for t in store.timesteps():
        store.apply(MemoryAction.expire(t), 8)
    assert store.oldest_item() is None and store.newest_item() is None
    assert store.newest_base_item("api.v1.endpoint_0") is None


def test_items_come_oldest_first_and_are_a_snapshot():
    store = ByteMemoryStore(100_000)
    for t in range(4):
        store.apply(MemoryAction.write(snap(t, params=(str(t),))), t)
    items = store.items()
    assert [i.t for i in items] == [0, 1, 2, 3]
    for item in items:  # expiring while iterating the snapshot is safe
        store.apply(MemoryAction.expire(item.t), 4)
    assert len(store) == 0 and store.bytes_used == 0


def test_policies_get_a_read_only_view():
    store = ByteMemoryStore(ByteBudget(5000))
    view = store.view()
    assert not hasattr(view, "apply") and not hasattr(view, "execute")
    assert not hasattr(view.budget, "consume") and not hasattr(view.budget, "release")
    with pytest.raises(AttributeError):
        view.extra = 1  # slots: nothing can be attached or replaced
    store.apply(MemoryAction.write(snap(0)), 0)
    assert view.bytes_used == store.bytes_used and view.budget.remaining() == store.remaining()
    assert len(view) == 1 and 0 in view and view.get(0) is store.get(0)
    assert view.would_accept(MemoryAction.expire(0), 1) and not view.would_accept(MemoryAction.expire(0), 0)
    assert view.check(MemoryAction.expire(0), 0).reason is Reason.TARGET_NOT_OLDER
    # Judging never changes anything.
    assert len(store) == 1 and store.clock == 0
    with pytest.raises(Exception):
        store.get(0).byte_cost = 1  # items are frozen


def test_a_copied_store_views_itself_and_pickles_while_a_view_is_held():
    store = ByteMemoryStore(ByteBudget(5000))
    held = store.view()
    store.apply(MemoryAction.write(snap(0)), 0)
    for copied in (copy.deepcopy(store), pickle.loads(pickle.dumps(store))):
        copied.apply(MemoryAction.write(snap(1, api="api.v1.endpoint_1")), 1)
        assert copied.view() is not held and len(copied.view()) == 2 and len(held) == 1
        assert copied.view() is copied.view()  # one view per store, as before the copy
    assert store.view() is held


# ---------------------------------------------------------------- data model and budget


def test_memory_action_validates_its_fields():
    with pytest.raises(ValueError, match="one of"):
        MemoryAction("DELETE")
    with pytest.raises(ValueError, match="needs step"):
        MemoryAction("WRITE")
    with pytest.raises(ValueError, match="needs target_t"):
        MemoryAction("EXPIRE")
    with pytest.raises(ValueError, match="needs target_t"):
        MemoryAction("MERGE", step=snap(0))
    with pytest.raises(ValueError, match="only MERGE"):
        MemoryAction("WRITE", step=snap(0), delta={"x": 1})
    action = MemoryAction(action="MERGE", step=snap(1), target_t=0, delta={"a": 1}, reason="r")
    assert (action.action, action.target_t, action.delta, action.reason) == ("MERGE", 0, {"a": 1}, "r")
    with pytest.raises(Exception):
        action.target_t = 3


def test_byte_budget_accounting_and_validation():
    budget = ByteBudget(100)
    budget.consume(60)
    assert (budget.used, budget.remaining(), budget.can_afford(40), budget.can_afford(41)) == (60, 40, True, False)
    with pytest.raises(BudgetExceededError):
        budget.consume(41)
    budget.release(60)
    assert budget.used == 0
    with pytest.raises(ValueError):
        budget.release(1)
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(ValueError):
            ByteBudget(bad)
    used = ByteBudget(10)
    used.consume(1)
    with pytest.raises(ValueError, match="fresh"):
        ByteMemoryStore(used)


def test_mutating_what_a_policy_is_shown_cannot_change_the_store():
    store = ByteMemoryStore(10_000)
    view = store.view()
    base = Step(0, {"api": "e", "params": ["a"]}, {})
    store.apply(MemoryAction.write(base), 0)
    store.apply(MemoryAction.merge(Step(1, {"api": "e", "params": ["a", "b"]}, {}), 0), 1)
    shown = view.get(0)
    shown.step.observation["api"] = "other"  # a misbehaving policy edits the payload it sees
    shown.step.observation["params"].append("zzz")
    view.get(1).delta["params"] = []
    with pytest.raises(TypeError):
        view.get(0).metadata["x"] = 1  # item metadata is read-only
    assert store.retained_timesteps() == (0, 1)
    assert store.newest_base_item("e").t == 0 and store.newest_base_item("other") is None
    # MERGE is still judged against the base as it was written: params ["a"] -> ["a", "c"].
    decision = store.execute(MemoryAction.merge(Step(2, {"api": "e", "params": ["a", "c"]}, {}), 0), 2)
    assert decision.accepted and decision.delta == {"params": ["a", "c"]}


def test_endpoint_identity_is_exact_equality_including_type():
    store = ByteMemoryStore(10_000)
    store.apply(MemoryAction.write(Step(0, {"api": 1, "x": 0}, {})), 0)
    step = Step(1, {"api": True, "x": 1}, {})  # True == 1 in Python, but not the same endpoint
    assert store.execute(MemoryAction.merge(step, 0), 1).reason is Reason.NOT_SAME_ENDPOINT
    assert store.newest_base_item(True) is None and store.newest_base_item(1).t == 0


def test_a_supplied_delta_that_is_not_json_is_rejected_not_raised():
    store, _ = merge_fixture()
    new = snap(1, params=("z",))
    decision = store.execute(MemoryAction.merge(new, 0, delta={"params": {1, 2}}), 1)
    assert not decision.accepted and decision.reason is Reason.DELTA_MISMATCH


def test_a_rejection_reports_what_the_action_would_have_charged():
    step = snap(0)
    decision = ByteMemoryStore(10).execute(MemoryAction.write(step), 0)
    assert decision.reason is Reason.OVER_BUDGET and decision.byte_delta == estimate_bytes(step)
    assert ByteMemoryStore(10).execute(MemoryAction.expire(3), 5).byte_delta == 0


def test_items_built_by_the_shortcut_equal_items_built_by_execute():
    """``frozen_instance`` builds items and decisions without ``__init__``: they must be the
    same values (equal, frozen, picklable) as the ones ``__init__`` builds."""
    import pickle

    from wpb_gym.core.types import MemoryItem, frozen_instance

    step = Step(0, {"api": "a", "v": 1}, {"mode": "m"})
    a, b = ByteMemoryStore(1000), ByteMemoryStore(1000)
    assert a.execute(MemoryAction.write(step, reason="r"), 0) == b.write(step, 0, reason="r")
    assert a.get(0) == b.get(0) and dict(b.get(0).metadata) == {"reason": "r"}
    built = frozen_instance(
        MemoryItem,
        {
            "step": step,
            "written_at": 0,
            "byte_cost": 5,
            "metadata": {},
            "kind": "WRITE",
            "merge_parent_t": None,
            "delta": None,
            "api": "a",
        },
    )
    assert built == MemoryItem(step, 0, 5, api="a")
    with pytest.raises(AttributeError):
        built.byte_cost = 1
    assert pickle.loads(pickle.dumps(b.get(0))) == b.get(0)
    assert b.expire(0, 1) == a.execute(MemoryAction.expire(0), 1)


def test_frozen_instances_equal_instances_built_by_init():
    """``frozen_instances`` (the generator's way to build T steps) gives each instance the
    given dict as its attributes: equal to ``__init__``'s, frozen, independent, picklable."""
    import pickle

    from wpb_gym.core.types import frozen_instances

    fields = [
        {"t": t, "observation": {"api": "a", "v": t}, "metadata": {"mode": "m", "priority": 0.1 * t}} for t in range(3)
    ]
    built = frozen_instances(Step, fields)
    assert built == [Step(t, {"api": "a", "v": t}, {"mode": "m", "priority": 0.1 * t}) for t in range(3)]
    assert all(s.__dict__ is f for s, f in zip(built, fields, strict=True))  # the dicts themselves
    with pytest.raises(AttributeError):
        built[0].t = 5
    assert pickle.loads(pickle.dumps(built)) == built
    assert frozen_instances(Step, []) == []


def test_a_private_copy_per_write_that_items_cannot_change():
    obs = {"api": "a", "p": [1]}
    store = ByteMemoryStore(10_000)
    store.apply(MemoryAction.write(Step(0, obs, {})), 0)
    store.apply(MemoryAction.write(Step(1, obs, {})), 1)  # the same object shown again
    assert store._base_observations[0] == store._base_observations[1] == obs
    assert store._base_observations[0] is not obs and store._base_observations[1] is not obs
    store.get(0).step.observation["p"].append(2)  # a policy mutating what it was shown
    assert store._base_observations[1] == {"api": "a", "p": [1]}
    # MERGE is still judged against the copy: {"p": [1, 2]} differs from it.
    assert store.check(MemoryAction.merge(Step(2, {"api": "a", "p": [1, 2]}, {}), 1), 2).accepted


def test_action_constructors_validate_what_they_skip_in_init():
    with pytest.raises(ValueError, match="WRITE"):
        MemoryAction.write(None)
    with pytest.raises(ValueError, match="MERGE"):
        MemoryAction.merge(Step(0, {}, {}), None)
    with pytest.raises(ValueError, match="EXPIRE"):
        MemoryAction.expire(None)
    assert MemoryAction.expire(3, reason="r") == MemoryAction("EXPIRE", target_t=3, reason="r")
    assert MemoryAction.skip() == MemoryAction("SKIP")


def test_runs_without_an_action_log_score_the_same():
    from wpb_gym.episodes.generators.paper import generate_episode, make_config
    from wpb_gym.evaluation.runner import run_episode

    class Fill:
        def select(self, step, store):
            if estimate_bytes(step) <= store.remaining():
                yield MemoryAction.write(step)

    episode = generate_episode(make_config("default", length=50), seed=0, index=0)
    logged = run_episode(Fill(), episode, 2048)
    silent = run_episode(Fill(), episode, 2048, record_actions=False)
    assert silent.actions == () and len(logged.actions) == silent.store.accepted_counts["WRITE"]
    assert silent.metrics == logged.metrics
    assert [i.t for i in silent.store.view().iter_items()] == list(silent.store.timesteps())


def test_the_stores_shared_decisions_and_reasons_past_their_limits_change_nothing(monkeypatch):
    from wpb_gym.core import store as store_module

    steps = [Step(t, {"api": f"GET /{t % 5}", "body": "x" * (t % 13)}, {"mode": "m"}) for t in range(60)]

    def run():
        store = ByteMemoryStore(100_000)
        decisions = []
        for t, step in enumerate(steps):
            decisions.append(store.write(step, t, reason=f"reason {t % 9}"))
            if t % 3 == 2:
                decisions.append(store.expire(t - 1, t))
        return decisions, [(item.t, dict(item.metadata), item.byte_cost) for item in store.items()]

    expected = run()
    monkeypatch.setattr(store_module, "_DECISION_CACHE_LIMIT", 2)
    monkeypatch.setattr(store_module, "_REASON_CACHE_LIMIT", 3)
    store_module._ACCEPTED_DECISIONS.clear()
    assert run() == expected
    assert len(store_module._ACCEPTED_DECISIONS) <= 2


# ---------------------------------------------------------------- forgetting (endless streams)


def test_forget_before_keeps_every_later_reading_and_the_rules():
    store = ByteMemoryStore(100_000)
    for t in range(12):  # three endpoints, each written, merged onto, expired in turn
        api = f"api.v1.endpoint_{t % 3}"
        base = store.newest_base_item(api)
        if base is not None and t % 2:
            store.execute(MemoryAction.merge(snap(t, api, params=("p0_0", f"q{t}")), base.t), t)
        else:
            store.write(snap(t, api), t)
        if t >= 4 and (t - 4) in store:
            store.expire(t - 4, t)
    later = {t: store.held_at(t) for t in range(8, 13)}
    newest = {k: store.newest_base_item(f"api.v1.endpoint_{k}") for k in range(3)}
    store.forget_before(8)
    assert {t: store.held_at(t) for t in range(8, 13)} == later
    assert all(left >= 8 for _, left in store.expired_items())
    assert {k: store.newest_base_item(f"api.v1.endpoint_{k}") for k in range(3)} == newest
    assert store.oldest_item() is store.items()[0] and store.newest_item() is store.items()[-1]
