"""`serve --ha`: the zk:// setting, leader election and the state in a real ZooKeeper
(Debian's `zookeeper` package, on loopback, its own port and data dir), two real
`fairbroker serve` processes on the embedded cluster: one leads, the other stands by and
names it; the leader SIGKILLed, the standby takes over and re-adopts the running executors;
the leader SIGSTOPped past its session, then SIGCONTed, changes nothing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
import requests
from support.polling import free_port, wait_for
from support.promtool import series, tool
from support.real_mesos import (
    SKIP_REASON,
    ZK_SKIP_REASON,
    RealMesos,
    ZooKeeper,
    mesos_home,
    zookeeper_available,
)
from support.serving import stop_gracefully

from allocator.broker.leader import Leadership, Member, leader_of
from allocator.broker.store import StoreError
from allocator.broker.zk_url import ZkUrl, parse_zk_url
from allocator.cli.serve_config import ConfigError, load_serve_config

LEASE = 20.0  # the tenants' lease on the serve processes: the tests' heartbeats keep it
needs_zk = pytest.mark.skipif(not zookeeper_available(), reason=ZK_SKIP_REASON)


# ---- the setting ---------------------------------------------------------------------------


def test_zk_urls_parse_into_hosts_and_a_dedicated_path() -> None:
    url = parse_zk_url("zk://zk1:2181,10.0.0.2:2182/fairbroker/prod/")
    assert url == ZkUrl((("zk1", 2181), ("10.0.0.2", 2182)), "/fairbroker/prod")
    assert url.connect_string == "zk1:2181,10.0.0.2:2182"
    assert str(url) == "zk://zk1:2181,10.0.0.2:2182/fairbroker/prod"
    for bad, says in [
        ("zk1:2181/fb", "expected zk://"),
        ("zk://zk1:2181", "needs a path"),
        ("zk://zk1:2181/", "needs a path"),
        ("zk://zk1/fb", "not HOST:PORT"),
        ("zk://zk1:0/fb", "port out of range"),
        ("zk://zk1:2181/fb/../x", "bad path component"),
        ("zk://zk1:2181/zookeeper", "bad path component"),
    ]:
        with pytest.raises(ValueError, match=says):
            parse_zk_url(bad)


def test_ha_is_a_setting_from_a_flag_the_environment_or_the_file(tmp_path: Path) -> None:
    config, sources = load_serve_config({}, None, {"FAIRBROKER_HA": "zk://h:2181/fb"})
    assert config.ha == "zk://h:2181/fb" and sources["ha"] == "FAIRBROKER_HA"
    file = tmp_path / "serve.yaml"
    file.write_text("ha: zk://a:1,b:2/x\n")
    config, sources = load_serve_config({"ha": "zk://c:3/y"}, file, {})
    assert config.ha == "zk://c:3/y" and sources["ha"] == "--ha"
    assert load_serve_config({}, file, {})[0].ha == "zk://a:1,b:2/x"
    assert load_serve_config({}, None, {})[0].ha is None  # the default: SQLite, no ZooKeeper
    with pytest.raises(ConfigError, match=r"^ha \(from FAIRBROKER_HA\): needs a path"):
        load_serve_config({}, None, {"FAIRBROKER_HA": "zk://h:2181"})
    with pytest.raises(ConfigError, match="state_recover"):
        load_serve_config({"ha": "zk://h:1/x", "state_recover": True}, None, {})


def test_submit_takes_several_broker_addresses() -> None:
    from spark_shim.submit import SubmitError, master_url

    assert master_url("h1:7080, 10.0.0.2:7080") == "sparkbroker://h1:7080,10.0.0.2:7080"
    assert master_url("h1:7080") == "sparkbroker://h1:7080"
    for bad in ("h1:7080,", "h1:7080,h2", "h1:7080,h2:70800"):
        with pytest.raises(SubmitError, match="expected HOST:PORT"):
            master_url(bad)


def test_the_lowest_sequence_leads_whatever_the_listing_order() -> None:
    names = ["member_0000000012", "member_0000000003", "member_0000000010", "junk"]
    assert leader_of(names) == "member_0000000003"
    assert leader_of(["junk"]) is None and leader_of([]) is None


def test_the_no_leader_alert_fires_only_when_no_broker_leads(tmp_path: Path) -> None:
    """Two brokers scraped every 30 s. a leads 0-3 min, then is gone; the fail-over (b not
    yet leading at 3.5 min) does not fire; b leads 4-5.5 min; from 6 min neither leads (a
    ZooKeeper outage fences b): pending at 6.5, firing at 7.5 min. b's Mesos link is down
    while it stands by: not an alert."""
    import yaml

    deploy = Path(__file__).resolve().parents[1] / "deploy"
    a = {"instance": "a:7082"}
    tests = {
        "rule_files": [str(deploy / "alerts.yml")],
        "evaluation_interval": "30s",
        "tests": [{
            "interval": "30s",
            "input_series": [
                series("fairbroker_leader", "1x6 stale", **a),
                series("fairbroker_leader", "0x6 0 1x3 0x12"),
                series("fairbroker_mesos_connected", "1x6 stale", **a),
                series("fairbroker_mesos_connected", "0x7 1x3 0x12"),
            ],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": "FairbrokerNoLeader", "exp_alerts": []},
                {"eval_time": "6m30s", "alertname": "FairbrokerNoLeader", "exp_alerts": []},
                {"eval_time": "7m30s", "alertname": "FairbrokerNoLeader", "exp_alerts": [{
                    "exp_labels": {"job": "fairbroker", "severity": "critical"},
                    "exp_annotations": {"summary": "no fairbroker leads (job fairbroker) for "
                                        "1 min: nothing is allocated"},
                }]},
                {"eval_time": "3m", "alertname": "FairbrokerMesosDisconnected", "exp_alerts": []},
            ],
        }],
    }  # fmt: skip
    path = tmp_path / "tests.yml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([tool("promtool"), "test", "rules", str(path)], capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


# ---- election and the state in a real ZooKeeper, in process ------------------------------


@pytest.fixture
def zk(tmp_path: Path):
    with ZooKeeper(tmp_path / "zk") as running:
        yield running


def _member(name: str, url: ZkUrl, elected: list[str]) -> Leadership:
    ha = Leadership(url, Member(f"{name}:1", f"{name}:2"), lambda: elected.append(name),
                    lambda why: elected.append(f"{name} deposed"), session_timeout=4.0)  # fmt: skip
    ha.start()
    return ha


@needs_zk
def test_one_leads_and_a_deposed_leaders_writes_are_refused_by_zookeeper(zk: ZooKeeper) -> None:
    """a leads and writes; b stands by naming a. a's session ends: b leads and reads a's
    rows. A write built with a's old election node (what a leader paused past its session
    would still hold), over a live session, is refused whole and changes nothing."""
    from kazoo.client import KazooClient

    from allocator.broker.proto import pb
    from allocator.broker.zk_store import ZkStore

    url = parse_zk_url(zk.url("/fb"))
    elected: list[str] = []
    a = _member("a", url, elected)
    wait_for(lambda: a.leading, 60, "a to lead")
    b = _member("b", url, elected)
    try:
        wait_for(lambda: b.leader is not None, 60, "b to see the leader")
        assert not b.leading and b.refusal() == "standby, leader at a:1 (gRPC a:2)"
        assert a.fence() is None and b.fence() == "not the leader"
        store_a = ZkStore(lambda: a.client, url.path, lambda: a.node if a.fence() is None else None)
        store_a.load()
        request = pb.RegisterRequest(tenant_id="t.1/x", demand={"cpus": 1.0}, target=3)
        store_a.save_tenant("t.1/x", request.SerializeToString(), 3, 1)
        store_b = ZkStore(lambda: b.client, url.path, lambda: b.node if b.fence() is None else None)
        with pytest.raises(StoreError, match="not the leader"):
            store_b.load() or store_b.set_target("t.1/x", 9)
        old_node = a.node
        a.stop()  # its election node goes with its session
        wait_for(lambda: b.leading, 60, "b to lead")
        assert elected == ["a", "b"] and b.changes == 1 and b.took_over_at is not None
        store_b.load()
        (tenant,) = store_b.tenants()
        assert (tenant.tenant_id, tenant.target, tenant.request) == ("t.1/x", 3, request)
        store_b.set_target("t.1/x", 5)
        stale = KazooClient(hosts=url.connect_string)
        stale.start(timeout=20)
        try:
            deposed = ZkStore(lambda: stale, url.path, lambda: old_node)
            deposed.load()
            before = _snapshot(stale, url.path)
            with pytest.raises(StoreError, match="write refused"):
                deposed.set_target("t.1/x", 0)
            with pytest.raises(StoreError, match="write refused"):
                deposed.delete_tenant("t.1/x")
            assert _snapshot(stale, url.path) == before
            assert [t.target for t in store_b.tenants()] == [5]
        finally:
            stale.stop()
            stale.close()
    finally:
        a.stop()
        b.stop()


def _snapshot(client, root: str) -> dict[str, tuple[bytes, int]]:
    """Every znode under root/state: its data and the transaction that last changed it."""
    out = {}
    stack = [f"{root}/state"]
    while stack:
        path = stack.pop()
        data, stat = client.get(path)
        out[path] = (data, stat.mzxid)
        stack.extend(f"{path}/{c}" for c in client.get_children(path))
    return out


def _seed_sqlite(state: Path) -> None:
    """A stopped broker's state dir: a tenant with a started executor, one whose start was
    not recorded (LAUNCHING) and one being reclaimed; a forgotten tenant's executor ids;
    the Mesos framework id; a recorded kill of a task the broker does not want."""
    from allocator.backends.base import LaunchSpec
    from allocator.backends.mesos.link import FrameworkIdFile
    from allocator.broker.proto import pb
    from allocator.broker.store import Store, StoredReclaim

    store = Store(state / "broker.sqlite")
    request = pb.RegisterRequest(tenant_id="pi", demand={"cpus": 2.0, "mem": 1024.0}, target=4,
                                 group="etl")  # fmt: skip
    store.save_tenant("pi", request.SerializeToString(), 4, 1)
    specs = [LaunchSpec("pi", str(i), "t1-a", {"cpus": 2.0, "mem": 1024.0},
                        "spark://d:1", "app-1", 2, 640, environment={"K": "v"})
             for i in (1, 2, 3)]  # fmt: skip
    store.record_launch(specs[0], 2)
    store.set_handle("pi", "1", "pi.1")
    store.record_launch(specs[1], 3)
    store.record_launch(specs[2], 4)
    store.set_handle("pi", "3", "pi.3")
    store.record_reclaim(StoredReclaim("pi", "3", "wc", "t1-a", 1_800_000_000.5))
    store.save_tenant("gone", pb.RegisterRequest(tenant_id="gone").SerializeToString(), 0, 7)
    store.delete_tenant("gone")
    store.record_kill("pi.9", "agent-S1", "not one of the broker's executors")
    store.close()
    FrameworkIdFile(state).save("0b5c2e43-1a6f-4a4b-9f37-2bd6b0b3a3c4-0007")


def _contents(store) -> tuple:
    return (
        # (a map's wire order is not fixed: requests compare as messages)
        sorted(((t.tenant_id, t.target, t.next_executor, t.request) for t in store.tenants()),
               key=lambda row: row[0]),
        sorted((s.tenant_id, s.executor_id, s.agent, h, tuple(s.environment.items()))
               for s, h in store.executors()),
        sorted(store.reclaims(), key=lambda r: r.executor_id),
        store.executor_ids(),
        store.kills(),
    )  # fmt: skip


@needs_zk
def test_state_moves_from_sqlite_to_zookeeper_and_back_unchanged(
    tmp_path: Path, zk: ZooKeeper
) -> None:
    from kazoo.client import KazooClient
    from support.commands import one_line_error, run_fairbroker

    from allocator.backends.mesos.link import FrameworkIdFile
    from allocator.broker.store import Store
    from allocator.broker.zk_store import ZkStore

    old = tmp_path / "old"
    _seed_sqlite(old)
    store = Store(old / "broker.sqlite")
    expected = _contents(store)
    store.close()
    assert expected[3] == {"pi": 4, "gone": 7} and len(expected[1]) == 3  # what was seeded
    assert expected[4] == {"pi.9": "agent-S1"}
    url = zk.url("/fb")
    document = tmp_path / "state.json"
    done = run_fairbroker("state", "export", "--state-dir", str(old), "-o", str(document))
    assert done.returncode == 0, done.stderr
    counts = "1 tenants, 3 executors, 2 executor_ids, 1 reclaims, 1 kills, 1 meta"
    assert f"exported {counts}" in done.stderr
    done = run_fairbroker("state", "import", str(document), "--ha", url)
    assert done.returncode == 0, done.stderr
    assert f"imported 9 rows into {url}" in done.stderr
    one_line_error(run_fairbroker("state", "import", str(document), "--ha", url),
                   "holds 9 rows already")  # fmt: skip
    client = KazooClient(hosts=parse_zk_url(url).connect_string)
    client.start(timeout=20)
    try:
        zk_store = ZkStore(lambda: client, "/fb", lambda: None)
        zk_store.load()
        assert _contents(zk_store) == expected
        assert zk_store.framework_id() == "0b5c2e43-1a6f-4a4b-9f37-2bd6b0b3a3c4-0007"
        client.create("/fb/election/member_0000000000", b"{}", ephemeral=True, makepath=True)
        one_line_error(run_fairbroker("state", "import", str(document), "--ha", url),
                       "brokers are running")  # fmt: skip
    finally:
        client.stop()
        client.close()
    back, again = tmp_path / "back", tmp_path / "again.json"
    done = run_fairbroker("state", "export", "--ha", url, "-o", str(again))
    assert done.returncode == 0, done.stderr
    exported = [json.loads(d.read_text())["rows"] for d in (document, again)]
    for rows in exported:  # compared above as messages
        for row in rows["tenants"].values():
            row.pop("request")
    assert exported[1] == exported[0]
    done = run_fairbroker("state", "import", str(again), "--state-dir", str(back))
    assert done.returncode == 0, done.stderr
    store = Store(back / "broker.sqlite")
    try:
        assert _contents(store) == expected
    finally:
        store.close()
    assert FrameworkIdFile(back).load() == "0b5c2e43-1a6f-4a4b-9f37-2bd6b0b3a3c4-0007"
    one_line_error(run_fairbroker("state", "import", str(again), "--state-dir", str(back)),
                   "holds a state already")  # fmt: skip
    one_line_error(run_fairbroker("state", "export", "--state-dir", str(back), "--ha", url),
                   "exactly one of --state-dir and --ha")  # fmt: skip


# ---- two real `fairbroker serve --ha` on the embedded cluster ------------------------------


def _stand_in_spark(tmp_path: Path) -> Path:
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "spark-class"
    script.write_text("#!/bin/bash\necho 'Successfully registered with driver' >&2\nsleep 600\n")
    script.chmod(0o755)
    return home


class Serve:
    """One `fairbroker serve --ha` subprocess on loopback (stopped by pid). No executor
    sandbox: pytest's directories and this machine's Python are closed to its user, and
    tests/test_sandbox.py is where the sandbox is tested."""

    def __init__(self, name: str, zk_url: str, state: Path, spark: Path | None, log_dir: Path,
                 lease: float = LEASE, extra: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.name = name
        self.http, self.grpc, self.metrics = free_port(), free_port(), free_port()
        self.log = log_dir / f"serve-{name}.log"
        env = dict(os.environ)
        if spark is not None:  # a stand-in; None: the installed pyspark's real Spark
            env["SPARK_HOME"] = str(spark)
        self.process = subprocess.Popen([
            sys.executable, "-c", "from allocator.cli import main; main()", "serve",
            "--ha", zk_url, "--state-dir", str(state), "--port", str(self.http),
            "--grpc-port", str(self.grpc), "--metrics-port", str(self.metrics),
            "--lease", str(lease), "--scheduler", "drf", "--sandbox", "none", *extra,
        ], stdout=subprocess.DEVNULL, stderr=self.log.open("ab"), env=env,
           start_new_session=True)  # fmt: skip

    def healthz(self) -> tuple[int, dict]:
        try:
            answer = requests.get(f"http://127.0.0.1:{self.http}/healthz", timeout=2)
        except requests.RequestException:
            return 0, {}
        return answer.status_code, answer.json()

    def gauge(self, name: str) -> float | None:
        try:
            text = requests.get(f"http://127.0.0.1:{self.metrics}/metrics", timeout=2).text
        except requests.RequestException:
            return None
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def call(self, method: str, body: dict, timeout: float = 5) -> requests.Response:
        return requests.post(
            f"http://127.0.0.1:{self.http}/v1/{method}", json=body, timeout=timeout
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            stop_gracefully(self.process)


def _leader(brokers: list[Serve]) -> Serve | None:
    leading = [b for b in brokers if b.process.poll() is None and b.healthz()[0] == 200]
    return leading[0] if len(leading) == 1 else None


def _register(broker: Serve, tenant: str, target: int) -> None:
    answer = broker.call("Register", {
        "tenantId": tenant, "demand": {"cpus": 1, "mem": 512}, "target": target,
        "launch": {"driverUrl": "spark://CoarseGrainedScheduler@127.0.0.1:9", "appId": tenant,
                   "cores": 1, "heapMib": 128},
    })  # fmt: skip
    assert answer.status_code == 200, answer.text


def _executors(broker: Serve, tenant: str) -> dict[str, str]:
    """executor id -> state, from the broker's GetAllocation."""
    answer = requests.get(f"http://127.0.0.1:{broker.http}/v1/GetAllocation", timeout=5)
    assert answer.status_code == 200, answer.text
    for entry in answer.json().get("tenants", []):
        if entry["tenantId"] == tenant:
            return {e["executorId"]: e["state"] for e in entry.get("executors", [])}
    return {}


