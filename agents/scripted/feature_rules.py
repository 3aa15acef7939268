"""Scripted rules that read nothing but the environment's observation vector.

They show what the observation carries: ``BreakingRule`` is ``breaking_detector``'s rule
written over the env's features instead of the raw stream, so a policy network that sees the
same vector can in principle learn it. It can also serve as a teacher for imitation.

    env = gym.make("WritePolicyBench-v0", regime="contract_mix")
    rule = BreakingRule(env.unwrapped)
    obs, info = env.reset(seed=0)
    done = False
    while not done:
        obs, reward, done, truncated, info = env.step(rule(obs))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.observation.features import MEMORY_FEATURES

SKIP, WRITE = 0, 1
_CONTRACT_CHANGES = (
    "params_added_since_seen",
    "params_removed_since_seen",
    "required_added_since_seen",
    "required_removed_since_seen",
    "newly_deprecated_since_seen",
    "undeprecated_since_seen",
    "newly_removed_since_seen",
    "restored_since_seen",
)
# Yes/no changes; the others are shares of the parameter lists (0..1).
_CHANGE_FLAGS = frozenset(
    {"newly_deprecated_since_seen", "undeprecated_since_seen", "newly_removed_since_seen", "restored_since_seen"}
)
_BREAKING = (
    "params_removed_since_seen",
    "required_added_since_seen",
    "newly_deprecated_since_seen",
    "newly_removed_since_seen",
)


class BreakingRule:
    """``breaking_detector``'s decisions from a box observation of ``env`` (any track, any K).

    * A migration guide is written; an endpoint is written when its contract broke since its
      family was last shown (a parameter removed or newly required, newly deprecated or
      removed), or when its first sighting shows it removed.
    * When an endpoint's contract changed, every stored item of its family flagged
      ``reverted`` is expired first, and the step is then judged again (a revert is never
      itself breaking, so it is skipped).
    * A step to write that does not fit: if expiring every stored item larger than it would
      make room (``fits_if_larger_expired``), the largest item (always slot 0) is expired;
      otherwise the step is skipped.
    """

    def __init__(self, env: WritePolicyBenchEnv) -> None:
        if env.observation_mode != "box":
            raise ValueError("BreakingRule reads box observations (observation_mode='box')")
        step = {name: i for i, name in enumerate(env.step_features)}
        memory_start = len(env.step_features)
        self._slots_start = memory_start + len(MEMORY_FEATURES)
        self._slot_width = len(env.slot_features)
        self._slots_end = self._slots_start + env.K * self._slot_width
        self._slot = {name: i for i, name in enumerate(env.slot_features)}
        self.K = env.K
        self._guide = step["kind_guide"]
        self._endpoint = step["kind_endpoint"]
        self._seen = step["family_seen"]
        self._removed = step["removed"]
        self._fits = step["fits"]
        self._changes = [step[name] for name in _CONTRACT_CHANGES]
        # (changed_since_seen, the contract-change features, which of them are yes/no): what
        # imitation varies to make counterfactual states.
        self.contract_change_features = (
            step["changed_since_seen"],
            np.array(self._changes),
            np.array([name in _CHANGE_FLAGS for name in _CONTRACT_CHANGES]),
        )
        self._breaking = [step[name] for name in _BREAKING]
        self._fits_if_larger_expired = memory_start + MEMORY_FEATURES.index("fits_if_larger_expired")
        self._reverted_expired = memory_start + MEMORY_FEATURES.index("reverted_expired")

    def __call__(self, obs: np.ndarray) -> int:
        # The slot rows, without the features limits beside the budget append after them.
        slots = np.asarray(obs[self._slots_start : self._slots_end]).reshape(self.K, self._slot_width)
        if obs[self._guide]:
            return self._write(obs, slots)
        if not obs[self._endpoint]:
            return SKIP
        if not obs[self._seen]:
            return self._write(obs, slots) if obs[self._removed] else SKIP
        if not any(obs[i] for i in self._changes):
            return SKIP
        s = self._slot
        for k in range(self.K):
            row = slots[k]
            if row[s["present"]] and row[s["same_family"]] and row[s["reverted"]]:
                return self._expire(k)
        if obs[self._reverted_expired]:
            return SKIP  # the step undid a stored change, now expired: a revert is not written
        if any(obs[i] for i in self._breaking):
            return self._write(obs, slots)
        return SKIP

    def _write(self, obs: np.ndarray, slots: np.ndarray) -> int:
        if obs[self._fits]:
            return WRITE
        if obs[self._fits_if_larger_expired] and slots[0, self._slot["present"]]:
            return self._expire(0)
        return SKIP

    def _expire(self, k: int) -> int:
        return 2 + self.K + k


def play(env: Any, rule: Any, *, options: dict[str, Any] | None = None, seed: int | None = None) -> dict[str, Any]:
    """One episode of ``env`` driven by ``rule(obs) -> action``; the final info's metrics."""
    obs, _ = env.reset(seed=seed, options=options)
    done = False
    info: dict[str, Any] = {}
    while not done:
        obs, _, done, _, info = env.step(rule(obs))
    return info["metrics"]
