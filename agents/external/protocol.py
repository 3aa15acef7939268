"""The agent protocol ``wpb-agent/1``: a write policy as any program that reads JSON lines.

An external agent is an executable. The evaluator writes one JSON object per line to its
standard input and, where a message asks for one, reads one JSON object per line from its
standard output; the agent's standard error is shown as its output. The messages (every
field is always present; ``docs/agent-protocol.md`` has examples):

===========  ===============================================  ===============================
message      fields                                           the agent answers
===========  ===============================================  ===============================
``hello``    ``protocol`` (``"wpb-agent/1"``)                 ``{"protocol": "wpb-agent/1"}``
``episode``  ``episode_id``, ``length`` (T), ``budget_bytes``,  nothing
             ``track``, ``kind_budgets`` (null, or the
             bytes of each content kind with a limit),
             ``write_time`` (null, or ``total``,
             ``per_write``, ``per_kb`` in ticks),
             ``compression`` (null, or ``credit``: what
             a compressed critical step is worth)
``step``     ``t``, ``observation``, ``metadata`` (as the     ``{"actions": [ACTION, ...]}``
             track shows them), ``bytes`` (what a WRITE of
             the step costs), ``compressed_bytes`` (null,
             or what a compressed WRITE of it costs),
             ``memory``: ``bytes_used``,
             ``budget_bytes``, ``items``: ``[t, bytes, api]``
             for each item held, oldest first (``api`` is
             null for a step without one), ``kind_used``
             (null, or the bytes each limited kind holds),
             ``time_left`` (null, or the ticks left),
             ``compressed`` (null, or the ``t`` of each
             item held compressed)
``end``      ``metrics``: the episode's metric row            nothing
===========  ===============================================  ===============================

An ACTION is an object with ``op`` and, as the op needs them, ``target`` (the ``t`` of an item
held) and ``reason`` (a short string, kept in the run's action log):

* the benchmark's own: ``WRITE`` (the current step; with ``"codec": "summary/1"`` compressed,
  where the run allows compression), ``MERGE`` (the current step into the
  item at ``target``, of the same endpoint; ``delta`` may be given and must then equal the
  canonical delta), ``EXPIRE`` (``target``), ``SKIP``;
* a memory system's, as Mem0 names them: ``ADD`` is WRITE; ``UPDATE`` with ``target`` is MERGE
  into it when ``"merge": true`` and otherwise EXPIRE of it then WRITE; ``DELETE`` is EXPIRE of
  ``target``; ``NONE`` is SKIP.

Only ``hello`` and ``step`` are answered; a line written after another message is an error.
``{"actions": []}`` skips. As for every policy, EXPIREs come first and at most one WRITE or
MERGE comes last; the store judges each action (a refused one is refused, not an error). A
reply that is not such an object is an error naming what was wrong. The agent keeps what it
needs of the steps it has seen: memory is described by ``t``, never sent again.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from wpb_gym.core.accounting import estimate_bytes
from wpb_gym.core.compression import CODEC, compressed_cost
from wpb_gym.core.policy import EpisodeContext, EpisodeOutcome, PolicyFailure
from wpb_gym.core.store import StoreView
from wpb_gym.core.types import MemoryAction, Step

PROTOCOL = "wpb-agent/1"
MAX_REASON = 200  # characters of a reason kept; a longer one is an error
OPS = ("WRITE", "MERGE", "EXPIRE", "SKIP", "ADD", "UPDATE", "DELETE", "NONE")
_FIELDS = {"op", "target", "reason", "delta", "merge", "codec"}


class ProtocolError(PolicyFailure):
    """An agent's reply that breaks ``wpb-agent/1``; the message says what was expected."""


def line(message: Mapping[str, Any]) -> bytes:
    """A message as the line the agent reads (UTF-8 JSON, no NaN, one line)."""
    try:
        text = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a {message.get('type')!r} message cannot be written as JSON ({exc})") from None
    return (text + "\n").encode("utf-8")


def hello() -> dict[str, Any]:
    return {"type": "hello", "protocol": PROTOCOL}


def episode_message(context: EpisodeContext) -> dict[str, Any]:
    episode_id = context.episode_id
    if not (episode_id is None or isinstance(episode_id, (str, int))):
        episode_id = str(episode_id)
    return {"type": "episode", "episode_id": episode_id, "length": context.length,
            "budget_bytes": context.budget_bytes, "track": context.track,
            "kind_budgets": context.kind_budgets, "write_time": context.write_time,
            "compression": context.compression}


def step_message(step: Step, store: StoreView) -> dict[str, Any]:
    items = sorted((item.t, item.byte_cost, item.api) for item in store.iter_items())
    limits = store.kind_budgets
    compressing = store.compression is not None
    return {"type": "step", "t": step.t, "observation": step.observation, "metadata": step.metadata,
            "bytes": estimate_bytes(step), "compressed_bytes": compressed_cost(step) if compressing else None,
            "memory": {"bytes_used": store.bytes_used, "budget_bytes": store.max_bytes,
                       "items": [list(item) for item in items],
                       "kind_used": {kind: store.kind_used(kind) for kind, _ in limits} if limits else None,
                       "time_left": store.time_remaining(),
                       "compressed": sorted(item.t for item in store.iter_items() if item.codec is not None)
                       if compressing else None}}


