"""How a step compares with another, as the observation states it: with the last shown step
of its family (the ``*_since_seen`` features), with the stored item of its family (from
``identical_to_memory`` to ``fields_changed``), and whether it undoes a stored item's change
(``reverted``). Functions of the episode's ``StreamTable`` alone."""

from __future__ import annotations

from typing import Any

from .features import SEEN_FEATURES
from .stream_table import KIND_OTHER, StreamTable, compare_versions


def contracts(tab: StreamTable) -> list[tuple[Any, ...] | None]:
    """Each step's contract as a policy compares it: parameters, required parameters,
    deprecated, removed (None without a parameter list)."""
    return [
        None if p is None else (p, r or 0, d, x)
        for p, r, d, x in zip(tab.params, tab.required, tab.deprecated, tab.removed, strict=True)
    ]


# The SEEN_FEATURES of a first sighting and of an unchanged repeat, by the "removed" flag.
NOT_SEEN = {r: tuple(r if name == "removed" else 0.0 for name in SEEN_FEATURES) for r in (0.0, 1.0)}
SEEN_UNCHANGED = {
    r: tuple(r if name == "removed" else float(name == "family_seen") for name in SEEN_FEATURES) for r in (0.0, 1.0)
}
# The four kind flags, by kind (KIND_ENDPOINT, KIND_DOC, KIND_GUIDE, KIND_OTHER).
KIND_FLAGS = tuple(tuple(1.0 if k == kind else 0.0 for k in range(KIND_OTHER + 1)) for kind in range(KIND_OTHER + 1))
# A slot row's kind flags (endpoint, doc, guide: "other" has none), by kind.
SLOT_KIND_FLAGS = tuple(flags[:KIND_OTHER] for flags in KIND_FLAGS)


def seen_features(tab: StreamTable, contracts: list[tuple[Any, ...] | None]) -> list[tuple[float, ...]]:
    """The SEEN_FEATURES of every step: comparisons with the last shown step of its family
    (``returns_to_earlier``: with the contracts its family showed before that one)."""
    contents, versions = tab.contents, tab.versions
    params, required, deprecated, removed = tab.params, tab.required, tab.deprecated, tab.removed
    families = tab.families
    earlier: dict[int, set[tuple[Any, ...]]] = {}  # family -> contracts shown before its last step
    seen = []
    for t, previous in enumerate(tab.previous_shown):
        gone = removed[t]
        if previous < 0:
            seen.append(NOT_SEEN[gone])
            continue
        now, before = contracts[t], contracts[previous]
        shown_before = earlier.setdefault(families[t], set())
        if before is not None:
            shown_before.add(before)
        if contents[t] > 0 and contents[previous] > 0:  # plain JSON: compare the texts' ids
            if contents[t] == contents[previous]:  # the same text, so the same version and contract
                seen.append(SEEN_UNCHANGED[gone])
                continue
            changed = True
        else:
            changed = tab.observation(t) != tab.observation(previous)
        cmp = compare_versions(versions[t], versions[previous])
        dep_t, dep_p, gone_p = deprecated[t], deprecated[previous], removed[previous]
        seen.append(
            (
                1.0,
                float(changed),
                1.0 if cmp == 1 else 0.0,
                1.0 if cmp == -1 else 0.0,
                _added(params[t], params[previous]),
                _added(params[previous], params[t]),
                _added(required[t], required[previous]),
                _added(required[previous], required[t]),
                1.0 if dep_t > dep_p else 0.0,
                1.0 if dep_p > dep_t else 0.0,
                gone,
                1.0 if gone > gone_p else 0.0,
                1.0 if gone_p > gone else 0.0,
                1.0 if now is not None and now != before and now in shown_before else 0.0,
            )
        )
    return seen


def compare(tab: StreamTable, t: int, ref: int) -> tuple[float, ...]:
    """The step features comparing step ``t`` with the stored item ``ref`` of its family,
    from identical to fields_changed."""
    identical = tab.contents[t] == tab.contents[ref]
    cmp = 0 if identical else compare_versions(tab.versions[t], tab.versions[ref])
    pa, pr = tab.params[t], tab.params[ref]
    ra, rr = tab.required[t], tab.required[ref]
    dep_t, dep_r = tab.deprecated[t], tab.deprecated[ref]
    return (
        1.0 if identical else 0.0,
        1.0 if cmp == 1 else 0.0,
        1.0 if cmp == -1 else 0.0,
        0.0 if identical or cmp == 0 else 1.0,
        _added(pa, pr),
        _added(pr, pa),
        _added(ra, rr),
        _added(rr, ra),
        dep_t,
        1.0 if dep_t > dep_r else 0.0,
        1.0 if dep_r > dep_t else 0.0,
        0.0 if identical else _fields_changed(tab.observation(t), tab.observation(ref)),
    )


def reverted(tab: StreamTable, contracts: list[tuple[Any, ...] | None], s: int, t: int) -> bool:
    """True if step ``t`` shows the contract its family had before stored item ``s`` was
    shown (for an item that was its family's first sighting: ``s`` showed the endpoint
    removed and ``t`` does not), and ``s`` itself showed another contract."""
    now = contracts[t]
    if now is None or contracts[s] == now:
        return False
    before = tab.previous_shown[s]
    if before >= 0:
        return contracts[before] == now
    return tab.removed[s] > tab.removed[t]


def no_reference(deprecated: float) -> tuple[float, ...]:
    """The 14 features comparing the current step with memory, and the 4 after them, when
    memory holds nothing of its family: all 0 but "deprecated"."""
    return (0.0,) * 10 + (deprecated,) + (0.0,) * 7


def _added(a: int | None, b: int | None) -> float:
    """|a - b| / |a| for two bit-mask sets (0 when either is missing or a is empty)."""
    if a is None or b is None or not a:
        return 0.0
    return (a & ~b).bit_count() / a.bit_count()


def _fields_changed(current: Any, reference: Any) -> float:
    if not isinstance(current, dict) or not isinstance(reference, dict) or not current:
        return 1.0 if current != reference else 0.0
    missing = object()
    changed = sum(1 for k, v in current.items() if reference.get(k, missing) != v)
    return changed / len(current)
