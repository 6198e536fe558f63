"""Resource limits of the executor sandbox (issue 25): each executor in a cgroup holding it to
its accounted memory, CPUs and a process count. A hostile stand-in executor allocates past
its memory and is OOM-killed while the broker and a modest tenant live on; the broker
reports the executor failed and why. Real subprocesses, real bubblewrap and the kernel's own
cgroups (v1 on this machine: memory, cpu and pids hierarchies), skipped where the broker
cannot create cgroups."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.broker import request
from support.polling import wait_for
from support.standin import held

from allocator.backends import cgroups
from allocator.backends.base import AgentInfo, ExecutorState, LaunchSpec
from allocator.backends.local import LocalCluster
from allocator.backends.sandbox import SandboxConfig
from allocator.broker.server import BrokerOptions, BrokerService
from allocator.engine_config import EngineConfig

AGENTS = [AgentInfo("a1", "127.0.0.1", {"cpus": 4, "mem": 4096})]
HAS_BWRAP = shutil.which("bwrap") is not None
MIB = 1024 * 1024

# Says it registered, then holds `$FB_ALLOC_MIB` MiB (touched, so resident) in steps of 32 MiB,
# then writes `held` and lives on. The amount comes from the tenant's allowed environment.
GREEDY = r"""#!/bin/bash
echo 'Successfully registered with driver' >&2
exec python3 -c '
import os, sys, time
chunks = []
for _ in range(int(os.environ["SPARK_USER"]) // 32):
    chunks.append(bytearray(32 << 20))
open("held", "w").write(str(len(chunks) * 32))
time.sleep(300)
'
"""


def _probe() -> str | None:
    """None when this process may create cgroups, else why not (the skip reason)."""
    found = cgroups.discover(Path(tempfile.gettempdir()) / "fairbroker-probe")
    if isinstance(found, str):
        return found
    found.remove()
    return None


WHY_NOT = _probe()
needs_cgroups = pytest.mark.skipif(WHY_NOT is not None, reason=f"no cgroups here: {WHY_NOT}")


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fairbroker-limits-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def spark_home(base: Path, script: str) -> Path:
    home = base / "spark"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "spark-class").write_text(script)
    (home / "bin" / "spark-class").chmod(0o755)
    home.chmod(0o755)
    return home


def register(tenant: str, mem: float, alloc_mib: int) -> object:
    body = request(tenant, {"cpus": 1.0, "mem": mem}, target=1)
    body.launch.environment["SPARK_USER"] = str(alloc_mib)
    return body


@needs_cgroups
@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap (bwrap) is not installed: make system-deps")
def test_an_executor_past_its_memory_is_oom_killed_and_the_broker_lives_on(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A (512 MiB accounted) tries to hold 1536 MiB: the kernel kills it at its limit and
    the broker logs it FAILED, out of memory. B (512 MiB, holds 256) runs on, its cgroup
    holding exactly 512 MiB, 1 CPU (100 ms of CPU per 100 ms) and 4096 tasks."""
    caplog.set_level(logging.INFO)
    home = spark_home(base, GREEDY)
    state = base / "state"
    cluster = LocalCluster(
        AGENTS, state / "agents", home,
        sandbox=SandboxConfig(mode="auto", state_dir=state, cpu_limits=True),
    )  # fmt: skip
    options = BrokerOptions(
        engine=EngineConfig.mesos("drf"), http_port=0, grpc_port=0, state_dir=state,
        lease_seconds=600,
    )  # fmt: skip
    service = BrokerService(options, backend=cluster).start()
    try:
        assert cluster.sandbox.kind == "bwrap" and cluster.limits_in_force, cluster.sandbox
        service.broker.register(register("B", 512, 256))
        b_dir = state / "agents" / "a1" / "B" / "executor-1"
        wait_for(lambda: (b_dir / "held").exists(), 180, "B holding its 256 MiB")
        assert (b_dir / "held").read_text() == "256"
        group = cluster._procs[("B", "1")].cgroup
        assert group is not None and group.version == 1
        assert (group.paths["memory"] / "memory.limit_in_bytes").read_text() == f"{512 * MIB}\n"
        assert int((group.paths["memory"] / "memory.usage_in_bytes").read_text()) > 256 * MIB
        assert (group.paths["cpu"] / "cpu.cfs_quota_us").read_text() == "100000\n"
        assert (group.paths["cpu"] / "cpu.cfs_period_us").read_text() == "100000\n"
        assert (group.paths["cpu"] / "cpu.shares").read_text() == "1024\n"
        assert (group.paths["pids"] / "pids.max").read_text() == "4096\n"
        inside = group.pids()
        assert cluster.pids()[("B", "1")] in inside and len(inside) >= 2  # bwrap + python

        service.broker.register(register("A", 512, 1536))
        failed = "executor A/1 on a1: FAILED"
        wait_for(lambda: failed in caplog.text, 180, "A's executor reported failed")
        line = next(x for x in caplog.text.splitlines() if failed in x)
        assert "out of memory, killed by the kernel at its limit of 512 MiB" in line, line
        a_dir = state / "agents" / "a1" / "A" / "executor-1"
        assert not (a_dir / "held").exists()  # it never got to hold 1536 MiB
        # the broker answers and B lives on, untouched
        allocation = service.broker.allocation()
        assert {t.tenant_id for t in allocation.tenants} == {"A", "B"}
        assert held(service.broker)["B"] == {"RUNNING": 1}
        assert os.path.exists(f"/proc/{cluster.pids()[('B', '1')]}")
        assert not group.paths["memory"].parent.joinpath("A+1").exists()  # removed
    finally:
        service.stop()
    assert not group.paths["memory"].exists(), "B's cgroup left behind"


ESCAPER = r"""#!/bin/bash
setsid sleep 300 </dev/null >/dev/null 2>&1 &
echo $! > daemon
echo 'Successfully registered with driver' >&2
exec sleep 300
"""


@needs_cgroups
@pytest.mark.skipif(os.geteuid() != 0, reason="the user sandbox needs root")
@pytest.mark.parametrize("limits", [True, False], ids=["cgroup", "control-without"])
def test_a_process_that_left_the_executors_group_is_stopped_with_it(
    base: Path, limits: bool
) -> None:
    """Under `user` (no PID namespace) a stand-in starts a daemon in a session of its own,
    out of reach of the process-group kill. Its cgroup catches it: stopping the executor
    kills the daemon too. The control without cgroups shows the daemon surviving."""
    home = spark_home(base, ESCAPER)
    state = base / "state"
    sandbox = SandboxConfig(mode="user", state_dir=state, cgroups=limits)
    cluster = LocalCluster(AGENTS, state / "agents", home, sandbox=sandbox)
    events: list = []

    class Events:
        def status(self, status) -> None:
            events.append(status)

    cluster.start(Events())  # type: ignore[arg-type]
    daemon_pid = None
    try:
        spec = LaunchSpec(
            "A", "1", "a1", {"cpus": 1.0, "mem": 256.0},
            "spark://CoarseGrainedScheduler@127.0.0.1:4002", "app-A", 1, 128,
        )  # fmt: skip
        cluster.launch(spec)
        pidfile = state / "agents" / "a1" / "A" / "executor-1" / "daemon"
        wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 60, "the daemon")
        daemon_pid = int(pidfile.read_text())
        # `$!` is written before the child has run setsid(1): wait for its own session
        wait_for(lambda: _session(daemon_pid) == daemon_pid, 60, "the daemon in its own session")
        cluster.kill("A", "1")
        wait_for(lambda: any(e.state is ExecutorState.KILLED for e in events), 60, "killed")
        if limits:
            wait_for(lambda: not _alive(daemon_pid), 30, "the daemon killed with its cgroup")
        else:
            assert _alive(daemon_pid), "the control: without a cgroup the daemon survives"
    finally:
        cluster.stop()
        if daemon_pid is not None and _alive(daemon_pid):
            os.kill(daemon_pid, 9)


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except ProcessLookupError:
        return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_no_cgroup_memory_controller_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    """A host without a memory controller (here a made-up /proc/self) gets a sentence."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text("22 1 0:21 / /proc rw - proc proc rw\n")
    (proc / "cgroup").write_text("0::/\n")
    assert cgroups.discover(tmp_path, proc) == "no cgroup memory controller mounted"


def test_v2_limits_are_written_as_the_kernel_reads_them() -> None:
    """The values each file gets, by hand: 1.5 CPUs is 150 ms per 100 ms period; swap none."""
    limits = cgroups.Limits(memory_bytes=640 * MIB, cpus=1.5, pids=4096)
    assert cgroups._settings(2, limits, {"unified"}) == [
        ("unified", ("memory.max", str(640 * MIB))),
        ("unified", ("memory.swap.max", "0")),
        ("unified", ("cpu.max", "150000 100000")),
        ("unified", ("cpu.weight", "150")),
        ("unified", ("pids.max", "4096")),
    ]
    assert cgroups._settings(1, limits, {"memory"}) == [
        ("memory", ("memory.limit_in_bytes", str(640 * MIB))),
        ("memory", ("memory.memsw.limit_in_bytes", str(640 * MIB))),
    ]
    tiny = cgroups.Limits(memory_bytes=MIB, cpus=0.001, pids=1)
    assert ("cpu", ("cpu.cfs_quota_us", "1000")) in cgroups._settings(1, tiny, {"memory", "cpu"})
