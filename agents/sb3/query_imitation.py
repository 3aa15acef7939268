"""MaskablePPO on the query tier's env, by DAgger from ``causal_privileged``.

The student is a MaskablePPO model with ``QueryRowsPolicy`` on ``QueryTierEnv(slots=K,
word_buckets=B)``: its observation shows the candidate endpoint and the ``K`` slots the env
shows, each with the stream's statistics and the hashed words of its contract. The teacher is
``causal_privileged`` (the hidden generator state as of the current step, never the future)
acting through the same env: it values the candidate and the endpoints of the items in view,
expires a superseded state of the candidate's endpoint first, and evicts among the items in view
(lowest value per byte first) only when the candidate is worth more than what it evicts
(``SlotTeacher``). It sees what the slots show and no more, so every label is an action the
student can take. On validation episodes that restriction moves the teacher's accuracy by at
most 0.004 at ``K = 16`` on ``queries_medium`` at 1 and 10 KB and on ``queries_hard`` at 10 KB,
and costs it 0.040 on ``queries_medium`` at 100 KB at ``K = 16`` and 0.003 at ``K = 32`` (the
recipe's; ``docs/query-tier.md`` has the figures and the code that measured them). With every
item in view it plays ``causal_privileged`` exactly. Like that engine, it plans a step's
evictions once and then makes them; when the student, acting between its labels, breaks such a
plan, it plans afresh from the memory left.

Each round plays ``episodes`` training episodes (the generated set of ``episode_seed = seed``,
in order, each at a budget of ``budgets`` in turn): round 0 as the teacher acts, later rounds as
the student acts except with probability ``beta ** round`` per step, the teacher labelling every
state visited (Ross et al., 2011). A state whose label is SKIP is kept with probability
``skip_keep`` and weighs ``1 / skip_keep``: most snapshots are skipped, and the decisions that
shape memory are the others. All rounds' states are kept, compact (``QueryRows.compact``). The
rows' word estimates are set once, before round 0 is played, to ridge regressions, on the hashed
bags, of the hidden draws behind the words of round 0's episodes (``fit_words``: the standard
normal of each endpoint's integrations and of each breaking change's burst, as
``agents.learners.word_estimates`` reads them); the kept states hold them. Round 0's states
first fit the policy's ``value_members`` alone for ``value_warmup`` passes. Each round then fits
the policy by masked cross-entropy on the actions plus ``value_weight`` times each value
member's error against ``log1p`` of the teacher's value of each row's endpoint (``value_loss``:
squared, or the Gaussian negative log-likelihood under the log variance each member also gives).
The actions are, with ``action_labels: rule_on_values``, those the teacher's rule takes on the
student's own values at each state (``QueryRows.rule_actions``): the teacher's actions follow
values the student cannot see, and a student fitted to them hedges towards SKIP wherever its
values and the teacher's part (on the validation episodes, one fitted to the teacher's actions
answered 0.120 at 1 KB on ``queries_hard`` where the rule on its own values answered 0.209:
``docs/query-tier.md``). With ``"teacher"``, the teacher's actions. After every round the
student plays the validation episodes (seed ``seed + 1_000_003``, the first
``validation_episodes``, at every budget); the student with the best mean accuracy is kept.
Training stops after ``rounds`` rounds, or before a round that would end past ``minutes`` (taken
as 1.25 times as long as the last one: each fits on more states).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.atomic_files import write_atomic
from wpb_gym.core.checks import require_int
from wpb_gym.core.policy import EpisodeContext
from wpb_gym.core.tracks import policy_episode
from wpb_gym.envs.observation.query_words import WordBags
from wpb_gym.envs.query_env import SKIP, WRITE, QueryTierEnv

from ..held_out import HELD_OUT_SEED_OFFSET
from ..learners.word_estimates import Examples, examples, ridge_fit
from ..scripted.causal_privileged import CausalPrivileged
from ..versions import package_versions

# Settings of a query-tier recipe's ``imitation:`` section, with their defaults.
DEFAULTS: dict[str, Any] = {
    "rounds": 10,
    "episodes": 10,  # training episodes per round
    "beta": 0.5,  # the teacher acts with probability beta ** round
    "epochs": 4,  # passes over all states kept so far, per round
    "batch_size": 512,
    "learning_rate": 0.001,
    "skip_keep": 0.2,
    "value_weight": 1.0,
    "value_loss": "gaussian_nll",
    "word_ridge": 1.0,  # the ridge penalty of the rows' word estimates
    "value_members": 3,  # networks of their own for the row values, fitted each on its own
    "value_warmup": 12,  # passes fitting the row values alone on round 0's states, before its fit
    "action_labels": "rule_on_values",  # the teacher's rule on the student's own values, or "teacher"
    "budgets": [1024, 10240, 102400],
    "validation_episodes": 3,
    "minutes": 30.0,
}
VALUE_LOSSES = ("mse", "gaussian_nll")
ACTION_LABELS = ("teacher", "rule_on_values")
_WHOLE = ("rounds", "episodes", "epochs", "batch_size", "validation_episodes", "value_members")
_COUNTS = ("value_warmup",)  # may be 0
# (low, whether low itself is allowed, high)
_NUMBERS = {"beta": (0.0, True, 1.0), "learning_rate": (0.0, False, 1.0), "skip_keep": (0.0, False, 1.0),
            "value_weight": (0.0, True, math.inf), "word_ridge": (0.0, False, math.inf),
            "minutes": (0.0, False, math.inf)}
# What the env needs beside the regime's options: the layout the policy reads.
ENV_DEFAULTS = {"slots": 32, "word_buckets": 256}
# Env arguments training sets itself or cannot take, and why.
SET_BY_TRAINING = {
    "episode_seed": "set by --seed",
    "budget_bytes": "set by the recipe's imitation.budgets",
    "budget_fraction": "set by the recipe's imitation.budgets",
    "episodes": "not read: the recipe trains on the tier's generated episodes",
    "endless": "not read: the recipe trains on fixed-length episodes",
    "answers": "not read: the teacher and the validation need the episodes' queries",
}


def settings(section: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``imitation:`` section over ``DEFAULTS``, checked (errors name the setting)."""
    given = dict(section or {})
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"imitation: unknown setting(s) {unknown}; known: {sorted(DEFAULTS)}")
    merged = {**DEFAULTS, **given}
    for name in _WHOLE:
        require_int(merged[name], f"imitation.{name}", 1)
    for name in _COUNTS:
        require_int(merged[name], f"imitation.{name}", 0)
    for name, (low, closed, high) in _NUMBERS.items():
        value = merged[name]
        number = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
        if not (number and (value >= low if closed else value > low) and value <= high):
            bound = f"{'>=' if closed else '>'} {low}" + (f" and <= {high}" if high != math.inf else "")
            raise ValueError(f"imitation.{name}: expected a finite number {bound}, got {value!r}")
    if merged["value_loss"] not in VALUE_LOSSES:
        raise ValueError(f"imitation.value_loss: expected one of {list(VALUE_LOSSES)}, got {merged['value_loss']!r}")
    if merged["action_labels"] not in ACTION_LABELS:
        raise ValueError(f"imitation.action_labels: expected one of {list(ACTION_LABELS)}, "
                         f"got {merged['action_labels']!r}")
    if merged["action_labels"] == "rule_on_values" and not merged["value_weight"]:
        raise ValueError("imitation.value_weight: 0 leaves the values that label the actions (action_labels: "
                         "rule_on_values) unfitted after the warm-up; give it a positive weight")
    budgets = merged["budgets"]
    if not isinstance(budgets, list) or not budgets:
        raise ValueError(f"imitation.budgets: expected a list of budgets in bytes, got {budgets!r}")
    for b in budgets:
        require_int(b, "imitation.budgets", 1)
    return merged


