"""The loader against malformed files: every one is an EpisodeFormatError naming file, line and
field, never a bare Python exception, and never accepted; tricky valid files still load.

The files come from ``loader_cases.py`` (run it as a script for a summary of all of them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from wpb_gym.frozen import MANIFEST_NAME, FrozenSetError, freeze_set, manifest_kind, open_frozen_set
from wpb_gym.jsonl import EpisodeFormatError, load_jsonl, write_jsonl
from wpb_gym.strict_json import MAX_NESTING, StrictDecoder
from wpb_gym.types import MAX_UTILITY

sys.path.insert(0, str(Path(__file__).parent))
from loader_cases import CASES, GOOD, Case, lines

BY_ID = {case.id: case for case in CASES}


def _write(tmp_path: Path, case: Case) -> Path:
    path = tmp_path / f"{case.id}{case.suffix}"
    path.write_bytes(case.build())
    return path


def _named_error(tmp_path: Path, case_id: str) -> EpisodeFormatError:
    case = BY_ID[case_id]
    assert case.expect == "error"
    path = _write(tmp_path, case)
    with pytest.raises(EpisodeFormatError) as excinfo:
        load_jsonl(path)
    exc = excinfo.value
    message = str(exc)
    assert exc.path == str(path)
    assert exc.line is not None and message.startswith(f"{path}:{exc.line}: ")
    if case.field is not None:
        assert exc.field == (case.field or None), message
        if case.field:
            assert f":{exc.line}: {case.field}: " in message
    if case.needle:
        assert case.needle in message
    assert "\n" not in message and len(message) < len(str(path)) + 400, "the message must stay one readable line"
    return exc


MALFORMED = [case for case in CASES if case.expect == "error"]
VALID = [case for case in CASES if case.expect == "valid"]


def test_the_adversary_tries_enough_files():
    assert len(MALFORMED) >= 50 and len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case_id", [case.id for case in MALFORMED])
def test_malformed_file_gets_a_named_error(tmp_path, case_id):
    _named_error(tmp_path, case_id)


@pytest.mark.parametrize("case_id", [case.id for case in VALID])
def test_tricky_valid_file_loads_and_round_trips(tmp_path, case_id):
    path = _write(tmp_path, BY_ID[case_id])
    episodes = load_jsonl(path)
    again = tmp_path / f"again{BY_ID[case_id].suffix}"
    write_jsonl(again, episodes)
    assert load_jsonl(again) == episodes


# --------------------------------------------------------------------------- the reported ones, by name
# Each failed on the branch's starting commit: a bare exception, or the file was accepted.


@pytest.mark.parametrize("case_id", ["gzip_truncated", "gzip_truncated_header"])
def test_truncated_gzip_is_a_named_error(tmp_path, case_id):
    assert "truncated" in str(_named_error(tmp_path, case_id))


def test_gzip_with_a_bad_crc_is_a_named_error(tmp_path):
    assert "CRC" in str(_named_error(tmp_path, "gzip_bad_crc"))


@pytest.mark.parametrize("case_id", ["gz_name_not_gzip", "gzip_trailing_garbage", "gzip_corrupt_deflate"])
def test_gz_file_that_is_not_gzip_is_a_named_error(tmp_path, case_id):
    _named_error(tmp_path, case_id)


@pytest.mark.parametrize("case_id", ["non_utf8_byte", "latin1_text", "utf16_file", "gzip_non_utf8"])
def test_non_utf8_bytes_are_a_named_error(tmp_path, case_id):
    exc = _named_error(tmp_path, case_id)
    assert "column" in str(exc)


def test_gzip_content_under_a_plain_name_says_so(tmp_path):
    assert "name it *.jsonl.gz" in str(_named_error(tmp_path, "gzip_content_plain_name"))


@pytest.mark.parametrize("case_id", ["nesting_200k_lists", "nesting_100k_objects", "nesting_5k_lists"])
def test_200k_deep_nesting_is_a_named_error(tmp_path, case_id):
    assert f"nested more than {MAX_NESTING} levels" in str(_named_error(tmp_path, case_id))


def test_nesting_that_loads_but_breaks_the_evaluator_is_refused(tmp_path):
    """600 levels: Python reads it, then json.dumps / deepcopy in the evaluator overflow."""
    exc = _named_error(tmp_path, "nesting_600_lists")
    assert exc.field.startswith("steps[0].observation.deep[0][0]")


@pytest.mark.parametrize("case_id", ["int_5000_digits_observation", "int_5000_digits_t", "int_5000_digits_utility"])
def test_5000_digit_integer_is_a_named_error(tmp_path, case_id):
    assert "5000 digits" in str(_named_error(tmp_path, case_id))


def test_huge_integer_utility_is_a_named_error(tmp_path):
    _named_error(tmp_path, "int_400_digits_utility")


@pytest.mark.parametrize(
    "case_id",
    [
        "float_1e400_utility",
        "float_1e400_observation",
        "float_minus_1e400_metadata",
        "float_minus_1e400_label",
        "float_1e400_in_list",
    ],
)
def test_1e400_is_refused_anywhere(tmp_path, case_id):
    assert "out of range" in str(_named_error(tmp_path, case_id))


@pytest.mark.parametrize(
    "case_id",
    [
        "dup_top_level_steps",
        "dup_labels_key",
        "dup_utility_key",
        "dup_step_t",
        "dup_observation_key",
        "dup_metadata_priority",
        "dup_nested_in_list",
    ],
)
def test_duplicate_json_keys_are_refused_at_any_level(tmp_path, case_id):
    exc = _named_error(tmp_path, case_id)
    assert "duplicate key" in str(exc)


@pytest.mark.parametrize("case_id", ["drift_events_below_critical", "drift_events_zero_with_critical"])
def test_total_drift_events_below_critical_steps_is_refused(tmp_path, case_id):
    _named_error(tmp_path, case_id)


@pytest.mark.parametrize(
    "case_id", ["priority_string", "priority_null", "priority_bool", "priority_list", "priority_huge_int"]
)
def test_priority_that_is_not_a_finite_number_is_refused(tmp_path, case_id):
    _named_error(tmp_path, case_id)


def test_priority_on_some_steps_only_is_refused(tmp_path):
    _named_error(tmp_path, "priority_missing_on_one_step")


@pytest.mark.parametrize(
    "case_id", ["utility_1e300", "utility_9e18", "utility_just_above_bound", "utility_int_above_bound"]
)
def test_utilities_above_the_bound_are_refused(tmp_path, case_id):
    assert f"at most {MAX_UTILITY:g}" in str(_named_error(tmp_path, case_id))


@pytest.mark.parametrize(
    "case_id", ["utility_at_bound_valid", "utility_int_at_bound_valid", "utility_all_at_bound_valid"]
)
def test_utilities_at_the_bound_load(tmp_path, case_id):
    episodes = load_jsonl(_write(tmp_path, BY_ID[case_id]))
    assert episodes[1].utilities.max() == MAX_UTILITY  # line 2 is the changed one


# --------------------------------------------------------------------------- the strict decoder itself


@pytest.mark.parametrize(
    "text, field, needle",
    [
        ('{"a": 1, "a": 2}', "a", "duplicate key 'a'"),
        ('{"a": {"b": [1, {"c": 1, "c": 1}]}}', "a.b[1].c", "duplicate key"),
        ('{"x y": 1, "x y": 2}', "['x y']", "duplicate key"),
        ('{"a": [1.5, 2e308]}', "a[1]", "2e308"),
        ('{"a": -Infinity}', "a", "-Infinity"),
        ('{"a": ' + "1" * 320 + ".0}", "a", "out of range"),
        ('{"a": ' + "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1) + "}", None, "levels deep"),
    ],
)
def test_strict_decoder_names_the_field(text, field, needle):
    from wpb_gym.strict_json import JSONLineError

    with pytest.raises(JSONLineError) as excinfo:
        StrictDecoder().decode(text)
    if field is not None:
        assert excinfo.value.field == field
    assert needle in str(excinfo.value)


@pytest.mark.parametrize(
    "value",
    [
        {"a": "text with [brackets] and {braces: and colons}", "b": [1, 2]},
        {"q": 'a "quoted" \\ backslash \\" and \\\\', "r": {"s": "]]]}}}::"}},
        {"deep": [[[[[[[[[[1]]]]]]]]]], "e": "1e999 is only text", "n": "9" * 400},
        {"float": 1e-300, "big": 1.7976931348623157e308, "neg": -1e308, "int": 10**400},
        ["top", "level", {"list": []}],
    ],
)
def test_strict_decoder_reads_what_json_reads(value):
    text = json.dumps(value)
    assert StrictDecoder().decode(text) == json.loads(text)


def test_nesting_at_the_limit_is_accepted_and_one_more_is_not():
    from wpb_gym.strict_json import JSONLineError

    decoder = StrictDecoder()
    assert decoder.decode("[" * MAX_NESTING + "]" * MAX_NESTING) is not None
    with pytest.raises(JSONLineError):
        decoder.decode("[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1))
    # Brackets inside strings do not count.
    inside = '["' + "[" * 500 + '"]'
    assert decoder.decode(inside) == json.loads(inside)


def test_a_good_line_after_a_refused_one_still_loads(tmp_path):
    """The decoder's per-line state is reset: a flagged line does not taint the next file's lines."""
    decoder = StrictDecoder()
    with pytest.raises(ValueError):
        decoder.decode('{"a": 1, "a": 2}')
    assert decoder.decode(GOOD) == json.loads(GOOD)
    path = tmp_path / "ok.jsonl"
    path.write_bytes(lines(GOOD, GOOD))
    assert len(load_jsonl(path)) == 2


# --------------------------------------------------------------------------- frozen sets
# A folder with a MANIFEST.json is a frozen set; a damaged manifest must not turn it into a
# plain JSONL folder read with tampered labels (it did: exit 0 with the edited labels).


def _tampered_set(tmp_path: Path) -> tuple[Path, Path]:
    """A frozen set whose one episode file was edited after freezing (labels changed)."""
    root = tmp_path / "set"
    freeze_set(root, ["default"], [12], episodes=2, seed=0)
    (path,) = root.glob("*.jsonl")
    episodes = load_jsonl(path)
    for episode in episodes:  # every step critical and worth the most: a different benchmark
        episode.labels["critical_steps"] = list(range(len(episode)))
        episode.labels["total_drift_events"] = len(episode)
        episode.labels["utility_by_step"] = {t: 6.0 for t in range(len(episode))}
    write_jsonl(path, episodes)
    with pytest.raises(FrozenSetError, match="sha256 mismatch"):
        open_frozen_set(root)
    return root, path


def _rewrite_json(path: Path, change) -> None:
    manifest = json.loads(path.read_text(encoding="utf-8"))
    change(manifest)
    path.write_text(json.dumps(manifest, indent=2), encoding="utf-8")


def _make_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside.json").write_text("{}", encoding="utf-8")


def _broken_link(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.parent / "nowhere.json")


MANIFEST_DAMAGE = {
    "byte_appended": lambda m: m.write_bytes(m.read_bytes() + b"x"),
    "emptied": lambda m: m.write_bytes(b""),
    "whitespace_only": lambda m: m.write_bytes(b"\n \n"),
    "non_utf8_byte": lambda m: m.write_bytes(m.read_bytes().replace(b'"format"', b'"f\xffrmat"')),
    "utf16": lambda m: m.write_bytes(m.read_text(encoding="utf-8").encode("utf-16")),
    "json_list": lambda m: m.write_text("[1, 2, 3]\n", encoding="utf-8"),
    "json_string": lambda m: m.write_text('"wpb-frozen-set"\n', encoding="utf-8"),
    "json_null": lambda m: m.write_text("null\n", encoding="utf-8"),
    "truncated": lambda m: m.write_bytes(m.read_bytes()[: len(m.read_bytes()) // 2]),
    "a_directory": _make_directory,
    "broken_symlink": _broken_link,
    "duplicate_key": lambda m: m.write_bytes(m.read_bytes().replace(b"{", b'{"format": "other", ', 1)),
    "nan_value": lambda m: m.write_bytes(m.read_bytes().replace(b'"seed": 0', b'"seed": NaN', 1)),
    "format_removed": lambda m: _rewrite_json(m, lambda d: d.pop("format")),
    "format_renamed": lambda m: _rewrite_json(m, lambda d: d.update(format="something-else")),
    "signature_keys_removed": lambda m: _rewrite_json(
        m, lambda d: [d.pop(k) for k in ("format", "format_version", "manifest_sha256", "package_version")]
    ),
}


@pytest.mark.parametrize("damage", list(MANIFEST_DAMAGE))
def test_frozen_set_with_a_damaged_manifest_is_refused_not_read_as_plain_jsonl(tmp_path, damage):
    from wpb_gym.cli import main
    from wpb_gym.env import WritePolicyBenchEnv
    from wpb_gym.sources import EpisodeList, episode_files, read_episodes

    root, episode_file = _tampered_set(tmp_path)
    manifest = root / MANIFEST_NAME
    MANIFEST_DAMAGE[damage](manifest)
    assert manifest_kind(root) == "ours"
    for read in (read_episodes, EpisodeList.from_path, episode_files, open_frozen_set):
        with pytest.raises(FrozenSetError) as excinfo:
            read(root)
        assert str(manifest) in str(excinfo.value), read
    with pytest.raises(FrozenSetError, match=MANIFEST_NAME):
        read_episodes(episode_file)  # one file of the set: verified like the whole set
    with pytest.raises(FrozenSetError, match=MANIFEST_NAME):
        WritePolicyBenchEnv(episodes=str(root))
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as excinfo:
        main(["eval", "--episodes", str(root), "--agents", "no_mem", "--budgets", "1024", "--out", str(out), "--quiet"])
    assert MANIFEST_NAME in str(excinfo.value.code)
    assert not (out / "results.csv").exists()


def _paper_like_folder(tmp_path: Path) -> Path:
    """The layout of the paper's released episodes: JSONL files and another tool's manifest."""
    folder = tmp_path / "released"
    folder.mkdir()
    names = {}
    for i, mode in enumerate(["default", "burst_drift"]):
        name = f"episodes__schema=priority_v1__mode={mode}__seed=0__steps=12__n=2.jsonl"
        names[mode] = f"data/episodes/{name}"
        (folder / name).write_bytes(lines(GOOD, GOOD.replace('"episode_id": 0', f'"episode_id": {i + 1}')))
    manifest = {"episodes": 2, "files": names, "modes": list(names), "seed": 0, "steps": 12}
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("manifest", [None, '{"episodes": 2}', "{}"])
def test_a_folder_with_a_foreign_manifest_loads_as_plain_jsonl(tmp_path, manifest):
    from wpb_gym.sources import episode_files, read_episodes

    folder = _paper_like_folder(tmp_path)
    if manifest is not None:
        (folder / MANIFEST_NAME).write_text(manifest, encoding="utf-8")
    assert manifest_kind(folder) == "foreign"
    files = sorted(folder.glob("*.jsonl"))
    assert episode_files(folder) == files
    assert read_episodes(folder) == [e for f in files for e in load_jsonl(f)]
    assert read_episodes(files[0]) == load_jsonl(files[0])


def test_a_foreign_manifest_that_is_damaged_makes_a_broken_set(tmp_path):
    """Damage never makes a folder look foreign, whatever the manifest was before."""
    from wpb_gym.sources import read_episodes

    folder = _paper_like_folder(tmp_path)
    (folder / MANIFEST_NAME).write_bytes((folder / MANIFEST_NAME).read_bytes() + b"x")
    assert manifest_kind(folder) == "ours"
    with pytest.raises(FrozenSetError, match="malformed JSON"):
        read_episodes(folder)


def test_a_folder_without_a_manifest_is_plain_jsonl(tmp_path):
    folder = _paper_like_folder(tmp_path)
    (folder / MANIFEST_NAME).unlink()
    assert manifest_kind(folder) is None


def _reseal(root: Path, change) -> None:
    from wpb_gym.frozen import _manifest_digest

    manifest = json.loads((root / MANIFEST_NAME).read_text(encoding="utf-8"))
    (name,) = manifest["files"]
    change(manifest, name)
    manifest["manifest_sha256"] = _manifest_digest(manifest)
    (root / MANIFEST_NAME).write_text(json.dumps(manifest), encoding="utf-8")


def _entry(key, value):
    return lambda m, name: m["files"][name].__setitem__(key, value)


ENTRY_DAMAGE = {
    "entry_is_a_string": (lambda m, name: m["files"].__setitem__(name, "sha256"), "expected an object"),
    "entry_string_naming_every_key": (
        lambda m, name: m["files"].__setitem__(name, "sha256 episodes regime length seed generator"),
        "expected an object",
    ),
    "entry_is_a_list": (lambda m, name: m["files"].__setitem__(name, [1]), "expected an object"),
    "files_is_a_string": (lambda m, name: m.__setitem__("files", "x.jsonl"), "non-empty object"),
    "files_is_a_list": (lambda m, name: m.__setitem__("files", [name]), "non-empty object"),
    "episodes_string": (_entry("episodes", "abc"), ".episodes: expected a non-negative integer"),
    "episodes_bool": (_entry("episodes", True), ".episodes: expected a non-negative integer"),
    "episodes_negative": (_entry("episodes", -2), ".episodes: expected a non-negative integer"),
    "length_list": (_entry("length", [1]), ".length: expected a positive integer"),
    "length_float": (_entry("length", 12.0), ".length: expected a positive integer"),
    "seed_string": (_entry("seed", "0"), ".seed: expected an integer"),
    "sha256_number": (_entry("sha256", 5), ".sha256: expected 64 lowercase hex digits"),
    "sha256_short": (_entry("sha256", "abc"), ".sha256: expected 64 lowercase hex digits"),
    "regime_number": (_entry("regime", 1), ".regime: expected a string"),
    "generator_list": (_entry("generator", []), ".generator: expected an object"),
    "name_with_folder": (
        lambda m, name: m["files"].__setitem__("sub/" + name, m["files"].pop(name)),
        "plain file name",
    ),
    "name_not_jsonl": (lambda m, name: m["files"].__setitem__("notes.txt", m["files"].pop(name)), "plain file name"),
    "name_with_nul": (lambda m, name: m["files"].__setitem__("a\0.jsonl", m["files"].pop(name)), "plain file name"),
}


@pytest.mark.parametrize("damage", list(ENTRY_DAMAGE))
def test_manifest_files_entry_of_the_wrong_type_is_a_named_error(tmp_path, capsys, damage):
    from wpb_gym.cli import main

    root = tmp_path / "set"
    freeze_set(root, ["default"], [12], episodes=2, seed=0)
    change, needle = ENTRY_DAMAGE[damage]
    _reseal(root, change)
    with pytest.raises(FrozenSetError) as excinfo:
        open_frozen_set(root)
    assert str(excinfo.value).startswith(f"{root / MANIFEST_NAME}: ")
    assert needle in str(excinfo.value)
    assert main(["inspect", str(root)]) == 2  # one line on stderr, no traceback
    err = capsys.readouterr().err
    assert MANIFEST_NAME in err and "Traceback" not in err
