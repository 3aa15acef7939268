"""Frozen episode sets: manifest contents, determinism, tamper detection, atomic creation."""

from __future__ import annotations

import hashlib
import json

import pytest

import wpb_gym
from wpb_gym.episodes.frozen import (
    FORMAT_NAME,
    MANIFEST_NAME,
    FrozenSetError,
    freeze_set,
    open_frozen_set,
    set_file_name,
)
from wpb_gym.episodes.generators.paper import GeneratorConfig, generate_episode, make_config
from wpb_gym.episodes.jsonl import load_jsonl

REGIMES = ["default", "redundancy"]
LENGTHS = [20, 30]
EPISODES = 3
SEED = 7


def _freeze(out, **kwargs):
    return freeze_set(out, REGIMES, LENGTHS, episodes=EPISODES, seed=SEED, **kwargs)


def _manifest(root):
    return json.loads((root / MANIFEST_NAME).read_text(encoding="utf-8"))


def _reseal(root, manifest):
    """Write an edited manifest with a matching self-hash, to reach the checks behind it."""
    from wpb_gym.episodes.frozen import _manifest_digest

    manifest["manifest_sha256"] = _manifest_digest(manifest)
    (root / MANIFEST_NAME).write_text(json.dumps(manifest), encoding="utf-8")


def _expected_names(compress=False):
    return sorted(set_file_name(make_config(r, length=n), SEED, EPISODES, compress) for r in REGIMES for n in LENGTHS)


# --------------------------------------------------------------------------- manifest and contents


def test_freeze_writes_manifest(tmp_path):
    root = tmp_path / "set"
    frozen = _freeze(root)
    assert frozen.root == root
    manifest = _manifest(root)

    assert manifest["format"] == FORMAT_NAME == "wpb-frozen-set"
    assert manifest["format_version"] == 1
    assert manifest["package_version"] == wpb_gym.__version__
    assert manifest["seed"] == SEED
    assert manifest["regimes"] == REGIMES
    assert manifest["lengths"] == LENGTHS
    assert manifest["episodes_per_file"] == EPISODES
    assert manifest["total_episodes"] == EPISODES * len(REGIMES) * len(LENGTHS)
    assert sorted(manifest["files"]) == _expected_names()
    assert "regime=default__T=20__seed=7__n=3.jsonl" in manifest["files"]

    on_disk = sorted(p.name for p in root.iterdir())
    assert on_disk == sorted(_expected_names() + [MANIFEST_NAME])

    for name, entry in manifest["files"].items():
        data = (root / name).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["episodes"] == EPISODES == data.count(b"\n")
        assert entry["seed"] == SEED
        regime, length = entry["regime"], entry["length"]
        assert name == set_file_name(make_config(regime, length=length), SEED, EPISODES)
        generator = entry["generator"]
        assert generator == make_config(regime, length=length).to_dict()
        assert generator["regime"] == regime and generator["length"] == length
        # Table-1 defaults are recorded, not implied.
        assert generator["drift_prob"] == 0.08
        assert generator["api_pool"] == 8
        assert generator["redundancy_prob"] == 0.7
        assert generator["priority_noise"] == 0.0
        assert generator["redundancy"] is (regime == "redundancy")
        assert generator["bursts"] is False


def test_frozen_set_opens_and_matches_generator(tmp_path):
    root = tmp_path / "set"
    returned = _freeze(root)
    frozen = open_frozen_set(root)
    assert frozen.manifest == returned.manifest == _manifest(root)
    assert frozen.total_episodes == 12
    assert [f.path.name for f in frozen.files] == _expected_names()

    seen = 0
    for f in frozen.files:
        assert f.seed == SEED and f.episodes == EPISODES
        assert f.sha256 == hashlib.sha256(f.path.read_bytes()).hexdigest()
        config = make_config(f.regime, length=f.length)
        assert f.generator == config.to_dict()
        episodes = list(f.iter_episodes())
        assert episodes == [generate_episode(config, SEED, i) for i in range(EPISODES)]
        assert all(len(e) == f.length and e.regime == f.regime for e in episodes)
        seen += len(episodes)
    assert seen == 12
    assert sum(1 for _ in frozen.iter_episodes()) == 12


