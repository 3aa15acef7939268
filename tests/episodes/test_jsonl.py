"""JSONL episode files: round trips, the paper's released format, laziness, validation, atomic writes."""

from __future__ import annotations

import copy
import gzip
import inspect
import json
import math

import numpy as np
import pytest

from wpb_gym.core.types import Episode
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.episodes.jsonl import EpisodeFormatError, dumps_episode, iter_jsonl, load_jsonl, write_jsonl


def _episodes(n: int = 3, seed: int = 11, length: int = 30) -> list[Episode]:
    config = make_config("burst_redundancy", length=length)
    return [generate_episode(config, seed, i) for i in range(n)]


# --------------------------------------------------------------------------- round trips


def test_round_trip_plain_is_lossless_and_byte_identical(tmp_path):
    episodes = _episodes()
    first = tmp_path / "a.jsonl"
    second = tmp_path / "b.jsonl"

    assert write_jsonl(first, episodes) == len(episodes)
    loaded = load_jsonl(first)
    assert loaded == episodes
    assert all(isinstance(t, int) for e in loaded for t in e.labels["utility_by_step"])
    for got, want in zip(loaded, episodes, strict=False):
        np.testing.assert_array_equal(got.utilities, want.utilities)
        assert got.critical_steps == want.critical_steps

    assert write_jsonl(second, loaded) == len(episodes)
    data = first.read_bytes()
    assert data == second.read_bytes()
    # One episode per line, each line canonical JSON, file ends with a newline.
    lines = data.decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == len(episodes) + 1
    assert lines[:-1] == [dumps_episode(e) for e in episodes]


def test_round_trip_gzip_is_deterministic(tmp_path):
    episodes = _episodes()
    plain = tmp_path / "plain.jsonl"
    gz_a = tmp_path / "a.jsonl.gz"
    gz_b = tmp_path / "b.jsonl.gz"

    write_jsonl(plain, episodes)
    write_jsonl(gz_a, episodes)
    loaded = load_jsonl(gz_a)
    assert loaded == episodes
    write_jsonl(gz_b, loaded)

    raw_a, raw_b = gz_a.read_bytes(), gz_b.read_bytes()
    assert raw_a[:2] == b"\x1f\x8b", "not a gzip file"
    assert raw_a == raw_b, "gzip output is not deterministic"
    assert raw_a[4:8] == b"\x00\x00\x00\x00", "gzip header carries a timestamp"
    assert gzip.decompress(raw_a) == plain.read_bytes()

    # Rewriting the same path later gives the same bytes again.
    write_jsonl(gz_a, episodes)
    assert gz_a.read_bytes() == raw_b


# --------------------------------------------------------------------------- the paper's released format

PRIORITY_1 = "0.16666666666666666"  # 1/6 as json.dumps writes it
PRIORITY_5 = "0.8333333333333334"  # 5/6
PAPER_T = 14
PAPER_CRITICAL = (3, 11)


def _paper_line(episode_id: int) -> str:
    """One episode exactly as the paper's released files hold it, written as literal text."""
    util_items = []
    total = 0.0
    for t in range(PAPER_T):
        u = "5.0" if t in PAPER_CRITICAL else "1.0"
        total += float(u)
        util_items.append(f'"{t}": {u}')  # keys in numeric order: "0", "1", ..., "9", "10", ...
    labels = (
        '{"critical_steps": [3, 11], '
        f'"episode_id": {episode_id}, '
        f'"max_utility": {total!r}, '
        '"mode": "default", '
        '"total_drift_events": 2, '
        '"utility_by_step": {' + ", ".join(util_items) + "}}"
    )
    steps = []
    for t in range(PAPER_T):
        k = (t + episode_id) % 8
        version = 2 if t >= 3 and k == 3 else 1
        priority = PRIORITY_5 if t in PAPER_CRITICAL else PRIORITY_1
        steps.append(
            '{"metadata": {"mode": "default", "priority": ' + priority + "}, "
            f'"observation": {{"api": "api.v{version}.endpoint_{k}", "deprecated": false, '
            f'"params": ["p{k}_0", "p{k}_1"], "version": {version}}}, '
            f'"t": {t}}}'
        )
    return '{"labels": ' + labels + ', "steps": [' + ", ".join(steps) + "]}"


