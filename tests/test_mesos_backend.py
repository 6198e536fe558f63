"""The Mesos backend's bookkeeping with the real broker and a recording scheduler driver:
offers to capacity, ACCEPT/LAUNCH with the exact demand, declines with filters, status
updates, rescinds, agent loss, suppress/revive, and callbacks that never raise."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pytest
from support.mesos import RecordingDriver, launched, offer, tenant

from allocator.backends.mesos import MesosBackend, MesosOptions
from allocator.broker.core import Broker
from allocator.engine_config import EngineConfig

GRACE_5S = {"grace_period": {"nanoseconds": 5_000_000_000}}  # every KILL's default kill_policy


@pytest.fixture
def setup(tmp_path: Path):
    driver = RecordingDriver()
    backend = MesosBackend(
        MesosOptions(master="127.0.0.1:5050", state_dir=tmp_path, spark_home="/opt/spark"),
        driver_factory=lambda scheduler, framework, options: driver,
    )
    broker = Broker(backend, EngineConfig("bfdrf"))
    broker.start(loop=False)
    backend.registered(driver, {"value": "fw-1"}, {})
    yield broker, backend, driver
    broker.stop(kill_executors=False)


def _scrape(broker: Broker) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    from allocator.broker.metrics import AllocationCollector, broker_reading

    registry = CollectorRegistry()
    registry.register(AllocationCollector(lambda: broker_reading(broker)))
    return generate_latest(registry).decode()


def test_offers_become_capacity_and_launches_carry_the_demand_exactly(setup) -> None:
    broker, backend, driver = setup
    assert (Path(backend.options.state_dir) / "mesos-framework-id").read_text() == "fw-1\n"
    backend.resourceOffers(driver, [
        offer("o1", "mem-rich", "10.0.0.1", 4, 7168),
        offer("o2", "cpu-rich", "10.0.0.2", 8, 4096),
    ])  # fmt: skip
    broker.register(tenant("wc", 1, 1792, target=4))
    broker.register(tenant("pi", 2, 1024, target=4))
    assert broker.allocate_once() == 8
    tasks = launched(driver)
    assert len(tasks) == 8
    by_agent: dict[str, list[str]] = {}
    for task in tasks:
        by_agent.setdefault(task["agent_id"]["value"], []).append(task["task_id"]["value"])
        resources = {r["name"]: r["scalar"]["value"] for r in task["resources"]}
        wc = task["task_id"]["value"].startswith("wc.")
        assert resources == ({"cpus": 1, "mem": 1792} if wc else {"cpus": 2, "mem": 1024})
        command = shlex.split(task["command"]["value"])
        assert command[:3] == [
            "exec", "/opt/spark/bin/spark-class",
            "org.apache.spark.executor.CoarseGrainedExecutorBackend",
        ]  # fmt: skip
        host = command[command.index("--hostname") + 1]
        assert host == {"mem-rich": "10.0.0.1", "cpu-rich": "10.0.0.2"}[task["agent_id"]["value"]]
        env = {v["name"]: v["value"] for v in task["command"]["environment"]["variables"]}
        assert env["SPARK_EXECUTOR_MEMORY"] == ("1408m" if wc else "640m")
    # BF-DRF packs each where it fits exactly: 4 WordCount on mem-rich, 4 Pi on cpu-rich
    assert sorted(by_agent["mem-rich"]) == [f"wc.{i}" for i in range(1, 5)]
    assert sorted(by_agent["cpu-rich"]) == [f"pi.{i}" for i in range(1, 5)]
    # one ACCEPT per agent, with the offers of that agent only
    accepts = driver.named("acceptOffers")
    assert sorted(ids[0]["value"] for ids, _, _ in accepts) == ["o1", "o2"]


def test_unused_offers_are_declined_with_a_filter_and_no_demand_suppresses(setup) -> None:
    broker, backend, driver = setup
    broker.register(tenant("pi", 2, 1024, target=1))
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 8, 4096)])
    broker.allocate_once()
    backend.resourceOffers(driver, [offer("o2", "a2", "h2", 8, 4096)])
    broker.allocate_once()  # nothing pending: o2 is declined and offers suppressed
    ((declined_ids, filters),) = driver.named("declineOffer")
    assert declined_ids == [{"value": "o2"}] and filters == {"refuse_seconds": 5.0}
    assert len(driver.named("suppressOffers")) == 1
    broker.set_target("pi", 3)
    broker.allocate_once()
    assert len(driver.named("reviveOffers")) == 1


def test_status_updates_are_acknowledged_and_drive_the_engine(setup) -> None:
    broker, backend, driver = setup
    broker.register(tenant("pi", 2, 1024, target=2))
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 8, 4096)])
    broker.allocate_once()
    running = {"task_id": {"value": "pi.1"}, "state": "TASK_RUNNING", "uuid": "YWJj"}
    backend.statusUpdate(driver, running)
    assert driver.named("acknowledgeStatusUpdate") == [(running,)]
    assert broker.tenants["pi"].executors["1"].state.value == "RUNNING"
    backend.statusUpdate(driver, {"task_id": {"value": "pi.2"}, "state": "TASK_FAILED",
                                  "uuid": "ZGVm", "message": "boom"})  # fmt: skip
    assert broker.engine.tasks_of("pi") == 1
    # the failed executor's resources come back to the agent's capacity
    assert broker.engine.agents["a1"].capacity.tolist() == [2.0, 1024.0]
    backend.resourceOffers(driver, [offer("o3", "a1", "h1", 6, 3072)])
    assert broker.allocate_once() == 1  # the replacement
    assert launched(driver)[-1]["task_id"]["value"] == "pi.3"


def test_rescinded_offers_and_lost_agents(setup) -> None:
    broker, backend, driver = setup
    broker.register(tenant("pi", 2, 1024, target=4))
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 4, 2048)])
    broker.allocate_once()
    backend.resourceOffers(driver, [offer("o2", "a2", "h2", 8, 4096)])
    backend.offerRescinded(driver, {"value": "o2"})
    assert broker.allocate_once() == 0  # the rescinded offer is not used
    assert [ids for ids, *_ in driver.named("acceptOffers")] == [[{"value": "o1"}]]
    assert backend.offer_stats() == {
        "held": 0, "received": 2, "accepted": 1, "declined": 0, "rescinded": 1
    }  # fmt: skip
    scraped = _scrape(broker)
    assert 'fairbroker_mesos_offers_total{outcome="rescinded"} 1.0' in scraped
    assert "fairbroker_mesos_offers_held 0.0" in scraped
    backend.slaveLost(driver, {"value": "a1"})
    assert broker.engine.tasks_of("pi") == 0 and "a1" not in broker.engine.agents
    assert broker.tenants["pi"].executors == {}


def test_kill_and_stop_with_and_without_failover(setup) -> None:
    broker, backend, driver = setup
    broker.register(tenant("pi", 2, 1024, target=1))
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 8, 4096)])
    broker.allocate_once()
    broker.kill("pi", ["1"])
    assert driver.named("killTask") == [({"value": "pi.1"}, {"value": "a1"}, GRACE_5S)]
    backend.stop(kill_executors=False)
    assert driver.named("stop") == [(True,)]  # failover: tasks survive a broker restart


def test_callbacks_never_raise(setup) -> None:
    broker, backend, driver = setup
    backend.resourceOffers(driver, [{"id": {"value": "broken"}}])  # no agent_id
    backend.statusUpdate(driver, {"state": "TASK_RUNNING"})  # no task_id
    backend.offerRescinded(driver, {})
    assert broker.engine.agents == {}


def test_each_role_is_its_own_pool(tmp_path: Path) -> None:
    driver = RecordingDriver()
    backend = MesosBackend(
        MesosOptions(master="m:5050", roles=("pi", "wc"), state_dir=tmp_path),
        driver_factory=lambda *_: driver,
    )
    broker = Broker(backend, EngineConfig("drf"))
    broker.start(loop=False)
    backend.registered(driver, {"value": "fw-2"}, {})
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 4, 4096, role="wc")])
    broker.register(tenant("p", 2, 1024, target=2, group="pi"))
    broker.register(tenant("w", 1, 1024, target=2, group="wc"))
    # constraints keep each tenant in offers of its own role
    assert broker.engine.frameworks["p"].constraints == {"mesos_role": "pi"}
    broker.allocate_once()
    agents = {t["task_id"]["value"]: t["agent_id"]["value"] for t in launched(driver)}
    assert all(task.startswith("w.") for task in agents), agents
    broker.stop(kill_executors=False)


def broker_on_state(state: Path, driver: RecordingDriver) -> Broker:
    """A broker on a Mesos backend driven by `driver`, with its state in `state`: built
    again on the same directory, it is a broker restart."""
    from allocator.broker.store import Store

    backend = MesosBackend(
        MesosOptions(master="m:5050", state_dir=state), driver_factory=lambda *_: driver
    )
    broker = Broker(backend, EngineConfig("drf"), store=Store(state / "s.sqlite"))
    broker.start(loop=False)
    return broker


def test_a_restarted_broker_readopts_mesos_tasks_and_resubscribes(tmp_path: Path) -> None:
    first_driver = RecordingDriver()
    first = broker_on_state(tmp_path, first_driver)
    first.backend.registered(first_driver, {"value": "fw-9"}, {})
    first.register(tenant("pi", 2, 1024, target=2))
    first.backend.resourceOffers(first_driver, [offer("o1", "a1", "h1", 8, 4096)])
    assert first.allocate_once() == 2
    first.stop(kill_executors=False)
    assert first_driver.named("stop") == [(True,)]  # failover: the tasks keep running

    driver = RecordingDriver()
    second = broker_on_state(tmp_path, driver)
    assert second.backend.framework_id == "fw-9"  # re-subscribes as the same framework
    assert second.engine.tasks_of("pi") == 2  # adopted, counted once
    second.backend.registered(driver, {"value": "fw-9"}, {})
    reconciled, implicit = driver.named("reconcileTasks")  # explicit, then all it knows
    assert sorted(t["task_id"]["value"] for t in reconciled[0]) == ["pi.1", "pi.2"]
    assert implicit == ([],)
    # Mesos says one of them died while the broker was away: it is replaced
    second.backend.statusUpdate(driver, {"task_id": {"value": "pi.2"}, "state": "TASK_LOST"})
    second.backend.resourceOffers(driver, [offer("o2", "a1", "h1", 6, 3072)])
    assert second.allocate_once() == 1
    assert launched(driver)[0]["task_id"]["value"] == "pi.3"
    second.stop(kill_executors=False)


def test_a_spark_uri_is_fetched_into_the_sandbox(tmp_path: Path) -> None:
    driver = RecordingDriver()
    uri = "http://repo.example/spark-4.0.1-bin-hadoop3.tgz"
    backend = MesosBackend(
        MesosOptions(master="m:5050", spark_uri=uri, state_dir=tmp_path),
        driver_factory=lambda *_: driver,
    )
    broker = Broker(backend, EngineConfig("drf"))
    broker.start(loop=False)
    backend.registered(driver, {"value": "fw-1"}, {})
    broker.register(tenant("pi", 2, 1024, target=1))
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 8, 4096)])
    broker.allocate_once()
    (task,) = launched(driver)
    assert task["command"]["uris"] == [{"value": uri, "extract": True}]
    assert task["command"]["value"].startswith("cd spark-4*; exec ./bin/spark-class ")
    broker.stop(kill_executors=False)


def test_a_silent_master_is_reconnected(tmp_path: Path) -> None:
    drivers: list[RecordingDriver] = []

    def factory(*_):
        drivers.append(RecordingDriver())
        return drivers[-1]

    backend = MesosBackend(
        MesosOptions(master="m:5050", state_dir=tmp_path, heartbeat_timeout=0.4),
        driver_factory=factory,
    )
    broker = Broker(backend, EngineConfig("drf"))
    broker.start(loop=False)
    deadline = time.monotonic() + 5
    while len(drivers) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(drivers) >= 2  # no heartbeat: the driver was stopped (failover) and restarted
    assert drivers[0].named("stop") == [(True,)]
    backend.stop(kill_executors=False)


def test_heartbeats_keep_the_connection(tmp_path: Path) -> None:
    drivers: list[RecordingDriver] = []
    backend = MesosBackend(
        MesosOptions(master="m:5050", state_dir=tmp_path, heartbeat_timeout=0.6),
        driver_factory=lambda *_: drivers.append(RecordingDriver()) or drivers[-1],
    )
    broker = Broker(backend, EngineConfig("drf"))
    broker.start(loop=False)
    for _ in range(20):
        backend.processHeartBeat(drivers[0])
        time.sleep(0.05)
    assert len(drivers) == 1
    backend.stop(kill_executors=False)


def test_a_capacity_report_delivered_late_never_brings_back_declined_offers(setup) -> None:
    """Defect 3: a report queued on pymesos's thread and delivered after the allocation
    thread declined those offers used to restore the stale capacity (launches into offers
    no longer held). A report now reads the capacity when the broker applies it."""
    broker, backend, driver = setup
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 8, 4096)])
    assert list(broker.engine.agents["a1"].capacity) == [8, 4096]
    with backend._lock:  # pymesos's thread: a report queued, not yet delivered
        backend.offers.report_capacity("a1")
        late = backend.offers.take_reports()
    broker.allocate_once()  # nothing pending: o1 is declined, capacity 0
    assert driver.named("declineOffer")
    for report in late:  # the older report lands last
        report()
    assert list(broker.engine.agents["a1"].capacity) == [0, 0]


def test_calls_wait_for_subscribed_and_suppression_follows_each_subscription(
    tmp_path: Path,
) -> None:
    """Defect 2: pymesos drops calls made before SUBSCRIBED; the backend counted them as
    made, so SUPPRESS was lost at start-up and after each re-subscription (which resets the
    master's suppression). KILLs made while disconnected are re-sent once subscribed."""
    driver = RecordingDriver()
    backend = MesosBackend(
        MesosOptions(master="m:5050", state_dir=tmp_path), driver_factory=lambda *_: driver
    )
    broker = Broker(backend, EngineConfig("drf"))
    broker.start(loop=False)
    broker.allocate_once()  # idle, but not subscribed yet: nothing sent
    assert driver.named("suppressOffers") == []
    backend.registered(driver, {"value": "fw-1"}, {})
    broker.allocate_once()
    broker.allocate_once()
    assert driver.named("suppressOffers") == [()]  # once per subscription
    broker.register(tenant("pi", 2, 1024, target=1))
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 8, 4096)])
    broker.allocate_once()
    backend.disconnected(driver)
    broker.kill("pi", ["1"])  # not subscribed: the KILL waits
    assert driver.named("killTask") == []
    backend.reregistered(driver, {})
    assert driver.named("killTask") == [({"value": "pi.1"}, {"value": "a1"}, GRACE_5S)]
    broker.allocate_once()
    assert len(driver.named("suppressOffers")) == 2  # suppressed again on the new stream
    broker.stop(kill_executors=False)


