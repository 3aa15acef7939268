"""What an endpoint's words say of its hidden traffic: linear estimates learned from the hidden
state of training episodes, for ``value_keeper`` (and, on hashed bags of the words, for the
query tier's MaskablePPO recipe: ``agents.sb3.query_imitation.fit_words``).

Two of the query tier's hidden factors may follow the words of parameter names (``card_token``:
``card``, ``token``) through weights fixed across episodes that no single stream reveals
(``integration_content`` and ``burst_content`` of ``wpb_gym.episodes.generators.query_process``):
how many clients integrate an endpoint, and how large the migration a breaking change sets off
is. ``WordEstimates`` holds one ridge regression for each, on a bag of words (each word's count
divided by the square root of the words counted), fitted on the training episodes' labels: the
standard normal behind each endpoint's integrations, and behind each breaking change's burst
(its size over its family's boost). At play time only the stream is read: the parameters an
endpoint first showed, and what its latest breaking change touched.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from wpb_gym.core.types import Episode
from wpb_gym.envs.observation.query_words import ContentTracker, touched_words

MAX_VOCABULARY = 2000
RIDGE = 1.0


def numbers_only(value: Any) -> bool:
    """Whether ``value`` is a JSON number or nested lists of them only (NumPy would also read a
    text such as ``"1.5"``, or a boolean, as a number)."""
    if isinstance(value, list):
        return all(numbers_only(item) for item in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True, eq=False)
class WordEstimates:
    """Two linear models over ``vocabulary``: standard normal units of an endpoint's
    integrations (from its first contract's words) and of a breaking change's burst (from the
    words it touched). Unknown words weigh 0; no words estimate the intercept."""

    vocabulary: tuple[str, ...]
    integration_weights: np.ndarray
    integration_bias: float
    burst_weights: np.ndarray
    burst_bias: float

    def __post_init__(self) -> None:
        n = len(self.vocabulary)
        for name in ("integration_weights", "burst_weights"):
            value = getattr(self, name)
            if value.shape != (n,) or not np.isfinite(value).all():
                raise ValueError(f"{name}: expected {n} finite numbers (one per word), got shape {value.shape}")
        for name in ("integration_bias", "burst_bias"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name}: expected a finite number, got {getattr(self, name)!r}")
        object.__setattr__(self, "_index", {w: i for i, w in enumerate(self.vocabulary)})

    def _score(self, words: Sequence[str], weights: np.ndarray, bias: float) -> float:
        index = self._index  # type: ignore[attr-defined]
        known = [index[w] for w in words if w in index]
        if not words:
            return bias
        return bias + float(weights[known].sum()) / math.sqrt(len(words)) if known else bias

    def integrations(self, words: Sequence[str]) -> float:
        return self._score(words, self.integration_weights, self.integration_bias)

    def burst(self, words: Sequence[str]) -> float:
        return self._score(words, self.burst_weights, self.burst_bias)

    def state(self) -> dict[str, Any]:
        return {"vocabulary": list(self.vocabulary),
                "integration_weights": self.integration_weights.tolist(), "integration_bias": self.integration_bias,
                "burst_weights": self.burst_weights.tolist(), "burst_bias": self.burst_bias}

    @classmethod
    def from_state(cls, state: Any) -> WordEstimates:
        keys = {"vocabulary", "integration_weights", "integration_bias", "burst_weights", "burst_bias"}
        if not isinstance(state, dict) or set(state) != keys:
            raise ValueError(f"'words': expected an object with {sorted(keys)}")
        vocabulary = state["vocabulary"]
        if not isinstance(vocabulary, list) or not all(isinstance(w, str) for w in vocabulary):
            raise ValueError("'words.vocabulary': expected a list of words")
        if len(set(vocabulary)) != len(vocabulary):
            raise ValueError("'words.vocabulary': a word is listed twice")
        try:
            numeric = all(numbers_only(state[k]) for k in ("integration_weights", "burst_weights", "integration_bias",
                                                           "burst_bias"))
        except RecursionError:  # lists nested past any weight's depth
            numeric = False
        if not numeric:
            raise ValueError("'words': weights must be numbers (the biases too)")
        try:
            arrays = {k: np.asarray(state[k], dtype=np.float64) for k in ("integration_weights", "burst_weights")}
            biases = {k: float(state[k]) for k in ("integration_bias", "burst_bias")}
        except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an integer past float64
            raise ValueError(f"'words': weights must be numbers ({exc})") from None
        try:
            return cls(tuple(vocabulary), arrays["integration_weights"], biases["integration_bias"],
                       arrays["burst_weights"], biases["burst_bias"])
        except ValueError as exc:
            raise ValueError(f"'words': {exc}") from None


@dataclass
class Examples:
    """Regression examples: each a list of words and the standard normal draw they estimate."""

    words: list[list[str]]
    targets: list[float]

    def extend(self, other: Examples) -> None:
        self.words += other.words
        self.targets += other.targets


@dataclass
class HiddenDraws:
    """The standard normal draws behind one episode's hidden factors, with the words a policy
    reads for each: ``integrations`` by endpoint (its first contract's words in
    ``first_words``), and ``bursts`` by the step of the breaking change that set each off
    (``(endpoint, draw)``; what that change touched in ``touched_at``)."""

    integrations: dict[str, float]
    bursts: dict[int, tuple[str, float]]
    first_words: dict[str, list[str]]
    touched_at: dict[int, list[str]]


def hidden_draws(episode: Episode) -> HiddenDraws:
    """An episode's ``HiddenDraws`` from its hidden state (empty without one, or where the
    factor has no spread)."""
    hidden = episode.labels.get("hidden") if isinstance(episode.labels, dict) else None
    tracker = ContentTracker()
    touched_at: dict[int, list[str]] = {}
    for step in episode.steps:
        obs = step.observation
        if isinstance(obs, dict) and isinstance(obs.get("api"), str):
            before = tracker.previous(obs["api"])
            if before is not None:
                touched_at[step.t] = touched_words(before, obs)
        tracker.step(obs)
    draws = HiddenDraws({}, {}, dict(tracker.first), touched_at)
    if not isinstance(hidden, dict) or not isinstance(hidden.get("process"), dict):
        return draws
    process = hidden["process"]
    endpoints = list(hidden.get("endpoints") or ())
    index = {api: i for i, api in enumerate(endpoints)}
    spread = float(process.get("integration_spread", 0.0))
    values = hidden.get("integrations")
    if spread > 0 and isinstance(values, list):
        for api in tracker.first:
            i = index.get(api)
            if i is not None and i < len(values) and values[i] > 0:
                draws.integrations[api] = (math.log(values[i]) + spread * spread / 2) / spread
    spread = float(process.get("burst_spread", 0.0))
    families, boosts = hidden.get("endpoint_families"), hidden.get("burst_families")
    if spread > 0 and isinstance(families, list) and isinstance(boosts, list):
        for t, i, size, _start in hidden.get("migration_boosts") or ():
            boost = boosts[families[i]][1]
            if size > 0 and boost > 0 and t in touched_at:
                draws.bursts[t] = (endpoints[i], (math.log(size / boost) + spread * spread / 2) / spread)
    return draws


def examples(episode: Episode) -> tuple[Examples, Examples]:
    """The regression examples one training episode gives from its hidden state: each endpoint's
    first words with its integrations' standard normal, and each burst's touched words with its
    draw's standard normal. Episodes without that hidden state give none."""
    draws = hidden_draws(episode)
    integrations = Examples([draws.first_words[api] for api in draws.integrations],
                             list(draws.integrations.values()))
    bursts = Examples([draws.touched_at[t] for t in draws.bursts], [z for _, z in draws.bursts.values()])
    return integrations, bursts


