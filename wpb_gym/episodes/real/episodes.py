"""Benchmark episodes cut from a real API's change-event log (spec §6.1, scraped changelogs).

``wpb episodes from-events LOG --source stripe --out DIR`` reads a change-event log
(``change_events.py``; ``wpb ingest openapi`` writes one from a git history), splits its
chronological stream into named time periods (``--windows``), cuts each period into
episodes of ``length`` steps and freezes them as one set: a file per
period (``train.jsonl``, ``heldout.jsonl``) and a ``MANIFEST.json`` pinning the log's sha256
and every option. Pass one file to the environment, ``wpb eval`` or ``wpb train``
(``episodes=DIR/train.jsonl``); it is verified against the manifest.

A change event is one step: the endpoint's snapshot right after the change, nothing about the
change itself::

    {"api": "POST /v1/charges", "date": "2019-05-16T18:40:57Z", "deprecated": false,
     "params": ["amount", "currency", ...], "release": "2019-05-16", "required": ["amount"],
     "version": 212}

``version`` is the spec revision (the log's ``seq``: comparable, it rises with every commit),
``release`` the API's own version label and ``date`` the commit time. An endpoint removed from
the spec shows ``"removed": true`` with empty ``params`` and ``required`` (what a reader of the
new documentation sees); the ``initial`` lines of the log are the starting state, not changes,
and are not steps. As in the ``contract`` regimes, telling a breaking change from a cosmetic
one takes the endpoint's previous snapshot, which a policy has only if it kept it; a change
nested below a top-level parameter (``nested_param_*``) does not show at all.

With ``warmup`` (the default) an episode opens with a *warm-up*, as the ``contract`` regimes
do: for each endpoint its change events touch that existed before them, the snapshot of the
endpoint's latest event before the episode's first change event (the log replayed from its
``initial`` lines), in a random order. Warm-up steps are unscored (``UTILITY_WARMUP``, never
critical), so every change at an endpoint that existed before the episode comes after the
endpoint was shown and can be classified from the stream, unless it is nested or comes with a
renamed path parameter (the stream then shows the endpoint under a name it has not shown).

Critical steps are the *durable* breaking changes: breaking events (``change_events.BREAKING_TYPES``)
except those whose ``reverted_after_days`` is at most ``revert_window_days`` (default 30: the
log's README marks shorter-lived changes as artefacts, e.g. a commit that regressed the spec
for a day). ``count_reverted=True`` counts every breaking event. Two consequences of reading
the revert time off the whole log: a training event's label can depend on events of a later
period (its observation does not), and a breaking event in the log's last
``revert_window_days`` counts as durable because its revert could not have been seen yet. Utilities use the synthetic
regimes' scale: ``UTILITY_DRIFT`` (5) for a critical step, ``UTILITY_COSMETIC`` (2) for every
other change. The privileged ``priority`` is the ``contract`` regimes' hint: ``Phi(rho * z +
sqrt(1 - rho^2) * N(0, 1))`` of the episode's standardised utility, ``rho =
priority_correlation`` (0.8), drawn from a stream keyed by source, period, seed and index.

Windows: an episode has ``length`` steps. Without the warm-up they are ``length`` consecutive
change events; with it, the warm-up and the change events share them: consecutive events are
taken, each preceded in the warm-up by its endpoint if not shown yet, until the steps are
filled (when one step is left for an endpoint and its change, the endpoint is shown and the
change is left out). Episodes start where the one before ended (so that change opens the next
one), or every ``stride`` change events (overlapping when ``stride`` is below a window's number
of change events, leaving gaps when above). An incomplete tail is left out, and so is every
window with fewer than ``min_critical`` (1) critical steps, so that each episode contains
breaking changes.
Periods are whole UTC days and may not overlap, so training and held-out episodes never share
a change event (a warm-up may show a state set in an earlier period: the documentation as it
stood when the episode begins). ``--windows auto`` (the
default) ends ``train`` on the day before the one where the last ``heldout_fraction`` (0.3)
of the change events begins.

Labels: ``critical_steps`` and ``breaking_changes`` (the same: durable breaking changes),
``total_drift_events`` (their number), ``breaking_events`` (every breaking event),
``reverted_changes`` (breaking events left out as reverted), ``change_kinds`` (``[step,
"type+type"]`` per change event), ``commits`` (the distinct spec commits), ``first_date`` /
``last_date``, ``first_seq`` / ``last_seq`` (of the change events), ``window``,
``deprecated_apis``, ``utility_by_step``, ``max_utility``, ``episode_id``
(``source/window/index``), ``mode`` (the regime, ``real:SOURCE``), ``seed``, and with the
warm-up ``warmup_steps`` (the first steps) and ``change_events`` (the others).
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...core.types import Episode, Step, frozen_instance
from ..frozen import FrozenSet, open_frozen_set, sha256_file, write_frozen_set
from ..generators.paper import correlated_priority, episode_seed
from ..generators.utility_scale import UTILITY_COSMETIC, UTILITY_DRIFT, UTILITY_WARMUP
from ..jsonl import write_jsonl
from .change_events import ChangeEvent, apply_event, endpoint_key, read_events

REGIME_PREFIX = "real:"
_SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_PERIOD_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


@dataclass(frozen=True)
class RealEpisodeOptions:
    """How a change-event log becomes episodes (see the module docstring)."""

    source: str
    length: int = 200
    stride: int | None = None
    revert_window_days: float = 30.0
    count_reverted: bool = False
    min_critical: int = 1
    priority_correlation: float = 0.8
    seed: int = 0
    warmup: bool = True

    def __post_init__(self) -> None:
        if not _SOURCE_NAME.match(self.source):
            raise ValueError(f"source: expected a lower-case name like 'stripe', got {self.source!r}")
        if self.length < 1:
            raise ValueError(f"length: expected >= 1, got {self.length}")
        if self.stride is not None and self.stride < 1:
            raise ValueError(f"stride: expected >= 1, got {self.stride}")
        if not self.revert_window_days >= 0:
            raise ValueError(f"revert_window_days: expected >= 0, got {self.revert_window_days}")
        if self.min_critical < 0:
            raise ValueError(f"min_critical: expected >= 0, got {self.min_critical}")
        if not 0.0 <= self.priority_correlation <= 1.0:
            raise ValueError(f"priority_correlation: expected a value in [0, 1], got {self.priority_correlation}")
        if self.seed < 0:
            raise ValueError(f"seed: expected >= 0, got {self.seed}")
        if not isinstance(self.warmup, bool):
            raise ValueError(f"warmup: expected true or false, got {self.warmup!r}")
        if self.warmup and self.length < 2:
            raise ValueError(
                f"length: expected >= 2 with a warm-up (an endpoint and its change), got {self.length} "
                "(warmup=False, --no-warmup, turns the warm-up off)"
            )

    @property
    def regime(self) -> str:
        return REGIME_PREFIX + self.source

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Period:
    """A named span of whole UTC days, both ends included (``None``: open)."""

    name: str
    start: _dt.date | None
    end: _dt.date | None

    def contains(self, event: ChangeEvent) -> bool:
        day = _dt.date.fromisoformat(event.date[:10])
        return (self.start is None or self.start <= day) and (self.end is None or day <= self.end)

    def describe(self) -> str:
        return f"{self.name}={self.start or ''}..{self.end or ''}"


def parse_windows(text: str) -> list[Period]:
    """``"train=2017-09-06..2021-12-31,heldout=2022-01-01.."`` -> periods (validated, in time order)."""
    periods = []
    for part in text.split(","):
        name, sep, span = part.strip().partition("=")
        start_text, dots, end_text = span.partition("..")
        if not sep or not dots or not _PERIOD_NAME.match(name):
            raise ValueError(
                f"--windows: expected NAME=START..END (dates YYYY-MM-DD, either may be empty), got {part!r}"
            )
        try:
            start = _dt.date.fromisoformat(start_text) if start_text else None
            end = _dt.date.fromisoformat(end_text) if end_text else None
        except ValueError:
            raise ValueError(f"--windows: {part!r}: dates must be YYYY-MM-DD") from None
        if start is not None and end is not None and end < start:
            raise ValueError(f"--windows: {part!r}: ends before it starts")
        periods.append(Period(name, start, end))
    return check_periods(periods)


def check_periods(periods: Sequence[Period]) -> list[Period]:
    """Distinct names and no two periods sharing a day; returned in time order."""
    names = [p.name for p in periods]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"--windows: period {repeated[0]!r} named twice")
    ordered = sorted(periods, key=lambda p: p.start or _dt.date.min)
    for a, b in zip(ordered, ordered[1:], strict=False):
        a_end = _dt.date.max if a.end is None else a.end
        b_start = _dt.date.min if b.start is None else b.start
        if b_start <= a_end:
            raise ValueError(f"--windows: {a.describe()} and {b.describe()} overlap in time")
    return ordered


def auto_periods(events: Sequence[ChangeEvent], heldout_fraction: float = 0.3) -> list[Period]:
    """``train`` then ``heldout``: held out are the last ``heldout_fraction`` of the change events,
    extended back to the start of the day the split falls on (a day is never split)."""
    if not 0.0 < heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction: expected a value in (0, 1), got {heldout_fraction}")
    changes = [e for e in events if not e.initial]
    if len(changes) < 2:
        raise ValueError("the log holds fewer than two change events: nothing to split")
    # At least the last change event is held out, however small the fraction.
    first_held_out = min(len(changes) - 1, int(len(changes) * (1.0 - heldout_fraction)))
    split_day = _dt.date.fromisoformat(changes[first_held_out].date[:10])
    first_day = _dt.date.fromisoformat(changes[0].date[:10])
    if split_day <= first_day:
        raise ValueError("the held-out fraction begins on the log's first day: no training period is left")
    return [Period("train", None, split_day - _dt.timedelta(days=1)), Period("heldout", split_day, None)]


def is_critical(event: ChangeEvent, options: RealEpisodeOptions) -> bool:
    """A breaking event still in force ``revert_window_days`` later (or any, with ``count_reverted``)."""
    if not event.breaking:
        return False
    if options.count_reverted or event.reverted_after_days is None:
        return True
    return event.reverted_after_days > options.revert_window_days


def observation(event: ChangeEvent) -> dict[str, Any]:
    """What a policy sees of an event: the endpoint's snapshot after it (see the module docstring)."""
    obs: dict[str, Any] = {
        "api": event.api,
        "date": event.date,
        "deprecated": event.deprecated,
        "params": list(event.params),
        "release": event.version,
        "required": list(event.required),
        "version": event.seq,
    }
    if event.removed_endpoint:
        obs.update(params=[], required=[], removed=True)
    return obs


