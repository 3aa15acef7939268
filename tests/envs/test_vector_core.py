"""The vector env's compiled core (``envs.fast``) against the single env, on adversarial settings.

``test_vector_env.py`` plays the vector env against ``SyncVectorEnv`` on the generated regimes;
here the same comparison runs over every env setting the reference-encoder tests draw (slot
orders, EXPIRE caps, budgets down to 0, every reward, dense or terminal, costs and penalties)
and the hand-made episodes that stress equality (MERGE-heavy, mixed contents with free text,
reverts, removed endpoints, versions of changing type), plus values that print differently but
compare equal in Python, observations the core cannot compile, and the single envs a user reads.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv
from hypothesis import given, settings
from hypothesis import strategies as st
from test_reference_encoder import SOURCES, configs
from test_vector_env import play_both, same

from wpb_gym import Episode, Step
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.rewards import RewardFunction
from wpb_gym.envs.vector import WritePolicyBenchVectorEnv
from wpb_gym.episodes.frozen import freeze_set
from python_path import python_env


@settings(max_examples=40, deadline=None)
@given(source=st.sampled_from(SOURCES), track=st.sampled_from(["unprivileged", "privileged"]), data=st.data(),
       seed=st.integers(0, 2**31 - 1), invalid_share=st.sampled_from([0.0, 0.2]))
def test_every_setting_and_hand_made_episode_steps_as_the_single_envs(source, track, data, seed, invalid_share):
    kwargs = data.draw(configs(source, track))
    play_both(3, 70, seed=seed, invalid_share=invalid_share, compiled=True, **kwargs)


def _episode(observations: list) -> Episode:
    steps = [Step(t, obs, {"mode": "m"}) for t, obs in enumerate(observations)]
    utilities = {t: 1 + t % 3 for t in range(len(steps))}
    return Episode(steps=steps, labels={"critical_steps": list(range(0, len(steps), 2)), "utility_by_step": utilities})


# Values that print differently but are equal in Python (1 == 1.0 == True, a missing key is None
# to a MERGE delta), versions of several types, and a field that only disappears.
EQUAL_BUT_PRINTED_APART = [
    {"api": "a", "version": 1, "p": [1, {"x": True}], "params": ["q"]},
    {"api": "a", "version": 1.0, "p": [1.0, {"x": 1}], "params": ["q"]},
    {"api": "a", "version": True, "p": [1], "n": None, "params": ["q", "r"]},
    {"api": "a", "version": "1", "p": [1], "params": ["q"], "deprecated": True},
    {"api": "a", "version": [1], "p": [True]},
    {"api": "a", "version": [1.0], "p": [1.0], "extra": 2.5},
    {"api": "a", "version": 2**60 + 1, "p": [1]},
    {"api": "a", "version": float(2**60), "p": [1]},
    "free text",
    ["a", "list"],
    {},
]


@pytest.mark.parametrize("slots", [1, 3])
def test_values_equal_in_python_but_printed_apart(slots):
    episode = _episode(EQUAL_BUT_PRINTED_APART * 3)
    for seed in range(4):
        play_both(2, 80, seed=seed, invalid_share=0.1, compiled=True, episodes=[episode], budget_bytes=700,
                  slots=slots, reward={"f1": 0.5, "neg_regret": 0.5})


def test_observations_that_are_not_plain_json_are_stepped_by_the_single_env():
    plain = _episode(copy.deepcopy(EQUAL_BUT_PRINTED_APART))
    odd = _episode([{"api": "a", "v": float("nan")}, {"api": "a", "p": ("x",)}, {"api": "a", "n": {1: 2}}] * 4)
    kwargs = {"episodes": [plain, odd], "episode_order": "cycle", "budget_bytes": 600}
    vector = WritePolicyBenchVectorEnv(2, **kwargs)
    vector.reset(seed=0)
    vector.reset(options={"reset_mask": np.array([False, True]), "episode_index": 1})
    assert vector.core.compiled.tolist() == [True, False]
    assert play_both(2, 60, seed=0, invalid_share=0.2, compiled=None, **kwargs) >= 2


@pytest.mark.parametrize("mode", ["ansi", "rgb_array"])
def test_rendering_vector_envs_draw_what_single_envs_on_python_parts_draw(mode):
    kwargs = {"length": 30, "budget_bytes": 1500, "render_mode": mode}
    assert play_both(2, 70, seed=1, invalid_share=0.2, **kwargs) >= 2
    vector = WritePolicyBenchVectorEnv(2, **kwargs)
    sync = SyncVectorEnv([lambda: python_env(**kwargs) for _ in range(2)])
    _, info = vector.reset(seed=4)
    sync.reset(seed=4)
    rng = np.random.default_rng(4)
    for step in range(80):  # through the end of the first episodes, autoresets included
        assert vector.core.compiled.all()
        actions = np.array([rng.choice(np.flatnonzero(row)) for row in info["action_mask"]])
        _, _, terminated, _, info = vector.step(actions)
        sync.step(actions)
        if mode == "ansi" or step % 8 == 0 or terminated.any():  # a picture takes tens of ms to draw
            for got, want in zip(vector.render(), [env.render() for env in sync.envs], strict=True):
                assert np.array_equal(got, want) if mode == "rgb_array" else got == want


def test_the_single_envs_a_user_reads_hold_the_memory_the_core_built():
    vector = WritePolicyBenchVectorEnv(3, length=40, budget_bytes=3000, slots=3)
    _, info = vector.reset(seed=2)
    rng = np.random.default_rng(2)
    for _ in range(25):
        actions = np.array([rng.choice(np.flatnonzero(row)) for row in info["action_mask"]])
        _, _, _, _, info = vector.step(actions)
        if rng.random() < 0.3:
            assert vector.get_attr("t") == tuple(info["t"].tolist())
    single = WritePolicyBenchEnv(length=40, budget_bytes=3000, slots=3)
    for i, env in enumerate(vector.envs):
        assert np.array_equal(env.action_masks(), info["action_mask"][i])
        assert env.store.bytes_used == info["bytes_used"][i]
        assert env.t == info["t"][i] and env.store is env.store  # read back once, kept
        single.reset(seed=2 + i)
        assert single.episode.episode_id == env.episode.episode_id


def test_a_sub_envs_single_env_is_the_sub_env():
    """What a user does to a sub-env's single env (set an attribute, reset it, expose an item,
    step it) is what the vector env plays, and the compiled core goes on playing it."""
    kwargs = {"length": 40, "budget_bytes": 3000, "slots": 2}
    vector = WritePolicyBenchVectorEnv(2, **kwargs)
    sync = SyncVectorEnv([lambda: python_env(**kwargs) for _ in range(2)])
    _, info = vector.reset(seed=3)
    sync.reset(seed=3)
    rng = np.random.default_rng(3)
    exposed = 0
    for step in range(60):
        if step == 20:
            assert vector.get_attr("t") == sync.get_attr("t")
            vector.sub_env(0).invalid_action_penalty = sync.envs[0].invalid_action_penalty = 0.5
        if step == 30:
            assert vector.call("reset", seed=7)[1][0].tolist() == sync.call("reset", seed=7)[1][0].tolist()
        if step == 35:
            got = vector.sub_env(1).step(0)
            same_step(got, sync.envs[1].step(0))
        if step >= 40:
            for i in range(2):
                hidden = sorted(set(vector.sub_env(i).store.timesteps()) - set(vector.sub_env(i).slot_timesteps))
                if hidden:
                    assert vector.sub_env(i).expose_item(hidden[0]) == sync.envs[i].expose_item(hidden[0])
                    assert np.array_equal(vector.action_masks()[i], sync.envs[i].action_masks())
                    exposed += 1
        assert vector.core.compiled.all()
        actions = np.array([rng.integers(0, vector.n_actions) for _ in range(2)])
        got, want = vector.step(actions), sync.step(actions)
        same(got, want)
    assert exposed > 0


def same_step(got: tuple, want: tuple) -> None:
    """One single env's step outputs, equal."""
    for a, b in zip(got, want, strict=True):
        if isinstance(a, dict):
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
        else:
            assert np.array_equal(a, b)


