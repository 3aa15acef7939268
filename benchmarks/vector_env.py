"""The native vector env against CartPole-v1's, SyncVectorEnv and SB3's DummyVecEnv, in one run.

Six measurements, the first two as ratios against a reference measured in the same run, in
alternating slices (the VM's speed drifts):

* ``env``: env-steps/s of ``gym.make_vec("WritePolicyBench-v0", N)`` (the native vector env)
  with random valid actions (drawn from the batched mask), against CartPole-v1's native vector
  env at the same N with random actions, and against ``vectorization_mode="sync"`` over single
  envs on their Python parts (``env_throughput.on_python_parts``). At N = 256
  on the default settings (target 0.20x CartPole), on T = 10,000 / 1 MB (target 0.15x), and on
  a frozen set of 64 default episodes, whose episodes come back (read once, compiled once).
* ``train``: MaskablePPO training steps/s from ``NativeVecEnv`` against the same training from
  ``DummyVecEnv`` (``wpb train``'s two ``vec_env`` choices: same hyperparameters, fused Adam,
  envs and results; target 2x), and against plain PPO on CartPole-v1 (target 0.9x; also given
  fused Adam), at 4, 16 and 64 envs, the first rollout of each run outside the timing; with
  each run's share of time in collecting rollouts, in the env during them (steps and masks) and
  in updating, and the most any env could gain over DummyVecEnv if it cost nothing.
  On episodes the core makes (a contract regime's, or ``MADE`` with ``--train-made``), also
  with one episode worker, as ``wpb train`` runs it where a CPU is spare.
* ``memory``: peak resident memory of a process that builds the vector env at N = 256 and
  plays 2,000 vector steps, for T = 200 and T = 10,000 (each in a fresh process); and how many
  objects the garbage collector tracks, and a full collection's time, once numba is loaded.
* ``compile``: the compiled core's one-time cost per process, with numba's cache empty and filled:
  for a newcomer's first ``make_vec`` (4 envs), reset and step, with when the env said it was
  compiling, and through a first episode on the default regime and on ``contract_mix``; each
  with the compile in a background process (the default: the first steps run as Python, and
  the line says when the compile ended) and in the process itself (``WPB_GYM_COMPILE=here``).
  Every other part measures compiled code (it sets ``WPB_GYM_COMPILE=here``).
* ``collector``: env-steps/s of the vector env with Python's garbage collector paused in
  ``reset``, ``step`` and ``advance`` (a subclass made here) against the env as it is, the
  collector on throughout, at N = 256 on the default settings with random valid actions, in
  alternating slices, the collector on outside the steps for both; in a fresh process, and in
  one with torch imported first (a trainer's process: more objects for each full collection).
* ``reset``: per regime, resetting one sub-env of the vector env against a single env's reset
  (on its Python parts, as every single env this script measures against).
* ``stall``: per contract regime, on the default regime with sections and guides, and on
  large episodes (``MADE``: endpoints of up to 1,201 names), all made by their generator, what
  a sub-env's reset adds to a 64-env step while the sub-envs play, with and without an episode
  worker, against a single env's reset; at full speed and with a pause between steps where a
  trainer's policy would run (``--paces``).
* ``generators``: what replaying the paper regimes' generator in compiled code gains, per
  regime (``--generator-regimes``): env-steps/s at N with random valid actions, and MaskablePPO
  training steps/s at the first ``--train-envs``, with the core replaying each episode from its
  draws (the default; the paper's four regimes only) against ``replay_generators=False``, where
  the Python generator makes every episode and the core reads it (as it does the contract
  regimes' always), without and with one episode worker; every row as a ratio to CartPole-v1
  (its native vector env; its PPO) measured in the same slices.

The env, train and reset parts first play a small vector env through an episode's end and the
step after it (``warm_up``), so that numba's one-time loading (or compiling) is not timed.

    python benchmarks/vector_env.py [--part env|train|memory|compile|collector|reset|stall|generators|all] [--seconds 4]
        [--rounds 3] [--env-regimes breaking contract_mix] [--train-envs 4 16 64] [--train-regime breaking] [--train-made] [--resets 20] [--paces 0 0.001]
        [--generator-regimes default contract_mix]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import wpb_gym  # noqa: F401  (registers the ids)

# Its sibling script, whether this runs as a script or is imported as benchmarks.vector_env (the
# fresh processes of the compile and collector parts).
sys.path.insert(0, str(Path(__file__).parent))
from env_throughput import on_python_parts  # noqa: E402

# Throughput is measured on compiled code: never on the Python a first run plays while numba
# compiles in the background (``--part compile`` measures that first run on its own).
os.environ.setdefault("WPB_GYM_COMPILE", "here")
from wpb_gym.envs.fast.contract_episodes import drawn_compilable  # noqa: E402
from wpb_gym.episodes.generators.contracts import NAMES_BEFORE_NUMBERING  # noqa: E402
from wpb_gym.episodes.generators.paper import CONTRACT_REGIMES, PAPER_REGIMES, REGIMES, make_config  # noqa: E402
from wpb_gym.episodes.sources import EpisodeRecipe  # noqa: E402

# Slow episodes the core makes and reads: endpoints of up to 1,201 names, more than the word pairs
# give (the generator numbers the rest), several times a contract regime's reset. An episode worker
# prepares them.
MADE = {"regime": "breaking", "max_params": NAMES_BEFORE_NUMBERING + 1, "api_pool": 4}

SETTINGS = {
    "default (T=200, 10 KB)": {},
    "long (T=10,000, 1 MB)": {"length": 10_000, "budget_bytes": 1_048_576},
}


def random_valid(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One uniformly drawn valid action per row of ``masks``, with array operations: the valid
    action with the largest uniform draw (each valid one equally likely; a row whose draws are all
    0 gives action 0, SKIP, always valid). A third of the time of a count-and-cumsum draw, as
    CartPole's side draws its actions the cheapest way too."""
    return (rng.random(masks.shape) * masks).argmax(axis=1)


