"""How an action crosses from a policy's process to the evaluator: compact JSON.

An action the policy's replica of its memory accepted, without a reason, travels as one
integer; any other as a list ``[code, accepted, reason, target_t, delta, delta_is_json]``
with the fields after ``accepted`` left off when they hold nothing (``accepted`` is what the
replica decided; the evaluator judges again):

=========  ==========================================  ========  ==========================
code       action                                      accepted  otherwise
=========  ==========================================  ========  ==========================
0          SKIP                                        ``-2``    —
1          WRITE of the current step                   ``-1``    ``[1,false,"fits"]``
2          MERGE of the current step into ``target``   —         ``[2,true,null,7,{"v":2},true]``
3          EXPIRE of ``target``                        ``7``     ``[3,false,null,7]``
4          compressed WRITE of the current step        —         ``[4,true]``
=========  ==========================================  ========  ==========================

So ``[7,-1]`` says "EXPIRE 7, then WRITE the step", both accepted: the shape most actions of a
policy that evicts take (a list of four-field actions was three quarters of what crossed the
pipe on the paper grid). A supplied MERGE delta that is not JSON travels as ``null`` with
``delta_is_json`` false. The decoder checks every field's exact type: what arrives is the
policy's data, and whatever it sends decodes to an action some policy could have taken.

Most runs, most timesteps, take exactly one action, an accepted WRITE of the current step with
no reason (``ONE_WRITE``): a reply lists those runs by number alone, which is cheaper on both
sides of the pipe than a list of actions per run (``wpb_gym.evaluation.isolated.policy_process``).
"""

from __future__ import annotations

from typing import Any

from ...core.types import COMPRESSION_CODEC
from ..referee import MAX_REASON_CHARS, NOT_JSON, PlainAction

__all__ = ["ONE_WRITE", "SKIPPED", "WROTE", "decode_action", "encode_action"]

CODES = {"SKIP": 0, "WRITE": 1, "MERGE": 2, "EXPIRE": 3}
COMPRESSED_WRITE = 4
KINDS = ("SKIP", "WRITE", "MERGE", "EXPIRE")
WROTE = -1  # an accepted WRITE of the current step, without reason
SKIPPED = -2  # a SKIP (never refused; its reason stays in the policy's process)
# A run's actions at one timestep when they are one accepted WRITE of the step, without reason.
ONE_WRITE = [WROTE]


def encode_action(plain: PlainAction, accepted: bool) -> int | list[Any]:
    """The wire form of a normalised action and the replica's verdict on it."""
    kind, target, delta, reason = plain
    code = CODES[kind]
    if code == 1 and delta is not None:  # a WRITE's third field is its codec (referee.PlainAction)
        return [COMPRESSED_WRITE, accepted] if reason is None else [COMPRESSED_WRITE, accepted, reason]
    if accepted and (reason is None or code == 0):
        if code == 1:
            return WROTE
        if code == 0:
            return SKIPPED
        if code == 3 and target >= 0:  # (an accepted EXPIRE's target always is)
            return target
    if code == 2:
        is_json = delta is not NOT_JSON
        return [2, accepted, reason, target, delta if is_json else None, is_json]
    if code == 3:
        return [3, accepted, reason, target]
    return [code, accepted] if reason is None or code == 0 else [code, accepted, reason]


def decode_action(raw: Any) -> tuple[PlainAction, bool] | None:
    """The normalised action and the replica's verdict, or None if ``raw`` is not well formed."""
    if type(raw) is int:  # (a JSON true is a bool, not an int)
        if raw >= 0:
            return ("EXPIRE", raw, None, None), True
        if raw == WROTE:
            return ("WRITE", None, None, None), True
        return (("SKIP", None, None, None), True) if raw == SKIPPED else None
    if type(raw) is not list or not 2 <= len(raw) <= 6:
        return None
    code, accepted, *rest = raw
    if type(code) is not int or type(accepted) is not bool:
        return None
    reason = rest[0] if rest else None
    if reason is not None and (type(reason) is not str or len(reason) > MAX_REASON_CHARS):
        return None
    if code in (0, 1) and len(rest) <= 1:
        return (KINDS[code], None, None, None if code == 0 else reason), accepted
    if code == COMPRESSED_WRITE and len(rest) <= 1:
        return ("WRITE", None, COMPRESSION_CODEC, reason), accepted
    if code == 3 and len(rest) == 2 and type(rest[1]) is int:
        return ("EXPIRE", rest[1], None, reason), accepted
    if code == 2 and len(rest) == 4 and type(rest[1]) is int and type(rest[3]) is bool:
        delta, is_json = rest[2], rest[3]
        if not is_json and delta is not None:
            return None
        return ("MERGE", rest[1], delta if is_json else NOT_JSON, reason), accepted
    return None
