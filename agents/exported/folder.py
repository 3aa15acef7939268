"""The two files of an exported policy, written atomically and read back with every field checked.

``policy.json`` is read as JSON (no NaN, at most 1 MB, 32 levels deep) and each field is
checked for its type as it is read (``Fields``), so a value of the wrong type is named with its
file and key rather than failing later inside a library. ``weights.safetensors`` is read in
two steps: its header alone (names, dtypes, shapes: ``WeightsHeader``), which bounds what the
architecture may build, then the tensors, once the rebuilt policy has said exactly which it
expects. A pickle, a zip (``torch.save`` and SB3 write zips of pickles) or any other file in its
place is refused from its first bytes; nothing here unpickles.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wpb_gym.core.atomic_files import default_mode

FORMAT = "wpb-policy"
FORMAT_VERSION = 1
MANIFEST = "policy.json"
WEIGHTS = "weights.safetensors"
LIBRARIES = ("sb3", "rllib")
_MAX_MANIFEST_BYTES = 1 << 20
_MAX_DEPTH = 32
# The most layers a list of layer widths, or an LSTM, may have: far beyond any policy trained
# here (two or three), and few enough that building them costs nothing. The size check bounds
# the numbers a description may ask for, not the layers: 100,000 LSTM layers of one unit hold
# few numbers and took minutes to build (20,000 fully connected layers of one unit, 7 s and 650 MB).
MAX_LAYERS = 64
# The safetensors dtypes a policy's tensors may have, as torch names them.
DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
          "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


class PolicyFileError(ValueError):
    """An exported policy that cannot be read or does not hold together: one line naming the
    file (and key, or tensor) and what is wrong."""


# ------------------------------------------------------------------------------ policy.json
@dataclass(frozen=True)
class Fields:
    """A JSON object of ``policy.json`` read field by field: each getter names ``where`` (the
    file and the object's key path) and the field in its error."""

    values: Mapping[str, Any]
    where: str

    def get(self, key: str, what: str) -> Any:
        if key not in self.values:
            raise PolicyFileError(f"{self.where}: no {key!r} ({what})")
        return self.values[key]

    def _wrong(self, key: str, what: str, value: Any) -> PolicyFileError:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        return PolicyFileError(f"{self.where}: {key}: expected {what}, got {type(value).__name__} {shown}")

    def text(self, key: str, choices: tuple[str, ...] | None = None) -> str:
        what = f"one of {', '.join(choices)}" if choices else "text"
        value = self.get(key, what)
        if not isinstance(value, str) or (choices is not None and value not in choices):
            raise self._wrong(key, what, value)
        return value

    def integer(self, key: str, minimum: int = 0, maximum: int | None = None) -> int:
        what = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        value = self.get(key, what)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self._wrong(key, what, value)
        if maximum is not None and value > maximum:
            raise self._wrong(key, what, value)
        return value

    def boolean(self, key: str) -> bool:
        value = self.get(key, "true or false")
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false", value)
        return value

    def mapping(self, key: str) -> Fields:
        value = self.get(key, "an object")
        if not isinstance(value, dict):
            raise self._wrong(key, "an object", value)
        return Fields(value, f"{self.where}: {key}")

    def widths(self, key: str, value: Any = None) -> list[int]:
        """A list of layer widths (integers >= 1), possibly empty, of at most ``MAX_LAYERS``."""
        value = self.get(key, "a list of layer widths") if value is None else value
        if not isinstance(value, list) or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in value):
            raise self._wrong(key, "a list of layer widths (integers >= 1)", value)
        if len(value) > MAX_LAYERS:
            raise PolicyFileError(f"{self.where}: {key}: {len(value):,} layers, more than the {MAX_LAYERS} a policy "
                                  "may have: refused before building it")
        return list(value)

    def plain(self, key: str) -> dict[str, Any]:
        """An object whose values are JSON scalars or lists of them (keyword arguments)."""
        fields = self.mapping(key)
        for name, value in fields.values.items():
            items = value if isinstance(value, list) else [value]
            if not all(v is None or isinstance(v, (str, int, float, bool)) for v in items):
                raise fields._wrong(name, "a number, text, true/false, null or a list of them", value)
        return dict(fields.values)


