"""The report of a run, prepared condition by condition while the grid runs, is the report
written from scratch; and the batched bootstrap intervals are the one-at-a-time ones."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from agents.registry import agent_entry, make_agent
from wpb_gym.evaluation.grid import PolicySpec, generated_refs, run_grid
from wpb_gym.evaluation.reports import intervals
from wpb_gym.evaluation.reports.intervals import bootstrap_ci, bootstrap_cis
from wpb_gym.evaluation.reports.run_writer import RunWriter, write_run

AGENTS = ("no_mem", "last_kb", "priority_greedy")


def _grid(on_episode_done=None):
    policies = [PolicySpec(n, partial(make_agent, n), agent_entry(n).track) for n in AGENTS]
    refs = generated_refs(["default", "burst_drift"], [40], 4, seed=1)
    rows = run_grid(refs, policies, [1024, 4096], ["unprivileged", "privileged"], on_episode_done=on_episode_done)
    return refs, rows


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_report_prepared_while_the_grid_runs_is_the_report_written_at_the_end(tmp_path):
    refs, rows = _grid()
    (tmp_path / "whole").mkdir()
    write_run(tmp_path / "whole", rows, {"seed": 1})
    (tmp_path / "streamed").mkdir()
    with RunWriter((ref.mode, ref.steps) for ref in refs) as writer:
        _, streamed_rows = _grid(lambda ref, chunk: writer.add((ref.mode, ref.steps), chunk))
        assert len(writer._parts) == 2  # both conditions were handed over before the end
        writer.write(tmp_path / "streamed", streamed_rows, {"seed": 1})
    whole, streamed = _files(tmp_path / "whole"), _files(tmp_path / "streamed")
    assert whole.keys() == streamed.keys() and len(whole) == 11  # 7 files and 4 figures
    for name in whole:
        assert whole[name] == streamed[name], name


def test_a_prepared_part_whose_rows_changed_is_computed_again(tmp_path):
    refs, rows = _grid()
    (tmp_path / "whole").mkdir()
    (tmp_path / "stale").mkdir()
    write_run(tmp_path / "whole", rows, {})
    with RunWriter((ref.mode, ref.steps) for ref in refs) as writer:
        for condition in {(r["mode"], r["steps"]) for r in rows}:
            stale = [dict(r, f1=0.5) for r in rows if (r["mode"], r["steps"]) == condition]
            writer._submit(condition, stale)  # what a resumed run's old checkpoints would give
        writer.write(tmp_path / "stale", rows, {})
    assert _files(tmp_path / "whole") == _files(tmp_path / "stale")


def test_batched_intervals_are_the_one_at_a_time_intervals(monkeypatch):
    rng = np.random.default_rng(3)
    samples = [rng.random(n) for n in (10, 10, 7, 10, 2, 7)] + [[1.0], [], [2.0, 2.0, 2.0], [0, 0, 0, 1]]
    one_by_one = [bootstrap_ci(s) for s in samples]
    monkeypatch.setattr(intervals, "_CHUNK_VALUES", 1)  # one sample per scipy call: the chunking path
    for batch in (bootstrap_cis(samples), intervals.bootstrap_cis(samples)):
        for (low, high), (a, b) in zip(batch, one_by_one, strict=True):
            assert (np.isnan(low) and np.isnan(a)) or (
                low == pytest.approx(a, abs=1e-12) and high == pytest.approx(b, abs=1e-12)
            )
    assert one_by_one[6] == one_by_one[7] and np.isnan(one_by_one[7][0])  # under two values: no interval
    assert one_by_one[8] == (2.0, 2.0)