def _stored_pids(url: ZkUrl) -> dict[str, int]:
    """executor row -> the pid (handle) the leader recorded, read from ZooKeeper."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=url.connect_string)
    client.start(timeout=20)
    try:
        where = f"{url.path}/state/executors"
        rows = {n: json.loads(client.get(f"{where}/{n}")[0]) for n in client.get_children(where)}
    finally:
        client.stop()
        client.close()
    return {name: int(row["handle"]) for name, row in rows.items() if row["handle"]}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@contextlib.contextmanager
def heartbeats(brokers: list[Serve], tenant: str):
    """The tenant's heartbeat to every broker alive, every 2 s, as the Spark plugin keeps
    its lease (a paused broker, or a standby, takes none)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(2):
            for broker in brokers:
                if broker.process.poll() is None:
                    with contextlib.suppress(requests.RequestException):
                        broker.call("Heartbeat", {"tenantId": tenant}, timeout=1)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


@pytest.fixture
def pair(tmp_path: Path, zk: ZooKeeper):
    """Two brokers, one ZooKeeper, one state dir (the embedded cluster's executors are found
    by its path, as two hosts would share the agents)."""
    state, spark = tmp_path / "state", _stand_in_spark(tmp_path)
    url = zk.url("/fairbroker")
    brokers = [Serve("a", url, state, spark, tmp_path)]
    started: list[int] = []
    try:
        wait_for(lambda: brokers[0].healthz()[0] == 200, 60, "the first broker to lead")
        brokers.append(Serve("b", url, state, spark, tmp_path))
        wait_for(lambda: "leader at" in brokers[1].healthz()[1].get("reason", ""), 60,
                 "the second to stand by, naming the leader")  # fmt: skip
        yield brokers, parse_zk_url(url), started
    finally:
        for broker in brokers:
            broker.stop()
        for pid in started:  # executors a killed test left behind
            if _alive(pid):
                os.killpg(pid, signal.SIGKILL)
        for broker in brokers:
            print(f"--- {broker.name}:", broker.log.read_text(errors="replace")[-3000:])


