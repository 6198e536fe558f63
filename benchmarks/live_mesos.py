"""fairbroker against Spark 3.5's own Mesos backend on a real Apache Mesos 1.11.0 master.

The cluster-filling batch of `make run` (benchmarks/scenarios/spark-fill.yaml: two Pi and two
WordCount jobs at once, 8 executors wanted each, on paper 002's six typed agents) runs on a
real master and six real agents (tests/support/real_mesos.py; `make mesos`) in three ways:

  rpsdsf   fairbroker on the Mesos backend, rPS-DSF characterized (one framework);
  drf      fairbroker on the Mesos backend, DRF oblivious (an agent's remainder to one tenant);
  spark    Spark 3.5's own coarse-grained Mesos backend (`--master mesos://...`), one framework
           per job, each group its own role (`spark.mesos.role`), under the master's built-in
           hierarchical DRF allocator; `spark.cores.max` = executors x cores.

Every way holds the cluster back until the first wave's drivers have registered, so each
allocator decides among all the batch's tenants at once (docs/emulation.md, "The start
barrier"): fairbroker's broker holds its grants (allocator.batch.gate), and for Spark's
backend every agent is deactivated on the master (operator API DEACTIVATE_AGENT) until the
four frameworks have registered, then reactivated.

Each run gets a fresh master and agents. The master's /master/state is sampled every second
(benchmarks/mesos_samples.py): executors per agent type and group, cpus/mem held. Jobs'
answers are checked as in `make run`. Run with the Spark 3.5 venv (`make bench`):

    .venv-spark35/bin/python -m benchmarks.live_mesos [--runs N] [--quick] [--ways rpsdsf,spark]

Writes benchmarks/results/live_mesos.{md,json,png} (with --quick: live_mesos_quick.*);
job logs and master/agent logs go to --workdir.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import requests

from allocator.batch.result import LiveBatchResult
from allocator.batch.runner import run_live_batch
from allocator.scenarios.batch import BatchSpec, load_batch
from benchmarks.mesos_samples import parse_state, time_average, type_series

CHECKOUT = Path(__file__).resolve().parents[1]
SCENARIO = CHECKOUT / "benchmarks" / "scenarios" / "spark-fill.yaml"
RESULTS = CHECKOUT / "benchmarks" / "results"
GATE_TIMEOUT_S = 180.0
SAMPLE_S = 1.0
WAYS = ("rpsdsf", "drf", "spark")
LABELS = {
    "rpsdsf": "fairbroker rPS-DSF characterized",
    "drf": "fairbroker DRF oblivious",
    "spark": "Spark 3.5 Mesos backend, Mesos allocator",
}


def _support() -> Any:
    """tests/support (RealMesos and friends): the helpers the real-master tests use."""
    tests = str(CHECKOUT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import support.real_mesos as real_mesos

    return real_mesos


# ---- the batch --------------------------------------------------------------------------


def quick_batch(spec: BatchSpec) -> BatchSpec:
    """A small batch of the same shape: one job per group, 2 executors each, 8 tasks of 2 s."""
    groups = []
    for group in spec.groups:
        spark = dict(group.spark or {}, **{"spark.executor.instances": 2})
        app = group.app.model_copy(update={"partitions": 8, "task_s": 2}) if group.app else None
        groups.append(group.model_copy(update={"queues": 1, "spark": spark, "app": app}))
    return spec.model_copy(update={"name": f"{spec.name}-quick", "groups": groups})


def shapes(spec: BatchSpec) -> dict[str, dict[str, float]]:
    """Each group's executor vector (cpus, mem), as Mesos tasks carry it."""
    return {g.name: g.executor_demand()[0] for g in spec.groups}


# ---- the master sampler -----------------------------------------------------------------


