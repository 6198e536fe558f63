"""Job admission for batch scenarios: which waiting job starts next (fcfs, sjf, wfq).

One clock-free state machine serves the simulator (`allocator.sim.batch_sim`) and the live
batch runner (`allocator.batch.runner`): the driver tells it the time, asks which jobs to
start (`admit`), reports finished jobs (`finished`) and asks when to look again
(`next_change`). A batch file's pools are built by `allocator.scenarios.batch.build_pools`.

A pool (one group, or the whole batch) has `slots` turns, the sum of its groups' `queues`:
without an admission policy each submission queue runs its jobs one after another, which is
a turn held by one job from its start to its end. With a policy, a free turn goes to:

- fcfs: the waiting job that arrived first (then declaration order);
- sjf: the waiting job with the shortest expected duration (the job model's
  T(n) = startup + executor start + serial + work / n at its full width), then arrival;
- wfq (paper 004): all jobs sorted by priority (higher first), arrival, deadline, and split
  into a high, a medium and a low queue of N_HQ = floor(n/3) + lambda,
  N_MQ = floor((n - N_HQ)/2) and N_LQ = n - N_HQ - N_MQ jobs. HQ and MQ are served round
  robin in deadline order with time quanta TQ_H = floor(maxDL_HQ / 2^alpha1) and
  TQ_M = floor(maxDL_MQ / 2^alpha2); LQ is FCFS. A free turn goes to HQ, else MQ, else LQ.

**A time quantum for a Spark job.** A Spark job cannot be paused and resumed, so round robin
cannot preempt it. The quantum bounds how long an HQ or MQ job holds its queue's *turn*: when
its job has run for the quantum and is still running, the turn is handed to the next job of
the ring, which is admitted at once; the first job keeps running with every executor it has
(the allocator keeps sharing the cluster among all running jobs). Only admission changes.
So a high-priority job waits for at most one quantum per job ahead of it in its ring, and
more jobs than turns can run at once under wfq. An LQ job (FCFS) holds its turn to the end.
A queue with no deadlines has an infinite quantum (its jobs hold their turns to the end).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from allocator.errors import ScenarioError


class Policy(StrEnum):
    FCFS = "fcfs"
    SJF = "sjf"
    WFQ = "wfq"


@dataclass(frozen=True)
class AdmissionConfig:
    policy: Policy = Policy.FCFS
    lam: int = 0  # paper 004's lambda: extra jobs in HQ
    alpha1: int = 2  # TQ_H divisor exponent
    alpha2: int = 1  # TQ_M divisor exponent; alpha1 > alpha2

    def __post_init__(self) -> None:
        if self.lam < 0:
            raise ScenarioError(f"admission.lambda: must be >= 0, got {self.lam}")
        if self.alpha2 < 0 or self.alpha1 <= self.alpha2:
            raise ScenarioError(
                f"admission.alpha1: must be greater than alpha2 >= 0, got alpha1 "
                f"{self.alpha1}, alpha2 {self.alpha2}"
            )


@dataclass(frozen=True)
class PendingJob:
    key: object  # the driver's handle (e.g. (group index, job index))
    order: int  # declaration order: the last tie-break everywhere
    arrival: float = 0.0
    priority: int = 0
    deadline: float | None = None
    estimate: float = 0.0  # expected duration, for sjf


def wfq_sizes(n: int, lam: int) -> tuple[int, int, int]:
    """(N_HQ, N_MQ, N_LQ) for n jobs (paper 004 eqs. 1-3); N_HQ is at most n."""
    high = min(n, n // 3 + lam)
    medium = (n - high) // 2
    return high, medium, n - high - medium


def wfq_quantum(deadlines: list[float | None], alpha: int) -> float:
    """floor(max deadline / 2^alpha) (paper 004 eqs. 4-5); inf when no job has a deadline."""
    known = [d for d in deadlines if d is not None]
    if not known:
        return math.inf
    return float(math.floor(max(known) / 2**alpha))


def priority_order(jobs: list[PendingJob]) -> list[PendingJob]:
    """Paper 004's Sort_Tasks: priority descending, then arrival, then deadline."""
    return sorted(jobs, key=lambda j: (-j.priority, j.arrival, _deadline(j), j.order))


def deadline_order(jobs: list[PendingJob]) -> list[PendingJob]:
    """Inside HQ and MQ (Algorithm 1, lines 9-16): deadline, then priority, then arrival."""
    return sorted(jobs, key=lambda j: (_deadline(j), -j.priority, j.arrival, j.order))