def build_episode(
    events: Sequence[ChangeEvent],
    options: RealEpisodeOptions,
    period: str,
    index: int,
    warmup: Sequence[ChangeEvent] = (),
) -> Episode:
    """Episode ``index`` of ``period``: the snapshots set by the ``warmup`` events (unscored), in
    a random order, then the change ``events`` (already cut)."""
    rng = np.random.default_rng(episode_seed(f"{options.regime}/{period}", options.seed, index))
    # Its own stream, so that the warm-up's order leaves the priority draws as they were.
    order = np.random.default_rng(episode_seed(f"{options.regime}/{period}/warmup", options.seed, index))
    shown = [warmup[i] for i in order.permutation(len(warmup)).tolist()]
    w = len(shown)
    critical = [w + t for t, e in enumerate(events) if is_critical(e, options)]
    critical_set = set(critical)
    utility = np.array(
        [UTILITY_WARMUP] * w
        + [UTILITY_DRIFT if w + t in critical_set else UTILITY_COSMETIC for t in range(len(events))]
    )
    if options.priority_correlation < 1.0:
        priority = correlated_priority(utility, options.priority_correlation, rng)
    else:
        priority = utility / UTILITY_DRIFT
    priority = np.clip(priority, 0.0, 1.0)
    observations = [observation(e) for e in (*shown, *events)]
    steps = tuple(
        frozen_instance(Step, {"t": t, "observation": obs, "metadata": {"mode": options.regime, "priority": p}})
        for t, (obs, p) in enumerate(zip(observations, priority.tolist(), strict=True))
    )
    breaking = [w + t for t, e in enumerate(events) if e.breaking]
    labels = {
        "breaking_changes": critical,
        "breaking_events": breaking,
        "change_kinds": [[w + t, "+".join(e.change)] for t, e in enumerate(events)],
        "commits": len({e.seq for e in events}),
        "critical_steps": critical,
        "deprecated_apis": len({o["api"] for o in observations[w:] if o["deprecated"]}),
        "episode_id": f"{options.source}/{period}/{index}",
        "first_date": events[0].date,
        "first_seq": events[0].seq,
        "last_date": events[-1].date,
        "last_seq": events[-1].seq,
        "max_utility": float(utility.sum()),
        "mode": options.regime,
        "reverted_changes": [t for t in breaking if t not in critical_set],
        "seed": options.seed,
        "total_drift_events": len(critical),
        "utility_by_step": dict(enumerate(utility.tolist())),
        "window": period,
    }
    if options.warmup:  # only then: episodes without a warm-up stay byte for byte what they were
        labels["change_events"] = len(events)
        labels["warmup_steps"] = w
    return Episode(steps=steps, labels=dict(sorted(labels.items())))


