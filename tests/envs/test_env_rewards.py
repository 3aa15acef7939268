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