def test_freeze_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _freeze(a)
    _freeze(b)
    names_a = sorted(p.name for p in a.iterdir())
    names_b = sorted(p.name for p in b.iterdir())
    assert names_a == names_b
    assert MANIFEST_NAME in names_a
    for name in names_a:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    # The manifest names no folder and holds no timestamp.
    text = (a / MANIFEST_NAME).read_text(encoding="utf-8")
    assert str(a) not in text and "time" not in text.lower() and "date" not in text.lower()


def test_freeze_gzip_is_deterministic_and_opens(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    frozen = _freeze(a, compress=True)
    _freeze(b, compress=True)
    assert sorted(_manifest(a)["files"]) == _expected_names(compress=True)
    assert all(f.path.name.endswith(".jsonl.gz") for f in frozen.files)
    for name in _expected_names(compress=True):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert (a / MANIFEST_NAME).read_bytes() == (b / MANIFEST_NAME).read_bytes()
    f = open_frozen_set(a).files[0]
    assert load_jsonl(f.path) == [generate_episode(make_config(f.regime, length=f.length), SEED, i) for i in range(3)]


def test_overrides_are_recorded(tmp_path):
    root = tmp_path / "noisy"
    frozen = freeze_set(root, ["default"], [20], episodes=2, seed=SEED, overrides={"priority_noise": 0.2})
    (entry,) = _manifest(root)["files"].values()
    assert entry["generator"]["priority_noise"] == 0.2
    assert entry["generator"] == make_config("default", length=20, priority_noise=0.2).to_dict()
    (f,) = frozen.files
    config = make_config("default", length=20, priority_noise=0.2)
    assert list(f.iter_episodes()) == [generate_episode(config, SEED, i) for i in range(2)]


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError):
        freeze_set(tmp_path / "x", ["default"], [20], episodes=0, seed=0)
    with pytest.raises(ValueError):
        freeze_set(tmp_path / "y", [], [20], episodes=1, seed=0)
    with pytest.raises(ValueError, match="unknown regime"):
        freeze_set(tmp_path / "z", ["nope"], [20], episodes=1, seed=0)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- tampering


@pytest.fixture
def frozen_root(tmp_path):
    root = tmp_path / "set"
    _freeze(root)
    return root


def test_changed_byte_is_detected(frozen_root):
    name = _expected_names()[1]
    path = frozen_root / name
    data = bytearray(path.read_bytes())
    i = data.index(b'"priority": 0.') + len(b'"priority": 0.')
    data[i] = ord("9") if data[i] != ord("9") else ord("8")  # still valid JSON, different bytes
    path.write_bytes(bytes(data))

    with pytest.raises(FrozenSetError) as excinfo:
        open_frozen_set(frozen_root)
    message = str(excinfo.value)
    assert name in message
    assert "sha256" in message
    # Without verification the (still well-formed) set opens.
    assert open_frozen_set(frozen_root, verify=False).total_episodes == 12


def test_appended_line_is_detected(frozen_root):
    name = _expected_names()[0]
    path = frozen_root / name
    path.write_bytes(path.read_bytes() + path.read_bytes().split(b"\n")[0] + b"\n")
    with pytest.raises(FrozenSetError, match="sha256") as excinfo:
        open_frozen_set(frozen_root)
    assert name in str(excinfo.value)


def test_missing_file_is_detected(frozen_root):
    name = _expected_names()[2]
    (frozen_root / name).unlink()
    with pytest.raises(FrozenSetError) as excinfo:
        open_frozen_set(frozen_root)
    assert name in str(excinfo.value)
    assert "missing" in str(excinfo.value)


@pytest.mark.parametrize("extra", ["extra.jsonl", "extra.jsonl.gz"])
def test_unlisted_episode_file_is_detected(frozen_root, extra):
    (frozen_root / extra).write_bytes((frozen_root / _expected_names()[0]).read_bytes())
    with pytest.raises(FrozenSetError) as excinfo:
        open_frozen_set(frozen_root)
    assert extra in str(excinfo.value)
    assert "not listed" in str(excinfo.value)


