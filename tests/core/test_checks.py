"""``wpb_gym.core.checks``: the integer and finite-number checks of the package's arguments."""

from __future__ import annotations

import numpy as np
import pytest

from wpb_gym import ByteBudget, WritePolicyBenchEnv, generate_episode, make_config
from wpb_gym.core.checks import finite, require_finite, require_int


def test_integers_pass_as_python_ints():
    assert require_int(3, "n") == 3 and require_int(0, "n") == 0
    value = require_int(np.int64(5), "n", 1)
    assert value == 5 and type(value) is int


@pytest.mark.parametrize(
    ("value", "minimum", "message"),
    [
        (True, 0, "n must be a non-negative int, got True"),
        (np.bool_(True), 0, "n must be a non-negative int, got"),
        (1.0, 0, "n must be a non-negative int, got 1.0"),
        ("2", 0, "n must be a non-negative int, got '2'"),
        (-1, 0, "n must be a non-negative int, got -1"),
        (0, 1, "n must be a positive int, got 0"),
        (2, 3, "n must be an int >= 3, got 2"),
    ],
)
def test_anything_else_is_refused_by_name(value, minimum, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        require_int(value, "n", minimum)


def test_the_package_reads_its_integer_arguments_through_it():
    with pytest.raises(ValueError, match="ByteBudget.max_bytes must be a non-negative int, got -1"):
        ByteBudget(-1)
    with pytest.raises(ValueError, match="slots must be a positive int, got 0"):
        WritePolicyBenchEnv(slots=0)
    with pytest.raises(ValueError, match=r"options\['episode_index'\] must be a non-negative int, got True"):
        WritePolicyBenchEnv().reset(options={"episode_index": True})
    with pytest.raises(ValueError, match="index must be a non-negative int, got -2"):
        generate_episode(make_config("default"), seed=0, index=-2)
    # A NumPy seed is the same seed.
    a, b = generate_episode(make_config("default"), seed=np.int64(4)), generate_episode(make_config("default"), seed=4)
    assert a.steps == b.steps


@pytest.mark.parametrize(("value", "expected"), [
    (1.5, True), (-3, True), (np.float32(2.0), True), (float("inf"), False), (float("nan"), False),
    (10**308, True), (10**400, False), (-(10**400), False),  # past float64: False, not an OverflowError
])
def test_finite_is_math_isfinite_without_overflow(value, expected):
    assert finite(value) is expected


@pytest.mark.parametrize(("value", "message"), [
    (True, "x must be a finite number, got True"), ("1", "x must be a finite number, got '1'"),
    (float("nan"), "x must be a finite number, got nan"), ([1], r"x must be a finite number, got \[1\]"),
])
def test_require_finite_refuses_what_is_not_a_finite_number(value, message):
    assert require_finite(np.int64(3), "x") == 3.0 and type(require_finite(2, "x")) is float
    with pytest.raises(ValueError, match=message):
        require_finite(value, "x")


def test_numbers_past_float64_are_refused_by_name_not_with_an_overflow():
    with pytest.raises(ValueError, match="weight of 'f1' must be a finite number"):
        WritePolicyBenchEnv(reward={"f1": 10**400})
    with pytest.raises(ValueError, match="GeneratorConfig.doc_utility: expected a finite number"):
        make_config("default", doc_utility=10**400)
    from wpb_gym.core.checks import InputError
    from wpb_gym.core.setting_values import parse_float, parse_seconds
    from wpb_gym.evaluation.referee import RunLimits

    for parse in (parse_float, parse_seconds):
        with pytest.raises(InputError, match="c.yaml: x: expected a"):
            parse(10**400, "c.yaml: x")
    with pytest.raises(ValueError, match="max_seconds_per_step must be a positive number"):
        RunLimits(max_seconds_per_step=10**400)
