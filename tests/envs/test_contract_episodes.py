"""Contract-regime episodes compiled from their draws (``envs.fast.contract_episodes``)
against the literal path: the episode made by the generator, read and compiled by
``episode_arrays``. The arrays must agree up to the names of value ids, the reward function must
start alike (``assert_drawn_as_made``), and a vector env must step as the single envs without
making the episodes it plays."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_paper_episodes import DOC_UTILITIES, DRAWN_AGAINST_MADE, assert_drawn_as_made, assert_played_unmade
from test_vector_env import play_both

from wpb_gym.envs.fast import contract_episodes, contract_replay, id_tables
from wpb_gym.envs.fast.contract_episodes import compile_contract, contract_compilable
from wpb_gym.envs.fast.core import CompiledCore  # noqa: F401  (binds numba's cache folder)
from wpb_gym.envs.rewards import RewardFunction
from wpb_gym.episodes.generators.contracts import _PAIR_NAMES, _PARAM_WORDS
from wpb_gym.episodes.generators.paper import CONTRACT_REGIMES, PAPER_REGIMES, GeneratorConfig, make_config
from wpb_gym.episodes.sources import EpisodeRecipe

DRAWN = CONTRACT_REGIMES


@st.composite
def _recipes(draw) -> EpisodeRecipe:
    low = draw(st.integers(1, 9))
    interval = draw(st.integers(1, 60))
    options = {
        "api_pool": draw(st.one_of(st.integers(1, 8), st.integers(9, 300))),
        "min_params": low,
        "max_params": draw(st.integers(low, 14)),
        "drift_prob": draw(st.sampled_from([0.0, 0.2, 0.7, 1.0])),
        "bursts": draw(st.booleans()),
        "burst_drift_prob": draw(st.sampled_from([0.0, 0.6, 1.0])),
        "burst_interval": interval,
        "burst_len": draw(st.integers(0, interval)),
        "redundancy": draw(st.booleans()),
        "redundancy_prob": draw(st.sampled_from([0.0, 0.7, 1.0])),
        "breaking_prob": draw(st.sampled_from([0.0, 0.5, 1.0])),
        "revert_prob": draw(st.sampled_from([0.0, 0.5, 1.0])),
        "revert_window": draw(st.integers(1, 80)),
        "initially_deprecated": draw(st.sampled_from([0.0, 0.1, 1.0])),
        "warmup": draw(st.booleans()),
        "priority_noise": draw(st.sampled_from([0.0, 0.3])),
        "priority_correlation": draw(st.sampled_from([1.0, 0.5, 0.0])),
        "renames": draw(st.booleans()),
        "doc_prob": draw(st.sampled_from([0.0, 0.2, 1.0])),
        "doc_min_bytes": draw(st.integers(1, 300)),
        "guide_min_bytes": draw(st.integers(1, 300)),
        "doc_utility": draw(st.sampled_from(DOC_UTILITIES)),
    }
    options["doc_max_bytes"] = options["doc_min_bytes"] + draw(st.integers(0, 2_000))
    options["guide_max_bytes"] = options["guide_min_bytes"] + draw(st.integers(0, 500))
    options["length"] = draw(st.integers(1, 400)) + (options["api_pool"] if options["warmup"] else 0)
    config = make_config(draw(st.sampled_from(DRAWN)), **options)
    return EpisodeRecipe(config, draw(st.integers(0, 2**31 - 1)), draw(st.integers(0, 10**6)))


@settings(max_examples=150, deadline=None)
@given(recipe=_recipes(), **DRAWN_AGAINST_MADE)
def test_contract_episodes_compiled_from_their_draws_compile_as_the_episodes_made(recipe, track, reward, dense,
                                                                                 budget):
    assert contract_compilable(recipe)
    assert_drawn_as_made(recipe, track, reward, dense, budget, compile_contract)


@pytest.mark.parametrize("regime", DRAWN)
def test_long_contract_episodes_compile_as_the_episodes_made(regime):
    recipe = EpisodeRecipe(make_config(regime, length=10_000), 7, 3)
    assert_drawn_as_made(recipe, "privileged", {"f1": 0.5, "neg_regret": 0.5}, True, 1_048_576, compile_contract)


def test_names_drawn_again_and_added_names_running_short_replay_the_generators_draws(monkeypatch):
    """Both ways the name stream is drawn further: an endpoint meeting a starting name it has
    (64 endpoints of up to 12 names: about one episode in five), and more names added than the
    first block of added names holds (every change an addition or a relax)."""
    retried = {"starting": 0, "added": 0}
    initial_names, play = contract_replay._initial_names, contract_replay._play

    def counted_initial(*args):
        names, missing = initial_names(*args)
        retried["starting"] += missing > 0
        return names, missing

    def counted_play(*args):
        played = play(*args)
        retried["added"] += played[-1] == contract_replay._SHORT
        return played

    monkeypatch.setattr(contract_replay, "_initial_names", counted_initial)
    monkeypatch.setattr(contract_replay, "_play", counted_play)
    for seed in range(12):
        recipe = EpisodeRecipe(make_config("breaking", max_params=12, breaking_prob=0.0, drift_prob=1.0), seed, 1)
        assert_drawn_as_made(recipe, "unprivileged", {"f1": 1.0}, False, 4_000, compile_contract)
    assert retried["starting"] >= 1 and retried["added"] >= 12, retried


def test_endpoints_with_every_name_they_may_start_with_and_wide_pools_compile_as_made():
    """The most starting names an endpoint may have (half the pairs, drawn again many times over;
    no changes, as an added one would be numbered), and a pool of thousands of endpoints over
    thousands of steps (each endpoint's lists take the room they need, not a row as long as the
    episode)."""
    most = len(_PAIR_NAMES) // 2
    recipe = EpisodeRecipe(make_config("breaking", api_pool=16, min_params=most, max_params=most, drift_prob=0.0), 1, 0)
    assert contract_compilable(recipe)
    assert_drawn_as_made(recipe, "unprivileged", {"f1": 1.0}, False, 4_000, compile_contract)
    wide = EpisodeRecipe(make_config("contract_mix", api_pool=4_000, length=4_001), 2, 0)
    assert_drawn_as_made(wide, "privileged", {"f1": 0.5, "neg_regret": 0.5}, True, 50_000, compile_contract)


def test_an_endpoint_that_would_number_its_names_is_left_to_the_made_episode():
    config = make_config("breaking", api_pool=1, length=1_400, drift_prob=1.0, breaking_prob=0.0, warmup=False)
    recipe = EpisodeRecipe(config, 1, 1)
    assert max(len(obs["params"]) for obs in recipe.make().columns()[0]) > len(_PAIR_NAMES) // 2
    assert compile_contract(recipe, "unprivileged", RewardFunction({"f1": 1.0}, False), 4_000) is None
    # The vector env then plays the made episode, as the single env does.
    assert play_both(1, 40, seed=2, regime="breaking", api_pool=1, length=1_400, drift_prob=1.0, breaking_prob=0.0,
                     warmup=False) == 0


def test_texts_that_repeat_share_their_value_ids():
    """Texts of a byte or two repeat within an episode (equal texts, equal value ids), and a
    guide's deadline falls on later sections' dates."""
    config = make_config("contract_mix", doc_min_bytes=1, doc_max_bytes=2, guide_min_bytes=1, guide_max_bytes=3,
                         length=300, api_pool=8)
    for seed in range(6):
        recipe = EpisodeRecipe(config, seed, 2)
        observations = recipe.make().columns()[0]
        texts = [obs.get("content", obs.get("notes")) for obs in observations if "api" not in obs]
        assert len(set(texts)) < len(texts)
        assert_drawn_as_made(recipe, "privileged", {"f1": 1.0}, False, 3_000, compile_contract)


def test_a_step_costing_more_than_int32_holds_is_left_to_the_single_env(monkeypatch):
    """As ``compile_episode`` does: a cost of 2**31 bytes or more (a section of 2 GB) is not
    compiled. Checked on the Python function, its bound lowered below a step's cost."""
    recipe = EpisodeRecipe(make_config("mixed_sizes", length=80), 1, 0)
    played = contract_replay.play_contract(recipe)
    content_of, utility, critical, contents, p_start, p_flat, r_start, r_flat, text = played
    lengths = contract_episodes._NAME_LENGTHS
    args = (content_of, utility, critical, contents, p_start, p_flat, lengths[p_flat], r_start, r_flat,
            lengths[r_flat], text, np.array([20], dtype=np.int64), True, contract_episodes._CONTRACT_TOPICS, 40)
    static, _, _, costs = contract_episodes._compile.py_func(*args)
    assert static.size and costs.max() > 100
    monkeypatch.setattr(contract_episodes, "_MAX_COST", int(costs.max()))
    assert contract_episodes._compile.py_func(*args)[0].size == 0