def test_foreign_manifest_is_refused(frozen_root):
    names = _expected_names()
    (frozen_root / MANIFEST_NAME).write_text(
        json.dumps({"episodes": 10, "files": {n: {"episodes": 3} for n in names}}), encoding="utf-8"
    )
    with pytest.raises(FrozenSetError) as excinfo:
        open_frozen_set(frozen_root)
    assert "'format'" in str(excinfo.value)
    assert MANIFEST_NAME in str(excinfo.value)


def test_manifest_that_is_not_an_object_is_refused(frozen_root):
    (frozen_root / MANIFEST_NAME).write_text("[1, 2, 3]\n", encoding="utf-8")
    with pytest.raises(FrozenSetError, match="format"):
        open_frozen_set(frozen_root)


def test_wrong_format_version_is_refused(frozen_root):
    manifest = _manifest(frozen_root)
    manifest["format_version"] = 99
    _reseal(frozen_root, manifest)
    with pytest.raises(FrozenSetError, match="format_version"):
        open_frozen_set(frozen_root)


def test_malformed_manifest_is_refused(frozen_root):
    (frozen_root / MANIFEST_NAME).write_text('{"format": "wpb-frozen-set",\n  "files": {', encoding="utf-8")
    with pytest.raises(FrozenSetError) as excinfo:
        open_frozen_set(frozen_root)
    assert MANIFEST_NAME in str(excinfo.value)
    assert "malformed JSON" in str(excinfo.value)


def test_missing_manifest_is_refused(frozen_root):
    (frozen_root / MANIFEST_NAME).unlink()
    with pytest.raises(FrozenSetError, match="MANIFEST.json"):
        open_frozen_set(frozen_root)


def test_path_outside_the_set_is_refused(frozen_root):
    manifest = _manifest(frozen_root)
    name = _expected_names()[0]
    manifest["files"]["../" + name] = manifest["files"].pop(name)
    _reseal(frozen_root, manifest)
    with pytest.raises(FrozenSetError, match="plain file name"):
        open_frozen_set(frozen_root)


def test_manifest_entry_missing_key_is_refused(frozen_root):
    manifest = _manifest(frozen_root)
    name = _expected_names()[0]
    del manifest["files"][name]["sha256"]
    _reseal(frozen_root, manifest)
    with pytest.raises(FrozenSetError) as excinfo:
        open_frozen_set(frozen_root)
    assert name in str(excinfo.value) and "sha256" in str(excinfo.value)


# --------------------------------------------------------------------------- existing output, failures


def test_existing_output_needs_force(tmp_path):
    root = tmp_path / "set"
    root.mkdir()
    frozen = _freeze(root, force=True)  # an empty folder may be filled
    assert frozen.total_episodes == 12
    with pytest.raises(FileExistsError, match="force"):
        _freeze(root)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]


def test_force_never_replaces_a_folder_that_is_not_a_set(tmp_path):
    root = tmp_path / "mine"
    root.mkdir()
    (root / "keep.txt").write_text("mine", encoding="utf-8")
    for force in (False, True):
        with pytest.raises(FileExistsError):
            _freeze(root, force=force)
    assert [p.name for p in root.iterdir()] == ["keep.txt"]


def test_an_edited_manifest_is_refused(frozen_root):
    manifest = _manifest(frozen_root)
    name = _expected_names()[0]
    manifest["files"][name]["episodes"] = 999
    (frozen_root / MANIFEST_NAME).write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(FrozenSetError, match="manifest_sha256"):
        open_frozen_set(frozen_root)


def test_a_file_changed_after_opening_is_caught_when_read(frozen_root):
    frozen = open_frozen_set(frozen_root)
    target = frozen.files[0]
    lines = target.path.read_bytes().splitlines(keepends=True)
    target.path.write_bytes(lines[0])  # truncated behind the opened set's back
    with pytest.raises(FrozenSetError, match="sha256 mismatch"):
        list(target.iter_episodes())


