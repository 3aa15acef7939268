"""MaskablePPO on the query tier's env: the slot teacher, the row policy, DAgger and evaluation."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch as th

from agents.registry import make_agent
from agents.sb3.agent import SB3Agent
from agents.learners.word_estimates import Examples, examples, hidden_draws
from agents.sb3.query_imitation import (SlotTeacher, States, dagger, fit, fit_words, settings, student_actions,
                                        train_queries)
from agents.sb3.query_policy import QueryRowsPolicy, most_likely
from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.envs.query_env import SKIP, WRITE, QueryTierEnv
from wpb_gym.evaluation.runner import run_episode

SMALL = {"regime": "queries_medium", "endpoints": 40, "families": 4, "length": 40 + 14 * 20,
         "checkpoint_interval": 20, "queries_per_checkpoint": 30, "summary_max_bytes": 900, "max_params": 10}


def _teacher_play(env: QueryTierEnv, index: int) -> float:
    env.reset(options={"episode_index": index})
    teacher = SlotTeacher(env)
    teacher.start()
    while True:
        _, _, done, _, info = env.step(teacher.act())
        if done:
            return info["query_accuracy"]


@pytest.mark.parametrize("budget", [1024, 4096])
def test_with_every_item_in_view_the_slot_teacher_is_causal_privileged(budget):
    # 64 slots show all that memory holds here: the teacher then plays causal_privileged's engine
    # exactly, through env actions.
    env = QueryTierEnv(**SMALL, slots=64, budget_bytes=budget, episode_seed=3)
    for index in range(2):
        accuracy = _teacher_play(env, index)
        assert len(env.store) < 64
        offline = run_episode(make_agent("causal_privileged"), env.episode, budget, track="privileged")
        assert accuracy == offline.queries.accuracy
        assert sorted(i.t for i in env.store.iter_items()) == sorted(i.t for i in offline.store.iter_items())


def test_with_fewer_slots_than_items_the_teacher_writes_after_every_eviction_it_starts():
    # It plans a step's evictions once, as the engine does: an item coming into view after the
    # first eviction never turns the plan into a SKIP with memory already emptied for nothing.
    evictions, most = 0, 0
    for index in range(3):
        env = QueryTierEnv(**SMALL, slots=3, budget_bytes=8192, episode_seed=5)
        env.reset(options={"episode_index": index})
        teacher = SlotTeacher(env)
        teacher.start()
        evicted_at = None
        while not env.is_over():
            t, api = env.t, env.current_step().observation["api"]
            action = teacher.act()
            if action >= 3 and env.slot_items()[action - 3].api != api:
                evicted_at, evictions = t, evictions + 1
            elif action < 3 and evicted_at == t:
                assert action == 1, f"step {t}: evicted, then {action}"
            most = max(most, len(env.store))
            env.step(action)
    assert evictions > 20 and most > 3  # memory held more than the slots show


def _started_teacher(slots: int, budget: int, episode_seed: int, index: int) -> tuple[QueryTierEnv, SlotTeacher]:
    env = QueryTierEnv(**SMALL, slots=slots, budget_bytes=budget, episode_seed=episode_seed)
    env.reset(options={"episode_index": index})
    teacher = SlotTeacher(env)
    teacher.start()
    return env, teacher


def test_the_teacher_labels_every_state_when_another_actor_breaks_its_plan():
    # DAgger: the student acts between the teacher's labels. Evicting what the teacher planned to
    # evict next, or something else, leaves the teacher a state its plan no longer fits; it
    # plans again and labels only valid actions.
    rng = np.random.default_rng(0)
    broken = 0
    for index in range(3):
        env, teacher = _started_teacher(3, 8192, 5, index)
        while not env.is_over():
            label = teacher.act()
            mask = env.action_masks()
            assert mask[label]
            evicting = label >= 3 and env.slot_items()[label - 3].api != env.current_step().observation["api"]
            if evicting and mask[3:].sum() > 1 and rng.random() < 0.5:
                broken += 1  # evict another item than the teacher's
                env.step(int(rng.choice([a for a in np.flatnonzero(mask) if a >= 3 and a != label])))
            else:
                env.step(label)
    assert broken > 10


def test_the_teachers_rule_decides_on_values_it_is_given():
    # Nothing is worth keeping: memory stays empty. Every snapshot worth more than all memory
    # holds: each one that fits the budget is written, evicting what it must.
    for worth, check in ((0.0, lambda env, wrote: len(env.store) == 0 and wrote == 0),
                         (1e9, lambda env, wrote: wrote > 100)):
        env, teacher = _started_teacher(3, 2048, 4, 0)
        wrote = 0
        while not env.is_over():
            values = np.array([worth, *(1.0 if item is not None else 0.0 for item in env.slot_items())])
            action = teacher.act(values)
            assert env.action_masks()[action] and np.array_equal(teacher.values, values.astype(np.float32))
            if worth and action < 3:  # written, unless evicting all in view leaves too little room
                cost = estimate_bytes(env.current_step())
                room = env.store.remaining() + sum(i.byte_cost for i in env.slot_items() if i is not None)
                assert action == (1 if cost <= room else 0)
            wrote += action == 1
            env.step(action)
        assert check(env, wrote)


def test_on_given_values_the_teacher_evicts_the_lowest_value_per_byte_first():
    rng = np.random.default_rng(1)
    env, teacher = _started_teacher(4, 2048, 4, 1)
    first_evictions = 0
    while not env.is_over():
        t, slots = env.t, env.slot_items()
        values = np.array([1e9, *(rng.uniform(0.1, 10.0) if item is not None else 0.0 for item in slots)])
        action = teacher.act(values)
        api = env.current_step().observation["api"]
        if action >= 3 and slots[action - 3].api != api and not any(i is not None and i.api == api for i in slots):
            # the first eviction of the step's plan: the item in view of lowest value per byte
            worth = [values[1 + k] / item.byte_cost for k, item in enumerate(slots) if item is not None]
            assert values[action - 2] / slots[action - 3].byte_cost == min(worth)
            first_evictions += 1
            while env.t == t and not env.is_over():  # the rest of the plan, on the same values
                shown = env.slot_items()
                kept = {item.t: values[1 + k] for k, item in enumerate(slots) if item is not None}
                action = teacher.act(np.array([1e9, *(kept.get(i.t, 5.0) if i is not None else 0.0 for i in shown)]))
                env.step(action)
            continue
        env.step(action)
    assert first_evictions > 10


def test_the_slot_teacher_labels_only_actions_the_mask_allows_and_values_every_row():
    env = QueryTierEnv(**SMALL, slots=4, budget_bytes=2048, episode_seed=1)
    env.reset(options={"episode_index": 0})
    teacher = SlotTeacher(env)
    teacher.start()
    seen = set()
    while not env.is_over():
        action = teacher.act()
        assert env.action_masks()[action]
        shown = [i is not None for i in env.slot_items()]
        assert (teacher.values[1:][~np.array(shown)] == 0).all() and (teacher.values >= 0).all()
        seen.add(min(action, 3))
        env.step(action)
    assert seen == {0, 1, 3}  # it skips, writes and evicts


def test_the_rows_word_estimates_are_ridge_fits_of_the_hidden_draws_that_training_leaves_alone():
    # fit_words sets the rows' word estimates from training episodes' hidden draws; on an episode
    # of another seed they follow its draws from the words alone, and fitting the actions and
    # values does not move them.
    words = {**SMALL, "endpoints": 120, "integration_content": 0.95, "burst_content": 0.95, "slots": 4,
             "word_buckets": 256}
    kept = (Examples([], []), Examples([], []))
    env = QueryTierEnv(**words, budget_bytes=4096, episode_seed=0)
    model = _fresh_model(env, 0)
    for index in range(6):
        env.reset(options={"episode_index": index})
        for examples_so_far, new in zip(kept, examples(env.episode), strict=True):
            examples_so_far.extend(new)
    fit_words(model.policy, kept, 1.0)
    rows = model.policy.mlp_extractor
    states = _teacher_states(env, rows, range(6))
    set_to = [p.detach().clone() for p in (*rows.first_words.parameters(), *rows.break_words.parameters())]
    fit(model.policy, states, 2, 256, 1.0, np.random.default_rng(0))
    assert all(th.equal(a, b) for a, b in zip(set_to, (*rows.first_words.parameters(),
                                                         *rows.break_words.parameters())))
    env = QueryTierEnv(**words, budget_bytes=4096, episode_seed=1)
    observation, _ = env.reset(options={"episode_index": 0})
    draws = hidden_draws(env.episode)
    estimated, drawn = {}, {}
    while not env.is_over():  # SKIP throughout: the candidate's row is the one to read
        api = env.current_step().observation["api"]
        with th.no_grad():
            estimates = rows.word_estimates(th.as_tensor(observation[None]))[0, 0].numpy()
        estimated.setdefault(("integrations", api), estimates[0])
        burst = draws.bursts.get(env.t)
        if burst is not None:
            estimated[("burst", env.t)], drawn[("burst", env.t)] = estimates[1], burst[1]
        drawn[("integrations", api)] = draws.integrations[api]
        observation, *_ = env.step(0)
    for kind, floor in (("integrations", 0.8), ("burst", 0.8)):
        keys = [key for key in drawn if key[0] == kind]
        assert len(keys) > 50
        # Measured: 0.86 on both; value_keeper's regression on the words themselves, 0.95 and 0.94.
        assert np.corrcoef([estimated[k] for k in keys], [drawn[k] for k in keys])[0, 1] > floor


def _teacher_states(env: QueryTierEnv, rows, indices) -> States:
    """The states the teacher visits playing ``env``'s episodes ``indices``, labelled, kept as
    imitation keeps them (compact, by ``rows``)."""
    states = States()
    for index in indices:
        observation, _ = env.reset(options={"episode_index": index})
        teacher = SlotTeacher(env)
        teacher.start()
        while not env.is_over():
            action = teacher.act()
            with th.no_grad():
                compact = rows.compact(th.as_tensor(observation[None]))[0].numpy()
            states.add(compact, env.action_masks(), action, 1.0, teacher.values)
            observation, *_ = env.step(action)
    return states


def _fresh_model(env: QueryTierEnv, seed: int, **policy_kwargs):
    from sb3_contrib import MaskablePPO

    th.manual_seed(seed)
    return MaskablePPO(QueryRowsPolicy, env, policy_kwargs={"slots": env.K, "word_buckets": env.word_buckets,
                                                            **policy_kwargs}, seed=seed, device="cpu")


@pytest.mark.parametrize("budget", [1024, 2048, 4096])
def test_the_heads_rule_inputs_are_the_teachers_rule_on_the_values_given(budget):
    # On the teacher's own values the rule the heads are given, and the rule's actions, decide
    # as the teacher does at a step's first decision: WRITE when the candidate fits, EXPIRE of
    # the first victim when it is worth more than the evictions lose, SKIP otherwise. (Later
    # decisions of a step follow the teacher's plan, which items coming into view after an
    # eviction do not change.)
    env = QueryTierEnv(**SMALL, slots=8, word_buckets=8, budget_bytes=budget, episode_seed=5)
    rows = _fresh_model(env, 0).policy.mlp_extractor
    seen = {WRITE: 0, SKIP: 0, "evict": 0}
    agree = decisions = 0
    for index in range(3):
        observation, _ = env.reset(options={"episode_index": index})
        teacher = SlotTeacher(env)
        teacher.start()
        decided_at = -1
        while not env.is_over():
            label = teacher.act()
            api = env.current_step().observation["api"]
            stale = label >= 3 and env.slot_items()[label - 3].api == api
            with th.no_grad():
                encoded = rows.encode(rows.compact(th.as_tensor(observation[None])))
                values = th.log1p(th.as_tensor(teacher.values[None], dtype=th.float32))
                head, expire = rows.rule_inputs(encoded, values)
                rule = int(rows.rule_actions(encoded, values)[0])
            agree += rule == label
            decisions += 1
            if env.t != decided_at:
                assert rule == label  # the whole rule, the stale state's EXPIRE included
            if env.t != decided_at and not stale:
                fits, enough, margin, admit = head[0].tolist()
                if label == WRITE:
                    assert fits == 1
                elif label == SKIP:
                    assert admit == 0 and not (fits == 1 and teacher.values[0] > 0)
                else:
                    assert admit == 1 and fits == 0 and expire[0, label - 3].tolist() == [1.0, 1.0]
                seen["evict" if label >= 3 else label] += 1
            decided_at = env.t
            observation, *_ = env.step(label)
    assert min(seen.values()) > 0, seen
    assert agree >= 0.99 * decisions  # a step's later evictions too, planned afresh


def test_with_labels_from_the_rule_on_its_values_the_student_learns_that_rule():
    # action_labels: rule_on_values: the heads are fitted to the teacher's rule played on the
    # student's own values, not to the teacher's actions, which follow values it cannot see.
    # Two students from the same start, fitted alike but for the labels: the members, which no
    # action moves, come out the same, and so does the rule on their values.
    env = QueryTierEnv(**SMALL, slots=4, word_buckets=8, budget_bytes=1024, episode_seed=3)
    fitted, states = {}, None
    for labels in ("rule_on_values", "teacher"):
        model = _fresh_model(env, 0, value_members=2, value_spread=True)
        rows = model.policy.mlp_extractor
        states = states or _teacher_states(env, rows, range(3))
        fit(model.policy, states, 10, 128, 1.0, np.random.default_rng(0), actions_too=False)
        fit(model.policy, states, 20, 128, 1.0, np.random.default_rng(1), labels=labels)
        with th.no_grad():
            fitted[labels] = rows.fit_outputs(th.as_tensor(states.observations, dtype=th.float32))
    rule = fitted["rule_on_values"].rule
    assert th.equal(rule, fitted["teacher"].rule)
    teacher = th.from_numpy(states.actions)
    acting = rule != SKIP  # most states are SKIP: a policy that always skips must not pass
    assert acting.sum() > 20 and (rule != teacher).sum() > 20  # the rule on the student's values is not the teacher

    def follows_the_rule(labels):
        chosen = fitted[labels].logits.masked_fill(~th.from_numpy(states.masks), -1e8).argmax(1)
        return float((chosen[acting] == rule[acting]).float().mean())

    # Measured: 0.77 against 0.57.
    assert follows_the_rule("rule_on_values") > max(0.7, follows_the_rule("teacher") + 0.1)


@pytest.mark.parametrize("value_spread", [False, True])
def test_value_members_learn_the_rows_values_alone_and_the_actions_do_not_move_them(value_spread):
    env = QueryTierEnv(**SMALL, slots=4, word_buckets=8, budget_bytes=2048, episode_seed=3)
    model = _fresh_model(env, 0, value_members=3, value_spread=value_spread)
    rows = model.policy.mlp_extractor
    states = _teacher_states(env, rows, range(2))
    observations = []
    env.reset(options={"episode_index": 0})
    for _ in range(64):
        observation, *_ = env.step(1 if env.action_masks()[1] else 0)
        observations.append(observation)
    x = th.as_tensor(np.stack(observations))
    z = rows.compact(x)
    assert z.shape == (64, rows.compact_width) and rows.compact_width < x.shape[1]
    outputs = rows.member_outputs(z)
    assert outputs.shape == (64, 3, 5, 2 if value_spread else 1)
    logits, values, spread, rule = rows.fit_outputs(z)
    assert th.allclose(values, outputs[..., 0]) and (spread is None) == (not value_spread)
    assert th.equal(rule, rows.rule_actions(rows.encode(z), values.mean(1)))
    assert th.allclose(logits, rows.forward_actor(x))  # the compact form is what the policy acts on
    assert th.allclose(rows.row_values(x), outputs[..., 0].mean(1))  # what the heads read: the members' mean

    def members_and_rest():
        members = [p.detach().clone() for p in rows.value_members.parameters()]
        rest = [p.detach().clone() for n, p in rows.named_parameters() if not n.startswith("value_members")]
        return members, rest

    def squared_error():
        with th.no_grad():
            z = th.as_tensor(states.observations, dtype=th.float32)
            present = rows.present(z)
            error = (rows.member_outputs(z)[..., 0].mean(1) - th.from_numpy(states.values)) ** 2
            return float((error * present).sum() / present.sum())

    members, rest = members_and_rest()
    before = squared_error()
    fit(model.policy, states, 10, 128, 1.0, np.random.default_rng(0), actions_too=False)
    after_members, after_rest = members_and_rest()
    assert all(th.equal(a, b) for a, b in zip(rest, after_rest))  # the value loss alone moves only the members
    assert not all(th.equal(a, b) for a, b in zip(members, after_members))
    assert squared_error() < 0.5 * before, (before, squared_error())
    fit(model.policy, states, 1, 128, 0.0, np.random.default_rng(0))  # the actions alone
    final_members, final_rest = members_and_rest()
    assert all(th.equal(a, b) for a, b in zip(after_members, final_members))  # the heads read them detached
    assert not all(th.equal(a, b) for a, b in zip(after_rest, final_rest))


@pytest.mark.parametrize("tier", ["queries_easy", "queries_medium", "queries_hard"])
def test_a_model_of_the_query_env_scores_in_wpb_eval_as_it_plays_the_env(tmp_path, tier):
    env = QueryTierEnv(**{**SMALL, "regime": tier}, slots=4, word_buckets=8, budget_bytes=2048, episode_seed=2)
    model = _fresh_model(env, 0)
    with th.no_grad():  # a policy that writes and evicts: untrained logits mostly pick one action
        model.policy.mlp_extractor.head[-1].bias.copy_(th.tensor([0.0, 3.0, 0.0]))
    model.save(tmp_path / "m.zip")
    (tmp_path / "m.env.json").write_text(json.dumps({"query_tier": True, "slots": 4, "word_buckets": 8}))
    agent = SB3Agent(tmp_path / "m.zip")
    for index in range(2):
        obs, _ = env.reset(options={"episode_index": index})
        done, expired = False, 0
        while not done:
            action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
            expired += int(action) >= 3
            obs, _, done, _, info = env.step(int(action))
        offline = run_episode(agent, env.episode, 2048, track="unprivileged")
        assert sorted(i.t for i in env.store.iter_items()) == sorted(i.t for i in offline.store.iter_items())
        assert info["query_accuracy"] == offline.queries.accuracy > 0
        assert expired > 0


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_agent_decides_as_predict_does(tmp_path, deterministic):
    # The agent calls the policy without predict's wrapping (SB3Agent._act_directly); on
    # states of played episodes and on random observations with random masks (SKIP always
    # allowed) it must take predict's action, sampled ones drawn from the same torch seed.
    env = QueryTierEnv(**SMALL, slots=4, word_buckets=8, budget_bytes=2048, episode_seed=3)
    model = _fresh_model(env, 1)
    model.save(tmp_path / "m.zip")
    (tmp_path / "m.env.json").write_text(json.dumps({"query_tier": True, "slots": 4, "word_buckets": 8}))
    agent = SB3Agent(tmp_path / "m.zip", deterministic=deterministic)
    agent.restart()
    assert not agent.model.policy.training
    agent.model.predict = None  # the direct call, never predict (the test's model is another object)
    rng = np.random.default_rng(0)
    observations, masks = [], []
    obs, _ = env.reset(options={"episode_index": 0})
    done = False
    while not done:
        mask = env.action_masks()
        observations.append(obs)
        masks.append(mask)
        obs, _, done, _, _ = env.step(int(rng.choice(np.flatnonzero(mask))))
    for _ in range(200):
        observations.append(env.observation_space.sample())
        masks.append(np.r_[True, rng.random(env.action_space.n - 1) < 0.5])
    directly, through_predict = [], []
    for observation, mask in zip(observations, masks, strict=True):
        th.manual_seed(len(directly))
        directly.append(agent.decide(observation, mask))
        th.manual_seed(len(through_predict))
        through_predict.append(int(model.predict(observation, deterministic=deterministic, action_masks=mask)[0]))
    assert directly == through_predict
    assert len(set(directly)) > 2  # more than one kind of action was compared
    assert all(mask[a] for a, mask in zip(directly, masks, strict=True))


def test_the_policy_acts_by_kind_then_slot_and_the_student_acts_so_too():
    probabilities = th.tensor([[0.30, 0.0, 0.0, 0.20, 0.25, 0.25],  # EXPIRE 0.70 in all, spread
                               [0.40, 0.0, 0.0, 0.35, 0.25, 0.0],  # EXPIRE 0.60: slot 0
                               [0.10, 0.55, 0.0, 0.15, 0.10, 0.10],
                               [0.60, 0.0, 0.0, 0.10, 0.10, 0.20]])
    assert most_likely(probabilities).tolist() == [4, 3, 1, 0]
    env = QueryTierEnv(**SMALL, slots=3, word_buckets=8, budget_bytes=2048, episode_seed=2)
    model = _fresh_model(env, 0)
    with th.no_grad():  # WRITE when it fits; else SKIP, just above one EXPIRE but under two together
        model.policy.mlp_extractor.head[-1].weight.zero_()
        model.policy.mlp_extractor.head[-1].bias.copy_(th.tensor([1.0, 3.0, -9.0]))
        model.policy.mlp_extractor.expire[-1].weight.zero_()
        model.policy.mlp_extractor.expire[-1].bias.fill_(0.5)
    observation, _ = env.reset(options={"episode_index": 0})
    observations, masks, chosen = [], [], []
    done = False
    while not done:
        mask = env.action_masks()
        action, _ = model.predict(observation, action_masks=mask, deterministic=True)
        observations.append(observation)
        masks.append(mask)
        chosen.append(int(action))
        observation, _, done, _, _ = env.step(int(action))
    assert student_actions(model.policy, np.stack(observations), np.stack(masks)).tolist() == chosen
    full = [(c, m[3:].sum()) for c, m in zip(chosen, masks) if not m[1] and not m[2]]
    assert any(shown >= 2 for _, shown in full)
    assert all((c >= 3) == (shown >= 2) for c, shown in full)  # two slots' EXPIRE outweigh SKIP; one does not


def test_the_policy_refuses_an_env_of_another_layout():
    env = QueryTierEnv(**SMALL, slots=4, word_buckets=8)
    from sb3_contrib import MaskablePPO

    with pytest.raises(ValueError, match="slots=5, word_buckets=8"):
        MaskablePPO(QueryRowsPolicy, env, policy_kwargs={"slots": 5, "word_buckets": 8}, device="cpu")


@pytest.mark.parametrize(("value_loss", "members"), [("mse", 1), ("gaussian_nll", 2)])
def test_dagger_trains_a_model_wpb_eval_reads(tmp_path, value_loss, members):
    config = {"imitation": {"rounds": 2, "episodes": 2, "validation_episodes": 1, "budgets": [1024, 4096],
                            "value_loss": value_loss, "value_members": members, "value_warmup": 2}}
    saved = train_queries(tmp_path / "run", config=config, env_kwargs={**SMALL, "slots": 4, "word_buckets": 8},
                          seed=0, progress=False)
    assert [r["round"] for r in saved["rounds"]] == [0, 1] and saved["states"] > 100
    assert saved["rounds"][0]["teacher_share"] == 1.0 and saved["rounds"][1]["teacher_share"] == 0.5
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())
    assert recorded["best_validation_accuracy"] == max(
        np.mean(list(r["validation_accuracy"].values())) for r in recorded["rounds"])
    assert all(np.isfinite(r["loss"]) for r in recorded["rounds"])
    agent = SB3Agent(tmp_path / "run" / "best_model.zip")
    assert agent.query_tier and agent.env_kwargs == {"slots": 4, "track": "unprivileged", "word_buckets": 8}
    assert agent.model.policy.value_spread == (value_loss == "gaussian_nll")  # a log variance per row, saved
    rows = agent.model.policy.mlp_extractor
    assert rows.members == members and len(rows.value_members) == members
    with pytest.raises(ValueError, match="imitation.value_members"):
        dagger(agent.model, {**SMALL, "slots": 4, "word_buckets": 8}, 0,
               settings({"value_loss": value_loss, "value_members": members + 1}))
    assert not any(p.requires_grad for p in (*rows.first_words.parameters(), *rows.break_words.parameters()))
    with pytest.raises(ValueError, match="imitation.value_loss"):  # a policy without the log variances the fit needs
        other = "mse" if value_loss == "gaussian_nll" else "gaussian_nll"
        dagger(agent.model, {**SMALL, "slots": 4, "word_buckets": 8}, 0,
               settings({"value_loss": other, "value_members": members}))
    env = QueryTierEnv(**SMALL, slots=4, word_buckets=8, budget_bytes=4096, episode_seed=9)
    obs, _ = env.reset()
    model, done = agent.model, False
    while not done:  # the saved model playing the env, as wpb eval plays it from the stream
        action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
        obs, _, done, _, info = env.step(int(action))
    assert run_episode(agent, env.episode, 4096).queries.accuracy == info["query_accuracy"]


@pytest.mark.parametrize(("section", "named"), [
    ({"rounds": 0}, "imitation.rounds"), ({"beta": 1.5}, "imitation.beta"), ({"skip_keep": 0}, "imitation.skip_keep"),
    ({"budgets": []}, "imitation.budgets"), ({"budgets": [0]}, "imitation.budgets"), ({"teacher": "x"}, "unknown"),
    ({"learning_rate": True}, "imitation.learning_rate"), ({"minutes": float("nan")}, "imitation.minutes"),
    ({"value_loss": "l1"}, "imitation.value_loss"), ({"word_ridge": 0}, "imitation.word_ridge"),
    ({"value_members": 0}, "imitation.value_members"), ({"value_warmup": 1.5}, "imitation.value_warmup"),
    ({"action_labels": "oracle"}, "imitation.action_labels"), ({"value_weight": 0}, "imitation.value_weight"),
])
def test_bad_imitation_settings_are_named(section, named):
    with pytest.raises(ValueError, match=named):
        settings(section)


def _tiny_recipe(tmp_path) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text("query_env: true\ntimesteps: 0\nenv: {slots: 4, word_buckets: 8}\n"
                    "imitation: {rounds: 1, episodes: 2, validation_episodes: 1, budgets: [2048]}\n")
    return str(path)


KNOBS = [f"{k}={v}" for k, v in SMALL.items()]


def test_wpb_train_takes_the_query_recipe_and_names_what_it_does_not_read(tmp_path, capsys):
    from wpb_gym.cli import main as wpb

    out = tmp_path / "run"
    assert wpb(["train", "--algo", "maskable_ppo", "--config", _tiny_recipe(tmp_path), "--env-kwargs", *KNOBS,
                "--out", str(out), "--quiet"]) == 0
    assert "by imitation on" in capsys.readouterr().out
    saved = json.loads((out / "config.json").read_text())
    assert saved["env"]["endpoints"] == 40 and saved["env"]["slots"] == 4 and len(saved["rounds"]) == 1
    assert SB3Agent(out / "best_model.zip").query_tier
    for extra, named in ((["--timesteps", "5"], "--timesteps: .* imitation only"),
                         (["--env-kwargs", *KNOBS, "budget_bytes=1024"], "budget_bytes is set by the recipe"),
                         (["--env-kwargs", *KNOBS, "dense_reward=true"], "unknown env argument 'dense_reward'"),
                         (["--env-kwargs", *KNOBS, "answers=false"], "answers is not read"),
                         (["--vec-env", "dummy"], "--vec-env: .* takes no --vec-env"),
                         (["--algo", "a2c"], "--algo a2c: .* trains maskable_ppo")):
        algo = extra[1] if extra[0] == "--algo" else "maskable_ppo"
        extra = [] if extra[0] == "--algo" else extra
        argv = ["train", "--algo", algo, "--config", _tiny_recipe(tmp_path), "--out", str(tmp_path / "x")]
        if not extra or extra[0] != "--env-kwargs":
            argv += ["--env-kwargs", *KNOBS]
        capsys.readouterr()
        assert wpb(argv + extra) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and re.search(named, err), err
        assert not (tmp_path / "x").exists()


def test_the_shipped_query_recipe_is_picked_for_every_tier():
    from agents.sb3.train import load_config

    for tier in ("queries_easy", "queries_medium", "queries_hard"):
        config = load_config("maskable_ppo", regime=tier)
        assert config["query_env"] and config["timesteps"] == 0 and config["env"] == {"slots": 32, "word_buckets": 256}
    assert not load_config("maskable_ppo", regime="breaking")["query_env"]


def test_states_grow_and_read_back_what_was_added():
    from agents.sb3.query_imitation import States

    rng = np.random.default_rng(0)
    states, added = States(), []
    for i in range(2600):  # past the first size and two growths
        row = (rng.random(7).astype(np.float32), rng.random(5) < 0.5, int(i % 5), float(i), rng.random(3))
        states.add(*row)
        added.append(row)
    assert len(states) == 2600 and states.observations.dtype == np.float16
    assert np.array_equal(states.observations, np.stack([r[0] for r in added]).astype(np.float16))
    assert np.array_equal(states.masks, np.stack([r[1] for r in added]))
    assert states.actions.tolist() == [r[2] for r in added] and states.weights.tolist() == [r[3] for r in added]
    assert np.allclose(states.values, np.log1p(np.stack([r[4] for r in added])))


def test_a_query_recipe_needs_no_imitation_section_and_refuses_settings_it_does_not_read(tmp_path):
    from agents.sb3.train import load_config

    path = tmp_path / "r.yaml"
    path.write_text("query_env: true\n")
    config = load_config("maskable_ppo", path)
    assert config["timesteps"] == 0 and config["imitation"] == settings(None) and config["env"] == {}
    path.write_text("query_env: true\nn_envs: 8\neval: {episodes: 3}\n")
    with pytest.raises(ValueError, match=r"r.yaml: eval, n_envs: a query_env recipe .* does not read them"):
        load_config("maskable_ppo", path)


def test_wpb_eval_names_what_a_query_tier_model_cannot_play(tmp_path, capsys):
    from wpb_gym.cli import main as wpb

    env = QueryTierEnv(**SMALL, slots=4, word_buckets=8)
    _fresh_model(env, 0).save(tmp_path / "m.zip")
    (tmp_path / "m.env.json").write_text(json.dumps({"query_tier": True, "slots": 4, "word_buckets": 8}))
    base = ["eval", "--agents", f"m=sb3:{tmp_path / 'm.zip'}", "--episodes-per-condition", "1", "--lengths", "50",
            "--budgets", "2KB", "--tracks", "unprivileged"]
    for extra, named in ((["--regimes", "default"], "--regimes: agent 'm' .* query tier's regimes only, not default"),
                         (["--regimes", "queries_easy", "--kind-budgets", "doc=50%"],
                          "--kind-budgets: agent 'm' .* has no kind_budgets")):
        capsys.readouterr()
        assert wpb(base + extra + ["--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and re.search(named, err), err
    assert not (tmp_path / "out").exists()
    (tmp_path / "m.env.json").write_text(json.dumps({"query_tier": "true", "slots": 4, "word_buckets": 8}))
    with pytest.raises(ValueError, match="query_tier: expected true or false"):
        SB3Agent(tmp_path / "m.zip")
