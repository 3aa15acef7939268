"""WritePolicyBench-v0: registration, arguments, episode sources, layout, actions, rendering."""

from __future__ import annotations

import gzip
import re

import gymnasium as gym
import numpy as np
import pytest

import wpb_gym
from wpb_gym.core.types import Episode, MemoryAction, Step
from wpb_gym.envs import env as env_module
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.observation.features import (
    SLOT_CONTEXT_FEATURES,
    SLOT_FEATURES,
    STEP_FEATURES,
)
from wpb_gym.envs.observation.stream_table import compare_versions, endpoint_family
from wpb_gym.envs.registration import ENV_IDS
from wpb_gym.episodes.frozen import freeze_set
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.episodes.jsonl import write_jsonl


def _play(env, policy, seed=0, options=None):
    obs, info = env.reset(seed=seed, options=options)
    total, steps = 0.0, 0
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(env, info))
        total += reward
        steps += 1
        assert not truncated
        if terminated:
            return total, steps, info


def _write_when_possible(env, info):
    return 1 if info["action_mask"][1] else 0


# ---------------------------------------------------------------- registration and arguments
def test_registered_ids_cover_every_regime_and_both_tracks():
    assert "WritePolicyBench-v0" in gym.registry
    # The base ids name no regime: they generate the default one (and read any episode file).
    regimes = {kwargs.get("regime", "default") for kwargs in ENV_IDS.values()}
    assert regimes == set(wpb_gym.REGIMES)
    for env_id, kwargs in ENV_IDS.items():
        assert env_id in gym.registry
        env = gym.make(env_id)
        assert env.unwrapped.track == kwargs["track"]
        env.reset(seed=0)
        assert env.unwrapped.episode.regime == kwargs.get("regime", "default")
        assert len(env.unwrapped.episode) == kwargs.get("length", 200)
        assert env.unwrapped.budget_bytes == kwargs.get("budget_bytes", 10240)
        assert ("Privileged" in env_id) == (kwargs["track"] == "privileged")