class FakeStop:
    """The watchdog's stop event, driven by a fake clock: each wait advances it by the
    wait's timeout and records how many RECONCILEs were sent by then."""

    def __init__(self, clock: list[float], until: float, driver: RecordingDriver) -> None:
        self.clock, self.until, self.driver = clock, until, driver
        self.seen: list[tuple[float, int]] = []

    def wait(self, timeout: float) -> bool:
        self.seen.append((self.clock[0], len(self.driver.named("reconcileTasks"))))
        self.clock[0] += timeout
        return self.clock[0] > self.until

    def set(self) -> None:
        pass


def test_reconciliation_repeats_with_doubling_backoff_until_confirmed(setup, monkeypatch) -> None:
    """Defect 5: a RECONCILE the master drops (a restarted master without its agents) used
    to be sent once. Now the watchdog repeats it 2, 4, 8, ... 60 s apart (at most 60 s) until
    the master has reported every task, then stops."""
    import types

    import allocator.backends.mesos.backend as backend_module

    broker, backend, driver = setup
    broker.register(tenant("pi", 2, 1024, target=1))
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 8, 4096)])
    assert broker.allocate_once() == 1
    backend._stop.set()  # the real watchdog stops; its loop is run below on a fake clock
    backend._watchdog.join(5)
    clock = [1000.0]
    monkeypatch.setattr(backend_module, "time", types.SimpleNamespace(
        monotonic=lambda: clock[0], sleep=time.sleep))  # fmt: skip
    backend.options.heartbeat_timeout = 1e9  # (one watchdog round per fake second)
    driver.master = None  # no master agent list to read here
    driver.calls.clear()  # (the first subscription's implicit RECONCILE)
    backend.reregistered(driver, {})  # a new subscription: pi.1 is unconfirmed
    assert driver.named("reconcileTasks")[1:] == [([],)]  # and the implicit one
    driver.calls.clear()
    assert backend.health()["unreconciled_tasks"] == 1

    backend._stop = FakeStop(clock, 1000.0 + 200, driver)
    backend._watch()
    seen = backend._stop.seen
    sent_at = [at - 1000 for (at, n), (_, before) in zip(seen[1:], seen, strict=False)
               if n > before]  # fmt: skip
    assert sent_at == [2, 6, 14, 30, 62, 122, 182]  # gaps 2, 4, 8, 16, 32, 60, 60
    for (body,) in driver.named("reconcileTasks"):
        assert body == [{"task_id": {"value": "pi.1"}, "agent_id": {"value": "a1"}}]

    backend.statusUpdate(driver, {"task_id": {"value": "pi.1"}, "state": "TASK_RUNNING",
                                  "agent_id": {"value": "a1"}, "uuid": "dQ=="})  # fmt: skip
    assert backend.health()["unreconciled_tasks"] == 0
    count = len(driver.named("reconcileTasks"))
    backend._stop = FakeStop(clock, clock[0] + 200, driver)
    backend._watch()
    assert len(driver.named("reconcileTasks")) == count  # confirmed: no more RECONCILE


