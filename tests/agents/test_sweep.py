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
    settings = sweep_settings(str(path))
    assert len(trials(settings)) == 4
    for trial in trials(settings):  # the same trials, one after another, no Ray
        run_trial(trial, settings, str(tmp_path / "plain"))
    baselines = [row for regime in settings["regimes"] for row in run_baselines(settings, regime)]
    table = collect(settings, tmp_path / "plain", baselines)
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
