"""A real Prometheus server (Debian's `prometheus`, installed by `make system-deps`) scrapes a
running broker on loopback; its query API must report the broker's own allocation. Also:
deploy/prometheus.yml and deploy/alerts.yml pass promtool, the alerts fire when they should,
and every query of the Grafana dashboard is valid PromQL that Prometheus evaluates."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from support.broker import PI, WORDCOUNT, RecordingBackend, request
from support.polling import free_port, wait_for
from support.promtool import series, tool
from support.serving import stop_gracefully

from allocator.broker.client import BrokerClient
from allocator.broker.proto import pb
from allocator.broker.server import BrokerOptions, BrokerService
from allocator.engine_config import EngineConfig

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
MIB = 1 << 20
TIMEOUT = 20.0


@contextmanager
def prometheus(target: str, workdir: Path) -> Iterator[str]:
    """Prometheus on 127.0.0.1:PORT scraping `target` every second with deploy/alerts.yml."""
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(DEPLOY / "alerts.yml")],
        "scrape_configs": [{"job_name": "fairbroker", "static_configs": [{"targets": [target]}]}],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = open(workdir / "prometheus.log", "wb")  # noqa: SIM115 (closed in finally)
    process = subprocess.Popen(
        [
            tool("prometheus"),
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop_gracefully(process, grace=10)
        log.close()


def api(server: str, path: str, **params: str) -> dict:
    url = f"http://{server}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        body = json.loads(reply.read())
    assert body["status"] == "success", body
    return body["data"]


def query(server: str, promql: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Instant vector as {sorted labels without job/instance/__name__: value}."""
    data = api(server, "query", query=promql)
    out = {}
    for found in data["result"]:
        labels = {
            k: v for k, v in found["metric"].items() if k not in ("job", "instance", "__name__")
        }
        out[tuple(sorted(labels.items()))] = float(found["value"][1])
    return out