@needs_zk
def test_one_broker_leads_the_standby_names_it_on_every_transport(pair) -> None:
    (a, b), _, _ = pair
    status, report = b.healthz()
    assert status == 503
    assert report == {
        "ok": False,
        "standby": True,
        "reason": f"standby, leader at 127.0.0.1:{a.http} (gRPC 127.0.0.1:{a.grpc})",
    }
    assert a.healthz()[0] == 200
    answer = b.call("Register", {"tenantId": "t"})
    assert answer.status_code == 503
    assert answer.json()["code"] == "UNAVAILABLE"
    assert f"leader at 127.0.0.1:{a.http}" in answer.json()["error"]
    from allocator.broker.client import BrokerCallError, BrokerClient
    from allocator.broker.proto import pb, pb_grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{b.grpc}")
    with channel, pytest.raises(grpc.RpcError) as raised:
        pb_grpc.TenantServiceStub(channel).GetAllocation(pb.AllocationRequest(), timeout=5)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert raised.value.details() == report["reason"]
    with BrokerClient(f"127.0.0.1:{b.grpc}") as client, pytest.raises(BrokerCallError) as called:
        client.register(pb.RegisterRequest(tenant_id="t"))
    assert str(called.value) == f"broker at 127.0.0.1:{b.grpc}: {report['reason']}"
    with BrokerClient(f"127.0.0.1:{a.grpc}") as client:
        assert client.allocation().broker.backend == "local"  # the leader serves
    from support.commands import one_line_error, run_fairbroker

    healthcheck = Path(__file__).resolve().parents[1] / "docker" / "broker" / "healthcheck.py"

    def container_health(port: int, ha: bool) -> int:
        env = {**os.environ, "FAIRBROKER_PORT": str(port)}
        env.pop("FAIRBROKER_HA", None)
        if ha:
            env["FAIRBROKER_HA"] = "zk://zookeeper:2181/fairbroker"
        return subprocess.run([sys.executable, str(healthcheck)], env=env, timeout=30,
                              capture_output=True).returncode  # fmt: skip

    # the compose containers: a standby is a healthy container, not a healthy broker
    assert (container_health(a.http, True), container_health(b.http, True)) == (0, 0)
    assert container_health(b.http, False) == 1
    done = run_fairbroker("status", "--broker", f"127.0.0.1:{b.http}")
    one_line_error(done, f"broker at 127.0.0.1:{b.http}: {report['reason']}")
    nobody = f"127.0.0.1:{free_port()}"
    # several addresses: the standby and an address where nothing answers pass it on
    for port in (a.http, a.grpc):
        done = run_fairbroker("status", "--broker", f"{nobody},127.0.0.1:{b.http},127.0.0.1:{port}",
                              "--json")  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["broker"]["backend"] == "local"
    done = run_fairbroker("explain", "t", "--broker", f"127.0.0.1:{b.grpc},127.0.0.1:{a.grpc}")
    one_line_error(done, "unknown tenant")  # the leader's answer, not the standby's
    one_line_error(run_fairbroker("status", "--broker", f"127.0.0.1:{b.http},{nobody}"),
                   f"no broker serves: broker at 127.0.0.1:{b.http}: {report['reason']}; "
                   f"broker at {nobody}")  # fmt: skip
    from allocator.broker.address import check_submit_address

    # submit skips an address where nothing answers
    assert check_submit_address([nobody, f"127.0.0.1:{b.http}"]) == f"127.0.0.1:{b.http}"
    assert (a.gauge("fairbroker_leader"), b.gauge("fairbroker_leader")) == (1.0, 0.0)
    assert a.gauge("fairbroker_leadership_changes_total") == 1.0
    assert b.gauge("fairbroker_leadership_changes_total") == 0.0
    assert 0 <= a.gauge("fairbroker_seconds_since_takeover") < 120
    assert b.gauge("fairbroker_seconds_since_takeover") is None  # never took over


