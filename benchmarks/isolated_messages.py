"""CPU time of a policy's process in isolated evaluation, without the noise of scheduling.

Runs the paper's grid of ``eval_grid.py`` isolated, one baseline at a time, keeping every
message the evaluator sends to the policy's process; then replays those messages through the
policy process's server in this process and prints the CPU seconds each policy's side takes
(the work ``wpb_gym.evaluation.isolated.policy_process`` does per message: copies of the steps, the policy, its
replica store, the replies). Wall-clock ratios of isolated evaluation drift with this VM's
phase; this figure moves much less, so it is the one to compare two versions of the code by.

    python benchmarks/isolated_messages.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import pickle
import time
from functools import partial

import eval_grid

import wpb_gym.evaluation.isolated.isolation as isolation
from agents.registry import make_agent
from wpb_gym.evaluation.isolated.policy_process import PolicyServer
from wpb_gym.evaluation.referee import DEFAULT_LIMITS


def recorded(agent: str) -> list[bytes]:
    """The messages the evaluator sends to ``agent``'s process over the grid."""
    sent: list[bytes] = []
    original = isolation.PolicyWorker.send

    def keep(worker, data: bytes) -> None:
        sent.append(data)
        original(worker, data)

    isolation.PolicyWorker.send = keep
    try:
        eval_grid.AGENTS = (agent,)
        eval_grid.grid(1, isolate=True)
    finally:
        isolation.PolicyWorker.send = original
    return sent


def replay(agent: str, messages: list[bytes]) -> float:
    server = PolicyServer(partial(make_agent, agent), DEFAULT_LIMITS)
    handlers = {"probe": server.probe, "begin": server.begin, "step": server.step, "end": server.end}
    start = time.process_time()
    for data in messages:
        kind, *arguments = pickle.loads(data)
        handlers[kind](*arguments)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="replays per policy; the best is reported")
    args = parser.parse_args()
    total = 0.0
    for agent in eval_grid.AGENTS:
        messages = recorded(agent)
        best = min(replay(agent, messages) for _ in range(args.repeat))
        total += best
        print(f"{agent:>20}: {len(messages):5d} messages, {best:.2f} CPU-s")
    print(f"{'all':>20}: {total:.2f} CPU-s in the policies' processes (best of {args.repeat} each)")


if __name__ == "__main__":
    main()
