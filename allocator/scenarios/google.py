"""Google-like clusters and workloads: paper 001's Table I server mix and synthetic jobs shaped
after the published statistics of the 2011 Google cluster trace (the trace itself is not
reachable offline; `docs/traces.md` says which shapes we chose and why).

Everything here is vectorised numpy and deterministic per seed. Demands come out normalized
to the largest server (Table I's convention: the largest server is 1 in every resource).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from allocator.workloads import GOOGLE_SERVER_MIX, LARGEST_SERVER, google_agent_capacities


class GoogleClusterSpec(BaseModel):
    """`cluster: {google: {agents: 2000, seed: 1}}`: agents drawn from the Table I mix."""

    model_config = ConfigDict(extra="forbid")

    agents: int = Field(ge=1)
    seed: int = Field(default=0, ge=0)


def google_cluster(
    n_agents: int, seed: int = 0, largest: dict[str, float] | None = None
) -> tuple[list[str], np.ndarray]:
    """Agent names and (n_agents, 2) cpus/mem capacities drawn from the Table I mix."""
    rng = np.random.default_rng([seed, 0x6001])
    capacity = google_agent_capacities(n_agents, rng, largest or LARGEST_SERVER)
    return [f"g{i:05d}" for i in range(n_agents)], capacity


def server_mix_fractions() -> np.ndarray:
    """Table I proportions, in Table I order (for checking a drawn cluster)."""
    counts = np.array([c for c, _, _ in GOOGLE_SERVER_MIX], dtype=float)
    return counts / counts.sum()


class GoogleWorkloadSpec(BaseModel):
    """Parameters of the synthetic Google-like workload (defaults: see docs/traces.md).

    Jobs arrive as a Poisson process; each job belongs to one user, has a number of tasks,
    one per-task demand (normalized to the largest server) and per-task durations. The
    arrival rate is set so that the work requested inside the window, in the bottleneck
    resource, is `load` times the cluster's capacity over the window.
    """

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(default=0, ge=0)
    users: int = Field(default=100, ge=1)
    load: float = Field(default=0.9, gt=0, allow_inf_nan=False)
    #: Zipf exponent of job counts per user (a few users submit most jobs).
    user_skew: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    #: Each user's jobs lean CPU- or memory-heavy by a lognormal factor of this sigma.
    user_shape_sigma: float = Field(default=0.5, ge=0, allow_inf_nan=False)
    #: Tasks per job: bounded Pareto on [1, tasks_max] with this tail index.
    tasks_alpha: float = Field(default=0.7, gt=0, allow_inf_nan=False)
    tasks_max: int = Field(default=5000, ge=1)
    #: Per-task demand: correlated lognormals (median, sigma), clipped to [min, max].
    cpu_median: float = Field(default=0.015, gt=0, le=1)
    cpu_sigma: float = Field(default=1.0, ge=0)
    mem_median: float = Field(default=0.01, gt=0, le=1)
    mem_sigma: float = Field(default=1.1, ge=0)
    cpu_mem_correlation: float = Field(default=0.5, ge=-1, le=1)
    demand_min: float = Field(default=0.001, gt=0, le=1)
    demand_max: float = Field(default=0.5, gt=0, le=1)
    #: Durations: batch jobs and long-running service jobs, lognormal (median, sigma), with
    #: each task of a job scattered around the job's duration by `task_sigma`.
    batch_median_s: float = Field(default=300.0, gt=0)
    batch_sigma: float = Field(default=1.5, ge=0)
    service_fraction: float = Field(default=0.1, ge=0, le=1)
    service_median_s: float = Field(default=12 * 3600.0, gt=0)
    service_sigma: float = Field(default=1.0, ge=0)
    #: Service jobs are replicated: bounded Pareto task counts on [min, max].
    service_tasks_min: int = Field(default=20, ge=1)
    service_tasks_max: int = Field(default=1000, ge=1)
    task_sigma: float = Field(default=0.3, ge=0)
    duration_min_s: float = Field(default=10.0, gt=0)
    duration_max_s: float = Field(default=3 * 86400.0, gt=0)
    #: Start in steady state: jobs that would still be running at t = 0 had arrivals begun
    #: `warm_start_s` earlier are submitted at 0 with their remaining work (the real trace
    #: starts with a full cluster too). They are excluded from job completion times.
    warm_start_s: float = Field(default=86400.0, ge=0)
    #: Set the arrival rate on the first `calibrate_s` seconds instead of the whole horizon
    #: (for long horizons: the stream after it keeps the rate; docs/traces.md).
    calibrate_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)


@dataclass
class GoogleJobs:
    """Generated jobs, in submission order. Demands are normalized to the largest server."""

    submit_s: np.ndarray  # (J,)
    user: np.ndarray  # (J,) user index
    tasks: np.ndarray  # (J,) tasks per job
    demand: np.ndarray  # (J, 2) cpus, mem per task
    durations: np.ndarray  # (sum tasks,) per-task durations, job after job
    offsets: np.ndarray  # (J + 1,) job j's tasks are durations[offsets[j]:offsets[j+1]]
    warm: np.ndarray  # (J,) bool: carried over from before t = 0
    user_names: list[str]

    @property
    def n_jobs(self) -> int:
        return len(self.submit_s)


def _bounded_pareto(
    rng: np.random.Generator, alpha: float, low: float, high: float, size: int
) -> np.ndarray:
    """Integers in [low, high] from a Pareto(alpha) on [low, high + 1), floored."""
    u = rng.random(size)
    tail = (low / (high + 1.0)) ** alpha
    x = low * (1.0 - u * (1.0 - tail)) ** (-1.0 / alpha)
    return np.clip(np.floor(x), low, high).astype(np.int64)


def _lognormal(rng: np.random.Generator, median: float, sigma: float, size: int) -> np.ndarray:
    return median * np.exp(sigma * rng.standard_normal(size))


def _draw_jobs(
    spec: GoogleWorkloadSpec, rng: np.random.Generator, n: int, users: tuple[np.ndarray, ...]
) -> dict[str, np.ndarray]:
    """n jobs: user, tasks, normalized per-task cpu/mem, and the job's base duration."""
    share, lean = users
    user = rng.choice(spec.users, size=n, p=share)
    service = rng.random(n) < spec.service_fraction
    tasks = np.where(
        service,
        _bounded_pareto(rng, spec.tasks_alpha, spec.service_tasks_min, spec.service_tasks_max, n),
        _bounded_pareto(rng, spec.tasks_alpha, 1, spec.tasks_max, n),
    )
    rho = spec.cpu_mem_correlation
    z1 = rng.standard_normal(n)
    z2 = rho * z1 + np.sqrt(1 - rho**2) * rng.standard_normal(n)
    cpu = spec.cpu_median * np.exp(spec.cpu_sigma * z1) * np.sqrt(lean[user])
    mem = spec.mem_median * np.exp(spec.mem_sigma * z2) / np.sqrt(lean[user])
    base = np.where(
        service,
        _lognormal(rng, spec.service_median_s, spec.service_sigma, n),
        _lognormal(rng, spec.batch_median_s, spec.batch_sigma, n),
    )
    return {
        "user": user,
        "tasks": tasks,
        "cpu": np.clip(cpu, spec.demand_min, spec.demand_max),
        "mem": np.clip(mem, spec.demand_min, spec.demand_max),
        "base": np.clip(base, spec.duration_min_s, spec.duration_max_s),
    }


