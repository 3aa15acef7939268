"""Files written whole or not at all, with the mode an ordinary new file gets.

A file is written to a temporary name in its folder and renamed into place, so an interrupted
write never leaves a file that looks complete, nor clobbers an earlier one with part of itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def default_mode(directory: bool = False) -> int:
    """The mode an ordinary new file or folder gets under the umask.

    ``mkstemp``/``mkdtemp`` create 0600/0700, which would hide a released set from other users.
    """
    return (0o777 if directory else 0o666) & ~_current_umask()


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename."""
    return write_atomic_bytes(path, text.encode("utf-8"))


def write_atomic_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """``write_atomic`` for bytes (pictures)."""
    with atomic_output(path) as handle:
        handle.write(data)
    return Path(path)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file to write ``path`` through, for data written as it comes (a stream of
    episodes): the file appears under ``path``, with ``default_mode``, only if the block ends
    without an exception; otherwise the partial data is removed and any earlier file kept."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), default_mode())  # mkstemp's 0600 would hide the file from other users
            yield handle
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A folder to build ``path``'s whole content in: it takes ``path``'s place (with
    ``default_mode``) only if the block ends without an exception, and is removed otherwise.
    An earlier ``path`` is moved aside first and deleted last, so that at every moment one
    complete folder exists under some name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, default_mode(directory=True))  # mkdtemp's 0700 would hide it from other users
        old = None
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
