"""The paper model's episodes with documentation sections or migration guides, compiled from their draws.

``paper_episodes`` plays the paper model's episodes without text. With documentation sections
(``doc_prob``) or migration guides (``migration_guides``) an episode also shows
``{"content": <text>, "last_updated": <date>, "section": "endpoint_<i>/<topic>"}`` and, the step
after a change deprecates an endpoint, ``{"deadline": <date>, "new_api": <api>, "notes": <text>,
"old_api": <api>}``. ``_play`` replays ``paper._paper_steps`` on the structure's draws
(``numpy_streams.structure_draws``) and the text stream's (drawn as ``contract_replay`` draws
the contract model's), and writes what each step shows in ``contract_replay``'s columns;
``contract_episodes.compile_played`` turns them into the compiled core's arrays, snapshots
without a "required" list. A parameter's id is its endpoint times a stride plus its number (its
name is ``p<i>_<number>``), so an endpoint's list, in the order the generator keeps it, is
ascending. ``tests/envs/test_paper_text_episodes.py`` compares every array with the made episode's.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...episodes.generators import paper
from ...episodes.generators.utility_scale import UTILITY_BURST_DRIFT, UTILITY_DRIFT, UTILITY_ORDINARY, UTILITY_REPEAT
from ...episodes.sources import EpisodeRecipe
from ..observation.stream_table import KIND_DOC, KIND_ENDPOINT, KIND_GUIDE
from .contract_episodes import MAX_CELLS, MAX_LENGTH, MAX_POOL, compile_played
from .contract_replay import (
    C_DAY,
    C_DEPRECATED,
    C_ENDPOINT,
    C_KIND,
    C_TEXT,
    C_TEXT_LENGTH,
    C_TOPIC,
    C_VERSION,
    N_COLUMNS,
    VOCABULARY,
    WORD_STARTS,
    filler_text,
    grown,
    text_stream,
    wider,
)
from .numpy_streams import integers_fill, structure_draws
from .paper_episodes import digits

_TOPIC_LENGTHS = np.array([len(topic) for topic in paper._DOC_TOPICS], dtype=np.int64)


def paper_text_compilable(recipe: object) -> bool:
    """Whether ``compile_paper_text`` plays this episode: a generated one of the paper change model
    with sections or guides, its sizes within what the compiled ids and ISO dates hold."""
    c = recipe.config if isinstance(recipe, EpisodeRecipe) else None
    return (c is not None and c.change_model == "paper" and (c.doc_prob > 0 or c.migration_guides)
            and c.length <= MAX_LENGTH and c.api_pool <= MAX_POOL
            and c.api_pool * (c.max_params + c.length + 1) <= MAX_CELLS)


def compile_paper_text(recipe: EpisodeRecipe, track: str, reward_fn, budget: int):
    """``contract_episodes.compile_contract``'s result for the recipe's episode (None: its text
    stream is NumPy's to draw, or its arrays are too large for int32)."""
    c = recipe.config
    texts = text_stream(c, recipe.seed, recipe.index, True)
    if texts is None:
        return None
    n_params, uniforms, endpoints = structure_draws(c, recipe.seed, recipe.index)
    settings = (bool(c.bursts), int(c.burst_interval), int(c.burst_len), bool(c.redundancy),
                float(c.redundancy_prob), float(c.drift_prob), float(c.burst_drift_prob),
                float(c.remove_param_prob), float(c.deprecate_prob), float(c.doc_prob), int(c.doc_min_bytes),
                int(c.doc_max_bytes), bool(c.migration_guides), int(c.guide_min_bytes), int(c.guide_max_bytes),
                float(c.doc_utility))
    played = _play(n_params.astype(np.int64), uniforms, endpoints.astype(np.int64), settings, texts, VOCABULARY,
                   WORD_STARTS)
    return compile_played(recipe, track, reward_fn, budget, played, False, _TOPIC_LENGTHS)


@njit(cache=True)
def _play(n_params, uniforms, endpoints, settings, text_stream, vocabulary, starts):
    """``paper._paper_steps`` on its draws: ``contract_episodes._compile``'s first arguments (per
    step its content, numbered as first shown, utility and whether it is critical; per content
    its columns, its parameter ids and their names' lengths, no required lists; the texts)."""
    (bursts, burst_interval, burst_len, redundancy, redundancy_prob, drift_prob, burst_drift_prob, remove_param_prob,
     deprecate_prob, doc_prob, doc_min, doc_max, guides, guide_min, guide_max, doc_utility) = settings
    T = endpoints.shape[0]
    pool = n_params.shape[0]
    stride = n_params.max() + T + 1  # numbers reach n_params + T at most
    params = np.empty((pool, n_params.max() + 8), dtype=np.int64)  # each endpoint's numbers, in list order
    plen = np.empty(pool, dtype=np.int64)
    for i in range(pool):
        plen[i] = n_params[i]
        for k in range(n_params[i]):
            params[i, k] = k
    next_param = plen.copy()
    version = np.ones(pool, dtype=np.int64)
    deprecated = np.zeros(pool, dtype=np.bool_)
    snapshot = np.full(pool, -1, dtype=np.int64)
    contents = np.zeros((T, N_COLUMNS), dtype=np.int64)
    p_start = np.zeros(T + 1, dtype=np.int64)
    p_flat = np.empty(max(16, 2 * int(n_params.sum())), dtype=np.int64)
    p_lengths = np.empty(p_flat.shape[0], dtype=np.int64)
    text = np.empty(1024, dtype=np.uint8)
    text_used = 0
    content_of = np.empty(T, dtype=np.int64)
    utility = np.empty(T, dtype=np.float64)
    critical = np.zeros(T, dtype=np.bool_)
    size = np.empty(1, dtype=np.int64)
    topic = np.empty(1, dtype=np.int64)
    n_contents, prev_endpoint, prev_content = 0, -1, -1
    # A guide made at a deprecation, shown the next step: endpoint, version after the change,
    # the change's step and value, and its text's start and length (-1: none pending).
    pending, pending_version, pending_t, pending_value, pending_text, pending_length = -1, 0, 0, 0.0, 0, 0
    for t in range(T):
        in_burst = bursts and (t % burst_interval) < burst_len
        if pending >= 0:
            content = n_contents
            n_contents += 1
            row = contents[content]
            row[C_KIND], row[C_ENDPOINT], row[C_VERSION] = KIND_GUIDE, pending, pending_version + 1
            row[C_DAY], row[C_TEXT], row[C_TEXT_LENGTH] = pending_t + 90, pending_text, pending_length
            p_start[n_contents] = p_start[content]  # it lists no parameters
            utility[t] = pending_value
            pending = -1
        elif doc_prob > 0 and uniforms[5, t] < doc_prob:
            i = endpoints[t]
            integers_fill(text_stream, doc_min, doc_max + 1, size)
            integers_fill(text_stream, 0, _TOPIC_LENGTHS.shape[0], topic)
            content = n_contents
            n_contents += 1
            row = contents[content]
            row[C_KIND], row[C_ENDPOINT], row[C_DAY], row[C_TOPIC] = KIND_DOC, i, t, topic[0]
            row[C_TEXT], row[C_TEXT_LENGTH] = text_used, size[0]
            text = filler_text(text_stream, size[0], vocabulary, starts, text, text_used)
            text_used += size[0]
            p_start[n_contents] = p_start[content]
            utility[t] = doc_utility
        else:
            if redundancy and prev_endpoint >= 0 and uniforms[0, t] < redundancy_prob:
                i = prev_endpoint
            else:
                i = endpoints[t]
            drift = uniforms[1, t] < (burst_drift_prob if in_burst else drift_prob)
            newly_deprecated = False
            if drift:
                version[i] += 1
                n = plen[i]
                if uniforms[2, t] < remove_param_prob and n > 1:
                    for j in range(int(uniforms[3, t] * n), n - 1):
                        params[i, j] = params[i, j + 1]
                    plen[i] = n - 1
                else:
                    if n == params.shape[1]:
                        params = wider(params)
                    params[i, n] = next_param[i]
                    next_param[i] += 1
                    plen[i] = n + 1
                newly_deprecated = uniforms[4, t] < deprecate_prob and not deprecated[i]
                deprecated[i] = uniforms[4, t] < deprecate_prob
                critical[t] = True
            content = snapshot[i]
            if content < 0 or drift:  # a new snapshot of endpoint i
                content = snapshot[i] = n_contents
                n_contents += 1
                row = contents[content]
                row[C_KIND], row[C_ENDPOINT], row[C_VERSION] = KIND_ENDPOINT, i, version[i]
                row[C_DEPRECATED] = deprecated[i]
                at, n = p_start[content], plen[i]
                p_flat = grown(p_flat, at + n)
                p_lengths = grown(p_lengths, at + n)
                i_digits = digits(i)
                for j in range(n):
                    p_flat[at + j] = i * stride + params[i, j]
                    p_lengths[at + j] = 2 + i_digits + digits(params[i, j])
                p_start[n_contents] = at + n
            if drift:
                utility[t] = UTILITY_BURST_DRIFT if in_burst else UTILITY_DRIFT
                if guides and newly_deprecated:
                    integers_fill(text_stream, guide_min, guide_max + 1, size)
                    pending, pending_version, pending_t, pending_value = i, version[i], t, utility[t]
                    pending_text, pending_length = text_used, size[0]
                    text = filler_text(text_stream, size[0], vocabulary, starts, text, text_used)
                    text_used += size[0]
            else:
                utility[t] = UTILITY_REPEAT if content == prev_content else UTILITY_ORDINARY
            prev_endpoint = i
        content_of[t] = content
        prev_content = content
    none = np.zeros(0, dtype=np.int64)
    return (content_of, utility, critical, contents[:n_contents], p_start[:n_contents + 1],
            p_flat[:p_start[n_contents]], p_lengths[:p_start[n_contents]], np.zeros(n_contents + 1, dtype=np.int64),
            none, none, text[:text_used])
