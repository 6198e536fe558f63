"""Resource limits of the executor sandbox (issue 25): each executor in a cgroup holding it to
its accounted memory, CPUs and a process count. A hostile stand-in executor allocates past
its memory and is OOM-killed while the broker and a modest tenant live on; the broker
reports the executor failed and why. Real subprocesses, real bubblewrap and the kernel's own
cgroups (v1 on this machine: memory, cpu and pids hierarchies), skipped where the broker
cannot create cgroups."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from support.broker import request
from support.polling import wait_for
from support.sandbox import ONE_AGENT, needs_bwrap, sandboxed_broker, spark_home
from support.standin import held

from allocator.backends import cgroups
from allocator.backends.base import AgentInfo, ExecutorState, LaunchSpec
from allocator.backends.local import LocalCluster
from allocator.backends.sandbox import SandboxConfig

AGENTS = ONE_AGENT
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
def base(sandbox_base: Path) -> Path:
    return sandbox_base


def register(tenant: str, mem: float, alloc_mib: int) -> object:
    body = request(tenant, {"cpus": 1.0, "mem": mem}, target=1)
    body.launch.environment["SPARK_USER"] = str(alloc_mib)
    return body


@needs_cgroups
@needs_bwrap
def test_an_executor_past_its_memory_is_oom_killed_and_the_broker_lives_on(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A (512 MiB accounted) tries to hold 1536 MiB: the kernel kills it at its limit and
    the broker logs it FAILED, out of memory. B (512 MiB, holds 256) runs on, its cgroup
    holding exactly 512 MiB, 1 CPU (100 ms of CPU per 100 ms) and 4096 tasks."""
    caplog.set_level(logging.INFO)
    home = spark_home(base, GREEDY)
    state = base / "state"
    sandbox = SandboxConfig(mode="auto", cpu="quota")
    with sandboxed_broker(home, state, sandbox) as (cluster, service):
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


def test_limits_are_written_as_the_kernel_reads_them() -> None:
    """The values each file gets, by hand: 1.5 CPUs weigh 150 (v2) or 1536 shares (v1); with
    a quota that is 150 ms per 100 ms period, without one none (max, -1); swap none."""
    limits = cgroups.Limits(memory_bytes=640 * MIB, cpus=1.5, pids=4096, quota=True)
    assert cgroups._settings(2, limits, {"unified"}) == [
        ("unified", ("memory.max", str(640 * MIB))),
        ("unified", ("memory.swap.max", "0")),
        ("unified", ("cpu.max", "150000 100000")),
        ("unified", ("cpu.weight", "150")),
        ("unified", ("pids.max", "4096")),
    ]
    shares_only = cgroups.Limits(memory_bytes=640 * MIB, cpus=1.5, pids=4096)
    assert ("unified", ("cpu.max", "max 100000")) in cgroups._settings(2, shares_only, {"unified"})
    assert cgroups._settings(1, shares_only, {"memory", "cpu"})[2:] == [
        ("cpu", ("cpu.cfs_period_us", "100000")),
        ("cpu", ("cpu.cfs_quota_us", "-1")),
        ("cpu", ("cpu.shares", "1536")),
    ]
    assert cgroups._settings(1, limits, {"memory"}) == [
        ("memory", ("memory.limit_in_bytes", str(640 * MIB))),
        ("memory", ("memory.memsw.limit_in_bytes", str(640 * MIB))),
    ]
    tiny = cgroups.Limits(memory_bytes=MIB, cpus=0.001, pids=1, quota=True)
    assert ("cpu", ("cpu.cfs_quota_us", "1000")) in cgroups._settings(1, tiny, {"memory", "cpu"})


# ---- CPU: proportional shares (the default) and the hard quota ------------------------------
# Says it registered, then keeps three processes busy: more than this 2-core host has, so an
# executor always wants more CPU than it gets.
SPIN = r"""#!/bin/bash
echo 'Successfully registered with driver' >&2
for _ in 1 2 3; do ( while :; do :; done ) & done
wait
"""
WIDE = [AgentInfo("a1", "127.0.0.1", {"cpus": 8, "mem": 4096})]


def spinner(tenant: str, cpus: float) -> LaunchSpec:
    return LaunchSpec(
        tenant, "1", "a1", {"cpus": cpus, "mem": 256.0},
        "spark://CoarseGrainedScheduler@127.0.0.1:4002", f"app-{tenant}", max(1, round(cpus)), 64,
    )  # fmt: skip


