"""The keepers' parameters tuned per query tier and budget (``tuned_keepers.json``).

The file is written by ``python -m agents.scripted.keeper_tuning`` (see its docstring for
the command and the training seeds) and ships with the package; each entry holds a keeper's
parameters for one (tier, budget) and the mean query accuracy they reached on the training
episodes.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

TUNED_FILE = "tuned_keepers.json"


@functools.lru_cache(maxsize=1)
def tuned_table() -> dict[str, Any]:
    """The tuned parameters: ``{keeper: {tier: {budget: {"params": {...}, "accuracy": float}}}}``."""
    source = resources.files(__package__).joinpath(TUNED_FILE)
    if not source.is_file():
        return {}
    return json.loads(source.read_text(encoding="utf-8"))


def tuned_params(keeper: str, mode: Any, budget: int) -> dict[str, Any]:
    """The parameters tuned for ``keeper`` on tier ``mode`` at ``budget`` bytes ({} if none were)."""
    entry = tuned_table().get(keeper, {}).get(str(mode), {}).get(str(budget))
    return dict(entry["params"]) if entry else {}