def _window_work(
    arrival: np.ndarray, demand: np.ndarray, tasks: np.ndarray, durations: np.ndarray, end: float
) -> np.ndarray:
    """(2,) normalized cpu- and mem-seconds the jobs ask for inside [0, end)."""
    start = np.repeat(arrival, tasks)
    overlap = np.clip(np.minimum(start + durations, end) - np.maximum(start, 0.0), 0.0, None)
    per_job = np.add.reduceat(overlap, np.concatenate([[0], np.cumsum(tasks)[:-1]]))
    return (per_job[tasks > 0, None] * demand[tasks > 0]).sum(axis=0)


@dataclass
class _Calibrated:
    """The job pool `google_jobs` draws, its per-task durations, unit-rate arrival epochs
    and the rate that hits the load; the generator it came from continues the stream."""

    rng: np.random.Generator
    users: tuple[np.ndarray, np.ndarray]
    pool: dict[str, np.ndarray]
    durations: np.ndarray
    gaps: np.ndarray
    rate: float


def _task_durations(
    spec: GoogleWorkloadSpec, rng: np.random.Generator, base: np.ndarray, tasks: np.ndarray
) -> np.ndarray:
    durations = np.repeat(base, tasks) * np.exp(
        spec.task_sigma * rng.standard_normal(int(tasks.sum()))
    )
    return np.clip(durations, spec.duration_min_s, spec.duration_max_s)