def env_rate(env, seconds: float, masked: bool, seed: int = 0) -> tuple[int, float]:
    _, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    n, steps, start = env.num_envs, 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        actions = random_valid(info["action_mask"], rng) if masked else rng.integers(0, 2, n)
        _, _, _, _, info = env.step(actions)
        steps += n
    return steps, time.perf_counter() - start


def measure_env(n: int, seconds: float, rounds: int, regimes: list[str] | None = None) -> None:
    import tempfile

    from wpb_gym.episodes.frozen import freeze_set

    warm_up()
    folder = tempfile.TemporaryDirectory()
    frozen = freeze_set(Path(folder.name) / "set", ["default"], [200], 64, seed=0)
    settings = {**SETTINGS, "a frozen set (64 x T=200)": {"episodes": str(frozen.root)},
                **{f"{regime} (T=200, 10 KB)": {"regime": regime, "length": 200, "budget_bytes": 10_240}
                   for regime in regimes or ()}}
    print(f"Env-steps per second, N = {n} envs, random valid actions (ratios to CartPole-v1's native vector env)")
    print(f"{'setting':<28} {'CartPole-v1':>12} {'native':>10} {'ratio':>7} {'sync':>9} {'ratio':>7} native/sync")
    for name, kwargs in settings.items():
        envs = {
            "cartpole": (gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point"), False),
            "native": (gym.make_vec("WritePolicyBench-v0", num_envs=n, **kwargs), True),
            "sync": (gym.make_vec("WritePolicyBench-v0", num_envs=n, vectorization_mode="sync",
                                  **on_python_parts(kwargs)), True),
        }
        totals = {key: [0, 0.0] for key in envs}
        for _ in range(rounds):
            for key, (env, masked) in envs.items():
                steps, elapsed = env_rate(env, seconds, masked)
                totals[key][0] += steps
                totals[key][1] += elapsed
        rate = {key: steps / elapsed for key, (steps, elapsed) in totals.items()}
        print(
            f"{name:<28} {rate['cartpole']:>12,.0f} {rate['native']:>10,.0f} {rate['native'] / rate['cartpole']:>6.3f}x"
            f" {rate['sync']:>9,.0f} {rate['sync'] / rate['cartpole']:>6.3f}x {rate['native'] / rate['sync']:>11.2f}x"
        )


def measure_train(n_envs_list: list[int], steps: int, rounds: int, regime: str | None = None,
                  made: bool = False) -> None:
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from agents.sb3.masked_policy import as_wpb_train
    from agents.sb3.optimizer import with_fused_adam
    from agents.sb3.train import build_vec_env

    torch.set_num_threads(1)  # measured: default threads on 2 cores train PPO several times slower
    hyper = {"n_steps": 256, "batch_size": 256, "n_epochs": 4, "policy_kwargs": {"net_arch": [64, 64]},
             "device": "cpu", "seed": 0}
    fused = with_fused_adam(MaskablePPO, "MlpPolicy", hyper)  # as `wpb train` makes the model
    warm_up()
    wpb = dict(MADE) if made else {} if regime is None else {"regime": regime}
    print("Training steps per second, n_steps 256, batch 256, 4 epochs, one torch thread; MaskablePPO as `wpb train`"
          " runs it (masked directly, distribution checks off, fused Adam) on"
          f" {wpb or 'the default regime'}; CartPole-v1's plain PPO as SB3 runs it, and with fused Adam")
    print(f"{'envs':>4} {'training run':<28} {'steps/s':>9} {'vs CartPole PPO':>16} {'vs DummyVecEnv':>15}"
          f" {'rollouts':>9} {'env':>5} {'updates':>8}")
    for n_envs in n_envs_list:
        def maskable(kind, kwargs=fused, workers=0, n_envs=n_envs):
            return lambda: MaskablePPO("MlpPolicy", build_vec_env(wpb, n_envs, 0, kind, workers=workers), **kwargs)

        def cartpole(kwargs, n_envs=n_envs):
            return lambda: PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs, seed=0), **kwargs)
        runs = {
            "CartPole-v1, PPO (reference)": (cartpole(hyper), False),
            "  the same, fused Adam": (cartpole(with_fused_adam(PPO, "MlpPolicy", hyper)), False),
            "MaskablePPO, DummyVecEnv": (maskable("dummy"), True),
            "MaskablePPO, NativeVecEnv": (maskable("native"), True),
            "  the same, as SB3 runs it": (maskable("native", hyper), False),
        }
        if made or (regime not in (None, *PAPER_REGIMES)  # episodes the core makes: a worker prepares them
                    and not drawn_compilable(EpisodeRecipe(make_config(regime), 0, 0))):
            runs["  the same, 1 episode worker"] = (maskable("native", workers=1), True)
        totals = {name: [0, 0.0, 0.0, 0.0, 0.0] for name in runs}  # steps, seconds: all, rollouts, env, updates
        prepared = [0, 0]  # resets the worker had ready in the timed runs, resets
        for _ in range(rounds):
            for name, (make, like_wpb_train) in runs.items():
                model = make()
                model.learn(256 * n_envs)  # the first rollout (resets, first calls) outside the timing
                vector = getattr(model.env.unwrapped, "vector", None)
                workers = None if vector is None else vector.core.workers
                if workers is not None:
                    workers.settle()  # its process started (about 0.6 s, once per run)
                    before = (workers.served, workers.asked)
                phases = _timed_phases(model)
                done = model.num_timesteps
                start = time.perf_counter()
                if like_wpb_train:
                    with as_wpb_train(model):
                        model.learn(steps, reset_num_timesteps=False)
                else:
                    model.learn(steps, reset_num_timesteps=False)
                elapsed = time.perf_counter() - start
                if workers is not None:
                    prepared[0] += workers.served - before[0]
                    prepared[1] += workers.asked - before[1]
                model.env.close()  # an episode worker's process stops
                measured = (model.num_timesteps - done, elapsed, phases["rollout"], phases["env"], phases["update"])
                for k, value in enumerate(measured):
                    totals[name][k] += value
        rate = {name: done / elapsed for name, (done, elapsed, *_) in totals.items()}
        cartpole, dummy = rate["CartPole-v1, PPO (reference)"], rate["MaskablePPO, DummyVecEnv"]
        for name, value in rate.items():
            _, elapsed, rollout, env, update = totals[name]
            print(f"{n_envs:>4} {name:<28} {value:>9,.0f} {value / cartpole:>15.2f}x {value / dummy:>14.2f}x"
                  f" {100 * rollout / elapsed:>8.0f}% {100 * env / elapsed:>4.0f}% {100 * update / elapsed:>7.0f}%")
        # Amdahl: the rest (SB3's own rollout work, the update) is the same work in both runs.
        dummy_total, _, dummy_env, _ = totals["MaskablePPO, DummyVecEnv"][1:]
        bound = dummy_total / (dummy_total - dummy_env)
        print(f"{'':>4} bound: an env that cost nothing would train at most {bound:.2f}x DummyVecEnv"
              " (its env share as measured)")
        if prepared[1]:
            print(f"{'':>4} the episode worker had {prepared[0]} of {prepared[1]} timed resets prepared")
    n_envs = n_envs_list[0]
    stepping = sb3_stepping(n_envs, rounds, wpb)
    print(f"Env steps per second through SB3's VecEnv alone (step and masks, random valid actions), {n_envs} envs")
    for name, value in stepping.items():
        print(f"{name:<32} {value:>9,.0f} {value / stepping['DummyVecEnv']:>14.2f}x of DummyVecEnv")