def test_gym_make_overrides_every_argument():
    env = gym.make(
        "WritePolicyBench-v0",
        regime="redundancy",
        budget_bytes=2048,
        length=50,
        track="privileged",
        slots=3,
        slot_order="oldest",
        reward="utility",
        dense_reward=True,
        invalid_action_penalty=0.1,
        observation_mode="dict",
        max_expires_per_step=2,
        episode_seed=5,
        drift_prob=0.3,
    ).unwrapped
    env.reset(seed=1)
    assert env.episode.regime == "redundancy" and len(env.episode) == 50
    assert env.store.max_bytes == 2048 and env.K == 3 and env.action_space.n == 8
    assert env.observation_space["slots"].shape == (3 * len(env.slot_features),)
    assert env.sampler.source.config.drift_prob == 0.3 and env.sampler.source.seed == 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"track": "oracle"}, "unknown track"),
        ({"slots": 0}, "slots must be a positive int"),
        ({"slots": 99_999_999_999}, "slots must be at most 65536, got 99999999999"),
        ({"invalid_action_penalty": [1]}, "invalid_action_penalty must be a finite number, got [1]"),
        ({"invalid_action_penalty": float("nan")}, "invalid_action_penalty must be a finite number, got nan"),
        ({"invalid_action_penalty": 10**400}, "invalid_action_penalty must be a finite number"),
        ({"episodes": 2024}, "episodes must be a path to episode files or a non-empty list of Episode, got int 2024"),
        ({"episodes": [1, 2]}, "episodes must be a path to episode files or a non-empty list of Episode"),
        ({"budget_bytes": -1}, "budget_bytes must be a non-negative int"),
        ({"budget_bytes": "10 kilobytes"}, "budget_bytes: unknown unit 'kilobytes' in '10 kilobytes'; expected B, KB"),
        ({"budget_bytes": "1.0001KB"}, "budget_bytes: '1.0001KB' is not a whole number of bytes"),
        ({"reward": "accuracy"}, "unknown metric 'accuracy'"),
        ({"reward": "f1:x"}, "weight of 'f1' is not a number"),
        ({"observation_mode": "image"}, "observation_mode must be one of"),
        ({"slot_order": "newest"}, "slot_order must be one of"),
        ({"episode_order": "sorted"}, "episode_order must be one of"),
        ({"max_expires_per_step": -1}, "max_expires_per_step must be None or a non-negative int"),
        ({"render_mode": "human"}, "render_mode must be one of"),
        ({"regime": "chaos"}, "unknown regime 'chaos'"),
        ({"not_an_option": 1}, "unexpected keyword argument 'not_an_option'"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    # An unknown keyword is a TypeError, as Python reports one; a bad value a ValueError.
    error = TypeError if "unexpected keyword" in message else ValueError
    with pytest.raises(error, match=re.escape(message)):
        WritePolicyBenchEnv(**kwargs)


def test_generator_options_with_a_file_source_are_refused(tmp_path):
    path = tmp_path / "e.jsonl"
    write_jsonl(path, [generate_episode(make_config("default", length=10), 0, 0)])
    with pytest.raises(ValueError, match="generator options \\['drift_prob'\\] apply to generated episodes only"):
        WritePolicyBenchEnv(episodes=str(path), drift_prob=0.5)


def test_layout_sizes_match_the_docstring():
    unpriv = WritePolicyBenchEnv()
    priv = WritePolicyBenchEnv(track="privileged")
    assert unpriv.K == 2 and unpriv.observation_space.shape == (39 + 8 + 14 * 2,) == (75,)
    assert priv.observation_space.shape == (40 + 8 + 15 * 2,)
    assert WritePolicyBenchEnv(slots=8).observation_space.shape == (39 + 8 + 14 * 8,) == (159,)
    assert unpriv.step_features == STEP_FEATURES and "priority" not in unpriv.slot_features
    assert priv.step_features[-1] == "priority"
    assert priv.slot_features == (*SLOT_FEATURES, "priority", *SLOT_CONTEXT_FEATURES)
    assert unpriv.action_space == gym.spaces.Discrete(6)


# ---------------------------------------------------------------- episode sources
def _episodes(regime="default", n=3, length=12, seed=0):
    return [generate_episode(make_config(regime, length=length), seed, i) for i in range(n)]


def test_episode_list_source_cycles_in_order():
    episodes = _episodes(n=3)
    env = WritePolicyBenchEnv(episodes=episodes, episode_order="cycle")
    seen = []
    for i in range(5):
        env.reset(seed=0 if i == 0 else None)
        seen.append(env.episode_index)
        assert env.episode is episodes[env.episode_index]
    assert seen == [0, 1, 2, 0, 1]
    env.reset(seed=3)  # a seeded reset restarts the cycle
    assert env.episode_index == 0


def test_generated_cycle_matches_the_frozen_set(tmp_path):
    root = freeze_set(tmp_path / "set", ["burst_drift"], [15], episodes=3, seed=4).root
    frozen = wpb_gym.read_episodes(root)
    env = WritePolicyBenchEnv(regime="burst_drift", length=15, episode_seed=4, episode_order="cycle")
    for i in range(3):
        env.reset(seed=0 if i == 0 else None)
        assert env.episode.to_dict() == frozen[i].to_dict()


@pytest.mark.parametrize("layout", ["frozen", "jsonl", "gzip", "plain_dir"])
def test_file_sources(tmp_path, layout):
    episodes = _episodes("default", n=2) + _episodes("redundancy", n=2)
    if layout == "frozen":
        path = freeze_set(tmp_path / "set", ["default", "redundancy"], [12], episodes=2, seed=0).root
    elif layout == "jsonl":
        path = tmp_path / "e.jsonl"
        write_jsonl(path, episodes)
    elif layout == "gzip":
        path = tmp_path / "e.jsonl.gz"
        write_jsonl(path, episodes)
        assert gzip.open(path).read(1) == b"{"
    else:
        path = tmp_path / "dir"
        path.mkdir()
        write_jsonl(path / "a.jsonl", episodes[:2])
        write_jsonl(path / "b.jsonl", episodes[2:])
        (path / "MANIFEST.json").write_text('{"episodes": 2}')  # a foreign manifest is ignored
    env = WritePolicyBenchEnv(episodes=str(path), episode_order="cycle")
    regimes = []
    for i in range(4):
        _play(env, _write_when_possible, seed=0 if i == 0 else None)
        regimes.append(env.episode.regime)
    assert sorted(regimes) == ["default", "default", "redundancy", "redundancy"]
    only = WritePolicyBenchEnv(episodes=str(path), regime="redundancy")
    for seed in range(4):
        only.reset(seed=seed)
        assert only.episode.regime == "redundancy"
    env.reset(options={"regime": "default", "episode_index": 1})
    assert env.episode.regime == "default"


def test_file_source_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "missing"))):
        WritePolicyBenchEnv(episodes=str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="holds no episode files"):
        WritePolicyBenchEnv(episodes=str(empty))
    path = tmp_path / "e.jsonl"
    write_jsonl(path, _episodes(n=2))
    with pytest.raises(
        ValueError, match=r"no episode with regime='burst_drift'.*holds \(regime, length\) \[\('default', 12\)\]"
    ):
        WritePolicyBenchEnv(episodes=str(path), regime="burst_drift")
    env = WritePolicyBenchEnv(episodes=str(path))
    with pytest.raises(IndexError, match="episode index 5 out of range \\(it holds 2\\)"):
        env.reset(options={"episode_index": 5})


