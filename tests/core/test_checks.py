"""``wpb_gym.core.checks.require_int``: the one integer check of the package's arguments."""

from __future__ import annotations

import numpy as np
import pytest

from wpb_gym import ByteBudget, WritePolicyBenchEnv, generate_episode, make_config
from wpb_gym.core.checks import require_int


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
