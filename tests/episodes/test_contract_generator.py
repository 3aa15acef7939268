"""The contract change model: breaking vs cosmetic changes, reverts, renames, noisy priority."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym.envs.observation.stream_table import endpoint_family
from wpb_gym.episodes.generators.contracts import (
    BREAKING_KINDS,
    COSMETIC_KINDS,
    FIRST_VERSION_MAX,
    REVERTIBLE_KINDS,
)
from wpb_gym.episodes.generators.paper import CONTRACT_REGIMES, generate_episode, make_config
from wpb_gym.episodes.generators.utility_scale import (
    UTILITY_COSMETIC,
    UTILITY_DRIFT,
    UTILITY_ORDINARY,
    UTILITY_REPEAT,
    UTILITY_WARMUP,
)
from wpb_gym.episodes.jsonl import load_jsonl, write_jsonl


def _replay(episode):
    """Per change step: (kind, the endpoint's previous snapshot or None, the step's observation)."""
    last: dict = {}
    out = {}
    for step in episode.steps:
        obs = step.observation
        if "api" in obs:
            family = endpoint_family(obs["api"])
            out[step.t] = (last.get(family), obs)
            last[family] = obs
        elif "old_api" in obs:
            out[step.t] = (last.get(endpoint_family(obs["old_api"])), obs)
    return out


def _contract(obs):
    return set(obs["params"]), set(obs["required"]), obs["deprecated"]


@pytest.mark.parametrize("regime", CONTRACT_REGIMES)
def test_every_change_does_what_its_kind_says(regime):
    for index in range(5):
        episode = generate_episode(make_config(regime, length=300), seed=3, index=index)
        kinds = dict(episode.labels["change_kinds"])
        replay = _replay(episode)
        reverted_from = dict(zip(episode.labels["revert_steps"], episode.labels["reverted_changes"], strict=True))
        for t, step in enumerate(episode.steps):
            obs = step.observation
            kind = kinds.get(t)
            if "section" in obs:
                assert kind in (None, "doc_edit")
                continue
            before, now = replay[t]
            if kind is None:
                assert before is None or before == now  # unchanged endpoints show the same snapshot
                continue
            if kind == "rename":
                assert set(obs) == {"old_api", "new_api", "deadline", "notes"}
                old_version = int(obs["old_api"].split(".")[1][1:])
                assert obs["new_api"].startswith(f"api.v{old_version + 1}.")
                later = [s.observation for s in episode.steps[t + 1 :] if s.observation.get("api") == obs["new_api"]]
                assert not later or _contract(later[0]) == _contract(before or later[0])
                continue
            if before is None:  # a change at the endpoint's first sighting: nothing to compare with
                assert now["version"] >= 2
                continue
            assert now["version"] == before["version"] + 1
            (p0, r0, d0), (p1, r1, d1) = _contract(before), _contract(now)
            assert r1 <= p1 and r0 <= p0
            if kind == "remove_param":
                assert len(p0 - p1) == 1 and not (p1 - p0) and d0 == d1
            elif kind == "require_param":
                assert p0 == p1 and len(r1 - r0) == 1 and not (r0 - r1) and d0 == d1
            elif kind == "deprecate":
                assert (p0, r0, d0, d1) == (p1, r1, False, True)
            elif kind == "add_param":
                assert len(p1 - p0) == 1 and not (p0 - p1) and r0 == r1 and d0 == d1
            elif kind == "relax_param":
                assert p0 == p1 and len(r0 - r1) == 1 and not (r1 - r0) and d0 == d1
            else:
                assert kind == "revert"
                changed_at = reverted_from[t]
                assert kinds[changed_at] in REVERTIBLE_KINDS
                if replay[changed_at][0] is not None:
                    assert _contract(now) == _contract(replay[changed_at][0])


@pytest.mark.parametrize("regime", CONTRACT_REGIMES)
def test_critical_steps_are_the_breaking_changes_still_in_force(regime):
    for index in range(5):
        episode = generate_episode(make_config(regime), seed=0, index=index)
        labels = episode.labels
        kinds = dict(labels["change_kinds"])
        reverted, undone = set(labels["reverted_changes"]), set(labels["undone_changes"])
        breaking = [t for t, k in sorted(kinds.items()) if k in BREAKING_KINDS]
        assert labels["critical_steps"] == [t for t in breaking if t not in reverted | undone]
        assert labels["breaking_changes"] == labels["critical_steps"]
        assert labels["total_drift_events"] == len(labels["critical_steps"])
        assert labels["cosmetic_changes"] == [t for t, k in sorted(kinds.items()) if k in COSMETIC_KINDS]
        assert reverted <= set(breaking)
        assert all(r > c for r, c in zip(labels["revert_steps"], labels["reverted_changes"], strict=True))
        u = labels["utility_by_step"]
        for t in labels["critical_steps"]:
            assert u[t] == UTILITY_DRIFT
        for t in [*labels["cosmetic_changes"], *labels["revert_steps"], *reverted, *undone]:
            assert u[t] == UTILITY_COSMETIC
        warmup = labels["warmup_steps"]
        assert all(u[t] == UTILITY_WARMUP for t in range(warmup))
        for t, step in enumerate(episode.steps[warmup:], start=warmup):
            if t not in kinds and "api" in step.observation:
                assert u[t] in (UTILITY_ORDINARY, UTILITY_REPEAT)


def test_revert_window_one_reverts_every_revertible_change_but_the_last():
    config = make_config("breaking", length=300, revert_prob=1.0, revert_window=1, drift_prob=0.5)
    episode = generate_episode(config, seed=1)
    kinds = dict(episode.labels["change_kinds"])
    revertible = [t for t, k in sorted(kinds.items()) if k in REVERTIBLE_KINDS]
    assert revertible
    reverted = set(episode.labels["reverted_changes"])
    assert reverted
    # The revert comes at t + 1 (or the next step free of other reverts); one due after the
    # end never comes, so only the last few changes can stay unreverted.
    assert all(t >= config.length - 4 for t in revertible if t not in reverted)
    for changed_at, revert_at in zip(episode.labels["reverted_changes"], episode.labels["revert_steps"], strict=True):
        assert revert_at >= changed_at + 1
    # What is reverted within the episode is not critical; an unreverted last change is.
    assert not reverted & set(episode.labels["critical_steps"])


def test_a_revert_due_after_the_end_leaves_the_change_critical():
    config = make_config("breaking", length=124, revert_prob=1.0, revert_window=1000, drift_prob=0.5)
    episode = generate_episode(config, seed=2)
    kinds = dict(episode.labels["change_kinds"])
    late = [t for t, k in kinds.items() if k in REVERTIBLE_KINDS and t not in episode.labels["reverted_changes"]]
    assert late and set(late) <= set(episode.labels["critical_steps"])


def test_without_reverts_or_renames_nothing_is_reverted_or_renamed():
    episode = generate_episode(make_config("breaking"), seed=0)
    assert episode.labels["reverted_changes"] == [] and episode.labels["revert_steps"] == []
    assert episode.labels["rename_steps"] == []
    assert all(k in (*BREAKING_KINDS, *COSMETIC_KINDS) for _, k in episode.labels["change_kinds"])


def test_rename_guides_are_critical_and_large():
    episode = generate_episode(make_config("mixed_sizes"), seed=0, index=1)
    renames = episode.labels["rename_steps"]
    assert renames and set(renames) <= set(episode.labels["critical_steps"])
    config = make_config("mixed_sizes")
    for t in renames:
        notes = episode.steps[t].observation["notes"]
        assert config.guide_min_bytes <= len(notes) <= config.guide_max_bytes


def test_breaking_share_follows_breaking_prob():
    def share(p):
        n_breaking = n_changes = 0
        for index in range(20):
            labels = generate_episode(make_config("breaking", breaking_prob=p), seed=0, index=index).labels
            kinds = [k for _, k in labels["change_kinds"]]
            n_changes += len(kinds)
            n_breaking += sum(k in BREAKING_KINDS for k in kinds)
        return n_breaking / n_changes

    assert share(0.0) == 0.0
    assert share(1.0) == 1.0
    assert 0.4 < share(0.5) < 0.6


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.8])
def test_priority_correlation_is_a_hint_of_that_strength(rho):
    u, p = [], []
    for index in range(30):
        episode = generate_episode(make_config("breaking", priority_correlation=rho), seed=0, index=index)
        u += [episode.labels["utility_by_step"][t] for t in range(len(episode))]
        p += [s.metadata["priority"] for s in episode.steps]
    u, p = np.asarray(u), np.asarray(p)
    assert ((0 <= p) & (p <= 1)).all()
    # Pearson correlation of the latent is rho; the normal CDF keeps its rank order.
    latent = np.clip(p, 1e-12, 1 - 1e-12)
    from scipy import stats

    r = stats.pearsonr(u, stats.norm.ppf(latent)).statistic
    assert abs(r - rho) < 0.08


def test_priority_noise_options_leave_the_stream_alone():
    base = generate_episode(make_config("breaking", priority_correlation=1.0), seed=4)
    noisy = generate_episode(make_config("breaking", priority_correlation=0.3), seed=4)
    assert [s.observation for s in base.steps] == [s.observation for s in noisy.steps]
    assert base.labels["critical_steps"] == noisy.labels["critical_steps"]
    assert [s.metadata["priority"] for s in base.steps] == [
        min(1.0, base.labels["utility_by_step"][t] / 6) for t in range(len(base))
    ]


@pytest.mark.parametrize("regime", CONTRACT_REGIMES)
def test_same_seed_same_episode_and_jsonl_round_trip(regime, tmp_path):
    a = generate_episode(make_config(regime), seed=5, index=2)
    write_jsonl(tmp_path / "e.jsonl", [a])
    assert load_jsonl(tmp_path / "e.jsonl") == [a]
    b = generate_episode(make_config(regime), seed=5, index=2)
    assert a == b
    assert a != generate_episode(make_config(regime), seed=5, index=3)


@settings(max_examples=40, deadline=None)
@given(
    api_pool=st.integers(1, 6),
    drift=st.floats(0, 1),
    breaking=st.floats(0, 1),
    revert=st.floats(0, 1),
    window=st.integers(1, 20),
    renames=st.booleans(),
    doc_prob=st.sampled_from([0.0, 0.3]),
    min_params=st.integers(1, 3),
    seed=st.integers(0, 1000),
)
def test_contract_streams_are_consistent(
    api_pool, drift, breaking, revert, window, renames, doc_prob, min_params, seed
):
    config = make_config(
        "breaking",
        length=80,
        api_pool=api_pool,
        drift_prob=drift,
        breaking_prob=breaking,
        revert_prob=revert,
        revert_window=window,
        renames=renames,
        doc_prob=doc_prob,
        doc_min_bytes=10,
        doc_max_bytes=40,
        min_params=min_params,
        max_params=min_params + 2,
    )
    episode = generate_episode(config, seed=seed)
    labels = episode.labels
    kinds = dict(labels["change_kinds"])
    assert len(episode) == 80
    assert set(labels["critical_steps"]) <= {t for t, k in kinds.items() if k in BREAKING_KINDS}
    versions: dict = {}
    for step in episode.steps:
        obs = step.observation
        if "api" in obs:
            assert obs["params"] and set(obs["required"]) <= set(obs["params"])
            assert obs["api"].startswith(f"api.v{obs['version']}.")
            family = endpoint_family(obs["api"])
            assert obs["version"] >= versions.get(family, obs["version"])
            versions[family] = obs["version"]
    priority = [s.metadata["priority"] for s in episode.steps]
    assert all(0 <= p <= 1 for p in priority)


def _first_sightings(episode):
    """Per endpoint family, the first snapshot shown and the change kind at that step (None: unchanged)."""
    kinds = dict(episode.labels["change_kinds"])
    seen = {}
    for step in episode.steps:
        obs = step.observation
        if "api" in obs:
            seen.setdefault(endpoint_family(obs["api"]), (obs, kinds.get(step.t)))
    return seen


@pytest.mark.parametrize("regime", CONTRACT_REGIMES)
def test_snapshots_carry_no_trace_of_their_history(regime):
    # A name or a position must not tell when a parameter appeared: lists are sorted and the
    # names are random word pairs, not numbered in order of creation.
    added_last = added = 0
    for index in range(10):
        episode = generate_episode(make_config(regime, length=300), seed=5, index=index)
        kinds = dict(episode.labels["change_kinds"])
        replay = _replay(episode)
        for t, step in enumerate(episode.steps):
            obs = step.observation
            if "api" not in obs:
                continue
            assert obs["params"] == sorted(obs["params"]) and obs["required"] == sorted(obs["required"])
            assert all(p.count("_") >= 1 and not p[-1].isdigit() for p in obs["params"])
            if kinds.get(t) == "add_param":
                (new,) = set(obs["params"]) - set(replay[t][0]["params"]) if replay[t][0] else (None,)
                if new is not None:
                    added += 1
                    added_last += obs["params"][-1] == new
    assert added > 20
    assert added_last / added < 0.6  # an addition lands anywhere in the sorted list


def test_without_a_warm_up_first_sightings_do_not_reveal_whether_or_how_the_endpoint_just_changed():
    # Changed and unchanged first sightings show the same range of versions, and a deprecated
    # first sighting is sometimes a deprecation just made, sometimes none.
    versions = {"changed": set(), "unchanged": set()}
    deprecated_first = {"deprecate": 0, "other": 0}
    for index in range(20):
        episode = generate_episode(make_config("breaking", length=200, warmup=False), seed=11, index=index)
        for obs, kind in _first_sightings(episode).values():
            versions["unchanged" if kind is None else "changed"].add(obs["version"])
            if obs["deprecated"]:
                deprecated_first["deprecate" if kind == "deprecate" else "other"] += 1
    assert versions["unchanged"] == set(range(1, FIRST_VERSION_MAX + 1))
    assert versions["changed"] == set(range(2, FIRST_VERSION_MAX + 2))
    assert deprecated_first["deprecate"] > 0 and deprecated_first["other"] > 0


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_initially_deprecated(p):
    episode = generate_episode(make_config("breaking", length=300, initially_deprecated=p, warmup=False), seed=2)
    kinds = dict(episode.labels["change_kinds"])
    firsts = [obs for obs, kind in _first_sightings(episode).values() if kind is None]
    assert firsts and all(obs["deprecated"] is bool(p) for obs in firsts)
    if p == 1.0:
        assert "deprecate" not in kinds.values()  # nothing left to deprecate


def test_initially_deprecated_must_be_a_probability():
    with pytest.raises(ValueError, match="initially_deprecated"):
        make_config("breaking", initially_deprecated=1.5)


@pytest.mark.parametrize("regime", CONTRACT_REGIMES)
def test_the_warm_up_shows_every_endpoint_once_before_anything_changes(regime):
    config = make_config(regime)
    for index in range(5):
        episode = generate_episode(config, seed=3, index=index)
        warmup = episode.labels["warmup_steps"]
        assert warmup == config.api_pool
        shown = [step.observation for step in episode.steps[:warmup]]
        assert sorted(endpoint_family(obs["api"]) for obs in shown) == sorted(
            endpoint_family(f"api.v1.endpoint_{i}") for i in range(config.api_pool)
        )
        kinds = dict(episode.labels["change_kinds"])
        assert min(kinds, default=warmup) >= warmup
        assert all(u == UTILITY_WARMUP for u in episode.utilities[:warmup])
        assert all(t >= warmup for t in episode.labels["critical_steps"])


@pytest.mark.parametrize("regime", CONTRACT_REGIMES)
def test_with_the_warm_up_every_change_comes_at_an_endpoint_already_shown(regime):
    # The point of the warm-up: every change, renamed endpoints included, can be classified
    # by comparing with what the stream showed before (no critical step is undecidable).
    from wpb_gym.evaluation.reports.decidability import undecidable_critical_steps

    changes = 0
    for index in range(10):
        episode = generate_episode(make_config(regime), seed=8, index=index)
        assert undecidable_critical_steps(episode) == ()
        kinds = dict(episode.labels["change_kinds"])
        for t, (before, obs) in _replay(episode).items():
            if kinds.get(t) in (*BREAKING_KINDS, *COSMETIC_KINDS) and "api" in obs:
                changes += 1
                assert before is not None, (index, t, kinds[t])
    assert changes > 50


def test_renamed_endpoints_are_shown_under_their_new_name_before_they_change_again():
    renamed = 0
    for index in range(10):
        episode = generate_episode(make_config("contract_mix"), seed=1, index=index)
        kinds = dict(episode.labels["change_kinds"])
        for t in episode.labels["rename_steps"]:
            new_family = endpoint_family(episode.steps[t].observation["new_api"])
            later = [s for s in episode.steps[t + 1 :] if endpoint_family(s.observation.get("api", "")) == new_family]
            if later:
                renamed += 1
                assert kinds.get(later[0].t) is None  # shown unchanged first
    assert renamed > 5


def test_episodes_without_the_warm_up_are_pinned():
    """Golden: the contract episodes with ``warmup=False`` (``test_generated_episodes_are_pinned``
    pins them with the warm-up)."""
    import hashlib

    from wpb_gym.episodes.jsonl import dumps_episode

    h = hashlib.sha256()
    for index in range(3):
        episode = generate_episode(make_config("contract_mix", length=120, warmup=False), 11, index)
        h.update(dumps_episode(episode).encode())
    assert h.hexdigest()[:16] == "e4e28c644b02f68c"


@pytest.mark.parametrize(("regime", "options", "seed", "indices", "digest"), [
    # Endpoints of more names than the word pairs give (numbered), from the start.
    ("breaking", {"min_params": 1250, "max_params": 1500, "api_pool": 3, "length": 150, "warmup": False,
                  "breaking_prob": 0.8}, 5, [0, 1], "e531f8a09313381c"),
    ("contract_mix", {"min_params": 1250, "max_params": 1500, "api_pool": 3, "length": 150, "warmup": False,
                      "breaking_prob": 0.8}, 5, [0, 1], "4226b1b57281d873"),
    # More added names than a quarter of the steps has pairs for: the stream played again.
    ("breaking", {"api_pool": 1, "length": 400, "drift_prob": 1.0, "breaking_prob": 0.0, "warmup": False},
     0, [0, 1, 2], "367db1d1dde226c8"),
    # Starting names that collide often: pairs drawn again and again before the warm-up's order.
    ("breaking", {"api_pool": 64, "min_params": 900, "max_params": 1100, "length": 200}, 5, [0],
     "8e0897e2b9ff4e3b"),
])
def test_episodes_of_the_name_streams_edges_are_pinned(regime, options, seed, indices, digest):
    """Golden: episodes whose names take the name stream's rarer paths, as the generator made
    them before its rules were written as loops over arrays."""
    import hashlib

    from wpb_gym.episodes.jsonl import dumps_episode

    h = hashlib.sha256()
    for index in indices:
        h.update(dumps_episode(generate_episode(make_config(regime, **options), seed, index)).encode())
    assert h.hexdigest()[:16] == digest


def test_warm_up_options_are_checked():
    expected = r"GeneratorConfig.length: regime 'breaking' .*64 endpoints.*got 64.*warmup=False"
    with pytest.raises(ValueError, match=expected):
        make_config("breaking", length=64)
    assert make_config("breaking", length=65).warmup
    assert make_config("breaking", length=20, warmup=False).length == 20
    with pytest.raises(ValueError, match="GeneratorConfig.warmup: only the contract change model"):
        make_config("default", warmup=True)
    with pytest.raises(ValueError, match="GeneratorConfig.warmup: expected bool"):
        make_config("breaking", warmup=1)


def test_a_requirement_relaxed_or_removed_later_is_not_critical():
    # Critical means in force at the end: the parameter is still required, and no later
    # requirement of it (after a relax in between) replaced this one.
    import re

    def endpoint(api):  # the endpoint behind its renames: api.v3.endpoint_5_r1 -> endpoint_5
        return re.sub(r"_r\d+$", "", api.split(".", 2)[2])

    undone_seen = 0
    for regime, seed, index in [(r, 4, i) for r in CONTRACT_REGIMES for i in range(6)] + [("breaking", 0, 103)]:
        episode = generate_episode(make_config(regime), seed=seed, index=index)
        labels, kinds = episode.labels, dict(episode.labels["change_kinds"])
        replay, last, requires = _replay(episode), {}, []
        for step in episode.steps:
            if "api" in step.observation:
                last[endpoint(step.observation["api"])] = step.observation
        for t, k in sorted(kinds.items()):
            if k == "require_param" and t not in labels["reverted_changes"]:
                before, obs = replay[t]
                (param,) = set(obs["required"]) - set(before["required"])
                requires.append((t, endpoint(obs["api"]), param))
        undone = set(labels["undone_changes"])
        undone_seen += len(undone)
        assert not undone & set(labels["critical_steps"]) and not undone & set(labels["reverted_changes"])
        for t, name, param in requires:
            later = [u for u, n, p in requires if u > t and (n, p) == (name, param)]
            in_force = param in last[name]["required"] and not later
            assert (t in labels["critical_steps"]) == in_force and (t in undone) == (not in_force), (regime, index, t)
            assert episode.utilities[t] == (UTILITY_DRIFT if in_force else UTILITY_COSMETIC)
    assert undone_seen > 0


# ----------------------------------------------------------------------------- draws made in blocks
def _generated(config, seed, index, block_draws):
    """The episode, generated with the name stream's draws made in blocks or one call at a time."""
    from wpb_gym.episodes.generators import contracts, paper

    original = contracts.generate_contract_steps
    paper.generate_contract_steps = lambda *args: original(*args, block_draws=block_draws)
    try:
        episode = generate_episode(config, seed, index)
    finally:
        paper.generate_contract_steps = original
    observations, metadata = episode.columns()
    return observations, metadata, episode.labels, episode.utilities.tolist()


