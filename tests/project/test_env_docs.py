"""The environment's documentation cannot drift from its code: the feature tables of the env's
docstring and of ``docs/environment.md`` are the ones ``observation/features.py`` keeps, in
observation order, and the page's arguments table lists every argument of the env."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.observation.features import (
    MEMORY_FEATURES,
    SLOT_CONTEXT_FEATURES,
    SLOT_FEATURES,
    STEP_FEATURES,
    feature_tables,
)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "environment.md"


def test_every_feature_is_documented_in_the_env_docstring_and_the_environment_page():
    doc = WritePolicyBenchEnv.__doc__
    page_text = PAGE.read_text(encoding="utf-8")
    for name in (*STEP_FEATURES, *MEMORY_FEATURES, *SLOT_FEATURES, *SLOT_CONTEXT_FEATURES, "priority"):
        assert re.search(rf"^\s*\|\s*{name}\s*\|", doc, re.M), f"{name} missing from the env docstring tables"
        assert re.search(rf"^\|\s*`?{name}`?\s*\|", page_text, re.M), f"{name} missing from docs/environment.md"
    assert feature_tables() in page_text, "docs/environment.md's tables differ from observation/features.py's"
    # The tables list the features in observation order.
    rows = re.findall(r"^\s*\|\s*([a-z_]+)\s*\|", doc, re.M)
    step_rows = rows[rows.index("cost_budget") : rows.index("cost_budget") + len(STEP_FEATURES) + 1]
    assert tuple(step_rows) == (*STEP_FEATURES, "priority")


def test_the_environment_page_lists_every_argument_of_the_env_in_order():
    page = PAGE.read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\*\*)?(\w+)` \|", page, re.M)
    documented = [("**" if stars else "") + name for stars, name in rows]
    parameters = inspect.signature(WritePolicyBenchEnv.__init__).parameters.values()
    expected = [("**" if p.kind is p.VAR_KEYWORD else "") + p.name for p in parameters if p.name != "self"]
    assert documented[: len(expected)] == expected

