"""Does MaskablePPO with default SB3 hyperparameters learn ``WritePolicyBench-v0`` in 50k steps?

Trains ``MaskablePPO("MlpPolicy", make_vec_env("WritePolicyBench-v0", N, env_kwargs=...))``
(N = 1 by default, as the README's quickstart trains) for ``--steps`` steps per training seed
and prints the held-out F1 (30 episodes of seed 777, which no training seed uses) as a fraction
of their hindsight F1 bound, per seed, on average and for the worst seed (target: 0.9).
Variants measured in docs/learned-agents.md: ``--only-needed-expires`` masks EXPIRE except
when the step does not fit or for items of the step's family, ``--expire-cost C`` charges C
per EXPIRE in training (both wrappers; the env's own ``expire_cost`` does the latter).

    python benchmarks/quickstart_learns.py --seeds 10                        # the env's defaults
    python benchmarks/quickstart_learns.py --env-kwargs '{"slots": 8, "dense_reward": false, "expire_cost": 0}'
"""

from __future__ import annotations

import argparse
import json
import os
import time
from functools import partial

import gymnasium as gym
import numpy as np
import torch

import wpb_gym  # noqa: F401  (registers the ids)
from wpb_gym.envs.observation.features import MEMORY_FEATURES
from wpb_gym.scoring.oracle import episode_oracle

# Measured on compiled code, never on the Python a first run plays while numba compiles in the
# background (benchmarks/vector_env.py --part compile measures that).
os.environ.setdefault("WPB_GYM_COMPILE", "here")


HELD_OUT_SEED = 777


class OnlyNeededExpires(gym.Wrapper):
    """EXPIRE of a slot only when the current step does not fit, or of the step's family."""

    def reset(self, **kwargs):
        self._obs, info = self.env.reset(**kwargs)
        return self._obs, info

    def step(self, action):
        self._obs, *rest = self.env.step(action)
        return (self._obs, *rest)

    def action_masks(self) -> np.ndarray:
        env = self.env.unwrapped
        mask = env.action_masks()
        if mask[1]:  # WRITE fits: nothing needs room
            start, width = len(env.step_features) + len(MEMORY_FEATURES), len(env.slot_features)
            family = env.slot_features.index("same_family")
            for k in range(env.K):
                if not self._obs[start + k * width + family]:
                    mask[2 + env.K + k] = False
        return mask


class ExpireCost(gym.Wrapper):
    """Subtracts ``cost`` from the reward of every EXPIRE (training only: held-out F1 is the env's)."""

    def __init__(self, env: gym.Env, cost: float) -> None:
        super().__init__(env)
        self.cost = cost

    def step(self, action):
        obs, reward, *rest = self.env.step(action)
        if int(action) >= 2 + self.env.unwrapped.K:
            reward -= self.cost
        return (obs, reward, *rest)


def held_out(model, env_kwargs: dict, only_needed: bool, episodes: int = 30) -> float:
    env = gym.make("WritePolicyBench-v0", **{**env_kwargs, "episode_seed": HELD_OUT_SEED})
    env = OnlyNeededExpires(env) if only_needed else env
    ratios = []
    for index in range(episodes):
        obs, _ = env.reset(options={"episode_index": index})
        base, done = env.unwrapped, False
        while not done:
            mask = env.action_masks() if only_needed else base.action_masks()
            action, _ = model.predict(obs, action_masks=mask, deterministic=True)
            obs, _, done, _, info = env.step(int(action))
        bound = episode_oracle(base.episode, [base.budget_bytes], base.track).f1_bounds[base.budget_bytes].f1
        ratios.append(info["metrics"]["f1"] / bound if bound else 1.0)
    return float(np.mean(ratios))


def main() -> None:
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.env_util import make_vec_env

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-kwargs", type=json.loads, default={}, help="JSON object of env arguments")
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="training seeds first-seed .. first-seed+seeds-1")
    parser.add_argument("--n-envs", type=int, default=1, help="1: as the README's quickstart trains")
    parser.add_argument("--only-needed-expires", action="store_true")
    parser.add_argument("--expire-cost", type=float, default=0.0, help="reward cost of an EXPIRE in training")
    args = parser.parse_args()
    torch.set_num_threads(1)  # PyTorch's default threads make PPO several times slower on 2 cores
    wrappers = [OnlyNeededExpires] if args.only_needed_expires else []
    if args.expire_cost:
        wrappers.append(partial(ExpireCost, cost=args.expire_cost))

    def wrapper(env: gym.Env) -> gym.Env:
        for wrap in wrappers:
            env = wrap(env)
        return env
    results = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        start = time.perf_counter()
        env = make_vec_env(
            "WritePolicyBench-v0", args.n_envs, seed=seed, env_kwargs=args.env_kwargs, wrapper_class=wrapper
        )
        model = MaskablePPO("MlpPolicy", env, seed=seed).learn(args.steps)
        results.append(held_out(model, args.env_kwargs, args.only_needed_expires))
        print(f"seed {seed}: F1 / bound {results[-1]:.3f} ({time.perf_counter() - start:.0f} s)", flush=True)
    print(f"env {args.env_kwargs}, {args.n_envs} envs, {args.steps} steps: mean F1 / bound {np.mean(results):.3f}, "
          f"worst seed {min(results):.3f} (target 0.9)")


if __name__ == "__main__":
    main()
