"""The vector env's compiled core: every speed device of ``envs.vector`` lives in this package.

``episode_arrays`` turns an episode, as a single env just reset to it sees it, into flat
arrays (``layout`` says where each thing sits); ``kernel`` steps many sub-envs over them in
one compiled call (numba), with ``comparisons`` and ``memory`` as its parts. The single env
(``envs.env``) stays the literal definition of the dynamics: the differential tests play both
on the same seeds and actions and require equal outputs.

Compiled code is cached on disk (the first call of a fresh install compiles for a few
seconds). numba keys a cached function on its own file only, and a caller's machine code holds
its callees', so the cache lives in a folder named after the digest of all of this package's
sources: an edit to any of them compiles everything afresh.
"""

from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from pathlib import Path

from numba.core import config

_HERE = Path(__file__).parent


@contextmanager
def _cache_keyed_on_these_sources():
    digest = hashlib.sha256()
    for path in sorted(_HERE.glob("*.py")):
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


with _cache_keyed_on_these_sources():
    from . import comparisons, kernel, memory  # noqa: F401  (compiled functions bind their cache here)
