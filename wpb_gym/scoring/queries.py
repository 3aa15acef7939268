"""Query accuracy: the query tier's headline score (``wpb_gym.core.queries`` has the reader).

Every query of ``labels["queries"]`` is asked at its checkpoint step and answered by the
reader from the items memory held when that step arrived (``ByteMemoryStore.held_at``);
query accuracy is the fraction answered right, over the whole episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.queries import Query, answer_of, observation_of, parse_queries, same_answer
from ..core.store import ByteMemoryStore
from ..core.tracks import track_costs
from ..core.types import Episode, MemoryItem


@dataclass(frozen=True)
class QueryScore:
    """How memory answered an episode's queries: ``correct`` of ``asked``, and per checkpoint
    ``(t, correct, asked)`` in step order."""

    correct: int
    asked: int
    checkpoints: tuple[tuple[int, int, int], ...]

    @property
    def accuracy(self) -> float:
        """``correct / asked`` (0 for an episode without queries)."""
        return self.correct / self.asked if self.asked else 0.0


def episode_queries(episode: Episode) -> tuple[Query, ...]:
    """The episode's queries (``labels["queries"]``) as ``Query`` tuples, in order; () without any."""
    cached = episode.__dict__.get("_queries")
    if cached is None:
        cached = tuple(parse_queries(episode.labels.get("queries", ()), len(episode)))
        episode.__dict__["_queries"] = cached
    return cached


def has_queries(episode: Episode) -> bool:
    return bool(episode.labels.get("queries"))


def checkpoint_answers(held: Sequence[MemoryItem], asked: Sequence[Query]) -> list[bool]:
    """Whether memory holding ``held`` answers each query of one checkpoint right (the reader's rule,
    ``wpb_gym.core.queries``, for many queries at once)."""
    by_t = {item.t: item for item in held}
    by_api: dict[Any, list[MemoryItem]] = {}
    for item in held:
        by_api.setdefault(item.api, []).append(item)
    read: dict[str, dict[str, Any] | None] = {}
    right = []
    for query in asked:
        if query.api not in read:
            observation = None
            for item in sorted(by_api.get(query.api, ()), key=lambda i: -i.t):
                observation = observation_of(item, by_t)
                if observation is not None:
                    break
            read[query.api] = observation
        observation = read[query.api]
        right.append(observation is not None
                     and same_answer(answer_of(observation, query.fact, query.argument), query.answer))
    return right


def score_queries(episode: Episode, store: ByteMemoryStore) -> QueryScore:
    """The query score of a run over ``episode`` whose memory is ``store`` (at the end of the run)."""
    queries = episode_queries(episode)
    per_checkpoint = []
    correct = 0
    start = 0
    while start < len(queries):
        t = queries[start].t
        end = start
        while end < len(queries) and queries[end].t == t:
            end += 1
        right = sum(checkpoint_answers(store.held_at(t), queries[start:end]))
        per_checkpoint.append((t, right, end - start))
        correct += right
        start = end
    return QueryScore(correct, len(queries), tuple(per_checkpoint))


def queried_state_bytes(episode: Episode, track: str = "unprivileged") -> float:
    """What answering a checkpoint's queries takes, in bytes, averaged over the checkpoints: the
    WRITE cost (on ``track``) of the snapshot each endpoint asked about shows then, summed over
    the distinct endpoints asked. A budget is this fraction of it: ``budget / queried_state_bytes``."""
    queries = episode_queries(episode)
    if not queries:
        return 0.0
    observations, _ = episode.columns()
    costs = track_costs(episode, track)
    latest: dict[str, int] = {}
    totals = []
    at = 0
    for t in sorted({q.t for q in queries}):
        while at < t:
            obs = observations[at]
            if isinstance(obs, dict) and isinstance(obs.get("api"), str):
                latest[obs["api"]] = at
            at += 1
        asked = {q.api for q in queries if q.t == t and q.api in latest}
        totals.append(sum(int(costs[latest[api]]) for api in asked))
    return float(sum(totals) / len(totals))
