"""Malformed (and tricky but valid) episode files, for the loader's adversarial tests.

Each case is ``Case(id, suffix, build, expect, field, needle)``: ``build()`` returns the
file's bytes, ``suffix`` its name's ending, ``expect`` ``"error"`` (an ``EpisodeFormatError``
that names the file and a line) or ``"valid"`` (loads; the episodes then go through the
evaluator). ``field``, when given, is the field the error must name (``""``: the line as a
whole, ``None``: not checked); ``needle`` is text the message must contain.

Run as a script to classify every case against the code on ``PYTHONPATH`` (counts of named
errors, raw exceptions, wrongly accepted files, and valid files that break the evaluator)::

    PYTHONPATH=$PWD python tests/episodes/loader_cases.py [--downstream]
"""

from __future__ import annotations

import copy
import gzip
import json
import struct
from dataclasses import dataclass
from typing import Any, Callable

T = 12


@dataclass(frozen=True)
class Case:
    id: str
    suffix: str
    build: Callable[[], bytes]
    expect: str  # "error" or "valid"
    field: str | None = None
    needle: str | None = None


def base() -> dict[str, Any]:
    """A valid episode of T = 12 steps as decoded JSON, with every optional label present."""
    steps = []
    for t in range(T):
        k = t % 4
        version = 2 if t >= 4 and k == 0 else 1
        steps.append(
            {
                "metadata": {"mode": "default", "priority": 5 / 6 if t in (0, 4) else 1 / 6},
                "observation": {
                    "api": f"api.v{version}.endpoint_{k}",
                    "deprecated": False,
                    "params": [f"p{k}_{j}" for j in range(k + 1)],
                    "version": version,
                },
                "t": t,
            }
        )
    labels = {
        "breaking_changes": [4],
        "critical_steps": [0, 4],
        "deprecated_apis": 0,
        "episode_id": 0,
        "max_utility": 20.0,
        "mode": "default",
        "total_drift_events": 2,
        "utility_by_step": {str(t): 5.0 if t in (0, 4) else 1.0 for t in range(T)},
    }
    return {"labels": labels, "steps": steps}


def line(data: Any) -> str:
    return json.dumps(data, sort_keys=True)


GOOD = line(base())


def lines(*texts: str, end: str = "\n") -> bytes:
    return (end.join(texts) + end).encode("utf-8")


def mut(fn: Callable[[dict[str, Any]], Any]) -> Callable[[], bytes]:
    """A file of three lines, the second one ``base()`` changed by ``fn``."""

    def build() -> bytes:
        data = copy.deepcopy(base())
        fn(data)
        return lines(GOOD, line(data), GOOD)

    return build


def text(replace: str, by: str, count: int = 1) -> Callable[[], bytes]:
    """A file whose second line is ``GOOD`` with a literal text replacement (raw JSON tricks)."""

    def build() -> bytes:
        assert replace in GOOD, replace
        return lines(GOOD, GOOD.replace(replace, by, count), GOOD)

    return build


def raw(data: bytes) -> Callable[[], bytes]:
    return lambda: data


