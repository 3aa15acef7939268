"""File names built from episode data (regime names): safe, and distinct for distinct names.

A regime name comes from the episode file (``labels.mode``), so it may hold path separators,
``..``, NUL or thousands of characters; used as it is, it would put checkpoints and pictures
outside the run folder.
"""

from __future__ import annotations

import hashlib
import re

# Plain names (every built-in regime) are used as they are: they cannot escape a folder, and
# hold no '-', which every rewritten name does, so a plain name never equals a rewritten one.
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.]{0,63}")
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9_]+")


def name_part(text: str) -> str:
    """``text`` as one part of a file name: itself when plain, else a short slug of it plus a
    hash of the whole text (``real:stripe`` -> ``real-stripe-<10 hex digits>``)."""
    if _PLAIN.fullmatch(text) and ".." not in text:
        return text
    slug = _UNSAFE_RUN.sub("-", text).strip("-")[:40].rstrip("-")
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{slug or 'x'}-{digest}"
