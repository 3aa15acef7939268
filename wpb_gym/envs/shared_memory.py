"""Several write policies, one memory: ``SharedMemoryEnv``, a PettingZoo ``ParallelEnv``.

## Description

N agents (``agent_0`` ... ``agent_{N-1}``) watch the same stream of API/documentation
snapshots and share one ``ByteMemoryStore`` and its byte budget (spec §8, "multi-agent").
Every endpoint family (the endpoint with its version removed) and every documentation section
(by its title) *interests* exactly one agent, by a stable hash; a migration guide interests the
agent of its old endpoint's family. So each agent has its own labels: the episode's critical
steps that interest it. Each item in memory is *owned* by the agent that wrote it, and an agent expires only its own
items. ``mode="cooperative"``: every agent is paid the F1 of the whole memory against all the
critical steps. ``mode="competitive"``: each agent is paid the F1 of its own items against its
own labels, so the agents race for the shared bytes.

## Action Space

``Discrete(6)`` per agent:

| Action | Meaning |
|---|---|
| 0 | SKIP the current step |
| 1 | WRITE the current step if it fits in the room left |
| 2 | EXPIRE the agent's own items, oldest first, until the step fits, then WRITE it (none if it fits) |
| 3 | EXPIRE the agent's own items larger than the step, largest first, until it fits, then WRITE it |
| 4 | EXPIRE the agent's oldest item (and write nothing) |
| 5 | EXPIRE the agent's items the current snapshot reverts (and write nothing) |

Action 3 is ``breaking_detector``'s way of making room (each retained step counts once in F1,
so small items are worth keeping). Action 5 is how it drops a reverted change: when an
endpoint's contract changes, the items of its family whose contract *before* them is the
current one are reverted (an item written at the family's first sighting is reverted by any
later contract unless the endpoint is shown removed).

At a timestep all agents act at once; their actions are applied one agent after another in an
order that rotates with the timestep (``agent_{t mod N}`` first), each judged by the store as
memory then is. The mask (``infos[agent]["action_mask"]``, ``action_mask(agent)``) says what
the store would accept before anyone acts this timestep; an action another agent's made
impossible first (the same step written, the room taken) is refused and counts as SKIP
(``infos[agent]["accepted"]`` is False, ``"reason"`` says why).

## Observation Space

``Box(0, 1, (18,), float32)`` per agent (``FEATURES``, in order): the step's WRITE cost over
the budget, the four content kinds (one-hot), whether the step's family interests this agent,
whether it is the family's first sighting, whether its contract is breaking (a parameter
removed or newly required, the endpoint deprecated or removed, or shown removed at its first
sighting; compared with the last snapshot of its family shown, which the env remembers as a
recurrent policy could), whether it reverts items this agent holds (action 5), whether it
fits in the room left and after expiring the agent's own items, whether the agent holds items
of the step's family, the episode's progress, the share of the budget used, used by this agent and
by the others, this agent's items (over 64, clipped) and the share of the critical-looking
steps (breaking changes and guides) of its families it has written so far. Labels never enter.

## Rewards

The mode's F1 for each agent. With ``dense_reward=True`` (default) it is paid as it accrues:
after timestep ``t`` an agent is paid the change in its F1 counted against the critical steps
before ``t + 1`` only, so the rewards of an episode add up to its final F1 exactly; with
``False``, at the end (0 before). ``infos[agent]`` of the last step holds ``"f1"``,
``"bound"`` (the hindsight F1 bound of the agent's score: the whole memory's in cooperative
mode; in competitive mode the agent's own labels with the whole budget to itself, which no
sharing reaches), ``"items"`` and ``"labels"``.

## Episode End

After the decision on the last step every agent is terminated (``truncations`` are False) and
``agents`` becomes empty.

## Arguments

``SharedMemoryEnv(regime=None, length=None, budget_bytes=10240, num_agents=2,
mode="cooperative", dense_reward=True, episodes=None, episode_seed=0, episode_order="random",
track="unprivileged", render_mode=None, **generator_options)``: the episode arguments are
``WritePolicyBench-v0``'s, but generated episodes default to ``contract_mix`` (every content
kind); ``regime=None`` with ``episodes=`` takes all of them.

``SingleAgentView(env, learner, others)`` plays one agent as a Gymnasium env (with
``action_masks()``, for MaskablePPO), the others by the given policies (observation, mask ->
action). ``parallel_env(**kwargs)`` and ``env(**kwargs)`` follow PettingZoo's naming; in the
AEC form (PettingZoo's conversion) the agents choose one after another in the order
``agent_0``, ``agent_1``, ... without seeing each other's choice, and the choices are applied
together at the end of the cycle, in the rotating order above. PettingZoo is the
``multiagent`` extra.

## Version History

* v0, package 0.10.0: added.
"""

