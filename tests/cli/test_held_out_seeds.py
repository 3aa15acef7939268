"""The held-out seed of ``wpb eval`` kept off the command line: ``--seed-file`` and ``--seed draw``.

A seed read from a file serves many runs (every submission plays the same held-out episodes),
so what the results record of it is a fingerprint; a drawn seed serves one run and is recorded
as it is. Neither is on a command line or in the environment. That the agents' processes
cannot find either is ``tests/evaluation/test_sandbox.py``'s.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from wpb_gym.cli import eval_settings
from wpb_gym.cli import main as wpb_main
from wpb_gym.evaluation import grid as grid_module

SECRET = 8231675309123456789
TINY = ["eval", "--agents", "last_kb", "--lengths", "12", "--episodes-per-condition", "3", "--budgets", "2KB",
        "--tracks", "unprivileged", "--quiet"]


def wpb(capsys, *argv) -> tuple[int, str]:
    capsys.readouterr()
    code = wpb_main([str(a) for a in argv])
    return code, capsys.readouterr().err


def results(out: Path) -> list[dict[str, str]]:
    with open(out / "results.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def run_json(out: Path) -> dict:
    return json.loads((out / "run.json").read_text(encoding="utf-8"))


def published(out: Path) -> str:
    """Every file of a run folder, as text."""
    return "".join(p.read_text(encoding="utf-8") for p in out.iterdir() if p.suffix in (".csv", ".json", ".md"))


def test_a_seed_file_plays_its_seeds_episodes_and_the_results_record_only_a_fingerprint(tmp_path, capsys):
    seed_file = tmp_path / "held_out_seed"
    seed_file.write_text(f"  {SECRET}\n", encoding="utf-8")
    assert wpb(capsys, *TINY, "--seed-file", seed_file, "--out", tmp_path / "file")[0] == 0
    assert wpb(capsys, *TINY, "--seed", SECRET, "--out", tmp_path / "flag")[0] == 0
    by_file, by_flag = results(tmp_path / "file"), results(tmp_path / "flag")
    assert [r["episode_hash"] for r in by_file] == [r["episode_hash"] for r in by_flag]  # the same episodes
    assert [r["f1"] for r in by_file] == [r["f1"] for r in by_flag]
    assert str(SECRET) not in published(tmp_path / "file") and str(SECRET) in published(tmp_path / "flag")
    run = run_json(tmp_path / "file")
    assert run["seed"] == eval_settings.seed_fingerprint(SECRET) == by_file[0]["seed"]
    assert run["config"]["seed_from"] == "file" and "seed_file" not in run["config"]
    # Moved elsewhere, the same seed is the same run (its checkpoints' key).
    moved = tmp_path / "elsewhere"
    seed_file.rename(moved)
    assert wpb(capsys, *TINY, "--seed-file", moved, "--out", tmp_path / "moved")[0] == 0
    assert run_json(tmp_path / "moved")["config_hash"] == run["config_hash"]


@pytest.mark.parametrize("content", ["12a", "", "-3", "1" * 41, "1 2", "\u0663"], ids=repr)
def test_a_bad_seed_file_is_refused_in_one_line_that_does_not_quote_it(tmp_path, capsys, content):
    seed_file = tmp_path / "seed"
    seed_file.write_text(content, encoding="utf-8")
    code, err = wpb(capsys, *TINY, "--seed-file", seed_file, "--out", tmp_path / "run")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"--seed-file {seed_file}: expected one integer >= 0" in err and "not shown" in err
    if content.strip():
        assert content not in err.split(str(seed_file), 1)[1]
    assert not (tmp_path / "run").exists()


def test_a_seed_file_is_refused_beside_another_seed_or_episode_files(tmp_path, capsys):
    seed_file = tmp_path / "seed"
    seed_file.write_text("7", encoding="utf-8")
    code, err = wpb(capsys, *TINY, "--seed-file", seed_file, "--seed", "3", "--out", tmp_path / "a")
    assert code == 2 and "--seed-file and --seed: both give the seed" in err, err
    code, err = wpb(capsys, *TINY, "--seed-file", tmp_path / "missing", "--out", tmp_path / "a")
    assert code == 2 and f"--seed-file {tmp_path / 'missing'}: cannot read" in err, err
    config = tmp_path / "ablate.yaml"
    config.write_text(f"agents: [last_kb]\nlengths: [12]\nseed_file: {seed_file}\n", encoding="utf-8")
    code, err = wpb(capsys, "ablate", config, config, "--seeds", "2")
    assert code == 2 and "seed_file: an ablation runs seeds" in err, err


def test_a_drawn_seed_is_fresh_for_every_run_and_recorded_in_run_json_and_results(tmp_path, capsys):
    for name in ("a", "b"):
        code, err = wpb(capsys, *TINY, "--seed", "draw", "--out", tmp_path / name)
        assert code == 0, err
    a, b = run_json(tmp_path / "a"), run_json(tmp_path / "b")
    assert a["config"]["seed_from"] == b["config"]["seed_from"] == "drawn"
    assert isinstance(a["seed"], int) and isinstance(b["seed"], int) and a["seed"] != b["seed"]
    assert max(a["seed"], b["seed"]) >= 1 << 32  # drawn from 63 bits: both below 2**32 once in 2**62
    assert {row["seed"] for row in results(tmp_path / "a")} == {str(a["seed"])}
    # The episodes of the seed recorded: a run given it plays them again.
    assert wpb(capsys, *TINY, "--seed", a["seed"], "--out", tmp_path / "again")[0] == 0
    hashes = [row["episode_hash"] for row in results(tmp_path / "a")]
    assert hashes == [row["episode_hash"] for row in results(tmp_path / "again")]
    assert hashes != [row["episode_hash"] for row in results(tmp_path / "b")]


def test_resume_of_a_drawn_seed_run_continues_with_the_seed_it_drew(tmp_path, capsys, monkeypatch):
    real, played = grid_module.run_task, []

    def interrupted(task):
        if len(played) == 2:
            raise KeyboardInterrupt
        played.append(task.ref.index)
        return real(task)

    monkeypatch.setattr(grid_module, "run_task", interrupted)
    with pytest.raises(KeyboardInterrupt):
        wpb_main([str(a) for a in TINY] + ["--seed", "draw", "--out", str(tmp_path / "run")])
    played.clear()
    monkeypatch.setattr(grid_module, "run_task", lambda task: played.append(task.ref.index) or real(task))
    code, err = wpb(capsys, *TINY, "--seed", "draw", "--out", tmp_path / "run", "--resume")
    assert code == 0 and "resuming: 2 of 3" in err and "the seed the interrupted run drew" in err, err
    assert played == [2]
    seed = run_json(tmp_path / "run")["seed"]
    assert wpb(capsys, *TINY, "--seed", seed, "--out", tmp_path / "fresh")[0] == 0
    assert [r["f1"] for r in results(tmp_path / "run")] == [r["f1"] for r in results(tmp_path / "fresh")]
    assert [r["episode_hash"] for r in results(tmp_path / "run")] == [
        r["episode_hash"] for r in results(tmp_path / "fresh")
    ]


def test_a_leaderboard_run_on_the_public_default_seed_is_refused_and_an_explicit_one_noted(tmp_path, capsys,
                                                                                            monkeypatch):
    # --data-only-models marks a leaderboard run; on seed 0, every run's default, a submitter
    # could have generated the evaluated episodes, labels included, and trained on them.
    real = grid_module.run_task
    monkeypatch.setattr(grid_module, "run_task", lambda task: pytest.fail("the grid ran"))
    code, err = wpb(capsys, *TINY, "--data-only-models", "--out", tmp_path / "run")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("wpb eval: error: --data-only-models: ") and "public" in err, err
    assert all(option in err for option in ("--seed-file PATH", "--seed draw", "--episodes PATH")), err
    config = tmp_path / "board.yaml"
    config.write_text("agents: [last_kb]\ndata_only_models: true\n", encoding="utf-8")
    code, err = wpb(capsys, "eval", "--config", config, "--out", tmp_path / "run", "--quiet")
    assert code == 2 and f"'data_only_models:' in {config}: " in err, err
    assert not (tmp_path / "run").exists()
    monkeypatch.setattr(grid_module, "run_task", real)
    # An explicit seed runs, saying in one line that it is public; a held-out one says nothing.
    code, err = wpb(capsys, *TINY, "--data-only-models", "--seed", "5", "--out", tmp_path / "public")
    notes = [line for line in err.splitlines() if "public" in line]
    assert code == 0 and len(notes) == 1 and notes[0].startswith("note: the seed of --seed (5) is public"), err
    seed_file = tmp_path / "seed"
    seed_file.write_text(str(SECRET), encoding="utf-8")
    for given in (["--seed", "draw"], ["--seed-file", seed_file]):
        code, err = wpb(capsys, *TINY, "--data-only-models", *given, "--out", tmp_path / f"run{given[0]}")
        assert code == 0 and "public" not in err, err