def put(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    keys = [int(k) if k.isdigit() else k for k in path.split("/")]

    def fn(d: dict[str, Any]) -> None:
        target = d
        for key in keys[:-1]:
            target = target[key if not isinstance(target, dict) else str(key)]
        last = keys[-1]
        target[last if not isinstance(target, dict) else str(last)] = value

    return fn


def drop(path: str) -> Callable[[dict[str, Any]], None]:
    keys = [int(k) if k.isdigit() else k for k in path.split("/")]

    def fn(d: dict[str, Any]) -> None:
        target = d
        for key in keys[:-1]:
            target = target[key if not isinstance(target, dict) else str(key)]
        last = keys[-1]
        del target[last if not isinstance(target, dict) else str(last)]

    return fn


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _bad_crc() -> bytes:
    data = bytearray(gz(lines(GOOD, GOOD)))
    data[-8] ^= 0xFF  # the CRC32 field of the trailer
    return bytes(data)


def _bad_size() -> bytes:
    data = bytearray(gz(lines(GOOD, GOOD)))
    data[-4:] = struct.pack("<I", 7)
    return bytes(data)


def _corrupt_deflate() -> bytes:
    data = bytearray(gz(lines(GOOD, GOOD, GOOD)))
    mid = len(data) // 2
    data[mid : mid + 8] = b"\xff" * 8
    return bytes(data)


def _nested(depth: int, open_: str, close: str) -> Callable[[], bytes]:
    return text('"version": 1}', '"version": 1, "deep": ' + open_ * depth + close * depth + "}")


def _swap(i: int, j: int) -> Callable[[dict[str, Any]], None]:
    def fn(d: dict[str, Any]) -> None:
        d["steps"][i], d["steps"][j] = d["steps"][j], d["steps"][i]

    return fn


def _util_key(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def fn(d: dict[str, Any]) -> None:
        util = d["labels"]["utility_by_step"]
        util[new] = util.pop(old)

    return fn


def _step_mode(mode: str) -> Callable[[dict[str, Any]], None]:
    """No ``labels.mode``: the regime is then the first step's ``metadata.mode``, set to ``mode``."""

    def fn(d: dict[str, Any]) -> None:
        del d["labels"]["mode"]
        d["steps"][0]["metadata"]["mode"] = mode

    return fn


U3 = '"3": 1.0'  # utility of step 3 in GOOD (keys sort as strings: "0", "1", "10", "11", "2", "3", ...)
CRIT = '"critical_steps": [0, 4]'
BIG = "9" * 5000


def _cases() -> list[Case]:
    E, V = "error", "valid"
    c: list[Case] = []

    def add(
        id_: str,
        build: Callable[[], bytes],
        expect: str,
        field: str | None = None,
        needle: str | None = None,
        suffix: str = ".jsonl",
    ) -> None:
        c.append(Case(id_, suffix, build, expect, field, needle))

    # fmt: off
    # ---- bytes, encodings, line structure
    add("empty_file", raw(b""), V)
    add("only_newline", raw(b"\n"), E, "", "empty line")
    add("blank_line_between", raw(lines(GOOD, "", GOOD)), E, "", "empty line")
    add("trailing_blank_line", raw(lines(GOOD, "")), E, "", "empty line")
    add("whitespace_line", raw(lines(GOOD, " \t ", GOOD)), E, "", "empty line")
    add("no_final_newline", raw(GOOD.encode()), V)
    add("crlf_line_ends", raw(lines(GOOD, GOOD, end="\r\n")), V)
    add("utf8_bom", raw(b"\xef\xbb\xbf" + lines(GOOD)), E, "", "BOM")
    add("lone_cr_separator", raw((GOOD + "\r" + GOOD + "\n").encode()), E, "", "malformed JSON")
    add("non_utf8_byte", raw(lines(GOOD) + GOOD.replace("endpoint_1", "endpoint_\xff").encode("latin-1") + b"\n"), E, "", "UTF-8")
    add("latin1_text", raw(lines(GOOD) + GOOD.replace("p1_0", "p\xe9").encode("latin-1") + b"\n"), E, "", "UTF-8")
    add("utf16_file", raw(lines(GOOD).decode().encode("utf-16")), E, "", "UTF-8")
    add("nul_after_object", raw(lines(GOOD, GOOD + "\x00")), E, "", "malformed JSON")
    add("truncated_line", raw(lines(GOOD, GOOD[: len(GOOD) // 2])), E, "", "malformed JSON")
    add("truncated_file_no_newline", raw(lines(GOOD) + GOOD[:100].encode()), E, "", "malformed JSON")
    add("two_objects_one_line", raw(lines(GOOD + GOOD)), E, "", "malformed JSON")
    add("huge_line_valid", mut(put("steps/3/observation/blob", "x" * 3_000_000)), V)
    add("lone_surrogate_escape", text('"p1_0"', '"p\\ud800"'), V)
    # An episode's names go into results.csv and the reports (UTF-8): a lone surrogate there is refused.
    add("lone_surrogate_in_mode", text('"mode": "default", "total', '"mode": "def\\ud800", "total'), E,
        "labels.mode", "lone surrogate")
    add("lone_low_surrogate_in_mode", text('"mode": "default", "total', '"mode": "\\udfff", "total'), E,
        "labels.mode", "lone surrogate")
    add("lone_surrogate_in_episode_id", mut(put("labels/episode_id", "ep\ud800")), E, "labels.episode_id",
        "lone surrogate")
    add("lone_surrogate_in_step_mode", mut(_step_mode("\udc80")), E, "steps[0].metadata.mode", "lone surrogate")
    add("surrogate_pair_in_mode", text('"mode": "default", "total', '"mode": "\\ud83d\\ude00", "total'), V)
    add("nul_escape_in_string", text('"p1_0"', '"p\\u0000"'), V)
    add("exponent_utility", text(U3, '"3": 1E0'), V)
    add("negative_zero_utility", text(U3, '"3": -0.0'), V)
    add("underflow_float", text(U3, '"3": 1e-400'), V)

    # ---- gzip
    add("gzip_valid", lambda: gz(lines(GOOD, GOOD)), V, suffix=".jsonl.gz")
    add("gzip_empty_file", raw(b""), V, suffix=".jsonl.gz")
    add("gzip_truncated", lambda: gz(lines(GOOD, GOOD, GOOD))[:-40], E, "", "gzip", suffix=".jsonl.gz")
    add("gzip_truncated_header", lambda: gz(lines(GOOD))[:5], E, "", "gzip", suffix=".jsonl.gz")
    add("gzip_bad_crc", _bad_crc, E, "", "gzip", suffix=".jsonl.gz")
    add("gzip_bad_length", _bad_size, E, "", "gzip", suffix=".jsonl.gz")
    add("gzip_corrupt_deflate", _corrupt_deflate, E, "", "gzip", suffix=".jsonl.gz")
    add("gzip_trailing_garbage", lambda: gz(lines(GOOD)) + b"garbage!", E, "", "gzip", suffix=".jsonl.gz")
    add("gz_name_not_gzip", raw(lines(GOOD)), E, "", "gzip", suffix=".jsonl.gz")
    add("gzip_content_plain_name", lambda: gz(lines(GOOD)), E, "", "gzip")
    add("gzip_non_utf8", lambda: gz(b"\xff\xfe" + lines(GOOD)), E, "", "UTF-8", suffix=".jsonl.gz")

    # ---- JSON limits
    add("nesting_200k_lists", _nested(200_000, "[", "]"), E, "", "nest")
    add("nesting_100k_objects", _nested(100_000, '{"a": ', "}"), E, "", "nest")
    add("nesting_5k_lists", _nested(5_000, "[", "]"), E, "", "nest")
    add("nesting_600_lists", _nested(600, "[", "]"), E, None, "nested more than 100 levels")
    add("nesting_60_lists_valid", _nested(60, "[", "]"), V)
    add("int_5000_digits_observation", text('"version": 1}', f'"version": {BIG}}}'), E, "steps[0].observation.version", "digits")
    add("int_5000_digits_then_malformed", text('"t": 3}', f'"t": {BIG}, }}'), E, "", "malformed JSON")
    add("int_5000_digits_t", text('"t": 3}', f'"t": {BIG}}}'), E, "steps[3].t", "digits")
    add("int_5000_digits_utility", text(U3, f'"3": {BIG}'), E, "labels.utility_by_step['3']", "digits")
    add("int_400_digits_utility", text(U3, '"3": 1' + "0" * 400), E, "labels.utility_by_step['3']", "at most")
    add("int_400_digits_observation", text('"version": 1}', '"version": 1' + "0" * 400 + "}"), V)
    add("float_1e400_utility", text(U3, '"3": 1e400'), E, "labels.utility_by_step['3']", "1e400")
    add("float_1e400_observation", text('"version": 1}', '"version": 1e400}'), E, "steps[0].observation.version", "1e400")
    add("float_minus_1e400_metadata", text('"priority": 0.16666666666666666}', '"priority": 0.16666666666666666, "score": -1e400}'), E, "steps[1].metadata.score", "-1e400")
    add("float_minus_1e400_label", text('"max_utility": 20.0', '"max_utility": -1e400'), E, "labels.max_utility", "-1e400")
    add("float_1e400_in_list", text(CRIT, '"critical_steps": [0, 4], "extra_scores": [1.0, 1e999]'), E, "labels.extra_scores[1]", "1e999")
    add("nan_token_observation", text('"version": 1}', '"version": NaN}'), E, "steps[0].observation.version", "NaN")
    add("infinity_token_utility", text(U3, '"3": Infinity'), E, "labels.utility_by_step['3']", "finite")

    # ---- duplicate keys
    add("dup_top_level_steps", lambda: lines(GOOD, GOOD[:-1] + ', "steps": []}'), E, "steps", "duplicate")
    add("dup_labels_key", text(CRIT, CRIT + ', "critical_steps": [1]'), E, "labels.critical_steps", "duplicate")
    add("dup_utility_key", text(U3, U3 + ', "3": 9.0'), E, "labels.utility_by_step['3']", "duplicate")
    add("dup_step_t", text('"t": 3}', '"t": 3, "t": 3}'), E, "steps[3].t", "duplicate")
    add("dup_observation_key", text('"version": 1}', '"version": 1, "version": 2}'), E, "steps[0].observation.version", "duplicate")
    add("dup_metadata_priority", text('"mode": "default", "priority": 0.16666666666666666}', '"mode": "default", "priority": 0.16666666666666666, "priority": 1.0}'), E, "steps[1].metadata.priority", "duplicate")
    add("dup_nested_in_list", text('"version": 1}', '"version": 1, "x": [{"a": 1, "a": 2}]}'), E, "steps[0].observation.x[0].a", "duplicate")

    # ---- document shape
    add("top_list", raw(lines("[1, 2]")), E, "", "JSON object")
    add("top_string", raw(lines('"episode"')), E, "", "JSON object")
    add("top_number", raw(lines("42")), E, "", "JSON object")
    add("top_null", raw(lines("null")), E, "", "JSON object")
    add("unknown_top_key", mut(put("extra", 1)), E, "extra", "unknown key")
    add("steps_missing", mut(drop("steps")), E, "steps", "missing")
    add("steps_null", mut(put("steps", None)), E, "steps", "non-empty list")
    add("steps_object", mut(put("steps", {"0": {}})), E, "steps", "non-empty list")
    add("steps_empty", mut(put("steps", [])), E, "steps", "non-empty list")
    add("steps_string", mut(put("steps", "abc")), E, "steps", "non-empty list")
    add("step_is_int", mut(put("steps/3", 3)), E, "steps[3]", "object")
    add("step_is_null", mut(put("steps/3", None)), E, "steps[3]", "object")
    add("step_unknown_key", mut(put("steps/3/reward", 1)), E, "steps[3].reward", "unknown key")

    # ---- timesteps
    add("t_missing", mut(drop("steps/3/t")), E, "steps[3].t", "missing")
    add("t_string", mut(put("steps/3/t", "3")), E, "steps[3].t", "integer")
    add("t_float", mut(put("steps/3/t", 3.0)), E, "steps[3].t", "integer")
    add("t_bool", mut(put("steps/1/t", True)), E, "steps[1].t", "integer")
    add("t_negative", mut(put("steps/0/t", -1)), E, "steps[0].t", "0..T-1")
    add("t_null", mut(put("steps/3/t", None)), E, "steps[3].t", "integer")
    add("t_huge", mut(put("steps/3/t", 10**30)), E, "steps[3].t", "0..T-1")
    add("t_exponent_literal", text('"t": 3}', '"t": 3e0}'), E, "steps[3].t", "integer")
    add("t_repeated", mut(put("steps/4/t", 3)), E, "steps[4].t", "0..T-1")
    add("t_swapped", mut(_swap(2, 5)), E, "steps[2].t", "0..T-1")
    add("t_gap", mut(lambda d: d["steps"].pop(6)), E, "steps[6].t", "0..T-1")

    # ---- observation and metadata
    add("observation_missing", mut(drop("steps/3/observation")), E, "steps[3].observation", "missing")
    add("observation_null_valid", mut(put("steps/3/observation", None)), V)
    add("observation_string_valid", mut(put("steps/3/observation", "free text")), V)
    add("observation_list_valid", mut(put("steps/3/observation", [1, "a", None])), V)
    add("observation_api_list_valid", mut(put("steps/3/observation/api", ["a", 1])), V)
    add("observation_fields_odd_types_valid", mut(put("steps/3/observation", {"api": "api.v1.endpoint_3", "version": "x", "params": "abc", "deprecated": "yes"}) ), V)
    add("metadata_missing_on_one_step", mut(drop("steps/3/metadata")), E, "steps[3].metadata.priority", "at all or none" )
    add("priority_missing_on_one_step", mut(drop("steps/0/metadata/priority")), E, "steps[0].metadata.priority", "at all or none")
    add("priority_absent_everywhere_valid", mut(lambda d: [s["metadata"].pop("priority") for s in d["steps"]]), V)
    add("metadata_list", mut(put("steps/3/metadata", [1])), E, "steps[3].metadata", "object")
    add("metadata_null", mut(put("steps/3/metadata", None)), E, "steps[3].metadata", "object")
    add("metadata_string", mut(put("steps/3/metadata", "x")), E, "steps[3].metadata", "object")
    add("priority_string", mut(put("steps/3/metadata/priority", "high")), E, "steps[3].metadata.priority", "finite number")
    add("priority_null", mut(put("steps/3/metadata/priority", None)), E, "steps[3].metadata.priority", "finite number")
    add("priority_bool", mut(put("steps/3/metadata/priority", True)), E, "steps[3].metadata.priority", "finite number")
    add("priority_list", mut(put("steps/3/metadata/priority", [0.5])), E, "steps[3].metadata.priority", "finite number")
    add("priority_huge_int", text('"priority": 0.16666666666666666}', '"priority": 1' + "0" * 400 + "}"), E, "steps[1].metadata.priority", "finite number")
    add("priority_int_valid", mut(put("steps/3/metadata/priority", 1)), V)
    add("priority_negative_valid", mut(put("steps/3/metadata/priority", -0.5)), V)
    add("metadata_mode_list", mut(put("steps/3/metadata/mode", [1])), V)

    # ---- labels
    add("labels_missing", mut(drop("labels")), E, "labels", "missing")
    add("labels_list", mut(put("labels", [1])), E, "labels", "object")
    add("labels_null", mut(put("labels", None)), E, "labels", "object")
    add("critical_missing", mut(drop("labels/critical_steps")), E, "labels.critical_steps", "missing")
    add("critical_null", mut(put("labels/critical_steps", None)), E, "labels.critical_steps", "list")
    add("critical_string", mut(put("labels/critical_steps", "0,4")), E, "labels.critical_steps", "list")
    add("critical_object", mut(put("labels/critical_steps", {"0": 1})), E, "labels.critical_steps", "list")
    add("critical_float", mut(put("labels/critical_steps", [0.0])), E, "labels.critical_steps[0]", "integer")
    add("critical_bool", mut(put("labels/critical_steps", [True])), E, "labels.critical_steps[0]", "integer")
    add("critical_string_item", mut(put("labels/critical_steps", ["4"])), E, "labels.critical_steps[0]", "integer")
    add("critical_negative", mut(put("labels/critical_steps", [-1])), E, "labels.critical_steps[0]", "outside")
    add("critical_past_end", mut(put("labels/critical_steps", [0, 12])), E, "labels.critical_steps[1]", "outside")
    add("critical_repeated", mut(put("labels/critical_steps", [4, 4])), E, "labels.critical_steps[1]", "twice")
    add("critical_empty_valid", mut(lambda d: d["labels"].update(critical_steps=[], total_drift_events=0)), V)
    add("critical_unsorted_valid", mut(put("labels/critical_steps", [4, 0])), V)
    add("breaking_null", mut(put("labels/breaking_changes", None)), E, "labels.breaking_changes", "list")
    add("breaking_bool_item", mut(put("labels/breaking_changes", [True])), E, "labels.breaking_changes[0]", "integer")
    add("breaking_past_end", mut(put("labels/breaking_changes", [99])), E, "labels.breaking_changes[0]", "outside")
    add("drift_events_negative", mut(put("labels/total_drift_events", -1)), E, "labels.total_drift_events", "non-negative")
    add("drift_events_float", mut(put("labels/total_drift_events", 2.0)), E, "labels.total_drift_events", "integer")
    add("drift_events_bool", mut(put("labels/total_drift_events", True)), E, "labels.total_drift_events", "integer")
    add("drift_events_string", mut(put("labels/total_drift_events", "2")), E, "labels.total_drift_events", "integer")
    add("drift_events_null", mut(put("labels/total_drift_events", None)), E, "labels.total_drift_events", "integer")
    add("drift_events_below_critical", mut(put("labels/total_drift_events", 1)), E, "labels.total_drift_events", "critical")
    add("drift_events_zero_with_critical", mut(put("labels/total_drift_events", 0)), E, "labels.total_drift_events", "critical")
    add("drift_events_above_critical_valid", mut(put("labels/total_drift_events", 5)), V)
    add("drift_events_missing_valid", mut(drop("labels/total_drift_events")), V)
    add("deprecated_negative", mut(put("labels/deprecated_apis", -1)), E, "labels.deprecated_apis", "non-negative")
    add("deprecated_float", mut(put("labels/deprecated_apis", 1.5)), E, "labels.deprecated_apis", "integer")
    add("mode_int", mut(put("labels/mode", 5)), V)
    add("mode_list", mut(put("labels/mode", [1])), V)
    add("mode_null", mut(put("labels/mode", None)), V)
    add("episode_id_object", mut(put("labels/episode_id", {"a": 1})), V)
    add("episode_id_list", mut(put("labels/episode_id", [1, 2])), V)

    # ---- utilities
    add("utility_missing", mut(drop("labels/utility_by_step")), E, "labels.utility_by_step", "missing")
    add("utility_null", mut(put("labels/utility_by_step", None)), E, "labels.utility_by_step", "object")
    add("utility_list", mut(put("labels/utility_by_step", [1.0] * T)), E, "labels.utility_by_step", "object")
    add("utility_string", mut(put("labels/utility_by_step", "x")), E, "labels.utility_by_step", "object")
    add("utility_key_word", mut(_util_key("3", "three")), E, "labels.utility_by_step['three']", "integer")
    add("utility_key_float", mut(_util_key("3", "3.0")), E, "labels.utility_by_step['3.0']", "integer")
    add("utility_key_space", mut(_util_key("3", " 3")), E, "labels.utility_by_step[' 3']", "canonical")
    add("utility_key_plus", mut(_util_key("3", "+3")), E, "labels.utility_by_step['+3']", "canonical")
    add("utility_key_padded", mut(_util_key("3", "03")), E, "labels.utility_by_step['03']", "canonical")
    add("utility_key_minus_zero", mut(_util_key("0", "-0")), E, "labels.utility_by_step['-0']", "canonical")
    add("utility_key_arabic_digit", mut(_util_key("3", "\u0663")), E, "labels.utility_by_step['\u0663']", "canonical")
    add("utility_key_underscore", mut(_util_key("10", "1_0")), E, "labels.utility_by_step['1_0']", "canonical")
    add("utility_key_past_end", mut(put("labels/utility_by_step/12", 1.0)), E, "labels.utility_by_step['12']", "outside" )
    add("utility_key_negative", mut(put("labels/utility_by_step/-1", 1.0)), E, "labels.utility_by_step['-1']", "outside" )
    add("utility_key_huge", mut(_util_key("3", "9" * 5000)), E, None, "integer")
    add("utility_missing_step", mut(drop("labels/utility_by_step/5")), E, "labels.utility_by_step", "no utility")
    add("utility_value_string", mut(put("labels/utility_by_step/3", "1.0")), E, "labels.utility_by_step['3']", "number")
    add("utility_value_bool", mut(put("labels/utility_by_step/3", True)), E, "labels.utility_by_step['3']", "number")
    add("utility_value_null", mut(put("labels/utility_by_step/3", None)), E, "labels.utility_by_step['3']", "number")
    add("utility_value_list", mut(put("labels/utility_by_step/3", [1.0])), E, "labels.utility_by_step['3']", "number")
    add("utility_value_negative", mut(put("labels/utility_by_step/3", -0.5)), E, "labels.utility_by_step['3']", "non-negative")
    add("utility_1e300", mut(put("labels/utility_by_step/3", 1e300)), E, "labels.utility_by_step['3']", "at most")
    add("utility_9e18", mut(put("labels/utility_by_step/3", 9.3e18)), E, "labels.utility_by_step['3']", "at most")
    add("utility_just_above_bound", mut(put("labels/utility_by_step/3", 1e12 + 1)), E, "labels.utility_by_step['3']", "at most")
    add("utility_int_above_bound", mut(put("labels/utility_by_step/3", 10**12 + 1)), E, "labels.utility_by_step['3']", "at most")
    add("utility_at_bound_valid", mut(put("labels/utility_by_step/3", 1e12)), V)
    add("utility_int_at_bound_valid", mut(put("labels/utility_by_step/3", 10**12)), V)
    add("utility_all_at_bound_valid", mut(lambda d: d["labels"].update(utility_by_step={str(t): 1e12 for t in range(T)})), V)
    add("utility_tiny_valid", mut(put("labels/utility_by_step/3", 1e-300)), V)
    # fmt: on
    return c


CASES = _cases()


def classify(path: Any, case: Case) -> tuple[str, str]:
    """(``named`` / ``raw`` / ``accepted``, detail) for loading ``path`` with ``load_jsonl``."""
    from wpb_gym.episodes.jsonl import EpisodeFormatError, load_jsonl

    try:
        episodes = load_jsonl(path)
    except EpisodeFormatError as exc:
        named = str(exc).startswith(f"{path}:") and exc.line is not None
        return ("named" if named else "raw"), f"{type(exc).__name__}: {str(exc)[:160]}"
    except RecursionError as exc:
        return "raw", f"RecursionError: {str(exc)[:120]}"
    except Exception as exc:  # noqa: BLE001 - the point is to see which ones escape
        return "raw", f"{type(exc).__name__}: {str(exc)[:160]}"
    return "accepted", f"{len(episodes)} episodes"


def downstream(path: Any, out: Any) -> str | None:
    """None when ``wpb eval`` and ``wpb inspect`` run on the file, else what went wrong."""
    import contextlib
    import io

    from wpb_gym import cli

    agents = ",".join(
        ["no_mem", "last_kb", "merge_aggressive", "change_detector", "breaking_detector"]
        + ["priority_threshold", "priority_greedy", "oracle_optimal"]
    )
    runs = [
        [
            "eval",
            "--episodes",
            str(path),
            "--agents",
            agents,
            "--budgets",
            "1024,1000000",
            "--out",
            str(out),
            "--force",
            "--quiet",
        ],
        ["inspect", str(path), "--budgets", "1024,1000000"],
    ]
    for argv in runs:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = cli.main(argv)
        except SystemExit as exc:
            rc = exc.code
        except Exception as exc:  # noqa: BLE001
            return f"wpb {argv[0]}: {type(exc).__name__}: {str(exc)[:160]}"
        if rc not in (0, None):
            return f"wpb {argv[0]}: exit {rc}: {err.getvalue().strip()[-160:]}"
    return None


def main() -> None:
    import sys
    import tempfile
    from collections import Counter
    from pathlib import Path

    sys.setrecursionlimit(sys.getrecursionlimit())  # unchanged: the loader must cope with the default
    check_downstream = "--downstream" in sys.argv
    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            path = Path(tmp) / f"{case.id}{case.suffix}"
            path.write_bytes(case.build())
            outcome, detail = classify(path, case)
            if case.expect == "error":
                verdict = {"named": "named error", "raw": "RAW EXCEPTION", "accepted": "WRONGLY ACCEPTED"}[outcome]
            else:
                verdict = "valid" if outcome == "accepted" else "VALID BUT REFUSED"
                if outcome == "accepted" and check_downstream and path.stat().st_size and detail != "0 episodes":
                    broken = downstream(path, Path(tmp) / "run")
                    if broken:
                        verdict, detail = "VALID BUT BREAKS EVAL", broken
            counts[verdict] += 1
            print(f"{verdict:22} {case.id:36} {detail}")
    malformed = sum(1 for case in CASES if case.expect == "error")
    print(
        f"\n{len(CASES)} files ({malformed} malformed, {len(CASES) - malformed} valid): "
        + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    )


if __name__ == "__main__":
    main()