class MasterSampler:
    """The batch runner's snapshot function: reads /master/state, keeps a raw sample (time,
    executors per agent type and group, cpus/mem held) and hands the runner the sample in
    fairbroker's Allocation form."""

    def __init__(self, url: str, spec: BatchSpec, agent_names: Mapping[str, str]) -> None:
        self.url = url
        self.shapes = shapes(spec)
        self.agent_names = dict(agent_names)
        self.agent_type = {a.name: str(a.attributes.get("type", a.name)) for a in spec.agents}
        self.started = time.monotonic()
        self.raw: list[dict[str, Any]] = []

    def __call__(self) -> dict[str, Any]:
        answer = requests.get(f"{self.url}/master/state", timeout=5)
        answer.raise_for_status()
        sample = parse_state(answer.json(), self.shapes, self.agent_names)
        held = {r: sum(g.get(r, 0.0) for g in sample.allocated.values()) for r in ("cpus", "mem")}
        self.raw.append({
            "t": round(time.monotonic() - self.started, 2),
            "by_type": sample.by_type(self.agent_type),
            "cpus": held["cpus"],
            "mem": held["mem"],
            "frameworks": sample.frameworks,
        })  # fmt: skip
        return sample.to_allocation()


# ---- the three ways ---------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    spec: BatchSpec
    workdir: Path
    job_timeout: float
    progress: bool


@contextlib.contextmanager
def real_cluster(ctx: Context, workdir: Path) -> Iterator[Any]:
    real_mesos = _support()
    from allocator.scenarios.cluster_file import agent_infos

    if real_mesos.mesos_home() is None:
        raise SystemExit(f"live_mesos: {real_mesos.SKIP_REASON}")
    # allocation_interval: Mesos's default (1 s), as an operator runs it
    with real_mesos.RealMesos(
        agent_infos(ctx.spec.agents), work_dir=workdir / "mesos", allocation_interval=1.0
    ) as mesos:
        yield mesos


def agent_names(mesos: Any) -> dict[str, str]:
    return {spec.hostname: name for name, spec in mesos.agent_specs.items()}


def first_wave(spec: BatchSpec) -> int:
    return sum(g.queues for g in spec.groups)


def run_fairbroker(ctx: Context, mesos: Any, scheduler: str, mode: str, workdir: Path):
    """The batch through fairbroker's broker on the Mesos backend (what `fairbroker serve
    --backend mesos --master ...` runs), with its start gate; (result, gate opened after)."""
    from allocator.backends.local import spark_home
    from allocator.backends.mesos import MesosBackend, MesosOptions
    from allocator.batch.gate import StartGate
    from allocator.broker.server import BrokerOptions, BrokerService
    from allocator.engine_config import EngineConfig

    spec = ctx.spec
    engine = EngineConfig.mesos(scheduler, mode=mode).with_default_role_weights(spec.role_weights())
    backend = MesosBackend(MesosOptions(
        master=mesos.address, spark_home=str(spark_home()), state_dir=workdir / "broker",
        refuse_seconds=engine.refuse_seconds,
    ))  # fmt: skip
    options = BrokerOptions(engine=engine, http_port=0, grpc_port=0, state_dir=workdir / "broker")
    service = BrokerService(options, backend=backend).start()
    gate = StartGate(service.broker, first_wave(spec), GATE_TIMEOUT_S)
    sampler = MasterSampler(mesos.url, spec, agent_names(mesos))
    try:
        gate.close()
        result = run_live_batch(
            spec, broker=service.http_address, snapshot=sampler, workdir=workdir,
            oblivious=mode == "oblivious", progress=ctx.progress, sample_interval=SAMPLE_S,
            job_timeout=ctx.job_timeout,
        )  # fmt: skip
    finally:
        gate.stop()
        service.stop(kill_executors=True)
    return result, gate.opened_after, sampler.raw


