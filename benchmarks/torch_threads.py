"""SB3 PPO's training speed on WritePolicyBench-v0 with one torch thread against PyTorch's default.

Each setting trains in a new process (the thread count is set before torch does any work),
alternating, so that the machine's drifts hit both alike.

    python benchmarks/torch_threads.py [--steps 4096] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

# Measured on compiled code, never on the Python a first run plays while numba compiles in the
# background (benchmarks/vector_env.py --part compile measures that).
os.environ.setdefault("WPB_GYM_COMPILE", "here")


CHILD = """
import sys, time, torch
threads = int(sys.argv[1])
if threads:
    torch.set_num_threads(threads)
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
import wpb_gym
env = make_vec_env("WritePolicyBench-v0", 4, seed=0)
model = PPO("MlpPolicy", env, n_steps=256, batch_size=64, device="cpu", seed=0)
start = time.perf_counter()
model.learn(int(sys.argv[2]))
print(torch.get_num_threads(), model.num_timesteps / (time.perf_counter() - start))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"PyTorch's default threads": [], "one thread": []}
    for _ in range(args.rounds):
        for name, threads in (("PyTorch's default threads", 0), ("one thread", 1)):
            out = subprocess.run([sys.executable, "-c", CHILD, str(threads), str(args.steps)], capture_output=True,
                                 text=True, check=True).stdout.split()
            rates[name].append(float(out[-1]))
            print(f"{name} ({out[-2]}): {float(out[-1]):,.0f} steps/s", flush=True)
    default, one = (sum(rates[k]) / len(rates[k]) for k in rates)
    print(f"one thread trains {one / default:.1f}x as fast as PyTorch's default threads (mean of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