def test_an_episode_count_that_disagrees_with_the_file_is_caught(frozen_root):
    manifest = _manifest(frozen_root)
    name = _expected_names()[0]
    manifest["files"][name]["episodes"] += 1
    _reseal(frozen_root, manifest)
    frozen = open_frozen_set(frozen_root)
    entry = next(f for f in frozen.files if f.path.name == name)
    with pytest.raises(FrozenSetError, match="holds 3 episodes, the manifest says 4"):
        list(entry.iter_episodes())


def test_force_replaces_an_existing_set(tmp_path):
    root = tmp_path / "set"
    freeze_set(root, ["burst_drift"], [10], episodes=1, seed=0)
    _freeze(root, force=True)
    assert sorted(_manifest(root)["files"]) == _expected_names()
    assert open_frozen_set(root).total_episodes == 12


class Boom(RuntimeError):
    pass


def _boom_after_first(stream, total, label):
    for i, episode in enumerate(stream):
        if i == 1:
            raise Boom(f"interrupted {label}")
        yield episode


def test_failure_during_generation_leaves_nothing(tmp_path):
    root = tmp_path / "set"
    with pytest.raises(Boom):
        _freeze(root, progress=_boom_after_first)
    assert not root.exists()
    assert list(tmp_path.iterdir()) == [], "a *.partial folder was left behind"


def test_failure_during_forced_freeze_keeps_the_old_set(tmp_path):
    root = tmp_path / "set"
    freeze_set(root, ["default"], [10], episodes=1, seed=0)
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    with pytest.raises(Boom):
        _freeze(root, force=True, progress=_boom_after_first)
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["set"]
    assert open_frozen_set(root).total_episodes == 1


def _progress_key(arg):
    """(regime, length) from progress's third argument: the file's GeneratorConfig (or a "regime T=n" label)."""
    if isinstance(arg, GeneratorConfig):
        return arg.regime, arg.length
    regime, length = str(arg).split(" T=")
    return regime, int(length)


def test_progress_wraps_every_file_stream(tmp_path):
    calls = []

    def progress(stream, total, what):
        calls.append((_progress_key(what), total))
        for episode in stream:
            yield episode

    root = tmp_path / "set"
    frozen = _freeze(root, progress=progress)
    assert sorted(calls) == sorted(((r, n), EPISODES) for r in REGIMES for n in LENGTHS)
    # A pass-through wrapper changes nothing: same bytes as a freeze without one.
    _freeze(tmp_path / "plain")
    for f in frozen.files:
        assert f.path.read_bytes() == (tmp_path / "plain" / f.path.name).read_bytes()


@pytest.mark.parametrize(
    "regimes, lengths, named", [(["default", "default"], [20], "regimes"), (["default"], [20, 20], "lengths")]
)
def test_repeated_grid_entries_are_refused(tmp_path, regimes, lengths, named):
    root = tmp_path / "dup"
    with pytest.raises(ValueError, match=f"{named}.*more than once"):
        freeze_set(root, regimes, lengths, episodes=2, seed=0)
    assert not root.exists()


def test_a_frozen_set_is_readable_by_others(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        frozen = freeze_set(tmp_path / "set", ["default"], [10], episodes=1, seed=0)
    finally:
        os.umask(old)
    assert stat.S_IMODE(frozen.root.stat().st_mode) == 0o755
    for path in frozen.root.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_contract_regimes_freeze_deterministically_and_verify(tmp_path):
    regimes = ["reverts", "contract_mix"]
    freeze_set(tmp_path / "a", regimes, [80], episodes=2, seed=3)
    b = freeze_set(tmp_path / "b", regimes, [80], episodes=2, seed=3)
    files_a, files_b = _manifest(tmp_path / "a")["files"], _manifest(tmp_path / "b")["files"]
    assert {n: f["sha256"] for n, f in files_a.items()} == {n: f["sha256"] for n, f in files_b.items()}
    reopened = open_frozen_set(tmp_path / "a")  # checks every file's sha256
    episodes = [episode for _, episode in reopened.iter_episodes()]
    assert sorted(e.regime for e in episodes) == ["contract_mix", "contract_mix", "reverts", "reverts"]
    first_revert = next(e for e in episodes if e.regime == "reverts")
    assert first_revert == generate_episode(make_config("reverts", length=80), seed=3, index=0)
    assert b.root == tmp_path / "b"
