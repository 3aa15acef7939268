"""The installed package version (from the distribution metadata, falling back to the source tree's)."""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("writepolicybench-gym")
except metadata.PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.13.0"
