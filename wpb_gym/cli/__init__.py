"""``wpb``, the command line of WritePolicyBench-Gym.

Commands (``wpb COMMAND --help`` describes each):

* ``wpb freeze`` — generate a frozen episode set (a folder with ``MANIFEST.json``).
* ``wpb episodes from-events`` — cut a change-event log into a frozen set of real episodes.
* ``wpb inspect`` — summarise episode files or frozen sets and what the hindsight oracle reaches.
* ``wpb agents`` — list the registered agents.
* ``wpb eval`` — run agents over episodes x budgets x tracks (``results.csv``, ``leaderboard.md``, figures).
* ``wpb report`` — tables of a run folder (the paper's layout, headroom, F1 by budget, transfer).
* ``wpb compare`` — paired comparison of two runs, or of one agent against the others.
* ``wpb seeds`` — a learned agent over its training seeds (IQM, lifts, P(improvement), optimality gap).
* ``wpb baseline set`` — record an accepted run as the regression baseline.
* ``wpb ingest openapi`` — a change-event log from the git history of an OpenAPI description.
* ``wpb ablate`` — two eval configs over N seeds, with paired t-tests.
* ``wpb train`` — train an SB3 agent or a bandit learner.
* ``wpb dataset`` — record an agent's trajectories as a Minari dataset (offline RL, imitation).
* ``wpb export`` — a trained SB3 or RLlib model to the data-only policy format (``policy:DIR``).
* ``wpb sweep`` — training trials (algorithm x regime x seed x hyperparameters) on Ray Tune.
* ``wpb stress`` — adversarial drift: each agent's worst generator setting, frozen as a stress set.

One module per command group (``episode_sets``, ``training``, ``evaluation``, ``results``,
``ingest``, ``datasets``, ``sweep``, ``models``, ``stress``). Each command declares its settings in one table; ``settings`` merges the defaults,
the command's ``--config`` file and its flags into one read-only object, and ``inputs`` holds
the checks a value goes through wherever it comes from. This is the one package that joins
``wpb_gym`` and ``agents``."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ..core.checks import InputError
from ..core.messages import one_line
from ..core.policy import PolicyFailure
from ..core.version import __version__
from ..episodes.frozen import FrozenSetError
from ..episodes.jsonl import EpisodeFormatError
from . import datasets, episode_sets, evaluation, ingest, models, results, stress, sweep, training
from .inputs import OneLineParser

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="wpb", description="WritePolicyBench-Gym command line")
    parser.add_argument("--version", action="version", version=f"wpb {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (episode_sets, training, evaluation, results, stress, ingest, datasets, sweep, models):
        group.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``wpb``; bad input (an option, a config, a data file) prints one line and returns 2."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:  # argparse has printed its usage error (2), --help or --version (0)
        return exit.code if isinstance(exit.code, int) else 2
    try:
        # Defaults, then the command's --config file, then its flags: one Settings object.
        return args.func(args.settings.resolve(args))
    except (InputError, EpisodeFormatError, FrozenSetError) as error:
        message = str(error)
    except OSError as error:  # a path given to wpb that cannot be read or written
        message = f"{error.filename}: {error.strerror}" if error.filename and error.strerror else str(error)
    except PolicyFailure as error:  # a policy failed, said whole by its message: the run, not the input, failed
        print(f"{args.prog}: {type(error).__name__}: {one_line(str(error))}", file=sys.stderr)
        return 1
    message = one_line(message)
    if len(message) > _LONGEST_MESSAGE:  # a huge value quoted in full would bury the message
        message = message[: _LONGEST_MESSAGE - 40] + f" ... ({len(message):,} characters in all)"
    print(f"{args.prog}: error: {message}", file=sys.stderr)
    return 2


_LONGEST_MESSAGE = 2000
