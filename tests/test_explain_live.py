"""`fairbroker explain` against a running broker on the embedded cluster (issue 26): real
stand-in executors, the real allocation loop, the command as a user runs it, over HTTP and
gRPC."""

from __future__ import annotations

import json
import time
from pathlib import Path

from support.broker import request
from support.commands import run_fairbroker
from support.polling import wait_for
from support.standin import held, stand_in_spark

from allocator.backends.base import AgentInfo
from allocator.backends.local import LocalCluster
from allocator.broker.server import BrokerOptions, BrokerService
from allocator.engine_config import EngineConfig

DEMAND = {"cpus": 1.0, "mem": 512.0}
SLOTS = 18
TOKEN = "s3cret"
# 4, 8 and 6 cpus with 4 GiB each; the 4-cpu agent is the only one of type t1.
AGENTS = [
    AgentInfo("a4", "127.0.2.1", {"cpus": 4, "mem": 4096}, {"type": "t1"}),
    AgentInfo("a8", "127.0.2.2", {"cpus": 8, "mem": 4096}, {"type": "t2"}),
    AgentInfo("a6", "127.0.2.3", {"cpus": 6, "mem": 4096}, {"type": "t2"}),
]


def test_explain_a_constrained_tenant_behind_a_full_cluster(tmp_path: Path) -> None:
    """A fills the 18 cpus; C may use t1 agents only. `explain C --json`: `constraint` on
    a8 and a6, `full` on a4 (the t1 agent), a fair share above what it holds (DRF from an
    empty cluster, Mesos's agent pass: 2 on a4), A served before it nowhere since nothing
    fits; the text names the constraint. Reclaim is on but far off (an hour), so the fair
    share is computed and nothing is taken during the test."""
    engine = EngineConfig.mesos("drf", reclaim_after=3600)
    cluster = LocalCluster(AGENTS, tmp_path / "agents", stand_in_spark(tmp_path))
    options = BrokerOptions(
        engine=engine, http_port=0, grpc_port=0, metrics_port=0, token=TOKEN,
        state_dir=tmp_path / "state", lease_seconds=600,
    )  # fmt: skip
    service = BrokerService(options, backend=cluster).start()
    broker = service.broker
    try:
        broker.register(request("A", DEMAND, target=100))
        wait_for(lambda: held(broker).get("A") == {"RUNNING": SLOTS}, 90, "A on all 18 slots")
        broker.register(request("C", DEMAND, target=4, constraints={"type": "t1"}))
        wait_for(
            lambda: {t.tenant_id: t.fair_share for t in broker.allocation().tenants}.get("C"),
            20, "C's fair share",
        )  # fmt: skip
        env = {"FAIRBROKER_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"}
        for address in (service.http_address, service.grpc_address):
            done = run_fairbroker("explain", "C", "--json", "--broker", address, env=env)
            assert done.returncode == 0, done.stderr
            answer = json.loads(done.stdout)
            reasons = {w["agent"]: w["reason"] for w in answer["waiting"]}
            assert reasons == {"a4": "full", "a8": "constraint", "a6": "constraint"}, answer
            details = {w["agent"]: w["detail"] for w in answer["waiting"]}
            assert details["a8"] == "needs type=t1, agent has type=t2"
            assert details["a4"] == "needs cpus 1; free cpus 0"
            assert (answer["tenant"], answer["held"], answer["wants"]) == ("C", 0, 4)
            assert answer["fair_share"] == 2 > answer["held"]
            assert answer["criterion"]["name"] == "drf" and answer["criterion"]["rank"] == 1
        text = run_fairbroker("explain", "C", "--broker", service.http_address, env=env)
        assert text.returncode == 0, text.stderr
        assert "constraint" in text.stdout and "needs type=t1, agent has type=t2" in text.stdout
        assert "fair share 2" in text.stdout
        # A's side: its grants, each with the rule that decided it; the dominant share
        a = json.loads(run_fairbroker("explain", "A", "--json", "--broker",
                                      service.http_address, env=env).stdout)  # fmt: skip
        assert a["criterion"]["detail"] == "dominant cpus 18/18, weight 1"
        assert len(a["events"]) == SLOTS and {e["kind"] for e in a["events"]} == {"grant"}
        assert a["events"][0]["rule"].startswith("drf characterized progressive filling")
        missing = run_fairbroker("explain", "nobody", "--broker", service.http_address, env=env)
        assert missing.returncode != 0 and "unknown tenant" in missing.stderr
    finally:
        service.stop()