from __future__ import annotations

import functools
import hashlib
import math
from typing import Any, Callable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

try:
    from pettingzoo import ParallelEnv
except ModuleNotFoundError:  # the optional extra: say which
    raise ModuleNotFoundError(
        "SharedMemoryEnv needs PettingZoo: pip install 'writepolicybench-gym[multiagent]'", name="pettingzoo"
    ) from None

from ..core.accounting import estimate_bytes
from ..core.checks import require_int
from ..core.contracts import Contract, contract_of, is_breaking
from ..core.setting_values import budget_argument
from ..core.store import ByteMemoryStore
from ..core.tracks import UNPRIVILEGED, check_track, policy_episode
from ..core.types import Episode
from ..scoring.oracle import hindsight_f1_bound
from .episode_sampler import EpisodeSampler
from .observation.stream_table import KIND_GUIDE, KIND_NAMES, kind_and_family

MODES = ("cooperative", "competitive")
FEATURES = (
    "cost", "kind_endpoint", "kind_doc", "kind_guide", "kind_other", "mine", "first_sighting", "breaking",
    "reverts_own", "fits", "fits_after_own", "holds_family", "progress", "used", "used_by_me", "used_by_others",
    "my_items", "my_share_written",
)
SKIP, WRITE, WRITE_MAKING_ROOM, WRITE_EXPIRING_LARGER, EXPIRE_OLDEST, EXPIRE_REVERTED = range(6)
N_ACTIONS = 6
_MAX_ITEMS = 64


def family_agent(family: Any, num_agents: int) -> int:
    """The agent a family interests: a stable hash of the family, modulo the agents."""
    return _family_hash(repr(family)) % num_agents


@functools.lru_cache(maxsize=65536)
def _family_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def f1_score(kept: set[int], relevant: set[int]) -> float:
    """F1 of a retained set against a set of relevant steps (0 when either is empty)."""
    hits = len(kept & relevant)
    return 2.0 * hits / (len(kept) + len(relevant)) if hits else 0.0


