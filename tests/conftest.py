from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from allocator.model import Cluster
from allocator.table1 import paper_example

#: Modules whose tests start real components: Spark JVMs, a Prometheus server, a Mesos master
#: (real or the project's), deployment linters, package builds. `make test-fast` skips them.
LIVE_MODULES = {
    "test_spark_live", "test_apps", "test_shim_build", "test_batch_live", "test_admission_live",
    "test_mesos_live", "test_mesos_real", "test_mesos_master", "test_mesos_link", "test_prometheus",
    "test_deploy_docker", "test_deploy_systemd", "test_deploy_terraform", "test_packaging",
    "test_submit", "test_compare_live", "test_reclaim_spark_live", "test_explain_mesos",
}  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.module is not None and item.module.__name__ in LIVE_MODULES:
            item.add_marker(pytest.mark.live)


@pytest.fixture(scope="session")
def example() -> Cluster:
    """Paper 002 eqs. (11)-(12): d1=(5,1), d2=(1,5), c1=(100,30), c2=(30,100)."""
    return paper_example()


@pytest.fixture(autouse=True)
def _stop_spark_drivers():
    """No Spark driver a test started outlives it, even when the test fails early."""
    yield
    if "support.spark" in sys.modules:
        sys.modules["support.spark"].kill_all_drivers()


@pytest.fixture
def sandbox_base() -> Iterator[Path]:
    """A directory every user may pass through, for the executor sandbox's tests (pytest's
    own tmp is root's, mode 0700, and the sandbox user could not reach a state dir in it)."""
    path = Path(tempfile.mkdtemp(prefix="fairbroker-sandbox-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
