"""The trace simulator's time series: allocated fraction per resource, dominant shares and
Jain's index, kept incrementally by the event loop (`allocator.sim.trace_sim`)."""

from __future__ import annotations

import numpy as np

from allocator.metrics_defs import jain


class TraceSeries:
    """Allocated fraction per resource, dominant shares and Jain's index, kept incrementally.

    The driver adds and subtracts what users hold (`held`, `used`) and their unfinished task
    counts as events happen. `advance(t)` integrates the allocated fraction exactly (values
    are piecewise constant between events). Dominant shares and Jain's index over the busy
    users (those with unfinished tasks) are evaluated at each allocation tick (`tick()`) and
    held until the next, so their cost is O(users) per tick, not per event. Averages are over
    the time some user has unfinished tasks.
    """

    def __init__(
        self, resources: tuple[str, ...], n_users: int, sample_s: float, track_users: bool
    ) -> None:
        n_resources = len(resources)
        self.resources = tuple(resources)
        self.total = np.zeros(n_resources)
        self.used = np.zeros(n_resources)
        self.held = np.zeros((n_users, n_resources))
        self.unfinished = np.zeros(n_users, dtype=np.int64)  # submitted, not completed
        self.running = np.zeros(n_users, dtype=np.int64)
        self.busy_tasks = 0  # unfinished tasks over all users
        self.sample_s = sample_s
        self.track_users = track_users
        self.times: list[float] = []
        self.allocated: list[np.ndarray] = []
        self.fairness: list[float] = []
        self.shares: list[np.ndarray] = []
        self._next_sample = 0.0
        self._last = 0.0
        self._inverse = np.zeros(n_resources)
        self._share = np.zeros(n_users)
        self._fair = 1.0
        self._fair_waiting = 1.0
        self._waiting_users = 0
        self._stale = True  # holdings changed since the last tick
        self.integral = np.zeros(n_resources)  # of used / total
        self.fair_integral = 0.0
        self.busy_span = 0.0
        self.waiting_integral = 0.0
        self.waiting_span = 0.0

    def add_capacity(self, capacity: np.ndarray) -> None:
        self.total += capacity
        with np.errstate(divide="ignore"):
            self._inverse = np.where(self.total > 0, 1.0 / self.total, 0.0)
        self._stale = True

    def changed(self) -> None:
        self._stale = True

    def tick(self) -> None:
        """Re-evaluate dominant shares and fairness (at an allocation tick)."""
        if not self._stale:
            return
        self._share = (self.held * self._inverse).max(axis=1) if self.held.size else self._share
        busy = self.unfinished > 0
        self._fair = jain(self._share[busy]) if self.busy_tasks > 0 else 1.0
        waiting = self.unfinished > self.running
        self._waiting_users = int(waiting.sum())
        self._fair_waiting = jain(self._share[waiting]) if self._waiting_users > 1 else 1.0
        self._stale = False

    def advance(self, now: float) -> None:
        elapsed = now - self._last
        if elapsed <= 0:
            return
        if self.busy_tasks > 0:
            self.integral += (elapsed * self._inverse) * self.used
            self.fair_integral += elapsed * self._fair
            self.busy_span += elapsed
            if self._waiting_users > 1:
                self.waiting_integral += elapsed * self._fair_waiting
                self.waiting_span += elapsed
        if self._next_sample < now:
            fraction = self.used * self._inverse
            while self._next_sample < now:
                self.times.append(self._next_sample)
                self.allocated.append(fraction)
                self.fairness.append(self._fair)
                if self.track_users:
                    self.shares.append(self._share)
                self._next_sample += self.sample_s
        self._last = now

    def time_average(self) -> np.ndarray:
        return self.integral / self.busy_span if self.busy_span > 0 else np.zeros_like(self.used)

    def mean_fairness(self) -> float:
        return self.fair_integral / self.busy_span if self.busy_span > 0 else 1.0

    def mean_fairness_waiting(self) -> float | None:
        """Jain's index among users that have tasks waiting (at least two of them), averaged
        over the time there are such users: equal dominant shares among the users the
        scheduler holds back, whatever the others (with small demands) hold."""
        return self.waiting_integral / self.waiting_span if self.waiting_span > 0 else None
