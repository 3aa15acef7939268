"""wpb sweep on Ray Tune: the same table as the same trials run one after another without Ray."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("ray.tune")

from agents.sweep import run_baselines, run_trial, trials  # noqa: E402
from wpb_gym.cli import main  # noqa: E402
from wpb_gym.cli.sweep import sweep_settings  # noqa: E402

SWEEP = """\
algos: [epsilon_greedy]
regimes: [default, breaking]
seeds: [0, 1]
timesteps: 400
eval: {episodes: 3, seed: 777, budgets: [10KB], tracks: [unprivileged], baselines: [change_detector]}
"""


def wpb_sweep(*argv: str) -> subprocess.CompletedProcess:
    # A process of its own: Ray is started there, not in the test process (whose later
    # process pools a Ray started and stopped here could break).
    return subprocess.run([sys.executable, "-m", "wpb_gym.cli", "sweep", *argv], capture_output=True, text=True)


def test_a_two_by_two_sweep_on_ray_equals_the_trials_run_without_ray(tmp_path):
    from agents.sweep import collect

    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP)
    done = wpb_sweep(str(path), "--out", str(tmp_path / "ray"), "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    # --quiet: the table and nothing else, nothing of Tune's and no notice of Ray's on stderr.
    assert done.stderr == "" and done.stdout.startswith("f1 on held-out episodes"), done.stdout[:500] + done.stderr
    settings = sweep_settings(str(path))
    assert len(trials(settings)) == 4
    for trial in trials(settings):  # the same trials, one after another, no Ray
        run_trial(trial, settings, str(tmp_path / "plain"))
    baselines = [row for regime in settings["regimes"] for row in run_baselines(settings, regime)]
    table = collect(settings, tmp_path / "plain", baselines)
    assert done.stdout == table
    assert (tmp_path / "ray" / "results.csv").read_bytes() == (tmp_path / "plain" / "results.csv").read_bytes()
    assert (tmp_path / "ray" / "table.md").read_text() == table and "| breaking | 200 | 10240 |" in table
    for trial in trials(settings):
        assert (tmp_path / "ray" / "trials" / trial.name / "learner.json").is_file()
    # A finished sweep resumes to the same table (Tune's restore finds every trial done).
    again = wpb_sweep(str(path), "--out", str(tmp_path / "ray"), "--resume", "--quiet")
    assert again.returncode == 0, again.stderr[-2000:]
    assert (tmp_path / "ray" / "table.md").read_text() == table


def test_bad_sweeps_are_named_before_ray_starts(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    for text, named in [
        ("algos: [sac]\n", "s.yaml: algos: unknown 'sac'"),
        ("seeds: [-1]\n", "s.yaml: seeds: expected an integer >= 0"),
        ("hyperparams: {learning_rate: 0.001}\n", "s.yaml: hyperparams: expected a mapping of names to non-empty"),
        ("eval: {episode: 3}\n", "s.yaml: eval: unknown setting(s) ['episode']"),
        ("eval: {baselines: [nobody]}\n", "s.yaml: eval.baselines:"),
        ("env: {regime: breaking}\n", "s.yaml: env: regime is set by regimes"),
        ("regime: [default]\n", "unknown setting(s) ['regime']"),
    ]:
        path.write_text(text)
        assert main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert named in err and len(err.strip().splitlines()) == 1, err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("")
    path.write_text(SWEEP)
    assert main(["sweep", str(path), "--out", str(tmp_path / "busy")]) == 2
    assert "the folder is not empty; continue its sweep with --resume" in capsys.readouterr().err


# ---------------------------------------------------------------- refused before Ray starts
@pytest.fixture
def no_ray(monkeypatch):
    """Ray must not start: every check below comes first."""
    import ray

    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray, "init", refuse)


def refused(tmp_path, capsys, text: str, *extra: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--quiet", *extra]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()
    return err


def test_hyperparameters_for_bandit_learners_are_refused_by_name(tmp_path, capsys, no_ray):
    for algos in ("[epsilon_greedy]", "[maskable_ppo, bandit_ucb]"):
        err = refused(tmp_path, capsys, f"algos: {algos}\nhyperparams: {{epsilon: [0.5, 0.9]}}\n")
        assert "s.yaml: hyperparams: epsilon would be tried on the SB3 algorithms only" in err
        assert "bandit learners (" in err and "take none" in err


def test_bad_sb3_hyperparameters_and_env_values_are_named_before_ray_starts(tmp_path, capsys, no_ray):
    ppo = "algos: [maskable_ppo]\nseeds: [0]\ntimesteps: 64\n"
    for text, named in [
        (ppo + "hyperparams: {n_stepz: [16]}\n",
         "s.yaml: hyperparams.n_stepz: not a parameter of MaskablePPO (algos: maskable_ppo) (did you mean 'n_steps'?)"),
        (ppo + "hyperparams: {learning_rate: [1e-3]}\n",
         "s.yaml: hyperparams.learning_rate: '1e-3' for maskable_ppo: expected a number, got text (YAML reads 1e-3"),
        (ppo + "hyperparams: {gamma: [0.9, fast]}\n",
         "s.yaml: hyperparams.gamma: 'fast' for maskable_ppo: expected a number, like its default 0.99"),
        (ppo + "hyperparams: {n_steps: [16.5]}\n",
         "s.yaml: hyperparams.n_steps: 16.5 for maskable_ppo: expected an integer"),
        (ppo + "hyperparams: {seed: [1]}\n", "s.yaml: hyperparams.seed: set by the sweep's trials"),
        (ppo + "hyperparams: {policy_kwargs: [{net_arch: x}]}\n",
         "s.yaml: hyperparams (maskable_ppo on regime default with {'policy_kwargs': {'net_arch': 'x'}}): "
         "hyperparams or policy of MaskablePPO:"),
        (ppo + "hyperparams: {policy_kwargs: [{net_arch: [-1]}]}\n",  # refused by torch, not SB3
         "hyperparams or policy of MaskablePPO: Trying to create tensor with negative dimension"),
        ("algos: [maskable_ppo, dqn]\nhyperparams: {gae_lambda: [0.9]}\n",
         "s.yaml: hyperparams.gae_lambda: not a parameter of DQN (algos: dqn)"),
        (ppo + "env: {length: abc}\n",
         "s.yaml: env (maskable_ppo on regime default): length must be a positive int, got 'abc'"),
        ("algos: [bandit_ucb]\nenv: {slots: 0}\n", "s.yaml: env (bandit_ucb on regime default): slots must be"),
        (ppo + "regimes: [breaking]\nenv: {observation_mode: dict}\n",
         "s.yaml: env: observation_mode: the recipe of maskable_ppo on regime breaking starts from imitation"),
        (ppo + "env: {episodes: x.jsonl}\n", "s.yaml: env: episodes is not for a sweep"),
        (ppo + "env: {episode_seed: 3}\n", "s.yaml: env: episode_seed is set by each trial's seed"),
        (ppo + "env: {track: oracle}\n", "s.yaml: env: track: expected one of unprivileged, privileged"),
    ]:
        assert named in refused(tmp_path, capsys, text)


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ("[0.001, 0.001]", "hyperparams.learning_rate: 0.001 is given more than once"),
        ("[0.001, 0.0003, 1.0e-3]", "hyperparams.learning_rate: 0.001 is given more than once"),
        ("[1, 1.0]", "hyperparams.learning_rate: 1.0 is given more than once"),
    ],
)
def test_a_repeated_hyperparameter_value_is_refused_before_anything_trains(tmp_path, capsys, no_ray, values, named):
    """learning_rate: [0.001, 0.001] used to train both trials, then exit 2 on the duplicate rows
    it had written: now refused up front, naming the key and the value."""
    err = refused(tmp_path, capsys, f"algos: [maskable_ppo]\nseeds: [0]\nhyperparams: {{learning_rate: {values}}}\n")
    assert f"s.yaml: {named} (each value may appear once)" in err, err


def test_a_trial_that_fails_on_ray_is_one_line_naming_it_and_its_own_error():
    from types import SimpleNamespace

    from agents.sweep import Trial, failure_message

    class RayTaskError(Exception):  # Ray's wrapper: coloured, its pid, then the trial's traceback
        pass

    coloured = "\x1b[36mray::ImplicitFunc.train()\x1b[39m (pid=1630, ip=192.0.2.2)\n  File x.py\nMemoryError: out"
    wrapper = RayTaskError(coloured)
    wrapper.cause = ValueError("hyperparams: MaskablePPO has no parameter ['x']")
    trial = {"algo": "maskable_ppo", "regime": "default", "seed": 1, "hyperparams": [["gamma", 0.9]]}
    failed = SimpleNamespace(error=wrapper, config={"trial": trial}, path="/runs/s/tune/sweep/t0")
    message = failure_message([failed], 4)
    name = Trial("maskable_ppo", "default", 1, (("gamma", 0.9),)).name
    assert message.startswith(f"1 of 4 trial(s) failed on Ray; {name}: ValueError: hyperparams: MaskablePPO has")
    assert "(log: /runs/s/tune/sweep/t0/error.txt)" in message and "--resume" in message
    without_cause = SimpleNamespace(error=RayTaskError(coloured), config={"trial": trial}, path=None)
    message = failure_message([without_cause, failed], 2)  # the wrapper's last line, without its colours
    assert message.startswith(f"2 of 2 trial(s) failed on Ray; {name}: RayTaskError: MemoryError: out;")
    assert "\x1b" not in message and "\n" not in message


def test_unknown_references_are_refused_listing_the_known_agents(tmp_path, capsys, no_ray):
    base = "algos: [epsilon_greedy]\neval: {tracks: [unprivileged], baselines: [change_detector, no_mem], "
    for references, named in [
        ("[nobody]", "s.yaml: eval.references: unknown agent 'nobody'; known: the baselines change_detector, no_mem"),
        ("[change_detectr]", "unknown agent 'change_detectr' (did you mean 'change_detector'?)"),
        ("[change_detector@privilegd]", "'change_detector@privilegd': unknown track 'privilegd'"),
        ("[change_detector@privileged]", "eval.tracks (unprivileged) lacks the privileged track"),
        ("[best@privileged]", "eval.tracks (unprivileged) lacks the privileged track"),
    ]:
        assert named in refused(tmp_path, capsys, base + f"references: {references}}}\n")
    both = "algos: [epsilon_greedy]\neval: {tracks: [unprivileged, privileged], baselines: [change_detector, "
    for rest, named in [
        ("priority_threshold], references: [priority_threshold]}",
         "'priority_threshold': priority_threshold is a privileged agent, not run on the unprivileged track where "
         "the learned agents are compared; give priority_threshold@privileged"),
        ("no_mem], references: [best@privileged]}", "none of eval.baselines (change_detector, no_mem) is a privileged"),
        ("sb3]}", "s.yaml: eval.baselines: sb3 (sb3) cannot be built by name"),
    ]:
        assert named in refused(tmp_path, capsys, both + rest + "\n")
    err = refused(tmp_path, capsys, "eval: {tracks: [unprivileged], baselines: [priority_greedy]}\n")
    assert "eval.baselines: priority_greedy is a privileged agent: it runs on the privileged track only" in err
    # Without references, a privileged baseline is compared on its own track: none is dropped.
    from agents.sweep import default_references

    settings = sweep_settings_of(tmp_path, both + "priority_threshold, oracle_optimal]}\n")
    assert settings["eval"]["references"] == default_references(settings)
    assert default_references(settings) == ["change_detector", "priority_threshold@privileged",
                                            "oracle_optimal@privileged"]


def sweep_settings_of(tmp_path, text: str) -> dict:
    path = tmp_path / "ok.yaml"
    path.write_text(text)
    return sweep_settings(str(path))


def test_more_cpus_per_trial_than_ray_has_is_refused_before_trials_start(tmp_path, capsys, monkeypatch, no_ray):
    import ray

    import agents.sweep as sweep
    from agents.sweep import local_cpus, run_sweep

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    too_many = int(local_cpus()) + 1
    err = refused(tmp_path, capsys, f"algos: [epsilon_greedy]\ncpus_per_trial: {too_many}\n")
    assert f"s.yaml: cpus_per_trial: {too_many} CPUs per trial, but this machine's Ray has" in err
    assert f"expected at most {too_many - 1}" in err
    # With --address, the cluster's nodes once connected, before any trial: one of 4 CPUs, one of 8.
    calls = []
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True, "Resources": {"CPU": 4.0}},
                                               {"Alive": True, "Resources": {"CPU": 8.0}},
                                               {"Alive": False, "Resources": {"CPU": 64.0}}])
    monkeypatch.setattr(sweep, "trials", lambda settings: pytest.fail("trials were made"))
    settings = {**sweep.SWEEP_DEFAULTS, "cpus_per_trial": 9}
    with pytest.raises(ValueError, match="s.yaml: cpus_per_trial: 9 CPUs per trial, but the largest node of the "
                                         "Ray cluster at ray://head:10001 has 8, so no trial could ever start; "
                                         "expected at most 8"):
        run_sweep(settings, tmp_path / "c", address="ray://head:10001", where="s.yaml")
    assert calls[-1] == "shutdown" and calls[0]["address"] == "ray://head:10001" and not (tmp_path / "c").exists()


def test_out_file_and_resume_without_a_sweep_are_refused_before_ray_starts(tmp_path, capsys, no_ray):
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP)
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "empty").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.csv").write_text("a run of wpb eval")
    for out, extra, named in [
        ("afile", [], "--out " + str(tmp_path / "afile") + ": is a file; expected a folder"),
        ("afile/sub", [], "lies under " + str(tmp_path / "afile") + ", which is a file"),
        ("empty", ["--resume"], "--resume: " + str(tmp_path / "empty") + " holds no sweep to continue"),
        ("missing", ["--resume"], "holds no sweep to continue (no tune/sweep/ of wpb sweep)"),
        ("run", ["--resume"], "holds no sweep to continue"),
    ]:
        assert main(["sweep", str(path), "--out", str(tmp_path / out), "--quiet", *extra]) == 2
        err = capsys.readouterr().err
        assert named in err and len(err.strip().splitlines()) == 1, err
    assert (tmp_path / "afile").read_text() == "mine" and not (tmp_path / "missing").exists()
    # --resume of another sweep file than the one the folder's sweep ran.
    from agents.sweep import settings_text

    sweep = tmp_path / "sweep"
    (sweep / "tune" / "sweep").mkdir(parents=True)
    (sweep / "tune" / "sweep" / "tuner.pkl").write_bytes(b"")
    (sweep / "sweep.json").write_text(settings_text(sweep_settings(str(path))))
    path.write_text(SWEEP.replace("seeds: [0, 1]", "seeds: [0, 1, 2]"))
    assert main(["sweep", str(path), "--out", str(sweep), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"--resume: {path} is not the sweep in {sweep}: seeds differ from {sweep / 'sweep.json'}" in err


def test_quiet_holds_back_tunes_reporter_and_log_lines_and_restores_them(monkeypatch):
    import logging
    import os

    from agents.sweep import _tune_output

    monkeypatch.delenv("RAY_AIR_NEW_OUTPUT", raising=False)
    with _tune_output(progress=False):
        # Tune's classic reporter, silent at verbose=0 (the newer one prints its box at any verbosity).
        assert os.environ["RAY_AIR_NEW_OUTPUT"] == "0"
        assert not logging.getLogger("ray.tune").isEnabledFor(logging.CRITICAL)
    assert "RAY_AIR_NEW_OUTPUT" not in os.environ and logging.getLogger("ray.tune").isEnabledFor(logging.ERROR)
    with _tune_output(progress=True):
        assert "RAY_AIR_NEW_OUTPUT" not in os.environ


def test_a_sweep_names_the_trials_that_train_on_their_algorithms_defaults():
    from agents.sweep import SWEEP_DEFAULTS, Trial, defaults_notes, trial_config

    settings = {**SWEEP_DEFAULTS, "algos": ["maskable_ppo", "ppo", "epsilon_greedy"], "regimes": ["default", "breaking"]}
    assert defaults_notes(settings) == [
        f"note: no shipped recipe for ppo on regime {regime}: training with the ppo defaults" + tail
        for regime, tail in [("default", _NOTE_TAIL), ("breaking", _NOTE_TAIL)]
    ]
    config, recipe = trial_config(Trial("ppo", "breaking", 0, ()), settings)
    assert recipe is None and config["imitation"] is None
    config, recipe = trial_config(Trial("maskable_ppo", "breaking", 0, ()), settings)
    assert recipe.name == "maskable_ppo_imitation.yaml" and config["imitation"]["teacher"] == "breaking_rule"


_NOTE_TAIL = (" (agents.sb3.train.DEFAULTS: 4 envs, 200,000 timesteps, SB3's hyperparameters); "
              "give one with --config")


def test_wpb_sweep_prints_its_defaults_notes_before_ray_starts(tmp_path, capsys, monkeypatch):
    path = tmp_path / "s.yaml"
    path.write_text("algos: [ppo]\nregimes: [default]\nseeds: [0]\nhyperparams: {n_steps: [64]}\n"
                    "eval: {episodes: 1, baselines: [change_detector]}\n")
    monkeypatch.setattr("agents.sweep.run_sweep", lambda *args, **kwargs: "the table\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert out == "the table\n"
    assert err == f"note: no shipped recipe for ppo on regime default: training with the ppo defaults{_NOTE_TAIL}\n"
