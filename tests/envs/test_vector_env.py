"""The native vector env against Gymnasium's SyncVectorEnv over single envs, output for output."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from hypothesis import given, settings
from hypothesis import strategies as st

import wpb_gym
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.registration import ENV_IDS
from wpb_gym.envs.vector import WritePolicyBenchVectorEnv
from wpb_gym.episodes.frozen import freeze_set
from wpb_gym.episodes.generators.paper import REGIMES
from wpb_gym.episodes.generators.queries import QUERY_REGIMES
from python_path import python_env


def same(a, b, path="") -> None:
    """Equal values (NaN equal to NaN), dtypes and shapes, through dicts and object arrays."""
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (path, sorted(set(a) ^ set(b)))
        for key in a:
            same(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), path
        assert (a.dtype, a.shape) == (b.dtype, b.shape), (path, a.dtype, b.dtype, a.shape, b.shape)
        if a.dtype == object:
            for x, y in zip(a, b, strict=True):
                same(x, y, path + "[]")
        else:
            assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), path
    else:
        assert type(a) is type(b) and a == b, (path, a, b)


def play_both(n: int, steps: int, seed: int, mode=AutoresetMode.NEXT_STEP, invalid_share=0.05,
              expire_share: float | None = None, compiled: bool | None = True, **kwargs) -> int:
    """Step the vector env and a SyncVectorEnv of single envs with the same random actions
    (mostly valid, some the mask refuses; with ``expire_share``, EXPIREs, which do not advance
    time, only that often); every output must be identical. ``compiled``: whether every
    sub-env's first episode must be stepped by the compiled core (None: either). Returns the
    number of episodes that ended."""
    vector = WritePolicyBenchVectorEnv(n, autoreset_mode=mode, **kwargs)
    sync = SyncVectorEnv([lambda: python_env(**kwargs) for _ in range(n)], autoreset_mode=mode)
    first, expected = vector.reset(seed=seed), sync.reset(seed=seed)
    same(first, expected)
    if compiled is not None:
        assert vector.core.compiled.all() == compiled, vector.core.compiled
    rng = np.random.default_rng(seed)
    info, ended = expected[1], 0
    for _ in range(steps):
        masks = info["action_mask"]
        assert np.array_equal(vector.action_masks(), masks)
        if expire_share is not None and rng.random() > expire_share:
            masks = masks[:, : 2 + (vector.n_actions - 2) // 2]
        actions = np.array([rng.choice(np.flatnonzero(row)) for row in masks])
        wrong = rng.random(n) < invalid_share
        actions[wrong] = rng.integers(0, vector.n_actions, wrong.sum())
        got, want = vector.step(actions), sync.step(actions)
        same(got, want)
        info, ended = want[4], ended + int(want[2].sum())
    return ended


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("track", ["unprivileged", "privileged"])
def test_every_regime_and_track_steps_as_the_single_envs(regime, track):
    assert play_both(3, 90, seed=len(regime), regime=regime, track=track, length=25, api_pool=8, dense_reward=True) >= 3


# WritePolicyBench-v0 plays the query tier's streams too (scored by F1 on the final memory, and
# by query accuracy in wpb eval); small knobs keep the episodes short.
QUERY_KNOBS = {"endpoints": 12, "families": 3, "length": 60, "checkpoint_interval": 10,
               "queries_per_checkpoint": 10, "summary_max_bytes": 600}


@pytest.mark.parametrize("regime", QUERY_REGIMES)
@pytest.mark.parametrize("track", ["unprivileged", "privileged"])
def test_the_query_tiers_streams_step_as_the_single_envs(regime, track):
    assert play_both(3, 150, seed=3, regime=regime, track=track, budget_bytes=2048, dense_reward=True,
                     **QUERY_KNOBS) >= 3


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 5),
    seed=st.integers(0, 2**31 - 1),
    regime=st.sampled_from(sorted(REGIMES)),
    track=st.sampled_from(["unprivileged", "privileged"]),
    mode=st.sampled_from([AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]),
    slots=st.integers(1, 8),
    invalid_share=st.sampled_from([0.0, 0.1, 0.5]),
)
def test_random_settings_step_as_the_single_envs(n, seed, regime, track, mode, slots, invalid_share):
    kwargs = {"regime": regime, "track": track, "slots": slots, "length": 12, "api_pool": 6, "dense_reward": True}
    play_both(n, 40, seed=seed, mode=mode, invalid_share=invalid_share, **kwargs)


@pytest.mark.parametrize("mode", list(AutoresetMode)[:2])
@pytest.mark.parametrize("observation_mode", ["box", "dict"])
def test_both_autoreset_modes_and_observation_modes(mode, observation_mode):
    kwargs = {"length": 20, "observation_mode": observation_mode, "max_expires_per_step": 1, "slots": 4}
    assert play_both(4, 70, seed=1, mode=mode, invalid_share=0.2, **kwargs) >= 4


def test_rewards_other_than_f1_and_the_invalid_action_penalty():
    kwargs = {"length": 20, "reward": {"f1": 0.5, "utility": 0.5}, "invalid_action_penalty": 0.1}
    assert play_both(3, 60, seed=2, invalid_share=0.3, **kwargs) >= 3


@pytest.mark.parametrize("observation_mode", ["box", "dict"])
@pytest.mark.parametrize("limit", [{"write_time": "total=20,per_write=1,per_kb=2"},
                                   {"kind_budgets": "endpoint=30%,doc=10%", "doc_prob": 0.3},
                                   {"compression": "credit=0.7"}])
@pytest.mark.parametrize("regime", ["reverts", "burst_drift"])
def test_limits_step_as_the_single_envs(observation_mode, limit, regime):
    # Both regimes' episodes are compiled from their draws (made where they have sections or
    # compressed summaries).
    kwargs = {"regime": regime, "length": 60, "api_pool": 12, "budget_bytes": 4096,
              "observation_mode": observation_mode, "reward": {"f1": 0.5, "utility": 0.5}, **limit}
    assert play_both(3, 200, seed=4, invalid_share=0.3, **kwargs) >= 6
    vector = WritePolicyBenchVectorEnv(2, **kwargs)
    vector.reset(seed=0)
    assert vector.core.drawn.all() == ("doc_prob" not in limit and "compression" not in limit)


def test_a_long_episode_of_ten_thousand_steps_and_a_megabyte():
    kwargs = {"regime": "contract_mix", "length": 10_000, "budget_bytes": 1 << 20}
    assert play_both(2, 11_500, seed=4, invalid_share=0.01, expire_share=0.05, **kwargs) >= 2


def test_episodes_read_from_files(tmp_path):
    frozen = freeze_set(tmp_path / "set", ["breaking", "reverts"], [15], 3, seed=5, overrides={"api_pool": 6})
    for order in ("random", "cycle"):
        assert play_both(3, 60, seed=6, episodes=str(frozen.root), episode_order=order) >= 3


def test_make_vec_builds_it_for_every_registered_id_and_sync_still_wraps_single_envs():
    for env_id in ENV_IDS:
        env = gym.make_vec(env_id, num_envs=2)
        assert isinstance(env.unwrapped, WritePolicyBenchVectorEnv), env_id
        assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        assert env.unwrapped.envs[0].track == ENV_IDS[env_id]["track"]
    env = gym.make_vec("WritePolicyBench-v0", num_envs=2, vectorization_mode="vector_entry_point",
                       autoreset_mode="SameStep", length=10)
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP and env.unwrapped.envs[0].length == 10
    assert isinstance(gym.make_vec("WritePolicyBench-v0", num_envs=2, vectorization_mode="sync"), SyncVectorEnv)
    assert gym.register_envs(wpb_gym) is None


def test_seeds_choose_the_episodes_as_a_single_env_would():
    vector = WritePolicyBenchVectorEnv(3, length=20)
    observations, _ = vector.reset(seed=[7, None, 9])
    single = WritePolicyBenchEnv(length=20)
    for i, seed in ((0, 7), (2, 9)):
        assert np.array_equal(observations[i], single.reset(seed=seed)[0])
        assert vector.envs[i].episode.episode_id == single.episode.episode_id
    again, _ = WritePolicyBenchVectorEnv(3, length=20).reset(seed=[7, 8, 9])
    assert np.array_equal(again[0], observations[0]) and np.array_equal(again[2], observations[2])
    for bad in ([1, 2], "7", 1.5):
        with pytest.raises(ValueError, match="seed must be None, an int or a list of 3 seeds"):
            vector.reset(seed=bad)


def test_a_partial_reset_matches_gymnasiums_and_disabled_autoreset_needs_one():
    kwargs = {"length": 5}
    vector = WritePolicyBenchVectorEnv(3, autoreset_mode="Disabled", **kwargs)
    sync = SyncVectorEnv([lambda: python_env(**kwargs) for _ in range(3)], autoreset_mode="Disabled")
    same(vector.reset(seed=0), sync.reset(seed=0))
    skip = np.zeros(3, dtype=int)
    for _ in range(5):
        same(vector.step(skip), sync.step(skip))
    with pytest.raises(RuntimeError, match="sub-env 0's episode is over"):
        vector.step(skip)
    chosen = np.array([True, False, True])
    same(vector.reset(seed=10, options={"reset_mask": chosen}), sync.reset(seed=10, options={"reset_mask": chosen}))
    with pytest.raises(ValueError, match="reset_mask"):
        vector.reset(options={"reset_mask": np.zeros(3, dtype=bool)})
    with pytest.raises(ValueError, match="the first reset resets every sub-env"):
        WritePolicyBenchVectorEnv(2).reset(options={"reset_mask": np.array([True, False])})


def test_bad_actions_and_arguments_are_named():
    vector = WritePolicyBenchVectorEnv(2, length=5)
    with pytest.raises(RuntimeError, match="call reset"):
        vector.step(np.zeros(2, dtype=int))
    vector.reset(seed=0)
    for actions, message in [
        (np.zeros(3, dtype=int), r"actions must be 2 integers .* shape \(3,\)"),
        (np.zeros(2), "actions must be 2 integers .*float64"),
        (np.array([0, vector.n_actions]), f"action {vector.n_actions} of sub-env 1 is not in Discrete"),
        (np.array([-1, 0]), "action -1 of sub-env 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            vector.step(actions)
    with pytest.raises(ValueError, match="autoreset_mode must be one of"):
        WritePolicyBenchVectorEnv(2, autoreset_mode="later")
    with pytest.raises(ValueError, match="num_envs"):
        WritePolicyBenchVectorEnv(0)
    with pytest.raises(ValueError, match="slots"):
        WritePolicyBenchVectorEnv(2, slots=0)


def test_outputs_are_fresh_arrays_and_sub_envs_are_independent():
    vector = WritePolicyBenchVectorEnv(2, length=10)
    observations, info = vector.reset(seed=0)
    masks = vector.action_masks()
    observations[:] = 7
    masks[:] = False
    info["action_mask"][:] = False
    step = vector.step(np.ones(2, dtype=int))
    assert not (step[0] == 7).all() and vector.action_masks()[:, 0].all()
    assert vector.envs[0].sampler is not vector.envs[1].sampler
    assert vector.envs[0].observation_encoder is not vector.envs[1].observation_encoder
    assert vector.call("oracle_utility") == tuple(env.oracle_utility() for env in vector.envs)
    assert vector.get_attr("t") == (1, 1)


def test_the_mask_is_reachable_through_gymnasiums_wrappers():
    env = gym.make("WritePolicyBench-v0", length=5)
    _, info = env.reset(seed=0)
    assert env.unwrapped is not env  # gym.make wraps it
    assert np.array_equal(env.get_wrapper_attr("action_masks")(), info["action_mask"])


def test_disabled_autoreset_refuses_before_any_sub_env_moves_and_the_api_matches_sync():
    vector = WritePolicyBenchVectorEnv(2, autoreset_mode="Disabled", length=3)
    vector.reset(seed=0)
    for _ in range(3):
        vector.step(np.zeros(2, dtype=int))
    vector.reset(options={"reset_mask": np.array([True, False])})
    with pytest.raises(RuntimeError, match="sub-env 1's episode is over"):
        vector.step(np.zeros(2, dtype=int))
    assert vector.get_attr("t") == (0, 3)  # sub-env 0 did not move
    sync = gym.make_vec("WritePolicyBench-v0", num_envs=2, vectorization_mode="sync")
    assert vector.metadata["render_fps"] == sync.metadata["render_fps"]
    vector.set_attr("invalid_action_penalty", [0.5, 0.25])
    vector.set_attr("invalid_action_penalty", 0.5)
    assert vector.get_attr("invalid_action_penalty") == (0.5, 0.5)
    for bad in (float("nan"), "0.1", [1.0], True):  # the compiled core would add it to rewards
        with pytest.raises(ValueError, match="invalid_action_penalty must be a finite number"):
            vector.set_attr("invalid_action_penalty", [0.25, bad])
    assert vector.get_attr("invalid_action_penalty") == (0.5, 0.5) and list(vector.core.penalties) == [0.5, 0.5]
    vector.close()
    with pytest.raises(RuntimeError, match="closed"):
        vector.step(np.zeros(2, dtype=int))


def _metrics_env() -> WritePolicyBenchVectorEnv:
    return WritePolicyBenchVectorEnv(6, length=5)  # one for every example: a vector env takes a while to build


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0, 1.5, True, np.float32(2.5), np.int64(7), None]),
                               st.sampled_from([2, 2.5, True])),
                     min_size=1, max_size=4, unique_by=lambda row: row[0]),
       other_keys=st.booleans(), mask_named=st.booleans())
def test_finished_episodes_metrics_are_laid_out_as_gymnasiums_add_info(rows, other_keys, mask_named):
    """Metrics of several sub-envs at once: one value type per metric as the first episode's,
    later episodes' values cast to it, an every-step key's array given the values as they are;
    a value that is not a number (object arrays), episodes with other metrics or a metric named
    as another's mask, as Gymnasium lays them out one episode at a time."""
    vector = _metrics_env()
    finished = []
    for k, (i, value, t) in enumerate(sorted(rows, key=lambda row: row[0])):
        metrics = {"f1": 0.25 * k, "steps": 5 + k, "odd": value, "t": t}  # "t": an every-step key
        if other_keys and k == 1:
            metrics["extra"] = 1
        if mask_named:
            metrics["_f1"] = k
        finished.append((i, metrics))
    ours, gymnasiums = ({"t": np.arange(6.0), "_t": np.ones(6, bool)} for _ in range(2))
    try:
        for i, metrics in finished:
            VectorEnv._add_info(vector, gymnasiums, {"metrics": metrics, **metrics}, i)
    except TypeError as refused:  # None cast into a number array: refused alike
        with pytest.raises(type(refused)):
            vector._add_metrics(ours, finished)
        return
    calls = []

    def counted(*args):
        calls.append(args)
        return VectorEnv._add_info(vector, *args)

    vector._add_info = counted
    try:
        vector._add_metrics(ours, finished)
    finally:
        del vector._add_info
    same(ours, gymnasiums)
    assert list(ours) == list(gymnasiums) and list(ours["metrics"]) == list(gymnasiums["metrics"])
    first_odd = finished[0][1]["odd"]
    assert bool(calls) == (mask_named or (other_keys and len(rows) > 1) or first_odd is None)  # else batched
    arrays = [value for key, value in ours.items() if key != "metrics"] + list(ours["metrics"].values())
    for k, first in enumerate(arrays):  # each array is its own, as Gymnasium's
        assert not any(np.shares_memory(first, second) for second in arrays[k + 1:])


def test_a_penalty_set_as_a_numpy_float32_costs_the_same_in_the_vector_env_and_single_envs():
    kwargs = {"length": 5}
    vector = WritePolicyBenchVectorEnv(1, **kwargs)
    sync = SyncVectorEnv([lambda: python_env(**kwargs)])
    same(vector.reset(seed=0), sync.reset(seed=0))
    for env in (vector, sync):
        env.set_attr("invalid_action_penalty", np.float32(0.1))
    assert type(sync.get_attr("invalid_action_penalty")[0]) is float
    for _ in range(5):
        refused = np.array([int(np.flatnonzero(~vector.action_masks()[0])[0])])
        same(vector.step(refused), sync.step(refused))
    with pytest.raises(ValueError, match="invalid_action_penalty must be a finite number, got 'high'"):
        sync.envs[0].invalid_action_penalty = "high"
