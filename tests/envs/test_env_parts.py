"""The env's parts used alone and injected: the episode sampler, the reward function and the
viewer (the encoder has its own differential test against the literal reference)."""

from __future__ import annotations

import numpy as np
import pytest

from wpb_gym import MemoryAction, generate_episode, make_config
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.episode_sampler import EpisodeSampler
from wpb_gym.envs.render import MemoryViewer
from wpb_gym.envs.rewards import RewardFunction


def test_the_sampler_alone_draws_cycles_and_overrides():
    sampler = EpisodeSampler(
        regime="burst_drift", length=20, episodes=None, episode_seed=3, order="cycle", generator_options={}
    )
    rng = np.random.default_rng(0)
    first, index = sampler.choose(rng, {})
    assert index == 0 and first == generate_episode(make_config("burst_drift", length=20), 3, 0)
    assert sampler.choose(rng, {})[1] == 1
    sampler.restart()
    assert sampler.choose(rng, {})[1] == 0
    longer, _ = sampler.choose(rng, {"length": 30, "episode_index": 4})
    assert len(longer) == 30 and longer.regime == "burst_drift"
    with pytest.raises(ValueError, match="episode_order must be one of"):
        EpisodeSampler(regime=None, length=None, episodes=None, episode_seed=0, order="sorted", generator_options={})


def test_the_reward_function_alone_pays_f1_potentials_that_add_up():
    episode = generate_episode(make_config("default", length=10), 0, 0)
    rewards = RewardFunction({"f1": 1.0}, dense=True)
    rewards.start(episode, np.full(10, 100), 10_000)
    critical = set(episode.critical_steps)
    paid = []
    for t in range(10):
        if t in critical:
            rewards.kept(t)
        final = {"f1": 1.0 if critical else 0.0, "policy_utility": 0.0, "oracle_utility": 1.0, "regret_write_only": 1.0}
        paid.append(rewards.reward(t, 0.0, None if t < 9 else final))
    assert sum(paid) == pytest.approx(1.0 if critical else 0.0)
    assert min(paid) >= 0.0  # keeping exactly the critical steps never lowers the potential


def test_injected_parts_replace_the_arguments_they_are_built_from():
    sampler = EpisodeSampler(
        regime="redundancy", length=15, episodes=None, episode_seed=1, order="random", generator_options={}
    )
    env = WritePolicyBenchEnv(episode_sampler=sampler, reward_fn=RewardFunction({"utility": 1.0}, dense=False))
    env.reset(seed=0)
    assert env.regime == "redundancy" and len(env.episode) == 15 and env.reward_weights == {"utility": 1.0}
    with pytest.raises(ValueError, match=r"episode_sampler replaces the arguments \['length'\]"):
        WritePolicyBenchEnv(episode_sampler=sampler, length=20)
    with pytest.raises(ValueError, match=r"reward_fn replaces the arguments \['dense_reward'\]"):
        WritePolicyBenchEnv(reward_fn=RewardFunction({"f1": 1.0}, dense=True), dense_reward=False)
    with pytest.raises(ValueError, match=r"reward_fn replaces the arguments \['expire_cost'\]"):
        WritePolicyBenchEnv(reward_fn=RewardFunction({"f1": 1.0}, dense=True), expire_cost=0.1)


def test_the_viewer_records_only_what_its_mode_draws():
    picture, text = MemoryViewer("rgb_array"), MemoryViewer("ansi")
    for viewer in (picture, text):
        viewer.stored(0, False)
        viewer.stored(1, True)
        viewer.expired(0, 2)
        viewer.time_advanced(120)
        viewer.acted(5, "accepted")
        assert viewer.last_action_text({5: "EXPIRE slot 0"}.get) == "EXPIRE slot 0 -> accepted"
    assert picture.memory_history == {0: (2, False), 1: (None, True)} and picture.bytes_history == (120,)
    assert text.memory_history == {} and text.bytes_history == ()
    with pytest.raises(ValueError, match="render_mode must be one of"):
        MemoryViewer("human")


