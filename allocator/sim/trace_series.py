"""The trace simulator's time series: the one `TimeSeries`, fed incrementally by the event
loop (`allocator.sim.trace_sim`) from running totals, with the users' dominant shares."""

from __future__ import annotations

import numpy as np

from allocator.metrics_defs import dominant_shares, jain, ratio
from allocator.sim.series import TimeSeries


class TraceSeries(TimeSeries):
    """Allocated fraction per resource, dominant shares and Jain's index, kept incrementally.

    The driver adds and subtracts what users hold (`held`, `used`) and their unfinished task
    counts as events happen. `advance(t)` integrates the allocated fraction exactly (values
    are piecewise constant between events). Dominant shares and Jain's index over the busy
    users (those with unfinished tasks) are evaluated at each allocation tick (`tick()`) and
    held until the next, so their cost is O(users) per tick, not per event. Averages are over
    the time some user has unfinished tasks. Samples are taken every `sample_s`.
    """

    def __init__(
        self, resources: tuple[str, ...], n_users: int, sample_s: float, track_users: bool
    ) -> None:
        super().__init__(resources, sample_s)
        n_resources = len(resources)
        self.total = np.zeros(n_resources)
        self.used = np.zeros(n_resources)
        self.held = np.zeros((n_users, n_resources))
        self.unfinished = np.zeros(n_users, dtype=np.int64)  # submitted, not completed
        self.running = np.zeros(n_users, dtype=np.int64)
        self.busy_tasks = 0  # unfinished tasks over all users
        self.track_users = track_users
        self.shares: list[np.ndarray] = []  # per sample, each user's dominant share
        self._share = np.zeros(n_users)
        self._fair_waiting = 1.0
        self._waiting_users = 0
        self._stale = True  # holdings changed since the last tick
        self._waiting_integral = 0.0
        self._waiting_span = 0.0
        self._all_capacity = False  # every resource has capacity: a plain division

    def add_capacity(self, capacity: np.ndarray) -> None:
        self.total += capacity
        self._all_capacity = bool((self.total > 0).all())
        self._stale = True

    def changed(self) -> None:
        self._stale = True

    def tick(self) -> None:
        """Re-evaluate dominant shares and fairness (at an allocation tick)."""
        if not self._stale:
            return
        if self.held.size:
            self._share = dominant_shares(self.held, self.total)
        busy = self.unfinished > 0
        self._fairness = jain(self._share[busy]) if self.busy_tasks > 0 else 1.0
        waiting = self.unfinished > self.running
        self._waiting_users = int(waiting.sum())
        self._fair_waiting = jain(self._share[waiting]) if self._waiting_users > 1 else 1.0
        self._stale = False

    def advance(self, time: float) -> None:
        elapsed = time - self._last_time
        if elapsed <= 0:
            return
        # The allocated fraction and whether anyone is busy are exact up to `time`.
        allocated = self.used / self.total if self._all_capacity else ratio(self.used, self.total)
        self.hold(allocated, self._fairness, self.busy_tasks > 0)
        if self._busy and self._waiting_users > 1:
            self._waiting_integral += elapsed * self._fair_waiting
            self._waiting_span += elapsed
        super().advance(time)

    def sample(self, time: float) -> None:
        super().sample(time)
        if self.track_users:
            self.shares.append(self._share)

    def mean_fairness_waiting(self) -> float | None:
        """Jain's index among users that have tasks waiting (at least two of them), averaged
        over the time there are such users: equal dominant shares among the users the
        scheduler holds back, whatever the others (with small demands) hold."""
        return self._waiting_integral / self._waiting_span if self._waiting_span > 0 else None
