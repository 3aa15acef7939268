"""Dense rewards of WritePolicyBench-v0 add up exactly to the terminal reward, and their running
sum is the potential the reference (``envs.observation.reference``) computes from the store."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_env_properties import REWARDS, actions_until_done, choices, env_configs, make_env, pick

from wpb_gym.envs.observation.reference import potential, terminal_value


def weights(spec) -> dict[str, float]:
    return {spec: 1.0} if isinstance(spec, str) else spec


@pytest.mark.parametrize("spec", REWARDS, ids=str)
@settings(max_examples=25)
@given(kwargs=env_configs(), choice_list=choices, seed=st.integers(0, 1000))
def test_dense_rewards_add_up_to_the_terminal_reward(spec, kwargs, choice_list, seed):
    dense = make_env(kwargs, reward=spec, dense_reward=True)
    terminal = make_env(kwargs, reward=spec, dense_reward=False)
    dense.reset(seed=seed)
    terminal.reset(seed=seed)
    dense_rewards, terminal_rewards = [], []
    for choice in actions_until_done(choice_list):
        a = pick(dense, choice)
        _, r_dense, done, _, info = dense.step(a)
        _, r_terminal, done_terminal, _, info_terminal = terminal.step(a)
        assert done == done_terminal
        dense_rewards.append(r_dense)
        terminal_rewards.append(r_terminal)
        if done:
            break
        assert r_terminal == 0.0
        # The running sum is the potential of the memory so far (up to float rounding).
        assert sum(dense_rewards) == pytest.approx(
            potential(dense.episode, dense.store, dense.t, weights(spec), dense.track), abs=1e-9
        )
    assert info["metrics"] == info_terminal["metrics"]
    total = 0.0
    for r in dense_rewards:
        total += r
    assert total == sum(dense_rewards) == terminal_rewards[-1]
    assert terminal_rewards[-1] == terminal_value(weights(spec), info["metrics"])


@pytest.mark.parametrize("dense", [True, False], ids=["dense", "terminal"])
@settings(max_examples=25)
@given(kwargs=env_configs(), choice_list=choices, seed=st.integers(0, 1000))
def test_an_expire_cost_is_paid_when_the_expire_is_taken(dense, kwargs, choice_list, seed):
    """Each accepted EXPIRE costs ``expire_cost`` at once; the rewards add up to the metric less
    the costs, and everything else (memory, metrics) is as without a cost."""
    cost = 0.03
    priced = make_env(kwargs, dense_reward=dense, expire_cost=cost)
    free = make_env(kwargs, dense_reward=dense)
    assert priced.expire_cost == cost and free.expire_cost == 0.0
    priced.reset(seed=seed)
    free.reset(seed=seed)
    total, expires = 0.0, 0
    for choice in actions_until_done(choice_list):
        a = pick(priced, choice)
        expire = a >= 2 + priced.K and bool(priced.action_masks()[a])
        _, r_priced, done, _, info = priced.step(a)
        _, r_free, _, _, info_free = free.step(a)
        total += r_priced
        expires += expire
        if done:
            break
        assert r_priced == pytest.approx(r_free - (cost if expire else 0.0), abs=1e-12)
    assert info["metrics"] == info_free["metrics"]
    assert total == pytest.approx(terminal_value({"f1": 1.0}, info["metrics"]) - cost * expires, abs=1e-9)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), True, "0.1"])
def test_an_expire_cost_is_a_finite_number_at_least_zero(bad):
    from wpb_gym.envs.env import WritePolicyBenchEnv

    with pytest.raises(ValueError, match="expire_cost"):
        WritePolicyBenchEnv(expire_cost=bad)


@pytest.mark.parametrize("bad", ["abc", "false", 1, None])
def test_dense_reward_is_a_switch(bad):
    from wpb_gym.envs.env import WritePolicyBenchEnv

    with pytest.raises(ValueError, match="dense_reward must be true or false"):
        WritePolicyBenchEnv(dense_reward=bad)
