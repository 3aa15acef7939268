"""Filler text and dates for generated documentation, guides and endpoint summaries."""

from __future__ import annotations

import datetime as _dt

import numpy as np

_BASE_DATE = _dt.date(2024, 1, 1)
VOCABULARY: tuple[str, ...] = tuple(
    "the request returns object field param value endpoint client server token error status limit page "
    "cursor header body schema version deprecated required optional string integer array list create "
    "update delete retrieve expand filter sort response payload timeout retry idempotency key account "
    "customer charge invoice event webhook signature secret scope permission migrate replace remove".split()
)
_WORD_WIDTHS = np.array([len(word) + 1 for word in VOCABULARY])  # a word and the space after it


def filler_text(rng: np.random.Generator, n_bytes: int) -> str:
    """``n_bytes`` of filler: the start of ``n_bytes // 3 + 1`` words drawn uniformly, joined by
    spaces. (``rng.choice`` of the vocabulary draws the same indices; joining only the words
    the text reaches, as Python strings, is what keeps a 5 KB section cheap.)"""
    picks = rng.integers(0, len(VOCABULARY), size=n_bytes // 3 + 1)
    # Word j ends the text once the words up to it and their spaces reach n_bytes + 1 characters.
    reached = int(np.searchsorted(np.cumsum(_WORD_WIDTHS[picks]), n_bytes + 1)) + 1
    return " ".join(map(VOCABULARY.__getitem__, picks[:reached].tolist()))[:n_bytes]


def stream_date(t: int) -> str:
    """The date shown at step ``t``: one day per step from ``_BASE_DATE``."""
    return (_BASE_DATE + _dt.timedelta(days=t)).isoformat()