class SharedMemoryEnv(ParallelEnv):
    __doc__ = __doc__
    metadata = {"name": "wpb_shared_memory_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(self, regime: str | None = None, length: int | None = None, budget_bytes: int | str = 10240,
                 num_agents: int = 2, mode: str = "cooperative", dense_reward: bool = True, episodes: Any = None,
                 episode_seed: int = 0,
                 episode_order: str = "random", track: str = UNPRIVILEGED, render_mode: str | None = None,
                 **generator_options: Any) -> None:
        n = require_int(num_agents, "num_agents", 1)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.mode = mode
        if not isinstance(dense_reward, bool):
            raise ValueError(f"dense_reward must be True or False, got {dense_reward!r}")
        self.dense_reward = dense_reward
        self.track = check_track(track)
        self.budget_bytes = budget_argument(budget_bytes, "budget_bytes")
        self.render_mode = render_mode
        if regime is None and episodes is None:
            regime = "contract_mix"  # generated: a regime with every content kind
        try:
            self.sampler = EpisodeSampler(regime=regime, length=length, episodes=episodes, episode_seed=episode_seed,
                                          order=episode_order, generator_options=generator_options)
        except TypeError as error:  # an unknown argument: named as this class's
            raise TypeError(str(error).replace("WritePolicyBenchEnv", type(self).__name__)) from None
        self.possible_agents = [f"agent_{i}" for i in range(n)]
        self.agents: list[str] = []
        self._observation_space = spaces.Box(0.0, 1.0, (len(FEATURES),), np.float32)
        self._action_space = spaces.Discrete(N_ACTIONS)
        self._rng = np.random.default_rng()

    def observation_space(self, agent: str) -> spaces.Box:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_space

    # ------------------------------------------------------------------ episode start
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            self.sampler.restart()
        episode, _ = self.sampler.choose(self._rng, dict(options or {}))
        if len(episode) == 0:
            raise ValueError("the episode has no steps")
        misplaced = next((i for i, step in enumerate(episode.steps) if step.t != i), None)
        if misplaced is not None:
            raise ValueError(f"episode {episode.episode_id!r}: step {misplaced} says t={episode.steps[misplaced].t}; "
                             "steps must be numbered 0, 1, ... in order")
        self.episode: Episode = episode
        self._steps = policy_episode(episode, self.track).steps
        n = len(self.possible_agents)
        self.agents = list(self.possible_agents)
        self.store = ByteMemoryStore(self.budget_bytes)
        self._costs = [estimate_bytes(step) for step in self._steps]
        kinds, interest = [], []
        for step in self._steps:
            kind, family = kind_and_family(step.observation)
            kinds.append(kind)
            if family is None:  # no family: the step interests one agent by its timestep
                family = ("t", step.t)
            elif kind == KIND_GUIDE:  # a migration guide: the agent of its old endpoint's family
                family = ("api", family[1])
            interest.append(family_agent(family, n))
        self._kinds, self._interest = kinds, interest
        self._families = [kind_and_family(step.observation)[1] for step in self._steps]
        critical = set(episode.critical_steps)
        self._labels = {a: {t for t in critical if interest[t] == i} for i, a in enumerate(self.possible_agents)}
        self._owner: dict[int, int] = {}  # timestep -> the agent that wrote the item
        self._last: dict[Any, Contract] = {}  # family -> the contract of its last snapshot shown
        self._seen: set[Any] = set()  # families shown so far
        # timestep -> the contract of its family before it (None: its first sighting), for the
        # endpoint steps a policy may write as a change
        self._contract_before: dict[int, Contract | None] = {}
        self._reverted: list[int] = []  # stored items the current snapshot reverts
        self._signals = [0] * n  # per agent: steps of its families that looked critical
        self._written_signals = [0] * n
        self._t = 0
        self._paid = dict.fromkeys(self.possible_agents, 0.0)  # the dense rewards' running potential
        self._observe_step()
        return self._observations(), self._infos()

    # ------------------------------------------------------------------ stepping
    def step(self, actions: dict[str, Any]):
        if not self.agents:
            raise RuntimeError("no episode is running: call reset() before step()" if not hasattr(self, "store")
                               else "the episode is over: call reset() before step()")
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"step() needs an action for every agent; missing {missing}")
        for agent in self.possible_agents:  # all checked before any is applied
            if not self._action_space.contains(actions[agent]):
                raise ValueError(f"{agent}: expected an action in Discrete({N_ACTIONS}), got {actions[agent]!r}")
        t, n = self._t, len(self.possible_agents)
        outcome: dict[str, tuple[bool, str]] = {}
        for k in range(n):
            i = (t + k) % n
            agent = self.possible_agents[i]
            outcome[agent] = self._apply(i, int(actions[agent]))
        self._t = t + 1
        done = self._t >= len(self._steps)
        rewards = dict.fromkeys(self.possible_agents, 0.0)
        if self.dense_reward and not done:
            for agent, score in self.scores(before=self._t).items():
                rewards[agent], self._paid[agent] = score["f1"] - self._paid[agent], score["f1"]
        infos = {}
        if done:
            scores = self.scores()
            rewards = {a: scores[a]["f1"] - (self._paid[a] if self.dense_reward else 0.0) for a in self.possible_agents}
            infos = {a: {**scores[a], "accepted": outcome[a][0], "reason": outcome[a][1],
                         "action_mask": np.zeros(N_ACTIONS, dtype=np.int8)} for a in self.possible_agents}
            observations = {a: np.zeros(len(FEATURES), dtype=np.float32) for a in self.possible_agents}
            terminations = dict.fromkeys(self.possible_agents, True)
            self.agents = []
        else:
            self._observe_step()
            observations = self._observations()
            infos = self._infos()
            for agent in self.possible_agents:
                infos[agent]["accepted"], infos[agent]["reason"] = outcome[agent]
            terminations = dict.fromkeys(self.possible_agents, False)
        truncations = dict.fromkeys(self.possible_agents, False)
        return observations, rewards, terminations, truncations, infos

    def _apply(self, i: int, action: int) -> tuple[bool, str]:
        t, store = self._t, self.store
        if action == SKIP:
            return True, "accepted"
        own = self._own_items(i)
        if action in (EXPIRE_OLDEST, EXPIRE_REVERTED):
            targets = own[:1] if action == EXPIRE_OLDEST else [x for x in self._reverted if self._owner.get(x) == i]
            if not targets:
                return False, "no_own_item"
            for item_t in targets:
                store.expire(item_t, t)
                self._owner.pop(item_t, None)
            return True, "accepted"
        cost = self._costs[t]
        if action in (WRITE_MAKING_ROOM, WRITE_EXPIRING_LARGER):
            plan = self._room_plan(own, cost, largest=action == WRITE_EXPIRING_LARGER)
            if plan is None or t in store:  # nothing is expired for a write that cannot happen
                return False, "over_budget" if plan is None else "timestep_occupied"
            for item_t in plan:
                store.expire(item_t, t)
                self._owner.pop(item_t, None)
        decision = store.write(self._steps[t], t)
        if decision.accepted:
            self._owner[t] = i
            if self._looks_critical:
                self._written_signals[i] += self._interest[t] == i
        return decision.accepted, decision.reason.value

    def _own_items(self, i: int) -> list[int]:
        return [t for t in self.store.timesteps() if self._owner.get(t) == i]

    def _own_of_family(self, own: list[int]) -> list[int]:
        family = self._families[self._t]
        return [t for t in own if family is not None and self._families[t] == family]

    def _room_plan(self, own: list[int], cost: int, largest: bool) -> list[int] | None:
        """The own items to expire so that ``cost`` fits (oldest first, or only those larger
        than it, largest first), or None if they cannot make room."""
        store = self.store
        room, plan = store.remaining(), []
        order = sorted(own, key=lambda x: -store.get(x).byte_cost) if largest else own
        for item_t in order:
            size = store.get(item_t).byte_cost
            if cost <= room or (largest and size <= cost):
                break
            plan.append(item_t)
            room += size
        return plan if cost <= room else None

    # ------------------------------------------------------------------ what the agents see
    def _observe_step(self) -> None:
        """The stream memory's verdict on the current step: first sighting, breaking, and the
        stored items it reverts (``breaking_detector``'s reading of the stream)."""
        t = self._t
        obs = self._steps[t].observation
        family = self._families[t]
        now = contract_of(obs) if isinstance(obs, dict) and "api" in obs else None
        before = self._last.get(family)
        self._first = family is not None and family not in self._seen
        if family is not None:
            self._seen.add(family)
        self._breaking = bool(now is not None and (is_breaking(before, now) if before is not None else now[3]))
        self._reverted = []
        if now is not None and before is not None and now != before:
            self._reverted = [x for x in self.store.timesteps() if x in self._contract_before
                              and self._families[x] == family
                              and (self._contract_before[x] == now or (self._contract_before[x] is None and not now[3]))]
        if now is not None:
            if before is None or now != before:
                self._contract_before[t] = before
            self._last[family] = now
        self._looks_critical = self._breaking or self._kinds[t] == 2  # a breaking change or a guide
        if self._looks_critical:
            self._signals[self._interest[t]] += 1

    def _observations(self) -> dict[str, np.ndarray]:
        t, store = self._t, self.store
        budget = max(store.max_bytes, 1)
        cost = self._costs[t]
        used_by = [0] * len(self.possible_agents)
        for item_t, owner in self._owner.items():
            item = store.get(item_t)
            if item is not None:
                used_by[owner] += item.byte_cost
        counts = [0] * len(self.possible_agents)
        for owner in self._owner.values():
            counts[owner] += 1
        kind = self._kinds[t]
        out = {}
        for i, agent in enumerate(self.possible_agents):
            mine = self._interest[t] == i
            room = store.remaining()
            holds = bool(self._own_of_family(self._own_items(i)))
            values = [
                min(1.0, cost / budget), *(float(kind == k) for k in range(4)), float(mine), float(self._first),
                float(self._breaking), float(any(self._owner.get(x) == i for x in self._reverted)),
                float(cost <= room and t not in store),
                float(cost <= room + used_by[i]), float(holds), t / len(self._steps), store.bytes_used / budget,
                used_by[i] / budget,
                (store.bytes_used - used_by[i]) / budget, min(1.0, counts[i] / _MAX_ITEMS),
                self._written_signals[i] / self._signals[i] if self._signals[i] else 0.0,
            ]
            out[agent] = np.clip(np.asarray(values, dtype=np.float32), 0.0, 1.0)
        return out

    def action_mask(self, agent: str) -> np.ndarray:
        """What the store would accept of each action before anyone acts this timestep (int8)."""
        i = self.possible_agents.index(agent)
        if not self.agents:
            return np.zeros(N_ACTIONS, dtype=np.int8)
        t, store = self._t, self.store
        cost = self._costs[t]
        own = self._own_items(i)
        free = t not in store
        return np.asarray([
            1, free and cost <= store.remaining(), free and self._room_plan(own, cost, largest=False) is not None,
            free and self._room_plan(own, cost, largest=True) is not None, bool(own),
            any(self._owner.get(x) == i for x in self._reverted),
        ], dtype=np.int8)

    def _infos(self) -> dict[str, dict[str, Any]]:
        return {agent: {"action_mask": self.action_mask(agent), "t": self._t} for agent in self.agents}

    # ------------------------------------------------------------------ scores
    def scores(self, before: int | None = None) -> dict[str, dict[str, Any]]:
        """Each agent's F1 under the mode, its hindsight bound and its items, for memory as it is
        now (``before``: against the critical steps before that timestep only)."""
        kept = set(self.store.retained_timesteps())
        critical = set(self.episode.critical_steps)
        if before is not None:
            critical = {t for t in critical if t < before}
        out = {}
        for i, agent in enumerate(self.possible_agents):
            own = {t for t in kept if self._owner.get(t) == i}
            if self.mode == "cooperative":
                f1 = f1_score(kept, critical)
                bound = hindsight_f1_bound(self._costs, critical, self.budget_bytes).f1 if before is None else math.nan
            else:
                labels = self._labels[agent] if before is None else {t for t in self._labels[agent] if t < before}
                f1 = f1_score(own, labels)
                bound = hindsight_f1_bound(self._costs, labels, self.budget_bytes).f1 if before is None else math.nan
            scored = critical if self.mode == "cooperative" else self._labels[agent]
            out[agent] = {"f1": f1, "bound": bound, "items": len(own), "labels": len(scored)}
        return out

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        if not hasattr(self, "store"):
            return "SharedMemoryEnv (call reset() first)"
        budget = self.store.max_bytes
        lines = [f"t={self._t}/{len(self._steps)}  used {self.store.bytes_used}/{budget} bytes"]
        for i, agent in enumerate(self.possible_agents):
            own = self._own_items(i)
            lines.append(f"  {agent}: {len(own)} items, {sum(self.store.get(x).byte_cost for x in own)} bytes")
        if self._t < len(self._steps):
            kind = KIND_NAMES[self._kinds[self._t]]
            lines.append(f"  step {self._t}: {kind}, {self._costs[self._t]} bytes, "
                         f"interests agent_{self._interest[self._t]}")
        return "\n".join(lines)

    def close(self) -> None:
        pass


