"""How fast an SB3 model decides in ``wpb eval``: ``SB3Agent``'s direct call against ``predict``.

``wpb eval`` plays a model one decision at a time through ``SB3Agent``. The agent calls the
policy itself; the reference is the literal ``model.predict`` (``SB3Agent(...,
through_predict=True)``), which sets every module's mode, copies and checks the observation
and converts the action at each call. Both decide on the same observations, alternating rounds so that the machine's
drifts hit both alike; the actions must be the same. The model is the query tier's recipe
architecture (``QueryRowsPolicy``, 32 slots, 256 word buckets), untrained: the time of a
decision does not depend on the weights. ``--episode`` also plays one generated episode of
``queries_medium`` (7,000 steps) through ``run_episode`` each way.

    python benchmarks/model_decisions.py [--decisions 2000] [--rounds 3] [--episode]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch as th


def _model(folder: Path, env):
    from sb3_contrib import MaskablePPO

    from agents.sb3.query_policy import QueryRowsPolicy

    th.manual_seed(0)
    model = MaskablePPO(QueryRowsPolicy, env, policy_kwargs={"slots": env.K, "word_buckets": env.word_buckets},
                        seed=0, device="cpu")
    model.save(folder / "m.zip")
    (folder / "m.env.json").write_text(json.dumps({"query_tier": True, "slots": env.K,
                                                  "word_buckets": env.word_buckets}))
    return folder / "m.zip"


def _states(env, count: int, rng: np.random.Generator):
    observations, masks = [], []
    obs, _ = env.reset(options={"episode_index": 0})
    while len(observations) < count:
        mask = env.action_masks()
        observations.append(obs)
        masks.append(mask)
        obs, _, done, _, _ = env.step(int(rng.choice(np.flatnonzero(mask))))
        if done:
            obs, _ = env.reset()
    return observations, masks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--episode", action="store_true", help="also play one episode of 7,000 steps each way")
    args = parser.parse_args()
    th.set_num_threads(1)
    from agents.sb3.agent import SB3Agent
    from wpb_gym.envs.query_env import QueryTierEnv
    from wpb_gym.evaluation.runner import run_episode

    env = QueryTierEnv(regime="queries_medium", slots=32, word_buckets=256, budget_bytes=10240, episode_seed=1)
    with tempfile.TemporaryDirectory() as folder:
        path = _model(Path(folder), env)
        agents = {"predict": SB3Agent(path, through_predict=True), "direct": SB3Agent(path)}
    for agent in agents.values():
        agent.restart()
    observations, masks = _states(env, args.decisions, np.random.default_rng(0))
    ways = {name: agent.decide for name, agent in agents.items()}
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    actions: dict[str, list[int]] = {}
    for _ in range(args.rounds):
        for name, act in ways.items():
            start = time.perf_counter()
            actions[name] = [act(o, m) for o, m in zip(observations, masks, strict=True)]
            seconds[name].append(time.perf_counter() - start)
    if actions["direct"] != actions["predict"]:
        sys.exit("the direct call and predict decided differently")
    per = {name: 1e3 * min(s) / args.decisions for name, s in seconds.items()}
    print(f"predict: {per['predict']:.2f} ms a decision; direct: {per['direct']:.2f} ms "
          f"(best of {args.rounds} rounds of {args.decisions} decisions, the same actions)")
    print(f"the direct call decides {per['predict'] / per['direct']:.2f}x as fast as predict")
    # What is left of a decision is the network: the same observations fed at once, as a
    # batched evaluation would (not something wpb eval does).
    policy = agents["direct"].model.policy
    start = time.perf_counter()
    at_once, _ = policy.predict(np.stack(observations), deterministic=True, action_masks=np.stack(masks))
    batched = 1e3 * (time.perf_counter() - start) / args.decisions
    # A batch's products may round differently from one row's, so a near tie may part.
    parted = sum(a != b for a, b in zip(at_once.tolist(), actions["direct"], strict=True))
    print(f"the same {args.decisions} observations fed to the policy at once: {batched:.2f} ms a decision "
          f"({parted} of them decided otherwise)")
    if args.episode:
        episode = QueryTierEnv(regime="queries_medium", budget_bytes=10240, episode_seed=1000003)
        episode.reset(options={"episode_index": 0})
        played = {}
        for name, agent in agents.items():
            start = time.perf_counter()
            run = run_episode(agent, episode.episode, 10240, track="unprivileged")
            played[name] = (time.perf_counter() - start, run.queries.accuracy)
        if played["direct"][1] != played["predict"][1]:
            sys.exit("the episode's query accuracy differs between the two ways")
        print(f"one episode of 7,000 steps in run_episode: predict {played['predict'][0]:.1f} s, direct "
              f"{played['direct'][0]:.1f} s ({played['predict'][0] / played['direct'][0]:.2f}x)")


if __name__ == "__main__":
    main()
