"""Real-drift episodes: change-event logs cut into frozen, time-split episode sets."""

from __future__ import annotations

import datetime as dt
import json

import gymnasium as gym
import numpy as np
import pytest

import wpb_gym  # noqa: F401
from wpb_gym.cli import main
from wpb_gym.episodes.frozen import FrozenSetError, open_frozen_set
from wpb_gym.episodes.real.change_events import BREAKING_TYPES, ChangeEvent, write_events
from wpb_gym.episodes.real.episodes import (
    Period,
    RealEpisodeOptions,
    auto_periods,
    cut_period,
    episodes_from_events,
    is_critical,
    observation,
    parse_windows,
)
from wpb_gym.episodes.real.openapi_changes import replay_events
from wpb_gym.episodes.sources import read_episodes
from wpb_gym.evaluation.reports.decidability import undecidable_critical_steps

START = dt.datetime(2020, 1, 1, 9, 0, 0)


def synthetic_log(commits: int = 60, endpoints: int = 12, per_commit: int = 4, seed: int = 0) -> list[ChangeEvent]:
    """A valid log: each commit adds or removes one parameter on a few endpoints, one commit a day,
    two commits on every fifth day; every third removal is reverted within 10 days (labelled so)."""
    rng = np.random.default_rng(seed)
    state = {f"GET /v1/e{i}": [f"p{j}" for j in range(3)] for i in range(endpoints)}
    events = []
    stamp = START
    for seq in range(commits):
        if seq and seq % 5:
            stamp += dt.timedelta(days=1)
        else:
            stamp += dt.timedelta(hours=2)
        date = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        common = {"date": date, "version": f"r{seq // 10}", "commit": f"{seq:010x}", "seq": seq}

        def event(api, change, breaking, common=common, **details):
            return ChangeEvent(
                **common, api=api, operation_id=None, params=tuple(state[api]), required=(), deprecated=False,
                change=change, breaking=breaking, **details,
            )  # fmt: skip

        if seq == 0:
            events += [event(api, ("initial",), False) for api in sorted(state)]
            continue
        for api in sorted(rng.choice(sorted(state), size=per_commit, replace=False).tolist()):
            params = state[api]
            if len(params) > 1 and rng.random() < 0.4:
                gone = params[int(rng.integers(len(params)))]
                state[api] = [p for p in params if p != gone]
                reverted = 4.5 if seq % 3 == 0 else None
                events.append(event(api, ("param_removed",), True, removed=(gone,), reverted_after_days=reverted))
            else:
                new = f"q{seq}"
                state[api] = sorted([*params, new])
                events.append(event(api, ("param_added",), False, added=(new,)))
    return events


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "events.jsonl"
    write_events(path, synthetic_log())
    return path


def options(**kw) -> RealEpisodeOptions:
    return RealEpisodeOptions(**{"source": "toy", "length": 20, **kw})


def test_observation_is_the_snapshot_and_nothing_about_the_change():
    event = ChangeEvent(
        date="2021-03-04T05:06:07Z",
        version="2021-03-01",
        commit="abcdefabcd",
        seq=7,
        api="POST /v1/x",
        operation_id="PostX",
        params=("a", "b"),
        required=("a",),
        deprecated=False,
        change=("param_removed",),
        breaking=True,
        removed=("c",),
        reverted_after_days=3.0,
    )
    assert observation(event) == {
        "api": "POST /v1/x",
        "date": "2021-03-04T05:06:07Z",
        "deprecated": False,
        "params": ["a", "b"],
        "release": "2021-03-01",
        "required": ["a"],
        "version": 7,
    }
    gone = ChangeEvent(**{**event.__dict__, "change": ("endpoint_removed",), "removed": None})
    assert observation(gone) == {**observation(event), "params": [], "required": [], "removed": True}


