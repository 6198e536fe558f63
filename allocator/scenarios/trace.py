"""Trace scenarios: a cluster, users that may join and leave, and jobs of tasks.

A trace scenario is a YAML file with `kind: trace` (docs/traces.md has the full format):

```yaml
kind: trace
name: drfh-dynamic
horizon_s: 1500            # stop here (omit: run until every task has finished)
sample_s: 10               # time-series sampling interval
cluster: {google: {agents: 100, seed: 1}}      # or {csv: machines.csv} or {agents: [...]}
users:                     # optional: weights, join and leave times
  - {name: u1, join_s: 0, leave_s: 1080}
jobs:                      # exactly one of list / csv / google
  list:
    - {user: u1, tasks: 1000000, demand_norm: {cpus: 0.2, mem: 0.3}, duration_s: [20, 40]}
```

Loading turns it into a `TraceWorkload`: absolute capacities, task groups (one engine
framework each: a job's tasks of one demand vector) and their arrivals, with user join and
leave times already applied. CSV errors name the file, line and field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from allocator.errors import ScenarioError
from allocator.memory_guard import TRACE_BYTES_PER_AGENT, require_memory
from allocator.model import check_amounts
from allocator.scenarios.batch import TimedAgentSpec
from allocator.scenarios.files import load_file, validate
from allocator.scenarios.google import (
    GoogleClusterSpec,
    GoogleJobs,
    GoogleWorkloadSpec,
    google_cluster,
    google_job_stream,
    google_jobs,
)
from allocator.scenarios.trace_csv import (
    CsvTaskRow,
    TraceFileError,
    read_jobs_csv,
    read_machines_csv,
)
from allocator.workloads import LARGEST_SERVER


# ---- the materialized workload the simulator runs ---------------------------------------
@dataclass
class TraceUser:
    name: str
    weight: float = 1.0
    join_s: float = 0.0
    leave_s: float = math.inf


@dataclass
class TraceJob:
    name: str
    user: int
    tasks: int  # tasks submitted inside the window, over all its arrivals
    submit_s: float  # first (effective) arrival
    warm: bool = False  # carried over from before t = 0: no completion time


@dataclass
class TaskGroup:
    """One engine framework: the tasks of a job that share a demand vector."""

    name: str
    job: int
    user: int
    demand: np.ndarray  # (R,) absolute


@dataclass
class Arrival:
    time: float
    group: int
    tasks: int
    durations: np.ndarray | None = None  # per task, in start order
    duration_range: tuple[float, float] = (0.0, 0.0)  # uniform draws when durations is None


@dataclass
class TraceChunk:
    """A streamed workload's next jobs: their groups and arrivals (sorted by time, none
    before `time`), numbered after every earlier chunk's (global job and group indices)."""

    time: float  # the first arrival
    jobs: list[TraceJob]
    groups: list[TaskGroup]
    arrivals: list[Arrival]
    dropped: int = 0  # tasks of jobs that arrive after their user left


@dataclass
class TraceWorkload:
    name: str
    resources: tuple[str, ...]
    largest: np.ndarray  # (R,) the "maximum server" normalized demands refer to
    agent_names: list[str]
    capacity: np.ndarray  # (A, R)
    register_s: np.ndarray  # (A,)
    users: list[TraceUser]
    jobs: list[TraceJob]
    groups: list[TaskGroup]
    arrivals: list[Arrival]  # sorted by time
    horizon_s: float | None = None
    sample_s: float = 60.0
    seed: int = 0
    description: str = ""
    notes: list[str] = field(default_factory=list)
    #: A streamed workload (`stream_s`): jobs, groups and arrivals above are empty and each
    #: call gives a fresh iterator of chunks, so a run holds one chunk of the trace at a time.
    stream: Callable[[], Iterator[TraceChunk]] | None = None

    def total_tasks(self) -> int:
        """Tasks of every arrival (a streamed workload: of every chunk, generated again)."""
        if self.stream is not None:
            return sum(a.tasks for chunk in self.stream() for a in chunk.arrivals)
        return sum(a.tasks for a in self.arrivals)


