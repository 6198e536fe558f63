"""Per-job randomness of a simulated batch, drawn so that comparisons are paired.

Every job draws from its own generator keyed by (seed, group, queue, job), never from the
allocator's: two runs at the same seed, under any scheduler or mode, see exactly the same job
works, driver start-ups and serial tails, and the k-th executor of a job starts and is
released after the same delays. Jitters are relative and uniform: a value v with jitter j is
drawn from v * U(1 - j, 1 + j). With every jitter 0 and even releases nothing is drawn and a
run is the deterministic model exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from allocator.scenarios.batch import JitterSpec, JobModel

#: Separates the workload streams from every other use of the seed.
WORKLOAD_STREAM = 0x6A6F62


@dataclass
class JobDraws:
    """One job's model with its per-job draws applied, and its stream for what it draws
    later (executor start-ups, release delays)."""

    model: JobModel
    jitter: JitterSpec
    starts: np.random.Generator | None = None  # executor start-ups, in grant order
    releases: np.random.Generator | None = None  # release delays

    @classmethod
    def draw(
        cls, model: JobModel, jitter: JitterSpec, seed: int, group: int, queue: int, job: int
    ) -> JobDraws:
        keyed = any((jitter.work, jitter.startup_s, jitter.executor_start_s, jitter.serial_s))
        if not (keyed or jitter.random_release):
            return cls(model, jitter)
        key = [WORKLOAD_STREAM, seed, group, queue, job]
        # Always three draws in this order, so a part's value does not depend on which
        # other parts jitter; start-ups and releases have streams of their own, so how many
        # executors a scheduler grants changes none of the job's other draws.
        factors = np.random.default_rng([*key, 0]).uniform(-1.0, 1.0, size=3)
        drawn = replace(
            model,
            work=model.work * (1 + jitter.work * factors[0]),
            startup_s=model.startup_s * (1 + jitter.startup_s * factors[1]),
            serial_s=model.serial_s * (1 + jitter.serial_s * factors[2]),
        )
        return cls(
            drawn, jitter, np.random.default_rng([*key, 1]), np.random.default_rng([*key, 2])
        )

    def executor_start(self) -> float:
        """Start-up of the job's next granted executor."""
        base = self.model.executor_start_s
        if self.starts is None or not self.jitter.executor_start_s:
            return base
        return base * (1 + self.jitter.executor_start_s * self.starts.uniform(-1.0, 1.0))

    def release_delays(self, count: int) -> list[float]:
        """Delays after the job's end at which its `count` executors are released."""
        spread = self.model.release_spread_s
        if self.releases is None or not self.jitter.random_release:
            return [spread * (k + 1) / max(count, 1) for k in range(count)]
        # U(0, spread], never 0: a release never lands before the job's own end event.
        return [float(x) for x in spread * (1.0 - self.releases.random(count))]