def measure_generators(n: int, seconds: float, rounds: int, regimes: list[str], n_envs: int, steps: int) -> None:
    """The ``generators`` part (see the module docstring)."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecMonitor

    from agents.sb3.masked_policy import as_wpb_train
    from agents.sb3.native_vec_env import NativeVecEnv
    from agents.sb3.optimizer import with_fused_adam

    torch.set_num_threads(1)  # as measure_train
    hyper = {"n_steps": 256, "batch_size": 256, "n_epochs": 4, "policy_kwargs": {"net_arch": [64, 64]},
             "device": "cpu", "seed": 0}
    warm_up()
    made = {"made in Python": (False, 0), "made, 1 episode worker": (False, 1)}
    print(f"Replaying generators from their draws against making every episode in Python (replay_generators=False):"
          f" env-steps/s at N = {n} with random valid actions against CartPole-v1's native vector env, and"
          f" MaskablePPO training steps/s at {n_envs} envs (as `wpb train` runs it: masked directly, fused Adam)"
          " against CartPole-v1's PPO")
    print(f"{'regime':<14} {'episodes':<24} {'env steps/s':>12} {'vs CartPole':>12} {'train steps/s':>14}"
          f" {'vs CartPole PPO':>16}")
    for regime in regimes:
        kwargs = {} if regime == "default" else {"regime": regime}
        # The paper's four regimes and the contract regimes without text are replayed; the others
        # are made either way.
        replayed = regime in PAPER_REGIMES or drawn_compilable(EpisodeRecipe(make_config(regime), 0, 0))
        sides = {"replayed (default)": (True, 0), **made} if replayed else made
        envs = {"cartpole": gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point")}
        envs.update({name: gym.make_vec("WritePolicyBench-v0", num_envs=n, replay_generators=replay,
                                        episode_workers=workers, **kwargs)
                     for name, (replay, workers) in sides.items()})
        env_totals = {name: [0, 0.0] for name in envs}
        for r in range(rounds):
            for name in (list(envs) if r % 2 == 0 else list(reversed(envs))):
                done, elapsed = env_rate(envs[name], seconds, name != "cartpole")
                env_totals[name][0] += done
                env_totals[name][1] += elapsed
        for env in envs.values():
            env.close()

        def model(name: str):
            if name == "cartpole":
                return PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs, seed=0), **hyper)
            replay, workers = sides[name]
            vec = NativeVecEnv(n_envs, kwargs, workers, replay_generators=replay)
            vec.seed(0)
            return MaskablePPO("MlpPolicy", VecMonitor(vec), **with_fused_adam(MaskablePPO, "MlpPolicy", hyper))
        train_totals = {name: [0, 0.0] for name in envs}
        for r in range(rounds):
            for name in (list(envs) if r % 2 == 0 else list(reversed(envs))):
                trained = model(name)
                trained.learn(256 * n_envs)  # the first rollout (resets, first calls) outside the timing
                vector = getattr(trained.env.unwrapped, "vector", None)
                if vector is not None and vector.core.workers is not None:
                    vector.core.workers.settle()  # its process started (once per run)
                start = time.perf_counter()
                if vector is None:
                    trained.learn(steps, reset_num_timesteps=False)
                else:
                    with as_wpb_train(trained):
                        trained.learn(steps, reset_num_timesteps=False)
                train_totals[name][0] += steps
                train_totals[name][1] += time.perf_counter() - start
                trained.env.close()
        env_rates = {name: done / elapsed for name, (done, elapsed) in env_totals.items()}
        train_rates = {name: done / elapsed for name, (done, elapsed) in train_totals.items()}
        for name in ("cartpole", *sides):
            label = "CartPole-v1 (reference)" if name == "cartpole" else name
            env_ratio = env_rates[name] / env_rates["cartpole"]
            train_ratio = train_rates[name] / train_rates["cartpole"]
            print(f"{regime:<14} {label:<24} {env_rates[name]:>12,.0f} {env_ratio:>11.3f}x"
                  f" {train_rates[name]:>14,.0f} {train_ratio:>15.2f}x")


def _timed_phases(model) -> dict[str, float]:
    """Seconds ``model`` spends collecting rollouts, in its env during them (steps and masks),
    and updating, summed from now on."""
    phases = {"rollout": 0.0, "env": 0.0, "update": 0.0}
    for owner, attribute, phase in ((model, "collect_rollouts", "rollout"), (model, "train", "update"),
                                    (model.env, "step", "env"), (model.env, "env_method", "env")):
        original = getattr(owner, attribute)

        def timed(*args, _original=original, _phase=phase, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                phases[_phase] += time.perf_counter() - start

        setattr(owner, attribute, timed)
    return phases


def measure_reset(resets: int, rounds: int) -> None:
    """Per regime, two ways, each against a single env's reset in alternating slices:

    * a sub-env's reset: ``reset(seed=...)`` of a one-env vector env (choosing the episode,
      turning it into arrays, observing it, and the vector env's own reset work) against a
      single env's ``reset(seed=...)`` on the same seeds, new ones in every round (the compiled
      core remembers the contents of episodes it has read);
    * the stall of a batch step: what a step of a 64-env vector env does for each sub-env whose
      episode ended (``_reset_sub_envs``: choose the next episode, read it, start it in the
      compiled core) against a single env's unseeded ``reset()``, which chooses, reads and
      observes its next episode likewise.

    The garbage collector is off during each slice (as ``timeit`` runs) and collects before it,
    so that neither side pays for the other's garbage: with numba loaded a full collection
    takes tens of milliseconds, and where one falls would decide a slice. Both sides so leave
    out the collections a long run pays for; the last column puts them back: the stall of
    a batch step against a single env's reset again, with the collector on, over slices ten
    times as long (what each side keeps alive decides how often full collections come)."""
    import gc

    from wpb_gym.envs.env import WritePolicyBenchEnv
    from wpb_gym.envs.vector import WritePolicyBenchVectorEnv

    def timed(call, first: int) -> float:
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            for k in range(first, first + resets):
                call(k)
            return time.perf_counter() - start
        finally:
            gc.enable()

    def collected(call) -> float:  # the sides timed so draw their own episodes (unseeded)
        start = time.perf_counter()
        for k in range(10 * resets):
            call(k)
        return time.perf_counter() - start

    warm_up()
    print(f"Reset time per regime, {resets} resets x {rounds} rounds, garbage collector off in slices"
          " (ratios: the vector env's / a single env's)")
    print(f"{'regime':<18} {'single env':>11} {'sub-env':>11} {'ratio':>7}   {'single env':>11} {'in a step':>11}"
          f" {'ratio':>7}   {'collector on':>12}")
    for regime in sorted(REGIMES):
        single = WritePolicyBenchEnv(**on_python_parts({"regime": regime}))
        one = WritePolicyBenchVectorEnv(1, regime=regime)
        # Resetting one sub-env of 64 (Gymnasium's reset_mask, which the Disabled mode takes): the
        # reset a vector step makes of a sub-env whose episode ended.
        batch = WritePolicyBenchVectorEnv(64, regime=regime, autoreset_mode="Disabled")
        batch.reset(seed=0)
        one_of = np.eye(64, dtype=np.bool_)
        single.reset(seed=0)
        sides = {
            "seeded single": lambda k: single.reset(seed=k),
            "sub-env": lambda k: one.reset(seed=k),
            "single": lambda k: single.reset(),
            "in a step": lambda k: batch.reset(options={"reset_mask": one_of[k % 64]}),
        }
        totals = dict.fromkeys(sides, 0.0)
        with_collector = {"single": 0.0, "in a step": 0.0}
        for r in range(rounds):
            for name in (list(sides) if r % 2 == 0 else list(reversed(sides))):
                # New seeds in every round (both sides of a round play the same ones): an episode
                # met again would find its contents known.
                totals[name] += timed(sides[name], r * resets)
            for name in (list(with_collector) if r % 2 == 0 else list(reversed(with_collector))):
                with_collector[name] += collected(sides[name])
        per = {name: total / (resets * rounds) * 1e6 for name, total in totals.items()}
        print(f"{regime:<18} {per['seeded single']:>9,.0f}us {per['sub-env']:>9,.0f}us"
              f" {per['sub-env'] / per['seeded single']:>6.2f}x   {per['single']:>9,.0f}us {per['in a step']:>9,.0f}us"
              f" {per['in a step'] / per['single']:>6.2f}x"
              f"   {with_collector['in a step'] / with_collector['single']:>11.2f}x")


def measure_stall(seconds: float, rounds: int, pace: float, n: int = 64) -> None:
    """Per contract regime, on the default regime with sections and guides ("default, text") and
    on large episodes (``MADE``: "made"), what a sub-env's reset adds to the batch step it falls
    in, with and without an episode worker (for the episodes made by their generator and read:
    the contract regimes without text are played from their draws), against a
    single env's unseeded ``reset()``, in alternating slices. A ``n``-env vector env plays random
    valid actions and every step is timed: the stall is the time steps that reset sub-envs take
    beyond the mean of steps that reset none, per reset; "prepared" is the share of resets whose
    episode a worker had ready. ``pace``: seconds slept between steps, where a trainer's policy
    would run (its time is not counted in env-steps/s). The one worker makes an episode in about
    a single env's reset: at full speed the sub-envs end them faster."""
    from wpb_gym.envs.env import WritePolicyBenchEnv
    from wpb_gym.envs.vector import WritePolicyBenchVectorEnv

    warm_up()
    print(f"Stall of a batch step per sub-env reset, {n} envs, random valid actions, {rounds} x {seconds} s slices,"
          f" {pace * 1e3:g} ms between steps (ratios: against a single env's reset)")
    print(f"{'regime':<15} {'single env':>10} {'no worker':>10} {'ratio':>6} {'env-steps/s':>12}"
          f" {'1 worker':>10} {'ratio':>6} {'env-steps/s':>12} {'prepared':>9}")
    # The contract regimes without text are played from their draws: no worker prepares them.
    settings = [(regime, {"regime": regime}, (0,) if drawn_compilable(EpisodeRecipe(make_config(regime), 0, 0))
                 else (0, 1)) for regime in CONTRACT_REGIMES]
    settings += [("default, text", {"regime": "default", "doc_prob": 0.3, "migration_guides": True}, (0, 1)),
                 ("made", MADE, (0, 1))]
    for regime, kwargs, kinds in settings:
        single = WritePolicyBenchEnv(**on_python_parts(kwargs))
        single.reset(seed=0)
        sides = {workers: WritePolicyBenchVectorEnv(n, episode_workers=workers, **kwargs) for workers in kinds}
        stalls = {workers: [0.0, 0] for workers in kinds}  # seconds beyond a reset-free step, resets
        rates = {workers: [0, 0.0] for workers in kinds}
        resets, single_time, asked = 0, 0.0, 0
        masks, rng = {}, np.random.default_rng(0)
        ended = {workers: np.zeros(n, dtype=np.bool_) for workers in kinds}  # NextStep: the next step resets them
        for workers, vector in sides.items():  # the slices go on from here: a seeded reset would spend every wish
            _, info = vector.reset(seed=0)
            start = time.perf_counter()
            while time.perf_counter() - start < max(seconds, 3.0):  # the worker starts (about a second)
                _, _, terminated, truncated, info = vector.step(random_valid(info["action_mask"], rng))
                ended[workers] = terminated | truncated
                time.sleep(pace)
            masks[workers] = info["action_mask"]
        for r in range(rounds):
            for workers in (kinds if r % 2 == 0 else kinds[::-1]):
                vector = sides[workers]
                info = {"action_mask": masks[workers]}
                times, counts = [], []
                workers_before = (vector.core.workers.served, vector.core.workers.asked) if workers else (0, 0)
                start = time.perf_counter()
                while time.perf_counter() - start < seconds:
                    restarting = int(ended[workers].sum())  # NextStep: this step resets them
                    began = time.perf_counter()
                    _, _, terminated, truncated, info = vector.step(random_valid(info["action_mask"], rng))
                    times.append(time.perf_counter() - began)
                    counts.append(restarting)
                    ended[workers] = terminated | truncated
                    if pace:
                        time.sleep(pace)
                masks[workers] = info["action_mask"]
                times_a, counts_a = np.array(times), np.array(counts)
                plain = times_a[counts_a == 0].mean()
                stalls[workers][0] += float((times_a[counts_a > 0] - plain).sum())
                stalls[workers][1] += int(counts_a.sum())
                rates[workers][0] += n * len(times)
                rates[workers][1] += float(times_a.sum())
                if workers:
                    resets += vector.core.workers.served - workers_before[0]
                    asked += vector.core.workers.asked - workers_before[1]
            for _ in range(50):  # paced as the steps are: a pause leaves the caches cold for both
                began = time.perf_counter()
                single.reset()
                single_time += time.perf_counter() - began
                if pace:
                    time.sleep(pace)
        for vector in sides.values():
            vector.close()
        reset_us = single_time / (50 * rounds) * 1e6
        stall = {w: total / max(count, 1) * 1e6 for w, (total, count) in stalls.items()}
        rate = {w: done / elapsed for w, (done, elapsed) in rates.items()}
        with_worker = (f" {stall[1]:>8,.0f}us {stall[1] / reset_us:>5.2f}x {rate[1]:>12,.0f}"
                       f" {100 * resets / max(asked, 1):>8.0f}%" if 1 in kinds else
                       f" {'-':>10} {'-':>6} {'-':>12} {'-':>9}")
        print(f"{regime:<15} {reset_us:>8,.0f}us {stall[0]:>8,.0f}us {stall[0] / reset_us:>5.2f}x {rate[0]:>12,.0f}"
              + with_worker)