def test_redirects_back_off_and_reset(monkeypatch) -> None:
    """pymesos followed the master's 307 self-redirect during a ZooKeeper election with no
    pause (610 redirects in 3 s). Now each redirect within 5 s of the last waits twice as
    long (0.2 s up to 5 s); after a quiet 5 s the first one is immediate again."""
    import types

    from pymesos import MesosSchedulerDriver

    import allocator.backends.mesos.driver as driver_module

    clock, sleeps, followed = [1000.0], [], []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(driver_module, "time", types.SimpleNamespace(
        monotonic=lambda: clock[0], sleep=sleep))  # fmt: skip
    monkeypatch.setattr(MesosSchedulerDriver, "change_master",
                        lambda self, master: followed.append(master))  # fmt: skip
    options = MesosOptions(master="127.0.0.1:5050")
    driver = driver_module.pymesos_driver(object(), {"name": "f"}, options)  # type: ignore[arg-type]
    for _ in range(8):
        driver.change_master("127.0.0.1:5050")
    assert sleeps == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]  # the first one at once
    assert followed == ["127.0.0.1:5050"] * 8  # every redirect still followed
    clock[0] += 6.0  # quiet for longer than 5 s
    driver.change_master("127.0.0.1:5051")
    assert sleeps[7:] == [] and followed[-1] == "127.0.0.1:5051"


