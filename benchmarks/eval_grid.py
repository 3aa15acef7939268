"""Time of the paper's evaluation grid through ``wpb_gym.evaluation.grid.run_grid``.

The grid: 4 regimes x budgets {1 KB ... 1 MB} (11 budgets) x 10 episodes (T=200, seed 0) x both
tracks x the paper's 7 baselines (5 on the unprivileged track), with the exact oracle: 5,280
agent-episode runs. The target is at most 3 seconds on a 2-core machine (the published
implementation needs about a minute). ``--isolate`` also times the grid with every policy in a
process of its own without a sandbox, alternating (target: at most 3x the in-process time);
there ``--jobs`` counts the policies' processes, so with 7 policies and 2 jobs the isolated grid
has one worker. ``--sandbox`` also times it with every policy's process in its sandbox (Linux
namespaces and resource limits: ``wpb_gym.evaluation.isolated.sandbox``, what ``--isolate``
does by default), alternating with the other two.

    python benchmarks/eval_grid.py [--jobs 2] [--repeat 3] [--isolate] [--sandbox] [--ray] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import subprocess
import sys
import time
from functools import partial

from agents.registry import agent_entry, make_agent
from wpb_gym.evaluation.grid import PolicySpec, close_isolated_pools, generated_refs, isolated_info, run_grid
from wpb_gym.evaluation.isolated.sandbox import Sandbox, problem

REGIMES = ("default", "burst_drift", "redundancy", "burst_redundancy")
BUDGETS = (1024, 2048, 4096, 8192, 10240, 16384, 32768, 65536, 102400, 262144, 1048576)
AGENTS = (
    "no_mem",
    "fifo_store_all",
    "uniform_sample",
    "last_kb",
    "merge_aggressive",
    "priority_threshold",
    "priority_greedy",
)


def grid(jobs: int, isolate: bool = False, backend: str = "processes", sandbox: Sandbox | None = None) -> tuple[int, float]:
    """Rows and seconds of one run of the grid; isolated, each policy's process in ``sandbox``
    (None: a process of its own only)."""
    policies = [PolicySpec(n, partial(make_agent, n), agent_entry(n).track) for n in AGENTS]
    refs = generated_refs(REGIMES, [200], 10, seed=0)
    start = time.perf_counter()
    rows = run_grid(
        refs,
        policies,
        BUDGETS,
        ("unprivileged", "privileged"),
        jobs=jobs,
        isolate=isolate,
        backend=backend,
        sandbox=sandbox,
    )
    return len(rows), time.perf_counter() - start


def policies_start_up(sandbox: Sandbox | None) -> float:
    """Seconds to start the 7 policies' processes (each building its policy once), isolated
    without a sandbox or in ``sandbox``: what a grid pays once per worker, and again for a
    process stopped over its time."""
    policies = [PolicySpec(n, partial(make_agent, n), agent_entry(n).track) for n in AGENTS]
    start = time.perf_counter()
    isolated_info(policies, sandbox=sandbox)
    seconds = time.perf_counter() - start
    close_isolated_pools()
    return seconds


def ray_start_up(jobs: int) -> float:
    """Seconds to start and stop a local Ray of ``jobs`` CPUs, in a new process (as the grid's
    Ray driver does; this process never runs Ray itself)."""
    code = (
        "import time, ray; t = time.perf_counter(); "
        f"ray.init(num_cpus={jobs}, include_dashboard=False, log_to_driver=False, configure_logging=False); "
        "ray.shutdown(); print(time.perf_counter() - t)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best time is reported")
    parser.add_argument(
        "--isolate", action="store_true", help="also time isolated evaluation without a sandbox, alternating"
    )
    parser.add_argument(
        "--sandbox", action="store_true", help="also time isolated evaluation in the sandbox (with --isolate's runs)"
    )
    parser.add_argument("--ray", action="store_true", help="also time the grid as Ray tasks (a local Ray), alternating")
    parser.add_argument("--profile", action="store_true", help="cProfile one single-process run")
    args = parser.parse_args()
    if args.profile:
        cProfile.runctx("grid(1)", globals(), {}, "/tmp/wpb_grid.prof")
        pstats.Stats("/tmp/wpb_grid.prof").sort_stats("tottime").print_stats(20)
        return
    args.isolate |= args.sandbox
    if args.sandbox and problem() is not None:  # (also starts the fork server before any timing)
        parser.error(f"--sandbox: {problem()}")
    times, isolated, walled, starts, on_ray, start_up = [], [], [], [], [], []
    for _ in range(args.repeat):  # alternated, so that all see the machine in the same state
        rows, seconds = grid(args.jobs)
        times.append(seconds)
        if args.isolate:
            isolated.append(grid(args.jobs, isolate=True)[1])
        if args.sandbox:
            walled.append(grid(args.jobs, isolate=True, sandbox=Sandbox())[1])
            starts.append((policies_start_up(None), policies_start_up(Sandbox())))
        if args.ray:
            on_ray.append(grid(args.jobs, backend="ray")[1])
            start_up.append(ray_start_up(args.jobs))
    print(
        f"paper grid: {rows} agent-episode runs, best of {args.repeat}: {min(times):.2f} s "
        f"with {args.jobs} job(s) (target: 3 s)"
    )
    if args.isolate:
        print(
            f"isolated (a process per policy): best of {args.repeat}: {min(isolated):.2f} s, "
            f"{min(isolated) / min(times):.2f}x the in-process time (target: at most 3x)"
        )
    if args.sandbox:
        print(
            f"isolated in the sandbox (namespaces, limits): best of {args.repeat}: {min(walled):.2f} s, "
            f"{min(walled) / min(times):.2f}x the in-process time, {min(walled) / min(isolated):.2f}x isolated's"
        )
        print(
            f"starting the {len(AGENTS)} policies' processes, best of {args.repeat}: "
            f"{min(s for s, _ in starts) * 1000:.0f} ms isolated, {min(s for _, s in starts) * 1000:.0f} ms sandboxed"
        )
    if args.repeat > 1 and args.isolate:
        print("each run (s): in process " + ", ".join(f"{t:.2f}" for t in times))
        print("              isolated   " + ", ".join(f"{t:.2f}" for t in isolated))
        if args.sandbox:
            print("              sandboxed  " + ", ".join(f"{t:.2f}" for t in walled))
    if args.ray:
        print(
            f"on Ray (a local Ray started and stopped by each run): best of {args.repeat}: {min(on_ray):.2f} s, "
            f"{min(on_ray) / min(times):.2f}x the process pool's time; Ray's start and stop alone: "
            f"{min(start_up):.2f} s"
        )


if __name__ == "__main__":
    main()
