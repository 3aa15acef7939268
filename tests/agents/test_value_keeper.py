"""``value_keeper``: a network distilled from causal_privileged's values, acting through the keepers' engine."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from agents.learners.value_keeper import (
    INPUTS,
    ReferenceValueKeeper,
    ValueEnsemble,
    ValueKeeper,
    ValueNetwork,
    load_network,
    save_network,
    word_inputs,
)
from agents.learners.value_training import fit_network, teacher_samples, train_value_keeper_run
from agents.learners.word_estimates import WordEstimates, fit_word_estimates
from agents.registry import make_agent
from wpb_gym.core.types import Episode
from wpb_gym.envs.observation.query_words import ContentTracker
from wpb_gym.episodes.generators.queries import generate_query_episode, query_config
from wpb_gym.evaluation.runner import run_episode

SMALL = {"endpoints": 40, "families": 4, "length": 40 + 12 * 20, "checkpoint_interval": 20,
         "queries_per_checkpoint": 40, "summary_max_bytes": 900, "max_params": 10}
CONFIG = query_config("queries_medium", **SMALL)


def _network(seed: int = 0) -> ValueNetwork:
    rng = np.random.default_rng(seed)
    return ValueNetwork([(rng.normal(size=(len(INPUTS), 8)), rng.normal(size=8)), (rng.normal(size=(8, 1)),
                                                                                    rng.normal(size=1))])


@pytest.mark.parametrize("loss", ["gaussian_nll", "mse"])
def test_teacher_samples_are_causal_privilegeds_values_and_the_fit_beats_a_constant(loss):
    x, y, decisions = [], [], 0
    rng = np.random.default_rng(0)
    episodes = [generate_query_episode(CONFIG, 0, index) for index in range(3)]
    words = fit_word_estimates(episodes)
    for episode in episodes:
        xs, ys, n = teacher_samples(episode, 2048, 0.2, rng, words)
        x += xs
        y += ys
        decisions += n
    assert decisions > 0 and len(x) >= decisions and min(y) >= 0
    target = np.log1p(np.asarray(y))
    network, error = fit_network(np.stack(x), np.asarray(y), hidden=32, epochs=80, batch_size=256,
                                 learning_rate=0.003, seed=0, loss=loss)
    assert error < 0.5 * target.var()  # the statistics explain most of the teacher's values
    # The reported error is the played network's: one output (the mean), over every sample.
    assert network.layers[-1][0].shape == (32, 1)
    predicted = np.log1p(network.values(np.stack(x)))
    assert np.mean((predicted - target) ** 2) == pytest.approx(error, rel=1e-6)


def test_an_unknown_loss_is_named(tmp_path):
    x = np.zeros((4, len(INPUTS)), dtype=np.float32)
    with pytest.raises(ValueError, match="loss 'mae': expected one of \\['gaussian_nll', 'mse'\\]"):
        fit_network(x, np.ones(4), hidden=4, epochs=1, batch_size=4, learning_rate=0.01, seed=0, loss="mae")
    with pytest.raises(ValueError, match="setting loss: 'mae'"):
        train_value_keeper_run(tmp_path / "run", env_kwargs={"regime": "queries_medium", **SMALL},
                               settings={"loss": "mae"}, progress=False)
    assert not (tmp_path / "run").exists()


def test_the_keeper_reads_only_the_stream():
    episode = generate_query_episode(CONFIG, 1, 0)
    blind = Episode(steps=episode.steps, labels={"queries": episode.labels["queries"], "critical_steps": [],
                                                  "utility_by_step": {t: 0 for t in range(len(episode))}})
    keeper = ValueKeeper()
    keeper.network = _network()
    words = sorted({w for step in episode.steps if "params" in step.observation
                    for name in step.observation["params"] for w in name.split("_")})
    rng = np.random.default_rng(1)
    keeper.words = WordEstimates(tuple(words), rng.normal(size=len(words)), 0.0, rng.normal(size=len(words)), 0.0)
    runs = [run_episode(keeper, e, 2048) for e in (episode, blind)]
    assert [(a.t, a.action.action, a.action.target_t) for a in runs[0].actions] == \
        [(a.t, a.action.action, a.action.target_t) for a in runs[1].actions]
    assert runs[0].queries == runs[1].queries


def test_a_saved_network_loads_back_to_the_same_values_and_bad_files_are_named(tmp_path):
    network = _network(3)
    words = WordEstimates(("card", "token"), np.array([0.5, -1.0]), 0.1, np.array([2.0, 0.0]), -0.2)
    path = save_network(tmp_path / "learner.json", network, {"seed": 3}, words)
    x = np.random.default_rng(0).random((5, len(INPUTS)))
    loaded, loaded_words = load_network(path)
    assert np.allclose(loaded.values(x), network.values(x)) and loaded_words.state() == words.state()
    state = json.loads(path.read_text())
    for change, message in [({"format": "other"}, "not a value network file"),
                            ({"version": 9}, "version 9"),
                            ({"version": 1}, "version 1; this code reads 2 and 3 \\(train it again"),
                            ({"version": 3.0}, "version 3.0; this code reads"),
                            ({"version": True}, "version True; this code reads"),
                            ({"members": []}, "'members' must be a non-empty list"),
                            ({"members": [[{"weight": [["1.5"]], "bias": [0.0]}]]}, "weights must be lists of numbers"),
                            ({"members": [[{"weight": [[True]], "bias": [0.0]}]]}, "weights must be lists of numbers"),
                            ({"words": {"vocabulary": ["card"]}}, "bad.json: 'words': expected an object"),
                            ({"inputs": ["x"]}, "trained on inputs"),
                            ({"members": [state["members"][0], [{"weight": [[1.0]], "bias": [0.0]}]]},
                             "member 1: layer 0: expected weights")]:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**state, **change}))
        with pytest.raises(ValueError, match=message):
            load_network(bad)
    # An integer past float64 is refused as a number, not left to overflow (in a layer, in the words).
    huge = "1" + "0" * 400
    for key in ("members", "words"):
        bad = tmp_path / "bad.json"
        text = json.dumps(state)
        marker = '"bias": [' if key == "members" else '"integration_weights": ['
        bad.write_text(text.replace(marker, marker + huge + ", ", 1))
        with pytest.raises(ValueError, match="bad.json: .*must be (lists of )?numbers"):
            load_network(bad)
    bad.write_text(json.dumps({k: v for k, v in state.items() if k != "words"}))
    with pytest.raises(ValueError, match="bad.json: no 'words' entry"):
        load_network(bad)
    (tmp_path / "garbage.json").write_text("not json")
    with pytest.raises(ValueError, match="garbage.json: not a value network file"):
        load_network(tmp_path / "garbage.json")
    with pytest.raises(FileNotFoundError, match="no such file"):
        make_agent("value_keeper", path=str(tmp_path / "missing.json"))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
def test_a_network_whose_values_overflow_is_refused_when_it_plays(tmp_path):
    width = len(INPUTS)
    wild = ValueNetwork([(np.full((width, 1), 1e308), np.zeros(1))])
    path = save_network(tmp_path / "wild.json", ValueEnsemble([wild, ValueNetwork([(np.full((width, 1), -1e308),
                                                                                   np.zeros(1))])]), {})
    keeper = make_agent("value_keeper", path=str(path))
    with pytest.raises(ValueError, match="wild.json: the network's values overflow"):
        run_episode(keeper, generate_query_episode(CONFIG, 3, 0), 2048)
    with pytest.raises(ValueError, match=r"layer 0: expected weights \(\d+, n\) and bias \(n,\), n >= 1"):
        ValueNetwork([(np.zeros((width, 0)), np.zeros(0)), (np.zeros((0, 1)), np.zeros(1))])


def test_an_ensemble_plays_the_mean_of_its_members_log_values_and_reads_version_2_files(tmp_path):
    members = [_network(1), _network(2), _network(3)]
    x = np.random.default_rng(4).random((6, len(INPUTS)))
    mean = np.mean([m.log_values(x) for m in members], axis=0)
    assert np.allclose(ValueEnsemble(members).values(x), np.maximum(np.expm1(mean), 0.0))
    assert np.allclose(ValueEnsemble(members[:1]).values(x), members[0].values(x))
    saved = save_network(tmp_path / "three.json", ValueEnsemble(members), {})
    loaded, _ = load_network(saved)
    assert len(loaded.members) == 3 and np.array_equal(loaded.values(x), ValueEnsemble(members).values(x))
    # A file written before ensembles (version 2: one network under "layers") plays as before.
    path = save_network(tmp_path / "learner.json", members[0], {})
    state = json.loads(path.read_text())
    old = {**{k: v for k, v in state.items() if k != "members"}, "version": 2, "layers": state["members"][0]}
    (tmp_path / "old.json").write_text(json.dumps(old))
    loaded, _ = load_network(tmp_path / "old.json")
    assert len(loaded.members) == 1 and np.allclose(loaded.values(x), members[0].values(x))


@pytest.mark.parametrize("name,value,expected", [
    *(("members", v, "a whole number") for v in (0, -1, 2.5, "3", True, np.int64(0))),
    ("hidden", 0, "a whole number"), ("epochs", 1.5, "a whole number"), ("batch_size", 0, "a whole number"),
    ("timesteps", "100", "a whole number"), ("validation_episodes", 0, "a whole number"),
    ("held_share", "x", "a number in [0.0, 1.0]"), ("held_share", 1.5, "a number in [0.0, 1.0]"),
    ("learning_rate", 0, "a number in (0.0, 1.0]"), ("learning_rate", 1e30, "a number in (0.0, 1.0]"),
    ("learning_rate", float("nan"), "a number in (0.0, 1.0]"),
])
def test_a_bad_setting_is_named_before_any_work(tmp_path, name, value, expected):
    with pytest.raises(ValueError, match=re.escape(f"setting {name}: {value!r}; expected {expected}")):
        train_value_keeper_run(tmp_path / "run", env_kwargs={"regime": "queries_medium", **SMALL},
                               settings={name: value}, progress=False)
    assert not (tmp_path / "run").exists()


def test_a_run_that_fails_leaves_the_model_trained_before_whole(tmp_path, monkeypatch):
    from agents.learners import value_training

    env = {"regime": "queries_medium", "budget_bytes": 2048, **SMALL}
    tiny = {"timesteps": 200, "epochs": 2, "validation_episodes": 1, "members": 2, "hidden": 8}
    train_value_keeper_run(tmp_path / "run", env_kwargs=env, settings=tiny, progress=False)
    before = {name: (tmp_path / "run" / name).read_bytes() for name in ("learner.json", "config.json")}

    def failing(*args, **kwargs):
        raise RuntimeError("the validation failed")

    monkeypatch.setattr(value_training, "run_episode", failing)
    with pytest.raises(RuntimeError, match="the validation failed"):
        train_value_keeper_run(tmp_path / "run", env_kwargs=env, seed=1, settings=tiny, progress=False)
    assert {name: (tmp_path / "run" / name).read_bytes() for name in before} == before


def test_training_writes_a_learner_that_wpb_eval_plays(tmp_path, capsys):
    from wpb_gym.cli import main

    saved = train_value_keeper_run(tmp_path / "run", env_kwargs={"regime": "queries_medium", "budget_bytes": 2048,
                                                                 **SMALL},
                                   seed=1, settings={"timesteps": 400, "epochs": 5, "validation_episodes": 2},
                                   progress=False)
    assert saved["timesteps"] >= 400 and saved["samples"] > 0 and 0 <= saved["validation_query_accuracy"] <= 1
    keeper = make_agent("value_keeper", path=str(tmp_path / "run" / "learner.json"))
    assert len(keeper.network.members) == saved["settings"]["members"] == 5
    x = np.random.default_rng(0).random((4, len(INPUTS)))
    outputs = [member.log_values(x).tobytes() for member in keeper.network.members]
    assert len(set(outputs)) == 5  # each member from its own initialisation
    episode = generate_query_episode(CONFIG, 777, 0)
    assert run_episode(keeper, episode, 2048).queries.correct > 0
    # The tier's contracts carry words: the saved model holds their estimates, and the keeper
    # feeds them to its network (two of its inputs move with them).
    assert keeper.words is not None and len(keeper.words.vocabulary) > 20
    assert np.abs(keeper.words.burst_weights).max() > 0.1 and np.abs(keeper.words.integration_weights).max() > 0.1
    content = ContentTracker()
    for step in episode.steps:
        content.step(step.observation)
    assert len({word_inputs(keeper.words, content, api) for api in content.first}) > 5
    assert run_episode(keeper, episode, 2048, isolate=True).queries == run_episode(keeper, episode, 2048).queries
    code = main(["train", "--algo", "value_keeper", "--env-kwargs", "regime=queries_medium", "--timesteps", "0",
                 "--out", str(tmp_path / "x")])
    assert code == 2 and "--timesteps" in capsys.readouterr().err
    code = main(["train", "--algo", "value_keeper", "--env-kwargs", "regime=queries_mediun", "--out",
                 str(tmp_path / "y")])
    assert code == 2 and "queries_mediun" in capsys.readouterr().err
    # A tier's knobs are its generator options: checked as such, not refused as unknown.
    code = main(["train", "--algo", "value_keeper", "--env-kwargs", "regime=queries_easy", "traffic_scale=-1",
                 "--out", str(tmp_path / "z")])
    err = capsys.readouterr().err
    assert code == 2 and "QueryTierConfig.traffic_scale: expected >= 0, got -1" in err and "unknown" not in err
    assert not (tmp_path / "z").exists()


def test_training_on_episode_files_plays_them_whatever_their_regime(tmp_path):
    # Real drift's files hold regime real_queries:SOURCE: the generated default must not filter them out.
    from wpb_gym.episodes.jsonl import write_jsonl

    easy = query_config("queries_easy", **SMALL)
    train, held_out = tmp_path / "train.jsonl", tmp_path / "heldout.jsonl"
    write_jsonl(train, [generate_query_episode(easy, 0, i) for i in range(2)])
    write_jsonl(held_out, [generate_query_episode(easy, 5, 0)])
    saved = train_value_keeper_run(tmp_path / "run", env_kwargs={"episodes": str(train), "budget_bytes": 2000},
                                   eval_episodes=held_out, seed=0,
                                   settings={"timesteps": 300, "epochs": 2, "validation_episodes": 1}, progress=False)
    assert saved["episodes"] >= 1 and 0 <= saved["validation_query_accuracy"] <= 1


@pytest.mark.parametrize("budget", [1024, 4096])
def test_kept_input_rows_decide_as_rows_made_afresh(budget):
    episode = generate_query_episode(CONFIG, 3, 0)
    words = fit_word_estimates([generate_query_episode(CONFIG, 0, 0)])
    actions = []
    for cls in (ValueKeeper, ReferenceValueKeeper):
        keeper = cls()
        keeper.network, keeper.words = _network(0), words
        run = run_episode(keeper, episode, budget)
        actions.append([(a.t, a.action.action, a.action.target_t, a.action.reason) for a in run.actions])
    assert actions[0] == actions[1]
    assert any(reason == "evicted" for *_, reason in actions[0])  # the values were compared, not just kept