class AgentGate:
    """The start barrier on the master itself: every agent deactivated (no offers) until
    `expected` frameworks have registered or `timeout` s have passed, then reactivated."""

    def __init__(self, mesos: Any, expected: int, timeout: float) -> None:
        self.mesos = mesos
        self.expected = expected
        self.timeout = timeout
        self.opened_after: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ids = [a["id"] for a in mesos.state()["slaves"]]

    def _call(self, kind: str) -> None:
        key = kind.lower()
        for agent_id in self._ids:
            answer = requests.post(
                f"{self.mesos.url}/api/v1",
                json={"type": kind, key: {"agent_id": {"value": agent_id}}}, timeout=10,
            )  # fmt: skip
            answer.raise_for_status()

    def close(self) -> None:
        self._call("DEACTIVATE_AGENT")
        closed = time.monotonic()
        self._thread = threading.Thread(target=self._watch, args=(closed,), daemon=True)
        self._thread.start()

    def _watch(self, closed: float) -> None:
        while not self._stop.wait(0.2):
            try:
                frameworks = [f for f in self.mesos.frameworks() if f.get("active")]
            except requests.RequestException:
                continue
            if len(frameworks) >= self.expected or time.monotonic() - closed >= self.timeout:
                self._call("REACTIVATE_AGENT")
                self.opened_after = time.monotonic() - closed
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)


def spark_mesos_submit(mesos: Any, spark: Path) -> Callable[..., Any]:
    """A SubmitFunction for run_live_batch: spark-submit against the Mesos master itself."""
    library = mesos.home / "lib" / "libmesos-jni-1.11.0.so"
    if not library.is_file():
        raise SystemExit(f"live_mesos: no {library} (the shared build's JNI bindings)")

    @dataclass
    class Plan:
        argv: list[str]
        env: dict[str, str]

    def submit(app_args: Sequence[str], *, group: str = "*", conf: Mapping[str, str] | None = None,
               **_ignored: Any) -> Plan:  # fmt: skip
        conf = dict(conf or {})
        cores = int(conf.get("spark.executor.cores", "1"))
        executors = int(conf.get("spark.executor.instances", "1"))
        conf.update({
            "spark.mesos.executor.home": str(spark),
            "spark.cores.max": str(cores * executors),
            "spark.driver.host": "127.0.0.1",
            "spark.mesos.role": group,
        })  # fmt: skip
        argv = [str(spark / "bin" / "spark-submit"), "--master", f"mesos://{mesos.address}"]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        env = {
            "MESOS_NATIVE_JAVA_LIBRARY": str(library),
            "LIBPROCESS_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_HOME": str(spark),
        }
        return Plan([*argv, *app_args], env)

    return submit


def run_spark_mesos(ctx: Context, mesos: Any, workdir: Path):
    """The batch through Spark 3.5's own Mesos backend; (result, gate opened after)."""
    from allocator.backends.local import spark_home

    spec = ctx.spec
    gate = AgentGate(mesos, first_wave(spec), GATE_TIMEOUT_S)
    sampler = MasterSampler(mesos.url, spec, agent_names(mesos))
    try:
        gate.close()
        result = run_live_batch(
            spec, broker=f"mesos://{mesos.address}", snapshot=sampler, workdir=workdir,
            progress=ctx.progress, sample_interval=SAMPLE_S, job_timeout=ctx.job_timeout,
            submit=spark_mesos_submit(mesos, spark_home()),  # type: ignore[arg-type]
        )  # fmt: skip
    finally:
        gate.stop()
    return result, gate.opened_after, sampler.raw


def run_once(ctx: Context, way: str, index: int) -> dict[str, Any]:
    workdir = ctx.workdir / f"{way}-{index}"
    workdir.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    with real_cluster(ctx, workdir) as mesos:
        if way == "spark":
            result, opened, raw = run_spark_mesos(ctx, mesos, workdir)
        else:
            scheduler, mode = ("rpsdsf", "characterized") if way == "rpsdsf" else (
                "drf", "oblivious")  # fmt: skip
            result, opened, raw = run_fairbroker(ctx, mesos, scheduler, mode, workdir)
    return summarize(ctx.spec, way, index, result, opened, raw, load, os.getloadavg()[0])


# ---- results ----------------------------------------------------------------------------