def host_cpu_ns(pids: list[int]) -> int:
    """CPU time the kernel counted for `pids` (utime + stime of /proc/PID/stat), in ns."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def cpu_stat(group: cgroups.ExecutorCgroup) -> dict[str, int]:
    path = group.paths["cpu"] if group.version == 1 else group.paths["unified"]
    return {k: int(v) for k, v in (x.split() for x in (path / "cpu.stat").read_text().splitlines())}


class _Events:
    def __init__(self) -> None:
        self.seen: list = []

    def status(self, status) -> None:
        self.seen.append(status)


@needs_cgroups
@needs_bwrap
def test_busy_executors_share_the_cpus_in_proportion_to_their_cores(base: Path) -> None:
    """sandbox_cpu shares (the default): A (1 CPU) and B (2 CPUs) each keep 3 processes busy
    on this 2-core host, beside 2 busy processes of the host outside any executor cgroup (each
    in its own session, as an executor without cgroups is: with autogroups a session weighs
    as one process). The
    kernel's own counters (cpuacct.usage of each executor's cgroup, utime+stime of the host's
    processes) over 6 s: B used twice A's CPU time, and the executors together 3/2 of the
    host's two processes, since their parent weighs their 3 declared CPUs (3072 shares)
    against the host's 2 busy processes (1024 each); with the parent at the kernel's default
    1024 (the executors weighing one process, as before) that would be 1/2. Neither was ever
    throttled (no quota). Proportions, not speed: the test holds on a loaded machine."""
    state = base / "state"
    cluster = LocalCluster(
        WIDE, state / "agents", spark_home(base, SPIN),
        sandbox=SandboxConfig(mode="auto", state_dir=state, cpu="shares"),
    )  # fmt: skip
    cluster.start(_Events())  # type: ignore[arg-type]
    host: list = []
    try:
        assert cluster.sandbox.kind == "bwrap" and cluster.limits_in_force
        cluster.launch(spinner("A", 1.0))
        cluster.launch(spinner("B", 2.0))
        a, b = (cluster._procs[(t, "1")].cgroup for t in ("A", "B"))
        assert a is not None and b is not None and a.version == 1
        for group in (a, b):  # bwrap, the stand-in and its three busy processes
            wait_for(lambda g=group: len(g.pids()) >= 5, 30, "the spinners started")
        parent = a.paths["cpu"].parent
        assert (parent / "cpu.shares").read_text() == "3072\n"  # 1024 + 2048
        assert (a.paths["cpu"] / "cpu.shares").read_text() == "1024\n"
        assert (b.paths["cpu"] / "cpu.shares").read_text() == "2048\n"
        assert (b.paths["cpu"] / "cpu.cfs_quota_us").read_text() == "-1\n"
        # each in a session of its own, as an executor without cgroups is: with the kernel's
        # autogroups (sched_autogroup_enabled) a session weighs as one process
        host = [
            subprocess.Popen(["bash", "-c", "while :; do :; done"], start_new_session=True)
            for _ in range(2)
        ]
        time.sleep(2)  # let the scheduler settle
        before = (a.cpu_usage_ns(), b.cpu_usage_ns(), host_cpu_ns([p.pid for p in host]))
        time.sleep(6)
        after = (a.cpu_usage_ns(), b.cpu_usage_ns(), host_cpu_ns([p.pid for p in host]))
        used_a, used_b, used_host = (y - x for x, y in zip(before, after, strict=True))
        print(
            f"CPU-s in 6 s: A {used_a / 1e9:.2f}, B {used_b / 1e9:.2f}, host {used_host / 1e9:.2f}"
        )
        assert used_a > 0 and used_host > 0
        assert 1.6 <= used_b / used_a <= 2.5, (used_a, used_b)
        assert 1.0 <= (used_a + used_b) / used_host <= 2.2, (used_a, used_b, used_host)
        assert cpu_stat(a)["nr_throttled"] == cpu_stat(b)["nr_throttled"] == 0
        cluster.kill("A", "1")
        wait_for(lambda: ("A", "1") not in cluster.pids(), 30, "A stopped")
        assert (parent / "cpu.shares").read_text() == "2048\n"  # B's alone
    finally:
        for process in host:
            process.kill()
            process.wait()
        cluster.stop()


@needs_cgroups
@needs_bwrap
def test_a_quota_caps_an_executor_at_its_cores_even_with_cpus_idle(base: Path) -> None:
    """sandbox_cpu quota: an executor declaring 0.05 CPU keeps 3 processes busy; its cgroup's
    counter shows at most 5 ms of CPU per 100 ms over 5 s (plus two periods' quota: a window
    not aligned to the 100 ms periods touches one more at each end), and the kernel
    throttled it (cpu.stat nr_throttled)."""
    state = base / "state"
    cluster = LocalCluster(
        WIDE, state / "agents", spark_home(base, SPIN),
        sandbox=SandboxConfig(mode="auto", state_dir=state, cpu="quota"),
    )  # fmt: skip
    cluster.start(_Events())  # type: ignore[arg-type]
    try:
        cluster.launch(spinner("C", 0.05))
        group = cluster._procs[("C", "1")].cgroup
        assert group is not None
        assert (group.paths["cpu"] / "cpu.cfs_quota_us").read_text() == "5000\n"
        wait_for(lambda: len(group.pids()) >= 5, 30, "the spinners started")
        start, used0 = time.monotonic(), group.cpu_usage_ns()
        time.sleep(5)
        used = group.cpu_usage_ns() - used0
        elapsed = time.monotonic() - start
        assert used <= 0.05 * elapsed * 1e9 + 10_000_000, (used, elapsed)
        assert cpu_stat(group)["nr_throttled"] > 0
    finally:
        cluster.stop()


# ---- cgroup v2 on this kernel's unified hierarchy ---------------------------------------------
def _unified() -> tuple[Path, str] | None:
    """This process's cgroup2 mount and its cgroup there, if it may create cgroups in it."""
    try:
        _, mount = cgroups._mounts(Path("/proc/self/mountinfo").read_text())
        _, own = cgroups._own(Path("/proc/self/cgroup").read_text())
    except OSError:
        return None
    if mount is None or own is None or not os.access(mount / own.lstrip("/"), os.W_OK):
        return None
    return mount, own


