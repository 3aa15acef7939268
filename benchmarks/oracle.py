"""Time the exact oracle: U*(B) and the prefix curve U*(B, t) for T = 200, 1,000, 10,000 at 1 KB–1 MB.

Prints, per (T, budget), the median wall time of ``oracle_curve`` over a few repeats (one
budget per call, plus the whole 4-budget grid in one call), and the ratio against a
reference measured in the same run: serialising the same episode's steps once with
``json.dumps`` (what loading or writing the episode costs anyway). Also prints the time of
``oracle_write_set`` (the set itself, with backtracking) at the largest budget.

    python benchmarks/oracle.py [--repeats 5] [--regime burst_drift]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from wpb_gym import generate_episode, make_config, oracle_curve, oracle_write_set, track_costs

BUDGETS = (1024, 10240, 102400, 1048576)
LENGTHS = (200, 1000, 10000)


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--regime", default="burst_drift")
    parser.add_argument("--track", default="unprivileged")
    args = parser.parse_args()

    print(f"oracle_curve timings, regime={args.regime}, track={args.track}, median of {args.repeats}")
    print(f"{'T':>6} {'budget':>9} {'oracle s':>9} {'U*(B)':>9} {'json.dumps s':>12} {'ratio':>6}")
    for length in LENGTHS:
        episode = generate_episode(make_config(args.regime, length=length), seed=0, index=0)
        costs = track_costs(episode, args.track)
        utilities = episode.utilities
        reference = median_time(lambda: [json.dumps(s.to_dict(), sort_keys=True) for s in episode.steps], args.repeats)
        for budget in BUDGETS:
            elapsed = median_time(lambda: oracle_curve(costs, utilities, [budget]), args.repeats)
            value = oracle_curve(costs, utilities, [budget]).at(budget)
            print(
                f"{length:>6} {budget:>9} {elapsed:>9.4f} {value:>9.1f} {reference:>12.4f} {elapsed / reference:>6.2f}"
            )
        grid = median_time(lambda: oracle_curve(costs, utilities, BUDGETS), args.repeats)
        print(f"{length:>6} {'all 4':>9} {grid:>9.4f} {'':>9} {reference:>12.4f} {grid / reference:>6.2f}")
        top = BUDGETS[-1]
        chosen = median_time(lambda: oracle_write_set(costs, utilities, top), max(1, args.repeats // 2))
        print(f"{length:>6} {'set@1MB':>9} {chosen:>9.4f}")


if __name__ == "__main__":
    main()