def test_reset_options_are_checked():
    env = WritePolicyBenchEnv(length=10)
    with pytest.raises(ValueError, match=r"reset options \['budget'\] are not known"):
        env.reset(options={"budget": 5})
    with pytest.raises(ValueError, match="options\\['episode_index'\\] must be a non-negative int"):
        env.reset(options={"episode_index": -1})
    with pytest.raises(ValueError, match="options\\['episode'\\] must be an Episode"):
        env.reset(options={"episode": {"steps": []}})
    with pytest.raises(ValueError, match="options\\['length'\\] must be a positive int, got 0"):
        env.reset(options={"length": 0})
    with pytest.raises(ValueError, match="unknown regime ''"):
        env.reset(options={"regime": ""})
    with pytest.raises(ValueError, match="length must be a positive int, got 0"):
        WritePolicyBenchEnv(length=0)
    with pytest.raises(ValueError, match="the episode has no steps"):
        env.reset(options={"episode": Episode(steps=[], labels={})})


def test_options_change_one_episode_only():
    env = WritePolicyBenchEnv(length=10, budget_bytes=1000)
    env.reset(seed=0, options={"budget_bytes": 300, "length": 7, "regime": "burst_drift"})
    assert env.store.max_bytes == 300 and len(env.episode) == 7 and env.episode.regime == "burst_drift"
    env.reset()
    assert env.store.max_bytes == 1000 and len(env.episode) == 10 and env.episode.regime == "default"
    episode = _episodes(n=1, length=5)[0]
    env.reset(options={"episode": episode})
    assert env.episode is episode and env.episode_index is None


# ---------------------------------------------------------------- actions and episode end
def test_decode_and_encode_are_inverse():
    env = WritePolicyBenchEnv(length=30, slots=3, budget_bytes=100_000)
    env.reset(seed=0)
    for _ in range(5):
        env.step(1)
    assert env.slot_timesteps == (0, 1, 2) or set(env.slot_timesteps) <= set(range(5))
    for a in range(env.action_space.n):
        action = env.decode_action(a)
        if action.action == "SKIP" and a != 0:
            continue  # MERGE into an empty or invalid slot still decodes; SKIP only for empty slots
        assert env.encode_action(action) == a
    assert env.encode_action(MemoryAction("EXPIRE", target_t=99)) is None


