"""The loader against malformed files: every one is an EpisodeFormatError naming file, line and
field, never a bare Python exception, and never accepted; tricky valid files still load.

The files come from ``loader_cases.py`` (run it as a script for a summary of all of them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wpb_gym.core.strict_json import MAX_NESTING, StrictDecoder
from wpb_gym.core.types import MAX_UTILITY
from wpb_gym.episodes.jsonl import EpisodeFormatError, load_jsonl, write_jsonl

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


@pytest.mark.parametrize(
    "case_id",
    ["lone_surrogate_in_mode", "lone_low_surrogate_in_mode", "lone_surrogate_in_episode_id", "lone_surrogate_in_step_mode"],
)
def test_a_lone_surrogate_in_an_episode_name_is_refused_when_read(tmp_path, case_id):
    """Accepted, it crashed wpb eval with a UnicodeEncodeError once the whole grid had run."""
    assert "\\ud" in str(_named_error(tmp_path, case_id)).lower()  # shown as its escape


def test_a_surrogate_pair_in_an_episode_name_is_text(tmp_path):
    assert load_jsonl(_write(tmp_path, BY_ID["surrogate_pair_in_mode"]))[1].regime == "\U0001f600"


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
        ('{"a": ' + "9" * 5000 + ', "b": }', None, "malformed JSON: Expecting value at column 5014"),
        ('{"a": [' + "9" * 5000 + "]}", "a[0]", "integer literal of 5000 digits"),
    ],
)
def test_strict_decoder_names_the_field(text, field, needle):
    from wpb_gym.core.strict_json import JSONLineError

    with pytest.raises(JSONLineError) as excinfo:
        StrictDecoder().decode(text)
    if field is not None:
        assert excinfo.value.field == field
    assert needle in str(excinfo.value)


@pytest.mark.parametrize(
    "literal, refused",
    [
        ("1.7976931348623157e308", False),  # the largest float
        ("1.8e308", True),
        ("1E+0309", True),
        ("-1e309", True),
        ("1" + "0" * 250 + "e60", True),  # a two-digit exponent on a 251-digit number
        ("12" + "0" * 208 + ".5e98", False),  # 1.2e307
        ("0.0000001e315", False),  # 1e308
        ("1" + "0" * 400, False),  # an integer: Python reads it exactly
        ("1e-400", False),  # underflows to 0.0, as any float rounds
    ],
)
def test_overflow_is_caught_at_the_float_boundary(literal, refused):
    from wpb_gym.core.strict_json import JSONLineError

    text = '{"n": [' + literal + "]}"
    if refused:
        with pytest.raises(JSONLineError, match="out of range") as excinfo:
            StrictDecoder().decode(text)
        assert excinfo.value.field == "n[0]" and len(str(excinfo.value)) < 200
    else:
        assert StrictDecoder().decode(text) == json.loads(text)


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
    from wpb_gym.core.strict_json import JSONLineError

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


# --------------------------------------------------------------------------- the decoder's scan, by property
# The common path trusts a scan of the bytes (keys and nesting counted outside strings); strings
# full of quotes, backslashes, brackets and colons must not fool it.

_TRICKY = st.text(alphabet=st.sampled_from(list('"\\[]{}:,eE0129 aé\u2028\U0001f600')) | st.characters(), max_size=12)
_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _TRICKY
_VALUES = st.recursive(
    _SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_TRICKY, children, max_size=4),
    max_leaves=25,
)


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@given(value=_VALUES, ascii_only=st.booleans())
def test_strict_decoder_reads_any_json_value_as_json_does(value, ascii_only):
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert StrictDecoder().decode(text) == json.loads(text)


@given(pairs=st.lists(st.tuples(st.sampled_from(["a", 'q"', "b\\", "[:]", "é"]), _VALUES), min_size=1, max_size=5))
def test_strict_decoder_refuses_exactly_the_repeated_keys(pairs):
    from wpb_gym.core.strict_json import JSONLineError

    text = '[1, {"x": ' + "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs) + "}}]"
    keys = [k for k, _ in pairs]
    if len(set(keys)) == len(keys):
        assert StrictDecoder().decode(text) == json.loads(text)
    else:
        with pytest.raises(JSONLineError, match="duplicate key"):
            StrictDecoder().decode(text)


@given(value=_VALUES)
def test_strict_decoder_measures_nesting_exactly(value):
    from wpb_gym.core.strict_json import JSONLineError

    inner = _depth(value)
    for total in (MAX_NESTING, MAX_NESTING + 1):
        wraps = total - inner
        if wraps < 1:
            continue
        text = "[" * wraps + json.dumps(value) + "]" * wraps
        if total <= MAX_NESTING:
            assert StrictDecoder().decode(text) == json.loads(text)
        else:
            with pytest.raises(JSONLineError, match="levels deep"):
                StrictDecoder().decode(text)
