"""Property tests of the store over random action sequences.

Invariants: bytes used never exceed the budget and always equal the sum of item costs;
``check`` agrees with ``apply``; a rejected action changes nothing; the retained set and
the indexes agree with the items. A small reference model written straight from the spec's
wording must accept exactly the same actions and hold the same items.
"""

import json

from hypothesis import given
from hypothesis import strategies as st

from wpb_gym import ByteMemoryStore, MemoryAction, Step

APIS = ["api.v1.endpoint_0", "api.v1.endpoint_1", "api.v2.endpoint_0"]
PARAMS = ["a", "b", "c"]


@st.composite
def streams(draw):
    n = draw(st.integers(1, 14))
    steps = []
    for t in range(n):
        kind = draw(st.sampled_from(["api", "api", "api", "text", "noapi"]))
        if kind == "api":
            obs = {
                "api": draw(st.sampled_from(APIS)),
                "params": draw(st.lists(st.sampled_from(PARAMS), max_size=3)),
                "deprecated": draw(st.booleans()),
            }
        elif kind == "text":
            obs = draw(st.text(max_size=20))
        else:
            obs = {"params": draw(st.lists(st.sampled_from(PARAMS), max_size=2))}
        meta = draw(st.sampled_from([{}, {"mode": "default"}, {"mode": "x", "priority": 0.5}]))
        steps.append(Step(t, obs, meta))
    budget = draw(st.integers(0, 900))
    programs = []
    for t in range(n):
        actions = []
        for _ in range(draw(st.integers(0, 4))):
            choice = draw(st.sampled_from(["WRITE", "MERGE", "EXPIRE", "SKIP", "WRITE_OTHER", "MERGE_DELTA"]))
            target = draw(st.integers(0, t))
            if choice == "WRITE":
                actions.append(MemoryAction.write(steps[t]))
            elif choice == "WRITE_OTHER":
                actions.append(MemoryAction.write(steps[draw(st.integers(0, n - 1))]))
            elif choice == "MERGE":
                actions.append(MemoryAction.merge(steps[t], target))
            elif choice == "MERGE_DELTA":
                delta = draw(st.dictionaries(st.sampled_from(["params", "deprecated", "x"]), st.booleans(), max_size=2))
                actions.append(MemoryAction.merge(steps[t], target, delta=delta))
            elif choice == "EXPIRE":
                actions.append(MemoryAction.expire(target))
            else:
                actions.append(MemoryAction.skip())
        programs.append(actions)
    return steps, budget, programs


class ReferenceStore:
    """The spec's rules, written independently of the store under test (no indexes, no reuse)."""

    def __init__(self, max_bytes):
        self.max_bytes = max_bytes
        self.items = {}  # t -> (kind, cost, parent_t, observation)

    def used(self):
        return sum(cost for _, cost, _, _ in self.items.values())

    def apply(self, action, t):
        if action.action == "SKIP":
            return True
        if action.action == "EXPIRE":
            if action.target_t in self.items and action.target_t < t:
                del self.items[action.target_t]
                return True
            return False
        step = action.step
        if step.t != t or t in self.items:
            return False
        if action.action == "WRITE":
            cost = (
                len(json.dumps(step.observation, sort_keys=True)) + len(json.dumps(step.metadata, sort_keys=True)) + 48
            )
            if self.used() + cost > self.max_bytes:
                return False
            self.items[t] = ("WRITE", cost, None, step.observation)
            return True
        target = self.items.get(action.target_t)
        if target is None or target[0] != "WRITE":
            return False
        new, base = step.observation, target[3]
        if not (isinstance(new, dict) and isinstance(base, dict) and "api" in new and "api" in base):
            return False
        if new["api"] != base["api"]:
            return False
        delta = {k: new[k] for k in new if k != "api" and new[k] != base.get(k)}
        if not delta:
            return False
        if action.delta is not None and json.dumps(action.delta, sort_keys=True) != json.dumps(delta, sort_keys=True):
            return False
        cost = len(json.dumps(delta, sort_keys=True)) + 16
        if self.used() + cost > self.max_bytes:
            return False
        self.items[t] = ("MERGE", cost, action.target_t, new)
        return True

    def retained(self):
        out = []
        for t, (kind, _, parent, obs) in sorted(self.items.items()):
            if kind == "WRITE":
                out.append(t)
            elif (
                parent in self.items and self.items[parent][0] == "WRITE" and self.items[parent][3]["api"] == obs["api"]
            ):
                out.append(t)
        return tuple(out)


