"""``wpb train``'s two speed-ups for MaskablePPO, each against training without it.

* ``masking``: ``agents.sb3.masked_policy.direct_masking`` gives the policy a ``forward`` and
  ``evaluate_actions`` that run the tensor operations of SB3-contrib's masked distribution
  without building its distribution objects, against SB3-contrib's own (both with SB3's Adam
  loop). Both sides end with the same weights, bit for bit; the script checks it.
* ``optimizer``: PyTorch's fused Adam (``agents.sb3.optimizer.with_fused_adam``, SB3's settings)
  against SB3's default Adam loop (both masked directly). The same algorithm, rounded
  differently: the script prints how far apart the trained weights end.

Both sides train from one seed on the default regime with torch's distribution checks off (as
``wpb train`` trains), in alternating runs so that the machine's drifts hit both alike; the
first rollout of each run is outside the timing.

    python benchmarks/train_speedups.py [--compare masking optimizer] [--envs 4 64] [--vec-env native dummy]
        [--steps 16384] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

# Measured on compiled code, never on the Python a first run plays while numba compiles in the
# background (benchmarks/vector_env.py --part compile measures that).
os.environ.setdefault("WPB_GYM_COMPILE", "here")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compare", nargs="+", default=["masking", "optimizer"], choices=["masking", "optimizer"])
    parser.add_argument("--envs", type=int, nargs="+", default=[4, 64], help="numbers of envs")
    parser.add_argument("--vec-env", nargs="+", default=["native", "dummy"], choices=["native", "dummy"])
    parser.add_argument("--steps", type=int, default=16384, help="timed training steps per run")
    parser.add_argument("--rounds", type=int, default=5, help="alternating runs per side")
    args = parser.parse_args()
    torch.set_num_threads(1)  # measured: default threads on 2 cores train PPO several times slower
    from sb3_contrib import MaskablePPO
    from torch.distributions import Distribution

    from agents.sb3.masked_policy import direct_masking
    from agents.sb3.optimizer import with_fused_adam
    from agents.sb3.train import build_vec_env

    Distribution.set_default_validate_args(False)
    hyper = {"n_steps": 256, "batch_size": 256, "n_epochs": 4, "policy_kwargs": {"net_arch": [64, 64]},
             "device": "cpu", "seed": 0}
    # each comparison: (the side without, the side with), as (direct masking, hyperparameters)
    sides = {"masking": ((False, hyper), (True, hyper)),
             "optimizer": ((True, hyper), (True, with_fused_adam(MaskablePPO, "MlpPolicy", hyper)))}
    print(f"MaskablePPO training steps/s on the default regime, n_steps 256, batch 256, 4 epochs, one torch thread,"
          f" {args.steps} steps x {args.rounds} runs per side")
    print(f"{'compare':<9} {'envs':>4} {'VecEnv':<7} {'without':>8} {'with':>8} {'gain':>6}  weights apart at most")
    for compare in args.compare:
        for n_envs in args.envs:
            for kind in args.vec_env:
                seconds, weights = [0.0, 0.0], [{}, {}]
                for _ in range(args.rounds):
                    for side, (direct, kwargs) in enumerate(sides[compare]):
                        model = MaskablePPO("MlpPolicy", build_vec_env({}, n_envs, 0, kind), **kwargs)
                        if direct:
                            direct_masking(model)
                        model.learn(256 * n_envs)
                        start = time.perf_counter()
                        model.learn(args.steps, reset_num_timesteps=False)
                        seconds[side] += time.perf_counter() - start
                        weights[side] = model.policy.state_dict()
                        model.env.close()
                apart = max((weights[0][k] - weights[1][k]).abs().max().item() for k in weights[0])
                without, with_ = (args.rounds * args.steps / s for s in seconds)
                print(f"{compare:<9} {n_envs:>4} {kind:<7} {without:>8,.0f} {with_:>8,.0f} {with_ / without:>5.2f}x"
                      f"  {apart:.3g}" + (" (bit for bit)" if apart == 0 else ""))


if __name__ == "__main__":
    main()
