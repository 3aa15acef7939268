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

from ...core.accounting import HEADER_BYTES, INDEX_BYTES, MERGE_KEY, identity_key, json_len, json_text, observation_json
from ...core.tracks import PRIVILEGED, VISIBLE_METADATA, check_track, policy_step, visible_metadata
from ...core.types import Episode, Step, frozen_instance

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


def visible_metadata_lengths(metadatas: list[Any], track: str) -> tuple[list[int], dict[str, str] | None]:
    """``len(json.dumps(visible_metadata(step.metadata, track), sort_keys=True))`` per step,
    and the visible metadata itself when it is the same string-valued dict at every step.

    Generated steps repeat the same visible metadata (``{"mode": regime}`` on the
    unprivileged track), so lengths are memoised on the visible values when those are all
    strings (equal strings, equal JSON; numbers are not memoised: 1 == 1.0 == True).
    """
    keys = VISIBLE_METADATA[track]
    if set(map(type, metadatas)) == {dict}:
        columns = [[m.get(k, _ABSENT) for m in metadatas] for k in keys]
        if all(map(_strings_or_absent, columns)):
            distinct = [set(column) for column in columns]
            if all(len(values) == 1 for values in distinct):  # the same at every step (the usual case)
                only = [values.pop() for values in distinct]
                visible = {k: v for k, v in zip(keys, only, strict=True) if v is not _ABSENT}
                return [json_len(visible)] * len(metadatas), visible
            # Every visible value is a string: one JSON text per distinct combination.
            combos = list(zip(*columns, strict=True))
            memo = {
                key: json_len({k: v for k, v in zip(keys, key, strict=True) if v is not _ABSENT}) for key in set(combos)
            }
            return [memo[key] for key in combos], None
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
    return lengths, None


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


def plain_json(value: Any) -> bool:
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


def step_priorities(metadatas: list[Any]) -> list[float]:
    """Each step's ``priority`` as the privileged track shows it: clipped to [0, 1], 0 when it
    is missing or not a number (a bool or NaN)."""
    priorities = []
    for metadata in metadatas:
        p = metadata.get("priority")
        ok = isinstance(p, Real) and not isinstance(p, bool) and p == p
        priorities.append(min(1.0, max(0.0, float(p))) if ok else 0.0)
    return priorities


def stated_contract(obs: dict[str, Any], parameter_set: Any) -> tuple[Any, ...]:
    """What a dict observation states of its endpoint: version (else ``last_updated``), its
    ``params`` and ``required`` lists as ``parameter_set`` encodes them, deprecated, removed."""
    return (
        obs["version"] if "version" in obs else obs.get("last_updated"),
        parameter_set(obs.get("params")),
        parameter_set(obs.get("required")),
        1.0 if obs.get("deprecated") is True else 0.0,
        1.0 if obs.get("removed") is True else 0.0,
    )


class ObservationShapes:
    """What a plain JSON observation tells the table, memoised on its JSON text, with the ids
    (families, endpoints, parameter bits) those descriptions use.

    An environment keeps one for all its episodes: generated streams show the same endpoint
    states again and again, and the text must be computed anyway (it prices the step). For
    plain JSON without NaN, equal text means an equal value of equal types, so the text is a
    sound key; anything else is described afresh. Ids only need to be consistent within one
    table, so the memo is emptied (between tables, never during one) when it grows large.
    """

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self.by_text: dict[str, tuple[Any, ...]] = {}
        self._api_info: dict[Any, tuple[int, int]] = {}  # api value -> (family id, api id)
        self._family_ids: dict[Any, int] = {}
        self._masks: dict[Any, int | None] = {}
        self._bits: dict[Any, int] = {}

    def start_table(self) -> None:
        if len(self.by_text) > _SHAPES_LIMIT or len(self._bits) > _BITS_LIMIT or len(self._masks) > _SHAPES_LIMIT:
            self._clear()

    def _mask(self, values: Any) -> int | None:
        if not isinstance(values, list):
            return None
        masks, bits = self._masks, self._bits
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

    def describe(self, obs: Any) -> tuple[Any, ...]:
        """kind, family id, api id, version, params mask, required mask, deprecated, removed."""
        if not isinstance(obs, dict):  # a dict subclass (read-only copies) is described alike
            return _NOT_A_DICT
        if MERGE_KEY in obs:
            api = obs[MERGE_KEY]
            key = identity_key(api)
            ids = self._api_info.get(key)
            if ids is None:
                family_ids = self._family_ids
                family = family_ids.setdefault(("api", identity_key(endpoint_family(api))), len(family_ids))
                ids = self._api_info[key] = (family, len(self._api_info))
            kind, family, api_id = KIND_ENDPOINT, ids[0], ids[1]
        else:
            kind, family_key = kind_and_family(obs)
            family_ids = self._family_ids
            family = -1 if family_key is None else family_ids.setdefault(family_key, len(family_ids))
            api_id = -1
        return (kind, family, api_id, *stated_contract(obs, self._mask))


