"""The trained example of SharedMemoryEnv runs end to end and says how it compares."""

from __future__ import annotations

import json

import pytest

from agents.sb3.shared_memory_train import iqm, main


def test_a_short_training_writes_the_comparison_table(tmp_path, capsys):
    main(["--seeds", "0", "--timesteps", "256", "--episodes", "2", "--out", str(tmp_path)])
    table = (tmp_path / "table.md").read_text()
    assert table == capsys.readouterr().out
    assert "| `own_breaking` |" in table and "MaskablePPO (1 seeds:" in table and "best scripted" in table
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert len(scores["learned"]["0"]) == 2 and set(scores["scripted"]) >= {"own_breaking", "skip"}
    assert (tmp_path / "seed0.zip").is_file()


def test_bad_seeds_are_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--seeds", "a,b", "--out", str(tmp_path)])
    assert "--seeds: expected integers" in capsys.readouterr().err


def test_the_iqm_drops_the_outer_quarters():
    assert iqm([0, 1, 2, 3, 4, 5, 6, 100]) == pytest.approx(3.5)
