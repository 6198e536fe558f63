"""Task-level trace simulation over the online engine, in virtual time.

Users (Mesos roles at `level=role`) submit jobs; each task group of a job (its tasks of one
demand vector) is an engine framework whose target is its unfinished tasks. A granted task
runs for its own duration and is then released. Users join and leave at given times; a user
who leaves unregisters its frameworks, which frees their tasks. The loop is a queue of
events (`event_queue.EventQueue`: a heap's pops) with the engine's 1 s allocation tick, as in
`BatchSimulator`.

Per event the driver does O(1) work plus O(users) when the fairness index must be
recomputed: running totals (allocated resources, per-user holdings) are kept incrementally,
never by walking `engine.running` or every agent.
"""

from __future__ import annotations

import itertools
import math
import time as wallclock
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from allocator.engine import Engine
from allocator.engine_config import EngineConfig
from allocator.errors import ScenarioError
from allocator.policy.slots import DEFAULT_SLOTS_PER_SERVER, SLOTS, Slots, with_slots
from allocator.scenarios.trace import (
    Arrival,
    TaskGroup,
    TraceChunk,
    TraceJob,
    TraceWorkload,
    load_trace,
    parse_trace,
)
from allocator.sim.event_queue import EventQueue
from allocator.sim.trace_reclaim import KILL, TASK_DONE, TraceReclaim
from allocator.sim.trace_result import TraceResult
from allocator.sim.trace_series import TraceSeries

#: A run without a horizon stops with an error if tasks are still waiting after this long.
MAX_SIMULATED_S = 366 * 86400.0

_TICK, _ARRIVAL, _FINISH, _AGENT, _LEAVE = range(5)
_CHUNK = 7  # a streamed workload's next chunk is due (trace_reclaim uses 5 and 6)


class _Durations:
    """The durations of a task group's queued tasks, handed out in start order."""

    __slots__ = ("chunks",)

    def __init__(self) -> None:
        self.chunks: deque[list[Any]] = deque()  # [array, next index] or [rng, left, lo, hi]

    def add(
        self,
        durations: np.ndarray | None,
        rng: np.random.Generator | None,
        tasks: int,
        low: float,
        high: float,
    ) -> None:
        if durations is not None:
            self.chunks.append([durations, 0])
        else:
            self.chunks.append([rng, tasks, low, high])

    def put_back(self, duration: float) -> None:
        """A killed task's duration, first in line again (reclaim)."""
        self.chunks.appendleft([np.array([duration]), 0])

    def take(self, count: int) -> list[float]:
        out: list[float] = []
        while count > 0:
            chunk = self.chunks[0]
            if len(chunk) == 2:
                array, at = chunk
                n = min(count, len(array) - at)
                out.extend(array[at : at + n].tolist())
                chunk[1] = at + n
                done = chunk[1] >= len(array)
            else:
                rng, left, low, high = chunk
                n = min(count, left)
                out.extend(rng.uniform(low, high, n).tolist() if high > low else [low] * n)
                chunk[1] = left - n
                done = chunk[1] <= 0
            count -= n
            if done:
                self.chunks.popleft()
        return out


