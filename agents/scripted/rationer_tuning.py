"""The grid ``breaking_rationer``'s prior was chosen on, over training episodes.

    python -m agents.scripted.rationer_tuning [--seed 0] [--episodes 10] [--credit 0.75]

For every (prior, prior_weight) of the grid it prints the mean F1 of ``breaking_rationer``
over episodes ``0..episodes-1`` of seed ``seed`` of each contract regime (``breaking``,
``reverts``, ``contract_mix``, T=200), at 1 KB and 4 KB, with compressed writes of ``credit``,
and then the best pair. Its defaults are that pair on seed 0; the results in
``docs/compression.md`` are on another seed's episodes.
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from wpb_gym.core.compression import Compression
from wpb_gym.episodes.generators.regimes import generate_episode, make_config
from wpb_gym.evaluation.runner import run_episode

from .heuristics import BreakingRationer

PRIORS = (3.0, 6.0, 9.0, 12.0)
WEIGHTS = (10.0, 50.0, 200.0)
REGIMES = ("breaking", "reverts", "contract_mix")
BUDGETS = (1024, 4096)


def grid_scores(seed: int, episodes: int, credit: float) -> dict[tuple[float, float], float]:
    """Mean F1 per (prior, prior_weight) over the training episodes and budgets."""
    compression = Compression(credit)
    played = [generate_episode(make_config(regime), seed, i) for regime in REGIMES for i in range(episodes)]
    scores = {}
    for prior, weight in itertools.product(PRIORS, WEIGHTS):
        f1 = [run_episode(BreakingRationer(prior, weight), episode, budget, compression=compression,
                          record_actions=False).metrics.f1
              for episode in played for budget in BUDGETS]
        scores[prior, weight] = float(np.mean(f1))
    return scores


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the training episodes' seed (default 0)")
    parser.add_argument("--episodes", type=int, default=10, help="episodes per regime (default 10)")
    parser.add_argument("--credit", type=float, default=0.75, help="the compressed writes' credit (default 0.75)")
    args = parser.parse_args(argv)
    scores = grid_scores(args.seed, args.episodes, args.credit)
    for (prior, weight), f1 in scores.items():
        print(f"prior {prior:g} per 100 steps, weight {weight:g} steps: mean F1 {f1:.4f}")
    best = max(scores, key=scores.__getitem__)
    print(f"best: prior {best[0]:g}, weight {best[1]:g} ({scores[best]:.4f}); spread "
          f"{max(scores.values()) - min(scores.values()):.4f}")


if __name__ == "__main__":
    main()
