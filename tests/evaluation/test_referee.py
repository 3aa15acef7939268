"""What the evaluator hands a policy and how it takes actions back: read-only copies, actions
normalised once, the store judging its own canonical steps, the fast path equal to the literal one."""

from __future__ import annotations

import copy
import json
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.readonly import ReadOnlyDict, ReadOnlyList, freeze, thaw
from wpb_gym.core.store import ByteMemoryStore, Decision, Reason
from wpb_gym.core.tracks import policy_episode
from wpb_gym.core.types import Episode, MemoryAction, Step
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.episodes.generators.paper import REGIMES, generate_episode, make_config
from wpb_gym.evaluation.playing import Seat, StepCopies, play
from wpb_gym.evaluation.referee import (
    NOT_JSON,
    MalformedActionError,
    NotAnActionError,
    RunLimits,
    normalise,
)
from wpb_gym.evaluation.runner import run_episode


# ---------------------------------------------------------------------------- read-only copies
def test_read_only_copies_read_like_json_and_refuse_every_edit():
    value = {"api": "a", "params": ["x", {"deep": [1, 2]}], "n": 1.5}
    frozen = freeze(value)
    assert frozen == value and isinstance(frozen, dict) and isinstance(frozen["params"], list)
    assert json.dumps(frozen, sort_keys=True) == json.dumps(value, sort_keys=True)
    assert type(frozen) is ReadOnlyDict and type(frozen["params"][1]["deep"]) is ReadOnlyList
    edits = [
        lambda: frozen.__setitem__("n", 2),
        lambda: frozen.pop("api"),
        lambda: frozen.update(n=2),
        lambda: frozen.setdefault("z", 1),
        lambda: frozen.popitem(),
        lambda: frozen.clear(),
        lambda: frozen["params"].append(1),
        lambda: frozen["params"].sort(),
        lambda: frozen["params"][1]["deep"].__setitem__(0, 9),
        lambda: frozen["params"].__delitem__(0),
    ]
    for edit in edits:
        with pytest.raises(TypeError, match="read-only"):
            edit()
    assert frozen == value
    for twin in (copy.deepcopy(frozen), pickle.loads(pickle.dumps(frozen))):
        assert twin == value and type(twin) is ReadOnlyDict and type(twin["params"]) is ReadOnlyList
    plain = thaw(frozen)
    assert plain == value and type(plain) is dict and type(plain["params"][1]["deep"]) is list
    plain["params"].append(3)  # a thawed copy is the policy's to edit
    assert frozen == value


def test_a_policys_runs_share_one_copy_per_observation_object_carrying_the_canonical_cost():
    episode = generate_episode(make_config("redundancy", length=60), seed=0, index=0)
    steps = policy_episode(episode, "unprivileged").steps
    copies = StepCopies(steps)
    shown = copies.all()
    assert [s.observation for s in shown] == [s.observation for s in steps]
    assert all(s.observation is not c.observation for s, c in zip(shown, steps, strict=True))
    by_object: dict[int, object] = {}
    for original, copy_ in zip(steps, shown, strict=True):
        assert by_object.setdefault(id(original.observation), copy_.observation) is copy_.observation
        assert copy_.__dict__["_write_cost"] == estimate_bytes(original)
    assert copies.step(5) is shown[5]


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("track", ["unprivileged", "privileged"])
def test_an_env_over_the_read_only_copies_matches_the_env_over_the_stream(regime, track):
    # A model agent builds its env from the copies it is shown: features must not depend on
    # whether the JSON containers are plain or read-only.
    episode = generate_episode(make_config(regime, length=80), seed=3, index=1)
    view = policy_episode(episode, track)
    shown = Episode(steps=StepCopies(view.steps).all(), labels={})
    # Terminal rewards: the copies carry no labels, so only the features are compared.
    plain_env = WritePolicyBenchEnv(episodes=[view], track=track, dense_reward=False)
    copy_env = WritePolicyBenchEnv(episodes=[shown], track=track, dense_reward=False)
    a, _ = plain_env.reset(seed=0)
    b, _ = copy_env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(len(episode)):
        assert np.array_equal(a, b)
        mask = plain_env.action_masks()
        assert np.array_equal(mask, copy_env.action_masks())
        action = int(rng.choice(np.flatnonzero(mask)))
        a, ra, done, _, _ = plain_env.step(action)
        b, rb, _, _, _ = copy_env.step(action)
        assert ra == rb
        if done:
            break


