"""``value_keeper``: a learned write policy for the query tier — the keepers' engine, valuing
endpoints with small networks distilled from ``causal_privileged``.

``causal_privileged`` values an endpoint's latest state by its expected queries per checkpoint,
from the hidden traffic (popularity, integrations, each family's bursts and their delays). The
network learns that value from what any policy may read: the stream's statistics of the
endpoint and its family (``wpb_gym.envs.observation.query_features``: decayed query shares,
traffic, whether and when it broke, the queries its family's earlier breaking changes drew at
each lag, their reverts and changes), the snapshot's size, the episode's progress, and what
the words of its contract say of its clients and of its latest breaking change's burst
(``agents.learners.word_estimates``: ridge regressions fitted on the hidden state of the
training episodes). It is trained by regression on the teacher's values (log1p, by the Gaussian
negative log-likelihood with a learned variance, of which only the mean is kept) at the states
the teacher visits on the training episodes (``wpb train --algo value_keeper``), as a learned
cache policy is trained on the choices of an oracle. Several networks are fitted to the same
samples from different initialisations and their ``log1p`` predictions averaged (``members``):
one network's ranking of the few states a small budget holds moves with its initialisation. At
play time the keepers' engine (``agents.scripted.keep_latest``) admits and evicts by the
averaged values per byte.

The trained model is a plain JSON file (``learner.json``: each member's layer weights and the
word weights as lists, with the feature names it reads), loaded without pickle:
``value_keeper:RUN/learner.json`` in ``wpb eval``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.atomic_files import write_atomic
from wpb_gym.core.policy import EpisodeContext
from wpb_gym.core.types import Step
from wpb_gym.envs.observation.query_features import ENDPOINT_FEATURES, QueryStreamTracker
from wpb_gym.envs.observation.query_words import ContentTracker

from ..scripted.keep_latest import KeepLatest
from .word_estimates import WordEstimates, numbers_only

STATE_FORMAT = "wpb-value-keeper"
STATE_VERSION = 3
# Version 2 files hold one network as 'layers': read as an ensemble of one.
_ONE_NETWORK_VERSION = 2
INPUTS: tuple[str, ...] = (*ENDPOINT_FEATURES, "log_size", "progress", "integrations_from_words",
                           "burst_from_words")
_PROGRESS = INPUTS.index("progress")


def inputs(tracker: QueryStreamTracker, api: str, size: int, t: int, length: int,
           words: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
    """The network's input for endpoint ``api`` whose latest snapshot costs ``size`` bytes, at step
    ``t`` of ``length``; ``words``: the word estimates of its integrations and of its latest
    breaking change's burst (standard normal units; ``word_inputs``)."""
    return np.concatenate([tracker.features(api), [math.log(max(size, 1)) / 10, t / max(length, 1)],
                           words]).astype(np.float32)


def word_inputs(estimates: WordEstimates | None, content: ContentTracker, api: str) -> tuple[float, float]:
    """What ``estimates`` make of the endpoint's words, scaled into [-1, 1] (4 standard
    deviations); the burst's is 0 before its first breaking change."""
    if estimates is None:
        return 0.0, 0.0
    integrations = estimates.integrations(content.first.get(api, []))
    burst = estimates.burst(content.last_break[api]) if api in content.last_break else 0.0
    return max(-1.0, min(1.0, integrations / 4)), max(-1.0, min(1.0, burst / 4))


