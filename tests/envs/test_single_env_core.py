"""The single env on the compiled core against the same env on its Python parts (the store, the
encoder, the reward function), output for output: steps, infos, final metrics, and what agents
read between steps (the store read back, the slots, the decoded actions, ``expose_item``)."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym.core.types import Episode, Step
from wpb_gym.envs.adapter import ResetNeeded
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.vector import WritePolicyBenchVectorEnv
from python_path import PythonEncoder, python_env


def same(got, want) -> None:
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            same(got[key], want[key])
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for a, b in zip(got, want):
            same(a, b)
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype and np.array_equal(got, want)
    else:
        assert type(got) is type(want) and got == want, (got, want)


def store_state(env: WritePolicyBenchEnv) -> tuple:
    store = env.store
    return (store.timesteps(), store.retained_timesteps(), store.bytes_used, store.max_bytes,
            [(item.t, item.kind, item.byte_cost, item.step) for item in store.items()],
            [(item.t, left) for item, left in store.expired_items()], dict(store.accepted_counts))


def play_both(kwargs: dict, seed: int, episodes: int, invalid_share: float, expose_share: float) -> int:
    """Play ``episodes`` episodes of both with the same random actions; returns the steps taken."""
    core, python = WritePolicyBenchEnv(**kwargs), python_env(**kwargs)
    assert core.plays_compiled
    rng = np.random.default_rng(seed)
    taken = 0
    for episode in range(episodes):
        got, want = core.reset(seed=seed + episode), python.reset(seed=seed + episode)
        same(got, want)
        info, ended = want[1], False
        while not ended:
            if rng.random() < expose_share:
                hidden = sorted(set(python.store.timesteps()) - set(python.slot_timesteps))
                if hidden:
                    t = int(rng.choice(hidden))
                    assert core.expose_item(t) == python.expose_item(t)
                    info = {**info, "action_mask": python.action_masks()}
            same(core.action_masks(), python.action_masks())
            assert core.slot_timesteps == python.slot_timesteps and core.t == python.t
            assert core.current_step == python.current_step
            for a in range(core.n_actions):
                assert core.decode_action(a) == python.decode_action(a)
            if rng.random() < invalid_share:
                action = int(rng.integers(core.n_actions))
            else:
                action = int(rng.choice(np.flatnonzero(info["action_mask"])))
            got, want = core.step(action), python.step(action)
            same(got, want)
            info, ended = want[4], want[2]
            taken += 1
            if ended or rng.random() < 0.1:
                assert store_state(core) == store_state(python)
                same(core.episode_metrics().as_row(), python.episode_metrics().as_row())
        assert core.oracle_utility() == python.oracle_utility()
        assert core.episode == python.episode
        t = int(rng.integers(len(python.episode)))
        assert core.step_details(t) == python.step_details(t)
        assert core.last_action_text() == python.last_action_text()
    return taken


SMALL = {"default": {"length": 40, "api_pool": 8, "doc_prob": 0.2, "migration_guides": True},
         "burst_redundancy": {"length": 40, "api_pool": 8},
         "breaking": {"length": 90, "api_pool": 40}, "contract_mix": {"length": 90, "api_pool": 40},
         "queries_medium": {"endpoints": 12, "families": 3, "length": 60, "checkpoint_interval": 10,
                            "queries_per_checkpoint": 10, "summary_max_bytes": 600}}


@settings(max_examples=40)
@given(
    regime=st.sampled_from(["default", "burst_redundancy", "breaking", "contract_mix", "queries_medium"]),
    track=st.sampled_from(["unprivileged", "privileged"]),
    mode=st.sampled_from(["box", "dict"]),
    slots=st.integers(1, 5),
    order=st.sampled_from(["relevance", "oldest"]),
    cap=st.sampled_from([None, 0, 1, 3]),
    budget=st.sampled_from([0, 300, 1500, 10_240]),
    reward=st.sampled_from(["f1", "utility", "neg_regret", {"f1": 0.5, "utility": 0.5}]),
    dense=st.booleans(),
    limit=st.sampled_from([{}, {}, {"write_time": "total=0"}, {"write_time": "total=6,per_write=1,per_kb=3"},
                           {"write_time": "total=30,per_kb=1"}, {"kind_budgets": "endpoint=0"},
                           {"kind_budgets": "endpoint=40%,doc=10%"}, {"kind_budgets": "guide=5%,other=300"},
                           {"compression": "credit=0.75"}, {"compression": "credit=0"}]),
    seed=st.integers(0, 10_000),
)
def test_the_core_steps_as_the_python_parts(regime, track, mode, slots, order, cap, budget, reward, dense, limit,
                                            seed):
    if limit and reward == "neg_regret":  # refused with limits: their oracle has no prefix
        reward = "utility"
    if "compression" in limit and regime == "queries_medium":  # the query tier refuses compression
        regime = "contract_mix"
    kwargs = {"regime": regime, "track": track, "observation_mode": mode, "slots": slots, "slot_order": order,
              "max_expires_per_step": cap, "budget_bytes": budget, "reward": reward, "dense_reward": dense,
              **limit, **SMALL[regime]}
    assert play_both(kwargs, seed, episodes=2, invalid_share=0.2, expose_share=0.1) > 0


def test_the_default_env_and_texts_play_on_the_core_as_on_the_python_parts():
    assert play_both({}, 0, episodes=2, invalid_share=0.1, expose_share=0.1) >= 400
    text = {"regime": "default", "doc_prob": 0.3, "migration_guides": True, "length": 60, "api_pool": 6}
    assert play_both(text, 1, episodes=3, invalid_share=0.1, expose_share=0.2) >= 180


def test_what_the_core_cannot_read_is_played_by_the_python_parts():
    # Values that are not plain JSON (a tuple prints as a list), and a budget float64 does not hold.
    steps = [Step(t, {"api": f"e{t % 3}", "p": ("x",) * (t % 4)}, {"mode": "m"}) for t in range(30)]
    tuples = Episode(steps=steps, labels={"critical_steps": [4, 9], "utility_by_step": {t: 1.0 for t in range(30)}})
    assert play_both({"episodes": [tuples], "budget_bytes": 400}, 0, episodes=2, invalid_share=0.2,
                     expose_share=0.2) >= 60
    assert play_both({"length": 30, "budget_bytes": 2**53}, 0, episodes=2, invalid_share=0.2, expose_share=0.2) >= 60


@pytest.mark.parametrize("regime", ["default", "reverts", "contract_mix"])
@pytest.mark.parametrize("mode", ["box", "dict"])
def test_a_write_time_plays_on_the_core_as_on_the_python_parts(regime, mode):
    # Enough ticks for some writes, not all: the mask, the features and the refusals change mid-episode.
    kwargs = {"regime": regime, "length": 90, "api_pool": 20, "observation_mode": mode, "budget_bytes": 4096,
              "write_time": "total=25,per_write=1,per_kb=2", "reward": {"f1": 0.5, "utility": 0.5}}
    assert play_both(kwargs, 3, episodes=3, invalid_share=0.3, expose_share=0.1) >= 270
    env = WritePolicyBenchEnv(**kwargs)
    env.reset(seed=0)
    reasons = []
    while not env.episode_over:
        reasons.append(env.step(1)[4]["reason"])  # WRITE at every step: refused once the time runs out
    assert env.plays_compiled and "out_of_write_time" in reasons and reasons[0] == "accepted"
    assert env.store.time_remaining() >= 0 and env.store.write_time.total == 25


@pytest.mark.parametrize("regime", ["default", "contract_mix"])
@pytest.mark.parametrize("mode", ["box", "dict"])
def test_kind_budgets_play_on_the_core_as_on_the_python_parts(regime, mode):
    # Rooms small enough that WRITEs and MERGEs of each kind are refused mid-episode, EXPIREs give room back.
    kwargs = {"regime": regime, "length": 90, "api_pool": 20, "observation_mode": mode, "budget_bytes": 4096,
              "doc_prob": 0.3, "migration_guides": True, "kind_budgets": "endpoint=35%,doc=12%,guide=500",
              "reward": {"f1": 0.5, "utility": 0.5}}
    if regime != "default":
        del kwargs["doc_prob"], kwargs["migration_guides"]
    assert play_both(kwargs, 5, episodes=3, invalid_share=0.3, expose_share=0.1) >= 270
    env = WritePolicyBenchEnv(**kwargs)
    env.reset(seed=0)
    reasons = []
    while not env.episode_over:
        reasons.append(env.step(1)[4]["reason"])  # WRITE at every step: refused once a kind's room runs out
    assert env.plays_compiled and "over_kind_budget" in reasons and reasons[0] == "accepted"
    assert env.store.kind_used("endpoint") <= 4096 * 35 // 100


@pytest.mark.parametrize("plays_compiled", [True, False])
def test_an_env_whose_store_view_is_held_pickles_and_a_chosen_recipe_starts(plays_compiled):
    make = WritePolicyBenchEnv if plays_compiled else python_env
    env = make(length=30)
    env.reset(seed=0)
    env.step(1)
    held = env.store.view()
    again = pickle.loads(pickle.dumps(env))
    same(again.step(1), env.step(1))
    assert held is env.store.view() and again.store.view() is not held
    assert again.store.timesteps() == env.store.timesteps()
    recipe, budget = env.choose_episode(seed=3, recipe=True)
    env.start_episode(recipe, budget)  # made first, as choose_episode() would have returned it
    assert env.episode == recipe.make() and env.t == 0 and len(env.store) == 0


@pytest.mark.parametrize("regime", ["default", "breaking", "contract_mix"])
@pytest.mark.parametrize("mode", ["box", "dict"])
def test_compression_plays_on_the_core_as_on_the_python_parts(regime, mode):
    # A budget that compressed WRITEs fill mid-episode; MERGEs into compressed items are priced
    # against their summaries; texts (sections, guides) that compress to another kind.
    kwargs = {"regime": regime, "length": 90, "api_pool": 20, "observation_mode": mode, "budget_bytes": 3000,
              "compression": "credit=0.6", "reward": {"f1": 0.5, "utility": 0.5}, "slots": 3}
    if regime == "default":
        kwargs.update(doc_prob=0.3, migration_guides=True)
    assert play_both(kwargs, 7, episodes=3, invalid_share=0.3, expose_share=0.1) >= 270
    env = WritePolicyBenchEnv(**kwargs)
    env.reset(seed=0)
    compressed = env.n_actions - 1
    reasons = []
    while not env.episode_over:  # a compressed WRITE at every step: refused once the budget is spent
        reasons.append(env.step(compressed)[4]["reason"])
    assert env.plays_compiled and reasons[0] == "accepted" and "over_budget" in reasons
    held = env.store.compressed_timesteps()
    assert held and set(held) == set(env.store.timesteps())


def test_what_the_codec_refuses_and_merges_into_summaries_play_on_the_core_as_on_the_python_parts():
    # Per step: text (not compressible), a dict of scalars (nothing to compress), an endpoint
    # whose summary keeps its api (MERGEs priced against the summary), one whose long api the
    # summary drops (no MERGE joins it), and a section whose summary is another content kind.
    long_api = "e" * 80
    observations = [
        "plain text",
        {"api": "a", "version": 1},
        {"api": "a", "version": 2, "params": ["x", "y"]},
        {"api": "a", "version": 3, "params": ["x", "y", "z"]},
        {"api": long_api, "version": 1, "params": ["p"]},
        {"api": long_api, "version": 2, "params": ["p", "q"]},
        {"section": "s" * 70, "body": "short"},
        {"api": "a", "version": 3, "params": ["x"]},
    ]
    steps = [Step(t, observations[t % len(observations)], {"mode": "m"}) for t in range(48)]
    episode = Episode(steps=steps, labels={"critical_steps": [2, 3, 5, 11, 20, 29],
                                           "utility_by_step": {t: 1.0 + t % 3 for t in range(48)}})
    kwargs = {"episodes": [episode], "budget_bytes": 700, "slots": 3, "compression": "credit=0.4",
              "reward": {"f1": 0.5, "utility": 0.5}}
    assert play_both(kwargs, 11, episodes=4, invalid_share=0.4, expose_share=0.1) >= 190
    env = WritePolicyBenchEnv(**kwargs)
    env.reset(seed=0)
    compressed = env.n_actions - 1
    reasons = [env.step(compressed)[4]["reason"] for _ in range(8)]
    assert reasons[:2] == ["not_compressible", "nothing_to_compress"] and reasons[2] == "accepted"
    assert env.store.compressed_timesteps() == (2, 3, 4, 5, 6, 7)


class Bonus(WritePolicyBenchEnv):
    """Pays one more per step: its own ``advance``, which only the Python parts call."""

    def advance(self, a):
        reward, *rest = super().advance(a)
        return (reward + 1.0, *rest)


def test_subclassed_parts_and_an_env_overriding_advance_play_on_the_python_parts():
    assert WritePolicyBenchEnv().plays_compiled and not python_env().plays_compiled
    env = Bonus(length=20)
    assert not env.plays_compiled
    env.reset(seed=0)
    assert env.step(0)[1] == 1.0


def test_step_details_outside_the_episode_are_refused_as_on_the_python_parts():
    core, python = WritePolicyBenchEnv(length=20), python_env(length=20)
    core.reset(seed=0)
    python.reset(seed=0)
    for t in (-20, -1, 0, 19):
        assert core.step_details(t) == python.step_details(t)
    for t in (20, -21):
        with pytest.raises(IndexError):
            python.step_details(t)
        with pytest.raises(IndexError):
            core.step_details(t)


@pytest.mark.parametrize("mode", ["ansi", "rgb_array"])
def test_the_core_draws_what_the_python_parts_draw(mode):
    kwargs = {"render_mode": mode, "length": 40, "budget_bytes": 1500}
    core, python = WritePolicyBenchEnv(**kwargs), python_env(**kwargs)
    assert core.plays_compiled
    rng = np.random.default_rng(0)
    for episode in range(2):
        _, info = core.reset(seed=episode)
        python.reset(seed=episode)
        ended, steps = False, 0
        while True:
            if ended or mode == "ansi" or steps % 8 == 0:  # a picture takes tens of ms to draw
                got, want = core.render(), python.render()
                assert np.array_equal(got, want) if mode == "rgb_array" else got == want
            if ended:
                break
            steps += 1
            valid = np.flatnonzero(info["action_mask"])
            action = int(rng.choice(valid)) if rng.random() < 0.8 else int(rng.integers(core.n_actions))
            (_, _, ended, _, info), _ = core.step(action), python.step(action)
        assert core.memory_history == python.memory_history and core.bytes_history == python.bytes_history
        assert (len(core.bytes_history) == 40) == (mode == "rgb_array")


def test_an_encoder_given_in_dict_mode_gives_a_dict_space():
    # The space used to follow the observation_mode argument (a Box) rather than the encoder's mode.
    env = python_env(observation_mode="dict")
    obs, _ = env.reset(seed=0)
    assert isinstance(env.observation_space, gym.spaces.Dict) and env.observation_space.contains(obs)
    assert isinstance(env.observation_encoder, PythonEncoder)


def test_starting_an_episode_by_hand_leaves_the_core():
    env, twin = WritePolicyBenchEnv(length=30), python_env(length=30)
    env.reset(seed=1)
    env.step(1)
    episode, budget = twin.choose_episode(seed=2)
    env.choose_episode(seed=2)
    env.start_episode(episode, budget)
    twin.start_episode(episode, budget)
    assert env.t == 0 and env.store.timesteps() == ()
    for _ in range(30):
        same(env.step(1), twin.step(1))
    env.reset(seed=3)
    assert env.t == 0 and env.store.timesteps() == ()


TUPLES = Episode(steps=[Step(t, {"api": "e", "p": ("x",) * (t % 3)}, {"mode": "m"}) for t in range(20)],
                 labels={"critical_steps": [3], "utility_by_step": {t: 1.0 for t in range(20)}})


def test_an_episode_chosen_by_hand_and_not_started_is_not_played():
    for env in (WritePolicyBenchEnv(length=10), python_env(length=10)):
        env.reset(seed=1)
        env.step(1)
        env.choose_episode(seed=5)
        with pytest.raises(ResetNeeded):
            env.step(1)
        with pytest.raises(ResetNeeded):
            env.store  # noqa: B018
    vector = WritePolicyBenchVectorEnv(2, length=10)
    vector.reset(seed=0)
    vector.sub_env(1).choose_episode(seed=4)
    with pytest.raises(RuntimeError, match="sub-env 1's episode is over"):
        vector.step(np.ones(2, dtype=np.int64))
    vector.reset(seed=0)
    vector.step(np.ones(2, dtype=np.int64))
    assert vector.get_attr("t") == (1, 1)


@pytest.mark.parametrize("kwargs", [{"length": 20}, {"episodes": [TUPLES], "budget_bytes": 400}],
                         ids=["core", "python parts"])
def test_a_sub_env_stepped_to_its_end_by_its_single_env_is_refused_before_any_moves(kwargs):
    vector = WritePolicyBenchVectorEnv(2, autoreset_mode="Disabled", **kwargs)
    vector.reset(seed=0)
    assert vector.core.compiled.all() == ("length" in kwargs)
    single = vector.sub_env(1)
    while not single.step(0)[2]:
        pass
    assert single.episode_over and not vector.sub_env(0).episode_over
    for _ in range(2):
        with pytest.raises(RuntimeError, match="sub-env 1's episode is over"):
            vector.step(np.zeros(2, dtype=np.int64))
        assert vector.sub_env(0).t == 0
    with pytest.raises(RuntimeError, match="the episode is over"):
        single.step(0)
    vector.reset(seed=5, options={"reset_mask": np.array([False, True])})
    vector.step(np.zeros(2, dtype=np.int64))
    assert vector.sub_env(0).t == vector.sub_env(1).t == 1


@pytest.mark.parametrize("kwargs", [{"length": 20}, {"episodes": [TUPLES], "budget_bytes": 400}],
                         ids=["core", "python parts"])
def test_a_sub_env_driven_by_hand_shows_in_the_vector_envs_rows(kwargs):
    vector = WritePolicyBenchVectorEnv(2, **kwargs)
    vector.reset(seed=0)
    single, twin = vector.sub_env(0), python_env(**kwargs)
    twin.reset(seed=0)
    for action in (1, 1, 0, 1):
        got = single.step(action)
        same(got, twin.step(action))
        assert np.array_equal(vector.observations()[0], got[0])
        assert np.array_equal(vector.action_masks()[0], twin.action_masks())
    hidden = sorted(set(twin.store.timesteps()) - set(twin.slot_timesteps))
    if hidden:
        assert single.expose_item(hidden[0]) == twin.expose_item(hidden[0])
        assert np.array_equal(vector.action_masks()[0], twin.action_masks())
    episode, budget = twin.choose_episode(seed=9)
    single.choose_episode(seed=9)
    single.start_episode(episode, budget)
    twin.start_episode(episode, budget)
    assert np.array_equal(vector.action_masks()[0], twin.action_masks())
    assert np.array_equal(vector.observations()[0], twin.observation_encoder.observation())
    same(single.step(1), twin.step(1))
    assert np.array_equal(vector.action_masks()[0], twin.action_masks())


def test_the_last_action_of_a_sub_env_the_vector_env_stepped_is_told():
    vector = WritePolicyBenchVectorEnv(2, length=20)
    twins = [python_env(length=20) for _ in range(2)]
    vector.reset(seed=0)
    for i, twin in enumerate(twins):
        twin.reset(seed=i)
    assert vector.call("last_action_text") == ("reset", "reset")
    for actions in ([1, 1], [1, 2], [0, 5]):
        vector.step(np.array(actions))
        for twin, a in zip(twins, actions):
            twin.step(a)
        assert vector.call("last_action_text") == tuple(twin.last_action_text() for twin in twins)
