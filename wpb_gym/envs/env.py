"""The Gymnasium environment ``WritePolicyBench-v0``."""

from __future__ import annotations

import heapq
import os
import struct
from collections.abc import Sequence
from itertools import islice
from typing import Any, Mapping

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..core.accounting import canonical_delta, merge_cost
from ..core.checks import require_int
from ..episodes.generators.paper import GeneratorConfig, make_config
from ..scoring.metrics import compute_metrics
from ..scoring.oracle import oracle_curve, oracle_utility
from .rewards import closing_reward, parse_reward, terminal_reward
from ..episodes.sources import EpisodeList, GeneratedEpisodes
from ..core.store import ByteMemoryStore, Reason
from .stream_table import KIND_ENDPOINT, KIND_OTHER, ObservationShapes, StreamTable, compare_versions
from ..core.tracks import PRIVILEGED, UNPRIVILEGED, check_track
from ..core.types import Episode, MemoryAction, MemoryItem, Step

STEP_FEATURES: tuple[str, ...] = (
    "cost_budget",
    "cost_remaining",
    "fits",
    "kind_endpoint",
    "kind_doc",
    "kind_guide",
    "kind_other",
    "family_in_memory",
    "api_in_memory",
    "identical_to_memory",
    "version_up",
    "version_down",
    "version_changed",
    "params_added",
    "params_removed",
    "required_added",
    "required_removed",
    "deprecated",
    "newly_deprecated",
    "undeprecated",
    "fields_changed",
    "merge_ok",
    "merge_cost",
    "reference_age",
    "family_items",
    "family_seen",
    "changed_since_seen",
    "version_up_since_seen",
    "version_down_since_seen",
    "params_added_since_seen",
    "params_removed_since_seen",
    "required_added_since_seen",
    "required_removed_since_seen",
    "newly_deprecated_since_seen",
    "undeprecated_since_seen",
    "removed",
    "newly_removed_since_seen",
    "restored_since_seen",
    "returns_to_earlier",
)
# The step features after version_up_since_seen compare the step with the stream shown so far.
SEEN_FEATURES: tuple[str, ...] = STEP_FEATURES[STEP_FEATURES.index("family_seen") :]
MEMORY_FEATURES: tuple[str, ...] = (
    "remaining",
    "items",
    "hidden_items",
    "merge_items",
    "time",
    "expires_left",
    "reverted_expired",
    "fits_if_larger_expired",
)
# Slot rows: present, age, the item's fixed features (its priority last, privileged track
# only), then the features that depend on the current step.
SLOT_FEATURES: tuple[str, ...] = (
    "present",
    "age",
    "cost_budget",
    "is_merge",
    "kind_endpoint",
    "kind_doc",
    "kind_guide",
    "deprecated",
)
SLOT_CONTEXT_FEATURES: tuple[str, ...] = ("orphan", "same_family", "same_api", "superseded", "merge_ok", "reverted")
PRIORITY_FEATURE = "priority"

SLOT_ORDERS = ("relevance", "oldest")
EPISODE_ORDERS = ("random", "cycle")
OBSERVATION_MODES = ("box", "dict")
RESET_OPTIONS = ("episode_index", "budget_bytes", "regime", "length", "episode")
DEFAULT_LENGTH = 200
DEFAULT_REGIME = "default"
_RANDOM_INDEX_RANGE = 2**31 - 1
# Env-level rejection reasons (the store's own are ``Reason`` values).
EMPTY_SLOT = "empty_slot"
EXPIRE_CAP = "expire_cap"
EPISODE_OVER = "episode_over"

_SKIP = MemoryAction("SKIP")
_ACCEPTED = Reason.ACCEPTED.value


class ResetNeeded(gym.error.ResetNeeded, RuntimeError):
    """A method that needs an episode was called before the first ``reset()``.

    Gymnasium's own error (what ``gym.make``'s order-enforcing wrapper raises for ``step``),
    and a ``RuntimeError`` like the env's other call-order errors.
    """


