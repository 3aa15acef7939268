"""Agents acting in ``WritePolicyBench-v0``: their ``MemoryAction``s become env actions.

``EnvDriver`` follows one env. At each timestep it asks the agent for its actions and hands
them to the env one at a time, as they are yielded, through the slot layout: WRITE is
action 1, MERGE / EXPIRE of item ``s`` the slot showing ``s`` (an item the layout does not
show is put in a slot first, ``env.expose_item``). An action the store would reject is
dropped, as the offline evaluator's store rejects it; when the agent has nothing more to
say the driver sends SKIP. So the memory evolves exactly as in ``wpb_gym.evaluation.playing``.

In the env a WRITE or MERGE ends the timestep, so an agent must yield it last (the offline
evaluator would let it continue): the driver raises if the agent yields anything after it.

``run_agent_in_env`` plays one episode and reports the per-timestep rewards to the agent's
``end_episode`` hook (learners learn from them).

The query tier's env (``QueryTierEnv``, ``WritePolicyBench-Queries*-v0``) has a driver of its
own, ``QueryEnvDriver``, which ``run_agent_in_env`` picks for it: the env plays checkpoint
steps itself, so the driver shows the agent those (``env.passed_steps``) before the snapshot it
decides on, and drops whatever the agent yields at them (a keeper yields nothing there). Its
MERGE is onto the endpoint's newest WRITE item only; a MERGE onto another is dropped. ``EnvDrivers`` is the SB3 predictor side:
one driver per sub-env of a ``DummyVecEnv`` (each with its own copy of a stateful agent).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from wpb_gym.core.policy import (
    ORACLE,
    EpisodeContext,
    EpisodeOutcome,
    call_hook,
    check_action,
    check_can_run,
    episode_context,
    policy_name,
    policy_track,
)
from wpb_gym.core.tracks import policy_episode
from wpb_gym.core.types import MemoryAction
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.query_env import QueryTierEnv

SKIP, WRITE = 0, 1
_DONE = object()  # end of an agent's actions (None could be a yielded value)


def _unwrapped(env: Any) -> WritePolicyBenchEnv:
    base = getattr(env, "unwrapped", env)
    if not isinstance(base, WritePolicyBenchEnv):
        raise TypeError(f"agents act in WritePolicyBench environments, got {type(base).__name__}")
    return base


class EnvDriver:
    """Translates one agent's actions for one environment (see the module docstring)."""

    def __init__(self, agent: Any, env: Any) -> None:
        self.agent = agent
        self.env = env
        self.base = _unwrapped(env)
        check_can_run(agent, self.base.track)
        if self.base.max_expires_per_step is not None:
            raise ValueError(
                "agents run in envs with max_expires_per_step=None: the offline evaluator has no cap, "
                f"and this env caps EXPIREs at {self.base.max_expires_per_step} per timestep"
            )
        self._episode_seen: int | None = None
        self._actions: Any = None  # the agent's pending iterator for the current timestep
        self._actions_t: int | None = None
        self._ended = False  # the pending iterator already ended its timestep
        self.dropped = 0  # actions the store rejected (the offline store rejects them too)

    def next_action(self) -> int:
        """The env action to take now."""
        base = self.base
        if base.current_step is None:
            # Over, and not reset yet: gymnasium's vector envs reset on the next step and
            # ignore its action. A single env refuses the step itself.
            return SKIP
        self._follow_episode()
        t = base.t
        if self._actions is not None and self._actions_t != t:
            self._finish_timestep()
        if self._actions is None:
            self._actions = iter(self.agent.select(base.current_step, base.store.view()) or ())
            self._actions_t, self._ended = t, False
        while True:
            action = next(self._actions, _DONE)
            if action is _DONE:  # nothing more for this step: SKIP ends it
                self._actions = None
                return SKIP
            action = check_action(self.agent, action, base.current_step)
            if action.action == "SKIP":
                continue
            a = self._translate(action)
            if a is None:
                self.dropped += 1
                continue
            if action.action != "EXPIRE":
                self._ended = True
            return a

    def finish(self) -> None:
        """Check that the agent yielded nothing after the action that ended its last step."""
        if self._actions is not None:
            self._finish_timestep()

    def _follow_episode(self) -> None:
        base = self.base
        if base.reset_count == self._episode_seen:
            return
        self._episode_seen = base.reset_count
        if self._actions is not None:  # a step of the previous episode: abandoned with it
            close = getattr(self._actions, "close", None)
            if close is not None:
                close()
            self._actions = None
        episode = base.episode
        stream = policy_episode(episode, base.track)
        call_hook(
            self.agent, "start_episode",
            episode_context(self.agent, episode, stream, base.store.max_bytes, base.track, base.store),
        )

    def _finish_timestep(self) -> None:
        leftover = next(self._actions, _DONE) if self._ended else _DONE
        self._actions = None
        if leftover is not _DONE:
            raise RuntimeError(
                f"agent {policy_name(self.agent)!r} yielded {leftover!r} after the WRITE/MERGE of timestep "
                f"{self._actions_t}; in the environment a WRITE or MERGE ends the timestep, so it must come last"
            )

    def _translate(self, action: MemoryAction) -> int | None:
        base = self.base
        t = base.t
        if not base.store.check(action, t).accepted:
            return None
        kind = action.action
        if kind == "WRITE":
            a = WRITE if action.codec is None else base.encode_action(action)
        else:
            a = base.encode_action(action)
            if a is None:
                k = base.expose_item(action.target_t)
                a = 2 + k if kind == "MERGE" else 2 + base.K + k
        if not base.action_masks()[a]:  # pragma: no cover - the mask is the store's verdict
            raise AssertionError(f"env mask refuses {action} that the store accepts")
        return a