class ValueNetwork:
    """A ReLU network ``x -> log1p(value)`` held as NumPy arrays."""

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray]]) -> None:
        if not layers:
            raise ValueError("a value network needs at least one layer")
        width = len(INPUTS)
        for k, (weight, bias) in enumerate(layers):
            if weight.ndim != 2 or weight.shape[0] != width or weight.shape[1] < 1 or bias.shape != (weight.shape[1],):
                raise ValueError(f"layer {k}: expected weights ({width}, n) and bias (n,), n >= 1, got "
                                 f"{weight.shape} and {bias.shape}")
            if not (np.isfinite(weight).all() and np.isfinite(bias).all()):
                raise ValueError(f"layer {k}: weights must be finite numbers")
            width = weight.shape[1]
        if width != 1:
            raise ValueError(f"the last layer must give one value, gives {width}")
        self.layers = layers

    def log_values(self, x: np.ndarray) -> np.ndarray:
        """The network's output, ``log1p`` of the expected queries, for each row of ``x``."""
        h = x.astype(np.float64)
        for k, (weight, bias) in enumerate(self.layers):
            h = h @ weight + bias
            if k + 1 < len(self.layers):
                h = np.maximum(h, 0.0)
        return h[:, 0]

    def values(self, x: np.ndarray) -> np.ndarray:
        """Expected queries per checkpoint (>= 0) for each row of ``x``."""
        return np.maximum(np.expm1(self.log_values(x)), 0.0)

    def state(self) -> list[dict[str, list]]:
        return [{"weight": w.tolist(), "bias": b.tolist()} for w, b in self.layers]

    @classmethod
    def from_state(cls, state: Any) -> ValueNetwork:
        if not isinstance(state, list):
            raise ValueError("'layers' must be a list of {weight, bias}")
        layers = []
        for k, layer in enumerate(state):
            if not isinstance(layer, dict) or set(layer) != {"weight", "bias"}:
                raise ValueError(f"layer {k}: expected an object with 'weight' and 'bias'")
            try:
                numeric = numbers_only(layer["weight"]) and numbers_only(layer["bias"])
            except RecursionError:  # lists nested past any layer's depth
                numeric = False
            if not numeric:
                raise ValueError(f"layer {k}: weights must be lists of numbers")
            try:
                layers.append((np.asarray(layer["weight"], dtype=np.float64), np.asarray(layer["bias"],
                                                                                         dtype=np.float64)))
            except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an integer past float64
                raise ValueError(f"layer {k}: weights must be lists of numbers ({exc})") from None
        return cls(layers)


class ValueEnsemble:
    """Value networks fitted to the same samples, played as the mean of their ``log1p`` outputs."""

    def __init__(self, members: list[ValueNetwork]) -> None:
        if not members:
            raise ValueError("a value ensemble needs at least one network")
        self.members = members

    def values(self, x: np.ndarray) -> np.ndarray:
        """Expected queries per checkpoint (>= 0) for each row of ``x``."""
        mean = np.mean([member.log_values(x) for member in self.members], axis=0)
        return np.maximum(np.expm1(mean), 0.0)

    def state(self) -> list[list[dict[str, list]]]:
        return [member.state() for member in self.members]

    @classmethod
    def from_state(cls, state: Any) -> ValueEnsemble:
        if not isinstance(state, list) or not state:
            raise ValueError("'members' must be a non-empty list of networks")
        members = []
        for k, layers in enumerate(state):
            try:
                members.append(ValueNetwork.from_state(layers))
            except ValueError as exc:
                raise ValueError(f"member {k}: {exc}") from None
        return cls(members)


class ValueKeeper(KeepLatest):
    """``value_keeper``: the keepers' engine with a learned value (see the module docstring)."""

    name = "value_keeper"
    description = ("Query tier: keeps the states networks distilled from causal_privileged value most per "
                   "byte (wpb train --algo value_keeper; evaluate as value_keeper:RUN/learner.json).")
    kind = "learner"
    track = "unprivileged"
    _param_names = ("path",)

    def __init__(self, *, path: str | None = None) -> None:
        self.path = path
        self.network: ValueEnsemble | ValueNetwork | None = None
        self.words: WordEstimates | None = None
        if path is not None:
            self.network, self.words = load_network(path)
        super().__init__(size_aware=True, prior=0.0, tuned=False)

    def start_episode(self, context: EpisodeContext | None) -> None:
        super().start_episode(context)
        self._length = context.length if context is not None else 1
        self._tracker = QueryStreamTracker()
        self._content = ContentTracker()
        self._sizes: dict[str, int] = {}
        self._values: dict[Any, float] = {}
        # api -> (the tracker's features the row was made from, the row without its progress):
        # everything in a row but the progress moves only when the tracker's features do.
        self._rows: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def observe(self, step: Step) -> bool:
        self._tracker.step(step.observation, step.metadata)
        self._content.step(step.observation)
        obs = step.observation
        if isinstance(obs, dict) and isinstance(obs.get("api"), str):
            self._sizes[obs["api"]] = estimate_bytes(step)
        return super().observe(step)

    def prepare(self, apis: list[Any], t: int) -> None:
        if self.network is None:
            self._values = {}
            return
        x = np.stack([self._row(api) for api in apis])
        x[:, _PROGRESS] = np.float32(t / max(self._length, 1))
        self._values = dict(zip(apis, self._checked(self.network.values(x)).tolist(), strict=True))

    def value(self, api: Any) -> float:
        return self._values.get(api, 0.0)

    def _checked(self, values: np.ndarray) -> np.ndarray:
        """``values``, which must be finite: weights that load but overflow would make the engine
        compare NaN and inf per byte, which decides nothing."""
        if not np.isfinite(values).all():
            raise ValueError(f"value_keeper: {self.path or 'its network'}: the network's values overflow (weights too "
                             f"large for float64 arithmetic); train it again")
        return values

    def _row(self, api: str) -> np.ndarray:
        """``inputs(...)`` for ``api`` at progress 0, made again only when its features moved (its
        size and words change only at its own show, which moves them)."""
        features = self._tracker.features(api)
        kept = self._rows.get(api)
        if kept is not None and kept[0] is features:
            return kept[1]
        row = inputs(self._tracker, api, self._sizes.get(api, 1), 0, self._length,
                     word_inputs(self.words, self._content, api))
        self._rows[api] = (features, row)
        return row


