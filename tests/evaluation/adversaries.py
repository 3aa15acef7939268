"""Adversarial policies: each tries to change a score other than through the actions it yields.

Every attacker has a ``tamper`` switch. With ``tamper=False`` it yields exactly the same
actions without the attack, so "the attack has no effect" is checked as: both give the same
metrics. They live in a module of their own (not a test file) so that isolated evaluation's
fresh processes can import them.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any

from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.readonly import thaw
from wpb_gym.core.types import MemoryAction, Step


class Attacker:
    track = "unprivileged"

    def __init__(self, tamper: bool = True, variant: str = "") -> None:
        self.tamper, self.variant = tamper, variant
        self.name = f"{type(self).__name__}({variant or ''}{'' if tamper else ', honest'})"


class WriteAll(Attacker):
    """The honest counterpart of several attacks: WRITE every step, expire nothing."""

    def select(self, step: Step, store: Any):
        yield MemoryAction.write(step)


# -------------------------------------------------------------------- 1. forged MERGE
class ForgeMerge(Attacker):
    """WRITE the first step, then MERGE every later step into it, after editing the shown
    observation in place to equal the base plus one field (then restoring it)."""

    def start_episode(self, context: Any) -> None:
        self.base = None

    def select(self, step: Step, store: Any):
        if self.base is None:
            self.base = step.t
            yield MemoryAction.write(step)
            return
        item = store.get(self.base)
        if item is None:
            return
        obs = step.observation
        if not self.tamper:
            yield MemoryAction.merge(step, self.base)
            return
        saved = thaw(obs)
        dict.clear(obs)  # the base class's methods: the read-only copy's own ones refuse
        dict.update(obs, thaw(item.step.observation))
        dict.__setitem__(obs, "forged", step.t)
        try:
            yield MemoryAction.merge(step, self.base)
        finally:
            dict.clear(obs)
            dict.update(obs, saved)


# -------------------------------------------------------------------- 2. cached cost
class ZeroCost(Attacker):
    """Set the step's cached WRITE cost to 0, then WRITE it."""

    def select(self, step: Step, store: Any):
        if self.tamper:
            step.__dict__["_write_cost"] = 0
            step.__dict__["_observation_json"] = ""
        yield MemoryAction.write(step)


