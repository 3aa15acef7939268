"""Where numba caches the compiled core. numba keys a cached function on its own file only,
and a caller's machine code holds its callees', so the cache lives in a folder named after the
digest of all of this package's sources and of the modules ``layout`` takes constants from: an
edit to any of them compiles everything afresh.
The first run on a machine compiles (about 10 s); later processes load (about 1 s)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from numba.core import config

_HERE = Path(__file__).parent
# layout.py takes feature positions and kind codes from these, paper_episodes and contract_replay the
# utilities, contract_replay the word pairs; numba compiles them in as constants.
_GENERATORS = _HERE.parent.parent / "episodes" / "generators"
_CONSTANTS_FROM = (_HERE.parent / "observation" / "features.py", _HERE.parent / "observation" / "stream_table.py",
                   _GENERATORS / "utility_scale.py", _GENERATORS / "contracts.py")


@contextmanager
def keyed_on_these_sources() -> Iterator[None]:
    """numba's cache folder, while the compiled modules are imported: under ``NUMBA_CACHE_DIR``
    if set, else beside these sources (``~/.cache/wpb_gym`` where that is read-only)."""
    digest = hashlib.sha256()
    for path in [*sorted(_HERE.glob("*.py")), *_CONSTANTS_FROM]:
        digest.update(path.name.encode() + path.read_bytes())
    base = Path(config.CACHE_DIR) if config.CACHE_DIR else _HERE / "__pycache__"
    if not os.access(base if base.exists() else base.parent, os.W_OK):
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "wpb_gym"
    before = config.CACHE_DIR
    config.CACHE_DIR = str(base / f"numba-{digest.hexdigest()[:16]}")
    try:
        yield
    finally:
        config.CACHE_DIR = before
