"""The query tier's reader and query accuracy, against a literal replay of an episode.

The replay keeps memory as a plain list of what was stored, applies each accepted action
to it by hand and reads every checkpoint with the reader's rule written out once more
(newest item of the endpoint; a delta read on its base; an orphan passed over). Random
policies (hypothesis) write, merge and expire whatever they like.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpb_gym.core.accounting import canonical_delta
from wpb_gym.core.queries import Query, QueryFormatError, answer_of, parse_queries, read_endpoint
from wpb_gym.core.store import ByteMemoryStore
from wpb_gym.core.types import Episode, MemoryAction, Step
from wpb_gym.episodes.generators.queries import generate_query_episode, query_config
from wpb_gym.scoring.queries import episode_queries, score_queries

SMALL = {"endpoints": 10, "families": 3, "length": 10 + 8 * 6, "checkpoint_interval": 6,
         "queries_per_checkpoint": 12, "summary_max_bytes": 600, "max_params": 8}


def _literal_answer(memory: list[dict], api: str, query: Query) -> bool:
    """The reader's rule, literally: memory is a list of {"t", "kind", "base", "obs"/"delta"}."""
    mine = sorted((m for m in memory if m["api"] == api), key=lambda m: m["t"], reverse=True)
    held = {m["t"]: m for m in memory}
    for m in mine:
        if m["kind"] == "WRITE":
            obs = m["obs"]
        elif m["base"] in held and held[m["base"]]["kind"] == "WRITE":
            obs = dict(held[m["base"]]["obs"])
            obs.update(m["delta"])
        else:
            continue  # an orphan: its base is gone
        got = answer_of(obs, query.fact, query.argument)
        return type(got) is type(query.answer) and got == query.answer
    return False


def _play_randomly(episode: Episode, budget: int, rng: random.Random) -> tuple[ByteMemoryStore, dict[int, int]]:
    """Random actions through the store; the literal replay's right answers per checkpoint."""
    store = ByteMemoryStore(budget)
    memory: list[dict] = []
    queries = episode_queries(episode)
    right: dict[int, int] = {}
    for step in episode.steps:
        t = step.t
        asked = [q for q in queries if q.t == t]
        if asked:
            right[t] = sum(_literal_answer(memory, q.api, q) for q in asked)
        for item in list(memory):
            if rng.random() < 0.15:
                if store.expire(item["t"], t).accepted:
                    memory.remove(item)
        obs = step.observation
        if "api" not in obs or rng.random() < 0.3:
            store.skip(t)
            continue
        bases = [m for m in memory if m["kind"] == "WRITE" and m["api"] == obs["api"]]
        if bases and rng.random() < 0.5:
            base = rng.choice(bases)
            if store.execute(MemoryAction.merge(step, base["t"]), t).accepted:
                memory.append({"t": t, "api": obs["api"], "kind": "MERGE", "base": base["t"],
                               "delta": canonical_delta(obs, base["obs"])})
        elif store.write(step, t).accepted:
            memory.append({"t": t, "api": obs["api"], "kind": "WRITE", "base": None, "obs": obs})
    return store, right


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), play=st.integers(0, 2**31 - 1), budget=st.sampled_from([600, 2000, 6000]))
def test_query_accuracy_is_what_a_literal_replay_of_memory_answers(seed, play, budget):
    episode = generate_query_episode(query_config("queries_easy", **SMALL), seed, 0)
    store, right = _play_randomly(episode, budget, random.Random(play))
    score = score_queries(episode, store)
    assert {t: correct for t, correct, _ in score.checkpoints} == right
    assert score.correct == sum(right.values())
    assert score.asked == len(episode.labels["queries"])
    assert score.accuracy == pytest.approx(score.correct / score.asked)


def test_held_at_is_memory_as_each_step_arrived():
    store = ByteMemoryStore(10_000)
    steps = [Step(t, {"api": f"e{t % 2}", "v": t}, {}) for t in range(6)]
    store.write(steps[0], 0)
    store.write(steps[1], 1)
    store.expire(0, 2)
    store.write(steps[2], 2)
    store.skip(3)
    store.expire(1, 4)
    assert [item.t for item in store.held_at(0)] == []
    assert [item.t for item in store.held_at(1)] == [0]
    assert [item.t for item in store.held_at(2)] == [0, 1]  # the expiry at 2 comes after 2 arrives
    assert [item.t for item in store.held_at(3)] == [1, 2]
    assert [item.t for item in store.held_at(4)] == [1, 2]
    assert [item.t for item in store.held_at(5)] == [2]
    assert [(item.t, left) for item, left in store.expired_items()] == [(0, 2), (1, 4)]


def _item_store():
    store = ByteMemoryStore(100_000)
    base = {"api": "a", "deprecated": False, "params": ["x", "y"], "removed": False, "required": [], "version": 1}
    later = {**base, "params": ["x"], "version": 2}
    other = {**base, "api": "b"}
    store.write(Step(0, base, {}), 0)
    store.write(Step(1, other, {}), 1)
    store.execute(MemoryAction.merge(Step(2, later, {}), 0), 2)
    return store, base, later


def test_the_reader_reads_the_newest_item_with_its_delta_on_its_base():
    store, base, later = _item_store()
    assert read_endpoint(store.items(), "a") == later  # the MERGE at t=2 on the WRITE at t=0
    assert read_endpoint(store.items(), "b")["api"] == "b"
    assert read_endpoint(store.items(), "c") is None  # nothing stored answers nothing
    assert read_endpoint(store.held_at(2), "a") == base