def test_table_slots_depend_on_every_bit_of_a_key():
    """Parameter ids differ in their high bits from endpoint to endpoint (endpoint * stride +
    number): their slots must not pile up in one probe chain when the stride is a power of two."""
    slots = {int(id_tables.mixed(np.int64(endpoint << 20))) & 1023 for endpoint in range(1024)}
    assert len(slots) > 512


def test_pair_ids_sort_as_their_names():
    """A snapshot lists its names sorted: sorting the ids must sort the names (no word is a
    prefix of another, and the words are in order)."""
    assert sorted(_PAIR_NAMES) == _PAIR_NAMES and _PARAM_WORDS == sorted(_PARAM_WORDS)


# What compile_contract reads of a generator config, and why it may leave the rest: a field added
# to GeneratorConfig must be placed in one of the two, after checking what the contract generator does with it.
_READ = {"regime", "length", "api_pool", "min_params", "max_params", "drift_prob", "bursts", "burst_interval",
         "burst_len", "burst_drift_prob", "redundancy", "redundancy_prob", "breaking_prob", "revert_prob",
         "revert_window", "initially_deprecated", "warmup", "priority_noise", "priority_correlation", "change_model",
         "doc_prob", "renames", "doc_min_bytes", "doc_max_bytes", "doc_utility", "guide_min_bytes",
         "guide_max_bytes"}
