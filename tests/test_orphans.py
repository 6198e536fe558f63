"""No executor is ever orphaned: the launch is recorded before the fork, a restarted broker
adopts or stops every process carrying its marker (crashes injected at exact points, real
processes), capacity returns only when the process has exited, and a crash-looping launch
backs off exponentially on both backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.broker import AGENTS, PI, RecordingBackend, request
from support.mesos import RecordingDriver, offer, tenant
from support.sandbox import needs_bwrap, spark_home
from support.standin import marked

from allocator.backends.base import ExecutorState, LaunchSpec
from allocator.backends.local import MARKER, LocalCluster
from allocator.backends.mesos import MesosBackend, MesosOptions
from allocator.backends.sandbox import SandboxConfig, SandboxMode
from allocator.broker import core, tenants
from allocator.broker.core import Broker
from allocator.broker.faults import FAULT_ENV
from allocator.broker.limits import Limits
from allocator.broker.store import Store
from allocator.engine_config import EngineConfig

CHILD = """
import json, sys
from pathlib import Path
from allocator.backends.base import AgentInfo
from allocator.backends.local import LocalCluster
from allocator.broker.core import Broker
from allocator.broker.proto import pb
from allocator.broker.store import Store
from allocator.engine_config import EngineConfig
from google.protobuf import json_format
state, home = Path(sys.argv[1]), Path(sys.argv[2])
agents, req = json.loads(sys.argv[3]), sys.argv[4]
cluster = LocalCluster([AgentInfo(**a) for a in agents], state / "agents", home)
broker = Broker(cluster, EngineConfig("drf"), store=Store(state / "broker.sqlite"))
broker.start(loop=False)
broker.register(json_format.Parse(req, pb.RegisterRequest()))
broker.allocate_once()
print("no crash")
"""


@pytest.fixture
def fake_spark(tmp_path: Path) -> Path:
    """spark-class as a bash script that stays alive (its command line keeps the executor's
    arguments, as the real JVM's does) until it is stopped."""
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "spark-class"
    script.write_text("#!/bin/bash\nsleep 120\n")
    script.chmod(0o755)
    return home


def marked_pids(workdir: Path) -> dict[str, int]:
    """executor id -> pid of the live process-group leaders carrying this workdir's marker."""
    out = {}
    suffix = f"/{workdir.resolve()}"
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if os.getpgid(pid) != pid:
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        for item in environ.split("\0"):
            if item.startswith(f"{MARKER}=") and item.endswith(suffix):
                out[item.split("=", 1)[1].split("/")[1]] = pid
    return out


def wait_until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def crash_at(fault: str, state: Path, home: Path) -> None:
    from google.protobuf import json_format

    agents = [{"name": a.name, "hostname": a.hostname, "resources": a.resources} for a in AGENTS]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(state), str(home), json.dumps(agents),
         json_format.MessageToJson(request("pi", PI, target=1))],
        env={**os.environ, FAULT_ENV: fault}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == -9, done.stderr  # SIGKILLed at the fault point, for real


def restart(state: Path, home: Path, limits: Limits | None = None) -> Broker:
    cluster = LocalCluster(AGENTS, state / "agents", home)
    broker = Broker(
        cluster, EngineConfig("drf"), store=Store(state / "broker.sqlite"), limits=limits
    )
    broker.start(loop=False)
    return broker


def test_crash_between_fork_and_record_adopts_the_executor(tmp_path, fake_spark) -> None:
    state = tmp_path / "state"
    crash_at("after-launch", state, fake_spark)
    # the fork happened; its pid was never recorded (awaited: on a loaded machine the gated
    # child may still be between its two execs, its environ unreadable for a moment)
    wait_until(lambda: marked_pids(state / "agents"))
    orphan = marked_pids(state / "agents")
    assert list(orphan) == ["1"]
    broker = restart(state, fake_spark)
    try:
        assert set(broker.tenants["pi"].executors) == {"1"}
        assert broker.engine.tasks_of("pi") == 1
        assert broker.allocate_once() == 0  # its capacity is not granted a second time
        assert marked_pids(state / "agents") == orphan
    finally:
        broker.stop()
    wait_until(lambda: not marked_pids(state / "agents"))


