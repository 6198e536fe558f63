"""Reclaim in the live broker on the embedded cluster (issue 22, docs/reclaim.md): a late
tenant gets its fair share back from one that filled the cluster (real subprocess executors,
the real allocation loop, the HTTP API, `fairbroker status` and /metrics), executors in a
protected group are never taken, a reclaimed executor's exit never rests its tenant, and a
restarted broker keeps the reclaims it recorded."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from support.broker import RecordingBackend, http, request
from support.commands import one_line_error, run_fairbroker
from support.polling import wait_for
from support.standin import held, marked, stand_in_spark

from allocator.backends.base import AgentInfo, ExecutorState
from allocator.backends.local import LocalCluster
from allocator.broker.core import Broker
from allocator.broker.server import BrokerOptions, BrokerService
from allocator.broker.store import Store
from allocator.engine_config import EngineConfig

# The cluster: 4, 8 and 6 cpus, 4 GiB each; 1 cpu / 512 MiB executors fit 4 + 8 + 6.
AGENTS = [
    AgentInfo("a4", "127.0.2.1", {"cpus": 4, "mem": 4096}),
    AgentInfo("a8", "127.0.2.2", {"cpus": 8, "mem": 4096}),
    AgentInfo("a6", "127.0.2.3", {"cpus": 6, "mem": 4096}),
]
SLOTS = 18
DEMAND = {"cpus": 1.0, "mem": 512.0}
TOKEN = "s3cret"


def test_a_late_tenant_gets_its_fair_share_back_on_the_embedded_cluster(tmp_path: Path) -> None:
    """The issue's must-hold: DRF, --reclaim-after 5 --reclaim-grace 5; A (target 100) fills
    all 18 slots with executors that would live 300 s; B (same demand and weight) registers;
    within reclaim-after + grace + a few runs both hold 9 (the fair share of each: 18 equal
    slots between two equal tenants), never more than 18 executor processes at once, no rest
    for A, the leaving executors in A's heartbeat reply, fairShare in `status`, the counters
    on /metrics, and no process left after stop."""
    engine = EngineConfig.mesos("drf", reclaim_after=5, reclaim_grace=5)
    workdir = tmp_path / "agents"
    cluster = LocalCluster(AGENTS, workdir, stand_in_spark(tmp_path))
    options = BrokerOptions(
        engine=engine, http_port=0, grpc_port=0, metrics_port=0, token=TOKEN,
        state_dir=tmp_path / "state", lease_seconds=600,
    )  # fmt: skip
    service = BrokerService(options, backend=cluster).start()
    broker = service.broker
    most = 0
    try:
        broker.register(request("A", DEMAND, target=100))
        wait_for(lambda: held(broker).get("A") == {"RUNNING": SLOTS}, 30, "A on all 18 slots")
        alone = wait_for(lambda: broker.allocation().tenants[0].fair_share, 10, "A's fair share")
        assert alone == SLOTS
        registered = time.monotonic()
        status, reply = http(
            service, "Register",
            json.dumps({"tenantId": "B", "demand": DEMAND, "target": 100, "launch": {
                "driverUrl": "spark://CoarseGrainedScheduler@127.0.0.1:4002",
                "appId": "app-B", "cores": 1, "heapMib": 128}}).encode(),
        )  # fmt: skip
        assert status == 200, reply
        leaving_seen: list[str] = []
        reached = None
        while time.monotonic() < registered + 40:
            most = max(most, len(marked(workdir)), len(cluster.pids()))
            counts = held(broker)
            if not leaving_seen and counts.get("A", {}).get("LEAVING"):
                status, beat = http(service, "Heartbeat", b'{"tenantId": "A"}')
                assert status == 200
                leaving_seen = beat["leaving"]
                with broker._lock:
                    leaving = {
                        e for e, r in broker.tenants["A"].executors.items()
                        if r.state is ExecutorState.LEAVING
                    }  # fmt: skip
                assert set(leaving_seen) <= leaving and leaving_seen
                assert http(service, "Heartbeat", b'{"tenantId": "B"}')[1] == {
                    "ok": True, "leaving": []
                }  # fmt: skip
            if counts.get("A") == {"RUNNING": 9} and counts.get("B") == {"RUNNING": 9}:
                reached = time.monotonic() - registered
                break
            time.sleep(0.1)
        counts = held(broker)
        print(f"after {time.monotonic() - registered:.1f} s: {counts}; at most {most} "
              f"executor processes at once; 9/9 reached after {reached} s")  # fmt: skip
        a = counts.get("A", {}).get("RUNNING", 0)
        b = counts.get("B", {}).get("RUNNING", 0)
        assert a >= 7 and b >= 7, counts
        assert reached is not None and reached < 5 + 5 + 10, counts  # after + grace + runs
        assert most <= SLOTS
        assert len(leaving_seen) == 9  # every reclaim decided in one run (per_run 10)
        standing = broker.tenants["A"].standing
        assert standing.failures == {} and standing.rests == {}  # never a crash, never a rest
        assert broker.tenants["A"].reclaimed == 9 and broker.tenants["B"].reclaimed == 0

        done = run_fairbroker("status", "--broker", service.http_address, "--token", TOKEN,
                              "--json")  # fmt: skip
        assert done.returncode == 0, done.stderr
        shown = {t["tenantId"]: t for t in json.loads(done.stdout)["tenants"]}
        assert {n: (t["running"], t["fairShare"]) for n, t in shown.items()} == {
            "A": (9, 9), "B": (9, 9)
        }  # fmt: skip
        done = run_fairbroker("status", "--broker", service.http_address, "--token", TOKEN)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        header = next(line for line in lines if line.startswith("tenant "))
        assert header.split()[3:5] == ["run", "fair"]
        row = next(line for line in lines if line.startswith("A ")).split()
        assert row[4:7] == ["9", "9", "100"]  # after the two words of the demand
        assert "reclaim after 5 s below the fair share (grace 5 s" in done.stdout

        with urllib.request.urlopen(f"http://{service.metrics_address}/metrics") as answer:
            text = answer.read().decode()
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        fair = "fairbroker_fair_share_executors"
        assert samples[(fair, (("group", "*"), ("tenant", "A")))] == 9
        assert samples[(fair, (("group", "*"), ("tenant", "B")))] == 9
        reclaimed = "fairbroker_reclaimed_executors_total"
        assert samples[(reclaimed, (("tenant", "A"),))] == 9
        assert samples[(reclaimed, (("tenant", "B"),))] == 0
    finally:
        service.stop()
    assert marked(workdir, leaders=False) == set()  # nothing left after stop


def settle(broker: Broker, check, what: str, seconds: float = 10.0):
    """Allocation runs by hand until `check()` holds (the fair share comes from a worker
    thread, a run or two later)."""

    def step():
        broker.allocate_once()
        return check()

    return wait_for(step, seconds, what, every=0.02)


def two_agents(cpus: int = 2) -> list[AgentInfo]:
    return [AgentInfo(f"s{i}", f"127.0.3.{i}", {"cpus": cpus, "mem": 4096}) for i in (1, 2)]


def fast(**changes) -> EngineConfig:
    """Reclaim at once (50 ms of waiting, no minimum runtime), DRF, per-framework level."""
    base = dict(reclaim_after=0.05, reclaim_min_runtime=0, reclaim_grace=60, level="framework")
    return EngineConfig.mesos("drf", **{**base, **changes})


def filled(backend: RecordingBackend, config: EngineConfig, group: str = "") -> Broker:
    """A broker where A (group `group`) runs on all 4 slots of the backend's agents (4 cpus
    in all) and B, of the same demand, has just registered wanting 4."""
    broker = Broker(backend, config, lease_seconds=600)
    broker.start(loop=False)
    broker.register(request("A", DEMAND, target=4, group=group))
    broker.allocate_once()
    assert len(backend.launched) == 4
    for spec in backend.launched:
        backend.report(spec, ExecutorState.RUNNING)
    broker.register(request("B", DEMAND, target=4))
    return broker


def test_a_protected_group_is_never_a_victim() -> None:
    """B waits below its fair share (2 of 4 slots) beside A in group prod: with prod
    protected nothing of A's is ever asked to leave, however many runs pass; without the
    protection, the same cluster reclaims 2 of A's executors for B."""
    backend = RecordingBackend(two_agents())
    broker = filled(backend, fast(protected_groups=("prod",)), group="prod")
    try:
        settle(broker, lambda: broker.reclaimer.fair.latest is not None
               and broker.reclaimer.fair_shares() == {"A": 2, "B": 2},
               "the fair share of A and B")  # fmt: skip
        deadline = time.monotonic() + 1.0  # some 50 runs, each past reclaim_after
        while time.monotonic() < deadline:
            broker.allocate_once()
            time.sleep(0.02)
        assert "B" in broker.reclaimer.waiting_since  # B does wait, and nothing is taken
        assert held(broker) == {"A": {"RUNNING": 4}}
        assert broker.heartbeat("A") == [] and broker.tenants["A"].reclaimed == 0
    finally:
        broker.stop()

    backend = RecordingBackend(two_agents())
    broker = filled(backend, fast(), group="prod")
    try:
        settle(broker, lambda: held(broker)["A"].get("LEAVING") == 2, "2 of A's executors leaving")
        assert sorted(broker.heartbeat("A")) == sorted(
            e for e, r in broker.tenants["A"].executors.items()
            if r.state is ExecutorState.LEAVING
        )  # fmt: skip
    finally:
        broker.stop()