def summarize(
    spec: BatchSpec, way: str, index: int, result: LiveBatchResult, opened: float | None,
    raw: list[dict[str, Any]], load_before: float, load_after: float,
) -> dict[str, Any]:  # fmt: skip
    full = result.to_json()
    series = result.series
    types = agent_types(spec)
    groups = [g.name for g in spec.groups]
    counts = type_series(raw, types, groups)
    times = [s["t"] for s in raw]
    end = times[0] + full["makespan_s"] if times else 0.0
    average = time_average(times, counts, end) if raw else np.zeros((len(types), len(groups)))
    peak = counts.max(axis=0) if raw else np.zeros((len(types), len(groups)))
    return {
        "way": way,
        "run": index,
        "makespan_s": full["makespan_s"],
        "cluster_opened_s": None if opened is None else round(opened, 2),
        "jct_by_group_s": {g: v["mean"] for g, v in full["jct_by_group_s"].items()},
        "jobs": full["jobs"],
        "jobs_failed": full["failures"],
        "failed": [f"{j.name}: {j.detail}" for j in result.failures],
        "executors_peak": series.executors_peak if series is not None else None,
        "executors_mean": round(series.executors_average(), 2) if series is not None else None,
        "allocated": full["allocated"],
        "executors_by_type_mean": {
            t: {g: round(float(average[i, j]), 2) for j, g in enumerate(groups)}
            for i, t in enumerate(types)
        },
        "executors_by_type_peak": {
            t: {g: int(peak[i, j]) for j, g in enumerate(groups)} for i, t in enumerate(types)
        },
        "load_1min": [round(load_before, 1), round(load_after, 1)],
        "jobs_detail": full["job_list"],
        "samples": raw,
    }


def agent_types(spec: BatchSpec) -> list[str]:
    return sorted({str(a.attributes.get("type", a.name)) for a in spec.agents})


def means(runs: Sequence[Mapping[str, Any]], way: str) -> dict[str, Any] | None:
    mine = [r for r in runs if r["way"] == way]
    if not mine:
        return None
    makespans = np.array([r["makespan_s"] for r in mine])
    opened = np.array([r["cluster_opened_s"] or 0.0 for r in mine])
    return {
        "runs": len(mine),
        "makespan_s": float(makespans.mean()),
        "makespan_sd": float(makespans.std(ddof=1)) if len(mine) > 1 else None,
        # the drivers' start-up before the barrier opens varies most with the machine's load
        "after_barrier_s": float((makespans - opened).mean()),
        "jct_by_group_s": {
            g: float(np.mean([r["jct_by_group_s"][g] or np.nan for r in mine]))
            for g in mine[0]["jct_by_group_s"]
        },
        "executors_peak": float(np.mean([r["executors_peak"] or 0 for r in mine])),
        "executors_mean": float(np.mean([r["executors_mean"] or 0 for r in mine])),
        "cpus": float(np.mean([(r["allocated"] or {}).get("cpus", 0.0) for r in mine])),
        "mem": float(np.mean([(r["allocated"] or {}).get("mem", 0.0) for r in mine])),
        "jobs_failed": int(sum(r["jobs_failed"] for r in mine)),
        "jobs": int(sum(r["jobs"] for r in mine)),
    }