def test_agents_attached_to_the_vector_env_play_as_on_single_envs():
    from agents.registry import make_agent

    kwargs = {"length": 60, "budget_bytes": 3000, "slots": 2}

    def play(vector):
        agent = make_agent("merge_aggressive")
        vector.reset(seed=0)
        agent.attach(vector)
        outputs = []
        for _ in range(150):
            actions, _ = agent.predict(np.zeros((2, 1)))
            outputs.append(vector.step(actions))
        return outputs

    for got, want in zip(play(WritePolicyBenchVectorEnv(2, **kwargs)),
                         play(SyncVectorEnv([lambda: python_env(**kwargs) for _ in range(2)])), strict=True):
        same(got, want)


def test_container_apis_are_stepped_by_the_single_env():
    # The table keys a list "api" by its JSON text, the store compares with ==: [1] == [True].
    episode = _episode([{"api": [1], "x": 1}, {"api": [True], "x": 2}, {"api": [1], "x": 3}] * 3)
    vector = WritePolicyBenchVectorEnv(1, episodes=[episode])
    vector.reset(seed=0)
    assert not vector.core.compiled.any()
    play_both(1, 30, seed=0, invalid_share=0.5, compiled=False, episodes=[episode])


def test_the_vector_env_pickles_mid_episode_and_goes_on_alike():
    vector = WritePolicyBenchVectorEnv(2, length=30)
    _, info = vector.reset(seed=4)
    rng = np.random.default_rng(4)
    for _ in range(10):
        _, _, _, _, info = vector.step(np.array([rng.choice(np.flatnonzero(row)) for row in info["action_mask"]]))
    copy_ = pickle.loads(pickle.dumps(vector))
    for _ in range(40):
        actions = np.array([rng.choice(np.flatnonzero(row)) for row in info["action_mask"]])
        got, want = copy_.step(actions), vector.step(actions)
        same(got, want)
        info = want[4]


