"""Load on the tenant API: N tenants (default 500) register, heartbeat every 2 s and change
their targets every 5 s for 60 s, against a broker in its own process (so the load generator
does not share its interpreter): by default once with every tenant over HTTP/JSON and once
with every tenant over gRPC (`--transport both`); `--transport http|grpc` runs one of them,
`--transport mixed` one run with half the tenants over each. Executors are not
started (a backend that accepts every launch and reports it running), so what is measured is
the API, the broker and its allocation runs.

Reports per transport the requests, throughput, p50/p99/max latency and errors, and checks
the capacity invariant (no agent allocated beyond its capacity, in any resource) after every
allocation run inside the broker and on every allocation snapshot the clients read.

Writes benchmarks/results/load.{json,md}. Run: `python -m benchmarks.bench_load
[--tenants 500] [--seconds 60] [--transport both|http|grpc|mixed]`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"
TOKEN = "bench-token"
AGENTS = 100
HEARTBEAT_SECONDS = 2.0
TARGET_SECONDS = 5.0
WORKERS = 32  # client threads in a run, split evenly over its transports


# ---- the broker process ----------------------------------------------------------------
def serve(state_dir: str) -> None:
    """The broker with a backend that starts nothing; prints its addresses as one JSON
    line, counts capacity violations after every allocation run, stops on SIGTERM."""
    from allocator.backends.base import AgentInfo, ExecutorState, TaskStatus
    from allocator.broker.server import BrokerOptions, BrokerService

    class AcceptingBackend:
        name = "null"

        def __init__(self) -> None:
            self.events = None
            self._agents = [
                AgentInfo(f"a{i}", "127.0.0.1", {"cpus": 64.0, "mem": 262144.0})
                for i in range(AGENTS)
            ]

        def start(self, events) -> None:
            self.events = events

        def agents(self):
            return self._agents

        def launch(self, spec) -> str:
            threading.Timer(
                0.05, self.events.status,
                (TaskStatus(spec.tenant_id, spec.executor_id, ExecutorState.RUNNING, "ok"),),
            ).start()  # fmt: skip
            return "0"

        def kill(self, tenant_id: str, executor_id: str) -> None:
            self.events.status(TaskStatus(tenant_id, executor_id, ExecutorState.KILLED, "ok"))

        def tenant_constraints(self, group: str) -> dict:
            return {}

        def flush(self, wants_more: bool) -> None:
            pass

        def adopt(self, spec, handle: str) -> bool:
            return False

        def reconcile(self, adopted, abandoned) -> None:
            pass

        def stop(self, kill_executors: bool = True) -> None:
            pass

    options = BrokerOptions(
        http_port=0, grpc_port=0, state_dir=Path(state_dir), token=TOKEN, metrics_port=None,
    )  # fmt: skip
    service = BrokerService(options, backend=AcceptingBackend())
    broker = service.broker
    checks = {"runs_checked": 0, "violations": 0, "run_seconds": [], "launched": []}

    def check(seconds: float, launched: int) -> None:  # under the broker's lock
        engine = broker.engine
        used = {a: np.zeros(len(engine.resources)) for a in engine.agents}
        for (framework, agent), tasks in engine.running.items():
            used[agent] += tasks * engine.frameworks[framework].demand
        checks["runs_checked"] += 1
        checks["run_seconds"].append(seconds)
        checks["launched"].append(launched)
        for name, record in engine.agents.items():
            if (used[name] > record.capacity + 1e-9).any():
                checks["violations"] += 1

    broker.on_run.append(check)
    service.start()
    print(json.dumps({"http": service.http_address, "grpc": service.grpc_address}), flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    service.stop()
    launched = checks.pop("launched")
    checks["launches"] = sum(launched)
    checks["max_launched_in_a_run"] = max(launched, default=0)
    checks["runs_launching"] = sum(1 for n in launched if n > 0)
    runs = np.array(checks.pop("run_seconds") or [0.0])
    checks["run_p50_ms"] = round(float(np.percentile(runs, 50)) * 1000, 2)
    checks["run_p99_ms"] = round(float(np.percentile(runs, 99)) * 1000, 2)
    checks["run_max_ms"] = round(float(runs.max()) * 1000, 2)
    print(json.dumps(checks), flush=True)


# ---- the load -----------------------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def add(self, seconds: float, error: str | None) -> None:
        with self.lock:
            self.latencies.append(seconds)
            if error:
                self.errors.append(error)


def register_json(tenant: str) -> dict:
    return {
        "tenantId": tenant, "group": f"g{hash(tenant) % 10}",
        "demand": {"cpus": 1, "mem": 1024}, "target": 1,
        "launch": {"driverUrl": "spark://CoarseGrainedScheduler@127.0.0.1:4000",
                   "appId": tenant, "cores": 1, "heapMib": 512},
    }  # fmt: skip


class HttpTenants:
    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.connection = http.client.HTTPConnection(host, int(port), timeout=30)

    def call(self, method: str, body: dict) -> str | None:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
        try:
            self.connection.request("POST", f"/v1/{method}", body=data, headers=headers)
            answer = self.connection.getresponse()
            answer.read()
        except (OSError, http.client.HTTPException) as error:
            self.connection.close()
            return f"http {method}: {type(error).__name__}"
        return None if answer.status == 200 else f"http {method}: {answer.status}"


class GrpcTenants:
    def __init__(self, address: str) -> None:
        from allocator.broker.client import BrokerClient

        self.client = BrokerClient(address, token=TOKEN, timeout=30)

    def call(self, method: str, body: dict) -> str | None:
        from google.protobuf import json_format

        from allocator.broker.api import CALLS
        from allocator.broker.client import BrokerCallError

        request = json_format.ParseDict(body, CALLS[method].request_type())
        try:
            getattr(self.client._stub, method)(
                request, metadata=self.client._metadata, timeout=self.client.timeout
            )
        except BrokerCallError as error:
            return f"grpc {method}: {error.code}"
        except Exception as error:  # grpc.RpcError
            code = getattr(error, "code", lambda: "?")()
            return f"grpc {method}: {code}"
        return None


def worker(kind: str, address: str, tenants: list[str], seconds: float, rec: Recorder) -> None:
    api = HttpTenants(address) if kind == "http" else GrpcTenants(address)
    rng = random.Random(hash(tenants[0]) if tenants else 0)

    def timed(method: str, body: dict) -> None:
        began = time.perf_counter()
        error = api.call(method, body)
        rec.add(time.perf_counter() - began, error)

    for tenant in tenants:
        timed("Register", register_json(tenant))
    now = time.monotonic()
    end = now + seconds
    due = {t: (now + rng.uniform(0, HEARTBEAT_SECONDS), now + rng.uniform(0, TARGET_SECONDS))
           for t in tenants}  # fmt: skip
    while (now := time.monotonic()) < end:
        next_at = end
        for tenant, (beat, target) in due.items():
            if beat <= now:
                timed("Heartbeat", {"tenantId": tenant})
                beat = now + HEARTBEAT_SECONDS
            if target <= now:
                timed("SetTarget", {"tenantId": tenant, "total": rng.randint(0, 4)})
                target = now + TARGET_SECONDS
            due[tenant] = (beat, target)
            next_at = min(next_at, beat, target)
        time.sleep(max(0.0, min(next_at - time.monotonic(), 0.2)))
    for tenant in tenants:
        timed("Unregister", {"tenantId": tenant})


def watch_snapshots(address: str, seconds: float, out: dict) -> None:
    """Read the allocation every 0.5 s and check each snapshot's capacity invariant."""
    from allocator.broker.client import BrokerClient

    end = time.monotonic() + seconds
    with BrokerClient(address, token=TOKEN, timeout=30) as client:
        while time.monotonic() < end:
            allocation = client.allocation()
            out["snapshots"] += 1
            for agent in allocation.agents:
                for resource, capacity in agent.capacity.items():
                    if agent.allocated[resource] > capacity + 1e-9:
                        out["violations"] += 1
            out["max_running"] = max(out["max_running"], sum(t.running for t in allocation.tenants))
            time.sleep(0.5)