def warm_up() -> None:
    """Build, reset and step a native vector env until an episode has ended and the next has
    started, on the default regime and on a contract one: the compiled core's first calls load
    (or compile) its machine code, the final metrics' U*(B) included, a cost paid once per
    process (``--part compile`` measures it)."""
    for kwargs in ({"length": 20}, {"regime": "contract_mix", "length": 80, "api_pool": 6}):
        env = gym.make_vec("WritePolicyBench-v0", num_envs=2, **kwargs)
        _, info = env.reset(seed=0)
        rng, ended = np.random.default_rng(0), False
        while not ended:
            _, _, terminated, _, info = env.step(random_valid(info["action_mask"], rng))
            ended = terminated.any()
        env.step(random_valid(info["action_mask"], rng))  # starts the next episode


def _first_call_child() -> None:
    start = time.perf_counter()
    warm_up()
    seconds = time.perf_counter() - start
    from wpb_gym.envs.fast.core import CODE

    while CODE.compiling:  # a first run's background compile: waited for, so the next process loads
        time.sleep(0.05)
    print(json.dumps({"seconds": seconds, "compiled_at": time.perf_counter() - start}))


def _first_step_child(single: bool = False) -> None:
    """A newcomer's first vector env: make_vec with 4 envs, reset, one step (``single``: a single
    env's ``gym.make``, reset and step); with the seconds at which the env's notes (stderr lines
    starting ``wpb_gym:``) appeared."""
    import io

    start, notes = time.perf_counter(), []

    class Noting(io.TextIOBase):
        def write(self, text: str) -> int:
            if text.startswith("wpb_gym:"):
                notes.append([round(time.perf_counter() - start, 1), text.strip()])
            return len(text)

    sys.stderr = Noting()
    try:
        if single:
            env = gym.make("WritePolicyBench-v0")
            step = lambda info: env.step(int(random_valid(info["action_mask"][None], rng)[0]))  # noqa: E731
        else:
            env = gym.make_vec("WritePolicyBench-v0", num_envs=4, vectorization_mode="vector_entry_point")
            step = lambda info: env.step(random_valid(info["action_mask"], rng))  # noqa: E731
        _, info = env.reset(seed=0)
        reset = time.perf_counter() - start
        rng = np.random.default_rng(0)
        info = step(info)[4]
        seconds = time.perf_counter() - start
        # A first run's background compile: played on (in Python) until it has filled the cache,
        # so that the next process loads it.
        from wpb_gym.envs.fast.core import CODE

        steps = 0
        while CODE.compiling:
            _, _, terminated, _, info = step(info)
            steps += 1
            if single and terminated:
                info = env.reset()[1]
    finally:
        sys.stderr = sys.__stderr__
    print(json.dumps({"reset": reset, "seconds": seconds, "notes": notes, "steps_in_python": steps,
                      "compiled_at": time.perf_counter() - start}))


