"""Pairing results episode by episode: which row of one side goes with which row of the other.

A paired statistic (a paired lift, a bootstrap that draws the same episodes for both sides, a
t-test over seeds) compares two results *of the same episode*. Every row of a run names its
episode by ``episode_hash``, the hash of the episode's content
(``wpb_gym.episodes.identity.episode_hash``): the same for the same episode in every process,
whether generated or read from a file. Rows are paired on it, within a condition, and never on
``episode_index`` alone: episode 3 of a run on ``--seed 0`` and episode 3 of a run on ``--seed
777`` are different episodes, and a lift between them means nothing.

An episode that a condition holds twice (a file that holds it twice) is paired occurrence by
occurrence, in the order of ``episode_index``.

Results written before rows carried the hash read it as "". Within one run the index names
the same episode for every agent, so the rows of one run (``one_run``) still pair by it; rows
of two runs without it cannot be matched, and pairing them is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..grid import EPISODE_HASH

__all__ = [
    "SAME_EPISODES",
    "Episode",
    "EpisodeMismatch",
    "by_episode",
    "by_index",
    "check_hashed",
    "difference",
    "not_same",
    "unhashed",
]

# An episode among a condition's rows: (its hash, or "#INDEX" by index within one run; which
# occurrence of that episode it is).
Episode = tuple[str, int]
# What to do about two sides that were not evaluated on the same episodes.
SAME_EPISODES = "evaluate both on the same episode set (the same --seed, or the same frozen set)"


class EpisodeMismatch(ValueError):
    """Two sides that a paired statistic compares were not evaluated on the same episodes (or
    cannot be told to have been). The message is one line, for the command line."""


def by_index(rows: Iterable[Mapping[str, Any]], one_run: bool) -> bool:
    """Whether to key ``rows`` by ``episode_index``: only rows of one run (``one_run``), some of
    them without a hash (results written before rows carried one). In one run the index names
    the same episode for every agent; across runs it names nothing."""
    return one_run and not all(row.get(EPISODE_HASH) for row in rows)


def check_hashed(rows: Iterable[Mapping[str, Any]], where: str) -> None:
    """Refuse the rows of ``where`` (a run) for pairing with another run's if any has no hash."""
    if not all(row.get(EPISODE_HASH) for row in rows):
        raise EpisodeMismatch(unhashed(where))


def by_episode(rows: Iterable[Mapping[str, Any]], where: str, index: bool = False) -> dict[Episode, Any]:
    """One side's rows of one condition keyed by their episode, in the order of ``episode_index``:
    by hash, or by index with ``index`` (see ``by_index``).

    ``where`` names the side in errors. Without ``index``, a row without a hash is an
    ``EpisodeMismatch`` saying the side must be evaluated again. Two rows of one index are a
    ValueError: a side holds one row per episode.
    """
    keyed: dict[Episode, Any] = {}
    seen: set[int] = set()
    for row in sorted(rows, key=lambda row: int(row["episode_index"])):
        position = int(row["episode_index"])
        if position in seen:
            raise ValueError(f"{where}: two rows for episode {position}")
        seen.add(position)
        name = f"#{position}" if index else str(row.get(EPISODE_HASH) or "")
        if not name:
            raise EpisodeMismatch(unhashed(where))
        occurrence = 0
        while (name, occurrence) in keyed:
            occurrence += 1
        keyed[name, occurrence] = row
    return keyed


def unhashed(where: str) -> str:
    """Why rows without an episode hash cannot be paired with another run's, and what to do."""
    return (
        f"{where} has no episode hashes (its results.csv was written before results carried the "
        f"{EPISODE_HASH} column), so nothing says which of its episodes another run played: run its "
        "evaluation again with this version of wpb_gym"
    )


def _episode(row: Mapping[str, Any]) -> str:
    return f"episode {int(row['episode_index'])} ({row.get(EPISODE_HASH) or 'no hash'})"


def difference(a: Mapping[Episode, Any], b: Mapping[Episode, Any], name_a: str, name_b: str) -> str:
    """How two sides' episodes differ, e.g. ``30 episodes in A, 30 in B, 0 in common (A's
    episode 0 is 3f2a..., B's episode 0 is 9c1d...)``; ``a`` and ``b`` as ``by_episode`` returns
    them."""
    common = sum(key in b for key in a)
    text = f"{len(a)} episodes in {name_a}, {len(b)} in {name_b}, {common} in common"
    only_a = [row for key, row in a.items() if key not in b]
    only_b = [row for key, row in b.items() if key not in a]
    if only_a and only_b and not common:
        first_a, first_b = (f"episode {int(r['episode_index'])} is {r.get(EPISODE_HASH) or 'without a hash'}"
                            for r in (only_a[0], only_b[0]))
        detail = f"{name_a}'s {first_a}, {name_b}'s {first_b}"
    elif only_a:
        detail = f"{name_a}'s {_episode(only_a[0])} is not in {name_b}"
    elif only_b:
        detail = f"{name_b}'s {_episode(only_b[0])} is not in {name_a}"
    else:
        return text
    return f"{text} ({detail})"


def not_same(
    names: Sequence[str],
    where: str,
    a: Mapping[Episode, Any],
    b: Mapping[Episode, Any],
    hint: str = SAME_EPISODES,
) -> EpisodeMismatch:
    """The refusal of pairing ``a`` with ``b`` (``names``: theirs), in one line: who, where, how
    their episodes differ, and ``hint``."""
    name_a, name_b = names
    return EpisodeMismatch(
        f"{name_a} and {name_b} were not run on the same episodes: {where}: "
        f"{difference(a, b, name_a, name_b)}; {hint}"
    )