def render(data: Mapping[str, Any]) -> str:
    """The markdown report: means per way, every run, executors per agent type."""
    runs = data["runs"]
    ways = [w for w in WAYS if any(r["way"] == w for r in runs)]
    groups = list(runs[0]["jct_by_group_s"]) if runs else []
    out = [
        "# fairbroker against Spark 3.5's own Mesos backend, on a real Mesos 1.11.0 master",
        "",
        f"Generated by `{data['command']}` ({data['date']}); raw samples in "
        f"`{data['json']}`, figure `{data['png']}`.",
        "",
        *([data["remark"], ""] if data.get("remark") else []),
        data["setup"],
        "",
        "## Means",
        "",
        "| way | runs | makespan s (sd) | after the barrier s | "
        + " | ".join(f"{g} JCT s" for g in groups)
        + " | executors peak | executors time-avg | cpus held % | mem held % | jobs failed |",
        "|---|---|---|---|" + "---|" * len(groups) + "---|---|---|---|---|",
    ]  # fmt: skip
    for way in ways:
        m = means(runs, way)
        assert m is not None
        sd = "" if m["makespan_sd"] is None else f" ({m['makespan_sd']:.1f})"
        out.append(
            f"| {LABELS[way]} | {m['runs']} | {m['makespan_s']:.1f}{sd} | "
            f"{m['after_barrier_s']:.1f} | "
            + " | ".join(f"{m['jct_by_group_s'][g]:.1f}" for g in groups)
            + f" | {m['executors_peak']:.1f} | {m['executors_mean']:.1f} | "
            f"{m['cpus'] * 100:.1f} | {m['mem'] * 100:.1f} | {m['jobs_failed']} of {m['jobs']} |"
        )
    base = means(runs, "spark")
    for way in ("rpsdsf", "drf"):
        m = means(runs, way)
        if m is not None and base is not None and base["makespan_s"]:
            gain = 1 - m["makespan_s"] / base["makespan_s"]
            after = 1 - m["after_barrier_s"] / base["after_barrier_s"]
            out += ["", f"{LABELS[way]}: mean makespan {_change(gain)} than "
                        f"{LABELS['spark']} ({_change(after)} after the barrier)."]  # fmt: skip
    out += [
        "",
        "## Every run",
        "",
        "| way | run | makespan s | " + " | ".join(f"{g} JCT s" for g in groups)
        + " | executors peak | time-avg | cpus % | mem % | barrier opened s | failed "
        "| load 1-min (start, end) |",
        "|---|---|---|" + "---|" * len(groups) + "---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in runs:
        alloc = r["allocated"] or {}
        out.append(
            f"| {LABELS[r['way']]} | {r['run']} | {r['makespan_s']:.1f} | "
            + " | ".join(_cell(r["jct_by_group_s"][g]) for g in groups)
            + f" | {r['executors_peak']} | {_cell(r['executors_mean'])} | "
            f"{_cell(alloc.get('cpus'), 100)} | {_cell(alloc.get('mem'), 100)} | "
            f"{_cell(r['cluster_opened_s'])} | {r['jobs_failed']} of {r['jobs']} | "
            f"{r['load_1min'][0]}, {r['load_1min'][1]} |"
        )
    types = sorted({t for r in runs for t in r["executors_by_type_mean"]})
    out += [
        "",
        "## Executors per agent type, time-averaged over the makespan (peak), mean of runs",
        "",
        "| way | " + " | ".join(f"{t}: {g}" for t in types for g in groups) + " |",
        "|---|" + "---|" * (len(types) * len(groups)),
    ]
    for way in ways:
        mine = [r for r in runs if r["way"] == way]
        cells = []
        for t in types:
            for g in groups:
                avg = np.mean([r["executors_by_type_mean"][t][g] for r in mine])
                peak = np.mean([r["executors_by_type_peak"][t][g] for r in mine])
                cells.append(f"{avg:.1f} ({peak:.1f})")
        out.append(f"| {LABELS[way]} | " + " | ".join(cells) + " |")
    failures = [f"- {LABELS[r['way']]} run {r['run']}: {f}" for r in runs for f in r["failed"]]
    if failures:
        out += ["", "## Failed jobs", "", *failures]
    out += ["", "## Notes", "", data["notes"], ""]
    return "\n".join(out)


def _change(gain: float) -> str:
    return f"{abs(gain) * 100:.1f} % {'shorter' if gain >= 0 else 'longer'}"


def _cell(value: float | None, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:.1f}"


def plot(data: Mapping[str, Any], path: Path, spec: BatchSpec) -> None:
    """Per way: executors per agent type over time (first run, stacked), and cpus/mem held
    over time for every run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = data["runs"]
    ways = [w for w in WAYS if any(r["way"] == w for r in runs)]
    types = agent_types(spec)
    groups = [g.name for g in spec.groups]
    capacity = {r: sum(a.resources.get(r, 0.0) for a in spec.agents) for r in ("cpus", "mem")}
    fig, axes = plt.subplots(2, len(ways), figsize=(5 * len(ways), 7), squeeze=False,
                             sharex=True, sharey="row")  # fmt: skip
    for col, way in enumerate(ways):
        mine = [r for r in runs if r["way"] == way]
        first = mine[0]
        times = np.array([s["t"] for s in first["samples"]])
        counts = type_series(first["samples"], types, groups)
        stacks = [counts[:, i, j] for i in range(len(types)) for j in range(len(groups))]
        labels = [f"{t} {g}" for t in types for g in groups]
        top = axes[0][col]
        if len(times):
            top.stackplot(times - times[0], *stacks, labels=labels, step="post")
        top.set_title(f"{LABELS[way]}\nrun {first['run']}: {first['makespan_s']:.0f} s",
                      fontsize=9)  # fmt: skip
        top.set_ylabel("executors (agent type, group)")
        bottom = axes[1][col]
        for r in mine:
            t = np.array([s["t"] for s in r["samples"]])
            if not len(t):
                continue
            for res, style in (("cpus", "-"), ("mem", "--")):
                values = np.array([s[res] for s in r["samples"]]) / capacity[res] * 100
                bottom.step(t - t[0], values, style, where="post",
                            label=f"{res} run {r['run']}")  # fmt: skip
        bottom.set_xlabel("seconds since the batch started")
        bottom.set_ylabel("% of the agents' capacity held")
        bottom.set_ylim(0, 105)
    axes[0][0].legend(fontsize=7, loc="upper right")
    axes[1][0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- main -------------------------------------------------------------------------------


def setup_text(spec: BatchSpec, quick: bool) -> str:
    parts = []
    for g in spec.groups:
        demand, executors = g.executor_demand()
        app = g.app
        tasks = getattr(app, "partitions", None)
        task_s = getattr(app, "task_s", 0)
        parts.append(
            f"{g.name}: {g.queues} job(s) at once, {executors} executors of "
            f"{demand['cpus']:g} CPU / {demand['mem']:g} MiB each, {tasks} tasks x {task_s:g} s"
        )
    agents = ", ".join(
        f"{a.name} {a.resources['cpus']:g} CPU/{a.resources['mem']:g} MiB" for a in spec.agents
    )  # fmt: skip
    scale = " (`--quick`: a small batch of the same shape, a smoke test)" if quick else ""
    return (
        f"Batch `{spec.name}`{scale}: {'; '.join(parts)}. Agents (real mesos-agent processes "
        f"on 127.0.1.x, CPUs and memory declared, not this machine's): {agents}. "
        "**Emulated work** (docs/emulation.md): each task does its real work (Pi sampling, "
        "word counting, answers checked after every job) and then sleeps out a fixed wall "
        "time per task slot, so a job runs as fast as the executors it holds on the emulated "
        "agents, not as fast as this machine's 2 real cores. JVM and Python start-up are real "
        "and contend for those 2 cores. Spark 3.5.9 (pyspark, Scala 2.12) for all three ways."
    )


def notes_text() -> str:
    return (
        "- The machine (2 cores) was shared with other sessions' builds and tests while this "
        "ran; the 1-minute load average at each run's start and end is in the table. Executor "
        "JVM start-up is the part that load stretches.\n"
        "- Every way has a start barrier: the allocator decides only once the first wave's "
        "drivers have registered (fairbroker: its broker holds grants; Spark's backend: the "
        "master's agents are deactivated with the operator API's DEACTIVATE_AGENT until the "
        "frameworks have registered, then reactivated). Makespan is from the first job's "
        "submission to the last job's end, barrier included.\n"
        "- fairbroker runs one Mesos framework (role `*`) and places executors itself; "
        "Spark's backend registers one framework per job, each group in its own role "
        "(`spark.mesos.role`), with `spark.cores.max` = executors x cores and Spark's defaults "
        "otherwise: an offer it cannot use is declined with Mesos's default 5 s filter, one "
        "that comes after `spark.cores.max` is reached with 120 s "
        "(`spark.mesos.rejectOfferDurationForReachedMaxCores`). "
        "The master runs Mesos's defaults (hierarchical DRF, 1 s allocation interval).\n"
        "- The emulation holds only while a task's real work and overheads fit in its "
        "`task_s`: at a load of tens on 2 cores they do not (compare the JCTs with the "
        "emulated work), and the makespan then measures the machine more than the placement.\n"
        "- Executors per agent type and cpus/mem held are read from the master's "
        "`/master/state` (non-terminal tasks) once a second, for all three ways alike."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="runs of each way (default 2)")
    parser.add_argument("--quick", action="store_true", help="a small batch (smoke test)")
    parser.add_argument("--ways", default=",".join(WAYS),
                        help=f"comma-separated subset of {','.join(WAYS)}")  # fmt: skip
    parser.add_argument("--scenario", default=str(SCENARIO))
    parser.add_argument("--out", default=str(RESULTS), help="where the md/json/png go")
    parser.add_argument("--workdir", default=str(CHECKOUT / "results" / "live_mesos"),
                        help="job, master and agent logs")  # fmt: skip
    parser.add_argument("--job-timeout", type=float, default=600.0)
    parser.add_argument("--quiet", "-q", action="store_true")
    parser.add_argument("--render", metavar="JSON",
                        help="only rewrite the .md and .png beside JSON from its runs")  # fmt: skip
    args = parser.parse_args(argv)
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    if not ways or any(w not in WAYS for w in ways) or args.runs < 1:
        parser.error(f"--ways: a subset of {','.join(WAYS)}; --runs >= 1")
    spec = load_batch(args.scenario)
    if args.render:
        saved = json.loads(Path(args.render).read_text())
        spec = quick_batch(spec) if saved["quick"] else spec
        runs = saved["runs"]
        ways = [w for w in WAYS if any(r["way"] == w for r in runs)]
        out = Path(args.render).resolve().parent
        print(write_outputs(saved["command"], spec, saved["quick"], out, runs, ways,
                            date=saved["date"], remark=saved.get("remark", "")))  # fmt: skip
        return 0
    if args.quick:
        spec = quick_batch(spec)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(spec, Path(args.workdir), args.job_timeout, not args.quiet)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a kill stops everything as Ctrl-C
    runs: list[dict[str, Any]] = []
    command = "python -m benchmarks.live_mesos " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        for index in range(1, args.runs + 1):  # interleaved, so load drifts hit every way
            for way in ways:
                print(f"live_mesos: {LABELS[way]}, run {index}", file=sys.stderr, flush=True)
                summary = run_once(ctx, way, index)
                print(f"live_mesos: {way} run {index}: makespan {summary['makespan_s']:.1f} s, "
                      f"{summary['jobs_failed']} of {summary['jobs']} failed", file=sys.stderr,
                      flush=True)  # fmt: skip
                runs.append(summary)
                # after every run, so an interrupted benchmark keeps what it measured
                text = write_outputs(command.strip(), spec, args.quick, out, runs, ways)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(text)
    failed = sum(r["jobs_failed"] for r in runs)
    return 1 if failed else 0


def write_outputs(
    command: str, spec: BatchSpec, quick: bool, out: Path, runs: list[dict[str, Any]],
    ways: Sequence[str], date: str | None = None, remark: str = "",
) -> str:  # fmt: skip
    """live_mesos[_quick].{json,png,md} in `out`; the markdown's text."""
    stem = "live_mesos_quick" if quick else "live_mesos"
    shown = out.resolve().relative_to(CHECKOUT) if out.resolve().is_relative_to(CHECKOUT) else out
    data = {
        "command": command,
        "date": date or time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "quick": quick,
        "remark": remark,  # a note kept with the runs (e.g. why fewer runs than asked)
        "json": f"{shown}/{stem}.json",
        "png": f"{shown}/{stem}.png",
        "setup": setup_text(spec, quick),
        "notes": notes_text(),
        "spark": _spark_version(),
        "runs": runs,
        "means": {w: means(runs, w) for w in ways},
    }
    (out / f"{stem}.json").write_text(json.dumps(data, indent=1) + "\n")
    plot(data, out / f"{stem}.png", spec)
    text = render(data)
    (out / f"{stem}.md").write_text(text)
    return text


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _spark_version() -> str:
    try:
        import pyspark

        return pyspark.__version__
    except ImportError:
        return "?"


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        raise SystemExit(main())
