"""`fairbroker explain` on the Mesos path (issue 26): the broker subscribed to the project's
test Mesos master through pymesos, its executors run by the master's agents as real
processes (stand-in executors), and the answer read as a user reads it: the command in a
subprocess, and `POST /v1/Explain`. The `refused` and `resting` reasons, whose causes (a
declined offer, executors failing at once) come from the Mesos side."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from mesos_master import AgentSpec, MesosMaster
from support.broker import http, request
from support.commands import run_fairbroker
from support.mesos import mesos_broker, tenant
from support.polling import wait_for
from support.real_mesos import assert_none_left
from support.standin import held, stand_in_spark

# m5 holds two 2-cpu executors and 1 cpu more; m2 exactly one.
AGENTS = [
    AgentSpec("m5", {"cpus": 5, "mem": 4096}, {"type": "big"}),
    AgentSpec("m2", {"cpus": 2, "mem": 1024}, {"type": "small"}),
]
BIG = {"type": "big"}
REFUSE_S = 20.0  # room for two `fairbroker explain` processes on a loaded machine
LEASE_S = 600.0  # the tests send no heartbeats: no tenant may expire while they run
ENV = {"PATH": "/usr/bin:/bin"}
# The JSON: {"tenant", "held", "wants", "fair_share", "criterion": {"name", "value",
# "rank", "of"}, "waiting": [{"agent", "reason", "detail"}], "events": [...]}; the command
# adds the executor's demand and the criterion's detail and `ahead`.
TOP_KEYS = {"tenant", "held", "wants", "fair_share", "demand", "criterion", "waiting", "events"}
CRITERION_KEYS = {"name", "value", "rank", "of", "detail", "ahead"}
LEFT = re.compile(r", (\d+\.\d) s left$")


@pytest.fixture
def master(tmp_path: Path):
    with MesosMaster(AGENTS, allocation_interval=0.2, work_dir=tmp_path / "mesos") as running:
        yield running
    assert_none_left(tmp_path / "mesos", "the test master")


def explain_json(address: str, name: str) -> dict:
    done = run_fairbroker("explain", name, "--json", "--broker", address, env=ENV)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert set(answer) == TOP_KEYS, answer
    assert set(answer["criterion"]) == CRITERION_KEYS, answer
    assert all(set(w) == {"agent", "reason", "detail"} for w in answer["waiting"]), answer
    return answer


def seconds_left(detail: str) -> float:
    found = LEFT.search(detail)
    assert found, detail
    return float(found.group(1))


def test_refused_names_the_declined_offer_until_its_filter_ends(
    tmp_path: Path, master: MesosMaster
) -> None:
    """Oblivious offers (Mesos's way): T (2 cpus, 1 GiB executors, 3 wanted, on `big`
    agents only) is offered m5's whole remainder, launches 2 executors there and declines
    cpus 1, mem 2048: a refuse filter of REFUSE_S, while m5 offers no more than that.
    `explain T --json` through gRPC and HTTP: `refused` on m5 with what was declined and
    the seconds left, `constraint` on m2; once the filter ends, m5 is `full` (1 cpu is not
    2). (One agent for T: a second one's grant could come a refuse period later, when
    the broker declined its first offer before the engine had seen it.)"""
    with mesos_broker(
        tmp_path, master, spark=stand_in_spark(tmp_path), scheduler="drf", mode="oblivious",
        refuse_seconds=REFUSE_S, lease_seconds=LEASE_S,
    ) as service:  # fmt: skip
        broker = service.broker
        registered = time.monotonic()  # before the grant that declined: bounds its filter
        broker.register(request("T", {"cpus": 2.0, "mem": 1024.0}, 3, constraints=BIG))
        wait_for(lambda: len(master.tasks("TASK_RUNNING")) == 2, 90, "T's 2 tasks running")
        wait_for(lambda: held(broker) == {"T": {"RUNNING": 2}}, 30, "the broker to see them")
        running = time.monotonic()  # after that grant
        m5, m2 = master.agent_id("m5"), master.agent_id("m2")
        assert {t.agent_id for t in master.tasks()} == {m5}
        for address in (service.grpc_address, service.http_address):
            asked = time.monotonic()
            answer = explain_json(address, "T")
            answered = time.monotonic()
            assert (answer["tenant"], answer["held"], answer["wants"]) == ("T", 2, 3)
            # T alone, on m5 only (5 cpus, or 4 with the declined cpu away): 2 executors, once
            # the worker thread has computed it
            assert answer["fair_share"] in (None, 2)
            assert answer["demand"] == {"cpus": 2.0, "mem": 1024.0}
            # DRF: T's dominant share is its 4 cpus over what the broker holds on Mesos (its
            # tasks and the offers it holds: m5's declined cpu and m2's 2 when held)
            criterion = answer["criterion"]
            assert criterion["name"] == "drf"
            total = re.fullmatch(r"dominant cpus 4/([4-7]), weight 1", criterion["detail"])
            assert total, criterion
            assert criterion["value"] == pytest.approx(4 / int(total.group(1)))
            assert (criterion["rank"], criterion["of"]) == (1, 1)
            waiting = {w["agent"]: w for w in answer["waiting"]}
            assert {a: w["reason"] for a, w in waiting.items()} == {
                m5: "refused", m2: "constraint"
            }  # fmt: skip
            assert waiting[m2]["detail"] == "needs type=big, agent has type=small"
            detail = waiting[m5]["detail"]
            assert detail.startswith("declined cpus 1, mem 2048 of an offer; refuse filter, ")
            # the filter ends REFUSE_S after the grant, which came between the two marks
            left = seconds_left(detail)
            assert REFUSE_S - (answered - registered) - 0.1 <= left
            assert left <= REFUSE_S - (asked - running) + 0.1
            events = answer["events"]
            assert [(e["kind"], e["agent"]) for e in events] == [("grant", m5)] * 2
            assert all(e["rule"].startswith("drf oblivious progressive filling") for e in events)

        def m5_reason() -> dict | None:
            status, body = http(service, "Explain", b'{"tenantId": "T"}', token=None)
            assert status == 200, body
            found = {w["agent"]: w for w in body.get("waiting", [])}[m5]
            return None if found["reason"] == "refused" else found

        after = wait_for(m5_reason, REFUSE_S + 30, "m5's refuse filter to end")
        assert after["reason"] == "full"
        # free is what the broker holds: m5's rest (cpus 1, mem 2048) while an offer of it is
        # held, nothing once the broker has declined it to the master again
        assert after["detail"] in (
            "needs cpus 2; free cpus 1",
            "needs cpus 2, mem 1024; free cpus 0, mem 0",
        ), after
        assert held(broker) == {"T": {"RUNNING": 2}}  # nothing more fitted meanwhile


def test_resting_after_executors_fail_at_once(tmp_path: Path, master: MesosMaster) -> None:
    """F's executor command exits 1 at once, as the master's agents run it (TASK_FAILED):
    from its second quick failure in a row on an agent, F rests there (60 s). Once it
    rests on both agents, `explain F --json` gives `resting` on both with the time left,
    and nothing else (the room is there: nothing is `full` or `refused`)."""
    home = tmp_path / "broken-spark"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "spark-class").write_text("#!/bin/bash\nexit 1\n")
    (home / "bin" / "spark-class").chmod(0o755)
    with mesos_broker(
        tmp_path, master, spark=home, scheduler="drf", lease_seconds=LEASE_S
    ) as service:
        broker = service.broker
        broker.register(tenant("F", 1, 512, target=1))

        def resting() -> dict[str, float]:
            with broker._lock:
                now = time.monotonic()
                rests = broker.tenants["F"].standing.rests
                return {a: until - now for a, until in rests.items() if until > now}

        m5, m2 = master.agent_id("m5"), master.agent_id("m2")
        rests = wait_for(lambda: set(resting()) == {m5, m2} and resting(), 90, "F to rest on both")
        failed = master.tasks("TASK_FAILED")
        assert len(failed) >= 4, failed  # two in a row on each agent
        answer = explain_json(service.http_address, "F")
        assert (answer["tenant"], answer["held"], answer["wants"]) == ("F", 0, 1)
        assert answer["criterion"]["value"] == 0 and answer["criterion"]["rank"] == 1
        waiting = {w["agent"]: w for w in answer["waiting"]}
        assert {a: w["reason"] for a, w in waiting.items()} == {m5: "resting", m2: "resting"}
        for agent in (m5, m2):
            detail = waiting[agent]["detail"]
            assert detail.startswith("after failures, "), detail
            # the first rest is 60 s; the answer comes after `rests` was read
            assert 0 < seconds_left(detail) <= min(60.0, rests[agent] + 0.1)
        assert answer["events"] == []  # failed executors are forgotten
        text = run_fairbroker("explain", "F", "--broker", service.http_address, env=ENV)
        assert text.returncode == 0, text.stderr
        assert re.search(
            rf"{re.escape(m5)}\s+resting\s+after failures, \d+\.\d s left", text.stdout
        )
