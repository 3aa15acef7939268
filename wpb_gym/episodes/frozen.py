"""Frozen episode sets: a folder of JSONL files and a ``MANIFEST.json`` that pins them.

The paper freezes episodes "so future code changes do not silently change the benchmark
instances". A frozen set records, for every file, the generator configuration, the seed,
the episode count and the sha256 of its bytes, plus the package version that wrote it.
Opening a set verifies every hash, so a set that changed after freezing is refused.

Layout::

    DIR/
      MANIFEST.json
      regime=default__T=200__seed=0__n=10.jsonl
      regime=burst_drift__T=200__seed=0__n=10.jsonl
      ...

The manifest holds no timestamps: freezing the same grid twice gives identical bytes. It
carries ``manifest_sha256``, the sha256 of its own canonical JSON without that field, so an
edited manifest is refused too; iterating a file checks its hash and episode count again.

Which folders are frozen sets (``manifest_kind``). A folder with an entry named
``MANIFEST.json`` — a file, a directory, a broken link, whatever it holds — is a frozen set,
and any problem with that manifest is a ``FrozenSetError`` naming it and what is wrong; the
folder is never read as plain JSONL instead. There is one exception, for manifests that
other tools write beside their JSONL files (the paper's released episodes carry one mapping
regimes to paths): a manifest is *foreign*, and the folder plain JSONL, only when it is a
regular file of UTF-8 text holding one well-formed JSON object (strict JSON: no repeated
keys, no NaN) that has none of our manifest's own keys (``format``, ``format_version``,
``manifest_sha256``, ``package_version``) and no ``files`` entry that is an object with a
``sha256``. So damaging our manifest — a byte appended, emptied, re-encoded, replaced by a
list or by a directory, truncated, a field edited — cannot make the folder look foreign:
each of these leaves it a broken frozen set. (A manifest rewritten on purpose as a foreign
one, or deleted, is another matter: the manifest vouches for the files, and nothing vouches
for the manifest's presence.)
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..core.atomic_files import atomic_folder, default_mode
from ..core.strict_json import JSONLineError, StrictDecoder
from ..core.types import Episode
from ..core.version import __version__
from .generators.regimes import RegimeConfig, generate_episodes, make_config
from .jsonl import iter_jsonl, write_jsonl

MANIFEST_NAME = "MANIFEST.json"
FORMAT_NAME = "wpb-frozen-set"
FORMAT_VERSION = 1


class FrozenSetError(ValueError):
    """A frozen set that cannot be trusted or read; the message names the file."""


# Keys that only our manifest has: any one of them makes a manifest ours, however damaged.
_OWN_KEYS = ("format", "format_version", "manifest_sha256", "package_version")
EPISODE_FILE_SUFFIXES = (".jsonl", ".jsonl.gz")


def read_manifest(manifest_path: str | os.PathLike[str]) -> Any:
    """The decoded JSON of a manifest file; a ``FrozenSetError`` naming it when it cannot be read."""
    manifest_path = Path(manifest_path)
    if manifest_path.is_dir():
        raise FrozenSetError(f"{manifest_path}: a directory, not a manifest file")
    if os.path.lexists(manifest_path) and not manifest_path.is_file():
        # Reading a pipe would wait for a writer forever.
        raise FrozenSetError(f"{manifest_path}: not a regular file (a broken link, a pipe or a device)")
    try:
        data = manifest_path.read_bytes()
    except OSError as exc:
        raise FrozenSetError(f"{manifest_path}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrozenSetError(
            f"{manifest_path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    if not text.strip():
        raise FrozenSetError(f"{manifest_path}: empty (expected the JSON object that wpb freeze writes)")
    try:
        return StrictDecoder().decode(text)
    except JSONLineError as exc:
        raise FrozenSetError(f"{manifest_path}: {exc}") from None


def manifest_kind(folder: str | os.PathLike[str]) -> str | None:
    """``"ours"``, ``"foreign"`` or None (no manifest) for the ``MANIFEST.json`` in ``folder``.

    See the module docstring: anything that is not clearly another tool's manifest is ours,
    so that a damaged manifest is reported by ``open_frozen_set`` rather than ignored.
    """
    manifest_path = Path(folder) / MANIFEST_NAME
    if not os.path.lexists(manifest_path):
        return None
    if not manifest_path.is_file():
        return "ours"
    try:
        manifest = read_manifest(manifest_path)
    except FrozenSetError:
        return "ours"
    if not isinstance(manifest, dict) or any(key in manifest for key in _OWN_KEYS):
        return "ours"
    files = manifest.get("files")
    if isinstance(files, dict) and any(isinstance(entry, dict) and "sha256" in entry for entry in files.values()):
        return "ours"
    return "foreign"


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _mismatch(path: Path, expected: str, actual: str) -> str:
    return (
        f"{path}: sha256 mismatch (manifest {expected[:16]}..., file {actual[:16]}...): "
        "the file changed after it was frozen"
    )


def _manifest_digest(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def _is_replaceable(path: Path) -> bool:
    """--force may only replace an empty folder or a frozen set, never arbitrary files."""
    if not path.is_dir():
        return False
    if not any(path.iterdir()):
        return True
    try:
        manifest = read_manifest(path / MANIFEST_NAME)
    except FrozenSetError:
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT_NAME


def set_file_name(config: RegimeConfig, seed: int, n: int, compress: bool = False) -> str:
    return f"regime={config.regime}__T={config.length}__seed={seed}__n={n}.jsonl" + (".gz" if compress else "")


@dataclass(frozen=True)
class FrozenFile:
    """One file of a set and what the manifest says of it."""

    path: Path
    regime: str
    length: int
    seed: int
    episodes: int
    sha256: str
    generator: dict[str, Any]

    def iter_episodes(self) -> Iterator[Episode]:
        """The file's episodes, checked again against the manifest (hash first, count at the end)."""
        actual = sha256_file(self.path)
        if actual != self.sha256:
            raise FrozenSetError(_mismatch(self.path, self.sha256, actual))
        count = 0
        for episode in iter_jsonl(self.path):
            count += 1
            yield episode
        if count != self.episodes:
            raise FrozenSetError(f"{self.path}: holds {count} episodes, the manifest says {self.episodes}")


