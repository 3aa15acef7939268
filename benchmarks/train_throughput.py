"""PPO training steps per second on WritePolicyBench-v0 and on CartPole-v1, in the same run.

Same algorithm (SB3 PPO; MaskablePPO for WritePolicyBench is measured too), same network
(MlpPolicy, 64x64), same settings (4 DummyVecEnv envs, n_steps 256, batch 256, 4 epochs,
one torch thread). The two environments are trained in alternating slices so that the VM's
speed drifts hit both alike. A ratio near 1 means the environment is not the bottleneck
(the target is at least 0.8).

    python benchmarks/train_throughput.py [--steps 20480] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from sb3_contrib import MaskablePPO
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

import wpb_gym  # noqa: F401  (registers the ids)

# Measured on compiled code, never on the Python a first run plays while numba compiles in the
# background (benchmarks/vector_env.py --part compile measures that).
os.environ.setdefault("WPB_GYM_COMPILE", "here")


SETTINGS = dict(n_steps=256, batch_size=256, n_epochs=4, policy_kwargs={"net_arch": [64, 64]}, device="cpu", seed=0)


def rate(algo, env_id: str, steps: int) -> tuple[int, float]:
    env = make_vec_env(env_id, n_envs=4, seed=0)
    model = algo("MlpPolicy", env, **SETTINGS)
    start = time.perf_counter()
    model.learn(steps)
    elapsed = time.perf_counter() - start
    env.close()
    return model.num_timesteps, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20_480, help="training steps per slice")
    parser.add_argument("--rounds", type=int, default=3, help="alternating slices per setting")
    args = parser.parse_args()
    torch.set_num_threads(1)  # measured: default threads on 2 cores train PPO several times slower
    runs = {
        "CartPole-v1, PPO (reference)": (PPO, "CartPole-v1"),
        "WritePolicyBench-v0, PPO": (PPO, "WritePolicyBench-v0"),
        "WritePolicyBench-v0, MaskablePPO": (MaskablePPO, "WritePolicyBench-v0"),
    }
    steps = dict.fromkeys(runs, 0)
    seconds = dict.fromkeys(runs, 0.0)
    for _ in range(args.rounds):
        for name, (algo, env_id) in runs.items():
            n, dt = rate(algo, env_id, args.steps)
            steps[name] += n
            seconds[name] += dt
    reference = steps["CartPole-v1, PPO (reference)"] / seconds["CartPole-v1, PPO (reference)"]
    print(f"{'training run':<36} {'steps/s':>9} {'vs CartPole-v1':>15}")
    for name in runs:
        value = steps[name] / seconds[name]
        print(f"{name:<36} {value:>9,.0f} {value / reference:>14.2f}x")


if __name__ == "__main__":
    main()
