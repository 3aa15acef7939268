"""The quickstart notebook runs end to end (short mode) and is committed without outputs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"


def test_the_committed_notebook_has_no_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_getting_started_gives_the_notebooks_training_steps():
    source = "\n".join(cell.source for cell in nbformat.read(NOTEBOOK, as_version=4).cells)
    (steps,) = re.findall(r"^TRAIN_STEPS = [\d_]+ if SHORT else ([\d_]+)$", source, re.M)
    page = " ".join((ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8").split())
    assert f"trains a short MaskablePPO ({int(steps):,} steps)" in page


def test_the_quickstart_notebook_runs(tmp_path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("WPB_QUICKSTART_SHORT", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    try:
        client.execute()
    except Exception as error:  # show which cell failed and why
        pytest.fail(f"the quickstart notebook failed: {error}")
    outputs = "".join(
        out.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs
    )
    assert "maskable_ppo" in outputs and "change_detector" in outputs
    pictures = [
        out
        for cell in notebook.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if "image/png" in out.get("data", {})
    ]
    assert len(pictures) == 1  # the comparison plot
    assert not list(tmp_path.glob("quickstart_model*"))  # the notebook cleans up after itself
    assert os.environ["WPB_QUICKSTART_SHORT"] == "1"