def test_pymesos_log_lines_reach_only_the_applications_handlers() -> None:
    """pymesos adds its own stderr handler at import, and its records also propagate to the
    root logger: every line twice. Creating the driver removes pymesos's handler."""
    import importlib
    import logging

    import pymesos

    import allocator.backends.mesos as mesos_module

    importlib.reload(pymesos)  # its import-time handler, as in a fresh process
    assert logging.getLogger("pymesos").handlers  # (what made every line appear twice)
    mesos_module.pymesos_driver(object(), {"name": "f"}, MesosOptions(master="m:5050"))  # type: ignore[arg-type]
    chain = [logging.getLogger(n) for n in ("pymesos.process", "pymesos.scheduler", "pymesos")]
    assert [h for lg in chain for h in lg.handlers] == []
    assert all(lg.propagate for lg in chain)  # so the root's handlers print each line once


def test_subscribe_as_sent_by_pymesos_declares_only_our_capabilities() -> None:
    """pymesos's `framework` property adds GPU_RESOURCES on its own (then Mesos offers GPU
    agents to CPU-only executors). The driver's SUBSCRIBE carries exactly the capabilities
    the backend declares."""
    import allocator.backends.mesos as mesos_module

    backend = MesosBackend(MesosOptions(master="m:5050"))
    for gpus, expected in [(False, ["MULTI_ROLE"]), (True, ["MULTI_ROLE", "GPU_RESOURCES"])]:
        backend.options.gpus = gpus
        info = backend.subscription.framework_info()
        driver = mesos_module.pymesos_driver(backend, info, backend.options)
        driver.version = "1.11.0"  # learnt from the master before SUBSCRIBE
        sent = driver.framework  # what pymesos puts in SUBSCRIBE's framework_info
        assert [c["type"] for c in sent["capabilities"]] == expected