class WritePolicyBenchEnv(gym.Env):
    """
    ## Description

    A stream of API/documentation snapshots drifts over ``T`` timesteps (one benchmark
    episode). At every timestep the agent decides what to do with the current snapshot
    under a byte budget: SKIP it, WRITE it to memory, MERGE it as a delta into a stored item
    of the same endpoint, or first EXPIRE stored items to make room. At the end the memory
    is scored with the benchmark's metrics (spec §4, paper §6) against hidden labels: which
    steps were critical (drift events) and how much each step is worth. Every action goes
    through the core ``ByteMemoryStore``, so the environment and the offline evaluator
    apply the same rules and compute the same metrics.

    ## Action Space

    ``Discrete(2 + 2K)`` where ``K`` is the number of memory slots shown (``slots``):

    | Action        | Meaning                                                        | Advances time |
    |---------------|----------------------------------------------------------------|---------------|
    | 0             | SKIP the current step                                          | yes           |
    | 1             | WRITE the current step                                         | yes           |
    | 2 .. K+1      | MERGE the current step into the item in slot ``a - 2``         | yes           |
    | K+2 .. 2K+1   | EXPIRE the item in slot ``a - K - 2``                          | no            |

    EXPIRE frees room before the decision on the current step, as the spec's policies do;
    at most ``max_expires_per_step`` EXPIREs per timestep (unlimited by default).
    ``action_masks()`` returns exactly the actions the store would accept (SKIP always);
    the mask is also ``info["action_mask"]`` and, in ``dict`` mode, part of the observation.
    An action the store rejects never raises: it is reported in ``info`` (``accepted``,
    ``reason``), costs ``invalid_action_penalty`` and is treated as SKIP.

    ## Observation Space

    ``Box(0, 1, (n,), float32)`` (``observation_mode="box"``): the current-step features,
    then the memory features, then ``K`` rows of slot features. With
    ``observation_mode="dict"``: ``{"step", "memory", "slots", "action_mask"}`` where
    ``slots`` holds the K slot rows flattened row-major (``reshape(K, -1)`` recovers them;
    flat, as SB3's ``MultiInputPolicy`` expects) and ``action_mask`` is ``MultiBinary(2 + 2K)``.
    ``n = 39 + 8 + 14 K`` on the unprivileged track and ``40 + 8 + 15 K`` on the privileged
    one (which adds ``priority``); 159 at ``K = 8``.
    Everything is computed from what a policy may see (the step's observation and visible
    metadata, and memory); labels never enter. Fractions are clipped to [0, 1].

    The step features from ``family_seen`` on compare with the stream the agent was shown, not
    with memory: a policy that skipped the previous version of an endpoint can still see how
    this one changed, as a scripted policy that remembers what it was shown can. An
    endpoint's *contract* is its parameters, its required parameters, and its deprecated and
    removed flags.

    The *reference* item is the newest stored item of the current step's endpoint family
    (the endpoint with version segments removed from ``api``, e.g. ``api.v2.endpoint_5``
    and ``api.v3.endpoint_5``; documentation sections by title; migration guides by the
    old endpoint). Comparisons with a missing reference are 0.

    | Current step        | Value                                                                         |
    |---------------------|-------------------------------------------------------------------------------|
    | cost_budget         | WRITE cost / budget                                                           |
    | cost_remaining      | WRITE cost / bytes remaining (1 if it does not fit)                           |
    | fits                | 1 if WRITE would be accepted                                                  |
    | kind_endpoint       | 1 for an endpoint snapshot (observation has ``api``)                          |
    | kind_doc            | 1 for a documentation section (``section``)                                   |
    | kind_guide          | 1 for a migration guide (``old_api`` / ``new_api``)                           |
    | kind_other          | 1 for anything else                                                           |
    | family_in_memory    | 1 if a reference item exists                                                  |
    | api_in_memory       | 1 if a WRITE item with exactly this ``api`` is stored (a MERGE target)        |
    | identical_to_memory | 1 if the observation equals the reference item's                              |
    | version_up          | 1 if ``version`` (else ``last_updated``) is later than the reference's        |
    | version_down        | 1 if it is earlier (a revert)                                                 |
    | version_changed     | 1 if it differs at all                                                        |
    | params_added        | parameters not in the reference / parameters of the step                      |
    | params_removed      | reference parameters missing now / parameters of the reference                |
    | required_added      | as params_added, for the ``required`` list                                    |
    | required_removed    | as params_removed, for the ``required`` list                                  |
    | deprecated          | 1 if the step says ``deprecated: true``                                       |
    | newly_deprecated    | 1 if deprecated now and not in the reference                                  |
    | undeprecated        | 1 if the reference was deprecated and the step is not                         |
    | fields_changed      | fraction of the step's fields whose value differs from the reference's        |
    | merge_ok            | 1 if MERGE into the newest WRITE item of this ``api`` would be accepted       |
    | merge_cost          | cost of that MERGE / WRITE cost (0 when there is nothing to merge into)       |
    | reference_age       | (t - reference t) / T                                                         |
    | family_items        | stored items of the family / K (clipped)                                      |
    | family_seen         | 1 if a step of this family was shown before (stored or not)                   |
    | changed_since_seen  | 1 if the observation differs from the last shown step of its family           |
    | version_up_since_seen | 1 if its version is later than that last shown step's                      |
    | version_down_since_seen | 1 if it is earlier                                                       |
    | params_added_since_seen | as params_added, against the last shown step of the family              |
    | params_removed_since_seen | as params_removed, against that step                                  |
    | required_added_since_seen | as required_added, against that step                                  |
    | required_removed_since_seen | as required_removed, against that step                              |
    | newly_deprecated_since_seen | 1 if deprecated now and not in that step                            |
    | undeprecated_since_seen | 1 if that step was deprecated and this one is not                       |
    | removed             | 1 if the step shows ``removed: true`` (an endpoint removed from the API)      |
    | newly_removed_since_seen | 1 if removed now and not in that step                                  |
    | restored_since_seen | 1 if that step showed it removed and this one does not                        |
    | returns_to_earlier  | 1 if the contract differs from that step's but equals one the family showed before it (a revert) |
    | priority            | privileged track only: the ``priority`` hint                                  |

    | Memory              | Value                                                                         |
    |---------------------|-------------------------------------------------------------------------------|
    | remaining           | bytes remaining / budget                                                      |
    | items               | n / (n + K) for n stored items                                                |
    | hidden_items        | fraction of stored items not shown in a slot                                  |
    | merge_items         | fraction of stored items that are MERGE deltas                                |
    | time                | t / T                                                                         |
    | expires_left        | EXPIREs still allowed this timestep / cap (1 when uncapped)                   |
    | reverted_expired    | 1 if an item flagged ``reverted`` was expired at this timestep                |
    | fits_if_larger_expired | 1 if WRITE fits, or would fit once every stored item larger than the step is expired |

    | Slot (K rows)       | Value                                                                         |
    |---------------------|-------------------------------------------------------------------------------|
    | present             | 1 if the slot holds an item (every feature of an empty slot is 0)            |
    | age                 | (t - item t) / T                                                              |
    | cost_budget         | the item's bytes / budget                                                     |
    | is_merge            | 1 for a MERGE delta, 0 for a base (WRITE) item                                |
    | kind_endpoint       | as for the current step                                                       |
    | kind_doc            | as for the current step                                                       |
    | kind_guide          | as for the current step                                                       |
    | deprecated          | 1 if the stored step said ``deprecated: true``                                |
    | priority            | privileged track only: the stored step's ``priority``                         |
    | orphan              | 1 for a MERGE delta whose base was expired (it no longer counts as retained)  |
    | same_family         | 1 if of the current step's family                                             |
    | same_api            | 1 if its ``api`` equals the current step's exactly                            |
    | superseded          | 1 if a newer item of its family is stored                                     |
    | merge_ok            | 1 if MERGE of the current step into this slot would be accepted               |
    | reverted            | 1 if the current step shows the contract its family had before this item was shown (the item's change was undone; for an item that was its family's first sighting and showed it removed: the endpoint is back) |

    Which items the slots show (``slot_order``): ``"relevance"`` (default) shows the largest
    item in slot 0 (the oldest of the largest), then the items of the current step's family
    newest first, then the other items oldest first; ``"oldest"`` shows the K oldest items.
    Either way every stored item can be reached: an item not shown becomes visible once the
    shown items older than it (or of the current family, or larger) are expired.

    ## Rewards

    ``reward="f1"`` (default) pays the episode's F1 on the last step and 0 before.
    ``"utility"`` pays policy utility / U*(B), ``"neg_regret"`` pays -regret / U*(B), and a
    weighted mix (``{"f1": 0.5, "utility": 0.5}``) pays their weighted sum. With
    ``dense_reward=True`` the same metric is paid as per-step potential differences whose
    sum equals the terminal value exactly (see ``wpb_gym.envs.rewards``). A rejected action
    costs ``invalid_action_penalty`` (default 0).

    ## Starting State

    Memory is empty and the first step of the episode is current. The episode is chosen at
    reset: drawn from the source with the env's RNG (``episode_order="random"``) or taken
    in order (``"cycle"``); ``options`` can choose it.

    ## Episode End

    ``terminated`` is True after the decision on the last step; ``truncated`` is always
    False (wrap the env in ``TimeLimit`` if you want one). The final ``info`` holds
    ``"metrics"``, the full metrics dict the offline scorer computes for the same
    decisions, and each metric under its own key too (for ``Monitor(info_keywords=...)``).
    EXPIREs do not advance time, so an episode takes between T and T + (items written)
    env steps.

    ## Arguments

    ```python
    gym.make(
        "WritePolicyBench-v0",
        regime=None,              # "default" for generated episodes; filters file episodes
        budget_bytes=10240,
        length=None,              # 200 for generated episodes; filters file episodes
        track="unprivileged",     # or "privileged" (adds priority)
        episodes=None,            # None: generated; a frozen set, directory or JSONL path; or a list of Episodes
        episode_seed=0,           # the generated set's seed (episode i = `wpb freeze --seed S` episode i)
        episode_order="random",   # or "cycle"
        slots=8,                  # K
        slot_order="relevance",   # or "oldest"
        reward="f1",              # "utility", "neg_regret", or a weighted mix
        dense_reward=False,
        invalid_action_penalty=0.0,
        observation_mode="box",   # or "dict"
        max_expires_per_step=None,
        render_mode=None,         # "ansi" or "rgb_array"
        **generator_options,      # any GeneratorConfig field, e.g. drift_prob=0.2
    )
    ```

    ``reset(seed=..., options=...)``: ``options`` may hold ``episode_index`` (which episode
    of the source), ``budget_bytes``, ``regime`` and ``length`` (for this episode only, for
    curricula and episode-by-episode evaluation), or ``episode`` (an ``Episode`` to play).
    The same seed gives the same episode and the same observations. In ``"cycle"`` order a
    seeded reset restarts the cycle at episode 0.

    ## Vectorized

    Plain Python and picklable: use ``gym.make_vec(..., vectorization_mode="sync"|"async")``
    or SB3's ``make_vec_env`` with ``DummyVecEnv`` or ``SubprocVecEnv``; sb3-contrib's
    ``MaskablePPO`` finds ``action_masks`` through the wrappers.

    ## Version History

    * v0: initial version (spec v0 and the paper's regimes). The discriminative regimes
      (``breaking``, ``reverts``, ``noisy_priority``, ``mixed_sizes``, ``contract_mix``) and
      the long-stream ids were added as new episode sources; the observation and action
      spaces are unchanged, so v0 episodes of the paper's regimes are not affected.
      Real-drift episodes (``wpb episodes from-events``, regimes ``real:SOURCE``) load through
      ``episodes=``; the base id ``WritePolicyBench-v0`` names no regime, so it takes every
      episode of such a file (it still generates ``default`` episodes without one).
      The contract regimes' snapshots later stopped betraying their history (random sorted
      parameter names, first versions 1–5, some endpoints deprecated from the start), which
      changed their episodes: frozen sets of them made before differ.
      Later the observation gained what a scripted policy may know from the stream it was
      shown (the ``*_since_seen`` contract comparisons, ``removed``, ``returns_to_earlier``),
      ``reverted_expired`` and ``fits_if_larger_expired`` in memory, the slot feature
      ``reverted``, and slot 0 of the ``"relevance"`` layout shows the largest item, so that
      ``breaking_detector``'s rule can be read from the observation alone
      (``agents.feature_rules.BreakingRule``). Models trained on the earlier layout do not load.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
        regime: str | None = None,
        budget_bytes: int = 10240,
        length: int | None = None,
        track: str = UNPRIVILEGED,
        episodes: str | os.PathLike[str] | Sequence[Episode] | None = None,
        episode_seed: int = 0,
        episode_order: str = "random",
        slots: int = 8,
        slot_order: str = "relevance",
        reward: str | Mapping[str, float] = "f1",
        dense_reward: bool = False,
        invalid_action_penalty: float = 0.0,
        observation_mode: str = "box",
        max_expires_per_step: int | None = None,
        render_mode: str | None = None,
        **generator_options: Any,
    ) -> None:
        self.track = check_track(track)
        self.budget_bytes = require_int(budget_bytes, "budget_bytes")
        self.K = require_int(slots, "slots", 1)
        _check_choice("slot_order", slot_order, SLOT_ORDERS)
        _check_choice("episode_order", episode_order, EPISODE_ORDERS)
        _check_choice("observation_mode", observation_mode, OBSERVATION_MODES)
        self.slot_order = slot_order
        self.episode_order = episode_order
        self.observation_mode = observation_mode
        self.reward_weights = parse_reward(reward)
        self.dense_reward = bool(dense_reward)
        self.invalid_action_penalty = float(invalid_action_penalty)
        if max_expires_per_step is not None and (
            isinstance(max_expires_per_step, bool)
            or not isinstance(max_expires_per_step, int)
            or max_expires_per_step < 0
        ):
            raise ValueError(f"max_expires_per_step must be None or a non-negative int, got {max_expires_per_step!r}")
        self.max_expires_per_step = max_expires_per_step
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.render_mode = render_mode

        # Episode source.
        if length is not None:
            length = require_int(length, "length", 1)
        self.regime = regime
        self.length = length
        self.generator_options = dict(generator_options)
        if episodes is None:
            self.episode_seed = require_int(episode_seed, "episode_seed")
            base = make_config(
                DEFAULT_REGIME if regime is None else regime,
                length=DEFAULT_LENGTH if length is None else length,
                **self.generator_options,
            )
            self._configs: dict[tuple[str, int], GeneratorConfig] = {(base.regime, base.length): base}
            self._source: GeneratedEpisodes | EpisodeList = GeneratedEpisodes(base, self.episode_seed)
        else:
            if self.generator_options:
                raise ValueError(
                    f"generator options {sorted(self.generator_options)} apply to generated episodes only, "
                    "not to episodes read from files"
                )
            self.episode_seed = episode_seed
            source = (
                EpisodeList(tuple(episodes), "<episodes>")
                if _is_episode_sequence(episodes)
                else EpisodeList.from_path(episodes)
            )
            self._all_episodes = source
            self._source = source.select(regime=regime, length=length)

        self.privileged = self.track == PRIVILEGED
        extra = 1 if self.privileged else 0
        self.step_features = STEP_FEATURES + ((PRIORITY_FEATURE,) if self.privileged else ())
        self.slot_features = SLOT_FEATURES + ((PRIORITY_FEATURE,) if self.privileged else ()) + SLOT_CONTEXT_FEATURES
        self._n_step = len(STEP_FEATURES) + extra
        self._n_mem = len(MEMORY_FEATURES)
        self._n_slot = len(SLOT_FEATURES) + extra + len(SLOT_CONTEXT_FEATURES)
        self.n_actions = 2 + 2 * self.K
        # The observation is packed as float32: the step and memory features (the "head"),
        # then the slot rows; each stored item's row (after present and age) is packed when
        # it is stored and again only when its orphan or superseded flag changes. Columns
        # below index that row.
        n_static = len(SLOT_FEATURES) + extra
        (
            self._col_orphan,
            self._col_same_family,
            self._col_same_api,
            self._col_superseded,
            self._col_merge_ok,
            self._col_reverted,
        ) = (n_static - 2 + SLOT_CONTEXT_FEATURES.index(name) for name in SLOT_CONTEXT_FEATURES)
        self._step_format = f"={self._n_step}f"  # format strings, not Structs: Structs do not pickle
        self._tail_format = f"={self._n_slot - 2}f"
        self._pad = [bytes(4 * self._n_slot * (self.K - n)) for n in range(self.K + 1)]
        # Packed per-step rows shared by the episodes of this environment (see _prepare_step_features).
        self._middle_format = f"={len(STEP_FEATURES) - 3}f"
        self._middle_rows: dict[tuple[int, float, tuple[float, ...]], bytes] = {}
        self._write_rows: dict[tuple[Any, ...], tuple[tuple[float, ...], bytes]] = {}  # see _record_stored
        self._slot_heads_by_length: dict[int, list[bytes]] = {}
        self._final_step_row = bytes(4 * self._n_step)  # every step feature is 0 once the episode is over
        # The mask without MERGE bits, by [WRITE fits][EXPIREs allowed]: SKIP, WRITE, then
        # EXPIRE for the first n slots.
        self._mask_templates = [
            [bytes([1, fits, *[0] * self.K, *[1] * n, *[0] * (self.K - n)]) for n in range(self.K + 1)]
            for fits in (0, 1)
        ]
        self._mask_arrays: dict[bytes, np.ndarray] = {}  # few masks recur: each is built once
        self._shapes = ObservationShapes()  # observation descriptions shared by the episodes
        self.action_space = spaces.Discrete(self.n_actions)
        if observation_mode == "box":
            n = self._n_step + self._n_mem + self.K * self._n_slot
            self.observation_space = spaces.Box(0.0, 1.0, shape=(n,), dtype=np.float32)
        else:
            self.observation_space = spaces.Dict(
                {
                    "step": spaces.Box(0.0, 1.0, shape=(self._n_step,), dtype=np.float32),
                    "memory": spaces.Box(0.0, 1.0, shape=(self._n_mem,), dtype=np.float32),
                    # Flat (row-major K x slot features), as SB3's MultiInputPolicy expects.
                    "slots": spaces.Box(0.0, 1.0, shape=(self.K * self._n_slot,), dtype=np.float32),
                    "action_mask": spaces.MultiBinary(self.n_actions),
                }
            )
        self._cycle_position = 0
        self.reset_count = 0  # resets so far: tells adapters that a new episode began
        self._episode: Episode | None = None
        self._history: dict[int, list[Any]] | None = None  # for render_mode="rgb_array"
        self._bytes_history: list[int] = []
        self.episode_index: int | None = None
        self._done = True

    # ------------------------------------------------------------------ public reading
    @property
    def episode(self) -> Episode:
        """The current episode (with its hidden labels: for scoring and tooling, not for policies)."""
        self._require_episode("reading env.episode")
        return self._episode

    @property
    def store(self) -> ByteMemoryStore:
        """The memory store of the current episode (apply actions through ``step`` only)."""
        self._require_episode("reading env.store")
        return self._store

    @property
    def t(self) -> int:
        """The current timestep (T once the episode is over)."""
        self._require_episode("reading env.t")
        return self._t

    @property
    def current_step(self) -> Step | None:
        """The current step as a policy on this track sees it (None once the episode is over)."""
        self._require_episode("reading env.current_step")
        return self._table.step(self._t) if self._t < self._T else None

    @property
    def slot_timesteps(self) -> tuple[int | None, ...]:
        """The timestep of the item each slot shows (None for an empty slot)."""
        self._require_episode("reading env.slot_timesteps")
        return tuple(self._slots) + (None,) * (self.K - len(self._slots))

    def action_masks(self) -> np.ndarray:
        """The valid actions now (bool, length 2 + 2K): exactly those the store would accept."""
        if self._episode is None:
            self._require_episode("action_masks()")
        return self._mask_array()

    def _require_episode(self, what: str) -> None:
        if self._episode is None:
            raise ResetNeeded(f"call reset() before {what}: there is no episode yet")

    def decode_action(self, action: int) -> MemoryAction:
        """The ``MemoryAction`` that env action ``action`` stands for now (SKIP for an empty slot)."""
        a = self._check_action(action)
        if a == 0 or self._t >= self._T:
            return _SKIP
        if a == 1:
            return MemoryAction("WRITE", step=self._table.step(self._t))
        k = (a - 2) % self.K
        if k >= len(self._slots):
            return _SKIP
        if a < 2 + self.K:
            return MemoryAction("MERGE", step=self._table.step(self._t), target_t=self._slots[k])
        return MemoryAction("EXPIRE", target_t=self._slots[k])

    def expose_item(self, t: int) -> int:
        """Show stored item ``t`` in a slot and return the slot index.

        For adapters that drive the environment with ``MemoryAction``s (scripted agents): an
        item the layout does not show takes the last slot until the next step. The mask, the
        slots and ``action_masks()`` follow; the observation already returned does not.
        """
        if self._done:
            raise RuntimeError("the episode is over: call reset() first")
        if t not in self._rows:
            raise ValueError(f"memory holds no item at timestep {t}")
        if t in self._slots:
            return self._slots.index(t)
        slots = self._slots[: self.K - 1] + [t]  # the layout is full: every item would be shown otherwise
        self._update_view(slots)
        return self.K - 1

    def encode_action(self, action: MemoryAction) -> int | None:
        """The env action for ``action`` in the current slot layout (None if no slot shows its target)."""
        if action.action == "SKIP":
            return 0
        if action.action == "WRITE":
            return 1
        try:
            k = self._slots.index(action.target_t)
        except ValueError:
            return None
        return 2 + k if action.action == "MERGE" else 2 + self.K + k

    # ------------------------------------------------------------------ episode start
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ValueError(f"reset options {unknown} are not known; expected some of {RESET_OPTIONS}")
        if seed is not None:
            self._cycle_position = 0
        budget = require_int(options.get("budget_bytes", self.budget_bytes), "options['budget_bytes']")
        episode = options.get("episode")
        if episode is not None:
            if not isinstance(episode, Episode):
                raise ValueError(f"options['episode'] must be an Episode, got {type(episode).__name__}")
            index = None
        else:
            length = options.get("length")
            if length is not None:
                length = require_int(length, "options['length']", 1)
            regime = options.get("regime")
            if regime is not None and not isinstance(regime, str):
                raise ValueError(f"options['regime'] must be a regime name, got {regime!r}")
            source = self._source_for(regime, length)
            index = options.get("episode_index")
            if index is None:
                if self.episode_order == "cycle":
                    index = self._cycle_position
                    self._cycle_position += 1
                    if source.size is not None:
                        index %= source.size
                else:
                    high = source.size if source.size is not None else _RANDOM_INDEX_RANGE
                    index = int(self.np_random.integers(high))
            else:
                index = require_int(index, "options['episode_index']")
            episode = source.episode(index)
        if len(episode) == 0:
            raise ValueError("the episode has no steps")
        self._start(episode, budget)
        self.reset_count += 1
        self.episode_index = index
        return self._observation(), self._info(True, _ACCEPTED)

    def _source_for(self, regime: str | None, length: int | None) -> GeneratedEpisodes | EpisodeList:
        if regime is None and length is None:
            return self._source
        if isinstance(self._source, GeneratedEpisodes):
            base = self._source.config
            key = (base.regime if regime is None else regime, base.length if length is None else length)
            config = self._configs.get(key)
            if config is None:
                config = make_config(key[0], length=key[1], **self.generator_options)
                self._configs[key] = config
            return GeneratedEpisodes(config, self.episode_seed)
        return self._all_episodes.select(
            regime=self.regime if regime is None else regime, length=self.length if length is None else length
        )

    def _start(self, episode: Episode, budget: int) -> None:
        self._episode = episode
        self._budget = budget
        self._table = StreamTable(episode, self.track, self._shapes)
        self._T = len(episode)
        self._inv_T = 1.0 / self._T
        self._prepare_step_features()
        self._store = ByteMemoryStore(budget)
        self._used = 0
        self._t = 0
        self._done = False
        self._expires_this_step = 0
        self._reverted_expired = False
        self._family_items: dict[int, list[int]] = {}
        self._family_live: dict[int, int] = {}
        self._family_newest: dict[int, int] = {}  # family -> newest stored item (absent: none)
        self._merge_parent: dict[int, int] = {}  # stored MERGE item -> its base
        self._api_bases: dict[int, list[int]] = {}
        self._api_live: dict[int, int] = {}
        self._children: dict[int, list[int]] = {}
        self._row_values: dict[int, list[float]] = {}  # stored item -> its slot row
        self._rows: dict[int, bytes] = {}  # the same rows, packed as float32
        self._item_bytes: dict[int, int] = {}  # stored item -> its bytes
        self._by_size: list[tuple[int, int]] = []  # heap of (-bytes, t); expired items leave it lazily
        self._merge_costs: dict[tuple[int, int], int | None] = {}  # (content, content) -> MERGE bytes
        self._comparisons: dict[tuple[int, int], tuple[float, ...]] = {}  # (content, content) -> see _compare
        self._merges = 0
        self._oracle_value: float | None = None
        self._oracle_prefix: np.ndarray | None = None
        # Hidden labels, used for rewards only.
        self._critical = [False] * self._T
        for t in episode.critical_steps:
            if 0 <= t < self._T:
                self._critical[t] = True
        self._utilities = episode.utilities.tolist()
        self._critical_before = 0  # critical steps among those already decided
        self._kept = 0
        self._kept_critical = 0
        self._kept_utility = 0.0
        self._potential = 0.0
        self._paid = 0.0
        self._penalties = 0.0
        # For the rgb_array picture: item t -> [expired at or None, is_merge], bytes after each step.
        self._history: dict[int, list[Any]] | None = {} if self.render_mode == "rgb_array" else None
        self._bytes_history: list[int] = []
        self._last_action: tuple[int, str] | None = None
        if self.dense_reward and ("utility" in self.reward_weights or "neg_regret" in self.reward_weights):
            self._compute_oracle(prefix="neg_regret" in self.reward_weights)
        self._update_view()

    def _prepare_step_features(self) -> None:
        """Per timestep, what of the observation does not depend on memory, computed once per
        episode: ``_cost_budget``, ``_seen`` (the three comparisons with the last shown step of
        the family) and ``_step_middle`` (the step features after the first three, packed, as
        they are when memory holds nothing of the step's family); and ``_slot_heads``, a
        slot's present and age features, packed, per age in steps."""
        tab = self._table
        budget = self._budget
        # min(1, cost / budget), without a call per step
        self._cost_budget = [c / budget if c < budget else 1.0 for c in tab.costs] if budget else [1.0] * self._T
        # An endpoint's contract as a policy compares it: params, required, deprecated, removed.
        self._contracts = [
            None if p is None else (p, r or 0, d, x)
            for p, r, d, x in zip(tab.params, tab.required, tab.deprecated, tab.removed, strict=True)
        ]
        self._seen = seen = self._seen_features()
        # Without priority the middle row takes few values (kind, deprecated, seen): each is
        # packed once per environment.
        middles = self._middle_rows
        if len(middles) > _ROW_CACHE_LIMIT:
            middles.clear()
        rows = list(map(middles.get, zip(tab.kinds, tab.deprecated, seen, strict=True)))
        if None in rows:  # a combination this environment has not packed yet
            for t, key in enumerate(zip(tab.kinds, tab.deprecated, seen, strict=True)):
                row = middles.get(key)
                if row is None:
                    kind, deprecated, seen_t = key
                    values = (*_KIND_FLAGS[kind], *_no_reference(deprecated), *seen_t)
                    row = middles[key] = struct.pack(self._middle_format, *values)
                rows[t] = row
        if self.privileged:
            rows = [row + _pack_f(p) for row, p in zip(rows, tab.priorities, strict=True)]
        self._step_middle = rows
        self._slot_heads = self._slot_heads_for(self._T)

    def _seen_features(self) -> list[tuple[float, ...]]:
        """The SEEN_FEATURES of every step: comparisons with the last shown step of its family
        (``returns_to_earlier``: with the contracts its family showed before that one)."""
        tab = self._table
        contents, versions, contracts = tab.contents, tab.versions, self._contracts
        params, required, deprecated, removed = tab.params, tab.required, tab.deprecated, tab.removed
        families = tab.families
        earlier: dict[int, set[tuple[Any, ...]]] = {}  # family -> contracts shown before its last step
        seen = []
        for t, previous in enumerate(tab.previous_shown):
            gone = removed[t]
            if previous < 0:
                seen.append(_NOT_SEEN[gone])
                continue
            now, before = contracts[t], contracts[previous]
            shown_before = earlier.setdefault(families[t], set())
            if before is not None:
                shown_before.add(before)
            if contents[t] > 0 and contents[previous] > 0:  # plain JSON: compare the texts' ids
                if contents[t] == contents[previous]:  # the same text, so the same version and contract
                    seen.append(_SEEN_UNCHANGED[gone])
                    continue
                changed = True
            else:
                changed = tab.observation(t) != tab.observation(previous)
            cmp = compare_versions(versions[t], versions[previous])
            dep_t, dep_p, gone_p = deprecated[t], deprecated[previous], removed[previous]
            seen.append(
                (
                    1.0,
                    float(changed),
                    1.0 if cmp == 1 else 0.0,
                    1.0 if cmp == -1 else 0.0,
                    _added(params[t], params[previous]),
                    _added(params[previous], params[t]),
                    _added(required[t], required[previous]),
                    _added(required[previous], required[t]),
                    1.0 if dep_t > dep_p else 0.0,
                    1.0 if dep_p > dep_t else 0.0,
                    gone,
                    1.0 if gone > gone_p else 0.0,
                    1.0 if gone_p > gone else 0.0,
                    1.0 if now is not None and now != before and now in shown_before else 0.0,
                )
            )
        return seen

    def _slot_heads_for(self, T: int) -> list[bytes]:
        """A slot's present and age features, packed, for every age 0..T in steps (kept per T)."""
        heads = self._slot_heads_by_length.get(T)
        if heads is None:
            if len(self._slot_heads_by_length) >= _LENGTH_CACHE_LIMIT:
                self._slot_heads_by_length.clear()
            inv_T = 1.0 / T
            heads = self._slot_heads_by_length[T] = [_pack_slot_head(1.0, age * inv_T) for age in range(T + 1)]
        return heads

    # ------------------------------------------------------------------ stepping
    def _check_action(self, action: Any) -> int:
        if type(action) is int and 0 <= action < self.n_actions:
            return action
        try:
            a = int(action)
        except (TypeError, ValueError):
            raise ValueError(f"action must be an int in [0, {self.n_actions}), got {action!r}") from None
        if a != action or not 0 <= a < self.n_actions:
            raise ValueError(f"action must be an int in [0, {self.n_actions}), got {action!r}")
        return a

    def step(self, action: Any):
        if self._done:
            self._require_episode("step()")
            raise RuntimeError("the episode is over: call reset() before step()")
        a = action if type(action) is int and 0 <= action < self.n_actions else self._check_action(action)
        t = self._t
        store = self._store
        accepted = self._mask[a] == 1
        penalty = 0.0
        expired = False
        # The mask is the store's verdict (tested); the store still judges every action, so a
        # disagreement fails loudly instead of corrupting the episode.
        if not accepted:
            reason = self._rejection_reason(a)
            penalty = self.invalid_action_penalty
            decision = store.skip(t)
        elif a == 0:
            reason = _ACCEPTED
            decision = store.skip(t)
        elif a == 1:
            reason = _ACCEPTED
            decision = store.write(self._table.step(t), t)
            if decision.accepted:
                self._record_stored(t, None, decision.byte_delta)
        elif a < 2 + self.K:
            reason = _ACCEPTED
            target = self._slots[a - 2]
            decision = store.execute(MemoryAction("MERGE", step=self._table.step(t), target_t=target), t)
            if decision.accepted:
                self._record_stored(t, target, decision.byte_delta)
        else:
            reason = _ACCEPTED
            target = self._slots[a - 2 - self.K]
            item = store.get(target)
            decision = store.expire(target, t)
            if decision.accepted:
                self._record_expired(item, t)
                tab = self._table
                if tab.kinds[target] == KIND_ENDPOINT and tab.families[target] == tab.families[t]:
                    self._reverted_expired = self._reverted_expired or self._reverted(target, t)
            expired = True
        if not decision.accepted:
            raise AssertionError(f"store rejected action {a} ({decision.reason}) that the mask allowed")
        self._used += decision.byte_delta  # the store's own change (0 for SKIP)
        self._last_action = (a, reason)
        if expired:
            self._expires_this_step += 1
        else:
            if self._critical[t]:
                self._critical_before += 1
            self._t = t + 1
            self._expires_this_step = 0
            self._reverted_expired = False
            if self._history is not None:
                self._bytes_history.append(store.bytes_used)
        terminated = self._t >= self._T
        reward = -penalty if penalty else 0.0  # not -0.0
        self._penalties += penalty
        if self.dense_reward and not terminated:
            potential = self._current_potential()
            reward += potential - self._potential
            self._potential = potential
        self._update_view()
        info = self._info(accepted, reason)
        if terminated:
            self._done = True
            metrics = self.episode_metrics().as_row()
            target = terminal_reward(self.reward_weights, metrics) - self._penalties
            reward = closing_reward(target, self._paid)
            info["metrics"] = metrics
            info.update(metrics)
        self._paid += reward
        return self._observation(), reward, terminated, False, info

    def _rejection_reason(self, a: int) -> str:
        if a == 0:  # pragma: no cover - SKIP is always valid
            return Reason.ACCEPTED.value
        if a >= 2:
            k = (a - 2) % self.K
            if k >= len(self._slots):
                return EMPTY_SLOT
            if a >= 2 + self.K and self.max_expires_per_step is not None:
                if self._expires_this_step >= self.max_expires_per_step:
                    return EXPIRE_CAP
        return self._store.check(self.decode_action(a), self._t).reason.value

    def _record_stored(self, t: int, merge_target: int | None, cost: int) -> None:
        """Bookkeeping after the store accepted WRITE (``merge_target`` None) or MERGE of step ``t``."""
        tab = self._table
        fam = tab.families[t]
        if fam >= 0:
            items = self._family_items.get(fam)
            if items is None:
                self._family_items[fam] = [t]
            else:
                items.append(t)
            self._family_live[fam] = self._family_live.get(fam, 0) + 1
            previous = self._family_newest.get(fam)
            if previous is not None:
                self._set_row_flag(previous, self._col_superseded, 1.0)
            self._family_newest[fam] = t
        # The item's slot row, kept packed: only age and the features that compare it with
        # the current step change from step to step; orphan and superseded are set later.
        if merge_target is None:
            api = tab.apis[t]
            if api >= 0:
                _append_to(self._api_bases, api, t)
                self._api_live[api] = self._api_live.get(api, 0) + 1
            # A WRITE costs the step's cost: its row depends on the step alone, and steps that
            # show one observation share it (packed once per environment).
            priority = tab.priorities[t] if self.privileged else None
            key = (self._cost_budget[t], tab.kinds[t], tab.deprecated[t], priority)
            row = self._write_rows.get(key)
            if row is None:
                if len(self._write_rows) >= _ROW_CACHE_LIMIT:
                    self._write_rows.clear()
                values = self._slot_row(key[0], False, t)
                row = self._write_rows[key] = (values, struct.pack(self._tail_format, *values))
            self._row_values[t] = list(row[0])
            self._rows[t] = row[1]
        else:
            _append_to(self._children, merge_target, t)
            self._merge_parent[t] = merge_target
            self._merges += 1
            budget = self._budget
            values = self._slot_row(min(1.0, cost / budget) if budget else 1.0, True, t)
            self._row_values[t] = list(values)
            self._rows[t] = struct.pack(self._tail_format, *values)
        self._item_bytes[t] = cost
        heapq.heappush(self._by_size, (-cost, t))
        # A new item is retained: a WRITE always, a MERGE because it joins a present base.
        self._kept += 1
        self._kept_critical += self._critical[t]
        self._kept_utility += self._utilities[t]
        if self._history is not None:
            self._history[t] = [None, merge_target is not None]

    def _slot_row(self, cost_budget: float, is_merge: bool, t: int) -> tuple[float, ...]:
        """The slot row after present and age of a new item holding step ``t``."""
        tab = self._table
        return (
            cost_budget,
            1.0 if is_merge else 0.0,
            *_SLOT_KIND_FLAGS[tab.kinds[t]],
            tab.deprecated[t],
            *((tab.priorities[t],) if self.privileged else ()),
            0.0,  # orphan
            0.0,  # same_family
            0.0,  # same_api
            0.0,  # superseded
            0.0,  # merge_ok
            0.0,  # reverted
        )

    def _set_row_flag(self, s: int, index: int, value: float) -> None:
        row = self._row_values[s]
        if row[index] != value:
            row[index] = value
            self._rows[s] = struct.pack(self._tail_format, *row)

    def _record_expired(self, item: MemoryItem, t: int) -> None:
        s = item.t
        tab = self._table
        store = self._store
        del self._rows[s]
        del self._row_values[s]
        del self._item_bytes[s]
        fam = tab.families[s]
        if fam >= 0:
            live = self._family_live[fam] - 1
            self._family_live[fam] = live
            stack = self._family_items[fam]
            if len(stack) > 2 * live + 16:  # drop expired entries now and then: lookups stay O(K)
                stack[:] = [x for x in stack if x in store]
            if self._family_newest[fam] == s:
                newest = self._newest_live(stack)
                if newest is None:
                    del self._family_newest[fam]
                else:
                    self._family_newest[fam] = newest
                    self._set_row_flag(newest, self._col_superseded, 0.0)
        if item.kind == "WRITE":
            lost = [s]
            api = tab.apis[s]
            if api >= 0:
                live = self._api_live[api] - 1
                self._api_live[api] = live
                bases = self._api_bases[api]
                if len(bases) > 2 * live + 16:
                    bases[:] = [x for x in bases if x in store]
            # The base's MERGE deltas stay in memory, orphaned, and no longer count as retained.
            for c in self._children.pop(s, ()):
                if c in store:
                    lost.append(c)
                    self._set_row_flag(c, self._col_orphan, 1.0)
        else:
            self._merges -= 1
            self._merge_parent.pop(s, None)
            lost = [s] if item.merge_parent_t in store else []
        for x in lost:
            self._kept -= 1
            self._kept_critical -= self._critical[x]
            self._kept_utility -= self._utilities[x]
        if self._history is not None:
            self._history[s][0] = t

    # ------------------------------------------------------------------ observation
    def _newest_live(self, stack: list[int] | None) -> int | None:
        if not stack:
            return None
        contains = self._store.__contains__
        while stack and not contains(stack[-1]):
            stack.pop()
        return stack[-1] if stack else None

    def _largest_item(self) -> int:
        """The stored item with the most bytes (the oldest of those), memory not being empty."""
        heap, rows = self._by_size, self._rows
        while heap[0][1] not in rows:
            heapq.heappop(heap)
        return heap[0][1]

    def _relevant_slots(self, fam: int) -> list[int]:
        """The ``"relevance"`` layout: the largest item, then the items of the current step's
        family ``fam`` (-1: none) newest first, then the other items oldest first."""
        K = self.K
        rows = self._rows
        largest = self._largest_item()
        shown: list[int] = [largest]
        if K == 1:
            return shown
        if fam >= 0 and self._family_live.get(fam, 0):
            for s in reversed(self._family_items[fam]):
                if s in rows and s != largest:
                    shown.append(s)
                    if len(shown) == K:
                        return shown
            families = self._table.families
            for s in rows:
                if families[s] != fam and s != largest:
                    shown.append(s)
                    if len(shown) == K:
                        break
            return shown
        for s in rows:
            if s != largest:
                shown.append(s)
                if len(shown) == K:
                    break
        return shown

    def _merge_cost(self, t: int, s: int) -> int | None:
        """Bytes a MERGE of step ``t`` into the base item ``s`` would charge; None if the store
        would refuse it whatever the budget (another endpoint, or nothing changed)."""
        tab = self._table
        ct, cs = tab.contents[t], tab.contents[s]
        if ct > 0 and cs > 0:  # plain JSON: equal text pairs give equal deltas
            if ct == cs:  # the same text: nothing changed, which MERGE refuses
                return None
            key = (ct, cs)
            cost = self._merge_costs.get(key, _UNKNOWN)
            if cost is _UNKNOWN:
                delta = canonical_delta(tab.observation(t), tab.observation(s))
                cost = self._merge_costs[key] = merge_cost(delta) if delta else None
            return cost
        decision = self._store.check(MemoryAction("MERGE", step=tab.step(t), target_t=s), t)
        return decision.byte_delta if decision.reason in _MERGE_COSTED else None

    def _update_view(self, slots: list[int] | None = None) -> None:
        """Compute the slots (unless given), the observation and the mask of the current state."""
        # Hot path: the env's own mirrors of the store (``_rows`` holds one entry per stored
        # item, in the store's order; ``_used`` its bytes) spare a method call per read.
        tab = self._table
        t = self._t
        rows = self._rows
        live = t < self._T
        fam = tab.families[t] if live else -1
        fam_live = self._family_live.get(fam, 0) if fam >= 0 else 0
        if slots is None:
            if not rows:
                slots = []
            elif self.slot_order == "relevance":
                slots = self._relevant_slots(fam)
            else:
                slots = list(islice(rows, self.K))
        self._slots = slots
        n_slots = len(slots)
        budget = self._budget
        remaining = budget - self._used
        cap = self.max_expires_per_step
        if cap is None:
            cap_left = 1.0 if live else 0.0
        else:
            cap_left = (cap - self._expires_this_step) / cap if live and cap else 0.0
        # The mask but for MERGE, from the templates: SKIP, WRITE if it fits, EXPIRE per shown item.
        expirable = n_slots if live and (cap is None or self._expires_this_step < cap) else 0
        cost = tab.costs[t] if live else 0
        fits = live and cost <= remaining
        mask = self._mask_templates[fits][expirable]
        n_items = len(rows)
        if fits:
            fits_if_larger_expired = 1.0
        elif live and cost <= budget:
            freed = sum(b for b in self._item_bytes.values() if b > cost)
            fits_if_larger_expired = 1.0 if cost <= remaining + freed else 0.0
        else:
            fits_if_larger_expired = 0.0
        memory = _pack_memory(
            remaining / budget if budget else 0.0,
            n_items / (n_items + self.K),
            (n_items - n_slots) / n_items if n_items else 0.0,
            self._merges / n_items if n_items else 0.0,
            t * self._inv_T if live else 1.0,
            cap_left,
            1.0 if self._reverted_expired else 0.0,
            fits_if_larger_expired,
        )
        if not live:
            parts = [self._final_step_row, memory]
        elif fam_live:
            parts = [self._step_row(t, fam, fam_live, remaining), memory]
        else:
            # The first three step features; the others are fixed per timestep when memory holds
            # nothing of the step's family, packed at reset (_step_middle).
            start = _pack_step_start(
                self._cost_budget[t],
                min(1.0, cost / remaining) if remaining > 0 else (0.0 if cost == 0 else 1.0),
                1.0 if cost <= remaining else 0.0,
            )
            parts = [start, self._step_middle[t], memory]

        # ---- slots: present and age (packed per age at reset), then the item's packed row.
        # The features that compare an item with the current step are packed afresh for the
        # items of the current family; no other item has them set.
        slot_heads = self._slot_heads
        age_now = t if live else self._T
        if fam_live:
            merge_slots = []
            for k, s in enumerate(slots):
                if tab.families[s] == fam:
                    tail, merge_ok = self._family_slot_row(t, s, remaining)
                    if merge_ok:
                        merge_slots.append(k)
                else:
                    tail = rows[s]
                parts.append(slot_heads[age_now - s])
                parts.append(tail)
            if merge_slots:
                mask = bytearray(mask)
                for k in merge_slots:
                    mask[2 + k] = 1
                mask = bytes(mask)
        else:
            for s in slots:
                parts.append(slot_heads[age_now - s])
                parts.append(rows[s])
        parts.append(self._pad[n_slots])
        self._obs_bytes = b"".join(parts)
        self._mask = mask

    def _step_row(self, t: int, fam: int, fam_live: int, remaining: int) -> bytes:
        """Every step feature, when memory holds items of the step's family ``fam``."""
        tab = self._table
        api = tab.apis[t]
        cost = tab.costs[t]
        ref = self._family_newest[fam]
        base = None
        if api >= 0:
            stack = self._api_bases.get(api)
            if stack:
                base = stack[-1] if stack[-1] in self._rows else self._newest_live(stack)
        merge_ok, merge_share = 0.0, 0.0
        if base is not None:
            delta_cost = self._merge_cost(t, base)
            if delta_cost is not None:
                merge_ok = 1.0 if delta_cost <= remaining else 0.0
                merge_share = min(1.0, delta_cost / cost) if cost else 1.0
        ct, cr = tab.contents[t], tab.contents[ref]
        if ct > 0 and cr > 0:  # plain JSON: the comparison depends on the two texts alone
            comparison = self._comparisons.get((ct, cr))
            if comparison is None:
                comparison = self._comparisons[ct, cr] = self._compare(t, ref)
        else:
            comparison = self._compare(t, ref)
        return struct.pack(
            self._step_format,
            self._cost_budget[t],
            min(1.0, cost / remaining) if remaining > 0 else (0.0 if cost == 0 else 1.0),
            1.0 if cost <= remaining else 0.0,
            *_KIND_FLAGS[tab.kinds[t]],
            1.0,
            1.0 if base is not None else 0.0,
            *comparison,
            merge_ok,
            merge_share,
            (t - ref) * self._inv_T,
            min(1.0, fam_live / self.K),
            *self._seen[t],
            *((tab.priorities[t],) if self.privileged else ()),
        )

    def _compare(self, t: int, ref: int) -> tuple[float, ...]:
        """The step features comparing step ``t`` with the stored item ``ref`` of its family,
        from identical to fields_changed."""
        tab = self._table
        identical = tab.contents[t] == tab.contents[ref]
        cmp = 0 if identical else compare_versions(tab.versions[t], tab.versions[ref])
        pa, pr = tab.params[t], tab.params[ref]
        ra, rr = tab.required[t], tab.required[ref]
        dep_t, dep_r = tab.deprecated[t], tab.deprecated[ref]
        return (
            1.0 if identical else 0.0,
            1.0 if cmp == 1 else 0.0,
            1.0 if cmp == -1 else 0.0,
            0.0 if identical or cmp == 0 else 1.0,
            _added(pa, pr),
            _added(pr, pa),
            _added(ra, rr),
            _added(rr, ra),
            dep_t,
            1.0 if dep_t > dep_r else 0.0,
            1.0 if dep_r > dep_t else 0.0,
            0.0 if identical else _fields_changed(tab.observation(t), tab.observation(ref)),
        )

    def _family_slot_row(self, t: int, s: int, remaining: int) -> tuple[bytes, bool]:
        """The packed row of stored item ``s`` of the current step's family, and whether MERGE
        of step ``t`` into it would be accepted."""
        tab = self._table
        row = self._row_values[s][:]
        row[self._col_same_family] = 1.0
        if tab.kinds[s] == KIND_ENDPOINT and self._reverted(s, t):
            row[self._col_reverted] = 1.0
        merge_ok = False
        if tab.apis[s] == tab.apis[t]:
            row[self._col_same_api] = 1.0
            if s not in self._merge_parent:  # a base item: a MERGE target
                delta_cost = self._merge_cost(t, s)
                if delta_cost is not None and delta_cost <= remaining:
                    row[self._col_merge_ok] = 1.0
                    merge_ok = True
        return struct.pack(self._tail_format, *row), merge_ok

    def _reverted(self, s: int, t: int) -> bool:
        """True if step ``t`` shows the contract its family had before stored item ``s`` was
        shown (for an item that was its family's first sighting: ``s`` showed the endpoint
        removed and ``t`` does not), and ``s`` itself showed another contract."""
        contracts = self._contracts
        now = contracts[t]
        if now is None or contracts[s] == now:
            return False
        before = self._table.previous_shown[s]
        if before >= 0:
            return contracts[before] == now
        return self._table.removed[s] > self._table.removed[t]

    def _mask_array(self) -> np.ndarray:
        """A new bool array holding the current mask."""
        cached = self._mask_arrays.get(self._mask)
        if cached is None:
            if len(self._mask_arrays) >= _MASK_CACHE_LIMIT:
                self._mask_arrays.clear()
            cached = self._mask_arrays[self._mask] = np.frombuffer(self._mask, np.bool_)
        return cached.copy()

    def _observation(self) -> np.ndarray | dict[str, np.ndarray]:
        # A copy of the private buffer: every call returns a new, writable array.
        buf = bytearray(self._obs_bytes)
        if self.observation_mode == "box":
            return np.frombuffer(buf, np.float32)  # dtype by position: measurably faster
        n_step, n_mem = self._n_step, self._n_mem
        return {
            "step": np.frombuffer(buf, dtype=np.float32, count=n_step),
            "memory": np.frombuffer(buf, dtype=np.float32, count=n_mem, offset=4 * n_step),
            "slots": np.frombuffer(buf, dtype=np.float32, offset=4 * (n_step + n_mem)),
            "action_mask": self._mask_array().view(np.int8),
        }

    def _info(self, accepted: bool, reason: str) -> dict[str, Any]:
        mask = self._mask_arrays.get(self._mask)  # _mask_array() without a call when cached
        return {
            "t": self._t,
            "accepted": accepted,
            "reason": reason,
            "bytes_used": self._used,
            "action_mask": self._mask_array() if mask is None else mask.copy(),
        }

    # ------------------------------------------------------------------ rewards and metrics
    def _compute_oracle(self, prefix: bool) -> None:
        if prefix:
            curve = oracle_curve(self._table.cost_array(), self.episode.utilities, [self._budget])
            self._oracle_value = curve.at(self._budget)
            self._oracle_prefix = curve.prefix[0]
        else:
            self._oracle_value = oracle_utility(self._table.cost_array(), self.episode.utilities, self._budget)

    def oracle_utility(self) -> float:
        """U*(B) of the current episode at its budget on this track (computed once per episode)."""
        if self._oracle_value is None:
            self._compute_oracle(prefix=False)
        return self._oracle_value

    def _current_potential(self) -> float:
        """The weighted metric as if the episode ended now, against the steps already decided."""
        total = 0.0
        for name, weight in self.reward_weights.items():
            if name == "f1":
                denominator = self._kept + self._critical_before
                value = 2.0 * self._kept_critical / denominator if denominator else 0.0
            else:
                oracle = self._oracle_value
                if not oracle:
                    value = 0.0
                elif name == "utility":
                    value = self._kept_utility / oracle
                else:
                    best_so_far = float(self._oracle_prefix[self._t - 1]) if self._t else 0.0
                    value = -max(0.0, best_so_far - self._kept_utility) / oracle
            total += weight * value
        return total

    def episode_metrics(self):
        """The benchmark metrics of the memory as it is now (the final ones once the episode is over)."""
        return compute_metrics(self.episode, self._store, oracle_utility=self.oracle_utility())

    # ------------------------------------------------------------------ rendering
    def step_details(self, t: int) -> tuple[int, int, float | None]:
        """Step ``t``'s kind code (``stream_table.KIND_*``), WRITE cost and, on the privileged
        track, its priority clipped to [0, 1] (None otherwise): what the observation encodes."""
        table = self._table
        return table.kinds[t], table.costs[t], None if table.priorities is None else table.priorities[t]

    @property
    def memory_history(self) -> dict[int, tuple[int | None, bool]]:
        """With ``render_mode="rgb_array"``: every stored timestep this episode, with when it
        was expired (None: still stored) and whether it was a MERGE (a copy; empty otherwise)."""
        return {s: (expired_at, is_merge) for s, (expired_at, is_merge) in (self._history or {}).items()}

    @property
    def bytes_history(self) -> tuple[int, ...]:
        """With ``render_mode="rgb_array"``: bytes used after each timestep (empty otherwise)."""
        return tuple(self._bytes_history)

    def last_action_text(self) -> str:
        """The last action and its outcome, for rendering."""
        if self._last_action is None:
            return "reset"
        a, reason = self._last_action
        return f"{self._action_name(a)} -> {'accepted' if reason == _ACCEPTED else 'rejected: ' + reason}"

    def _action_name(self, a: int) -> str:
        if a == 0:
            return "SKIP"
        if a == 1:
            return "WRITE"
        if a < 2 + self.K:
            return f"MERGE slot {a - 2}"
        return f"EXPIRE slot {a - 2 - self.K}"

    def render(self):
        if self.render_mode is None:
            gym.logger.warn("render() called without render_mode; pass render_mode='ansi' or 'rgb_array' to gym.make")
            return None
        if self._episode is None:
            raise RuntimeError("call reset() before render()")
        from . import render as _render

        if self.render_mode == "ansi":
            return _render.ansi(self)
        return _render.memory_picture(self)


# The 14 features comparing the current step with memory when memory holds nothing of its
# family: all 0 but "deprecated", keyed by it.
# The SEEN_FEATURES of a first sighting and of an unchanged repeat, by the "removed" flag.
_NOT_SEEN = {r: tuple(r if name == "removed" else 0.0 for name in SEEN_FEATURES) for r in (0.0, 1.0)}
_SEEN_UNCHANGED = {
    r: tuple(r if name == "removed" else float(name == "family_seen") for name in SEEN_FEATURES) for r in (0.0, 1.0)
}
_LENGTH_CACHE_LIMIT = 16
# The four kind flags, by kind (KIND_ENDPOINT, KIND_DOC, KIND_GUIDE, KIND_OTHER).
_KIND_FLAGS = tuple(tuple(1.0 if k == kind else 0.0 for k in range(KIND_OTHER + 1)) for kind in range(KIND_OTHER + 1))
# A slot row's kind flags (endpoint, doc, guide: "other" has none), by kind.
_SLOT_KIND_FLAGS = tuple(flags[:KIND_OTHER] for flags in _KIND_FLAGS)
_UNKNOWN = object()
# Module-level Structs (an env attribute holding one would not pickle).
_pack_step_start = struct.Struct("=3f").pack
_pack_slot_head = struct.Struct("=2f").pack
_pack_f = struct.Struct("=f").pack
_pack_memory = struct.Struct(f"={len(MEMORY_FEATURES)}f").pack
_MASK_CACHE_LIMIT = 4096
_ROW_CACHE_LIMIT = 4096
_MERGE_COSTED = (Reason.ACCEPTED, Reason.OVER_BUDGET)


def _append_to(lists: dict[int, list[int]], key: int, value: int) -> None:
    """``lists.setdefault(key, []).append(value)`` without building a list per call."""
    items = lists.get(key)
    if items is None:
        lists[key] = [value]
    else:
        items.append(value)


def _no_reference(deprecated: float) -> tuple[float, ...]:
    """The 14 features comparing the current step with memory, and the 4 after them, when
    memory holds nothing of its family: all 0 but "deprecated"."""
    return (0.0,) * 10 + (deprecated,) + (0.0,) * 7


def _added(a: int | None, b: int | None) -> float:
    """|a - b| / |a| for two bit-mask sets (0 when either is missing or a is empty)."""
    if a is None or b is None or not a:
        return 0.0
    return (a & ~b).bit_count() / a.bit_count()


def _fields_changed(current: Any, reference: Any) -> float:
    if not isinstance(current, dict) or not isinstance(reference, dict) or not current:
        return 1.0 if current != reference else 0.0
    missing = object()
    changed = sum(1 for k, v in current.items() if reference.get(k, missing) != v)
    return changed / len(current)


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _is_episode_sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(e, Episode) for e in value) and len(value) > 0
