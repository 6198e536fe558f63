from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.long_first import long_first

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


#: C1 only, one GC thread, no perf-data file: JVMs that start on less CPU (docs/emulation.md).
FAST_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.module is not None and item.module.__name__ in LIVE_MODULES:
            item.add_marker(pytest.mark.live)


class _LongFirst:
    """Runs last among the collection hooks, so that it orders what -m and -k kept."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]):
        workers = getattr(config, "workerinput", {}).get("workercount", 1)
        items[:] = long_first(items, lambda item: item.nodeid, workers)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_LongFirst(), "fairbroker-long-first")


@pytest.fixture(scope="session")
def example() -> Cluster:
    """Paper 002 eqs. (11)-(12): d1=(5,1), d2=(1,5), c1=(100,30), c2=(30,100)."""
    return paper_example()


@pytest.fixture(autouse=True)
def _spark_scratch(monkeypatch: pytest.MonkeyPatch):
    """Spark's scratch space (the blockmgr-* and spark-* directories its drivers and
    executors leave in /tmp when they are killed) in a directory of the test's own, removed
    after it, and no Spark driver a test started outlives it, even when the test fails
    early.

    spark.local.dir goes in a spark-defaults.conf that every spark-submit the test starts
    reads (SPARK_CONF_DIR; a test may set its own), and executors take it from their driver.
    The directory is world-writable with the sticky bit, as /tmp is, so that executors
    sandboxed as another user can use it. A SPARK_CONF_DIR of the caller's is left alone.

    The same file gives drivers and executors the JVM flags of the emulated batch
    (docs/emulation.md: C1 only, one GC thread; a three-executor Pi job took 49 CPU-seconds
    with them, 81 without): on two cores the suite's dozens of short-lived JVMs are its
    main cost. A test's own extraJavaOptions (--conf) wins over these."""
    root = None
    if "SPARK_CONF_DIR" not in os.environ:
        root = Path(tempfile.mkdtemp(prefix="fairbroker-test-spark-"))
        root.chmod(0o755)
        local = root / "local"
        local.mkdir()
        local.chmod(0o1777)
        conf = root / "conf"
        conf.mkdir()
        (conf / "spark-defaults.conf").write_text(
            f"spark.local.dir {local}\n"
            f"spark.driver.extraJavaOptions {FAST_JVM_FLAGS}\n"
            f"spark.executor.extraJavaOptions {FAST_JVM_FLAGS}\n"
        )
        monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    try:
        yield
    finally:
        if "support.spark" in sys.modules:
            sys.modules["support.spark"].kill_all_drivers()
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


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
