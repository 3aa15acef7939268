"""The env's viewer: a text panel (``ansi``) and the memory over time (``rgb_array``).

``MemoryViewer`` records what the pictures need while an episode runs (the env reports each
stored and expired item, the bytes after each timestep and the last action) and draws from
that record and the env's public state."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .observation.stream_table import KIND_NAMES

if TYPE_CHECKING:  # pragma: no cover
    from .env import WritePolicyBenchEnv

BAR_WIDTH = 40
MAX_RASTER = 400
RENDER_MODES = ("ansi", "rgb_array")


class MemoryViewer:
    """Renders one env in ``mode`` (``"ansi"``, ``"rgb_array"`` or None: nothing to draw)."""

    def __init__(self, mode: str | None) -> None:
        if mode is not None and mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be one of {list(RENDER_MODES)} or None, got {mode!r}")
        self.mode = mode
        self.start()

    def fresh(self) -> MemoryViewer:
        """A viewer of the same mode with nothing recorded."""
        return type(self)(self.mode)

    def start(self) -> None:
        """A new episode: memory is empty."""
        # Only the picture needs the history: item t -> [expired at or None, is_merge].
        self._history: dict[int, list[Any]] | None = {} if self.mode == "rgb_array" else None
        self._bytes: list[int] = []
        self.last_action: tuple[int, str] | None = None  # (the env action, its outcome's reason)

    def stored(self, t: int, is_merge: bool) -> None:
        if self._history is not None:
            self._history[t] = [None, is_merge]

    def expired(self, t: int, at: int) -> None:
        if self._history is not None:
            self._history[t][0] = at

    def time_advanced(self, bytes_used: int) -> None:
        if self._history is not None:
            self._bytes.append(bytes_used)

    @property
    def records(self) -> bool:
        """Whether it needs ``stored``, ``expired`` and ``time_advanced`` (the picture does)."""
        return self._history is not None

    def acted(self, action: int, reason: str) -> None:
        self.last_action = (action, reason)

    @property
    def memory_history(self) -> dict[int, tuple[int | None, bool]]:
        return {s: (expired_at, is_merge) for s, (expired_at, is_merge) in (self._history or {}).items()}

    @property
    def bytes_history(self) -> tuple[int, ...]:
        return tuple(self._bytes)

    def last_action_text(self, name_of: Callable[[int], str] = str) -> str:
        """The last action (named by ``name_of``) and its outcome."""
        if self.last_action is None:
            return "reset"
        action, reason = self.last_action
        return f"{name_of(action)} -> {'accepted' if reason == 'accepted' else 'rejected: ' + reason}"

    def render(self, env: WritePolicyBenchEnv) -> str | np.ndarray | None:
        if self.mode == "ansi":
            return ansi(env)
        return memory_picture(env) if self.mode == "rgb_array" else None


def describe_observation(obs: Any, width: int = 60) -> str:
    """A one-line summary of a step's observation."""
    if isinstance(obs, dict):
        if "api" in obs:
            text = str(obs["api"])
            extras = [f"{k}={obs[k]}" for k in ("version", "deprecated") if k in obs]
            if isinstance(obs.get("params"), list):
                extras.append(f"params={len(obs['params'])}")
            text = f"{text} ({', '.join(extras)})" if extras else text
        elif "section" in obs:
            text = f"doc section {obs['section']!r}"
        elif "old_api" in obs or "new_api" in obs:
            text = f"migration guide {obs.get('old_api')} -> {obs.get('new_api')}"
        else:
            text = json.dumps(obs, sort_keys=True, default=str)
    else:
        text = json.dumps(obs, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def ansi(env: WritePolicyBenchEnv) -> str:
    store = env.store
    budget = store.max_bytes
    used = store.bytes_used
    filled = int(round(BAR_WIDTH * used / budget)) if budget else BAR_WIDTH
    T = len(env.episode)
    lines = [
        f"t={env.t}/{T}  episode={env.episode.episode_id}  regime={env.episode.regime}  track={env.track}",
        f"budget [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {used}/{budget} B "
        f"({100 * used / budget if budget else 100:.1f}%)  items={len(store)}",
        f"last action: {env.last_action_text()}",
    ]
    step = env.current_step
    if step is None:
        lines.append("episode over")
    else:
        kind, cost, priority = env.step_details(step.t)
        lines.append(f"current: {describe_observation(step.observation)}  [{KIND_NAMES[kind]}, {cost} B]")
        if priority is not None:
            lines[-1] += f"  priority={priority:.2f}"
    lines.append(f"{'slot':>4} {'t':>6} {'age':>5} {'action':<6} {'bytes':>6}  content")
    for k, s in enumerate(env.slot_timesteps):
        if s is None:
            lines.append(f"{k:>4} {'-':>6}")
            continue
        item = store.get(s)
        content = describe_observation(item.step.observation, 50)
        lines.append(f"{k:>4} {s:>6} {env.t - s:>5} {item.kind:<6} {item.byte_cost:>6}  {content}")
    hidden = len(store) - sum(1 for s in env.slot_timesteps if s is not None)
    if hidden:
        lines.append(f"     ... {hidden} more item(s) not shown")
    return "\n".join(lines) + "\n"


def memory_picture(env: WritePolicyBenchEnv) -> np.ndarray:
    """An RGB image: which steps memory holds at each timestep (top) and bytes used (bottom).

    Critical steps (hidden labels) are drawn in red, other items in blue, MERGE deltas in
    green: the picture is for people looking at a run, not for policies.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    T = len(env.episode)
    now = env.t
    R = min(T, MAX_RASTER)  # long episodes are binned: the picture stays small
    raster = np.ones((R, R, 3), dtype=np.float32)
    critical = set(env.episode.critical_steps)
    for s, (expired_at, is_merge) in env.memory_history.items():
        end = expired_at if expired_at is not None else now
        if is_merge:
            colour = (0.2, 0.65, 0.3)
        elif s in critical:
            colour = (0.85, 0.15, 0.15)
        else:
            colour = (0.2, 0.35, 0.8)
        raster[s * R // T, s * R // T : max(s * R // T + 1, -(-end * R // T))] = colour
    fig = Figure(figsize=(6, 5), dpi=80)
    canvas = FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, height_ratios=(3, 1), sharex=True)
    top.imshow(raster, aspect="auto", origin="lower", interpolation="nearest", extent=(0, T, 0, T))
    top.axvline(now, color="black", linewidth=0.8)
    top.set_ylabel("stored step")
    top.set_title(f"memory over time (red: critical, blue: other, green: merge), t={now}/{T}", fontsize=8)
    used = env.bytes_history
    bottom.plot(np.arange(1, len(used) + 1), used, color="black", linewidth=1)
    bottom.axhline(env.store.max_bytes, color="grey", linestyle="--", linewidth=0.8)
    bottom.set_ylim(0, max(1, env.store.max_bytes) * 1.05)
    bottom.set_xlim(0, T)
    bottom.set_xlabel("timestep")
    bottom.set_ylabel("bytes")
    fig.tight_layout()
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