def _calibrate(spec: GoogleWorkloadSpec, capacity: np.ndarray, horizon_s: float) -> _Calibrated:
    """Draw the pool and find the Poisson rate at which the work requested inside
    [0, horizon_s) is `spec.load` of the cluster in the bottleneck resource."""
    rng = np.random.default_rng([spec.seed, 0x6002])
    ranks = np.arange(1, spec.users + 1, dtype=float)
    share = ranks**-spec.user_skew
    users = (share / share.sum(), np.exp(spec.user_shape_sigma * rng.standard_normal(spec.users)))
    window = horizon_s + spec.warm_start_s
    capacity = np.asarray(capacity, dtype=float)
    # A pool of jobs in arrival order, about twice what the target needs (in CPU).
    chunks: list[dict[str, np.ndarray]] = []
    work = 0.0
    while work < 2 * spec.load * capacity[0] * window:
        chunk = _draw_jobs(spec, rng, 4096, users)
        chunks.append(chunk)
        work += float((chunk["tasks"] * chunk["cpu"] * chunk["base"]).sum())
    pool = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    tasks = pool["tasks"]
    durations = _task_durations(spec, rng, pool["base"], tasks)
    gaps = np.cumsum(rng.exponential(1.0, len(tasks)))  # unit-rate Poisson arrival epochs

    def arrivals(rate: float) -> np.ndarray:
        return gaps / rate - spec.warm_start_s

    demand = np.column_stack([pool["cpu"], pool["mem"]])

    def load_at(rate: float) -> float:
        arrival = arrivals(rate)
        n = int(np.searchsorted(arrival, horizon_s))
        if n == 0:
            return 0.0
        last = int(tasks[:n].sum())
        work = _window_work(arrival[:n], demand[:n], tasks[:n], durations[:last], horizon_s)
        return float((work / (capacity * horizon_s)).max())

    low, high = 1e-9, len(tasks) / window  # the whole pool arrives within the window
    if load_at(high) < spec.load:
        raise ValueError(
            f"jobs.google: cannot reach load {spec.load} with these distributions "
            "(tasks too short or too small for the window)"
        )
    for _ in range(60):
        rate = (low * high) ** 0.5
        if load_at(rate) < spec.load:
            low = rate
        else:
            high = rate
        if high / low < 1 + 1e-6:
            break
    return _Calibrated(rng, users, pool, durations, gaps, high)


def _warm_start(
    arrival: np.ndarray,
    user: np.ndarray,
    cpu: np.ndarray,
    mem: np.ndarray,
    tasks: np.ndarray,
    durations: np.ndarray,
    user_names: list[str],
) -> GoogleJobs:
    """Jobs in arrival order as GoogleJobs. Warm start: a job that arrived before 0 keeps the
    tasks still running at 0, with the time they have left, submitted at 0; jobs with none
    left are gone. Job by job, so a stream cut anywhere gives the same jobs."""
    n = len(arrival)
    early = arrival < 0
    if early.any():
        job_of_task = np.repeat(np.arange(n), tasks)
        left = durations + np.repeat(np.minimum(arrival, 0.0), tasks)
        keep_task = ~early[job_of_task] | (left > 0)
        durations = np.where(early[job_of_task], left, durations)[keep_task]
        tasks = np.bincount(job_of_task[keep_task], minlength=n)
        keep = tasks > 0
        arrival, user, cpu, mem, early = (a[keep] for a in (arrival, user, cpu, mem, early))
        tasks = tasks[keep]
        arrival = np.maximum(arrival, 0.0)
    offsets = np.concatenate([[0], np.cumsum(tasks)])
    return GoogleJobs(
        submit_s=arrival,
        user=user.astype(np.int64),
        tasks=tasks.astype(np.int64),
        demand=np.column_stack([cpu, mem]),
        durations=durations,
        offsets=offsets.astype(np.int64),
        warm=early,
        user_names=user_names,
    )


def _user_names(spec: GoogleWorkloadSpec) -> list[str]:
    return [f"user{k:03d}" for k in range(spec.users)]


def google_jobs(spec: GoogleWorkloadSpec, capacity: np.ndarray, horizon_s: float) -> GoogleJobs:
    """Jobs that ask for `spec.load` of the cluster over [0, horizon_s) in their bottleneck
    resource: max_r (r-seconds requested inside the window) / (capacity_r x horizon_s).

    `capacity` is the cluster's total (cpus, mem) normalized to the largest server (about
    0.53 and 0.47 per Table I server). Arrivals are a Poisson process; its rate is found by
    bisection so that the work requested inside the window (the part of each task that
    falls in it) hits the target, whatever the heavy tails drew. With `spec.calibrate_s`
    shorter than the horizon, the rate is set on that first window and the jobs after it
    continue the same stream (`google_job_stream`, all at once).
    """
    if spec.calibrate_s is not None and spec.calibrate_s < horizon_s:
        parts = list(google_job_stream(spec, capacity, horizon_s, horizon_s))
        return _concatenate(parts, _user_names(spec))
    c = _calibrate(spec, capacity, horizon_s)
    arrival = c.gaps / c.rate - spec.warm_start_s
    n = int(np.searchsorted(arrival, horizon_s))
    tasks = c.pool["tasks"][:n]
    durations = c.durations[: int(tasks.sum())]
    pool = c.pool
    return _warm_start(
        arrival[:n],
        pool["user"][:n],
        pool["cpu"][:n],
        pool["mem"][:n],
        tasks,
        durations,
        _user_names(spec),
    )


