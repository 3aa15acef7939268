"""The paper change model's rules, as one loop over arrays: which endpoint each step shows,
whether it drifts, how its parameter list and deprecated flag change, and what each step is worth.

``play`` takes an episode's draws (``paper.paper_draws``) and its ``Dynamics`` and gives the
episode's ``Structure``: per step its kind (an endpoint snapshot, a documentation section or a
migration guide), the snapshot it shows, its utility and whether it is critical or breaking; per
snapshot its endpoint, version, deprecated flag and parameter numbers (``k`` of ``"p<i>_<k>"``).
Everything else an episode has — its text, the observation dicts — is rendered from these by
``paper._paper_steps``.

The loop is plain Python over NumPy arrays in the subset numba compiles: the generator runs it
as it is, and the vector env's compiled core compiles this same function
(``envs.fast.paper_episodes``), so the rules are written once.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, get_type_hints

import numpy as np

from .utility_scale import UTILITY_BURST_DRIFT, UTILITY_DRIFT, UTILITY_ORDINARY, UTILITY_REPEAT

# A step's kind.
SNAPSHOT, DOC, GUIDE = 0, 1, 2


class Dynamics(NamedTuple):
    """The settings ``play`` reads (``GeneratorConfig``'s fields of the same names)."""

    bursts: bool
    burst_interval: int
    burst_len: int
    redundancy: bool
    redundancy_prob: float
    drift_prob: float
    burst_drift_prob: float
    remove_param_prob: float
    deprecate_prob: float
    doc_prob: float
    doc_utility: float
    migration_guides: bool


def dynamics(config: Any) -> Dynamics:
    """The ``Dynamics`` of a ``GeneratorConfig``."""
    return typed_settings(Dynamics, config)


def typed_settings(settings: Any, config: Any) -> Any:
    """``settings`` (a NamedTuple class) of ``config``'s fields of the same names, each of its own
    type (a config takes an int for a probability; compiled code would be compiled again for it)."""
    return settings(*(kind(getattr(config, name)) for name, kind in _field_types(settings)))


@functools.cache
def _field_types(settings: Any) -> tuple[tuple[str, type], ...]:
    return tuple(get_type_hints(settings).items())


class Structure(NamedTuple):
    """An episode of the paper's change model without its text (see the module docstring).

    Per step: ``kind``; ``content_of``, the snapshot shown (on a guide step, the snapshot whose
    deprecation it follows; -1 on a documentation step); ``utility``; ``critical`` (it drifted);
    ``breaking`` (its drift removed a parameter or newly deprecated the endpoint). Per snapshot,
    numbered as first shown: ``endpoint``, ``version``, ``deprecated``, and its parameter numbers
    ``param_numbers[param_start[c]:param_start[c + 1]]`` in list order (always ascending: a new
    number is appended and a removal keeps the order)."""

    kind: np.ndarray
    content_of: np.ndarray
    utility: np.ndarray
    critical: np.ndarray
    breaking: np.ndarray
    endpoint: np.ndarray
    version: np.ndarray
    deprecated: np.ndarray
    param_start: np.ndarray
    param_numbers: np.ndarray


def play(n_params: np.ndarray, uniforms: np.ndarray, endpoints: np.ndarray, d: Dynamics) -> Structure:
    """The ``Structure`` of the episode drawn as ``n_params``, ``uniforms`` and ``endpoints``."""
    T = endpoints.shape[0]
    pool = n_params.shape[0]
    # What each step's own draws decide, for all steps at once (the loop below runs as Python
    # in the generator, where each array read costs).
    in_burst = np.logical_and(np.arange(T) % d.burst_interval < d.burst_len, d.bursts)
    drifts = uniforms[1] < np.where(in_burst, d.burst_drift_prob, d.drift_prob)
    docs = uniforms[5] < d.doc_prob
    repeats = np.logical_and(uniforms[0] < d.redundancy_prob, d.redundancy)
    versions = np.ones(pool, dtype=np.int64)
    deprecated = np.zeros(pool, dtype=np.bool_)
    next_param = n_params.astype(np.int64)
    snapshot = np.full(pool, -1, dtype=np.int64)  # each endpoint's latest snapshot
    kind = np.zeros(T, dtype=np.int8)
    content_of = np.full(T, -1, dtype=np.int64)
    critical = np.zeros(T, dtype=np.bool_)
    breaking = np.zeros(T, dtype=np.bool_)
    c_endpoint = np.empty(T, dtype=np.int64)
    c_version = np.empty(T, dtype=np.int64)
    c_deprecated = np.empty(T, dtype=np.bool_)
    param_start = np.zeros(T + 1, dtype=np.int64)
    param_numbers = np.empty(max(16, 2 * int(n_params.sum())), dtype=np.int64)
    utility = np.empty(T, dtype=np.float64)
    n_contents, position, prev_endpoint, prev_content, guide_for = 0, 0, -1, -1, -1
    for t in range(T):
        if guide_for >= 0:  # the step after a drift that deprecated the endpoint
            kind[t], content_of[t], utility[t], guide_for = GUIDE, guide_for, utility[t - 1], -1
            prev_content = -1
            continue
        if docs[t]:
            kind[t], utility[t] = DOC, d.doc_utility
            prev_content = -1
            continue
        i = prev_endpoint if repeats[t] and prev_endpoint >= 0 else endpoints[t]
        drift = drifts[t]
        content = snapshot[i]
        if content < 0 or drift:
            # A new snapshot: the endpoint's list so far (its latest snapshot's, or its starting
            # parameters), changed by the drift. Copied element by element: numba takes seconds
            # longer to compile slice assignments, and the lists are short.
            n = n_params[i] if content < 0 else param_start[content + 1] - param_start[content]
            if position + n + 1 > param_numbers.shape[0]:
                grown = np.empty(2 * (position + n + 1), dtype=np.int64)
                for k in range(position):
                    grown[k] = param_numbers[k]
                param_numbers = grown
            if content < 0:
                for k in range(n):
                    param_numbers[position + k] = k
            else:
                start = param_start[content]
                for k in range(n):
                    param_numbers[position + k] = param_numbers[start + k]
            if drift:
                versions[i] += 1
                removed = uniforms[2, t] < d.remove_param_prob and n > 1
                if removed:
                    j = int(uniforms[3, t] * n)
                    for k in range(position + j, position + n - 1):
                        param_numbers[k] = param_numbers[k + 1]
                    n -= 1
                else:
                    param_numbers[position + n] = next_param[i]
                    next_param[i] += 1
                    n += 1
                newly_deprecated = uniforms[4, t] < d.deprecate_prob and not deprecated[i]
                deprecated[i] = uniforms[4, t] < d.deprecate_prob
                critical[t] = True
                breaking[t] = removed or newly_deprecated
                if d.migration_guides and newly_deprecated:
                    guide_for = n_contents
            content = snapshot[i] = n_contents
            c_endpoint[content], c_version[content], c_deprecated[content] = i, versions[i], deprecated[i]
            position += n
            n_contents += 1
            param_start[n_contents] = position
        if drift:
            utility[t] = UTILITY_BURST_DRIFT if in_burst[t] else UTILITY_DRIFT
        else:
            # Two snapshots are equal exactly when they are one: each has its endpoint and version in its "api".
            utility[t] = UTILITY_REPEAT if content == prev_content else UTILITY_ORDINARY
        content_of[t] = content
        prev_endpoint, prev_content = i, content
    return Structure(kind, content_of, utility, critical, breaking, c_endpoint[:n_contents],
                     c_version[:n_contents], c_deprecated[:n_contents], param_start[:n_contents + 1],
                     param_numbers[:position])
