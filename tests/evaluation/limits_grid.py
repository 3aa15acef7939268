"""What the tests of the limits beside the budget share: agents as grid specs, rows keyed by run,
and the isolated grid's rows against the in-process ones."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from agents.registry import agent_entry, make_agent
from wpb_gym.core.store_limits import StoreLimits
from wpb_gym.evaluation.grid import PolicySpec, run_grid


def specs(names: Sequence[str]) -> list[PolicySpec]:
    return [PolicySpec(n, partial(make_agent, n), agent_entry(n).track) for n in names]


def by_run(rows: Sequence[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Rows keyed by (regime, episode, budget, policy)."""
    return {(r["mode"], r["episode_index"], r["budget_bytes"], r["policy"]): r for r in rows}


def assert_isolated_rows_match(refs: Sequence[Any], rows: Sequence[dict[str, Any]], names: Sequence[str],
                               budgets: Sequence[int], limits: StoreLimits) -> None:
    """The isolated grid over the first two episodes gives the in-process ``rows`` of ``names``."""
    isolated = run_grid(refs[:2], specs(names), budgets, ("privileged",), isolate=True, store_limits=limits)
    keys = {(ref.mode, ref.index) for ref in refs[:2]}
    expected = [r for r in rows if r["policy"] in names and (r["mode"], r["episode_index"]) in keys]
    assert sorted(isolated, key=str) == sorted(expected, key=str)