class TraceSimulator:
    def __init__(
        self,
        workload: TraceWorkload,
        config: EngineConfig,
        slots_per_server: int = DEFAULT_SLOTS_PER_SERVER,
        track_users: bool | None = None,
        audit: bool = False,
    ) -> None:
        """`config`'s role weights override the workload's user weights user by user."""
        self.workload = w = workload
        self.config = config.with_default_role_weights({u.name: u.weight for u in w.users})
        self.seed = config.seed
        self.interval = config.interval
        self.slots = config.scheduler == Slots.name
        if SLOTS in w.resources:
            raise ScenarioError("resources: 'slots' is reserved for the slot scheduler")
        real = len(w.resources)
        capacity = w.capacity
        demand = np.array([g.demand for g in w.groups]).reshape(len(w.groups), real)
        resources = w.resources
        self.slots_per_server = slots_per_server if self.slots else None
        if self.slots:
            resources, capacity, demand = with_slots(
                resources, capacity, demand, w.largest, slots_per_server
            )
        self.capacity = capacity
        self.engine = Engine(resources, self.config)
        self.now = 0.0
        self.audit = audit
        self.real = real
        self.resources = resources
        # Per task group (engine framework); a streamed workload appends chunk by chunk.
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.demand: list[np.ndarray] = []  # with the slot column when slots
        self.demand_real: list[np.ndarray] = []
        self.demand_dict: list[dict[str, float] | None] = []
        self.group_user: list[int] = []
        self.group_job: list[int] = []
        self.registered: list[bool] = []
        self.gone: list[bool] = []
        self.unfinished: list[int] = []  # submitted, not completed: the engine's target
        self.running: list[int] = []
        self.queues: list[_Durations | None] = []
        self.group_left: list[int] = []  # arrivals still to come
        self.user_groups: list[list[int]] = [[] for _ in w.users]
        # Per job.
        self.job_left: list[int] = []  # arrivals still to come
        self.job_unfinished: list[int] = []
        self.job_finished: list[float] = []
        self.job_submit: list[float] = []
        self.job_tasks: list[int] = []
        self.job_warm: list[bool] = []
        self._add_groups(w.groups, demand)
        self._add_jobs(w.jobs)
        self._arrivals: dict[int, Arrival] = {}
        self._arrival_ids = itertools.count()
        self._stream = w.stream() if w.stream is not None else None
        self._next_chunk: TraceChunk | None = None
        self._stream_tasks = 0  # tasks of the chunks loaded so far
        # Groups whose engine target fell (tasks finished) since the last allocation run: a
        # lower target matters only to a run, so it is told once per run, not per task.
        self._lowered: dict[int, None] = {}
        self.user_submitted = np.zeros(len(w.users), dtype=np.int64)
        self.user_completed = np.zeros(len(w.users), dtype=np.int64)
        self.left = [False] * len(w.users)
        # Agents.
        self.agent_index = {name: i for i, name in enumerate(w.agent_names)}
        self.agent_used = np.zeros_like(capacity) if audit else None
        if track_users is None:
            track_users = len(w.users) <= 50
        self.series = TraceSeries(tuple(w.resources), len(w.users), w.sample_s, track_users)
        self.pending = 0  # tasks submitted and not placed, over all groups
        self.tasks_completed = 0
        self.tasks_dropped = 0
        self.last_completion = 0.0
        self.slot_busy = 0.0  # slots taken (slot scheduler)
        self.slot_integral = 0.0
        self._events = EventQueue()
        self._seq = itertools.count()
        self.reclaim = TraceReclaim(self) if self.config.reclaims else None

    def _add_groups(self, groups: list[TaskGroup], demand: np.ndarray) -> None:
        """Task groups (in index order) and their demand rows (with the slot column)."""
        resources = self.resources
        for i, g in enumerate(groups):
            k = len(self.names)
            self.names.append(g.name)
            self.index[g.name] = k
            row = demand[i]
            self.demand.append(row)
            self.demand_real.append(row[: self.real].copy())
            self.demand_dict.append(dict(zip(resources, map(float, row), strict=True)))
            self.group_user.append(g.user)
            self.group_job.append(g.job)
            self.user_groups[g.user].append(k)
        n = len(groups)
        for column in (self.registered, self.gone):
            column.extend([False] * n)
        for column in (self.unfinished, self.running, self.group_left):
            column.extend([0] * n)
        self.queues.extend(_Durations() for _ in range(n))

    def _add_jobs(self, jobs: list[TraceJob]) -> None:
        n = len(jobs)
        self.job_left.extend([0] * n)
        self.job_unfinished.extend([0] * n)
        self.job_finished.extend([math.nan] * n)
        self.job_submit.extend(job.submit_s for job in jobs)
        self.job_tasks.extend(job.tasks for job in jobs)
        self.job_warm.extend(job.warm for job in jobs)

    def _push_arrivals(self, arrivals: list[Arrival]) -> None:
        for arrival in arrivals:
            k = next(self._arrival_ids)
            self._arrivals[k] = arrival
            self.group_left[arrival.group] += 1
            self.job_left[self.group_job[arrival.group]] += 1
            self._at(arrival.time, _ARRIVAL, k)

    def _load_chunk(self) -> None:
        """Take in the chunk that is due and ask for the one after it."""
        chunk = self._next_chunk
        assert chunk is not None and self._stream is not None
        demand = np.array([g.demand for g in chunk.groups]).reshape(len(chunk.groups), self.real)
        if self.slots:
            demand = np.column_stack([demand, np.ones(len(demand))])
        self._add_groups(chunk.groups, demand)
        self._add_jobs(chunk.jobs)
        if self.reclaim is not None:
            self.reclaim.of_group.extend(set() for _ in chunk.groups)
        self._push_arrivals(chunk.arrivals)
        self._stream_tasks += sum(a.tasks for a in chunk.arrivals)
        self._next_chunk = next(self._stream, None)
        if self._next_chunk is not None:
            self._at(self._next_chunk.time, _CHUNK)

    def _retire(self, g: int) -> None:
        """A streamed group that is done for good: drop what it holds (a long trace has
        millions of groups)."""
        self.index.pop(self.names[g], None)
        self.queues[g] = None
        self.demand_dict[g] = None

    def _at(self, time: float, kind: int, a: int = 0, b: int = 0) -> None:
        self._events.push((time, next(self._seq), kind, a, b))

    # ---- events --------------------------------------------------------------------------
    def _add_agent(self, i: int) -> None:
        w = self.workload
        amounts = dict(zip(self.engine.resources, map(float, self.capacity[i]), strict=True))
        self.engine.add_agent(w.agent_names[i], amounts)
        self.series.add_capacity(self.capacity[i, : len(w.resources)])

    def _arrive(self, k: int) -> None:
        arrival = self._arrivals.pop(k)
        g = arrival.group
        u = self.group_user[g]
        j = self.group_job[g]
        self.job_left[j] -= 1
        self.group_left[g] -= 1
        if self.left[u]:
            self.tasks_dropped += arrival.tasks
            return
        rng = None
        if arrival.durations is None:
            rng = np.random.default_rng([self.workload.seed, g, k])
        low, high = arrival.duration_range
        self.queues[g].add(arrival.durations, rng, arrival.tasks, low, high)
        self.unfinished[g] += arrival.tasks
        self.job_unfinished[j] += arrival.tasks
        self.user_submitted[u] += arrival.tasks
        self.series.unfinished[u] += arrival.tasks
        self.series.busy_tasks += arrival.tasks
        self.series.changed()
        self.pending += arrival.tasks
        if self.registered[g]:
            if self._lowered.pop(g, 1) is None:  # the fall first, so a rise stays a rise
                self.engine.set_target(self.names[g], self.unfinished[g] - arrival.tasks)
            self.engine.set_target(self.names[g], self.unfinished[g])
        else:
            self.engine.register(
                self.names[g],
                self.demand_dict[g],
                role=self.workload.users[u].name,
                target=self.unfinished[g],
            )
            self.registered[g] = True

    def _finish(self, g: int, agent: int) -> None:
        if self.gone[g]:
            return
        name = self.names[g]
        engine = self.engine
        engine.release(name, self.workload.agent_names[agent], 1)
        u = self.group_user[g]
        j = self.group_job[g]
        self.running[g] -= 1
        self.unfinished[g] -= 1
        self.job_unfinished[j] -= 1
        self.user_completed[u] += 1
        self.tasks_completed += 1
        self.last_completion = self.now
        series = self.series
        series.unfinished[u] -= 1
        series.busy_tasks -= 1
        series.held[u] -= self.demand_real[g]
        series.used -= self.demand_real[g]
        series.changed()
        if self.slots:
            self.slot_busy -= 1
        if self.agent_used is not None:
            self.agent_used[agent] -= self.demand[g]
        if self.unfinished[g] == 0:
            engine.unregister(name)
            self._lowered.pop(g, None)
            self.registered[g] = False
            if self._stream is not None and self.group_left[g] == 0:
                self._retire(g)
        else:
            self._lowered[g] = None
        series.running[u] -= 1
        if series.running[u] == 0:
            series.held[u] = 0.0  # no float drift once a user holds nothing
        if self.job_unfinished[j] == 0 and self.job_left[j] == 0:
            self.job_finished[j] = self.now

    def _leave(self, u: int) -> None:
        """The user leaves: its frameworks unregister and their tasks are freed."""
        self.left[u] = True
        series = self.series
        for g in self.user_groups[u]:
            if not self.registered[g]:
                continue
            freed = self.engine.unregister(self.names[g])
            self._lowered.pop(g, None)
            if self.agent_used is not None:
                for agent, tasks in freed:
                    self.agent_used[self.agent_index[agent]] -= tasks * self.demand[g]
            self.registered[g] = False
            self.gone[g] = True
            if self.reclaim is not None:
                self.reclaim.left(g)
            series.used -= self.running[g] * self.demand_real[g]
            self.pending -= self.unfinished[g] - self.running[g]
            self.tasks_dropped += self.unfinished[g]
            series.unfinished[u] -= self.unfinished[g]
            series.busy_tasks -= self.unfinished[g]
            if self.slots:
                self.slot_busy -= self.running[g]
            self.unfinished[g] = 0
            self.running[g] = 0
            if self._stream is not None:
                self._retire(g)
        series.running[u] = 0
        series.held[u] = 0.0
        series.changed()

    def _next_tick(self, now: float) -> float:
        """The next tick; with nothing waiting, the first tick after the next event (idle
        ticks would do nothing, and a tick still follows every event within an interval)."""
        after = now + self.interval
        events = self._events
        if self.pending == 0 and events and events.first()[0] > after:
            after = self.interval * math.ceil(events.first()[0] / self.interval - 1e-9)
        return after

    def _allocate(self) -> None:
        if self._lowered:
            for g in self._lowered:
                self.engine.set_target(self.names[g], self.unfinished[g])
            self._lowered.clear()
        grants = self.engine.allocate(self.now)
        if not grants:
            return
        push = self._events.push
        seq = self._seq
        series = self.series
        now = self.now
        for grant in grants:
            g = self.index[grant.framework]
            tasks = grant.tasks
            agent = self.agent_index[grant.agent]
            self.running[g] += tasks
            series.running[self.group_user[g]] += tasks
            self.pending -= tasks
            held = tasks * self.demand_real[g]
            series.held[self.group_user[g]] += held
            series.used += held
            if self.slots:
                self.slot_busy += tasks
            if self.agent_used is not None:
                self._audit_grant(g, agent, tasks)
            if self.reclaim is not None:
                for duration in self.queues[g].take(tasks):
                    self.reclaim.launch(g, agent, duration)
                continue
            for duration in self.queues[g].take(tasks):
                push((now + duration, next(seq), _FINISH, g, agent))
        series.changed()

    def _audit_grant(self, g: int, agent: int, tasks: int) -> None:
        assert self.agent_used is not None
        self.agent_used[agent] += tasks * self.demand[g]
        over = self.agent_used[agent] - self.capacity[agent]
        if (over > 1e-6 * np.maximum(self.capacity[agent], 1.0)).any():
            raise AssertionError(
                f"t={self.now}: agent {self.workload.agent_names[agent]} over capacity after "
                f"granting {tasks} task(s) of {self.names[g]}: used {self.agent_used[agent]}, "
                f"capacity {self.capacity[agent]}"
            )

    # ---- main loop -----------------------------------------------------------------------
    def run(self, progress: Callable[[float, int], bool | None] | None = None) -> TraceResult:
        """Simulate to the horizon (or until every task finished); `progress(now, tasks_done)`
        at every allocation tick, and a progress that returns True ends the run there."""
        started = wallclock.perf_counter()
        w = self.workload
        horizon = w.horizon_s if w.horizon_s is not None else math.inf
        for i, at in enumerate(w.register_s):
            self._at(float(at), _AGENT, i)
        self._push_arrivals(w.arrivals)
        if self._stream is not None:
            self._next_chunk = next(self._stream, None)
            if self._next_chunk is not None:
                self._load_chunk()  # the first chunk is due at once
        for u, user in enumerate(w.users):
            if math.isfinite(user.leave_s):
                self._at(user.leave_s, _LEAVE, u)
        self._at(0.0, _TICK)
        events = self._events
        first, pop = events.first, events.pop
        engine = self.engine
        series = self.series
        end = 0.0
        while events:
            now = first()[0]
            if now > horizon:
                break
            series.advance(now)
            if self.slots:
                self.slot_integral += (now - self.now) * self.slot_busy
            self.now = end = now
            ticked = False
            while events and first()[0] == now:
                _, _, kind, a, b = pop()
                if kind == _FINISH:
                    self._finish(a, b)
                elif kind == _TICK:
                    ticked = True
                elif kind == _ARRIVAL:
                    self._arrive(a)
                elif kind == _AGENT:
                    self._add_agent(a)
                elif kind == TASK_DONE:
                    self.reclaim.done(a)  # type: ignore[union-attr]
                elif kind == KILL:
                    self.reclaim.kill(a)  # type: ignore[union-attr]
                elif kind == _CHUNK:
                    self._load_chunk()
                else:
                    self._leave(a)
            if ticked or engine.run_now:
                self._allocate()  # the engine skips a run that could grant nothing
                if self.reclaim is not None:
                    self.reclaim.run(now)
            if ticked:
                series.tick()
                if not events and self.pending == 0 and horizon == math.inf:
                    break  # nothing runs, nothing will arrive
                if now > MAX_SIMULATED_S:
                    raise ScenarioError(
                        f"simulation passed {MAX_SIMULATED_S:.0f} s with tasks still waiting"
                    )
                self._at(self._next_tick(now), _TICK)
                if progress is not None and progress(now, self.tasks_completed):
                    horizon = now  # asked to stop: the run ends at this tick
                    break
        if math.isfinite(horizon):
            series.advance(horizon)
            if self.slots:
                self.slot_integral += (horizon - self.now) * self.slot_busy
            end = horizon
        return self._result(end, wallclock.perf_counter() - started)

    def _result(self, end: float, wall: float) -> TraceResult:
        w = self.workload
        finished = np.array(self.job_finished)
        submit = np.array(self.job_submit)
        tasks = np.array(self.job_tasks)
        counted = ~np.isnan(finished) & ~np.array(self.job_warm, dtype=bool)
        if self._stream is not None:
            total = self._stream_tasks if self._next_chunk is None else -1
        else:
            total = w.total_tasks()
        all_done = self.tasks_completed == total
        slot_total = float(self.capacity[:, -1].sum()) if self.slots else 0.0
        occupancy = None
        if self.slots and slot_total > 0 and end > 0:
            occupancy = self.slot_integral / (slot_total * end)
        return TraceResult(
            scenario=w.name,
            scheduler=self.engine.scheduler.name,
            selection=str(self.engine.selection),
            mode=str(self.engine.mode),
            level=str(self.engine.level),
            trigger=str(self.engine.trigger),
            seed=self.seed,
            resources=w.resources,
            users=[u.name for u in w.users],
            agents=len(w.agent_names),
            end_s=end,
            makespan_s=self.last_completion if all_done else None,
            jct=(finished - submit)[counted],
            jct_tasks=tasks[counted],
            jobs_submitted=len(self.job_submit),
            tasks_submitted=int(self.user_submitted.sum()),
            tasks_completed=self.tasks_completed,
            tasks_dropped=self.tasks_dropped,
            user_submitted=self.user_submitted.copy(),
            user_completed=self.user_completed.copy(),
            grants=self.engine.grants_total,
            allocation_runs=self.engine.runs,
            series=self.series,
            wall_s=wall,
            slots_per_server=self.slots_per_server,
            slot_occupancy=occupancy,
            notes=list(w.notes),
            reclaim=None if self.reclaim is None else self.reclaim.to_json(),
            engine_config=self.engine.config.to_json(),
        )


