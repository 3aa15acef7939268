"""Statistics of the paper regimes' generated episodes: bursts, redundancy and priority noise as Table 1 configures them."""


import pytest
from test_generator import BURST_REGIMES, DOC_KEYS, GUIDE_KEYS, REDUNDANCY_REGIMES, SNAPSHOT_KEYS, endpoint_of

from wpb_gym.episodes.generators.paper import (
    generate_episode,
    generate_episodes,
    make_config,
)
from wpb_gym.episodes.jsonl import dumps_episode


# ----------------------------------------------------------------------------- regime statistics
def _drift_rates(regime, n=20, T=200):
    config = make_config(regime, length=T)
    inside = [0, 0]  # drifts, steps
    outside = [0, 0]
    for ep in generate_episodes(config, 100, n):
        crit = set(ep.critical_steps)
        for t in range(T):
            bucket = inside if t % config.burst_interval < config.burst_len else outside
            bucket[0] += t in crit
            bucket[1] += 1
    return inside[0] / inside[1], outside[0] / outside[1]


@pytest.mark.parametrize("regime", BURST_REGIMES)
def test_burst_regimes_drift_more_inside_windows(regime):
    inside, outside = _drift_rates(regime)
    assert inside == pytest.approx(0.6, abs=0.08)
    assert outside == pytest.approx(0.08, abs=0.025)
    assert inside > 4 * outside


@pytest.mark.parametrize("regime", ("default", "redundancy"))
def test_non_burst_regimes_drift_uniformly(regime):
    inside, outside = _drift_rates(regime)
    assert inside == pytest.approx(0.08, abs=0.04)
    assert outside == pytest.approx(0.08, abs=0.025)


def _repeat_rate(regime, n=20, T=200):
    repeats = total = 0
    for ep in generate_episodes(make_config(regime, length=T), 200, n):
        ends = [endpoint_of(s.observation) for s in ep.steps]
        repeats += sum(a == b for a, b in zip(ends, ends[1:], strict=False))
        total += T - 1
    return repeats / total


@pytest.mark.parametrize("regime", REDUNDANCY_REGIMES)
def test_redundancy_regimes_repeat_the_previous_endpoint(regime):
    assert _repeat_rate(regime) == pytest.approx(0.7 + 0.3 / 8, abs=0.05)


@pytest.mark.parametrize("regime", ("default", "burst_drift"))
def test_non_redundancy_regimes_draw_endpoints_uniformly(regime):
    assert _repeat_rate(regime) == pytest.approx(1 / 8, abs=0.04)


def test_redundancy_produces_exact_repeats():
    def repeat_share(regime):
        values = [
            u
            for ep in generate_episodes(make_config(regime, length=200), 7, 5)
            for u in ep.labels["utility_by_step"].values()
        ]
        return values.count(0.5) / len(values)

    assert repeat_share("redundancy") > 0.5
    assert repeat_share("default") < 0.2


# ----------------------------------------------------------------------------- optional content
def test_documentation_sections():
    config = make_config("default", length=300, doc_prob=0.2, doc_utility=2.0)
    docs_seen = 0
    for index in range(3):
        ep = generate_episode(config, 8, index)
        crit = set(ep.critical_steps)
        for step in ep.steps:
            obs = step.observation
            if "section" not in obs:
                assert set(obs) == SNAPSHOT_KEYS
                continue
            docs_seen += 1
            assert set(obs) == DOC_KEYS
            assert isinstance(obs["content"], str)
            assert config.doc_min_bytes <= len(obs["content"].encode("utf-8")) <= config.doc_max_bytes
            assert obs["section"].startswith("endpoint_")
            assert ep.labels["utility_by_step"][step.t] == config.doc_utility
            assert step.t not in crit
        assert ep.labels["total_drift_events"] == len(ep.labels["critical_steps"])
    # doc_prob 0.2 of 900 steps
    assert 0.12 * 900 < docs_seen < 0.28 * 900


def test_docs_off_by_default():
    ep = generate_episode(make_config("default", length=300), 8, 0)
    assert all(set(s.observation) == SNAPSHOT_KEYS for s in ep.steps)


