"""The encoder's caches, driven through their eviction branches: with every limit set to
(almost) nothing, an env must produce exactly the observations, masks and rewards of an env
with the shipped limits, over episodes of several lengths, regimes and tracks."""

from __future__ import annotations

import numpy as np
import pytest

from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.observation import encoder as encoder_module
from wpb_gym.envs.observation import stream_table as table_module
from python_path import python_env

TINY = {
    (encoder_module, "_ROW_CACHE_LIMIT"): 1,
    (encoder_module, "_MASK_CACHE_LIMIT"): 1,
    (encoder_module, "_LENGTH_CACHE_LIMIT"): 1,
    (table_module, "_SHAPES_LIMIT"): 1,
    (table_module, "_BITS_LIMIT"): 1,
    (table_module, "_SHAPES_TEXT_LIMIT"): 0,
}


def play(env: WritePolicyBenchEnv, rng_seed: int, resets: list[dict]) -> list:
    """Random valid actions over a few resets; everything the env returned."""
    rng = np.random.default_rng(rng_seed)
    seen = []
    for options in resets:
        obs, info = env.reset(seed=rng_seed, options=options)
        seen.append((obs.copy(), info["action_mask"].copy()))
        done = False
        while not done:
            valid = np.flatnonzero(info["action_mask"])
            obs, reward, done, _, info = env.step(int(rng.choice(valid)))
            seen.append((obs.copy(), info["action_mask"].copy(), reward))
    return seen


@pytest.mark.parametrize("track", ["unprivileged", "privileged"])
@pytest.mark.parametrize("regime", ["default", "contract_mix"])
def test_evicting_every_cache_changes_nothing(monkeypatch, regime, track):
    kwargs = {"regime": regime, "track": track, "budget_bytes": 1500, "slots": 3, "dense_reward": True, "api_pool": 8}
    resets = [{"length": 40}, {"length": 25}, {"length": 40, "episode_index": 3}, {"length": 12}]
    expected = play(python_env(**kwargs), 7, resets)
    for (module, name), value in TINY.items():
        monkeypatch.setattr(module, name, value)
    env = python_env(**kwargs)
    got = play(env, 7, resets)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    # The caches were emptied on the way (each holds at most its limit plus the entry just added).
    encoder = env.observation_encoder
    assert len(encoder._mask_arrays) <= 1 and len(encoder._write_rows) <= 1
    assert len(encoder._slot_heads_by_length) <= 1
    table = encoder.table
    assert len(encoder._middle_rows) == len(set(zip(table.kinds, table.deprecated, encoder._seen, strict=True)))
    assert encoder._shapes.by_text == {}