_NOT_A_DICT = (KIND_OTHER, -1, -1, None, None, None, 0.0, 0.0)
# Past these sizes ObservationShapes starts afresh; texts longer than _SHAPES_TEXT_LIMIT
# (documentation, guides: random text that never comes back) are not memoised at all.
_SHAPES_LIMIT = 8192
_BITS_LIMIT = 4096
_SHAPES_TEXT_LIMIT = 1024


class StreamTable:
    """What the environment needs to know about each step of one episode on one track.

    The track's view of a step (a ``Step`` with the visible metadata) is only built when
    something asks for it (``step(t)``): pricing every step needs the JSON text and the
    visible metadata, not a new object per step.
    """

    def __init__(self, episode: Episode, track: str, shapes: ObservationShapes | None = None) -> None:
        check_track(track)
        self.track = track
        # Columns, so that an episode made by Episode.from_columns is read without making its
        # steps; an episode that has its steps lends them, and the JSON text cached on them.
        observations, metadatas = self._observations, self._metadata = episode.columns()
        raw_steps = self._raw = episode.__dict__.get("steps")
        self._views: list[Step | None] = [None] * len(observations)
        self.length = len(observations)
        privileged = track == PRIVILEGED
        if shapes is None:
            shapes = ObservationShapes()
        else:
            shapes.start_table()
        by_text = shapes.by_text
        describe = shapes.describe
        content_ids: dict[str, int] = {}

        # Everything but the cost depends on the observation alone. Generated steps share one
        # object per endpoint state, so the work is done once per object (keyed by id: every
        # observation stays alive, held by the episode, while the table is built), in the
        # order the objects first appear. The per-step passes run in C (map, zip, dict).
        object_ids = list(map(id, observations))
        first_shown = dict(zip(reversed(object_ids), range(self.length - 1, -1, -1), strict=True))
        by_object: dict[int, tuple[Any, ...]] = {}
        for key in dict.fromkeys(object_ids):
            t = first_shown[key]
            obs = observations[t]
            text = json_text(obs) if raw_steps is None else observation_json(raw_steps[t])
            content = content_ids.setdefault(text, len(content_ids) + 1)
            # Equal JSON text means equal observations only for plain JSON values without NaN
            # (NaN != NaN; a tuple and a list, or keys 1 and "1", print alike). Other contents
            # get a negative id, which tells the env to let the store compare values itself.
            if "NaN" in text or not plain_json(obs):
                by_object[key] = (text, -content, *describe(obs))
                continue
            shape = by_text.get(text)
            if shape is None:
                shape = describe(obs)
                if len(text) <= _SHAPES_TEXT_LIMIT:
                    by_text[text] = shape
            by_object[key] = (text, content, *shape)
        infos = list(map(by_object.__getitem__, object_ids))
        columns = [list(c) for c in zip(*infos, strict=True)] if infos else [[] for _ in range(10)]
        texts, contents, kinds, families, apis, versions, params, required, deprecated, removed = columns
        self._texts = texts
        lengths, self._shared_visible = visible_metadata_lengths(metadatas, track)
        fixed = HEADER_BYTES + INDEX_BYTES
        if lengths and lengths.count(lengths[0]) == len(lengths):  # one metadata length: a constant
            fixed += lengths[0]
            self.costs = [n + fixed for n in map(len, texts)]
        else:
            self.costs = [n + m + fixed for n, m in zip(map(len, texts), lengths, strict=True)]
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
        self.removed = removed  # 1.0 where the endpoint shows "removed": true (real drift)
        self.contents = contents
        self.priorities = step_priorities(metadatas) if privileged else None

    def step(self, t: int) -> Step:
        """Step ``t`` as a policy on this track sees it (built once, its cost already known)."""
        view = self._views[t]
        if view is None:
            metadata = self._metadata[t]
            shared = self._shared_visible
            if shared is not None and len(metadata) != len(shared):
                # Every step shows the same visible metadata: the views share one dict (steps
                # are immutable) and are built without Step.__init__ (see frozen_instance),
                # with the text and cost the table computed.
                view = frozen_instance(
                    Step,
                    {
                        "t": t if self._raw is None else self._raw[t].t,
                        "observation": self._observations[t],
                        "metadata": shared,
                        "_observation_json": self._texts[t],
                        "_write_cost": self.costs[t],
                    },
                )
            else:
                raw = self._raw[t] if self._raw is not None else Step(t, self._observations[t], metadata)
                view = policy_step(raw, self.track)
                cache = view.__dict__
                if "_write_cost" not in cache:
                    cache["_observation_json"] = self._texts[t]
                    cache["_write_cost"] = self.costs[t]
            self._views[t] = view
        return view

    def observation(self, t: int) -> Any:
        return self._observations[t]

    def cost_array(self) -> np.ndarray:
        return np.asarray(self.costs, dtype=np.int64)