def test_adopted_agents_get_their_hostname_from_the_master_before_any_offer(
    tmp_path: Path,
) -> None:
    """After a broker restart the adopted executors' agents were known only by id (empty
    host name) until an offer of each arrived. Once subscribed, the backend reads the
    master's /master/slaves (here the test master's) and names them at once."""
    import requests
    from mesos_master import AgentSpec, MesosMaster
    from support.polling import wait_for

    spec = AgentSpec("a1", {"cpus": 8, "mem": 4096}, hostname="127.0.4.7")
    with MesosMaster([spec], work_dir=tmp_path / "mesos") as master:
        slaves = requests.get(f"http://{master.address}/master/slaves", timeout=10).json()
        ((agent_id, host),) = [(a["id"], a["hostname"]) for a in slaves["slaves"]]
        assert host == "127.0.4.7"
        first_driver = RecordingDriver()
        first = broker_on_state(tmp_path, first_driver)
        first.backend.registered(first_driver, {"value": "fw-9"}, {})
        first.register(tenant("pi", 2, 1024, target=1))
        first.backend.resourceOffers(first_driver, [offer("o1", agent_id, host, 8, 4096)])
        assert first.allocate_once() == 1
        first.stop(kill_executors=False)

        driver = RecordingDriver()
        driver.master = master.address  # the leading master pymesos is connected to
        second = broker_on_state(tmp_path, driver)
        assert second.engine.tasks_of("pi") == 1  # adopted, on an agent known by id only
        hosts = lambda: {a.name: a.hostname for a in second.allocation().agents}  # noqa: E731
        assert hosts().get(agent_id, "") == ""
        second.backend.registered(driver, {"value": "fw-9"}, {})
        wait_for(lambda: hosts().get(agent_id) == host, 10,
                 "the adopted agent's host name from /master/slaves")  # fmt: skip
        assert not driver.named("acceptOffers")  # no offer was needed (none arrived)
        second.stop(kill_executors=False)