def test_a_reclaimed_executor_exiting_at_once_never_rests_its_tenant() -> None:
    """Two of A's executors are reclaimed and exit seconds after their launch, unregistered
    (what would be a crash loop: two quick failures on one agent rest a tenant there for
    60 s). A keeps no failure and no rest; B is granted the freed room. The control: two
    quick exits of executors that were not reclaimed do rest A there."""
    backend = RecordingBackend([AgentInfo("s1", "127.0.3.1", {"cpus": 4, "mem": 4096})])
    broker = filled(backend, fast())
    try:
        settle(broker, lambda: held(broker)["A"].get("LEAVING") == 2, "2 of A's executors leaving")
        leaving = {e for e, r in broker.tenants["A"].executors.items()
                   if r.state is ExecutorState.LEAVING}  # fmt: skip
        for spec in [s for s in backend.launched if s.executor_id in leaving]:
            backend.report(spec, ExecutorState.FAILED)
        standing = broker.tenants["A"].standing
        assert standing.failures == {} and standing.rests == {}
        assert broker.heartbeat("A") == []
        broker.allocate_once()
        assert held(broker) == {"A": {"RUNNING": 2}, "B": {"LAUNCHING": 2}}
        # control: A's other two executors, not reclaimed, exiting as quickly
        others = [
            s for s in backend.launched if s.tenant_id == "A" and s.executor_id not in leaving
        ]
        assert len(others) == 2
        for spec in others:
            backend.report(spec, ExecutorState.FAILED)
        assert broker.tenants["A"].standing.rests.keys() == {"s1"}
    finally:
        broker.stop()