class SingleAgentView(gym.Env):
    """One agent of a ``SharedMemoryEnv`` as a Gymnasium env, the others played by ``others``
    (agent name -> a function of its observation and action mask returning its action). The
    learner's reward is its own; ``action_masks()`` serves MaskablePPO."""

    def __init__(self, env: SharedMemoryEnv, learner: str,
                 others: dict[str, Callable[[np.ndarray, np.ndarray], int]]) -> None:
        expected = set(env.possible_agents) - {learner}
        if learner not in env.possible_agents:
            raise ValueError(f"learner must be one of {env.possible_agents}, got {learner!r}")
        if set(others) != expected:
            raise ValueError(f"others: expected a policy for each of {sorted(expected)}, got {sorted(others)}")
        self.env, self.learner, self.others = env, learner, others
        self.observation_space = env.observation_space(learner)
        self.action_space = env.action_space(learner)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._obs, self._infos = self.env.reset(seed=seed, options=options)
        return self._obs[self.learner], self._infos[self.learner]

    def action_masks(self) -> np.ndarray:
        return self._infos[self.learner]["action_mask"].astype(bool)

    def step(self, action: Any):
        actions = {agent: int(policy(self._obs[agent], self._infos[agent]["action_mask"]))
                   for agent, policy in self.others.items()}
        actions[self.learner] = int(action)
        self._obs, rewards, terminations, truncations, self._infos = self.env.step(actions)
        return (self._obs[self.learner], rewards[self.learner], terminations[self.learner],
                truncations[self.learner], self._infos[self.learner])


def parallel_env(**kwargs: Any) -> SharedMemoryEnv:
    """PettingZoo's convention: the Parallel API env."""
    return SharedMemoryEnv(**kwargs)


def env(**kwargs: Any):
    """PettingZoo's convention: the AEC API env (agents act in turn), from the Parallel one."""
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(SharedMemoryEnv(**kwargs))