@settings(max_examples=60, deadline=None)
@given(regime=st.sampled_from(CONTRACT_REGIMES), seed=st.integers(0, 2**31 - 1), index=st.integers(0, 50),
       api_pool=st.sampled_from([1, 2, 5, 64]), params=st.sampled_from([(2, 6), (1, 3), (30, 45)]),
       warmup=st.booleans(), length=st.sampled_from([70, 300]))
def test_names_drawn_in_blocks_are_the_names_drawn_one_call_at_a_time(regime, seed, index, api_pool, params,
                                                                      warmup, length):
    # Many parameters per endpoint make names collide (a retry draws one more pair), and the
    # warm-up draws its order from the same stream between the starting names and later ones.
    config = make_config(regime, api_pool=api_pool, min_params=params[0], max_params=params[1], warmup=warmup,
                         length=length)
    assert _generated(config, seed, index, True) == _generated(config, seed, index, False)


def _names_one_at_a_time(pairs: list[int], n_params: list[int]) -> tuple[list[str], int, int]:
    """The literal rule: each endpoint takes the next pair's name unless it has that name (then
    the pair after), numbering names once it has NAMES_BEFORE_NUMBERING; how many names are still
    to take when the pairs run out, and how many pairs were used."""
    from wpb_gym.episodes.generators.contracts import NAMES_BEFORE_NUMBERING, pair_names

    words, names, used = pair_names(), [], 0
    for count in n_params:
        taken: set[str] = set()
        while len(taken) < count:
            if used == len(pairs):
                return names, sum(n_params) - len(names), used
            pair = pairs[used]
            used += 1
            name = words[pair] if len(taken) < NAMES_BEFORE_NUMBERING else f"{words[pair]}_{len(taken)}"
            if name not in taken:
                taken.add(name)
                names.append(name)
    return names, 0, used