UNIFIED = _unified()


@pytest.mark.skipif(UNIFIED is None, reason="no writable cgroup2 hierarchy here")
def test_the_v2_cgroup_path_on_the_kernels_unified_hierarchy() -> None:
    """The v2 code on the kernel's own cgroup2 hierarchy (on this v1 hybrid host the unified
    mount, whose memory, cpu and pids controllers are bound to the v1 hierarchies: what runs
    here is the v2 core, not its limits). Without a delegated memory controller discovery
    says so; creating an executor's cgroup fails naming the missing memory.max and leaves
    nothing behind; a gated process moved in (cgroup.procs) is listed with the child it
    started in a session of its own, its CPU time read from cpu.stat's usage_usec, and
    kill_all ends both through cgroup.kill; the cgroup is then removed."""
    assert UNIFIED is not None
    mount, own = UNIFIED
    root = mount / own.lstrip("/")
    available = (root / "cgroup.controllers").read_text().split()
    if "memory" not in available:
        found = cgroups._discover_v2(mount, own, "fairbroker-unused", {"memory", "cpu", "pids"})
        assert found == f"cgroup v2: no memory controller delegated to {root}"
    parent = root / f"fairbroker-v2-test-{os.getpid()}"
    parent.mkdir()
    tree = cgroups.CgroupTree(2, {"unified": parent})
    process = None
    try:
        if "memory" not in (parent / "cgroup.controllers").read_text().split():
            with pytest.raises(OSError, match=r"memory\.max missing: no memory controller"):
                tree.create("A+1", cgroups.Limits(memory_bytes=256 * MIB, cpus=1.0, pids=64))
            assert not (parent / "A+1").exists()
        (parent / "A+1").mkdir()
        group = cgroups.ExecutorCgroup(2, {"unified": parent / "A+1"})
        process = subprocess.Popen(
            ["/bin/sh", "-c", "read _ && { setsid sh -c 'while :; do :; done' & sleep 300; }"],
            stdin=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        group.add(process.pid)
        assert process.stdin is not None
        process.stdin.write(b"go\n")
        process.stdin.close()
        wait_for(lambda: len(group.pids()) >= 3, 20, "the shell, sleep and the spinner")
        inside = group.pids()
        assert process.pid in inside
        first = group.cpu_usage_ns()
        assert first is not None
        wait_for(lambda: (group.cpu_usage_ns() or 0) > first + 50_000_000, 30, "50 ms of CPU")
        tree.reweigh()  # no cpu controller here: nothing to weigh, and no error
        group.kill_all()
        wait_for(lambda: not group.pids(), 10, "every process of the cgroup killed")
        assert process.wait(timeout=10) == -9
        wait_for(lambda: not any(_alive(pid) for pid in inside), 10, "none left (zombies aside)")
        group.remove()
        assert not (parent / "A+1").exists()
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        for leaf in (parent / "A+1", parent):
            if leaf.exists():
                for pid in (leaf / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), 9)
                time.sleep(0.1)
                with contextlib.suppress(OSError):
                    leaf.rmdir()


# ---- the operator's switch: fairbroker serve --sandbox-cpu ------------------------------------
SLEEPER = "#!/bin/bash\necho 'Successfully registered with driver' >&2\nexec sleep 300\n"


