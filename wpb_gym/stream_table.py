"""Per-episode tables the environment reads instead of re-parsing steps at every decision.

``StreamTable(episode, track)`` looks at every step once, as a policy on ``track`` sees it,
and keeps plain Python lists indexed by timestep: byte cost, content kind, endpoint family,
exact endpoint identity, version, parameter sets as bit masks, deprecation and priority.
Comparing the current step with a stored one is then a few list lookups and integer
operations, with no JSON work at decision time.

Only policy-visible data enters these tables; the hidden labels stay on the episode.

Endpoint *family*: MERGE needs an exactly equal ``"api"``, but the synthetic streams put
the version in the endpoint string (``api.v3.endpoint_5``), so the previous version of an
endpoint is another ``"api"``. The family key removes version segments (``v`` + digits
between ``.``/``/`` separators or at an end) so that ``api.v2.endpoint_5`` and
``api.v3.endpoint_5`` are one family, which is what "how does this step differ from what
memory holds about the endpoint" needs. Documentation sections form a family per
``section`` title and migration guides per family of ``old_api``.
"""

from __future__ import annotations

import functools
import re
from numbers import Real
from typing import Any

import numpy as np

from .accounting import HEADER_BYTES, INDEX_BYTES, MERGE_KEY, identity_key, json_len, observation_json
from .tracks import PRIVILEGED, VISIBLE_METADATA, check_track, policy_step, visible_metadata
from .types import Episode, Step

KIND_ENDPOINT, KIND_DOC, KIND_GUIDE, KIND_OTHER = 0, 1, 2, 3
KIND_NAMES = ("endpoint", "doc", "guide", "other")

_VERSION_SEGMENT = re.compile(r"(^|[./])v\d+(?=[./]|$)")


def endpoint_family(api: Any) -> Any:
    """The family key of an ``"api"`` value: version segments removed from strings."""
    if isinstance(api, str):
        return _string_family(api)
    return api


@functools.lru_cache(maxsize=65536)
def _string_family(api: str) -> str:
    # Memoised: generated streams repeat the same endpoint strings from episode to episode.
    return _VERSION_SEGMENT.sub(r"\1", api)


def kind_and_family(obs: Any) -> tuple[int, Any]:
    """The content kind (KIND_*) of an observation and its family key (None: no family)."""
    if isinstance(obs, dict):
        if MERGE_KEY in obs:
            return KIND_ENDPOINT, ("api", identity_key(endpoint_family(obs[MERGE_KEY])))
        if "section" in obs:
            return KIND_DOC, ("section", identity_key(obs["section"]))
        if "old_api" in obs or "new_api" in obs:
            return KIND_GUIDE, ("guide", identity_key(endpoint_family(obs.get("old_api"))))
    return KIND_OTHER, None


def _visible_metadata_lengths(steps: tuple[Step, ...], track: str) -> list[int]:
    """``len(json.dumps(visible_metadata(step.metadata, track), sort_keys=True))`` per step.

    Generated steps repeat the same visible metadata (``{"mode": regime}`` on the
    unprivileged track), so lengths are memoised on the visible values when those are all
    strings (equal strings, equal JSON; numbers are not memoised: 1 == 1.0 == True).
    """
    keys = VISIBLE_METADATA[track]
    metadatas = [step.metadata for step in steps]
    if set(map(type, metadatas)) == {dict}:
        columns = [[m.get(k, _ABSENT) for m in metadatas] for k in keys]
        if all(map(_strings_or_absent, columns)):
            # Every visible value is a string: one JSON text per distinct combination.
            combos = list(zip(*columns, strict=True))
            memo = {
                key: json_len({k: v for k, v in zip(keys, key, strict=True) if v is not _ABSENT}) for key in set(combos)
            }
            return [memo[key] for key in combos]
    absent = (_ABSENT,) * len(keys)
    memo: dict[tuple[Any, ...], int] = {}  # holds str-valued keys only
    lengths = []
    for metadata in metadatas:
        length = None
        if type(metadata) is dict:
            key = tuple(map(metadata.get, keys, absent))
            try:
                length = memo.get(key)
            except TypeError:  # an unhashable value: never memoised
                key = None
        else:
            key = None
        if length is None:
            length = json_len(visible_metadata(metadata, track))
            if key is not None and all(type(v) is str or v is _ABSENT for v in key):
                memo[key] = length
        lengths.append(length)
    return lengths


_ABSENT = object()  # a visible key the metadata lacks (hashable, never a JSON value)


def _strings_or_absent(values: list[Any]) -> bool:
    """True if every value is a ``str`` or ``_ABSENT`` (set operations: no Python loop in the common case)."""
    kinds = set(map(type, values))
    if kinds <= {str}:
        return True
    return kinds <= {str, object} and all(v is _ABSENT for v in values if type(v) is not str)


def compare_versions(current: Any, reference: Any) -> int | None:
    """+1 if ``current`` is a later version than ``reference``, -1 if earlier, 0 if equal.

    Numbers (not booleans) compare numerically and strings lexically (ISO dates sort); None
    when the two cannot be ordered (missing, or of different types) and differ.
    """
    if current == reference and type(current) is type(reference):
        return 0
    both_numbers = (
        isinstance(current, Real)
        and isinstance(reference, Real)
        and not isinstance(current, bool)
        and not isinstance(reference, bool)
    )
    if both_numbers or (isinstance(current, str) and isinstance(reference, str)):
        return (current > reference) - (current < reference)
    return None


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain_json(value: Any) -> bool:
    """True for what ``json.loads`` can return: dicts with str keys, lists and scalars."""
    stack = [value]
    while stack:
        v = stack.pop()
        kind = type(v)
        if kind is dict:
            for k, item in v.items():
                if type(k) is not str:
                    return False
                if type(item) in _SCALARS:
                    continue
                stack.append(item)
        elif kind is list:
            for item in v:
                if type(item) not in _SCALARS:
                    stack.append(item)
        elif kind not in _SCALARS:
            return False
    return True


