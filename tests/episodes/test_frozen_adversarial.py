"""Frozen sets against damaged manifests: a folder with a MANIFEST.json is a frozen set, and a
manifest problem is a FrozenSetError naming it — never a fall back to reading the folder as
plain JSONL, and never a traceback. Another tool's manifest (as beside the paper's released
episodes) still leaves the folder plain JSONL.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from wpb_gym.episodes.frozen import MANIFEST_NAME, FrozenSetError, freeze_set, manifest_kind, open_frozen_set
from wpb_gym.episodes.jsonl import load_jsonl, write_jsonl

sys.path.insert(0, str(Path(__file__).parent))
from loader_cases import GOOD, lines

# --------------------------------------------------------------------------- frozen sets
# A folder with a MANIFEST.json is a frozen set; a damaged manifest must not turn it into a
# plain JSONL folder read with tampered labels (it did: exit 0 with the edited labels).


def _tampered_set(tmp_path: Path) -> tuple[Path, Path]:
    """A frozen set whose one episode file was edited after freezing (labels changed)."""
    root = tmp_path / "set"
    freeze_set(root, ["default"], [12], episodes=2, seed=0)
    (path,) = root.glob("*.jsonl")
    episodes = load_jsonl(path)
    for episode in episodes:  # every step critical and worth the most: a different benchmark
        episode.labels["critical_steps"] = list(range(len(episode)))
        episode.labels["total_drift_events"] = len(episode)
        episode.labels["utility_by_step"] = {t: 6.0 for t in range(len(episode))}
    write_jsonl(path, episodes)
    with pytest.raises(FrozenSetError, match="sha256 mismatch"):
        open_frozen_set(root)
    return root, path


def _rewrite_json(path: Path, change) -> None:
    manifest = json.loads(path.read_text(encoding="utf-8"))
    change(manifest)
    path.write_text(json.dumps(manifest, indent=2), encoding="utf-8")


def _make_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside.json").write_text("{}", encoding="utf-8")


def _broken_link(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.parent / "nowhere.json")


def _make_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


MANIFEST_DAMAGE = {
    "byte_appended": lambda m: m.write_bytes(m.read_bytes() + b"x"),
    "emptied": lambda m: m.write_bytes(b""),
    "whitespace_only": lambda m: m.write_bytes(b"\n \n"),
    "non_utf8_byte": lambda m: m.write_bytes(m.read_bytes().replace(b'"format"', b'"f\xffrmat"')),
    "utf16": lambda m: m.write_bytes(m.read_text(encoding="utf-8").encode("utf-16")),
    "json_list": lambda m: m.write_text("[1, 2, 3]\n", encoding="utf-8"),
    "json_string": lambda m: m.write_text('"wpb-frozen-set"\n', encoding="utf-8"),
    "json_null": lambda m: m.write_text("null\n", encoding="utf-8"),
    "truncated": lambda m: m.write_bytes(m.read_bytes()[: len(m.read_bytes()) // 2]),
    "a_directory": _make_directory,
    "broken_symlink": _broken_link,
    "a_named_pipe": _make_fifo,  # reading it would block forever
    "duplicate_key": lambda m: m.write_bytes(m.read_bytes().replace(b"{", b'{"format": "other", ', 1)),
    "nan_value": lambda m: m.write_bytes(m.read_bytes().replace(b'"seed": 0', b'"seed": NaN', 1)),
    "format_removed": lambda m: _rewrite_json(m, lambda d: d.pop("format")),
    "format_renamed": lambda m: _rewrite_json(m, lambda d: d.update(format="something-else")),
    "signature_keys_removed": lambda m: _rewrite_json(
        m, lambda d: [d.pop(k) for k in ("format", "format_version", "manifest_sha256", "package_version")]
    ),
}


@pytest.mark.parametrize("damage", list(MANIFEST_DAMAGE))
def test_frozen_set_with_a_damaged_manifest_is_refused_not_read_as_plain_jsonl(tmp_path, damage, capsys):
    from wpb_gym.cli import main
    from wpb_gym.envs.env import WritePolicyBenchEnv
    from wpb_gym.episodes.sources import EpisodeList, episode_files, read_episodes

    root, episode_file = _tampered_set(tmp_path)
    manifest = root / MANIFEST_NAME
    MANIFEST_DAMAGE[damage](manifest)
    assert manifest_kind(root) == "ours"
    for read in (read_episodes, EpisodeList.from_path, episode_files, open_frozen_set):
        with pytest.raises(FrozenSetError) as excinfo:
            read(root)
        assert str(manifest) in str(excinfo.value), read
    with pytest.raises(FrozenSetError, match=MANIFEST_NAME):
        read_episodes(episode_file)  # one file of the set: verified like the whole set
    with pytest.raises(FrozenSetError, match=MANIFEST_NAME):
        WritePolicyBenchEnv(episodes=str(root))
    out = tmp_path / "run"
    argv = ["eval", "--episodes", str(root), "--agents", "no_mem", "--budgets", "1024", "--out", str(out), "--quiet"]
    assert main(argv) == 2  # one line naming the manifest, no traceback
    assert MANIFEST_NAME in capsys.readouterr().err
    assert not (out / "results.csv").exists()


def _paper_like_folder(tmp_path: Path) -> Path:
    """The layout of the paper's released episodes: JSONL files and another tool's manifest."""
    folder = tmp_path / "released"
    folder.mkdir()
    names = {}
    for i, mode in enumerate(["default", "burst_drift"]):
        name = f"episodes__schema=priority_v1__mode={mode}__seed=0__steps=12__n=2.jsonl"
        names[mode] = f"data/episodes/{name}"
        (folder / name).write_bytes(lines(GOOD, GOOD.replace('"episode_id": 0', f'"episode_id": {i + 1}')))
    manifest = {"episodes": 2, "files": names, "modes": list(names), "seed": 0, "steps": 12}
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("manifest", [None, '{"episodes": 2}', "{}"])
def test_a_folder_with_a_foreign_manifest_loads_as_plain_jsonl(tmp_path, manifest):
    from wpb_gym.episodes.sources import episode_files, read_episodes

    folder = _paper_like_folder(tmp_path)
    if manifest is not None:
        (folder / MANIFEST_NAME).write_text(manifest, encoding="utf-8")
    assert manifest_kind(folder) == "foreign"
    files = sorted(folder.glob("*.jsonl"))
    assert episode_files(folder) == files
    assert read_episodes(folder) == [e for f in files for e in load_jsonl(f)]
    assert read_episodes(files[0]) == load_jsonl(files[0])


def test_a_foreign_manifest_that_is_damaged_makes_a_broken_set(tmp_path):
    """Damage never makes a folder look foreign, whatever the manifest was before."""
    from wpb_gym.episodes.sources import read_episodes

    folder = _paper_like_folder(tmp_path)
    (folder / MANIFEST_NAME).write_bytes((folder / MANIFEST_NAME).read_bytes() + b"x")
    assert manifest_kind(folder) == "ours"
    with pytest.raises(FrozenSetError, match="malformed JSON"):
        read_episodes(folder)


def test_a_folder_without_a_manifest_is_plain_jsonl(tmp_path):
    folder = _paper_like_folder(tmp_path)
    (folder / MANIFEST_NAME).unlink()
    assert manifest_kind(folder) is None


def _reseal(root: Path, change) -> None:
    from wpb_gym.episodes.frozen import _manifest_digest

    manifest = json.loads((root / MANIFEST_NAME).read_text(encoding="utf-8"))
    (name,) = manifest["files"]
    change(manifest, name)
    manifest["manifest_sha256"] = _manifest_digest(manifest)
    (root / MANIFEST_NAME).write_text(json.dumps(manifest), encoding="utf-8")


def _entry(key, value):
    return lambda m, name: m["files"][name].__setitem__(key, value)


ENTRY_DAMAGE = {
    "entry_is_a_string": (lambda m, name: m["files"].__setitem__(name, "sha256"), "expected an object"),
    "entry_string_naming_every_key": (
        lambda m, name: m["files"].__setitem__(name, "sha256 episodes regime length seed generator"),
        "expected an object",
    ),
    "entry_is_a_list": (lambda m, name: m["files"].__setitem__(name, [1]), "expected an object"),
    "files_is_a_string": (lambda m, name: m.__setitem__("files", "x.jsonl"), "non-empty object"),
    "files_is_a_list": (lambda m, name: m.__setitem__("files", [name]), "non-empty object"),
    "episodes_string": (_entry("episodes", "abc"), ".episodes: expected a non-negative integer"),
    "episodes_bool": (_entry("episodes", True), ".episodes: expected a non-negative integer"),
    "episodes_negative": (_entry("episodes", -2), ".episodes: expected a non-negative integer"),
    "length_list": (_entry("length", [1]), ".length: expected a positive integer"),
    "length_float": (_entry("length", 12.0), ".length: expected a positive integer"),
    "seed_string": (_entry("seed", "0"), ".seed: expected an integer"),
    "sha256_number": (_entry("sha256", 5), ".sha256: expected 64 lowercase hex digits"),
    "sha256_short": (_entry("sha256", "abc"), ".sha256: expected 64 lowercase hex digits"),
    "regime_number": (_entry("regime", 1), ".regime: expected a string"),
    "generator_list": (_entry("generator", []), ".generator: expected an object"),
    "name_with_folder": (
        lambda m, name: m["files"].__setitem__("sub/" + name, m["files"].pop(name)),
        "plain file name",
    ),
    "name_not_jsonl": (lambda m, name: m["files"].__setitem__("notes.txt", m["files"].pop(name)), "plain file name"),
    "name_with_nul": (lambda m, name: m["files"].__setitem__("a\0.jsonl", m["files"].pop(name)), "plain file name"),
}


@pytest.mark.parametrize("damage", list(ENTRY_DAMAGE))
def test_manifest_files_entry_of_the_wrong_type_is_a_named_error(tmp_path, capsys, damage):
    from wpb_gym.cli import main

    root = tmp_path / "set"
    freeze_set(root, ["default"], [12], episodes=2, seed=0)
    change, needle = ENTRY_DAMAGE[damage]
    _reseal(root, change)
    with pytest.raises(FrozenSetError) as excinfo:
        open_frozen_set(root)
    assert str(excinfo.value).startswith(f"{root / MANIFEST_NAME}: ")
    assert needle in str(excinfo.value)
    assert main(["inspect", str(root)]) == 2  # one line on stderr, no traceback
    err = capsys.readouterr().err
    assert MANIFEST_NAME in err and "Traceback" not in err