@dataclass(frozen=True)
class FrozenSet:
    """An opened, hash-verified frozen set."""

    root: Path
    manifest: dict[str, Any]
    files: tuple[FrozenFile, ...]

    @property
    def total_episodes(self) -> int:
        return sum(f.episodes for f in self.files)

    def iter_episodes(self) -> Iterator[tuple[FrozenFile, Episode]]:
        for f in self.files:
            for episode in f.iter_episodes():
                yield f, episode


def freeze_set(
    out_dir: str | os.PathLike[str],
    regimes: Sequence[str],
    lengths: Sequence[int],
    episodes: int,
    seed: int,
    *,
    overrides: dict[str, Any] | None = None,
    compress: bool = False,
    force: bool = False,
    progress: Callable[[Iterable[Episode], int, RegimeConfig], Iterable[Episode]] | None = None,
) -> FrozenSet:
    """Generate and write a frozen set of ``episodes`` per (regime, length); return it opened.

    The set is built in a temporary folder beside ``out_dir`` and renamed into place when
    complete, so an interrupted freeze leaves no folder that looks like a set. An existing
    ``out_dir`` is an error unless ``force`` is given (then it is replaced). ``progress``
    wraps each file's episode stream (for a progress bar or statistics) and must yield the
    episodes unchanged.
    """
    out = Path(out_dir)
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if not regimes or not lengths:
        raise ValueError("freeze needs at least one regime and one length")
    for name, values in (("regimes", list(regimes)), ("lengths", [int(n) for n in lengths])):
        repeated = sorted({v for v in values if values.count(v) > 1}, key=str)
        if repeated:
            raise ValueError(f"{name}: {repeated} listed more than once (each file of a set is one regime and length)")
    configs = [make_config(r, length=int(n), **(overrides or {})) for r in regimes for n in lengths]

    def write_files(folder: Path) -> dict[str, Any]:
        files: dict[str, Any] = {}
        for config in configs:
            name = set_file_name(config, seed, episodes, compress)
            stream: Iterable[Episode] = generate_episodes(config, seed, episodes)
            if progress is not None:
                stream = progress(stream, episodes, config)
            files[name] = {
                "episodes": write_jsonl(folder / name, stream),
                "generator": config.to_dict(),
                "length": config.length,
                "regime": config.regime,
                "seed": seed,
                "sha256": sha256_file(folder / name),
            }
        return files

    manifest = {
        "created_by": "wpb freeze",
        "episodes_per_file": episodes,
        "lengths": [int(n) for n in lengths],
        "regimes": list(regimes),
        "seed": seed,
        "total_episodes": episodes * len(configs),
    }
    write_frozen_set(out, write_files, manifest, force=force)
    return open_frozen_set(out)


def write_frozen_set(
    out_dir: str | os.PathLike[str],
    write_files: Callable[[Path], dict[str, Any]],
    manifest_fields: dict[str, Any],
    *,
    force: bool = False,
) -> None:
    """Write a frozen set atomically: ``write_files(folder)`` writes the episode files into
    ``folder`` and returns their manifest entries (``sha256``, ``episodes``, ``regime``,
    ``length``, ``seed``, ``generator``), keyed by file name.

    The set is built in a temporary folder beside ``out_dir`` and renamed into place when
    complete, so an interrupted write leaves no folder that looks like a set. An existing
    ``out_dir`` is an error unless ``force`` is given and it is a set or an empty folder.
    """
    out = Path(out_dir)
    if out.exists() and not force:
        raise FileExistsError(f"{out} already exists (pass force=True / --force to replace it)")
    if out.exists() and not _is_replaceable(out):
        raise FileExistsError(f"{out} exists and is not a frozen set or an empty folder; refusing to replace it")
    with atomic_folder(out) as tmp:
        files = write_files(tmp)
        manifest = {
            **manifest_fields,
            "files": files,
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "package_version": __version__,
        }
        manifest["manifest_sha256"] = _manifest_digest(manifest)
        text = json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False)  # what the reader accepts
        (tmp / MANIFEST_NAME).write_text(text + "\n", encoding="utf-8")
        os.chmod(tmp / MANIFEST_NAME, default_mode())