def measure_first_call() -> None:
    """Seconds from import to a newcomer's first step (``make_vec``, 4 envs, reset, step), and
    to the end of a first episode and the step after it on the default regime and on
    ``contract_mix`` (``warm_up``), in fresh processes, with the compiled core's cache empty
    (numba compiles) and then filled (numba loads it); and when the env said it was compiling."""
    import tempfile

    print("First calls of the compiled core, each in a fresh process (the import of wpb_gym not timed);"
          " WPB_GYM_COMPILE=background (the default) compiles in a background process and plays in Python"
          " meanwhile, =here compiles before the first step")
    for what, child in (("make_vec(4) + reset + step", "_first_step_child()"),
                        ("single env: make + reset + step", "_first_step_child(single=True)"),
                        ("first episodes, default and contract_mix", "_first_call_child()")):
        for choice in ("background", "here"):
            with tempfile.TemporaryDirectory() as cache:
                said = set()
                for label in ("empty cache", "cache filled"):
                    found = _in_fresh_process(child, {**os.environ, "NUMBA_CACHE_DIR": cache,
                                                      "WPB_GYM_COMPILE": choice})
                    notes = found.get("notes")
                    when = "" if notes is None else (f"; note at {notes[0][0]:.1f} s" if notes else "; no note")
                    reset = f" (reset done at {found['reset']:.1f} s)" if "reset" in found else ""
                    compiled = ""
                    if found["compiled_at"] > found["seconds"] + 0.5:
                        compiled = f"; the background compile ended at {found['compiled_at']:.1f} s"
                        if "steps_in_python" in found:
                            compiled += f", after {found['steps_in_python']:,} more steps in Python"
                    print(f"  {what:<42} {choice:<11} {label:<13} {found['seconds']:6.1f} s{reset}{when}{compiled}")
                    said.update(text for _, text in notes or [])
                for text in sorted(said):
                    print(f"    the note: {text}")


