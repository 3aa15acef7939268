"""Trained SB3 policies exported to the data-only format (``agents.exported``, ``wpb export``):
they decide exactly as their models, load without unpickling anything, and every malformed file
is refused in one line naming it. RLlib's are in ``test_rllib.py`` (they need its checkpoint);
the sandbox's in ``tests/evaluation/test_sandbox.py``."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from agents.exported.agent import ExportedPolicyAgent, load_policy
from agents.exported.export import ExportError, export_sb3
from agents.exported.folder import MANIFEST, WEIGHTS, PolicyFileError
from agents.sb3.agent import SB3Agent, env_kwargs_path
from wpb_gym.cli import main as wpb_main
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.evaluation.runner import run_episode

# (algorithm, policy, env arguments): every algorithm wpb train trains, over both observation layouts.
TRAINED = {
    "MaskablePPO": ("MlpPolicy", {"slots": 4, "track": "privileged"}),
    "MaskablePPO-dict": ("MultiInputPolicy", {"slots": 3, "observation_mode": "dict"}),
    "PPO": ("MlpPolicy", {"slots": 2}),
    "A2C": ("MlpPolicy", {"slots": 2, "track": "privileged"}),
    "DQN": ("MlpPolicy", {"slots": 3}),
    "RecurrentPPO": ("MlpLstmPolicy", {"slots": 2}),
}


def _train(name: str, folder: Path) -> Path:
    import torch
    from sb3_contrib import MaskablePPO, RecurrentPPO
    from stable_baselines3 import A2C, DQN, PPO

    torch.set_num_threads(1)
    classes = {"MaskablePPO": MaskablePPO, "PPO": PPO, "A2C": A2C, "DQN": DQN, "RecurrentPPO": RecurrentPPO}
    policy, env_kwargs = TRAINED[name]
    cls = classes[name.split("-")[0]]
    options = {"DQN": {"learning_starts": 0}, "A2C": {}}.get(cls.__name__, {"n_steps": 64, "batch_size": 32,
                                                                           "n_epochs": 1})
    small = {"net_arch": [16, 16]} if cls is DQN else {"net_arch": {"pi": [32, 16], "vf": [24]}}
    if cls is RecurrentPPO:
        small = {"lstm_hidden_size": 16, "n_lstm_layers": 2}
    model = cls(policy, WritePolicyBenchEnv(length=40, **env_kwargs), seed=0, device="cpu", policy_kwargs=small,
                **options)
    model.learn(128)
    path = folder / f"{name}.zip"
    model.save(path)
    env_kwargs_path(path).write_text(json.dumps(env_kwargs), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Each of TRAINED, trained 128 steps, and its export (checked by wpb export's own check)."""
    folder = tmp_path_factory.mktemp("models")
    made = {}
    for name in TRAINED:
        path = _train(name, folder)
        export_sb3(path, folder / f"{name}.policy", samples=0, episodes=0)
        made[name] = (path, folder / f"{name}.policy")
    return made


@pytest.mark.parametrize("name", list(TRAINED))
def test_an_exported_sb3_policy_decides_exactly_as_its_model_on_many_observations(models, name):
    model, exported = models[name]
    original, copy = SB3Agent(model), ExportedPolicyAgent(exported)
    env = WritePolicyBenchEnv(**TRAINED[name][1])
    space, rng = env.observation_space, np.random.default_rng(1)
    space.seed(1)
    original.restart()
    copy.restart()  # one sequence: a recurrent policy's state runs along it in both
    for _ in range(2000):
        observation, mask = space.sample(), rng.random(env.n_actions) < 0.5
        mask[0] = True
        assert copy.decide(observation, mask) == original.decide(observation, mask)
    # And played by the evaluator, action by action.
    for index in range(3):
        episode = generate_episode(make_config("default", length=80), seed=2, index=index)
        runs = [run_episode(agent, episode, 4096, original.track) for agent in (original, copy)]
        assert runs[0].actions == runs[1].actions
        assert runs[0].metrics.as_row() == runs[1].metrics.as_row()