@pytest.mark.parametrize(
    ("reverted_after_days", "window", "count_reverted", "critical"),
    [
        (None, 30.0, False, True),
        (4.5, 30.0, False, False),
        (45.0, 30.0, False, True),
        (30.0, 30.0, False, False),
        (4.5, 30.0, True, True),
        (4.5, 2.0, False, True),
    ],
)
def test_critical_means_durable_breaking(reverted_after_days, window, count_reverted, critical):
    base = synthetic_log()[20]
    breaking = ChangeEvent(
        **{**base.__dict__, "change": ("param_removed",), "breaking": True, "reverted_after_days": reverted_after_days}
    )
    opts = options(revert_window_days=window, count_reverted=count_reverted)
    assert is_critical(breaking, opts) is critical
    cosmetic = ChangeEvent(
        **{**base.__dict__, "change": ("param_added",), "breaking": False, "reverted_after_days": None}
    )
    assert not is_critical(cosmetic, opts)


def test_episode_labels_steps_and_priority():
    events = synthetic_log()
    cut = cut_period(events, Period("all", None, None), options(warmup=False))
    changes = [e for e in events if e.change != ("initial",)]
    assert cut.change_events == len(changes) and cut.windows == len(changes) // 20
    assert cut.tail_events == len(changes) % 20
    episode = cut.episodes[0]
    window = changes[:20]
    assert [s.observation for s in episode.steps] == [observation(e) for e in window]
    expected = [t for t, e in enumerate(window) if e.breaking and e.reverted_after_days is None]
    assert list(episode.critical_steps) == expected and episode.labels["total_drift_events"] == len(expected)
    assert episode.labels["reverted_changes"] == [t for t, e in enumerate(window) if e.reverted_after_days]
    assert episode.labels["breaking_events"] == [t for t, e in enumerate(window) if e.breaking]
    assert episode.labels["change_kinds"][0] == [0, "+".join(window[0].change)]
    utilities = episode.utilities
    assert set(utilities[list(expected)]) == {5.0} and np.sum(utilities == 2.0) == 20 - len(expected)
    assert episode.regime == "real:toy" and episode.labels["episode_id"] == "toy/all/0"
    assert all(0.0 <= s.metadata["priority"] <= 1.0 and s.metadata["mode"] == "real:toy" for s in episode.steps)
    for step in episode.steps:  # nothing of the change or its label leaks into the observation
        assert not {"change", "breaking", "reverted_after_days", "removed_params"} & set(step.observation)


def test_windows_stride_and_min_critical():
    events = synthetic_log()
    every = cut_period(events, Period("all", None, None), options(length=10, stride=5, min_critical=0, warmup=False))
    assert len(every.episodes) == every.windows == (every.change_events - 10) // 5 + 1
    assert every.episodes[1].steps[0].observation == every.episodes[0].steps[5].observation
    strict = cut_period(events, Period("all", None, None), options(length=10, stride=5, min_critical=3, warmup=False))
    assert len(strict.episodes) + strict.too_few_critical == strict.windows
    assert strict.too_few_critical > 0 and all(len(e.critical_steps) >= 3 for e in strict.episodes)
    assert [e.labels["episode_id"] for e in strict.episodes] == [f"toy/all/{i}" for i in range(len(strict.episodes))]


def test_warmup_shows_each_changed_endpoint_as_it_stood_before_the_window():
    events = synthetic_log()
    changes = [e for e in events if not e.initial]
    cut = cut_period(events, Period("all", None, None), options(min_critical=0))
    assert cut.windows == len(cut.episodes) > 3
    used, in_change_order = [], []
    for episode in cut.episodes:
        w, n = episode.labels["warmup_steps"], episode.labels["change_events"]
        assert len(episode) == 20 and w + n == 20 and w > 0
        window = changes[len(used) : len(used) + n]
        used += window
        assert [s.observation for s in episode.steps[w:]] == [observation(e) for e in window]
        # The warm-up, literally: the log replayed up to the window, one snapshot per endpoint the
        # window changes (and at most one more, whose change the next window holds).
        before = replay_events(events[: events.index(window[0])])
        warmup = [s.observation for s in episode.steps[:w]]
        for obs in warmup:
            state = before[obs["api"]]
            assert (obs["params"], obs["required"], obs["deprecated"]) == (
                sorted(state.params), sorted(state.required), state.deprecated
            )
        changed = list(dict.fromkeys(e.api for e in window))
        in_change_order.append([o["api"] for o in warmup if o["api"] in changed] == changed)
        assert set(changed) <= {o["api"] for o in warmup} and len(warmup) - len(set(changed)) in (0, 1)
        assert len({o["api"] for o in warmup}) == w
        # Unscored, never critical, and every critical step decidable from the stream.
        assert list(episode.utilities[:w]) == [0.0] * w
        assert min(episode.critical_steps, default=w) >= w and min(episode.labels["breaking_events"], default=w) >= w
        assert [k for k, _ in episode.labels["change_kinds"]] == list(range(w, 20))
        assert undecidable_critical_steps(episode) == ()
    assert used == changes[: len(used)] and cut.tail_events == len(changes) - len(used)  # back to back
    assert not all(in_change_order)  # the warm-up's order does not tell which endpoint changes first