def read_manifest(folder: Path) -> Fields:
    """``policy.json`` of the policy folder ``folder``, its format and top-level fields checked."""
    if not folder.is_dir():
        what = "a file" if folder.exists() else "no such folder"
        hint = " (a model file? export it first: wpb export sb3 MODEL.zip --out DIR)" if folder.is_file() else ""
        raise PolicyFileError(f"{folder}: {what}; expected the folder wpb export writes{hint}")
    path = folder / MANIFEST
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_MANIFEST_BYTES + 1)
    except OSError as error:
        raise PolicyFileError(f"{path}: cannot read: {error.strerror or error}") from None
    if len(data) > _MAX_MANIFEST_BYTES:
        raise PolicyFileError(f"{path}: larger than {_MAX_MANIFEST_BYTES >> 20} MB; not a policy description")
    kind = _pickled(data)
    if kind:
        raise PolicyFileError(f"{path}: {kind}, not JSON; an exported policy is never unpickled")
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise PolicyFileError(f"{path}: not UTF-8 text") from None
    except (ValueError, RecursionError) as error:
        raise PolicyFileError(f"{path}: not valid JSON ({type(error).__name__}: {error})") from None
    if _depth(value) > _MAX_DEPTH:
        raise PolicyFileError(f"{path}: nested more than {_MAX_DEPTH} levels deep; not a policy description")
    if not isinstance(value, dict):
        raise PolicyFileError(f"{path}: expected a JSON object, got {type(value).__name__}")
    fields = Fields(value, str(path))
    if fields.text("format") != FORMAT:
        raise PolicyFileError(f"{path}: format is {value['format']!r}, not {FORMAT!r}")
    version = fields.integer("format_version", 1)
    if version > FORMAT_VERSION:
        raise PolicyFileError(f"{path}: format_version {version} is newer than this wpb reads ({FORMAT_VERSION}); "
                              "upgrade writepolicybench-gym")
    fields.text("library", LIBRARIES)
    return fields


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _depth(value: Any) -> int:
    """How deeply ``value`` nests, without recursion (a JSON value read back is a tree)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            todo += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            todo += [(v, depth + 1) for v in item]
    return deepest


def _pickled(data: bytes) -> str | None:
    """What ``data`` is if it is a pickle or a zip (which ``torch.save`` and SB3 fill with pickles)."""
    if len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= 5:
        return "a pickle"
    if data.startswith(b"PK\x03\x04"):
        return "a zip archive (torch.save and SB3 write those, holding pickles)"
    return None


# ------------------------------------------------------------------------------ weights
@dataclass(frozen=True)
class WeightsHeader:
    """What ``weights.safetensors`` says it holds: each tensor's shape and dtype, by name."""

    path: Path
    tensors: dict[str, tuple[tuple[int, ...], str]]

    @property
    def elements(self) -> int:
        return sum(math.prod(shape) for shape, _ in self.tensors.values())


def read_weights_header(folder: Path, manifest: Fields) -> WeightsHeader:
    """The header of the folder's weights, after checking that the file is safetensors and is the
    one ``policy.json`` was written with (its sha256)."""
    from safetensors import SafetensorError, safe_open

    path = folder / WEIGHTS
    weights = manifest.mapping("weights")
    expected = weights.text("sha256")
    try:
        with open(path, "rb") as handle:
            start = handle.read(16)
    except OSError as error:
        raise PolicyFileError(f"{path}: cannot read: {error.strerror or error}") from None
    # A safetensors file starts with its header's length (8 bytes, whose first may well be 0x80,
    # as a pickle's is) and the header's JSON.
    if len(start) < 9 or start[8:9] != b"{":
        kind = _pickled(start)
        if kind:
            raise PolicyFileError(f"{path}: {kind}, not safetensors; an exported policy is never unpickled")
        raise PolicyFileError(f"{path}: not a safetensors file (it does not start with a header's length and JSON)")
    if _sha256(path) != expected:
        raise PolicyFileError(f"{path}: its sha256 is not the {expected[:16]}... that {folder / MANIFEST} records: "
                              "the two files are not of one export")
    try:
        with safe_open(str(path), framework="pt") as handle:
            tensors = {}
            for name in handle.keys():  # noqa: SIM118 - a safetensors handle, not a dict
                piece = handle.get_slice(name)
                dtype = piece.get_dtype()
                if dtype not in DTYPES:
                    raise PolicyFileError(f"{path}: tensor {name!r} is of dtype {dtype}, which no policy holds")
                tensors[name] = (tuple(piece.get_shape()), DTYPES[dtype])
    except SafetensorError as error:
        raise PolicyFileError(f"{path}: not a readable safetensors file ({error})") from None
    return WeightsHeader(path, tensors)