def test_an_exported_policy_records_what_rebuilds_it_and_no_code(models):
    _, exported = models["RecurrentPPO"]
    manifest = json.loads((exported / MANIFEST).read_text(encoding="utf-8"))
    assert sorted(p.name for p in exported.iterdir()) == [MANIFEST, WEIGHTS]
    assert manifest["format"] == "wpb-policy" and manifest["library"] == "sb3"
    assert manifest["sb3"]["policy_class"] == "RecurrentActorCriticPolicy"
    assert manifest["sb3"]["lstm"] == {"hidden_size": 16, "layers": 2, "shared": False, "critic_lstm": True,
                                       "kwargs": {}}
    assert manifest["env_kwargs"] == {"track": "unprivileged", "slots": 2, "slot_order": "relevance",
                                      "observation_mode": "box", "max_expires_per_step": None}
    assert ":serialized:" not in json.dumps(manifest) and "<class" not in json.dumps(manifest)


def test_loading_an_exported_policy_unpickles_nothing(models, monkeypatch):
    import _pickle

    import torch

    def refuse(*args, **kwargs):
        raise AssertionError("something was unpickled")

    for module, names in ((pickle, ("load", "loads", "Unpickler")), (_pickle, ("load", "loads", "Unpickler")),
                          (torch, ("load",))):
        for name in names:
            monkeypatch.setattr(module, name, refuse)
    for name in TRAINED:
        agent = ExportedPolicyAgent(models[name][1])
        episode = generate_episode(make_config("default", length=30), seed=3, index=0)
        assert run_episode(agent, episode, 4096, agent.track).error is None


# ------------------------------------------------------------------------------ bad files
def _copy(exported: Path, tmp_path: Path) -> Path:
    target = tmp_path / "policy"
    target.mkdir()
    for name in (MANIFEST, WEIGHTS):
        (target / name).write_bytes((exported / name).read_bytes())
    return target


def _edit(folder: Path, change) -> None:
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    change(manifest)
    (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")


def _rewrite_weights(folder: Path, change) -> None:
    """Weights changed by ``change(tensors)``, with policy.json's sha256 made to match them
    (an attacker writes both files)."""
    import hashlib

    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / WEIGHTS))
    data = change(tensors)
    if isinstance(data, bytes):
        (folder / WEIGHTS).write_bytes(data)
    else:
        save_file(tensors, str(folder / WEIGHTS))
    (folder / WEIGHTS).chmod(0o644)  # (safetensors writes 0600: the sandbox's user could not read it)
    digest = hashlib.sha256((folder / WEIGHTS).read_bytes()).hexdigest()
    _edit(folder, lambda m: m["weights"].update(sha256=digest))


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (self.marker, "w")  # unpickled, it creates the marker file


FIRST_LAYER = "mlp_extractor.policy_net.0.weight"


def _deepen(folder: Path, sb3: dict, padding: int) -> None:
    """An architecture of many one-unit layers (few numbers, many modules), in ``policy.json``,
    and weights padded with ``padding`` numbers more, so that the size check lets it be built."""
    import torch

    _rewrite_weights(folder, lambda t: t.update(pad=torch.zeros(padding)))
    _edit(folder, lambda j: j["sb3"].update(sb3))