class ReferenceValueKeeper(ValueKeeper):
    """``value_keeper`` stated plainly: every input row made afresh (``inputs``, from a tracker
    without its cache) at every decision. The tests and ``benchmarks/value_keeper.py`` check
    ``ValueKeeper``'s kept rows against it."""

    def start_episode(self, context: EpisodeContext | None) -> None:
        super().start_episode(context)
        self._tracker = QueryStreamTracker(cache=False)

    def prepare(self, apis: list[Any], t: int) -> None:
        if self.network is None:
            self._values = {}
            return
        x = np.stack([inputs(self._tracker, api, self._sizes.get(api, 1), t, self._length,
                             word_inputs(self.words, self._content, api)) for api in apis])
        self._values = dict(zip(apis, self._checked(self.network.values(x)).tolist(), strict=True))


def save_network(path: str | os.PathLike[str], network: ValueEnsemble | ValueNetwork, info: dict[str, Any],
                 words: WordEstimates | None = None) -> Path:
    ensemble = network if isinstance(network, ValueEnsemble) else ValueEnsemble([network])
    state = {"format": STATE_FORMAT, "version": STATE_VERSION, "inputs": list(INPUTS),
             "members": ensemble.state(), "words": None if words is None else words.state(), "info": info}
    return write_atomic(path, json.dumps(state) + "\n")  # a model trained before stays whole until then


def load_network(path: str | os.PathLike[str]) -> tuple[ValueEnsemble, WordEstimates | None]:
    """The networks and word estimates ``wpb train --algo value_keeper`` saved at ``path`` (errors
    name the file); a version 2 file's one network as an ensemble of one."""
    path = Path(path)
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"value_keeper: {path}: no such file (wpb train --algo value_keeper writes "
                                f"RUN/learner.json)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"value_keeper: {path}: not a value network file ({exc})") from None
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise ValueError(f"value_keeper: {path}: not a value network file (format {STATE_FORMAT!r} expected)")
    version = state.get("version")
    if type(version) is not int or version not in (_ONE_NETWORK_VERSION, STATE_VERSION):
        raise ValueError(f"value_keeper: {path}: version {version!r}; this code reads {_ONE_NETWORK_VERSION} and "
                         f"{STATE_VERSION} (train it again with wpb train --algo value_keeper)")
    if state.get("inputs") != list(INPUTS):
        raise ValueError(f"value_keeper: {path}: trained on inputs {state.get('inputs')!r}, this code gives "
                         f"{list(INPUTS)}")
    if "words" not in state:  # written as null when a model has none: a missing key is a damaged file
        raise ValueError(f"value_keeper: {path}: no 'words' entry (null for a model without word estimates)")
    try:
        words = state["words"]
        if version == _ONE_NETWORK_VERSION:
            network = ValueEnsemble([ValueNetwork.from_state(state.get("layers"))])
        else:
            network = ValueEnsemble.from_state(state.get("members"))
        return network, None if words is None else WordEstimates.from_state(words)
    except ValueError as exc:
        raise ValueError(f"value_keeper: {path}: {exc}") from None
