"""Real drift with generated queries: the query process over a real change feed."""

from __future__ import annotations

import json

import pytest
from test_real_episodes import synthetic_log

from wpb_gym.core.contracts import endpoint_family
from wpb_gym.core.queries import answer_of, parse_queries
from wpb_gym.episodes.jsonl import dumps_episode, episode_from_dict
from wpb_gym.episodes.real.episodes import Period, RealEpisodeOptions, cut_period
from wpb_gym.episodes.real.queries import RealQueryConfig, add_queries

CONFIG = RealQueryConfig(checkpoint_interval=10, queries_per_checkpoint=15)


def _real_episode():
    events = synthetic_log(commits=80, endpoints=12)
    cut = cut_period(events, Period("all", None, None), RealEpisodeOptions(source="demo", length=120))
    return cut.episodes[0]


def test_the_feed_is_kept_and_checkpoints_are_spread_over_its_changes_and_at_the_end():
    real = _real_episode()
    episode = add_queries(real, CONFIG, seed=3)
    observations, metadata = episode.columns()
    kept = [o for o in observations if "queries" not in o]
    assert kept == list(real.columns()[0])  # every real step, in order, unchanged
    checkpoints = episode.labels["checkpoint_steps"]
    assert len(checkpoints) == -(-len(real) // CONFIG.checkpoint_interval)
    assert len(episode) == len(real) + len(checkpoints)  # the same for every window of a set
    assert checkpoints[-1] == len(episode) - 1
    warmup = real.labels["warmup_steps"]
    assert checkpoints[0] > warmup  # none in the warm-up
    gaps = [b - a - 1 for a, b in zip([warmup - 1, *checkpoints], checkpoints, strict=False)]
    assert max(gaps[:-1]) - min(gaps[:-1]) <= 1  # evenly spread
    assert all(m["mode"] == "real_queries:demo" for m in metadata)
    assert all("priority" not in m for m in metadata)
    assert all(isinstance(m["traffic"], int) for m, o in zip(metadata, observations, strict=True) if "api" in o)


def test_answers_are_the_latest_real_snapshots_and_the_episode_loads_back():
    episode = add_queries(_real_episode(), CONFIG, seed=1)
    observations, _ = episode.columns()
    for q in parse_queries(episode.labels["queries"], len(episode)):
        latest = [o for o in observations[: q.t] if o.get("api") == q.api][-1]
        assert answer_of(latest, q.fact, q.argument) == q.answer
    text = dumps_episode(episode)
    assert dumps_episode(episode_from_dict(json.loads(text))) == text


def test_the_same_seed_gives_the_same_queries_and_another_seed_others():
    real = _real_episode()
    a, b, c = (add_queries(real, CONFIG, seed=s) for s in (4, 4, 5))
    assert dumps_episode(a) == dumps_episode(b)
    assert a.labels["queries"] != c.labels["queries"]


def test_bursts_follow_the_logs_breaking_events():
    real = _real_episode()
    episode = add_queries(real, RealQueryConfig(checkpoint_interval=10, queries_per_checkpoint=15,
                                                migrating_share=1.0), seed=0)
    hidden = episode.labels["hidden"]
    breaking_apis = {real.columns()[0][t]["api"] for t in real.labels["breaking_events"]}
    burst_apis = {hidden["endpoints"][i] for _, i, _, _ in hidden["migration_boosts"]}
    assert burst_apis and burst_apis <= breaking_apis


@pytest.mark.parametrize(("api", "family"), [
    ("POST /v1/charges/{charge}/refunds", "refunds"),
    ("GET /v1/charges", "charges"),
    ("POST /2010-04-01/Accounts/{AccountSid}/Calls.json", "Calls"),
    ("DELETE /v1/account", "account"),
])
def test_an_endpoints_family_is_its_resource(api, family):
    assert endpoint_family(api) == family


@pytest.mark.parametrize(("option", "value", "message"), [
    ("checkpoint_interval", 1, "checkpoint_interval: expected >= 2"),
    ("migrating_share", 2.0, "migrating_share: expected a probability"),
    ("burst_spread", float("inf"), "burst_spread: expected a finite number"),
    ("migration_boost_max", 1.0, "migration_boost_max: expected >= migration_boost_min"),
])
def test_a_bad_knob_is_named(option, value, message):
    with pytest.raises(ValueError, match=message):
        RealQueryConfig(**{option: value})


def test_add_queries_makes_a_frozen_set_per_file_and_names_bad_input(tmp_path, capsys):
    from test_real_episodes import synthetic_log

    from wpb_gym.cli import main
    from wpb_gym.episodes.frozen import open_frozen_set
    from wpb_gym.episodes.real.change_events import write_events
    from wpb_gym.episodes.sources import read_episodes

    log = tmp_path / "log.jsonl"
    write_events(log, synthetic_log(commits=80, endpoints=12))
    real = tmp_path / "real"
    assert main(["episodes", "from-events", str(log), "--source", "demo", "--length", "60", "--out", str(real)]) == 0
    out = tmp_path / "queries"
    assert main(["episodes", "add-queries", str(real), "--seeds", "0,1", "--set", "checkpoint_interval=10",
                 "--set", "queries_per_checkpoint=12", "--out", str(out)]) == 0
    frozen = open_frozen_set(out)
    real_set = open_frozen_set(real)
    assert [f.path.name for f in frozen.files] == [f.path.name for f in real_set.files]
    for mine, theirs in zip(frozen.files, real_set.files, strict=True):
        assert mine.episodes == 2 * theirs.episodes and mine.regime == "real_queries:demo"
        episodes = read_episodes(mine.path)
        assert {len(e) for e in episodes} == {60 + 6}  # one length per file: T + ceil(T / 10) checkpoints
    capsys.readouterr()
    assert main(["episodes", "add-queries", str(real), "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["episodes", "add-queries", str(out), "--out", str(tmp_path / "again")]) == 2
    assert "not real drift" in capsys.readouterr().err
    assert main(["episodes", "add-queries", str(real), "--set", "popularity=3", "--out", str(tmp_path / "x")]) == 2
    assert "unknown query-process option 'popularity'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
