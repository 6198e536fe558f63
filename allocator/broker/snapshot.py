"""The Allocation message (tenants and agents) from the online engine's state, and the
broker's part of it (BrokerInfo, a tenant's executors).

One definition for the live broker, the simulator and the metrics: whatever reads an
allocation (`fairbroker status`, Prometheus, time series) reads this message.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from allocator.backends.base import Backend
from allocator.broker.proto import pb
from allocator.broker.tenants import ExecutorRecord
from allocator.engine import Engine


def engine_allocation(
    engine: Engine,
    info: pb.BrokerInfo | None = None,
    hosts: dict[str, str] | None = None,
) -> pb.Allocation:
    resources = engine.resources
    total = engine.capacity_total()
    running = engine.running
    pending = engine.pending()
    tenants = []
    for name, record in engine.frameworks.items():
        count = engine.tasks_of(name)
        held = count * record.demand
        shares = np.divide(held, total, out=np.zeros_like(held), where=total > 0)
        tenants.append(
            pb.TenantAllocation(
                tenant_id=name,
                group=record.role,
                weight=record.weight,
                demand=_named(resources, record.demand),
                declared=record.declared,
                target=int(min(record.target, 2**31 - 1)),
                running=count,
                pending=int(min(pending[name], 2**31 - 1)),
                allocated=_named(resources, held),
                dominant_share=float(shares.max(initial=0.0)),
            )
        )
    used: dict[str, np.ndarray] = {a: np.zeros(len(resources)) for a in engine.agents}
    per_agent: dict[str, dict[str, int]] = {a: {} for a in engine.agents}
    for (framework, agent), tasks in running.items():
        per_agent[agent][framework] = tasks
        used[agent] += tasks * engine.frameworks[framework].demand
    agents = [
        pb.AgentAllocation(
            name=name,
            hostname=(hosts or {}).get(name, ""),
            capacity=_named(resources, record.capacity),
            allocated=_named(resources, used[name]),
            residual=_named(resources, record.capacity - used[name]),
            executors=per_agent[name],
            attributes={k: str(v) for k, v in record.attributes.items()},
        )
        for name, record in engine.agents.items()
    ]
    return pb.Allocation(broker=info, tenants=tenants, agents=agents)


def broker_info(engine: Engine, backend: Backend, uptime_seconds: float) -> pb.BrokerInfo:
    link = getattr(backend, "link", None)  # Mesos: the link to the master, in words
    config = engine.config
    return pb.BrokerInfo(
        scheduler=engine.scheduler.name,
        mode=str(engine.mode),
        selection=str(engine.selection),
        backend=backend.name,
        grants_total=engine.grants_total,
        runs_total=engine.runs,
        uptime_seconds=uptime_seconds,
        resources=list(engine.resources),
        backend_status=link.describe() if link is not None else "",
        level=str(engine.level),
        trigger=str(engine.trigger),
        ties=str(engine.ties),
        role_weights={r: w for r, w in engine.role_weights.items() if w != 1.0},
        interval_seconds=engine.interval,
        reclaim_after=config.reclaim_after,
        reclaim_grace=config.reclaim_grace,
        reclaim_min_runtime=config.reclaim_min_runtime,
        reclaim_per_run=config.reclaim_per_run,
        reclaim_per_minute=config.reclaim_per_minute,
        protected_groups=list(config.protected_groups),
    )


def executor_messages(records: Iterable[ExecutorRecord]) -> list[pb.Executor]:
    return [
        pb.Executor(
            executor_id=e.spec.executor_id,
            agent=e.spec.agent,
            state=e.state.value,
            started_at=e.started_at,
        )
        for e in records
    ]


def _named(resources: tuple[str, ...], values: np.ndarray) -> dict[str, float]:
    return dict(zip(resources, map(float, values), strict=True))
