"""Every code block of README.md and docs/*.md runs as printed, or says in the Markdown why not.

The blocks are read with pytest-codeblocks' parser. A block not run carries pytest-codeblocks'
mark on the line before it, an HTML comment that neither GitHub nor MkDocs shows:
``<!--pytest.mark.skip(reason="trains a model for minutes")-->``; the reason is required.

A Python block runs alone in a fresh namespace, so it must carry its own imports. A shell block
may hold only ``wpb`` commands (one per line, ``\\`` continues a line, ``#`` starts a comment);
they run through ``wpb_gym.cli.main`` in this process and must return 0. A page's blocks run in
order in one working folder of their own, laid out like the repository root (``configs/``,
``data/`` ... are links to it), so a block may read what an earlier block of its page wrote,
and nothing is written into the repository. Minari's datasets go there too.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from pytest_codeblocks import extract_from_file

from wpb_gym.cli import main as wpb

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"python", "bash", "sh"}
# Blocks in these languages are output, listings or file contents, never run.
SHOWN = {"text", "json", "yaml"}
# What a page's working folder links to, for commands written for the repository root.
REPOSITORY_FOLDERS = ("configs", "data", "notebooks", "benchmarks")


# The one mark a block may carry, and its reason.
SKIP = re.compile(r'pytest\.mark\.skip\(reason="([^"]{10,})"\)')


def _blocks():
    for page in PAGES:
        for block in extract_from_file(page):
            yield page, block


def skip_reason(page: Path, block) -> str | None:
    """Why the block is not run, as its mark says; None for a block that runs."""
    if not block.marks:
        return None
    where = f"{page.relative_to(ROOT)}:{block.lineno}"
    if block.syntax not in RUN:
        raise ValueError(f"{where}: a mark on a {block.syntax or 'language-less'} block, which never runs")
    matches = [SKIP.fullmatch(mark) for mark in block.marks]
    if len(matches) != 1 or matches[0] is None:
        raise ValueError(f'{where}: {block.marks}: mark a block not run <!--pytest.mark.skip(reason="why")-->')
    return matches[0].group(1)


def _params():
    params = []
    for page, block in _blocks():
        if block.syntax in RUN:
            reason = skip_reason(page, block)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            params.append(pytest.param(page, block, marks=marks, id=f"{page.relative_to(ROOT)}:{block.lineno}"))
    return params


_FOLDERS: dict[Path, Path] = {}
_RAN: dict[Path, set[int]] = {}


@pytest.fixture
def page_folder(request, tmp_path_factory, monkeypatch) -> Path:
    """The working folder of the page of the block under test, shared by the page's blocks."""
    page = request.node.callspec.params["page"]
    if page not in _FOLDERS:
        folder = tmp_path_factory.mktemp(page.stem)
        for name in REPOSITORY_FOLDERS:
            (folder / name).symlink_to(ROOT / name, target_is_directory=True)
        _FOLDERS[page] = folder
    folder = _FOLDERS[page]
    monkeypatch.chdir(folder)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(folder / "minari"))
    return folder


def shell_commands(code: str) -> list[list[str]]:
    """A shell block's commands as argument lists (continuations joined, comments dropped)."""
    lines = code.replace("\\\n", " ").splitlines()
    return [argv for argv in (shlex.split(line, comments=True) for line in lines) if argv]


def run_block(page: Path, block) -> None:
    if block.syntax == "python":
        exec(compile(block.code, f"{page.name}:{block.lineno}", "exec"), {"__name__": "__main__"})
        return
    commands = shell_commands(block.code)
    assert commands, f"{page.name}:{block.lineno}: an empty shell block"
    for argv in commands:
        assert argv[0] == "wpb", (
            f"{page.name}:{block.lineno}: {shlex.join(argv)}: only wpb commands run here; mark the "
            'block <!--pytest.mark.skip(reason="...")--> and say why it is not run'
        )
        assert wpb(argv[1:]) == 0, f"{page.name}:{block.lineno}: {shlex.join(argv)}"


@pytest.mark.parametrize(("page", "block"), _params())
def test_the_block_runs_as_printed(page, block, page_folder):
    ran = _RAN.setdefault(page, set())
    # A block may read what the page's earlier blocks wrote: run those that have not run here
    # yet (a test chosen alone, with -k).
    for earlier in extract_from_file(page):
        if earlier.lineno < block.lineno and earlier.syntax in RUN and not earlier.marks and earlier.lineno not in ran:
            run_block(page, earlier)
            ran.add(earlier.lineno)
    run_block(page, block)
    ran.add(block.lineno)


# gym.make / make_vec / spec given an id as a literal.
_ENV_ID = re.compile(r"""\b(?:gym|gymnasium)\.(?:make|make_vec|spec)\(\s*["']([^"']+)["']""")


def test_every_python_block_that_makes_an_env_registers_its_ids():
    # The blocks share this process, where an earlier import of wpb_gym has registered the ids:
    # a block that names a bare id without importing wpb_gym would pass here and fail as printed.
    for page, block in _blocks():
        bare = [i for i in _ENV_ID.findall(block.code) if ":" not in i] if block.syntax == "python" else []
        registers = re.search(r"^\s*(?:import wpb_gym|from wpb_gym)", block.code, re.M)
        assert not bare or registers, (
            f"{page.relative_to(ROOT)}:{block.lineno}: {bare}: write \"wpb_gym:{bare[0]}\" or import wpb_gym")


def test_every_block_names_its_language():
    for page, block in _blocks():
        assert block.syntax in RUN | SHOWN, f"{page.relative_to(ROOT)}:{block.lineno}: language {block.syntax!r}"
        skip_reason(page, block)  # and a mark only where it can say why a block is not run
