"""Imitation for SB3 policies on ``WritePolicyBench-v0``: DAgger from a teacher that labels any state.

A teacher maps the env (its box observation, and for a hindsight teacher the current episode's
labels) to the action it would take. ``dagger`` trains a MaskablePPO's policy network on the
teacher's actions by masked cross-entropy, round after round: round 0 follows the teacher;
each later round follows the student, except with probability ``beta ** round`` per step where
the teacher acts, and the teacher labels every state visited (Ross et al., 2011: the student
learns to recover from its own mistakes, not only the teacher's states). All rounds' data are
kept. After every round the student plays the validation episodes; the best student is kept.

Teachers:

* ``breaking_rule``: ``agents.scripted.feature_rules.BreakingRule`` — ``breaking_detector``'s decisions,
  read from the observation alone, so the student can in principle learn them exactly.
* ``hindsight``: writes exactly the critical steps (hidden labels of the *training* episodes),
  expires a stored item only to make room (the largest non-critical one), and otherwise acts as
  ``breaking_rule`` does about evictions of reverted items. The student cannot see labels: it
  learns how likely a step is to be critical from its features, as a supervised criticality
  model does, together with the teacher's evictions.

``counterfactuals: N`` (``breaking_rule`` only, whose labels are a function of the observation
alone) adds, for every labelled state of an endpoint snapshot that differs from its family's
last shown one (``changed_since_seen``), N copies that show another random combination of
contract changes (which of parameters added / removed, requirements added / removed,
deprecated, undeprecated, removed, restored, and how large), each labelled by the rule. A
stream meets some combinations rarely (a parameter added as required, say), and a student that
never saw one may take it for the common case it resembles; the copies teach the rule over all
of them. They train the policy only, not the value head (they have no return).

The result is an ordinary MaskablePPO model: ``wpb train`` fine-tunes it with RL afterwards
(a config's ``imitation:`` section), it saves and loads like any other and evaluates as
``sb3:PATH``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from wpb_gym.envs.env import WritePolicyBenchEnv

from ..scripted.feature_rules import SKIP, WRITE, BreakingRule

TEACHERS = ("breaking_rule", "hindsight")

# Settings of a config's ``imitation:`` section, with their defaults.
DEFAULTS: dict[str, Any] = {
    "teacher": "breaking_rule",
    "rounds": 6,  # DAgger rounds after the teacher's own
    "episodes": 64,  # training episodes played per round
    "beta": 0.5,  # the teacher acts with probability beta ** round
    "epochs": 8,  # passes over all data kept so far, per round
    "batch_size": 256,
    "learning_rate": 0.001,
    "validation_episodes": 20,
    "counterfactuals": 0,  # relabelled copies per state whose snapshot changed (breaking_rule only)
}


def make_teacher(name: str, env: WritePolicyBenchEnv) -> Callable[[np.ndarray], int]:
    """The teacher ``name`` for ``env`` (a box-observation env): ``teacher(obs) -> action``."""
    if name == "breaking_rule":
        return BreakingRule(env)
    if name == "hindsight":
        return HindsightTeacher(env)
    raise ValueError(f"imitation: unknown teacher {name!r}; expected one of {TEACHERS}")


class HindsightTeacher:
    """Writes the critical steps of the env's current episode (its hidden labels: training
    episodes only), makes room for them by expiring the largest non-critical items, and takes
    ``BreakingRule``'s evictions when they drop a non-critical item."""

    def __init__(self, env: WritePolicyBenchEnv) -> None:
        self.env = env
        self.rule = BreakingRule(env)
        self._episode: Any = None
        self._critical: frozenset[int] = frozenset()

    def __call__(self, obs: np.ndarray) -> int:
        env = self.env
        if env.episode is not self._episode:
            self._episode, self._critical = env.episode, frozenset(env.episode.critical_steps)
        critical, K, slots = self._critical, env.K, env.slot_timesteps
        ruled = self.rule(obs)
        if ruled >= 2 + K and slots[ruled - 2 - K] not in critical:
            return ruled
        if env.t not in critical:
            return SKIP
        mask = env.action_masks()
        if mask[WRITE]:
            return WRITE
        store = env.store
        candidates = [
            (store.get(t).byte_cost, k)
            for k, t in enumerate(slots)
            if t is not None and t not in critical and mask[2 + K + k]
        ]
        return 2 + K + max(candidates)[1] if candidates else SKIP


@dataclass
class Dataset:
    observations: list[np.ndarray]
    masks: list[np.ndarray]
    actions: list[int]
    returns: list[float]  # the rewards from this state to the episode's end (undiscounted)

    def extend(self, other: Dataset) -> None:
        self.observations += other.observations
        self.masks += other.masks
        self.actions += other.actions
        self.returns += other.returns

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return (
            np.asarray(self.observations, dtype=np.float32),
            np.asarray(self.masks, dtype=bool),
            np.asarray(self.actions, dtype=np.int64),
            np.asarray(self.returns, dtype=np.float32),
        )


