"""Drawn episodes started and ended a step's worth at a time (``envs.fast.drawn_batches``): the
vector env must step as the single envs whichever path an episode takes (together, one by one,
or left to one by one by the batch), and take the batched path where it applies."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest
from test_vector_env import play_both

from wpb_gym.envs.fast import drawn_batches, paper_episodes
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.vector import WritePolicyBenchVectorEnv
from wpb_gym.episodes.generators.paper import PAPER_REGIMES


@pytest.fixture
def batches(monkeypatch) -> dict[str, list[list[int]]]:
    """The sub-envs of each ``start_drawn`` and ``end_drawn`` call, as the core makes them."""
    calls: dict[str, list[list[int]]] = {"start": [], "end": []}
    for name, key in (("start_drawn", "start"), ("end_drawn", "end")):
        function = getattr(drawn_batches, name)

        def recorded(indices, *args, _function=function, _key=key):
            calls[_key].append(indices.tolist())
            return _function(indices, *args)

        monkeypatch.setattr(drawn_batches, name, recorded)
    return calls


@pytest.mark.parametrize("regime", PAPER_REGIMES)
@pytest.mark.parametrize("reward", [{"f1": 1.0}, {"f1": 0.5, "utility": 0.5}])
def test_episodes_that_start_and_end_in_one_step_are_compiled_and_scored_together(regime, reward, batches):
    # No EXPIREs or refused actions (which do not advance time): the six episodes start and end
    # at the same steps.
    ended = play_both(6, 92, seed=9, expire_share=0.0, invalid_share=0.0, regime=regime, length=30, api_pool=4,
                      reward=reward, dense_reward=False, budget_bytes=1_500)
    assert ended == 18
    # The first reset calls twice: its segments are empty (``arenas``), so they are made and filled.
    assert batches["start"][:2] == [list(range(6))] * 2
    # Each restart: one call for the six, and one more for those whose arrays outgrew their segments.
    restarts = batches["start"][2:]
    assert [call for call in restarts if len(call) == 6] == [list(range(6))] * 2 and len(restarts) <= 4
    assert batches["end"] == [list(range(6))] * 3


@pytest.mark.parametrize("observation_mode", ["box", "dict"])
def test_dense_rewards_that_need_no_oracle_at_the_start_are_batched(observation_mode, batches):
    assert play_both(4, 70, seed=3, length=20, observation_mode=observation_mode, dense_reward=True,
                     reward={"f1": 1.0}) >= 8
    assert batches["start"] and batches["end"]


@pytest.mark.parametrize(("settings", "why"), [
    ({"track": "privileged"}, "priorities are drawn by NumPy"),
    ({"dense_reward": True, "reward": {"f1": 0.5, "neg_regret": 0.5}}, "the reward computes U*(B) at the start"),
])
def test_episodes_the_batch_leaves_are_started_one_by_one(settings, why, batches):
    assert play_both(3, 90, seed=4, length=20, **settings) >= 6, why
    assert batches["start"] == [], why
    assert len(batches["end"]) >= 3, "every drawn episode is scored on its arrays"


def test_episodes_of_different_configs_started_in_one_reset_are_batched_by_config(batches):
    """Sub-envs whose chosen episodes come from two generator configs: one call per config, and
    each sub-env observes what a single env reset to its episode observes."""
    vector = WritePolicyBenchVectorEnv(4, length=25, api_pool=5)
    vector.reset(seed=0)
    singles = [WritePolicyBenchEnv(length=25, api_pool=5) for _ in range(4)]
    options = [None, {"regime": "burst_redundancy"}, None, {"regime": "burst_redundancy", "length": 40}]
    for i, env in enumerate(vector.single_envs):
        vector.core.pending[i] = env.choose_episode(100 + i, options[i], recipe=True)
    batches["start"].clear()
    vector.core.start(range(4), vector.single_envs)
    # (A second call for a config starts those whose arrays outgrew their segments.)
    assert sorted({tuple(call) for call in batches["start"]}) == [(0, 2), (1,), (3,)]
    for i, single in enumerate(singles):
        obs, info = single.reset(seed=100 + i, options=options[i])
        assert np.array_equal(vector.core.observations[i], obs)
        assert np.array_equal(vector.core.masks[i], info["action_mask"])


def test_an_episode_the_batch_cannot_start_is_started_one_by_one(monkeypatch, batches):
    """``start_drawn`` leaves an episode whose arrays would not fit int32 (here: pretended for
    sub-env 1) to the one-by-one path, which plays it as the single env does."""
    batched, one_by_one = drawn_batches.start_drawn, paper_episodes.compile_drawn
    compiled = []

    def leaves_the_second(indices, *args):
        outcome, need = batched(indices, *args)
        if 1 in indices:
            outcome[indices.tolist().index(1)] = 0
        return outcome, need

    monkeypatch.setattr(drawn_batches, "start_drawn", leaves_the_second)
    monkeypatch.setattr(paper_episodes, "compile_drawn", lambda *args: compiled.append(args) or one_by_one(*args))
    assert play_both(3, 50, seed=6, expire_share=0.0, invalid_share=0.0, length=15) == 9
    assert len(compiled) == 4, "sub-env 1's four episodes (the fourth started by the last step)"
    assert [call for call in batches["start"] if len(call) == 3] == [[0, 1, 2]] * 4


@pytest.mark.parametrize("track", ["privileged", "unprivileged"])
def test_a_failure_to_grow_the_arenas_leaves_that_sub_env_to_reset_and_starts_the_others(track, monkeypatch):
    """Placing an episode's arrays may need a larger buffer, the largest allocation a reset
    makes. If it fails, that sub-env is left holding no arrays and reset by the next step, the
    others start (one by one when a batch's placement failed), and the error is raised."""
    from wpb_gym.envs.fast.arenas import Arenas

    vector = WritePolicyBenchVectorEnv(3, length=20, track=track)
    vector.reset(seed=0)
    for _ in range(5):
        vector.step(np.ones(3, dtype=int))
    compact, calls = Arenas._compact, []

    def fails_once(self, kind, room):
        calls.append(kind)
        if len(calls) == 1:
            raise MemoryError("no room to grow the arena")
        return compact(self, kind, room)

    monkeypatch.setattr(Arenas, "_compact", fails_once)
    options = {"length": 3000}  # arrays larger than any buffer holds yet
    with pytest.raises(MemoryError) if track == "privileged" else nullcontext():
        vector.reset(seed=5, options=options)
    core = vector.core
    failed = [0] if track == "privileged" else []  # the batch's failure is retried one by one
    assert core.unstarted == failed and core.compiled.tolist() == [i not in failed for i in range(3)]
    for i in range(3):
        if i not in failed:
            obs, _ = WritePolicyBenchEnv(length=20, track=track).reset(seed=5 + i, options=options)
            assert core.t()[i] == 0 and np.array_equal(core.observations[i], obs)
    _, _, _, _, info = vector.step(np.ones(3, dtype=int))
    assert core.compiled.all() and info["t"].tolist() == [0 if i in failed else 1 for i in range(3)]


def test_draws_that_fail_for_one_sub_env_leave_it_unstarted_and_start_the_others_together(monkeypatch, batches):
    """NumPy refusing one episode's draws (here: pretended for sub-env 1's) fails that sub-env's
    start alone: the others start in one batch, the error is raised, and the next step resets
    that sub-env."""
    from wpb_gym.envs.fast import core as core_module

    draws, asked = core_module.structure_draws, []

    def refuses_the_second(c, seed, index):
        # The second episode the reset asks for, by the core and again by the one-by-one path.
        if len(asked) < 2:
            asked.append((seed, index))
        if asked[1:] == [(seed, index)]:
            raise ValueError("NumPy refuses these draws")
        return draws(c, seed, index)

    vector = WritePolicyBenchVectorEnv(3, length=20)
    vector.reset(seed=0)
    batches["start"].clear()
    monkeypatch.setattr(core_module, "structure_draws", refuses_the_second)
    monkeypatch.setattr(paper_episodes, "structure_draws", refuses_the_second)
    with pytest.raises(ValueError, match="NumPy refuses"):
        vector.reset(seed=5)
    core = vector.core
    assert core.unstarted == [1] and core.compiled.tolist() == [True, False, True]
    assert batches["start"] and all(call == [0, 2] for call in batches["start"])  # again once their arenas grew
    for i in (0, 2):
        obs, _ = WritePolicyBenchEnv(length=20).reset(seed=5 + i)
        assert core.t()[i] == 0 and np.array_equal(core.observations[i], obs)
    _, _, _, _, info = vector.step(np.ones(3, dtype=int))
    assert core.compiled.all() and info["t"].tolist() == [1, 0, 1]
