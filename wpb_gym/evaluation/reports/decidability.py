"""How much of an episode's headroom a policy that sees only the stream can reach at all.

A stream-only policy judges a snapshot by comparing it with what the stream showed before.
Two kinds of critical endpoint snapshot are *undecidable*, short of guessing:

- at its family's *first sighting* it has nothing before it, so whether it is a change (and
  critical) cannot be told, unless the snapshot announces itself by showing the endpoint
  ``removed``;
- a later sighting whose ``api``, parameters, required parameters, deprecated and removed flags
  are those of the family's last shown snapshot: the change does not show (on real drift, a
  change nested below a top-level parameter; every real step after the warm-up is a change, so
  that the spec revision in ``version`` has risen tells nothing).

Migration guides, documentation sections and the other snapshots are decidable in this sense
(their content or the comparison can tell).

The *decidable F1 bound* is the hindsight F1 bound (``wpb_gym.scoring.oracle.hindsight_f1_bound``)
when only the decidable critical steps may be kept, while F1 still counts every critical step:
``2k / (k + |R|)`` for the largest ``k`` decidable critical steps whose cheapest-``k`` total
fits the budget. A policy that writes only what it can decide stays at or below it; one that
also guesses at first sightings can pass it only by the luck of its guesses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ...core.tracks import UNPRIVILEGED, track_costs
from ...core.types import Episode
from ...envs.observation.stream_table import KIND_ENDPOINT, StreamTable
from ...scoring.oracle import F1Bound, hindsight_f1_bound

__all__ = ["Decidability", "decidability", "undecidable_critical_steps"]


def undecidable_critical_steps(episode: Episode, track: str = UNPRIVILEGED) -> tuple[int, ...]:
    """The critical endpoint snapshots at their family's first sighting (not showing the endpoint
    removed) or equal in ``api`` and contract to the family's last shown one (see the module docstring)."""
    table = StreamTable(episode, track)
    contract = (table.apis, table.params, table.required, table.deprecated, table.removed)
    out = []
    for t in sorted(set(episode.critical_steps)):
        if not 0 <= t < len(episode) or table.kinds[t] != KIND_ENDPOINT:
            continue
        before = table.previous_shown[t]
        if before == -1:
            if not table.removed[t]:
                out.append(t)
        elif table.kinds[before] == KIND_ENDPOINT and all(column[t] == column[before] for column in contract):
            out.append(t)
    return tuple(out)


@dataclass(frozen=True)
class Decidability:
    critical: int
    undecidable: int
    bounds: dict[int, F1Bound]  # budget -> the hindsight F1 bound
    decidable_bounds: dict[int, float]  # budget -> the decidable F1 bound

    @property
    def undecidable_share(self) -> float:
        return self.undecidable / self.critical if self.critical else 0.0


def decidability(episode: Episode, budgets: Iterable[int], track: str = UNPRIVILEGED) -> Decidability:
    """The undecidable critical steps of ``episode`` and both F1 bounds at each budget."""
    costs = track_costs(episode, track)
    critical = sorted(set(episode.critical_steps))
    undecidable = set(undecidable_critical_steps(episode, track))
    decidable = [t for t in critical if t not in undecidable]
    bounds, decidable_bounds = {}, {}
    for budget in budgets:
        bounds[budget] = hindsight_f1_bound(costs, critical, budget)
        kept = hindsight_f1_bound(costs, decidable, budget).kept
        decidable_bounds[budget] = 2.0 * kept / (kept + len(critical)) if critical else 0.0
    return Decidability(len(critical), len(undecidable), bounds, decidable_bounds)
