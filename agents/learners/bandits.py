"""Bandit learners (spec §5.3): contextual arm selection per step type, learned from env rewards.

Both learners see a step the way every unprivileged agent does (``agents.scripted.observe``): its
kind, whether its endpoint family was shown before, whether and how it changed since, whether
memory holds the family, whether a WRITE fits, plus a coarse bucket of the remaining budget.
That *context* is a small discrete tuple (tens of values in practice)::

    (kind, status, in_memory, fits, budget_bucket)

``kind`` is ``"endpoint"``, ``"doc"``, ``"guide"`` or ``"other"``; ``status`` is ``"new"``
(family not shown before; ``"new:removed"`` when that first sighting shows the endpoint
removed), ``"same"`` (shown, unchanged) or ``"changed:"`` followed by the change flags, the
contract comparisons with the last shown step of the family that the env's observation makes
(``*_since_seen``): ``v`` version up, ``a`` / ``r`` parameters added / removed, ``q`` / ``o``
required parameters added / removed, ``d`` / ``u`` newly deprecated / undeprecated, ``x`` /
``b`` newly removed / restored, ``e`` a return to a contract the family showed earlier (a
revert), e.g. ``"changed:vr"``; ``budget_bucket`` is ``floor(remaining / budget * buckets)``
(capped at ``buckets - 1``).

Arms are the write decisions ``SKIP``, ``WRITE`` and ``MERGE`` (MERGE only when the store
would accept a MERGE into the newest stored base item of the step's ``api`` now). What a
WRITE that does not fit needs is scripted: the oldest items are expired until it fits, the
whole eviction planned before the first EXPIRE, and nothing is expired (and WRITE is not an
arm) when the step would not fit even in empty memory. Per step the agent yields its EXPIREs
first, then at most one WRITE or MERGE, last.

The learning signal is the environment's reward and nothing else: ``end_episode`` gets, per
timestep, the rewards the env paid while the agent decided that step
(``EpisodeOutcome.rewards``; with ``dense_reward=True`` their sum is the episode's F1). In
training mode each ``(context, arm)`` chosen in the episode has its incremental mean updated
with its timestep's reward. Labels are never read, and the offline evaluator, which gives no
rewards (``rewards=None``), teaches nothing.

* ``epsilon_greedy``: in training, a uniformly random available arm with probability
  ``epsilon``, else the arm with the best mean.
* ``bandit_ucb``: UCB1 in training — an arm never tried in the context first, else the arm
  maximising ``mean + c * sqrt(ln N / n)``; pulls made earlier in the current episode, whose
  rewards are not known yet, count in ``n`` and ``N``.

Modes: ``train()`` turns exploration and learning on (from the next episode), ``eval()``
turns them off. A new learner is in evaluation mode, as ``fit`` leaves it: in evaluation
mode both learners act greedily on the means and learn nothing, so they are deterministic
and carry nothing from one episode to the next. Greedy choices compare SKIP (worth 0 before
it has data: the reward of doing nothing) with the available arms that have data; ties go to
the first arm in ``SKIP, WRITE, MERGE`` order, so an untrained agent skips everything. An arm
without data in the step's context uses its data pooled over that context's budget buckets.
Exploration draws from ``numpy.random.default_rng([seed, n])`` in the n-th training
episode, so training is reproducible. ``fit`` (and ``agents.learners.training.train_learner``) train through
``agents.env_adapter`` in a ``WritePolicyBench-v0`` env with ``dense_reward=True``;
``save`` / ``load`` keep the state as JSON.
"""

from __future__ import annotations

import json
import math
import os
from abc import abstractmethod
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from wpb_gym.core.checks import finite, require_int
from wpb_gym.core.policy import EpisodeContext, EpisodeOutcome
from wpb_gym.core.store import StoreView
from wpb_gym.core.types import MemoryAction, Step

from ..base import Agent
from ..scripted.observe import StreamObserver
from .contexts import (  # noqa: F401 (change_status, eviction_plan: part of this module's interface)
    DEFAULT_BUDGET_BUCKETS,
    Context,
    change_status,
    eviction_plan,
    merge_target,
    step_context,
)

ARMS: tuple[str, ...] = ("SKIP", "WRITE", "MERGE")
STATE_FORMAT = "wpb-learner"
STATE_VERSION = 2  # 2: the contract flags of CHANGE_FLAGS (1 had v, p, d)


