"""Attacks on the settings of every command (flags and --config files), each a regression test."""

from __future__ import annotations

import json
import os
import stat

import pytest
from test_cli_safety import refused, snapshot, wpb

from wpb_gym.cli import main

TINY_EVAL = ["eval", "--agents", "no_mem", "--lengths", "20", "--episodes-per-condition", "1", "--budgets", "1KB"]
TINY_EVAL += ["--tracks", "unprivileged", "--quiet"]


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--seed", "1", "--seed", "2"], "argument --seed: given more than once"),
        (["--agents", "last_kb"], "argument --agents: given more than once"),
        (["--budgets", "1KB"], "argument --budgets: given more than once"),
    ],
)
def test_a_flag_given_twice_is_refused_instead_of_keeping_the_last(tmp_path, capsys, argv, named):
    assert main([*TINY_EVAL, *argv, "--out", str(tmp_path / "o")]) == 2  # not the helper: it drops repeats
    assert named in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_repeated_items_and_keys_are_refused_in_flags_and_configs(tmp_path, capsys):
    freeze = ["freeze", "--lengths", "5", "--episodes", "1", "--out", str(tmp_path / "f")]
    assert "--set: the key drift_prob is given more than once" in refused(
        capsys, *freeze, "--set", "drift_prob=0.1", "--set", "drift_prob=0.9"
    )
    config = write(tmp_path, "c.yaml", "headroom: true\nheadroom: false\n")
    assert "'headroom' is given twice in one mapping" in refused(capsys, "report", tmp_path, "--config", config)
    config = write(tmp_path, "f.yaml", "set: {drift_prob: 0.5, drift_prob: 0.1}\n")
    assert "f.yaml:1" in refused(capsys, *freeze, "--config", config)
    assert main(["freeze", "--lengths", "5", "--episodes", "1", "--out", str(tmp_path / "set")]) == 0
    assert "PATHS: the value" in refused(capsys, "inspect", tmp_path / "set", tmp_path / "set")
    config = write(tmp_path, "l.yaml", "learned: {rand: 'r0,r1'}\n")
    assert "l.yaml: learned: expected a list, got a mapping" in refused(capsys, "seeds", tmp_path, "--config", config)


def test_pairs_from_the_config_and_from_flags_are_merged(tmp_path, capsys):
    config = write(tmp_path, "f.yaml", "regimes: [default]\nlengths: [5]\nepisodes: 1\nset: {api_pool: 4}\n")
    assert main(["freeze", "--config", str(config), "--set", "drift_prob=0.2", "--out", str(tmp_path / "f")]) == 0
    (entry,) = json.loads((tmp_path / "f" / "MANIFEST.json").read_text())["files"].values()
    assert entry["generator"]["api_pool"] == 4 and entry["generator"]["drift_prob"] == 0.2


def test_null_is_the_default_where_the_default_is_nothing(tmp_path, capsys):
    config = write(tmp_path, "a.yaml", "agents: [no_mem]\nlengths: [5]\nepisodes_per_condition: 1\nepisodes: null\n")
    assert main(["eval", "--config", str(config), "--budgets", "1KB", "--quiet", "--out", str(tmp_path / "o")]) == 0
    config = write(tmp_path, "b.yaml", "agents: [no_mem]\nseed: null\n")
    assert "b.yaml: seed: expected an integer" in refused(capsys, "eval", "--config", config, "--out", tmp_path / "p")


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--isolate", "--max-seconds-per-step", "3000000"], "at most 86400 seconds"),
        (["--seed", "١٢"], "argument --seed: expected an integer"),
    ],
)
def test_values_beyond_what_the_machine_takes_are_named(tmp_path, capsys, argv, named):
    assert named in refused(capsys, *TINY_EVAL, *argv, "--out", tmp_path / "o")


def test_settings_of_generated_episodes_are_refused_beside_episode_files(tmp_path, capsys):
    assert main(["freeze", "--lengths", "5", "--episodes", "1", "--out", str(tmp_path / "set")]) == 0
    line = refused(capsys, *TINY_EVAL, "--episodes", tmp_path / "set", "--out", tmp_path / "o")
    assert "--lengths, --episodes-per-condition: apply to generated episodes" in line


def test_compare_report_and_seeds_refuse_settings_they_would_ignore(tmp_path, capsys, runs):
    run = runs / "both"
    assert "give one of them" in refused(capsys, "compare", run, "--versus", "last_kb", "--against-baseline")
    assert "--store: the baseline folder is read only with --against-baseline" in refused(
        capsys, "compare", runs / "unprivileged", run, "--store", tmp_path
    )
    assert "--highlight: applies to --headroom only" in refused(
        capsys, "report", run, "--paper-tables", "--highlight", "fifo_store_all"
    )
    assert "--diagnostics-budget: applies to --paper-tables only" in refused(
        capsys, "report", run, "--headroom", "--diagnostics-budget", "1KB"
    )
    config = write(tmp_path, "r.yaml", "headroom: true\n")
    assert "(got --paper-tables, 'headroom:' in" in refused(capsys, "report", run, "--config", config, "--paper-tables")
    seeds = ["seeds", run]
    assert "--learned: rand is given twice" in refused(
        capsys, *seeds, "--learned", "rand=fifo_store_all", "--learned", "rand =priority_threshold"
    )
    assert "a seed's label is given twice" in refused(capsys, *seeds, "--learned", "rand=fifo_store_all,fifo_store_all")
    assert "unknown track 'nowhere'" in refused(
        capsys, *seeds, "--learned", "r=fifo_store_all", "--versus", "fifo_store_all@nowhere"
    )
    line = refused(capsys, *seeds, "--learned", "r=fifo_store_all", "--versus", " , ")
    assert "--versus: expected references" in line
    assert "--metric: expected one of" in refused(capsys, *seeds, "--learned", "r=fifo_store_all", "--metric", "policy")