def _paused_child(n: int, seconds: float, rounds: int, with_torch: bool) -> None:
    import gc

    if with_torch:
        import torch  # noqa: F401

    from wpb_gym.envs.vector import WritePolicyBenchVectorEnv

    def pausing(method):
        def paused(self, *args, **kwargs):
            if not gc.isenabled():  # the caller turned it off: left off
                return method(self, *args, **kwargs)
            gc.disable()
            try:
                return method(self, *args, **kwargs)
            finally:
                gc.enable()

        return paused

    # What the vector env did until this measurement removed it (it gained under 5%).
    paused_env = type("Paused", (WritePolicyBenchVectorEnv,),
                      {name: pausing(getattr(WritePolicyBenchVectorEnv, name)) for name in ("reset", "step", "advance")})

    warm_up()
    sides = {"paused": paused_env(n), "on": WritePolicyBenchVectorEnv(n)}
    state = {}
    for name, env in sides.items():
        _, info = env.reset(seed=0)
        state[name] = (info, np.random.default_rng(0))
    done = {name: [0, 0.0, 0] for name in sides}  # env-steps, seconds, full collections
    ratios = []
    for r in range(rounds):
        rates = {}
        for name in (list(sides) if r % 2 == 0 else list(reversed(sides))):
            env, (info, rng) = sides[name], state[name]
            gc.collect()  # neither side pays for the other's garbage
            full = gc.get_stats()[2]["collections"]
            steps, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                _, _, _, _, info = env.step(random_valid(info["action_mask"], rng))
                steps += n
            elapsed = time.perf_counter() - start
            state[name] = (info, rng)
            done[name][0] += steps
            done[name][1] += elapsed
            done[name][2] += gc.get_stats()[2]["collections"] - full
            rates[name] = steps / elapsed
        ratios.append(rates["paused"] / rates["on"])
    print(json.dumps({"rounds": ratios, "total": (done["paused"][0] / done["paused"][1]) / (done["on"][0] / done["on"][1]),
                      "rates": {name: d[0] / d[1] for name, d in done.items()},
                      "full_collections": {name: d[2] for name, d in done.items()},
                      "tracked_objects": len(gc.get_objects())}))