def settings(section: Mapping[str, Any] | None) -> dict[str, Any]:
    """A config's ``imitation:`` section merged over the defaults, every value checked."""
    section = dict(section or {})
    unknown = sorted(set(section) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"imitation: unknown setting(s) {unknown}; known: {sorted(DEFAULTS)}")
    merged = {**DEFAULTS, **section}
    if merged["teacher"] not in TEACHERS:
        raise ValueError(f"imitation: teacher: expected one of {TEACHERS}, got {merged['teacher']!r}")
    for key in ("rounds", "episodes", "epochs", "batch_size", "validation_episodes", "counterfactuals"):
        value = merged[key]
        at_least = 0 if key in ("rounds", "counterfactuals") else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < at_least:
            kind = "non-negative" if at_least == 0 else "positive"
            raise ValueError(f"imitation: {key}: expected a {kind} int, got {value!r}")
    if merged["counterfactuals"] and merged["teacher"] != "breaking_rule":
        raise ValueError(
            "imitation: counterfactuals need the breaking_rule teacher (the hindsight teacher's labels "
            "depend on the episode, not on the observation alone)"
        )
    for key in ("beta", "learning_rate"):
        value = merged[key]
        top = 1 if key == "beta" else 10
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= top:
            raise ValueError(f"imitation: {key}: expected a number in range, got {value!r}")
    return merged


def _takes_masks(model: Any) -> bool:
    """MaskablePPO's policy is given the masks; PPO's acts and learns without them."""
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    return isinstance(model.policy, MaskableActorCriticPolicy)


def _student_actions(model: Any, observations: np.ndarray, masks: np.ndarray) -> np.ndarray:
    given = {"action_masks": masks} if _takes_masks(model) else {}  # an invalid action is played as SKIP
    actions, _ = model.predict(observations, deterministic=True, **given)
    return np.asarray(actions).reshape(-1)


def play_round(
    model: Any,
    envs: list[WritePolicyBenchEnv],
    teachers: list[Any],
    episodes: int,
    beta: float,
    rng: np.random.Generator,
) -> tuple[Dataset, float]:
    """``episodes`` episodes over ``envs`` in lockstep (one forward pass per lockstep); every
    state labelled by its env's teacher. Returns the data and the mean final F1."""
    data = Dataset([], [], [], [])
    f1s: list[float] = []
    started = 0
    obs: list[np.ndarray | None] = [None] * len(envs)
    running = [Dataset([], [], [], []) for _ in envs]  # each env's episode so far; rewards in returns
    for i, env in enumerate(envs):
        if started < episodes:
            obs[i], _ = env.reset()
            started += 1
    while any(o is not None for o in obs):
        live = [i for i, o in enumerate(obs) if o is not None]
        stacked = np.stack([obs[i] for i in live])
        masks = np.stack([envs[i].action_masks() for i in live])
        student = _student_actions(model, stacked, masks) if beta < 1 else None
        for row, i in enumerate(live):
            label = _allowed(int(teachers[i](stacked[row])), masks[row])
            act = label if student is None or rng.random() < beta else int(student[row])
            obs[i], reward, done, _, info = envs[i].step(act)
            episode = running[i]
            episode.observations.append(stacked[row])
            episode.masks.append(masks[row])
            episode.actions.append(label)
            episode.returns.append(float(reward))
            if done:
                f1s.append(float(info["metrics"]["f1"]))
                episode.returns = np.cumsum(episode.returns[::-1])[::-1].tolist()  # rewards to go
                data.extend(episode)
                running[i] = Dataset([], [], [], [])
                if started < episodes:
                    obs[i], _ = envs[i].reset()
                    started += 1
                else:
                    obs[i] = None
    return data, float(np.mean(f1s)) if f1s else 0.0


def fit(
    model: Any, data: Dataset, epochs: int, batch_size: int, learning_rate: float, rng: np.random.Generator
) -> float:
    """Masked cross-entropy of the policy's action distribution on the teacher's actions, plus
    the value head's squared error on the returns; the last epoch's mean loss."""
    import torch

    observations, masks, actions, returns = data.arrays()
    policy, masked = model.policy, _takes_masks(model)
    optimizer = torch.optim.Adam(policy.parameters(), lr=learning_rate)
    policy.set_training_mode(True)
    n = len(actions)
    loss_sum = 0.0
    for _ in range(epochs):
        order = rng.permutation(n)
        loss_sum, batches = 0.0, 0
        for start in range(0, n, batch_size):
            index = order[start : start + batch_size]
            obs_t = torch.as_tensor(observations[index])
            # The value head learns the returns of the (mostly the student's) behaviour, so
            # that RL fine-tuning starts from a critic that matches the actor.
            given = {"action_masks": masks[index]} if masked else {}
            values, log_prob, _ = policy.evaluate_actions(obs_t, torch.as_tensor(actions[index]), **given)
            loss = -log_prob.mean()
            target = torch.as_tensor(returns[index])
            known = ~torch.isnan(target)  # counterfactual states have no return
            if bool(known.any()):
                loss = loss + 0.5 * torch.nn.functional.mse_loss(values.flatten()[known], target[known])
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimizer.step()
            loss_sum += loss.item()
            batches += 1
        loss_sum /= max(1, batches)
    policy.set_training_mode(False)
    return loss_sum


