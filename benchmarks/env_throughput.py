"""Steps per second of WritePolicyBench-v0 against CartPole-v1, measured in the same run.

Both environments are built with ``gym.make`` (so both carry Gymnasium's default wrappers)
and driven by uniformly random *valid* actions: CartPole has no invalid action, and for
WritePolicyBench the action is drawn among those ``info["action_mask"]`` allows. Random
numbers are drawn in blocks up front so the sampler costs the same small amount for both.
Episode resets are included: a generated episode is built and prepared at every reset.
The machine's speed drifts during a run (a shared VM), so the environments are measured in
alternating slices and each rate is total steps / total time.

``--python-parts`` also runs each setting on the env's Python parts (the store, the observation
encoder and the reward function, which the compiled core is tested against, and which step the
settings it does not mirror), to show what the core gains.

    python benchmarks/env_throughput.py [--seconds 10] [--rounds 6] [--python-parts] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import gymnasium as gym
import numpy as np

import wpb_gym  # noqa: F401  (registers the ids)
from wpb_gym.envs.observation.encoder import ObservationEncoder
from wpb_gym.envs.observation.features import ObservationLayout

SETTINGS = {
    "default (T=200, 10 KB)": {},
    "long (T=10,000, 1 MB)": {"length": 10_000, "budget_bytes": 1_048_576},
    # The limits beside the byte budget, whose U*(B) is computed as each episode starts.
    "write_time (T=200, 60 ticks)": {"write_time": "total=60,per_write=1,per_kb=1"},
    "kind_budgets (T=200, endpoint=70%)": {"kind_budgets": "endpoint=70%"},
    "compression (T=200, credit=0.75)": {"compression": "credit=0.75"},
}


class CartPoleRunner:
    def __init__(self, seed: int = 0) -> None:
        self.env = gym.make("CartPole-v1")
        self.env.reset(seed=seed)
        self.draws = np.random.default_rng(seed).integers(0, 2, size=1 << 12).tolist()

    def run(self, seconds: float) -> tuple[int, float]:
        env, n, start = self.env, 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for a in self.draws:
                _, _, terminated, truncated, _ = env.step(a)
                if terminated or truncated:
                    env.reset()
            n += len(self.draws)
        return n, time.perf_counter() - start


class PythonPartsEncoder(ObservationEncoder):
    """The default encoder under a name the compiled core does not play (a subclassed part
    keeps the env on its Python parts: ``WritePolicyBenchEnv.plays_compiled``)."""


def on_python_parts(kwargs: dict) -> dict:
    """``kwargs`` (which leave the encoder's arguments at their defaults) with such an encoder."""
    encoder = PythonPartsEncoder(ObservationLayout(2, False), slot_order="relevance", max_expires_per_step=None,
                                 observation_mode="box")
    return {**kwargs, "observation_encoder": encoder}


class WritePolicyBenchRunner:
    def __init__(self, kwargs: dict, seed: int = 0) -> None:
        self.env = gym.make("WritePolicyBench-v0", **kwargs)
        _, self.info = self.env.reset(seed=seed)
        self.draws = np.random.default_rng(seed).random(1 << 12).tolist()
        self.episodes = 0

    def run(self, seconds: float) -> tuple[int, float]:
        env, info, n, start = self.env, self.info, 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for u in self.draws:
                valid = info["action_mask"].nonzero()[0]
                _, _, terminated, _, info = env.step(int(valid[int(u * valid.size)]))
                if terminated:
                    self.episodes += 1
                    _, info = env.reset()
            n += len(self.draws)
        self.info = info
        return n, time.perf_counter() - start


def interleaved(
    runners: dict[str, object], seconds: float, rounds: int
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Steps/s of each runner over the whole run, and per round, measured in alternating
    slices so that drifts of the machine's speed during the run hit every environment alike."""
    steps = dict.fromkeys(runners, 0)
    elapsed = dict.fromkeys(runners, 0.0)
    per_round = []
    for _ in range(rounds):
        rates = {}
        for name, runner in runners.items():
            n, dt = runner.run(seconds / rounds)
            steps[name] += n
            elapsed[name] += dt
            rates[name] = n / dt if dt > 0 else 0.0
        per_round.append(rates)
    return {name: steps[name] / elapsed[name] for name in runners}, per_round


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per environment")
    parser.add_argument("--rounds", type=int, default=6, help="alternating slices per environment")
    parser.add_argument("--python-parts", action="store_true", help="also run each setting on the Python parts")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the default setting")
    args = parser.parse_args()
    if args.profile:
        runner = WritePolicyBenchRunner({})
        cProfile.runctx("runner.run(args.seconds)", globals(), {"args": args, "runner": runner}, "/tmp/wpb_env.prof")
        pstats.Stats("/tmp/wpb_env.prof").sort_stats("tottime").print_stats(25)
        return
    runners = {"CartPole-v1 (reference)": CartPoleRunner()}
    for name, kwargs in SETTINGS.items():
        runners[f"WritePolicyBench-v0 {name}"] = WritePolicyBenchRunner(kwargs)
        if args.python_parts:
            runners[f"  on its Python parts {name.split(' ')[0]}"] = WritePolicyBenchRunner(on_python_parts(kwargs))
    rates, per_round = interleaved(runners, args.seconds, args.rounds)
    reference = rates["CartPole-v1 (reference)"]
    # The spread of the per-round ratios shows how much the machine's phase moved the figure.
    print(f"{'environment':<54} {'steps/s':>10} {'vs CartPole-v1':>15} {'per round':>13}")
    for name, rate in rates.items():
        ratios = [r[name] / r["CartPole-v1 (reference)"] for r in per_round]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        print(f"{name:<54} {rate:>10,.0f} {rate / reference:>14.2f}x {spread:>13}")


if __name__ == "__main__":
    main()
