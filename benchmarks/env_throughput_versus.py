"""Env throughput of this checkout against another one (e.g. the commit before a change), in one run.

Each measurement is a new process that imports ``wpb_gym`` from one tree and runs
``env_throughput.py``'s runners (CartPole-v1, then WritePolicyBench-v0 at the defaults, on the
long setting, on the ``breaking`` regime, where episodes cost the most to make, and under a
write time and kind budgets) in
alternating slices; the trees alternate too, so that drifts of the machine's speed hit both
alike. Each tree's figure is the median over rounds of its steps/s as a ratio
to CartPole-v1 in the same process; the last lines print this tree's ratio over the other's.

    git worktree add /tmp/before HEAD~1
    python benchmarks/env_throughput_versus.py /tmp/before [--rounds 4] [--seconds 6]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
SETTINGS = {
    "default": {},
    "long": {"length": 10_000, "budget_bytes": 1_048_576},
    "breaking": {"regime": "breaking"},
    "write_time": {"write_time": "total=60,per_write=1,per_kb=1"},
    "kind_budgets": {"kind_budgets": "endpoint=70%"},
    "compression": {"compression": "credit=0.75"},
}

# Run in the child: the tree comes first on sys.path, and its own benchmarks/env_throughput.py
# drives it (the other tree's may predate this script).
CHILD = """
import json, sys
tree, seconds = sys.argv[1], float(sys.argv[2])
sys.path[:0] = [tree, tree + "/benchmarks"]
import wpb_gym
assert wpb_gym.__file__.startswith(tree), wpb_gym.__file__
from env_throughput import CartPoleRunner, WritePolicyBenchRunner, interleaved
runners = {"cartpole": CartPoleRunner()}
runners.update({name: WritePolicyBenchRunner(kwargs) for name, kwargs in json.loads(sys.argv[3]).items()})
print(json.dumps(interleaved(runners, seconds, 3)[0]))
"""


def measure(tree: Path, seconds: float) -> dict[str, float]:
    command = [sys.executable, "-c", CHILD, str(tree), str(seconds), json.dumps(SETTINGS)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("other", type=Path, help="the other checkout (a git worktree)")
    parser.add_argument("--rounds", type=int, default=4, help="measurements of each tree")
    parser.add_argument("--seconds", type=float, default=6.0, help="seconds per measurement and runner")
    args = parser.parse_args()
    trees = {"this": HERE, "other": args.other.resolve()}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for r in range(args.rounds):
        for name in trees if r % 2 == 0 else reversed(list(trees)):
            results[name].append(measure(trees[name], args.seconds))
    for setting in SETTINGS:
        ratio = {}
        for name, tree in trees.items():
            ratios = [x[setting] / x["cartpole"] for x in results[name]]
            ratio[name] = statistics.median(ratios)
            print(f"{setting:8s} {name:5s} ({tree}): vs CartPole-v1 median {ratio[name]:.3f} "
                  f"({min(ratios):.3f}-{max(ratios):.3f})")
        print(f"{setting:8s} this / other = {ratio['this'] / ratio['other']:.3f}")


if __name__ == "__main__":
    main()