def measure_collector(n: int, seconds: float, rounds: int) -> None:
    """The paused collector's gain: env-steps/s paused over collector on, per round and in total."""
    print(f"Garbage collector paused in the vector env's steps against on throughout (as it is), N = {n}, default"
          f" settings, random valid actions, {rounds} rounds of {seconds:g} s slices, each setting in a fresh process")
    for with_torch in (False, True):
        found = _in_fresh_process(f"_paused_child({n}, {seconds}, {rounds}, {with_torch})")
        label = "torch imported" if with_torch else "plain process"
        rounds_text = " ".join(f"{x:.3f}" for x in found["rounds"])
        print(f"  {label:<15} paused/on {found['total']:.3f}x (rounds: {rounds_text});"
              f" {found['rates']['paused']:,.0f} vs {found['rates']['on']:,.0f} env-steps/s;"
              f" full collections in slices {found['full_collections']['paused']} vs {found['full_collections']['on']};"
              f" {found['tracked_objects']:,} objects tracked")


def sb3_stepping(n_envs: int, rounds: int, env_kwargs: dict, seconds: float = 2.0) -> dict[str, float]:
    """What training asks of the env (a step and the masks per call), without the learning."""
    from sb3_contrib.common.maskable.utils import get_action_masks

    from agents.sb3.train import build_vec_env

    totals = {"DummyVecEnv": [0, 0.0], "NativeVecEnv": [0, 0.0]}
    for _ in range(rounds):
        for name in totals:
            env = build_vec_env(env_kwargs, n_envs, 0, "dummy" if name == "DummyVecEnv" else "native")
            env.reset()
            rng, steps, start = np.random.default_rng(0), 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                env.step(random_valid(get_action_masks(env), rng))
                steps += n_envs
            totals[name][0] += steps
            totals[name][1] += time.perf_counter() - start
    return {name: steps / elapsed for name, (steps, elapsed) in totals.items()}