BAD_FILES = {
    "no policy.json": (lambda f, m: (f / MANIFEST).unlink(), r"policy\.json: cannot read"),
    "policy.json is not JSON": (lambda f, m: (f / MANIFEST).write_text("{policy", encoding="utf-8"),
                                r"policy\.json: not valid JSON"),
    "policy.json holds NaN": (lambda f, m: (f / MANIFEST).write_text('{"format": NaN}', encoding="utf-8"),
                              r"policy\.json: not valid JSON .*NaN is not a JSON number"),
    "policy.json is a pickle": (lambda f, m: (f / MANIFEST).write_bytes(pickle.dumps(_Payload(m))),
                                r"policy\.json: a pickle, not JSON"),
    "another format": (lambda f, m: _edit(f, lambda j: j.update(format="zip")), r"format is 'zip', not 'wpb-policy'"),
    "a newer format": (lambda f, m: _edit(f, lambda j: j.update(format_version=9)), r"format_version 9 is newer"),
    "a missing key": (lambda f, m: _edit(f, lambda j: j.pop("sb3")), r"policy\.json: no 'sb3'"),
    "net_arch as text": (lambda f, m: _edit(f, lambda j: j["sb3"].update(net_arch="64,64")),
                         r"policy\.json: sb3: net_arch: expected a list of layer widths .*got str '64,64'"),
    "a version as text": (lambda f, m: _edit(f, lambda j: j.update(format_version="1")),
                          r"format_version: expected an integer >= 1, got str '1'"),
    "a switch as a number": (lambda f, m: _edit(f, lambda j: j["sb3"].update(ortho_init=1)),
                             r"sb3: ortho_init: expected true or false, got int 1"),
    "an unknown policy class": (lambda f, m: _edit(f, lambda j: j["sb3"].update(policy_class="os.system")),
                                r"sb3: policy_class: expected one of MaskableActorCriticPolicy"),
    "an unknown activation": (lambda f, m: _edit(f, lambda j: j["sb3"].update(activation_fn="exec")),
                              r"sb3: activation_fn: expected one of Tanh"),
    "other layer widths": (lambda f, m: _edit(f, lambda j: j["sb3"].update(net_arch={"pi": [16, 16], "vf": [24]})),
                           r"weights\.safetensors: tensor 'mlp_extractor\.policy_net\.0\.weight' has shape \[32, 75\], "
                           r"the policy's \[16, 75\]"),
    "an architecture far larger than its weights": (
        lambda f, m: _edit(f, lambda j: j["sb3"].update(net_arch={"pi": [100000, 100000], "vf": [24]})),
        r"its architecture holds 10,00.* numbers, but .*weights\.safetensors holds .*: refused before building it"),
    "an env argument that is not the observation's": (
        lambda f, m: _edit(f, lambda j: j["env_kwargs"].update(episodes="/etc/passwd")),
        r"env_kwargs: \['episodes'\] are not env arguments that shape the observation"),
    "an env argument of the wrong type": (lambda f, m: _edit(f, lambda j: j["env_kwargs"].update(slots="2")),
                                          r"policy\.json: env_kwargs: .*slots"),
    "other env arguments than the policy's": (
        lambda f, m: _edit(f, lambda j: j["env_kwargs"].update(slots=3)),
        r"observation_space: the env its env_kwargs build has Box\(\[89\]\), the file records Box\(\[75\]\)"),
    "a tensor of the wrong dtype": (
        lambda f, m: _rewrite_weights(f, lambda t: t.update({FIRST_LAYER: t[FIRST_LAYER].double()})),
        r"weights\.safetensors: tensor 'mlp_extractor\.policy_net\.0\.weight' is float64, the policy's is float32"),
    "a tensor missing": (lambda f, m: _rewrite_weights(f, lambda t: t.pop("value_net.bias")),
                         r"weights\.safetensors: lacks 1 tensor\(s\) the policy has \(value_net\.bias\)"),
    "a tensor too many": (lambda f, m: _rewrite_weights(f, lambda t: t.update(extra=t["value_net.bias"].clone())),
                          r"weights\.safetensors: holds 1 the policy has not \(extra\)"),
    "weights that are a pickle": (lambda f, m: _rewrite_weights(f, lambda t: pickle.dumps(_Payload(m))),
                                  r"weights\.safetensors: a pickle, not safetensors; an exported policy is never "
                                  r"unpickled"),
    "weights that are torch.save's zip": (lambda f, m: _rewrite_weights(f, lambda t: _torch_saved(t)),
                                          r"weights\.safetensors: a zip archive \(torch\.save and SB3 write those"),
    "twenty thousand fully connected layers of one unit": (
        lambda f, m: _deepen(f, {"net_arch": {"pi": [1] * 20000, "vf": [1] * 20000}}, 50_000),
        r"sb3: net_arch: pi: 20,000 layers, more than the 64 a policy may have: refused before building it"),
    "weights of another export": (
        lambda f, m: _edit(f, lambda j: j["weights"].update(sha256="0" * 64)),
        r"weights\.safetensors: its sha256 is not the 0000000000000000\.\.\. that .*policy\.json records"),
    "weights cut short": (lambda f, m: _rewrite_weights(f, lambda t: _cut(f)),
                          r"weights\.safetensors: not a readable safetensors file"),
}


def _torch_saved(tensors) -> bytes:
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    return buffer.getvalue()


