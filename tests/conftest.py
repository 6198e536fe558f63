from __future__ import annotations

import subprocess
import sys

import pytest

from allocator.model import Cluster
from allocator.table1 import paper_example

#: Modules whose tests start real components: Spark JVMs, a Prometheus server, a Mesos master
#: (real or the project's), deployment linters, package builds. `make test-fast` skips them.
LIVE_MODULES = {
    "test_spark_live", "test_apps", "test_shim_build", "test_batch_live", "test_admission_live",
    "test_mesos_live", "test_mesos_real", "test_mesos_master", "test_mesos_link", "test_prometheus",
    "test_deploy_docker", "test_deploy_systemd", "test_deploy_terraform", "test_packaging",
    "test_submit",
}  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.module is not None and item.module.__name__ in LIVE_MODULES:
            item.add_marker(pytest.mark.live)


@pytest.fixture(scope="session")
def example() -> Cluster:
    """Paper 002 eqs. (11)-(12): d1=(5,1), d2=(1,5), c1=(100,30), c2=(30,100)."""
    return paper_example()


def make_cluster(
    capacity: list[list[float]],
    demand: list[list[float]],
    weight: list[float] | None = None,
    eligible: list[list[bool]] | None = None,
    max_tasks: list[float] | None = None,
    resources: tuple[str, ...] = ("cpus", "mem"),
) -> Cluster:
    return Cluster.from_arrays(
        capacity,
        demand,
        resources,
        weight,
        eligible,
        max_tasks,
        agent_names=tuple(f"s{i + 1}" for i in range(len(capacity))),
        framework_names=tuple(f"f{n + 1}" for n in range(len(demand))),
    )


def engine_from(options: dict, **defaults):
    """An EngineConfig from the engine's fields among a test helper's keyword `options`
    (removed from it), over `defaults`."""
    from dataclasses import fields

    from allocator.engine_config import EngineConfig

    names = {f.name for f in fields(EngineConfig)}
    chosen = {k: options.pop(k) for k in list(options) if k in names}
    return EngineConfig(**{**defaults, **chosen})


def run_fairbroker(*args: str) -> subprocess.CompletedProcess[str]:
    """The `fairbroker` command as a user runs it, in a real subprocess."""
    return subprocess.run(
        [sys.executable, "-c", "from allocator.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(autouse=True)
def _stop_spark_drivers():
    """No Spark driver a test started outlives it, even when the test fails early."""
    yield
    if "spark_support" in sys.modules:
        sys.modules["spark_support"].kill_all_drivers()
