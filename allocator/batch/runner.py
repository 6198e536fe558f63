"""Running a batch scenario's jobs as real spark-submit processes against a running broker.

Each group's `queues` submission queues run in parallel threads; a queue submits its jobs one
after another, as in the paper's experiment. The main thread samples the broker's allocation
every `sample_interval` seconds and shows progress. On any error or KeyboardInterrupt every
driver process group still running is stopped before the exception propagates.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from allocator.admission import AdmissionConfig, Pool, job_slot
from allocator.batch.allocation import AllocationSample, parse_allocation
from allocator.batch.apps import GroupApp, prepare_apps
from allocator.batch.processes import GRACE_SECONDS, DriverProcesses, ProcessesClosed
from allocator.batch.progress import BatchProgress
from allocator.batch.result import JobRecord, LiveBatchResult
from allocator.batch.sampler import LiveSeries
from allocator.errors import FairbrokerError
from allocator.scenarios.batch import BatchSpec, build_pools

CA_FILE_ENV = "FAIRBROKER_CA_FILE"  # the Spark plugin's CA when no spark.fairbroker.caFile


class SubmitPlanLike(Protocol):
    argv: list[str]
    env: dict[str, str]


class SubmitFunction(Protocol):
    """spark_shim.submit.spark_submit_command's signature."""

    def __call__(
        self,
        app_args: Sequence[str],
        *,
        broker: str,
        group: str = "*",
        weight: float = 1.0,
        oblivious: bool = False,
        token: str | None = None,
        conf: Mapping[str, str] | None = None,
    ) -> SubmitPlanLike: ...


def _spark_submit_command() -> SubmitFunction:
    from spark_shim.submit import spark_submit_command

    return spark_submit_command


