"""Executors starting on the one machine of an emulated cluster (docs/emulation.md).

On an emulated cluster the tasks' work is emulated (it sleeps), but an executor's start is
not: its JVM, its registration with the driver and its Python workers really run, on the
machine's few real cores, beside every other executor starting at the time. The live runs
show it (docs/emulation.md): 18 executors granted at once were ready after about 85 s, 22
after about 110 s, and 4 granted later, alone, after about 25 s. So each starting executor
here needs `cpu_s` CPU-seconds, and the `cores` are shared equally (processor sharing): with
m executors starting, each advances at min(1, cores / m) CPU-seconds per second.
"""

from __future__ import annotations

import numpy as np


class StartingExecutors:
    """The executors starting now, with the CPU-seconds each still needs."""

    def __init__(self, cores: float) -> None:
        self.cores = cores
        self.keys: list[object] = []
        self.left = np.zeros(0)
        self.updated_at = 0.0
        self.version = 0  # bumps at every change; a stale `next_done` event is ignored

    def rate(self) -> float:
        """CPU-seconds per second each starting executor gets."""
        return min(1.0, self.cores / len(self.keys)) if self.keys else 0.0

    def advance(self, now: float) -> None:
        elapsed = max(0.0, now - self.updated_at)
        if self.keys and elapsed:
            self.left = np.maximum(self.left - elapsed * self.rate(), 0.0)
        self.updated_at = now

    def add(self, key: object, cpu_s: float, now: float) -> None:
        self.advance(now)
        self.keys.append(key)
        self.left = np.append(self.left, cpu_s)
        self.version += 1

    def remove(self, key: object, now: float) -> bool:
        """Stop a start (its executor was released or killed); False if it was not starting."""
        if key not in self.keys:
            return False
        self.advance(now)
        index = self.keys.index(key)
        del self.keys[index]
        self.left = np.delete(self.left, index)
        self.version += 1
        return True

    def next_done(self) -> float:
        """When the first of the starting executors is done at the current rates (inf when
        none is starting)."""
        if not self.keys:
            return float("inf")
        return self.updated_at + float(self.left.min()) / self.rate()

    def pop_done(self, now: float) -> list[object]:
        """The executors whose start is done by `now`, removed."""
        self.advance(now)
        done = self.left <= 1e-9
        if not done.any():
            return []
        finished = [k for k, d in zip(self.keys, done, strict=True) if d]
        self.keys = [k for k, d in zip(self.keys, done, strict=True) if not d]
        self.left = self.left[~done]
        self.version += 1
        return finished
