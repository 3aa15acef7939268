"""``wpb train --algo value_keeper``: distil ``causal_privileged``'s values into ``value_keeper``'s network.

First the word estimates (``agents.learners.word_estimates``) are fitted on the hidden state
of the first ``word_episodes`` training episodes. Then the teacher plays the training episodes
(``episode_seed = --seed`` of the ``regime`` in ``--env-kwargs``, or the ``episodes=`` files,
at ``budget_bytes``); at every endpoint snapshot it decides on, the network's input for that
endpoint (and, with probability ``held_share``, for each endpoint memory holds) is recorded
with the teacher's value of it. ``members`` ReLU networks (``hidden`` units per layer, two
layers; member ``k`` initialised and shuffled with seed ``--seed + 7919 k``) are fitted to
``log1p`` of the values (Adam, ``epochs`` passes) and played as the mean of their outputs.
With ``loss`` ``"gaussian_nll"`` (the default) each has a second output, the log variance of
its error, and is fitted by the Gaussian negative log-likelihood: a sample weighs in inverse
proportion to how uncertain its kind of state is, so the many well-predicted states of quiet
endpoints are not traded for the noisy ones around migration bursts. Only the mean is kept and played. With
``"mse"`` it is fitted by mean squared error. The run folder gets ``learner.json`` (the networks
and the word estimates) and ``config.json`` (settings, samples, the ensemble's mean squared
error on ``log1p``, the validation accuracy on the held-out seed's first
``validation_episodes`` episodes or on ``--eval-episodes``, versions). ``timesteps`` counts
the teacher's decisions to record (the episodes it takes).
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.atomic_files import write_atomic
from wpb_gym.core.policy import EpisodeContext
from wpb_gym.core.store import ByteMemoryStore
from wpb_gym.core.tracks import policy_episode
from wpb_gym.core.types import Episode
from wpb_gym.envs.observation.query_features import QueryStreamTracker
from wpb_gym.envs.observation.query_words import ContentTracker
from wpb_gym.evaluation.runner import run_episode
from wpb_gym.scoring.queries import has_queries

from ..held_out import HELD_OUT_SEED_OFFSET
from ..scripted.causal_privileged import CausalPrivileged
from ..versions import package_versions
from .value_keeper import INPUTS, ValueEnsemble, ValueKeeper, ValueNetwork, inputs, save_network, word_inputs
from .word_estimates import WordEstimates, fit_word_estimates

DEFAULTS: dict[str, Any] = {
    "timesteps": 80_000,  # the teacher's decisions to record: about 11 episodes of queries_medium
    "held_share": 0.2,
    "hidden": 128,
    "members": 5,
    "epochs": 30,
    "batch_size": 1024,
    "learning_rate": 0.001,
    "loss": "gaussian_nll",
    "validation_episodes": 4,
    "word_episodes": 4,
}
DEFAULT_ENV = {"regime": "queries_medium", "budget_bytes": 10240}
LOSSES = ("gaussian_nll", "mse")
# Apart enough that no two members of training seeds 0..7918 share an initialisation.
MEMBER_SEED_STRIDE = 7919
_WHOLE_SETTINGS = {"timesteps": "the teacher's decisions", "hidden": "units", "members": "networks",
                   "epochs": "passes", "batch_size": "samples", "validation_episodes": "episodes",
                   "word_episodes": "episodes"}
# (low, whether low itself is allowed, high): held_share may be 0 (only the snapshot decided on
# is recorded); the learning rate may not.
_NUMBER_SETTINGS = {"held_share": (0.0, True, 1.0), "learning_rate": (0.0, False, 1.0)}


def training_episodes(env_kwargs: Mapping[str, Any], seed: int) -> Any:
    """Training episodes in order: episode 0, 1, ... of the generated set ``(regime, seed)``, or
    the ``episodes=`` file's, cycled."""
    from wpb_gym.envs.episode_sampler import EpisodeSampler

    options = {k: v for k, v in env_kwargs.items() if k not in ("regime", "length", "episodes", "budget_bytes")}
    sampler = EpisodeSampler(regime=env_kwargs.get("regime"), length=env_kwargs.get("length"),
                             episodes=env_kwargs.get("episodes"), episode_seed=seed, order="cycle",
                             generator_options=options)
    rng = np.random.default_rng(seed)
    while True:
        episode, _ = sampler.choose(rng, {})
        yield episode


