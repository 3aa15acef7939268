"""Time ``value_keeper`` over one query-tier episode: the kept input rows against rows made afresh.

``value_keeper`` values every endpoint it holds at every decision (about 200 of them at
100 KB). ``ValueKeeper`` keeps each endpoint's input row until the stream moves its features
(a checkpoint, or a show in its family); ``ReferenceValueKeeper`` makes every row afresh.
Prints, per budget, the wall time of one episode for each, their ratio, whether they took the
same actions, and the time of ``keep_latest_migration`` (the scripted keeper on the same
engine) as a reference measured in the same run.

Speed does not depend on what the networks learned, only on how many endpoints memory holds
and how many networks are averaged, so without ``--model`` the model is ``--members`` (5, as
``wpb train`` trains) networks of seeded random weights whose values are positive (it admits
and evicts like a trained one); ``--model RUN/learner.json`` times a trained one.

    python benchmarks/value_keeper.py [--tier queries_medium] [--length 7000] [--members 5] [--model PATH]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one decision's matrices are small: threads only contend

import numpy as np  # noqa: E402

from agents.learners.value_keeper import (  # noqa: E402
    INPUTS,
    ReferenceValueKeeper,
    ValueEnsemble,
    ValueKeeper,
    ValueNetwork,
    load_network,
)
from agents.registry import make_agent  # noqa: E402
from wpb_gym.episodes.generators.queries import generate_query_episode, query_config  # noqa: E402
from wpb_gym.evaluation.runner import run_episode  # noqa: E402

BUDGETS = (10240, 102400)


def seeded_ensemble(members: int, seed: int = 0) -> ValueEnsemble:
    """``members`` networks of the trained ones' shape (two hidden layers of 128) and random weights."""
    rng = np.random.default_rng(seed)
    hidden = 128

    def layer(n_in: int, n_out: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
        return rng.normal(scale=scale, size=(n_in, n_out)), rng.normal(scale=0.1, size=n_out)

    networks = []
    for _ in range(members):
        out_weight, _ = layer(hidden, 1, 0.1)
        networks.append(ValueNetwork([layer(len(INPUTS), hidden, 0.2), layer(hidden, hidden, 0.1),
                                      (out_weight, np.array([1.0]))]))
    return ValueEnsemble(networks)


def timed(policy, episode, budget):
    start = time.perf_counter()
    run = run_episode(policy, episode, budget, oracle_utility=1.0)
    return time.perf_counter() - start, [(a.t, a.action.action, a.action.target_t) for a in run.actions]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", default="queries_medium")
    parser.add_argument("--length", type=int, default=7000)
    parser.add_argument("--seed", type=int, default=2718)
    parser.add_argument("--members", type=int, default=5, help="networks averaged without --model (default 5)")
    parser.add_argument("--model", default=None, help="a trained RUN/learner.json (default: seeded random weights)")
    args = parser.parse_args()

    episode = generate_query_episode(query_config(args.tier, length=args.length), args.seed, 0)
    if args.members < 1:
        parser.error(f"--members: expected at least 1 network, got {args.members}")
    network, words = load_network(args.model) if args.model else (seeded_ensemble(args.members), None)
    print(f"value_keeper on {args.tier}, {args.length} steps, seed {args.seed}, "
          f"{'model ' + args.model if args.model else f'{args.members} seeded random networks'}")
    print(f"{'budget':>8} {'reference s':>12} {'kept s':>8} {'speed-up':>9} {'same actions':>13} "
          f"{'keep_latest_migration s':>24} {'kept / migration':>17}")
    for budget in BUDGETS:
        times, actions = [], []
        for cls in (ReferenceValueKeeper, ValueKeeper):
            keeper = cls()
            keeper.network, keeper.words = network, words
            elapsed, taken = timed(keeper, episode, budget)
            times.append(elapsed)
            actions.append(taken)
        scripted, _ = timed(make_agent("keep_latest_migration"), episode, budget)
        print(f"{budget:>8} {times[0]:>12.2f} {times[1]:>8.2f} {times[0] / times[1]:>8.1f}x "
              f"{str(actions[0] == actions[1]):>13} {scripted:>24.2f} {times[1] / scripted:>16.2f}x")


if __name__ == "__main__":
    main()