def labels(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


def settle(service: BrokerService) -> pb.Allocation:
    """The allocation once the loop has stopped granting (three ticks without a grant)."""
    seen: list[int] = []

    def stable() -> bool:
        seen.append(service.broker.info().grants_total)
        return len(seen) > 3 and seen[-1] == seen[-4] and seen[-1] > 0

    wait_for(stable, TIMEOUT, "the allocation to settle")
    return service.broker.allocation()


def scraped_after(server: str, moment: float) -> bool:
    """Has Prometheus stored a scrape of the broker taken after `moment` (unix seconds)?"""
    try:
        stamps = query(server, "timestamp(fairbroker_agents)")
    except OSError:  # not listening yet
        return False
    return any(stamp > moment for stamp in stamps.values())


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator[tuple[pb.Allocation, str]]:
    """A broker with three tenants in two groups, scraped by Prometheus: the broker's own
    allocation and the Prometheus address."""
    tmp = tmp_path_factory.mktemp("prometheus")
    options = BrokerOptions(
        engine=EngineConfig("rpsdsf", interval=0.2),
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        state_dir=tmp / "broker",
        persist=False,
        lease_seconds=300,
    )
    with BrokerService(options, backend=RecordingBackend()) as service:
        with BrokerClient(service.grpc_address) as client:
            client.register(request("pi-1", PI, target=4, group="pi"))
            client.register(request("pi-2", PI, target=3, group="pi", weight=2.0))
            client.register(request("wc-1", WORDCOUNT, target=30, group="wordcount"))
            settle(service)
            assert client.kill("pi-1", ["1"]) == ["1"]
        allocation = service.broker.allocation()
        settled_at = time.time()
        with prometheus(service.metrics_address, tmp) as server:
            wait_for(
                lambda: scraped_after(server, settled_at), TIMEOUT, "a scrape of the settled broker"
            )
            yield allocation, server


def test_prometheus_reports_the_brokers_allocation(live) -> None:
    allocation, server = live
    assert query(server, 'up{job="fairbroker"}') == {(): 1.0}
    tenants = {t.tenant_id: t for t in allocation.tenants}
    assert set(tenants) == {"pi-1", "pi-2", "wc-1"}
    assert tenants["wc-1"].pending > 0  # it wants more than fits: a pending demand

    expected_allocated = {}
    for t in allocation.tenants:
        for resource, amount in t.allocated.items():
            unit, scale = ("core", 1) if resource == "cpus" else ("byte", MIB)
            key = labels(tenant=t.tenant_id, group=t.group, resource=resource, unit=unit)
            expected_allocated[key] = amount * scale
    assert query(server, "fairbroker_tenant_allocated") == expected_allocated
    assert query(server, "fairbroker_tenant_executors") == {
        labels(tenant=t.tenant_id, group=t.group): t.running for t in allocation.tenants
    }
    assert query(server, "fairbroker_tenant_executors_pending") == {
        labels(tenant=t.tenant_id, group=t.group): t.pending for t in allocation.tenants
    }
    shares = query(server, "fairbroker_tenant_dominant_share")
    assert set(shares) == {labels(tenant=t.tenant_id, group=t.group) for t in allocation.tenants}
    for t in allocation.tenants:
        assert shares[labels(tenant=t.tenant_id, group=t.group)] == pytest.approx(
            t.dominant_share, abs=1e-12
        )
    assert query(server, "fairbroker_tenant_weight")[labels(tenant="pi-2", group="pi")] == 2

    residual = {}
    executors = {}
    for a in allocation.agents:
        residual[labels(agent=a.name, resource="cpus", unit="core")] = a.residual["cpus"]
        residual[labels(agent=a.name, resource="mem", unit="byte")] = a.residual["mem"] * MIB
        for tenant, count in a.executors.items():
            executors[labels(agent=a.name, tenant=tenant, group=tenants[tenant].group)] = count
    assert query(server, "fairbroker_agent_residual") == residual
    assert query(server, "fairbroker_agent_executors") == executors
    assert sum(executors.values()) == sum(t.running for t in allocation.tenants) > 0

    capacity = {r: sum(a.capacity[r] for a in allocation.agents) for r in ("cpus", "mem")}
    held = {r: sum(t.allocated[r] for t in allocation.tenants) for r in ("cpus", "mem")}
    ratios = query(server, "fairbroker_cluster_allocated_ratio")
    for resource in ("cpus", "mem"):
        assert ratios[labels(resource=resource)] == pytest.approx(
            held[resource] / capacity[resource], abs=1e-12
        )

    info = allocation.broker
    assert query(server, "fairbroker_scheduler_info") == {
        labels(
            scheduler=info.scheduler, mode=info.mode, selection=info.selection,
            backend="recording",
        ): 1.0
    }  # fmt: skip
    assert query(server, "fairbroker_grants_total") == {(): float(info.grants_total)}
    assert query(server, "fairbroker_executor_kills_total") == {(): 1.0}
    assert query(server, "fairbroker_tenant_kills_total")[labels(tenant="pi-1", group="pi")] == 1
    registers = query(server, 'fairbroker_api_requests_total{method="Register"}')
    assert registers == {labels(transport="grpc", method="Register", code="OK"): 3.0}


def test_the_alert_rules_evaluate_on_live_data(live) -> None:
    _, server = live

    def evaluated() -> list[dict] | None:
        rules = [r for g in api(server, "rules")["groups"] for r in g["rules"]]
        done = all(r.get("lastEvaluation", "").startswith("20") for r in rules)
        return rules if rules and done else None

    rules = wait_for(evaluated, TIMEOUT, "every alert rule to be evaluated")
    assert {r["name"] for r in rules} >= {"FairbrokerTenantStarved", "FairbrokerDown"}
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]


def test_every_dashboard_query_is_valid_promql(live) -> None:
    _, server = live
    panels = json.loads((DEPLOY / "grafana" / "fairbroker.json").read_text())["panels"]
    answered = 0
    for panel in panels:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "1m")
            data = api(server, "query", query=expr)  # raises on a parse or evaluation error
            answered += bool(data["result"])
    assert answered >= 10  # most panels have data from a broker with tenants