def test_expire_does_not_advance_time_and_the_cap_applies():
    env = WritePolicyBenchEnv(length=30, slots=4, budget_bytes=100_000, max_expires_per_step=2)
    env.reset(seed=0)
    for _ in range(4):
        env.step(1)
    t = env.t
    expire0 = 2 + env.K
    _, _, _, _, info = env.step(expire0)
    assert info["accepted"] and env.t == t
    _, _, _, _, info = env.step(expire0)
    assert info["accepted"] and env.t == t and len(env.store) == 2
    assert not env.action_masks()[2 + env.K :].any()
    _, _, _, _, info = env.step(expire0)
    assert not info["accepted"] and info["reason"] == "expire_cap" and env.t == t + 1
    assert env.action_masks()[2 + env.K : 2 + env.K + 2].all()  # the cap is per timestep


def test_rejected_actions_report_their_reason_and_count_as_skip():
    env = WritePolicyBenchEnv(length=20, budget_bytes=60, invalid_action_penalty=0.5, slots=2)
    env.reset(seed=0)
    t = env.t
    _, reward, _, _, info = env.step(1)  # every step costs more than 60 bytes
    assert not info["accepted"] and info["reason"] == "over_budget" and reward == -0.5 and env.t == t + 1
    _, reward, _, _, info = env.step(2 + env.K)  # EXPIRE of an empty slot
    assert info["reason"] == "empty_slot" and reward == -0.5 and len(env.store) == 0


def test_step_after_the_end_raises_and_bad_actions_are_errors():
    env = WritePolicyBenchEnv(length=3)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action must be an int in \[0, 6\)"):
        env.step(6)
    with pytest.raises(ValueError, match="action must be an int"):
        env.step(1.5)
    for _ in range(3):
        _, _, terminated, truncated, info = env.step(np.int64(1))
    assert terminated and not truncated
    assert set(info["metrics"]) >= set(wpb_gym.METRIC_NAMES)
    assert all(info[name] == info["metrics"][name] for name in wpb_gym.METRIC_NAMES)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(0)


def test_terminal_reward_is_the_metric_and_zero_before():
    env = WritePolicyBenchEnv(length=40, dense_reward=False)
    env.reset(seed=3)
    rewards = []
    while True:
        _, r, terminated, _, info = env.step(1 if env.action_masks()[1] else 0)
        rewards.append(r)
        if terminated:
            break
    assert all(r == 0.0 for r in rewards[:-1])
    assert rewards[-1] == info["metrics"]["f1"]


# ---------------------------------------------------------------- helpers of the tables
def test_endpoint_family_strips_version_segments():
    assert endpoint_family("api.v3.endpoint_5") == endpoint_family("api.v12.endpoint_5") == "api..endpoint_5"
    assert endpoint_family("GET /v1/charges") == "GET //charges"
    assert endpoint_family("api.vault.endpoint") == "api.vault.endpoint"  # not a version
    assert endpoint_family(7) == 7


@pytest.mark.parametrize(
    ("current", "reference", "expected"),
    [(2, 1, 1), (1, 2, -1), (3, 3, 0), (1.5, 1, 1), ("2024-02-01", "2024-01-31", 1), ("a", 1, None), (True, 1, None)],
)
def test_compare_versions(current, reference, expected):
    assert compare_versions(current, reference) == expected


# ---------------------------------------------------------------- rendering
def test_ansi_render_shows_budget_step_and_memory():
    env = WritePolicyBenchEnv(length=20, render_mode="ansi", slots=3)
    env.reset(seed=0)
    env.step(1)
    env.step(1)
    text = env.render()
    assert "budget [" in text and "current: api." in text and "WRITE -> accepted" in text
    assert re.search(r"^\s+[01]\s+0\s+2\s+WRITE", text, re.M)
    with pytest.warns(UserWarning, match="render\\(\\) called without render_mode"):
        assert WritePolicyBenchEnv(length=5).render() is None


def test_rgb_render_is_an_image():
    env = WritePolicyBenchEnv(length=60, render_mode="rgb_array", budget_bytes=2000)
    env.reset(seed=0)
    first = env.render()
    for _ in range(40):
        env.step(1 if env.action_masks()[1] else 2 + env.K)
    picture = env.render()
    assert picture.dtype == np.uint8 and picture.ndim == 3 and picture.shape[2] == 3
    assert picture.shape == first.shape and not np.array_equal(picture, first)