def _cut(folder: Path) -> bytes:
    return (folder / WEIGHTS).read_bytes()[:-100]


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_malformed_policy_file_is_refused_in_one_named_line_and_runs_nothing(models, tmp_path, capsys, case):
    damage, expected = BAD_FILES[case]
    folder = _copy(models["PPO"][1], tmp_path)
    marker = tmp_path / "unpickled"
    damage(folder, str(marker))
    with pytest.raises(PolicyFileError, match=expected):
        load_policy(folder)
    argv = ["eval", "--agents", f"policy:{folder}", "--lengths", "12", "--episodes-per-condition", "1", "--quiet"]
    capsys.readouterr()
    assert wpb_main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and lines[0].startswith("wpb eval: error: agent"), err
    assert re.search(expected, lines[0]) and str(folder) in lines[0], err
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_a_policy_of_a_hundred_thousand_lstm_layers_is_refused_before_building_them(models, tmp_path):
    # 956 bytes of policy.json and 3 MB of weights (enough numbers for the size check): building
    # the LSTM took more than 5 minutes in process, 2 minutes (the start limit) in the sandbox.
    import time

    folder = _copy(models["RecurrentPPO"][1], tmp_path)
    _deepen(folder, {"lstm": {"hidden_size": 1, "layers": 100_000, "shared": False, "critic_lstm": False,
                              "kwargs": {}}}, 1_000_000)
    started = time.monotonic()
    with pytest.raises(PolicyFileError, match=r"sb3: lstm: layers: expected an integer >= 1 and <= 64, got int 100000"):
        load_policy(folder)
    assert time.monotonic() - started < 10


def test_a_malformed_policy_file_is_refused_in_one_line_under_isolate_too(models, tmp_path, capsys):
    folder = _copy(models["PPO"][1], tmp_path)
    _rewrite_weights(folder, lambda t: t.update({FIRST_LAYER: t[FIRST_LAYER].double()}))
    argv = ["eval", "--agents", f"policy:{folder}", "--lengths", "12", "--episodes-per-condition", "1", "--isolate"]
    capsys.readouterr()
    assert wpb_main([*argv, "--accept-weaker-isolation", "--out", str(tmp_path / "run"), "--quiet"]) == 2
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("note:")]
    assert len(lines) == 1 and "is float64, the policy's is float32" in lines[0], lines


# ------------------------------------------------------------------------------ wpb export
def test_wpb_export_writes_a_policy_that_wpb_eval_scores_as_the_model(models, tmp_path, capsys):
    model, _ = models["MaskablePPO"]
    out = tmp_path / "exported"
    capsys.readouterr()
    assert wpb_main(["export", "sb3", str(model), "--out", str(out), "--samples", "200", "--episodes", "2"]) == 0
    said = capsys.readouterr().out
    assert f"-> {out}/" in said and "200 sampled observations and 2 played episodes" in said
    runs = {}
    for agents in (f"sb3:{model}", f"policy:{out}"):
        run = tmp_path / agents.split(":")[0]
        argv = ["eval", "--agents", f"x={agents}", "--tracks", "privileged", "--lengths", "40", "--quiet"]
        assert wpb_main([*argv, "--episodes-per-condition", "3", "--out", str(run)]) == 0
        runs[agents] = [line.split(",")[:-2] for line in (run / "results.csv").read_text().splitlines()]
    first, second = runs.values()
    assert first == second  # the same rows, label included, but for the config hash and commit


