"""What Ray costs a small sweep: ``wpb sweep`` on a local Ray against the same trials one after another.

The sweep: ``--algo`` (default ``epsilon_greedy``) on two regimes x two seeds, ``--timesteps`` decisions
each, evaluated on 10 held-out episodes. Both ways run in a process of their own, alternating, and
must write the same ``results.csv``; the script prints each time, their ratio, and the seconds a
local Ray takes to start and stop.

    python benchmarks/sweep_overhead.py [--timesteps 50000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eval_grid import ray_start_up

# The sweep file is JSON (which YAML reads too), so that the trials one after another read the
# same settings as wpb sweep without its checks: the results must come out equal.
SEQUENTIAL = """
import json, sys
from agents.sweep import SWEEP_DEFAULTS, collect, run_baselines, run_trial, trials

given = json.loads(open(sys.argv[1]).read())
settings = {**SWEEP_DEFAULTS, **given, "eval": {**SWEEP_DEFAULTS["eval"], **given["eval"]}}
for trial in trials(settings):
    run_trial(trial, settings, sys.argv[2])
collect(settings, sys.argv[2], [row for regime in settings["regimes"] for row in run_baselines(settings, regime)])
"""


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algo", default="epsilon_greedy")
    parser.add_argument("--timesteps", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        sweep = Path(folder) / "sweep.yaml"
        evaluation = {"episodes": 10, "seed": 777, "budgets": [10240], "tracks": ["unprivileged"],
                      "baselines": ["change_detector"]}
        sweep.write_text(json.dumps({"algos": [args.algo], "regimes": ["default", "breaking"], "seeds": [0, 1],
                                     "timesteps": args.timesteps, "eval": evaluation}))
        on_ray, one_by_one, start_up = [], [], []
        for r in range(args.rounds):
            ray_out, plain_out = Path(folder) / f"ray{r}", Path(folder) / f"plain{r}"
            wpb = [sys.executable, "-m", "wpb_gym.cli", "sweep", str(sweep), "--out", str(ray_out), "--quiet"]
            on_ray.append(timed(wpb))
            one_by_one.append(timed([sys.executable, "-c", SEQUENTIAL, str(sweep), str(plain_out)]))
            start_up.append(ray_start_up(2))
            if (ray_out / "results.csv").read_bytes() != (plain_out / "results.csv").read_bytes():
                raise SystemExit("the sweep on Ray and the trials one after another wrote different results")
    print(f"4 trials of {args.timesteps:,} {args.algo} steps, best of {args.rounds}:")
    print(f"  wpb sweep on a local Ray (2 CPUs): {min(on_ray):.1f} s")
    print(f"  the same trials one after another: {min(one_by_one):.1f} s ({min(on_ray) / min(one_by_one):.2f}x)")
    print(f"  a local Ray starts and stops in {min(start_up):.1f} s; the results are identical")


if __name__ == "__main__":
    main()
