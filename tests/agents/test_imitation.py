"""Imitation (DAgger) before RL, the per-regime recipes of ``wpb train``, and what they save."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from sb3_contrib import MaskablePPO

from agents.scripted.feature_rules import BreakingRule, play
from agents.sb3.imitation import (
    Dataset,
    HindsightTeacher,
    counterfactual_states,
    dagger,
    play_round,
    settings,
    validate,
)
from agents.sb3.train import RECIPE_FOLDER, RECIPES, load_config, recipe_path
from wpb_gym.cli import main as wpb
from wpb_gym.envs.env import WritePolicyBenchEnv

SHORT = {"regime": "breaking", "length": 60, "api_pool": 16, "budget_bytes": 10240, "dense_reward": True}


def test_settings_merge_defaults_and_name_what_is_wrong():
    merged = settings({"rounds": 2, "teacher": "hindsight"})
    assert merged["rounds"] == 2 and merged["teacher"] == "hindsight" and merged["epochs"] >= 1
    for bad, message in [
        ({"round": 2}, r"unknown setting\(s\) \['round'\]"),
        ({"teacher": "oracle"}, "teacher: expected one of"),
        ({"episodes": 0}, "episodes: expected a positive int"),
        ({"rounds": True}, "rounds: expected a non-negative int"),
        ({"beta": 1.5}, "beta: expected a number in range"),
        ({"counterfactuals": -1}, "counterfactuals: expected a non-negative int"),
        ({"counterfactuals": 2, "teacher": "hindsight"}, "counterfactuals need the breaking_rule teacher"),
    ]:
        with pytest.raises(ValueError, match=message):
            settings(bad)


def test_the_regimes_where_eviction_matters_have_their_own_recipe():
    for (algo, regime), name in RECIPES.items():
        assert recipe_path(algo, regime) == RECIPE_FOLDER / name and (RECIPE_FOLDER / name).is_file()
        config = load_config(algo, recipe_path(algo, regime))
        if config["query_env"]:  # the query tier's: its own env and teacher (test_query_imitation.py)
            assert regime.startswith("queries_")
            continue
        assert config["imitation"]["teacher"] == "breaking_rule"
        assert config["env"].get("max_expires_per_step") is None  # EXPIRE stays available
    assert recipe_path("maskable_ppo", "default") == RECIPE_FOLDER / "maskable_ppo.yaml"
    assert recipe_path("ppo", "contract_mix") is None  # ppo has none: its defaults, with a note
    assert load_config("maskable_ppo")["imitation"] is None


def test_a_bad_imitation_section_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"imitation": {"teacher": "breaking_rule", "epoch": 3}}))
    with pytest.raises(ValueError, match=rf"{path}: imitation: unknown setting\(s\) \['epoch'\]"):
        load_config("maskable_ppo", path)
    path.write_text(yaml.safe_dump({"imitation": ["breaking_rule"]}))
    with pytest.raises(ValueError, match=rf"{path}: imitation: expected a mapping"):
        load_config("maskable_ppo", path)


def test_the_hindsight_teacher_keeps_exactly_the_critical_steps_when_they_fit():
    env = WritePolicyBenchEnv(regime="contract_mix", budget_bytes=1 << 22)
    teacher = HindsightTeacher(env)
    for index in range(3):
        metrics = play(env, teacher, options={"episode_index": index})
        assert metrics["precision"] == 1.0 and metrics["recall"] == 1.0


def test_the_hindsight_teacher_makes_room_only_by_dropping_non_critical_items():
    env = WritePolicyBenchEnv(regime="mixed_sizes", budget_bytes=2048)
    teacher = HindsightTeacher(env)
    obs, _ = env.reset(options={"episode_index": 0})
    critical = set(env.episode.critical_steps)
    done, expired = False, []
    while not done:
        # A student's mistakes first: everything written while it fits.
        action = 1 if env.t < 40 and env.action_masks()[1] else teacher(obs)
        if action >= 2 + env.K:
            expired.append(env.slot_timesteps[action - 2 - env.K])
        obs, _, done, _, _ = env.step(action)
    assert expired and not critical & set(expired)


def test_dagger_teaches_a_policy_network_breaking_detectors_rule():
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    model = MaskablePPO("MlpPolicy", make_vec_env(WritePolicyBenchEnv, 1, seed=0, env_kwargs=SHORT), seed=0)
    validation = {**SHORT, "episode_seed": 1_000_003, "dense_reward": False}
    config = {"rounds": 2, "episodes": 24, "epochs": 6, "validation_episodes": 6}
    history = dagger(model, {**SHORT, "episode_seed": 0}, validation, config, seed=0)
    assert [h["round"] for h in history] == [0, 1, 2]
    # Every round's data is kept: each adds its 24 x 60 decisions and the EXPIREs the rule chose.
    samples = [h["samples"] for h in history]
    assert samples[0] >= 24 * 60 and all(b >= a + 24 * 60 for a, b in zip(samples, samples[1:]))
    # On held-out episodes the student decides as the rule does.
    env = WritePolicyBenchEnv(**{**SHORT, "episode_seed": 777})
    rule = BreakingRule(env)
    agree = total = 0
    for index in range(6):
        obs, _ = env.reset(options={"episode_index": index})
        done = False
        while not done:
            action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
            agree += int(action) == rule(obs)
            total += 1
            obs, _, done, _, _ = env.step(rule(obs))
    assert agree / total > 0.97
    envs = [WritePolicyBenchEnv(**{**SHORT, "episode_seed": 777, "episode_order": "cycle"}) for _ in range(2)]
    expected = np.mean([play(env, rule, options={"episode_index": i})["f1"] for i in range(6)])
    assert validate(model, envs, 6) == pytest.approx(expected, abs=0.03)


def test_under_a_binding_limit_the_teachers_labels_are_actions_the_mask_allows():
    # The rule judges the byte budget alone: where a kind's limit refuses its WRITE, the label is
    # SKIP (the env plays a refused action so), never a masked action whose loss would swamp the rest.
    kwargs = {"regime": "breaking", "length": 100, "kind_budgets": "endpoint=5%", "budget_bytes": 10240}
    envs = [WritePolicyBenchEnv(**kwargs, episode_seed=seed) for seed in range(2)]
    model = MaskablePPO("MlpPolicy", envs[0], seed=0, device="cpu")
    data, _ = play_round(model, envs, [BreakingRule(env) for env in envs], 4, 1.0, np.random.default_rng(0))
    assert all(mask[label] for mask, label in zip(data.masks, data.actions, strict=True))
    rule = BreakingRule(envs[0])
    refused = 0
    for obs, mask in zip(data.observations, data.masks, strict=True):
        refused += not mask[rule(obs)]
    assert refused > 0  # the limit binds: the rule alone would have named refused actions
    variants = counterfactual_states(data, rule, 2, np.random.default_rng(1))
    assert all(mask[label] for mask, label in zip(variants.masks, variants.actions, strict=True))


def test_counterfactual_states_vary_the_contract_changes_and_take_the_rules_labels():
    env = WritePolicyBenchEnv(**{**SHORT, "episode_seed": 3})
    rule = BreakingRule(env)
    data = Dataset([], [], [], [])
    for index in range(12):
        obs, _ = env.reset(options={"episode_index": index})
        done = False
        while not done:
            data.extend(Dataset([obs], [env.action_masks()], [rule(obs)], [0.0]))
            obs, _, done, _, _ = env.step(rule(obs))
    changed, columns, flags = rule.contract_change_features
    out = counterfactual_states(data, rule, 4, np.random.default_rng(0))
    sources = [(o, m) for o, m in zip(data.observations, data.masks, strict=True) if o[changed]]
    assert len(out.actions) == 4 * len(sources) > 300
    assert out.actions == [rule(o) for o in out.observations] and np.isnan(out.returns).all()
    others = np.ones(len(data.observations[0]), dtype=bool)
    others[columns] = False
    combinations = set()
    for k, variant in enumerate(out.observations):
        source, mask = sources[k // 4]
        assert np.array_equal(variant[others], source[others]) and out.masks[k] is mask  # only the changes vary
        shown = variant[columns]
        assert shown.any() and np.all(shown[flags] != 0.5) and np.all((shown >= 0) & (shown <= 1))
        combinations.add(tuple(shown > 0))
    assert len(combinations) > 100  # of the 255: combinations the stream itself rarely shows
    assert {0, 1} <= set(out.actions)  # both the rule's answers are taught


def test_dagger_with_counterfactuals_trains_on_them_without_a_return():
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    kwargs = {**SHORT, "episode_seed": 0}
    histories = []
    for copies in (0, 2):
        model = MaskablePPO("MlpPolicy", make_vec_env(WritePolicyBenchEnv, 1, seed=0, env_kwargs=SHORT), seed=0)
        config = {"rounds": 0, "episodes": 4, "epochs": 1, "validation_episodes": 2, "counterfactuals": copies}
        histories.append(dagger(model, kwargs, {**kwargs, "episode_seed": 1}, config, seed=0)[0])
        assert np.isfinite(histories[-1]["loss"])  # NaN returns are left out of the value loss
    assert histories[1]["samples"] > histories[0]["samples"] + 4 * 10


def test_wpb_train_runs_the_regimes_recipe_imitation_first(tmp_path, capsys, monkeypatch):
    import agents.sb3.train

    # The shipped recipe, made small, in a recipe folder of its own.
    recipe = yaml.safe_load((RECIPE_FOLDER / "maskable_ppo_imitation.yaml").read_text())
    recipe["imitation"].update(rounds=1, episodes=4)
    recipe.update(n_envs=2, timesteps=256, eval={"episodes": 2, "every_steps": 128}, checkpoint_every_steps=128)
    recipe["hyperparams"].update(n_steps=64, batch_size=64)
    folder = tmp_path / "recipes"
    folder.mkdir()
    config = folder / "maskable_ppo_imitation.yaml"
    config.write_text(yaml.safe_dump(recipe))
    monkeypatch.setattr(agents.sb3.train, "RECIPE_FOLDER", folder)
    out = tmp_path / "run"
    capsys.readouterr()
    argv = ["train", "--algo", "maskable_ppo", "--out", str(out)]
    assert wpb([*argv, "--env-kwargs", "regime=breaking", "length=30", "api_pool=8"]) == 0
    assert f"trained maskable_ppo ({config})" in capsys.readouterr().out  # no --config: the regime's recipe, said so
    saved = json.loads((out / "config.json").read_text())
    assert [h["round"] for h in saved["imitation_history"]] == [0, 1]
    assert saved["config"]["hyperparams"]["n_steps"] == 64
    for name in ("imitation_model.zip", "imitation_model.env.json", "best_model.zip", "final_model.zip"):
        assert (out / name).is_file(), name


def _run_recipe(tmp_path, recipe, algo: str = "maskable_ppo", out: str = "run", exits: int = 0):
    """``wpb train --algo ALGO --config`` the recipe (written to a file, returned) on short
    ``breaking`` episodes into ``tmp_path / out``."""
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump(recipe))
    argv = ["train", "--algo", algo, "--config", str(config), "--out", str(tmp_path / out), "--quiet"]
    assert wpb([*argv, "--env-kwargs", "regime=breaking", "length=30", "api_pool=8"]) == exits
    return config


def test_plain_ppo_imitates_without_masks_then_trains(tmp_path):
    from stable_baselines3 import PPO

    recipe = yaml.safe_load((RECIPE_FOLDER / "maskable_ppo_imitation.yaml").read_text())
    recipe["imitation"].update(rounds=1, episodes=4, epochs=2)
    recipe.update(n_envs=2, timesteps=128, eval={"episodes": 2, "every_steps": 128}, checkpoint_every_steps=128)
    recipe["hyperparams"].update(n_steps=64, batch_size=64)
    _run_recipe(tmp_path, recipe, algo="ppo")
    history = json.loads((tmp_path / "run" / "config.json").read_text())["imitation_history"]
    assert [h["round"] for h in history] == [0, 1] and all(np.isfinite(h["loss"]) for h in history)
    assert isinstance(PPO.load(tmp_path / "run" / "imitation_model.zip").policy, PPO.policy_aliases["MlpPolicy"])


def test_imitation_refuses_what_it_cannot_teach(tmp_path, capsys):
    recipe = yaml.safe_load((RECIPE_FOLDER / "maskable_ppo_imitation.yaml").read_text())
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump(recipe))
    capsys.readouterr()
    argv = ["train", "--algo", "a2c", "--config", str(config), "--out", str(tmp_path / "a"), "--quiet"]
    assert wpb(argv) == 2
    assert "imitation: a2c cannot start from imitation" in capsys.readouterr().err
    argv = ["train", "--algo", "maskable_ppo", "--config", str(config), "--out", str(tmp_path / "b"), "--quiet"]
    assert wpb([*argv, "--env-kwargs", "observation_mode=dict"]) == 2
    assert "teachers read box observations" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_recipe_of_zero_rl_steps_keeps_the_imitated_model(tmp_path, capsys):
    # The real-drift recipe stops after imitation: the best model is the student itself.
    recipe = yaml.safe_load((RECIPE_FOLDER / "maskable_ppo_real.yaml").read_text())
    assert recipe["timesteps"] == 0 and recipe["imitation"]["teacher"] == "breaking_rule"
    recipe["imitation"].update(rounds=1, episodes=2, epochs=1)
    recipe.update(n_envs=2, eval={"episodes": 2, "every_steps": 128})
    _run_recipe(tmp_path, recipe)
    out = tmp_path / "run"
    saved = json.loads((out / "config.json").read_text())
    assert saved["timesteps"] == 0 and [h["round"] for h in saved["imitation_history"]] == [0, 1]
    student, best = MaskablePPO.load(out / "imitation_model.zip"), MaskablePPO.load(out / "best_model.zip")
    for a, b in zip(student.policy.parameters(), best.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    # Imitation trains with its own Adam: the student does not depend on the policy's optimizer
    # (``wpb train``'s fused default), so models of this recipe are those of SB3's Adam loop.
    recipe["hyperparams"]["policy_kwargs"]["optimizer_kwargs"] = {"eps": 1e-5, "fused": False}
    _run_recipe(tmp_path, recipe, out="loop")
    loop = MaskablePPO.load(tmp_path / "loop" / "best_model.zip")
    assert loop.policy.optimizer.defaults["fused"] is False and best.policy.optimizer.defaults["fused"] is True
    for a, b in zip(loop.policy.parameters(), best.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    # Without imitation a run needs RL steps, and the error names the file.
    del recipe["imitation"]
    capsys.readouterr()
    config = _run_recipe(tmp_path, recipe, out="refused", exits=2)
    assert not (tmp_path / "refused").exists()
    assert f"{config}: timesteps: expected an integer >= 1, got 0" in capsys.readouterr().err