def test_crash_between_record_and_fork_relaunches_with_a_fresh_id(tmp_path, fake_spark) -> None:
    state = tmp_path / "state"
    crash_at("before-launch", state, fake_spark)
    assert marked_pids(state / "agents") == {}
    broker = restart(state, fake_spark)
    try:
        assert broker.tenants["pi"].executors == {} and broker.engine.tasks_of("pi") == 0
        assert broker.allocate_once() == 1
        assert list(broker.tenants["pi"].executors) == ["2"]  # id 1 is never reused
        wait_until(lambda: list(marked_pids(state / "agents")) == ["2"])
    finally:
        broker.stop()
    wait_until(lambda: not marked_pids(state / "agents"))


def test_executors_of_a_tenant_that_no_longer_validates_are_stopped(
    tmp_path, fake_spark, caplog
) -> None:
    state = tmp_path / "state"
    crash_at("after-launch", state, fake_spark)
    wait_until(lambda: marked_pids(state / "agents"))  # (as above)
    assert list(marked_pids(state / "agents")) == ["1"]
    stricter = Limits().with_settings(["min_demand.cpus=4"])  # PI asks for 2
    broker = restart(state, fake_spark, stricter)
    try:
        assert broker.tenants == {}
        wait_until(lambda: not marked_pids(state / "agents"))
        assert "stopping executor pi/1: its tenant is gone" in caplog.text
    finally:
        broker.stop()


def test_executors_on_an_agent_that_left_the_cluster_file_are_stopped(
    tmp_path, fake_spark, caplog
) -> None:
    state = tmp_path / "state"
    crash_at("after-launch", state, fake_spark)
    store = Store(state / "broker.sqlite")
    ((spec, _),) = store.executors()
    store.close()
    remaining = [a for a in AGENTS if a.name != spec.agent]
    cluster = LocalCluster(remaining, state / "agents", fake_spark)
    broker = Broker(cluster, EngineConfig("drf"), store=Store(state / "broker.sqlite"))
    broker.start(loop=False)
    try:
        wait_until(lambda: not marked_pids(state / "agents"))
        assert "stopping executor pi/1: its agent is gone" in caplog.text
        assert broker.engine.tasks_of("pi") == 0
    finally:
        broker.stop()


def test_unmarked_record_free_processes_are_killed_at_start(tmp_path, fake_spark) -> None:
    """A marked process the state file does not know at all (the row was lost) is stopped."""
    state = tmp_path / "state"
    crash_at("after-launch", state, fake_spark)
    store = Store(state / "broker.sqlite")
    store._run("DELETE FROM executors")
    store.close()
    broker = restart(state, fake_spark)
    try:
        wait_until(lambda: not marked_pids(state / "agents"))
        assert broker.engine.tasks_of("pi") == 0
    finally:
        broker.stop()


def test_capacity_returns_only_when_the_process_has_exited() -> None:
    backend = RecordingBackend(agents=[AGENTS[1]])  # t2: 8 cpus
    broker = Broker(backend, EngineConfig("drf"))
    broker.start(loop=False)
    broker.register(request("a", PI, target=4))
    assert broker.allocate_once() == 4
    broker.unregister("a")
    broker.register(request("b", PI, target=4))
    assert broker.allocate_once() == 0  # a's processes are still in their grace period
    for spec in list(backend.launched):
        backend.report(spec, ExecutorState.KILLED)
    assert broker.allocate_once() == 4
    broker.stop()