class _BonusReward(RewardFunction):
    def reward(self, decided, penalty, metrics):
        return super().reward(decided, penalty, metrics) + 0.01


@pytest.mark.parametrize("kwargs", [
    {"budget_bytes": 66074153943056138},  # past 2**53: Python divides the ints exactly
    {"budget_bytes": 2**62},
    {"max_expires_per_step": 2**63},
    {"reward_fn": _BonusReward({"f1": 1.0}, True, 0.03)},  # a part the kernel does not mirror
])
def test_settings_past_what_the_core_mirrors_are_stepped_by_the_single_env(kwargs):
    assert play_both(2, 40, seed=5, invalid_share=0.2, compiled=False, length=12, **kwargs) >= 2


def test_a_step_whose_t_is_not_its_position_fails_as_in_the_single_env():
    steps = [Step(0, {"api": "a", "x": 1}, {"mode": "m"}), Step(5, {"api": "a", "x": 2}, {"mode": "m"})]
    episode = Episode(steps=steps, labels={"critical_steps": [1], "utility_by_step": {0: 1, 1: 1}})
    for env in (WritePolicyBenchVectorEnv(1, episodes=[episode]),
                SyncVectorEnv([lambda: python_env(episodes=[episode])])):
        env.reset(seed=0)
        env.step(np.array([0]))
        with pytest.raises(AssertionError, match="NOT_CURRENT_STEP"):
            env.step(np.array([1]))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | st.sampled_from([0, 1, -0.0, 1.0, 0.5, 2**53, float(2**53), 10**16, 1e16]) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(a=_JSON, b=_JSON)
def test_value_ids_are_equal_exactly_when_python_says_so_and_lengths_are_the_json_texts(a, b):
    from wpb_gym.core.accounting import json_text
    from wpb_gym.envs.fast.contents import equality_key, json_length

    assert (equality_key(a) == equality_key(b)) == (a == b)
    assert json_length(a) == len(json_text(a))
    names = [x for x in (a if isinstance(a, list) else [a]) if isinstance(x, str)]  # lists of strings, often
    assert json_length(names) == len(json_text(names))


