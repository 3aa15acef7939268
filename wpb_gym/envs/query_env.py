"""``QueryTierEnv``: the query tier as a Gymnasium environment (``WritePolicyBench-Queries*-v0``)."""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..core.accounting import estimate_bytes
from ..core.checks import finite, require_finite, require_int
from ..core.setting_values import budget_argument
from ..core.queries import Query
from ..core.store import ByteMemoryStore
from ..core.tracks import check_track, policy_episode, policy_step
from ..core.types import Episode, MemoryAction, MemoryItem, Step
from ..episodes.generators.queries import QueryStream, QueryTierConfig, query_stream
from ..scoring.metrics import score_episode
from ..scoring.queries import checkpoint_answers, episode_queries, queried_state_bytes
from .episode_sampler import EpisodeSampler
from .observation.query_features import ENDPOINT_FEATURES, QueryStreamTracker
from .observation.query_words import ContentTracker, WordBags

SKIP, WRITE, MERGE = 0, 1, 2
GLOBAL_FEATURES = ("progress", "to_checkpoint", "used", "items", "expires_now", "before_first_checkpoint")
CANDIDATE_FEATURES = (*ENDPOINT_FEATURES, "cost", "cost_of_remaining", "fits", "held", "mergeable")
SLOT_FEATURES = (*ENDPOINT_FEATURES, "present", "cost", "age", "stale", "same_endpoint", "is_merge")
DEFAULT_BUDGET_BYTES = 10240
# The final metrics of an endless stream (info["metrics"]).
ENDLESS_METRICS = ("query_accuracy", "rolling_accuracy", "checkpoints", "checkpoints_survived")
ENDLESS_DEFAULTS = {"endless_threshold": 0.5, "endless_window": 10, "endless_ramp": 0.0}
# Contracts the endless stream's tracker remembers per endpoint: a revert restores the one just
# before its breaking change, so the last few are all family_reverts needs.
ENDLESS_TRACKER_HISTORY = 8