def test_a_backend_reporting_exits_from_inside_kill() -> None:
    """A backend may report KILLED synchronously from kill() (the broker's lock is
    re-entrant): dropping a tenant with several executors then forgets it exactly once."""

    class Synchronous(RecordingBackend):
        def kill(self, tenant_id: str, executor_id: str) -> None:
            super().kill(tenant_id, executor_id)
            spec = next(s for s in self.launched if (s.tenant_id, s.executor_id) ==
                        (tenant_id, executor_id))  # fmt: skip
            self.report(spec, ExecutorState.KILLED)

    broker = Broker(Synchronous(), EngineConfig("drf"))
    broker.start(loop=False)
    broker.register(request("pi", PI, target=3))
    assert broker.allocate_once() == 3
    broker.unregister("pi")
    assert "pi" not in broker.tenants and "pi" not in broker.engine.frameworks
    broker.stop()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_crash_loop_backs_off_exponentially_and_resets_after_a_healthy_run(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(core.time, "monotonic", clock)
    backend = RecordingBackend(agents=[AGENTS[1]])
    broker = Broker(backend, EngineConfig("drf"))
    broker.start(loop=False)
    broker.register(request("pi", PI, target=1))

    def launch_and_fail(after: float = 1.0) -> bool:
        broker.heartbeat("pi")
        if broker.allocate_once() == 0:
            return False
        spec = backend.launched[-1]
        backend.report(spec, ExecutorState.RUNNING)  # Mesos: TASK_RUNNING ...
        clock.now += after
        backend.report(spec, ExecutorState.FAILED)  # ... then TASK_FAILED soon after
        return True

    assert launch_and_fail() and launch_and_fail()  # two quick failures: a 60 s rest
    broker.set_target("pi", 2)  # raising the target (a revive) does not end the rest
    assert broker.allocate_once() == 0
    broker.set_target("pi", 1)
    rests = []
    for _ in range(3):
        waited = 0
        while not launch_and_fail():
            clock.now += 10
            waited += 10
            assert waited < 2000
        rests.append(waited)
    assert rests == [60, 120, 240]
    clock.now += 480
    assert launch_and_fail(after=300)  # it ran for five minutes: the spec works here
    assert launch_and_fail()  # so one quick failure alone does not rest it
    assert launch_and_fail()
    broker.stop()


@pytest.mark.parametrize("ended", ["TASK_FAILED", "TASK_FINISHED", "TASK_KILLED"])
def test_mesos_task_ending_soon_after_running_rests_the_tenant_on_that_agent(tmp_path, ended):
    """Whatever the terminal state, unless the broker asked for it (it never killed these)."""
    driver = RecordingDriver()
    backend = MesosBackend(
        MesosOptions(master="127.0.0.1:5050", state_dir=tmp_path),
        driver_factory=lambda *_: driver,
    )
    broker = Broker(backend, EngineConfig("drf"))
    broker.start(loop=False)
    backend.registered(driver, {"value": "fw-1"}, {})
    broker.register(tenant("pi", 2, 1024, target=1))
    for n in range(1, 4):
        backend.resourceOffers(driver, [offer(f"o{n}", "a1", "h1", 8, 4096)])
        launched = broker.allocate_once()
        if n == 3:
            assert launched == 0  # resting on a1 after two quick failures
            break
        assert launched == 1
        for state in ("TASK_RUNNING", ended):
            backend.statusUpdate(driver, {"task_id": {"value": f"pi.{n}"}, "state": state})
    broker.stop(kill_executors=False)


@pytest.mark.parametrize("script", ["exit 0", "kill -KILL $$"], ids=["exits 0", "SIGKILLs itself"])
def test_local_executors_ending_at_once_rest_the_tenant_instead_of_relaunching(
    tmp_path: Path, script: str
) -> None:
    """The embedded cluster, its real allocation loop (a run every 50 ms) and real processes:
    an executor command that ends at once is relaunched twice per agent, then the tenant
    rests there (60 s), so no launch follows. Before, an exit 0 was relaunched ~2 times a
    second, without end."""
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "spark-class").write_text(f"#!/bin/bash\n{script}\n")
    (home / "bin" / "spark-class").chmod(0o755)
    agents = AGENTS[:2]
    cluster = LocalCluster(agents, tmp_path / "agents", home)
    broker = Broker(cluster, EngineConfig("drf", interval=0.05), lease_seconds=600)
    broker.start()
    try:
        broker.register(request("pi", PI, target=1))
        tenant = broker.tenants["pi"]
        wait_until(lambda: set(tenant.standing.rests) == {a.name for a in agents}, 60)
        launched = tenant.grants
        assert launched == tenants.FAILURES_BEFORE_RESTING * len(agents)
        rested_at = time.monotonic()
        time.sleep(3.0)  # some 60 allocation runs
        assert tenant.grants == launched
        assert all(until > rested_at + 50 for until in tenant.standing.rests.values())
    finally:
        broker.stop()


