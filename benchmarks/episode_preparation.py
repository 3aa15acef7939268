"""Preparing an episode, against the literal way of doing the same, in alternating slices of one run.

Two measurements per regime, each a ratio against a named reference measured in the same run:

* ``generation``: ``generate_episode`` as the package does it (the contract regimes' parameter
  names drawn in blocks, filler text joined only as far as it reaches) against the literal
  draws (one NumPy call per name, ``rng.choice`` of the vocabulary for the text). Both make the
  same episodes (``tests/episodes``).
* ``description``: the vector env reading an episode (``describe_episode``), its new contents
  described together a field at a time (``ContentMemo.contents``), against the same reading
  with the contents described one at a time (``ContentMemo.content``, the literal form). Each
  side keeps one memo across its slices, as a vector env keeps one across episodes, and each
  slice reads episodes it has not read before (the same ones on both sides).

And, for the regimes the vector env plays from their draws (the paper's four, and the contract
regimes without text), a third:

* ``from draws``: an episode made ready to play in the vector env from its random draws alone
  (``paper_episodes.compile_drawn`` or ``contract_episodes.compile_drawn``, its arrays and reward
  function, then its U*(B) at 10 KB), against the literal path: ``generate_episode``,
  ``describe_episode``, the reward function started, ``compile_episode`` and
  ``RewardFunction.oracle_utility`` (a fresh memo per slice). Both give the same arrays up to
  the names of ids (``tests/envs/test_paper_episodes.py``, ``test_contract_episodes.py``).

    python benchmarks/episode_preparation.py [--episodes 300] [--rounds 5] [--regimes breaking ...]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext

import numpy as np

from wpb_gym.envs.fast.contents import ContentMemo
from wpb_gym.envs.fast.core import CompiledCore  # noqa: F401  (binds numba's cache folder)
from wpb_gym.envs.fast.episode_arrays import compile_episode, describe_episode
from wpb_gym.envs.fast.oracle_by_class import drawn_oracle
from wpb_gym.envs.fast import contract_episodes, paper_episodes
from wpb_gym.envs.rewards import RewardFunction
from wpb_gym.episodes.generators import contracts, paper
from wpb_gym.episodes.generators.paper import REGIMES, generate_episode, make_config
from wpb_gym.episodes.generators.text import VOCABULARY
from wpb_gym.episodes.sources import EpisodeRecipe

BUDGET = 10_240


def literal_text(rng: np.random.Generator, n_bytes: int) -> str:
    return " ".join(rng.choice(np.asarray(VOCABULARY), size=n_bytes // 3 + 1).tolist())[:n_bytes]


@contextmanager
def literal_generation():
    blocked, text = contracts.generate_contract_steps, paper.filler_text
    paper.generate_contract_steps = lambda *args: blocked(*args, block_draws=False)
    paper.filler_text = literal_text
    try:
        yield
    finally:
        paper.generate_contract_steps, paper.filler_text = blocked, text


class OneAtATime(ContentMemo):
    def contents(self, texts, observations):
        return [self.content(text, obs) for text, obs in zip(texts, observations, strict=True)]


def alternate(sides: dict[str, Callable[[int], None]], rounds: int) -> dict[str, float]:
    """Seconds per side, summed over ``rounds`` slices (slice r calls ``side(r)``) that
    alternate the order."""
    totals = dict.fromkeys(sides, 0.0)
    for r in range(rounds):
        for name in (list(sides) if r % 2 == 0 else list(reversed(sides))):
            start = time.perf_counter()
            sides[name](r)
            totals[name] += time.perf_counter() - start
    return totals


def generator(config: paper.GeneratorConfig, n: int, literal: bool) -> Callable[[int], None]:
    def generate(_: int) -> None:
        with literal_generation() if literal else nullcontext():
            for index in range(n):
                generate_episode(config, 0, index)

    return generate


def reader(slices: list[list[object]], memo: ContentMemo) -> Callable[[int], None]:
    def read(r: int) -> None:
        for episode in slices[r]:
            describe_episode(episode, "unprivileged", memo)

    return read


def from_draws(config: paper.GeneratorConfig, n: int) -> Callable[[int], None]:
    reward_fn = RewardFunction({"f1": 1.0}, False)
    module = contract_episodes if config.change_model == "contract" else paper_episodes
    compile_drawn = module.compile_drawn

    def prepare(r: int) -> None:
        for index in range(r * n, (r + 1) * n):
            _, labels = compile_drawn(EpisodeRecipe(config, 2, index), "unprivileged", reward_fn, BUDGET)
            drawn_oracle(labels, BUDGET)

    return prepare


def made(config: paper.GeneratorConfig, n: int) -> Callable[[int], None]:
    reward_fn = RewardFunction({"f1": 1.0}, False)

    def prepare(r: int) -> None:
        memo = ContentMemo()
        for index in range(r * n, (r + 1) * n):
            episode = generate_episode(config, 2, index)
            columns = describe_episode(episode, "unprivileged", memo)
            reward_fn.start(episode, columns.costs, BUDGET)
            compile_episode(columns, reward_fn, memo)
            reward_fn.oracle_utility()

    return prepare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=300, help="episodes per slice")
    parser.add_argument("--rounds", type=int, default=5, help="slices per side")
    parser.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    args = parser.parse_args()
    n, rounds = args.episodes, args.rounds
    print(f"Per regime, microseconds per episode ({n} episodes x {rounds} slices per side, alternating)")
    print(f"{'regime':<18} {'generation':>11} {'literal':>9} {'speed-up':>9}   {'description':>11} {'literal':>9}"
          f" {'speed-up':>9}")
    for regime in args.regimes:
        config = make_config(regime)
        slices = [[generate_episode(config, 1, r * n + i) for i in range(n)] for r in range(rounds)]
        g = alternate({"ours": generator(config, n, False), "literal": generator(config, n, True)}, rounds)
        d = alternate({"ours": reader(slices, ContentMemo()), "literal": reader(slices, OneAtATime())}, rounds)
        per = 1e6 / (n * rounds)
        print(f"{regime:<18} {g['ours'] * per:>9,.0f}us {g['literal'] * per:>7,.0f}us {g['literal'] / g['ours']:>8.2f}x"
              f"   {d['ours'] * per:>9,.0f}us {d['literal'] * per:>7,.0f}us {d['literal'] / d['ours']:>8.2f}x")
    drawn = [regime for regime in args.regimes
             if any(module.drawn_compilable(EpisodeRecipe(make_config(regime), 0, 0))
                    for module in (paper_episodes, contract_episodes))]
    if drawn:
        print("\nReady to play in the vector env (arrays, reward function, U*(B) at 10 KB), microseconds per episode")
        print(f"{'regime':<18} {'from draws':>11} {'made, read, compiled':>21} {'speed-up':>9}")
    for regime in drawn:
        config = make_config(regime)
        from_draws(config, 1)(10**6)  # numba loads (or compiles) the compiled functions outside the timing
        t = alternate({"draws": from_draws(config, n), "made": made(config, n)}, rounds)
        per = 1e6 / (n * rounds)
        print(f"{regime:<18} {t['draws'] * per:>9,.0f}us {t['made'] * per:>19,.0f}us {t['made'] / t['draws']:>8.2f}x")


if __name__ == "__main__":
    main()