def check_size(numbers: int, header: WeightsHeader, where: str) -> None:
    """Refuse an architecture of far more numbers than the weights file holds (a legitimate one
    holds exactly as many) before it is built: its sizes come from a file, and are not trusted."""
    held = header.elements
    if numbers > 2 * held + 4096:
        raise PolicyFileError(f"{where}: its architecture holds {numbers:,} numbers, but {header.path} holds "
                              f"{held:,}: refused before building it")


def mlp_numbers(width: int, widths: list[int], layer_norm: bool = False) -> tuple[int, int]:
    """The weights and biases of fully connected layers of ``widths`` over ``width`` inputs (and
    of a layer norm after each), and the last width."""
    total = 0
    for w in widths:
        total, width = total + (width + 1) * w + (2 * w if layer_norm else 0), w
    return total, width


def read_weights(header: WeightsHeader, expected: Mapping[str, tuple[tuple[int, ...], str]]) -> dict[str, Any]:
    """The tensors of ``header``'s file, once their names, shapes and dtypes are exactly
    ``expected`` (the rebuilt policy's ``state_dict``)."""
    from safetensors.torch import load_file

    path, held = header.path, header.tensors
    missing = sorted(set(expected) - set(held))
    extra = sorted(set(held) - set(expected))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"lacks {len(missing)} tensor(s) the policy has ({', '.join(missing[:3])}"
                         f"{', ...' if len(missing) > 3 else ''})")
        if extra:
            parts.append(f"holds {len(extra)} the policy has not ({', '.join(extra[:3])}"
                         f"{', ...' if len(extra) > 3 else ''})")
        raise PolicyFileError(f"{path}: {' and '.join(parts)}")
    for name, (shape, dtype) in expected.items():
        held_shape, held_dtype = held[name]
        if held_shape != shape:
            raise PolicyFileError(f"{path}: tensor {name!r} has shape {list(held_shape)}, the policy's {list(shape)}")
        if held_dtype != dtype:
            raise PolicyFileError(f"{path}: tensor {name!r} is {held_dtype}, the policy's is {dtype}")
    return load_file(str(path), device="cpu")


def tensor_table(state: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """A ``state_dict``'s names, shapes and dtypes, as ``WeightsHeader`` reads them."""
    return {name: (tuple(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in state.items()}


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


# ------------------------------------------------------------------------------ writing
def stage_policy_folder(out: Path, manifest: dict[str, Any], state: Mapping[str, Any]) -> Path:
    """Write ``manifest`` (with the weights' sha256 added) and the tensors of ``state`` as a policy
    folder beside ``out``, under a hidden name: ``publish_policy_folder`` moves it into place once
    it has been checked, ``discard_staged`` removes it otherwise."""
    from safetensors.torch import save_file

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.incoming-", dir=out.parent))
    try:
        staging.chmod(default_mode(directory=True))
        # Contiguous copies on the CPU: safetensors refuses tensors that share memory (tied weights).
        tensors = {name: t.detach().to("cpu").contiguous().clone() for name, t in state.items()}
        save_file(tensors, str(staging / WEIGHTS), metadata={"format": FORMAT})
        manifest = {**manifest, "weights": {"file": WEIGHTS, "sha256": _sha256(staging / WEIGHTS)}}
        text = json.dumps(manifest, indent=2, allow_nan=False) + "\n"
        (staging / MANIFEST).write_text(text, encoding="utf-8")
        for file in (staging / WEIGHTS, staging / MANIFEST):
            file.chmod(default_mode())
    except BaseException:
        discard_staged(staging)
        raise
    return staging


def publish_policy_folder(staged: Path, out: Path) -> None:
    """Move the staged policy folder to ``out``, replacing what ``check_out`` allowed there."""
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / "policy")
        os.replace(staged, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staged, out)


def discard_staged(staged: Path) -> None:
    shutil.rmtree(staged, ignore_errors=True)


def check_out(out: Path, force: bool) -> None:
    """Refuse an ``out`` that ``publish_policy_folder`` may not replace, before any work: only a
    missing or empty folder, or with ``force`` an exported policy, is replaced."""
    if not out.exists():
        return
    if not out.is_dir():
        raise PolicyFileError(f"{out}: is a file; expected the folder to write the policy to")
    held = {p.name for p in out.iterdir()}
    if held and not (force and MANIFEST in held and held <= {MANIFEST, WEIGHTS}):
        what = "an exported policy; pass --force to replace it" if MANIFEST in held else "not empty"
        raise PolicyFileError(f"{out}: {what}")