@settings(max_examples=150, deadline=None)
@given(pairs=st.lists(st.integers(0, 2400), max_size=60) | st.lists(st.integers(0, 3), max_size=60),
       n_params=st.lists(st.integers(1, 8), min_size=1, max_size=6))
def test_starting_names_are_those_taken_one_at_a_time(pairs, n_params):
    # Few distinct pairs make names collide (the endpoint takes the pair after), and too few
    # pairs leave names to take (the generator draws that many more pairs and takes again).
    from wpb_gym.episodes.generators.contract_structure import take_names
    from wpb_gym.episodes.generators.contracts import pair_names

    pair, suffix, missing, used = take_names(np.array(pairs, dtype=np.int64), np.array(n_params, dtype=np.int64))
    want, want_missing, want_used = _names_one_at_a_time(pairs, n_params)
    assert (missing, used) == (want_missing, want_used)
    if not missing:
        words = pair_names()
        assert [words[p] if k < 0 else f"{words[p]}_{k}" for p, k in zip(pair.tolist(), suffix.tolist())] == want


def test_names_past_the_word_pairs_are_numbered_as_taken_one_at_a_time():
    from wpb_gym.episodes.generators.contract_structure import NAMES_BEFORE_NUMBERING, take_names

    rng = np.random.default_rng(4)
    n_params = [NAMES_BEFORE_NUMBERING + 5, 3]
    pairs = rng.integers(0, 2401, size=4 * sum(n_params)).tolist()
    pair, suffix, missing, used = take_names(np.array(pairs, dtype=np.int64), np.array(n_params, dtype=np.int64))
    want, _, want_used = _names_one_at_a_time(pairs, n_params)
    assert missing == 0 and used == want_used and (suffix >= 0).sum() == 5
    from wpb_gym.episodes.generators.contracts import pair_names

    words = pair_names()
    assert [words[p] if k < 0 else f"{words[p]}_{k}" for p, k in zip(pair.tolist(), suffix.tolist())] == want