def test_explain_names_the_hold_after_a_reclaim() -> None:
    """Two of A's 4 executors on s1 are reclaimed for B and exit; A, still wanting 4, is
    kept off s1 (the reclaim's hold: the grace, 60 s, and 10 s more) while B takes the room.
    `Explain` (the call's handler) says `refused` on s1, naming the reclaimed executor, B
    and the seconds left, before B is granted and after; its events list both reclaims."""
    backend = RecordingBackend([AgentInfo("s1", "127.0.3.1", {"cpus": 4, "mem": 4096})])
    broker = filled(backend, fast())
    try:
        settle(broker, lambda: held(broker)["A"].get("LEAVING") == 2, "2 of A's executors leaving")
        leaving = {e for e, r in broker.tenants["A"].executors.items()
                   if r.state is ExecutorState.LEAVING}  # fmt: skip
        reclaimed_at = time.monotonic()
        for spec in [s for s in backend.launched if s.executor_id in leaving]:
            backend.report(spec, ExecutorState.FINISHED)
        for step in ("before B's grants", "after"):
            answer = broker.explain("A")
            assert (answer.held, answer.wants) == (2, 4), step
            assert [(w.agent, w.reason) for w in answer.waiting] == [("s1", "refused")], step
            detail = answer.waiting[0].detail
            kept = re.fullmatch(
                r"kept off while executor (\S+), reclaimed here, makes room for B; "
                r"refuse filter, (\d+\.\d) s left",
                detail,
            )
            assert kept and kept.group(1) in leaving, (step, detail)
            assert 0 < float(kept.group(2)) <= 70 - (time.monotonic() - reclaimed_at) + 0.1
            reclaims = [e for e in answer.events if e.kind == "reclaimed_from"]
            assert {e.executor_id for e in reclaims} == leaving, step
            broker.allocate_once()
            assert held(broker) == {"A": {"RUNNING": 2}, "B": {"LAUNCHING": 2}}
        # B is not held off anything: s1 is full for it now
        assert [w.reason for w in broker.explain("B").waiting] == ["full"]
    finally:
        broker.stop()