def open_frozen_set(root: str | os.PathLike[str], *, verify: bool = True) -> FrozenSet:
    """Open the set in ``root``, checking that every file exists and matches its sha256.

    Every problem with the manifest (unreadable, not JSON, not our format, a field of the
    wrong type) is a ``FrozenSetError`` that names the manifest and the field.
    """
    root = Path(root)
    manifest_path = root / MANIFEST_NAME
    if not os.path.lexists(manifest_path):
        raise FrozenSetError(f"{manifest_path}: missing (not a frozen set; load single files with load_jsonl)")
    manifest = read_manifest(manifest_path)
    if not isinstance(manifest, dict):
        raise FrozenSetError(
            f"{manifest_path}: expected a JSON object (the manifest of format {FORMAT_NAME!r} that wpb freeze "
            f"writes), got {type(manifest).__name__}"
        )
    if manifest.get("format") != FORMAT_NAME:
        raise FrozenSetError(
            f"{manifest_path}: field 'format': expected {FORMAT_NAME!r}, got {manifest.get('format')!r:.60} "
            "(not the manifest of a wpb frozen set, or a damaged one)"
        )
    if manifest.get("manifest_sha256") != _manifest_digest(manifest):
        raise FrozenSetError(
            f"{manifest_path}: field 'manifest_sha256' does not match the manifest's content "
            "(the manifest was edited after freezing)"
        )
    if manifest.get("format_version") != FORMAT_VERSION:
        raise FrozenSetError(
            f"{manifest_path}: field 'format_version': expected {FORMAT_VERSION}, "
            f"got {manifest.get('format_version')!r}"
        )
    entries = manifest.get("files")
    if not isinstance(entries, dict) or not entries:
        raise FrozenSetError(f"{manifest_path}: field 'files': expected a non-empty object, got {entries!r:.60}")
    files = []
    for name, entry in sorted(entries.items()):
        _check_entry(manifest_path, name, entry)
        path = root / name
        if not path.is_file():
            raise FrozenSetError(f"{path}: listed in {MANIFEST_NAME} but missing")
        if verify:
            actual = sha256_file(path)
            if actual != entry["sha256"]:
                raise FrozenSetError(_mismatch(path, entry["sha256"], actual))
        files.append(
            FrozenFile(
                path=path,
                regime=entry["regime"],
                length=entry["length"],
                seed=entry["seed"],
                episodes=entry["episodes"],
                sha256=entry["sha256"],
                generator=entry["generator"],
            )
        )
    listed = set(entries)
    strays = sorted(p.name for p in root.iterdir() if p.name.endswith(EPISODE_FILE_SUFFIXES) and p.name not in listed)
    if strays:
        raise FrozenSetError(f"{root / strays[0]}: episode file not listed in {MANIFEST_NAME}")
    return FrozenSet(root=root, manifest=manifest, files=tuple(files))


def _is_count(value: Any, least: int) -> bool:
    return type(value) is int and value >= least


# What each file entry holds: (check, what the check expects).
_ENTRY_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sha256": (
        lambda v: isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v),
        "64 lowercase hex digits",
    ),
    "episodes": (lambda v: _is_count(v, 0), "a non-negative integer"),
    "regime": (lambda v: isinstance(v, str), "a string"),
    "length": (lambda v: _is_count(v, 1), "a positive integer"),
    "seed": (lambda v: type(v) is int, "an integer"),
    "generator": (lambda v: isinstance(v, dict), "an object"),
}


def _check_entry(manifest_path: Path, name: str, entry: Any) -> None:
    where = f"{manifest_path}: files[{name!r}]"
    if "\0" in name or Path(name).name != name or not name.endswith(EPISODE_FILE_SUFFIXES):
        raise FrozenSetError(f"{where}: expected a plain file name ending in .jsonl or .jsonl.gz")
    if not isinstance(entry, dict):
        raise FrozenSetError(f"{where}: expected an object (sha256, episodes, ...), got {type(entry).__name__}")
    for key, (ok, expected) in _ENTRY_FIELDS.items():
        if key not in entry:
            raise FrozenSetError(f"{where}.{key}: missing")
        if not ok(entry[key]):
            raise FrozenSetError(f"{where}.{key}: expected {expected}, got {entry[key]!r:.60}")