def test_every_env_of_a_vector_env_works_on_its_own_copy_of_an_injected_part():
    import gymnasium as gym

    import wpb_gym  # noqa: F401  (registers the ids)

    shared = RewardFunction({"utility": 1.0}, dense=True)
    envs = gym.make_vec(
        "WritePolicyBench-v0", num_envs=2, vectorization_mode="sync", reward_fn=shared, length=30, budget_bytes=800
    )
    parts = [env.unwrapped.reward_fn for env in envs.envs]
    assert parts[0] is not parts[1] and shared not in parts
    envs.reset(seed=0)
    totals, done = np.zeros(2), np.zeros(2, dtype=bool)
    rng = np.random.default_rng(0)
    finals = [None, None]
    while not done.all():
        masks = np.stack([env.unwrapped.action_masks() for env in envs.envs])
        actions = [int(rng.choice(np.flatnonzero(m))) for m in masks]
        _, rewards, terminated, _, info = envs.step(actions)
        for i in range(2):
            if not done[i]:
                totals[i] += rewards[i]
                if terminated[i]:
                    done[i] = True
                    finals[i] = info["policy_utility"][i] / info["oracle_utility"][i]
    assert totals == pytest.approx(finals)  # each env's dense rewards add up to its own episode's value


def test_an_injected_encoder_and_viewer_set_the_layout_and_the_rendering():
    from wpb_gym.envs.observation.encoder import ObservationEncoder
    from wpb_gym.envs.observation.features import ObservationLayout

    encoder = ObservationEncoder(
        ObservationLayout(3, True), slot_order="oldest", max_expires_per_step=1, observation_mode="dict"
    )
    env = WritePolicyBenchEnv(track="privileged", observation_encoder=encoder, viewer=MemoryViewer("ansi"), length=20)
    assert (env.K, env.slot_order, env.max_expires_per_step, env.observation_mode) == (3, "oldest", 1, "dict")
    assert env.observation_encoder is not encoder and env.render_mode == "ansi"
    observation, _ = env.reset(seed=0)
    assert observation["slots"].shape == (3 * len(env.slot_features),)
    assert "last action: reset" in env.render()
    with pytest.raises(ValueError, match=r"observation_encoder replaces the arguments \['slots'\]"):
        WritePolicyBenchEnv(track="privileged", observation_encoder=encoder, slots=4)
    with pytest.raises(ValueError, match="other track"):
        WritePolicyBenchEnv(observation_encoder=encoder)
    with pytest.raises(ValueError, match=r"viewer replaces the arguments \['render_mode'\]"):
        WritePolicyBenchEnv(viewer=MemoryViewer("ansi"), render_mode="rgb_array")


def test_the_encoder_alone_follows_a_store_as_the_reference_reads_it():
    from wpb_gym.core.store import ByteMemoryStore
    from wpb_gym.envs.observation.encoder import ObservationEncoder
    from wpb_gym.envs.observation.features import ObservationLayout
    from wpb_gym.envs.observation.reference import ReferenceEncoder

    episode = generate_episode(make_config("redundancy", length=40), 2, 0)
    store = ByteMemoryStore(1500)
    encoder = ObservationEncoder(
        ObservationLayout(4, False), slot_order="relevance", max_expires_per_step=None, observation_mode="box"
    )
    table = encoder.start(episode, "unprivileged", store)
    reference = ReferenceEncoder(episode, "unprivileged", slots=4, slot_order="relevance", max_expires_per_step=None)
    for t in range(len(episode)):
        if store.check(MemoryAction("WRITE", step=table.step(t)), t).accepted:
            encoder.stored(t, None, store.write(table.step(t), t).byte_delta)
        elif len(store) and t % 3 == 0:
            oldest = store.items()[0]
            dropped = store.retained_loss(oldest.t)
            store.expire(oldest.t, t)
            encoder.expired(oldest, dropped)
        encoder.update(t + 1, 0, False)
        view = reference.observe(store, t + 1, expires_this_step=0, reverted_expired=False)
        np.testing.assert_allclose(encoder.observation(), view.vector(reference.layout), rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(encoder.mask_array(), view.mask)