def teacher_samples(episode: Episode, budget: int, held_share: float, rng: np.random.Generator,
                    words: WordEstimates | None = None) -> tuple[list[np.ndarray], list[float], int]:
    """The network's inputs (with ``words``' estimates) and ``causal_privileged``'s values at the
    states it visits playing ``episode``, and the number of its decisions."""
    if not has_queries(episode):
        raise ValueError(f"episode {episode.episode_id!r} ({episode.regime}) has no queries: value_keeper "
                         f"trains on the query tier")
    teacher = CausalPrivileged()
    length = len(episode)
    teacher.start_episode(EpisodeContext(length=length, budget_bytes=budget, track="privileged", episode=episode))
    store = ByteMemoryStore(budget)
    view = store.view()
    tracker = QueryStreamTracker()
    content = ContentTracker()
    sizes: dict[str, int] = {}
    x: list[np.ndarray] = []
    y: list[float] = []
    decisions = 0
    for step in policy_episode(episode, "privileged").steps:
        tracker.step(step.observation, step.metadata)
        content.step(step.observation)
        if not teacher.observe(step):
            store.skip(step.t)
            continue
        decisions += 1
        api = step.observation["api"]
        sizes[api] = estimate_bytes(step)
        held = [item.api for item in store.iter_items() if item.api != api]
        teacher.prepare([api, *held], step.t)
        for name in [api, *(a for a in held if rng.random() < held_share)]:
            x.append(inputs(tracker, name, sizes.get(name, 1), step.t, length, word_inputs(words, content, name)))
            y.append(teacher.value(name))
        actions = teacher.plan(step, view)
        for action in actions:
            store.execute(action, step.t)
        if not actions:
            store.skip(step.t)
    return x, y, decisions


