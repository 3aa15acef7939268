"""WritePolicyBench-Gym: memory write policies under byte budgets with drifting API streams.

The benchmark core (spec v0 and the paper): the data model, byte accounting, the memory
store, JSONL episodes and frozen sets, the drift-regime generators, the metrics and the
exact hindsight oracle; and the Gymnasium environment ``WritePolicyBench-v0`` built on them
(registered on import, with variants per regime and track: ``ENV_IDS``). Nothing here
imports ``agents``.
"""

from .core.accounting import canonical_delta, episode_costs, estimate_bytes, merge_cost
from .core.budget import BudgetExceededError, BudgetView, ByteBudget
from .core.compression import Compression, compressed_cost, compressed_step
from .core.kind_budgets import KINDS, KindBudgets, KindShares, content_kind
from .core.policy import ORACLE, POLICY_TRACKS, EpisodeContext, EpisodeOutcome, Policy
from .core.readonly import ReadOnlyDict, ReadOnlyList, thaw
from .core.store import ByteMemoryStore, Decision, Reason, StoreView
from .core.tracks import PRIVILEGED, TRACKS, UNPRIVILEGED, policy_episode, policy_step, track_costs
from .core.types import ACTION_TYPES, ActionType, Episode, MemoryAction, MemoryItem, Step
from .core.version import __version__
from .core.write_time import WriteTime
from .envs.env import WritePolicyBenchEnv
from .envs.registration import ENV_IDS, register_envs
from .envs.vector import WritePolicyBenchVectorEnv
from .episodes.frozen import FrozenSet, FrozenSetError, freeze_set, open_frozen_set
from .episodes.generators.paper import REGIMES, GeneratorConfig, generate_episode, generate_episodes, make_config
from .episodes.jsonl import EpisodeFormatError, iter_jsonl, load_jsonl, write_jsonl
from .episodes.sources import EpisodeList, GeneratedEpisodes, read_episodes
from .evaluation.playing import EpisodeRun
from .evaluation.referee import MalformedActionError, NotAnActionError, PolicyError, PolicyLimitError, RunLimits
from .evaluation.runner import run_episode
from .scoring.compression_bounds import (
    compressed_costs,
    compression_f1_bound,
    compression_oracle_utility,
    compression_oracle_write_set,
)
from .scoring.kind_bounds import LimitedBound, kind_f1_bound, kind_oracle_utility, kind_oracle_write_set
from .scoring.metrics import METRIC_NAMES, EpisodeMetrics, compute_metrics, score_episode
from .scoring.oracle import (
    EpisodeOracle,
    F1Bound,
    OracleCurve,
    episode_oracle,
    hindsight_f1_bound,
    oracle_curve,
    oracle_utility,
    oracle_write_set,
)
from .scoring.time_bounds import time_f1_bound, time_oracle_utility, time_oracle_write_set

register_envs()

__all__ = [
    "ACTION_TYPES",
    "ENV_IDS",
    "KINDS",
    "METRIC_NAMES",
    "ORACLE",
    "POLICY_TRACKS",
    "PRIVILEGED",
    "REGIMES",
    "TRACKS",
    "UNPRIVILEGED",
    "ActionType",
    "BudgetExceededError",
    "BudgetView",
    "ByteBudget",
    "ByteMemoryStore",
    "Compression",
    "Decision",
    "Episode",
    "EpisodeContext",
    "EpisodeFormatError",
    "EpisodeList",
    "EpisodeMetrics",
    "EpisodeOracle",
    "EpisodeOutcome",
    "EpisodeRun",
    "F1Bound",
    "FrozenSet",
    "FrozenSetError",
    "GeneratedEpisodes",
    "GeneratorConfig",
    "KindBudgets",
    "KindShares",
    "LimitedBound",
    "MalformedActionError",
    "MemoryAction",
    "MemoryItem",
    "NotAnActionError",
    "OracleCurve",
    "Policy",
    "PolicyError",
    "PolicyLimitError",
    "ReadOnlyDict",
    "ReadOnlyList",
    "Reason",
    "RunLimits",
    "Step",
    "StoreView",
    "WritePolicyBenchEnv",
    "WritePolicyBenchVectorEnv",
    "WriteTime",
    "__version__",
    "canonical_delta",
    "compressed_cost",
    "compressed_costs",
    "compressed_step",
    "compression_f1_bound",
    "compression_oracle_utility",
    "compression_oracle_write_set",
    "compute_metrics",
    "content_kind",
    "episode_costs",
    "episode_oracle",
    "estimate_bytes",
    "freeze_set",
    "generate_episode",
    "generate_episodes",
    "hindsight_f1_bound",
    "iter_jsonl",
    "kind_f1_bound",
    "kind_oracle_utility",
    "kind_oracle_write_set",
    "load_jsonl",
    "make_config",
    "merge_cost",
    "open_frozen_set",
    "oracle_curve",
    "oracle_utility",
    "oracle_write_set",
    "policy_episode",
    "policy_step",
    "read_episodes",
    "register_envs",
    "run_episode",
    "score_episode",
    "thaw",
    "time_f1_bound",
    "time_oracle_utility",
    "time_oracle_write_set",
    "track_costs",
    "write_jsonl",
]
