"""The trace simulator's event queue: pops exactly what `heapq` over one list would pop.

A long trace holds a quarter of a million finish events at once, most of them hours ahead
(at hour 12 of google-29d: 247k events, the median 12 h ahead, 6 % due within the hour);
a heap of all of them costs a cache miss at each of its 18 levels per pop. Here only the
events of the buckets already reached (`width` simulated seconds each) are in the heap; the
others wait in their bucket's list, and a bucket is heapified when the heap runs dry. An
event's bucket only grows with its time, so every event in the heap comes before every
event waiting, and the pops are the one heap's, tie for tie.
"""

from __future__ import annotations

import heapq
import math
import sys
from typing import Any

#: Simulated seconds per bucket.
WIDTH_S = 600.0


class EventQueue:
    """(time, seq, ...) tuples, smallest first; `seq` makes every entry distinct."""

    def __init__(self, width_s: float = WIDTH_S) -> None:
        if not width_s > 0:
            raise ValueError(f"bucket width must be positive, not {width_s}")
        self.width_s = width_s
        self._near: list[tuple[Any, ...]] = []  # a heap: the buckets before `_next`
        self._far: dict[int, list[tuple[Any, ...]]] = {}
        self._buckets: list[int] = []  # a heap of the keys of `_far`
        self._next: float = -math.inf  # no bucket reached yet: every event waits
        self._waiting = 0

    def __len__(self) -> int:
        return len(self._near) + self._waiting

    def _bucket(self, time: float) -> int:
        """Time's bucket; an infinite time's is after every finite one's."""
        return sys.maxsize if time == math.inf else math.floor(time / self.width_s)

    def push(self, entry: tuple[Any, ...]) -> None:
        b = self._bucket(entry[0])
        if b < self._next:
            heapq.heappush(self._near, entry)
            return
        waiting = self._far.get(b)
        if waiting is None:
            self._far[b] = [entry]
            heapq.heappush(self._buckets, b)
        else:
            waiting.append(entry)
        self._waiting += 1

    def _reach(self) -> None:
        """The heap ran dry: the next waiting bucket becomes the heap."""
        b = heapq.heappop(self._buckets)
        entries = self._far.pop(b)
        heapq.heapify(entries)
        self._near = entries
        self._waiting -= len(entries)
        self._next = b + 1

    def first(self) -> tuple[Any, ...]:
        """The smallest entry (the queue must not be empty)."""
        if not self._near:
            self._reach()
        return self._near[0]

    def pop(self) -> tuple[Any, ...]:
        if not self._near:
            self._reach()
        return heapq.heappop(self._near)
