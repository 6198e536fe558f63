"""Broker benchmarks: time from grant to executor registered with its driver (real Spark on
the embedded cluster), and the broker's own overhead per grant (no executors started).

Writes benchmarks/results/broker.{json,md}. Run: `python -m benchmarks.bench_broker`.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from allocator.backends.base import AgentInfo, LaunchSpec
from allocator.broker.core import Broker
from allocator.broker.limits import Limits
from allocator.broker.proto import pb
from allocator.broker.server import BrokerOptions, BrokerService
from allocator.broker.store import Store
from allocator.engine_config import EngineConfig
from spark_shim.submit import spark_submit_command

RESULTS = Path(__file__).parent / "results"
HOSTS_JOB = Path(__file__).parents[1] / "tests" / "spark_apps" / "hosts_job.py"


class NullBackend:
    """Accepts every launch at once: what is left to time is the broker itself."""

    name = "null"

    def __init__(self, agents: list[AgentInfo]) -> None:
        self._agents = agents

    def start(self, events) -> None:
        pass

    def agents(self) -> list[AgentInfo]:
        return self._agents

    def launch(self, spec: LaunchSpec) -> str:
        return "0"

    def kill(self, tenant_id: str, executor_id: str) -> None:
        pass

    def tenant_constraints(self, group: str) -> dict[str, str]:
        return {}

    def flush(self, wants_more: bool) -> None:
        pass

    def adopt(self, spec: LaunchSpec, handle: str) -> bool:
        return False

    def reconcile(self, adopted, abandoned) -> None:
        pass

    def stop(self, kill_executors: bool = True) -> None:
        pass


def overhead_per_grant(scheduler: str, agents: int, tenants: int, persist: bool) -> dict:
    rng = np.random.default_rng(0)
    cpus = rng.choice([4, 8, 16, 32], agents)
    mem = rng.choice([8192, 16384, 65536], agents)
    infos = [
        AgentInfo(f"a{i}", "127.0.0.1", {"cpus": float(cpus[i]), "mem": float(mem[i])})
        for i in range(agents)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "s.sqlite" if persist else None)
        # the whole fill in one run: this measures the overhead per grant, not the caps
        uncapped = Limits(max_launches_per_run=10**9, max_executors_per_tenant=10**9)
        broker = Broker(NullBackend(infos), EngineConfig(scheduler), store=store, limits=uncapped)
        broker.start(loop=False)
        for t in range(tenants):
            c, m = float(rng.choice([1, 2, 4])), float(rng.choice([1024, 2048, 4096]))
            broker.register(
                pb.RegisterRequest(
                    tenant_id=f"t{t}",
                    demand={"cpus": c, "mem": m},
                    target=1_000_000,
                    launch=pb.ExecutorLaunch(
                        driver_url="spark://CoarseGrainedScheduler@127.0.0.1:1",
                        app_id=f"app-{t}",
                        cores=int(c),
                        heap_mib=int(m) - 384,
                    ),
                )
            )
        began = time.perf_counter()
        grants = broker.allocate_once()
        seconds = time.perf_counter() - began
        broker.stop()
    return {
        "scheduler": scheduler,
        "agents": agents,
        "tenants": tenants,
        "persisted": persist,
        "grants": grants,
        "seconds": round(seconds, 4),
        "microseconds_per_grant": round(1e6 * seconds / max(grants, 1), 1),
    }


def registration_times(executors: int, rounds: int) -> dict:
    """Grant -> 'Successfully registered with driver', for executors started together."""
    samples: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        options = BrokerOptions(
            engine=EngineConfig("rpsdsf", interval=0.5),
            http_port=0,
            grpc_port=0,
            state_dir=Path(tmp),
        )
        with BrokerService(options) as service:
            for _ in range(rounds):
                plan = spark_submit_command(
                    [str(HOSTS_JOB), str(executors), "4", "0.1"],
                    broker=service.http_address,
                    conf={
                        "spark.ui.enabled": "false",
                        "spark.executor.cores": "1",
                        "spark.executor.memory": "512m",
                        "spark.executor.instances": str(executors),
                    },
                )
                done = subprocess.run(
                    plan.argv, env={**plan.env, "PYSPARK_PYTHON": sys.executable},
                    capture_output=True, timeout=300,
                )  # fmt: skip
                if done.returncode != 0:
                    raise RuntimeError(done.stderr.decode(errors="replace")[-2000:])
                samples.extend(service.broker.registration_seconds)
                service.broker.registration_seconds.clear()
    ordered = sorted(samples)
    return {
        "executors_started_together": executors,
        "rounds": rounds,
        "samples": len(samples),
        "median_s": round(statistics.median(ordered), 2),
        "p90_s": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
        "max_s": round(ordered[-1], 2),
    }


def render(results: dict) -> str:
    lines = [
        "# Broker benchmarks",
        "",
        "Machine: 2 cores, 24 GB. `python -m benchmarks.bench_broker`.",
        "",
        "## Grant to executor registered with its driver (real Spark, embedded cluster)",
        "",
        "| executors started together | samples | median s | p90 s | max s |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in results["registration"]:
        lines.append(
            f"| {r['executors_started_together']} | {r['samples']} | {r['median_s']} "
            f"| {r['p90_s']} | {r['max_s']} |"
        )
    lines += [
        "",
        "## Broker overhead per grant (one allocation run, executors not started)",
        "",
        "Policy decision + bookkeeping + the SQLite write of each executor when persisted.",
        "",
        "| scheduler | agents | tenants | persisted | grants | s | µs per grant |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in results["overhead"]:
        lines.append(
            f"| {r['scheduler']} | {r['agents']} | {r['tenants']} | {r['persisted']} "
            f"| {r['grants']} | {r['seconds']} | {r['microseconds_per_grant']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    results = {"overhead": [], "registration": []}
    for scheduler in ("drf", "rpsdsf", "bfdrf"):
        for persist in (False, True):
            results["overhead"].append(overhead_per_grant(scheduler, 100, 50, persist))
            print(results["overhead"][-1], flush=True)
    for executors, rounds in ((1, 3), (4, 2)):
        results["registration"].append(registration_times(executors, rounds))
        print(results["registration"][-1], flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "broker.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "broker.md").write_text(render(results))
    print(render(results))


if __name__ == "__main__":
    main()