class QueryTierEnv(gym.Env):
    """
    ## Description

    The query tier (``docs/query-tier.md``): a stream of endpoint snapshots, each shown when
    the endpoint changes, and checkpoints at which hidden queries about the endpoints' current
    contracts are answered from memory by the reader (``wpb_gym.core.queries``). The agent
    decides, at every endpoint snapshot, whether to WRITE it, MERGE it onto a held snapshot
    of the endpoint, or SKIP it, EXPIRE-ing held items first to make room. Checkpoint steps
    are played by the env itself (there is nothing to decide at them): their queries are
    answered from memory as it is when they arrive, and what they ask is then shown in the
    observation's statistics. Every action goes through the core ``ByteMemoryStore``.

    With ``endless=True`` the stream has no fixed length: the same hidden process runs on (the
    generator's ``QueryStream`` makes it step by step) until the query accuracy of the last
    ``endless_window`` checkpoints falls below ``endless_threshold``, as in Memory Gym's
    endless environments. Its first steps are those of the fixed-length episode of the same
    seed and index, up to the first breaking change whose revert would have fallen past that
    episode's end (the fixed episode drops such a revert; the endless stream keeps it).

    ## Action Space

    ``Discrete(3 + K)``, ``K = slots``:

    | Action | Meaning | Advances time |
    |---|---|---|
    | 0 | SKIP the current snapshot | yes |
    | 1 | WRITE it | yes |
    | 2 | MERGE it onto the newest held WRITE item of its endpoint | yes |
    | 3 .. K+2 | EXPIRE the item in slot ``a - 3`` | no |

    ``action_masks()`` (also ``info["action_mask"]``) is exactly what the store accepts (SKIP
    always). An action the store would reject is played as SKIP and costs
    ``invalid_action_penalty``. ``encode_action`` and ``expose_item`` translate the core's
    ``MemoryAction``s into these (for scripted agents: ``agents.env_adapter``).

    ## Observation Space

    ``Box(0, 1, (n,), float32)``: the global features (``GLOBAL_FEATURES``), the current
    snapshot's endpoint (``CANDIDATE_FEATURES``), then ``K`` slot rows (``SLOT_FEATURES``).
    An endpoint's statistics (``wpb_gym.envs.observation.query_features``) come from the
    stream alone: queries the checkpoints showed, traffic, breaking changes and its family's
    history. Slots show the items of the current endpoint first (newest first), then items
    superseded by a newer snapshot of their endpoint, then the others by increasing share of
    recent queries per byte; ``n = 6 + (F + 5) + K (F + 6)`` with ``F = 24`` (275 at K = 8).

    With ``word_buckets = B > 0`` the candidate's row and each slot's row end with ``2 B``
    features of the endpoint's words (``wpb_gym.envs.observation.query_words``): the hashed bag
    of the words of the contract it first showed, then that of the words its latest breaking
    change touched. In ``queries_medium`` and ``queries_hard`` those words carry most of what
    can be known of an endpoint's clients and of a migration's size before its queries come
    (``docs/query-tier.md``), so a learner that is to infer them needs these; ``n = 6 + (F + 5
    + 2B) + K (F + 6 + 2B)``.

    An endless stream has no horizon: ``progress`` is 0 throughout, and a slot's ``age`` is
    measured against the tier's ``length`` (clipped at 1). Its tracker remembers hashes of
    the last 8 earlier contracts of each endpoint (``family_reverts`` looks for a revert among
    them), the store forgets expired items at every checkpoint and the generator its logs, so
    that nothing the env keeps grows with the steps played but the endpoints' contracts
    themselves (see below).

    ## Rewards

    At each checkpoint, the queries memory answers right there divided by the episode's
    queries: an episode's rewards sum to its query accuracy, less ``expire_cost`` per accepted
    EXPIRE and ``invalid_action_penalty`` per rejected action. An endless stream has no total:
    each checkpoint pays its own accuracy (right / asked, at most 1), so a run's return is the
    number of checkpoints it answered times its mean accuracy.

    ## Episode End

    ``terminated`` once the last step (a checkpoint) is answered; ``truncated`` is always False.
    The final ``info["metrics"]`` holds the offline scorer's metrics of the final memory and
    ``query_accuracy``.

    An endless stream is ``terminated`` at the checkpoint after which the mean accuracy of the
    last ``endless_window`` checkpoints is below ``endless_threshold`` (never before
    ``endless_window`` checkpoints have been answered). It is truncated only by a time limit
    the user adds (``gym.make(..., max_episode_steps=N)``, Gymnasium's ``TimeLimit``). Every
    info of an endless stream holds ``checkpoints`` (answered so far) and, from the first
    checkpoint on, ``rolling_accuracy`` (the mean over the last ``endless_window`` of them);
    the final one adds ``checkpoints_survived`` (those answered before the one that
    ended the run), ``query_accuracy`` (over the whole run) and ``metrics`` with the four.

    Difficulty rises on its own in an endless stream, slowly: changes add parameters a little
    more often than they remove them, so contracts, and what holding an endpoint's state
    costs, grow as it runs. ``endless_ramp`` adds a second rise: each endpoint's chance of a
    popularity jump after a checkpoint grows by ``endless_ramp`` per checkpoint (from the
    tier's ``popularity_jump_prob``, up to 1), so the queries seen say less of those to come.
    Neither is steep: at the default threshold a good policy may run until a time limit stops
    it (``docs/query-tier.md`` has measured runs), so give one.

    ## Arguments

    ```python
    gym.make("wpb_gym:WritePolicyBench-QueriesMedium-v0",   # or QueriesEasy, QueriesHard
             budget_bytes=None, budget_fraction=None, episodes=None, episode_seed=0,
             episode_order="random", slots=8, expire_cost=0.0, invalid_action_penalty=0.0,
             endless=False, endless_threshold=None, endless_window=None, endless_ramp=None,
             word_buckets=0, **query_tier_options)
    ```

    * ``budget_bytes``: memory's budget (10240 when neither it nor ``budget_fraction`` is given).
    * ``budget_fraction``: instead of ``budget_bytes`` (giving both is an error), a budget per
      episode of ``ceil(budget_fraction * queried_state_bytes(episode))``, the bytes the
      queried state takes on average at a checkpoint (``wpb_gym.scoring.queries``), on the
      env's track; for an endless stream, of its first segment: the fixed-length episode of
      the same seed and index (``length`` steps, the tier's own by default). ``info["budget_bytes"]``
      reports the budget of the current episode; ``reset(options={"budget_bytes": B})``
      overrides either for one episode.
    * ``regime`` (``queries_easy``, ``queries_medium``, ``queries_hard``), ``length`` and any
      ``QueryTierConfig`` field (e.g. ``endpoints=1024``) shape generated episodes;
      ``episodes`` plays query-tier episode files instead (e.g. real drift from ``wpb episodes
      add-queries``; not with ``endless``).
    * ``endless``: play the endless stream (see Description); ``endless_threshold`` (0.5, a
      number in [0, 1]), ``endless_window`` (10 checkpoints) and ``endless_ramp`` (0.0, per
      checkpoint, >= 0) shape it and are refused without ``endless=True``.

    * ``word_buckets``: the hashed word features each row ends with (0, none, by default;
      see Observation Space).
    * ``answers=False`` plays episodes without their hidden queries, as a policy sees them
      (e.g. the stream ``wpb eval`` gives a model, which keeps a private copy of this env):
      checkpoints are the steps that show queries, nothing is answered, every reward is 0 and
      the final ``info["metrics"]`` is empty. Not with ``endless``.

    ## Vectorized environment

    ``gym.make_vec(id, num_envs=N)`` steps N of these envs (Gymnasium's ``SyncVectorEnv``).

    ## Version History

    * v0, package 0.9.0: added, with ``endless`` (``endless_threshold``, ``endless_window``,
      ``endless_ramp``), ``budget_fraction`` and ``info["budget_bytes"]``. The tiers' presets
      are those of ``wpb_gym.episodes.generators.queries`` in 0.9.0 (summaries up to 32 KB,
      traffic Poisson around 1x integrations); a later change of a preset gets an entry here.
    * v0, package 0.10.0: ``word_buckets`` added (0 by default: observations as before), and
      ``answers``.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, regime: str = "queries_medium", budget_bytes: int | str | None = None,
                 length: int | None = None, track: str = "unprivileged",
                 episodes: str | os.PathLike[str] | Sequence[Episode] | None = None, episode_seed: int = 0,
                 episode_order: str = "random", slots: int = 8, expire_cost: float = 0.0,
                 invalid_action_penalty: float = 0.0, render_mode: str | None = None,
                 budget_fraction: float | None = None, endless: bool = False,
                 endless_threshold: float | None = None, endless_window: int | None = None,
                 endless_ramp: float | None = None, word_buckets: int = 0, answers: bool = True,
                 **generator_options: Any) -> None:
        self.track = check_track(track)
        if budget_bytes is not None and budget_fraction is not None:
            raise ValueError(f"budget_bytes ({budget_bytes!r}) and budget_fraction ({budget_fraction!r}): "
                             f"expected one of them, not both (a fraction sets the budget per episode)")
        self.budget_fraction = None if budget_fraction is None else _fraction(budget_fraction)
        self.budget_bytes = (DEFAULT_BUDGET_BYTES if budget_bytes is None
                             else budget_argument(budget_bytes, "budget_bytes"))
        self.K = require_int(slots, "slots", 1)
        self.word_buckets = require_int(word_buckets, "word_buckets", 0)
        if not isinstance(answers, (bool, np.bool_)):
            raise ValueError(f"answers must be True or False, got {answers!r}")
        self.answers = bool(answers)
        if not self.answers and endless:
            raise ValueError("answers=False plays given streams; an endless stream is generated with its queries")
        if not self.answers and budget_fraction is not None:
            raise ValueError("answers=False: budget_fraction is of the bytes the queries need, which a stream "
                             "without its queries does not say; give budget_bytes")
        self._bags = WordBags(self.word_buckets) if self.word_buckets else None
        self.expire_cost = require_finite(expire_cost, "expire_cost")
        self.invalid_action_penalty = require_finite(invalid_action_penalty, "invalid_action_penalty")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.render_mode = render_mode
        self._set_endless(endless, endless_threshold, endless_window, endless_ramp, episodes)
        self.sampler = EpisodeSampler(regime=regime, length=length, episodes=episodes, episode_seed=episode_seed,
                                      order=episode_order, generator_options=generator_options)
        F = len(ENDPOINT_FEATURES)
        words = 2 * self.word_buckets
        self.n_features = len(GLOBAL_FEATURES) + len(CANDIDATE_FEATURES) + words + self.K * (len(SLOT_FEATURES) + words)
        assert len(CANDIDATE_FEATURES) == F + 5 and len(SLOT_FEATURES) == F + 6
        self.action_space = spaces.Discrete(3 + self.K)
        self.observation_space = spaces.Box(0.0, 1.0, (self.n_features,), np.float32)
        self.reset_count = 0
        self._episode: Episode | None = None
        # The valid actions now, once asked (None: not yet). The observation, the info and a
        # masked policy (SB3's MaskablePPO asks the env) each want them for the same state.
        self._mask: np.ndarray | None = None
        self._stream: QueryStream | None = None

    def _set_endless(self, endless: Any, threshold: Any, window: Any, ramp: Any, episodes: Any) -> None:
        if not isinstance(endless, (bool, np.bool_)):
            raise ValueError(f"endless must be True or False, got {endless!r}")
        self.endless = bool(endless)
        given = {"endless_threshold": threshold, "endless_window": window, "endless_ramp": ramp}
        if not self.endless:
            named = [name for name, value in given.items() if value is not None]
            if named:
                raise ValueError(f"{', '.join(named)}: shape endless streams only; pass endless=True with them")
            self.endless_threshold = self.endless_window = self.endless_ramp = None
            return
        if episodes is not None:
            raise ValueError("endless=True generates its stream step by step; episodes= (a fixed-length "
                             "source) cannot be played without an end: leave episodes out")
        values = {name: ENDLESS_DEFAULTS[name] if value is None else value for name, value in given.items()}
        threshold = values["endless_threshold"]
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.number)) \
                or not finite(threshold) or not 0.0 <= threshold <= 1.0:
            raise ValueError(f"endless_threshold must be a query accuracy in [0, 1], got {threshold!r}")
        ramp = values["endless_ramp"]
        if isinstance(ramp, bool) or not isinstance(ramp, (int, float, np.number)) or not finite(ramp) or ramp < 0:
            raise ValueError(f"endless_ramp must be a finite number >= 0 (per checkpoint), got {ramp!r}")
        self.endless_threshold = float(threshold)
        self.endless_window = require_int(values["endless_window"], "endless_window", 1)
        self.endless_ramp = float(ramp)

    # ------------------------------------------------------------------ reading
    @property
    def episode(self) -> Episode:
        """The current episode, with its hidden labels (for scoring and teachers, not policies).
        An endless stream has none (``stream`` is its generator)."""
        if self.endless:
            raise RuntimeError("an endless stream has no episode object: its steps are made as they come "
                               "(env.stream is its generator)")
        if self._episode is None:
            raise RuntimeError("call reset() first")
        return self._episode

    @property
    def stream(self) -> QueryStream:
        """The generator of the current endless stream (hidden state included: not for policies)."""
        if self._stream is None:
            raise RuntimeError("no endless stream: pass endless=True and call reset()")
        return self._stream

    @property
    def store(self) -> ByteMemoryStore:
        """The memory of the current episode (change it through ``step`` only)."""
        self._require_reset()
        return self._store

    @property
    def t(self) -> int:
        return self._t

    def current_step(self) -> Step:
        """The snapshot the agent decides on now, as the track shows it."""
        self._require_reset()
        return self._step_at(self._t)

    def slot_items(self) -> list[MemoryItem | None]:
        """The items the K slots show now (None for an empty slot)."""
        return list(self._slots)

    def is_over(self) -> bool:
        """Whether the current episode (or endless stream) has ended."""
        return self._ended if self.endless else self._t >= len(self._steps)

    def _require_reset(self) -> None:
        if self._episode is None and self._stream is None:
            raise RuntimeError("call reset() first")

    # ------------------------------------------------------------------ episode start
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - {"episode_index", "budget_bytes", "episode"})
        if unknown:
            raise ValueError(f"reset options {unknown} are not known; expected some of episode_index, budget_bytes, "
                             f"episode")
        if seed is not None:
            self.sampler.restart()
        if self.endless and options.get("episode") is not None:
            raise ValueError("options['episode']: an endless stream is generated, not given; "
                             "choose it with options['episode_index']")
        budget = options.pop("budget_bytes", None)
        if budget is not None:
            budget = budget_argument(budget, "options['budget_bytes']")
        if self.endless:
            recipe, self.episode_index = self.sampler.choose(self.np_random, options, recipe=True)
            config: QueryTierConfig = recipe.config
            self._config = config
            self._stream = query_stream(config, recipe.seed, recipe.index, jump_ramp=self.endless_ramp)
            if budget is None:
                # The fraction is of the first segment: the fixed-length episode this stream begins as.
                budget = self._budget_for(recipe.make) if self.budget_fraction is not None else self.budget_bytes
            self._steps: list[Step] | None = None
            self._queries_total = 0
            self._current: Step | None = None
            self._current_asked: list[Query] | None = None
            self._rolling: deque[float] = deque(maxlen=self.endless_window)
            self._checkpoints_done = 0
            self._ended = False
            self._tracker = QueryStreamTracker(history=ENDLESS_TRACKER_HISTORY)
        else:
            episode, self.episode_index = self.sampler.choose(self.np_random, options)
            shown = [step.t for step in episode.steps if _shows_queries(step.observation)]
            if not (episode_queries(episode) if self.answers else shown):
                raise ValueError(f"episode {episode.episode_id!r} ({episode.regime}) has no queries: the query "
                                 f"tier's env plays query-tier episodes only")
            if budget is None:
                budget = (self._budget_for(lambda: episode) if self.budget_fraction is not None
                          else self.budget_bytes)
            self._episode = episode
            self._steps = policy_episode(episode, self.track).steps
            self._queries = episode_queries(episode) if self.answers else ()
            self._queries_total = len(self._queries)
            self._asked_at: dict[int, list] = {}
            for query in self._queries:
                self._asked_at.setdefault(query.t, []).append(query)
            self._checkpoints = sorted(self._asked_at) if self.answers else shown
            self._tracker = QueryStreamTracker()
        self._store = ByteMemoryStore(budget)
        self._mask = None
        self._content = ContentTracker() if self._bags is not None else None
        self._word_rows: dict[str, np.ndarray] = {}
        self._latest_show: dict[str, int] = {}
        self._t = 0
        self._expires_now = 0
        self._answered = 0
        self.reset_count += 1
        self._arrive()
        return self._observation(), self._info(True, "accepted", done=False)

    def _budget_for(self, make_episode: Any) -> int:
        assert self.budget_fraction is not None
        episode = make_episode()
        return math.ceil(self.budget_fraction * queried_state_bytes(episode, self.track))

    # ------------------------------------------------------------------ the stream
    def _step_at(self, t: int) -> Step:
        """The step at ``t`` as the track shows it (in an endless stream: the current one, or the
        next, which is then made and the one before it dropped)."""
        if self._steps is not None:
            return self._steps[t]
        if self._current is None or self._current.t != t:
            made = next(self.stream)
            if made.t != t:  # pragma: no cover - the env reads its stream in order
                raise AssertionError(f"the endless stream is at step {made.t}, the env at {t}")
            self._current = policy_step(Step(made.t, made.observation, made.metadata), self.track)
            self._current_asked = ([Query(t, *query) for query in made.asked] if made.asked is not None
                                   else None)
        return self._current

    def _asked(self, t: int) -> list[Query] | None:
        if self._steps is not None:
            return self._asked_at.get(t)
        return self._current_asked

    # ------------------------------------------------------------------ dynamics
    def _arrive(self) -> float:
        """Bring time to the next snapshot to decide on, playing checkpoint steps on the way (their
        queries answered from memory as they arrive); the reward they pay."""
        reward = 0.0
        self._passed: list[Step] = []
        while not self.is_over():
            step = self._step_at(self._t)
            asked = self._asked(self._t)
            if asked:
                right = sum(checkpoint_answers(self._store.held_at(self._t), asked))
                self._answered += right
                if self.endless:
                    reward += self._endless_checkpoint(right, len(asked))
                else:
                    reward += right / len(self._queries)
            self._tracker.step(step.observation, step.metadata)
            if self._content is not None:
                self._content.step(step.observation)
                if isinstance(step.observation, dict):
                    self._word_rows.pop(step.observation.get("api"), None)  # its words may have moved
            obs = step.observation
            if isinstance(obs, dict) and isinstance(obs.get("api"), str) and not asked:
                self._latest_show[obs["api"]] = self._t
                self._expires_now = 0
                self._arrange_slots()
                return reward
            self._passed.append(step)
            self._store.skip(self._t)
            self._t += 1
        return reward

    @property
    def passed_steps(self) -> tuple[Step, ...]:
        """The steps the env played itself (checkpoints) since the last one decided on, in order,
        as the track shows them: what a policy driving the env sees of them."""
        self._require_reset()
        return tuple(self._passed)

    def _endless_checkpoint(self, right: int, asked: int) -> float:
        """Count a checkpoint of the endless stream; its reward. It ends the run when the window is
        full and its mean accuracy is below the threshold."""
        accuracy = right / asked
        self._queries_total += asked
        self._checkpoints_done += 1
        self._rolling.append(accuracy)
        if len(self._rolling) == self.endless_window and self.rolling_accuracy() < self.endless_threshold:
            self._ended = True
        # Readings are of the moment a checkpoint arrives: nothing earlier is read again.
        self._store.forget_before(self._t)
        return accuracy

    def rolling_accuracy(self) -> float:
        """The mean accuracy of the last ``endless_window`` checkpoints of an endless stream (NaN
        before its first checkpoint)."""
        return float(np.mean(self._rolling)) if self._rolling else math.nan

    def step(self, action: Any):
        if (self._episode is None and self._stream is None) or self.is_over():
            raise RuntimeError("the episode is over: call reset()")
        action = int(action)
        mask = self.action_masks()
        self._mask = None  # whatever it does, the action changes what is valid next
        step = self._step_at(self._t)
        reward = 0.0
        if not 0 <= action < len(mask) or not mask[action]:
            self._store.skip(self._t)
            reason = "rejected"
            reward -= self.invalid_action_penalty
            accepted = False
            self._t += 1
        elif action >= 3:
            target = self._slots[action - 3]
            self._store.expire(target.t, self._t)
            self._expires_now += 1
            reward -= self.expire_cost
            self._arrange_slots()
            return self._observation(), reward, False, False, self._info(True, "accepted", done=False)
        else:
            if action == WRITE:
                self._store.write(step, self._t)
            elif action == MERGE:
                self._store.execute(MemoryAction.merge(step, self._merge_target().t), self._t)
            else:
                self._store.skip(self._t)
            reason, accepted = "accepted", True
            self._t += 1
        reward += self._arrive()
        done = self.is_over()
        observation = self._observation() if not done else np.zeros(self.n_features, dtype=np.float32)
        return observation, reward, done, False, self._info(accepted, reason, done=done)

    def _merge_target(self) -> MemoryItem | None:
        api = self._step_at(self._t).observation["api"]
        bases = [item for item in self._store.iter_items() if item.kind == "WRITE" and item.api == api]
        return max(bases, key=lambda item: item.t) if bases else None

    def action_masks(self) -> np.ndarray:
        if self._mask is None:
            self._mask = self._valid_actions()
        return self._mask.copy()

    def _valid_actions(self) -> np.ndarray:
        mask = np.zeros(3 + self.K, dtype=bool)
        mask[SKIP] = True
        if self.is_over():
            return mask
        step = self._step_at(self._t)
        mask[WRITE] = self._store.check(MemoryAction.write(step), self._t).accepted
        target = self._merge_target()
        if target is not None:
            mask[MERGE] = self._store.check(MemoryAction.merge(step, target.t), self._t).accepted
        for k, item in enumerate(self._slots):
            mask[3 + k] = item is not None and item.t < self._t
        return mask

    # ------------------------------------------------------------------ MemoryActions
    def encode_action(self, action: MemoryAction) -> int | None:
        """The env action for ``action`` now (None when no env action plays it: a MERGE onto
        another item than the newest WRITE of the endpoint, or an EXPIRE of an item no slot shows,
        which ``expose_item`` can show first)."""
        kind = action.action
        if kind == "SKIP":
            return SKIP
        if kind == "WRITE":
            return WRITE
        if kind == "MERGE":
            target = self._merge_target()
            return MERGE if target is not None and target.t == action.target_t else None
        for k, item in enumerate(self._slots):
            if item is not None and item.t == action.target_t:
                return 3 + k
        return None

    def decode_action(self, action: int) -> MemoryAction:
        """The ``MemoryAction`` env action ``action`` stands for now (SKIP for an empty slot, a
        MERGE with nothing to merge onto, or after the episode's end)."""
        a = int(action)
        if not 0 <= a < 3 + self.K:
            raise ValueError(f"action {action!r} is not in Discrete({3 + self.K})")
        if a == SKIP or self.is_over():
            return MemoryAction.skip()
        step = self._step_at(self._t)
        if a == WRITE:
            return MemoryAction.write(step)
        if a == MERGE:
            target = self._merge_target()
            return MemoryAction.skip() if target is None else MemoryAction.merge(step, target.t)
        item = self._slots[a - 3]
        return MemoryAction.skip() if item is None else MemoryAction.expire(item.t)

    def expose_item(self, t: int) -> int:
        """Show stored item ``t`` in a slot and return the slot index: an item the layout does not
        show takes the last slot until the layout is next arranged. The mask follows; the
        observation already returned does not."""
        if self.is_over():
            raise RuntimeError("the episode is over: call reset() first")
        item = self._store.get(t)
        if item is None:
            raise ValueError(f"memory holds no item at timestep {t}")
        for k, shown in enumerate(self._slots):
            if shown is not None and shown.t == t:
                return k
        self._slots[self.K - 1] = item
        self._mask = None
        return self.K - 1

    # ------------------------------------------------------------------ observation
    def _arrange_slots(self) -> None:
        api = self._step_at(self._t).observation["api"]
        features = self._tracker.features
        asked_mid = ENDPOINT_FEATURES.index("asked_mid")

        def order(item: MemoryItem) -> tuple:
            if item.api == api:
                return (0, -item.t)
            if item.t < self._latest_show.get(item.api, item.t):
                return (1, item.t)
            return (2, (features(item.api)[asked_mid] + 0.01) / item.byte_cost, item.t)

        items = sorted(self._store.iter_items(), key=order)[: self.K]
        self._slots: list[MemoryItem | None] = items + [None] * (self.K - len(items))
        self._mask = None

    def _schedule(self, t: int) -> tuple[float, float, int, bool, int]:
        """(progress, age scale, the next checkpoint, a checkpoint passed?, checkpoint gap) at ``t``."""
        if self._steps is not None:
            T = len(self._steps)
            nxt = next((c for c in self._checkpoints if c > t), T - 1)
            gap = (self._checkpoints[1] - self._checkpoints[0]) if len(self._checkpoints) > 1 else T
            return t / T, float(T), nxt, any(c <= t for c in self._checkpoints), gap
        c = self._config
        first = c.endpoints + c.checkpoint_interval - 1
        nxt = first if t <= first else first + -(-(t - first) // c.checkpoint_interval) * c.checkpoint_interval
        return 0.0, float(c.length), nxt, t > first, c.checkpoint_interval

    def _observation(self) -> np.ndarray:
        store, t = self._store, self._t
        budget = max(store.max_bytes, 1)
        step = self._step_at(t)
        api = step.observation["api"]
        progress, age_scale, nxt, passed, gap = self._schedule(t)
        cost = estimate_bytes(step)
        held = [item for item in store.iter_items() if item.api == api]
        mask = self.action_masks()
        row = [progress, min(1.0, (nxt - t) / max(gap, 1)), store.bytes_used / budget, min(1.0, len(store) / 64),
               min(1.0, self._expires_now / 8), 0.0 if passed else 1.0]
        parts = [np.asarray(row, dtype=np.float32), self._tracker.features(api),
                 np.asarray([min(1.0, cost / budget), min(1.0, cost / max(store.remaining(), 1)),
                             float(mask[WRITE]), float(bool(held)), float(mask[MERGE])], dtype=np.float32)]
        if self._bags is not None:
            parts.append(self._words(api))
        for item in self._slots:
            if item is None:
                parts.append(np.zeros(len(SLOT_FEATURES) + 2 * self.word_buckets, dtype=np.float32))
                continue
            stale = item.t < self._latest_show.get(item.api, item.t)
            parts.append(self._tracker.features(item.api))
            parts.append(np.asarray([1.0, min(1.0, item.byte_cost / budget), (t - item.t) / age_scale, float(stale),
                                     float(item.api == api), float(item.kind == "MERGE")], dtype=np.float32))
            if self._bags is not None:
                parts.append(self._words(item.api))
        return np.clip(np.concatenate(parts), 0.0, 1.0).astype(np.float32)

    def _words(self, api: str) -> np.ndarray:
        """The word features of ``api`` (kept until the endpoint is next shown)."""
        assert self._bags is not None and self._content is not None
        row = self._word_rows.get(api)
        if row is None:
            row = self._word_rows[api] = self._bags.features(self._content, api)
        return row

    def _info(self, accepted: bool, reason: str, *, done: bool) -> dict[str, Any]:
        info: dict[str, Any] = {
            "t": self._t,
            "accepted": accepted,
            "reason": reason,
            "bytes_used": self._store.bytes_used,
            "budget_bytes": self._store.max_bytes,
            "queries_answered": self._answered,
            "queries_asked": self._queries_total,
        }
        if self.endless:
            info["checkpoints"] = self._checkpoints_done
            if self._rolling:  # a NaN before the first would make equal runs' infos differ
                info["rolling_accuracy"] = self.rolling_accuracy()
        if done and self.endless:
            accuracy = self._answered / self._queries_total if self._queries_total else 0.0
            info["checkpoints_survived"] = self._checkpoints_done - 1
            info["query_accuracy"] = accuracy
            info["metrics"] = {"query_accuracy": accuracy, "rolling_accuracy": info["rolling_accuracy"],
                               "checkpoints": self._checkpoints_done,
                               "checkpoints_survived": info["checkpoints_survived"]}
        elif done and not self.answers:
            info["metrics"] = {}  # nothing was asked: nothing to score
        elif done:
            metrics = score_episode(self._episode, self._store, track=self.track).as_row()
            metrics["query_accuracy"] = self._answered / len(self._queries)
            info["metrics"] = metrics
            info["query_accuracy"] = metrics["query_accuracy"]
        else:
            info["action_mask"] = self.action_masks()
        return info

    def render(self) -> str | None:
        if self.render_mode != "ansi" or (self._episode is None and self._stream is None):
            return None
        where = f"t={self._t}" if self.endless else f"t={self._t}/{len(self._steps)}"
        lines = [(f"{where} used {self._store.bytes_used}/{self._store.max_bytes} B, "
                  f"answered {self._answered}/{self._queries_total}")]
        if self.endless:
            lines[0] += f", rolling accuracy {self.rolling_accuracy():.3f} over {len(self._rolling)} checkpoints"
        lines += [f"  slot {k}: t={item.t} {item.api} {item.byte_cost} B" for k, item in enumerate(self._slots)
                  if item is not None]
        return "\n".join(lines)


def _shows_queries(observation: Any) -> bool:
    """Whether a step's observation is a checkpoint's (its queries, without their answers)."""
    return isinstance(observation, dict) and "queries" in observation and "api" not in observation


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not finite(value) or value <= 0:
        raise ValueError(f"budget_fraction must be a finite number > 0 (of the queried state's bytes), got {value!r}")
    return float(value)
