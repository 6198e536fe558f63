"""Discrete-event simulation of Spark job batches over the online engine, in virtual time.

The driver does what Mesos and Spark would: it registers agents when they join, starts each
queue's jobs one after another, ticks the allocator every interval (and runs it at once when
the engine asks), turns grants into executors that start working after their start-up time,
and releases a finished job's executors one by one over a short spread. With
`config.reclaims` it reclaims executors as the broker would (`allocator.sim.reclaim_sim`):
a reclaimed executor takes no new task, keeps its resources for the grace and is then
killed, its unfinished task's work going back to its job (docs/reclaim.md).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from allocator.admission import AdmissionConfig, Pool, job_slot
from allocator.engine import Engine
from allocator.engine_config import EngineConfig
from allocator.errors import FairbrokerError
from allocator.explain import Explanation, explain
from allocator.fair_share import FairShareCache, fair_shares
from allocator.scenarios.batch import BatchSpec, JobEntry, JobModel, build_pools
from allocator.sim.host import StartingExecutors
from allocator.sim.jobs import JobProgress
from allocator.sim.reclaim_sim import FairShareWatch, SimReclaim
from allocator.sim.series import AllocationSeries
from allocator.sim.workload import JobDraws


@dataclass
class Job:
    name: str
    group: str
    queue: int
    draws: JobDraws  # the job's model with its draws applied, and its streams
    demand: dict[str, float]
    executors: int
    submitted: float  # arrival: when the job could have started
    registered: float = float("nan")
    finished: float = float("nan")
    progress: JobProgress | None = None
    placed: list[tuple[int, str]] = field(default_factory=list)  # (executor id, agent)
    done: bool = False
    index: int = 0  # the job's place in its queue
    started: float = float("nan")  # admitted (submitted to the cluster)
    priority: int = 0
    deadline: float | None = None
    ready_at: dict[int, float] = field(default_factory=dict)  # executor -> took work from
    leaving: set[int] = field(default_factory=set)  # executors reclaimed, not gone yet
    reclaimed: int = 0  # executors reclaimed from the job
    work_lost: float = 0.0  # executor-seconds of work redone because of reclaims
    fair_share_at: float = float("nan")  # first held its fair share (FairShareWatch)

    @property
    def model(self) -> JobModel:
        return self.draws.model

    def to_fair_share(self) -> float:
        """Seconds from submission until the job first held its fair share; a job that
        never did counts its whole completion time (a lower bound of the wait)."""
        reached = self.fair_share_at if self.fair_share_at == self.fair_share_at else self.finished
        return reached - self.submitted


@dataclass
class SimResult:
    scheduler: str
    mode: str
    level: str
    trigger: str
    seed: int
    makespan_s: float
    jobs: list[Job]
    grants: int
    series: AllocationSeries
    admission: str = "queues"
    engine_config: dict[str, object] | None = None  # what the engine decided with
    reclaims: bool = False  # the engine's config reclaimed (its knobs are in engine_config)

    def jct(self) -> np.ndarray:
        return np.array([j.finished - j.submitted for j in self.jobs])

    def to_json(self) -> dict[str, object]:
        jct = self.jct()
        by_group: dict[str, list[float]] = {}
        for job in self.jobs:
            by_group.setdefault(job.group, []).append(job.finished - job.submitted)
        return {
            "scheduler": self.scheduler,
            "mode": self.mode,
            "level": self.level,
            "trigger": self.trigger,
            "admission": self.admission,
            "seed": self.seed,
            "engine": self.engine_config,
            "makespan_s": round(self.makespan_s, 3),
            "jobs": len(self.jobs),
            "jct_s": {
                "mean": round(float(jct.mean()), 3),
                "p50": round(float(np.percentile(jct, 50)), 3),
                "p95": round(float(np.percentile(jct, 95)), 3),
            },
            "jct_by_group_s": {g: round(float(np.mean(v)), 3) for g, v in by_group.items()},
            "allocated": {r: round(v, 4) for r, v in self.series.time_average().items()},
            "fairness": round(self.series.mean_fairness(), 4),
            "grants": self.grants,
        } | ({"reclaim": self.reclaim_json()} if self.reclaims else {})

    def reclaim_json(self) -> dict[str, object]:
        """Executors reclaimed, work lost (executor-seconds) and the mean time from
        submission to the fair share (`Job.to_fair_share`), in all and per group."""
        groups: dict[str, list[Job]] = {}
        for job in self.jobs:
            groups.setdefault(job.group, []).append(job)

        def to_share(jobs: list[Job]) -> float:
            return round(float(np.mean([j.to_fair_share() for j in jobs])), 3)

        return {
            "executors": sum(j.reclaimed for j in self.jobs),
            "work_lost_s": round(sum(j.work_lost for j in self.jobs), 3),
            "by_group": {
                g: {"executors": sum(j.reclaimed for j in jobs),
                    "work_lost_s": round(sum(j.work_lost for j in jobs), 3),
                    "to_fair_share_s": to_share(jobs)}
                for g, jobs in groups.items()
            },
        }  # fmt: skip


class BatchSimulator:
    def __init__(
        self,
        batch: BatchSpec,
        config: EngineConfig,
        admission: AdmissionConfig | None = None,
        watch_fair_share: bool = False,
    ) -> None:
        """`config`'s role weights override the batch's group weights role by role.
        `admission` (fcfs, sjf, wfq) makes one admission pool of every job, overriding the
        scenario's `admission:` sections (allocator.admission). `watch_fair_share` records
        when each job first holds its fair share (always with reclaim)."""
        self.batch = batch
        self.config = config.with_default_role_weights(batch.role_weights())
        self.seed = config.seed
        self.interval = config.interval
        self.engine = Engine(batch.resource_names(), self.config)
        self.now = 0.0
        self._events: list[tuple[float, int, str, object]] = []
        self._seq = itertools.count()
        self._executor_ids = itertools.count()
        self.jobs: list[Job] = []
        self._by_framework: dict[str, Job] = {}
        self._queues: dict[tuple[str, int], int] = {}  # jobs submitted so far per queue
        self._unfinished: dict[str, int] = {}  # per group: submitted, not finished
        self._finished = 0
        self._total = sum(g.queues * g.jobs_per_queue for g in batch.groups)
        self.pools = build_pools(batch, admission)
        self._pool_of = {g: pool for pool in self.pools for g in pool.groups}
        self.admission = str(admission.policy) if admission is not None else admission_label(batch)
        self.series = AllocationSeries(self.engine)
        # Executors whose start costs CPU (`start_cpu_s`) share the host's cores; without a
        # `host:` each has a core of its own.
        self.starting = StartingExecutors(batch.host.cores if batch.host else float("inf"))
        self._then_ready: dict[tuple[str, int], tuple[Job, float]] = {}
        self.reclaim = SimReclaim(self.engine, self.config) if self.config.reclaims else None
        watch = watch_fair_share or self.reclaim is not None
        self.watch = None
        if watch:  # one cache: the fair share is computed once per change
            fair = self.reclaim.fair if self.reclaim is not None else None
            self.watch = FairShareWatch(self.engine, fair or FairShareCache())

    def _at(self, time: float, kind: str, payload: object = None) -> None:
        heapq.heappush(self._events, (time, next(self._seq), kind, payload))

    # ---- workload ----------------------------------------------------------------------
    def _submit(self, group_index: int, queue: int) -> None:
        """The next job of a submission queue (groups in no admission pool)."""
        group = self.batch.groups[group_index]
        count = self._queues.get((group.name, queue), 0)
        if count >= group.jobs_per_queue:
            return
        self._queues[(group.name, queue)] = count + 1
        self._start(group_index, queue, count, group.job_entries()[count * group.queues + queue])

    def _admit(self, pool: Pool) -> None:
        for pending in pool.admission.admit(self.now):
            g, k = pending.key  # type: ignore[misc]
            queue, index = job_slot(k, self.batch.groups[g].queues)
            self._start(g, queue, index, self.batch.groups[g].job_entries()[k])
        wake = pool.admission.next_change(self.now)
        if wake is not None:
            self._at(wake, "admit", pool)

    def _start(self, group_index: int, queue: int, index: int, entry: JobEntry) -> None:
        group = self.batch.groups[group_index]
        demand, executors = group.executor_demand()
        model = group.job_model(entry)
        draws = JobDraws.draw(model, group.job.jitter, self.seed, group_index, queue, index)
        in_pool = group_index in self._pool_of
        job = Job(
            name=f"{group.name}-q{queue}-j{index}",
            group=group.name,
            queue=queue,
            draws=draws,
            demand=demand,
            executors=executors,
            submitted=entry.arrival_s if in_pool else self.now,
            index=index,
            started=self.now,
            priority=entry.priority,
            deadline=entry.deadline_s,
        )
        self.jobs.append(job)
        self._unfinished[group.name] = self._unfinished.get(group.name, 0) + 1
        self._by_framework[job.name] = job
        self._at(self.now + job.model.startup_s, "register", (group_index, job))

    def _register(self, group_index: int, job: Job) -> None:
        group = self.batch.groups[group_index]
        job.registered = self.now
        job.progress = JobProgress.start(job.model, self.now)
        self.engine.register(
            job.name,
            job.demand,
            role=group.name,
            weight=1.0,
            target=job.executors,
            constraints=group.constraints,
        )

    def _grant(self, framework: str, agent: str, tasks: int) -> None:
        job = self._by_framework[framework]
        contended = job.model.start_cpu_s > 0
        for _ in range(tasks):
            executor = next(self._executor_ids)
            job.placed.append((executor, agent))
            if self.reclaim is not None:
                self.reclaim.started(str(executor), framework, agent, self.now)
            delay = job.draws.executor_start()
            if contended:
                self._then_ready[(job.name, executor)] = (job, delay)
                self.starting.add((job.name, executor), job.model.start_cpu_s, self.now)
            else:
                self._at(self.now + delay, "ready", (job, executor))
        if contended:
            self._next_started()

    def _next_started(self) -> None:
        when = self.starting.next_done()
        if when < float("inf"):
            self._at(when, "started", self.starting.version)

    def _started(self, version: int) -> None:
        """Executors done with their CPU-bound start; ready after their fixed delay."""
        if version != self.starting.version:
            return
        for key in self.starting.pop_done(self.now):
            job, delay = self._then_ready.pop(key)  # type: ignore[arg-type]
            self._at(self.now + delay, "ready", (job, key[1]))  # type: ignore[index]
        self._next_started()

    def _stop_start(self, job: Job, executor: int) -> None:
        """An executor released or killed while still starting frees its share of the host."""
        if self.starting.remove((job.name, executor), self.now):
            self._then_ready.pop((job.name, executor), None)
            self._next_started()

    def _ready(self, job: Job, executor: int) -> None:
        if job.done or job.progress is None:
            return
        if not any(e == executor for e, _ in job.placed) or executor in job.leaving:
            return
        job.ready_at[executor] = self.now
        job.progress.working.add(executor)
        job.progress.set_rate(self.now, len(job.progress.working))
        self._at(job.progress.finish_time(), "work_done", (job, job.progress.version))

    def _work_done(self, job: Job, version: int) -> None:
        progress = job.progress
        if job.done or progress is None or version != progress.version:
            return
        progress.advance(self.now)
        if progress.remaining > 1e-9:
            return
        job.done = True
        self.engine.set_target(job.name, 0)
        self._at(self.now + job.model.serial_s, "end", job)

    def _end(self, job: Job) -> None:
        job.finished = self.now
        self._unfinished[job.group] -= 1
        self._finished += 1
        count = len(job.placed)
        delays = job.draws.release_delays(count)
        for delay, (executor, agent) in zip(delays, job.placed, strict=True):
            self._at(self.now + delay, "release", (job, executor, agent))
        if count == 0:
            self.engine.unregister(job.name)
        group_index = next(i for i, g in enumerate(self.batch.groups) if g.name == job.group)
        gap = self.batch.groups[group_index].submit_gap_s
        pool = self._pool_of.get(group_index)
        if pool is None:
            self._at(self.now + gap, "submit", (group_index, job.queue))
            return
        k = job.index * self.batch.groups[group_index].queues + job.queue
        pool.admission.finished((group_index, k))
        self._at(self.now + gap, "admit", pool)

    def _release(self, job: Job, executor: int, agent: str) -> None:
        if self.reclaim is not None:
            self.reclaim.gone(str(executor))
        self._stop_start(job, executor)
        self.engine.release(job.name, agent, 1)
        job.placed = [(e, a) for e, a in job.placed if e != executor]
        if not job.placed:
            self.engine.unregister(job.name)

    # ---- main loop ---------------------------------------------------------------------
    def _allocate(self) -> None:
        for grant in self.engine.allocate(self.now):
            self._grant(grant.framework, grant.agent, grant.tasks)
        if self.reclaim is not None:
            for decision in self.reclaim.run(self.now):
                self._decommission(self._by_framework[decision.victim], int(decision.executor))
        if self.watch is not None:
            self.watch.observe(self.now)

    # ---- reclaim -----------------------------------------------------------------------
    def _decommission(self, job: Job, executor: int) -> None:
        """Spark decommissioning: the executor takes no new task; a task it runs goes on
        and, if it ends within the grace, its work is kept; the kill comes after the grace."""
        assert self.reclaim is not None
        job.leaving.add(executor)
        job.reclaimed += 1
        grace = self.reclaim.grace
        progress = job.progress
        if progress is not None and executor in progress.working:
            task = job.model.task_s
            left = task - (self.now - job.ready_at[executor]) % task
            if left <= grace:
                self._at(self.now + left, "drained", (job, executor))
        self._at(self.now + grace, "kill", (job, executor))

    def _stop_working(self, job: Job, executor: int, lost: float) -> None:
        progress = job.progress
        if job.done or progress is None or executor not in progress.working:
            return
        progress.advance(self.now)
        progress.remaining += lost
        job.work_lost += lost
        progress.working.discard(executor)
        progress.set_rate(self.now, len(progress.working))
        if progress.working:  # else the next executor ready schedules the finish
            self._at(progress.finish_time(), "work_done", (job, progress.version))

    def _kill(self, job: Job, executor: int) -> None:
        """The grace is over. A job whose work is done ends and releases its executors
        itself; otherwise the executor is gone and its task's work so far is lost (its
        job's target is unchanged: the engine grants a replacement)."""
        assert self.reclaim is not None
        if job.done:
            return
        agent = next((a for e, a in job.placed if e == executor), None)
        if agent is None:
            return
        ready = job.ready_at.get(executor)
        if ready is not None:
            self._stop_working(job, executor, (self.now - ready) % job.model.task_s)
        job.leaving.discard(executor)
        job.placed = [(e, a) for e, a in job.placed if e != executor]
        self._stop_start(job, executor)
        self.reclaim.gone(str(executor))
        self.engine.release(job.name, agent, 1)

    def _all_done(self) -> bool:
        return self._finished == self._total and not self.engine.running

    def explain_at(self, framework: str, time: float) -> Explanation:
        """Why `framework` waits at simulated `time`: the engine's state once every event up to
        `time` is handled (`fairbroker sim --explain TENANT@TIME`, allocator/explain.py)."""
        self._prepare()
        while self._events and self._events[0][0] <= time:
            if self._step():
                break
        self.now = max(self.now, time)
        if framework not in self.engine.frameworks:
            running = sorted(self.engine.frameworks)
            shown = ", ".join(running[:10]) + (" ..." if len(running) > 10 else "")
            raise FairbrokerError(
                f"--explain: {framework!r} is not running at {time:g} s "
                f"(running then: {shown or 'none'})"
            )
        share = fair_shares(self.engine).as_dict()
        return explain(self.engine, framework, self.now, share)

    def _prepare(self) -> None:
        for agent in self.batch.agents:
            self._at(agent.register_at, "agent", agent)
        for g, group in enumerate(self.batch.groups):
            if g not in self._pool_of:
                for queue in range(group.queues):
                    self._at(0.0, "submit", (g, queue))
        for pool in self.pools:
            self._at(0.0, "admit", pool)
        self._at(0.0, "tick")
        self._handlers: dict[str, Callable[..., None]] = {
            "submit": lambda p: self._submit(*p),
            "admit": self._admit,
            "register": lambda p: self._register(*p),
            "ready": lambda p: self._ready(*p),
            "started": self._started,
            "work_done": lambda p: self._work_done(*p),
            "end": self._end,
            "release": lambda p: self._release(*p),
            "drained": lambda p: self._stop_working(*p, 0.0),
            "kill": lambda p: self._kill(*p),
            "agent": lambda a: self.engine.add_agent(a.name, a.resources, a.attributes),
        }

    def _step(self) -> bool:
        """Handle every event of the next instant and run the allocator if due; True when
        the batch is done."""
        time = self._events[0][0]
        self.series.advance(time)
        self.now = time
        ticked = False
        while self._events and self._events[0][0] == time:
            _, _, kind, payload = heapq.heappop(self._events)
            if kind == "tick":
                ticked = True
            else:
                self._handlers[kind](payload)
        if ticked or self.engine.run_now:
            self._allocate()
        self.series.record(self.now, self._waiting_groups())
        if self._all_done():
            return True
        if ticked:
            self._at(time + self.interval, "tick")
        return False

    def run(
        self,
        progress: Callable[[float, int], None] | None = None,
        max_time: float = 30 * 24 * 3600.0,
    ) -> SimResult:
        self._prepare()
        while self._events:
            if self._events[0][0] > max_time:
                raise RuntimeError(f"simulation passed {max_time} s without finishing")
            if self._step():
                break
            if progress is not None:
                progress(self.now, self._finished)
        makespan = max(j.finished for j in self.jobs)
        if self.watch is not None:
            for job in self.jobs:
                job.fair_share_at = self.watch.reached.get(job.name, float("nan"))
        return SimResult(
            scheduler=self.engine.scheduler.name,
            mode=str(self.engine.mode),
            level=str(self.engine.level),
            trigger=str(self.engine.trigger),
            seed=self.seed,
            makespan_s=makespan,
            jobs=self.jobs,
            grants=self.engine.grants_total,
            series=self.series,
            admission=self.admission,
            engine_config=self.engine.config.to_json(),
            reclaims=self.reclaim is not None,
        )

    def _waiting_groups(self) -> set[str]:
        """Groups with a job submitted and not finished, or arrived and not yet admitted."""
        waiting = {group for group, count in self._unfinished.items() if count}
        for pool in self.pools:
            for ring in pool.admission.rings:
                waiting.update(
                    self.batch.groups[j.key[0]].name  # type: ignore[index]
                    for j in ring.jobs
                    if j.arrival <= self.now
                )
        return waiting


def admission_label(batch: BatchSpec) -> str:
    if batch.admission is not None:
        return batch.admission.policy
    policies = sorted({g.admission.policy for g in batch.groups if g.admission is not None})
    return "/".join(policies) if policies else "queues"
