"""MaskablePPO's training speed with its policy masked directly, against SB3-contrib's masking.

``agents.masked_policy.direct_masking`` gives the policy a ``forward`` and ``evaluate_actions``
that run the tensor operations of SB3-contrib's masked distribution without building its
distribution objects. Both sides train from one seed with torch's distribution checks off (as
``wpb train`` trains), in alternating runs so that the machine's drifts hit both alike; the
first rollout of each run is outside the timing. The script also checks that both sides end
with the same weights, bit for bit.

    python benchmarks/masked_policy.py [--envs 4 64] [--vec-env native dummy] [--steps 16384] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[4, 64], help="numbers of envs")
    parser.add_argument("--vec-env", nargs="+", default=["native", "dummy"], choices=["native", "dummy"])
    parser.add_argument("--steps", type=int, default=16384, help="timed training steps per run")
    parser.add_argument("--rounds", type=int, default=5, help="alternating runs per side")
    args = parser.parse_args()
    torch.set_num_threads(1)  # measured: default threads on 2 cores train PPO several times slower
    from sb3_contrib import MaskablePPO
    from torch.distributions import Distribution

    from agents.masked_policy import direct_masking
    from agents.train import _vec_env

    Distribution.set_default_validate_args(False)
    hyper = {"n_steps": 256, "batch_size": 256, "n_epochs": 4, "policy_kwargs": {"net_arch": [64, 64]},
             "device": "cpu", "seed": 0}
    print(f"MaskablePPO training steps/s on the default regime, n_steps 256, batch 256, 4 epochs, one torch thread,"
          f" {args.steps} steps x {args.rounds} runs per side")
    print(f"{'envs':>4} {'VecEnv':<7} {'SB3-contrib':>12} {'direct':>8} {'gain':>6}  same weights")
    for n_envs in args.envs:
        for kind in args.vec_env:
            seconds = {False: 0.0, True: 0.0}
            weights = {}
            for _ in range(args.rounds):
                for direct in (False, True):
                    model = MaskablePPO("MlpPolicy", _vec_env({}, n_envs, 0, kind), **hyper)
                    if direct:
                        direct_masking(model)
                    model.learn(256 * n_envs)
                    start = time.perf_counter()
                    model.learn(args.steps, reset_num_timesteps=False)
                    seconds[direct] += time.perf_counter() - start
                    weights[direct] = model.policy.state_dict()
                    model.env.close()
            same = all(torch.equal(weights[False][k], weights[True][k]) for k in weights[False])
            stock, direct = (args.rounds * args.steps / seconds[side] for side in (False, True))
            print(f"{n_envs:>4} {kind:<7} {stock:>12,.0f} {direct:>8,.0f} {direct / stock:>5.2f}x  {same}")


if __name__ == "__main__":
    main()