# ---- the YAML schema ---------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClusterSpec(_Strict):
    google: GoogleClusterSpec | None = None
    agents: list[TimedAgentSpec] | None = None
    csv: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ClusterSpec:
        if sum(x is not None for x in (self.google, self.agents, self.csv)) != 1:
            raise ValueError("give exactly one of google, agents or csv")
        return self


class UserSpec(_Strict):
    name: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    join_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    leave_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _order(self) -> UserSpec:
        if self.leave_s is not None and self.leave_s <= self.join_s:
            raise ValueError("leave_s: must be after join_s")
        return self


class ListJobSpec(_Strict):
    user: str = Field(min_length=1)
    name: str | None = None
    submit_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    tasks: int = Field(ge=1)
    demand: dict[str, float] | None = None
    demand_norm: dict[str, float] | None = None
    duration_s: float | tuple[float, float]

    @model_validator(mode="after")
    def _check(self) -> ListJobSpec:
        if (self.demand is None) == (self.demand_norm is None):
            raise ValueError("give exactly one of demand (absolute) or demand_norm")
        check_amounts(self.demand or self.demand_norm or {}, "demand")
        low, high = _range(self.duration_s)
        if not (0 < low <= high < math.inf):
            raise ValueError("duration_s: must be positive and finite (a value or [low, high])")
        return self


class JobsSpec(_Strict):
    entries: list[ListJobSpec] | None = Field(default=None, alias="list")
    csv: str | None = None
    google: GoogleWorkloadSpec | None = None

    @model_validator(mode="after")
    def _one_source(self) -> JobsSpec:
        if sum(x is not None for x in (self.entries, self.csv, self.google)) != 1:
            raise ValueError("give exactly one of list, csv or google")
        return self


class TraceSpec(_Strict):
    kind: Literal["trace"]
    name: str = "trace"
    description: str = ""
    calibration: str = ""
    resources: list[str] = Field(default_factory=lambda: ["cpus", "mem"], min_length=1)
    largest: dict[str, float] | None = None
    horizon_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    sample_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    seed: int = Field(default=0, ge=0)
    #: Generate jobs.google lazily, this many seconds of arrivals at a time (long traces).
    stream_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    cluster: ClusterSpec
    users: list[UserSpec] = []
    jobs: JobsSpec

    @model_validator(mode="after")
    def _check(self) -> TraceSpec:
        if self.jobs.google is not None and self.horizon_s is None:
            raise ValueError("horizon_s: required with jobs.google (the arrival window)")
        if self.stream_s is not None:
            if self.jobs.google is None:
                raise ValueError("stream_s: only with jobs.google")
            if any(u.join_s > 0 for u in self.users):
                raise ValueError("stream_s: users must not join late (join_s) in a stream")
        seen: set[str] = set()
        for i, user in enumerate(self.users):
            if user.name in seen:
                raise ValueError(f"users[{i}].name: duplicate name {user.name!r}")
            seen.add(user.name)
        return self


def _range(value: float | tuple[float, float]) -> tuple[float, float]:
    if isinstance(value, tuple | list):
        return float(value[0]), float(value[1])
    return float(value), float(value)


# ---- building the workload ----------------------------------------------------------------
def _cluster(spec: TraceSpec, base: Path, resources: tuple[str, ...]):
    cluster = spec.cluster
    declared = spec.largest
    if cluster.google is not None:
        largest = dict(LARGEST_SERVER) | (declared or {})
        agents = cluster.google.agents
        require_memory(agents * TRACE_BYTES_PER_AGENT, f"cluster.google.agents: {agents:,} agents")
        names, capacity2 = google_cluster(cluster.google.agents, cluster.google.seed, largest)
        capacity = np.zeros((len(names), len(resources)))
        for k, r in enumerate(("cpus", "mem")):
            if r in resources:
                capacity[:, resources.index(r)] = capacity2[:, k]
        extra = [r for r in resources if r not in ("cpus", "mem")]
        if extra:
            raise ScenarioError(f"cluster.google: Table I has cpus and mem only, not {extra[0]!r}")
        return names, capacity, np.zeros(len(names)), np.array([largest[r] for r in resources])
    if cluster.agents is not None:
        names = [a.name for a in cluster.agents]
        if len(set(names)) != len(names):
            raise ScenarioError("cluster.agents: duplicate agent name")
        capacity = np.zeros((len(names), len(resources)))
        for i, agent in enumerate(cluster.agents):
            for r, amount in agent.resources.items():
                if r not in resources:
                    raise ScenarioError(f"cluster.agents[{i}].resources.{r}: unknown resource")
                capacity[i, resources.index(r)] = amount
        register = np.array([a.register_at for a in cluster.agents])
    else:
        path = base / str(cluster.csv)
        fallback = np.array([LARGEST_SERVER.get(r, 1.0) for r in resources])
        if declared:
            fallback = np.array(
                [declared.get(r, f) for r, f in zip(resources, fallback, strict=True)]
            )
        names, capacity, register = read_machines_csv(path, resources, fallback)
    if declared:
        largest = np.array([declared.get(r, 0.0) for r in resources])
        largest = np.where(largest > 0, largest, capacity.max(axis=0))
    else:
        largest = capacity.max(axis=0)
    return names, capacity, register, largest


