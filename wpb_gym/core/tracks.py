"""Evaluation tracks: which step metadata a policy may see.

Both tracks are scored against the same hidden labels. The unprivileged policy sees the
observation and the benign metadata (the regime name, ``mode``, and in the query tier an
endpoint's ``traffic``); the privileged one also sees the scalar ``priority`` hint. Keys are whitelisted rather than blacklisted so that a
file carrying label-like metadata (the spec's example has ``breaking_change``) cannot leak
it to a policy. Byte costs are computed on the step as the policy sees it, so the same
step costs fewer bytes on the unprivileged track.
"""

from __future__ import annotations

import numpy as np

from .accounting import episode_costs
from .types import Episode, Step, frozen_instance

UNPRIVILEGED = "unprivileged"
PRIVILEGED = "privileged"
TRACKS: tuple[str, ...] = (UNPRIVILEGED, PRIVILEGED)

VISIBLE_METADATA: dict[str, tuple[str, ...]] = {
    UNPRIVILEGED: ("mode", "traffic"),
    PRIVILEGED: ("mode", "priority", "traffic"),
}


def plain_track(track: object) -> object:
    """``track`` as the exact ``str`` it holds when it is a ``str`` (a subclass's comparisons,
    hash and ``__str__`` are its own code, which could say "oracle" to one question and
    "unprivileged" to the next); anything else as it is, for the caller's check to refuse.
    Every track that crosses into the evaluator is read through this once."""
    return str.__str__(track) if isinstance(track, str) else track


def check_track(track: str) -> str:
    track = plain_track(track)
    if track not in VISIBLE_METADATA:
        raise ValueError(f"unknown track {track!r}; expected one of {TRACKS}")
    return track


def visible_metadata(metadata: dict, track: str) -> dict:
    """The part of a step's metadata a policy on ``track`` sees."""
    keys = VISIBLE_METADATA.get(track)
    if keys is None:
        check_track(track)  # raises, naming the tracks
    visible = {}
    for k in keys:  # a loop, not a comprehension: cheaper for one or two keys
        if k in metadata:
            visible[k] = metadata[k]
    return visible


def policy_step(step: Step, track: str) -> Step:
    """The step as a policy on ``track`` sees it (metadata restricted to the track's keys)."""
    metadata = step.metadata
    visible = visible_metadata(metadata, track)
    if len(visible) == len(metadata):
        return step
    # Built without Step.__init__ (see frozen_instance): the environment makes one per WRITE.
    return frozen_instance(Step, {"t": step.t, "observation": step.observation, "metadata": visible})


def policy_episode(episode: Episode, track: str) -> Episode:
    """The episode with every step replaced by its ``track`` view; labels are kept for scoring.

    The view is built once per (episode, track) and kept on the episode, so its steps — and
    the byte costs cached on them — are shared by every later caller.
    """
    check_track(track)
    views = episode.__dict__.setdefault("_track_views", {})
    view = views.get(track)
    if view is None:
        view = Episode(steps=tuple(policy_step(s, track) for s in episode.steps), labels=episode.labels)
        views[track] = view
    return view


def track_costs(episode: Episode, track: str) -> np.ndarray:
    """WRITE cost of every step as a policy on ``track`` sees it (read-only, computed once)."""
    view = policy_episode(episode, track)
    costs = view.__dict__.get("_write_costs")
    if costs is None:
        costs = episode_costs(view)
        costs.setflags(write=False)
        view.__dict__["_write_costs"] = costs
    return costs
