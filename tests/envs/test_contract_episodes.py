"""The compiled core's contract-regime episodes played from their draws
(``envs.fast.contract_episodes``) against the literal path: the episode made by the generator,
read and compiled by ``episode_arrays`` (``assert_drawn_as_made``). The core compiles the
generator's own functions (``contract_structure``), so both give one structure; and a vector env
steps these regimes as the single envs without making the episodes it plays."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_paper_episodes import DRAWN_AGAINST_MADE, assert_drawn_as_made, made  # noqa: F401  (a fixture)
from test_vector_env import play_both

from wpb_gym.envs.fast import contract_episodes
from wpb_gym.envs.fast.contract_episodes import compile_drawn, drawn_compilable
from wpb_gym.envs.fast.core import CompiledCore  # noqa: F401  (binds numba's cache folder)
from wpb_gym.envs.rewards import RewardFunction
from wpb_gym.episodes.generators import contract_structure
from wpb_gym.episodes.generators.paper import (
    CONTRACT_REGIMES,
    GeneratorConfig,
    contract_episode_structure,
    make_config,
)
from wpb_gym.episodes.jsonl import dumps_episode
from wpb_gym.episodes.sources import EpisodeRecipe

DRAWN_REGIMES = ("breaking", "reverts", "noisy_priority")  # the contract regimes without text


@st.composite
def contract_options(draw) -> dict:
    """Settings of the contract change model's structure."""
    low = draw(st.integers(1, 9))
    interval = draw(st.integers(1, 60))
    pool = draw(st.one_of(st.integers(1, 12), st.integers(13, 200)))
    warmup = draw(st.booleans())
    return {
        "length": draw(st.integers(pool + 1 if warmup else 1, pool + 300)),
        "api_pool": pool,
        "warmup": warmup,
        "min_params": low,
        # Up to the most a drawn episode takes: long lists, names that collide and retry.
        "max_params": draw(st.one_of(st.integers(low, 40), st.integers(max(low, 500), 599))),
        "drift_prob": draw(st.sampled_from([0.0, 0.2, 0.6, 1.0])),
        "bursts": draw(st.booleans()),
        "burst_drift_prob": draw(st.sampled_from([0.0, 0.6, 1.0])),
        "burst_interval": interval,
        "burst_len": draw(st.integers(0, interval)),
        "redundancy": draw(st.booleans()),
        "redundancy_prob": draw(st.sampled_from([0.0, 0.7, 1.0])),
        "breaking_prob": draw(st.sampled_from([0.0, 0.5, 0.9, 1.0])),
        "revert_prob": draw(st.sampled_from([0.0, 0.5, 1.0])),
        "revert_window": draw(st.integers(1, 80)),
        "initially_deprecated": draw(st.sampled_from([0.0, 0.1, 1.0])),
        "priority_correlation": draw(st.sampled_from([1.0, 0.8, 0.0])),
        "priority_noise": draw(st.sampled_from([0.0, 0.3])),
    }


@st.composite
def _recipes(draw) -> EpisodeRecipe:
    config = make_config(draw(st.sampled_from(DRAWN_REGIMES)), **draw(contract_options()))
    return EpisodeRecipe(config, draw(st.integers(0, 2**31 - 1)), draw(st.integers(0, 10**6)))


@settings(max_examples=120, deadline=None)
@given(recipe=_recipes(), **DRAWN_AGAINST_MADE)
def test_contract_episodes_played_from_their_draws_compile_as_the_episodes_made(recipe, track, reward, dense,
                                                                                budget):
    assert drawn_compilable(recipe)
    assert_drawn_as_made(recipe, track, reward, dense, budget, compile_drawn)


@pytest.mark.parametrize("regime", DRAWN_REGIMES)
def test_long_contract_episodes_played_from_their_draws_compile_as_the_episodes_made(regime):
    recipe = EpisodeRecipe(make_config(regime, length=10_000), 7, 3)
    assert_drawn_as_made(recipe, "privileged", {"f1": 0.5, "neg_regret": 0.5}, True, 1_048_576, compile_drawn)


@settings(max_examples=60, deadline=None)
@given(regime=st.sampled_from(CONTRACT_REGIMES), options=contract_options(), seed=st.integers(0, 2**31 - 1),
       index=st.integers(0, 10**6), text=st.sampled_from([{}, {"doc_prob": 0.3}, {"renames": True}]))
def test_the_core_compiles_the_generators_own_functions_to_the_same_structure(regime, options, text, seed, index):
    """The compiled core and the generator run the same functions (``contract_structure``):
    compiled, they give what they give as Python, sections and renames included."""
    c = make_config(regime, **options, **text)
    compiled = contract_episode_structure(c, seed, index, take_names=contract_episodes.compiled_take,
                                          play=contract_episodes.compiled_play)
    python = contract_episode_structure(c, seed, index)
    assert isinstance(compiled, contract_structure.Structure)
    for name, got, want in zip(contract_structure.Structure._fields, compiled, python, strict=True):
        assert np.asarray(got).dtype == np.asarray(want).dtype and np.array_equal(got, want), name


def test_added_names_that_run_short_of_pairs_are_drawn_and_played_again():
    # An endpoint that adds more parameters than a quarter of the steps has pairs for.
    c = make_config("breaking", api_pool=1, length=400, drift_prob=1.0, breaking_prob=0.0, warmup=False)
    lacking = []
    play = contract_structure.play

    def counting(*args):
        played = play(*args)
        lacking.append(played.lacking)
        return played

    structure = contract_episode_structure(c, 0, 0, play=counting)
    assert lacking[0] > 0 and lacking[-1] == 0 and structure.lacking == 0
    assert (structure.change == contract_structure.ADD_PARAM).sum() > 400 // 4