class _Builder:
    """Collects users, jobs, groups and arrivals, applying join and leave times."""

    def __init__(self, users: list[UserSpec]) -> None:
        self.users: list[TraceUser] = []
        self.user_index: dict[str, int] = {}
        for u in users:
            self.user(u.name, u.weight, u.join_s, u.leave_s)
        self.jobs: list[TraceJob] = []
        self.job_index: dict[str, int] = {}
        self.groups: list[TaskGroup] = []
        self.group_index: dict[tuple[int, bytes], int] = {}
        self.groups_of_job: dict[int, int] = {}
        self.arrivals: list[Arrival] = []
        self.dropped = 0

    def user(self, name: str, weight=1.0, join_s=0.0, leave_s=None) -> int:
        if name not in self.user_index:
            self.user_index[name] = len(self.users)
            self.users.append(
                TraceUser(name, weight, join_s, math.inf if leave_s is None else leave_s)
            )
        return self.user_index[name]

    def add(
        self,
        user_name: str,
        job_name: str,
        time: float,
        tasks: int,
        demand: np.ndarray,
        durations: np.ndarray | None = None,
        duration_range=(0.0, 0.0),
        warm=False,
    ) -> None:
        u = self.user(user_name)
        user = self.users[u]
        time = max(time, user.join_s)
        if time >= user.leave_s:
            self.dropped += tasks
            return
        j = self.job_index.get(job_name)
        if j is None:
            j = self.job_index[job_name] = len(self.jobs)
            self.jobs.append(TraceJob(job_name, u, 0, time, warm))
        job = self.jobs[j]
        if job.user != u:
            raise ScenarioError(
                f"job {job_name!r}: submitted by {self.users[job.user].name!r} and {user_name!r}"
            )
        job.tasks += tasks
        job.submit_s = min(job.submit_s, time)
        key = (j, demand.tobytes())
        g = self.group_index.get(key)
        if g is None:
            g = self.group_index[key] = len(self.groups)
            same_job = self.groups_of_job[j] = self.groups_of_job.get(j, 0) + 1
            name = job_name if same_job == 1 else f"{job_name}#{same_job}"
            self.groups.append(TaskGroup(name, j, u, demand))
        self.arrivals.append(Arrival(time, g, tasks, durations, duration_range))