def as_workload(scenario: str | Path | dict | TraceWorkload) -> TraceWorkload:
    if isinstance(scenario, TraceWorkload):
        return scenario
    if isinstance(scenario, dict):
        return parse_trace(scenario)
    return load_trace(scenario)


def run_trace(
    scenario: str | Path | dict | TraceWorkload,
    config: EngineConfig,
    progress: Callable[[float, int], None] | None = None,
    *,
    slots_per_server: int = DEFAULT_SLOTS_PER_SERVER,
    horizon_s: float | None = None,
    track_users: bool | None = None,
    audit: bool = False,
) -> TraceResult:
    """Simulate a trace scenario (path, parsed YAML mapping or TraceWorkload) under one
    engine configuration; `progress(now, tasks_done)` per tick.

    Scheduler "slots" is the Hadoop-style slot baseline (`slots_per_server` slots per
    maximum server); "drf" with selection "firstfit" is First-Fit DRFH; "bfdrf" is Best-Fit
    DRFH. `horizon_s` overrides the scenario's stop time. `audit` checks every grant
    against the agent's capacity (slower).
    """
    workload = as_workload(scenario)
    if horizon_s is not None:
        workload = replace(workload, horizon_s=horizon_s)
    simulator = TraceSimulator(
        workload, config, slots_per_server=slots_per_server, track_users=track_users, audit=audit
    )
    return simulator.run(progress)