# Every generator setting is read by episodes played from their draws, or unused by them (text
# and the paper model's knobs: drawn_compilable leaves out episodes with sections or renames).
_READ = {"regime", "length", "api_pool", "min_params", "max_params", "drift_prob", "bursts", "burst_interval",
         "burst_len", "burst_drift_prob", "redundancy", "redundancy_prob", "priority_noise",
         "priority_correlation", "change_model", "doc_prob", "breaking_prob", "renames", "revert_prob",
         "revert_window", "initially_deprecated", "warmup"}
_UNUSED_WITHOUT_TEXT = {"doc_min_bytes", "doc_max_bytes", "doc_utility", "guide_min_bytes", "guide_max_bytes",
                        "migration_guides", "remove_param_prob", "deprecate_prob"}


def test_every_generator_setting_is_read_or_unused_by_contract_episodes_played_from_draws():
    fields = set(GeneratorConfig.__dataclass_fields__)
    assert fields == _READ | _UNUSED_WITHOUT_TEXT and not _READ & _UNUSED_WITHOUT_TEXT
    # The unused ones change nothing of such an episode.
    recipe = EpisodeRecipe(make_config("reverts", length=80, api_pool=5), 3, 1)
    changed = EpisodeRecipe(make_config("reverts", length=80, api_pool=5, doc_min_bytes=7, doc_max_bytes=9,
                                        doc_utility=3.0, guide_min_bytes=5, guide_max_bytes=6,
                                        migration_guides=True, remove_param_prob=0.1, deprecate_prob=0.9), 3, 1)
    assert drawn_compilable(changed)
    assert dumps_episode(recipe.make()) == dumps_episode(changed.make())
    a = compile_drawn(recipe, "unprivileged", RewardFunction({"f1": 1.0}, False), 2_000)[0]
    b = compile_drawn(changed, "unprivileged", RewardFunction({"f1": 1.0}, False), 2_000)[0]
    assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b, strict=True))  # floats: U*(B) NaN


@pytest.mark.parametrize("regime", CONTRACT_REGIMES)
def test_only_the_contract_regimes_without_text_are_played_from_their_draws(regime):
    assert drawn_compilable(EpisodeRecipe(make_config(regime), 0, 0)) == (regime in DRAWN_REGIMES)
    assert not drawn_compilable(EpisodeRecipe(make_config(regime, doc_prob=0.1), 0, 0))
    assert not drawn_compilable(EpisodeRecipe(make_config(regime, renames=True), 0, 0))
    assert not drawn_compilable(EpisodeRecipe(make_config("default"), 0, 0))


def test_episodes_whose_names_may_be_numbered_are_made():
    large = EpisodeRecipe(make_config("breaking", api_pool=2, min_params=1300, max_params=1400, length=50), 0, 0)
    assert not drawn_compilable(large)
    assert compile_drawn(large, "unprivileged", RewardFunction({"f1": 1.0}, False), 4_000) is None
    # Names numbered after the start: found once the episode is drawn.
    grown = EpisodeRecipe(make_config("breaking", api_pool=1, min_params=599, max_params=599, length=2_000,
                                      drift_prob=1.0, breaking_prob=0.0, warmup=False), 0, 0)
    assert drawn_compilable(grown)
    assert (contract_episode_structure(grown.config, 0, 0).name_suffix >= 0).any()
    assert compile_drawn(grown, "unprivileged", RewardFunction({"f1": 1.0}, False), 4_000) is None


@pytest.mark.filterwarnings("ignore:overflow encountered in scalar")  # the hashes wrap on purpose, as compiled
def test_an_episode_whose_arrays_would_pass_int32_is_left_to_the_made_episode(monkeypatch):
    recipe = EpisodeRecipe(make_config("breaking", length=200), 0, 0)
    assert compile_drawn(recipe, "unprivileged", RewardFunction({"f1": 1.0}, False), 4_000) is not None
    monkeypatch.setattr(contract_episodes, "_MAX_STATIC", 500)  # read by the Python function
    monkeypatch.setattr(contract_episodes, "contract_arrays", contract_episodes.contract_arrays.py_func)
    assert compile_drawn(recipe, "unprivileged", RewardFunction({"f1": 1.0}, False), 4_000) is None


@pytest.mark.parametrize("regime", DRAWN_REGIMES)
@pytest.mark.parametrize("track", ["unprivileged", "privileged"])
def test_every_contract_regime_played_from_draws_steps_as_the_single_envs(regime, track, made):
    assert play_both(3, 200, seed=11, regime=regime, track=track, length=40, api_pool=4, dense_reward=True,
                     reward={"f1": 0.5, "neg_regret": 0.5}, drift_prob=0.5, revert_window=5) >= 6
    assert made == []


def test_a_long_contract_episode_played_from_draws_steps_as_the_single_envs(made):
    kwargs = {"regime": "reverts", "length": 10_000, "budget_bytes": 1 << 20}
    assert play_both(2, 10_500, seed=4, invalid_share=0.01, expire_share=0.05, **kwargs) >= 2
    assert made == []


@pytest.mark.parametrize("regime", [*CONTRACT_REGIMES, "default"])
def test_episodes_the_core_makes_are_the_generators(regime):
    # With sections or renames the core makes the episode, running the generator's functions compiled.
    recipe = EpisodeRecipe(make_config(regime, length=300), 3, 5)
    assert dumps_episode(contract_episodes.make(recipe)) == dumps_episode(recipe.make())
