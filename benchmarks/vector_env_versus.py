"""The native vector env of this checkout against another one's (e.g. the commit before a change), in one run.

Each measurement is a new process that imports ``wpb_gym`` from one tree and steps
``gym.make_vec(..., num_envs=N)`` on a regime with random valid actions (``vector_env.py``'s
``env_rate``, after a second of warm-up); the trees alternate, so that drifts of the machine's
speed hit both alike. Each tree's figure is the median env-steps/s over its rounds.

    git worktree add /tmp/before HEAD~1
    python benchmarks/vector_env_versus.py /tmp/before [--regimes default breaking] [--rounds 3] [--seconds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# Measured on compiled code, never on the Python a first run plays while numba compiles in the
# background (benchmarks/vector_env.py --part compile measures that).
os.environ.setdefault("WPB_GYM_COMPILE", "here")


HERE = Path(__file__).resolve().parents[1]

# Run in the child, with the tree first on sys.path; the tree's own vector_env.py drives it.
CHILD = """
import json, sys
tree, regime, n, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
sys.path[:0] = [tree, tree + "/benchmarks"]
import gymnasium as gym
import wpb_gym
assert wpb_gym.__file__.startswith(tree), wpb_gym.__file__
from vector_env import env_rate, warm_up
warm_up()
env = gym.make_vec("WritePolicyBench-v0", num_envs=n, vectorization_mode="vector_entry_point", regime=regime)
env_rate(env, 1.0, True)
steps, elapsed = env_rate(env, seconds, True)
print(json.dumps(steps / elapsed))
"""


def measure(tree: Path, regime: str, n: int, seconds: float) -> float:
    command = [sys.executable, "-c", CHILD, str(tree), regime, str(n), str(seconds)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("other", type=Path, help="the other checkout (a git worktree)")
    parser.add_argument("--regimes", nargs="+", default=["default", "breaking"])
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each tree per regime")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per measurement")
    args = parser.parse_args()
    trees = {"this": HERE, "other": args.other.resolve()}
    print(f"Env-steps per second, N = {args.num_envs}, random valid actions, median of {args.rounds} fresh processes")
    for regime in args.regimes:
        rates: dict[str, list[float]] = {name: [] for name in trees}
        for r in range(args.rounds):
            for name in trees if r % 2 == 0 else reversed(list(trees)):
                rates[name].append(measure(trees[name], regime, args.num_envs, args.seconds))
        median = {name: statistics.median(values) for name, values in rates.items()}
        print(f"{regime:<18} this {median['this']:>10,.0f}  other {median['other']:>10,.0f}"
              f"  this / other = {median['this'] / median['other']:.3f}")


if __name__ == "__main__":
    main()