def test_a_reset_that_fails_part_way_leaves_the_sub_envs_it_reached_started():
    vector = WritePolicyBenchVectorEnv(2, length=20)
    sync = SyncVectorEnv([lambda: python_env(length=20) for _ in range(2)])
    same(vector.reset(seed=0), sync.reset(seed=0))
    for _ in range(3):
        same(vector.step(np.ones(2, dtype=int)), sync.step(np.ones(2, dtype=int)))
    for env in (vector, sync):
        with pytest.raises(Exception, match="Seed must be greater or equal to zero"):
            env.reset(seed=[11, -1])  # sub-env 0 is reset, sub-env 1 refuses its seed
    for _ in range(5):
        got, want = vector.step(np.ones(2, dtype=int)), sync.step(np.ones(2, dtype=int))
        same(got[:4], want[:4])
    assert vector.get_attr("t") == sync.get_attr("t")


def test_episodes_from_files_that_come_back_reuse_their_arrays_and_step_alike(tmp_path):
    frozen = freeze_set(tmp_path / "set", ["default", "reverts"], [12], 2, seed=8, overrides={"api_pool": 5})
    kwargs = {"episodes": str(frozen.root), "episode_order": "cycle", "dense_reward": True,
              "reward": {"f1": 0.5, "neg_regret": 0.5}}
    assert play_both(3, 150, seed=2, invalid_share=0.1, **kwargs) >= 12
    vector = WritePolicyBenchVectorEnv(2, **kwargs)
    vector.reset(seed=0)
    for _ in range(40):
        vector.step(np.ones(2, dtype=int))
    assert 0 < len(vector.core.kept) <= 4  # the set's four episodes, compiled once each