def test_an_orphan_delta_is_passed_over():
    store, base, later = _item_store()
    store.expire(0, 3)  # the base goes: its delta at t=2 cannot be read
    assert read_endpoint(store.items(), "a") is None
    store.write(Step(4, {**base, "version": 9}, {}), 4)
    store.write(Step(5, {**base, "api": "z"}, {}), 5)
    assert read_endpoint(store.items(), "a")["version"] == 9


def test_answers_must_match_in_type():
    episode = Episode(
        steps=[Step(0, {"api": "a", "deprecated": False, "params": ["p"], "removed": False, "required": [],
                        "version": 1}, {}),
               Step(1, {"checkpoint": 0, "queries": []}, {})],
        labels={"critical_steps": [], "utility_by_step": {0: 1, 1: 0},
                "queries": [[1, "a", "version", None, 1], [1, "a", "deprecated", None, False],
                            [1, "a", "has_param", "p", True], [1, "a", "required", "p", False],
                            [1, "a", "removed", None, False]]},
    )
    store = ByteMemoryStore(10_000)
    store.write(episode.steps[0], 0)
    assert score_queries(episode, store).correct == 5
    # A file that says the version is True is not answered by version 1.
    bad = Episode(steps=episode.steps, labels={**episode.labels, "queries": [[1, "a", "version", None, 1.0]]})
    with pytest.raises(QueryFormatError, match=r"labels.queries\[0\]: the answer to 'version' must be an int"):
        episode_queries(bad)


@pytest.mark.parametrize(
    ("queries", "field", "message"),
    [
        ({"t": 1}, "labels.queries", "expected a list"),
        ([[1, "a", "version", None]], "labels.queries[0]", r"expected \[t, api, fact, argument, answer\]"),
        ([[9, "a", "version", None, 1]], "labels.queries[0]", "t must be a step of the episode"),
        ([[1, "a", "version", None, 1], [0, "a", "version", None, 1]], "labels.queries[1]", "step order"),
        ([[1, 7, "version", None, 1]], "labels.queries[0]", "api must be a string"),
        ([[1, "a", "colour", None, 1]], "labels.queries[0]", "fact must be one of"),
        ([[1, "a", "has_param", None, True]], "labels.queries[0]", "must be a parameter name"),
        ([[1, "a", "version", "p", 1]], "labels.queries[0]", "must be null"),
        ([[1, "a", "deprecated", None, 0]], "labels.queries[0]", "must be a bool"),
    ],
)
def test_bad_queries_are_named(queries, field, message):
    with pytest.raises(QueryFormatError, match=message) as caught:
        parse_queries(queries, 2)
    assert caught.value.field == field


def test_a_bad_query_in_a_file_names_the_file_line_and_field(tmp_path):
    import json

    from wpb_gym.episodes.jsonl import EpisodeFormatError, dumps_episode, iter_jsonl

    episode = generate_query_episode(query_config("queries_easy", **SMALL), 0, 0)
    data = json.loads(dumps_episode(episode))
    data["labels"]["queries"][5][4] = "yes"
    path = tmp_path / "q.jsonl"
    path.write_text(dumps_episode(episode) + "\n" + json.dumps(data) + "\n")
    with pytest.raises(EpisodeFormatError, match=r"q.jsonl:2: labels.queries\[5\]: the answer to '\w+' must be"):
        list(iter_jsonl(path))


def test_a_query_at_a_step_that_is_not_a_checkpoint_is_named(tmp_path):
    import json

    from wpb_gym.episodes.jsonl import EpisodeFormatError, dumps_episode, iter_jsonl

    episode = generate_query_episode(query_config("queries_easy", **SMALL), 0, 0)
    data = json.loads(dumps_episode(episode))
    shown = next(t for t, step in enumerate(data["steps"]) if "api" in step["observation"] and t > 0)
    data["labels"]["queries"][0][0] = shown  # a change step, not a checkpoint
    data["labels"]["queries"].sort(key=lambda q: q[0])
    k = next(i for i, q in enumerate(data["labels"]["queries"]) if q[0] == shown)
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(data) + "\n")
    with pytest.raises(EpisodeFormatError, match=rf"q.jsonl:1: labels.queries\[{k}\]: t={shown} is not a checkpoint"):
        list(iter_jsonl(path))


def test_the_queried_state_is_the_latest_snapshots_of_the_endpoints_each_checkpoint_asks_about():
    from wpb_gym.core.tracks import track_costs
    from wpb_gym.scoring.queries import queried_state_bytes

    episode = generate_query_episode(query_config("queries_easy", **SMALL), 2, 0)
    observations, _ = episode.columns()
    costs = track_costs(episode, "unprivileged")
    per_checkpoint = []
    for t in episode.labels["checkpoint_steps"]:
        asked = {q[1] for q in episode.labels["queries"] if q[0] == t}
        latest = {obs["api"]: s for s, obs in enumerate(observations[:t]) if "api" in obs}
        per_checkpoint.append(sum(costs[latest[api]] for api in asked))
    assert queried_state_bytes(episode) == pytest.approx(sum(per_checkpoint) / len(per_checkpoint))
    from wpb_gym.episodes.generators.paper import generate_episode, make_config

    assert queried_state_bytes(generate_episode(make_config("default"), 0, 0)) == 0.0