def test_paper_format_loads_and_rewrites_byte_for_byte(tmp_path):
    original = tmp_path / "paper.jsonl"
    text = _paper_line(0) + "\n" + _paper_line(1) + "\n"
    original.write_bytes(text.encode("utf-8"))
    # The file really is in numeric key order, which differs from lexicographic order.
    assert '"9": 1.0, "10": 1.0, "11": 5.0' in text
    assert sorted(str(t) for t in range(PAPER_T)) != [str(t) for t in range(PAPER_T)]

    episodes = load_jsonl(original)
    assert len(episodes) == 2
    for i, episode in enumerate(episodes):
        util = episode.labels["utility_by_step"]
        assert list(util) == list(range(PAPER_T))
        assert all(type(k) is int for k in util)
        expected = np.array([5.0 if t in PAPER_CRITICAL else 1.0 for t in range(PAPER_T)])
        np.testing.assert_array_equal(episode.utilities, expected)
        assert episode.utilities.dtype == np.float64
        assert episode.critical_steps == PAPER_CRITICAL
        assert episode.total_drift_events == 2
        assert episode.episode_id == i
        assert episode.regime == "default"
        assert len(episode) == PAPER_T
        assert [s.t for s in episode.steps] == list(range(PAPER_T))
        assert episode.steps[0].observation["api"] == f"api.v1.endpoint_{i % 8}"
        assert episode.steps[0].metadata == {"mode": "default", "priority": 1 / 6}

    rewritten = tmp_path / "rewritten.jsonl"
    write_jsonl(rewritten, episodes)
    assert rewritten.read_bytes() == original.read_bytes()


# --------------------------------------------------------------------------- laziness


def test_iter_jsonl_is_lazy(tmp_path):
    good = _episodes(n=1)[0]
    path = tmp_path / "half.jsonl"
    path.write_text(dumps_episode(good) + "\n" + '{"steps": [\n', encoding="utf-8")

    stream = iter_jsonl(path)
    assert inspect.isgenerator(stream)
    assert next(stream) == good  # episode 1 arrives before line 2 is looked at
    with pytest.raises(EpisodeFormatError) as excinfo:
        next(stream)
    assert excinfo.value.line == 2
    assert f"{path}:2" in str(excinfo.value)

    # Nothing is opened until the first episode is requested.
    missing = iter_jsonl(tmp_path / "does_not_exist.jsonl")
    with pytest.raises(FileNotFoundError):
        next(missing)


# --------------------------------------------------------------------------- validation


def _base() -> dict:
    """A valid episode (T=12) as decoded JSON (string utility keys)."""
    episode = generate_episode(make_config("default", length=12), 0, 0)
    data = json.loads(dumps_episode(episode))
    data["labels"]["breaking_changes"] = [0]
    data["labels"]["critical_steps"] = [0, 4]
    return data


def _mut(fn):
    def build() -> str:
        data = copy.deepcopy(_base())
        fn(data)
        return json.dumps(data, sort_keys=True)  # allow_nan=True: NaN / Infinity become bare tokens

    return build


def _raw(text):
    return lambda: text


def _set(path, value):
    def fn(d):
        *head, last = path
        target = d
        for key in head:
            target = target[key]
        target[last] = value

    return fn


def _del(path):
    def fn(d):
        *head, last = path
        target = d
        for key in head:
            target = target[key]
        del target[last]

    return fn


def _add_util(key, value):
    def fn(d):
        d["labels"]["utility_by_step"][key] = value

    return fn