def test_ablate_refuses_a_seed_and_names_the_file_missing_agents(tmp_path, capsys):
    good = write(tmp_path, "a.yaml", "agents: [no_mem]\nlengths: [5]\nepisodes_per_condition: 1\n")
    seeded = write(tmp_path, "b.yaml", "agents: [no_mem]\nseed: 7\n")
    assert "b.yaml: seed: an ablation runs seeds" in refused(capsys, "ablate", good, seeded)
    empty = write(tmp_path, "e.yaml", "lengths: [5]\n")
    assert "e.yaml: 'agents:' is required" in refused(capsys, "ablate", good, empty)


def test_ablate_runs_isolated_when_its_configs_say_so(tmp_path, capsys, monkeypatch):
    seen = []
    import wpb_gym.evaluation.grid as grid

    def fake_run_grid(refs, policies, budgets, tracks, **kwargs):
        seen.append(kwargs)
        return []

    monkeypatch.setattr(grid, "run_grid", fake_run_grid)
    def specs(agents, isolate=False, limits=None, sandbox=None):
        return [grid.PolicySpec(name, dict) for name in agents]

    monkeypatch.setattr("wpb_gym.cli.evaluation.policy_specs", specs)
    monkeypatch.setattr("wpb_gym.evaluation.reports.compare.ablation_markdown", lambda *a: "table\n")
    a = write(tmp_path, "a.yaml", "agents: [no_mem]\nlengths: [5]\nisolate: true\nmax_seconds_per_step: 3\n")
    assert main(["ablate", str(a), str(a), "--seeds", "2"]) == 0
    assert all(kw["isolate"] is True and kw["limits"].max_seconds_per_step == 3 for kw in seen) and len(seen) == 4


def test_env_parts_cannot_come_from_text(tmp_path, capsys):
    for kwarg in ("viewer=1", "observation_encoder=x", "episode_sampler=x", "reward_fn=x"):
        line = refused(capsys, "train", "--algo", "ppo", "--env-kwargs", kwarg, "--out", tmp_path / "t")
        assert "takes a Python object" in line and kwarg.split("=")[0] in line
    config = write(tmp_path, "c.yaml", "agents: [{name: no_mem, env_kwargs: 5}]\n")
    assert "agent" in refused(capsys, "eval", "--config", config, "--out", tmp_path / "o")


def test_train_never_writes_into_the_folder_of_another_run(tmp_path, capsys):
    out = tmp_path / "t"
    out.mkdir()
    (out / "config.json").write_text("{}")
    before = snapshot(out)
    line = refused(capsys, "train", "--algo", "epsilon_greedy", "--timesteps", "10", "--out", out)
    assert "the folder is not empty; continue its run with --resume" in line and snapshot(out) == before


def test_freeze_with_a_non_finite_option_leaves_the_old_set(tmp_path, capsys):
    out = tmp_path / "f"
    assert main(["freeze", "--lengths", "5", "--episodes", "1", "--out", str(out)]) == 0
    before = snapshot(out)
    for value in ("NaN", "Infinity"):
        line = refused(capsys, "freeze", "--lengths", "5", "--episodes", "1", "--out", out, "--force", "--set",
                       f"priority_noise={value}")
        assert "priority_noise: expected a finite number" in line
    assert snapshot(out) == before


def test_a_tiny_held_out_share_or_an_extreme_one_is_named(tmp_path, capsys):
    events = tmp_path / "e.jsonl"
    events.write_text("")
    for share in ("0", "1"):
        line = refused(capsys, "episodes", "from-events", events, "--source", "x", "--heldout-fraction", share,
                       "--out", tmp_path / "o")
        assert "--heldout-fraction: expected a share strictly between 0 and 1" in line


def test_deep_yaml_and_huge_values_give_one_short_line(tmp_path, capsys):
    deep = write(tmp_path, "deep.yaml", "headroom: " + "[" * 3000 + "]" * 3000 + "\n")
    assert "deep.yaml: nested too deeply" in refused(capsys, "report", tmp_path, "--config", deep)
    huge = write(tmp_path, "huge.yaml", "agents: [no_mem]\nseed: [" + ", ".join(["1"] * 100_000) + "]\n")
    line = refused(capsys, "eval", "--config", huge, "--out", tmp_path / "o")
    assert "huge.yaml: seed" in line and len(line) < 2100 and "characters in all" in line


def test_ingest_wants_a_log_name_and_files_are_written_for_other_users_too(tmp_path, capsys, runs):
    line = refused(capsys, "ingest", "openapi", "--repo", tmp_path, "--spec", "a.json", "--out", tmp_path / "e.txt")
    assert "expected a .jsonl or .jsonl.gz file name" in line
    mask = os.umask(0o022)
    try:
        assert main(["baseline", "set", str(runs / "both"), "--store", str(tmp_path / "base")]) == 0
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "base" / "results.csv").stat().st_mode) == 0o644
    # A run without run.json does not keep the earlier baseline's beside its results.
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "results.csv").write_bytes((runs / "both" / "results.csv").read_bytes())
    assert main(["baseline", "set", str(bare), "--store", str(tmp_path / "base")]) == 0
    assert not (tmp_path / "base" / "run.json").exists()
    assert wpb(capsys, "compare", "--against-baseline", runs / "both", "--store", tmp_path / "base")[0] == 0


def test_an_unknown_option_is_named_with_its_command(tmp_path, capsys):
    assert main(["eval", "--bogus", "1", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("wpb eval: error: unrecognized arguments: --bogus 1")
