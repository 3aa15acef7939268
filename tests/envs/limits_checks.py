"""A play loop the limits' env tests share: at every state the mask is checked against the store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def play_checking_the_mask(env: Any, seeds: range, refusal: str, write_share: float,
                           check_state: Callable[[Any, Any, bool], None]) -> int:
    """Play ``env``'s episodes (WRITE when allowed with probability ``write_share``, else a random
    allowed action). At every state: the observation is in its space, the mask of WRITE and of each
    shown item's MERGE is the store's verdict, and ``check_state(obs, base_env, done)`` holds; every
    allowed action is accepted. Returns how many checked actions the store refused for ``refusal``."""
    rng = np.random.default_rng(0)
    refused = 0
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        base = env.unwrapped
        done = False
        while not done:
            assert env.observation_space.contains(obs)
            check_state(obs, base, False)
            mask = info["action_mask"]
            for a in [1, *(2 + k for k in range(len(base.observation_encoder.slots)))]:  # the shown items' MERGEs
                decision = base.store.check(base.decode_action(a), base.t)
                assert bool(mask[a]) == decision.accepted, (a, decision)
                refused += decision.reason.value == refusal
            a = 1 if mask[1] and rng.random() < write_share else int(rng.choice(np.flatnonzero(mask)))
            obs, _, done, _, info = env.step(a)
            assert info["accepted"]
        assert env.observation_space.contains(obs)
        check_state(obs, base, True)
    return refused


def play_writing_when_allowed(env: Any, seed: int) -> tuple[float, dict[str, Any], np.ndarray]:
    """One episode of ``env`` writing every step the mask allows: the rewards summed, the last
    info, and the WRITE cost of each step on the env's track (what a bound is computed from)."""
    from wpb_gym.core.tracks import track_costs

    obs, info = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        obs, reward, done, _, info = env.step(1 if info["action_mask"][1] else 0)
        total += reward
    base = env.unwrapped
    return total, info, track_costs(base.episode, base.track)