@dataclass(frozen=True)
class EnvEpisode:
    """One episode an agent played in the env: final metric row, rewards per timestep, last info."""

    metrics: dict[str, float]
    rewards: tuple[float, ...]
    info: dict[str, Any]


def run_agent_in_env(agent: Any, env: Any, *, seed: int | None = None, options: dict | None = None) -> EnvEpisode:
    """Play one episode of ``env`` with ``agent``; its ``end_episode`` gets the rewards."""
    if isinstance(getattr(env, "unwrapped", env), QueryTierEnv):
        return _run_in_query_env(agent, env, seed=seed, options=options)
    env.reset(seed=seed, options=options)
    driver = EnvDriver(agent, env)
    base = driver.base
    rewards = [0.0] * len(base.episode)
    while True:
        t = base.t
        _, reward, terminated, truncated, info = env.step(driver.next_action())
        rewards[t] += float(reward)
        if terminated or truncated:
            break
    if terminated:
        driver.finish()
    metrics = info.get("metrics") or base.episode_metrics().as_row()
    outcome = EpisodeOutcome(metrics=dict(metrics), rewards=tuple(rewards))
    call_hook(agent, "end_episode", outcome)
    return EnvEpisode(metrics=outcome.metrics, rewards=outcome.rewards, info=info)


class EnvDrivers:
    """``predict`` for SB3: one driver per sub-env of a DummyVecEnv (or one env).

    ``start_episode`` is called when a sub-env resets; ``end_episode`` is not: ``predict``
    never sees rewards, so a learner driven this way acts but does not learn (train it with
    ``run_agent_in_env``, e.g. through its ``fit``).
    """

    def __init__(self, agent: Any, env: Any) -> None:
        if hasattr(env, "envs"):
            envs = list(env.envs)
        elif hasattr(env, "num_envs") and (hasattr(env, "env_method") or not hasattr(env, "unwrapped")):
            raise TypeError(
                f"{type(env).__name__} runs its envs elsewhere (another process?): an agent reads each env's "
                "memory directly, so attach it to a single env or a DummyVecEnv"
            )
        else:
            envs = [env]
        # Agents keep per-episode state: each sub-env gets its own copy.
        agents = [agent] if len(envs) == 1 else [copy.deepcopy(agent) for _ in envs]
        self.drivers = [EnvDriver(a, e) for a, e in zip(agents, envs, strict=True)]

    def predict(self, observation: Any, episode_start: Any = None) -> np.ndarray:
        n = len(self.drivers)
        batch = np.asarray(observation["action_mask"] if isinstance(observation, dict) else observation)
        if batch.ndim >= 2 and batch.shape[0] != n:
            raise ValueError(f"got observations for {batch.shape[0]} envs; the agent is attached to {n}")
        actions = np.array([d.next_action() for d in self.drivers], dtype=np.int64)
        return actions if batch.ndim >= 2 else actions[0]