def test_warmup_options_and_episodes_without_it(log, tmp_path, capsys):
    for flag, warm in (("--no-warmup", False), ("--warmup", True)):
        out = tmp_path / flag
        argv = ["episodes", "from-events", str(log), "--source", "toy", "--length", "20", flag, "--out", str(out)]
        assert main(argv) == 0
        assert all(("warmup_steps" in e.labels) is warm for e in read_episodes(out / "train.jsonl"))
        assert open_frozen_set(out).files[0].generator["options"]["warmup"] is warm
    argv = ["episodes", "from-events", str(log), "--source", "toy", "--length", "1", "--out", str(tmp_path / "one")]
    assert main(argv) == 2 and "--no-warmup" in capsys.readouterr().err and not (tmp_path / "one").exists()
    with pytest.raises(ValueError, match=r"length: expected >= 2 with a warm-up .*got 1 \(warmup=False, --no-warmup"):
        options(length=1)
    assert len(cut_period(synthetic_log(), Period("all", None, None), options(length=1, warmup=False)).episodes) > 0
    with pytest.raises(ValueError, match="warmup: expected true or false"):
        options(warmup="yes")
    plain = cut_period(synthetic_log(), Period("all", None, None), options(warmup=False)).episodes[0]
    assert "warmup_steps" not in plain.labels and "change_events" not in plain.labels
    events = synthetic_log()
    changes = [e for e in events if not e.initial]
    overlapping = cut_period(events, Period("all", None, None), options(stride=5, min_critical=0))
    assert len(overlapping.episodes) > 20
    for k, episode in enumerate(overlapping.episodes):  # episode k opens at change event 5k
        w = episode.labels["warmup_steps"]
        assert episode.steps[w].observation == observation(changes[5 * k])
        before = replay_events(events[: events.index(changes[5 * k])])
        for step in episode.steps[:w]:
            assert sorted(before[step.observation["api"]].params) == step.observation["params"]


def _event(seq, api, change, params, **details):
    day = dt.date(2021, 1, 1) + dt.timedelta(days=seq)
    return ChangeEvent(
        date=f"{day}T12:00:00Z", version=f"r{seq}", commit=f"{seq:010x}", seq=seq, api=api, operation_id=None,
        params=tuple(params), required=(), deprecated=False, change=change,
        breaking=bool(set(change) & BREAKING_TYPES), **details,
    )  # fmt: skip