def summarize(rec: Recorder, seconds: float) -> dict:
    lat = np.array(rec.latencies or [0.0]) * 1000
    return {
        "requests": len(rec.latencies),
        "per_second": round(len(rec.latencies) / seconds, 1),
        "p50_ms": round(float(np.percentile(lat, 50)), 2),
        "p99_ms": round(float(np.percentile(lat, 99)), 2),
        "max_ms": round(float(lat.max()), 2),
        "errors": len(rec.errors),
        "first_errors": rec.errors[:5],
    }


TRANSPORTS = {"http": ("http",), "grpc": ("grpc",), "mixed": ("http", "grpc")}


def start_broker(state: str) -> tuple[subprocess.Popen, dict]:
    broker = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_load", "--serve", state],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    return broker, json.loads(broker.stdout.readline())


def stop_broker(broker: subprocess.Popen) -> dict:
    """SIGTERM; the broker's allocation-run checks (its last line)."""
    broker.send_signal(signal.SIGTERM)
    try:
        out, _ = broker.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        broker.kill()
        out, _ = broker.communicate()
    return json.loads(out.strip().splitlines()[-1])


def worst_case(tenants: int, seconds: float) -> dict:
    """The longest allocation runs the default limits allow at 100 agents: `tenants` (the
    default max_tenants) each asking for 1,000,000 executors of the smallest whole-core
    size, so every run until the cluster is full launches at the per-run cap, and every run
    after it still weighs every tenant; `seconds` of runs after the registrations."""
    with tempfile.TemporaryDirectory() as state:
        broker, addresses = start_broker(state)
        try:
            names = [f"flood-{i}" for i in range(tenants)]
            rec = Recorder()

            def register(mine: list[str]) -> None:
                api = HttpTenants(addresses["http"])
                for tenant in mine:
                    body = register_json(tenant)
                    body.update(target=1_000_000, group=f"g{int(tenant[6:]) % 200}")
                    began = time.perf_counter()
                    error = api.call("Register", body)
                    rec.add(time.perf_counter() - began, error)

            threads = [
                threading.Thread(target=register, args=(names[w::WORKERS],)) for w in range(WORKERS)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            time.sleep(seconds)  # the broker's own loop runs; its hook times every run
        finally:
            server = stop_broker(broker)
    return {"tenants": tenants, "seconds": seconds, "register_errors": len(rec.errors),
            "first_errors": rec.errors[:5], "allocation_runs": server}  # fmt: skip


def run_once(kinds: tuple[str, ...], tenants: int, seconds: float) -> dict:
    """One broker process; the tenants split evenly over `kinds`, WORKERS client threads in
    all; what each transport saw, the broker's allocation-run checks and the snapshots."""
    with tempfile.TemporaryDirectory() as state:
        broker, addresses = start_broker(state)
        try:
            recorders = {kind: Recorder() for kind in kinds}
            names = [f"bench-{i}" for i in range(tenants)]
            workers = WORKERS // len(kinds)
            threads = []
            began = time.monotonic()
            for index, kind in enumerate(kinds):
                mine = names[index :: len(kinds)]
                for w in range(workers):
                    threads.append(threading.Thread(target=worker, args=(
                        kind, addresses[kind], mine[w::workers], seconds, recorders[kind],
                    )))  # fmt: skip
            snapshots = {"snapshots": 0, "violations": 0, "max_running": 0}
            threads.append(threading.Thread(
                target=watch_snapshots, args=(addresses["grpc"], seconds, snapshots)
            ))  # fmt: skip
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - began
        finally:
            server = stop_broker(broker)
    return {
        "transports": list(kinds),
        **{kind: summarize(recorders[kind], elapsed) for kind in kinds},
        "allocation_runs": server,
        "snapshots": snapshots,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--transport", choices=["both", *TRANSPORTS], default="both",
        help="both (default): one run with every tenant over HTTP, then one over gRPC; "
        "http or grpc: that run only; mixed: one run, half the tenants over each",
    )  # fmt: skip
    parser.add_argument(
        "--worst-case-seconds", type=float, default=20.0,
        help="then the longest allocation runs the default limits allow (max_tenants "
        "tenants asking for everything) for this long; 0 skips it",
    )  # fmt: skip
    parser.add_argument("--serve", metavar="STATE_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    from allocator.broker.limits import Limits

    plan = ["http", "grpc"] if args.transport == "both" else [args.transport]
    runs = [run_once(TRANSPORTS[name], args.tenants, args.seconds) for name in plan]
    worst = None
    if args.worst_case_seconds > 0:
        worst = worst_case(Limits().max_tenants, args.worst_case_seconds)
        worst["max_launches_per_run"] = Limits().max_launches_per_run
    result = {
        "tenants": args.tenants, "seconds": args.seconds, "agents": AGENTS,
        "heartbeat_s": HEARTBEAT_SECONDS, "set_target_s": TARGET_SECONDS,
        "transport": args.transport, "runs": runs, "worst_case": worst,
        "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
    }  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "load.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "load.md").write_text(render(result))
    print(render(result))


def render(r: dict) -> str:
    split = {
        "both": "every tenant over HTTP/JSON in one run, then every tenant over gRPC in another "
        "(a broker process of its own for each)",
        "http": "every tenant over HTTP/JSON", "grpc": "every tenant over gRPC",
        "mixed": "half over HTTP/JSON, half over gRPC, in one run",
    }[r["transport"]]  # fmt: skip
    lines = [
        f"# Tenant API under load ({r['date']}, {r['cpus']} cpus)",
        "",
        f"{r['tenants']} tenants for {r['seconds']:g} s, {split}: Register, "
        f"Heartbeat every {r['heartbeat_s']:g} s, SetTarget (0-4) every {r['set_target_s']:g} s, "
        f"Unregister; broker in its own process with {r['agents']} agents, executors not "
        f"started; {WORKERS} client threads per run. One more client reads the allocation "
        "over gRPC every 0.5 s to check it. "
        f"`python -m benchmarks.bench_load --transport {r['transport']}`.",
        "",
        "| run | transport | requests | per s | p50 ms | p99 ms | max ms | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in r["runs"]:
        name = "+".join(run["transports"])
        for kind in run["transports"]:
            s = run[kind]
            lines.append(
                f"| {name} | {kind} | {s['requests']} | {s['per_second']} | {s['p50_ms']} | "
                f"{s['p99_ms']} | {s['max_ms']} | {s['errors']} |"
            )
    lines.append("")
    for run in r["runs"]:
        runs, snaps = run["allocation_runs"], run["snapshots"]
        lines += [
            f"Run {'+'.join(run['transports'])}: allocation runs {runs['runs_checked']} checked "
            f"after each run, capacity violations {runs['violations']}; run time p50 "
            f"{runs['run_p50_ms']} ms, p99 {runs['run_p99_ms']} ms, max {runs['run_max_ms']} "
            f"ms. Allocation snapshots read by a client: {snaps['snapshots']}, capacity "
            f"violations {snaps['violations']}; at most {snaps['max_running']} executors "
            "running at once.",
            "",
        ]
    worst = r.get("worst_case")
    if worst:
        runs = worst["allocation_runs"]
        lines += [
            "## Longest allocation runs under the default limits",
            "",
            f"{worst['tenants']} tenants (the default `max_tenants`) in 200 groups, each "
            "asking for 1,000,000 executors of 1 cpu / 1 GiB (held at "
            "`max_executors_per_tenant`), registered over HTTP "
            f"({worst['register_errors']} errors), then {worst['seconds']:g} s of the broker's "
            f"own allocation loop at {r['agents']} agents: {runs['runs_checked']} runs, "
            f"{runs['runs_launching']} of them launching ({runs['launches']} launches, at most "
            f"{runs['max_launched_in_a_run']} in a run; the cap `max_launches_per_run` is "
            f"{worst['max_launches_per_run']}), capacity violations {runs['violations']}; "
            f"run time p50 {runs['run_p50_ms']} ms, p99 {runs['run_p99_ms']} ms, max "
            f"{runs['run_max_ms']} ms (target: every run under 100 ms).",
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
