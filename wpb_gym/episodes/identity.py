"""What an episode is: the hash of its content, and the refusal of one episode given twice.

Two episodes with the same steps and labels are the same episode wherever they were read
from; two with the same steps under other labels (an ``episode_id`` changed) are the same
stream just the same. Given twice to an evaluation it counts twice in every mean and interval
and pairs with itself in a comparison; given twice to training it is drawn twice as often as
the others and, among the held-out episodes, weighs twice in the choice of the best model. Every reader
of episode files (``wpb eval --episodes``, ``wpb train --env-kwargs episodes=``, ``wpb train
--eval-episodes``) refuses it with ``refuse_repeated_episodes``, naming both places.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

# Hex digits of an episode's hash: 64 bits, so two different episodes of a benchmark never
# share one, and short enough to read in a table or an error message.
EPISODE_HASH_DIGITS = 16


def episode_hash(episode: Any) -> str:
    """What the episode is, as a short stable name: the first 16 hex digits of the sha256 of its
    canonical JSON (its steps and labels, as ``wpb_gym.evaluation.run_folder.episodes_digest`` reads them). The same episode
    has the same hash in every process, generated or read back from a file; a change to one step
    or label gives another. Every result row carries it (``episode_hash``), so that paired
    statistics match two runs' rows by the episode they played, not by its place in the run."""
    from .jsonl import dumps_episode

    return hashlib.sha256(dumps_episode(episode).encode("utf-8")).hexdigest()[:EPISODE_HASH_DIGITS]


def refuse_repeated_episodes(
    episodes: Sequence[Any],
    origin: str = "<episodes>",
    places: Sequence[str] | None = None,
    harm: str = "it would count twice in the statistics",
) -> None:
    """A ``ValueError`` if two of ``episodes`` are the same episode (by ``episode_hash``), or the
    same steps under other labels (an ``episode_id`` or any other label changed: the same
    stream, counted or drawn twice), naming both ``places`` (where each was read, ``FILE:LINE``;
    by default their positions in ``origin``), the hash(es) and ``harm``, what keeping both
    would do."""
    first: dict[str, int] = {}
    first_steps: dict[str, tuple[int, str]] = {}
    for position, episode in enumerate(episodes):
        content = episode.to_dict()  # (episode_hash's canonical JSON, made once for both digests)
        digest = _digest(content)[:EPISODE_HASH_DIGITS]
        earlier = first.setdefault(digest, position)
        steps_earlier, other = first_steps.setdefault(_digest(content["steps"]), (position, digest))
        if earlier == position and steps_earlier == position:
            continue
        if earlier == position:
            earlier = steps_earlier
        if places is None:
            where = f"{origin}: episodes {earlier} and {position}"
        else:
            where = f"{origin}: {places[earlier]} and {places[position]}"
        if other == digest:
            raise ValueError(f"{where} hold the same episode (episode_hash {digest}): {harm}; keep one of them")
        raise ValueError(
            f"{where} hold the same steps under other labels (episode_hash {other} and {digest}): {harm}; "
            "keep one of them"
        )


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, allow_nan=False).encode("utf-8")).hexdigest()
