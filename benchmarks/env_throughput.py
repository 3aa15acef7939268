"""Steps per second of WritePolicyBench-v0 against CartPole-v1, measured in the same run.

Both environments are built with ``gym.make`` (so both carry Gymnasium's default wrappers)
and driven by uniformly random *valid* actions: CartPole has no invalid action, and for
WritePolicyBench the action is drawn among those ``info["action_mask"]`` allows. Random
numbers are drawn in blocks up front so the sampler costs the same small amount for both.
Episode resets are included: a generated episode is built and prepared at every reset.

    python benchmarks/env_throughput.py [--seconds 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import gymnasium as gym
import numpy as np

import wpb_gym  # noqa: F401  (registers the ids)

SETTINGS = {
    "default (T=200, 10 KB)": {},
    "long (T=10,000, 1 MB)": {"length": 10_000, "budget_bytes": 1_048_576},
}


def run_cartpole(seconds: float, seed: int = 0) -> tuple[float, int]:
    env = gym.make("CartPole-v1")
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, 2, size=1 << 16)
    n, start = 0, time.perf_counter()
    while True:
        for a in draws:
            _, _, terminated, truncated, _ = env.step(int(a))
            if terminated or truncated:
                env.reset()
        n += draws.size
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed, n


def run_wpb(seconds: float, kwargs: dict, seed: int = 0) -> tuple[float, int, int]:
    env = gym.make("WritePolicyBench-v0", **kwargs)
    _, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    draws = rng.random(1 << 16)
    n, episodes, start = 0, 0, time.perf_counter()
    while True:
        for u in draws:
            valid = np.flatnonzero(info["action_mask"])
            _, _, terminated, _, info = env.step(int(valid[int(u * valid.size)]))
            if terminated:
                episodes += 1
                _, info = env.reset()
        n += draws.size
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed, n, episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="minimum seconds per measurement")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the default setting")
    args = parser.parse_args()
    if args.profile:
        cProfile.runctx("run_wpb(args.seconds, {})", globals(), {"args": args, "run_wpb": run_wpb}, "/tmp/wpb_env.prof")
        pstats.Stats("/tmp/wpb_env.prof").sort_stats("tottime").print_stats(25)
        return
    cartpole, n_cp = run_cartpole(args.seconds)
    print(f"{'environment':<44} {'steps/s':>10} {'vs CartPole-v1':>15}")
    print(f"{'CartPole-v1 (reference)':<44} {cartpole:>10,.0f} {1.0:>14.2f}x")
    for name, kwargs in SETTINGS.items():
        rate, n, episodes = run_wpb(args.seconds, kwargs)
        print(f"{'WritePolicyBench-v0 ' + name:<44} {rate:>10,.0f} {rate / cartpole:>14.2f}x   ({episodes} episodes)")


if __name__ == "__main__":
    main()