def test_warmup_of_removed_renamed_and_new_endpoints():
    """Shown: what existed before the window, as it stood (its own date and revision), under the
    name it had; not an endpoint removed before the window, nor one added in it. The endpoint
    that fills the last step opens the next window with its change."""
    log = [
        _event(0, "GET /a", ("initial",), ["p1"]),
        _event(0, "GET /b", ("initial",), ["p1"]),
        _event(0, "GET /c/{id}", ("initial",), ["p1"]),
        _event(1, "GET /b", ("endpoint_removed",), ["p1"]),
        _event(2, "GET /a", ("param_added",), ["p1", "p2"], added=("p2",)),  # the period starts here
        _event(3, "GET /b", ("endpoint_added",), ["p1"]),
        _event(4, "GET /c/{cid}", ("path_param_renamed",), ["p1"], previous_api="GET /c/{id}"),
        _event(5, "GET /d", ("endpoint_added",), ["q"]),
        _event(6, "GET /a", ("param_removed",), ["p2"], removed=("p1",)),
        _event(7, "GET /c/{cid}", ("param_added",), ["p1", "p3"], added=("p3",)),
    ]
    period = Period("later", dt.date(2021, 1, 3), None)

    def steps(episode):
        w = episode.labels["warmup_steps"]
        shown = sorted((s.observation["api"], s.observation["version"], s.observation["date"][:10])
                       for s in episode.steps[:w])  # fmt: skip
        return shown, [s.observation["version"] for s in episode.steps[w:]]

    whole = cut_period(log, period, options(length=8, min_critical=0)).episodes
    assert [steps(e) for e in whole] == [
        ([("GET /a", 0, "2021-01-01"), ("GET /c/{id}", 0, "2021-01-01")], [2, 3, 4, 5, 6, 7])
    ]
    cut = cut_period(log, period, options(length=4, min_critical=0))
    assert [steps(e) for e in cut.episodes] == [
        ([("GET /a", 0, "2021-01-01"), ("GET /c/{id}", 0, "2021-01-01")], [2, 3]),  # /c shown, its change next
        ([("GET /a", 2, "2021-01-03"), ("GET /c/{id}", 0, "2021-01-01")], [4, 5]),  # /a shown, its change next
        ([("GET /a", 2, "2021-01-03"), ("GET /c/{cid}", 4, "2021-01-05")], [6, 7]),
    ]
    assert cut.tail_events == 0
    assert all(len(e) == 4 for e in cut.episodes)


