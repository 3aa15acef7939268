"""The compiled core's paper-regime episodes played from their draws (``envs.fast.paper_episodes``)
against the literal path: the episode made by the generator, read and compiled by
``episode_arrays``. The arrays must agree up to the names of the ids the module numbers its own
way, the reward function must start alike, and a vector env must step as the single envs
(``play_both``) without ever making the episodes it plays."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_vector_env import play_both

from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.fast import layout as L
from wpb_gym.envs.fast import paper_episodes
from wpb_gym.envs.fast.contents import ContentMemo
from wpb_gym.envs.fast.core import CompiledCore  # noqa: F401  (binds numba's cache folder)
from wpb_gym.envs.fast.episode_arrays import compile_episode, describe_episode
from wpb_gym.envs.fast.oracle_by_class import drawn_oracle
from wpb_gym.envs.fast.paper_episodes import DrawnLabels, compile_drawn, drawn_compilable
from wpb_gym.envs.rewards import RewardFunction
from wpb_gym.envs.vector import WritePolicyBenchVectorEnv
from wpb_gym.episodes import sources
from wpb_gym.episodes.generators import paper_structure
from wpb_gym.episodes.generators.paper import (
    CONTRACT_REGIMES,
    PAPER_REGIMES,
    GeneratorConfig,
    make_config,
    structure_draws,
)
from wpb_gym.episodes.sources import EpisodeRecipe
from wpb_gym.scoring.oracle import oracle_utility
from python_path import python_env

# Sections whose ids the two paths name their own way: value ids (with None's), parameter ids,
# and the equality ids of dicts, which are only ever unequal.
_RENAMED = {L.FIELD_VALUES, L.MASK_BITS}


def _first_seen(ids) -> list[int]:
    names: dict[int, int] = {}
    return [names.setdefault(i, len(names)) for i in ids]


def _sections(static: np.ndarray) -> list[np.ndarray]:
    starts = [int(static[L.H_STATIC + name]) for name in range(L.N_STATIC)] + [len(static)]
    return [static[a:b] for a, b in zip(starts, starts[1:])]


def _literal(recipe: EpisodeRecipe, track: str, reward_fn: RewardFunction, budget: int):
    episode = recipe.make()
    memo = ContentMemo()
    columns = describe_episode(episode, track, memo)
    reward_fn.start(episode, columns.costs, budget)
    return episode, compile_episode(columns, reward_fn, memo)


# What an episode compiled from its draws is compared with the made one under: track, reward and budget.
DRAWN_AGAINST_MADE = {
    "track": st.sampled_from(["unprivileged", "privileged"]),
    "reward": st.sampled_from([{"f1": 1.0}, {"utility": 1.0}, {"f1": 0.5, "neg_regret": 0.5}]),
    "dense": st.booleans(),
    "budget": st.integers(0, 20_000),
}


def assert_drawn_as_made(recipe: EpisodeRecipe, track: str, reward: dict, dense: bool, budget: int,
                         compile_drawn: Any = compile_drawn) -> None:
    """``compile_drawn`` (``paper_episodes``', or ``contract_episodes``') makes the arrays and
    labels of the made episode, and starts the reward function alike."""
    drawn_fn, made_fn = RewardFunction(reward, dense), RewardFunction(reward, dense)
    (static, floats, state), labels = compile_drawn(recipe, track, drawn_fn, budget)
    episode, (want_static, want_floats, want_state) = _literal(recipe, track, made_fn, budget)
    assert len(static) == len(want_static) and len(state) == len(want_state)
    header = np.arange(L.HEADER_SIZE) != L.H_NONE_VALUE
    assert np.array_equal(static[:L.HEADER_SIZE][header], want_static[:L.HEADER_SIZE][header])
    got, want = _sections(static), _sections(want_static)
    for name in range(L.N_STATIC):
        if name == L.FIELD_VALUES:
            assert _first_seen([*got[name], static[L.H_NONE_VALUE]]) == _first_seen(
                [*want[name], want_static[L.H_NONE_VALUE]]), name
        elif name in _RENAMED:
            assert _first_seen(got[name]) == _first_seen(want[name]), name
        elif name == L.EQUALITY:
            assert len(set(got[name].tolist())) == len(got[name]) == len(set(want[name].tolist()))
        else:
            assert np.array_equal(got[name], want[name]), name
    assert np.array_equal(floats, want_floats, equal_nan=True)
    assert labels.critical_steps == episode.critical_steps and len(labels) == len(episode)
    assert labels.total_drift_events == episode.total_drift_events
    assert np.array_equal(labels.utilities, episode.utilities)
    assert drawn_fn.critical == made_fn.critical and drawn_fn.utilities == made_fn.utilities
    assert list(drawn_fn.costs) == list(made_fn.costs)
    assert drawn_fn.oracle_utility() == made_fn.oracle_utility()
    # The vector env's close searches U*(B) in half units.
    assert drawn_oracle(labels, budget) in (None, made_fn.oracle_utility())


@st.composite
def paper_options(draw) -> dict:
    """Settings of the paper change model's structure (no text)."""
    low = draw(st.integers(1, 9))
    interval = draw(st.integers(1, 60))
    return {
        "length": draw(st.integers(1, 300)),
        "api_pool": draw(st.one_of(st.integers(1, 12), st.integers(13, 400))),
        "min_params": low,
        "max_params": draw(st.integers(low, 12)),
        "drift_prob": draw(st.sampled_from([0.0, 0.08, 0.5, 1.0])),
        "burst_drift_prob": draw(st.sampled_from([0.0, 0.6, 1.0])),
        "redundancy_prob": draw(st.sampled_from([0.0, 0.7, 1.0])),
        "remove_param_prob": draw(st.sampled_from([0.0, 0.5, 0.9, 1.0])),
        "deprecate_prob": draw(st.sampled_from([0.0, 0.3, 1.0])),
        "priority_noise": draw(st.sampled_from([0.0, 0.3])),
        "priority_correlation": draw(st.sampled_from([1.0, 0.5, 0.0])),
        "burst_interval": interval,
        "burst_len": draw(st.integers(0, interval)),
    }