@pytest.mark.parametrize("reward", [{"f1": 1.0}, {"f1": 0.5, "neg_regret": 0.5}])
def test_an_episode_that_comes_back_at_a_budget_has_its_oracle_computed_once(tmp_path, monkeypatch, reward):
    import wpb_gym.envs.rewards as rewards

    frozen = freeze_set(tmp_path / "set", ["reverts"], [12], 2, seed=3, overrides={"api_pool": 5})
    kwargs = {"episodes": str(frozen.root), "episode_order": "cycle", "reward": reward, "dense_reward": True}
    assert play_both(2, 120, seed=4, **kwargs) >= 8  # the metrics (U*(B) in them) are the single envs'
    calls = []
    for name in ("oracle_utility", "oracle_curve"):
        original = getattr(rewards, name)
        monkeypatch.setattr(rewards, name, lambda *args, _f=original, _n=name: calls.append((_n, args[2])) or _f(*args))
    vector = WritePolicyBenchVectorEnv(2, autoreset_mode="Disabled", **kwargs)
    budgets, finished = [10240, 300], 0
    vector.reset(seed=0, options={"budget_bytes": budgets[0]})
    seen = set()
    for _ in range(150):  # the set's two episodes come back, at one budget and then the other, in turn
        _, _, terminated, _, info = vector.step(np.zeros(2, dtype=int))
        if terminated.any():
            finished += int(terminated.sum())
            seen |= {(int(info["budget_bytes"][i]), info["oracle_utility"][i]) for i in np.flatnonzero(terminated)}
            vector.reset(options={"reset_mask": terminated, "budget_bytes": budgets[finished // 4 % 2]})
    assert finished >= 16
    expected = set()
    for budget in budgets:  # what single envs report for the same episodes at the same budgets
        single = WritePolicyBenchEnv(**kwargs, budget_bytes=budget)
        for index in range(2):
            single.reset(options={"episode_index": index})
            while True:
                _, _, terminated, _, info = single.step(0)
                if terminated:
                    expected.add((budget, info["oracle_utility"]))
                    break
    assert seen == expected
    # Once per (episode, budget), and once more at most for each sub-env that started an episode
    # before its first close; never once per episode played.
    assert len(calls) <= 2 * len(budgets) + 2 * len(budgets) * 2 < finished


def _renumbered(ids) -> list[int]:
    """Ids as 0.. in first-seen order (-1 stays -1): two columns agree up to the names of their ids."""
    names: dict[int, int] = {}
    return [-1 if i < 0 else names.setdefault(i, len(names)) for i in ids]


def _classes(values) -> list[int]:
    """Each value as the first position of a value equal to it."""
    names: dict = {}
    return [names.setdefault(v, len(names)) for v in values]


@settings(max_examples=60, deadline=None)
@given(source=st.sampled_from(SOURCES), track=st.sampled_from(["unprivileged", "privileged"]), data=st.data())
def test_the_core_reads_an_episode_as_the_single_envs_table_does(source, track, data):
    from wpb_gym.envs.fast.contents import DEPRECATED, PARAMS, REMOVED, REQUIRED, ContentMemo
    from wpb_gym.envs.fast.episode_arrays import _returns_to_earlier, describe_episode
    from wpb_gym.envs.observation.comparisons import contracts, seen_features
    from wpb_gym.envs.observation.stream_table import StreamTable

    kwargs = data.draw(configs(source, track))
    env = WritePolicyBenchEnv(**{k: v for k, v in kwargs.items() if k in ("regime", "length", "api_pool",
                                                                         "episode_seed", "episodes", "doc_prob",
                                                                         "migration_guides", "drift_prob")})
    memo = ContentMemo(limit=data.draw(st.sampled_from([4, 16384])))  # a small memo starts afresh often
    for seed in range(3):
        env.reset(seed=seed)
        table = StreamTable(env.episode, track)
        columns = describe_episode(env.episode, track, memo)
        assert columns is not None
        assert (columns.content_of + 1).tolist() == table.contents
        assert columns.costs.tolist() == table.costs
        assert columns.kinds.tolist() == table.kinds
        assert columns.families.tolist() == _renumbered(table.families)
        assert columns.apis.tolist() == _renumbered(table.apis)
        assert columns.previous.tolist() == table.previous_shown
        assert columns.deprecated.tolist() == table.deprecated and columns.removed.tolist() == table.removed
        assert columns.priorities == table.priorities
        contract_ids: dict = {}
        contract_of_content = np.array([-1 if d[PARAMS] is None else contract_ids.setdefault(
            (d[PARAMS], d[REQUIRED] or (), d[DEPRECATED], d[REMOVED]), len(contract_ids)) for d in columns.contents])
        returns = _returns_to_earlier(columns.families, columns.content_of, columns.previous, contract_of_content)
        assert returns.tolist() == [row[-1] for row in seen_features(table, contracts(table))]
        first = {c: t for t, c in reversed(list(enumerate(columns.content_of.tolist())))}
        for position in (PARAMS, REQUIRED):  # parameter sets: equal members exactly when equal masks
            masks = [(table.params if position == PARAMS else table.required)[t] for t in first.values()]
            members = [columns.contents[c][position] for c in first]
            assert [m is None for m in members] == [m is None for m in masks]
            assert [len(m) for m in members if m is not None] == [m.bit_count() for m in masks if m is not None]
            assert _classes(members) == _classes(masks)


# Contracts without "required" and with an empty one are the same contract; parameters 1 and True
# are different members; a dict's fields are compared by key, whatever the order they come in.
CONTRACTS_AND_FIELDS = {
    "required missing or empty": [{"api": "a", "params": ["q"]}, {"api": "a", "params": ["r"]},
                                  {"api": "a", "params": ["q"], "required": []},
                                  {"api": "a", "params": ["r"], "required": []}, {"api": "a", "params": ["q"]}],
    "1 and True as members": [{"api": "a", "params": [1]}, {"api": "a", "params": [True]},
                              {"api": "a", "params": [1, True]}, {"api": "a", "params": [1.0]},
                              {"api": "a", "params": [True, 1]}, {"api": "a", "params": [1]}],
    "keys in another order": [{"api": "a", "x": 1, "y": 2}, {"y": 2, "api": "a", "x": 3},
                              {"x": 1, "y": 3, "api": "a"}, {"api": "a", "y": 2, "x": 1},
                              {"y": [1], "x": True, "api": "a"}],
}


@pytest.mark.parametrize("name", sorted(CONTRACTS_AND_FIELDS))
def test_contracts_members_and_field_order_step_as_the_single_envs(name):
    observations = CONTRACTS_AND_FIELDS[name]
    for seed in range(6):
        play_both(2, 60, seed=seed, invalid_share=0.1, compiled=True,
                  episodes=[_episode(copy.deepcopy(observations) * 3), _episode(observations)],
                  budget_bytes=(200, 700, 5000)[seed % 3], slots=1 + seed % 3,
                  track=("unprivileged", "privileged")[seed % 2], reward={"f1": 0.5, "neg_regret": 0.5})


def test_episodes_the_core_does_not_mirror_are_not_described():
    from wpb_gym.envs.fast.contents import ContentMemo
    from wpb_gym.envs.fast.episode_arrays import describe_episode

    odd = [[{"api": "a", "v": float("nan")}], [{"api": "a", "p": ("x",)}], [{"api": "a", "n": {1: 2}}],
           [{"api": ["a"], "v": 1}], [{"api": {"a": 1}}]]
    for observations in odd:
        assert describe_episode(_episode(observations * 2), "unprivileged", ContentMemo()) is None
    misnumbered = Episode(steps=[Step(5, {"api": "a"}, {}), Step(6, {"api": "b"}, {})], labels={})
    assert describe_episode(misnumbered, "unprivileged", ContentMemo()) is None
    assert describe_episode(_episode(copy.deepcopy(EQUAL_BUT_PRINTED_APART)), "privileged", ContentMemo()) is not None


_JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.5, 1.0, 2.0]),
                          st.sampled_from(["a", "b", "é", 'q"t', "back\\slash", "tab\t", ""]))