def _concatenate(parts: list[GoogleJobs], user_names: list[str]) -> GoogleJobs:
    tasks = np.concatenate([p.tasks for p in parts])
    return GoogleJobs(
        submit_s=np.concatenate([p.submit_s for p in parts]),
        user=np.concatenate([p.user for p in parts]),
        tasks=tasks,
        demand=np.concatenate([p.demand for p in parts]),
        durations=np.concatenate([p.durations for p in parts]),
        offsets=np.concatenate([[0], np.cumsum(tasks)]).astype(np.int64),
        warm=np.concatenate([p.warm for p in parts]),
        user_names=user_names,
    )


#: Jobs drawn at a time once a stream has used up its calibration pool.
STREAM_BLOCK = 4096


def google_job_stream(
    spec: GoogleWorkloadSpec, capacity: np.ndarray, horizon_s: float, chunk_s: float
) -> Iterator[GoogleJobs]:
    """The jobs of `google_jobs` over [0, horizon_s), generated lazily: one GoogleJobs per
    `chunk_s` of arrivals (the warm-start jobs, submitted at 0, come with the first), so
    that memory holds a chunk, not the whole trace.

    The rate is calibrated as in `google_jobs` on the first `spec.calibrate_s` seconds
    (default: the whole horizon), on the same pool; past the pool, jobs are drawn
    `STREAM_BLOCK` at a time from the same random stream and keep that rate. With
    `calibrate_s` equal to the horizon the chunks are exactly `google_jobs`'s jobs.
    """
    if chunk_s <= 0:
        raise ValueError("chunk_s: must be positive")
    calibrate_s = horizon_s if spec.calibrate_s is None else min(spec.calibrate_s, horizon_s)
    c = _calibrate(spec, capacity, calibrate_s)
    names = _user_names(spec)
    pool = c.pool

    def blocks(extend: bool) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]]:
        """(arrival, jobs, their task durations), in arrival order: the pool, then (`extend`)
        further blocks without end."""
        yield c.gaps / c.rate - spec.warm_start_s, pool, c.durations
        if not extend:
            return
        last = float(c.gaps[-1])
        while True:
            jobs = _draw_jobs(spec, c.rng, STREAM_BLOCK, c.users)
            durations = _task_durations(spec, c.rng, jobs["base"], jobs["tasks"])
            gaps = last + np.cumsum(c.rng.exponential(1.0, STREAM_BLOCK))
            last = float(gaps[-1])
            yield gaps / c.rate - spec.warm_start_s, jobs, durations

    cut = 0.0  # the current chunk ends at cut + chunk_s (the first also takes warm jobs)
    held: list[tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]] = []

    def emit() -> GoogleJobs:
        out = _warm_start(
            np.concatenate([h[0] for h in held]),
            np.concatenate([h[1]["user"] for h in held]),
            np.concatenate([h[1]["cpu"] for h in held]),
            np.concatenate([h[1]["mem"] for h in held]),
            np.concatenate([h[1]["tasks"] for h in held]),
            np.concatenate([h[2] for h in held]),
            names,
        )
        held.clear()
        return out

    for arrival, jobs, durations in blocks(extend=calibrate_s < horizon_s):
        starts = np.concatenate([[0], np.cumsum(jobs["tasks"])])
        at = 0
        while at < len(arrival):
            end = min(cut + chunk_s, horizon_s)
            upto = int(np.searchsorted(arrival, end))
            if upto > at:
                part = {k: v[at:upto] for k, v in jobs.items()}
                held.append((arrival[at:upto], part, durations[starts[at] : starts[upto]]))
                at = upto
            if at < len(arrival):  # arrival[at] >= end: the chunk is complete
                if held:
                    yield emit()
                if end >= horizon_s:
                    return
                cut = end
    if held:  # the pool ran out before the horizon (google_jobs stops there too)
        yield emit()
