"""The sub-envs' episode arrays, held in three buffers that the compiled step slices.

Each sub-env plays from three arrays (``episode_arrays``: ``static`` int32, ``floats`` float64,
``state`` int32). Held as items of numba typed lists, every step took three items out of them
per sub-env, and a typed list's item costs a call and a reference count: about 20 ns each, a
tenth of a step at N = 256. Here each kind lives in one buffer, sub-env ``i``'s array being
``buffer[at:at + length]`` with ``at`` and ``length`` in ``spans[i]`` (static, floats, state:
columns 0-1, 2-3, 4-5), and the step slices it for free (``episode``; a slice of an array the
caller holds needs no counting, see ``borrowing``).

A sub-env keeps its segment while its next episode fits in it; one that does not is given a new
segment, a quarter larger than it needs, at the buffer's end (its old one is garbage from
then on). When the end is reached, the live segments are copied into a new buffer of twice
their size and the room asked for.
An array read from Python (``views``) is a view of the current buffer: read it again after a
sub-env is placed, as the buffer may have moved.
"""

from __future__ import annotations

import numpy as np

from .borrowing import borrowing_inline

_KINDS = (np.int32, np.float64, np.int32)
_FIRST_SIZE = 1 << 12


class Arenas:
    """The three buffers of ``n`` sub-envs, their ``spans`` and each segment's ``capacity``."""

    def __init__(self, n: int) -> None:
        self.buffers = [np.zeros(_FIRST_SIZE, dtype=kind) for kind in _KINDS]
        self.spans = np.zeros((n, 6), dtype=np.int64)
        self.capacity = np.zeros((n, 3), dtype=np.int64)
        self.ends = [0, 0, 0]

    def fit(self, i: int, sizes: tuple[int, int, int]) -> None:
        """Give sub-env ``i`` room for arrays of these sizes, to be written: its segments where
        they are big enough (what they held is left there), else new ones. If a buffer cannot
        grow (say, out of memory), the sub-env is left holding no arrays and the error raised."""
        try:
            for kind, size in enumerate(sizes):
                if size > self.capacity[i, kind]:
                    room = size + size // 4
                    if self.ends[kind] + room > len(self.buffers[kind]):
                        self.capacity[i, kind] = 0  # its old segment is garbage: not copied
                        self._compact(kind, room)
                    self.spans[i, 2 * kind] = self.ends[kind]
                    self.capacity[i, kind] = room
                    self.ends[kind] += room
                self.spans[i, 2 * kind + 1] = size
        except BaseException:
            self.release(i)
            raise

    def _compact(self, kind: int, room: int) -> None:
        """A new buffer for ``kind``, twice the live segments and ``room``, with them copied in."""
        capacity = self.capacity[:, kind]
        old = self.buffers[kind]
        new = np.zeros(max(2 * (int(capacity.sum()) + room), _FIRST_SIZE), dtype=old.dtype)
        at = 0
        for i in np.flatnonzero(capacity).tolist():
            start, length = int(self.spans[i, 2 * kind]), int(self.spans[i, 2 * kind + 1])
            new[at:at + length] = old[start:start + length]
            self.spans[i, 2 * kind] = at
            at += int(capacity[i])
        self.buffers[kind] = new
        self.ends[kind] = at

    def put(self, i: int, static: np.ndarray, floats: np.ndarray, state_size: int) -> None:
        """Sub-env ``i``'s arrays: copies of ``static`` and ``floats``, and room for its state."""
        self.fit(i, (len(static), len(floats), state_size))
        held_static, held_floats, _ = self.views(i)
        held_static[:] = static
        held_floats[:] = floats

    def views(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sub-env ``i``'s three arrays, as views of the current buffers."""
        span = self.spans[i].tolist()
        return tuple(buffer[span[2 * k]:span[2 * k] + span[2 * k + 1]] for k, buffer in enumerate(self.buffers))

    def release(self, i: int) -> None:
        """Sub-env ``i`` holds no arrays (its segments are garbage)."""
        self.spans[i] = 0
        self.capacity[i] = 0


@borrowing_inline
def episode(statics, floats, states, spans, i):
    """Sub-env ``i``'s ``(static, floats, state)``: slices of the buffers."""
    return (statics[spans[i, 0]:spans[i, 0] + spans[i, 1]], floats[spans[i, 2]:spans[i, 2] + spans[i, 3]],
            states[spans[i, 4]:spans[i, 4] + spans[i, 5]])