class QueryEnvDriver:
    """Translates one agent's actions for one ``QueryTierEnv`` (see the module docstring)."""

    def __init__(self, agent: Any, env: Any) -> None:
        base = getattr(env, "unwrapped", env)
        if not isinstance(base, QueryTierEnv):
            raise TypeError(f"QueryEnvDriver drives a QueryTierEnv, got {type(base).__name__}")
        self.agent, self.env, self.base = agent, env, base
        check_can_run(agent, base.track)
        if base.endless and (policy_track(agent) == ORACLE or getattr(agent, "needs_stream", False)):
            raise ValueError(f"agent {policy_name(agent)!r} reads the whole episode (its labels or its stream) "
                             "before it starts; an endless stream has no whole episode: run it with endless=False")
        self._episode_seen: int | None = None
        self._shown_upto = 0  # the agent has been shown every step before this one
        self._actions: Any = None
        self._actions_t: int | None = None
        self.dropped = 0  # actions no env action plays, or that the store rejects

    def next_action(self) -> int:
        base = self.base
        if base.is_over():
            return SKIP
        self._follow_episode()
        t = base.t
        view = base.store.view()
        for step in base.passed_steps:
            if step.t >= self._shown_upto:  # a checkpoint the env played: the agent sees it, cannot act
                self.dropped += sum(1 for a in (self.agent.select(step, view) or ())
                                    if not (isinstance(a, MemoryAction) and a.action == "SKIP"))
                self._shown_upto = step.t + 1
        if self._actions is not None and self._actions_t != t:
            self._actions = None
        if self._actions is None:
            step = base.current_step()
            self._actions = iter(self.agent.select(step, view) or ())
            self._actions_t = t
            self._shown_upto = t + 1
        step = base.current_step()
        while True:
            action = next(self._actions, _DONE)
            if action is _DONE:
                self._actions = None
                return SKIP
            action = check_action(self.agent, action, step)
            if action.action == "SKIP":
                continue
            a = self._translate(action, t)
            if a is None:
                self.dropped += 1
                continue
            return a

    def _follow_episode(self) -> None:
        base = self.base
        if base.reset_count == self._episode_seen:
            return
        self._episode_seen = base.reset_count
        self._shown_upto = 0
        self._actions = None
        budget = base.store.max_bytes
        if base.endless:
            # No episode object: nothing of its length, labels or stream is known ahead.
            context = EpisodeContext(length=0, budget_bytes=budget, track=base.track, episode_id=None)
        else:
            episode = base.episode
            context = episode_context(self.agent, episode, policy_episode(episode, base.track), budget, base.track,
                                      base.store)
        call_hook(self.agent, "start_episode", context)

    def _translate(self, action: MemoryAction, t: int) -> int | None:
        base = self.base
        if not base.store.check(action, t).accepted:
            return None
        a = base.encode_action(action)
        if a is None and action.action == "EXPIRE":
            a = 3 + base.expose_item(action.target_t)
        if a is None or not base.action_masks()[a]:
            return None
        return a


def _run_in_query_env(agent: Any, env: Any, *, seed: int | None, options: dict | None) -> EnvEpisode:
    env.reset(seed=seed, options=options)
    driver = QueryEnvDriver(agent, env)
    base = driver.base
    rewards: list[float] = []
    while True:
        t = base.t
        _, reward, terminated, truncated, info = env.step(driver.next_action())
        if len(rewards) <= t:
            rewards.extend([0.0] * (t + 1 - len(rewards)))
        rewards[t] += float(reward)
        if terminated or truncated:
            break
    metrics = info.get("metrics") or {
        "query_accuracy": info["queries_answered"] / info["queries_asked"] if info["queries_asked"] else 0.0}
    outcome = EpisodeOutcome(metrics=dict(metrics), rewards=tuple(rewards))
    call_hook(agent, "end_episode", outcome)
    return EnvEpisode(metrics=outcome.metrics, rewards=outcome.rewards, info=info)