_PAPER_ONLY = {"migration_guides", "remove_param_prob", "deprecate_prob"}  # the contract generator ignores them


def test_every_generator_setting_is_read_or_unused_by_contract_episodes_compiled_from_draws():
    fields = set(GeneratorConfig.__dataclass_fields__)
    assert fields == _READ | _PAPER_ONLY and not _READ & _PAPER_ONLY


@pytest.mark.parametrize("config", [
    *(make_config(regime) for regime in PAPER_REGIMES),
    make_config("breaking", max_params=len(_PAIR_NAMES) // 2 + 1),
    make_config("breaking", api_pool=60_000, length=60_001),  # endpoints' rows past MAX_CELLS
])
def test_other_models_and_episodes_beyond_the_compiled_ids_are_not_compiled_here(config):
    assert not contract_compilable(EpisodeRecipe(config, 0, 0))


def test_a_text_stream_numpy_draws_otherwise_leaves_the_episode_to_be_made(monkeypatch):
    monkeypatch.setattr(contract_replay, "_draws_as_numpy", lambda: False)
    recipe = EpisodeRecipe(make_config("contract_mix", length=80), 3, 4)
    assert compile_contract(recipe, "unprivileged", RewardFunction({"f1": 1.0}, False), 4_000) is None
    assert compile_contract(EpisodeRecipe(make_config("breaking", length=80), 3, 4), "unprivileged",
                            RewardFunction({"f1": 1.0}, False), 4_000) is not None  # no text: NumPy draws it all


@pytest.mark.parametrize("regime", DRAWN)
def test_every_contract_regime_is_compiled_from_its_draws(regime):
    assert contract_compilable(EpisodeRecipe(make_config(regime), 0, 0))


@given(seed=st.integers(0, 2**31 - 1), track=st.sampled_from(["unprivileged", "privileged"]),
       regime=st.sampled_from(DRAWN), length=st.integers(1, 60), doc_utility=st.sampled_from(DOC_UTILITIES))
@settings(max_examples=15, deadline=None)
def test_the_vector_env_plays_them_as_the_single_envs_without_making_them(seed, track, regime, length, doc_utility):
    assert_played_unmade(seed, 3 * (6 + length), regime=regime, track=track, api_pool=6, length=6 + length,
                         doc_utility=doc_utility)


@pytest.mark.parametrize("doc_utility", [0.7, 1 / 3, 999_999_999_999.7])
def test_sections_worth_other_than_halves_are_played_from_draws_and_scored_on_their_labels(doc_utility):
    assert_played_unmade(3, 150, regime="mixed_sizes", api_pool=4, length=40, doc_prob=0.5, doc_utility=doc_utility,
                         budget_bytes=2_000)
