"""The ``wpb`` command line: freeze and inspect, called through ``wpb_gym.cli.main``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import wpb_gym
from wpb_gym.cli import main
from wpb_gym.episodes.frozen import MANIFEST_NAME, open_frozen_set
from wpb_gym.episodes.generators.paper import generate_episode, make_config
from wpb_gym.episodes.jsonl import dumps_episode, write_jsonl

REPO = Path(__file__).resolve().parents[2]


def _freeze_args(out, *extra):
    return [
        "freeze",
        "--regimes",
        "default,burst_drift",
        "--lengths",
        "20",
        "--episodes",
        "2",
        "--seed",
        "3",
        "--out",
        str(out),
        *extra,
    ]


def _header(stdout):
    """The header row of the (single) markdown table in ``stdout``, as a list of cells."""
    for line in stdout.splitlines():
        if line.startswith("| "):
            return [c.strip() for c in line.strip("|").split("|")]
    raise AssertionError(f"no table in output:\n{stdout}")


def _rows(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[1:]]


# --------------------------------------------------------------------------- freeze


def test_freeze_writes_a_set_and_prints_a_summary(tmp_path, capsys):
    out = tmp_path / "set"
    assert main(_freeze_args(out)) == 0
    stdout = capsys.readouterr().out

    assert "4 episodes" in stdout and "seed 3" in stdout
    header = _header(stdout)
    assert header[:3] == ["regime", "T", "episodes"]
    rows = _rows(stdout)
    assert sorted(r[0] for r in rows) == ["burst_drift", "default"]
    assert all(r[1] == "20" and r[2] == "2" for r in rows)

    frozen = open_frozen_set(out)
    assert frozen.total_episodes == 4
    assert sorted(f.regime for f in frozen.files) == ["burst_drift", "default"]
    # The sha256 prefix shown in the table is the file's.
    shown = {r[0]: r[-1] for r in rows}
    for f in frozen.files:
        assert f.sha256.startswith(shown[f.regime])
        assert list(f.iter_episodes()) == [generate_episode(make_config(f.regime, length=20), 3, i) for i in range(2)]


def test_freeze_set_override_lands_in_manifest(tmp_path, capsys):
    out = tmp_path / "set"
    assert main(_freeze_args(out, "--set", "priority_noise=0.1", "--set", "api_pool=4")) == 0
    manifest = json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))
    for entry in manifest["files"].values():
        assert entry["generator"]["priority_noise"] == 0.1
        assert entry["generator"]["api_pool"] == 4
    capsys.readouterr()


@pytest.mark.parametrize("option", ["bogus=1", "regime=default", "length=5", "priority_noise"])
def test_freeze_bad_set_option_is_a_usage_error(tmp_path, capsys, option):
    out = tmp_path / "set"
    assert main(_freeze_args(out, "--set", option)) == 2
    err = capsys.readouterr().err
    assert "--set" in err
    assert option.split("=")[0] in err
    assert not out.exists()


def test_freeze_bad_option_value_returns_2(tmp_path, capsys):
    out = tmp_path / "set"
    assert main(_freeze_args(out, "--set", "drift_prob=2")) == 2
    assert "drift_prob" in capsys.readouterr().err
    assert not out.exists()


def test_freeze_unknown_regime_is_a_usage_error(tmp_path, capsys):
    out = tmp_path / "set"
    assert main(["freeze", "--regimes", "default,nope", "--lengths", "20", "--episodes", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and "--regimes" in err
    assert not out.exists()


@pytest.mark.parametrize("argv", [["--lengths", "0"], ["--lengths", "x"], ["--episodes", "x"]])
def test_freeze_bad_numbers_are_usage_errors(tmp_path, capsys, argv):
    assert main(["freeze", "--out", str(tmp_path / "set"), *argv]) == 2
    assert argv[0] in capsys.readouterr().err


def test_freeze_zero_episodes_exits_2(tmp_path, capsys):
    assert main(["freeze", "--episodes", "0", "--out", str(tmp_path / "set")]) == 2
    assert "--episodes" in capsys.readouterr().err
    assert not (tmp_path / "set").exists()


def test_freeze_existing_folder_needs_force(tmp_path, capsys):
    out = tmp_path / "set"
    out.mkdir()
    (out / "keep.txt").write_text("mine", encoding="utf-8")
    assert main(_freeze_args(out)) == 2
    captured = capsys.readouterr()
    assert "already exists" in captured.err and str(out) in captured.err
    assert "--force" in captured.err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    # --force replaces frozen sets only, never a folder of other files.
    assert main(_freeze_args(out, "--force")) == 2
    assert "not a frozen set" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    (out / "keep.txt").unlink()
    assert main(_freeze_args(out)) == 2
    assert main(_freeze_args(out, "--force")) == 0
    capsys.readouterr()
    assert open_frozen_set(out).total_episodes == 4


def test_freeze_gzip(tmp_path, capsys):
    out = tmp_path / "set"
    assert main(_freeze_args(out, "--gzip")) == 0
    capsys.readouterr()
    frozen = open_frozen_set(out)
    names = [f.path.name for f in frozen.files]
    assert len(names) == 2 and all(n.endswith(".jsonl.gz") for n in names)
    assert not list(out.glob("*.jsonl"))
    assert frozen.total_episodes == 4
    assert sum(1 for _ in frozen.iter_episodes()) == 4


# --------------------------------------------------------------------------- inspect


def _check_inspect_table(stdout, budgets_kb=("1KB", "10KB", "100KB", "1MB")):
    header = _header(stdout)
    n = len(budgets_kb)
    assert header[:7] == ["file", "regime", "T", "eps", "critical/ep", "track", "undecidable"]
    assert header[7:] == (
        [f"U*@{b}" for b in budgets_kb] + [f"F1 bound@{b}" for b in budgets_kb] + [f"decidable@{b}" for b in budgets_kb]
    )
    rows = _rows(stdout)
    for row in rows:
        assert len(row) == len(header)
        assert 0.0 <= float(row[6].rstrip("%")) <= 100.0
        utilities = [float(x) for x in row[7 : 7 + n]]
        bounds = [float(x) for x in row[7 + n : 7 + 2 * n]]
        decidable = [float(x) for x in row[7 + 2 * n :]]
        assert utilities == sorted(utilities), "U*(B) must not decrease with the budget"
        assert all(0.0 <= f <= 1.0 for f in bounds)
        assert all(0.0 <= d <= f for d, f in zip(decidable, bounds, strict=True))
    return rows


def test_inspect_frozen_set(tmp_path, capsys):
    out = tmp_path / "set"
    assert main(_freeze_args(out)) == 0
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "U*(B)" in stdout and "F1 bound" in stdout
    rows = _check_inspect_table(stdout)
    # Two files x two tracks.
    assert sorted((r[1], r[5]) for r in rows) == sorted(
        (regime, track) for regime in ("default", "burst_drift") for track in ("unprivileged", "privileged")
    )
    assert all(r[2] == "20" and r[3] == "2" for r in rows)


def test_inspect_single_file(tmp_path, capsys):
    config = make_config("redundancy", length=24)
    episodes = [generate_episode(config, 5, i) for i in range(3)]
    path = tmp_path / "eps.jsonl"
    write_jsonl(path, episodes)

    assert main(["inspect", str(path)]) == 0
    rows = _check_inspect_table(capsys.readouterr().out)
    assert [r[0] for r in rows] == ["eps.jsonl", "eps.jsonl"]
    assert all(r[1:4] == ["redundancy", "24", "3"] for r in rows)
    expected_crit = sum(len(e.critical_steps) for e in episodes) / 3
    assert all(r[4] == f"{expected_crit:.1f}" for r in rows)
    # With a budget large enough for everything, the oracle keeps all the utility.
    total = sum(e.utilities.sum() for e in episodes) / 3
    assert all(float(r[10]) == pytest.approx(total, abs=0.05) for r in rows)


def test_inspect_custom_budgets_and_track(tmp_path, capsys):
    path = tmp_path / "eps.jsonl.gz"
    write_jsonl(path, [generate_episode(make_config("default", length=16), 0, 0)])
    assert main(["inspect", str(path), "--budgets", "2048,5000", "--tracks", "privileged"]) == 0
    stdout = capsys.readouterr().out
    assert _header(stdout)[7:] == [
        "U*@2KB",
        "U*@5000B",
        "F1 bound@2KB",
        "F1 bound@5000B",
        "decidable@2KB",
        "decidable@5000B",
    ]
    rows = _rows(stdout)
    assert len(rows) == 1 and rows[0][5] == "privileged"


def test_inspect_unknown_track_returns_2(tmp_path, capsys):
    path = tmp_path / "eps.jsonl"
    write_jsonl(path, [generate_episode(make_config("default", length=16), 0, 0)])
    assert main(["inspect", str(path), "--tracks", "oracle"]) == 2
    assert "oracle" in capsys.readouterr().err


def test_inspect_missing_path_returns_2(tmp_path, capsys):
    missing = tmp_path / "missing_path"
    assert main(["inspect", str(missing)]) == 2
    captured = capsys.readouterr()
    assert "error" in captured.err and str(missing) in captured.err
    assert captured.out == ""


def test_inspect_broken_line_returns_2(tmp_path, capsys):
    path = tmp_path / "broken.jsonl"
    good = dumps_episode(generate_episode(make_config("default", length=16), 0, 0))
    path.write_text(good + "\n" + good + "\n" + '{"steps": [}\n', encoding="utf-8")
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3" in err
    assert "malformed JSON" in err


def test_inspect_tampered_set_returns_2(tmp_path, capsys):
    out = tmp_path / "set"
    assert main(_freeze_args(out)) == 0
    capsys.readouterr()
    victim = sorted(out.glob("*.jsonl"))[0]
    victim.write_bytes(victim.read_bytes().replace(b'"t": 0}', b'"t": 0} ', 1))
    assert main(["inspect", str(out)]) == 2
    err = capsys.readouterr().err
    assert victim.name in err and "sha256" in err


def test_no_subcommand_is_a_usage_error(capsys):
    assert main([]) == 2
    assert "usage" in capsys.readouterr().err


# --------------------------------------------------------------------------- the module as a program


def test_version_via_subprocess():
    result = subprocess.run(
        [sys.executable, "-m", "wpb_gym.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"wpb {wpb_gym.__version__}"


def test_inspect_empty_file_is_a_clean_error(tmp_path, capsys):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    code = main(["inspect", str(path), "--budgets", "1024"])
    assert code == 2
    err = capsys.readouterr().err
    assert str(path) in err and "no episodes" in err


def test_wpb_eval_leaves_nothing_frozen_out_of_the_garbage_collector(tmp_path, capsys):
    import gc

    argv = ["eval", "--agents", "no_mem", "--lengths", "20", "--episodes-per-condition", "2", "--budgets", "1KB"]
    assert main([*argv, "--out", str(tmp_path / "run"), "--quiet"]) == 0
    assert gc.get_freeze_count() == 0  # frozen for the grid only: main() may run in a longer-lived process