def test_promtool_accepts_the_deploy_config_and_rules() -> None:
    promtool = tool("promtool")
    for args in (["check", "config", DEPLOY / "prometheus.yml"],
                 ["check", "rules", DEPLOY / "alerts.yml"]):  # fmt: skip
        done = subprocess.run([promtool, *map(str, args)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_alerts_fire_when_they_should(tmp_path: Path) -> None:
    """promtool's rule unit tests on synthetic series: a starved tenant, demand pending on an
    idle cluster, a broker that cannot be scraped; and the cases that must stay quiet."""
    promtool = tool("promtool")
    starved = {"tenant": "a", "group": "g"}
    growing = {"tenant": "c", "group": "h"}  # pending but granted every minute
    content = {"tenant": "d", "group": "h"}  # above average share, nothing pending
    base = {"instance": "b:7082", "job": "fairbroker", "severity": "warning"}
    tests = {
        "rule_files": [str(DEPLOY / "alerts.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    series("fairbroker_tenant_executors_pending", "2x20", **starved),
                    series("fairbroker_tenant_grants_total", "3x20", **starved),
                    series("fairbroker_tenant_dominant_share", "0.1x20", **starved),
                    series("fairbroker_tenant_executors_pending", "1x20", **growing),
                    series("fairbroker_tenant_grants_total", "0+1x20", **growing),
                    series("fairbroker_tenant_dominant_share", "0.05x20", **growing),
                    series("fairbroker_tenant_executors_pending", "0x20", **content),
                    series("fairbroker_tenant_grants_total", "5x20", **content),
                    series("fairbroker_tenant_dominant_share", "0.6x20", **content),
                    series("fairbroker_cluster_allocated_ratio", "0.9x20", resource="cpus"),
                    series("fairbroker_cluster_allocated_ratio", "0.8x20", resource="mem"),
                    series("up", "1x3 0x10"),
                ],
                "alert_rule_test": [
                    {"eval_time": "3m", "alertname": "FairbrokerTenantStarved", "exp_alerts": []},
                    {
                        "eval_time": "12m",
                        "alertname": "FairbrokerTenantStarved",
                        "exp_alerts": [
                            {
                                "exp_labels": {**base, **starved},
                                "exp_annotations": {
                                    "summary": "tenant a (g) starved: executors pending, no "
                                    "grant for 10 min",
                                    "description": "See fairbroker_tenant_agent_dominant_share "
                                    "and fairbroker_agent_residual.",
                                },
                            }
                        ],
                    },
                    # 85% allocated: pending demand alone is no alarm.
                    {
                        "eval_time": "15m",
                        "alertname": "FairbrokerLowAllocationWithPendingDemand",
                        "exp_alerts": [],
                    },
                    {
                        "eval_time": "6m",
                        "alertname": "FairbrokerDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {**base, "severity": "critical"},
                                "exp_annotations": {
                                    "summary": "fairbroker metrics at b:7082 cannot be scraped"
                                },
                            }
                        ],
                    },
                ],
            },
            {
                "interval": "1m",
                "input_series": [
                    series("fairbroker_tenant_executors_pending", "3x20", **starved),
                    series("fairbroker_cluster_allocated_ratio", "0.2x20", resource="cpus"),
                    series("fairbroker_cluster_allocated_ratio", "0.4x20", resource="mem"),
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "5m",
                        "alertname": "FairbrokerLowAllocationWithPendingDemand",
                        "exp_alerts": [],
                    },
                    {
                        "eval_time": "12m",
                        "alertname": "FairbrokerLowAllocationWithPendingDemand",
                        "exp_alerts": [
                            {
                                "exp_labels": base,
                                "exp_annotations": {
                                    "summary": "cluster under half allocated for 10 min while "
                                    "executors are pending"
                                },
                            }
                        ],
                    },
                ],
            },
        ],
    }
    (tmp_path / "alerts_test.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    done = subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "alerts_test.yml")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