def _deadline(job: PendingJob) -> float:
    return math.inf if job.deadline is None else job.deadline


@dataclass
class _Ring:
    """One of wfq's queues: jobs in service order, and the turns its started jobs hold."""

    jobs: list[PendingJob]
    quantum: float
    holding: dict[object, float] = field(default_factory=dict)  # key -> turn ends at


class Admission:
    """Admission for one pool of jobs with `slots` turns."""

    def __init__(self, jobs: list[PendingJob], slots: int, config: AdmissionConfig) -> None:
        if slots < 1:
            raise ScenarioError(f"admission: a pool needs at least one turn, got {slots}")
        self.config = config
        self.slots = slots
        self.started: list[PendingJob] = []
        if config.policy is Policy.WFQ:
            ranked = priority_order(jobs)
            high, medium, _ = wfq_sizes(len(ranked), config.lam)
            hq = deadline_order(ranked[:high])
            mq = deadline_order(ranked[high : high + medium])
            lq = sorted(ranked[high + medium :], key=lambda j: (j.arrival, j.order))
            self.rings = [
                _Ring(hq, wfq_quantum([j.deadline for j in hq], config.alpha1)),
                _Ring(mq, wfq_quantum([j.deadline for j in mq], config.alpha2)),
                _Ring(lq, math.inf),
            ]
        else:
            if config.policy is Policy.SJF:
                key = lambda j: (j.estimate, j.arrival, j.order)  # noqa: E731
            else:
                key = lambda j: (j.arrival, j.order)  # noqa: E731
            self.rings = [_Ring(sorted(jobs, key=key), math.inf)]

    @property
    def queues(self) -> dict[str, list[PendingJob]]:
        """The jobs of each queue in service order (wfq: high, medium, low)."""
        names = ("high", "medium", "low") if len(self.rings) == 3 else ("all",)
        return {name: list(ring.jobs) for name, ring in zip(names, self.rings, strict=True)}

    @property
    def quanta(self) -> tuple[float, ...]:
        return tuple(ring.quantum for ring in self.rings)

    def _held(self, now: float) -> int:
        for ring in self.rings:  # a turn whose quantum ran out is handed on
            for key, ends in list(ring.holding.items()):
                if ends <= now:
                    del ring.holding[key]
        return sum(len(ring.holding) for ring in self.rings)

    def admit(self, now: float) -> list[PendingJob]:
        """Jobs to start now, in order: free turns go to the first queue with an arrived job."""
        out: list[PendingJob] = []
        free = self.slots - self._held(now)
        for ring in self.rings:
            while free > 0 and ring.jobs:
                job = self._next(ring, now)
                if job is None:
                    break
                ring.jobs.remove(job)
                ring.holding[job.key] = now + ring.quantum
                self.started.append(job)
                out.append(job)
                free -= 1
        return out

    def _next(self, ring: _Ring, now: float) -> PendingJob | None:
        """The first job in the ring's order that has arrived (for fcfs and LQ: the earliest
        arrival; for HQ and MQ: the earliest deadline among arrived jobs)."""
        return next((j for j in ring.jobs if j.arrival <= now), None)

    def finished(self, key: object) -> None:
        """A started job ended: its turn (if it still holds one) is free."""
        for ring in self.rings:
            ring.holding.pop(key, None)

    def next_change(self, now: float) -> float | None:
        """The next time admission may change without a job ending: an arrival of a waiting
        job or the end of a quantum. None when neither is ahead."""
        times = [j.arrival for ring in self.rings for j in ring.jobs if j.arrival > now]
        times += [t for ring in self.rings for t in ring.holding.values() if math.isfinite(t)]
        ahead = [t for t in times if t > now]
        return min(ahead) if ahead else None

    def done(self) -> bool:
        return not any(ring.jobs for ring in self.rings)


# ---- pools of a batch scenario ------------------------------------------------------------


@dataclass
class Pool:
    """One admission pool: the state machine and, per key, (group index, job index k)."""

    admission: Admission
    groups: tuple[int, ...]


def job_slot(k: int, queues: int) -> tuple[int, int]:
    """(queue, index) of a group's k-th job: jobs are dealt to the queues in turn, so that
    k-th in declaration order is also k-th in first-come order when all arrive together."""
    return k % queues, k // queues