# ---- issue 23: the engine's capacity is what the book holds, whatever the order -----------


def book_capacity(backend: MesosBackend, broker: Broker, key: str) -> list[float]:
    held = backend.offers.capacity(key)
    return [held.get(r, 0.0) for r in broker.engine.resources]


def test_a_first_report_applied_after_the_run_declined_its_offer_reads_what_is_left(
    setup,
) -> None:
    """The race of issue 23, made deterministic: one OFFERS event for a1 and a2; the first
    report (a1's agent_added) wakes the allocation run, which runs before a2's agent_added is
    applied: with nobody pending it declines both offers and suppresses, and a2's
    capacity_changed is dropped (the engine does not know a2 yet). a2's agent_added then
    used to land with the offer's total: 8 cpus the broker believed usable, no offer held."""
    broker, backend, driver = setup
    apply = broker.agent_added
    order: list[str] = []

    def delayed(agent) -> None:  # a2's report waits until a run has declined and suppressed
        if agent.name == "a2":
            order.append(f"run ({broker.allocate_once()} launched)")
        apply(agent)
        order.append(f"added {agent.name}")

    broker.agent_added = delayed
    backend.resourceOffers(
        driver, [offer("o1", "a1", "h1", 4, 2048), offer("o2", "a2", "h2", 8, 4096)]
    )
    assert order == ["added a1", "run (0 launched)", "added a2"]
    declined = [i["value"] for ids, _ in driver.named("declineOffer") for i in ids]
    assert sorted(declined) == ["o1", "o2"]
    assert len(driver.named("suppressOffers")) == 1
    assert backend.offer_stats()["held"] == 0
    for key in ("a1", "a2"):  # the engine knows both, with what the book holds: nothing
        assert broker.engine.agents[key].capacity.tolist() == book_capacity(backend, broker, key)
        assert broker.engine.agents[key].capacity.tolist() == [0.0, 0.0]
    # A tenant now is granted nothing (no launch that must fail) and the broker revives.
    broker.register(tenant("pi", 2, 1024, target=2))
    assert broker.allocate_once() == 0
    assert driver.named("acceptOffers") == [] and len(driver.named("reviveOffers")) == 1
    backend.resourceOffers(driver, [offer("o3", "a2", "h2", 8, 4096)])
    assert broker.allocate_once() == 2
    assert broker.tenants["pi"].standing.rests == {}


