"""The words of the query tier's contracts, as a policy may read them from the stream.

Parameter names are made of words (``card_token``: ``card``, ``token``). In the query tier
two hidden factors may follow them (``integration_content`` and ``burst_content`` of
``wpb_gym.episodes.generators.query_process``): how many clients integrate an endpoint (the
words of the contract it first showed) and how large the migration a breaking change sets off
is (the words of what the change touched). ``ContentTracker`` keeps those two lists of words
per endpoint as the stream goes; ``WordBags`` turns them into fixed-width features by hashing
each word into one of ``buckets`` buckets (CRC-32 of its UTF-8 bytes, the same in every
process and on every machine), so that any vocabulary, the generated tiers' or a real API's,
has a place, and a learner finds out which words matter.

A bag holds each bucket's count divided by the square root of the words counted (a random
bag's sum then has unit scale whatever its length), clipped at 1; an endpoint with no words
(none shown, or no breaking change yet) has an empty bag.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ...core.contracts import contract_of, is_breaking
from ...episodes.generators.query_process import touched


def words_of(params: Iterable[Any]) -> list[str]:
    """The words of parameter names: ``card_token`` -> ``card``, ``token``."""
    return [w for name in params for w in str(name).lower().split("_") if w]


def touched_words(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[str]:
    """The words of what a change touched: the parameter removed, added or made (not) required,
    or the whole contract when the endpoint itself was deprecated or removed."""
    change = touched(before, after)
    if change is not None and change[0] in ("has_param", "required") and change[1] is not None:
        return words_of([change[1]])
    return words_of(after.get("params") or ())


class ContentTracker:
    """The words a policy may read of each endpoint as the stream goes: those of the contract it
    first showed (``first``), and those its latest breaking change touched (``last_break``,
    absent before any). ``step`` takes every step's observation in order."""

    def __init__(self) -> None:
        self.first: dict[str, list[str]] = {}
        self.last_break: dict[str, list[str]] = {}
        self._snapshots: dict[str, Mapping[str, Any]] = {}

    def previous(self, api: str) -> Mapping[str, Any] | None:
        """The snapshot ``api`` showed last (None before its first)."""
        return self._snapshots.get(api)

    def step(self, observation: Any) -> None:
        if not isinstance(observation, dict) or not isinstance(observation.get("api"), str):
            return
        api = observation["api"]
        before = self._snapshots.get(api)
        if before is None:
            self.first[api] = words_of(observation.get("params") or ())
        else:
            old, new = contract_of(before), contract_of(observation)
            if old is not None and new is not None and is_breaking(old, new):
                self.last_break[api] = touched_words(before, observation)
        self._snapshots[api] = observation


def word_bucket(word: str, buckets: int) -> int:
    """The bucket ``word`` hashes to (CRC-32 of its UTF-8 bytes, modulo ``buckets``)."""
    return zlib.crc32(word.encode("utf-8")) % buckets


class WordBags:
    """Hashed bags of an endpoint's words: ``features(content, api)`` is the bag of its first
    contract's words, then the bag of the words its latest breaking change touched
    (``2 * buckets`` numbers in [0, 1])."""

    def __init__(self, buckets: int) -> None:
        if buckets < 1:
            raise ValueError(f"buckets must be at least 1, got {buckets}")
        self.buckets = buckets
        self._bucket: dict[str, int] = {}

    @property
    def width(self) -> int:
        return 2 * self.buckets

    def bag(self, words: list[str]) -> np.ndarray:
        """Each bucket's count of ``words`` over the square root of their number, clipped at 1."""
        counts = np.zeros(self.buckets, dtype=np.float32)
        if not words:
            return counts
        for word in words:
            b = self._bucket.get(word)
            if b is None:
                b = self._bucket[word] = word_bucket(word, self.buckets)
            counts[b] += 1.0
        return np.minimum(counts / math.sqrt(len(words)), 1.0)

    def features(self, content: ContentTracker, api: str) -> np.ndarray:
        return np.concatenate([self.bag(content.first.get(api, [])), self.bag(content.last_break.get(api, []))])
