"""Figures a reader can compare at a glance: one style per agent in every figure of every run."""

from __future__ import annotations

from agents.registry import list_agents
from wpb_gym.evaluation.reports.plots import LEARNER_AGENTS, SHIPPED_AGENTS, policy_style


def test_every_registered_scripted_oracle_and_learner_agent_has_its_own_fixed_style():
    entries = list_agents()
    assert {e.name for e in entries if e.kind in ("scripted", "oracle")} == set(SHIPPED_AGENTS)
    assert {e.name for e in entries if e.kind == "learner"} == set(LEARNER_AGENTS)
    styles = [policy_style(name) for name in (*SHIPPED_AGENTS, *LEARNER_AGENTS)]
    assert len({colour for colour, *_ in styles}) == len(styles)  # no two share a colour
    assert [highlighted for *_, highlighted in styles] == [False] * len(SHIPPED_AGENTS) + [True] * len(LEARNER_AGENTS)


def test_other_policies_are_highlighted_styled_by_their_label_and_seeds_share_a_colour():
    seeds = [policy_style(f"mppo_s{s}") for s in range(3)]
    assert all(style[3] for style in seeds) and seeds[0] == policy_style("mppo_s0")
    assert len({style[0] for style in seeds}) == 1 and len({style[1] for style in seeds}) == 3
    fixed = {policy_style(name)[0] for name in (*SHIPPED_AGENTS, *LEARNER_AGENTS)}
    assert seeds[0][0] not in fixed
    labels = [f"{a}_s{s}" for a in ("mppo", "eg", "ucb") for s in range(3)] + ["sb3:best_model"]
    assert len({policy_style(label)[:2] for label in labels}) == len(labels)  # the shipped Makefile's labels


def test_a_shipped_agent_with_other_parameters_keeps_its_colour_and_is_not_highlighted():
    colour, marker, _, highlighted = policy_style("last_kb(max_expires=3)")
    assert colour == policy_style("last_kb")[0] and not highlighted