def test_a_launch_without_an_offer_held_rests_nobody_and_corrects_the_capacity(setup) -> None:
    """Whatever made the engine's capacity stale, a launch the backend has no offer for
    fails on the broker's side (NoRoom): the grant goes back, the tenant does not rest, no
    executor row is left, and the agent's capacity is what the book holds at once."""
    broker, backend, driver = setup
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 4, 2048)])
    broker.allocate_once()  # nobody pending: declined, suppressed; capacity 0
    broker.engine.set_capacity("a1", {"cpus": 4, "mem": 2048})  # stale, as the race left it
    broker.register(tenant("pi", 2, 1024, target=2))
    for _ in range(3):  # (two launch failures in a row used to rest the tenant for 60 s)
        assert broker.allocate_once() == 0
        assert broker.engine.agents["a1"].capacity.tolist() == [0.0, 0.0]
        broker.engine.set_capacity("a1", {"cpus": 4, "mem": 2048})
    pi = broker.tenants["pi"]
    assert pi.standing.rests == {} and pi.standing.failures == {} and pi.executors == {}
    assert broker.engine.tasks_of("pi") == 0 and broker.store.executors() == []
    assert driver.named("acceptOffers") == []
    # Half an offer: the first executor fits, the second does not (no offer left for it).
    broker.engine.set_capacity("a1", {"cpus": 0, "mem": 0})
    backend.resourceOffers(driver, [offer("o2", "a1", "h1", 3, 2048)])
    broker.engine.set_capacity("a1", {"cpus": 4, "mem": 2048})  # stale again: 2 fit
    assert broker.allocate_once() == 1
    (task,) = launched(driver)
    assert task["agent_id"]["value"] == "a1" and len(pi.executors) == 1
    assert broker.engine.agents["a1"].capacity.tolist() == [2.0, 1024.0]  # pi.1's only
    assert pi.standing.rests == {} and broker.engine.tasks_of("pi") == 1


def test_an_offer_rescinded_between_launch_and_accept_is_not_the_tenants_failure(
    setup,
) -> None:
    """The offer goes away after the run launched on it but before its ACCEPT: the task is
    reported never launched (FAILED, `launched=False`): no quick failure is counted, no
    rest, and the agent's capacity follows the book."""
    broker, backend, driver = setup
    broker.register(tenant("pi", 2, 1024, target=1))
    flush = backend.flush
    for n in (1, 2, 3):
        backend.resourceOffers(driver, [offer(f"o{n}", "a1", "h1", 4, 2048)])

        def rescind_then_flush(wants_more: bool = True, n: int = n) -> None:
            backend.offerRescinded(driver, {"value": f"o{n}"})
            flush(wants_more)

        backend.flush = rescind_then_flush
        assert broker.allocate_once() == 1  # launched, then lost before the ACCEPT
        backend.flush = flush
        pi = broker.tenants["pi"]
        assert pi.executors == {} and broker.engine.tasks_of("pi") == 0
        assert pi.standing.failures == {} and pi.standing.rests == {}
        assert broker.engine.agents["a1"].capacity.tolist() == [0.0, 0.0]
    assert driver.named("acceptOffers") == []
    backend.resourceOffers(driver, [offer("o9", "a1", "h1", 4, 2048)])
    assert broker.allocate_once() == 1 and len(launched(driver)) == 1