@pytest.mark.parametrize("regime", ["breaking", "contract_mix"])
def test_endpoints_of_many_parameters_change_as_their_kinds_say(regime):
    """With up to 1,500 names an endpoint (numbered past the word pairs), every change still
    does what its kind says, and the names of an endpoint are never repeated."""
    config = make_config(regime, min_params=1250, max_params=1500, api_pool=3, length=150, warmup=False,
                         breaking_prob=0.8)
    for index in range(2):
        episode = generate_episode(config, 5, index)
        kinds = dict(episode.labels["change_kinds"])
        assert list(kinds.values()).count("require_param") >= 1
        replay = _replay(episode)
        numbered = 0
        for t, kind in kinds.items():
            if kind not in ("remove_param", "require_param", "add_param", "relax_param") or replay[t][0] is None:
                continue
            (p0, r0, _), (p1, r1, _) = _contract(replay[t][0]), _contract(replay[t][1])
            assert len(replay[t][1]["params"]) == len(p1)  # no name twice
            changed = {"remove_param": (p0 - p1, r0 <= p0), "require_param": (r1 - r0, p0 == p1),
                       "add_param": (p1 - p0, r0 == r1), "relax_param": (r0 - r1, p0 == p1)}[kind]
            assert len(changed[0]) == 1 and changed[1]
            numbered += sum(name.count("_") == 2 for name in p1)  # "word_word_<number>"
        assert numbered > 0
