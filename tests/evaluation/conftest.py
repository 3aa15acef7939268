"""Fixtures of the evaluation tests."""

from __future__ import annotations

import contextlib
import io

import pytest

from wpb_gym.cli import main


@pytest.fixture
def wpb_run():
    """``wpb ARGV...`` in this process: its exit code, standard output and standard error."""

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exit_:
                code = exit_.code
        return code, out.getvalue(), err.getvalue()

    return run