def test_explain_names_the_rest_after_quick_failures(tmp_path: Path) -> None:
    """Executors that exit at once (a broken launcher): after two quick failures on an
    agent the tenant rests there (60 s); `explain` says `resting` with the time left on
    the agents where it rests, and nothing is `full`."""
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "spark-class").write_text("#!/bin/bash\nexit 1\n")
    (home / "bin" / "spark-class").chmod(0o755)
    cluster = LocalCluster(AGENTS, tmp_path / "agents", home)
    options = BrokerOptions(
        engine=EngineConfig.mesos("drf"), http_port=0, grpc_port=0, metrics_port=0,
        token=TOKEN, state_dir=tmp_path / "state", lease_seconds=600,
    )  # fmt: skip
    service = BrokerService(options, backend=cluster).start()
    broker = service.broker
    try:
        broker.register(request("F", DEMAND, target=2))

        def resting() -> set[str]:
            with broker._lock:
                tenant = broker.tenants["F"]
                now = time.monotonic()
                return {a for a, until in tenant.standing.rests.items() if until > now}

        rested = wait_for(lambda: resting() or None, 60, "F to rest on an agent")
        env = {"FAIRBROKER_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"}
        done = run_fairbroker("explain", "F", "--json", "--broker", service.http_address, env=env)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        reasons = {w["agent"]: w for w in answer["waiting"]}
        for agent in rested:
            assert reasons[agent]["reason"] == "resting", answer
            assert reasons[agent]["detail"].startswith("after failures, ")
        assert "full" not in {w["reason"] for w in answer["waiting"]}
    finally:
        service.stop()


def test_explain_names_the_poorer_tenant_served_first(tmp_path: Path) -> None:
    """`waiting_turn`: A holds 12 of the 18 slots and B 2; with grants held (the start
    barrier `fairbroker batch` uses, standing for the moment before the next allocation
    run), both raise their targets. Where a slot is free, A waits its turn behind B (DRF
    2/18 < 12/18), and is `full` elsewhere; B is held back nowhere there. Released, the
    run gives all 4 free slots to B, as the explanation said."""
    cluster = LocalCluster(AGENTS, tmp_path / "agents", stand_in_spark(tmp_path))
    options = BrokerOptions(
        engine=EngineConfig.mesos("drf"), http_port=0, grpc_port=0, metrics_port=0,
        token=TOKEN, state_dir=tmp_path / "state", lease_seconds=600,
    )  # fmt: skip
    service = BrokerService(options, backend=cluster).start()
    broker = service.broker
    env = {"FAIRBROKER_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"}

    def explain_json(name: str) -> dict:
        done = run_fairbroker("explain", name, "--json", "--broker", service.http_address, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    try:
        broker.register(request("A", DEMAND, target=12))
        wait_for(lambda: held(broker).get("A") == {"RUNNING": 12}, 90, "A's 12 executors")
        broker.register(request("B", DEMAND, target=2))
        wait_for(lambda: held(broker).get("B") == {"RUNNING": 2}, 90, "B's 2 executors")
        broker.hold_grants(True)
        broker.set_target("A", 18)
        broker.set_target("B", 6)
        with broker._lock:  # free slots per agent, from the executors' own records
            used = {agent.name: 0 for agent in AGENTS}
            for name in ("A", "B"):
                for record in broker.tenants[name].executors.values():
                    used[record.spec.agent] += 1
        free = {agent.name: int(agent.resources["cpus"]) - used[agent.name] for agent in AGENTS}
        assert sum(free.values()) == 4, free
        a = explain_json("A")
        assert {w["agent"]: w["reason"] for w in a["waiting"]} == {
            agent: "waiting_turn" if room else "full" for agent, room in free.items()
        }, (a, free)
        for item in a["waiting"]:
            if item["reason"] == "waiting_turn":
                assert item["detail"] == "B is poorer (0.1111 < 0.6667) and fits here"
        assert (a["held"], a["wants"]) == (12, 18)
        assert (a["criterion"]["rank"], a["criterion"]["of"]) == (2, 2)
        assert a["criterion"]["ahead"] == "B (drf 0.1111 < 0.6667)"
        b = explain_json("B")
        assert {w["agent"]: w["reason"] for w in b["waiting"]} == {
            agent: "full" for agent, room in free.items() if not room
        }, (b, free)
        assert (b["criterion"]["rank"], b["criterion"]["ahead"]) == (1, "")
        broker.hold_grants(False)
        wait_for(lambda: held(broker).get("B") == {"RUNNING": 6}, 90, "B's 4 more executors")
        assert held(broker).get("A") == {"RUNNING": 12}
        a = explain_json("A")
        assert {w["reason"] for w in a["waiting"]} == {"full"}, a
        assert {w["reason"] for w in explain_json("B")["waiting"]} == {"limit"}
    finally:
        service.stop()
