"""Job-batch scenarios: agents (optionally registered over time) and groups of Spark jobs.

```yaml
agents:
  - {name: t1a, resources: {cpus: 4, mem: 14336}, register_at: 0}
groups:
  - name: pi                     # a Mesos role
    weight: 1
    queues: 5                    # submission queues; each runs its jobs one after another
    jobs_per_queue: 50
    demand: {cpus: 2, mem: 2048} # per executor; or `spark:` with a Spark conf
    executors: 64                # executors each job asks for (default: from the conf)
    job: {work: 400, startup_s: 5, executor_start_s: 3, serial_s: 2, release_spread_s: 2,
          task_s: 10, start_cpu_s: 0,
          jitter: {work: 0.2, executor_start_s: 0, random_release: true}}
    app: {kind: pi, partitions: 8, samples: 200000}   # what a live run submits
```

`host: {cores: 2}` (top level) says the agents are emulated on one machine of that many real
cores: each executor's start then also costs its job's `start_cpu_s` CPU-seconds, the cores
shared equally among every executor starting at the time (docs/emulation.md).

`jitter` (all 0 by default: the deterministic model) gives each part a relative spread, drawn
per job from a stream of its own (`allocator.sim.workload`), so that every scheduler and mode
sees the same jobs at a seed.

One file serves both runs. The simulator (`fairbroker sim`) uses `job:` (the job model, always
required) and ignores `app:`. The live runner (`fairbroker batch`, allocator.batch) ignores
`job:` and needs `app:` and `spark:` (the conf passed to spark-submit, which also gives the
per-executor demand). `app:` is one of
  {kind: pi, partitions: 8, samples: 200000, seed: 0}        # spark_shim/apps/pi.py
  {kind: wordcount, input_mb: 20, partitions: 12, seed: 0}   # input made by apps/wordgen.py
(both take `task_s: S`, emulated work: each task lasts at least S seconds, docs/emulation.md)
  {kind: script, path: my_app.py, args: [a, 1]}              # any script; checked by exit code
where `samples` is per partition and `partitions` of a WordCount defaults to twice the job's
executors. A script's relative path is taken from the current directory.

`build_pools` turns a batch's `admission:` sections into allocator.admission's pools, for both
runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from allocator.admission import Admission, AdmissionConfig, PendingJob, Policy, Pool
from allocator.errors import FairbrokerError, ScenarioError
from allocator.model import AgentSpec, check_amounts
from allocator.scenarios.files import first_error, load_file
from allocator.scenarios.spark_demand import executor_demand


@dataclass(frozen=True)
class JobModel:
    """A job's `job:` section as the simulator runs it (allocator.sim.jobs): the driver
    starts (`startup_s`), each granted executor starts (`executor_start_s`) and pulls from a
    pool of `work` executor-seconds, a driver-side `serial_s` tail follows, and the executors
    are released over `release_spread_s`."""

    work: float  # executor-seconds of parallel work
    startup_s: float = 5.0
    executor_start_s: float = 3.0
    serial_s: float = 2.0
    release_spread_s: float = 2.0
    #: One Spark task's length on one executor: what a reclaimed executor killed mid-task
    #: loses (the simulator's reclaim, docs/reclaim.md); nothing else reads it.
    task_s: float = 10.0
    #: CPU-seconds an executor's start costs on the batch's `host:` (its JVM, registering,
    #: its Python workers), shared with every executor starting at the same time: on an
    #: emulated cluster (docs/emulation.md) start-up is the one part of a job that is not
    #: emulated, and it contends for the machine's real cores. 0: no such cost.
    start_cpu_s: float = 0.0

    def duration(self, executors: int) -> float:
        """T(n) with a constant allocation of n executors from the start (an executor's
        start-up taken alone, without contention)."""
        if executors <= 0:
            return float("inf")
        start = self.executor_start_s + self.start_cpu_s
        return self.startup_s + start + self.serial_s + self.work / executors


class JitterSpec(BaseModel):
    """Relative spread (0 <= j < 1) of each part of a job; `random_release`: a finishing
    job's executors are released after independent delays in (0, release_spread_s] instead
    of on an even grid."""

    model_config = ConfigDict(extra="forbid")

    work: float = Field(default=0.0, ge=0, lt=1, allow_inf_nan=False)
    startup_s: float = Field(default=0.0, ge=0, lt=1, allow_inf_nan=False)
    executor_start_s: float = Field(default=0.0, ge=0, lt=1, allow_inf_nan=False)
    serial_s: float = Field(default=0.0, ge=0, lt=1, allow_inf_nan=False)
    random_release: bool = False


class HostSpec(BaseModel):
    """The machine an emulated cluster's executors really start on (docs/emulation.md):
    executors starting at once share its `cores`, each needing its job's `start_cpu_s`."""

    model_config = ConfigDict(extra="forbid")

    cores: float = Field(gt=0, le=4096, allow_inf_nan=False)


class TimedAgentSpec(AgentSpec):
    register_at: float = Field(default=0.0, ge=0, allow_inf_nan=False)


class JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    work: float = Field(gt=0, allow_inf_nan=False)
    startup_s: float = Field(default=5.0, ge=0, allow_inf_nan=False)
    executor_start_s: float = Field(default=3.0, ge=0, allow_inf_nan=False)
    serial_s: float = Field(default=2.0, ge=0, allow_inf_nan=False)
    release_spread_s: float = Field(default=2.0, ge=0, allow_inf_nan=False)
    task_s: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    start_cpu_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    jitter: JitterSpec = JitterSpec()

    def model(self) -> JobModel:
        return JobModel(**self.model_dump(exclude={"jitter"}))


class PiApp(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["pi"]
    partitions: int = Field(default=8, ge=1, le=100_000)
    samples: int = Field(default=200_000, ge=1, le=10**10)  # per partition
    seed: int = Field(default=0, ge=0)
    #: Emulated work (docs/emulation.md): each task lasts at least this many seconds.
    task_s: float = Field(default=0.0, ge=0, lt=3600, allow_inf_nan=False)


class WordCountApp(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["wordcount"]
    input_mb: float = Field(gt=0, le=100_000, allow_inf_nan=False)
    partitions: int | None = Field(default=None, ge=1, le=100_000)
    seed: int = Field(default=0, ge=0)
    #: Emulated work (docs/emulation.md): each counting task lasts at least this many seconds.
    task_s: float = Field(default=0.0, ge=0, lt=3600, allow_inf_nan=False)


class ScriptApp(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["script"]
    path: str = Field(min_length=1)
    args: list[str | bool | int | float] = []


AppSpec = Annotated[PiApp | WordCountApp | ScriptApp, Field(discriminator="kind")]
APP_KINDS = ("pi", "wordcount", "script")


class AdmissionSpec(BaseModel):
    """Which waiting job starts next (allocator.admission): fcfs, sjf or wfq (paper 004)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    policy: Literal["fcfs", "sjf", "wfq"]
    lam: int = Field(default=0, ge=0, alias="lambda")
    alpha1: int = Field(default=2, ge=1)
    alpha2: int = Field(default=1, ge=0)

    @model_validator(mode="after")
    def _alphas(self) -> AdmissionSpec:
        if self.alpha1 <= self.alpha2:
            raise ValueError(f"alpha1: must be greater than alpha2 ({self.alpha2})")
        return self

    def config(self) -> AdmissionConfig:
        return AdmissionConfig(Policy(self.policy), self.lam, self.alpha1, self.alpha2)


class JobEntry(BaseModel):
    """One job's admission attributes: arrival and deadline in seconds from the batch's
    start, priority (higher first), and optionally its own work (executor-seconds)."""

    model_config = ConfigDict(extra="forbid")

    arrival_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    priority: int = Field(default=0, ge=0)
    deadline_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    work: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _deadline_after_arrival(self) -> JobEntry:
        if self.deadline_s is not None and self.deadline_s <= self.arrival_s:
            raise ValueError(
                f"deadline_s: {self.deadline_s:g} is not after arrival_s {self.arrival_s:g}"
            )
        return self


class GroupSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    queues: int = Field(ge=1)
    jobs_per_queue: int = Field(ge=1)
    demand: dict[str, float] | None = None
    spark: dict[str, Any] | None = None
    executors: int | None = Field(default=None, ge=1)
    job: JobSpec
    submit_gap_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    constraints: dict[str, str | int | float | bool | list[str | int | float | bool]] = {}
    app: AppSpec | None = None
    #: Admission (allocator.admission): this group's own pool, its jobs' default priority
    #: and deadline, and optionally one entry per job (queues x jobs_per_queue of them).
    admission: AdmissionSpec | None = None
    priority: int = Field(default=0, ge=0)
    deadline_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    jobs: list[JobEntry] | None = None

    @model_validator(mode="after")
    def _demand_source(self) -> GroupSpec:
        if (self.demand is None) == (self.spark is None):
            raise ValueError("give exactly one of demand or spark")
        if self.demand is not None:
            check_amounts(self.demand, "demand")
        if self.jobs is not None and len(self.jobs) != self.queues * self.jobs_per_queue:
            raise ValueError(
                f"jobs: {len(self.jobs)} entries for queues x jobs_per_queue = "
                f"{self.queues * self.jobs_per_queue} jobs"
            )
        return self

    def job_entries(self) -> list[JobEntry]:
        """Admission attributes of the group's jobs, in declaration order."""
        if self.jobs is not None:
            return list(self.jobs)
        entry = JobEntry(priority=self.priority, deadline_s=self.deadline_s)
        return [entry] * (self.queues * self.jobs_per_queue)

    def job_model(self, entry: JobEntry | None = None) -> JobModel:
        model = self.job.model()
        if entry is not None and entry.work is not None:
            model = replace(model, work=entry.work)
        return model

    def expected_duration(self, entry: JobEntry) -> float:
        """The job model's estimate at the job's full width (what sjf orders by)."""
        _, executors = self.executor_demand()
        return self.job_model(entry).duration(executors)

    def executor_demand(self) -> tuple[dict[str, float], int]:
        """Per-executor demand vector and executors wanted per job."""
        if self.demand is not None:
            if self.executors is None:
                raise ValueError("executors: required with demand")
            return dict(self.demand), self.executors
        derived = executor_demand(self.spark or {}, max_when_unbounded=0)
        wanted = self.executors or derived.max_executors
        if wanted <= 0:
            raise ValueError(
                "executors: not set and not derivable from the spark conf "
                "(set spark.cores.max or spark.executor.instances)"
            )
        return derived.vector(), wanted


class BatchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "batch"
    description: str = ""
    calibration: str = ""
    resources: list[str] | None = None
    agents: list[TimedAgentSpec] = Field(min_length=1)
    groups: list[GroupSpec] = Field(min_length=1)
    #: The one machine an emulated cluster runs on; without it executors start without
    #: contending (their start_cpu_s is then a plain delay).
    host: HostSpec | None = None
    #: One admission pool of every job of the batch (then no group may have its own).
    admission: AdmissionSpec | None = None

    @model_validator(mode="after")
    def _unique(self) -> BatchSpec:
        if self.admission is not None:
            for i, group in enumerate(self.groups):
                if group.admission is not None:
                    raise ValueError(
                        f"groups[{i}].admission: the batch has its own admission: policy"
                    )
        for kind, items in (("agents", self.agents), ("groups", self.groups)):
            seen: set[str] = set()
            for i, item in enumerate(items):
                if item.name in seen:
                    raise ValueError(f"{kind}[{i}].name: duplicate name {item.name!r}")
                seen.add(item.name)
        return self

    def role_weights(self) -> dict[str, float]:
        """Each group's weight: its role's weight in two-level fairness (sim and live)."""
        return {g.name: g.weight for g in self.groups}

    def resource_names(self) -> tuple[str, ...]:
        if self.resources is not None:
            return tuple(self.resources)
        names = ["cpus", "mem"]
        for agent in self.agents:
            names.extend(r for r in agent.resources if r not in names)
        return tuple(names)


def _batch_error(error: ValidationError) -> str:
    """First validation error, without pydantic's `app.<kind>` tag step in the location."""
    where, _, message = first_error(error, BatchSpec).partition(": ")
    for kind in APP_KINDS:
        where = where.replace(f".app.{kind}.", ".app.", 1)
    if message.startswith("Unable to extract tag"):
        return f"{where}.kind: missing (one of {', '.join(APP_KINDS)})"
    return f"{where}: {message}" if message else where


def parse_batch(data: Any) -> BatchSpec:
    if not isinstance(data, dict):
        raise ScenarioError("batch: expected a mapping with 'agents' and 'groups'")
    try:
        spec = BatchSpec.model_validate(data)
    except ValidationError as error:
        raise ScenarioError(_batch_error(error)) from None
    resources = set(spec.resource_names())
    for g, group in enumerate(spec.groups):
        try:
            demand, _ = group.executor_demand()
        except (ValueError, FairbrokerError) as error:
            raise ScenarioError(f"groups[{g}]: {error}") from None
        for r in demand:
            if r not in resources:
                raise ScenarioError(f"groups[{g}].demand.{r}: unknown resource")
        fits = any(
            all(demand[r] <= agent.resources.get(r, 0.0) + 1e-9 for r in demand)
            for agent in spec.agents
        )
        if not fits:
            raise ScenarioError(
                f"groups[{g}].demand: an executor of {group.name!r} fits no agent; "
                "its jobs can never run"
            )
    return spec


def load_batch(path: str | Path) -> BatchSpec:
    return load_file(path, parse_batch)


def build_pools(spec: BatchSpec, override: AdmissionConfig | None = None) -> list[Pool]:
    """The pools of a batch: `override` (the command line) or the batch's `admission:` make
    one pool of every job; otherwise each group with its own `admission:` is a pool. Groups
    in no pool keep their submission queues."""
    batch_config = override or (spec.admission.config() if spec.admission else None)
    if batch_config is not None:
        members = [tuple(range(len(spec.groups)))]
        configs = [batch_config]
    else:
        members = [(g,) for g, group in enumerate(spec.groups) if group.admission is not None]
        configs = [spec.groups[m[0]].admission.config() for m in members]  # type: ignore[union-attr]
    pools = []
    for groups, config in zip(members, configs, strict=True):
        entries = [
            (g, k, entry) for g in groups for k, entry in enumerate(spec.groups[g].job_entries())
        ]
        # Declaration order: the first job of every queue of every group, then the second...
        # as the submission queues would start them.
        entries.sort(key=lambda e: (e[1] // spec.groups[e[0]].queues, e[0], e[1]))
        jobs = [
            PendingJob(
                key=(g, k),
                order=order,
                arrival=entry.arrival_s,
                priority=entry.priority,
                deadline=entry.deadline_s,
                estimate=spec.groups[g].expected_duration(entry),
            )
            for order, (g, k, entry) in enumerate(entries)
        ]
        slots = sum(spec.groups[g].queues for g in groups)
        pools.append(Pool(Admission(jobs, slots, config), groups))
    return pools
