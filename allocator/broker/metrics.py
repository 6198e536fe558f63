"""Prometheus metrics of a broker (or of a simulated engine): names, labels and units are in
docs/metrics.md; the values are allocator.metrics_defs's, read at every scrape.

Resource amounts carry `resource` and `unit` labels, as kube-state-metrics does: cpus in
cores, mem and disk in bytes (the broker accounts MiB), gpus in GPUs, anything else as the
agents declare it ("scalar").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)

from allocator.broker.allocation_frame import AllocationFrame, constraints_of
from allocator.broker.api import CALLS
from allocator.broker.proto import pb
from allocator.broker.snapshot import engine_allocation
from allocator.broker.tls import TlsFiles
from allocator.metrics_defs import GroupUsage

if TYPE_CHECKING:

    from allocator.backends.mesos.link import LinkState
    from allocator.broker.core import Broker
    from allocator.engine import Engine

MEBIBYTE = 1 << 20
UNITS = {
    "cpus": ("core", 1.0),
    "mem": ("byte", MEBIBYTE),
    "disk": ("byte", MEBIBYTE),
    "gpus": ("gpu", 1.0),
}
OTHER_UNIT = ("scalar", 1.0)

RUN_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
DECISION_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.05, 0.25)
REGISTRATION_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True)
class Reading:
    """What one scrape reads: the allocation and the counters kept beside it."""

    allocation: pb.Allocation
    constraints: dict[str, dict[str, object]] = field(default_factory=dict)
    grants: dict[str, int] = field(default_factory=dict)  # tenant -> executors launched
    kills: dict[str, int] = field(default_factory=dict)  # tenant -> executors killed
    reclaimed: dict[str, int] = field(default_factory=dict)  # tenant -> executors reclaimed
    kills_total: int = 0
    offers: dict[str, int] | None = None  # Mesos backend: held, received, accepted, ...
    link: LinkState | None = None  # Mesos backend: the link to the master


def broker_reading(broker: Broker) -> Reading:
    allocation = broker.allocation()
    tenants = list(broker.tenants.values())
    return Reading(
        allocation=allocation,
        constraints={t.tenant_id: dict(t.request.constraints) for t in tenants},
        grants={t.tenant_id: t.grants for t in tenants},
        kills={t.tenant_id: t.kills for t in tenants},
        reclaimed={t.tenant_id: t.reclaimed for t in tenants},
        kills_total=broker.kills_total,
        offers=broker.backend.offer_stats() if hasattr(broker.backend, "offer_stats") else None,
        link=broker.backend.link.state() if hasattr(broker.backend, "link") else None,
    )


def engine_reading(engine: Engine, backend: str = "sim") -> Reading:
    """The same metrics for a simulated run (no per-tenant counters: the engine keeps none)."""
    info = pb.BrokerInfo(
        scheduler=engine.scheduler.name,
        mode=str(engine.mode),
        selection=str(engine.selection),
        backend=backend,
        grants_total=engine.grants_total,
        runs_total=engine.runs,
        resources=list(engine.resources),
    )
    return Reading(engine_allocation(engine, info), constraints_of(engine))


def _unit(resource: str) -> tuple[str, float]:
    return UNITS.get(resource, OTHER_UNIT)


@dataclass(frozen=True)
class Spec:
    counter: bool
    labels: tuple[str, ...]
    doc: str
    amounts: bool = False  # one sample per resource, with `resource` and `unit` labels


def _gauge(labels: tuple[str, ...], doc: str, amounts: bool = False) -> Spec:
    return Spec(False, labels, doc, amounts)


def _counter(labels: tuple[str, ...], doc: str) -> Spec:
    return Spec(True, labels, doc)


TENANT = ("tenant", "group")
SPECS: dict[str, Spec] = {
    "fairbroker_tenant_allocated": _gauge(TENANT, "Resources allocated to the tenant.", True),
    "fairbroker_tenant_demand": _gauge(TENANT, "Resources of one executor (d_n).", True),
    "fairbroker_tenant_demand_declared": _gauge(
        TENANT, "1 if the policy sees the demand vector (characterized), 0 if oblivious."
    ),
    "fairbroker_tenant_weight": _gauge(TENANT, "Fair-share weight phi_n."),
    "fairbroker_tenant_executors": _gauge(TENANT, "Executors accounted to the tenant (x_n)."),
    "fairbroker_tenant_executors_target": _gauge(TENANT, "Executors the tenant wants in all."),
    "fairbroker_tenant_executors_pending": _gauge(
        TENANT, "Executors the tenant wants beyond those it has."
    ),
    "fairbroker_tenant_dominant_share": _gauge(
        TENANT, "Cluster-wide dominant share max_r allocated_r / capacity_r, unweighted."
    ),
    "fairbroker_tenant_agent_dominant_share": _gauge(
        (*TENANT, "agent"), "PS-DSF per-agent share max_r allocated_r / c_{agent,r}, unweighted."
    ),
    "fairbroker_tenant_task_share": _gauge(
        TENANT, "TSF task share x_n / y_n (y_n: executors it could run alone)."
    ),
    "fairbroker_tenant_grants": _counter(TENANT, "Executors launched for the tenant."),
    "fairbroker_tenant_kills": _counter(TENANT, "Executors killed at the tenant's request."),
    "fairbroker_fair_share_executors": _gauge(
        TENANT,
        "The tenant's fair share in executors: what it would hold if every tenant's demand "
        "were placed from an empty cluster, capped by its target (while reclaim is on).",
    ),
    "fairbroker_reclaimed_executors": _counter(
        ("tenant",),
        "Executors reclaimed from the tenant (asked to leave so that a tenant below its fair "
        "share gets room).",
    ),
    "fairbroker_group_allocated": _gauge(("group",), "Resources allocated to the group.", True),
    "fairbroker_group_allocated_ratio": _gauge(
        ("group", "resource"), "Fraction of the cluster's capacity allocated to the group."
    ),
    "fairbroker_group_dominant_share": _gauge(
        ("group",), "The group's cluster-wide dominant share."
    ),
    "fairbroker_agent_capacity": _gauge(
        ("agent",), "The agent's resources as the broker holds them (Mesos: what it holds now; "
        "fairbroker_mesos_agent_last_offered is the agent's total).", True
    ),
    "fairbroker_agent_allocated": _gauge(("agent",), "Resources allocated on the agent.", True),
    "fairbroker_agent_residual": _gauge(("agent",), "Resources left on the agent.", True),
    "fairbroker_agent_executors": _gauge(
        ("agent", *TENANT), "Executors of a tenant on the agent (where it runs some)."
    ),
    "fairbroker_cluster_capacity": _gauge((), "Resources of all registered agents.", True),
    "fairbroker_cluster_allocated": _gauge((), "Resources allocated to all tenants.", True),
    "fairbroker_cluster_allocated_ratio": _gauge(
        ("resource",), "Fraction of the cluster's capacity allocated."
    ),
    "fairbroker_fairness_jain_index": _gauge(
        ("level",), "Jain's index over tenants' or groups' dominant shares (1 = equal)."
    ),
    "fairbroker_tenants": _gauge((), "Registered tenants."),
    "fairbroker_agents": _gauge((), "Registered agents."),
    "fairbroker_grants": _counter(
        (), "Grant decisions: one tenant on one agent in one step (oblivious: several executors)."
    ),
    "fairbroker_allocation_runs": _counter((), "Allocation runs."),
    "fairbroker_executor_kills": _counter((), "Executors killed at tenants' requests."),
    "fairbroker_mesos_offers_held": _gauge((), "Mesos offers the broker holds now."),
    "fairbroker_mesos_offers": _counter(
        ("outcome",), "Mesos offers by what became of them: received, accepted, declined, "
        "rescinded (Mesos backend only)."
    ),
    "fairbroker_mesos_agent_last_offered": _gauge(
        ("agent",), "The agent's last offered total, kept while offers are suppressed "
        "(Mesos only; fairbroker_agent_capacity is what the broker holds now).", True
    ),
    "fairbroker_mesos_connected": _gauge(
        (), "1 while the framework is subscribed to the Mesos master, else 0 (Mesos only)."
    ),
    "fairbroker_mesos_last_event_timestamp_seconds": _gauge(
        (), "Unix time of the Mesos master's last event (heartbeat, offers, update) (Mesos only)."
    ),
}


class _Families:
    """Every family of SPECS, each scrape afresh; the add methods check label counts."""

    def __init__(self) -> None:
        self.families: dict[str, Metric] = {}
        for name, spec in SPECS.items():
            labels = [*spec.labels, *(("resource", "unit") if spec.amounts else ())]
            kind = CounterMetricFamily if spec.counter else GaugeMetricFamily
            self.families[name] = kind(name, spec.doc, labels=labels)

    def add(self, name: str, labels: list[str], value: float) -> None:
        self.families[name].add_metric(labels, float(value))  # type: ignore[attr-defined]

    def amounts(
        self, name: str, labels: list[str], resources: tuple[str, ...], amounts: np.ndarray
    ) -> None:
        for resource, amount in zip(resources, amounts, strict=True):
            unit, scale = _unit(resource)
            self.add(name, [*labels, resource, unit], float(amount) * scale)


class AllocationCollector:
    """Gauges and counters computed from a Reading at every scrape."""

    def __init__(self, read: Callable[[], Reading]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        reading = self.read()
        frame = AllocationFrame.of(reading.allocation, reading.constraints)
        usage = frame.usage()
        out = _Families()
        _tenants(out, frame, reading)
        _groups(out, usage)
        _agents(out, frame)
        _cluster(out, frame, usage, reading)
        yield from out.families.values()
        info = reading.allocation.broker
        yield InfoMetricFamily(
            "fairbroker_scheduler", "The scheduler, mode and server selection in force.",
            value={
                "scheduler": info.scheduler, "mode": info.mode,
                "selection": info.selection, "backend": info.backend,
            },
        )  # fmt: skip


def _tenants(out: _Families, frame: AllocationFrame, reading: Reading) -> None:
    columns = {
        "fairbroker_tenant_weight": frame.weight,
        "fairbroker_tenant_demand_declared": frame.declared.astype(float),
        "fairbroker_tenant_executors": frame.running,
        "fairbroker_tenant_executors_target": frame.target,
        "fairbroker_tenant_executors_pending": frame.pending,
        "fairbroker_tenant_dominant_share": frame.dominant_shares(),
        "fairbroker_tenant_task_share": frame.task_shares(),
    }
    per_agent = frame.agent_dominant_shares()
    reclaiming = reading.allocation.broker.reclaim_after > 0
    fair = {t.tenant_id: t.fair_share for t in reading.allocation.tenants}
    for n, (tenant, group) in enumerate(zip(frame.tenants, frame.groups, strict=True)):
        labels = [tenant, group]
        for name, values in columns.items():
            out.add(name, labels, values[n])
        out.amounts("fairbroker_tenant_allocated", labels, frame.resources, frame.held[n])
        out.amounts("fairbroker_tenant_demand", labels, frame.resources, frame.demand[n])
        for i, agent in enumerate(frame.agents):
            out.add("fairbroker_tenant_agent_dominant_share", [*labels, agent], per_agent[n, i])
        if tenant in reading.grants:
            out.add("fairbroker_tenant_grants", labels, reading.grants[tenant])
        if tenant in reading.kills:
            out.add("fairbroker_tenant_kills", labels, reading.kills[tenant])
        if reclaiming:
            out.add("fairbroker_fair_share_executors", labels, fair.get(tenant, 0))
        if tenant in reading.reclaimed:
            out.add("fairbroker_reclaimed_executors", [tenant], reading.reclaimed[tenant])


def _groups(out: _Families, usage: GroupUsage) -> None:
    ratios = usage.group_ratio()
    shares = usage.dominant_shares()
    for g, group in enumerate(usage.groups):
        out.amounts("fairbroker_group_allocated", [group], usage.resources, usage.held[g])
        for resource, value in zip(usage.resources, ratios[g], strict=True):
            out.add("fairbroker_group_allocated_ratio", [group, resource], value)
        out.add("fairbroker_group_dominant_share", [group], shares[g])


def _agents(out: _Families, frame: AllocationFrame) -> None:
    for i, agent in enumerate(frame.agents):
        out.amounts("fairbroker_agent_capacity", [agent], frame.resources, frame.capacity[i])
        out.amounts("fairbroker_agent_allocated", [agent], frame.resources, frame.used[i])
        out.amounts("fairbroker_agent_residual", [agent], frame.resources, frame.residual[i])
        for n in np.flatnonzero(frame.tasks[:, i]):
            labels = [agent, frame.tenants[n], frame.groups[n]]
            out.add("fairbroker_agent_executors", labels, frame.tasks[n, i])


def _cluster(out: _Families, frame: AllocationFrame, usage: GroupUsage, reading: Reading) -> None:
    out.amounts("fairbroker_cluster_capacity", [], usage.resources, usage.capacity)
    out.amounts("fairbroker_cluster_allocated", [], usage.resources, usage.allocated())
    for resource, value in zip(usage.resources, usage.allocated_ratio(), strict=True):
        out.add("fairbroker_cluster_allocated_ratio", [resource], value)
    out.add("fairbroker_fairness_jain_index", ["tenant"], frame.fairness())
    out.add("fairbroker_fairness_jain_index", ["group"], usage.fairness())
    out.add("fairbroker_tenants", [], len(frame.tenants))
    out.add("fairbroker_agents", [], len(frame.agents))
    info = reading.allocation.broker
    out.add("fairbroker_grants", [], info.grants_total)
    out.add("fairbroker_allocation_runs", [], info.runs_total)
    out.add("fairbroker_executor_kills", [], reading.kills_total)
    if reading.offers is not None:
        out.add("fairbroker_mesos_offers_held", [], reading.offers["held"])
        for outcome in ("received", "accepted", "declined", "rescinded"):
            out.add("fairbroker_mesos_offers", [outcome], reading.offers[outcome])
    for agent in reading.allocation.agents:
        for resource, amount in sorted(agent.last_offered.items()):
            unit, scale = _unit(resource)
            out.add("fairbroker_mesos_agent_last_offered", [agent.name, resource, unit],
                    amount * scale)  # fmt: skip
    if reading.link is not None:
        out.add("fairbroker_mesos_connected", [], float(reading.link.connected))
        if reading.link.last_event is not None:
            out.add("fairbroker_mesos_last_event_timestamp_seconds", [], reading.link.last_event)


class BrokerMetrics:
    """A broker's registry: the allocation collector, run and latency histograms, API calls.

    `BrokerMetrics.of_broker(broker)` also hooks the broker's observer lists; pass
    `observe_request` to the tenant API servers (it is a RequestObserver).
    """

    def __init__(self, read: Callable[[], Reading]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(AllocationCollector(read))
        ProcessCollector(registry=self.registry)
        self.run_seconds = Histogram(
            "fairbroker_allocation_run_duration_seconds",
            "Duration of an allocation run, launches included.",
            buckets=RUN_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.decision_seconds = Histogram(
            "fairbroker_grant_decision_seconds",
            "Allocation-run time per executor it launched (observed once per executor).",
            buckets=DECISION_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.registration_seconds = Histogram(
            "fairbroker_executor_registration_seconds",
            "From an executor's grant to its registration with its driver.",
            buckets=REGISTRATION_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.requests = Counter(
            "fairbroker_api_requests", "Tenant API requests by transport, method and status.",
            ["transport", "method", "code"], registry=self.registry,
        )  # fmt: skip

    @classmethod
    def of_broker(cls, broker: Broker) -> BrokerMetrics:
        metrics = cls(partial(broker_reading, broker))
        broker.on_run.append(metrics.observe_run)
        broker.on_registered.append(metrics.registration_seconds.observe)
        return metrics

    def observe_run(self, seconds: float, launched: int) -> None:
        self.run_seconds.observe(seconds)
        for _ in range(launched):
            self.decision_seconds.observe(seconds / launched)

    def observe_request(self, transport: str, method: str, code: str) -> None:
        # Unknown paths are not label values: a client could make up unbounded many.
        self.requests.labels(transport, method if method in CALLS else "other", code).inc()


class MetricsServer:
    """The registry on http://HOST:PORT/metrics (port 0: an ephemeral port), served as the
    tenant API is (uvicorn, the same limits); with a token, a scrape must carry it
    (`Authorization: Bearer TOKEN`, Prometheus's `authorization` scrape setting)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        token: str | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        from prometheus_client import make_asgi_app

        from allocator.broker.api import check_token
        from allocator.broker.asgi import AsgiServer, HttpLimits, respond
        from allocator.broker.errors import ApiError

        metrics = make_asgi_app(registry)

        async def app(scope, receive, send) -> None:
            if scope["type"] != "http":
                return
            if scope["path"] != "/metrics":
                await respond(send, 404, b"not found: the metrics are at /metrics\n", "text/plain")
                return
            headers = dict(scope["headers"])
            try:
                check_token(token, headers.get(b"authorization", b"").decode("latin-1"))
            except ApiError as error:
                await respond(send, 401, f"{error}\n".encode(), "text/plain")
                return
            await metrics(scope, receive, send)

        self._server = AsgiServer(
            app, host, port, HttpLimits(max_body_bytes=0), "metrics-http", tls
        )
        self._server.start()

    @property
    def port(self) -> int:
        return self._server.port

    def stop(self) -> None:
        self._server.stop()
