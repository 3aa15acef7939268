"""The Gymnasium environment ``WritePolicyBench-v0``: its dynamics (spaces, ``reset``,
``step``) over the parts in ``episode_sampler``, ``observation``, ``rewards`` and ``render``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Mapping

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..core.checks import only_defaults, require_finite
from ..core.compression import Compression
from ..core.kind_budgets import KindShares
from ..core.setting_values import budget_argument
from ..core.store import ByteMemoryStore, Reason
from ..core.store_limits import StoreLimits
from ..core.tracks import PRIVILEGED, UNPRIVILEGED, check_track, policy_episode
from ..core.types import Episode, MemoryAction, Step
from ..core.write_time import WriteTime
from ..episodes.generators.queries import QUERY_REGIMES
from ..episodes.sources import EpisodeRecipe
from ..scoring.compression_bounds import compressed_costs, refuse_queries
from ..scoring.metrics import compute_metrics
from .adapter import MemoryActionAdapter, ResetNeeded
from .episode_sampler import EpisodeSampler
from .fast.layout import EXACT_INTS, REASONS
from .store_limits import EnvLimits
from .observation.encoder import ObservationEncoder
from .observation.features import ObservationLayout, check_encoder_arguments, feature_tables
from .observation.stream_table import KIND_ENDPOINT
from .render import MemoryViewer
from .rewards import RewardFunction, parse_reward

if TYPE_CHECKING:  # numba loads with the first reset, not with this module
    from .fast.core import CompiledCore

RESET_OPTIONS = ("episode_index", "budget_bytes", "regime", "length", "episode")
# Env-level rejection reasons (the store's own are ``Reason`` values).
EMPTY_SLOT = "empty_slot"
EXPIRE_CAP = "expire_cap"

_ACCEPTED = Reason.ACCEPTED.value
_ENCODER_DEFAULTS = {"slots": 2, "slot_order": "relevance", "observation_mode": "box", "max_expires_per_step": None}
_EPISODE_DEFAULTS = {"regime": None, "length": None, "episodes": None, "episode_seed": 0, "episode_order": "random"}


class WritePolicyBenchEnv(MemoryActionAdapter, gym.Env):
    """
    ## Description

    A stream of API/documentation snapshots drifts over ``T`` timesteps (one benchmark
    episode). At every timestep the agent decides what to do with the current snapshot
    under a byte budget: SKIP it, WRITE it to memory, MERGE it as a delta into a stored item
    of the same endpoint, or first EXPIRE stored items to make room. At the end the memory
    is scored with the benchmark's metrics (spec §4, paper §6) against hidden labels: which
    steps were critical (drift events) and how much each step is worth. The env steps on a
    compiled core (``envs.fast``, numba), as one row of the arrays the native vector env steps
    together; its store rules, masks, observation and rewards are tested output for output
    against the core ``ByteMemoryStore``, the encoder and the reward function in Python, which
    play what the core does not (``plays_compiled``), so the environment and the offline
    evaluator apply the same rules and compute the same metrics. ``env.store`` reads the
    memory back as a ``ByteMemoryStore``.

    ## Action Space

    ``Discrete(2 + 2K)`` where ``K`` is the number of memory slots shown (``slots``), and
    ``Discrete(3 + 2K)`` with compressed writes allowed (``compression=``):

    | Action        | Meaning                                                        | Advances time |
    |---------------|----------------------------------------------------------------|---------------|
    | 0             | SKIP the current step                                          | yes           |
    | 1             | WRITE the current step                                         | yes           |
    | 2 .. K+1      | MERGE the current step into the item in slot ``a - 2``         | yes           |
    | K+2 .. 2K+1   | EXPIRE the item in slot ``a - K - 2``                          | no            |
    | 2K+2          | WRITE the current step compressed (only with ``compression=``) | yes           |

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
    flat, as SB3's ``MultiInputPolicy`` expects) and ``action_mask`` is ``MultiBinary(n_actions)``.
    ``n = 39 + 8 + 14 K`` on the unprivileged track and ``40 + 8 + 15 K`` on the privileged
    one (which adds ``priority``): 75 at the default ``K = 2``, 159 at ``K = 8``.
    Everything is computed from what a policy may see (the step's observation and visible
    metadata, and memory); labels never enter. Fractions are clipped to [0, 1].

    With hierarchical budgets (``kind_budgets=``) five features follow, under ``"limits"`` in
    ``dict`` mode: ``kind_room_endpoint``, ``kind_room_doc``, ``kind_room_guide`` and
    ``kind_room_other`` (what a WRITE of that content kind may still take, over the budget) and
    ``fits_kind`` (1 if the current step fits its own kind's room); the mask then also leaves
    out a WRITE or MERGE past its kind's limit (``docs/kind-budgets.md``). With a write-time
    budget (``write_time=``) two follow: ``time_left`` (the share of the episode's write time
    left) and ``fits_time`` (1 if a WRITE of the current step fits in it); the mask leaves out
    the writes that do not (``docs/write-time.md``). With compression (``compression=``) the
    env has one more action, the last: a compressed WRITE of the current step
    (``docs/compression.md``); ``2 + K`` features follow: ``compressed_share`` (the compressed
    step's bytes over its plain bytes, 0 when the codec refuses it), ``fits_compressed`` and
    ``slot_k_compressed`` for each slot. Under any of them the mask's WRITE and MERGE bits are
    the store's verdict, while the features ``fits``, ``fits_if_larger_expired`` and ``merge_ok``
    (step and slots) still speak of the byte budget alone, and the other slot features of the
    step an item was written from (not the summary a compressed item holds).

    The step features from ``family_seen`` on compare with the stream the agent was shown, not
    with memory: a policy that skipped the previous version of an endpoint can still see how
    this one changed, as a scripted policy that remembers what it was shown can. An
    endpoint's *contract* is its parameters, its required parameters, and its deprecated and
    removed flags.

    The *reference* item is the newest stored item of the current step's endpoint family
    (the endpoint with version segments removed from ``api``, e.g. ``api.v2.endpoint_5``
    and ``api.v3.endpoint_5``; documentation sections by title; migration guides by the
    old endpoint). Comparisons with a missing reference are 0.

    {feature_tables}

    Which items the slots show (``slot_order``): ``"relevance"`` (default) shows the largest
    item in slot 0 (the oldest of the largest), then the items of the current step's family
    newest first, then the other items oldest first; ``"oldest"`` shows the K oldest items.
    Either way every stored item can be reached: an item not shown becomes visible once the
    shown items older than it (or of the current family, or larger) are expired.

    ## Rewards

    ``reward="f1"`` (default) scores the episode's F1; ``"utility"`` policy utility / U*(B),
    ``"neg_regret"`` -regret / U*(B), and a weighted mix (``{"f1": 0.5, "utility": 0.5}``)
    their weighted sum. With ``dense_reward=True`` (default) it is paid as per-step potential
    differences whose sum equals the terminal value exactly (``wpb_gym.envs.rewards``); with
    ``False``, on the last step and 0 before. A rejected action costs
    ``invalid_action_penalty`` (default 0), an accepted EXPIRE ``expire_cost`` (default 0.03);
    the episode's rewards then sum to the metric less those costs.

    The defaults (two slots, dense reward, 0.03 per EXPIRE) are those MaskablePPO learns the
    default regime from with EXPIRE available (``docs/learned-agents.md``); two slots still
    show what ``breaking_detector`` reads. The per-regime recipes set their own.

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
        budget_bytes=10240,       # bytes, or text with a unit: "10KB" (1KB = 1024 bytes)
        length=None,              # 200 for generated episodes; filters file episodes
        track="unprivileged",     # or "privileged" (adds priority)
        episodes=None,            # None: generated; a frozen set, directory or JSONL path; or a list of Episodes
        episode_seed=0,           # the generated set's seed (episode i = `wpb freeze --seed S` episode i)
        episode_order="random",   # or "cycle"
        slots=2,                  # K
        slot_order="relevance",   # or "oldest"
        reward="f1",              # "utility", "neg_regret", or a weighted mix
        dense_reward=True,
        invalid_action_penalty=0.0,
        expire_cost=0.03,         # reward cost of each accepted EXPIRE
        observation_mode="box",   # or "dict"
        max_expires_per_step=None,
        render_mode=None,         # "ansi" or "rgb_array"
        episode_sampler=None,     # an EpisodeSampler, instead of the episode arguments above
        observation_encoder=None, # an ObservationEncoder, instead of slots= ... max_expires_per_step=
        reward_fn=None,           # a RewardFunction, instead of reward=, dense_reward= and expire_cost=
        viewer=None,              # a MemoryViewer, instead of render_mode=
        kind_budgets=None,        # hierarchical budgets, e.g. "endpoint=60%,doc=30%,guide=1KB"
        write_time=None,          # write time, e.g. "total=40,per_write=1,per_kb=1" (ticks)
        compression=None,         # compressed WRITEs allowed, e.g. "credit=0.75"
        **generator_options,      # any GeneratorConfig field, e.g. drift_prob=0.2
    )
    ```

    The env is its dynamics (this class: spaces, ``reset``, ``step``) and parts, each in its
    own module and testable alone: the episode source (``envs.episode_sampler``), the
    observation encoder (``envs.observation``: feature names, the fast encoder and its
    literal reference), the reward function (``envs.rewards``) and the viewer
    (``envs.render``). ``episode_sampler``, ``observation_encoder``, ``reward_fn`` and
    ``viewer`` replace the default parts built from the arguments (which must then keep their
    defaults); each env works on a fresh copy of a part passed in (``part.fresh()``).

    ``reset(seed=..., options=...)``: ``options`` may hold ``episode_index`` (which episode
    of the source), ``budget_bytes``, ``regime`` and ``length`` (for this episode only, for
    curricula and episode-by-episode evaluation), or ``episode`` (an ``Episode`` to play).
    The same seed gives the same episode and the same observations. In ``"cycle"`` order a
    seeded reset restarts the cycle at episode 0.

    ## Vectorized environment

    ``gym.make_vec(id, num_envs=N)`` builds the native vector env (``envs.vector``): N episodes stepped
    by one compiled call on arrays (``envs.fast``, tested output for output against this class on
    its Python parts), in Gymnasium's vector layout (masks ``(N, n_actions)``), ``autoreset_mode``
    ``"NextStep"`` (default), ``"SameStep"`` or ``"Disabled"``; each sub-env's single env is a row
    of those arrays. It runs the paper regimes' generator loop compiled on each episode's draws
    and makes every other episode with its generator (``replay_generators=False``: the paper
    regimes' too); with ``episode_workers=k``, k processes prepare the next episodes it makes.
    It takes every argument of this env. ``"sync"``/``"async"`` wrap single envs. SB3:
    ``agents.sb3.native_vec_env.NativeVecEnv``.

    ## Version History

    * v0, package 0.13.0: compressed writes (``compression=``) are stepped by the compiled core
      (outputs unchanged); the native vector env, which refused them, takes them.
    * v0, package 0.12.0: limits per content kind (``kind_budgets=``) and a write time
      (``write_time=``) are stepped by the compiled core (outputs unchanged); the native vector
      env, which refused them, takes them.
    * v0, package 0.11.0: the single env steps on the compiled core, as the vector env's sub-envs
      do (outputs unchanged); with ``observation_encoder=`` in ``"dict"`` mode the observation
      space is the ``Dict`` the env returns (it was a ``Box``).
    * v0, package 0.10.0: opt-in hierarchical budgets (``kind_budgets=``: a byte limit per content
      kind beside the total), write time (``write_time=``: a per-episode budget of ticks every
      WRITE or MERGE spends) and compression (``compression=``: compressed WRITEs worth a credit,
      one more action), one at a time, in the store's rules, the mask, the observation
      (features appended) and the utility reward's oracle. Without them nothing changes.
    * v0, package 0.7.0: the native vector env steps on a compiled core (numba); ``choose_episode``.
    * v0, package 0.5.0: the contract regimes open with an unscored warm-up showing every endpoint's
      starting state (``warmup``), so every change can be classified from the stream, and a
      requirement relaxed or removed later is no longer critical: their episodes changed.
    * v0, package 0.4.0: defaults ``slots=2`` (was 8), ``dense_reward=True`` (was False) and
      the new ``expire_cost=0.03``; ``slots=8, dense_reward=False, expire_cost=0`` give the
      earlier env. Models saved with 8 slots still load.
    * v0, package 0.2.0: the slot feature ``same_api`` is 0 for documentation sections and migration
      guides (no ``api``; it was 1 for those of the step's family): observations change on streams
      with them (``mixed_sizes``, ``contract_mix``, ``doc_prob`` > 0), their sizes do not.
    * v0, package 0.1.0: the observation gained what a scripted policy may know from the stream
      (``*_since_seen``, ``removed``, ``returns_to_earlier``, ``reverted_expired``,
      ``fits_if_larger_expired``, slot feature ``reverted``) and ``"relevance"`` shows the largest
      item in slot 0 (138 to 159 features at K = 8); the contract regimes' snapshots stopped
      betraying their history.
    * v0: spec v0 and the paper's regimes; later the contract regimes (``breaking``, ``reverts``,
      ``noisy_priority``, ``mixed_sizes``, ``contract_mix``), the long-stream ids and real-drift
      episodes (``episodes=``) were added as episode sources, leaving the paper's episodes unchanged.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
        regime: str | None = None,
        budget_bytes: int | str = 10240,
        length: int | None = None,
        track: str = UNPRIVILEGED,
        episodes: str | os.PathLike[str] | Sequence[Episode] | None = None,
        episode_seed: int = 0,
        episode_order: str = "random",
        slots: int = 2,
        slot_order: str = "relevance",
        reward: str | Mapping[str, float] = "f1",
        dense_reward: bool = True,
        invalid_action_penalty: float = 0.0,
        expire_cost: float = 0.03,
        observation_mode: str = "box",
        max_expires_per_step: int | None = None,
        render_mode: str | None = None,
        episode_sampler: EpisodeSampler | None = None,
        observation_encoder: ObservationEncoder | None = None,
        reward_fn: RewardFunction | None = None,
        viewer: MemoryViewer | None = None,
        kind_budgets: str | Mapping[str, Any] | None = None,
        write_time: str | Mapping[str, Any] | None = None,
        compression: str | Mapping[str, Any] | None = None,
        **generator_options: Any,
    ) -> None:
        self.track = check_track(track)
        # Limits beside the budget: per content kind (resolved at each episode's budget), write
        # time or compression.
        limits = StoreLimits(None if kind_budgets is None else KindShares.parse(kind_budgets, "kind_budgets"),
                             None if write_time is None else WriteTime.parse(write_time, "write_time"),
                             None if compression is None else Compression.parse(compression, "compression"))
        self.budget_bytes = budget_argument(budget_bytes, "budget_bytes")
        self.invalid_action_penalty = invalid_action_penalty
        # A part passed in replaces the arguments it is built from, and each env works on its
        # own fresh copy (gym.make_vec hands every sub-env the same objects).
        if observation_encoder is None:
            K, slot_order, observation_mode, cap = check_encoder_arguments(
                slots, slot_order, observation_mode, max_expires_per_step
            )
            encoder = ObservationEncoder(
                ObservationLayout(K, self.track == PRIVILEGED),
                slot_order=slot_order,
                max_expires_per_step=cap,
                observation_mode=observation_mode,
            )
        else:
            given = {"slots": slots, "slot_order": slot_order, "observation_mode": observation_mode,
                     "max_expires_per_step": max_expires_per_step}
            only_defaults("observation_encoder", given, _ENCODER_DEFAULTS)
            if observation_encoder.privileged != (self.track == PRIVILEGED):
                raise ValueError(f"observation_encoder: its layout is for the other track than track={track!r}")
            encoder = observation_encoder.fresh()
        self._encoder = encoder
        self.limits = EnvLimits(limits, encoder.K) if limits else None
        self.K, self.slot_order, self.observation_mode = encoder.K, encoder.slot_order, encoder.observation_mode
        self.max_expires_per_step = encoder.cap
        if viewer is None:
            viewer = MemoryViewer(render_mode)
        else:
            only_defaults("viewer", {"render_mode": render_mode}, {"render_mode": None})
        self.viewer = viewer.fresh()
        self.render_mode = self.viewer.mode
        if episode_sampler is None:
            episode_sampler = EpisodeSampler(regime=regime, length=length, episodes=episodes, episode_seed=episode_seed,
                                             order=episode_order, generator_options=generator_options)
        else:
            given = {"regime": regime, "length": length, "episodes": episodes, "episode_seed": episode_seed,
                     "episode_order": episode_order}
            only_defaults("episode_sampler", {**given, **generator_options}, _EPISODE_DEFAULTS)
            episode_sampler = episode_sampler.fresh()
        self.sampler = episode_sampler
        if reward_fn is None:
            reward_fn = RewardFunction(parse_reward(reward), dense_reward, expire_cost)
        else:
            only_defaults("reward_fn", {"reward": reward, "dense_reward": dense_reward, "expire_cost": expire_cost},
                          {"reward": "f1", "dense_reward": True, "expire_cost": 0.03})
            reward_fn = reward_fn.fresh()
        self.reward_fn = reward_fn
        if self.limits is not None and "neg_regret" in reward_fn.weights:
            raise ValueError("reward: 'neg_regret' is measured against the prefix oracle U*(B, t), which "
                             "kind_budgets=, write_time= and compression= do not have; use 'f1' or 'utility'")

        self.privileged = self.track == PRIVILEGED
        self.layout = encoder.layout
        self.step_features = self.layout.step_features
        self.slot_features = self.layout.slot_features
        self.n_actions = self.layout.n_actions + (self.limits.extra_actions if self.limits is not None else 0)
        # With compression, its action follows the layout's; without, no action has this index.
        self._compressed_write = self.layout.n_actions
        self.action_space = spaces.Discrete(self.n_actions)
        self.observation_space = self.layout.space(self.observation_mode)
        if self.limits is not None:
            if isinstance(self.observation_space, spaces.Box):
                self.observation_space = self.limits.box_space(self.observation_space)
            else:
                self.observation_space = spaces.Dict({**self.observation_space.spaces,
                                                      "action_mask": spaces.MultiBinary(self.n_actions),
                                                      "limits": self.limits.features_space()})
        self.reset_count = 0  # resets so far: tells adapters that a new episode began
        self._episode: Episode | None = None  # the episode the Python parts play (None: the core's, or none)
        self.episode_index: int | None = None
        self._done = True  # the Python parts' episode is over (or none began)
        # The compiled core that plays this env's episodes, as its row ``_row`` (made at the first
        # reset, or the native vector env's: see ``play_on``), the single envs of its rows, and
        # the memory store read back from its decisions (see ``store``).
        self._core: CompiledCore | None = None
        self._row = 0
        self._core_envs: Sequence[WritePolicyBenchEnv] = (self,)
        self._read_back: _ReadBack | None = None

    # The episode source's settings, as the env was made with them.
    regime = property(lambda self: self.sampler.regime)
    length = property(lambda self: self.sampler.length)
    episode_seed = property(lambda self: self.sampler.episode_seed)
    episode_order = property(lambda self: self.sampler.order)
    generator_options = property(lambda self: dict(self.sampler.generator_options))
    reward_weights = property(lambda self: dict(self.reward_fn.weights))
    dense_reward = property(lambda self: self.reward_fn.dense)
    expire_cost = property(lambda self: self.reward_fn.expire_cost)

    # ------------------------------------------------------------------ public reading
    @property
    def invalid_action_penalty(self) -> float:
        """What a refused action costs: a finite float, whatever number was given (set it as the
        constructor takes it, so a NumPy float32 costs the same here and in the vector env)."""
        return self._invalid_action_penalty

    @invalid_action_penalty.setter
    def invalid_action_penalty(self, value: float) -> None:
        self._invalid_action_penalty = require_finite(value, "invalid_action_penalty")
        core = self.__dict__.get("_core")
        if core is not None:  # the core adds it to rewards from the next step
            core.penalties[self._row] = self._invalid_action_penalty

    @property
    def plays_compiled(self) -> bool:
        """Whether the core (``envs.fast``) plays this env's episodes: with the parts it mirrors
        (none subclassed, nor ``advance`` overridden in a subclass of the env) and an EXPIRE cap
        float64 holds exactly (it plays every limit beside the byte budget). The core runs
        compiled by numba, or as the same code in Python while a first run compiles it or with
        ``NUMBA_DISABLE_JIT=1``. Otherwise the env steps its Python parts (the store, the encoder,
        the reward function), as it also does for an episode the core cannot read (steps that
        are not plain JSON, a budget past 2**53); both are tested output for output."""
        cap = self.max_expires_per_step
        plain_parts = (type(self.reward_fn) is RewardFunction and type(self._encoder) is ObservationEncoder
                       and type(self.viewer) is MemoryViewer and type(self).advance is WritePolicyBenchEnv.advance)
        return plain_parts and (cap is None or cap < EXACT_INTS)

    def play_on(self, core: CompiledCore, row: int, envs: Sequence[WritePolicyBenchEnv]) -> None:
        """For the native vector env: play this env's episodes as row ``row`` of its ``core``,
        whose rows are the single envs ``envs``."""
        self._core, self._row, self._core_envs = core, row, envs

    def _on_core(self) -> bool:
        """The core plays the current episode."""
        core = self._core
        return core is not None and core.compiled[self._row]

    @property
    def episode(self) -> Episode:
        """The current episode (with its hidden labels: for scoring and tooling, not for policies)."""
        self._require_episode("reading env.episode")
        return self._core.episode(self._row) if self._on_core() else self._episode

    @property
    def store(self) -> ByteMemoryStore:
        """The memory store of the current episode, for reading (apply actions through ``step``
        only). When the compiled core plays the episode, this is the reference store brought up
        to the core's decisions as it is read; the core never reads it."""
        self._require_episode("reading env.store")
        return self._core_store() if self._on_core() else self._store

    @property
    def observation_encoder(self) -> ObservationEncoder:
        """This env's own encoder (a fresh copy of the one given): the Python statement of the
        observation and masks, which steps the env where the compiled core does not
        (``plays_compiled``); the compiled core is tested against it. Read it; the env updates it
        as it steps on the Python path."""
        return self._encoder

    @property
    def t(self) -> int:
        """The current timestep (T once the episode is over)."""
        self._require_episode("reading env.t")
        return self._now()[0]

    @property
    def episode_over(self) -> bool:
        """Whether the current episode has ended (True before the first reset): ``step`` then
        needs a ``reset``."""
        return self._finished()

    # What the adapter (``envs.adapter``) reads, from the core or the Python parts.
    def _require_episode(self, what: str) -> None:
        if self._episode is None and not self._on_core():
            raise ResetNeeded(f"call reset() before {what}: there is no episode yet")

    def _now(self) -> tuple[int, int]:
        if self._on_core():
            return self._core.clock(self._row)[:2]
        return self._t, self._T

    def _finished(self) -> bool:
        if self._on_core():
            t, T = self._core.clock(self._row)[:2]
            return t >= T
        return self._done

    def _step_view(self, t: int) -> Step:
        if self._on_core():  # one object per step, as on the Python parts (its costs cached on it)
            return policy_episode(self.episode, self.track).steps[t]
        return self._table.step(t)

    def _shown(self) -> list[int]:
        return self._core.slots(self._row) if self._on_core() else list(self._encoder.slots)

    def _mask(self) -> np.ndarray:
        return self._core.masks[self._row].copy() if self._on_core() else self._encoder.mask_array()

    def _stored_now(self, t: int) -> bool:
        if self._on_core():
            return 0 <= t < self._now()[1] and self._core.item_cost(self._row, t) >= 0
        return t in self._store

    def _show(self, shown: list[int]) -> None:
        if self._on_core():
            self._core.expose(self._row, shown[-1])
            return
        self._update_view(shown)
        if self._core is not None:
            self._core.copy_from(self._row, self)

    # ------------------------------------------------------------------ episode start
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self.plays_compiled:
            episode, budget = self.choose_episode(seed, options, recipe=True)
            if self._core is None:
                from .fast.core import CompiledCore  # numba: with the first reset, not with wpb_gym

                self.play_on(CompiledCore(1, self), 0, (self,))
            # An episode the core cannot read is started here (start_episode), on the Python parts.
            self._core.start_chosen(self._row, episode, budget, self._core_envs)
        else:
            self.start_episode(*self.choose_episode(seed, options))
        return self._observation(), self._info(True, _ACCEPTED)

    def choose_episode(self, seed: int | None = None, options: dict[str, Any] | None = None,
                       recipe: bool = False) -> tuple[Episode | EpisodeRecipe, int]:
        """``reset`` but for starting the episode: seed, check ``options``, choose; returns the episode (with
        ``recipe``, a generated one not made) and its budget (the vector env starts compiled sub-envs' itself)."""
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ValueError(f"reset options {unknown} are not known; expected some of {RESET_OPTIONS}")
        if seed is not None:
            self.sampler.restart()
        budget = budget_argument(options.get("budget_bytes", self.budget_bytes), "options['budget_bytes']")
        episode, index = self.sampler.choose(self.np_random, options, recipe)
        if len(episode) == 0:
            raise ValueError("the episode has no steps")
        if self.limits is not None and self.limits.compressing:  # on the core as on the Python parts
            _refuse_queries(episode)
        self.reset_count, self.episode_index = self.reset_count + 1, index
        self._episode, self._done = None, True  # the episode before is left
        self._stop_reading_back()
        if not recipe and self._on_core():  # chosen by hand: the core stops playing it too
            self._core.leave(self._row)
        self.viewer.start()
        return episode, budget

    def start_episode(self, episode: Episode | EpisodeRecipe, budget: int) -> None:
        """``reset`` after ``choose_episode``: start ``episode`` with a memory of ``budget`` bytes
        (a recipe, from ``choose_episode(recipe=True)``, is made first). It takes what
        ``choose_episode`` returned and checks nothing else (the vector env chooses each
        sub-env's episode, then starts it here or in its core)."""
        if isinstance(episode, EpisodeRecipe):
            episode = episode.make()
        if self.limits is not None and self.limits.compressing:
            refuse_queries(episode)
        if self._on_core():  # the core played this env's episode before: it stops
            self._stop_reading_back()
            self._core.leave(self._row)
        self._episode = episode
        self._store = ByteMemoryStore(budget) if self.limits is None else self.limits.store(budget)
        self._table = self._encoder.start(episode, self.track, self._store)
        self._T = len(episode)
        self._t = 0
        self._done = False
        self._expires_this_step = 0
        self._reverted_expired = False
        if self.limits is None:
            self.reward_fn.start(episode, self._table.cost_array(), budget)
        else:
            self.reward_fn.start(episode, self._table.cost_array(), budget, kinds=self._store.kind_budgets,
                                 write_time=self._store.write_time, compression=self._store.compression,
                                 compressed=compressed_costs(episode, self.track)
                                 if self._store.compression is not None else None)
        self.viewer.start()
        self._recording = self.viewer.records
        self._update_view()
        if self._core is not None:  # a vector env's sub-env: its row shows this episode
            self._core.copy_from(self._row, self)

    def _update_view(self, slots: list[int] | None = None) -> None:
        self._encoder.update(self._t, self._expires_this_step, self._reverted_expired, slots)
        if self.limits is not None:
            self._limit_mask()

    def _limit_mask(self) -> None:
        # The encoder's mask knows the byte budget only; the store judges the other limits.
        step = self._table.step(self._t) if self._t < self._T else None
        encoder = self._encoder
        encoder.mask = self.limits.mask(encoder.mask, self._store, step, encoder.slots, self._t, self.K)

    def _observation(self) -> Any:
        if self._on_core():
            core, r = self._core, self._row
            if self.observation_mode == "box":
                return core.observations[r].copy()
            return self.split_observation(core.observations[r], core.masks[r])
        obs = self._encoder.observation()
        if self.limits is None:
            return obs
        extra = self.limit_features()
        if isinstance(obs, dict):
            return {**obs, "limits": extra}
        return np.concatenate([obs, extra])

    def limit_features(self) -> np.ndarray:
        """On the Python parts: the features of the limits beside the byte budget
        (``store_limits``) in the current state, which follow the layout's."""
        t = self._t
        step = self._table.step(t) if t < self._T else None
        return self.limits.features(self._store, step, self._table.costs[t] if step is not None else 0,
                                    self._encoder.slots)

    @property
    def observation_size(self) -> int:
        """The length of the flat (``"box"``) observation: the layout's features, then the limits'."""
        return self.layout.size + (len(self.limits.names) if self.limits is not None else 0)

    def split_observation(self, flat: np.ndarray, masks: np.ndarray) -> dict[str, np.ndarray]:
        """The ``"dict"`` observation of flat rows (one, or a batch along the leading axes) and
        their bool masks (``ObservationLayout.split``, and ``"limits"``): new arrays."""
        if self.limits is None:
            return self.layout.split(flat, masks)
        size = self.layout.size
        return {**self.layout.split(flat[..., :size], masks), "limits": flat[..., size:].copy()}

    # ------------------------------------------------------------------ stepping
    def step(self, action: Any):
        if self._on_core():
            return self._step_on_core(action)
        if self._done:
            self._require_episode("step()")
            raise RuntimeError("the episode is over: call reset() before step()")
        a = action if type(action) is int and 0 <= action < self.n_actions else self._check_action(action)
        reward, terminated, accepted, reason, metrics = self.advance(a)
        if self._core is not None:  # a vector env's sub-env on the Python parts: its row follows
            self._core.copy_from(self._row, self)
        info = self._info(accepted, reason)
        if metrics is not None:
            info["metrics"] = metrics
            info.update(metrics)
        return self._observation(), reward, terminated, False, info

    def advance(self, a: int) -> tuple[float, bool, bool, str, dict[str, Any] | None]:
        """One step's dynamics on the Python parts (``step``, and the vector env's sub-envs that
        are not compiled): apply ``a`` (in range, the episode not over); returns the reward,
        whether the episode ended, whether the action was accepted and why not, and the final
        metrics (None before the end); obs and mask: the encoder's."""
        t = self._t
        store = self._store
        encoder = self._encoder
        accepted = encoder.mask[a] == 1
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
                self._stored(t, None, decision.byte_delta)
        elif a == self._compressed_write:
            reason = _ACCEPTED
            decision = store.write_compressed(self._table.step(t), t)
            if decision.accepted:
                self._stored(t, None, decision.byte_delta, compressed=True)
        elif a < 2 + self.K:
            reason = _ACCEPTED
            target = encoder.slots[a - 2]
            decision = store.execute(MemoryAction("MERGE", step=self._table.step(t), target_t=target), t)
            if decision.accepted:
                self._stored(t, target, decision.byte_delta)
        else:
            reason = _ACCEPTED
            target = encoder.slots[a - 2 - self.K]
            item = store.get(target)
            dropped = store.retained_loss(target)
            decision = store.expire(target, t)
            if decision.accepted:
                encoder.expired(item, dropped)
                self.reward_fn.dropped(dropped)
                if self._recording:
                    self.viewer.expired(target, t)
                tab = self._table
                if tab.kinds[target] == KIND_ENDPOINT and tab.families[target] == tab.families[t]:
                    self._reverted_expired = self._reverted_expired or encoder.reverted(target, t)
            expired = True
        if not decision.accepted:
            raise AssertionError(f"store rejected action {a} ({decision.reason}) that the mask allowed")
        self.viewer.last_action = (a, reason)  # an attribute, not a call: this runs at every step
        if expired:
            self._expires_this_step += 1
        else:
            self._t = t + 1
            self._expires_this_step = 0
            self._reverted_expired = False
            if self._recording:
                self.viewer.time_advanced(store.bytes_used)
        terminated = self._t >= self._T
        encoder.update(self._t, self._expires_this_step, self._reverted_expired)
        if self.limits is not None:
            self._limit_mask()
        metrics = None
        if terminated:
            self._done = True
            metrics = self.episode_metrics().as_row()
        reward = self.reward_fn.reward(None if expired else t, penalty, metrics)
        return reward, terminated, accepted, reason, metrics

    def _stop_reading_back(self) -> None:
        if self._read_back is not None:
            self._read_back = None
            self._core.readers.discard(self._row)

    def _core_store(self) -> ByteMemoryStore:
        """The reference store holding what the core's decisions this episode did: each read
        applies the decisions made since the last (the core is the env; this only reads it),
        and tells the viewer. Once read, it follows every step (agents hold it, or its view,
        across steps), as it does from the start for a viewer that records the episode."""
        read = self._read_back
        if read is None:
            budget = self._core.clock(self._row)[2]
            store = ByteMemoryStore(budget) if self.limits is None else self.limits.store(budget)
            read = self._read_back = _ReadBack(store, policy_episode(self.episode, self.track).steps)
            self._core.readers.add(self._row)
        decisions = self._core.decisions(self._row)
        store, steps, K, viewer = read.store, read.steps, self.K, self.viewer
        recording = viewer.records
        compressed = self._compressed_write
        t = read.t
        for a, what in decisions[read.applied:].tolist():
            refused = what < -1
            if refused or a == 0:  # refused actions are skipped steps
                decision = store.skip(t)
            elif a == 1:
                decision = store.write(steps[t], t)
            elif a == compressed:
                decision = store.write_compressed(steps[t], t)
            elif a < 2 + K:
                decision = store.execute(MemoryAction("MERGE", step=steps[t], target_t=what), t)
            else:
                decision = store.expire(what, t)
            if not decision.accepted:
                raise AssertionError(f"the reference store refused action {a} at step {t} ({decision.reason}) "
                                     "that the compiled core took")
            expired = 2 + K <= a < compressed
            if recording and not refused and a != 0:
                if expired:
                    viewer.expired(what, t)
                else:
                    viewer.stored(t, 2 <= a < 2 + K)
            if not expired or refused:
                t += 1
                if recording:
                    viewer.time_advanced(store.bytes_used)
        read.applied, read.t = len(decisions), t
        return store

    def _step_on_core(self, action: Any):
        if not (type(action) is int and 0 <= action < self.n_actions):
            if self._finished():  # as on the Python parts: the episode's end is said first
                raise RuntimeError("the episode is over: call reset() before step()")
            action = self._check_action(action)
        core, r = self._core, self._row
        reward, ended, code, metrics = core.step_one(r, action, self._core_envs)
        if self._read_back is not None or self.viewer.records:
            self._core_store()
        t, _, _, used = core.clock(r)
        info = {"t": t, "accepted": code == 0, "reason": REASONS[code], "bytes_used": used,
                "action_mask": core.masks[r].copy()}
        if metrics is not None:
            info["metrics"] = metrics
            info.update(metrics)
        observation = core.observations[r].copy() if self.observation_mode == "box" else self._observation()
        return observation, reward, ended, False, info

    def _stored(self, t: int, merge_target: int | None, cost: int, compressed: bool = False) -> None:
        """After the store accepted WRITE (``merge_target`` None; ``compressed``: through the
        codec) or MERGE of step ``t``."""
        self._encoder.stored(t, merge_target, cost)
        # A WRITE is retained, and a MERGE joins a present base.
        self.reward_fn.kept(t, self._store.compression.credit if compressed else 1.0)
        if self._recording:
            self.viewer.stored(t, merge_target is not None)

    def _rejection_reason(self, a: int) -> str:
        if a == 0:  # pragma: no cover - SKIP is always valid
            return Reason.ACCEPTED.value
        if 2 <= a < self._compressed_write:
            k = (a - 2) % self.K
            if k >= len(self._encoder.slots):
                return EMPTY_SLOT
            if a >= 2 + self.K and self.max_expires_per_step is not None:
                if self._expires_this_step >= self.max_expires_per_step:
                    return EXPIRE_CAP
        return self._store.check(self.decode_action(a), self._t).reason.value

    def _info(self, accepted: bool, reason: str) -> dict[str, Any]:
        if self._on_core():
            t, _, _, used = self._core.clock(self._row)
            return {"t": t, "accepted": accepted, "reason": reason, "bytes_used": used,
                    "action_mask": self._core.masks[self._row].copy()}
        return {"t": self._t, "accepted": accepted, "reason": reason, "bytes_used": self._store.budget.used,
                "action_mask": self._encoder.mask_array()}

    # ------------------------------------------------------------------ metrics
    def oracle_utility(self) -> float:
        """U*(B) of the current episode at its budget on this track (computed once per episode)."""
        self._require_episode("oracle_utility()")
        return self._core.oracle(self._row) if self._on_core() else self.reward_fn.oracle_utility()

    def episode_metrics(self):
        """The benchmark metrics of the memory as it is now (the final ones once the episode is over)."""
        return compute_metrics(self.episode, self.store, oracle_utility=self.oracle_utility())

    # ------------------------------------------------------------------ rendering
    def step_details(self, t: int) -> tuple[int, int, float | None]:
        """Step ``t``'s kind code (``stream_table.KIND_*``), WRITE cost and, on the privileged
        track, its priority clipped to [0, 1] (None otherwise): what the observation encodes."""
        if self._on_core():
            T = self._now()[1]
            if not -T <= t < T:
                raise IndexError(f"step {t} is not in the episode's {T} steps")
            return self._core.step_details(self._row, t % T)
        table = self._table
        return table.kinds[t], table.costs[t], None if table.priorities is None else table.priorities[t]

    @property
    def memory_history(self) -> dict[int, tuple[int | None, bool]]:
        """With ``render_mode="rgb_array"``: every stored timestep this episode, with when it
        was expired (None: still stored) and whether it was a MERGE (a copy; empty otherwise)."""
        return self.viewer.memory_history

    @property
    def bytes_history(self) -> tuple[int, ...]:
        """With ``render_mode="rgb_array"``: bytes used after each timestep (empty otherwise)."""
        return self.viewer.bytes_history

    def last_action_text(self) -> str:
        """The last action and its outcome, for rendering."""
        if self._on_core():  # the core's log holds it, however the row was stepped
            decisions = self._core.decisions(self._row)
            if len(decisions):
                a, what = decisions[-1].tolist()
                self.viewer.last_action = (a, REASONS[-1 - what] if what < -1 else _ACCEPTED)
        return self.viewer.last_action_text(self._action_name)

    def render(self):
        if self.render_mode is None:
            gym.logger.warn("render() called without render_mode; pass render_mode='ansi' or 'rgb_array' to gym.make")
            return None
        if self._episode is None and not self._on_core():
            raise RuntimeError("call reset() before render()")
        return self.viewer.render(self)


def _refuse_queries(episode: Episode | EpisodeRecipe) -> None:
    """``refuse_queries`` of an episode, or of a recipe of the query tier (without making it)."""
    if not isinstance(episode, EpisodeRecipe):
        refuse_queries(episode)
    elif getattr(episode.config, "regime", None) in QUERY_REGIMES:
        raise ValueError(f"regime {episode.config.regime!r} is the query tier's, and the query tier has no bound "
                         "with compressed writes: run compression on episodes without queries")


class _ReadBack:
    """The store ``WritePolicyBenchEnv.store`` reads back from the core's decisions (on the steps as
    the policy sees them), and how far."""

    def __init__(self, store: ByteMemoryStore, steps: Sequence[Step]) -> None:
        self.store, self.steps = store, steps
        self.applied = 0  # decisions applied
        self.t = 0  # the step the next decision is on


# The feature tables are kept once, with the feature names (observation/features.py).
WritePolicyBenchEnv.__doc__ = WritePolicyBenchEnv.__doc__.replace("    {feature_tables}", feature_tables("    "))