_JSON_VALUES = st.recursive(_JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                            | st.dictionaries(st.sampled_from(["x", "y"]), inner, max_size=2), max_leaves=6)
_SNAPSHOT_KEYS = ("api", "version", "params", "required", "deprecated", "removed", "last_updated", "x")


@st.composite
def _observation_batches(draw) -> list[list]:
    """Batches of observations, mostly dicts sharing their keys (as a generated stream's are)
    with values of one type or mixed per field, and some of everything else."""
    batches = []
    for _ in range(draw(st.integers(1, 3))):
        keys = draw(st.permutations(_SNAPSHOT_KEYS).map(lambda ks: ks[:4]))
        string_lists = st.lists(st.sampled_from(["p", "q", "r", "s", 'u"v', "é"]), max_size=4)
        strings = st.sampled_from(["a", "b", "c", 'q"t', "é", "back\\slash", "tab\t"])
        column = {key: draw(st.sampled_from([_JSON_VALUES, string_lists, string_lists, strings, strings,
                                             st.booleans(), st.integers(0, 3)])) for key in keys}
        if "api" in column and draw(st.integers(0, 3)):  # mostly a string "api": a list one refuses the lot
            column["api"] = st.sampled_from(["a", "b", "api.v1.endpoint_0"])
        batch = [{key: draw(column[key]) for key in keys} for _ in range(draw(st.integers(1, 8)))]
        batch += draw(st.lists(_JSON_VALUES, max_size=4))
        batches.append(batch)
    return batches


