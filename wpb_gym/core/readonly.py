"""Read-only JSON containers: what a policy is shown of a step's observation.

The evaluator shows a policy its own copy of every step (see ``wpb_gym.evaluation.playing``), its
observation made of these containers. They are ``dict`` and ``list`` subclasses, so a policy reads them exactly
as it reads plain JSON (``isinstance(obs, dict)``, ``json.dumps``, ``==`` with plain values
all behave as before), but the mutating methods raise ``TypeError``: a policy that edits what
it was shown by mistake (``obs.pop("api")``) fails at once instead of silently changing what
its other runs see. Its copy is private to it, so even a deliberate edit through the base
class (``dict.__setitem__(obs, ...)``) reaches no other policy and no judgement: the store
judges and prices every action from the evaluator's own canonical copy of the step.

``freeze(value)`` builds the read-only copy of a JSON-like value; ``thaw(value)`` a plain,
editable one.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["ReadOnlyDict", "ReadOnlyList", "freeze", "thaw"]


def _refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(
        f"this {type(self).__name__} is read-only: it is part of a step or memory item shown to a policy; "
        "copy it first (wpb_gym.core.readonly.thaw(value), or dict(value) / list(value)) to edit the copy"
    )


class ReadOnlyDict(dict):
    """A ``dict`` whose mutating methods raise ``TypeError`` (see the module docstring)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __new__(cls, *args: Any, **kwargs: Any) -> ReadOnlyDict:
        self = dict.__new__(cls)
        dict.__init__(self, *args, **kwargs)  # filled once, here: __init__ does nothing
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass  # dict.__init__ would refill an existing object: obs.__init__(...) must not edit it

    def __reduce__(self) -> tuple[Any, ...]:
        # The default reduction would rebuild the dict through __setitem__, which refuses.
        return (ReadOnlyDict, (dict(self),))


class ReadOnlyList(list):
    """A ``list`` whose mutating methods raise ``TypeError`` (see the module docstring)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __new__(cls, *args: Any) -> ReadOnlyList:
        self = list.__new__(cls)
        list.__init__(self, *args)  # filled once, here: __init__ does nothing
        return self

    def __init__(self, *args: Any) -> None:
        pass  # list.__init__ would clear and refill an existing object

    def __reduce__(self) -> tuple[Any, ...]:
        return (ReadOnlyList, (list(self),))


# Values shared as they are: immutable, and JSON has nothing else below dicts and lists.
_ATOMS = frozenset({str, int, float, bool, type(None)})


def freeze(value: Any) -> Any:
    """A read-only deep copy of the JSON-like ``value`` (dicts, lists and tuples are rebuilt).

    Tuples stay tuples, with their contents frozen; any other object is returned as it is
    (the benchmark's episodes hold only JSON values).
    """
    kind = type(value)
    if kind in _ATOMS:
        return value
    # Copied whole in C first; only the values that are containers are then replaced by
    # their own frozen copies (through the base class: the copy's own methods refuse).
    if isinstance(value, dict):
        frozen = ReadOnlyDict(value)
        for key, item in value.items():
            if type(item) not in _ATOMS:
                dict.__setitem__(frozen, key, freeze(item))
        return frozen
    if isinstance(value, list):
        frozen = ReadOnlyList(value)
        if not all(map(_ATOMS.__contains__, map(type, value))):
            for index, item in enumerate(value):
                if type(item) not in _ATOMS:
                    list.__setitem__(frozen, index, freeze(item))
        return frozen
    if isinstance(value, tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A plain, editable deep copy of ``value`` (read-only containers become ``dict`` and ``list``)."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(v) for v in value]
    if isinstance(value, tuple):
        return tuple(thaw(v) for v in value)
    return value