def test_healthz_is_not_ready_while_tasks_are_unconfirmed_after_a_resubscription(setup):
    """After a (re-)subscription the broker's tasks are unconfirmed until the master reports
    them: /healthz says so (503 with the reason) until reconciliation confirms them, for at
    most UNCONFIRMED_HEALTH_S; after that it is healthy again (the task stays counted)."""
    from allocator.backends.mesos.link import UNCONFIRMED_HEALTH_S

    broker, backend, driver = setup
    broker.register(tenant("pi", 2, 1024, target=2))
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 8, 4096)])
    assert broker.allocate_once() == 2
    for n in (1, 2):
        backend.statusUpdate(driver, {"task_id": {"value": f"pi.{n}"}, "state": "TASK_RUNNING"})
    assert broker.health()["ok"] is True
    clock = [500.0]
    backend.subscription._clock = lambda: clock[0]
    backend.reregistered(driver, {})
    report = broker.health()
    assert report["ok"] is False and report["unreconciled_tasks"] == 2
    assert report["reason"].startswith("2 tasks unconfirmed since re-subscription"), report
    clock[0] += 5
    backend.statusUpdate(driver, {"task_id": {"value": "pi.1"}, "state": "TASK_RUNNING"})
    assert broker.health()["reason"].startswith("1 tasks unconfirmed"), broker.health()
    backend.statusUpdate(driver, {"task_id": {"value": "pi.2"}, "state": "TASK_RUNNING"})
    report = broker.health()
    assert report["ok"] is True and report["unreconciled_tasks"] == 0 and "reason" not in report
    # A task the master never reports: not ready until the bound, then ready, still counted.
    backend.reregistered(driver, {})
    backend.statusUpdate(driver, {"task_id": {"value": "pi.1"}, "state": "TASK_RUNNING"})
    clock[0] += UNCONFIRMED_HEALTH_S - 1
    assert broker.health()["ok"] is False
    clock[0] += 2
    report = broker.health()
    assert report["ok"] is True and report["unreconciled_tasks"] == 1


def test_status_marks_only_agents_whose_offer_is_not_held_with_real_offer_resources(setup):
    """A real master's offer carries disk and ports beside cpus and mem (the shape below is
    a Mesos 1.11.0 agent's, `--resources` unset but cpus and mem); `status` compares only
    the resources the broker accounts: no `*` while the offer is held, `*` once declined."""
    from allocator.cli.live import render_allocation

    broker, backend, driver = setup
    raw = offer("o1", "b7d0c6a0-0c5f-4f4e-9a3c-8d6e0f1a2b3c-S0", "127.0.1.1", 4, 7168)
    raw["resources"].append({"name": "disk", "type": "SCALAR", "scalar": {"value": 39710.0},
                             "role": "*", "allocation_info": {"role": "*"}})  # fmt: skip
    backend.resourceOffers(driver, [raw])
    allocation = broker.allocation()
    (agent,) = allocation.agents
    assert dict(agent.last_offered) == {"cpus": 4.0, "mem": 7168.0, "disk": 39710.0}
    rows = [x for x in render_allocation(allocation).splitlines() if x.startswith("b7d0")]
    assert rows and "*" not in rows[0], render_allocation(allocation)
    broker.allocate_once()  # nobody pending: declined
    text = render_allocation(broker.allocation())
    row = next(x for x in text.splitlines() if x.startswith("b7d0"))
    assert row.count("*") == 2 and "0/4" in row.replace(" ", ""), text
