"""``wpb eval`` end to end against the evaluation grid it runs, measured in the same run.

The grid is the paper's (``eval_grid.py``: 4 regimes x 11 budgets x 10 episodes x both tracks x
the 7 baselines, one job). "Grid" times ``run_grid`` alone in this process, under the same
garbage-collector setting as ``wpb eval`` (start-up objects frozen); "end to end" times
the ``wpb eval`` command on the same episodes in a new process: start-up, the grid, and every
output of the run folder (results, leaderboard, summaries with bootstrap intervals, figures).
The two alternate, so that drifts of the machine's speed hit both alike. Target: end to end
at most 1.5x the grid.

    python benchmarks/eval_end_to_end.py [--rounds 3] [--episodes FOLDER]

``--episodes`` reads the episodes from a folder (e.g. ``data/paper_episodes``, the paper's released
set) instead of generating them, for both measurements.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from eval_grid import AGENTS, BUDGETS, REGIMES

from agents.registry import agent_entry, make_agent
from wpb_gym import read_episodes
from wpb_gym.evaluation.grid import PolicySpec, generated_refs, given_refs, run_grid

TRACKS = ("unprivileged", "privileged")


def grid_seconds(episodes: str | None) -> float:
    policies = [PolicySpec(n, partial(make_agent, n), agent_entry(n).track) for n in AGENTS]
    # As ``wpb eval`` runs it: with the objects of start-up frozen out of the garbage collector's
    # scans (a command's process can; a library function must not do it to its caller).
    gc.freeze()
    start = time.perf_counter()
    refs = given_refs(list(read_episodes(episodes)), episodes) if episodes else generated_refs(REGIMES, [200], 10, 0)
    run_grid(refs, policies, BUDGETS, TRACKS, jobs=1)
    return time.perf_counter() - start


def end_to_end_seconds(episodes: str | None, out: Path) -> float:
    source = ["--episodes", episodes] if episodes else ["--regimes", ",".join(REGIMES), "--lengths", "200"]
    source += [] if episodes else ["--episodes-per-condition", "10", "--seed", "0"]
    command = [
        str(Path(sys.executable).with_name("wpb")),
        "eval",
        *source,
        "--agents",
        ",".join(AGENTS),
        "--budgets",
        ",".join(map(str, BUDGETS)),
        "--tracks",
        ",".join(TRACKS),
        "--jobs",
        "1",
        "--out",
        str(out),
        "--force",
        "--quiet",
    ]
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating measurements of each")
    parser.add_argument("--episodes", help="a folder of episodes (default: generated, seed 0)")
    args = parser.parse_args()
    grid, end_to_end = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            grid.append(grid_seconds(args.episodes))
            end_to_end.append(end_to_end_seconds(args.episodes, Path(tmp) / "run"))
    g, e = statistics.median(grid), statistics.median(end_to_end)
    print(f"grid (run_grid, 1 job)      median {g:6.2f} s  ({', '.join(f'{x:.2f}' for x in grid)})")
    print(f"wpb eval, end to end        median {e:6.2f} s  ({', '.join(f'{x:.2f}' for x in end_to_end)})")
    print(f"end to end / grid           {e / g:.2f}x (target: at most 1.5x)")


if __name__ == "__main__":
    main()