@dataclass(frozen=True)
class PeriodCut:
    """What cutting one period gave: its episodes and what was left out."""

    period: Period
    change_events: int
    episodes: tuple[Episode, ...]
    windows: int
    too_few_critical: int
    tail_events: int


class _ReplayedStates:
    """The endpoints' latest events (``initial`` lines included) before a given change event,
    replayed once, forwards, over the whole log: the documentation as it stood then."""

    def __init__(self, events: Sequence[ChangeEvent]) -> None:
        self._events = events
        self._next = 0
        self.latest: dict[str, ChangeEvent] = {}

    def before(self, event: ChangeEvent) -> dict[str, ChangeEvent]:
        """The state just before ``event`` (each call must name an event later than the last)."""
        while self._events[self._next] is not event:
            passed = self._events[self._next]
            apply_event(self.latest, passed, passed)
            self._next += 1
        return self.latest


def _warmup_window(
    changes: Sequence[ChangeEvent], start: int, state: dict[str, ChangeEvent], length: int
) -> tuple[list[ChangeEvent], list[ChangeEvent]] | None:
    """``length`` steps from ``changes[start]`` on: the change events, each preceded (in the
    warm-up) by its endpoint's state before the window if the endpoint existed then; ``None``
    when the period ends first. When one step is left for an endpoint and its change, the
    endpoint is shown and its change is left out."""
    warmup: list[ChangeEvent] = []
    window: list[ChangeEvent] = []
    shown: set[str] = set()
    i = start
    while len(warmup) + len(window) < length:
        if i == len(changes):
            return None
        event = changes[i]
        key = endpoint_key(event.previous_api) if event.previous_api is not None else event.endpoint_key
        if key in state and key not in shown:
            shown.add(key)
            warmup.append(state[key])
            if len(warmup) + len(window) == length:
                break
        window.append(event)
        i += 1
    return warmup, window