@needs_cgroups
@needs_bwrap
@pytest.mark.parametrize(
    ("mode", "controllers", "quota"),
    [("off", "memory, pids", None), ("quota", "memory, cpu, cpuacct, pids", "100000\n")],
)
def test_serve_sandbox_cpu_reaches_the_executors_cgroups(
    base: Path, mode: str, controllers: str, quota: str | None
) -> None:
    """`fairbroker serve --sandbox-cpu MODE` (a real serve subprocess): its start line names
    the cgroup controllers in force, and with quota a tenant's executor of 1 CPU registered
    over HTTP gets a quota of 100 ms per 100 ms and 1024 shares; with off, no cpu cgroup."""
    import json
    import signal
    import sys
    import urllib.request

    from support.polling import free_port

    home = spark_home(base, SLEEPER)
    state = base / "state"
    port = free_port()
    log = base / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRBROKER_")}
    (base / "cluster.yaml").write_text(
        "agents:\n  - {name: a1, hostname: 127.0.0.1, resources: {cpus: 4, mem: 4096}}\n"
    )
    serve = subprocess.Popen(
        [str(Path(sys.executable).parent / "fairbroker"), "serve", "--state-dir", str(state),
         "--cluster", str(base / "cluster.yaml"), "--port", str(port), "--grpc-port",
         str(free_port()), "--no-metrics", "--sandbox", "bwrap", "--sandbox-cpu", mode],
        env={**env, "SPARK_HOME": str(home)}, stdout=subprocess.DEVNULL,
        stderr=log.open("wb"), cwd=base,
    )  # fmt: skip
    try:
        wait_for(lambda: "executor limits:" in log.read_text() or serve.poll() is not None, 60,
                 "serve's executor limits line")  # fmt: skip
        assert serve.poll() is None, log.read_text()
        line = next(x for x in log.read_text().splitlines() if "executor limits:" in x)
        assert f"cgroup v1 ({controllers}) under" in line, line
        body = {
            "tenantId": "A", "demand": {"cpus": 1, "mem": 512}, "target": 1,
            "launch": {"driverUrl": "spark://CoarseGrainedScheduler@127.0.0.1:4002",
                       "appId": "app-A", "cores": 1, "heapMib": 128},
        }  # fmt: skip
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/Register", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        wait_for(lambda: _answers(request), 30, "serve's tenant API")
        mounts, _ = cgroups._mounts(Path("/proc/self/mountinfo").read_text())
        own, _ = cgroups._own(Path(f"/proc/{serve.pid}/cgroup").read_text())
        name = cgroups.parent_name(state / "agents")
        memory = mounts["memory"] / own["memory"].lstrip("/") / name / "A+1"
        wait_for(memory.is_dir, 30, "A's executor cgroup")
        cpu = mounts["cpu"] / own["cpu"].lstrip("/") / name / "A+1"
        # The broker makes every controller's directory first, then writes the limits.
        quota_file = cpu / "cpu.cfs_quota_us"
        if quota is not None:
            wait_for(lambda: quota_file.exists() and quota_file.read_text() == quota, 30,
                     "A's cpu quota to be written")  # fmt: skip
        if quota is None:
            assert not cpu.exists()
        else:
            assert quota_file.read_text() == quota
            assert (cpu / "cpu.shares").read_text() == "1024\n"
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()


def _answers(request) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


ULIMITS = r"""#!/bin/bash
echo "core=$(ulimit -c) nofile=$(ulimit -n) nproc=$(ulimit -u)" > limits.tmp
mv limits.tmp limits
echo 'Successfully registered with driver' >&2
exec sleep 300
"""


@needs_bwrap
def test_every_sandboxed_executor_runs_under_prlimit(base: Path) -> None:
    """With or without cgroups, a sandboxed executor runs with no core files, 65536 open
    files and 16384 processes of its user (each lowered to the broker's hard limit if that is
    lower), as its own shell reports them (`ulimit`)."""
    import resource

    def within(which: int, wanted: int) -> int:
        hard = resource.getrlimit(which)[1]
        return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)

    state = base / "state"
    sandbox = SandboxConfig(mode="bwrap", cgroups=False)
    with sandboxed_broker(spark_home(base, ULIMITS), state, sandbox) as (_, service):
        service.broker.register(request("A", {"cpus": 1.0, "mem": 512.0}, target=1))
        report = state / "agents" / "a1" / "A" / "executor-1" / "limits"
        wait_for(report.exists, 60, "the executor's ulimit report")
        nofile = within(resource.RLIMIT_NOFILE, 65536)
        nproc = within(resource.RLIMIT_NPROC, 16384)
        assert report.read_text().split() == ["core=0", f"nofile={nofile}", f"nproc={nproc}"]