def dagger(
    model: Any,
    env_kwargs: Mapping[str, Any],
    validation_kwargs: Mapping[str, Any],
    config: Mapping[str, Any],
    seed: int,
    log: Callable[[str], None] | None = None,
) -> list[dict[str, float]]:
    """Train ``model``'s policy by DAgger (see the module docstring) on episodes of
    ``env_kwargs``; keep the round that scores best on ``validation_kwargs``' episodes.
    Returns one record per round (``round``, ``samples``, ``loss``, ``rollout_f1``,
    ``validation_return``: the mean episode return there, the F1 with terminal rewards)."""
    import copy

    config = settings(config)
    rng = np.random.default_rng(seed)
    n_envs = 8
    envs = [WritePolicyBenchEnv(**{**env_kwargs, "observation_mode": "box"}) for _ in range(n_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=seed * 1_000 + i)
    teachers = [make_teacher(config["teacher"], env) for env in envs]
    validation = [
        WritePolicyBenchEnv(**{**validation_kwargs, "observation_mode": "box", "episode_order": "cycle"})
        for _ in range(n_envs)
    ]
    data = Dataset([], [], [], [])
    history: list[dict[str, float]] = []
    best: tuple[float, Any] | None = None
    for round_ in range(config["rounds"] + 1):
        beta = config["beta"] ** round_ if round_ else 1.0
        played, rollout_f1 = play_round(model, envs, teachers, config["episodes"], beta, rng)
        data.extend(played)
        if config["counterfactuals"]:
            data.extend(counterfactual_states(played, teachers[0], config["counterfactuals"], rng))
        loss = fit(model, data, config["epochs"], config["batch_size"], config["learning_rate"], rng)
        score = validate(model, validation, config["validation_episodes"])
        history.append(
            {
                "round": round_,
                "samples": len(data.actions),
                "loss": loss,
                "rollout_f1": rollout_f1,
                "validation_return": score,
            }
        )
        if log is not None:
            log(f"imitation round {round_}: {len(data.actions)} samples, loss {loss:.4f}, validation {score:.4f}")
        if best is None or score > best[0]:
            best = (score, copy.deepcopy(model.policy.state_dict()))
    assert best is not None
    model.policy.load_state_dict(best[1])
    return history


def _allowed(label: int, mask: np.ndarray) -> int:
    """The teacher's action, or SKIP where the mask refuses it, as the env plays a refused action.
    The teachers judge the byte budget alone: under a limit beside it (kind budgets, write time)
    they may name a WRITE the store refuses, and the masked cross-entropy of such a label would
    swamp the loss. Without limits every label they give is allowed (measured on every contract
    regime and the default one at 1 and 10 KB)."""
    return label if mask[label] else SKIP


def counterfactual_states(data: Dataset, rule: BreakingRule, copies: int, rng: np.random.Generator) -> Dataset:
    """``copies`` relabelled variants of each state in ``data`` whose snapshot differs from its
    family's last shown one (see the module docstring); their returns are NaN."""
    out = Dataset([], [], [], [])
    changed, changes, flags = rule.contract_change_features
    for obs, mask in zip(data.observations, data.masks, strict=True):
        if not obs[changed]:
            continue
        for _ in range(copies):
            present = rng.random(len(changes)) < 0.5
            if not present.any():
                present[rng.integers(len(changes))] = True
            sizes = np.where(flags, 1.0, rng.uniform(0.05, 1.0, len(changes)))
            variant = obs.copy()
            variant[changes] = np.where(present, sizes, 0.0)
            out.observations.append(variant)
            out.masks.append(mask)
            out.actions.append(_allowed(int(rule(variant)), mask))
            out.returns.append(float("nan"))
    return out


def validate(model: Any, envs: list[WritePolicyBenchEnv], episodes: int) -> float:
    """The deterministic student's mean episode return on the first ``episodes`` episodes of
    ``envs``' source (with terminal rewards: the mean F1, less any invalid-action penalties)."""
    for env in envs:
        env.reset(seed=0)  # a seeded reset restarts the cycle at episode 0
    returns: list[float] = []
    totals = [0.0] * len(envs)
    obs: list[Any] = [None] * len(envs)
    next_index = 0
    for i, env in enumerate(envs):
        if next_index < episodes:
            obs[i], _ = env.reset(options={"episode_index": next_index})
            next_index += 1
    while any(o is not None for o in obs):
        live = [i for i, o in enumerate(obs) if o is not None]
        stacked = np.stack([obs[i] for i in live])
        masks = np.stack([envs[i].action_masks() for i in live])
        actions = _student_actions(model, stacked, masks)
        for row, i in enumerate(live):
            obs[i], reward, done, _, info = envs[i].step(int(actions[row]))
            totals[i] += float(reward)
            if done:
                returns.append(totals[i])
                totals[i] = 0.0
                if next_index < episodes:
                    obs[i], _ = envs[i].reset(options={"episode_index": next_index})
                    next_index += 1
                else:
                    obs[i] = None
    return float(np.mean(returns))
