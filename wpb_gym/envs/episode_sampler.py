"""Which episode each ``reset`` plays: generated episodes or episodes from files, drawn at
random with the env's RNG or taken in order, with per-reset overrides (``options``)."""

from __future__ import annotations

import os
import reprlib
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.checks import require_int
from ..core.setting_values import MAX_LENGTH
from ..core.types import Episode
from ..episodes.generators.paper import GeneratorConfig
from ..episodes.generators.queries import QUERY_REGIMES
from ..episodes.generators.regimes import RegimeConfig, config_options, make_config
from ..episodes.sources import EpisodeList, EpisodeRecipe, GeneratedEpisodes

EPISODE_ORDERS = ("random", "cycle")
DEFAULT_LENGTH = 200
DEFAULT_REGIME = "default"
_RANDOM_INDEX_RANGE = 2**31 - 1
_SCRATCH = threading.local()  # per thread: peek's generators, by bit generator kind
# The generator's options an env takes as keywords (regime and length are env arguments).
GENERATOR_OPTIONS = tuple(name for name in GeneratorConfig.__dataclass_fields__ if name not in ("regime", "length"))


class EpisodeSampler:
    """The env's episode source.

    ``episodes=None`` generates ``regime`` episodes of ``length`` steps from ``episode_seed``
    (episode i is ``wpb freeze --seed S``'s episode i); otherwise ``episodes`` (a frozen set,
    folder or JSONL path, or a list of ``Episode``) are filtered by ``regime`` and ``length``.
    """

    def __init__(self, *, regime: str | None, length: int | None,
                 episodes: str | os.PathLike[str] | Sequence[Episode] | None, episode_seed: int, order: str,
                 generator_options: dict[str, Any]) -> None:
        known = GENERATOR_OPTIONS if episodes is not None or regime not in QUERY_REGIMES else config_options(regime)
        unknown = sorted(set(generator_options) - set(known))
        if unknown:  # what Python says of an unknown keyword (libraries such as TorchRL rely on it)
            raise TypeError(
                f"WritePolicyBenchEnv got an unexpected keyword argument {unknown[0]!r}: neither an env argument "
                f"nor a generator option ({', '.join(known)})"
            )
        if order not in EPISODE_ORDERS:
            raise ValueError(f"episode_order must be one of {EPISODE_ORDERS}, got {order!r}")
        self.order = order
        self.regime = regime
        self.length = None if length is None else require_int(length, "length", 1)
        self.generator_options = dict(generator_options)
        self._position = 0
        if episodes is None:
            self.episode_seed = require_int(episode_seed, "episode_seed")
            name = DEFAULT_REGIME if regime is None else regime
            length = {} if self.length is None and name in QUERY_REGIMES else {  # a query tier has its own
                "length": DEFAULT_LENGTH if self.length is None else self.length}
            base = make_config(name, **length, **self.generator_options)
            self._configs: dict[tuple[str, int], RegimeConfig] = {(base.regime, base.length): base}
            self.source: GeneratedEpisodes | EpisodeList = GeneratedEpisodes(base, self.episode_seed)
        else:
            if self.generator_options:
                raise ValueError(
                    f"generator options {sorted(self.generator_options)} apply to generated episodes only, "
                    "not to episodes read from files"
                )
            self.episode_seed = episode_seed
            if not _is_episode_sequence(episodes) and not isinstance(episodes, (str, os.PathLike)):
                raise ValueError("episodes must be a path to episode files or a non-empty list of Episode, "
                                 f"got {type(episodes).__name__} {reprlib.repr(episodes)}")
            every = (
                EpisodeList(tuple(episodes), "<episodes>")
                if _is_episode_sequence(episodes)
                else EpisodeList.from_path(episodes)
            )
            self._all_episodes = every
            self.source = every.select(regime=regime, length=self.length)

    def fresh(self) -> EpisodeSampler:
        """A sampler of the same episodes and settings at its first position (the episodes
        themselves, immutable, are shared)."""
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy._position = 0
        if hasattr(self, "_configs"):
            copy._configs = dict(self._configs)
        return copy

    def restart(self) -> None:
        """A seeded reset: the ``"cycle"`` order starts again at episode 0."""
        self._position = 0

    def choose(self, rng: np.random.Generator, options: dict[str, Any],
               recipe: bool = False) -> tuple[Episode | EpisodeRecipe, int | None]:
        """The episode to play and its index in its source (None for ``options["episode"]``);
        with ``recipe``, a generated episode comes as its ``EpisodeRecipe``, not made."""
        episode = options.get("episode")
        if episode is not None:
            if not isinstance(episode, Episode):
                raise ValueError(f"options['episode'] must be an Episode, got {type(episode).__name__}")
            return episode, None
        length = options.get("length")
        if length is not None:
            length = require_int(length, "options['length']", 1)
            if length > MAX_LENGTH and isinstance(self.source, GeneratedEpisodes):  # named before it is drawn
                raise ValueError(f"options['length'] must be at most {MAX_LENGTH:,} steps, got {length:,}")
        regime = options.get("regime")
        if regime is not None and not isinstance(regime, str):
            raise ValueError(f"options['regime'] must be a regime name, got {regime!r}")
        source = self._source_for(regime, length)
        index = options.get("episode_index")
        if index is None:
            if self.order == "cycle":
                index = self._position
                self._position += 1
                if source.size is not None:
                    index %= source.size
            else:
                high = source.size if source.size is not None else _RANDOM_INDEX_RANGE
                index = int(rng.integers(high))
        else:
            index = require_int(index, "options['episode_index']")
        if recipe and isinstance(source, GeneratedEpisodes):
            return source.recipe(index), index
        return source.episode(index), index

    def peek(self, rng: np.random.Generator) -> EpisodeRecipe | None:
        """The recipe ``choose(rng, {}, recipe=True)`` would return next (an autoreset's choice),
        without choosing it: neither ``rng`` nor the sampler's position moves. None when the
        episodes are not generated."""
        source = self.source
        if not isinstance(source, GeneratedEpisodes):
            return None
        if self.order == "cycle":
            return source.recipe(self._position)
        # A scratch generator of the same kind takes rng's state and draws (a new bit generator
        # would seed itself from the OS first: several times slower).
        scratches = _SCRATCH.__dict__.setdefault("by_kind", {})
        bits = rng.bit_generator
        scratch = scratches.get(type(bits))
        if scratch is None:
            scratch = scratches[type(bits)] = np.random.Generator(type(bits)())
        scratch.bit_generator.state = bits.state
        return source.recipe(int(scratch.integers(_RANDOM_INDEX_RANGE)))

    def _source_for(self, regime: str | None, length: int | None) -> GeneratedEpisodes | EpisodeList:
        if regime is None and length is None:
            return self.source
        if isinstance(self.source, GeneratedEpisodes):
            base = self.source.config
            key = (base.regime if regime is None else regime, base.length if length is None else length)
            config = self._configs.get(key)
            if config is None:
                config = make_config(key[0], length=key[1], **self.generator_options)
                self._configs[key] = config
            return GeneratedEpisodes(config, self.episode_seed)
        return self._all_episodes.select(
            regime=self.regime if regime is None else regime, length=self.length if length is None else length
        )


def _is_episode_sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(e, Episode) for e in value) and len(value) > 0
