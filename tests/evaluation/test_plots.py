"""Figures a reader can compare at a glance: one style per agent in every figure of every run."""

from __future__ import annotations

from agents.registry import list_agents
from wpb_gym.evaluation.reports.plots import SHIPPED_AGENTS, policy_style


def test_every_shipped_scripted_and_oracle_agent_has_its_own_fixed_style():
    shipped = {entry.name for entry in list_agents() if entry.kind in ("scripted", "oracle")}
    assert shipped == set(SHIPPED_AGENTS)
    styles = [policy_style(name) for name in SHIPPED_AGENTS]
    assert len({colour for colour, *_ in styles}) == len(SHIPPED_AGENTS)  # no two share a colour
    assert not any(highlighted for *_, highlighted in styles)


def test_other_policies_are_highlighted_and_styled_by_their_label_alone():
    learned = policy_style("mppo_s0")
    assert learned == policy_style("mppo_s0") and learned[3]
    shipped_colours = {policy_style(name)[0] for name in SHIPPED_AGENTS}
    assert learned[0] not in shipped_colours