# ---------------------------------------------------------------------------- the learners
class BanditLearner(Agent):
    """Shared machinery of the bandit learners (see the module docstring); not registered itself."""

    kind: ClassVar[str] = "learner"
    track: ClassVar[str] = "unprivileged"
    aliases: ClassVar[tuple[str, ...]] = ()

    def __init__(self, seed: int = 0, budget_buckets: int = DEFAULT_BUDGET_BUCKETS) -> None:
        seed, budget_buckets = require_int(seed, "seed"), require_int(budget_buckets, "budget_buckets", 1)
        self.seed = seed
        self.budget_buckets = budget_buckets
        self.training = False  # a new learner evaluates; train() / fit() switch training on
        self.episodes_trained = 0  # training episodes started (they number the RNG streams)
        self.updates = 0  # (context, arm) updates made
        self.counts: dict[Context, list[int]] = {}
        self.means: dict[Context, list[float]] = {}
        self._observer = StreamObserver()
        self._rng: np.random.Generator | None = None
        self._choices: list[tuple[int, Context, int]] = []
        self._pending: dict[Context, list[int]] = {}
        self._episode_training = False
        self._started = False

    def _adopt(self, path: str | None) -> None:
        """With a ``path`` (a file ``save`` wrote, e.g. ``wpb train --algo epsilon_greedy``), become
        that trained learner, in evaluation mode: its parameters replace the ones given."""
        if path is None:
            return
        trained = type(self).load(path)
        self.__dict__.update(trained.__dict__)
        self.eval()

    # ---------------------------------------------------------------- modes
    def train(self, mode: bool = True) -> BanditLearner:
        """Training mode: explore and learn from env rewards (takes effect at the next episode)."""
        self.training = bool(mode)
        return self

    def eval(self) -> BanditLearner:
        """Evaluation mode: greedy on the means, no exploration, no learning."""
        return self.train(False)

    # ---------------------------------------------------------------- episode hooks
    def start_episode(self, context: EpisodeContext | None = None) -> None:
        self._observer.reset()
        self._choices = []
        self._pending = {}
        self._episode_training = self.training
        if self.training:
            self._rng = np.random.default_rng([self.seed, self.episodes_trained])
            self.episodes_trained += 1
        else:
            self._rng = None
        self._started = True

    def select(self, step: Step, store: StoreView) -> Iterator[MemoryAction]:
        # Not a generator: the decision (and the eviction plan) is made when select() is called.
        if not self._started:  # used without the hooks: behave as at an episode start
            self.start_episode(None)
        change = self._observer.describe(step, store)
        self._observer.remember(step)
        ctx = step_context(change, store, self.budget_buckets)
        t = step.t
        plan = eviction_plan(store, change.cost, t)
        target = merge_target(step, store)
        available = (True, plan is not None, target is not None)
        arm = self._choose(ctx, available)
        self._choices.append((t, ctx, arm))
        if self._episode_training:
            self._pending.setdefault(ctx, [0] * len(ARMS))[arm] += 1
        if arm == 1:
            actions = [MemoryAction("EXPIRE", target_t=s, reason="evict oldest") for s in plan]
            actions.append(MemoryAction("WRITE", step=step, reason=f"{self.name} {ctx[1]}"))
            return iter(actions)
        if arm == 2:
            return iter((MemoryAction("MERGE", step=step, target_t=target, reason=f"{self.name} {ctx[1]}"),))
        return iter(())

    def end_episode(self, outcome: EpisodeOutcome) -> None:
        self._started = False
        choices, self._choices, self._pending = self._choices, [], {}
        if not self._episode_training or outcome.rewards is None:
            return
        rewards = outcome.rewards
        for t, ctx, arm in choices:
            if not 0 <= t < len(rewards):
                raise ValueError(f"{self.name}: no reward for timestep {t} (the outcome has {len(rewards)} rewards)")
            self._update(ctx, arm, float(rewards[t]))

    def _update(self, ctx: Context, arm: int, reward: float) -> None:
        counts = self.counts.setdefault(ctx, [0] * len(ARMS))
        means = self.means.setdefault(ctx, [0.0] * len(ARMS))
        counts[arm] += 1
        means[arm] += (reward - means[arm]) / counts[arm]
        self.updates += 1

    # ---------------------------------------------------------------- arm choice
    def _choose(self, ctx: Context, available: tuple[bool, ...]) -> int:
        if self._episode_training:
            return self._explore(ctx, available)
        return self._greedy(ctx, available)

    def _greedy(self, ctx: Context, available: tuple[bool, ...]) -> int:
        """The best available arm by mean: SKIP always competes (worth 0 without data, the
        reward of doing nothing), other arms only once they have data; ties to the first arm.

        An arm without data in ``ctx`` takes its data pooled over ``ctx`` at every budget
        bucket: the bucket only refines the step's context, and training may never have seen
        a bucket that evaluation meets (a learner that filled its memory while exploring sees
        an empty one only when it evaluates)."""
        counts, means = self._arm_data(ctx)
        best, best_value = 0, means[0] if counts[0] else 0.0
        for arm in range(1, len(ARMS)):
            if available[arm] and counts[arm] and means[arm] > best_value:
                best, best_value = arm, means[arm]
        return best

    def _arm_data(self, ctx: Context) -> tuple[list[int], list[float]]:
        """Per arm, its count and mean in ``ctx``, or pooled over the budget buckets where it has none."""
        counts = list(self.counts.get(ctx) or [0] * len(ARMS))
        means = list(self.means.get(ctx) or [0.0] * len(ARMS))
        if all(counts):
            return counts, means
        for arm in (a for a in range(len(ARMS)) if not counts[a]):
            n = total = 0.0
            for bucket in range(self.budget_buckets):
                other = (*ctx[:-1], bucket)
                if other in self.counts:
                    n += self.counts[other][arm]
                    total += self.counts[other][arm] * self.means[other][arm]
            if n:
                counts[arm], means[arm] = int(n), total / n
        return counts, means

    @abstractmethod
    def _explore(self, ctx: Context, available: tuple[bool, ...]) -> int:
        """The arm to try in training mode."""

    # ---------------------------------------------------------------- inspection
    def policy_table(self) -> dict[Context, str]:
        """The arm the greedy policy takes in each context seen in training (all arms available)."""
        return {ctx: ARMS[self._greedy(ctx, (True, True, True))] for ctx in sorted(self.counts)}

    # ---------------------------------------------------------------- training
    def fit(
        self,
        env: Any,
        episodes: int,
        *,
        seed: int | None = None,
        options: dict[str, Any] | None = None,
        progress: bool = False,
    ) -> list[dict[str, float]]:
        """Train for ``episodes`` episodes of ``env`` (a ``WritePolicyBench-v0`` env with
        ``dense_reward=True``); return each episode's metric row.

        ``seed`` seeds the env's first reset (which episodes are drawn); ``options`` are passed
        to every reset. The agent trains in training mode and is left in evaluation mode.
        """
        from ..env_adapter import run_agent_in_env

        episodes = require_int(episodes, "episodes")
        base = getattr(env, "unwrapped", env)
        if not getattr(base, "dense_reward", False):
            raise ValueError(
                f"{self.name} learns from per-step rewards: train it in an env made with dense_reward=True, "
                "e.g. gymnasium.make('WritePolicyBench-v0', dense_reward=True)"
            )
        indices: Iterable[int] = range(episodes)
        if progress:
            from tqdm.auto import tqdm

            indices = tqdm(indices, desc=f"training {self.name}", unit="episode")
        history = []
        self.train()
        try:
            for i in indices:
                run = run_agent_in_env(self, env, seed=seed if i == 0 else None, options=options)
                history.append(run.metrics)
        finally:
            self.eval()
        return history

    # ---------------------------------------------------------------- parameters and state
    def params(self) -> dict[str, Any]:
        return {"seed": self.seed, "budget_buckets": self.budget_buckets}

    def state_dict(self) -> dict[str, Any]:
        """Everything ``load`` needs to rebuild an agent that acts identically (JSON-ready)."""
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "agent": self.name,
            "params": self.params(),
            "training": self.training,
            "episodes_trained": self.episodes_trained,
            "updates": self.updates,
            "table": [
                {"context": list(ctx), "counts": list(self.counts[ctx]), "means": list(self.means[ctx])}
                for ctx in sorted(self.counts)
            ],
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the agent's parameters and value tables to ``path`` as JSON."""
        path = Path(path)
        path.write_text(json.dumps(self.state_dict(), indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BanditLearner:
        """The agent saved at ``path`` (``BanditLearner.load`` accepts either learner)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FileNotFoundError(f"learner state file {str(path)!r} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read learner state file {str(path)!r}: {exc}") from None
        try:
            state = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"{str(path)!r} is not a learner state file: invalid JSON ({exc})") from None
        try:
            return cls.from_state(state)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{str(path)!r} is not a valid learner state file: {exc}") from None

    @classmethod
    def from_state(cls, state: Any) -> BanditLearner:
        """Rebuild an agent from ``state_dict()`` output."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"expected a JSON object with format {STATE_FORMAT!r}")
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported state version {state.get('version')!r} (this code reads {STATE_VERSION})")
        name = state.get("agent")
        target = LEARNERS.get(name)
        if target is None:
            raise ValueError(f"it holds agent {name!r}, not one of the learners {sorted(LEARNERS)}")
        if not issubclass(target, cls):
            raise ValueError(f"it holds a {name!r} learner, not {cls.name!r}")
        params = state["params"]
        if not isinstance(params, dict):
            raise TypeError("'params' must be an object")
        agent = target(**params)
        if not isinstance(state["training"], bool):
            raise ValueError(f"'training' must be true or false, got {state['training']!r}")
        agent.training = state["training"]
        agent.episodes_trained = require_int(state["episodes_trained"], "episodes_trained")
        agent.updates = require_int(state.get("updates", 0), "updates")
        for row in state["table"]:
            ctx = _context(row["context"])
            if ctx in agent.counts:
                raise ValueError(f"context {list(ctx)} appears twice in the table")
            counts = [require_int(n, "counts") for n in row["counts"]]
            if not all(isinstance(m, (int, float)) and not isinstance(m, bool) for m in row["means"]):
                raise ValueError(f"context {list(ctx)}: means must be numbers, got {row['means']!r}")
            means = [float(m) for m in row["means"]]
            if len(counts) != len(ARMS) or len(means) != len(ARMS):
                raise ValueError(f"context {list(ctx)}: expected {len(ARMS)} counts and means (arms {ARMS})")
            if not all(math.isfinite(m) for m in means):
                raise ValueError(f"context {list(ctx)}: means must be finite")
            agent.counts[ctx] = counts
            agent.means[ctx] = means
        return agent




def _context(value: Any) -> Context:
    if (
        not isinstance(value, list)
        or len(value) != 5
        or not all(isinstance(v, str) for v in value[:2])
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value[2:])
    ):
        raise ValueError(f"a context is [kind, status, in_memory, fits, budget_bucket], got {value!r}")
    return tuple(value)  # type: ignore[return-value]


class EpsilonGreedyAgent(BanditLearner):
    name: ClassVar[str] = "epsilon_greedy"
    aliases: ClassVar[tuple[str, ...]] = ("EpsilonGreedy",)
    description: ClassVar[str] = (
        "Contextual epsilon-greedy bandit over SKIP/WRITE/MERGE per step type, learned from env rewards"
    )

    def __init__(
        self,
        epsilon: float = 0.1,
        seed: int = 0,
        budget_buckets: int = DEFAULT_BUDGET_BUCKETS,
        path: str | None = None,
    ) -> None:
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be a probability in [0, 1], got {epsilon!r}")
        super().__init__(seed=seed, budget_buckets=budget_buckets)
        self.epsilon = float(epsilon)
        self._adopt(path)

    def params(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, **super().params()}  # (a path is not a parameter of the state)

    def _explore(self, ctx: Context, available: tuple[bool, ...]) -> int:
        if self.epsilon > 0.0 and self._rng.random() < self.epsilon:
            arms = [arm for arm, ok in enumerate(available) if ok]
            return arms[int(self._rng.integers(len(arms)))]
        return self._greedy(ctx, available)


class BanditUCBAgent(BanditLearner):
    name: ClassVar[str] = "bandit_ucb"
    aliases: ClassVar[tuple[str, ...]] = ("BanditUCB",)
    description: ClassVar[str] = "Contextual UCB1 bandit over SKIP/WRITE/MERGE per step type, learned from env rewards"

    def __init__(
        self,
        c: float = math.sqrt(2),
        seed: int = 0,
        budget_buckets: int = DEFAULT_BUDGET_BUCKETS,
        path: str | None = None,
    ) -> None:
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not finite(c) or c < 0:
            raise ValueError(f"c must be a finite non-negative number, got {c!r}")
        super().__init__(seed=seed, budget_buckets=budget_buckets)
        self.c = float(c)
        self._adopt(path)

    def params(self) -> dict[str, Any]:
        return {"c": self.c, **super().params()}

    def _explore(self, ctx: Context, available: tuple[bool, ...]) -> int:
        counts = self.counts.get(ctx) or [0] * len(ARMS)
        means = self.means.get(ctx) or [0.0] * len(ARMS)
        pending = self._pending.get(ctx) or [0] * len(ARMS)
        pulls = [n + p for n, p in zip(counts, pending, strict=True)]
        for arm, ok in enumerate(available):  # untried arms first
            if ok and pulls[arm] == 0:
                return arm
        log_total = math.log(sum(p for p, ok in zip(pulls, available, strict=True) if ok))
        best, best_value = 0, -math.inf
        for arm, ok in enumerate(available):
            if ok:
                value = means[arm] + self.c * math.sqrt(log_total / pulls[arm])
                if value > best_value:
                    best, best_value = arm, value
        return best


LEARNERS: dict[str, type[BanditLearner]] = {cls.name: cls for cls in (EpsilonGreedyAgent, BanditUCBAgent)}


def make_learner(name: str, **params: Any) -> BanditLearner:
    """A new learner by name or alias (``epsilon_greedy`` / ``EpsilonGreedy``, ``bandit_ucb`` / ``BanditUCB``)."""
    for cls in LEARNERS.values():
        if name == cls.name or name in cls.aliases:
            return cls(**params)
    known = sorted(n for cls in LEARNERS.values() for n in (cls.name, *cls.aliases))
    raise ValueError(f"unknown learner {name!r}; known learners: {known}")
