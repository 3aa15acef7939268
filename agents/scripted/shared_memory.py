"""Scripted policies for ``SharedMemoryEnv`` (several write policies, one memory), and the
table of how they fare together.

Each policy is a function of an agent's observation and action mask returning its action
(``wpb_gym.envs.shared_memory``'s actions). They read the observation's features by name:

* ``skip``: never writes.
* ``own_breaking``: ``breaking_detector``'s rule on its own families: a breaking change or a
  migration guide of a family that interests it is written, making room by expiring its own
  items larger than it, largest first; a change its endpoint reverts is expired.
* ``own_breaking_keep``: the same, but never expires to make room: it writes what fits.
* ``any_breaking``: ``own_breaking`` on every family, its own or not: in cooperative mode it
  covers the others' changes too, in competitive mode it takes bytes from them.
* ``own_all``: every step of its own families, making room from its own oldest.

``python -m agents.scripted.shared_memory`` plays every pair of them in both modes on held-out
episodes and prints the table of ``docs/multi-agent.md``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from collections.abc import Callable, Sequence

import numpy as np

from wpb_gym.core.setting_values import budget_text
from wpb_gym.envs.shared_memory import (
    EXPIRE_REVERTED,
    FEATURES,
    SKIP,
    WRITE,
    WRITE_EXPIRING_LARGER,
    WRITE_MAKING_ROOM,
    SharedMemoryEnv,
)

_F = {name: i for i, name in enumerate(FEATURES)}
Policy = Callable[[np.ndarray, np.ndarray], int]


def _looks_critical(obs: np.ndarray) -> bool:
    return bool(obs[_F["breaking"]] or obs[_F["kind_guide"]])


def skip(obs: np.ndarray, mask: np.ndarray) -> int:
    return SKIP


def _breaking_rule(obs: np.ndarray, mask: np.ndarray, mine: bool, make_room: bool) -> int:
    if not mine:
        return SKIP
    if obs[_F["reverts_own"]] and mask[EXPIRE_REVERTED]:
        return EXPIRE_REVERTED  # a change it holds was reverted: drop it, write nothing
    if _looks_critical(obs):
        if mask[WRITE]:
            return WRITE
        if make_room and mask[WRITE_EXPIRING_LARGER]:
            return WRITE_EXPIRING_LARGER
    return SKIP


def own_breaking(obs: np.ndarray, mask: np.ndarray) -> int:
    return _breaking_rule(obs, mask, bool(obs[_F["mine"]]), make_room=True)


def own_breaking_keep(obs: np.ndarray, mask: np.ndarray) -> int:
    return _breaking_rule(obs, mask, bool(obs[_F["mine"]]), make_room=False)


def any_breaking(obs: np.ndarray, mask: np.ndarray) -> int:
    return _breaking_rule(obs, mask, True, make_room=True)


def own_all(obs: np.ndarray, mask: np.ndarray) -> int:
    return WRITE_MAKING_ROOM if obs[_F["mine"]] and mask[WRITE_MAKING_ROOM] else SKIP


POLICIES: dict[str, Policy] = {
    "skip": skip, "own_breaking": own_breaking, "own_breaking_keep": own_breaking_keep,
    "any_breaking": any_breaking, "own_all": own_all,
}


def play(env: SharedMemoryEnv, policies: Sequence[Policy], episodes: int, seed: int) -> list[dict[str, dict]]:
    """The final scores of ``episodes`` episodes (episode ``i`` of the generated set ``seed``),
    agent ``k`` played by ``policies[k]``."""
    out = []
    for index in range(episodes):
        obs, infos = env.reset(seed=seed, options={"episode_index": index})
        while env.agents:
            actions = {agent: policies[k](obs[agent], infos[agent]["action_mask"])
                       for k, agent in enumerate(env.possible_agents)}
            obs, _, _, _, infos = env.step(actions)
        out.append(infos)
    return out


def table(regime: str, budgets: Sequence[int], names: Sequence[str], episodes: int, seed: int) -> str:
    """Mean F1 of each agent for every pair of ``names`` (two agents), in both modes."""
    lines = ["| mode | budget | agent_0 | agent_1 | F1 agent_0 | F1 agent_1 | bound agent_0 | bound agent_1 |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in ("cooperative", "competitive"):
        for budget in budgets:
            env = SharedMemoryEnv(regime=regime, budget_bytes=budget, mode=mode, episode_seed=seed,
                                  episode_order="cycle")
            for a, b in itertools.combinations_with_replacement(names, 2):
                scores = play(env, [POLICIES[a], POLICIES[b]], episodes, seed)
                f1 = [statistics.fmean(s[agent]["f1"] for s in scores) for agent in env.possible_agents]
                bound = [statistics.fmean(s[agent]["bound"] for s in scores) for agent in env.possible_agents]
                lines.append(f"| {mode} | {budget_text(budget)} | `{a}` | `{b}` | {f1[0]:.3f} | {f1[1]:.3f} | "
                             f"{bound[0]:.3f} | {bound[1]:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agents.scripted.shared_memory", description=__doc__.split("\n")[0])
    parser.add_argument("--regime", default="contract_mix")
    parser.add_argument("--budgets", default="1024,10240", help="bytes, comma-separated")
    parser.add_argument("--policies", default=",".join(p for p in POLICIES if p != "skip"))
    parser.add_argument("--episodes", type=int, default=30)
    parser.add_argument("--seed", type=int, default=2718, help="the generated episodes' seed (held out from training)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.policies.split(",")]
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        parser.error(f"--policies: unknown {unknown}; known: {', '.join(POLICIES)}")
    try:
        budgets = [int(b) for b in args.budgets.split(",")]
    except ValueError:
        parser.error(f"--budgets: expected bytes as integers separated by commas, got {args.budgets!r}")
    print(table(args.regime, budgets, names, args.episodes, args.seed), end="")


if __name__ == "__main__":
    main()