@st.composite
def _recipes(draw) -> EpisodeRecipe:
    config = make_config(draw(st.sampled_from(PAPER_REGIMES)), **draw(paper_options()))
    return EpisodeRecipe(config, draw(st.integers(0, 2**31 - 1)), draw(st.integers(0, 10**6)))


@settings(max_examples=120, deadline=None)
@given(recipe=_recipes(), **DRAWN_AGAINST_MADE)
def test_episodes_played_from_their_draws_compile_as_the_episodes_made(recipe, track, reward, dense, budget):
    assert drawn_compilable(recipe)
    assert_drawn_as_made(recipe, track, reward, dense, budget)


@settings(max_examples=80, deadline=None)
@given(regime=st.sampled_from(PAPER_REGIMES), options=paper_options(), seed=st.integers(0, 2**31 - 1),
       index=st.integers(0, 10**6),
       text=st.sampled_from([{}, {"doc_prob": 0.3}, {"migration_guides": True},
                             {"doc_prob": 0.2, "migration_guides": True}]))
def test_the_core_compiles_the_generators_own_loop_to_the_same_structure(regime, options, text, seed, index):
    """The compiled core and the generator run one function (``paper_structure.play``): compiled,
    it gives what it gives as Python, text steps included."""
    c = make_config(regime, **options, **text)
    draws = structure_draws(c, seed, index)
    compiled = paper_episodes.compiled_play(*draws, paper_structure.dynamics(c))
    python = paper_structure.play(*draws, paper_structure.dynamics(c))
    assert isinstance(compiled, paper_structure.Structure)
    for name, got, want in zip(paper_structure.Structure._fields, compiled, python):
        assert got.dtype == want.dtype and np.array_equal(got, want), name


@pytest.mark.parametrize("regime", PAPER_REGIMES)
def test_long_episodes_played_from_their_draws_compile_as_the_episodes_made(regime):
    recipe = EpisodeRecipe(make_config(regime, length=10_000), 7, 3)
    assert_drawn_as_made(recipe, "privileged", {"f1": 0.5, "neg_regret": 0.5}, True, 1_048_576)