def _memory_child(length: int, n: int, steps: int) -> None:
    import resource

    kwargs = {"length": length, "budget_bytes": 1_048_576} if length > 200 else {}
    env = gym.make_vec("WritePolicyBench-v0", num_envs=n, **kwargs)
    _, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        _, _, _, _, info = env.step(random_valid(info["action_mask"], rng))
    print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def measure_memory(n: int, steps: int) -> None:
    print(f"Peak resident memory, N = {n}, {steps} vector steps, each in a fresh process")
    for length in (200, 10_000):
        peak = _in_fresh_process(f"_memory_child({length}, {n}, {steps})")["peak_rss_mb"]
        print(f"  T = {length:>6,}: {peak:,.0f} MB")
    found = _in_fresh_process("_collector_child()")
    print("Objects the garbage collector tracks, and a full collection's time (best of 5), in a fresh process:")
    for stage, (objects, ms) in found.items():
        print(f"  {stage:<40} {objects:>9,} objects {ms:>7.1f} ms")


def _in_fresh_process(call: str, env: dict[str, str] | None = None) -> dict:
    """What ``call`` (a function of this module, as code) prints last, as JSON, run in a new process."""
    done = subprocess.run([sys.executable, "-c", f"import benchmarks.vector_env as b; b.{call}"],
                          capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _collector_child() -> None:
    import gc
    import timeit

    def state() -> tuple[int, float]:  # objects tracked, a full collection's best time of 5 (ms)
        return len(gc.get_objects()), min(timeit.repeat(gc.collect, number=1, repeat=5)) * 1e3

    found = {}
    gym.make("WritePolicyBench-v0", **on_python_parts({})).reset(seed=0)  # numba not loaded
    found["a single env reset on its Python parts"] = state()
    gym.make_vec("WritePolicyBench-v0", num_envs=1).reset(seed=0)
    found["and a 1-env vector env reset (numba)"] = state()
    print(json.dumps(found))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", default="all", choices=["env", "train", "memory", "compile", "collector", "reset",
                                                          "stall", "generators", "all"])
    parser.add_argument("--num-envs", type=int, default=256, help="N for the env and memory parts")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per env slice")
    parser.add_argument("--rounds", type=int, default=3, help="alternating slices per setting")
    parser.add_argument("--env-regimes", nargs="*", default=[], choices=sorted(REGIMES),
                        help="the env part also on these regimes (e.g. breaking contract_mix)")
    parser.add_argument("--train-envs", type=int, nargs="+", default=[4, 16, 64], help="training part's env counts")
    parser.add_argument("--train-steps", type=int, default=8192, help="training steps per slice")
    parser.add_argument("--resets", type=int, default=20, help="resets per slice of the reset part")
    parser.add_argument("--train-regime", default=None, choices=sorted(REGIMES),
                        help="the regime MaskablePPO trains on (default: the default regime)")
    parser.add_argument("--train-made", action="store_true",
                        help="train on episodes the core makes (MADE) instead, also with an episode worker")
    parser.add_argument("--paces", type=float, nargs="+", default=[0.0, 0.001],
                        help="seconds between steps in the stall part (where a policy would run)")
    parser.add_argument("--generator-regimes", nargs="+", default=["default", "contract_mix"], choices=sorted(REGIMES),
                        help="the generators part's regimes")
    args = parser.parse_args()
    if args.part in ("env", "all"):
        measure_env(args.num_envs, args.seconds, args.rounds, args.env_regimes)
    if args.part in ("train", "all"):
        measure_train(args.train_envs, args.train_steps, args.rounds, args.train_regime, args.train_made)
    if args.part in ("memory", "all"):
        measure_memory(args.num_envs, 2_000)
    if args.part in ("compile", "all"):
        measure_first_call()
    if args.part in ("collector", "all"):
        measure_collector(args.num_envs, args.seconds, args.rounds)
    if args.part in ("reset", "all"):
        measure_reset(args.resets, args.rounds)
    if args.part in ("stall", "all"):
        for pace in args.paces:
            measure_stall(args.seconds, args.rounds, pace)
    if args.part in ("generators", "all"):
        measure_generators(args.num_envs, args.seconds, args.rounds, args.generator_regimes, args.train_envs[0],
                           args.train_steps)


if __name__ == "__main__":
    main()