def test_env_module_never_imports_agents():
    source = open(env_module.__file__, encoding="utf-8").read()
    assert "agents" not in re.findall(r"^\s*(?:from|import)\s+(\w+)", source, re.M)


def test_hand_made_steps_without_api_work():
    steps = [Step(t, {"section": "intro", "content": "x" * (10 + t)}, {"mode": "docs"}) for t in range(4)]
    steps.append(Step(4, "plain text", {"mode": "docs"}))
    episode = Episode(steps=steps, labels={"critical_steps": [1], "utility_by_step": {1: 2.0}, "mode": "docs"})
    env = WritePolicyBenchEnv(episodes=[episode], budget_bytes=10_000)
    total, steps_taken, info = _play(env, _write_when_possible)
    assert steps_taken == 5 and info["metrics"]["recall"] == 1.0
    assert total == info["metrics"]["f1"] == pytest.approx(2 / 6)


@pytest.mark.parametrize("track", ["unprivileged", "privileged"])
def test_stream_table_costs_equal_the_write_formula_for_any_metadata(track):
    """The table memoises metadata lengths on string values; every other kind of value (numbers,
    unhashable lists, missing keys, non-dict metadata) is priced by the formula itself."""
    from wpb_gym.core.accounting import estimate_bytes
    from wpb_gym.core.tracks import policy_step
    from wpb_gym.envs.observation.stream_table import StreamTable

    metadata = [
        {"mode": "m"},
        {"mode": "m", "priority": 0.25},
        {"mode": 1},
        {"mode": True},
        {"mode": 1.0},
        {"mode": ["a", "b"]},
        {"priority": -0.0},
        {},
        {"mode": "m", "other": "hidden"},
        {"mode": "é\n"},
        {"mode": "m"},
    ]
    steps = [Step(t, {"api": "a", "v": t}, m) for t, m in enumerate(metadata)]
    table = StreamTable(Episode(steps=steps, labels={}), track)
    assert table.costs == [estimate_bytes(policy_step(s, track)) for s in steps]


@pytest.mark.parametrize("track", ["unprivileged", "privileged"])
@pytest.mark.parametrize("regime", ["default", "contract_mix"])
def test_stream_table_views_are_the_tracks_policy_steps(track, regime):
    """``StreamTable.step`` builds the track's view of a step itself when every step shows the
    same visible metadata (the views then share one metadata dict): each view must equal what
    ``policy_step`` returns and carry the same byte cost."""
    from wpb_gym.core.accounting import estimate_bytes, observation_json
    from wpb_gym.core.tracks import policy_step
    from wpb_gym.envs.observation.stream_table import StreamTable
    from wpb_gym.episodes.generators.paper import generate_episode, make_config

    episode = generate_episode(make_config(regime, length=100), 3, 1)
    table = StreamTable(episode, track)
    for t, raw in enumerate(episode.steps):
        expected = policy_step(raw, track)
        view = table.step(t)
        assert view == expected and view.t == t
        assert estimate_bytes(view) == table.costs[t] == estimate_bytes(expected)
        assert observation_json(view) == observation_json(expected)
        assert table.step(t) is view  # built once
    # Metadata with differing visible values goes through policy_step: still equal views.
    steps = [Step(t, {"api": "a", "v": t}, {"mode": f"m{t % 2}", "priority": 0.5}) for t in range(4)]
    mixed = StreamTable(Episode(steps=steps, labels={}), track)
    assert [mixed.step(t) for t in range(4)] == [policy_step(s, track) for s in steps]