def test_an_episode_whose_arrays_would_pass_int32_is_left_to_the_made_episode(monkeypatch):
    recipe = EpisodeRecipe(make_config("default", length=200), 0, 0)
    c = recipe.config
    stride, metadata = c.max_params + c.length + 1, np.array([20], dtype=np.int64)
    compiled = paper_episodes._compile.py_func(_played(recipe), metadata, stride, 40)
    assert compiled[0].size > 500 and compiled[2] > 0  # the state's size
    monkeypatch.setattr(paper_episodes, "_MAX_STATIC", 500)  # read by the Python function, not the compiled one
    too_large = paper_episodes._compile.py_func(_played(recipe), metadata, stride, 40)
    assert too_large[0].size == 0
    monkeypatch.setattr(paper_episodes, "unprivileged_arrays", lambda *args: too_large)
    assert compile_drawn(recipe, "unprivileged", RewardFunction({"f1": 1.0}, False), 4_000) is None


def _played(recipe: EpisodeRecipe) -> paper_structure.Structure:
    c = recipe.config
    return paper_structure.play(*structure_draws(c, recipe.seed, recipe.index), paper_structure.dynamics(c))


# What compile_drawn reads of a generator config, and why it may leave the rest: a field added
# to GeneratorConfig must be placed in one of the two, after checking what the generator does with it.
_READ = {"regime", "length", "api_pool", "min_params", "max_params", "drift_prob", "bursts", "burst_interval",
         "burst_len", "burst_drift_prob", "redundancy", "redundancy_prob", "remove_param_prob", "deprecate_prob",
         "priority_noise", "priority_correlation", "change_model", "doc_prob", "migration_guides"}
_UNUSED_WITHOUT_TEXT_OR_CONTRACTS = {  # text sizes (doc_prob 0, no guides) and the contract model's knobs
    "doc_min_bytes", "doc_max_bytes", "doc_utility", "guide_min_bytes", "guide_max_bytes", "breaking_prob",
    "renames", "revert_prob", "revert_window", "initially_deprecated", "warmup"}


def test_every_generator_setting_is_read_or_unused_by_episodes_played_from_draws():
    fields = set(GeneratorConfig.__dataclass_fields__)
    assert fields == _READ | _UNUSED_WITHOUT_TEXT_OR_CONTRACTS and not _READ & _UNUSED_WITHOUT_TEXT_OR_CONTRACTS


@pytest.mark.parametrize("config", [
    *(make_config(regime) for regime in CONTRACT_REGIMES),
    make_config("default", doc_prob=0.2),
    make_config("redundancy", migration_guides=True),
    make_config("default", api_pool=10_000, length=2_000),  # parameter ids past int32's room
])
def test_episodes_with_text_contracts_or_too_many_ids_are_made(config):
    assert not drawn_compilable(EpisodeRecipe(config, 0, 0))


def test_the_vector_env_never_makes_the_episodes_it_plays_from_draws(monkeypatch):
    made = []
    generate = sources.generate_episode
    monkeypatch.setattr(sources, "generate_episode", lambda *args: made.append(args) or generate(*args))
    vector = WritePolicyBenchVectorEnv(4, length=20)
    _, info = vector.reset(seed=3)
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(90):
        actions = np.array([rng.choice(np.flatnonzero(row)) for row in info["action_mask"]])
        _, _, terminated, _, info = vector.step(actions)
        ended += int(terminated.sum())
    assert ended >= 8 and made == []
    # Reading a sub-env's episode makes it: the one its single env chose.
    single = vector.sub_env(2)
    assert made == [] and single.t == vector.core.t()[2]
    episode = single.episode
    assert len(made) == 1 and episode == sources.generate_episode(*made[0])
    assert single.episode_index == made[0][2]


@pytest.fixture
def made(monkeypatch) -> list:
    """The recipes the vector env made into episodes (the single envs make theirs without one)."""
    recipes: list = []
    make = EpisodeRecipe.make
    monkeypatch.setattr(EpisodeRecipe, "make",
                        lambda recipe, **compiled: recipes.append(recipe) or make(recipe, **compiled))
    return recipes


@pytest.mark.parametrize("regime", PAPER_REGIMES)
@pytest.mark.parametrize("mode", ["box", "dict"])
def test_every_paper_regime_played_from_draws_steps_as_the_single_envs(regime, mode, made):
    options = {"priority_noise": 0.2, "priority_correlation": 0.5, "drift_prob": 0.4, "remove_param_prob": 0.7}
    assert play_both(3, 160, seed=11, regime=regime, track="privileged", length=30, api_pool=3,
                     observation_mode=mode, dense_reward=True, reward={"f1": 0.5, "neg_regret": 0.5},
                     **options) >= 6
    assert made == []