def test_the_kill_follows_the_grace_and_a_restart_keeps_the_reclaims(tmp_path: Path) -> None:
    """The reclaim is on disk before anyone is told: a broker stopped during the grace (its
    executors left running) comes back with the same executors LEAVING, the same deadline and
    the same heartbeat reply, and kills them once the deadline has passed, not before."""
    alive: set[tuple[str, str]] = set()
    state = tmp_path / "broker.sqlite"
    grace = 1.5
    backend = RecordingBackend(two_agents(), alive=alive)
    broker = Broker(backend, fast(reclaim_grace=grace), lease_seconds=600, store=Store(state))
    broker.start(loop=False)
    broker.register(request("A", DEMAND, target=4))
    broker.allocate_once()
    broker.register(request("B", DEMAND, target=4))
    settle(broker, lambda: held(broker)["A"].get("LEAVING") == 2, "2 of A's executors leaving")
    leaving = sorted(broker.heartbeat("A"))
    deadlines = {k: v.deadline for k, v in broker.reclaimer.leaving.items()}
    broker.stop(kill_executors=False)
    assert backend.killed == []

    backend = RecordingBackend(two_agents(), alive=alive)
    broker = Broker(backend, fast(reclaim_grace=grace), lease_seconds=600, store=Store(state))
    broker.start(loop=False)
    try:
        rows = {(r.tenant_id, r.executor_id): r for r in broker.store.reclaims()}
        assert {k: r.deadline for k, r in rows.items()} == deadlines
        assert {r.beneficiary for r in rows.values()} == {"B"}
        assert sorted(broker.heartbeat("A")) == leaving
        assert {k: v.deadline for k, v in broker.reclaimer.leaving.items()} == deadlines
        shown = {e.executor_id: e.state for e in broker.allocation().tenants[0].executors}
        assert sorted(e for e, s in shown.items() if s == "LEAVING") == leaving
        while time.time() < min(deadlines.values()) - 0.2:
            broker.allocate_once()
            assert backend.killed == []  # not before the deadline
            time.sleep(0.05)
        settle(broker, lambda: len(backend.killed) == 2, "the kills after the grace")
        assert sorted(backend.killed) == [("A", e) for e in leaving]
        assert time.time() >= max(deadlines.values())
    finally:
        broker.stop()