def fit_word_estimates(episodes: Iterable[Episode], *, ridge: float = RIDGE,
                       max_vocabulary: int = MAX_VOCABULARY) -> WordEstimates:
    """Ridge regressions of the hidden factors on the bag of words, over ``episodes``."""
    integrations, bursts = Examples([], []), Examples([], [])
    for episode in episodes:
        a, b = examples(episode)
        integrations.extend(a)
        bursts.extend(b)
    counts = Counter(w for words in integrations.words + bursts.words for w in words)
    vocabulary = tuple(sorted(w for w, _ in counts.most_common(max_vocabulary)))
    column = {w: i for i, w in enumerate(vocabulary)}
    w_int, b_int = ridge_fit(integrations, word_bag(column), ridge)
    w_burst, b_burst = ridge_fit(bursts, word_bag(column), ridge)
    return WordEstimates(vocabulary, w_int, b_int, w_burst, b_burst)


def ridge_fit(data: Examples, features: Callable[[list[str]], np.ndarray],
              ridge: float = RIDGE) -> tuple[np.ndarray, float]:
    """The ridge regression of ``data``'s targets on ``features`` of its words (the intercept not
    shrunk): weights and intercept. No examples fit zeros."""
    width = len(features([]))
    if not data.targets:
        return np.zeros(width), 0.0
    x = np.stack([features(words) for words in data.words]).astype(np.float64)
    y = np.asarray(data.targets)
    # The intercept is not shrunk: centre, solve, and put it back.
    x_mean, y_mean = x.mean(axis=0), float(y.mean())
    xc = x - x_mean
    weights = np.linalg.solve(xc.T @ xc + ridge * np.eye(width), xc.T @ (y - y_mean))
    return weights, y_mean - float(x_mean @ weights)


def word_bag(column: Mapping[str, int]) -> Callable[[list[str]], np.ndarray]:
    """Features of a list of words: each known word's count over the square root of their number
    (not clipped, unlike ``WordBags.bag``: ``WordEstimates`` scores words by the same sum)."""

    def features(words: list[str]) -> np.ndarray:
        x = np.zeros(len(column))
        for w in words:
            if w in column:
                x[column[w]] += 1.0 / math.sqrt(len(words))
        return x

    return features