@needs_zk
def test_the_leader_killed_the_standby_takes_over_and_readopts_its_executors(pair) -> None:
    """SIGKILL the leader while a tenant holds 2 executors: the standby leads within 45 s,
    its GetAllocation shows the same 2 executors (ids 1 and 2, their processes the same
    pids, alive), and it launched none."""
    (a, b), url, started = pair
    with heartbeats([a, b], "t"):
        _register(a, "t", 2)
        wait_for(lambda: len(_stored_pids(url)) == 2, 60, "two executors started and recorded")
        pids = _stored_pids(url)
        started.extend(pids.values())
        wait_for(lambda: _executors(a, "t") == {"1": "RUNNING", "2": "RUNNING"}, 60,
                 "both running")  # fmt: skip
        a.process.send_signal(signal.SIGKILL)
        a.process.wait(10)
        killed_at = time.monotonic()
        wait_for(lambda: b.healthz()[0] == 200, 90, "the standby to take over")
        print(f"take-over after SIGKILL: {time.monotonic() - killed_at:.1f} s")
        assert _executors(b, "t") == {"1": "RUNNING", "2": "RUNNING"}
        time.sleep(3)  # a few allocation runs: the tenant holds its target, nothing starts
        assert _executors(b, "t") == {"1": "RUNNING", "2": "RUNNING"}
        assert _stored_pids(url) == pids and all(_alive(p) for p in pids.values())
    assert b.gauge("fairbroker_leader") == 1.0
    assert b.gauge("fairbroker_leadership_changes_total") == 1.0