# (case id, line-2 builder, expected field (None: the line as a whole), text the message must contain)
CASES = [
    ("malformed_json", _raw('{"steps": [1, 2'), None, "malformed JSON"),
    ("not_an_object", _raw("[1, 2, 3]"), None, "JSON object"),
    ("blank_line", _raw(""), None, "empty line"),
    ("whitespace_line", _raw("   \t"), None, "empty line"),
    ("missing_steps", _mut(_del(["steps"])), "steps", "missing"),
    ("empty_steps", _mut(_set(["steps"], [])), "steps", "non-empty"),
    ("steps_not_list", _mut(_set(["steps"], {"0": {}})), "steps", "non-empty list"),
    ("unknown_top_level_key", _mut(_set(["extra"], 1)), "extra", "unknown key"),
    ("step_not_object", _mut(_set(["steps", 3], [3])), "steps[3]", "expected an object"),
    ("step_missing_t", _mut(_del(["steps", 3, "t"])), "steps[3].t", "missing"),
    ("t_is_string", _mut(_set(["steps", 3, "t"], "3")), "steps[3].t", "integer"),
    ("t_is_float", _mut(_set(["steps", 3, "t"], 3.0)), "steps[3].t", "integer"),
    ("t_is_bool", _mut(_set(["steps", 1, "t"], True)), "steps[1].t", "integer"),
    ("t_skips", _mut(lambda d: d["steps"].pop(1)), "steps[1].t", "0..T-1"),
    ("t_out_of_order", _mut(lambda d: d["steps"].reverse()), "steps[0].t", "0..T-1"),
    ("step_missing_observation", _mut(_del(["steps", 3, "observation"])), "steps[3].observation", "missing"),
    ("metadata_not_object", _mut(_set(["steps", 3, "metadata"], [1])), "steps[3].metadata", "object"),
    ("metadata_null", _mut(_set(["steps", 3, "metadata"], None)), "steps[3].metadata", "object"),
    ("unknown_step_key", _mut(_set(["steps", 3, "reward"], 1)), "steps[3].reward", "unknown key"),
    ("missing_labels", _mut(_del(["labels"])), "labels", "missing"),
    ("labels_not_object", _mut(_set(["labels"], [1])), "labels", "object"),
    ("missing_critical_steps", _mut(_del(["labels", "critical_steps"])), "labels.critical_steps", "missing"),
    ("critical_outside", _mut(_set(["labels", "critical_steps"], [0, 12])), "labels.critical_steps[1]", "outside"),
    ("critical_negative", _mut(_set(["labels", "critical_steps"], [-1])), "labels.critical_steps[0]", "outside"),
    ("critical_duplicate", _mut(_set(["labels", "critical_steps"], [4, 4])), "labels.critical_steps[1]", "twice"),
    ("critical_not_int", _mut(_set(["labels", "critical_steps"], [0, "4"])), "labels.critical_steps[1]", "integer"),
    (
        "breaking_out_of_range",
        _mut(_set(["labels", "breaking_changes"], [0, 99])),
        "labels.breaking_changes[1]",
        "outside",
    ),
    (
        "drift_events_negative",
        _mut(_set(["labels", "total_drift_events"], -1)),
        "labels.total_drift_events",
        "non-negative",
    ),
    ("missing_utility_by_step", _mut(_del(["labels", "utility_by_step"])), "labels.utility_by_step", "missing"),
    ("utility_by_step_list", _mut(_set(["labels", "utility_by_step"], [1.0] * 12)), "labels.utility_by_step", "object"),
    ("utility_key_outside", _mut(_add_util("12", 1.0)), "labels.utility_by_step['12']", "outside"),
    ("utility_key_negative", _mut(_add_util("-1", 1.0)), "labels.utility_by_step['-1']", "outside"),
    ("utility_key_not_int", _mut(_add_util("x", 1.0)), "labels.utility_by_step['x']", "integer"),
    ("utility_key_float", _mut(_add_util("1.5", 1.0)), "labels.utility_by_step['1.5']", "integer"),
    ("utility_key_padded", _mut(_add_util("05", 1.0)), "labels.utility_by_step['05']", "canonical"),
    (
        "utility_negative",
        _mut(_set(["labels", "utility_by_step", "3"], -0.5)),
        "labels.utility_by_step['3']",
        "non-negative",
    ),
    ("utility_nan", _mut(_set(["labels", "utility_by_step", "3"], math.nan)), "labels.utility_by_step['3']", "finite"),
    (
        "utility_infinity",
        _mut(_set(["labels", "utility_by_step", "3"], math.inf)),
        "labels.utility_by_step['3']",
        "finite",
    ),
    (
        "utility_minus_infinity",
        _mut(_set(["labels", "utility_by_step", "3"], -math.inf)),
        "labels.utility_by_step['3']",
        "finite",
    ),
    (
        "utility_missing_step",
        _mut(_del(["labels", "utility_by_step", "5"])),
        "labels.utility_by_step",
        "no utility for 1 timestep(s): 5",
    ),
    ("utility_string", _mut(_set(["labels", "utility_by_step", "3"], "1.0")), "labels.utility_by_step['3']", "number"),
    ("utility_bool", _mut(_set(["labels", "utility_by_step", "3"], True)), "labels.utility_by_step['3']", "number"),
    ("utility_null", _mut(_set(["labels", "utility_by_step", "3"], None)), "labels.utility_by_step['3']", "number"),
    (
        "nan_in_observation",
        _mut(_set(["steps", 3, "observation", "version"], math.nan)),
        "steps[3].observation.version",
        "non-standard JSON constant NaN",
    ),
    (
        "infinity_in_metadata",
        _mut(_set(["steps", 2, "metadata", "priority"], math.inf)),
        "steps[2].metadata.priority",
        "non-standard JSON constant Infinity",
    ),
]