@pytest.mark.parametrize("track", ["unprivileged", "privileged"])
def test_stream_table_reads_columns_and_steps_alike(track):
    """A generated episode is read from its columns (no steps made); the same episode with
    its steps made gives the same table."""
    from wpb_gym.envs.observation.stream_table import StreamTable
    from wpb_gym.episodes.generators.paper import generate_episode, make_config

    config = make_config("default", length=80, doc_prob=0.2, migration_guides=True)
    lazy, built = generate_episode(config, 1, 4), generate_episode(config, 1, 4)
    assert len(built.steps) == 80  # makes its steps
    a, b = StreamTable(lazy, track), StreamTable(built, track)
    assert "steps" not in lazy.__dict__
    for column in ("costs", "kinds", "families", "apis", "versions", "params", "required", "deprecated"):
        assert getattr(a, column) == getattr(b, column), column
    assert a.contents == b.contents and a.previous_shown == b.previous_shown and a.priorities == b.priorities
    assert [a.step(t) for t in range(80)] == [b.step(t) for t in range(80)]
    assert [a.observation(t) for t in range(80)] == [s.observation for s in built.steps]


def test_action_masks_before_reset_is_a_reset_needed_error():
    """Before the first reset there is no episode: Gymnasium's ResetNeeded (also a RuntimeError,
    like the env's other call-order errors), not an AttributeError."""
    from gymnasium.error import ResetNeeded

    env = WritePolicyBenchEnv(length=5)
    calls = {
        "action_masks()": env.action_masks,
        "step()": lambda: env.step(0),
        "env.store": lambda: env.store,
        "env.t": lambda: env.t,
        "env.current_step": lambda: env.current_step,
        "env.slot_timesteps": lambda: env.slot_timesteps,
        "env.episode": lambda: env.episode,
    }
    for what, call in calls.items():
        with pytest.raises(ResetNeeded, match=rf"call reset\(\) before .*{re.escape(what)}"):
            call()
        with pytest.raises(RuntimeError):
            call()
    wrapped = gym.make("WritePolicyBench-v0", length=5)
    with pytest.raises(ResetNeeded, match="action_masks"):
        wrapped.unwrapped.action_masks()
    env.reset(seed=0)
    assert env.action_masks()[0] and env.t == 0


def test_rendering_reads_only_public_state():
    import ast
    import inspect

    from wpb_gym.core.accounting import estimate_bytes
    from wpb_gym.envs import render

    tree = ast.parse(inspect.getsource(render))
    private = [
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and ast.unparse(node.value) != "self"
    ]
    assert private == [], private  # the viewer's own record aside, it reads the env's public state
    env = WritePolicyBenchEnv(render_mode="rgb_array", track="privileged")
    env.reset(seed=0)
    for action in (1, 0, 1, 2 + env.K, 0):  # WRITE, SKIP, WRITE, EXPIRE slot 0 (time stands), SKIP
        env.step(action)
    history, used = env.memory_history, env.bytes_history
    assert set(history) == {0, 2} and history[0][1] is False and used[-1] == env.store.bytes_used
    assert sum(expired is not None for expired, _ in history.values()) == 1
    history[0] = (None, True)  # a copy: the env's record is unchanged
    assert env.memory_history[0] != (None, True)
    kind, cost, priority = env.step_details(env.t)
    assert cost == estimate_bytes(env.current_step) and 0.0 <= priority <= 1.0
    plain = WritePolicyBenchEnv()  # no rgb_array rendering: nothing recorded
    assert plain.bytes_history == () and plain.memory_history == {}
    plain.reset(seed=0)
    plain.step(1)
    assert plain.bytes_history == () and plain.memory_history == {}


@pytest.mark.parametrize("env_id", ["WritePolicyBench-v0", "WritePolicyBench-QueriesEasy-v0"])
def test_budgets_take_units_as_everywhere_else(env_id):
    # As on the command line and in configs: 1KB = 1024 bytes, in the constructor and in reset's options.
    env = gym.make(f"wpb_gym:{env_id}", budget_bytes="10KB")
    assert env.unwrapped.budget_bytes == 10240
    env.reset(seed=0, options={"budget_bytes": "2KB"})
    assert env.unwrapped.store.budget.max_bytes == 2048
    with pytest.raises(ValueError, match=r"options\['budget_bytes'\]: unknown unit 'parsecs'"):
        env.reset(seed=0, options={"budget_bytes": "3 parsecs"})
    env.close()
