"""The datasets in ``data/``: the files data/README.md lists, with the checksums of
``data/SHA256SUMS`` and their licences; what the README says of the change-event logs; the
source distribution carries them and the wheel does not; and nothing points outside the
repository for them any more."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
README = (DATA / "README.md").read_text(encoding="utf-8")
# What the distributions are built from (MANIFEST.in adds data/ to the sdist).
SOURCES = ("pyproject.toml", "README.md", "MANIFEST.in", "wpb_gym", "agents", "data")

MIT_TERMS = (
    "Permission is hereby granted, free of charge, to any person obtaining a copy",
    "The above copyright notice and this permission notice shall be included in all",
    'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR',
)
LICENCES = {
    "paper_episodes/LICENSE": "Copyright (c) 2026 Edgard El Cham",
    "apidrift/LICENSE-stripe": "Copyright (c) 2011- Stripe, Inc.",
    "apidrift/LICENSE-twilio": "Copyright (C) 2023, Twilio, Inc.",
}


def checksums() -> dict[str, str]:
    """data/SHA256SUMS as {path under data/: sha256}."""
    lines = (DATA / "SHA256SUMS").read_text(encoding="utf-8").splitlines()
    return {path: digest for digest, path in (line.split("  ", 1) for line in lines)}


def readme_table(header: str) -> list[list[str]]:
    """The rows of the README's table whose header row starts with ``header``."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_data_holds_the_files_the_readme_lists_with_their_checksums():
    sums = checksums()
    listed = {row[0].strip("`"): int(row[1]) for row in readme_table("file | records")}
    assert set(listed) == set(sums)
    on_disk = {p.relative_to(DATA).as_posix() for p in DATA.rglob("*") if p.is_file()}
    documents = {"README.md", "SHA256SUMS", *LICENCES}
    assert on_disk == set(sums) | documents  # no data file unlisted, no listed file missing
    for path, digest in sums.items():
        assert hashlib.sha256((DATA / path).read_bytes()).hexdigest() == digest, path
    for path, records in listed.items():
        text = (DATA / path).read_text(encoding="utf-8")
        assert (1 if path.endswith(".json") else len(text.splitlines())) == records, path
        assert text.endswith("\n") or path.endswith(".json")


def test_every_dataset_has_its_licence_text_and_the_readme_names_it():
    for path, copyright_line in LICENCES.items():
        text = (DATA / path).read_text(encoding="utf-8")
        assert text.startswith(f"MIT License\n\n{copyright_line}\n\n"), path
        assert all(term in text for term in MIT_TERMS), path
        assert f"`{path}`" in README and copyright_line in README, path
    assert "Apache 2.0" in README  # Twilio's spec files name another licence than the repository


def test_the_change_event_logs_span_what_the_readme_says():
    for row in readme_table("file | repository"):
        name, _repository, _specs, commits, dates, versions = row
        events = [json.loads(line) for line in (DATA / "apidrift" / name.strip("`")).read_text().splitlines()]
        first_commit, last_commit = re.findall(r"`([0-9a-f]{12})`", commits)
        first_date, last_date = dates.split(" .. ")
        assert first_commit.startswith(events[0]["commit"]) and events[0]["date"].startswith(first_date)
        assert events[-1]["date"].startswith(last_date)
        assert all(e["seq"] == 0 for e in events if e["change"] == ["initial"]) and events[0]["seq"] == 0
        # seq counts the spec versions walked; the last one may change no endpoint (Stripe's).
        assert events[-1]["seq"] < int(versions) and [e["seq"] for e in events] == sorted(e["seq"] for e in events)
        if name == "`twilio_snapshots.jsonl`":
            assert last_commit.startswith(events[-1]["commit"]) and events[-1]["seq"] == int(versions) - 1
        assert [e["date"] for e in events] == sorted(e["date"] for e in events)


def test_nothing_tracked_names_the_folder_the_data_used_to_be_read_from():
    outside = "/".join(("..", "shared"))  # spelled in two parts, or this file would name it
    found = subprocess.run(
        ["git", "grep", "-n", "-I", "-F", outside, "--", ".", ":(exclude).ci"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert found.returncode == 1 and found.stdout == "", found.stdout or found.stderr


def test_the_sdist_carries_the_data_and_the_wheel_built_from_it_does_not(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(path, source / name)
    build = "import sys; from setuptools import build_meta as b; print(getattr(b, sys.argv[1])(sys.argv[2]))"

    def built(kind: str, where: Path) -> Path:
        done = subprocess.run([sys.executable, "-c", build, kind, str(tmp_path / "dist")], cwd=where,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return tmp_path / "dist" / done.stdout.split()[-1]

    sdist = built("build_sdist", source)
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        shipped = {name[len(top) + 1 :] for name in tar.getnames()}
        for path, digest in checksums().items():
            member = tar.extractfile(f"{top}/data/{path}")
            assert hashlib.sha256(member.read()).hexdigest() == digest, path
        tar.extractall(tmp_path / "unpacked", filter="data")
    assert {"data/README.md", "data/SHA256SUMS"} | {f"data/{p}" for p in LICENCES} <= shipped

    wheel = built("build_wheel", tmp_path / "unpacked" / top)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert any(name.startswith("wpb_gym/") for name in names)
    assert not [name for name in names if name.startswith("data/") or name.endswith((".jsonl", "SHA256SUMS"))]
