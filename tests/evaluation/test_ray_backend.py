"""The grid on Ray: the same rows, progress and checkpoints as the process pool."""

from __future__ import annotations

import json
from functools import partial

import pytest

ray = pytest.importorskip("ray")

from agents.registry import agent_entry, make_agent  # noqa: E402
from wpb_gym.cli import main  # noqa: E402
from wpb_gym.evaluation.grid import PolicySpec, generated_refs, run_grid  # noqa: E402


def spec(name: str) -> PolicySpec:
    return PolicySpec(name, partial(make_agent, name), agent_entry(name).track)


def test_the_grid_on_ray_gives_the_rows_and_checkpoints_of_the_process_pool():
    refs = generated_refs(["default", "breaking"], [70], 3, seed=4)
    policies = [spec("breaking_detector"), spec("fifo_store_all"), spec("priority_threshold")]
    grid = (refs, policies, [1024, 10240], ["unprivileged", "privileged"])
    done: dict[str, list] = {"processes": [], "ray": []}
    local = run_grid(*grid, jobs=2, on_episode_done=lambda ref, rows: done["processes"].append((ref, rows)))
    assert not ray.is_initialized()
    on_ray = run_grid(*grid, jobs=2, backend="ray", on_episode_done=lambda ref, rows: done["ray"].append((ref, rows)))
    assert not ray.is_initialized()  # the grid shut down the Ray it started
    assert on_ray == local and done["ray"] == done["processes"] and len(local) == 6 * 2 * 2 * 3 - 6 * 2
    with pytest.raises(ValueError, match="isolated evaluation runs on the process pool"):
        run_grid(*grid, backend="ray", isolate=True)
    with pytest.raises(ValueError, match="needs backend='ray'"):
        run_grid(*grid, address="auto")
    with pytest.raises(ValueError, match="backend must be one of"):
        run_grid(*grid, backend="threads")


def test_wpb_eval_on_ray_writes_the_same_run(tmp_path, capsys):
    argv = ["eval", "--agents", "change_detector,last_kb", "--lengths", "20", "--episodes-per-condition", "3"]
    argv += ["--budgets", "1KB,10KB", "--tracks", "unprivileged", "--jobs", "2", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "pool")]) == 0
    assert main([*argv, "--backend", "ray", "--out", str(tmp_path / "ray")]) == 0
    pool, on_ray = (tmp_path / "pool" / "results.csv").read_bytes(), (tmp_path / "ray" / "results.csv").read_bytes()
    assert pool == on_ray  # config_hash included: where the tasks ran is not part of the run
    runs = [json.loads((tmp_path / name / "run.json").read_text()) for name in ("pool", "ray")]
    assert runs[0]["config"] == runs[1]["config"] and "backend" not in runs[0]["config"]
    for extra, named in [
        (["--backend", "ray", "--isolate"], "--isolate: isolated evaluation runs with --backend processes"),
        (["--address", "auto"], "--address: names a Ray cluster; it needs --backend ray"),
        (["--backend", "spark"], "--backend: expected one of processes, ray"),
    ]:
        assert main([*argv, *extra, "--out", str(tmp_path / "bad")]) == 2
        assert named in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_a_bad_ray_address_is_one_line_naming_it(tmp_path, capsys):
    argv = ["eval", "--agents", "no_mem", "--lengths", "10", "--episodes-per-condition", "1", "--budgets", "1KB"]
    argv += ["--tracks", "unprivileged", "--quiet", "--backend", "ray", "--address", "garbage::"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert "--address garbage::: the grid failed on Ray: ValueError: Invalid address format" in capsys.readouterr().err
    assert not (tmp_path / "o" / "results.csv").exists()


def test_jobs_with_an_address_is_refused_before_ray_starts(tmp_path, capsys, monkeypatch):
    import wpb_gym.evaluation.ray_backend as ray_backend

    monkeypatch.setattr(ray_backend, "ray_map", lambda *a, **k: pytest.fail("the grid went to Ray"))
    argv = ["eval", "--agents", "no_mem", "--lengths", "10", "--episodes-per-condition", "1", "--budgets", "1KB"]
    argv += ["--tracks", "unprivileged", "--quiet", "--backend", "ray", "--address", "ray://head:10001"]
    config = tmp_path / "e.yaml"
    config.write_text("jobs: 4\n")
    for extra, named in [
        (["--jobs", "2"], "--jobs: sets the worker processes, or the CPUs of a local Ray; with --address the tasks "
                          "run on the cluster's CPUs: leave --jobs out"),
        (["--config", str(config)], f"'jobs:' in {config}: sets the worker processes"),
    ]:
        assert main([*argv, *extra, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert named in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_the_local_ray_holds_back_its_token_auth_notice_and_a_clusters_keeps_it():
    import logging

    from wpb_gym.evaluation.ray_backend import init_ray

    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    shown: list[tuple[str | None, bool]] = []

    class FakeRay:
        @staticmethod
        def init(address=None, **kwargs):
            shown.append((address, notice.isEnabledFor(logging.WARNING)))

    init_ray(FakeRay, None, num_cpus=1)
    init_ray(FakeRay, "ray://head:10001")
    # Held back for the local Ray only, and only while it starts (authentication itself stays on).
    assert shown == [(None, False), ("ray://head:10001", True)] and notice.isEnabledFor(logging.WARNING)