class SlotTeacher:
    """``causal_privileged`` acting on a ``QueryTierEnv`` through the items its slots show (see
    the module docstring). ``start()`` after each reset; ``act()``, once per state, then gives
    the env action for the current state and leaves in ``values`` the values it decided by:
    the teacher's value of each row's endpoint (the candidate's, then each slot's; 0 for an
    empty slot), or those it was given. Whoever acts between its labels may break a plan of
    evictions: the next call finds memory other than the plan expects and plans afresh."""

    def __init__(self, env: QueryTierEnv) -> None:
        self.env = env
        self.values = np.zeros(1 + env.K, dtype=np.float32)

    def start(self) -> None:
        env = self.env
        episode = env.episode
        self._teacher = CausalPrivileged()
        self._teacher.start_episode(EpisodeContext(length=len(episode), budget_bytes=env.store.max_bytes,
                                                   track="privileged", episode=episode))
        self._steps = policy_episode(episode, "privileged").steps
        self._fed = 0
        self._replaced_at = -1  # the step at which the candidate's old state was expired
        # The evictions planned at a step and not yet made, as the engine plans them once, with
        # what memory should hold when the next is due: a plan another actor broke is dropped.
        self._planned: tuple[int, list[int], frozenset[int]] = (-1, [], frozenset())

    def act(self, values: np.ndarray | None = None) -> int:
        """The env action for the current state. ``values``, when given, are the rows' values to
        decide by (the candidate's, then each slot's; what a student estimates) in place of the
        hidden state's: the teacher's rule played on another's values."""
        env, teacher = self.env, self._teacher
        while self._fed <= env.t:  # every step up to the current one, once, in order
            teacher.observe(self._steps[self._fed])
            self._fed += 1
        step = env.current_step()
        api, cost = step.observation["api"], estimate_bytes(step)
        slots = env.slot_items()
        in_view = {item.t for item in slots if item is not None}
        shown = [item for item in env.store.iter_items() if item.t in in_view]  # in memory's order, as the engine
        if values is None:
            teacher.prepare([item.api for item in shown] + [api], env.t)
            row = [teacher.value(api), *(teacher.value(item.api) if item is not None else 0.0 for item in slots)]
        else:
            row = [float(v) for v in values]
        self.values[:] = row
        # Decided on the values as given (float64 for the teacher's own), not their float32 copy.
        value = {item.t: row[1 + k] for k, item in enumerate(slots) if item is not None}
        candidate_value = row[0]
        for k, item in enumerate(slots):
            if item is not None and item.api == api:  # its old state is stale now
                self._replaced_at = env.t
                return 3 + k
        planned_at, victims, expected = self._planned
        held = frozenset(item.t for item in env.store.iter_items())
        if planned_at == env.t and held == expected:  # the rest of this step's plan: its next eviction, then the WRITE
            if victims:
                victim = victims.pop(0)
                self._planned = (env.t, victims, held - {victim})
                return 3 + next(k for k, item in enumerate(slots) if item is not None and item.t == victim)
            return WRITE
        # The engine (KeepLatest._admit) brings a state memory held up to date whatever it costs
        # to, and admits a new one only for more than it evicts.
        replacing = self._replaced_at == env.t
        store = env.store
        room = store.remaining()
        if cost > store.max_bytes:
            return SKIP
        if cost <= room:
            return WRITE if replacing or candidate_value > 0 else SKIP
        lost = 0.0
        victims = []
        for item in sorted(shown, key=lambda item: value[item.t] / item.byte_cost):
            if room >= cost:
                break
            victims.append(item.t)
            room += item.byte_cost
            lost += value[item.t]
        if room < cost or not (replacing or candidate_value > lost):
            return SKIP
        # Evicting one moves the others up the slots (the env ranks what is left): all stay in view.
        self._planned = (env.t, victims[1:], held - {victims[0]})
        return 3 + next(k for k, item in enumerate(slots) if item is not None and item.t == victims[0])