class _Snapshots:
    """Calls the snapshot function off the main thread with a timeout, one call at a time."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]], timeout: float) -> None:
        self.snapshot = snapshot
        self.timeout = timeout
        self.errors = 0
        self.last_error = ""
        self._pending: threading.Event | None = None

    def take(self) -> AllocationSample | None:
        if self._pending is not None and not self._pending.is_set():
            return self._fail("the previous snapshot call has not returned yet")
        done = threading.Event()
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                box["value"] = self.snapshot()
            except BaseException as error:  # reported as a failed sample, never raised
                box["error"] = error
            finally:
                done.set()

        self._pending = done
        threading.Thread(target=call, name="fairbroker-snapshot", daemon=True).start()
        if not done.wait(self.timeout):
            return self._fail(f"snapshot call took longer than {self.timeout:g} s")
        if "error" in box:
            return self._fail(f"{type(box['error']).__name__}: {box['error']}")
        try:
            return parse_allocation(box["value"])
        except FairbrokerError as error:
            return self._fail(str(error))

    def _fail(self, message: str) -> None:
        self.errors += 1
        self.last_error = message
        return None


class _Batch:
    """State shared by the queue threads and the sampling loop."""

    def __init__(
        self,
        spec: BatchSpec,
        apps: dict[str, GroupApp],
        submit: SubmitFunction,
        *,
        broker: str,
        workdir: Path,
        oblivious: bool,
        token: str | None,
        ca_file: Path | None,
        job_timeout: float,
        pools: list[Pool],
    ) -> None:
        self.spec = spec
        self.pools = pools
        self.pool_threads: list[threading.Thread] = []
        self.apps = apps
        self.submit = submit
        self.broker = broker
        self.logs = workdir / "jobs"
        self.oblivious = oblivious
        self.token = token
        self.ca_file = ca_file
        self.job_timeout = job_timeout
        self.processes = DriverProcesses()
        self.stop = threading.Event()
        self.wake = threading.Event()  # a job ended or a queue failed
        self.lock = threading.Lock()
        self.records: list[JobRecord] = []
        self.errors: list[BaseException] = []
        self.start = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.start

    def done(self) -> dict[str, int]:
        with self.lock:
            counts = {g.name: 0 for g in self.spec.groups}
            for record in self.records:
                counts[record.group] += 1
        return counts

    def busy(self) -> set[str]:
        """Groups with jobs not yet finished."""
        done = self.done()
        return {g.name for g in self.spec.groups if done[g.name] < g.queues * g.jobs_per_queue}

    def run_queue(self, group_index: int, queue: int) -> None:
        group = self.spec.groups[group_index]
        with self._thread_body():
            for index in range(group.jobs_per_queue):
                if self.stop.is_set():
                    return
                self._done(self._run_job(group.name, queue, index))
                if group.submit_gap_s and self.stop.wait(group.submit_gap_s):
                    return

    @contextlib.contextmanager
    def _thread_body(self) -> Iterator[None]:
        """Around a queue's or a job's thread: an error stops the batch (the main loop raises
        it); the teardown closing the processes ends the thread quietly."""
        try:
            yield
        except ProcessesClosed:
            return
        except BaseException as error:
            with self.lock:
                self.errors.append(error)
            self.stop.set()
            self.wake.set()

    def _done(self, record: JobRecord, pool: Pool | None = None, key: object = None) -> None:
        with self.lock:
            self.records.append(record)
            if pool is not None:
                pool.admission.finished(key)
        self.wake.set()

    def dispatch(self) -> float | None:
        """Start the jobs the admission pools admit now; when to look again (batch time)."""
        wake: float | None = None
        with self.lock:
            now = self.now()
            for pool in self.pools:
                for pending in pool.admission.admit(now):
                    g, k = pending.key  # type: ignore[misc]
                    thread = threading.Thread(
                        target=self.run_pool_job, args=(pool, g, k), name=f"job-{g}-{k}"
                    )
                    thread.daemon = True
                    self.pool_threads.append(thread)
                    thread.start()
                change = pool.admission.next_change(now)
                if change is not None:
                    wake = change if wake is None else min(wake, change)
        return wake

    def pools_busy(self) -> bool:
        with self.lock:
            waiting = any(not pool.admission.done() for pool in self.pools)
        return waiting or any(t.is_alive() for t in self.pool_threads)

    def run_pool_job(self, pool: Pool, group_index: int, k: int) -> None:
        """One admitted job; its end frees its turn in the pool."""
        group = self.spec.groups[group_index]
        queue, index = job_slot(k, group.queues)
        with self._thread_body():
            if not self.stop.is_set():
                self._done(self._run_job(group.name, queue, index), pool, (group_index, k))

    def driver_env(self, plan_env: Mapping[str, str]) -> dict[str, str]:
        """A driver's environment: this process's and the plan's, with the broker's CA for
        its plugin exactly as given (none: plain HTTP, whatever this process holds)."""
        env = {**os.environ, **plan_env}
        env.pop(CA_FILE_ENV, None)
        if self.ca_file is not None:
            env[CA_FILE_ENV] = str(self.ca_file.resolve())
        return env

    def _run_job(self, group: str, queue: int, index: int) -> JobRecord:
        app = self.apps[group]
        name = f"{group}-q{queue}-j{index}"
        plan = self.submit(
            app.app_args(name),
            broker=self.broker,
            group=group,
            oblivious=self.oblivious,
            token=self.token,
            conf=app.job_conf(name),
        )
        log = self.logs / f"{name}.log"
        with open(log, "wb") as out:
            submitted = self.now()
            process = self.processes.start(plan.argv, self.driver_env(plan.env), out)
            try:
                exit_code: int | None = process.wait(timeout=self.job_timeout)
            except subprocess.TimeoutExpired:
                exit_code = None
            ended = self.now()
            self.processes.finish(process)
        if self.stop.is_set() and exit_code != 0:
            raise ProcessesClosed  # killed by the teardown; not a result
        ok, detail = app.check(log.read_text(errors="replace"), exit_code)
        return JobRecord(name, group, queue, index, submitted, ended, exit_code, ok, detail, log)


def run_live_batch(
    spec: BatchSpec,
    *,
    broker: str,
    snapshot: Callable[[], dict[str, Any]] | None,
    workdir: Path,
    oblivious: bool = False,
    token: str | None = None,
    ca_file: str | Path | None = None,
    progress: bool = True,
    sample_interval: float = 0.5,
    job_timeout: float = 600,
    submit: SubmitFunction | None = None,
    admission: AdmissionConfig | None = None,
) -> LiveBatchResult:
    """Run every job of `spec` through the broker at `broker` (HOST:PORT) and measure it.

    `snapshot` returns the broker's Allocation message as protobuf JSON (None: no allocation
    series). `submit` builds each job's command line; the default is
    spark_shim.submit.spark_submit_command. Job logs go to workdir/jobs/<job>.log. `ca_file`
    (a broker serving TLS): the CA certificate(s) the drivers' plugin trusts, handed to them
    in their environment (FAIRBROKER_CA_FILE); without it they get none.
    `admission` admits every job of the batch as one pool (allocator.admission); without
    it, groups with an `admission:` section are pools of their own and the others run their
    submission queues.
    """
    if not sample_interval > 0:
        raise FairbrokerError(f"sample interval must be positive, got {sample_interval}")
    if not job_timeout > 0:
        raise FairbrokerError(f"job timeout must be positive, got {job_timeout}")
    workdir = Path(workdir)
    (workdir / "jobs").mkdir(parents=True, exist_ok=True)
    apps = prepare_apps(spec, workdir)
    batch = _Batch(
        spec,
        apps,
        submit or _spark_submit_command(),
        broker=broker,
        workdir=workdir,
        oblivious=oblivious,
        token=token,
        ca_file=Path(ca_file) if ca_file is not None else None,
        job_timeout=job_timeout,
        pools=build_pools(spec, admission),
    )
    in_pool = {g for pool in batch.pools for g in pool.groups}
    groups = [g.name for g in spec.groups]
    capacity: dict[str, float] = {}
    for agent in spec.agents:
        for resource, amount in agent.resources.items():
            capacity[resource] = capacity.get(resource, 0.0) + amount
    series = LiveSeries(spec.resource_names(), capacity, groups) if snapshot is not None else None
    snapshots = (
        _Snapshots(snapshot, max(5.0, 4 * sample_interval)) if snapshot is not None else None
    )
    display = BatchProgress({g.name: g.queues * g.jobs_per_queue for g in spec.groups}, progress)
    # A queue runs at most jobs_per_queue jobs, each bounded by the job timeout.
    longest = max(
        g.jobs_per_queue * (job_timeout + g.submit_gap_s + 2 * GRACE_SECONDS) for g in spec.groups
    )
    # A pool runs its jobs at least one at a time, each bounded by the job timeout, after
    # the last arrival.
    for pool in batch.pools:
        jobs = sum(len(j) for j in pool.admission.queues.values())
        arrivals = max((j.arrival for q in pool.admission.queues.values() for j in q), default=0)
        longest = max(longest, arrivals + jobs * (job_timeout + 2 * GRACE_SECONDS))
    limit = longest + 60
    threads = [
        threading.Thread(target=batch.run_queue, args=(g, q), name=f"queue-{group.name}-{q}")
        for g, group in enumerate(spec.groups)
        if g not in in_pool
        for q in range(group.queues)
    ]
    started_at = time.time()

    def sample() -> None:
        if snapshots is None or series is None:
            display.update(batch.done(), None)
            return
        taken = snapshots.take()
        series.record(batch.now(), taken, batch.busy())
        display.update(batch.done(), taken or series.last)

    try:
        batch.start = time.monotonic()
        sample()
        for thread in threads:
            thread.daemon = True  # belt and braces: the finally below stops every process
            thread.start()
        wake = batch.dispatch()
        while any(t.is_alive() for t in threads) or batch.pools_busy():
            if batch.errors:
                raise batch.errors[0]
            if batch.now() > limit:
                raise FairbrokerError(f"batch did not finish within {limit:.0f} s")
            wait = sample_interval if wake is None else min(sample_interval, wake - batch.now())
            batch.wake.wait(max(wait, 0.0))
            batch.wake.clear()
            wake = batch.dispatch()
            sample()
        if batch.errors:
            raise batch.errors[0]
        sample()
    finally:
        batch.stop.set()
        batch.processes.close()
        for thread in [*threads, *batch.pool_threads]:
            if thread.is_alive():
                thread.join(timeout=2 * GRACE_SECONDS)
        display.close()
    records = sorted(batch.records, key=lambda r: (groups.index(r.group), r.queue, r.index))
    return LiveBatchResult(
        name=spec.name,
        broker=broker,
        groups=groups,
        started_at=started_at,
        jobs=records,
        series=series,
        sample_errors=snapshots.errors if snapshots else 0,
        last_sample_error=snapshots.last_error if snapshots else "",
    )
