"""Time loading episode files with ``load_jsonl`` and check the round trip.

Loads every file given ``--repeats`` times and prints the minimum and median CPU time of one
pass over all of them (CPU time: wall time on a shared machine swings with its load). Each file
is first written back with ``write_jsonl`` and compared byte for byte with the original.

    python benchmarks/load_jsonl.py FILE.jsonl [FILE.jsonl.gz ...] [--repeats 40]

To compare two versions of the loader, run the same command with ``PYTHONPATH`` pointing at
each checkout, one after the other.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from wpb_gym.episodes.jsonl import load_jsonl, write_jsonl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        for path in args.files:
            again = Path(tmp) / path.name
            write_jsonl(again, load_jsonl(path))
            same = again.read_bytes() == path.read_bytes()
            print(f"{path.name}: round trip {'byte-identical' if same else 'DIFFERS'}")

    times = []
    for _ in range(args.repeats):
        start = time.process_time()
        for path in args.files:
            load_jsonl(path)
        times.append(time.process_time() - start)
    total = sum(path.stat().st_size for path in args.files)
    print(
        f"load {len(args.files)} files ({total / 1e6:.1f} MB): min {min(times) * 1000:.1f} ms, "
        f"median {statistics.median(times) * 1000:.1f} ms over {args.repeats} passes (CPU time)"
    )


if __name__ == "__main__":
    main()
