"""Fixtures of the command-line tests."""

from __future__ import annotations

import contextlib
import io

import pytest

from wpb_gym.cli import main

TINY = ["--lengths", "20", "--episodes-per-condition", "2", "--budgets", "1024", "--tracks", "unprivileged", "--quiet"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A run on the unprivileged track only, and one on both tracks (for commands that read runs)."""
    root = tmp_path_factory.mktemp("runs")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["eval", *TINY, "--agents", "fifo_store_all,last_kb", "--out", str(root / "unprivileged")]) == 0
        tiny = [arg for arg in TINY if arg not in ("--tracks", "unprivileged")]
        argv = ["eval", *tiny, "--agents", "fifo_store_all,priority_threshold", "--tracks", "unprivileged,privileged"]
        assert main([*argv, "--out", str(root / "both")]) == 0
    return root