class States:
    """The labelled states kept so far, in arrays that grow by a quarter when full: a fit reads
    them without copying. The observations are kept compact (``QueryRows.compact``: each row's
    bags of words replaced by its word estimates), float16, about 2.4 KB a state with 32 slots."""

    def __init__(self) -> None:
        self._n = 0
        self._arrays: dict[str, np.ndarray] = {}

    def add(self, compact: np.ndarray, mask: np.ndarray, action: int, weight: float, values: np.ndarray) -> None:
        row = {"observations": compact.astype(np.float16), "masks": mask, "actions": np.int64(action),
               "weights": np.float32(weight), "values": np.log1p(values).astype(np.float32)}
        if not self._arrays:
            self._arrays = {k: np.empty((1024, *np.shape(v)), dtype=np.asarray(v).dtype) for k, v in row.items()}
        elif self._n == len(self._arrays["actions"]):
            grown = self._n + max(1024, self._n // 4)
            for k, array in self._arrays.items():
                bigger = np.empty((grown, *array.shape[1:]), dtype=array.dtype)
                bigger[:self._n] = array
                self._arrays[k] = bigger
        for k, v in row.items():
            self._arrays[k][self._n] = v
        self._n += 1

    def __getattr__(self, name: str) -> np.ndarray:
        arrays = self.__dict__.get("_arrays")
        if arrays is None or name not in arrays:
            raise AttributeError(name)
        return arrays[name][:self._n]

    def __len__(self) -> int:
        return self._n


@dataclass
class _Episode:
    env: QueryTierEnv
    teacher: SlotTeacher
    observation: np.ndarray
    accuracy: float | None = None


def _start(env_kwargs: Mapping[str, Any], seed: int, index: int, budget: int) -> _Episode:
    env = QueryTierEnv(**{**env_kwargs, "episode_seed": seed, "budget_bytes": budget})
    observation, _ = env.reset(options={"episode_index": index})
    teacher = SlotTeacher(env)
    teacher.start()
    return _Episode(env, teacher, observation)


def student_actions(policy: Any, observations: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """The action the policy takes deterministically (``query_policy.most_likely``) for each row of
    ``observations``."""
    import torch as th

    with th.no_grad():  # the very path model.predict takes, on a batch
        return policy.most_likely_actions(th.as_tensor(observations, dtype=th.float32), masks).numpy()


def play(episodes: list[_Episode], policy: Any | None, teacher_share: float, rng: np.random.Generator,
         states: States | None, skip_keep: float) -> list[float]:
    """Play ``episodes`` side by side to their end; the student (``policy``) acts except with
    probability ``teacher_share`` per step; the teacher labels every state into ``states``
    (when given). Their query accuracies."""
    import torch as th

    live = list(episodes)
    while live:
        masks = [e.env.action_masks() for e in live]
        labels = [e.teacher.act() for e in live] if states is not None or teacher_share > 0 else None
        observations = np.stack([e.observation for e in live])
        chosen = (student_actions(policy, observations, np.stack(masks))
                  if policy is not None and teacher_share < 1 else None)
        compact = None
        if states is not None:
            with th.no_grad():
                compact = policy.mlp_extractor.compact(th.as_tensor(observations)).numpy()
        for j, e in enumerate(live):
            if compact is not None and (labels[j] != SKIP or rng.random() < skip_keep):
                states.add(compact[j], masks[j], labels[j], 1.0 if labels[j] != SKIP else 1.0 / skip_keep,
                           e.teacher.values)
            teacher_acts = chosen is None or (teacher_share > 0 and rng.random() < teacher_share)
            action = int(labels[j] if teacher_acts else chosen[j])
            e.observation, _, done, _, info = e.env.step(action)
            if done:
                e.accuracy = float(info["query_accuracy"])
        live = [e for e in live if e.accuracy is None]
    return [float(e.accuracy) for e in episodes]


def fit(policy: Any, states: States, epochs: int, batch_size: int, value_weight: float,
        rng: np.random.Generator, actions_too: bool = True, labels: str = "teacher") -> float:
    """Masked cross-entropy on the actions (``labels``: ``"teacher"``, the teacher's; or
    ``"rule_on_values"``, the teacher's rule played on the student's current values,
    ``QueryRows.rule_actions``, read afresh at every batch so that states kept from earlier
    rounds are labelled by the values as they are now) plus ``value_weight`` times each value
    member's loss against the teacher's values: the Gaussian negative log-likelihood under its
    own log variance when the policy gives one (``value_spread``, which ``value_loss:
    gaussian_nll`` sets), else the squared error. Without ``actions_too``, the value loss
    alone. The last epoch's mean loss."""
    import torch as th
    from torch.nn import functional

    x = th.from_numpy(states.observations)  # views: no copy of the states
    masks = th.from_numpy(states.masks)
    actions = th.from_numpy(states.actions)
    weights = th.from_numpy(states.weights)
    targets = th.from_numpy(states.values)
    rows = policy.mlp_extractor
    present = rows.present(x).float()
    optimizer = policy.optimizer
    total = 0.0
    for _ in range(epochs):
        order = th.as_tensor(rng.permutation(len(states)))
        total = 0.0
        for start in range(0, len(states), batch_size):
            batch = order[start:start + batch_size]
            if actions_too:
                logits, row_values, spread, rule = rows.fit_outputs(x[batch].float())
            else:  # the members alone: the encoders need not run
                outputs = rows.member_outputs(x[batch].float())
                row_values, spread = outputs[..., 0], (outputs[..., 1] if rows.value_spread else None)
            loss = th.zeros(())
            if actions_too:
                logits = logits.masked_fill(~masks[batch], -1e8)
                w = weights[batch]
                target = actions[batch]
                if labels == "rule_on_values":  # where the mask allows it: it always does but at a budget's edge
                    target = th.where(masks[batch].gather(1, rule[:, None])[:, 0], rule, target)
                loss = (functional.cross_entropy(logits, target, reduction="none") * w).sum() / w.sum()
            if value_weight or not actions_too:
                # (n, members, rows): every member against the same targets
                p = present[batch][:, None, :].expand_as(row_values)
                target = targets[batch][:, None, :].expand_as(row_values)
                if spread is not None:  # bounded, so a few exact rows cannot take all the weight
                    error = functional.gaussian_nll_loss(row_values, target, spread.clamp(-8.0, 4.0).exp(),
                                                         reduction="none")
                else:
                    error = (row_values - target) ** 2
                loss = loss + (value_weight if actions_too else 1.0) * (error * p).sum() / p.sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
        total /= len(states)
    return total


def fit_words(policy: Any, words: tuple[Examples, Examples], ridge: float) -> None:
    """Set the policy's word estimates (``QueryRows.first_words``, ``break_words``) to the ridge
    regressions of the hidden draws on the hashed bags of ``words`` (the integrations', then the
    bursts' examples): exact least squares, as ``value_keeper``'s estimates are, where gradient
    steps on 256 weights shared by every row are few and slow. They take no gradient
    (``QueryRows`` builds them so)."""
    import torch as th

    rows = policy.mlp_extractor
    if not rows.buckets:
        return
    bags = WordBags(rows.buckets)
    for layer, data in zip((rows.first_words, rows.break_words), words, strict=True):
        weights, bias = ridge_fit(data, bags.bag, ridge)
        with th.no_grad():
            layer.weight.copy_(th.as_tensor(weights, dtype=th.float32)[None, :])
            layer.bias.fill_(bias)


def dagger(model: Any, env_kwargs: Mapping[str, Any], seed: int, config: Mapping[str, Any],
           report: Callable[[str], None] = print) -> dict[str, Any]:
    """Train ``model`` (a MaskablePPO with ``QueryRowsPolicy``) by DAgger (the module docstring);
    leaves the best student's weights in it and returns what was measured."""
    policy = model.policy
    if policy.mlp_extractor.members != config["value_members"]:
        raise ValueError(f"imitation.value_members: {config['value_members']} needs a policy with as many value "
                         f"members; this one has {policy.mlp_extractor.members}")
    if policy.mlp_extractor.value_spread != (config["value_loss"] == "gaussian_nll"):
        raise ValueError(f"imitation.value_loss: {config['value_loss']!r} needs a policy with value_spread="
                         f"{config['value_loss'] == 'gaussian_nll'}; this one has {policy.mlp_extractor.value_spread}")
    for group in policy.optimizer.param_groups:
        group["lr"] = config["learning_rate"]
    rng = np.random.default_rng(seed)
    states = States()
    words = (Examples([], []), Examples([], []))
    budgets = list(config["budgets"])
    started = time.monotonic()
    rounds: list[dict[str, Any]] = []
    best: tuple[float, dict[str, Any]] | None = None
    index = 0
    for r in range(config["rounds"]):
        episodes = [_start(env_kwargs, seed, index + j, budgets[(index + j) % len(budgets)])
                    for j in range(config["episodes"])]
        index += config["episodes"]
        share = 1.0 if r == 0 else config["beta"] ** r
        if r == 0:  # the words' estimates, once: the states are kept with them
            for e in episodes:
                for kept, new in zip(words, examples(e.env.episode), strict=True):
                    kept.extend(new)
            fit_words(policy, words, config["word_ridge"])
        training = play(episodes, policy, share, rng, states, config["skip_keep"])
        if r == 0 and config["value_warmup"]:
            fit(policy, states, config["value_warmup"], config["batch_size"], config["value_weight"], rng,
                actions_too=False)
        loss = fit(policy, states, config["epochs"], config["batch_size"], config["value_weight"], rng,
                   labels=config["action_labels"])
        validation = {budget: float(np.mean(play(
            [_start(env_kwargs, seed + HELD_OUT_SEED_OFFSET, i, budget) for i in range(config["validation_episodes"])],
            policy, 0.0, rng, None, 1.0))) for budget in budgets}
        mean = float(np.mean(list(validation.values())))
        rounds.append({"round": r, "states": len(states), "teacher_share": share, "loss": loss,
                       "training_accuracy": float(np.mean(training)),
                       "validation_accuracy": {str(b): v for b, v in validation.items()},
                       "minutes": (time.monotonic() - started) / 60})
        report(f"round {r}: {len(states):,} states, loss {loss:.3f}, validation accuracy "
               + ", ".join(f"{v:.3f} at {b} B" for b, v in validation.items()))
        if best is None or mean > best[0]:
            best = (mean, {k: v.detach().clone() for k, v in policy.state_dict().items()})
        # Rounds grow with the states kept: stop before one that would end past the limit.
        elapsed = time.monotonic() - started
        last = elapsed - 60 * (rounds[-2]["minutes"] if len(rounds) > 1 else 0.0)
        if elapsed + 1.25 * last > 60 * config["minutes"]:
            break
    assert best is not None
    policy.load_state_dict(best[1])
    return {"rounds": rounds, "best_validation_accuracy": best[0], "states": len(states)}


def train_queries(out: str | Path, *, config: Mapping[str, Any], env_kwargs: Mapping[str, Any], seed: int,
                  progress: bool = True) -> dict[str, Any]:
    """``wpb train --algo maskable_ppo`` with a query-tier recipe: DAgger into a fresh
    MaskablePPO, saved as ``best_model.zip`` (with ``best_model.env.json``) in ``out``."""
    import torch
    from sb3_contrib import MaskablePPO

    from .query_policy import QueryRowsPolicy

    imitation = settings(config.get("imitation"))
    env_kwargs = {**ENV_DEFAULTS, **dict(env_kwargs)}
    for name, why in SET_BY_TRAINING.items():
        if name in env_kwargs:
            raise ValueError(f"env: {name} is {why}; leave it out")
    torch.set_num_threads(int(config.get("torch_threads", 1)))
    torch.manual_seed(seed)
    probe = QueryTierEnv(**env_kwargs)
    policy_kwargs = {"slots": probe.K, "word_buckets": probe.word_buckets,
                     "value_spread": imitation["value_loss"] == "gaussian_nll",
                     "value_members": imitation["value_members"]}
    model = MaskablePPO(QueryRowsPolicy, probe, policy_kwargs=policy_kwargs, seed=seed, device="cpu",
                        **dict(config.get("hyperparams") or {}))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    measured = dagger(model, env_kwargs, seed, imitation,
                      report=(lambda line: print(line, flush=True)) if progress else (lambda _: None))
    model.save(out / "best_model.zip")
    observation = {"track": probe.track, "slots": probe.K, "word_buckets": probe.word_buckets}
    write_atomic(out / "best_model.env.json",
                 json.dumps({"query_tier": True, **observation}, indent=2, sort_keys=True) + "\n")
    saved = {"algo": "maskable_ppo", "seed": seed, "held_out_episode_seed": seed + HELD_OUT_SEED_OFFSET,
             "env": env_kwargs, "imitation": imitation, **measured, "trained_timesteps": 0,
             "versions": package_versions()}
    write_atomic(out / "config.json", json.dumps(saved, indent=2) + "\n")
    return saved
