"""What the executor sandbox's tests share (tests/test_sandbox.py, test_sandbox_limits.py): a
one-agent cluster, a stand-in Spark home running a test's script as spark-class, and a
broker in this process whose embedded cluster runs that script in a given sandbox. The
directory they all live in is the `sandbox_base` fixture (tests/conftest.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from allocator.backends.base import AgentInfo
from allocator.backends.local import LocalCluster
from allocator.backends.sandbox import SandboxConfig
from allocator.broker.server import BrokerOptions, BrokerService
from allocator.engine_config import EngineConfig

ONE_AGENT = [AgentInfo("a1", "127.0.0.1", {"cpus": 4, "mem": 4096})]
HAS_BWRAP = shutil.which("bwrap") is not None
needs_bwrap = pytest.mark.skipif(
    not HAS_BWRAP, reason="bubblewrap (bwrap) is not installed: make system-deps"
)


def spark_home(base: Path, script: str) -> Path:
    """`base/spark` whose bin/spark-class is `script`, readable and runnable by any user."""
    home = base / "spark"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "spark-class").write_text(script)
    (home / "bin" / "spark-class").chmod(0o755)
    home.chmod(0o755)
    return home


@contextmanager
def sandboxed_broker(
    home: Path,
    state: Path,
    sandbox: SandboxConfig,
    agents: list[AgentInfo] = ONE_AGENT,
    engine: EngineConfig | None = None,
) -> Iterator[tuple[LocalCluster, BrokerService]]:
    """A broker in this process (ports chosen by the kernel, tenants never dropped for
    silence) on an embedded cluster under `state/agents` whose executors run `home`'s
    spark-class in `sandbox` (its state directory set to `state`); stopped on leaving."""
    cluster = LocalCluster(
        agents, state / "agents", home, sandbox=replace(sandbox, state_dir=state)
    )
    options = BrokerOptions(
        engine=engine or EngineConfig.mesos("drf"), http_port=0, grpc_port=0, state_dir=state,
        lease_seconds=600,
    )  # fmt: skip
    service = BrokerService(options, backend=cluster).start()
    try:
        yield cluster, service
    finally:
        service.stop()
