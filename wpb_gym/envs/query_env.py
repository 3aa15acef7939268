"""``QueryTierEnv``: the query tier as a Gymnasium environment (``WritePolicyBench-Queries*-v0``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..core.accounting import estimate_bytes
from ..core.checks import require_finite, require_int
from ..core.store import ByteMemoryStore
from ..core.tracks import check_track, policy_episode
from ..core.types import Episode, MemoryAction, MemoryItem, Step
from ..scoring.metrics import score_episode
from ..scoring.queries import checkpoint_answers, episode_queries
from .episode_sampler import EpisodeSampler
from .observation.query_features import ENDPOINT_FEATURES, QueryStreamTracker

SKIP, WRITE, MERGE = 0, 1, 2
GLOBAL_FEATURES = ("progress", "to_checkpoint", "used", "items", "expires_now", "before_first_checkpoint")
CANDIDATE_FEATURES = (*ENDPOINT_FEATURES, "cost", "cost_of_remaining", "fits", "held", "mergeable")
SLOT_FEATURES = (*ENDPOINT_FEATURES, "present", "cost", "age", "stale", "same_endpoint", "is_merge")


class QueryTierEnv(gym.Env):
    """
    ## Description

    The query tier (``docs/query-tier.md``): a stream of endpoint snapshots, each shown when
    the endpoint changes, and checkpoints at which hidden queries about the endpoints' current
    contracts are answered from memory by the reader (``wpb_gym.core.queries``). The agent
    decides, at every endpoint snapshot, whether to WRITE it, MERGE it onto a held snapshot
    of the endpoint, or SKIP it, EXPIRE-ing held items first to make room. Checkpoint steps
    are played by the env itself (there is nothing to decide at them): their queries are
    answered from memory as it is when they arrive, and what they ask is then shown in the
    observation's statistics. Every action goes through the core ``ByteMemoryStore``.

    ## Action Space

    ``Discrete(3 + K)``, ``K = slots``:

    | Action | Meaning | Advances time |
    |---|---|---|
    | 0 | SKIP the current snapshot | yes |
    | 1 | WRITE it | yes |
    | 2 | MERGE it onto the newest held WRITE item of its endpoint | yes |
    | 3 .. K+2 | EXPIRE the item in slot ``a - 3`` | no |

    ``action_masks()`` (also ``info["action_mask"]``) is exactly what the store accepts (SKIP
    always). An action the store would reject is played as SKIP and costs
    ``invalid_action_penalty``.

    ## Observation Space

    ``Box(0, 1, (n,), float32)``: the global features (``GLOBAL_FEATURES``), the current
    snapshot's endpoint (``CANDIDATE_FEATURES``), then ``K`` slot rows (``SLOT_FEATURES``).
    An endpoint's statistics (``wpb_gym.envs.observation.query_features``) come from the
    stream alone: queries the checkpoints showed, traffic, breaking changes and its family's
    history. Slots show the items of the current endpoint first (newest first), then items
    superseded by a newer snapshot of their endpoint, then the others by increasing share of
    recent queries per byte; ``n = 6 + (F + 5) + K (F + 6)`` with ``F = 24`` (275 at K = 8).

    ## Rewards

    At each checkpoint, the queries memory answers right there divided by the episode's
    queries: an episode's rewards sum to its query accuracy, less ``expire_cost`` per accepted
    EXPIRE and ``invalid_action_penalty`` per rejected action.

    ## Episode End

    ``terminated`` once the last step (a checkpoint) is answered; ``truncated`` is always False.
    The final ``info["metrics"]`` holds the offline scorer's metrics of the final memory and
    ``query_accuracy``.

    ## Arguments

    ```python
    gym.make("wpb_gym:WritePolicyBench-QueriesMedium-v0",   # or QueriesEasy, QueriesHard
             budget_bytes=10240, episodes=None, episode_seed=0, episode_order="random",
             slots=8, expire_cost=0.0, invalid_action_penalty=0.0, **query_tier_options)
    ```

    ``regime`` (``queries_easy``, ``queries_medium``, ``queries_hard``), ``length`` and any
    ``QueryTierConfig`` field (e.g. ``endpoints=1024``) shape generated episodes; ``episodes``
    plays query-tier episode files instead (e.g. real drift from ``wpb episodes add-queries``).

    ## Vectorized environment

    ``gym.make_vec(id, num_envs=N)`` steps N of these envs (Gymnasium's ``SyncVectorEnv``).

    ## Version History

    * v0, package 0.9.0: added.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, regime: str = "queries_medium", budget_bytes: int = 10240, length: int | None = None,
                 track: str = "unprivileged", episodes: str | os.PathLike[str] | Sequence[Episode] | None = None,
                 episode_seed: int = 0, episode_order: str = "random", slots: int = 8, expire_cost: float = 0.0,
                 invalid_action_penalty: float = 0.0, render_mode: str | None = None,
                 **generator_options: Any) -> None:
        self.track = check_track(track)
        self.budget_bytes = require_int(budget_bytes, "budget_bytes", 0)
        self.K = require_int(slots, "slots", 1)
        self.expire_cost = require_finite(expire_cost, "expire_cost")
        self.invalid_action_penalty = require_finite(invalid_action_penalty, "invalid_action_penalty")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.render_mode = render_mode
        self.sampler = EpisodeSampler(regime=regime, length=length, episodes=episodes, episode_seed=episode_seed,
                                      order=episode_order, generator_options=generator_options)
        F = len(ENDPOINT_FEATURES)
        self.n_features = len(GLOBAL_FEATURES) + len(CANDIDATE_FEATURES) + self.K * len(SLOT_FEATURES)
        assert len(CANDIDATE_FEATURES) == F + 5 and len(SLOT_FEATURES) == F + 6
        self.action_space = spaces.Discrete(3 + self.K)
        self.observation_space = spaces.Box(0.0, 1.0, (self.n_features,), np.float32)
        self.reset_count = 0
        self._episode: Episode | None = None

    # ------------------------------------------------------------------ reading
    @property
    def episode(self) -> Episode:
        """The current episode, with its hidden labels (for scoring and teachers, not policies)."""
        if self._episode is None:
            raise RuntimeError("call reset() first")
        return self._episode

    @property
    def store(self) -> ByteMemoryStore:
        """The memory of the current episode (change it through ``step`` only)."""
        self.episode  # noqa: B018 - the same error before a reset
        return self._store

    @property
    def t(self) -> int:
        return self._t

    def current_step(self) -> Step:
        """The snapshot the agent decides on now, as the track shows it."""
        return self._steps[self._t]

    def slot_items(self) -> list[MemoryItem | None]:
        """The items the K slots show now (None for an empty slot)."""
        return list(self._slots)

    # ------------------------------------------------------------------ episode start
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - {"episode_index", "budget_bytes", "episode"})
        if unknown:
            raise ValueError(f"reset options {unknown} are not known; expected some of episode_index, budget_bytes, "
                             f"episode")
        if seed is not None:
            self.sampler.restart()
        budget = require_int(options.pop("budget_bytes", self.budget_bytes), "options['budget_bytes']", 0)
        episode, self.episode_index = self.sampler.choose(self.np_random, options)
        if not episode_queries(episode):
            raise ValueError(f"episode {episode.episode_id!r} ({episode.regime}) has no queries: the query tier's "
                             f"env plays query-tier episodes only")
        self._episode = episode
        self._steps = policy_episode(episode, self.track).steps
        self._queries = episode_queries(episode)
        self._asked_at: dict[int, list] = {}
        for query in self._queries:
            self._asked_at.setdefault(query.t, []).append(query)
        self._checkpoints = sorted(self._asked_at)
        self._store = ByteMemoryStore(budget)
        self._tracker = QueryStreamTracker()
        self._latest_show: dict[str, int] = {}
        self._t = 0
        self._expires_now = 0
        self._answered = 0
        self.reset_count += 1
        reward = self._arrive()
        return self._observation(), self._info(True, "accepted", reward, done=False)

    # ------------------------------------------------------------------ dynamics
    def _arrive(self) -> float:
        """Bring time to the next snapshot to decide on, playing checkpoint steps on the way (their
        queries answered from memory as they arrive); the reward they pay."""
        reward = 0.0
        T = len(self._steps)
        while self._t < T:
            step = self._steps[self._t]
            asked = self._asked_at.get(self._t)
            if asked:
                right = sum(checkpoint_answers(self._store.held_at(self._t), asked))
                self._answered += right
                reward += right / len(self._queries)
            self._tracker.step(step.observation, step.metadata)
            obs = step.observation
            if isinstance(obs, dict) and isinstance(obs.get("api"), str) and not asked:
                self._latest_show[obs["api"]] = self._t
                self._expires_now = 0
                self._arrange_slots()
                return reward
            self._store.skip(self._t)
            self._t += 1
        return reward

    def step(self, action: Any):
        if self._episode is None or self._t >= len(self._steps):
            raise RuntimeError("the episode is over: call reset()")
        action = int(action)
        mask = self.action_masks()
        step = self._steps[self._t]
        reward = 0.0
        if not 0 <= action < len(mask) or not mask[action]:
            self._store.skip(self._t)
            reason = "rejected"
            reward -= self.invalid_action_penalty
            accepted = False
            self._t += 1
        elif action >= 3:
            target = self._slots[action - 3]
            self._store.expire(target.t, self._t)
            self._expires_now += 1
            reward -= self.expire_cost
            self._arrange_slots()
            return self._observation(), reward, False, False, self._info(True, "accepted", reward, done=False)
        else:
            if action == WRITE:
                self._store.write(step, self._t)
            elif action == MERGE:
                self._store.execute(MemoryAction.merge(step, self._merge_target().t), self._t)
            else:
                self._store.skip(self._t)
            reason, accepted = "accepted", True
            self._t += 1
        reward += self._arrive()
        done = self._t >= len(self._steps)
        observation = self._observation() if not done else np.zeros(self.n_features, dtype=np.float32)
        return observation, reward, done, False, self._info(accepted, reason, reward, done=done)

    def _merge_target(self) -> MemoryItem | None:
        api = self._steps[self._t].observation["api"]
        bases = [item for item in self._store.iter_items() if item.kind == "WRITE" and item.api == api]
        return max(bases, key=lambda item: item.t) if bases else None

    def action_masks(self) -> np.ndarray:
        mask = np.zeros(3 + self.K, dtype=bool)
        mask[SKIP] = True
        if self._t >= len(self._steps):
            return mask
        step = self._steps[self._t]
        mask[WRITE] = self._store.check(MemoryAction.write(step), self._t).accepted
        target = self._merge_target()
        if target is not None:
            mask[MERGE] = self._store.check(MemoryAction.merge(step, target.t), self._t).accepted
        for k, item in enumerate(self._slots):
            mask[3 + k] = item is not None and item.t < self._t
        return mask

    # ------------------------------------------------------------------ observation
    def _arrange_slots(self) -> None:
        api = self._steps[self._t].observation["api"]
        features = self._tracker.features
        asked_mid = ENDPOINT_FEATURES.index("asked_mid")

        def order(item: MemoryItem) -> tuple:
            if item.api == api:
                return (0, -item.t)
            if item.t < self._latest_show.get(item.api, item.t):
                return (1, item.t)
            return (2, (features(item.api)[asked_mid] + 0.01) / item.byte_cost, item.t)

        items = sorted(self._store.iter_items(), key=order)[: self.K]
        self._slots: list[MemoryItem | None] = items + [None] * (self.K - len(items))

    def _observation(self) -> np.ndarray:
        store, T, t = self._store, len(self._steps), self._t
        budget = max(store.max_bytes, 1)
        step = self._steps[t]
        api = step.observation["api"]
        nxt = next((c for c in self._checkpoints if c > t), T - 1)
        before = [c for c in self._checkpoints if c <= t]
        gap = (self._checkpoints[1] - self._checkpoints[0]) if len(self._checkpoints) > 1 else T
        cost = estimate_bytes(step)
        held = [item for item in store.iter_items() if item.api == api]
        mask = self.action_masks()
        row = [t / T, min(1.0, (nxt - t) / max(gap, 1)), store.bytes_used / budget, min(1.0, len(store) / 64),
               min(1.0, self._expires_now / 8), 0.0 if before else 1.0]
        parts = [np.asarray(row, dtype=np.float32), self._tracker.features(api),
                 np.asarray([min(1.0, cost / budget), min(1.0, cost / max(store.remaining(), 1)),
                             float(mask[WRITE]), float(bool(held)), float(mask[MERGE])], dtype=np.float32)]
        for item in self._slots:
            if item is None:
                parts.append(np.zeros(len(SLOT_FEATURES), dtype=np.float32))
                continue
            stale = item.t < self._latest_show.get(item.api, item.t)
            parts.append(self._tracker.features(item.api))
            parts.append(np.asarray([1.0, min(1.0, item.byte_cost / budget), (t - item.t) / T, float(stale),
                                     float(item.api == api), float(item.kind == "MERGE")], dtype=np.float32))
        return np.clip(np.concatenate(parts), 0.0, 1.0).astype(np.float32)

    def _info(self, accepted: bool, reason: str, reward: float, *, done: bool) -> dict[str, Any]:
        info: dict[str, Any] = {
            "t": self._t,
            "accepted": accepted,
            "reason": reason,
            "bytes_used": self._store.bytes_used,
            "queries_answered": self._answered,
            "queries_asked": len(self._queries),
        }
        if done:
            metrics = score_episode(self._episode, self._store, track=self.track).as_row()
            metrics["query_accuracy"] = self._answered / len(self._queries)
            info["metrics"] = metrics
            info["query_accuracy"] = metrics["query_accuracy"]
        else:
            info["action_mask"] = self.action_masks()
        return info

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self._episode is None:
            return None
        lines = [f"t={self._t}/{len(self._steps)} used {self._store.bytes_used}/{self._store.max_bytes} B, "
                 f"answered {self._answered}/{len(self._queries)}"]
        lines += [f"  slot {k}: t={item.t} {item.api} {item.byte_cost} B" for k, item in enumerate(self._slots)
                  if item is not None]
        return "\n".join(lines)