# ---------------------------------------------------------------------------- normalising
def _shown() -> Step:
    return Step(4, freeze({"api": "a", "v": 1}), freeze({"mode": "m"}))


class _Str(str):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class _Int(int):
    def __hash__(self) -> int:
        return 0


def test_normalise_reads_every_field_once_into_exact_built_in_types():
    shown = _shown()
    assert normalise(MemoryAction.skip(), shown, 4, "p") == ("SKIP", None, None, None)
    assert normalise(MemoryAction.write(shown, reason="r"), shown, 4, "p") == ("WRITE", None, None, "r")
    kind, target, _, reason = normalise(MemoryAction.expire(_Int(2), reason=_Str("why")), shown, 4, "p")
    assert (kind, target, reason) == ("EXPIRE", 2, "why") and type(target) is int and type(reason) is str
    assert normalise(MemoryAction.expire(np.int64(3)), shown, 4, "p")[1] == 3
    liar = MemoryAction.write(shown)
    object.__setattr__(liar, "action", _Str("WRITE"))
    kind = normalise(liar, shown, 4, "p")[0]
    assert kind == "WRITE" and type(kind) is str
    merge = normalise(MemoryAction.merge(shown, 1, delta=freeze({"v": [1]})), shown, 4, "p")
    assert merge == ("MERGE", 1, {"v": [1]}, None) and type(merge[2]) is dict and type(merge[2]["v"]) is list
    assert normalise(MemoryAction.merge(shown, 1, delta={"v": {1, 2}}), shown, 4, "p")[2] is NOT_JSON


def test_normalise_names_the_policy_and_the_timestep_for_malformed_actions():
    shown = _shown()
    with pytest.raises(NotAnActionError, match=r"policy 'p' at t=4: yielded 'WRITE'") as info:
        normalise("WRITE", shown, 4, "p")
    assert isinstance(info.value, TypeError)
    bad_kind = MemoryAction.skip()
    object.__setattr__(bad_kind, "action", "STORE")
    bad_target = MemoryAction.expire(1)
    object.__setattr__(bad_target, "target_t", True)
    other_step = MemoryAction.write(Step(4, {"api": "b"}, {}))
    for action, message in [
        (bad_kind, "unknown type"),
        (bad_target, "needs an int target_t"),
        (MemoryAction.expire("3"), "needs an int target_t"),
        (other_step, "a step other than the one it was shown"),
    ]:
        with pytest.raises(MalformedActionError, match=message) as info:
            normalise(action, shown, 4, "p")
        assert isinstance(info.value, ValueError)
    half_built = object.__new__(MemoryAction)
    with pytest.raises(MalformedActionError, match="malformed action"):
        normalise(half_built, shown, 4, "p")


def test_a_supplied_delta_that_is_not_json_is_a_mismatch_not_a_crash():
    steps = [Step(0, {"api": "a", "v": 1}, {}), Step(1, {"api": "a", "v": 2}, {})]
    episode = Episode(steps=steps, labels={"critical_steps": [1]})

    class Merger:
        def select(self, step, store):
            if step.t == 0:
                yield MemoryAction.write(step)
            else:
                yield MemoryAction.merge(step, 0, delta={"v": {2}})

    run = run_episode(Merger(), episode, 1000)
    assert [a.decision.reason for a in run.actions] == [Reason.ACCEPTED, Reason.DELTA_MISMATCH]


def test_run_limits_refuse_nonsense_with_the_field_named():
    with pytest.raises(ValueError, match="max_actions_per_step"):
        RunLimits(max_actions_per_step=0)
    with pytest.raises(ValueError, match="max_seconds_per_step"):
        RunLimits(max_seconds_per_step=float("nan"))
    assert RunLimits(None, None).max_actions_per_step is None


# ---------------------------------------------------------------------------- the store's own records
def test_the_store_judges_its_records_not_the_items_it_hands_out():
    store = ByteMemoryStore(1000)
    step = Step(0, {"api": "a", "v": 1}, {})
    shown = Step(0, freeze(step.observation), freeze(step.metadata))
    cost = store.write(step, 0, "r", shown=shown).byte_delta
    item = store.get(0)
    assert item.step is shown and item.byte_cost == cost
    object.__setattr__(item, "byte_cost", 900)
    object.__setattr__(item, "kind", "MERGE")
    assert store.check(MemoryAction.expire(0), 1).byte_delta == -cost
    assert store.retained_timesteps() == (0,)
    assert store.check(MemoryAction.merge(Step(1, {"api": "a", "v": 2}, {}), 0), 1).accepted
    store.expire(0, 1)
    assert store.bytes_used == 0


