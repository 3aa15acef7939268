"""The query tier's generator: its stream, its queries' answers, its hidden state and its knobs."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym.core.queries import answer_of, parse_queries
from wpb_gym.episodes.generators.queries import (
    BREAKING_KINDS,
    QUERY_REGIMES,
    QueryTierConfig,
    generate_query_episode,
    query_config,
)
from wpb_gym.episodes.generators.regimes import ALL_REGIMES, generate_episode, make_config
from wpb_gym.episodes.jsonl import dumps_episode, episode_from_dict

SMALL = {"endpoints": 16, "families": 4, "length": 16 + 10 * 10, "checkpoint_interval": 10,
         "queries_per_checkpoint": 20, "summary_max_bytes": 600, "max_params": 12}


def small(regime: str = "queries_medium", **overrides) -> QueryTierConfig:
    return query_config(regime, **{**SMALL, **overrides})


def test_every_tier_is_a_regime_and_generates_an_episode_that_round_trips_byte_for_byte():
    for regime in QUERY_REGIMES:
        assert regime in ALL_REGIMES
        config = make_config(regime, **SMALL)
        episode = generate_episode(config, seed=3, index=1)
        text = dumps_episode(episode)
        assert dumps_episode(episode_from_dict(json.loads(text))) == text
        assert episode.labels["mode"] == regime


def test_the_same_seed_and_index_give_the_same_episode_and_others_differ():
    config = small()
    a, b = generate_query_episode(config, 5, 2), generate_query_episode(config, 5, 2)
    assert dumps_episode(a) == dumps_episode(b)
    assert dumps_episode(a) != dumps_episode(generate_query_episode(config, 5, 3))
    assert dumps_episode(a) != dumps_episode(generate_query_episode(config, 6, 2))


def _walk(episode):
    """Replay the stream literally: per endpoint its snapshots in order, and the checkpoints."""
    observations, _ = episode.columns()
    shown: dict[str, list[tuple[int, dict]]] = {}
    checkpoints = []
    for t, obs in enumerate(observations):
        if "queries" in obs:
            checkpoints.append(t)
        else:
            shown.setdefault(obs["api"], []).append((t, obs))
    return shown, checkpoints


@pytest.mark.parametrize("seed", range(4))
def test_the_stream_is_a_warm_up_then_a_change_feed_with_checkpoints_on_schedule(seed):
    config = small()
    episode = generate_query_episode(config, seed, 0)
    shown, checkpoints = _walk(episode)
    assert checkpoints == config.checkpoints() == episode.labels["checkpoint_steps"]
    assert checkpoints[-1] == config.length - 1
    observations, _ = episode.columns()
    warm_up = [obs["api"] for obs in observations[: config.endpoints]]
    assert len(set(warm_up)) == config.endpoints == len(shown)  # every endpoint once, first
    for api, snapshots in shown.items():
        for (_, before), (t, after) in zip(snapshots, snapshots[1:], strict=False):
            assert after["version"] == before["version"] + 1, (api, t)  # every show after the warm-up is a change
            assert {k: v for k, v in after.items() if k != "version"} != {k: v for k, v in before.items()
                                                                          if k != "version"}
            assert after.get("summary") == before.get("summary")  # the summary never changes


@pytest.mark.parametrize("seed", range(4))
def test_every_answer_is_the_one_the_latest_snapshot_before_its_checkpoint_gives(seed):
    episode = generate_query_episode(small(), seed, 0)
    shown, checkpoints = _walk(episode)
    queries = parse_queries(episode.labels["queries"], len(episode))
    assert {q.t for q in queries} <= set(checkpoints)
    assert Counter(q.t for q in queries) == dict.fromkeys(checkpoints, 20)
    observations, _ = episode.columns()
    for q in queries:
        latest = [obs for t, obs in shown[q.api] if t < q.t][-1]
        assert answer_of(latest, q.fact, q.argument) == q.answer
        assert type(q.answer) is (int if q.fact == "version" else bool)
    for t in checkpoints:  # the checkpoint step shows what was just asked, without the answers
        asked = [[q.api, q.fact, q.argument] for q in queries if q.t == t]
        assert observations[t]["queries"] == asked


def test_critical_steps_are_the_final_states_of_the_endpoints_the_last_checkpoint_asks_about():
    episode = generate_query_episode(small(), 1, 0)
    shown, checkpoints = _walk(episode)
    last = {q[1] for q in episode.labels["queries"] if q[0] == checkpoints[-1]}
    assert episode.critical_steps == tuple(sorted(shown[api][-1][0] for api in last))
    assert episode.total_drift_events == len(last)
    # Each endpoint-showing step is worth the queries its state is current for; checkpoints nothing.
    assert sum(episode.utilities) == len(episode.labels["queries"])
    assert all(episode.utilities[t] == 0 for t in checkpoints)


def test_hidden_bursts_follow_breaking_changes_of_migrating_families_after_their_delay():
    config = small(migrating_share=0.5, max_burst_delay=2)
    episode = generate_query_episode(config, 2, 0)
    hidden = episode.labels["hidden"]
    families = {f[0]: f for f in hidden["burst_families"]}
    kinds = dict((t, k) for t, k in episode.labels["change_kinds"])
    observations, _ = episode.columns()
    breaking = [t for t, k in kinds.items() if k in BREAKING_KINDS]
    bursts = {t: (i, size, start) for t, i, size, start in hidden["migration_boosts"]}
    assert bursts, "some breaking change of a migrating family"
    for t in breaking:
        api = observations[t]["api"]
        name, boost, delay = families[api.split(".")[1]]
        if boost > 0:
            i, size, start = bursts[t]
            assert hidden["endpoints"][i] == api and size > 0 and start == t + delay
        else:
            assert t not in bursts
    assert set(bursts) <= set(breaking)
    assert hidden["config"] == config.to_dict()


def test_a_revert_restores_the_contract_before_its_change():
    episode = generate_query_episode(small(volatile_share=1.0, volatile_revert_prob=1.0), 0, 0)
    observations, _ = episode.columns()
    reverts = episode.labels["revert_steps"]
    assert reverts
    for revert, changed in zip(reverts, episode.labels["reverted_changes"], strict=True):
        api = observations[revert]["api"]
        before = [obs for t, obs in enumerate(observations[:changed]) if obs.get("api") == api][-1]
        strip = lambda o: {k: v for k, v in o.items() if k != "version"}  # noqa: E731
        assert strip(observations[revert]) == strip(before)
        assert all(observations[t].get("api") != api for t in range(changed + 1, revert))  # frozen meanwhile


def test_traffic_is_metadata_both_tracks_see():
    from wpb_gym.core.tracks import policy_step

    episode = generate_query_episode(small(), 0, 0)
    step = episode.steps[20]
    for track in ("unprivileged", "privileged"):
        assert policy_step(step, track).metadata == {"mode": "queries_medium", "traffic": step.metadata["traffic"]}


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("endpoints", 0, "endpoints: expected >= 1"),
        ("families", 99, "families: expected at most endpoints"),
        ("checkpoint_interval", 1, "checkpoint_interval: expected >= 2"),
        ("migrating_share", 1.5, "migrating_share: expected a probability"),
        ("max_params", 2000, "max_params: expected at most"),
        ("length", 17, "length: the warm-up shows each of the 16 endpoints"),
        ("burst_spread", -1.0, "burst_spread: expected >= 0"),
        ("summary_max_bytes", 100, "summary_max_bytes: expected >= summary_min_bytes"),
        ("migration_boost_max", 1.0, "migration_boost_max: expected >= migration_boost_min"),
        ("popularity_spread", float("nan"), "popularity_spread: expected a finite number"),
        ("queries_per_checkpoint", True, "queries_per_checkpoint: expected int"),
        ("max_burst_delay", -1, "max_burst_delay: expected >= 0"),
        ("popularity_spread", 1000.0, "popularity_spread: expected at most 5"),
        ("migration_boost_max", 1e308, "migration_boost_max: expected at most 1e\\+09"),
        ("traffic_scale", 1e30, "traffic_scale: expected at most 1000"),
        ("summary_max_bytes", 10**9, "summary_max_bytes: expected at most 1,000,000"),
        ("integration_content", 1.2, "integration_content: expected a probability in \\[0, 1\\]"),
        ("integration_content", -0.1, "integration_content: expected a probability in \\[0, 1\\]"),
        ("burst_content", 1.5, "burst_content: expected a probability in \\[0, 1\\]"),
    ],
)
def test_a_bad_knob_is_refused_naming_it(option, value, message):
    with pytest.raises(ValueError, match=message):
        small(**{option: value})


def test_an_unknown_tier_or_option_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown query tier 'queries_extreme'"):
        query_config("queries_extreme")
    with pytest.raises(ValueError, match=r"unknown query-tier option\(s\) \['drift_prob'\]"):
        query_config("queries_easy", drift_prob=0.1)
    with pytest.raises(ValueError, match="unknown regime 'querie_easy'"):
        make_config("querie_easy")


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), endpoints=st.integers(2, 12), interval=st.integers(2, 6),
       checkpoints=st.integers(1, 5), queries=st.integers(1, 6))
def test_any_small_configuration_makes_a_well_formed_episode(seed, endpoints, interval, checkpoints, queries):
    config = query_config("queries_easy", endpoints=endpoints, families=min(endpoints, 3),
                          length=endpoints + interval * checkpoints + 1, checkpoint_interval=interval,
                          queries_per_checkpoint=queries, max_params=6, summary_min_bytes=50, summary_max_bytes=200)
    episode = generate_query_episode(config, seed, 0)
    assert len(episode) == config.length
    parse_queries(episode.labels["queries"], len(episode))
    assert len(episode.labels["queries"]) == queries * len(config.checkpoints())
    episode_from_dict(json.loads(dumps_episode(episode)))  # passes the loader's checks


def test_integration_content_makes_integrations_follow_the_words_of_the_first_contract():
    # rho = 1: each endpoint's integrations are exactly the log-normal at its content score;
    # rho = 0 (the default) leaves the episode as it was, its labels without the knob.
    import numpy as np

    from wpb_gym.episodes.generators.query_process import content_score

    config = small(integration_content=1.0, burst_content=0.0)
    episode = generate_query_episode(config, 3, 0)
    hidden = episode.labels["hidden"]
    assert hidden["process"]["integration_content"] == 1.0 and hidden["config"]["integration_content"] == 1.0
    observations, _ = episode.columns()
    first = {}
    for obs in observations[: config.endpoints]:
        first.setdefault(obs["api"], obs["params"])
    spread = config.integration_spread
    for api, integrations in zip(hidden["endpoints"], hidden["integrations"], strict=True):
        expected = np.exp(-spread * spread / 2 + spread * content_score(first[api]))
        assert integrations == pytest.approx(expected, rel=1e-5, abs=1e-6)  # labels keep 6 decimals
    plain = generate_query_episode(small(integration_content=0.0, burst_content=0.0), 3, 0)
    assert "integration_content" not in plain.labels["hidden"]["process"]
    assert "integration_content" not in plain.labels["hidden"]["config"]
    assert dumps_episode(plain) == dumps_episode(generate_query_episode(
        QueryTierConfig(**{**SMALL, "burst_spread": small().burst_spread,
                           "migration_boost_max": small().migration_boost_max}), 3, 0))
    # Only the integrations (and the traffic they draw) move: the contracts shown are the same.
    assert [o for o in observations if "api" in o] == [o for o in plain.columns()[0] if "api" in o]


def test_burst_content_makes_each_burst_follow_the_words_its_breaking_change_touched():
    # rho = 1: each burst is its family's boost times the log-normal at the content score (by
    # BURST_WORD_WEIGHTS) of the parameter removed or made required, or of the whole contract
    # when the endpoint was deprecated or removed; rho = 0 leaves the episode as it was.
    import numpy as np

    from wpb_gym.episodes.generators.query_process import BURST_WORD_WEIGHTS, content_score, touched

    config = small(burst_content=1.0, migrating_share=1.0, length=16 + 6 * 10)
    episode = generate_query_episode(config, 5, 0)
    hidden = episode.labels["hidden"]
    assert hidden["process"]["burst_content"] == 1.0
    observations, _ = episode.columns()
    before, scores = {}, {}
    for t, obs in enumerate(observations):
        if "api" in obs:
            change = touched(before.get(obs["api"]), obs)
            if change is not None and change[0] in ("has_param", "required"):
                scores[t] = content_score([change[1]], BURST_WORD_WEIGHTS)
            else:
                scores[t] = content_score(obs["params"], BURST_WORD_WEIGHTS)
            before[obs["api"]] = obs
    boosts = [f[1] for f in hidden["burst_families"]]
    spread = config.burst_spread
    assert len(hidden["migration_boosts"]) >= 3
    for t, i, size, _start in hidden["migration_boosts"]:
        boost = boosts[hidden["endpoint_families"][i]]
        assert size == pytest.approx(boost * np.exp(-spread * spread / 2 + spread * scores[t]), rel=1e-5, abs=1e-6)
    plain = generate_query_episode(small(integration_content=0.0, burst_content=0.0), 3, 0)
    assert "burst_content" not in plain.labels["hidden"]["process"]
    assert dumps_episode(plain) == dumps_episode(generate_query_episode(
        QueryTierConfig(**{**SMALL, "burst_spread": small().burst_spread,
                           "migration_boost_max": small().migration_boost_max}), 3, 0))


def test_content_scores_are_standard_normal_over_random_parameter_names():
    import numpy as np

    from wpb_gym.episodes.generators.query_process import PARAM_WORDS, content_score

    rng = np.random.default_rng(0)
    scores = [content_score([f"{rng.choice(PARAM_WORDS)}_{rng.choice(PARAM_WORDS)}" for _ in range(rng.integers(2, 40))])
              for _ in range(4000)]
    assert abs(np.mean(scores)) < 0.1 and abs(np.std(scores) - 1.0) < 0.1
    assert content_score([]) == 0.0 and content_score(["not-a-word"]) == 0.0


# ----------------------------------------------------------------------------- pinned episodes
# Digests of two episodes' JSONL lines and of an endless stream's first 3 x length steps per
# tier, as the generator made them when they were pinned. "reverts": twelve endpoints whose
# every breaking change is reverted three steps on. "crowded": three endpoints, often all
# removed or waiting for a revert, so that a removed one comes back or a revert comes early.
_PINNED_OPTIONS = {
    "reverts": {"endpoints": 12, "families": 2, "length": 12 + 400, "checkpoint_interval": 10,
                "volatile_share": 1.0, "volatile_revert_prob": 1.0, "revert_window": 3},
    "crowded": {"endpoints": 3, "families": 2, "length": 203, "checkpoint_interval": 10, "breaking_prob": 0.8,
                "volatile_share": 0.5, "volatile_revert_prob": 1.0, "stable_revert_prob": 0.0, "revert_window": 12},
}
_PINNED = {
    ("reverts", "queries_easy"): ("603a093efeabd2d247e6e4b3c43dd8e5e1a583e4edd44c3fb17d668545fd0320",
                                  "e5903992dc56f12bed1d22212c4b21be86aa5182eeda2010990b9db093758f18",
                                  "8a0be316da8d01c121200b59aeba9b9ae1951bf131d14b07365804829e5ea32b"),
    ("reverts", "queries_medium"): ("a9e0eebf11146d866f7a0e65547564dc1bf8e7c6bd80e923a9c995c75e2063ee",
                                    "11ab0c0059ee3395b3b41376513914d3aea8a7c89e2b3802236455fdf22775e9",
                                    "ca8fdaaae35c328c7440584d68e39f7d032d91d813a08ba009a06c9185c1d293"),
    ("reverts", "queries_hard"): ("6f80799b9b83a212891e4ef9fce2b2bde709c875b8fd22c7acb612394e9e3470",
                                  "9a536ff30ebf9006bf66b62a9ecde103ee6f654329ce033d63908b52dc3a97a0",
                                  "e19fb3448a63a524bfeeb24c7955d37b5f799c4a5a3fdb547a6ce20861694350"),
    ("crowded", "queries_easy"): ("270c8bf607824f82ef999d17a3e6490050bf185747d095611c150824475bdaba",
                                  "48e9db42e5080bd1515e77f6c79a00153cec8e978cc1cb3839cf650f50e50936",
                                  "113dbfc1227bc44dfddb77e3c16f252ab1e21bbb56da25e61fedc4c83531f225"),
    ("crowded", "queries_medium"): ("1f1f4f346d4d40a7052871ec85b7520d6127a7fd08544b5e332fadc6ba59ffd9",
                                    "c9b3fcfa43b78959ea26aa7e2326dc18c4af89b672d5c5caf3b5f8b5d11d1695",
                                    "2ac7f4e5e064757f38d1e1ccb6288f9b350c2fc61ea96fe342e5614e914befbc"),
    ("crowded", "queries_hard"): ("e8cc07c9620e132d9ddb171c0ecdd55ffdd55fd217e67898f4173b26cfeec1a8",
                                  "246fb5aa11fe98b04c6ebf471f06f4d0bb765a29df8f3d54290a153eb02f06f4",
                                  "b3a05552982ff5b6deb4bf414527c15ee0e12506258d7d08a44cf39b5fd05cb9"),
}


@pytest.mark.parametrize(("options", "regime"), sorted(_PINNED))
def test_episodes_and_endless_streams_are_the_pinned_ones(options, regime):
    import hashlib

    from wpb_gym.episodes.generators.queries import query_stream

    c = make_config(regime, **_PINNED_OPTIONS[options])
    episodes = [generate_episode(c, 7, index) for index in range(2)]
    digests = [hashlib.sha256(dumps_episode(episode).encode()).hexdigest() for episode in episodes]
    endless = hashlib.sha256()
    for _, step in zip(range(3 * c.length), query_stream(c, 5, 0)):
        endless.update(json.dumps([step.t, step.observation, step.metadata, step.asked, step.change_kind,
                                   step.reverted_change], sort_keys=True, default=str).encode())
    assert (*digests, endless.hexdigest()) == _PINNED[options, regime]
    kinds = Counter(kind for episode in episodes for _, kind in episode.labels["change_kinds"])
    assert kinds["remove_endpoint"] > 0 and kinds["revert"] > 0
    if options == "crowded":
        assert kinds["restore_endpoint"] > 0


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), n=st.integers(1, 40), t=st.integers(0, 60), data=st.data())
def test_the_endpoint_to_change_is_drawn_as_a_pass_over_the_endpoints_draws_it(seed, n, t, data):
    """The arrays' draw against the literal rule: the endpoints free at ``t`` (no revert pending
    past it) and not removed, else the free ones, weighted by their family's change weight."""
    import numpy as np

    from wpb_gym.episodes.generators.queries import _draw_changing, _Flags

    flags = _Flags(np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n))),
                   np.array(data.draw(st.lists(st.integers(-1, 80), min_size=n, max_size=n)), dtype=np.int64))
    weights = np.array(data.draw(st.lists(st.floats(0.05, 20.0), min_size=n, max_size=n)))
    free = [int(until) < t for until in flags.frozen_until.tolist()]
    live = [f and not removed for f, removed in zip(free, flags.removed.tolist(), strict=True)]
    candidates = live if any(live) else free
    literal = np.random.default_rng(seed)
    if any(candidates):
        w = np.array([weight if ok else 0.0 for weight, ok in zip(weights.tolist(), candidates, strict=True)])
        want = int(literal.choice(n, p=w / w.sum()))
    else:
        want = None
    rng = np.random.default_rng(seed)
    assert _draw_changing(rng, flags, weights, t) == want
    assert rng.bit_generator.state == literal.bit_generator.state
