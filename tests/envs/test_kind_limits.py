"""``kind_budgets=`` in the environment: the mask is the store's verdict, the observation says
each kind's room, the rewards' oracle respects the limits, and what cannot model them says so."""

from __future__ import annotations

import gymnasium as gym
import pytest
from limits_checks import play_checking_the_mask, play_writing_when_allowed

import wpb_gym  # noqa: F401  (registers the ids)
from wpb_gym.core.kind_budgets import KINDS, KindShares, content_kind
from wpb_gym.envs.store_limits import KIND_FEATURES
from wpb_gym.scoring.kind_bounds import kind_oracle_utility, step_kinds

KINDS_TEXT = "endpoint=40%,doc=25%,guide=10%"


@pytest.mark.parametrize("mode", ["box", "dict"])
def test_the_mask_is_the_stores_verdict_and_observations_stay_in_their_space(mode):
    env = gym.make("WritePolicyBench-v0", regime="mixed_sizes", budget_bytes=8192, kind_budgets=KINDS_TEXT,
                   observation_mode=mode, slots=4)

    def within_limits(obs, base, done):
        for kind, limit in base.store.kind_budgets.as_dict().items():
            assert base.store.kind_used(kind) <= limit

    # Mostly WRITE when allowed: memory fills and the limits bind.
    refused_by_kind = play_checking_the_mask(env, range(3), "over_kind_budget", 0.8, within_limits)
    assert refused_by_kind > 0  # the limits were met, not only the total


def test_the_kind_features_are_each_kinds_room_and_whether_the_step_fits_its_own():
    env = gym.make("WritePolicyBench-v0", regime="mixed_sizes", budget_bytes=8192, kind_budgets=KINDS_TEXT)
    obs, info = env.reset(seed=1)
    base = env.unwrapped
    assert env.observation_space.shape == (base.layout.size + len(KIND_FEATURES),)
    for _ in range(60):
        store, t = base.store, base.t
        features = obs[-len(KIND_FEATURES):]
        for i, kind in enumerate(KINDS):
            assert features[i] == pytest.approx(min(1.0, store.kind_remaining(kind) / 8192))
        step = base.episode.steps[t]
        own = store.kind_remaining(content_kind(step.observation))
        assert features[-1] == float(base.step_details(t)[1] <= own)
        obs, _, terminated, _, info = env.step(1 if info["action_mask"][1] else 0)
        if terminated:
            break


def test_the_utility_reward_sums_to_the_share_of_the_kind_limited_optimum():
    env = gym.make("WritePolicyBench-v0", regime="contract_mix", budget_bytes=10240, kind_budgets=KINDS_TEXT,
                   reward="utility", expire_cost=0.0)
    total, info, costs = play_writing_when_allowed(env, seed=2)
    base = env.unwrapped
    limits = KindShares.parse(KINDS_TEXT).resolve(10240)
    optimum = kind_oracle_utility(costs, step_kinds(base.episode), base.episode.utilities, 10240, limits)
    assert optimum.exact and base.oracle_utility() == pytest.approx(optimum.utility)
    assert info["metrics"]["oracle_utility"] == pytest.approx(optimum.utility)
    assert total == pytest.approx(info["metrics"]["policy_utility"] / optimum.utility)


def test_what_cannot_model_kind_budgets_refuses_them_by_name_and_vector_envs_take_them():
    with pytest.raises(ValueError, match="neg_regret"):
        gym.make("WritePolicyBench-v0", kind_budgets="doc=10%", reward="neg_regret")
    with pytest.raises(ValueError, match="kind_budgets: unknown kind 'docs'"):
        gym.make("WritePolicyBench-v0", kind_budgets="docs=10%")
    for mode in ("sync", "vector_entry_point"):
        envs = gym.make_vec("WritePolicyBench-v0", num_envs=2, vectorization_mode=mode, kind_budgets="doc=10%")
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, gym.make("WritePolicyBench-v0").observation_space.shape[0] + len(KIND_FEATURES))
