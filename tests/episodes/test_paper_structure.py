"""The paper change model's rules (``paper_structure.play``, which the generator runs as Python
and the vector env's core compiles) against a literal reference: the module docstring of
``paper.py`` played one step at a time on lists and dicts, every observation built as it is
shown and every text drawn when its step comes. Same draws in, the same observations,
utilities and labels out, over the generator's settings, sections and guides included."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from wpb_gym.episodes.generators import paper
from wpb_gym.episodes.generators.paper import PAPER_REGIMES, GeneratorConfig, make_config
from wpb_gym.episodes.generators.text import filler_text, stream_date
from wpb_gym.episodes.generators.utility_scale import (
    UTILITY_BURST_DRIFT,
    UTILITY_DRIFT,
    UTILITY_ORDINARY,
    UTILITY_REPEAT,
)

_DOC_TOPICS = ("overview", "authentication", "errors", "pagination", "rate-limits", "webhooks", "examples")


def literal_steps(c: GeneratorConfig, seed: int, index: int) -> tuple[list, list[float], dict]:
    """Observations, utilities and labels of episode ``index`` of ``(c, seed)``, step by step."""
    n_params, uniforms, endpoints = paper.structure_draws(c, seed, index)
    text_rng = np.random.default_rng(paper.episode_seed(c.regime, seed, index).spawn(3)[2])  # its text stream
    u_repeat, u_drift, u_kind, u_which, u_depr, u_doc = (row.tolist() for row in uniforms)
    versions = [1] * c.api_pool
    params = [[f"p{i}_{k}" for k in range(int(n_params[i]))] for i in range(c.api_pool)]
    next_param = [int(n) for n in n_params]
    deprecated = [False] * c.api_pool
    current: list[dict | None] = [None] * c.api_pool
    observations, utility = [], []
    critical, breaking, guides = [], [], []
    deprecations = 0
    previous, prev_endpoint, guide = None, None, None
    for t in range(c.length):
        in_burst = c.bursts and t % c.burst_interval < c.burst_len
        if guide is not None:
            obs, value = guide
            guide = None
            guides.append(t)
        elif u_doc[t] < c.doc_prob:
            size = int(text_rng.integers(c.doc_min_bytes, c.doc_max_bytes + 1))
            topic = _DOC_TOPICS[int(text_rng.integers(len(_DOC_TOPICS)))]
            obs = {"content": filler_text(text_rng, size), "last_updated": stream_date(t),
                   "section": f"endpoint_{int(endpoints[t])}/{topic}"}
            value = c.doc_utility
        else:
            repeat = c.redundancy and prev_endpoint is not None and u_repeat[t] < c.redundancy_prob
            i = prev_endpoint if repeat else int(endpoints[t])
            drift = u_drift[t] < (c.burst_drift_prob if in_burst else c.drift_prob)
            newly_deprecated = False
            if drift:
                versions[i] += 1
                removed = u_kind[t] < c.remove_param_prob and len(params[i]) > 1
                if removed:
                    del params[i][int(u_which[t] * len(params[i]))]
                else:
                    params[i].append(f"p{i}_{next_param[i]}")
                    next_param[i] += 1
                newly_deprecated = u_depr[t] < c.deprecate_prob and not deprecated[i]
                deprecated[i] = u_depr[t] < c.deprecate_prob
                critical.append(t)
                if removed or newly_deprecated:
                    breaking.append(t)
                if deprecated[i]:
                    deprecations += 1
            if current[i] is None or drift:
                current[i] = {"api": f"api.v{versions[i]}.endpoint_{i}", "deprecated": deprecated[i],
                              "params": list(params[i]), "version": versions[i]}
            obs = current[i]
            if drift:
                value = UTILITY_BURST_DRIFT if in_burst else UTILITY_DRIFT
                if c.migration_guides and newly_deprecated:
                    notes = filler_text(text_rng, int(text_rng.integers(c.guide_min_bytes, c.guide_max_bytes + 1)))
                    guide = ({"deadline": stream_date(t + 90), "new_api": f"api.v{versions[i] + 1}.endpoint_{i}",
                              "notes": notes, "old_api": obs["api"]}, value)
            else:
                value = UTILITY_REPEAT if obs == previous else UTILITY_ORDINARY
            prev_endpoint = i
        observations.append(obs)
        utility.append(float(value))
        previous = obs
    labels = {"breaking_changes": breaking, "critical_steps": critical, "deprecated_apis": deprecations,
              "total_drift_events": len(critical)}
    if c.migration_guides:
        labels["migration_guide_steps"] = guides
    return observations, utility, labels


@st.composite
def configs(draw) -> GeneratorConfig:
    low = draw(st.integers(1, 6))
    interval = draw(st.integers(1, 40))
    return make_config(
        draw(st.sampled_from(PAPER_REGIMES)),
        length=draw(st.integers(1, 250)),
        api_pool=draw(st.one_of(st.integers(1, 6), st.integers(7, 300))),
        min_params=low,
        max_params=draw(st.integers(low, 9)),
        drift_prob=draw(st.sampled_from([0.0, 0.08, 0.5, 1.0])),
        burst_drift_prob=draw(st.sampled_from([0.0, 0.6, 1.0])),
        burst_interval=interval,
        burst_len=draw(st.integers(0, interval)),
        redundancy_prob=draw(st.sampled_from([0.0, 0.7, 1.0])),
        remove_param_prob=draw(st.sampled_from([0.0, 0.5, 1.0])),
        deprecate_prob=draw(st.sampled_from([0.0, 0.3, 1.0])),
        doc_prob=draw(st.sampled_from([0.0, 0.2, 1.0])),
        doc_utility=draw(st.sampled_from([1.0, 2.5])),
        doc_min_bytes=1,
        doc_max_bytes=draw(st.integers(1, 300)),
        migration_guides=draw(st.booleans()),
        guide_min_bytes=1,
        guide_max_bytes=draw(st.integers(1, 300)),
    )


@settings(max_examples=250, deadline=None)
@given(c=configs(), seed=st.integers(0, 2**31 - 1), index=st.integers(0, 10**6))
# Every step drifts and deprecates: a guide after every snapshot, the last drift's guide past the end.
@example(c=make_config("default", length=7, api_pool=1, drift_prob=1.0, deprecate_prob=1.0, migration_guides=True),
         seed=0, index=0)
@example(c=make_config("burst_redundancy", length=60, doc_prob=0.5, migration_guides=True, deprecate_prob=1.0),
         seed=3, index=1)
def test_the_generator_plays_the_paper_models_rules_as_the_literal_reference(c, seed, index):
    episode = paper.generate_episode(c, seed, index)
    observations, utility, labels = literal_steps(c, seed, index)
    assert [step.observation for step in episode.steps] == observations
    assert episode.utilities.tolist() == utility
    assert {name: episode.labels[name] for name in labels} == labels
    # One object per endpoint state, as the literal path shares it between the steps showing it.
    shown = [step.observation for step in episode.steps]
    assert len({id(o) for o in shown}) == len({id(o) for o in observations})