def end_message(outcome: EpisodeOutcome) -> dict[str, Any]:
    metrics = {k: (v if isinstance(v, (int, float)) and math.isfinite(v) else None) for k, v in outcome.metrics.items()}
    return {"type": "end", "metrics": metrics}


def check_hello(reply: bytes) -> None:
    value = _json(reply, "the answer to hello")
    if not isinstance(value, dict) or value.get("protocol") != PROTOCOL:
        raise ProtocolError(f"the answer to hello must be {{\"protocol\": \"{PROTOCOL}\"}}, got {_shown(reply)}")


def actions(reply: bytes, step: Step) -> list[MemoryAction]:
    """The actions a reply to ``step``'s message names (``ProtocolError`` if it is malformed)."""
    value = _json(reply, f"the reply to step {step.t}")
    if not isinstance(value, dict) or set(value) != {"actions"} or not isinstance(value["actions"], list):
        raise ProtocolError(f"step {step.t}: the reply must be {{\"actions\": [...]}}, got {_shown(reply)}")
    out: list[MemoryAction] = []
    for k, raw in enumerate(value["actions"]):
        where = f"step {step.t}: actions[{k}]"
        if out and out[-1].action in ("WRITE", "MERGE"):
            raise ProtocolError(f"{where}: follows a {out[-1].action}, which ends the step's actions (EXPIREs first)")
        out += _action(raw, step, where)
    return out


def _action(raw: Any, step: Step, where: str) -> list[MemoryAction]:
    if not isinstance(raw, dict) or not isinstance(raw.get("op"), str):
        raise ProtocolError(f"{where}: an action is an object with \"op\", got {_short(raw)}")
    extra = sorted(set(raw) - _FIELDS)
    if extra:
        raise ProtocolError(f"{where}: unknown field(s) {extra}; an action has {sorted(_FIELDS)}")
    op = raw["op"]
    if op not in OPS:
        raise ProtocolError(f"{where}: op {op!r} is not one of {', '.join(OPS)}")
    reason = raw.get("reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
        raise ProtocolError(f"{where}: reason must be a string of at most {MAX_REASON} characters")
    needs_target = op in ("MERGE", "EXPIRE", "UPDATE", "DELETE")
    target = raw.get("target")
    if needs_target and (isinstance(target, bool) or not isinstance(target, int)):
        raise ProtocolError(f"{where}: {op} needs \"target\", the t of an item held (an integer), got {target!r}")
    if not needs_target and "target" in raw:
        raise ProtocolError(f"{where}: {op} takes no \"target\"")
    if "delta" in raw and not (op == "MERGE" or (op == "UPDATE" and raw.get("merge") is True)):
        raise ProtocolError(f"{where}: \"delta\" goes with MERGE (or UPDATE with \"merge\": true)")
    if "merge" in raw and (op != "UPDATE" or not isinstance(raw["merge"], bool)):
        raise ProtocolError(f"{where}: \"merge\" is true or false, and only on UPDATE")
    delta = raw.get("delta")
    if delta is not None and not isinstance(delta, dict):
        raise ProtocolError(f"{where}: \"delta\" must be an object")
    if "codec" in raw and (op not in ("WRITE", "ADD") or raw["codec"] != CODEC):
        raise ProtocolError(f"{where}: \"codec\" is \"{CODEC}\", and only on WRITE or ADD")
    if op in ("WRITE", "ADD"):
        if "codec" in raw:
            return [MemoryAction.write_compressed(step, reason=reason)]
        return [MemoryAction.write(step, reason=reason)]
    if op in ("SKIP", "NONE"):
        return [MemoryAction.skip(reason=reason)]
    if op in ("EXPIRE", "DELETE"):
        return [MemoryAction.expire(target, reason=reason)]
    if op == "MERGE" or raw.get("merge") is True:
        return [MemoryAction.merge(step, target, delta, reason=reason)]
    return [MemoryAction.expire(target, reason=reason), MemoryAction.write(step, reason=reason)]  # UPDATE


def _json(reply: bytes, what: str) -> Any:
    try:
        return json.loads(reply.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # (nesting past the parser's depth)
        raise ProtocolError(f"{what} is not a line of JSON ({type(exc).__name__}: {exc}): {_shown(reply)}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _shown(reply: bytes) -> str:
    text = reply.decode("utf-8", errors="replace").strip()
    return repr(text[:120] + ("..." if len(text) > 120 else ""))


def _short(value: Any) -> str:
    return json.dumps(value)[:80]  # (a value decoded from JSON)