def snapshot(store):
    return (
        tuple((i.t, i.kind, i.byte_cost, i.merge_parent_t, json.dumps(i.delta, sort_keys=True)) for i in store.items()),
        store.bytes_used,
        store.retained_timesteps(),
    )


@given(streams())
def test_budget_invariants_and_check_agrees_with_apply(case):
    steps, budget, programs = case
    store = ByteMemoryStore(budget)
    for t, actions in enumerate(programs):
        for action in actions:
            before = snapshot(store)
            judged = store.check(action, t)
            assert snapshot(store) == before  # judging changes nothing
            accepted = store.apply(action, t)
            assert accepted == judged.accepted
            if not accepted:
                assert snapshot(store) == before
            else:
                assert store.bytes_used == before[1] + judged.byte_delta
            assert 0 <= store.bytes_used <= budget
            assert store.bytes_used == sum(item.byte_cost for item in store.items())


@given(streams())
def test_store_matches_the_reference_model(case):
    steps, budget, programs = case
    store, reference = ByteMemoryStore(budget), ReferenceStore(budget)
    for t, actions in enumerate(programs):
        for action in actions:
            assert store.apply(action, t) == reference.apply(action, t), (action, t)
            assert store.timesteps() == tuple(sorted(reference.items))
            assert store.bytes_used == reference.used()
    assert store.retained_timesteps() == reference.retained()


@given(streams())
def test_indexes_agree_with_the_items(case):
    steps, budget, programs = case
    store = ByteMemoryStore(budget)
    for t, actions in enumerate(programs):
        for action in actions:
            store.apply(action, t)
        items = store.items()
        assert [i.t for i in items] == sorted(i.t for i in items)
        assert store.oldest_item() == (items[0] if items else None)
        assert store.newest_item() == (items[-1] if items else None)
        for api in APIS:
            bases = [i for i in items if i.kind == "WRITE" and i.api == api]
            assert store.newest_base_item(api) == (bases[-1] if bases else None)
        retained = set(store.retained_timesteps())
        for item in items:
            if item.kind == "WRITE":
                assert item.t in retained
            else:
                parent = store.get(item.merge_parent_t)
                assert (item.t in retained) == (parent is not None and parent.kind == "WRITE")


@given(streams())
def test_shortcuts_do_what_execute_does(case):
    """``skip``/``write``/``expire`` (the environment's hot path) judge and apply exactly as
    ``execute`` with the corresponding ``MemoryAction``: same decision, same state, same counts."""
    steps, budget, programs = case
    via_execute, via_shortcut = ByteMemoryStore(budget), ByteMemoryStore(budget)
    for t, actions in enumerate(programs):
        for action in actions:
            if action.action == "MERGE":
                continue  # no shortcut: MERGE always goes through execute
            expected = via_execute.execute(action, t)
            if action.action == "SKIP":
                got = via_shortcut.skip(t)
            elif action.action == "WRITE":
                got = via_shortcut.write(action.step, t)
            else:
                got = via_shortcut.expire(action.target_t, t)
            assert got == expected, (action, t)
            assert snapshot(via_shortcut) == snapshot(via_execute)
            assert via_shortcut.items() == via_execute.items()
            assert via_shortcut.accepted_counts == via_execute.accepted_counts
            assert via_shortcut.rejected_counts == via_execute.rejected_counts
            assert via_shortcut.clock == via_execute.clock


@given(streams())
def test_retained_loss_is_what_an_expire_removes_from_the_retained_set(case):
    steps, budget, programs = case
    store = ByteMemoryStore(budget)
    for t, actions in enumerate(programs):
        for action in actions:
            if action.action == "EXPIRE":
                before = set(store.retained_timesteps())
                loss = store.retained_loss(action.target_t)
                accepted = store.apply(action, t)
                after = set(store.retained_timesteps())
                assert set(loss) == (before - after if accepted else set(loss))
                assert len(set(loss)) == len(loss) and set(loss) <= before
                if not accepted:
                    assert before == after and (loss == () or action.target_t in store)
            else:
                store.apply(action, t)
    assert store.retained_loss(10**6) == ()
