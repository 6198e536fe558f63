"""Real Spark drivers and executors through the broker on the embedded local cluster:
placement by policy, oblivious mode, executor and driver faults, broker restart."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from support.broker import engine_from
from support.polling import free_port, wait_for
from support.serving import stop_gracefully
from support.spark import HOSTS_JOB, Driver, executor_processes

from allocator.backends.base import AgentInfo
from allocator.backends.executor import ExecutorEnvPolicy
from allocator.backends.sandbox import SandboxConfig
from allocator.broker.client import BrokerClient
from allocator.broker.server import BrokerOptions, BrokerService

PI_CONF = {
    "spark.executor.cores": "2",
    "spark.executor.memory": "640m",  # + 384 MiB overhead = 1024 MiB
    "spark.executor.instances": "2",
}
WC_CONF = {
    "spark.executor.cores": "1",
    "spark.executor.memory": "1408m",  # + 384 = 1792 MiB
    "spark.executor.instances": "2",
}
# One memory-rich and one CPU-rich server of paper 002 (half memory), on their own addresses.
TWO_AGENTS = [
    AgentInfo("mem-rich", "127.0.2.1", {"cpus": 4, "mem": 7168}),
    AgentInfo("cpu-rich", "127.0.2.2", {"cpus": 8, "mem": 4096}),
]


def service_for(tmp_path: Path, agents=None, **kw) -> BrokerService:
    options = BrokerOptions(
        engine=engine_from(kw, scheduler="rpsdsf", interval=0.5),
        http_port=0,
        grpc_port=0,
        state_dir=tmp_path / "broker",
        **kw,
    )
    if agents is not None:
        options.agents = agents
    return BrokerService(options)


def watch(service: BrokerService, stop: threading.Event, over: list[str], placed: set) -> None:
    """Sample the broker until `stop`: agents over capacity, and (group, executor, agent)."""
    while not stop.wait(0.1):
        allocation = service.broker.allocation()
        for agent in allocation.agents:
            for r, cap in agent.capacity.items():
                if agent.allocated[r] > cap + 1e-9:
                    over.append(f"{agent.name}: {r} {agent.allocated[r]} > {cap}")
        for tenant in allocation.tenants:
            placed.update((tenant.group, e.executor_id, e.agent) for e in tenant.executors)


@pytest.mark.parametrize("scheduler", ["bfdrf", "rpsdsf"])
def test_real_tenants_get_the_placement_the_scheduler_prescribes(
    tmp_path: Path, scheduler: str
) -> None:
    # Joint selection: a tenant alone is served on the server where its criterion is lowest
    # (randomized round-robin would visit both servers in turn).
    with service_for(tmp_path, TWO_AGENTS, scheduler=scheduler, selection=(
        "joint" if scheduler == "rpsdsf" else None
    )) as service:  # fmt: skip
        stop, over, placed = threading.Event(), [], set()
        sampler = threading.Thread(target=watch, args=(service, stop, over, placed))
        sampler.start()
        try:
            job = [str(HOSTS_JOB), "3", "9", "0.3"]
            conf = {"spark.executor.instances": "3"}
            pi = Driver(service.http_address, job, workdir=tmp_path, name="pi", group="pi",
                        conf={**PI_CONF, **conf})  # fmt: skip
            wc = Driver(service.http_address, job, workdir=tmp_path, name="wc", group="wc",
                        conf={**WC_CONF, **conf})  # fmt: skip
            (pi_code, pi_result), (wc_code, wc_result) = pi.wait(), wc.wait()
        finally:
            stop.set()
            sampler.join()
        assert pi_code == 0, pi.output()
        assert wc_code == 0, wc.output()
        assert pi_result["sum"] == wc_result["sum"] == sum(range(9))
        assert over == []
    assert executor_processes(str(tmp_path)) == []
    # The memory-heavy WordCount-shaped tenant belongs on the memory-rich server, the
    # CPU-heavy Pi-shaped one on the CPU-rich server: each packs exactly there.
    home = {"wc": "mem-rich", "pi": "cpu-rich"}
    away = {g: sum(1 for group, _, a in placed if group == g and a != home[g]) for g in home}
    if scheduler == "bfdrf":
        # best fit is exact there (H = 0), whatever the arrival order
        assert away == {"wc": 0, "pi": 0}, placed
        assert wc_result["task_hosts"] == ["127.0.2.1"]
        assert pi_result["task_hosts"] == ["127.0.2.2"]
    else:
        # rPS-DSF: every share is 0 before a tenant's first executor, so that one may land
        # anywhere (a random tie); every later one goes home (x_n / gamma_{n,i} is lowest).
        assert away["wc"] <= 1 and away["pi"] <= 1, placed
    assert len({e for g, e, _ in placed if g == "wc"}) == 3


def test_oblivious_tenant_runs_end_to_end(tmp_path: Path) -> None:
    with service_for(tmp_path, TWO_AGENTS, scheduler="drf", mode="oblivious") as service:
        driver = Driver(
            service.http_address, [str(HOSTS_JOB), "2", "6", "0.2"], workdir=tmp_path,
            name="obl", conf=PI_CONF, oblivious=True,
        )  # fmt: skip
        wait_for(lambda: service.broker.tenants, 60, "the tenant to register")
        (tenant,) = service.broker.allocation().tenants
        assert not tenant.declared
        # Spark's scratch lands in the executor's own directory (SPARK_LOCAL_DIRS), not in
        # the spark.local.dir the test's spark-defaults.conf gives the driver.
        scratch: list[Path] = []
        while not scratch and driver.process.poll() is None:
            time.sleep(0.2)  # bounded by the driver's own timeout
            scratch = list(tmp_path.glob("broker/**/executor-*/blockmgr-*"))
        assert scratch, driver.output()
        code, result = driver.wait()
        assert code == 0, driver.output()
        assert result["sum"] == sum(range(6))
    assert executor_processes(str(tmp_path)) == []


def _running_executors(service: BrokerService) -> dict[str, str]:
    out = {}
    for tenant in service.broker.allocation().tenants:
        for e in tenant.executors:
            if e.state == "RUNNING":
                out[e.executor_id] = e.agent
    return out


def _seen(service: BrokerService, driver: Driver) -> Callable[[], str]:
    """What a timed-out wait saw: every executor's state, and the driver's last output."""

    def describe() -> str:
        states = {
            t.tenant_id: {e.executor_id: (e.agent, e.state) for e in t.executors}
            for t in service.broker.allocation().tenants
        }
        return f"executors: {states}\ndriver output:\n{driver.output()}"

    return describe


# The waits allow 240 s: a driver and two executor JVMs start in seconds alone, but make
# test runs two workers on two cores beside other Spark tests, and a CI run once took
# more than 120 s to get both executors registered.
def test_killed_executor_is_reported_freed_and_replaced(tmp_path: Path) -> None:
    with service_for(tmp_path, TWO_AGENTS, scheduler="drf") as service:
        driver = Driver(
            service.http_address, [str(HOSTS_JOB), "2", "40", "0.5"], workdir=tmp_path,
            name="kill", conf=PI_CONF,
        )  # fmt: skip
        running = wait_for(
            lambda: len(_running_executors(service)) == 2 and _running_executors(service),
            240, "two registered executors", context=_seen(service, driver),
        )  # fmt: skip
        backend = service.broker.backend
        (tenant_id,) = service.broker.tenants
        victim = min(running)
        os.killpg(backend.pids()[(tenant_id, victim)], signal.SIGKILL)
        wait_for(lambda: victim not in service.broker.tenants[tenant_id].executors, 60,
                 "the broker to see the executor die")  # fmt: skip
        # a replacement with a fresh id, since the tenant still wants two (which id depends
        # on how many launches failed on a loaded machine: any id not seen before)
        wait_for(lambda: set(_running_executors(service)) - set(running), 240,
                 "a replacement executor", context=_seen(service, driver))  # fmt: skip
        code, result = driver.wait()
        assert code == 0, driver.output()
        assert result["sum"] == sum(range(40))
    assert executor_processes(str(tmp_path)) == []


def test_dead_driver_loses_its_executors_when_its_lease_runs_out(tmp_path: Path) -> None:
    with service_for(tmp_path, TWO_AGENTS, scheduler="drf", lease_seconds=4) as service:
        driver = Driver(
            service.http_address, [str(HOSTS_JOB), "2", "200", "1"], workdir=tmp_path,
            name="dead", conf=PI_CONF,
        )  # fmt: skip
        wait_for(lambda: len(_running_executors(service)) == 2, 240, "two executors",
                 context=_seen(service, driver))  # fmt: skip
        driver.kill()  # SIGKILL: no unregister, no more heartbeats
        wait_for(lambda: not service.broker.tenants, 30, "the tenant's lease to expire")
        wait_for(lambda: not executor_processes(str(tmp_path)), 60, "executors to be gone")
        assert all(a.allocated["cpus"] == 0 for a in service.broker.allocation().agents)


def _serve(port: int, grpc_port: int, state: Path, log: Path) -> subprocess.Popen:
    fairbroker = Path(sys.executable).with_name("fairbroker")
    with open(log, "ab") as out:
        return subprocess.Popen(
            # no sandbox: pytest's tmp (the state dir) and this machine's Python (under
            # root's home) are closed to the sandbox user; the sandbox has its own tests
            [str(fairbroker), "serve", "--scheduler", "drf", "--port", str(port),
             "--grpc-port", str(grpc_port), "--metrics-port", "0", "--state-dir", str(state),
             "--sandbox", "none"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def test_broker_restart_mid_job_loses_nothing_and_leaks_nothing(tmp_path: Path) -> None:
    port, grpc_port = free_port(), free_port()
    state, log = tmp_path / "state", tmp_path / "broker.log"
    broker = _serve(port, grpc_port, state, log)
    driver = None
    try:
        client = BrokerClient(f"127.0.0.1:{grpc_port}")

        def running() -> list[str]:
            try:
                allocation = client.allocation()
            except Exception:
                return []
            return [e.executor_id for t in allocation.tenants for e in t.executors
                    if e.state == "RUNNING"]  # fmt: skip

        wait_for(lambda: (tmp_path / "state" / "broker.sqlite").exists(), 30, "the broker")
        driver = Driver(
            f"127.0.0.1:{port}", [str(HOSTS_JOB), "2", "40", "0.5"], workdir=tmp_path,
            name="restart", conf=PI_CONF,
        )  # fmt: skip
        ids = wait_for(lambda: len(running()) == 2 and sorted(running()), 240, "two executors")

        def two_jvms() -> list[int] | None:
            pids = sorted(executor_processes(str(state), jvms_only=True))
            return pids if len(pids) == 2 else None

        # the broker reports an executor running once spawned; its JVM may still be starting
        before = wait_for(two_jvms, 60, "two executor JVMs")
        broker.send_signal(signal.SIGKILL)  # a crash, mid-job
        broker.wait(timeout=10)
        broker = _serve(port, grpc_port, state, log)
        # re-adopted, counted once: the same two executors, no new launches
        assert wait_for(lambda: sorted(running()), 60, "re-adopted executors") == ids
        assert sorted(executor_processes(str(state), jvms_only=True)) == before
        assert sorted(executor_processes(str(state))) == before  # no launcher left either
        code, result = driver.wait()
        assert code == 0, driver.output()
        assert result["sum"] == sum(range(40))
        wait_for(lambda: not client.allocation().tenants, 30, "the tenant to unregister")
        wait_for(lambda: not executor_processes(str(state)), 30, "executors to exit")
        client.close()
    finally:
        if driver is not None:
            driver.kill()
        stop_gracefully(broker)
    assert executor_processes(str(state)) == []
    assert "re-adopted executor" in log.read_text()


@pytest.fixture(autouse=True)
def _no_leftover_executors(tmp_path: Path):
    yield
    for pid in executor_processes(str(tmp_path)):  # a failed test must not leak JVMs
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_session_built_in_python_runs_through_the_broker(tmp_path: Path) -> None:
    session_job = HOSTS_JOB.with_name("session_job.py")
    with service_for(tmp_path, TWO_AGENTS, scheduler="drf") as service:
        stop, over, placed = threading.Event(), [], set()
        sampler = threading.Thread(target=watch, args=(service, stop, over, placed))
        sampler.start()
        try:
            done = subprocess.run(
                [sys.executable, str(session_job), service.http_address],
                capture_output=True, text=True, timeout=240, cwd=tmp_path,
            )  # fmt: skip
        finally:
            stop.set()
            sampler.join()
        assert done.returncode == 0, done.stderr[-3000:]
        assert 'RESULT {"sum": 4950}' in done.stdout
        assert {(g, e) for g, e, _ in placed} == {("python", "1")}
    assert executor_processes(str(tmp_path)) == []


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_real_job_runs_in_the_executor_sandbox() -> None:
    """Issue 25: with the sandbox serve uses by default (auto: bubblewrap here, as nobody when
    the tests run as root) a real Pi job's executors start, register with their driver over
    loopback, run Python tasks and finish; each executor is bubblewrap's, its JVM runs as the
    sandbox user, and none is left after the broker stops; where cgroups can be made, each
    executor (2 cores) weighs 2048 CPU shares with no quota, serve's default. (The state
    directory is outside pytest's private tmp, which the sandbox user could not pass
    through.)"""
    # not under /tmp, which is private inside the sandbox (the interpreter lives under base)
    base = Path(tempfile.mkdtemp(prefix="fairbroker-sandbox-spark-", dir="/var/tmp"))
    base.chmod(0o755)
    uid = pwd.getpwnam("nobody").pw_uid if os.geteuid() == 0 else os.geteuid()
    python = _python_for(uid, base)
    try:
        options = BrokerOptions(
            engine=engine_from({}, scheduler="drf", interval=0.5), http_port=0, grpc_port=0,
            state_dir=base / "broker", agents=TWO_AGENTS, sandbox=SandboxConfig(mode="auto"),
        )  # fmt: skip
        options.limits = replace(
            options.limits, executor_env=ExecutorEnvPolicy.of_operator([], [python])
        )
        with BrokerService(options) as service:
            assert service.broker.backend.sandbox.kind == "bwrap"
            driver = Driver(
                service.http_address, [str(HOSTS_JOB), "2", "8", "0.2"], workdir=base,
                name="sandboxed", conf={
                    **PI_CONF, "spark.pyspark.python": python,
                    "spark.pyspark.driver.python": sys.executable,
                },
            )  # fmt: skip
            jvms = executor_processes(str(base), jvms_only=True)
            while not jvms and driver.process.poll() is None:
                time.sleep(0.2)  # bounded by the driver's own timeout
                jvms = executor_processes(str(base), jvms_only=True)
            assert jvms, _executor_logs(base / "broker")
            backend = service.broker.backend
            if backend.limits_in_force:  # serve's default sandbox_cpu: shares by cores
                groups = [p.cgroup for p in backend._procs.values() if p.cgroup is not None]
                assert groups
                for group in groups:
                    assert (group.paths["cpu"] / "cpu.shares").read_text() == "2048\n"
                    assert (group.paths["cpu"] / "cpu.cfs_quota_us").read_text() == "-1\n"
            owners = {Path(f"/proc/{pid}").stat().st_uid for pid in jvms}
            leaders = service.broker.backend.pids().values()
            firsts = {Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0] for p in leaders}
            code, result = driver.wait()
            assert code == 0, driver.output() + _executor_logs(base / "broker")
            assert result["sum"] == sum(range(8))
            assert owners == {uid}
            assert {Path(f.decode()).name for f in firsts} == {"bwrap"}
        assert executor_processes(str(base)) == []
    finally:
        for pid in executor_processes(str(base)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)


def _executor_logs(state: Path) -> str:
    """The end of every executor's stderr under `state`, for a failure's message."""
    return "".join(
        f"\n--- {path}\n{path.read_text(errors='replace')[-2000:]}"
        for path in sorted(state.rglob("executor-*/stderr"))
    )


def _python_for(uid: int, base: Path) -> str:
    """An interpreter the sandbox user may run with this checkout's pyspark: this one when
    it can reach it, else (this machine's Python lives in root's 0700 home) a venv of the
    system Python under `base` whose .pth file points at this venv's site-packages (same
    Python minor version)."""
    check = [sys.executable, "-c", "import pyspark"]
    with contextlib.suppress(PermissionError):
        if subprocess.run(check, user=uid, capture_output=True, check=False).returncode == 0:
            return sys.executable
    venv = base / "python"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = Path(sysconfig.get_paths()["purelib"])
    (venv / "lib" / minor / "site-packages" / "checkout.pth").write_text(f"{site}\n")
    return str(venv / "bin" / "python")


def test_a_driver_without_the_ca_stops_saying_the_broker_serves_tls(tmp_path: Path) -> None:
    """Issue 25: a real driver given no CA (no spark.fairbroker.caFile, no FAIRBROKER_CA_FILE)
    speaks plain HTTP to a TLS-only broker and gets no answer; its plugin sees the broker
    answer a TLS handshake and stops the driver at start with one line saying what to set,
    instead of retrying as for an unreachable broker. No tenant registers."""
    from support.pki import make_ca, make_server_cert

    _, ca_key, ca_name = make_ca(tmp_path, "test-ca")
    options = BrokerOptions(
        engine=engine_from({}, scheduler="drf", interval=0.5), http_port=0, grpc_port=0,
        state_dir=tmp_path / "broker", agents=TWO_AGENTS,
        tls=make_server_cert(tmp_path, ca_key, ca_name),
    )  # fmt: skip
    with BrokerService(options) as service:
        driver = Driver(
            service.http_address, [str(HOSTS_JOB), "1", "2", "0"], workdir=tmp_path,
            name="no-ca", conf=PI_CONF,
        )  # fmt: skip
        assert "FAIRBROKER_CA_FILE" not in driver.process.args and driver.process.poll() is None
        code, _ = driver.wait(timeout=180)
        output = driver.log.read_text(errors="replace")
        assert code != 0, output[-3000:]
        expected = (
            f"fairbroker: the broker at {service.http_address} serves TLS: set "
            "spark.fairbroker.caFile (or FAIRBROKER_CA_FILE) to the CA certificate that issued "
            "its certificate"
        )
        assert expected in output, output[-5000:]
        assert "retrying registration" not in output
        assert not service.broker.allocation().tenants
    assert executor_processes(str(tmp_path)) == []


def test_batch_hands_the_ca_to_its_drivers_against_a_tls_broker(tmp_path: Path) -> None:
    """Issue 25: `fairbroker batch --broker ADDRESS --ca-file CA` against a TLS-only broker:
    one small Pi job, whose driver's plugin trusts the CA from its environment (the batch
    process hands FAIRBROKER_CA_FILE to the drivers it starts), registers over HTTPS, gets
    its executor and finishes with a checked answer."""
    import json

    from support.pki import make_ca, make_server_cert

    ca, ca_key, ca_name = make_ca(tmp_path, "test-ca")
    options = BrokerOptions(
        engine=engine_from({}, scheduler="drf", interval=0.5), http_port=0, grpc_port=0,
        state_dir=tmp_path / "broker", agents=TWO_AGENTS,
        tls=make_server_cert(tmp_path, ca_key, ca_name),
    )  # fmt: skip
    scenario = tmp_path / "one-pi.yaml"
    scenario.write_text(
        "name: one-pi\n"
        "agents:\n  - {name: a1, resources: {cpus: 4, mem: 7168}}\n"
        "groups:\n"
        "  - name: pi\n    queues: 1\n    jobs_per_queue: 1\n    executors: 1\n"
        "    spark: {spark.executor.cores: 1, spark.executor.memory: 640m}\n"
        "    app: {kind: pi, partitions: 2, samples: 2000}\n    job: {work: 2}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRBROKER_")}
    with BrokerService(options) as service:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "fairbroker"), "batch", str(scenario),
             "--broker", service.http_address, "--ca-file", str(ca),
             "--out", str(tmp_path / "out"), "--quiet", "--job-timeout", "240"],
            capture_output=True, text=True, timeout=400, env=env, cwd=tmp_path,
        )  # fmt: skip
        logs = "".join(p.read_text() for p in (tmp_path / "out" / "jobs").glob("*.log"))
        assert done.returncode == 0, done.stderr[-3000:] + logs[-3000:]
        result = json.loads((tmp_path / "out" / "result.json").read_text())
        assert result["failures"] == 0 and result["jobs"] == 1, result
        assert result["job_list"][0]["ok"], result["job_list"][0]
        registering = "fairbroker: registering tenant "
        line = next(x for x in logs.splitlines() if registering in x)
        assert f"with https://{service.http_address}" in line, line  # the plugin spoke TLS
    assert executor_processes(str(tmp_path)) == []


def test_the_spark_plugin_reaches_a_tls_broker_trusting_its_ca(tmp_path: Path) -> None:
    """Issue 25: the broker serves its tenant API over TLS only (a CA and a 127.0.0.1
    certificate made here); a real Pi job whose driver has spark.fairbroker.caFile set
    registers over HTTPS, gets its executors and finishes. A driver that trusts another CA
    started beside it never registers: its TLS handshake fails (the plugin logs the broker
    unreachable and retries, as for any connection error) and the broker sees one tenant."""
    from support.pki import make_ca, make_server_cert

    ca, ca_key, ca_name = make_ca(tmp_path, "test-ca")
    other, _, _ = make_ca(tmp_path, "other-ca")
    tls = make_server_cert(tmp_path, ca_key, ca_name)
    options = BrokerOptions(
        engine=engine_from({}, scheduler="drf", interval=0.5), http_port=0, grpc_port=0,
        state_dir=tmp_path / "broker", agents=TWO_AGENTS, tls=tls,
    )  # fmt: skip
    with BrokerService(options) as service:
        stranger = Driver(
            service.http_address, [str(HOSTS_JOB), "1", "2", "0.1"], workdir=tmp_path,
            name="other-ca", conf={**PI_CONF, "spark.fairbroker.caFile": str(other)},
        )  # fmt: skip
        driver = Driver(
            service.http_address, [str(HOSTS_JOB), "2", "8", "0.2"], workdir=tmp_path,
            name="tls", conf={**PI_CONF, "spark.fairbroker.caFile": str(ca)},
        )  # fmt: skip
        code, result = driver.wait()
        assert code == 0, driver.output()[-5000:]
        assert result["sum"] == sum(range(8))
        try:
            wait_for(lambda: "SSLHandshakeException" in stranger.output(), 120, "handshake")
            assert "unreachable" in stranger.output() and stranger.process.poll() is None
            assert len(service.broker.allocation().tenants) <= 1  # only the trusting one
        finally:
            stranger.kill()
    assert executor_processes(str(tmp_path)) == []