# -------------------------------------------------------------------- 3. the kind read twice
class Liar(str):
    """Equal to anything: "SKIP" when judged, "WRITE" when applied."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class ShiftyAction(MemoryAction):
    """A MemoryAction whose ``action`` reads "SKIP" first and "WRITE" afterwards."""

    def __getattribute__(self, name: str) -> Any:
        if name == "action":
            reads = object.__getattribute__(self, "__dict__").setdefault("_reads", [0])
            reads[0] += 1
            return "SKIP" if reads[0] == 1 else "WRITE"
        return object.__getattribute__(self, name)


class KindFlip(Attacker):
    """WRITE every step with an action whose kind changes between readings."""

    def select(self, step: Step, store: Any):
        action = MemoryAction.write(step)
        if self.tamper and self.variant == "str":
            object.__setattr__(action, "action", Liar("WRITE"))
        elif self.tamper:
            action = ShiftyAction("WRITE", step=step)
            object.__getattribute__(action, "__dict__")["_reads"] = [0]  # construction read it already
        yield action


# -------------------------------------------------------------------- 4. the budget behind the view
class BudgetThief(Attacker):
    """Reach the budget or an item's cost through what the view hands out, then WRITE every step
    (``item_cost``: inflate the oldest item's cost, then EXPIRE it to free more than it held)."""

    def select(self, step: Step, store: Any):
        if self.variant == "item_cost":
            oldest = store.oldest_item()
            if oldest is not None and estimate_bytes(step) > store.remaining():
                if self.tamper:
                    object.__setattr__(oldest, "byte_cost", store.bytes_used)
                yield MemoryAction.expire(oldest.t)
        elif self.tamper and self.variant == "store":
            store._store.budget._max_bytes = 10**9
        elif self.tamper and self.variant == "release":
            store.budget._budget.release(store.bytes_used)
        yield MemoryAction.write(step)


# -------------------------------------------------------------------- 5. other policies' data
class Contaminator(Attacker):
    """Edit everything it is shown (steps, metadata, cached costs) through the base classes; on
    the privileged track it also makes every step's priority look high."""

    def select(self, step: Step, store: Any):
        if self.tamper:
            meta, obs = step.metadata, step.observation
            if isinstance(meta, dict) and "priority" in meta:
                dict.__setitem__(meta, "priority", 1.0)
            if isinstance(obs, dict):
                dict.pop(obs, "api", None)
                dict.__setitem__(obs, "version", -1)
            step.__dict__["_write_cost"] = 0
            object.__setattr__(step, "t", step.t)  # allowed: the same value
        return ()


class Clumsy(Attacker):
    """Pops a key from the observation it is shown, as a careless policy might."""

    def select(self, step: Step, store: Any):
        if self.tamper and isinstance(step.observation, dict):
            step.observation.pop("api", None)
        return ()


class LabelEditor(Attacker):
    """An oracle-track policy that rewrites the labels it is given."""

    track = "oracle"

    def start_episode(self, context: Any) -> None:
        if self.tamper and context.episode is not None:
            labels = context.episode.labels
            labels["critical_steps"] = list(range(context.length))
            labels.get("utility_by_step", {}).clear()

    def select(self, step: Step, store: Any):
        return ()


# -------------------------------------------------------------------- 6. the labels in process
def _find_labels() -> list[int] | None:
    frame = sys._getframe(1)
    while frame is not None:
        episode = frame.f_locals.get("episode")
        labels = getattr(episode, "labels", None)
        if isinstance(labels, dict) and isinstance(labels.get("critical_steps"), (list, tuple)):
            return sorted(int(t) for t in labels["critical_steps"])
        frame = frame.f_back
    for obj in gc.get_objects():
        if isinstance(obj, dict) and isinstance(obj.get("critical_steps"), (list, tuple)) and obj["critical_steps"]:
            return sorted(int(t) for t in obj["critical_steps"])
    return None


class LabelPeeker(Attacker):
    """Search the interpreter's frames and the garbage collector for the labels and WRITE
    exactly the critical steps; without them, WRITE nothing."""

    def start_episode(self, context: Any) -> None:
        self.critical = set(_find_labels() or ()) if self.tamper else set()

    def select(self, step: Step, store: Any):
        if step.t in self.critical:
            yield MemoryAction.write(step)


class TrackLiar(Attacker):
    """Declare the unprivileged track as a ``str`` whose comparisons say yes to every track
    (the oracle's too), then WRITE exactly the critical steps if the labels came with the
    episode's context; without them, WRITE nothing."""

    def __init__(self, tamper: bool = True, variant: str = "unprivileged") -> None:
        super().__init__(tamper, variant)
        self.track = Liar(variant) if tamper else variant

    def start_episode(self, context: Any) -> None:
        episode = context.episode
        self.critical = set(episode.labels.get("critical_steps", ())) if episode is not None else set()

    def select(self, step: Step, store: Any):
        if step.t in self.critical:
            yield MemoryAction.write(step)


# -------------------------------------------------------------------- 7. never stopping
class EndlessYielder(Attacker):
    """Yield SKIP forever at timestep ``at``."""

    def __init__(self, at: int = 0) -> None:
        super().__init__(True, f"at={at}")
        self.at = at

    def select(self, step: Step, store: Any):
        while step.t == self.at:
            yield MemoryAction.skip()
        yield MemoryAction.write(step)


class Sleeper(Attacker):
    """Sleep ``seconds`` inside ``select`` at timestep ``at`` (a slow policy that does return)."""

    def __init__(self, at: int = 2, seconds: float = 1.0) -> None:
        super().__init__(True, f"at={at}")
        self.at, self.seconds = at, seconds

    def select(self, step: Step, store: Any):
        if step.t == self.at:
            time.sleep(self.seconds)
        return (MemoryAction.write(step),)


class Spinner(Attacker):
    """Loop forever inside ``select`` at timestep ``at`` (``stubborn``: swallowing whatever is
    raised to stop it)."""

    def __init__(self, at: int = 2, stubborn: bool = False) -> None:
        super().__init__(True, f"at={at}{', stubborn' if stubborn else ''}")
        self.at, self.stubborn = at, stubborn

    def select(self, step: Step, store: Any):
        if step.t == self.at:
            while True:
                try:
                    while True:
                        pass
                except BaseException:  # noqa: BLE001 - the point of this policy
                    if not self.stubborn:
                        raise
        return (MemoryAction.write(step),)


class Exiter(Attacker):
    """End its own process at timestep ``at``."""

    def __init__(self, at: int = 1) -> None:
        super().__init__(True, f"at={at}")
        self.at = at

    def select(self, step: Step, store: Any):
        if step.t == self.at:
            os._exit(3)
        return ()


class Staller(Attacker):
    """At timestep ``at``, in its own process, begin a reply on the pipe (a length header and no
    body), ignore the interval timer and sleep: the evaluator, reading the reply, waits."""

    def __init__(self, at: int = 1) -> None:
        super().__init__(True, f"at={at}")
        self.at = at

    def select(self, step: Step, store: Any):
        if step.t == self.at:
            import signal
            import struct

            frame = sys._getframe()
            while "conn" not in frame.f_locals:  # the process's main loop holds the pipe
                frame = frame.f_back
            signal.signal(signal.SIGALRM, signal.SIG_IGN)
            os.write(frame.f_locals["conn"].fileno(), struct.pack("!i", 1000))
            time.sleep(600)
        return (MemoryAction.write(step),)


# -------------------------------------------------------------------- found along the way
class DecisionEditor(Attacker):
    """Edit the decision ``check`` returns (decisions of equal cost are shared), then WRITE."""

    def select(self, step: Step, store: Any):
        if self.tamper:
            decision = store.check(MemoryAction.write(step), step.t)
            try:
                object.__setattr__(decision, "byte_delta", 0)
            except (AttributeError, TypeError):
                pass
        yield MemoryAction.write(step)


class Impostor(Step):
    """A step that claims to equal any other."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


class StepImpostor(Attacker):
    """WRITE a tiny step of its own making that claims to be the current one."""

    def select(self, step: Step, store: Any):
        yield MemoryAction.write(Impostor(step.t, {}, {}) if self.tamper else step)


class LyingTarget(int):
    """An int whose hash and equality point at another timestep."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


class TargetLiar(Attacker):
    """EXPIRE the oldest item when the step does not fit, naming it by a lying int; WRITE."""

    def select(self, step: Step, store: Any):
        oldest = store.oldest_item()
        if oldest is not None and estimate_bytes(step) > store.remaining():
            yield MemoryAction.expire(LyingTarget(oldest.t) if self.tamper else oldest.t)
        yield MemoryAction.write(step)


class StorePatcher(Attacker):
    """Patch the store's rules in its own process so that every WRITE is free, then WRITE."""

    def select(self, step: Step, store: Any):
        if self.tamper:
            from wpb_gym.core import store as store_module

            store_module.ByteMemoryStore._check_write = lambda self, step, t: store_module._accepted(0)
        yield MemoryAction.write(step)


class ForgedReply(Attacker):
    """In its own process, rewrite what is sent back: whatever it yielded, every timestep is
    reported as one accepted WRITE (``garbage``: as something that is not an action)."""

    def select(self, step: Step, store: Any):
        if self.tamper:
            from wpb_gym.evaluation.isolated import policy_process

            server = next(o for o in gc.get_objects() if isinstance(o, policy_process.PolicyServer))
            for run in server.runs:
                if not getattr(run.send, "forged", False):
                    run.send = _forging(run.send, self.variant)
        if step.t % 2 == 0:
            yield MemoryAction.write(step)
        else:
            yield MemoryAction.skip()


def _forging(send, variant):
    def forged(message):
        shown, canonical, sink = message
        send(message)
        sink[:] = [[1, True]] if variant != "garbage" else [["WRITE", 10**30, {"x": 1}]]

    forged.forged = True
    return forged


class Refused(Attacker):
    """At every step, EXPIRE ``n`` timesteps that were never stored (each refused), then WRITE
    the step: within the action limit, but ``n`` actions a step for the evaluator to judge."""

    def __init__(self, n: int = 9_999) -> None:
        super().__init__(True, f"n={n}")
        self.n = n

    def select(self, step: Step, store: Any):
        for i in range(self.n):
            yield MemoryAction.expire(10**6 + i)
        yield MemoryAction.write(step)


class HugeDelta(Attacker):
    """WRITE the first step, then MERGE every later one into it with a delta of megabytes
    (refused: it is not the canonical delta)."""

    def select(self, step: Step, store: Any):
        if step.t == 0:
            yield MemoryAction.write(step)
        else:
            yield MemoryAction.merge(step, 0, delta={"x": "a" * 2_000_000})


class FloodedReply(Attacker):
    """In its own process, report ``n`` refused EXPIREs at timestep ``at``, whatever it yielded:
    a reply far longer than the action limit lets one timestep's reply be."""

    def __init__(self, at: int = 2, n: int = 200_000) -> None:
        super().__init__(True, f"at={at}")
        self.at, self.n = at, n

    def select(self, step: Step, store: Any):
        if step.t == self.at:
            from wpb_gym.evaluation.isolated import policy_process

            server = next(o for o in gc.get_objects() if isinstance(o, policy_process.PolicyServer))
            for run in server.runs:
                send = run.send

                def flooded(message, send=send):
                    send(message)
                    message[2][:] = [[3, False, None, 10**6]] * self.n

                run.send = flooded
        yield MemoryAction.write(step)


class ForgedWrites(Attacker):
    """In its own process, edit the list of runs a reply says wrote their step (``writes``):
    add a run that is not its own (``stranger``), a run that also has actions in the reply
    (``twice``), or a JSON ``true`` instead of a run's number (``true``)."""

    def select(self, step: Step, store: Any):
        if self.tamper:
            import json

            if not getattr(json.dumps, "forged", False):
                json.dumps = _forging_writes(json.dumps, self.variant)
        yield MemoryAction.skip()


def _forging_writes(dumps, variant):
    def forged(reply, **options):
        if isinstance(reply, dict) and reply.get("actions"):
            k = reply["actions"][0][0]
            reply["writes"].append({"stranger": k + 1000, "twice": k, "true": True}[variant])
        return dumps(reply, **options)

    forged.forged = True
    return forged


# ---------------------------------------------------------------------------- found in review
_BUILT = [0]


class TrackTurncoat(Attacker):
    """Declares the oracle track to the first reader only (``first``: the first instance built
    in its process; ``reads``: the first read of ``track``), unprivileged to every later one;
    with labels it writes exactly the critical steps."""

    def __init__(self, tamper: bool, how: str = "first") -> None:
        super().__init__(tamper)
        _BUILT[0] += 1
        self._first = _BUILT[0] == 1
        self._how = how
        self._reads = 0
        self._critical: set[int] | None = None

    @property
    def track(self) -> str:  # type: ignore[override]
        self._reads += 1
        lie = self._first if self._how == "first" else self._reads > 1
        return "oracle" if self.tamper and lie else "unprivileged"

    def start_episode(self, context: Any) -> None:
        self._critical = None if context.episode is None else set(context.episode.labels["critical_steps"])

    def select(self, step: Step, store: Any) -> Any:
        if self._critical is None or step.t in self._critical:
            yield MemoryAction.write(step)


class _Grab:
    """Compared with a store's value, keeps it (and says it differs)."""

    got: list[Any] = []

    def __ne__(self, other: Any) -> bool:
        _Grab.got.append(other)
        return True

    def __eq__(self, other: Any) -> bool:
        return not self.__ne__(other)

    __hash__ = object.__hash__


class CanonicalGrabber(Attacker):
    """Asks ``view.check`` about a MERGE of a step of its own making whose values are ``_Grab``s,
    to be handed the stored base's values, then fills every list it got with junk."""

    def select(self, step: Step, store: Any) -> Any:
        if self.tamper:
            for item in store.items():
                if item.kind != "WRITE":
                    continue
                fake = Step(step.t, {"api": item.api, "params": _Grab(), "required": _Grab()}, {})
                _Grab.got.clear()
                try:
                    store.check(MemoryAction.merge(fake, item.t), step.t)
                except TypeError:
                    pass
                for value in _Grab.got:
                    if isinstance(value, list):
                        list.append(value, "junk")
        yield MemoryAction.write(step)


class LongReason(Attacker):
    """Gives every WRITE a reason of a megabyte (reasons are kept, unpriced, with the item)."""

    def select(self, step: Step, store: Any) -> Any:
        yield MemoryAction.write(step, reason="r" * (2**20 if self.tamper else 10))


# -------------------------------------------------------------------- 10. hints across tracks
_HINTS_SEEN: list[float] = []  # the process's memory: what its privileged runs were shown


class HintCarrier(Attacker):
    """An unprivileged policy also played on the privileged track: there it keeps the priority
    hints it is shown; on the unprivileged track it WRITEs every step if it holds any (it could
    rank steps by them) and nothing otherwise. Only its own memory can carry them over."""

    def select(self, step: Step, store: Any):
        priority = step.metadata.get("priority")
        if priority is not None:
            _HINTS_SEEN.append(priority)
        elif _HINTS_SEEN:
            yield MemoryAction.write(step)
