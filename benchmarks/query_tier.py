"""The query tier's env and generator against CartPole-v1, in alternating slices of one run.

Two measurements per tier, each a ratio against CartPole-v1's single env measured in the same
run (this machine's speed drifts):

* ``env``: env-steps/s of ``gym.make("WritePolicyBench-Queries<Tier>-v0")`` with random valid
  actions (the valid action with the largest uniform draw), against ``gym.make("CartPole-v1")``
  with random actions (``env_throughput.CartPoleRunner``). The env makes each episode's stream when it resets
  (``generate_query_episode``), so this includes the generator.
* ``stream``: steps/s of the tier's ``QueryStream`` alone (the fixed-length episode's steps,
  made one by one as ``generate_query_episode`` makes them), against the same CartPole-v1
  figure.

To compare two checkouts, run the script with each on ``PYTHONPATH`` (the package is then
imported from there) and compare the ratios:

    python benchmarks/query_tier.py [--tiers queries_medium] [--seconds 3] [--rounds 3]
    PYTHONPATH=/path/to/other/checkout python benchmarks/query_tier.py
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np

import wpb_gym
from env_throughput import CartPoleRunner
from wpb_gym.envs.query_env import MERGE, SKIP, WRITE
from wpb_gym.episodes.generators.queries import QUERY_REGIMES, query_config, query_stream


def query_env(tier: str, actions: str, **env_kwargs: int) -> Callable[[float], tuple[int, float]]:
    env = gym.make(f"WritePolicyBench-Queries{tier.removeprefix('queries_').capitalize()}-v0", **env_kwargs)
    _, info = env.reset(seed=0)
    rng = np.random.default_rng(0)

    def run(seconds: float) -> tuple[int, float]:
        nonlocal info
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            mask = info["action_mask"]
            if actions == "random":
                action = int((rng.random(mask.shape) * mask).argmax())
            else:  # "fill": WRITE, else MERGE, else SKIP; never EXPIRE, so memory stays full
                action = WRITE if mask[WRITE] else MERGE if mask[MERGE] else SKIP
            _, _, terminated, truncated, info = env.step(action)
            steps += 1
            if terminated or truncated:
                _, info = env.reset()
        return steps, time.perf_counter() - start

    return run


def stream(tier: str) -> Callable[[float], tuple[int, float]]:
    config = query_config(tier)
    index = 0
    steps_of = iter(query_stream(config, 0, index, horizon=config.length))

    def run(seconds: float) -> tuple[int, float]:
        nonlocal index, steps_of
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            if next(steps_of, None) is None:  # the episode is over: the next one starts
                index += 1
                steps_of = iter(query_stream(config, 0, index, horizon=config.length))
                continue
            steps += 1
        return steps, time.perf_counter() - start

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiers", nargs="+", default=list(QUERY_REGIMES), choices=list(QUERY_REGIMES))
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per slice")
    parser.add_argument("--rounds", type=int, default=3, help="slices per side")
    parser.add_argument("--actions", choices=["random", "fill"], default="random",
                        help="the env's actions: random valid ones, or WRITE / MERGE / SKIP, never EXPIRE (memory fills)")
    parser.add_argument("--budget", type=int, default=None, help="the env's budget_bytes (default: its own)")
    parser.add_argument("--slots", type=int, default=None, help="the env's slots (default: its own)")
    parser.add_argument("--word-buckets", type=int, default=None, help="the env's word_buckets (default: its own)")
    args = parser.parse_args()
    env_kwargs = {name: value for name, value in (("budget_bytes", args.budget), ("slots", args.slots),
                                                   ("word_buckets", args.word_buckets)) if value is not None}
    print(f"wpb_gym from {wpb_gym.__file__}")
    print(f"Steps per second ({args.rounds} alternating slices of {args.seconds:g} s per side), {args.actions} actions"
          + (f", env {env_kwargs}" if env_kwargs else ""))
    print(f"{'tier':<16} {'CartPole-v1':>12} {'env':>9} {'ratio':>8} {'stream':>9} {'ratio':>8}")
    for tier in args.tiers:
        sides = {"cartpole": CartPoleRunner().run, "env": query_env(tier, args.actions, **env_kwargs), "stream": stream(tier)}
        totals = {name: [0, 0.0] for name in sides}
        for r in range(args.rounds):
            for name in (list(sides) if r % 2 == 0 else list(reversed(sides))):
                steps, elapsed = sides[name](args.seconds)
                totals[name][0] += steps
                totals[name][1] += elapsed
        rate = {name: steps / elapsed for name, (steps, elapsed) in totals.items()}
        print(f"{tier:<16} {rate['cartpole']:>12,.0f} {rate['env']:>9,.0f} {rate['env'] / rate['cartpole']:>7.4f}x"
              f" {rate['stream']:>9,.0f} {rate['stream'] / rate['cartpole']:>7.4f}x")


if __name__ == "__main__":
    main()