def test_wpb_export_replaces_only_an_exported_policy_and_only_with_force(models, tmp_path, capsys):
    model, _ = models["PPO"]
    out = tmp_path / "exported"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    argv = ["export", "sb3", str(model), "--samples", "10", "--episodes", "0"]
    capsys.readouterr()
    assert wpb_main([*argv, "--out", str(out)]) == 2
    assert f"{out}: not empty" in capsys.readouterr().err and (out / "notes.txt").exists()
    assert wpb_main([*argv, "--out", str(tmp_path / "second")]) == 0
    assert wpb_main([*argv, "--out", str(tmp_path / "second")]) == 2
    assert "an exported policy; pass --force to replace it" in capsys.readouterr().err
    assert wpb_main([*argv, "--out", str(tmp_path / "second"), "--force"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported", "second"]  # nothing staged is left


def test_wpb_export_writes_nothing_when_the_export_would_decide_otherwise(models, tmp_path, capsys, monkeypatch):
    from agents.exported import sb3 as exported_sb3

    model, _ = models["DQN"]
    monkeypatch.setattr(exported_sb3.SB3Policy, "act", lambda self, observation, mask, deterministic: 0)
    with pytest.raises(ExportError, match=r"picks action 0 where the model picks \d+ \(sampled observation \d+\)"):
        export_sb3(model, tmp_path / "out", samples=500, episodes=0)
    capsys.readouterr()
    assert wpb_main(["export", "sb3", str(model), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nothing written" in err, err
    assert list(tmp_path.iterdir()) == []


def test_wpb_export_refuses_a_policy_the_format_cannot_rebuild(tmp_path, capsys):
    from sb3_contrib import MaskablePPO
    from torch import nn

    class Activation(nn.Tanh):
        """An activation of the user's own: code the format would have to run."""

    model = MaskablePPO("MlpPolicy", WritePolicyBenchEnv(length=20), n_steps=32, batch_size=32, device="cpu",
                        policy_kwargs={"activation_fn": Activation})
    path = tmp_path / "custom.zip"
    model.save(path)
    with pytest.raises(ValueError, match="its activation is .*Activation.*; the data-only format knows torch.nn's"):
        export_sb3(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_wpb_export_names_a_model_it_cannot_read(tmp_path, capsys):
    capsys.readouterr()
    assert wpb_main(["export", "sb3", str(tmp_path / "missing.zip"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no SB3 model at" in err and not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ --data-only-models
def test_data_only_models_refuses_every_pickled_model_and_accepts_an_exported_one(models, tmp_path, capsys):
    model, exported = models["PPO"]
    base = ["eval", "--lengths", "12", "--episodes-per-condition", "1", "--budgets", "2KB", "--quiet"]
    for agents in (f"last_kb,sb3:{model}", f"rllib:{tmp_path}", f"mine=sb3:{model}"):
        capsys.readouterr()
        assert wpb_main([*base, "--agents", agents, "--data-only-models", "--out", str(tmp_path / "run")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("wpb eval: error: --data-only-models: agent") and "read from a pickle" in err, err
        assert "wpb export" in err and err.count("\n") == 1
    config = tmp_path / "leaderboard.yaml"
    config.write_text(f"agents: [{{name: sb3, path: '{model}'}}]\ndata_only_models: true\n", encoding="utf-8")
    assert wpb_main(["eval", "--config", str(config), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    assert f"'data_only_models:' in {config}: agent" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    assert wpb_main([*base, "--agents", f"last_kb,policy:{exported}", "--data-only-models", "--seed", "draw",
                     "--out", str(tmp_path / "run")]) == 0
    run = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert run["data_only_models"] is True


def test_an_rllib_policy_naming_any_torch_module_as_its_activation_is_refused(tmp_path):
    # RLlib looks an activation up with getattr(torch.nn, name) and builds one per layer:
    # "Transformer" built a 44-million-parameter nn.Transformer() for each, outside the size check.
    import hashlib
    import struct

    pytest.importorskip("ray.rllib")
    from agents.exported import spaces
    from agents.rllib.env import make_rllib_env

    env = make_rllib_env({})
    header = json.dumps({"pad": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}}).encode()
    header += b" " * (-len(header) % 8)
    weights = struct.pack("<Q", len(header)) + header + b"\0" * 64
    folder = tmp_path / "policy"
    folder.mkdir()
    (folder / WEIGHTS).write_bytes(weights)
    (folder / MANIFEST).write_text(json.dumps({
        "format": "wpb-policy", "format_version": 1, "library": "rllib", "algorithm": "PPO",
        "rllib": {"module": "MaskedPPOTorchRLModule",
                  "model_config": {"fcnet_hiddens": [1, 1], "fcnet_activation": "Transformer"}},
        "observation_space": spaces.describe(env.observation_space), "action_space": spaces.describe(env.action_space),
        "env_kwargs": {}, "weights": {"file": WEIGHTS, "sha256": hashlib.sha256(weights).hexdigest()},
    }), encoding="utf-8")
    with pytest.raises(PolicyFileError, match=r"model_config: fcnet_activation: expected one of linear, relu, .*"
                                              r"got str 'Transformer'"):
        load_policy(folder)