def _fits(capacity: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """(G,) whether each demand row fits some single agent."""
    out = np.zeros(len(demand), dtype=bool)
    capacity = np.unique(capacity, axis=0)  # a drawn cluster has a few machine types
    unique, inverse = np.unique(demand, axis=0, return_inverse=True)
    tol = 1e-9 * np.maximum(capacity.max(axis=0), 1.0)
    for start in range(0, len(unique), 256):
        block = unique[start : start + 256]
        ok = (block[:, None, :] <= capacity[None, :, :] + tol).all(axis=2).any(axis=1)
        out_block = np.zeros(len(unique), dtype=bool)
        out_block[start : start + len(block)] = ok
        out |= out_block[inverse.ravel()]
    return out


def build_workload(spec: TraceSpec, base: Path = Path(".")) -> TraceWorkload:
    resources = tuple(spec.resources)
    names, capacity, register, largest = _cluster(spec, base, resources)
    builder = _Builder(spec.users)
    jobs = spec.jobs
    csv_rows: list[CsvTaskRow] = []
    path = None
    if jobs.entries is not None:
        for k, item in enumerate(jobs.entries):
            amounts = item.demand if item.demand is not None else item.demand_norm or {}
            scale = largest if item.demand_norm is not None else np.ones(len(resources))
            for r in amounts:
                if r not in resources:
                    raise ScenarioError(f"jobs.list[{k}].demand: unknown resource {r!r}")
            demand = np.array([amounts.get(r, 0.0) for r in resources]) * scale
            start = item.submit_s if item.submit_s is not None else 0.0
            builder.add(
                item.user,
                item.name or f"{item.user}-job{k}",
                start,
                item.tasks,
                demand,
                duration_range=_range(item.duration_s),
            )
    elif jobs.csv is not None:
        path = base / jobs.csv
        csv_rows = read_jobs_csv(path, resources, largest)
        csv_rows.sort(key=lambda row: row.submit_s)
        for row in csv_rows:
            builder.add(
                row.user,
                row.job,
                row.submit_s,
                row.tasks,
                row.demand,
                durations=np.full(row.tasks, row.duration_s),
            )
    else:
        google = jobs.google
        assert google is not None and spec.horizon_s is not None
        if tuple(resources[:2]) != ("cpus", "mem"):
            raise ScenarioError("jobs.google: needs resources [cpus, mem]")
        normalized = capacity[:, :2].sum(axis=0) / largest[:2]
        if spec.stream_s is not None:
            return _streamed(spec, builder, names, capacity, register, largest, normalized)
        try:
            generated = google_jobs(google, normalized, spec.horizon_s)
        except ValueError as error:
            raise ScenarioError(str(error)) from None
        for name in generated.user_names:
            builder.user(name)
        for j in range(generated.n_jobs):
            lo, hi = generated.offsets[j], generated.offsets[j + 1]
            demand = np.zeros(len(resources))
            demand[:2] = generated.demand[j] * largest[:2]
            builder.add(
                generated.user_names[generated.user[j]],
                f"job{j:06d}",
                float(generated.submit_s[j]),
                int(generated.tasks[j]),
                demand,
                durations=generated.durations[lo:hi],
                warm=bool(generated.warm[j]),
            )
    if not builder.arrivals:
        raise ScenarioError("jobs: no task arrives while its user is in the cluster")
    demands = np.array([g.demand for g in builder.groups])
    fits = _fits(capacity, demands)
    for g in np.flatnonzero(~fits):
        group = builder.groups[g]
        where = "jobs"
        if path is not None:
            line = next(r.line for r in csv_rows if r.job == builder.jobs[group.job].name)
            where = f"{path}:{line}"
        amounts = ", ".join(f"{r} {v:g}" for r, v in zip(resources, group.demand, strict=True))
        raise (TraceFileError if path is not None else ScenarioError)(
            f"{where}: demand: job {builder.jobs[group.job].name!r} ({amounts}) "
            "fits no machine; it can never run"
        )
    builder.arrivals.sort(key=lambda a: a.time)
    notes = []
    if builder.dropped:
        notes.append(f"{builder.dropped} tasks arrive after their user left and are not submitted")
    return TraceWorkload(
        name=spec.name,
        resources=resources,
        largest=largest,
        agent_names=list(names),
        capacity=capacity,
        register_s=register,
        users=builder.users,
        jobs=builder.jobs,
        groups=builder.groups,
        arrivals=builder.arrivals,
        horizon_s=spec.horizon_s,
        sample_s=spec.sample_s,
        seed=spec.seed,
        description=spec.description,
        notes=notes,
    )


def _google_chunk(
    generated: GoogleJobs,
    users: list[TraceUser],
    user_index: dict[str, int],
    counts: list[int],
    largest: np.ndarray,
    n_resources: int,
) -> TraceChunk:
    """Generated jobs as a chunk, as `_Builder.add` would have made them (one group and one
    arrival per job, named after the job's index in the stream); `counts` holds the jobs
    generated, jobs kept and groups so far, and is advanced."""
    generated_before, job_base, group_base = counts
    demand = np.zeros((generated.n_jobs, n_resources))
    demand[:, :2] = generated.demand * largest[:2]
    jobs: list[TraceJob] = []
    groups: list[TaskGroup] = []
    arrivals: list[Arrival] = []
    dropped = 0
    offsets = generated.offsets
    submit = generated.submit_s.tolist()
    tasks = generated.tasks.tolist()
    warm = generated.warm.tolist()
    user = generated.user.tolist()
    for j in range(generated.n_jobs):
        u = user_index[generated.user_names[user[j]]]
        time = submit[j]
        if time >= users[u].leave_s:
            dropped += tasks[j]
            continue
        name = f"job{generated_before + j:06d}"
        job = job_base + len(jobs)
        jobs.append(TraceJob(name, u, tasks[j], time, warm[j]))
        groups.append(TaskGroup(name, job, u, demand[j]))
        durations = generated.durations[offsets[j] : offsets[j + 1]].copy()
        arrivals.append(Arrival(time, group_base + len(arrivals), tasks[j], durations))
    counts[:] = [
        generated_before + generated.n_jobs,
        job_base + len(jobs),
        group_base + len(groups),
    ]
    time = arrivals[0].time if arrivals else math.inf
    return TraceChunk(time, jobs, groups, arrivals, dropped)


def _streamed(
    spec: TraceSpec,
    builder: _Builder,
    names: list[str],
    capacity: np.ndarray,
    register: np.ndarray,
    largest: np.ndarray,
    normalized: np.ndarray,
) -> TraceWorkload:
    """A google workload generated `spec.stream_s` of arrivals at a time, as the run needs it
    (same jobs, groups and arrivals as without streaming)."""
    google = spec.jobs.google
    assert google is not None and spec.horizon_s is not None and spec.stream_s is not None
    for name in (f"user{k:03d}" for k in range(google.users)):
        builder.user(name)
    users, user_index = builder.users, builder.user_index
    horizon, chunk_s, resources = spec.horizon_s, spec.stream_s, tuple(spec.resources)

    def chunks() -> Iterator[TraceChunk]:
        counts = [0, 0, 0]
        carried = 0  # dropped tasks of chunks with no arrival, reported with the next
        try:
            stream = google_job_stream(google, normalized, horizon, chunk_s)
            for generated in stream:
                chunk = _google_chunk(generated, users, user_index, counts, largest, len(resources))
                demands = np.array([g.demand for g in chunk.groups]).reshape(-1, len(resources))
                bad = np.flatnonzero(~_fits(capacity, demands))
                if len(bad):
                    group = chunk.groups[bad[0]]
                    amounts = ", ".join(
                        f"{r} {v:g}" for r, v in zip(resources, group.demand, strict=True)
                    )
                    raise ScenarioError(
                        f"jobs: demand: job {group.name!r} ({amounts}) fits no machine; "
                        "it can never run"
                    )
                chunk.dropped += carried
                carried = chunk.dropped if not chunk.arrivals else 0
                if chunk.arrivals:
                    yield chunk
        except ValueError as error:
            raise ScenarioError(str(error)) from None

    return TraceWorkload(
        name=spec.name,
        resources=resources,
        largest=largest,
        agent_names=list(names),
        capacity=capacity,
        register_s=register,
        users=users,
        jobs=[],
        groups=[],
        arrivals=[],
        horizon_s=spec.horizon_s,
        sample_s=spec.sample_s,
        seed=spec.seed,
        description=spec.description,
        notes=[f"jobs generated as a stream, {chunk_s:g} s of arrivals at a time"],
        stream=chunks,
    )


# ---- loading ------------------------------------------------------------------------------
def parse_trace(data: Any, base: Path = Path(".")) -> TraceWorkload:
    if not isinstance(data, dict):
        raise ScenarioError("trace: expected a mapping with kind: trace, cluster and jobs")
    return build_workload(validate(TraceSpec, data), base)


def load_trace(path: str | Path) -> TraceWorkload:
    """A trace scenario file; its CSV files are read relative to its directory (their errors
    name the CSV file and line, not the scenario)."""
    path = Path(path)
    return load_file(path, lambda data: parse_trace(data, path.parent))