def _executor_spec() -> LaunchSpec:
    """Executor 1 of tenant t on the first agent, for the embedded cluster's own tests."""
    return LaunchSpec(
        tenant_id="t", executor_id="1", agent=AGENTS[0].name, resources=dict(PI),
        driver_url="spark://CoarseGrainedScheduler@127.0.0.1:4000", app_id="app-t",
        cores=2, heap_mib=640,
    )  # fmt: skip


class _Statuses:
    """BackendEvents that records the executor states a backend reports."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, ExecutorState, float]] = []

    def status(self, status) -> None:
        self.seen.append((status.tenant_id, status.executor_id, status.state, time.monotonic()))

    def agent_added(self, agent) -> None:
        pass

    def agent_removed(self, name: str) -> None:
        pass

    def capacity_changed(self, name: str, capacity: dict[str, float]) -> None:
        pass


def test_the_local_backend_reports_a_kill_only_once_the_process_has_exited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real executor that ignores SIGTERM keeps its capacity through the whole grace
    period: KILLED (what returns the capacity) comes only after the SIGKILL, with the process
    gone."""
    from allocator.backends import local

    grace = 1.0
    monkeypatch.setattr(local, "KILL_GRACE_SECONDS", grace)
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "spark-class"
    script.write_text('#!/bin/bash\ntrap "" TERM\ntouch "$PWD/started"\nexec sleep 60\n')
    script.chmod(0o755)
    cluster = LocalCluster([AGENTS[0]], tmp_path / "agents", home)
    events = _Statuses()
    cluster.start(events)
    try:
        pid = int(cluster.launch(_executor_spec()))
        started = tmp_path / "agents" / AGENTS[0].name / "t" / "executor-1" / "started"
        deadline = time.monotonic() + 10
        while not started.exists():  # SIGTERM is ignored from here on
            assert time.monotonic() < deadline, "the executor never started"
            time.sleep(0.02)
        asked = time.monotonic()
        cluster.kill("t", "1")
        deadline = asked + grace + 15
        while not any(state is ExecutorState.KILLED for *_, state, _ in events.seen):
            assert time.monotonic() < deadline, "KILLED never reported"
            time.sleep(0.02)
        (killed,) = [s for s in events.seen if s[2] is ExecutorState.KILLED]
        assert killed[3] - asked >= grace  # not before the grace period ended with a SIGKILL
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # and the process was gone when it was reported
        assert cluster.pids() == {}
    finally:
        cluster.stop()


@pytest.mark.parametrize("sandbox", ["none", pytest.param("bwrap", marks=needs_bwrap)])
@pytest.mark.parametrize("ending", ["broker stops", "executor exits"])
def test_a_worker_that_outlives_its_executor_is_not_orphaned(
    sandbox_base: Path, monkeypatch: pytest.MonkeyPatch, ending: str, sandbox: SandboxMode
) -> None:
    """The executor's leader dies (of the SIGTERM at stop, or by itself) while a process in
    its group ignores SIGTERM, as a Python worker of a dying JVM may: once the cluster stops
    or reports the exit, nothing carrying the executor's marker runs (without cgroups, which
    would end it anyway)."""
    from allocator.backends import local

    monkeypatch.setattr(local, "KILL_GRACE_SECONDS", 1.0)
    home = spark_home(
        sandbox_base,
        '#!/bin/bash\n(trap "" TERM; touch "$PWD/worker"; exec sleep 120) &\n'
        'while [ ! -e "$PWD/worker" ]; do sleep 0.01; done\n'
        + ("exec sleep 120\n" if ending == "broker stops" else "sleep 0.3\nexit 3\n"),
    )
    workdir = sandbox_base / "agents"
    config = SandboxConfig(mode=sandbox, state_dir=sandbox_base / "state", cgroups=False)
    cluster = LocalCluster([AGENTS[0]], workdir, home, sandbox=config)
    events = _Statuses()
    cluster.start(events)
    try:
        cluster.launch(_executor_spec())
        worker = workdir / AGENTS[0].name / "t" / "executor-1" / "worker"
        wait_until(worker.exists)
        assert len(marked(workdir, leaders=False)) >= 2  # the leader and its worker
        if ending == "executor exits":
            wait_until(lambda: any(s[2] is ExecutorState.FAILED for s in events.seen))
            assert marked(workdir, leaders=False) == set()
    finally:
        cluster.stop()
    assert marked(workdir, leaders=False) == set()
