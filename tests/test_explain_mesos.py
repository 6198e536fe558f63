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
from support.broker import http
from support.commands import run_fairbroker
from support.mesos import mesos_broker, tenant
from support.polling import wait_for
from support.real_mesos import describe, processes_under
from support.standin import held, stand_in_spark

# m5 holds two 2-cpu executors and 1 cpu more; m2 exactly one.
AGENTS = [
    AgentSpec("m5", {"cpus": 5, "mem": 4096}),
    AgentSpec("m2", {"cpus": 2, "mem": 1024}),
]
REFUSE_S = 15.0
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
    left = processes_under(tmp_path / "mesos")
    assert not left, f"executors outlived the test master: {describe(left)}"


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
    """Oblivious offers (Mesos's way): T (2 cpus, 1 GiB executors, 4 wanted) is offered
    each agent's whole remainder. On m5 it launches 2 executors and declines cpus 1, mem
    2048 (a refuse filter of REFUSE_S, while m5 offers no more than that); m2 it fills
    with one. `explain T --json` through gRPC and HTTP: `refused` on m5 with what was
    declined and the seconds left, `full` on m2; once the filter ends, m5 is `full` (1 cpu
    is not 2)."""
    with mesos_broker(
        tmp_path, master, spark=stand_in_spark(tmp_path), scheduler="drf", mode="oblivious",
        refuse_seconds=REFUSE_S,
    ) as service:  # fmt: skip
        broker = service.broker
        registered = time.monotonic()  # before the grant that declined: bounds its filter
        broker.register(tenant("T", 2, 1024, target=4))
        wait_for(lambda: len(master.tasks("TASK_RUNNING")) == 3, 60, "T's 3 tasks running")
        running = time.monotonic()  # after that grant
        assert held(broker) == {"T": {"RUNNING": 3}}
        m5, m2 = master.agent_id("m5"), master.agent_id("m2")
        for address in (service.grpc_address, service.http_address):
            asked = time.monotonic()
            answer = explain_json(address, "T")
            answered = time.monotonic()
            assert (answer["tenant"], answer["held"], answer["wants"]) == ("T", 3, 4)
            assert answer["fair_share"] is None  # reclaim is off
            assert answer["demand"] == {"cpus": 2.0, "mem": 1024.0}
            # DRF: T's dominant share is its 6 cpus over what the broker holds on Mesos (its
            # tasks and the offers it holds): 7 with m5's declined cpu offered again, else 6
            criterion = answer["criterion"]
            assert criterion["name"] == "drf"
            total = re.fullmatch(r"dominant cpus 6/([67]), weight 1", criterion["detail"])
            assert total, criterion
            assert criterion["value"] == pytest.approx(6 / int(total.group(1)))
            assert (criterion["rank"], criterion["of"]) == (1, 1)
            waiting = {w["agent"]: w for w in answer["waiting"]}
            assert {a: w["reason"] for a, w in waiting.items()} == {m5: "refused", m2: "full"}
            detail = waiting[m5]["detail"]
            assert detail.startswith("declined cpus 1, mem 2048 of an offer; refuse filter, ")
            # the filter ends REFUSE_S after the grant, which came between the two marks
            left = seconds_left(detail)
            assert REFUSE_S - (answered - registered) - 0.1 <= left
            assert left <= REFUSE_S - (asked - running) + 0.1
            assert waiting[m2]["detail"] == "needs cpus 2, mem 1024; free cpus 0, mem 0"
            events = answer["events"]
            assert [e["kind"] for e in events] == ["grant"] * 3
            assert sorted(e["agent"] for e in events) == sorted([m5, m5, m2])
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
        assert held(broker) == {"T": {"RUNNING": 3}}  # nothing more fitted meanwhile


def test_resting_after_executors_fail_at_once(tmp_path: Path, master: MesosMaster) -> None:
    """F's executor command exits 1 at once, as the master's agents run it (TASK_FAILED):
    from its second quick failure in a row on an agent, F rests there (60 s). Once it
    rests on both agents, `explain F --json` gives `resting` on both with the time left,
    and nothing else (the room is there: nothing is `full` or `refused`)."""
    home = tmp_path / "broken-spark"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "spark-class").write_text("#!/bin/bash\nexit 1\n")
    (home / "bin" / "spark-class").chmod(0o755)
    with mesos_broker(tmp_path, master, spark=home, scheduler="drf") as service:
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