def test_parse_windows_and_their_errors():
    periods = parse_windows("heldout=2020-02-01..,train=..2020-01-31")
    assert [p.name for p in periods] == ["train", "heldout"]
    assert periods[0] == Period("train", None, dt.date(2020, 1, 31))
    for text, message in [
        ("train=..2020-02-01,heldout=2020-02-01..", "overlap"),
        ("train=2020-01-01", "NAME=START..END"),
        ("train=2020-13-01..", "YYYY-MM-DD"),
        ("a=2020-02-01..2020-01-01", "ends before"),
        ("a=..2020-01-01,a=2020-02-01..", "named twice"),
        ("Bad Name=..", "NAME=START..END"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_windows(text)


def test_auto_periods_split_on_a_day_boundary_and_never_overlap():
    events = synthetic_log()
    train, heldout = auto_periods(events, 0.3)
    assert train.end + dt.timedelta(days=1) == heldout.start and train.start is None and heldout.end is None
    changes = [e for e in events if e.change != ("initial",)]
    held = [e for e in changes if heldout.contains(e)]
    assert all(train.contains(e) != heldout.contains(e) for e in changes)
    assert abs(len(held) / len(changes) - 0.3) < 0.1
    with pytest.raises(ValueError, match="heldout_fraction"):
        auto_periods(events, 1.0)


def test_frozen_set_per_period_verified_and_deterministic(log, tmp_path):
    opts = options()
    first = episodes_from_events(log, tmp_path / "a", opts)
    again = episodes_from_events(log, tmp_path / "b", opts)
    assert sorted(f.path.name for f in first.files) == ["heldout.jsonl", "train.jsonl"]
    for f, g in zip(first.files, again.files, strict=True):
        assert f.path.read_bytes() == g.path.read_bytes()
        assert f.generator["change_events"] == "events.jsonl" and f.generator["options"]["length"] == 20
    train = read_episodes(tmp_path / "a" / "train.jsonl")
    held = read_episodes(tmp_path / "a" / "heldout.jsonl")
    assert max(e.labels["last_date"] for e in train) < min(e.labels["first_date"] for e in held)
    assert (tmp_path / "a" / "MANIFEST.json").is_file() and open_frozen_set(tmp_path / "a").total_episodes == len(
        train
    ) + len(held)
    path = tmp_path / "a" / "train.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"version": 1', b'"version": 9', 1))
    with pytest.raises(FrozenSetError, match="sha256 mismatch"):
        read_episodes(path)  # one file of a set is checked against the manifest


def test_period_without_episodes_is_an_error_and_writes_nothing(log, tmp_path):
    with pytest.raises(ValueError, match="period late=2030-01-01.. gives no episode"):
        episodes_from_events(log, tmp_path / "out", options(), parse_windows("train=..2020-01-20,late=2030-01-01.."))
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == [log]


def test_cli_env_and_eval_run_on_real_episodes(log, tmp_path, capsys):
    out = tmp_path / "set"
    assert main(["episodes", "from-events", str(log), "--source", "toy", "--length", "20", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "real:toy" in printed and "train.jsonl" in printed and "heldout.jsonl" in printed
    assert main(["episodes", "from-events", str(log), "--source", "toy", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["episodes", "from-events", str(log), "--source", "Toy!", "--out", str(tmp_path / "x")]) == 2
    assert "source" in capsys.readouterr().err

    env = gym.make("WritePolicyBench-v0", episodes=str(out / "train.jsonl"), episode_order="cycle")
    obs, info = env.reset(seed=0)
    assert env.unwrapped.episode.regime == "real:toy" and obs.shape == env.observation_space.shape
    terminated, steps = False, 0
    while not terminated:
        obs, reward, terminated, truncated, info = env.step(1 if info["action_mask"][1] else 0)
        steps += 1
    assert steps == 20 and "metrics" in info

    run = tmp_path / "eval"
    argv = [
        "eval",
        "--agents",
        "breaking_detector,fifo_store_all",
        "--episodes",
        str(out / "heldout.jsonl"),
        "--budgets",
        "10240",
        "--tracks",
        "unprivileged",
        "--out",
        str(run),
        "--quiet",
    ]
    assert main(argv) == 0
    rows = (run / "results.csv").read_text().splitlines()
    assert rows[1].startswith("real:toy,20,10240")
    assert json.loads((run / "run.json").read_text())["config"]["episodes"].endswith("heldout.jsonl")


def test_breaking_types_cover_the_critical_rule():
    assert {"endpoint_removed", "param_removed", "required_added", "deprecated"} <= BREAKING_TYPES


def test_training_refuses_held_out_episodes_that_are_not(log, tmp_path):
    from agents.held_out import held_out_env_kwargs

    set_a = tmp_path / "a"
    episodes_from_events(log, set_a, options())
    train, held = set_a / "train.jsonl", set_a / "heldout.jsonl"
    assert held_out_env_kwargs({"episodes": str(train)}, held)["episodes"] == str(held)
    with pytest.raises(ValueError, match="hold the same episodes"):
        held_out_env_kwargs({"episodes": str(set_a)}, held)  # the whole set holds the held-out period too
    with pytest.raises(ValueError, match="hold the same episodes"):
        held_out_env_kwargs({"episodes": str(held)}, held)
    # Another cut of the same log whose training period reaches into set_a's held-out one.
    late = tmp_path / "late"
    episodes_from_events(log, late, options(), parse_windows("train=2020-01-10..,early=..2020-01-05"))
    with pytest.raises(ValueError, match="overlaps the training episodes"):
        held_out_env_kwargs({"episodes": str(late / "train.jsonl")}, held)
    with pytest.raises(ValueError, match="needs held-out episodes"):
        held_out_env_kwargs({"episodes": str(train)}, None)


@pytest.mark.parametrize("warmup, digest", [(True, "30d15f3d769bff8b"), (False, "f74da1b3eff22628")])
def test_real_episodes_are_pinned(warmup, digest):
    """Golden: the episodes of the toy log, with the warm-up and without it (the latter as they
    were before the warm-up existed)."""
    import hashlib

    from wpb_gym.episodes.jsonl import dumps_episode

    h = hashlib.sha256()
    for episode in cut_period(synthetic_log(), Period("all", None, None), options(warmup=warmup)).episodes:
        h.update(dumps_episode(episode).encode())
    assert h.hexdigest()[:16] == digest