class StreamTable:
    """What the environment needs to know about each step of one episode on one track.

    The track's view of a step (a ``Step`` with the visible metadata) is only built when
    something asks for it (``step(t)``): pricing every step needs the JSON text and the
    visible metadata, not a new object per step.
    """

    def __init__(self, episode: Episode, track: str) -> None:
        check_track(track)
        self.track = track
        raw_steps = episode.steps
        self._raw = raw_steps
        self._views: list[Step | None] = [None] * len(raw_steps)
        self.length = len(raw_steps)
        privileged = track == PRIVILEGED
        content_ids: dict[str, int] = {}
        api_info: dict[Any, tuple[int, int]] = {}  # api value -> (family id, api id)
        family_ids: dict[Any, int] = {}
        masks: dict[Any, int | None] = {}
        bits: dict[Any, int] = {}

        def mask(values: Any) -> int | None:
            if not isinstance(values, list):
                return None
            try:
                key = (tuple(values), tuple(map(type, values)))  # typed: 1 and True differ
                cached = masks.get(key)
            except TypeError:
                key, cached = None, None
            if cached is not None:
                return cached
            m = 0
            for v in values:
                b = (type(v), v)  # identity_key(v), without a call, for a hashable v
                try:
                    bit = bits.get(b)
                except TypeError:
                    b = identity_key(v)
                    bit = bits.get(b)
                if bit is None:
                    bit = bits[b] = len(bits)
                m |= 1 << bit
            if key is not None:
                masks[key] = m
            return m

        # Everything but the cost depends on the observation alone. Generated steps share one
        # object per endpoint state, so the work is done once per object (keyed by id: every
        # observation stays alive, held by the episode, while the table is built).
        by_object: dict[int, tuple[Any, ...]] = {}

        def describe(step: Step) -> tuple[Any, ...]:
            obs = step.observation
            text = observation_json(step)
            # Equal JSON text means equal observations only for plain JSON values without NaN
            # (NaN != NaN; a tuple and a list, or keys 1 and "1", print alike). Other contents
            # get a negative id, which tells the env to let the store compare values itself.
            content = content_ids.setdefault(text, len(content_ids) + 1)
            if "NaN" in text or not _plain_json(obs):
                content = -content
            if type(obs) is not dict:
                return (text, content, KIND_OTHER, -1, -1, None, None, None, 0.0)
            if MERGE_KEY in obs:
                api = obs[MERGE_KEY]
                key = identity_key(api)
                ids = api_info.get(key)
                if ids is None:
                    family = family_ids.setdefault(("api", identity_key(endpoint_family(api))), len(family_ids))
                    ids = api_info[key] = (family, len(api_info))
                kind, family, api_id = KIND_ENDPOINT, ids[0], ids[1]
            else:
                kind, family_key = kind_and_family(obs)
                family = -1 if family_key is None else family_ids.setdefault(family_key, len(family_ids))
                api_id = -1
            return (
                text,
                content,
                kind,
                family,
                api_id,
                obs["version"] if "version" in obs else obs.get("last_updated"),
                mask(obs.get("params")),
                mask(obs.get("required")),
                1.0 if obs.get("deprecated") is True else 0.0,
            )

        infos = []
        for step in raw_steps:
            info = by_object.get(id(step.observation))
            if info is None:
                info = by_object[id(step.observation)] = describe(step)
            infos.append(info)
        columns = [list(c) for c in zip(*infos, strict=True)] if infos else [[] for _ in range(9)]
        texts, contents, kinds, families, apis, versions, params, required, deprecated = columns
        self._texts = texts
        self.costs = [
            len(text) + metadata_len + HEADER_BYTES + INDEX_BYTES
            for text, metadata_len in zip(texts, _visible_metadata_lengths(raw_steps, track), strict=True)
        ]
        self.kinds = kinds
        self.families = families
        # The previous step of the same family (-1: none), whatever memory holds.
        self.previous_shown = []
        last: dict[int, int] = {}
        for t, family in enumerate(families):
            self.previous_shown.append(last.get(family, -1) if family >= 0 else -1)
            if family >= 0:
                last[family] = t
        self.apis = apis
        self.versions = versions
        self.params = params
        self.required = required
        self.deprecated = deprecated
        self.contents = contents
        self.priorities = None
        if privileged:
            self.priorities = []
            for step in raw_steps:
                p = step.metadata.get("priority")
                ok = isinstance(p, Real) and not isinstance(p, bool) and p == p
                self.priorities.append(min(1.0, max(0.0, float(p))) if ok else 0.0)

    def step(self, t: int) -> Step:
        """Step ``t`` as a policy on this track sees it (built once, its cost already known)."""
        view = self._views[t]
        if view is None:
            view = policy_step(self._raw[t], self.track)
            cache = view.__dict__
            if "_write_cost" not in cache:
                cache["_observation_json"] = self._texts[t]
                cache["_write_cost"] = self.costs[t]
            self._views[t] = view
        return view

    def observation(self, t: int) -> Any:
        return self._raw[t].observation

    def cost_array(self) -> np.ndarray:
        return np.asarray(self.costs, dtype=np.int64)