def test_configure_changes_the_reclaim_knobs_of_a_live_broker(tmp_path: Path) -> None:
    """`fairbroker configure` changes every reclaim knob of a running broker (over HTTP and
    gRPC alike), turns reclaim off and on, replaces and clears the protected groups, and
    refuses a value out of range without changing anything."""
    options = BrokerOptions(
        engine=EngineConfig.mesos("drf", reclaim_after=30), http_port=0, grpc_port=0,
        state_dir=tmp_path, token=TOKEN, persist=False,
    )  # fmt: skip
    with BrokerService(options, backend=RecordingBackend()) as service:
        config = lambda: service.broker.engine.config  # noqa: E731

        def configure(*args: str, port: str = service.http_address):
            return run_fairbroker("configure", "--broker", port, "--token", TOKEN, *args)

        done = configure(
            "--reclaim-after", "12", "--reclaim-grace", "3", "--reclaim-min-runtime", "1",
            "--reclaim-per-run", "4", "--reclaim-per-minute", "7", "--protected-group", "prod",
            "--protected-group", "etl",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert (config().reclaim_after, config().reclaim_grace, config().reclaim_min_runtime,
                config().reclaim_per_run, config().reclaim_per_minute,
                config().protected_groups) == (12, 3, 1, 4, 7, ("etl", "prod"))  # fmt: skip
        assert done.stdout.strip().endswith(
            "; reclaim after 12 s below the fair share (grace 3 s, min runtime 1 s, at most 4 "
            "per run and 7 per minute, protected groups etl, prod)"
        )
        done = configure("--reclaim-after", "0", port=service.grpc_address)
        assert done.returncode == 0, done.stderr
        assert config().reclaim_after == 0 and done.stdout.strip().endswith("; reclaim off")
        assert config().protected_groups == ("etl", "prod")  # a knob not given is kept
        done = configure("--no-protected-groups", "--reclaim-after", "30")
        assert done.returncode == 0, done.stderr
        assert config().protected_groups == () and config().reclaim_after == 30
        before = config()
        for args in (["--reclaim-grace", "-1"], ["--reclaim-after", "nan"]):
            done = configure(*args)
            one_line_error(done, args[0])  # refused before it reaches the broker
        status, reply = http(service, "Configure", b'{"reclaimPerRun": -1}')
        assert status == 400 and "reclaim_per_run" in reply["error"], reply
        status, reply = http(service, "Configure", b'{"protectedGroups": {"groups": ["a b"]}}')
        assert status == 400 and "protected_groups" in reply["error"], reply
        assert config() == before


def test_an_executor_that_ignores_sigterm_is_sigkilled_after_the_grace(
    tmp_path: Path, monkeypatch
) -> None:
    """Real processes that ignore SIGTERM, as a JVM stuck in a shutdown hook would: the one
    reclaimed is killed (SIGTERM, then SIGKILL) once the grace and the embedded cluster's kill
    wait have passed, not before, and only then does the waiting tenant get its room."""
    from allocator.backends import local

    monkeypatch.setattr(local, "KILL_GRACE_SECONDS", 1.0)
    grace = 1.0
    workdir = tmp_path / "agents"
    agent = AgentInfo("s1", "127.0.3.1", {"cpus": 2, "mem": 4096})
    cluster = LocalCluster([agent], workdir, stand_in_spark(tmp_path, ignore_term=True))
    config = fast(reclaim_after=0.2, reclaim_grace=grace, interval=0.1)
    broker = Broker(cluster, config, lease_seconds=600)
    broker.start()
    try:
        broker.register(request("A", DEMAND, target=2))
        wait_for(lambda: held(broker).get("A") == {"RUNNING": 2}, 30, "A on both slots")
        pids = dict(cluster.pids())
        broker.register(request("B", DEMAND, target=2))
        (leaving,) = wait_for(lambda: broker.heartbeat("A"), 30, "one of A's executors leaving")
        asked = time.monotonic()
        pid = pids[("A", leaving)]
        # SIGTERM comes at the end of the grace and is ignored; SIGKILL 1 s later
        while time.monotonic() < asked + grace + local.KILL_GRACE_SECONDS - 0.3:
            assert pid in marked(workdir) and "B" not in held(broker)
            time.sleep(0.05)
        wait_for(lambda: pid not in marked(workdir), 15, "the SIGKILL", every=0.05)
        wait_for(lambda: held(broker).get("B") == {"RUNNING": 1}, 15, "B on the freed slot")
        assert held(broker)["A"] == {"RUNNING": 1}
        assert broker.tenants["A"].standing.rests == {}
    finally:
        broker.stop()
    assert marked(workdir, leaders=False) == set()


def test_the_fair_share_is_shown_with_reclaim_off() -> None:
    """--reclaim-after 0: the fair share is still computed and shown (GetAllocation), so an
    operator sees who is below it before turning reclaim on; nothing is ever reclaimed."""
    backend = RecordingBackend(two_agents())
    broker = filled(backend, fast(reclaim_after=0))
    try:
        settle(broker, lambda: broker.reclaimer.fair_shares() == {"A": 2, "B": 2},
               "the fair share of A and B")  # fmt: skip
        shown = {t.tenant_id: (t.running, t.fair_share) for t in broker.allocation().tenants}
        assert shown == {"A": (4, 2), "B": (0, 2)}
        for _ in range(20):
            broker.allocate_once()
        assert broker.reclaimer.waiting_since == {} and broker.reclaimer.leaving == {}
        assert broker.heartbeat("A") == [] and held(broker) == {"A": {"RUNNING": 4}}
    finally:
        broker.stop()