@pytest.mark.slow
@needs_zk
def test_a_leader_paused_past_its_session_changes_nothing_when_it_wakes(pair) -> None:
    """SIGSTOP the leader past its ZooKeeper session: the standby takes over. SIGCONT it:
    its memory says its tenant's lease ran out (it heard nothing while stopped), but it is
    fenced: it kills nothing, launches nothing, writes nothing to the state, and exits
    (status 3) as deposed."""
    (a, b), url, started = pair
    with heartbeats([a, b], "t"):
        _register(a, "t", 2)
        wait_for(lambda: len(_stored_pids(url)) == 2, 60, "two executors started and recorded")
        pids = _stored_pids(url)
        started.extend(pids.values())
        a.process.send_signal(signal.SIGSTOP)
        wait_for(lambda: b.healthz()[0] == 200, 90, "the standby to take over")
        assert _executors(b, "t") == {"1": "RUNNING", "2": "RUNNING"}
        time.sleep(LEASE + 2)  # a's clock runs on: past the lease it would drop the tenant
        from kazoo.client import KazooClient

        client = KazooClient(hosts=url.connect_string)
        client.start(timeout=20)
        try:
            before = _snapshot(client, url.path)
            a.process.send_signal(signal.SIGCONT)
            assert a.process.wait(60) == 3
            after = _snapshot(client, url.path)
        finally:
            client.stop()
            client.close()
        assert after == before
        assert "no longer the leader" in a.log.read_text()
        assert all(_alive(p) for p in pids.values()) and _stored_pids(url) == pids
        assert _executors(b, "t") == {"1": "RUNNING", "2": "RUNNING"}