def _as_stated(memo, description):
    """A description with the memo's ids replaced by what they stand for: field key names, the
    equality keys of field values, the identity keys of parameter-set members."""
    from wpb_gym.envs.fast import contents as C

    if description is None:
        return None
    value_of = {i: key for key, i in memo.values.items()}
    member_of = {i: key for key, i in memo.bits.items()}
    name_of = {i: name for name, (i, _) in memo.keys.items()}
    d = description
    for position in (C.PARAMS, C.REQUIRED):
        assert d[position] is None or list(d[position]) == sorted(set(d[position]))
    fields = sorted(zip(map(name_of.__getitem__, d[C.FIELD_KEYS]), map(value_of.__getitem__, d[C.FIELD_VALUES]),
                        d[C.FIELD_LENGTHS], d[C.FIELD_IS_API], strict=True))
    sets = [None if d[p] is None else frozenset(map(member_of.__getitem__, d[p])) for p in (C.PARAMS, C.REQUIRED)]
    equality = "a dict's own" if d[C.EQUALITY] < 0 else value_of[d[C.EQUALITY]]
    return (*d[:C.VERSION], type(d[C.VERSION]), d[C.VERSION], *sets, *d[C.DEPRECATED:C.EQUALITY], equality, fields)


# Columns whose fast paths must fall back or price exactly: strings JSON escapes, a parameter
# list met again (looked up, not rebuilt) and one of the same length but other members.
PRICED_COLUMNS = [[{"api": "a", "params": ["p"], "x": 'q"t'}, {"api": "b", "params": ["q"], "x": "é"},
                   {"api": "c", "params": ["p"], "x": "back\\slash"}, {"api": "d", "params": ["q", "p"], "x": "t"}],
                  [{"api": "a", "params": ["p", "r"], "x": ["é"]}, {"api": "b", "params": ["r", "p"], "x": ['"']}]]


@pytest.mark.parametrize("batches", [PRICED_COLUMNS, PRICED_COLUMNS[::-1]])
def test_escaped_strings_and_parameter_lists_met_again_are_described_as_one_at_a_time(batches):
    test_contents_described_together_are_described_as_one_at_a_time.hypothesis.inner_test(batches)


@settings(max_examples=150, deadline=None)
@given(batches=_observation_batches())
def test_contents_described_together_are_described_as_one_at_a_time(batches):
    from wpb_gym.core.accounting import json_text
    from wpb_gym.envs.fast import contents as C
    from wpb_gym.envs.observation.stream_table import plain_json

    together, one_by_one = C.ContentMemo(), C.ContentMemo()
    for batch in batches:
        distinct = {json_text(obs): obs for obs in batch if plain_json(obs)}
        texts, observations = list(distinct), list(distinct.values())
        found = together.contents(texts, observations)
        literal = [one_by_one.content(text, obs) for text, obs in zip(texts, observations, strict=True)]
        assert [_as_stated(together, d) for d in found] == [_as_stated(one_by_one, d) for d in literal]
        uniques = [d[C.EQUALITY] for d in found if d is not None and d[C.EQUALITY] < 0]
        assert len(set(uniques)) == len(uniques)  # a non-empty dict equals no other content


def test_the_step_functions_borrow_their_arrays_and_those_that_allocate_count_them():
    """``borrowing``: the functions a compiled step calls, down from the batch functions that
    slice the sub-envs' arrays out of the arenas, leave numba's reference counting out (they
    allocate nothing; numba would refuse to compile it); those that make arrays keep it."""
    from wpb_gym.envs.fast import arenas, comparisons, drawn_batches, kernel, memory

    borrowing = [kernel.step_batch, kernel.start_batch, arenas.episode, kernel.advance, kernel.observe,
                 kernel.start, kernel._slots, kernel._compare_with_memory, comparisons.merge_cost,
                 comparisons.since_seen, memory.store, memory.remove, memory.largest]
    for function in borrowing:
        assert function.targetoptions.get("_nrt") is False, function.__name__
    for function in (drawn_batches.start_drawn, drawn_batches.end_drawn, kernel.retained):
        assert "_nrt" not in function.targetoptions, function.__name__


def test_a_numba_without_the_option_compiles_them_with_counting(monkeypatch):
    import importlib

    import numba.core.cpu

    from wpb_gym.envs.fast import borrowing

    monkeypatch.setattr(numba.core.cpu, "CPUTargetOptions", type("Options", (), {}))
    try:
        assert importlib.reload(borrowing)._WITHOUT_COUNTING == {}
    finally:
        monkeypatch.undo()
        assert importlib.reload(borrowing)._WITHOUT_COUNTING == {"_nrt": False}