def test_decisions_cannot_be_edited_and_reason_mappings_are_per_store():
    store = ByteMemoryStore(1000)
    decision = store.check(MemoryAction.write(Step(0, {"x": 1}, {})), 0)
    assert isinstance(decision, Decision) and decision.accepted and bool(decision)
    with pytest.raises(AttributeError):
        object.__setattr__(decision, "byte_delta", 0)
    other = ByteMemoryStore(1000)
    store.write(Step(0, {"x": 1}, {}), 0, "same")
    other.write(Step(0, {"x": 1}, {}), 0, "same")
    assert store.get(0).metadata == other.get(0).metadata == {"reason": "same"}
    assert store.get(0).metadata is not other.get(0).metadata


# ---------------------------------------------------------------------------- the fast path
actions_strategy = st.lists(
    st.lists(
        st.one_of(
            st.tuples(st.just("WRITE"), st.none(), st.one_of(st.none(), st.text(max_size=3))),
            st.tuples(st.just("SKIP"), st.none(), st.none()),
            st.tuples(st.just("EXPIRE"), st.integers(-2, 70), st.none()),
            st.tuples(st.just("MERGE"), st.integers(0, 70), st.none()),
            st.tuples(st.just("EXPIRE-int64"), st.integers(0, 70), st.none()),
        ),
        max_size=4,
    ),
    min_size=60,
    max_size=60,
)


class _Scripted:
    """Yields a scripted list of actions per timestep (targets relative to nothing: raw t)."""

    def __init__(self, script):
        self.script = script

    def select(self, step, store):
        for kind, target, reason in self.script[step.t]:
            if kind == "WRITE":
                yield MemoryAction.write(step, reason=reason)
            elif kind == "SKIP":
                yield MemoryAction.skip()
            elif kind == "MERGE":
                yield MemoryAction.merge(step, target)
            elif kind == "EXPIRE":
                yield MemoryAction.expire(target)
            else:
                yield MemoryAction.expire(np.int64(target))


@given(script=actions_strategy, budget=st.sampled_from([0, 300, 2000, 10**6]), regime=st.sampled_from(sorted(REGIMES)))
def test_the_fast_path_leaves_the_same_memory_as_normalise_and_apply(script, budget, regime):
    episode = generate_episode(make_config(regime, length=60, api_pool=8), seed=1, index=0)
    fast = play(episode, [Seat(_Scripted(script), budget)], record_actions=False)[0]
    literal = play(episode, [Seat(_Scripted(script), budget)], record_actions=True)[0]
    for a, b in [(fast.store, literal.store)]:
        assert a.timesteps() == b.timesteps()
        assert a.retained_timesteps() == b.retained_timesteps()
        assert a.bytes_used == b.bytes_used
        assert a.accepted_counts == b.accepted_counts and a.rejected_counts == b.rejected_counts
        assert [i.metadata for i in a.items()] == [i.metadata for i in b.items()]


def test_policies_are_shown_their_own_copies_and_the_stream_they_are_given_is_those_copies():
    episode = generate_episode(make_config("default", length=30), seed=0, index=0)
    seen: list[tuple[object, object]] = []

    class Watcher:
        needs_stream = True

        def start_episode(self, context):
            self.stream = context.stream

        def select(self, step, store):
            seen.append((step, self.stream.steps[step.t]))
            return ()

    play(episode, [Seat(Watcher(), 100, group="w"), Seat(Watcher(), 200, group="w"), Seat(Watcher(), 100, group="x")])
    first, second, third = seen[:30], seen[30:60], seen[60:]
    assert all(step is streamed for step, streamed in seen)
    assert all(a[0] is b[0] for a, b in zip(first, second, strict=True))  # one policy: one copy
    assert all(a[0] is not c[0] for a, c in zip(first, third, strict=True))  # another policy: its own
    originals = policy_episode(episode, "unprivileged").steps
    assert all(step.observation is not originals[step.t].observation for step, _ in seen)


def test_an_oracle_policy_gets_a_private_copy_of_the_labels():
    episode = generate_episode(make_config("default", length=30), seed=0, index=0)
    labels = json.dumps(episode.to_dict(), sort_keys=True)

    class Editor:
        track = "oracle"

        def start_episode(self, context):
            context.episode.labels["critical_steps"].clear()
            context.episode.steps[0].observation.clear()

        def select(self, step, store):
            return ()

    play(episode, [Seat(Editor(), 100, "privileged")])
    assert json.dumps(episode.to_dict(), sort_keys=True) == labels