@needs_zk
def test_a_zookeeper_outage_fences_the_leader_until_it_returns(pair, zk: ZooKeeper) -> None:
    """ZooKeeper stopped under a leader whose tenant holds 2 executors: the leader keeps
    them, reports the outage (/healthz 503 and why, fairbroker_leader 0), changes nothing
    (a SetTarget is refused, not recorded); ZooKeeper back with the same data: the same
    sessions go on, the same broker leads, and the raised target is launched."""
    (a, b), url, started = pair
    with heartbeats([a, b], "t"):
        _register(a, "t", 2)
        wait_for(lambda: len(_stored_pids(url)) == 2, 60, "two executors started and recorded")
        pids = _stored_pids(url)
        started.extend(pids.values())
        zk.stop()
        _, report = wait_for(lambda: (h := a.healthz())[0] == 503 and h, 60,
                                  "the leader to report the outage")  # fmt: skip
        assert report["ok"] is False and "ZooKeeper connection suspended" in report["reason"]
        assert a.gauge("fairbroker_leader") == 0.0
        answer = a.call("SetTarget", {"tenantId": "t", "total": 3})
        assert answer.status_code == 503 and "not recorded" in answer.json()["error"]
        time.sleep(3)
        assert _executors(a, "t") == {"1": "RUNNING", "2": "RUNNING"}
        assert all(_alive(p) for p in pids.values())
        zk.start()
        wait_for(lambda: a.healthz()[0] == 200, 60, "the leader to resume")
        assert b.healthz()[0] == 503 and a.gauge("fairbroker_leader") == 1.0
        assert a.gauge("fairbroker_leadership_changes_total") == 1.0  # the same leadership
        assert a.call("SetTarget", {"tenantId": "t", "total": 3}).status_code == 200
        wait_for(lambda: len(_stored_pids(url)) == 3, 60, "the third executor")
        started.extend(_stored_pids(url).values())
        assert set(_executors(a, "t")) == {"1", "2", "3"}
        assert all(_alive(p) for p in pids.values())


