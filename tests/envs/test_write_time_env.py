"""``write_time=`` in the environment: the mask is the store's verdict, the observation says the
time left, and the utility reward's oracle respects the write time."""

from __future__ import annotations

import gymnasium as gym
import pytest
from limits_checks import play_checking_the_mask, play_writing_when_allowed

import wpb_gym  # noqa: F401  (registers the ids)
from wpb_gym.core.write_time import WriteTime
from wpb_gym.envs.store_limits import TIME_FEATURES
from wpb_gym.scoring.time_bounds import time_oracle_utility

TIME = "total=12,per_write=1,per_kb=1"


@pytest.mark.parametrize("mode", ["box", "dict"])
def test_the_mask_is_the_stores_verdict_and_the_time_left_is_observed(mode):
    env = gym.make("WritePolicyBench-v0", regime="breaking", budget_bytes=10240, write_time=TIME,
                   observation_mode=mode, slots=4)

    def time_observed(obs, base, done):
        extra = obs["limits"] if mode == "dict" else obs[-len(TIME_FEATURES):]
        store = base.store
        assert store.time_used <= 12
        if done:
            return
        assert extra[0] == pytest.approx(store.time_remaining() / 12)
        cost = base.step_details(base.t)[1]  # the current step
        assert extra[1] == float(WriteTime.parse(TIME).ticks(cost) <= store.time_remaining())

    assert play_checking_the_mask(env, range(2), "out_of_write_time", 0.7, time_observed) > 0


def test_the_utility_reward_sums_to_the_share_of_the_time_limited_optimum():
    env = gym.make("WritePolicyBench-v0", regime="contract_mix", budget_bytes=10240, write_time=TIME,
                   reward="utility", expire_cost=0.0)
    total, info, costs = play_writing_when_allowed(env, seed=2)
    optimum = time_oracle_utility(costs, env.unwrapped.episode.utilities, 10240, WriteTime.parse(TIME))
    assert optimum.exact and info["metrics"]["oracle_utility"] == pytest.approx(optimum.utility)
    assert total == pytest.approx(info["metrics"]["policy_utility"] / optimum.utility)


def test_write_time_is_refused_where_it_cannot_be_modelled():
    with pytest.raises(ValueError, match="neg_regret"):
        gym.make("WritePolicyBench-v0", write_time=TIME, reward="neg_regret")
    with pytest.raises(ValueError, match="one at a time"):
        gym.make("WritePolicyBench-v0", write_time=TIME, kind_budgets="doc=10%")
    with pytest.raises(ValueError, match="write_time: expected total=TICKS"):
        gym.make("WritePolicyBench-v0", write_time="per_kb=1")