def test_dict_observations_keep_the_order_of_gymnasiums_vector_envs():
    kwargs = {"length": 5, "observation_mode": "dict"}
    vector = WritePolicyBenchVectorEnv(2, **kwargs)
    sync = SyncVectorEnv([lambda: python_env(**kwargs) for _ in range(2)])
    got, want = vector.reset(seed=0)[0], sync.reset(seed=0)[0]
    assert list(got) == list(want) == list(vector.single_observation_space.spaces)
    got, want = vector.step(np.ones(2, dtype=int))[0], sync.step(np.ones(2, dtype=int))[0]
    assert list(got) == list(want)


@pytest.mark.parametrize(("regime", "track", "reward", "dense"), [
    ("burst_redundancy", "privileged", {"f1": 0.5, "neg_regret": 0.5}, True),
    ("default", "unprivileged", "f1", False),  # U*(B) from the scoring oracle: too many combinations
])
def test_a_long_paper_episode_played_from_draws_steps_as_the_single_envs(regime, track, reward, dense, made):
    kwargs = {"regime": regime, "track": track, "reward": reward, "dense_reward": dense, "length": 10_000,
              "budget_bytes": 1 << 20}
    assert play_both(2, 11_000, seed=4, invalid_share=0.01, expire_share=0.05, **kwargs) >= 2
    assert made == []


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 400), st.sampled_from([0.0, 0.5, 1.0, 2.0, 5.0, 6.0])), max_size=60),
       budget=st.integers(0, 6000))
@example(steps=[(10, 0.5), (10, 0.5), (10, 0.5), (5, 1.0), (30, 1.0)], budget=35)  # the last class fits exactly
def test_the_oracle_of_drawn_episodes_is_the_scoring_oracle(steps, budget):
    costs = np.array([c for c, _ in steps], dtype=np.int64)
    utilities = np.array([u for _, u in steps], dtype=np.float64)
    labels = DrawnLabels((), utilities, costs)
    assert drawn_oracle(labels, budget) == oracle_utility(costs, utilities, budget)


def test_the_oracle_of_drawn_episodes_leaves_too_many_combinations_to_the_scoring_oracle():
    costs = np.arange(1, 601, dtype=np.int64)
    utilities = np.tile([0.5, 1.0, 5.0, 6.0], 150)
    assert drawn_oracle(DrawnLabels((), utilities, costs), 10**6) == utilities.sum()  # all fit
    assert drawn_oracle(DrawnLabels((), utilities, costs), 40_000) is None


def test_a_reset_whose_episode_fails_to_compile_starts_the_others_and_leaves_it_to_reset(monkeypatch):
    """A failure while the core compiles one sub-env's episode (say, out of memory) is raised once
    the others are started; that sub-env is not left on its old arrays but reset by the next step."""
    from wpb_gym.envs.fast import drawn_batches

    vector = WritePolicyBenchVectorEnv(3, length=20)
    vector.reset(seed=0)
    vector.step(np.ones(3, dtype=int))
    calls = []
    compile_first = paper_episodes.compile_drawn

    def fail_second(*args):
        calls.append(args)
        if len(calls) == 2:
            raise MemoryError("no room for sub-env 1's episode")
        return compile_first(*args)

    def fail_batch(*args):
        raise MemoryError("no room for the step's episodes")

    # The step's episodes are started together; when that fails, one by one, so that the
    # failure is the sub-env's whose episode failed.
    monkeypatch.setattr(drawn_batches, "start_drawn", fail_batch)
    monkeypatch.setattr(paper_episodes, "compile_drawn", fail_second)
    with pytest.raises(MemoryError):
        vector.reset(seed=5)
    assert vector.core.compiled.tolist() == [True, False, True] and vector.core.unstarted == [1]
    for i in (0, 2):  # started on their new episodes
        first_obs, _ = WritePolicyBenchEnv(length=20).reset(seed=5 + i)
        assert vector.core.t()[i] == 0 and np.array_equal(vector.core.observations[i], first_obs)
    _, _, _, _, info = vector.step(np.ones(3, dtype=int))  # sub-env 1 is reset, its action ignored
    assert vector.core.compiled.all() and info["t"].tolist() == [1, 0, 1]
