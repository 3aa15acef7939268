"""Where episodes come from: the generator, or episode files on disk.

Both kinds answer ``episode(index)``. A generated source is unbounded (episode ``index`` of
the set ``(config, seed)``, exactly what ``wpb freeze --seed`` writes as that set's
``index``-th episode); a file source holds a fixed list read from

* a frozen set (a directory with a ``MANIFEST.json`` that is not another tool's: every
  file hash-verified, and a damaged manifest an error — see ``frozen.manifest_kind``),
* any other directory: every ``*.jsonl`` / ``*.jsonl.gz`` in it, in name order (for
  example the paper's released episodes, whose manifest is another tool's),
* one JSONL file (verified against the manifest when it lies in a frozen set).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from pathlib import Path

from ..core.types import Episode
from .frozen import EPISODE_FILE_SUFFIXES, manifest_kind, open_frozen_set
from .generators.regimes import RegimeConfig, generate_episode
from .jsonl import iter_jsonl


def episode_files(path: str | os.PathLike[str]) -> list[Path]:
    """The episode files ``path`` names (see the module docstring), in reading order."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such episode file or directory")
    if manifest_kind(path) == "ours":
        return [f.path for f in open_frozen_set(path).files]
    files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(EPISODE_FILE_SUFFIXES))
    if not files:
        raise FileNotFoundError(f"{path}: holds no episode files (*.jsonl, *.jsonl.gz)")
    return files


def read_episodes(path: str | os.PathLike[str]) -> list[Episode]:
    """Every episode under ``path`` (frozen sets are verified against their manifest)."""
    return [episode for _, episode in read_placed_episodes(path)]


def read_placed_episodes(path: str | os.PathLike[str]) -> list[tuple[str, Episode]]:
    """``read_episodes`` with where each episode is: ``FILE:LINE`` (one episode per line)."""
    path = Path(path)
    files: list[tuple[Path, Iterable[Episode]]] = []
    if path.is_dir() and manifest_kind(path) == "ours":
        files = [(f.path, f.iter_episodes()) for f in open_frozen_set(path).files]
        frozen = True
    elif path.is_file() and manifest_kind(path.parent) == "ours":
        # One file of a frozen set (say its training window): verified like the whole set.
        files = [(f.path, f.iter_episodes()) for f in open_frozen_set(path.parent, verify=False).files
                 if f.path.name == path.name]
        frozen = bool(files)
    else:
        frozen = False
    if not frozen:
        files = [(file, iter_jsonl(file)) for file in episode_files(path)]
    episodes = [(f"{file}:{line}", episode) for file, read in files for line, episode in enumerate(read, start=1)]
    if not episodes and not frozen:
        raise ValueError(f"{path}: holds no episodes")
    return episodes


@dataclass(frozen=True)
class GeneratedEpisodes:
    """Episodes drawn from the generator: ``episode(i)`` is episode ``i`` of ``(config, seed)``."""

    config: RegimeConfig
    seed: int = 0

    @property
    def size(self) -> None:  # unbounded
        return None

    def episode(self, index: int) -> Episode:
        return generate_episode(self.config, self.seed, index)

    def recipe(self, index: int) -> EpisodeRecipe:
        """Episode ``index``, not made yet (see ``EpisodeRecipe``)."""
        return EpisodeRecipe(self.config, self.seed, index)

    def describe(self) -> str:
        return f"generated regime={self.config.regime} T={self.config.length} seed={self.seed}"


@dataclass(frozen=True)
class EpisodeRecipe:
    """Episode ``index`` of the generated set ``(config, seed)``, named but not made: ``make()``
    generates it. The vector env's compiled core plays some generated episodes from their
    draws alone and makes the episode only if something asks for it."""

    config: RegimeConfig
    seed: int
    index: int

    def __len__(self) -> int:
        return self.config.length

    def make(self, **compiled: Any) -> Episode:
        """The episode; ``compiled``: a contract regime's ``take_names`` and ``play`` (the
        generator's own, compiled: the same episode)."""
        return generate_episode(self.config, self.seed, self.index, **compiled)


@dataclass(frozen=True)
class EpisodeList:
    """A fixed list of episodes (read from files, or given directly)."""

    episodes: tuple[Episode, ...]
    origin: str = "<episodes>"

    def __post_init__(self) -> None:
        if not self.episodes:
            raise ValueError(f"{self.origin}: no episodes")

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> EpisodeList:
        return cls(tuple(read_episodes(path)), str(path))

    @property
    def size(self) -> int:
        return len(self.episodes)

    def episode(self, index: int) -> Episode:
        if not 0 <= index < len(self.episodes):
            raise IndexError(f"{self.origin}: episode index {index} out of range (it holds {len(self.episodes)})")
        return self.episodes[index]

    def select(self, *, regime: str | None = None, length: int | None = None) -> EpisodeList:
        """The episodes of one regime and/or length (an error names what the source holds)."""
        if regime is None and length is None:
            return self
        kept = tuple(
            e for e in self.episodes if (regime is None or e.regime == regime) and (length is None or len(e) == length)
        )
        if not kept:
            held = sorted({(str(e.regime), len(e)) for e in self.episodes})
            raise ValueError(
                f"{self.origin}: no episode with regime={regime!r} length={length!r}; it holds (regime, length) {held}"
            )
        return EpisodeList(kept, f"{self.origin} [regime={regime}, length={length}]")

    def describe(self) -> str:
        return f"{self.origin} ({len(self.episodes)} episodes)"
