"""The broker's test doubles: a recording backend on paper 002's three agent types, tenants'
register requests, and an HTTP call to a running service."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import fields

from allocator.backends.base import AgentInfo, ExecutorState, LaunchSpec, TaskStatus
from allocator.broker.proto import pb
from allocator.engine_config import EngineConfig

# Paper 002's three server types at half memory (the embedded cluster's default).
AGENTS = [
    AgentInfo("t1", "127.0.1.1", {"cpus": 4, "mem": 7168}, {"type": "t1"}),
    AgentInfo("t2", "127.0.1.2", {"cpus": 8, "mem": 4096}, {"type": "t2"}),
    AgentInfo("t3", "127.0.1.3", {"cpus": 6, "mem": 5632}, {"type": "t3"}),
]
PI = {"cpus": 2.0, "mem": 1024.0}
WORDCOUNT = {"cpus": 1.0, "mem": 1792.0}


class RecordingBackend:
    """Launches nothing; remembers launches and kills, and which executors are 'alive'."""

    name = "recording"

    def __init__(self, agents=AGENTS, alive: set[tuple[str, str]] | None = None) -> None:
        self._agents = agents
        self.launched: list[LaunchSpec] = []
        self.killed: list[tuple[str, str]] = []
        self.alive = alive if alive is not None else set()
        self.flushes = 0
        self.events = None

    def start(self, events) -> None:
        self.events = events

    def agents(self):
        return list(self._agents)

    def launch(self, spec: LaunchSpec) -> str:
        self.launched.append(spec)
        self.alive.add((spec.tenant_id, spec.executor_id))
        return f"pid-{spec.tenant_id}-{spec.executor_id}"

    def kill(self, tenant_id: str, executor_id: str) -> None:
        self.killed.append((tenant_id, executor_id))

    def tenant_constraints(self, group: str) -> dict[str, str]:
        return {}

    def flush(self, wants_more: bool) -> None:
        self.flushes += 1

    def adopt(self, spec: LaunchSpec, handle: str) -> bool:
        return (spec.tenant_id, spec.executor_id) in self.alive

    def reconcile(self, adopted, abandoned) -> None:
        for spec in abandoned:
            self.killed.append((spec.tenant_id, spec.executor_id))

    def stop(self, kill_executors: bool = True) -> None:
        pass

    def report(self, spec: LaunchSpec, state: ExecutorState) -> None:
        if state.terminal:
            self.alive.discard((spec.tenant_id, spec.executor_id))
        self.events.status(TaskStatus(spec.tenant_id, spec.executor_id, state, "test"))


def request(tenant: str, demand: dict, target: int = 10, group: str = "", **kw):
    launch = pb.ExecutorLaunch(
        driver_url=f"spark://CoarseGrainedScheduler@127.0.0.1:{4000 + len(tenant)}",
        app_id=f"app-{tenant}",
        cores=int(demand.get("cpus", 1)),
        heap_mib=int(demand.get("mem", 1024) - 384),
    )
    return pb.RegisterRequest(
        tenant_id=tenant, group=group, demand=demand, launch=launch, target=target, **kw
    )



def http(service, method: str, body: bytes, token: str | None = "s3cret", content_type=None):
    headers = {"Content-Type": content_type or "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(
        f"http://{service.http_address}/v1/{method}", data=body, headers=headers
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def engine_from(options: dict, **defaults) -> EngineConfig:
    """An EngineConfig from the engine's fields among a test helper's keyword `options`
    (removed from it), over `defaults`."""
    names = {f.name for f in fields(EngineConfig)}
    chosen = {k: options.pop(k) for k in list(options) if k in names}
    return EngineConfig(**{**defaults, **chosen})