def fit_network(x: np.ndarray, y: np.ndarray, *, hidden: int, epochs: int, batch_size: int, learning_rate: float,
                seed: int, loss: str = "gaussian_nll") -> tuple[ValueNetwork, float]:
    """A two-layer ReLU network fitted to ``log1p(y)`` by ``loss`` (``LOSSES``; see the module
    docstring); its mean squared error on ``log1p(y)`` over all samples once fitted."""
    import torch

    if loss not in LOSSES:
        raise ValueError(f"value_keeper: loss {loss!r}: expected one of {list(LOSSES)}")
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    inputs_t = torch.as_tensor(x, dtype=torch.float32)
    target = torch.log1p(torch.as_tensor(y, dtype=torch.float32))
    outputs = 2 if loss == "gaussian_nll" else 1
    net = torch.nn.Sequential(torch.nn.Linear(len(INPUTS), hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                              torch.nn.ReLU(), torch.nn.Linear(hidden, outputs))
    optimizer = torch.optim.Adam(net.parameters(), lr=learning_rate)
    for _ in range(epochs):
        order = torch.randperm(len(target), generator=generator)
        for start in range(0, len(target), batch_size):
            index = order[start:start + batch_size]
            out = net(inputs_t[index])
            if loss == "gaussian_nll":
                # The log variance is bounded so a few exact samples cannot take all the weight.
                variance = out[:, 1].clamp(-8.0, 4.0).exp()
                batch_loss = torch.nn.functional.gaussian_nll_loss(out[:, 0], target[index], variance)
            else:
                batch_loss = torch.nn.functional.mse_loss(out[:, 0], target[index])
            optimizer.zero_grad()
            batch_loss.backward()
            optimizer.step()
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    layers = [(m.weight.detach().numpy().T.astype(np.float64), m.bias.detach().numpy().astype(np.float64))
              for m in linears]
    weight, bias = layers[-1]
    layers[-1] = (weight[:, :1], bias[:1])  # the mean alone is played
    network = ValueNetwork(layers)
    fitted = np.log1p(network.values(x))
    return network, float(np.mean((fitted - target.numpy()) ** 2))


def train_value_keeper_run(out: str | Path, *, env_kwargs: Mapping[str, Any] | None = None, seed: int = 0,
                           settings: Mapping[str, Any] | None = None, eval_episodes: str | Path | None = None,
                           progress: bool = True) -> dict[str, Any]:
    """Train ``value_keeper`` into the run folder ``out`` (see the module docstring); the saved config."""
    config = {**DEFAULTS, **dict(settings or {})}
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"value_keeper: unknown setting(s) {unknown}; known: {sorted(DEFAULTS)}")
    if config["loss"] not in LOSSES:
        raise ValueError(f"value_keeper: setting loss: {config['loss']!r}; expected one of {list(LOSSES)}")
    for name, what in _WHOLE_SETTINGS.items():
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"value_keeper: setting {name}: {value!r}; expected a whole number of {what}, at least 1")
        config[name] = int(value)  # a NumPy integer is saved as a number
    for name, (low, low_allowed, high) in _NUMBER_SETTINGS.items():
        value = config[name]
        if (isinstance(value, bool) or not isinstance(value, numbers.Real) or not value <= high
                or not (value >= low if low_allowed else value > low)):
            interval = f"{'[' if low_allowed else '('}{low}, {high}]"
            raise ValueError(f"value_keeper: setting {name}: {value!r}; expected a number in {interval}")
        config[name] = float(value)
    members = config["members"]
    given = dict(env_kwargs or {})
    # Episode files are played whatever their regime (real drift's is real_queries:SOURCE); the
    # default regime only chooses generated episodes.
    defaults = {k: v for k, v in DEFAULT_ENV.items() if not (k == "regime" and given.get("episodes") is not None)}
    env_config = {**defaults, **given}
    budget = int(env_config["budget_bytes"])
    if env_config.get("episodes") is not None and eval_episodes is None:
        raise ValueError("training on episode files (episodes=...) needs held-out episodes (--eval-episodes PATH)")
    # The word estimates first, from the hidden state of the first training episodes: the
    # network then learns what their estimates are worth.
    episodes_in_order = training_episodes(env_config, seed)
    words = fit_word_estimates(next(episodes_in_order) for _ in range(config["word_episodes"]))
    rng = np.random.default_rng(seed)
    xs: list[np.ndarray] = []
    ys: list[float] = []
    decisions = episodes = 0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=config["timesteps"], desc="value_keeper: the teacher's decisions", unit="step")
    for episode in training_episodes(env_config, seed):
        x, y, n = teacher_samples(episode, budget, config["held_share"], rng, words)
        xs += x
        ys += y
        decisions += n
        episodes += 1
        if bar is not None:
            bar.update(n)
        if decisions >= config["timesteps"]:
            break
    if bar is not None:
        bar.close()
    x, y = np.stack(xs), np.asarray(ys)
    network = ValueEnsemble([
        fit_network(x, y, hidden=config["hidden"], epochs=config["epochs"], batch_size=config["batch_size"],
                    learning_rate=config["learning_rate"], seed=seed + MEMBER_SEED_STRIDE * k, loss=config["loss"])[0]
        for k in range(members)])
    loss = float(np.mean((np.log1p(network.values(x)) - np.log1p(y)) ** 2))
    validation = _validation_episodes(env_config, eval_episodes, seed, config["validation_episodes"])
    # Validated before anything is written: a run that fails leaves a model trained before whole.
    keeper = ValueKeeper()
    keeper.network, keeper.words = network, words
    accuracies = [run_episode(keeper, e, budget, record_actions=False).queries.accuracy for e in validation]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    info = {"budget_bytes": budget, "regime": env_config.get("regime"), "seed": seed}
    save_network(out / "learner.json", network, info, words)
    saved = {
        "algo": "value_keeper",
        "seed": seed,
        "held_out_episode_seed": seed + HELD_OUT_SEED_OFFSET,
        "held_out_episodes": None if eval_episodes is None else str(eval_episodes),
        "timesteps": decisions,
        "episodes": episodes,
        "samples": len(ys),
        "settings": config,
        "fit_loss": loss,
        "validation_query_accuracy": float(np.mean(accuracies)),
        "config": {"env": env_config},
        "versions": package_versions(),
    }
    write_atomic(out / "config.json", json.dumps(saved, indent=2, sort_keys=True, default=str) + "\n")
    return saved


def _validation_episodes(env_config: Mapping[str, Any], eval_episodes: str | Path | None, seed: int,
                         count: int) -> list[Episode]:
    if eval_episodes is not None:
        from wpb_gym.episodes.sources import read_episodes

        return read_episodes(eval_episodes)
    held_out = training_episodes(env_config, seed + HELD_OUT_SEED_OFFSET)
    return [next(held_out) for _ in range(count)]