def test_migration_guides():
    config = make_config("burst_drift", length=400, migration_guides=True)
    guides_seen = 0
    for index in range(4):
        ep = generate_episode(config, 12, index)
        labels = ep.labels
        T = len(ep)
        guide_steps = labels["migration_guide_steps"]
        crit = set(ep.critical_steps)
        u = labels["utility_by_step"]
        last_shown = {}  # endpoint -> last snapshot shown
        newly_deprecating = []  # drift steps that turned an endpoint's deprecated flag False -> True
        for step in ep.steps:
            obs, t = step.observation, step.t
            if t in guide_steps:
                guides_seen += 1
                assert set(obs) == GUIDE_KEYS
                assert t not in crit  # guides are valuable (utility) but not drift events
                prev = ep.steps[t - 1].observation
                assert set(prev) == SNAPSHOT_KEYS
                assert prev["api"] == obs["old_api"]
                assert prev["deprecated"] is True
                assert t - 1 in newly_deprecating
                i = endpoint_of(prev)
                assert obs["new_api"] == f"api.v{prev['version'] + 1}.endpoint_{i}"
                assert config.guide_min_bytes <= len(obs["notes"]) <= config.guide_max_bytes
                assert u[t] == u[t - 1]  # worth as much as the deprecation
                continue
            assert set(obs) == SNAPSHOT_KEYS
            i = endpoint_of(obs)
            before = last_shown.get(i)
            was_deprecated = before["deprecated"] if before is not None else False
            last_version = before["version"] if before is not None else 1
            if obs["version"] > last_version:
                assert t in crit
                if obs["deprecated"] and not was_deprecated:
                    newly_deprecating.append(t)
                    assert t in labels["breaking_changes"]
            else:
                assert t not in crit
            last_shown[i] = obs
        # Guides are exactly the steps right after a newly deprecating drift.
        assert guide_steps == [t + 1 for t in newly_deprecating if t + 1 < T]
        assert not set(guide_steps) & crit
        assert all(set(ep.steps[t].observation) == SNAPSHOT_KEYS for t in crit)  # R is drift events only
        assert labels["total_drift_events"] == len(labels["critical_steps"])
    assert guides_seen >= 3


def test_guides_off_by_default():
    ep = generate_episode(make_config("burst_drift", length=200), 12, 0)
    assert "migration_guide_steps" not in ep.labels
    assert all(set(s.observation) == SNAPSHOT_KEYS for s in ep.steps)


def test_generated_episodes_make_their_steps_on_first_use():
    """Generated episodes keep columns and make ``Step`` objects only when ``steps`` is read:
    an environment reset reads the columns and makes none. Once made, the steps are the
    ones an eagerly built episode holds, and the episode behaves like one."""
    import copy
    import pickle

    import gymnasium as gym

    from wpb_gym.core.types import Episode, Step

    config = make_config("burst_redundancy", length=40)
    lazy = generate_episode(config, 5, 2)
    assert "steps" not in lazy.__dict__ and len(lazy) == lazy.length == 40
    observations, metadata = lazy.columns()
    assert len(observations) == len(metadata) == 40 and "steps" not in lazy.__dict__
    eager = Episode(
        steps=[Step(t, obs, m) for t, (obs, m) in enumerate(zip(observations, metadata, strict=True))],
        labels=lazy.labels,
    )
    assert pickle.loads(pickle.dumps(lazy)) == eager  # pickles its columns
    assert copy.deepcopy(lazy) == eager and eager == lazy and lazy == eager
    assert lazy.steps is lazy.steps and isinstance(lazy.steps, tuple) and lazy.steps == eager.steps
    assert lazy.columns()[0] == observations and dumps_episode(lazy) == dumps_episode(eager)
    assert not hasattr(lazy, "not_an_attribute")
    with pytest.raises(ValueError, match="2 observations but 1 metadata"):
        Episode.from_columns([{}, {}], [{}], {})

    env = gym.make("WritePolicyBench-v0", regime="redundancy", length=30).unwrapped
    env.reset(seed=0)
    while not env.step(1)[2]:
        pass
    assert "steps" not in env.episode.__dict__


@pytest.mark.parametrize(
    "regime, options, digest",
    [
        ("default", {}, "20d81077e902bc67"),
        ("burst_redundancy", {}, "6a37101a3d652685"),
        ("contract_mix", {}, "2122aae24f3507ed"),
        # Text between the snapshots: documentation sections and migration guides (13 guides in the
        # first row's three episodes, 11 in the second's).
        ("burst_drift", {"doc_prob": 0.2, "migration_guides": True}, "12d8b2fcf1fd1b4b"),
        ("redundancy", {"migration_guides": True, "deprecate_prob": 0.6}, "19ea6b0ce2f08b63"),
    ],
)
def test_generated_episodes_are_pinned(regime, options, digest):
    """Golden: the canonical JSON of three generated episodes per regime, hashed. The README's
    frozen-set hashes and every published figure depend on these streams; a change to the
    generator that alters them must be deliberate (update the digest and the README)."""
    import hashlib

    h = hashlib.sha256()
    for index in range(3):
        h.update(dumps_episode(generate_episode(make_config(regime, length=120, **options), 11, index)).encode())
    assert h.hexdigest()[:16] == digest
