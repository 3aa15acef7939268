"""Preparing an episode, against the literal way of doing the same, in alternating slices of one run.

Two measurements per regime, each a ratio against a named reference measured in the same run:

* ``generation``: ``generate_episode`` as the package does it (the contract regimes' parameter
  names drawn in blocks, filler text joined only as far as it reaches) against the literal
  draws (one NumPy call per name, ``rng.choice`` of the vocabulary for the text). Both make the
  same episodes (``tests/episodes``).
* ``description``: the vector env reading an episode (``describe_episode``), its new contents
  described together a field at a time (``ContentMemo.contents``), against the same reading
  with the contents described one at a time (``ContentMemo.content``, the literal form).

    python benchmarks/episode_preparation.py [--episodes 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time
from contextlib import contextmanager
from typing import Callable

import numpy as np

import wpb_gym.episodes.generators.paper as paper
from wpb_gym.envs.fast.contents import ContentMemo
from wpb_gym.envs.fast.episode_arrays import describe_episode
from wpb_gym.episodes.generators import contracts
from wpb_gym.episodes.generators.paper import REGIMES, generate_episode, make_config


def literal_text(rng: np.random.Generator, n_bytes: int) -> str:
    return " ".join(rng.choice(np.asarray(paper._VOCABULARY), size=n_bytes // 3 + 1).tolist())[:n_bytes]


@contextmanager
def literal_generation():
    blocked, text = contracts.generate_contract_steps, paper._text
    paper.generate_contract_steps = lambda *args: blocked(*args, block_draws=False)
    paper._text = literal_text
    try:
        yield
    finally:
        paper.generate_contract_steps, paper._text = blocked, text


class OneAtATime(ContentMemo):
    def contents(self, texts, observations):
        return [self.content(text, obs) for text, obs in zip(texts, observations, strict=True)]


def alternate(sides: dict[str, Callable[[], None]], rounds: int) -> dict[str, float]:
    """Seconds per call of each side, summed over ``rounds`` slices that alternate the order."""
    totals = dict.fromkeys(sides, 0.0)
    for r in range(rounds):
        for name in (list(sides) if r % 2 == 0 else list(reversed(sides))):
            start = time.perf_counter()
            sides[name]()
            totals[name] += time.perf_counter() - start
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=300, help="episodes per slice")
    parser.add_argument("--rounds", type=int, default=5, help="slices per side")
    args = parser.parse_args()
    n, rounds = args.episodes, args.rounds
    print(f"Per regime, microseconds per episode ({n} episodes x {rounds} slices per side, alternating)")
    print(f"{'regime':<18} {'generation':>11} {'literal':>9} {'speed-up':>9}   {'description':>11} {'literal':>9}"
          f" {'speed-up':>9}")
    for regime in REGIMES:
        config = make_config(regime)

        def generate() -> None:
            for index in range(n):
                generate_episode(config, 0, index)

        def literal_generate() -> None:
            with literal_generation():
                generate()

        generated = [generate_episode(config, 1, index) for index in range(n)]
        memos = {"batched": ContentMemo(), "literal": OneAtATime()}

        def reader(memo: ContentMemo) -> Callable[[], None]:
            return lambda: [describe_episode(episode, "unprivileged", memo) for episode in generated]

        g = alternate({"ours": generate, "literal": literal_generate}, rounds)
        d = alternate({"ours": reader(memos["batched"]), "literal": reader(memos["literal"])}, rounds)
        per = 1e6 / (n * rounds)
        print(f"{regime:<18} {g['ours'] * per:>9,.0f}us {g['literal'] * per:>7,.0f}us {g['literal'] / g['ours']:>8.2f}x"
              f"   {d['ours'] * per:>9,.0f}us {d['literal'] * per:>7,.0f}us {d['literal'] / d['ours']:>8.2f}x")


if __name__ == "__main__":
    main()