@pytest.mark.parametrize("build, field, needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_validation_errors_name_file_line_and_field(tmp_path, build, field, needle, suffix):
    good = _episodes(n=1, length=12)[0]
    bad_line = build()
    path = tmp_path / f"bad{suffix}"
    text = dumps_episode(good) + "\n" + bad_line + "\n" + dumps_episode(good) + "\n"
    if suffix == ".jsonl.gz":
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path.write_text(text, encoding="utf-8")

    with pytest.raises(EpisodeFormatError) as excinfo:
        load_jsonl(path)
    exc = excinfo.value
    message = str(exc)
    assert isinstance(exc, ValueError)
    assert exc.path == str(path)
    assert exc.line == 2
    assert f"{path}:2" in message
    assert exc.field == field
    if field is not None:
        assert field in message
    assert needle in message
    if "utility_by_step" in (field or ""):
        assert "utility_by_step" in message


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_bare_non_finite_utility_tokens_are_named(tmp_path, token):
    """NaN / Infinity written by hand (Python's json accepts them) are refused as utilities."""
    path = tmp_path / "paper.jsonl"
    line = _paper_line(0).replace('"utility_by_step": {"0": 1.0', f'"utility_by_step": {{"0": {token}', 1)
    assert token in line
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(EpisodeFormatError) as excinfo:
        load_jsonl(path)
    assert excinfo.value.line == 1
    assert excinfo.value.field == "labels.utility_by_step['0']"
    assert f"{path}:1" in str(excinfo.value)
    assert "utility_by_step" in str(excinfo.value)


def test_first_line_errors_report_line_one(tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text("not json\n", encoding="utf-8")
    with pytest.raises(EpisodeFormatError) as excinfo:
        load_jsonl(path)
    assert (excinfo.value.path, excinfo.value.line, excinfo.value.field) == (str(path), 1, None)
    assert str(excinfo.value).startswith(f"{path}:1: ")


# --------------------------------------------------------------------------- atomic writes


class Boom(RuntimeError):
    pass


def _failing(episodes, after):
    for i, episode in enumerate(episodes):
        if i == after:
            raise Boom("generator failed half-way")
        yield episode


@pytest.mark.parametrize("name", ["out.jsonl", "out.jsonl.gz"])
def test_write_jsonl_is_atomic_on_failure(tmp_path, name):
    episodes = _episodes(n=4, length=12)
    target = tmp_path / name

    with pytest.raises(Boom):
        write_jsonl(target, _failing(episodes, after=2))
    assert not target.exists()
    assert list(tmp_path.iterdir()) == [], "a temporary file was left behind"


@pytest.mark.parametrize("name", ["out.jsonl", "out.jsonl.gz"])
def test_write_jsonl_failure_keeps_existing_file(tmp_path, name):
    episodes = _episodes(n=4, length=12)
    target = tmp_path / name
    write_jsonl(target, episodes[:1])
    before = target.read_bytes()

    with pytest.raises(Boom):
        write_jsonl(target, _failing(episodes, after=3))
    assert target.read_bytes() == before
    assert load_jsonl(target) == episodes[:1]
    assert [p.name for p in tmp_path.iterdir()] == [name], "a temporary file was left behind"


def test_write_jsonl_success_leaves_only_the_target(tmp_path):
    target = tmp_path / "sub" / "dir" / "out.jsonl"
    assert write_jsonl(target, iter(_episodes(n=2, length=12))) == 2
    assert [p.name for p in target.parent.iterdir()] == ["out.jsonl"]
    assert len(load_jsonl(target)) == 2