def cut_period(events: Sequence[ChangeEvent], period: Period, options: RealEpisodeOptions) -> PeriodCut:
    """Episodes of ``length`` steps cut from the change events of ``period`` (see the module docstring)."""
    changes = [e for e in events if not e.initial and period.contains(e)]
    length, stride = options.length, options.stride
    episodes: list[Episode] = []
    windows = dropped = covered = 0
    replay = _ReplayedStates(events) if options.warmup else None
    start = 0
    while start < len(changes):
        if replay is None:
            cut = ([], changes[start : start + length]) if start + length <= len(changes) else None
        else:
            cut = _warmup_window(changes, start, replay.before(changes[start]), length)
        if cut is None:
            break
        warmup, window = cut
        windows += 1
        covered = max(covered, start + len(window))
        if sum(is_critical(e, options) for e in window) < options.min_critical:
            dropped += 1
        else:
            episodes.append(build_episode(window, options, period.name, len(episodes), warmup))
        start += len(window) if stride is None else stride
    return PeriodCut(period, len(changes), tuple(episodes), windows, dropped, len(changes) - covered)


def episodes_from_events(
    events_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    options: RealEpisodeOptions,
    periods: Sequence[Period] | None = None,
    *,
    heldout_fraction: float = 0.3,
    compress: bool = False,
    force: bool = False,
    on_period: Callable[[PeriodCut], None] | None = None,
) -> FrozenSet:
    """Cut the log at ``events_path`` into a frozen set in ``out_dir``: one file per period.

    ``periods`` default to ``auto_periods``. A period that yields no episode is an error (it
    names the period and why), and nothing is written.
    """
    events_path = Path(events_path)
    if Path(out_dir).exists() and not force:  # before the work, not after it
        raise FileExistsError(f"{out_dir} already exists (pass force=True / --force to replace it)")
    events = read_events(events_path)
    periods = check_periods(periods) if periods is not None else auto_periods(events, heldout_fraction)
    cuts = [cut_period(events, period, options) for period in periods]
    for cut in cuts:
        if not cut.episodes:
            raise ValueError(
                f"{events_path}: period {cut.period.describe()} gives no episode: {cut.change_events} change "
                f"events, {cut.windows} windows of {options.length}, {cut.too_few_critical} of them with fewer "
                f"than {options.min_critical} critical steps"
            )
        if on_period is not None:
            on_period(cut)
    log_sha = sha256_file(events_path)
    suffix = ".jsonl.gz" if compress else ".jsonl"

    def write_files(folder: Path) -> dict[str, Any]:
        files = {}
        for cut in cuts:
            name = cut.period.name + suffix
            files[name] = {
                "episodes": write_jsonl(folder / name, cut.episodes),
                "generator": {
                    "change_events": events_path.name,
                    "change_events_sha256": log_sha,
                    "options": options.to_dict(),
                    "period": {"name": cut.period.name, "start": _iso(cut.period.start), "end": _iso(cut.period.end)},
                    "source": "change-events",
                },
                "length": options.length,
                "regime": options.regime,
                "seed": options.seed,
                "sha256": sha256_file(folder / name),
            }
        return files

    manifest = {
        "created_by": "wpb episodes from-events",
        "lengths": [options.length],
        "regimes": [options.regime],
        "seed": options.seed,
        "total_episodes": sum(len(cut.episodes) for cut in cuts),
    }
    write_frozen_set(out_dir, write_files, manifest, force=force)
    return open_frozen_set(out_dir)


def _iso(day: _dt.date | None) -> str | None:
    return None if day is None else day.isoformat()


def period_summary(cuts: Iterable[PeriodCut]) -> list[dict[str, Any]]:
    """One row per period for the command's table."""
    rows = []
    for cut in cuts:
        eps = cut.episodes
        rows.append(
            {
                "period": cut.period.describe(),
                "change events": cut.change_events,
                "episodes": len(eps),
                "dropped (below min critical)": cut.too_few_critical,
                "tail events left out": cut.tail_events,
                "critical/ep": f"{np.mean([len(e.critical_steps) for e in eps]):.1f}" if eps else "-",
                "first..last day": f"{eps[0].labels['first_date'][:10]}..{eps[-1].labels['last_date'][:10]}"
                if eps
                else "-",
            }
        )
    return rows
