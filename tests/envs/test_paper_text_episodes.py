"""The paper model's episodes with documentation sections or migration guides compiled from their
draws (``envs.fast.paper_text_episodes``) against the literal path: the episode made by the
generator, read and compiled by ``episode_arrays`` (``assert_drawn_as_made``: arrays equal up to
the names of value and parameter ids, the reward function started alike), and a vector env that
steps as the single envs without making the episodes it plays."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_paper_episodes import (
    DOC_UTILITIES,
    DRAWN_AGAINST_MADE,
    assert_drawn_as_made,
    assert_played_unmade,
    paper_options,
)
from test_vector_env import play_both

from wpb_gym.envs.fast import contract_replay
from wpb_gym.envs.fast.core import CompiledCore  # noqa: F401  (binds numba's cache folder)
from wpb_gym.envs.fast.oracle_by_class import drawn_oracle
from wpb_gym.envs.fast.paper_text_episodes import compile_paper_text, paper_text_compilable
from wpb_gym.envs.rewards import RewardFunction
from wpb_gym.episodes.generators.paper import CONTRACT_REGIMES, PAPER_REGIMES, GeneratorConfig, make_config
from wpb_gym.episodes.sources import EpisodeRecipe

TEXT = {"doc_prob": 0.3, "migration_guides": True}


@st.composite
def _recipes(draw) -> EpisodeRecipe:
    doc_min, guide_min = draw(st.integers(1, 300)), draw(st.integers(1, 300))
    options = {
        **draw(paper_options()),
        "doc_prob": draw(st.sampled_from([0.0, 0.2, 1.0])),
        "doc_min_bytes": doc_min,
        "doc_max_bytes": doc_min + draw(st.integers(0, 2_000)),
        "guide_min_bytes": guide_min,
        "guide_max_bytes": guide_min + draw(st.integers(0, 500)),
        "doc_utility": draw(st.sampled_from(DOC_UTILITIES)),
    }
    options["migration_guides"] = draw(st.booleans()) or options["doc_prob"] == 0
    config = make_config(draw(st.sampled_from(PAPER_REGIMES)), **options)
    return EpisodeRecipe(config, draw(st.integers(0, 2**31 - 1)), draw(st.integers(0, 10**6)))


@settings(max_examples=150, deadline=None)
@given(recipe=_recipes(), **DRAWN_AGAINST_MADE)
def test_episodes_with_text_compiled_from_their_draws_compile_as_the_episodes_made(recipe, track, reward, dense,
                                                                                    budget):
    assert paper_text_compilable(recipe)
    assert_drawn_as_made(recipe, track, reward, dense, budget, compile_paper_text)


@pytest.mark.parametrize("regime", PAPER_REGIMES)
def test_long_episodes_with_text_compile_as_the_episodes_made(regime):
    recipe = EpisodeRecipe(make_config(regime, length=10_000, **TEXT), 7, 3)
    assert_drawn_as_made(recipe, "privileged", {"f1": 0.5, "neg_regret": 0.5}, True, 1_048_576, compile_paper_text)


def test_texts_that_repeat_and_guides_shown_or_cut_off_compile_as_made():
    """Texts of a byte or two repeat (equal texts, equal value ids); a guide made at the last
    step is never shown, its text drawn all the same."""
    config = make_config("default", doc_min_bytes=1, doc_max_bytes=2, guide_min_bytes=1, guide_max_bytes=2,
                         length=120, api_pool=4, deprecate_prob=0.5, **TEXT)
    for seed in range(8):
        recipe = EpisodeRecipe(config, seed, 1)
        observations = recipe.make().columns()[0]
        texts = [obs.get("content", obs.get("notes")) for obs in observations if "api" not in obs]
        assert len(set(texts)) < len(texts)
        assert_drawn_as_made(recipe, "privileged", {"f1": 1.0}, False, 3_000, compile_paper_text)
    last = make_config("default", length=2, api_pool=1, drift_prob=1.0, deprecate_prob=1.0, migration_guides=True)
    for seed in range(4):
        assert_drawn_as_made(EpisodeRecipe(last, seed, 0), "unprivileged", {"f1": 1.0}, False, 3_000,
                             compile_paper_text)


def test_a_text_stream_numpy_draws_otherwise_leaves_the_episode_to_be_made(monkeypatch):
    monkeypatch.setattr(contract_replay, "_draws_as_numpy", lambda: False)
    recipe = EpisodeRecipe(make_config("default", length=80, **TEXT), 3, 4)
    assert compile_paper_text(recipe, "unprivileged", RewardFunction({"f1": 1.0}, False), 4_000) is None


def test_sections_worth_a_large_utility_are_scored_by_the_scoring_oracle():
    """A class per half unit is counted in an array only up to a bound: beyond it, U*(B) is
    ``scoring.oracle``'s (as the vector env's close then asks it)."""
    large = {"doc_prob": 0.5, "doc_utility": 50_000.0, "doc_min_bytes": 10, "doc_max_bytes": 50}
    recipe = EpisodeRecipe(make_config("default", length=60, **large), 2, 0)
    reward_fn = RewardFunction({"f1": 1.0}, False)
    _, labels = compile_paper_text(recipe, "unprivileged", reward_fn, 3_000)
    assert drawn_oracle(labels, 3_000) is None and reward_fn.oracle_utility() > 50_000
    assert play_both(2, 60, seed=1, regime="default", length=20, api_pool=4, budget_bytes=1_000, **large) >= 2


# What compile_paper_text reads of a generator config, and why it may leave the rest: a field added
# to GeneratorConfig must be placed in one of the two, after checking what the paper generator does with it.
_READ = {"regime", "length", "api_pool", "min_params", "max_params", "drift_prob", "bursts", "burst_interval",
         "burst_len", "burst_drift_prob", "redundancy", "redundancy_prob", "remove_param_prob", "deprecate_prob",
         "priority_noise", "priority_correlation", "change_model", "doc_prob", "migration_guides", "doc_min_bytes",
         "doc_max_bytes", "doc_utility", "guide_min_bytes", "guide_max_bytes"}
_CONTRACT_ONLY = {"breaking_prob", "renames", "revert_prob", "revert_window", "initially_deprecated", "warmup"}


def test_every_generator_setting_is_read_or_unused_by_episodes_with_text_compiled_from_draws():
    fields = set(GeneratorConfig.__dataclass_fields__)
    assert fields == _READ | _CONTRACT_ONLY and not _READ & _CONTRACT_ONLY


@pytest.mark.parametrize("config", [
    *(make_config(regime) for regime in PAPER_REGIMES),  # without text: paper_episodes plays them
    *(make_config(regime) for regime in CONTRACT_REGIMES),
    make_config("redundancy", length=3_000, api_pool=100_000, migration_guides=True),  # rows past MAX_CELLS
])
def test_other_episodes_are_not_compiled_here(config):
    assert not paper_text_compilable(EpisodeRecipe(config, 0, 0))


@given(seed=st.integers(0, 2**31 - 1), track=st.sampled_from(["unprivileged", "privileged"]),
       regime=st.sampled_from(PAPER_REGIMES), length=st.integers(1, 60), doc_utility=st.sampled_from(DOC_UTILITIES))
@settings(max_examples=15, deadline=None)
def test_the_vector_env_plays_them_as_the_single_envs_without_making_them(seed, track, regime, length, doc_utility):
    assert_played_unmade(seed, 3 * length + 4, regime=regime, track=track, api_pool=6, length=length,
                         doc_utility=doc_utility, **TEXT)