@pytest.mark.slow
@pytest.mark.live
@needs_zk
def test_a_real_spark_job_runs_through_a_failover(tmp_path: Path, zk: ZooKeeper) -> None:
    """A real Spark job (2 executors of 2 cores, 40 tasks of 3 s) submitted with both
    brokers' addresses; the leader SIGKILLed mid-job: the standby takes over, re-adopts the
    two executor JVMs (same pids, none started), the plugin follows it (its heartbeats go on
    to the new leader), and the job finishes with the right answer."""
    from support.spark import HOSTS_JOB, Driver, executor_processes

    state, url = tmp_path / "state", zk.url("/fairbroker")
    a = Serve("a", url, state, None, tmp_path, lease=30)
    brokers = [a]
    driver = None
    try:
        wait_for(lambda: a.healthz()[0] == 200, 60, "the first broker to lead")
        b = Serve("b", url, state, None, tmp_path, lease=30)
        brokers.append(b)
        wait_for(lambda: b.healthz()[0] == 503, 60, "the second to stand by")
        conf = {"spark.executor.cores": "2", "spark.executor.memory": "640m",
                "spark.executor.instances": "2"}  # fmt: skip
        driver = Driver(f"127.0.0.1:{a.http},127.0.0.1:{b.http}", [str(HOSTS_JOB), "2", "40",
                        "3"], workdir=tmp_path, name="failover", conf=conf)  # fmt: skip

        def two_jvms() -> list[int] | None:
            pids = sorted(executor_processes(str(state), jvms_only=True))
            return pids if len(pids) == 2 else None

        before = wait_for(two_jvms, 180, "two executor JVMs")
        time.sleep(5)  # the job's tasks are running on them

        def two_running() -> dict[str, str] | None:
            held = _executors(a, driver_tenant(a))  # ids 1 and 2 unless a launch failed
            return held if list(held.values()) == ["RUNNING"] * 2 else None

        held = wait_for(two_running, 60, "the leader to hold two running executors")
        a.process.send_signal(signal.SIGKILL)
        a.process.wait(10)
        wait_for(lambda: b.healthz()[0] == 200, 90, "the standby to take over")
        assert _executors(b, driver_tenant(b)) == held
        assert sorted(executor_processes(str(state), jvms_only=True)) == before
        code, result = driver.wait()
        assert code == 0, driver.output()
        assert result["sum"] == sum(range(40))
        # during the take-over the plugin, finding the leader gone, asked the other address
        assert "standby, leader at" in driver.log.read_text(errors="replace")
    finally:
        if driver is not None:
            driver.kill()
        for broker in brokers:
            broker.stop()
        for pid in executor_processes(str(state)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        for broker in brokers:
            print(f"--- {broker.name}:", broker.log.read_text(errors="replace")[-3000:])


def driver_tenant(broker: Serve) -> str:
    answer = requests.get(f"http://127.0.0.1:{broker.http}/v1/GetAllocation", timeout=5)
    tenants = [t["tenantId"] for t in answer.json().get("tenants", [])]
    return tenants[0] if len(tenants) == 1 else ""


# ---- on the real Mesos 1.11.0 master ---------------------------------------------------------


@pytest.mark.slow
@needs_zk
@pytest.mark.skipif(mesos_home() is None, reason=SKIP_REASON)
def test_on_a_real_master_the_standby_takes_the_same_framework_and_both_tasks(
    tmp_path: Path, zk: ZooKeeper
) -> None:
    """Two `serve --ha --backend mesos` brokers, each with its own state dir (the framework
    id can only come from ZooKeeper). SIGKILL the leader while a tenant holds 2 executors:
    the standby leads within 45 s, subscribes as the same framework and reconciles; the
    master shows one framework and the same 2 tasks running (none relaunched or killed),
    and the new leader's GetAllocation shows both executors."""
    from allocator.scenarios.cluster_file import load_cluster_file

    spark = tmp_path / "sleeping-spark"
    (spark / "bin").mkdir(parents=True)
    (spark / "bin" / "spark-class").write_text("#!/bin/sh\nexec sleep 600\n")
    (spark / "bin" / "spark-class").chmod(0o755)
    url = zk.url("/fairbroker")
    with RealMesos(load_cluster_file(), work_dir=tmp_path / "mesos", agent_ping_timeout=1) as mesos:
        extra = ("--backend", "mesos", "--master", mesos.address, "--spark-home", str(spark),
                 "--allow-root")  # fmt: skip
        a = Serve("a", url, tmp_path / "state-a", spark, tmp_path, lease=600, extra=extra)
        brokers = [a]
        try:
            wait_for(lambda: a.healthz()[0] == 200, 90, "the first broker to lead and subscribe")
            b = Serve("b", url, tmp_path / "state-b", spark, tmp_path, lease=600, extra=extra)
            brokers.append(b)
            wait_for(lambda: b.healthz()[0] == 503, 60, "the second to stand by")
            answer = a.call("Register", {
                "tenantId": "t", "demand": {"cpus": 2, "mem": 1024}, "target": 2,
                "launch": {"driverUrl": "spark://CoarseGrainedScheduler@127.0.0.1:9",
                           "appId": "t", "cores": 2, "heapMib": 640},
            })  # fmt: skip
            assert answer.status_code == 200, answer.text
            running = lambda: sorted(t.task_id for t in mesos.tasks("TASK_RUNNING"))  # noqa: E731
            wait_for(lambda: running() == ["t.1", "t.2"], 60, "two tasks running")
            (framework_id,) = [f["id"] for f in mesos.frameworks()]
            assert not (tmp_path / "state-a" / "mesos-framework-id").exists()
            a.process.send_signal(signal.SIGKILL)
            a.process.wait(10)
            killed_at = time.monotonic()
            wait_for(lambda: b.healthz()[0] == 200, 90, "the standby to lead and subscribe")
            print(f"take-over after SIGKILL: {time.monotonic() - killed_at:.1f} s")
            wait_for(lambda: b.healthz()[1].get("unreconciled_tasks") == 0, 60,
                     "the new leader to reconcile both tasks")  # fmt: skip
            frameworks = mesos.frameworks()
            assert [(f["id"], f["active"]) for f in frameworks] == [(framework_id, True)]
            assert running() == ["t.1", "t.2"]
            assert sorted(t.task_id for t in mesos.tasks()) == ["t.1", "t.2"]  # none twice
            assert _executors(b, "t") == {"1": "RUNNING", "2": "RUNNING"}
            time.sleep(3)  # allocation runs go on: nothing more is launched
            assert sorted(t.task_id for t in mesos.tasks()) == ["t.1", "t.2"]
        finally:
            for broker in brokers:
                broker.stop()
            for broker in brokers:
                print(f"--- {broker.name}:", broker.log.read_text(errors="replace")[-3000:])


@pytest.mark.slow
@pytest.mark.live
@needs_zk
@pytest.mark.skipif(mesos_home() is None, reason=SKIP_REASON)
def test_a_real_spark_job_runs_through_a_failover_on_a_real_master(
    tmp_path: Path, zk: ZooKeeper
) -> None:
    """The issue's must-hold on the real Mesos 1.11 master: a real Spark job (2 executors of
    2 cores, 40 tasks of 3 s) submitted with both brokers' addresses; the leader SIGKILLed
    while its two executors run as Mesos tasks: the standby leads within 45 s as the same
    framework, the master still runs the same two tasks (none relaunched or killed), the
    plugin follows the new leader and the job finishes with the right answer."""
    from support.spark import HOSTS_JOB, Driver

    from allocator.backends.local import spark_home
    from allocator.scenarios.cluster_file import load_cluster_file

    url = zk.url("/fairbroker")
    with RealMesos(load_cluster_file(), work_dir=tmp_path / "mesos", agent_ping_timeout=1) as mesos:
        extra = ("--backend", "mesos", "--master", mesos.address, "--spark-home",
                 str(spark_home()), "--allow-root")  # fmt: skip
        a = Serve("a", url, tmp_path / "state-a", None, tmp_path, lease=30, extra=extra)
        brokers, driver = [a], None
        try:
            wait_for(lambda: a.healthz()[0] == 200, 90, "the first broker to lead and subscribe")
            b = Serve("b", url, tmp_path / "state-b", None, tmp_path, lease=30, extra=extra)
            brokers.append(b)
            wait_for(lambda: b.healthz()[0] == 503, 60, "the second to stand by")
            conf = {"spark.executor.cores": "2", "spark.executor.memory": "640m",
                    "spark.executor.instances": "2"}  # fmt: skip
            driver = Driver(f"127.0.0.1:{a.http},127.0.0.1:{b.http}",
                            [str(HOSTS_JOB), "2", "40", "3"], workdir=tmp_path,
                            name="failover", conf=conf)  # fmt: skip
            running = lambda: sorted(t.task_id for t in mesos.tasks("TASK_RUNNING"))  # noqa: E731
            before = wait_for(lambda: (ids := running()) and len(ids) == 2 and ids, 180,
                              "two executors running as Mesos tasks")  # fmt: skip
            time.sleep(5)  # the job's tasks are running on them
            (framework_id,) = [f["id"] for f in mesos.frameworks()]
            a.process.send_signal(signal.SIGKILL)
            a.process.wait(10)
            killed_at = time.monotonic()
            wait_for(lambda: b.healthz()[0] == 200, 90, "the standby to lead and subscribe")
            print(f"take-over after SIGKILL: {time.monotonic() - killed_at:.1f} s")
            assert [(f["id"], f["active"]) for f in mesos.frameworks()] == [(framework_id, True)]
            assert running() == before
            held = {task.rsplit(".", 1)[1]: "RUNNING" for task in before}  # TENANT.EXECUTOR
            wait_for(lambda: driver_tenant(b) and _executors(b, driver_tenant(b)) == held, 60,
                     "the new leader to hold the driver's two executors")  # fmt: skip
            code, result = driver.wait(timeout=300)
            assert code == 0, driver.output()
            assert result["sum"] == sum(range(40))
            assert sorted(t.task_id for t in mesos.tasks()) == before  # none launched twice
        finally:
            if driver is not None:
                driver.kill()
            for broker in brokers:
                broker.stop()
            for broker in brokers:
                print(f"--- {broker.name}:", broker.log.read_text(errors="replace")[-3000:])
