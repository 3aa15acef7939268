"""The hindsight bound on query accuracy, against brute force on small episodes.

Brute force walks every memory a policy can reach, step by step (any expiries, then SKIP,
WRITE or MERGE onto a held base of the same endpoint), and scores each checkpoint with the
reader on the memory as that step arrived: the best it finds is the true optimum.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym.core.accounting import canonical_delta, merge_cost
from wpb_gym.core.queries import answer_of, same_answer
from wpb_gym.core.tracks import track_costs
from wpb_gym.episodes.generators.queries import generate_query_episode, query_config
from wpb_gym.scoring.queries import episode_queries
from wpb_gym.scoring.query_bound import query_bound, replay_schedule

TINY = {"endpoints": 3, "families": 2, "checkpoint_interval": 3, "queries_per_checkpoint": 4, "max_params": 4,
        "summary_max_bytes": 600, "revert_window": 2}


def _brute_force(episode, budget: int) -> int:
    observations, _ = episode.columns()
    costs = track_costs(episode, "unprivileged")
    queries = episode_queries(episode)

    def answered(memory: frozenset, t: int) -> int:
        held = {m[0]: m for m in memory}
        total = 0
        for q in (q for q in queries if q.t == t):
            for m in sorted((m for m in memory if observations[m[0]]["api"] == q.api), reverse=True):
                step, base = m
                if base is None:
                    obs = observations[step]
                elif base in held:
                    obs = {**observations[base], **canonical_delta(observations[step], observations[base])}
                else:
                    continue
                total += same_answer(answer_of(obs, q.fact, q.argument), q.answer)
                break
        return total

    def cost(m) -> int:
        step, base = m
        return int(costs[step]) if base is None else merge_cost(canonical_delta(observations[step], observations[base]))

    best: dict[frozenset, int] = {frozenset(): 0}
    for t, obs in enumerate(observations):
        after: dict[frozenset, int] = {}
        for memory, value in best.items():
            value += answered(memory, t)
            items = sorted(memory)
            for mask in range(1 << len(items)):  # every set of expiries
                kept = frozenset(m for k, m in enumerate(items) if not mask >> k & 1)
                used = sum(cost(m) for m in kept)
                options = [kept]
                if "api" in obs:
                    options.append(kept | {(t, None)})
                    for step, base in kept:
                        if base is None and observations[step]["api"] == obs["api"]:
                            if canonical_delta(obs, observations[step]):
                                options.append(kept | {(t, step)})
                for option in options:
                    if option is not kept and used + cost(next(iter(option - kept))) > budget:
                        continue
                    if after.get(option, -1) < value:
                        after[option] = value
        best = after
    return max(best.values())


def _tiny(seed: int, length: int):
    return generate_query_episode(query_config("queries_easy", **TINY, length=length), seed, 0)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), length=st.integers(8, 11), budget=st.sampled_from([250, 450, 800, 1600]))
def test_the_bound_meets_brute_force_on_small_episodes(seed, length, budget):
    episode = _tiny(seed, length)
    truth = _brute_force(episode, budget)
    asked = len(episode.labels["queries"])
    relaxed = query_bound(episode, budget, time_limit=10)
    assert relaxed.feasible * asked <= truth + 1e-9 <= relaxed.upper * asked + 1e-9
    exact = query_bound(episode, budget, time_limit=10, newest=True)
    assert exact.exact
    assert round(exact.feasible * asked) == truth == round(exact.upper * asked)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), length=st.integers(12, 14), budget=st.sampled_from([250, 450, 800]))
def test_the_bound_meets_brute_force_across_three_or_four_checkpoints(seed, length, budget):
    # Budgets that bind at several checkpoints: what is dropped before one is gone at the next.
    episode = _tiny(seed, length)
    assert len(episode.labels["checkpoint_steps"]) >= 3
    truth = _brute_force(episode, budget)
    asked = len(episode.labels["queries"])
    relaxed = query_bound(episode, budget, time_limit=10)
    assert relaxed.feasible * asked <= truth + 1e-9 <= relaxed.upper * asked + 1e-9
    exact = query_bound(episode, budget, time_limit=10, newest=True)
    assert exact.exact and round(exact.feasible * asked) == truth == round(exact.upper * asked)


def test_the_schedule_replays_to_its_feasible_value_and_stays_in_budget():
    episode = generate_query_episode(query_config("queries_easy", endpoints=20, families=4, length=20 + 8 * 10,
                                                  checkpoint_interval=10, queries_per_checkpoint=30,
                                                  summary_max_bytes=800), 3, 0)
    for budget in (1024, 4096):
        bound = query_bound(episode, budget, time_limit=5)
        assert bound.schedule
        score = replay_schedule(episode, bound.schedule, budget)
        assert score.accuracy == pytest.approx(bound.feasible)
        assert 0 < bound.feasible <= bound.upper <= 1


def test_an_episode_without_queries_has_a_zero_bound():
    from wpb_gym.episodes.generators.paper import generate_episode, make_config

    bound = query_bound(generate_episode(make_config("default"), 0, 0), 10240)
    assert (bound.upper, bound.feasible, bound.asked, bound.exact) == (0.0, 0.0, 0, True)


def test_the_rounded_schedule_holds_one_item_per_timestep():
    # On this episode, at a budget where every endpoint fits, the relaxation splits some steps
    # between their WRITE and a MERGE onto an earlier snapshot; the rounding used to hold both,
    # a schedule no store can play (and sorting it failed on None against a base step).
    episode = generate_query_episode(query_config("queries_easy", endpoints=64, families=4, length=64 + 40 * 15,
                                                  checkpoint_interval=40, queries_per_checkpoint=100), 1, 0)
    bound = query_bound(episode, 1 << 20, time_limit=0)
    steps = [step for step, _, _ in bound.schedule]
    assert len(steps) == len(set(steps))
    assert replay_schedule(episode, bound.schedule, 1 << 20).accuracy == pytest.approx(bound.feasible)
    assert 0 < bound.feasible <= bound.upper <= 1
