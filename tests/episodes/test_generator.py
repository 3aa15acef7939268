"""Tests of the synthetic drift regimes (paper §3, Table 1; ``wpb_gym.episodes.generators.paper`` docstring).

The semantic tests re-derive everything the labels claim (critical steps, breaking changes,
deprecations, utilities, priorities) from the observations alone, by replaying the stream
endpoint by endpoint, instead of trusting the generator's own bookkeeping.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wpb_gym.episodes.generators.paper import (
    CONTRACT_REGIMES,
    PAPER_REGIMES,
    REGIMES,
    GeneratorConfig,
    generate_episode,
    generate_episodes,
    make_config,
)
from wpb_gym.episodes.jsonl import dumps_episode

REPO = Path(__file__).resolve().parents[2]
ALL_REGIMES = ("default", "burst_drift", "redundancy", "burst_redundancy")
BURST_REGIMES = ("burst_drift", "burst_redundancy")
REDUNDANCY_REGIMES = ("redundancy", "burst_redundancy")
GUIDE_KEYS = {"old_api", "new_api", "deadline", "notes"}
DOC_KEYS = {"section", "content", "last_updated"}
SNAPSHOT_KEYS = {"api", "deprecated", "params", "version"}


def observations(ep):
    return [s.observation for s in ep.steps]


def endpoint_of(obs):
    api = obs["api"]
    return int(api.rsplit("endpoint_", 1)[1])


# ----------------------------------------------------------------------------- configuration
def test_table1_defaults():
    c = GeneratorConfig()
    assert c.regime == "default"
    assert c.length == 200
    assert c.api_pool == 8
    assert c.drift_prob == 0.08
    assert c.burst_interval == 50
    assert c.burst_len == 8
    assert c.burst_drift_prob == 0.6
    assert c.redundancy_prob == 0.7
    assert c.bursts is False and c.redundancy is False
    assert c.priority_noise == 0.0
    assert c.doc_prob == 0.0 and c.migration_guides is False


@pytest.mark.parametrize(
    "regime, bursts, redundancy",
    [
        ("default", False, False),
        ("burst_drift", True, False),
        ("redundancy", False, True),
        ("burst_redundancy", True, True),
    ],
)
def test_make_config_regimes(regime, bursts, redundancy):
    c = make_config(regime)
    assert c.regime == regime
    assert c.bursts is bursts
    assert c.redundancy is redundancy
    # Everything else keeps the Table 1 values.
    base = GeneratorConfig()
    for name in (
        "length",
        "api_pool",
        "drift_prob",
        "burst_interval",
        "burst_len",
        "burst_drift_prob",
        "redundancy_prob",
    ):
        assert getattr(c, name) == getattr(base, name)


def test_regimes_are_the_papers_four_then_the_contract_ones():
    assert PAPER_REGIMES == ALL_REGIMES
    assert list(REGIMES) == [*PAPER_REGIMES, *CONTRACT_REGIMES]
    for regime in PAPER_REGIMES:
        assert make_config(regime).change_model == "paper"
    for regime in CONTRACT_REGIMES:
        assert make_config(regime).change_model == "contract"


def test_make_config_overrides_apply():
    c = make_config("burst_drift", length=37, drift_prob=0.2, api_pool=3, redundancy=True)
    assert (c.regime, c.length, c.drift_prob, c.api_pool) == ("burst_drift", 37, 0.2, 3)
    assert c.bursts is True and c.redundancy is True
    # An override can also switch off what the regime turns on.
    assert make_config("burst_redundancy", bursts=False).bursts is False
    assert make_config() == GeneratorConfig()


def test_unknown_regime_raises_naming_it():
    with pytest.raises(ValueError, match="no_such_regime"):
        make_config("no_such_regime")


def test_unknown_option_raises_naming_it():
    with pytest.raises(ValueError, match="bogus_knob"):
        make_config("default", bogus_knob=1)
    with pytest.raises(ValueError, match="bogus_knob"):
        GeneratorConfig.from_dict({"bogus_knob": 3})


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"drift_prob": 1.5}, "drift_prob"),
        ({"burst_drift_prob": -0.1}, "burst_drift_prob"),
        ({"redundancy_prob": 1.5}, "redundancy_prob"),
        ({"length": 0}, "length"),
        ({"api_pool": 0}, "api_pool"),
        ({"min_params": 4, "max_params": 3}, "max_params"),
        ({"length": "200"}, "length"),
        ({"api_pool": 2.0}, "api_pool"),
        ({"length": True}, "length"),
        ({"drift_prob": "0.1"}, "drift_prob"),
        ({"burst_len": 60}, "burst_len"),
        ({"doc_utility": 1.5e12}, r"doc_utility: expected at most 1e\+12"),  # past the oracle's exact sums
        ({"doc_utility": 10**400}, "doc_utility: expected a finite number"),  # past float64: no OverflowError
    ],
)
def test_invalid_values_raise_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        GeneratorConfig(**kwargs)
    with pytest.raises(ValueError, match=field):
        make_config("default", **kwargs)


def test_config_round_trips_through_dict():
    c = make_config("burst_redundancy", length=50, priority_noise=0.1)
    assert GeneratorConfig.from_dict(c.to_dict()) == c


# ----------------------------------------------------------------------------- determinism
def test_same_inputs_give_equal_episodes():
    c = make_config("burst_redundancy", length=120)
    a = generate_episode(c, 11, 4)
    b = generate_episode(c, 11, 4)
    assert a == b
    assert dumps_episode(a) == dumps_episode(b)
    # generate_episodes yields the same episodes as generate_episode, index by index.
    batch = list(generate_episodes(c, 11, 3, start=3))
    assert [e.episode_id for e in batch] == [3, 4, 5]
    assert dumps_episode(batch[1]) == dumps_episode(a)


def test_same_episode_across_processes():
    c = make_config("burst_drift", length=60)
    code = (
        "from wpb_gym.episodes.generators.paper import generate_episode, make_config\n"
        "from wpb_gym.episodes.jsonl import dumps_episode\n"
        "print(dumps_episode(generate_episode(make_config('burst_drift', length=60), 5, 3)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.rstrip("\n") == dumps_episode(generate_episode(c, 5, 3))


def test_episodes_of_a_set_differ():
    c = make_config("default", length=100)
    obs = [json.dumps(observations(e), sort_keys=True) for e in generate_episodes(c, 0, 6)]
    assert len(set(obs)) == len(obs)


def test_neighbouring_seeds_do_not_share_episodes():
    c = make_config("default", length=100)
    a = generate_episode(c, 0, 1)
    b = generate_episode(c, 1, 0)
    assert observations(a) != observations(b)
    assert a.critical_steps != b.critical_steps
    # ...nor do the other neighbours of (0, 0).
    base = observations(generate_episode(c, 0, 0))
    assert base != observations(a) and base != observations(b)


def test_regimes_of_one_set_draw_independent_streams():
    # Same seed and index, different regimes: the drift schedules must not be copies.
    schedules = {}
    for regime in ALL_REGIMES:
        eps = [generate_episode(make_config(regime, length=200), 0, i) for i in range(10)]
        schedules[regime] = [e.critical_steps for e in eps]
    for a in ALL_REGIMES:
        for b in ALL_REGIMES:
            if a < b:
                same = sum(x == y for x, y in zip(schedules[a], schedules[b], strict=False))
                assert same == 0, (a, b, same)
    endpoints = {
        r: [s.observation["api"].rsplit("_", 1)[1] for s in generate_episode(make_config(r), 0, 0).steps]
        for r in ("default", "burst_drift")
    }
    assert endpoints["default"] != endpoints["burst_drift"]


def test_priority_noise_changes_only_priorities():
    for regime in ALL_REGIMES:
        clean = generate_episode(make_config(regime, length=150), 9, 2)
        noisy = generate_episode(make_config(regime, length=150, priority_noise=0.3), 9, 2)
        assert observations(clean) == observations(noisy)
        assert clean.labels == noisy.labels
        assert [s.t for s in clean.steps] == [s.t for s in noisy.steps]
        assert [s.metadata["mode"] for s in clean.steps] == [s.metadata["mode"] for s in noisy.steps]
        assert [s.metadata["priority"] for s in clean.steps] != [s.metadata["priority"] for s in noisy.steps]


def test_invalid_seed_or_index_raises():
    c = make_config(length=10)
    for seed in (-1, 1.0, True, "0"):
        with pytest.raises(ValueError, match="seed"):
            generate_episode(c, seed, 0)
    for index in (-1, 2.0, False):
        with pytest.raises(ValueError, match="index"):
            generate_episode(c, 0, index)


# ----------------------------------------------------------------------------- lengths
def _check_shape(ep, T):
    assert len(ep) == T
    assert [s.t for s in ep.steps] == list(range(T))
    assert sorted(ep.labels["utility_by_step"]) == list(range(T))
    assert all(0 <= t < T for t in ep.critical_steps)


@pytest.mark.parametrize("T", [100, 1000])
def test_lengths(T):
    _check_shape(generate_episode(make_config("burst_redundancy", length=T), 2, 0), T)


def test_length_10000():
    ep = generate_episode(make_config("burst_drift", length=10_000), 0, 0)
    _check_shape(ep, 10_000)
    assert ep.labels["max_utility"] == pytest.approx(sum(ep.labels["utility_by_step"].values()))


def test_length_one():
    _check_shape(generate_episode(make_config(length=1), 0, 0), 1)


# ----------------------------------------------------------------------------- semantics
def replay(ep, config):
    """Re-derive the labels of a docs/guides-free episode from its observations alone.

    Returns a dict with critical steps, breaking steps, deprecations count, utilities, and
    the number of drift steps whose predecessor state was unknown (endpoint not yet shown).
    """
    last_shown = {}  # endpoint -> last observation shown
    critical, breaking, utilities = [], [], []
    ambiguous_breaking = []  # drifts of never-shown endpoints whose previous param list is unknown
    deprecations = 0
    prev = None
    for step in ep.steps:
        t, obs = step.t, step.observation
        assert set(obs) == SNAPSHOT_KEYS
        i = endpoint_of(obs)
        assert 0 <= i < config.api_pool
        assert obs["api"] == f"api.v{obs['version']}.endpoint_{i}"
        assert isinstance(obs["deprecated"], bool)
        assert len(obs["params"]) >= 1
        assert all(p.startswith(f"p{i}_") for p in obs["params"])
        before = last_shown.get(i)
        last_version = before["version"] if before is not None else 1
        assert obs["version"] >= last_version
        drift = obs["version"] > last_version
        if drift:
            assert obs["version"] == last_version + 1
            critical.append(t)
            in_burst = config.bursts and t % config.burst_interval < config.burst_len
            utilities.append(6.0 if in_burst else 5.0)
            if obs["deprecated"]:
                deprecations += 1
            if before is not None:
                old, new = before["params"], obs["params"]
                added = len(new) == len(old) + 1 and new[:-1] == old and new[-1] not in old
                removed = len(new) == len(old) - 1 and any(old[:k] + old[k + 1 :] == new for k in range(len(old)))
                assert added != removed, (t, old, new)  # exactly one param added or removed
                if removed or (obs["deprecated"] and not before["deprecated"]):
                    breaking.append(t)
            else:
                ambiguous_breaking.append(t)
        else:
            if before is not None:
                # Without drift an endpoint's snapshot (params, deprecated flag) is unchanged.
                assert obs == before, t
            else:
                # The initial snapshot: version 1, not deprecated, p{i}_0..p{i}_{n-1}, n in [min, max].
                n = len(obs["params"])
                assert config.min_params <= n <= config.max_params
                assert obs["params"] == [f"p{i}_{k}" for k in range(n)]
                assert obs["version"] == 1 and obs["deprecated"] is False
            utilities.append(0.5 if obs == prev else 1.0)
        last_shown[i] = obs
        prev = obs
    return {
        "critical": critical,
        "breaking": breaking,
        "ambiguous_breaking": ambiguous_breaking,
        "deprecations": deprecations,
        "utilities": utilities,
    }


SEMANTIC_CASES = [(regime, index) for regime in ALL_REGIMES for index in range(3)]


@pytest.mark.parametrize("regime, index", SEMANTIC_CASES)
def test_labels_rederived_from_observations(regime, index):
    config = make_config(regime, length=400)
    ep = generate_episode(config, 21, index)
    r = replay(ep, config)
    labels = ep.labels
    T = len(ep)

    assert labels["critical_steps"] == r["critical"]
    assert list(ep.critical_steps) == r["critical"]
    assert labels["total_drift_events"] == len(labels["critical_steps"])
    assert labels["deprecated_apis"] == r["deprecations"]
    # Breaking changes: every drift with a known predecessor is classified exactly; drifts of a
    # never-shown endpoint may or may not be breaking, but they are drifts.
    known = [t for t in labels["breaking_changes"] if t not in r["ambiguous_breaking"]]
    assert known == r["breaking"]
    assert set(labels["breaking_changes"]) <= set(labels["critical_steps"])
    assert labels["breaking_changes"] == sorted(labels["breaking_changes"])

    u = [labels["utility_by_step"][t] for t in range(T)]
    assert u == r["utilities"]
    assert labels["max_utility"] == pytest.approx(math.fsum(u))
    assert ep.utilities.tolist() == u

    for step in ep.steps:
        assert step.metadata == {"mode": regime, "priority": labels["utility_by_step"][step.t] / 6.0}
    assert labels["episode_id"] == index
    assert labels["mode"] == regime
    assert labels["seed"] == 21
    assert ep.regime == regime
    assert "migration_guide_steps" not in labels


def test_episodes_contain_every_kind_of_step():
    """The semantic tests above are not vacuous: the sample has all the cases they check."""
    seen_repeat = seen_burst = seen_breaking = seen_deprecation = seen_removal = 0
    for regime, index in SEMANTIC_CASES:
        ep = generate_episode(make_config(regime, length=400), 21, index)
        values = set(ep.labels["utility_by_step"].values())
        seen_repeat += 0.5 in values
        seen_burst += 6.0 in values
        seen_breaking += len(ep.labels["breaking_changes"]) > 0
        seen_deprecation += ep.labels["deprecated_apis"] > 0
        seen_removal += any(
            len(ep.steps[t].observation["params"]) < len(ep.steps[t - 1].observation["params"])
            for t in ep.critical_steps
            if t > 0 and endpoint_of(ep.steps[t - 1].observation) == endpoint_of(ep.steps[t].observation)
        )
    assert seen_repeat and seen_burst and seen_breaking and seen_deprecation and seen_removal


def test_burst_utility_only_in_burst_regimes():
    for regime in ("default", "redundancy"):
        ep = generate_episode(make_config(regime, length=400), 3, 0)
        assert 6.0 not in set(ep.labels["utility_by_step"].values())


def test_priority_noise_statistics():
    us, ps = [], []
    for index in range(6):
        ep = generate_episode(make_config("burst_drift", length=200, priority_noise=0.3), 4, index)
        for step in ep.steps:
            us.append(ep.labels["utility_by_step"][step.t])
            ps.append(step.metadata["priority"])
    us, ps = np.asarray(us), np.asarray(ps)
    assert ps.min() >= 0.0 and ps.max() <= 1.0
    assert not np.array_equal(ps, us / 6.0)
    assert np.mean(ps != us / 6.0) > 0.5
    assert np.corrcoef(us, ps)[0, 1] > 0.5


def test_filler_text_is_the_start_of_the_words_rng_choice_draws():
    from wpb_gym.episodes.generators.text import VOCABULARY, filler_text

    for n_bytes in [*range(30), 1024, 3071, 5120]:
        for seed in range(20):
            ours, reference = np.random.default_rng(seed), np.random.default_rng(seed)
            words = reference.choice(np.asarray(VOCABULARY), size=n_bytes // 3 + 1).tolist()
            assert filler_text(ours, n_bytes) == " ".join(words)[:n_bytes]
            assert ours.random() == reference.random()  # the stream moved alike
