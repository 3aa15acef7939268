"""The package as a user installs it: built into a wheel, installed outside the repository, it
finds what it ships. ``wpb train`` reads its recipes (package data) with importlib.resources, so
a regime's recipe is used wherever ``wpb`` runs, not the defaults."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
# What the wheel is built from (pyproject.toml names the packages and their data).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "wpb_gym", "agents")


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, argv[:6]))}...\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def copied_sources(tmp_path: Path) -> Path:
    """The files a build reads, copied: building writes build/ and *.egg-info beside them."""
    source = tmp_path / "source"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        path = ROOT / name
        (shutil.copytree(path, source / name, ignore=ignore) if path.is_dir() else shutil.copy(path, source / name))
    return source


def test_the_sdist_and_the_wheel_carry_the_licence(tmp_path):
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License\n\nCopyright (c) 2026 WritePolicyBench-Gym contributors\n")
    source = copied_sources(tmp_path)
    dist = tmp_path / "dist"
    # build_meta rewrites sys.argv while it builds: the folder is read from it first.
    build = "from setuptools import build_meta as b; import sys; d = sys.argv[1]; b.build_sdist(d); b.build_wheel(d)"
    run([sys.executable, "-c", build, str(dist)], cwd=source)
    (sdist,) = dist.glob("writepolicybench_gym-*.tar.gz")
    with tarfile.open(sdist) as archive:
        (member,) = [m for m in archive.getnames() if m.count("/") == 1 and m.endswith("/LICENSE")]
        assert archive.extractfile(member).read().decode() == licence
    (wheel,) = dist.glob("writepolicybench_gym-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [m for m in archive.namelist() if m.endswith(".dist-info/licenses/LICENSE")]
        assert archive.read(member).decode() == licence
        metadata = archive.read(next(m for m in archive.namelist() if m.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in metadata and "License-File: LICENSE" in metadata


def installed_wheel(tmp_path: Path) -> Path:
    """A new venv outside the repository holding the package's wheel alone; its dependencies
    (torch, SB3...) are the project venv's, seen through a ``.pth`` file. A venv made from a venv
    with ``--system-site-packages`` sees the base interpreter's packages, not the venv's; the
    ``.pth`` file's folders come after the new venv's own, and the ``.pth`` files in them (the
    project's editable install) are not run, so ``wpb_gym`` and ``agents`` come from the wheel."""
    source = copied_sources(tmp_path)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "--wheel-dir", str(tmp_path / "dist"), str(source)])
    (wheel,) = (tmp_path / "dist").glob("writepolicybench_gym-*.whl")
    env = tmp_path / "env"
    venv.create(env, system_site_packages=True, with_pip=False)
    (site,) = (env / "lib").glob("python*/site-packages")
    project = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "project_dependencies.pth").write_text("\n".join(project) + "\n")
    run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "--quiet", "--no-deps",
         "--no-index", "--ignore-installed", str(wheel)])
    return env


def test_an_installed_wheel_trains_with_the_regimes_shipped_recipe(tmp_path):
    env = installed_wheel(tmp_path)
    elsewhere = tmp_path / "elsewhere"  # no configs/ or agents/ of the repository around
    elsewhere.mkdir()
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    where = run([str(env / "bin" / "python"), "-c", "import agents, wpb_gym; print(agents.__file__, wpb_gym.__file__)"],
                cwd=elsewhere, env=environ).stdout.split()
    assert all(Path(path).is_relative_to(env) for path in where), where
    # contract_mix's recipe imitates breaking_detector's rule, then fine-tunes: 0 RL steps are
    # accepted only after imitation (the defaults would refuse them), and short, small episodes
    # keep the imitation to seconds. SB3's DummyVecEnv: the native vector env would compile its
    # core anew for this install's files first.
    out = tmp_path / "run"
    argv = [str(env / "bin" / "wpb"), "train", "--algo", "maskable_ppo", "--env-kwargs", "regime=contract_mix",
            "length=30", "api_pool=8", "--timesteps", "0", "--vec-env", "dummy", "--out", str(out), "--quiet"]
    done = run(argv, cwd=elsewhere, env=environ)
    shipped = next(Path(p) for p in where if p.endswith("agents/__init__.py")).parent / "sb3" / "recipes"
    assert f"trained maskable_ppo ({shipped / 'maskable_ppo_imitation.yaml'})" in done.stdout
    recipe = yaml.safe_load((ROOT / "agents" / "sb3" / "recipes" / "maskable_ppo_imitation.yaml").read_text())
    saved = json.loads((out / "config.json").read_text())
    assert saved["config"]["hyperparams"] == recipe["hyperparams"]
    assert saved["config"]["imitation"].items() >= recipe["imitation"].items()
    assert saved["config"]["env"].items() >= recipe["env"].items()
    assert len(saved["imitation_history"]) == recipe["imitation"]["rounds"] + 1
    assert (out / "best_model.zip").is_file()
