"""A Spark job model: executors pull work; the job ends when its work is done.

A job asks for `executors` executors of one demand vector. Its driver needs `startup_s`
before it asks for any; each granted executor needs `executor_start_s` before it takes work
(JVM start and registration with the driver). The job then has `work` executor-seconds of
parallel work, which the running executors pull as a pool (a stage of many short tasks keeps
every executor busy, so with n executors the pool drains at rate n), plus `serial_s` of
driver-side work that no executor speeds up (result collection, job scheduling). With a
constant n the duration is
    T(n) = startup_s + executor_start_s + serial_s + work / n,
Amdahl's law with a fixed start-up cost, which is how Spark Pi and WordCount behave at this
scale (calibration notes live in the scenario files). When the work is done the executors
are released one by one over `release_spread_s`, as the paper observes. The model's
parameters are the batch format's `JobModel` (allocator.scenarios.batch); this module runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from allocator.scenarios.batch import JobModel


@dataclass
class JobProgress:
    """Work left and the rate at which it drains, updated piecewise at events."""

    model: JobModel
    remaining: float
    serial_left: float
    rate: int = 0  # executors working now
    updated_at: float = 0.0
    version: int = 0  # bumps when the finish time changes; stale events are ignored
    working: set[int] = field(default_factory=set)  # executor ids taking work

    @classmethod
    def start(cls, model: JobModel, now: float) -> JobProgress:
        return cls(model=model, remaining=model.work, serial_left=model.serial_s, updated_at=now)

    def advance(self, now: float) -> None:
        elapsed = max(0.0, now - self.updated_at)
        self.remaining = max(0.0, self.remaining - elapsed * self.rate)
        self.updated_at = now

    def set_rate(self, now: float, executors: int) -> None:
        self.advance(now)
        self.rate = executors
        self.version += 1

    def finish_time(self) -> float:
        """When the parallel work ends at the current rate (inf with no executors)."""
        if self.remaining <= 1e-9:
            return self.updated_at
        if self.rate == 0:
            return float("inf")
        return self.updated_at + self.remaining / self.rate
