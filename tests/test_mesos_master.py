"""Conformance of the test Mesos master (tests/mesos_master) to the v1 scheduler API.

Expectations come from the master's source as summarised in shared/notes/mesos_api.md
(`Master::Http::scheduler`, `validation.cpp`, the command executor, the allocator), not
from the emulator's code: raw HTTP over sockets, RecordIO decoded by the test client, and
the real pymesos 0.3.15 client at the end.
"""

from __future__ import annotations

import base64
import http.client
import itertools
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mesos_master import AgentSpec, MesosMaster, SchedulerStream
from mesos_master.wire import RecordIODecoder, encode_record
from support.polling import wait_for
from support.real_mesos import SKIP_REASON, RealMesos, assert_none_left, mesos_home

from allocator.backends.base import AgentInfo

FRAMEWORK = {"user": "root", "name": "conformance"}
A1 = AgentSpec("a1", {"cpus": 4, "mem": 2048, "disk": 1000}, {"rack": "r1", "gen": 3})
A2 = AgentSpec("a2", {"cpus": 2, "mem": 1024})


def allocation_runs(master, runs: int) -> None:
    """Let `runs` of the master's allocation runs (0.1 s apart) pass before looking for what
    must not have come: counted on the test master, where a busy machine would stretch a
    sleep's worth of runs into fewer; timed on a real master (nothing to count there)."""
    core = getattr(master, "core", None)
    if core is None:
        time.sleep(runs * 0.1)
        return
    target = core.allocations + runs
    deadline = time.monotonic() + 60
    while core.allocations < target:
        assert time.monotonic() < deadline, (core.allocations, target)
        time.sleep(0.01)


@pytest.fixture
def master(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MesosMaster]:
    """The test master, or (parametrised "real" through BOTH) a real Mesos 1.11.0 master
    with the same two agents: the tests marked BOTH describe Mesos and hold for either."""
    if getattr(request, "param", "test") == "real":
        if mesos_home() is None:
            pytest.skip(SKIP_REASON)
        agents = [AgentInfo(a.name, f"127.0.4.{k + 1}", dict(a.resources),
                            {n: str(v) for n, v in a.attributes.items()})
                  for k, a in enumerate((A1, A2))]  # fmt: skip
        with RealMesos(agents, work_dir=tmp_path / "real", allocation_interval=0.1) as real:
            yield real  # type: ignore[misc]  (the same introspection, duck-typed)
        assert_none_left(tmp_path / "real", "the real master")
        return
    with MesosMaster([A1, A2], allocation_interval=0.1, heartbeat_interval=0.3,
                     status_update_retry=0.5, seed=7) as m:  # fmt: skip
        yield m


# The conformance tests run against both masters (the real one when this machine has it).
BOTH = pytest.mark.parametrize("master", ["test", "real"], indirect=True)


@pytest.fixture
def subscribe(master: MesosMaster) -> Iterator[Callable[..., SchedulerStream]]:
    opened: list[SchedulerStream] = []

    def open_stream(info: dict[str, Any] | None = None, **kwargs: Any) -> SchedulerStream:
        stream = SchedulerStream(master.address, info or FRAMEWORK, **kwargs).open()
        opened.append(stream)
        return stream

    yield open_stream
    for stream in opened:
        stream.close()


def scalar(name: str, value: float) -> dict[str, Any]:
    return {"name": name, "type": "SCALAR", "scalar": {"value": value}}


def task_info(task_id: str, offer: dict[str, Any], command: str | dict[str, Any],
              cpus: float = 0.5, mem: float = 64, **extra: Any) -> dict[str, Any]:  # fmt: skip
    cmd = {"value": command} if isinstance(command, str) else command
    return {
        "name": task_id, "task_id": {"value": task_id}, "agent_id": offer["agent_id"],
        "resources": [scalar("cpus", cpus), scalar("mem", mem)], "command": cmd, **extra,
    }  # fmt: skip


def launch(stream: SchedulerStream, offers: list[dict[str, Any]], tasks: list[dict[str, Any]],
           filters: dict[str, Any] | None = None) -> tuple[int, str]:  # fmt: skip
    accept: dict[str, Any] = {
        "offer_ids": [o["id"] for o in offers],
        "operations": [{"type": "LAUNCH", "launch": {"task_infos": tasks}}],
    }
    if filters is not None:
        accept["filters"] = filters
    return stream.framework_call("ACCEPT", accept=accept)


def next_update(stream: SchedulerStream, task_id: str, state: str | None = None,
                timeout: float = 10.0) -> dict[str, Any]:  # fmt: skip
    event = stream.wait_event(
        lambda e: e.get("type") == "UPDATE"
        and e["update"]["status"]["task_id"]["value"] == task_id
        and (state is None or e["update"]["status"]["state"] == state),
        timeout, what=f"UPDATE {task_id} {state or ''}",
    )  # fmt: skip
    return dict(event["update"]["status"])


def ack(stream: SchedulerStream, status: dict[str, Any]) -> None:
    code, body = stream.framework_call("ACKNOWLEDGE", acknowledge={
        "agent_id": status["agent_id"], "task_id": status["task_id"], "uuid": status["uuid"],
    })  # fmt: skip
    assert code == 202, body


def run_to_end(stream: SchedulerStream, task_id: str) -> list[dict[str, Any]]:
    """Acknowledge every update of a task until a terminal one; returns them."""
    seen = []
    while True:
        status = next_update(stream, task_id)
        seen.append(status)
        if "uuid" in status:
            ack(stream, status)
        if status["state"] not in ("TASK_STAGING", "TASK_STARTING", "TASK_RUNNING",
                                   "TASK_KILLING"):  # fmt: skip
            return seen


def offer_on(stream: SchedulerStream, agent_id: str, timeout: float = 5.0) -> dict[str, Any]:
    event = stream.wait_event(
        lambda e: e.get("type") == "OFFERS"
        and any(o["agent_id"]["value"] == agent_id for o in e["offers"]["offers"]),
        timeout, what=f"an offer on {agent_id}",
    )  # fmt: skip
    return next(o for o in event["offers"]["offers"] if o["agent_id"]["value"] == agent_id)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of ours is dead too.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


Answer = tuple[int, dict[str, str], bytes]


def raw_request(master: MesosMaster, method: str, path: str, body: bytes = b"",
                headers: dict[str, str] | None = None) -> Answer:  # fmt: skip
    host, port = master.address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


# RecordIO and the stream ------------------------------------------------------------------


def test_recordio_frames_byte_counts_and_decodes_across_chunk_boundaries() -> None:
    assert encode_record(b"hello") == b"5\nhello"
    assert encode_record("é".encode()) == b"2\n\xc3\xa9"  # bytes, not characters
    stream = b"5\nhello3\nabc" + b"11\n" + b"x" * 11
    decoder = RecordIODecoder()
    records = [r for i in range(len(stream)) for r in decoder.feed(stream[i : i + 1])]
    assert records == [b"hello", b"abc", b"x" * 11]


def test_subscribe_answers_a_chunked_recordio_stream(master: MesosMaster, subscribe) -> None:
    stream = subscribe()
    assert stream.status == 200
    assert stream.headers["content-type"] == "application/json"
    assert stream.headers["transfer-encoding"] == "chunked"
    uuid.UUID(stream.headers["mesos-stream-id"])  # a UUID string
    first = stream.next_event()
    assert first["type"] == "SUBSCRIBED"
    assert first["subscribed"]["framework_id"]["value"] == f"{master.master_id}-0000"
    assert first["subscribed"]["heartbeat_interval_seconds"] == 0.3
    info = first["subscribed"]["master_info"]
    assert info["id"] == master.master_id and info["port"] == master.core.port
    assert info["ip"] == 16777343  # 127.0.0.1 in network byte order
    for chunk in stream.chunks:
        size, _, data = chunk.partition(b"\n")
        assert int(size) == len(data)
        json.loads(data)
    assert json.loads(stream.chunks[0].partition(b"\n")[2]) == first


def test_heartbeat_follows_subscribed_at_once_then_every_interval(subscribe) -> None:
    stream = subscribe()
    stream.next_event("SUBSCRIBED")
    assert stream.next_event()["type"] == "HEARTBEAT"  # before anything else, offers included
    for _ in range(3):
        stream.next_event("HEARTBEAT", timeout=2)
    beats = [t for e, t in zip(stream.received, stream.received_at, strict=True)
             if e["type"] == "HEARTBEAT"]  # fmt: skip
    subscribed_at = stream.received_at[0]
    assert beats[0] - subscribed_at < 0.1
    gaps = [b - a for a, b in itertools.pairwise(beats[1:])]
    assert all(0.2 <= gap <= 0.6 for gap in gaps), gaps


@BOTH
def test_subscribed_names_the_heartbeat_interval_and_a_heartbeat_follows_at_once(
    master: MesosMaster, subscribe
) -> None:
    """SUBSCRIBED carries `heartbeat_interval_seconds` (a real master's is fixed at 15 s; the
    test master's is configurable, 0.3 s here) and the first HEARTBEAT comes right after it
    (within a third of the real master's interval), with nothing but offers in between: a
    framework can arm its missed-heartbeat timer from SUBSCRIBED. On a busy machine the real
    master sent an OFFERS event before that first HEARTBEAT in 1 of 6 runs."""
    stream = subscribe()
    first = stream.next_event("SUBSCRIBED")
    interval = first["subscribed"]["heartbeat_interval_seconds"]
    assert interval == (15.0 if isinstance(master, RealMesos) else 0.3)
    heartbeat = stream.next_event("HEARTBEAT", timeout=5)
    events = stream.received
    start = next(i for i, e in enumerate(events) if e is first)
    end = next(i for i, e in enumerate(events) if e is heartbeat)
    assert {e.get("type") for e in events[start + 1 : end]} <= {"OFFERS"}


@BOTH
def test_master_prefixed_scheduler_path_is_routed_too(master: MesosMaster) -> None:
    status, headers, _ = raw_request(master, "GET", "/master/api/v1/scheduler")
    assert status == 405 and headers["allow"] == "POST"


# Error answers in the master's order ------------------------------------------------------

SUBSCRIBE_CALL = {"type": "SUBSCRIBE", "subscribe": {"framework_info": FRAMEWORK}}


@BOTH
@pytest.mark.parametrize(
    ("method", "headers", "body", "status", "message"),
    [
        ("GET", {}, b"", 405, "Expecting one of { 'POST' }, but received 'GET'"),
        ("POST", {}, b"{}", 400, "Expecting 'Content-Type' to be present"),
        ("POST", {"Content-Type": "application/json; charset=utf-8"},
         json.dumps(SUBSCRIBE_CALL).encode(), 415, "Expecting 'Content-Type' of application/json"),
        ("POST", {"Content-Type": "text/plain"}, b"not json", 415, "Expecting 'Content-Type'"),
        ("POST", {"Content-Type": "application/json"}, b"{nope", 400,
         "Failed to parse body into JSON"),
        ("POST", {"Content-Type": "application/json"}, b"[1]", 400,
         "Failed to convert JSON into Call protobuf"),
        ("POST", {"Content-Type": "application/json"},
         json.dumps({"type": "SUBSCRIBE", "subscribe": {"framework_info": {"name": "x"}}}).encode(),
         400, "Missing required fields: subscribe.framework_info.user"),
        ("POST", {"Content-Type": "application/json"}, b"{}", 400,
         "Failed to validate scheduler::Call: Expecting 'type' to be present"),
        ("POST", {"Content-Type": "application/json"}, b'{"type": "NOT_A_CALL"}', 400,
         "Expecting 'type' to be present"),  # an unknown enum value is dropped
        ("POST", {"Content-Type": "application/json"},
         json.dumps({**SUBSCRIBE_CALL, "framework_id": {"value": "x"}}).encode(), 400,
         "'framework_id' differs from 'subscribe.framework_info.id'"),
        ("POST", {"Content-Type": "application/json", "Accept": "text/html"},
         json.dumps(SUBSCRIBE_CALL).encode(), 406, "Expecting 'Accept' to allow"),
        ("POST", {"Content-Type": "application/json", "Mesos-Stream-Id": str(uuid.uuid4())},
         json.dumps(SUBSCRIBE_CALL).encode(), 400,
         "Subscribe calls should not include the 'Mesos-Stream-Id' header"),
        ("POST", {"Content-Type": "application/json"}, b'{"type": "DECLINE"}', 400,
         "Expecting 'framework_id' to be present"),
        ("POST", {"Content-Type": "application/json"},
         b'{"type": "DECLINE", "framework_id": {"value": "f"}}', 400,
         "Expecting 'decline' to be present"),
        ("POST", {"Content-Type": "application/json"},
         b'{"type": "DECLINE", "framework_id": {"value": "f"}, "decline": {}}', 400,
         "Framework cannot be found"),
        ("POST", {"Content-Type": "application/json"},
         json.dumps({"type": "ACKNOWLEDGE", "framework_id": {"value": "f"}, "acknowledge": {
             "agent_id": {"value": "a"}, "task_id": {"value": "t"},
             "uuid": base64.b64encode(b"short").decode()}}).encode(), 400, "Not a valid UUID"),
        ("POST", {"Content-Type": "application/json"},
         b'{"type": "REVIVE", "framework_id": {"value": "f"}}', 400, "Framework cannot be found"),
    ],
)  # fmt: skip
def test_scheduler_endpoint_rejects_in_the_masters_order(
    master: MesosMaster, method: str, headers: dict[str, str], body: bytes, status: int,
    message: str,
) -> None:  # fmt: skip
    got, _, text = raw_request(master, method, "/api/v1/scheduler", body, headers)
    assert got == status
    assert message in text.decode()


def test_framework_checks_come_in_order_403_then_stream_id(master: MesosMaster,
                                                          subscribe) -> None:  # fmt: skip
    stream = subscribe({**FRAMEWORK, "failover_timeout": 60.0})
    fid = stream.framework_id
    revive = {"type": "REVIVE", "framework_id": {"value": fid}}
    assert stream.call(revive, stream_id=None) == (
        400,
        "All non-subscribe calls should include the 'Mesos-Stream-Id' header",
    )
    code, text = stream.call(revive, stream_id="not-the-stream")
    assert code == 400 and "didn't match the stream ID" in text
    assert stream.call(revive)[0] == 202
    master.drop_stream(fid)
    master.wait_for(lambda: not master.frameworks()[0].connected, what="disconnect")
    # Not connected beats a missing stream id.
    assert stream.call(revive, stream_id=None) == (403, "Framework is not subscribed")
    assert stream.call(revive)[0] == 403


@BOTH
def test_unknown_paths_get_404(master: MesosMaster) -> None:
    assert raw_request(master, "GET", "/master/nothing-here")[0] == 404
    assert raw_request(master, "GET", "/slave(1)/state")[0] == 404


# Offers ------------------------------------------------------------------------------------


@BOTH
def test_offers_are_nested_and_carry_each_agents_remainder(master: MesosMaster,
                                                          subscribe) -> None:  # fmt: skip
    stream = subscribe()
    by_agent: dict[str, dict[str, Any]] = {}
    while len(by_agent) < 2:
        event = stream.next_event("OFFERS")
        assert set(event) == {"type", "offers"} and set(event["offers"]) == {"offers"}
        for offer in event["offers"]["offers"]:
            by_agent[offer["agent_id"]["value"]] = offer
    one, two = by_agent[master.agent_id("a1")], by_agent[master.agent_id("a2")]
    assert one["id"]["value"].startswith(f"{master.master_id}-O")
    assert master.agent_id("a1").startswith(f"{master.master_id}-S")
    assert one["framework_id"]["value"] == stream.framework_id
    assert one["hostname"] == master.hostname("a1") and one["hostname"].startswith("127.")
    assert one["hostname"] != two["hostname"]
    scalars = [r for r in one["resources"] if r["type"] == "SCALAR"]
    assert {r["name"]: r["scalar"]["value"] for r in scalars} == {
        "cpus": 4.0,
        "mem": 2048.0,
        "disk": 1000.0,
    }
    assert all(r["role"] == "*" for r in one["resources"])
    # A real agent also offers its default port range (the test master: scalars only).
    others = [(r["name"], r["type"]) for r in one["resources"] if r["type"] != "SCALAR"]
    assert others in ([], [("ports", "RANGES")])
    # Not MULTI_ROLE: allocation info is stripped from the offer and its resources.
    assert "allocation_info" not in one
    assert all("allocation_info" not in r for r in one["resources"])
    attrs = {a["name"]: a for a in one["attributes"]}
    assert attrs["rack"] == {"name": "rack", "type": "TEXT", "text": {"value": "r1"}}
    assert attrs["gen"] == {"name": "gen", "type": "SCALAR", "scalar": {"value": 3.0}}
    assert "attributes" not in two  # an empty repeated field is not printed


@BOTH
def test_multi_role_offers_carry_allocation_info(master: MesosMaster, subscribe) -> None:
    stream = subscribe({**FRAMEWORK, "roles": ["spark"],
                        "capabilities": [{"type": "MULTI_ROLE"}]})  # fmt: skip
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    assert offer["allocation_info"] == {"role": "spark"}
    assert all(r["allocation_info"] == {"role": "spark"} for r in offer["resources"])


@BOTH
@pytest.mark.parametrize(
    ("info", "message"),
    [
        ({**FRAMEWORK, "roles": ["a"]}, "'FrameworkInfo.roles' must not be set"),
        ({**FRAMEWORK, "role": "a", "capabilities": [{"type": "MULTI_ROLE"}]},
         "'FrameworkInfo.role' must not be set"),
        ({**FRAMEWORK, "roles": ["a", "a"], "capabilities": [{"type": "MULTI_ROLE"}]},
         "duplicate"),
    ],
)  # fmt: skip
def test_invalid_framework_info_gets_200_then_error_event(master: MesosMaster, subscribe,
                                                         info: dict[str, Any],
                                                         message: str) -> None:  # fmt: skip
    stream = subscribe(info)
    assert stream.status == 200
    event = stream.next_event()
    assert event["type"] == "ERROR" and set(event) == {"type", "error"}
    assert message in event["error"]["message"]
    assert stream.ended.wait(5) and stream.clean_end


def test_allocation_shuffles_agents_each_cycle() -> None:
    specs = [AgentSpec(f"s{i}", {"cpus": 1, "mem": 256}) for i in range(6)]
    with (
        MesosMaster(specs, allocation_interval=0.05, seed=11) as m,
        SchedulerStream(m.address, FRAMEWORK) as stream,
    ):
        orders = []
        for _ in range(6):
            event = stream.next_event("OFFERS")
            offers = event["offers"]["offers"]
            orders.append(tuple(o["hostname"] for o in offers))
            code, _ = stream.framework_call(
                "DECLINE",
                decline={"offer_ids": [o["id"] for o in offers], "filters": {"refuse_seconds": 0}},
            )
            assert code == 202
        assert all(len(order) == 6 for order in orders)
        assert len(set(orders)) > 1  # 6! orders: a fixed order would repeat every cycle


def test_whole_remainder_goes_to_the_framework_with_the_lower_share() -> None:
    with MesosMaster([AgentSpec("solo", {"cpus": 4, "mem": 4096})], allocation_interval=0.1,
                     seed=3) as m:  # fmt: skip
        first = SchedulerStream(m.address, {**FRAMEWORK, "name": "first"}).open()
        try:
            offer = first.next_event("OFFERS")["offers"]["offers"][0]
            second = SchedulerStream(m.address, {**FRAMEWORK, "name": "second"}).open()
            try:
                second.next_event("SUBSCRIBED")
                launch(first, [offer], [task_info("hold", offer, "sleep 30", cpus=1, mem=128)],
                       filters={"refuse_seconds": 0})  # fmt: skip
                # `first` now holds 1 cpu; `second` holds nothing, so DRF picks it.
                remainder = offer_on(second, m.agent_id("solo"))
                assert {r["name"]: r["scalar"]["value"] for r in remainder["resources"]} == {
                    "cpus": 3.0,
                    "mem": 3968.0,
                }
                assert not first.unread("OFFERS")
            finally:
                second.close()
        finally:
            first.close()


# Filters, REVIVE, SUPPRESS -----------------------------------------------------------------


def test_decline_without_filters_refuses_for_the_5s_default(master: MesosMaster,
                                                           subscribe) -> None:  # fmt: skip
    stream = subscribe()
    a2 = master.agent_id("a2")
    offer = offer_on(stream, a2)
    declined_at = time.time()
    assert stream.framework_call("DECLINE", decline={"offer_ids": [offer["id"]]})[0] == 202
    stream.skip_all()
    allocation_runs(master, 15)
    assert not [o for e in stream.unread("OFFERS") for o in e["offers"]["offers"]
                if o["agent_id"]["value"] == a2]  # fmt: skip
    (refused,) = [f for f in master.core.filters if f.agent_id == a2]
    assert refused.expires - declined_at == pytest.approx(5.0, abs=0.3)
    # REVIVE clears the filter and allocates at once.
    assert stream.framework_call("REVIVE")[0] == 202
    offer_on(stream, a2, timeout=1.0)


@BOTH
def test_a_declined_offer_returns_after_the_5s_default_filter_or_at_once_on_revive(
    master: MesosMaster, subscribe
) -> None:
    """Seen on the stream only: an offer declined without filters comes back after the
    default 5 s refusal (not at the next allocation), and REVIVE clears the filter."""
    stream = subscribe()
    a2 = master.agent_id("a2")
    offer = offer_on(stream, a2)
    assert stream.framework_call("DECLINE", decline={"offer_ids": [offer["id"]]})[0] == 202
    declined = time.monotonic()
    again = offer_on(stream, a2, timeout=15)
    waited = time.monotonic() - declined
    assert 4.8 <= waited < 10, waited  # 5 s, plus up to an allocation cycle and some load
    assert stream.framework_call("DECLINE", decline={"offer_ids": [again["id"]]})[0] == 202
    declined = time.monotonic()
    assert stream.framework_call("REVIVE")[0] == 202
    offer_on(stream, a2, timeout=10)
    assert time.monotonic() - declined < 4.5  # before the new 5 s filter would expire


@BOTH
def test_refuse_seconds_is_honoured_and_zero_installs_no_filter(master: MesosMaster,
                                                               subscribe) -> None:  # fmt: skip
    stream = subscribe()
    a2 = master.agent_id("a2")
    offer = offer_on(stream, a2)
    stream.framework_call("DECLINE", decline={"offer_ids": [offer["id"]],
                                              "filters": {"refuse_seconds": 0.6}})  # fmt: skip
    declined = time.monotonic()
    offer = offer_on(stream, a2, timeout=3)
    assert time.monotonic() - declined >= 0.55
    stream.framework_call("DECLINE", decline={"offer_ids": [offer["id"]],
                                              "filters": {"refuse_seconds": 0}})  # fmt: skip
    declined = time.monotonic()
    offer_on(stream, a2, timeout=4)
    # no filter: back at a next allocation, not after the default 5 s (a loaded machine
    # may take a few allocation cycles)
    assert time.monotonic() - declined < 2.5


def test_filter_hides_only_offers_that_fit_inside_the_refused_resources(
    master: MesosMaster, subscribe
) -> None:
    stream = subscribe()
    a2 = master.agent_id("a2")
    offer = offer_on(stream, a2)
    # Use 1 cpu for a short task; refuse the rest (1 cpu, 960 MiB) for a minute.
    launch(stream, [offer], [task_info("short", offer, "sleep 0.3", cpus=1, mem=64)],
           filters={"refuse_seconds": 60})  # fmt: skip
    run_to_end(stream, "short")
    # Once the task ends the agent has more than the refused remainder: offered again.
    again = offer_on(stream, a2, timeout=3)
    assert {r["name"]: r["scalar"]["value"] for r in again["resources"]} == {
        "cpus": 2.0,
        "mem": 1024.0,
    }


def test_suppress_and_revive_by_role(master: MesosMaster, subscribe) -> None:
    stream = subscribe({**FRAMEWORK, "roles": ["r1", "r2"],
                        "capabilities": [{"type": "MULTI_ROLE"}]})  # fmt: skip
    stream.next_event("OFFERS")
    fid = stream.framework_id
    assert stream.framework_call("SUPPRESS")[0] == 202  # no body: all roles
    assert master.frameworks()[0].suppressed == {"r1", "r2"}
    for offer in master.offers():
        stream.framework_call("DECLINE", decline={"offer_ids": [{"value": offer.id}],
                                                  "filters": {"refuse_seconds": 0}})  # fmt: skip
    stream.skip_all()
    allocation_runs(master, 5)
    assert not stream.unread("OFFERS")
    # A role the framework does not have makes the master drop the call (still 202).
    assert stream.framework_call("REVIVE", revive={"roles": ["elsewhere"]})[0] == 202
    allocation_runs(master, 3)
    assert not stream.unread("OFFERS")
    assert stream.framework_call("REVIVE", revive={"roles": ["r2"]})[0] == 202
    event = stream.next_event("OFFERS", timeout=2)
    assert {o["allocation_info"]["role"] for o in event["offers"]["offers"]} == {"r2"}
    assert master.frameworks()[0].suppressed == {"r1"}
    assert master.calls("REVIVE")[-1].framework_id == fid


def outstanding_offers(master: MesosMaster) -> list[str]:
    """Offer ids the master counts as outstanding, from /master/state (both masters)."""
    _, _, body = raw_request(master, "GET", "/master/state")
    return [o["id"] for f in json.loads(body)["frameworks"] for o in f.get("offers", [])]


@BOTH
def test_a_filter_hides_only_offers_that_fit_inside_what_was_refused(
    master: MesosMaster, subscribe
) -> None:
    """Seen on the stream: the remainder of an accepted offer refused for a minute is not
    offered again while the agent has only that much; once the task ends, the agent has
    more than was refused and is offered at once, whole (a real agent also offers disk and
    ports: only cpus and mem are compared)."""
    stream = subscribe()
    a2 = master.agent_id("a2")
    offer = offer_on(stream, a2)
    launch(stream, [offer], [task_info("short", offer, "sleep 1", cpus=1, mem=64)],
           filters={"refuse_seconds": 60})  # fmt: skip
    started = time.monotonic()
    run_to_end(stream, "short")
    again = offer_on(stream, a2, timeout=10)
    assert time.monotonic() - started < 30  # well before the 60 s filter would expire
    offered = {r["name"]: r["scalar"]["value"] for r in again["resources"]
               if r["type"] == "SCALAR" and r["name"] in ("cpus", "mem")}  # fmt: skip
    assert offered == {"cpus": 2.0, "mem": 1024.0}
    earlier = [o for e in stream.received if e.get("type") == "OFFERS"
               for o in e["offers"]["offers"]
               if o["agent_id"]["value"] == a2 and o["id"] != again["id"]]  # fmt: skip
    assert [o["id"] for o in earlier] == [offer["id"]]  # nothing of a2 while it ran


@BOTH
def test_suppress_and_revive_by_role_seen_on_the_stream(master: MesosMaster, subscribe) -> None:
    """Seen on the stream and /master/state only: SUPPRESS without a body stops offers for
    every role; REVIVE of a role the framework lacks changes nothing (still 202); REVIVE of
    one role brings offers of that role only."""
    stream = subscribe({**FRAMEWORK, "roles": ["r1", "r2"],
                        "capabilities": [{"type": "MULTI_ROLE"}]})  # fmt: skip
    stream.next_event("OFFERS")
    assert stream.framework_call("SUPPRESS")[0] == 202  # no body: all roles
    declined: set[str] = set()
    for _ in range(3):  # an offer made just before the SUPPRESS is handed back too
        for offer_id in outstanding_offers(master):
            code, _ = stream.framework_call("DECLINE", decline={
                "offer_ids": [{"value": offer_id}], "filters": {"refuse_seconds": 0}})  # fmt: skip
            assert code == 202
            declined.add(offer_id)
        wait_for(lambda: not outstanding_offers(master), 5, "the declines to be processed")
    allocation_runs(master, 5)  # a suppressed framework gets nothing new
    late = {o["id"]["value"] for e in stream.unread("OFFERS") for o in e["offers"]["offers"]}
    assert late <= declined and not outstanding_offers(master), (late, declined)
    stream.skip_all()
    assert stream.framework_call("REVIVE", revive={"roles": ["elsewhere"]})[0] == 202
    allocation_runs(master, 3)
    assert not stream.unread("OFFERS") and not outstanding_offers(master)
    assert stream.framework_call("REVIVE", revive={"roles": ["r2"]})[0] == 202
    event = stream.next_event("OFFERS", timeout=5)
    assert {o["allocation_info"]["role"] for o in event["offers"]["offers"]} == {"r2"}


# Launch, status updates, acknowledgements -------------------------------------------------


def test_launch_reports_starting_running_finished_each_awaiting_its_ack(
    master: MesosMaster, subscribe
) -> None:
    stream = subscribe()
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    assert launch(stream, [offer], [task_info("echo", offer, "echo hi")]) == (202, "")
    starting = next_update(stream, "echo")
    assert starting["state"] == "TASK_STARTING"
    assert starting["source"] == "SOURCE_EXECUTOR"
    assert starting["agent_id"] == offer["agent_id"]
    assert starting["executor_id"] == {"value": "echo"}
    assert len(base64.b64decode(starting["uuid"])) == 16
    # Unacknowledged, the update is retried (same uuid) and nothing newer is sent.
    retried = next_update(stream, "echo", timeout=3)
    assert retried["uuid"] == starting["uuid"] and retried["state"] == "TASK_STARTING"
    ack(stream, retried)
    running = next_update(stream, "echo")
    assert running["state"] == "TASK_RUNNING" and running["uuid"] != starting["uuid"]
    ack(stream, running)
    finished = next_update(stream, "echo")
    assert finished["state"] == "TASK_FINISHED"
    assert finished["message"] == "Command exited with status 0"
    ack(stream, finished)
    master.wait_for(lambda: master.task("echo").state == "TASK_FINISHED", what="finished")
    assert master.task("echo").states == (
        "TASK_STAGING",
        "TASK_STARTING",
        "TASK_RUNNING",
        "TASK_FINISHED",
    )
    sandbox = master.sandbox("echo")
    assert sandbox is not None and (sandbox / "stdout").read_text() == "hi\n"
    _, _, body = raw_request(master, "GET", "/master/state")
    framework = json.loads(body)["frameworks"][0]
    assert [t["id"] for t in framework["completed_tasks"]] == ["echo"]
    assert framework["tasks"] == []


@BOTH
def test_updates_come_one_at_a_time_each_after_the_previous_ack(
    master: MesosMaster, subscribe
) -> None:
    """Seen on the stream and /master/state: STARTING (from the executor, a 16-byte uuid),
    nothing newer until it is acknowledged, then RUNNING, then FINISHED with the command's
    exit message; the task ends among the completed tasks."""
    stream = subscribe()
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    assert launch(stream, [offer], [task_info("echo", offer, "echo hi")]) == (202, "")
    starting = next_update(stream, "echo")
    assert starting["state"] == "TASK_STARTING"
    assert starting["source"] == "SOURCE_EXECUTOR"
    assert starting["agent_id"] == offer["agent_id"]
    assert len(base64.b64decode(starting["uuid"])) == 16
    time.sleep(1.0)  # unacknowledged: at most the same update again, nothing newer
    for event in stream.unread("UPDATE"):
        assert event["update"]["status"]["uuid"] == starting["uuid"], event
    ack(stream, starting)
    running = next_update(stream, "echo", "TASK_RUNNING")
    assert running["uuid"] != starting["uuid"]
    ack(stream, running)
    finished = next_update(stream, "echo", "TASK_FINISHED")
    assert finished["message"] == "Command exited with status 0"
    ack(stream, finished)

    def completed() -> list[str]:
        _, _, body = raw_request(master, "GET", "/master/state")
        (framework,) = json.loads(body)["frameworks"]
        assert framework["tasks"] == [] or framework["tasks"][0]["id"] == "echo"
        return [t["id"] for t in framework["completed_tasks"]]

    wait_for(lambda: completed() == ["echo"], 10, "echo among the completed tasks")


def test_command_exit_status_environment_and_arguments(master: MesosMaster, subscribe) -> None:
    stream = subscribe()
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    failing = task_info("fails", offer, "exit 3")
    argv = task_info("argv", offer, {
        "shell": False, "value": "/bin/sh", "arguments": ["sh", "-c", 'echo "$GREETING $0"'],
        "environment": {"variables": [{"name": "GREETING", "value": "hello"}]},
    })  # fmt: skip
    assert launch(stream, [offer], [failing, argv])[0] == 202
    assert run_to_end(stream, "fails")[-1]["message"] == "Command exited with status 3"
    assert run_to_end(stream, "argv")[-1]["state"] == "TASK_FINISHED"
    assert master.task("fails").state == "TASK_FAILED"
    sandbox = master.sandbox("argv")
    assert sandbox is not None and (sandbox / "stdout").read_text() == "hello sh\n"


def test_kill_sends_sigterm_then_sigkill_after_the_grace_period(master: MesosMaster,
                                                               subscribe) -> None:  # fmt: skip
    stream = subscribe({**FRAMEWORK, "capabilities": [{"type": "TASK_KILLING_STATE"}]})
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    stubborn = task_info(
        "stubborn", offer, "trap '' TERM; sleep 60 & echo $! > child; echo $$ > pid; wait",
        kill_policy={"grace_period": {"nanoseconds": 300_000_000}},
    )  # fmt: skip
    polite = task_info("polite", offer, "sleep 60")
    launch(stream, [offer], [stubborn, polite])
    for task_id in ("stubborn", "polite"):
        for state in ("TASK_STARTING", "TASK_RUNNING"):
            ack(stream, next_update(stream, task_id, state))
    sandbox = master.sandbox("stubborn")
    assert sandbox is not None
    master.wait_for(lambda: (sandbox / "child").exists() and (sandbox / "pid").exists())
    pids = [int((sandbox / name).read_text()) for name in ("pid", "child")]
    for task_id in ("stubborn", "polite"):
        assert stream.framework_call("KILL", kill={"task_id": {"value": task_id}})[0] == 202
    asked = time.monotonic()
    killing = next_update(stream, "stubborn", "TASK_KILLING")
    assert killing["source"] == "SOURCE_EXECUTOR"
    ack(stream, killing)  # TASK_KILLED is not sent before this acknowledgement
    polite_end = [s for s in run_to_end(stream, "polite") if s["state"] != "TASK_KILLING"]
    assert polite_end[-1]["state"] == "TASK_KILLED"
    assert polite_end[-1]["message"] == "Command terminated with signal Terminated"
    killed = next_update(stream, "stubborn", "TASK_KILLED", timeout=5)
    assert time.monotonic() - asked >= 0.25  # it ignored SIGTERM for the grace period
    assert killed["message"] == "Command terminated with signal Killed"
    master.wait_for(lambda: not any(alive(pid) for pid in pids), timeout=5,
                    what="the task's process group to die")  # fmt: skip


@BOTH
def test_kill_honours_the_grace_period_seen_from_outside(
    master: MesosMaster, subscribe, tmp_path: Path
) -> None:
    """KILL seen from the stream and the tasks' own processes: TASK_KILLING first (with the
    capability), a task that ignores SIGTERM is SIGKILLed after its kill_policy grace
    period, one that does not ends on SIGTERM, and no process of either is left."""
    stream = subscribe({**FRAMEWORK, "capabilities": [{"type": "TASK_KILLING_STATE"}]})
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    pid, child = tmp_path / "stubborn.pid", tmp_path / "stubborn.child"
    stubborn = task_info(
        "stubborn", offer, f"trap '' TERM; sleep 60 & echo $! > {child}; echo $$ > {pid}; wait",
        kill_policy={"grace_period": {"nanoseconds": 300_000_000}},
    )  # fmt: skip
    polite = task_info("polite", offer, "sleep 60")
    launch(stream, [offer], [stubborn, polite])
    # The two tasks' updates interleave: take each wanted one as it comes (waiting for one
    # task's first would step past the other's that came before it).
    wanted = {(t, s) for t in ("stubborn", "polite") for s in ("TASK_STARTING", "TASK_RUNNING")}
    while wanted:  # each pass takes one of them
        event = stream.wait_event(
            lambda e: e.get("type") == "UPDATE"
            and (e["update"]["status"]["task_id"]["value"], e["update"]["status"]["state"])
            in wanted,
            10.0, what=f"UPDATE of {sorted(wanted)}",
        )  # fmt: skip
        status = dict(event["update"]["status"])
        wanted.discard((status["task_id"]["value"], status["state"]))
        ack(stream, status)
    wait_for(lambda: child.exists() and pid.exists() and child.read_text().strip()
             and pid.read_text().strip(), 10, "the stubborn task's pids")  # fmt: skip
    pids = [int(path.read_text()) for path in (pid, child)]
    for task_id in ("stubborn", "polite"):
        assert stream.framework_call("KILL", kill={"task_id": {"value": task_id}})[0] == 202
    asked = time.monotonic()
    killing = next_update(stream, "stubborn", "TASK_KILLING")
    assert killing["source"] == "SOURCE_EXECUTOR"
    ack(stream, killing)
    polite_end = [s for s in run_to_end(stream, "polite") if s["state"] != "TASK_KILLING"]
    assert polite_end[-1]["state"] == "TASK_KILLED"
    assert polite_end[-1]["message"] == "Command terminated with signal Terminated"
    killed = next_update(stream, "stubborn", "TASK_KILLED", timeout=10)
    assert time.monotonic() - asked >= 0.25  # it ignored SIGTERM for the grace period
    assert killed["message"] == "Command terminated with signal Killed"
    wait_for(lambda: not any(alive(p) for p in pids), 10, "the task's processes to die")


@BOTH
def test_kill_of_unknown_task_is_answered_by_reconciliation(master: MesosMaster, subscribe) -> None:
    stream = subscribe()
    stream.next_event("SUBSCRIBED")
    assert stream.framework_call("KILL", kill={"task_id": {"value": "ghost"}})[0] == 202
    status = next_update(stream, "ghost")
    assert status["state"] == "TASK_LOST" and status["reason"] == "REASON_RECONCILIATION"
    assert status["source"] == "SOURCE_MASTER" and "uuid" not in status


@BOTH
def test_reconcile_implicit_and_explicit(master: MesosMaster, subscribe) -> None:
    stream = subscribe()
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    launch(stream, [offer], [task_info("long", offer, "sleep 60")])
    for state in ("TASK_STARTING", "TASK_RUNNING"):
        ack(stream, next_update(stream, "long", state))
    assert stream.framework_call("RECONCILE", reconcile={})[0] == 202
    latest = next_update(stream, "long")
    assert latest["state"] == "TASK_RUNNING" and "uuid" not in latest
    assert latest["reason"] == "REASON_RECONCILIATION"
    assert latest["message"] == "Reconciliation: Latest task state"
    assert (
        stream.framework_call(
            "RECONCILE",
            reconcile={"tasks": [{"task_id": {"value": "long"}}, {"task_id": {"value": "never"}}]},
        )[0]
        == 202
    )
    assert next_update(stream, "long")["state"] == "TASK_RUNNING"
    unknown = next_update(stream, "never")
    assert unknown["state"] == "TASK_LOST"
    assert unknown["message"] == "Reconciliation: Task is unknown"


def test_invalid_tasks_get_task_error_and_the_rest_still_launches(master: MesosMaster,
                                                                   subscribe) -> None:  # fmt: skip
    stream = subscribe()
    offer = offer_on(stream, master.agent_id("a2"))
    good = task_info("good", offer, "true", cpus=1, mem=64)
    duplicate = task_info("good", offer, "true", cpus=0.1, mem=32)
    greedy = task_info("greedy", offer, "true", cpus=2, mem=64)  # 1 cpu left after `good`
    neither = {**task_info("neither", offer, "true"), "command": None}
    del neither["command"]
    launch(stream, [offer], [good, duplicate, greedy, neither])
    next_update(stream, "neither")  # the last of the master's answers
    errors = [e["update"]["status"] for e in stream.received if e.get("type") == "UPDATE"
              and e["update"]["status"]["state"] == "TASK_ERROR"]  # fmt: skip
    assert [s["task_id"]["value"] for s in errors] == ["good", "greedy", "neither"]
    dup, greedy_error, neither_error = errors
    assert dup["reason"] == "REASON_TASK_INVALID"
    assert dup["message"] == "Task has duplicate ID: good"
    assert "more than available" in greedy_error["message"]
    assert "CommandInfo or ExecutorInfo" in neither_error["message"]
    assert all("uuid" not in s and s["source"] == "SOURCE_MASTER" for s in errors)
    for state in ("TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED"):
        ack(stream, next_update(stream, "good", state))


def test_accepting_rescinded_or_mixed_offers_loses_the_tasks(master: MesosMaster,
                                                            subscribe) -> None:  # fmt: skip
    stream = subscribe()
    offer, other = stream.next_event("OFFERS")["offers"]["offers"]
    assert master.rescind(offer["id"]["value"])
    rescinded = stream.next_event("RESCIND")
    assert rescinded["rescind"] == {"offer_id": offer["id"]}
    launch(stream, [offer], [task_info("late", offer, "true")])
    lost = next_update(stream, "late")
    assert lost["state"] == "TASK_LOST" and lost["reason"] == "REASON_INVALID_OFFERS"
    assert lost["message"] == (
        f"Task launched with invalid offers: Offer {offer['id']['value']} is no longer valid"
    )
    # Offers of two agents in one ACCEPT are invalid; both go back without a filter.
    reoffer = offer_on(stream, offer["agent_id"]["value"])
    launch(stream, [reoffer, other], [task_info("mixed", reoffer, "true")])
    mixed = next_update(stream, "mixed")
    assert "Aggregated offers must belong to one single agent" in mixed["message"]
    stream.skip_all()
    offer_on(stream, other["agent_id"]["value"], timeout=2)


@BOTH
def test_partition_aware_frameworks_get_task_dropped_for_invalid_offers(
    master: MesosMaster, subscribe
) -> None:
    stream = subscribe({**FRAMEWORK, "capabilities": [{"type": "PARTITION_AWARE"}]})
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    stream.framework_call("DECLINE", decline={"offer_ids": [offer["id"]]})
    launch(stream, [offer], [task_info("late", offer, "true")])
    assert next_update(stream, "late")["state"] == "TASK_DROPPED"


def test_teardown_kills_tasks_and_ends_the_framework(master: MesosMaster, subscribe) -> None:
    stream = subscribe({**FRAMEWORK, "failover_timeout": 60.0})
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    launch(stream, [offer], [task_info("victim", offer, "echo $$ > pid; exec sleep 60")])
    ack(stream, next_update(stream, "victim", "TASK_STARTING"))
    sandbox = master.sandbox("victim")
    assert sandbox is not None
    master.wait_for(lambda: (sandbox / "pid").exists() and (sandbox / "pid").read_text())
    pid = int((sandbox / "pid").read_text())
    fid = stream.framework_id
    assert stream.framework_call("TEARDOWN") == (202, "")
    assert stream.ended.wait(5) and stream.clean_end
    master.wait_for(lambda: not alive(pid), timeout=6, what="the task to be killed")
    assert stream.framework_call("REVIVE") == (400, "Framework cannot be found")
    _, _, body = raw_request(master, "GET", "/master/state")
    state = json.loads(body)
    assert state["frameworks"] == [] and state["completed_frameworks"][0]["id"] == fid
    again = SchedulerStream(master.address, FRAMEWORK, framework_id=fid).open()
    try:
        assert again.next_event()["error"]["message"] == "Framework has been removed"
    finally:
        again.close()


@BOTH
def test_teardown_kills_the_tasks_and_removes_the_framework_seen_from_outside(
    master: MesosMaster, subscribe, tmp_path: Path
) -> None:
    """TEARDOWN seen from the stream, /master/state and the task's own process: the stream
    ends, the task's process is killed and the task is TASK_KILLED in the completed
    framework, calls for it are refused, and its id cannot subscribe again."""
    stream = subscribe({**FRAMEWORK, "failover_timeout": 60.0})
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    pid_file = tmp_path / "victim.pid"
    launch(stream, [offer], [task_info("victim", offer, f"echo $$ > {pid_file}; exec sleep 60")])
    for state in ("TASK_STARTING", "TASK_RUNNING"):
        ack(stream, next_update(stream, "victim", state))
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 10,
             "the task to write its pid")  # fmt: skip
    pid = int(pid_file.read_text())
    assert alive(pid)
    fid = stream.framework_id
    assert stream.framework_call("TEARDOWN") == (202, "")
    assert stream.ended.wait(5) and stream.clean_end
    wait_for(lambda: not alive(pid), 15, "the task's process to be killed")
    code, _ = stream.framework_call("REVIVE")
    assert code == 400

    def completed() -> list[tuple[str, str, str]]:
        _, _, body = raw_request(master, "GET", "/master/state")
        state = json.loads(body)
        assert state["frameworks"] == []
        return [(f["id"], t["id"], t["state"]) for f in state["completed_frameworks"]
                for t in [*f.get("tasks", []), *f.get("completed_tasks", [])]]  # fmt: skip

    wait_for(lambda: completed() == [(fid, "victim", "TASK_KILLED")], 10,
             "the torn-down framework's task to be TASK_KILLED in /master/state")  # fmt: skip
    again = SchedulerStream(master.address, FRAMEWORK, framework_id=fid).open()
    try:
        assert again.next_event()["error"]["message"] == "Framework has been removed"
    finally:
        again.close()


# Operator endpoints -----------------------------------------------------------------------


@BOTH
def test_version_state_and_metrics(master: MesosMaster, subscribe) -> None:
    status, headers, body = raw_request(master, "GET", "/version")
    assert status == 200 and headers["content-type"] == "application/json"
    assert json.loads(body)["version"].startswith("1.")
    stream = subscribe()
    offer = offer_on(stream, master.agent_id("a1"))
    launch(stream, [offer], [task_info("busy", offer, "sleep 60", cpus=1.5, mem=256)],
           filters={"refuse_seconds": 60})  # fmt: skip
    ack(stream, next_update(stream, "busy", "TASK_STARTING"))
    ack(stream, next_update(stream, "busy", "TASK_RUNNING"))
    for path in ("/master/state", "/state"):
        status, _, body = raw_request(master, "GET", path)
        state = json.loads(body)
        assert status == 200 and state["id"] == master.master_id
    slaves = {s["hostname"]: s for s in state["slaves"]}
    a1 = slaves[master.hostname("a1")]
    # (a real agent also lists its default ports range: "ports": "[31000-32000]")
    assert {k: v for k, v in a1["resources"].items() if k != "ports"} == {
        "cpus": 4.0,
        "gpus": 0.0,
        "mem": 2048.0,
        "disk": 1000.0,
    }
    assert a1["used_resources"]["cpus"] == 1.5 and a1["used_resources"]["mem"] == 256.0
    assert a1["attributes"] == {"rack": "r1", "gen": 3}
    (framework,) = state["frameworks"]
    assert framework["role"] == "*" and framework["tasks"][0]["state"] == "TASK_RUNNING"
    assert framework["tasks"][0]["slave_id"] == master.agent_id("a1")
    status, _, body = raw_request(master, "GET", "/metrics/snapshot")
    metrics = json.loads(body)
    assert metrics["master/cpus_total"] == 6.0 and metrics["master/cpus_used"] == 1.5
    assert metrics["master/tasks_running"] == 1.0
    assert metrics["master/outstanding_offers"] == float(len(outstanding_offers(master)))
    assert metrics["master/frameworks_connected"] == 1.0 and metrics["master/elected"] == 1.0


def test_operator_api_get_state(master: MesosMaster, subscribe) -> None:
    subscribe().next_event("OFFERS")
    call = json.dumps({"type": "GET_STATE"}).encode()
    for path in ("/api/v1", "/api/v1/operator", "/master/api/v1"):
        status, headers, body = raw_request(master, "POST", path, call,
                                            {"Content-Type": "application/json"})  # fmt: skip
        assert status == 200 and headers["content-type"] == "application/json"
        answer = json.loads(body)
        assert answer["type"] == "GET_STATE"
    state = answer["get_state"]
    agents = {a["agent_info"]["hostname"]: a for a in state["get_agents"]["agents"]}
    assert agents[master.hostname("a2")]["agent_info"]["id"]["value"] == master.agent_id("a2")
    assert state["get_frameworks"]["frameworks"][0]["framework_info"]["name"] == "conformance"
    assert "tasks" not in state["get_tasks"]  # empty repeated fields are omitted
    assert raw_request(master, "GET", "/api/v1")[0] == 405
    assert raw_request(master, "POST", "/api/v1", call,
                       {"Content-Type": "application/json; charset=utf-8"})[0] == 415  # fmt: skip


# Faults ------------------------------------------------------------------------------------


def test_dropped_stream_then_resubscribe_with_the_framework_id(master: MesosMaster,
                                                              subscribe) -> None:  # fmt: skip
    stream = subscribe({**FRAMEWORK, "failover_timeout": 60.0})
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    fid = stream.framework_id
    launch(stream, [offer], [task_info("keep", offer, "sleep 60")])
    starting = next_update(stream, "keep", "TASK_STARTING")  # not acknowledged
    assert master.drop_stream(fid) == 1
    assert stream.ended.wait(5) and not stream.clean_end  # cut, no last chunk
    view = master.frameworks()[0]
    assert not view.connected and not view.removed
    assert not master.offers()  # a disconnected framework's offers are recovered
    again = subscribe({**FRAMEWORK, "failover_timeout": 60.0}, framework_id=fid)
    assert again.framework_id == fid and again.stream_id != stream.stream_id
    resent = next_update(again, "keep", "TASK_STARTING")
    assert resent["uuid"] == starting["uuid"]  # still waiting for its acknowledgement
    ack(again, resent)
    assert next_update(again, "keep")["state"] == "TASK_RUNNING"


def test_zero_failover_timeout_removes_a_disconnected_framework(master: MesosMaster,
                                                               subscribe) -> None:  # fmt: skip
    stream = subscribe()  # failover_timeout defaults to 0
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    launch(stream, [offer], [task_info("doomed", offer, "sleep 60")])
    next_update(stream, "doomed", "TASK_STARTING")
    master.drop_stream()
    master.wait_for(lambda: master.frameworks()[0].removed, what="framework removal")
    master.wait_for(lambda: master.task("doomed").state == "TASK_KILLED", timeout=6,
                    what="its task killed")  # fmt: skip


def test_master_failover_gives_a_new_id_and_tasks_survive(master: MesosMaster,
                                                         subscribe) -> None:  # fmt: skip
    stream = subscribe({**FRAMEWORK, "failover_timeout": 60.0})
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    fid = stream.framework_id
    launch(stream, [offer], [task_info("survivor", offer, "sleep 60")])
    for state in ("TASK_STARTING", "TASK_RUNNING"):
        ack(stream, next_update(stream, state=state, task_id="survivor"))
    old_id = master.master_id
    new_id = master.fail_over()
    assert new_id != old_id and master.master_id == new_id
    assert stream.ended.wait(5) and not stream.clean_end
    assert stream.framework_call("REVIVE")[0] == 403
    again = subscribe({**FRAMEWORK, "failover_timeout": 60.0}, framework_id=fid)
    subscribed = again.next_event("SUBSCRIBED")["subscribed"]
    assert subscribed["framework_id"]["value"] == fid
    assert subscribed["master_info"]["id"] == new_id
    fresh = again.next_event("OFFERS")["offers"]["offers"][0]
    assert fresh["id"]["value"].startswith(f"{new_id}-O")
    assert again.framework_call("RECONCILE", reconcile={})[0] == 202
    assert next_update(again, "survivor")["state"] == "TASK_RUNNING"


def test_lost_agent_rescinds_its_offers_loses_its_tasks_and_reports_failure(
    master: MesosMaster, subscribe
) -> None:
    stream = subscribe()
    a2 = master.agent_id("a2")
    offer = offer_on(stream, a2)
    launched_at = len(stream.received)
    launch(stream, [offer], [task_info("stranded", offer, "echo $$ > pid; exec sleep 60")],
           filters={"refuse_seconds": 0})  # fmt: skip
    for state in ("TASK_STARTING", "TASK_RUNNING"):
        ack(stream, next_update(stream, "stranded", state))
    # the remainder, offered again: the first offer on a2 since the launch, which a loaded
    # machine may deliver between the two updates (behind the cursor)
    outstanding = wait_for(lambda: next((
        o for e in stream.received[launched_at:] if e.get("type") == "OFFERS"
        for o in e["offers"]["offers"] if o["agent_id"]["value"] == a2), None),
        10, "the remainder of a2 offered again")  # fmt: skip
    sandbox = master.sandbox("stranded")
    assert sandbox is not None
    pid = int((sandbox / "pid").read_text())
    assert master.lose_agent("a2") == a2
    assert stream.next_event("RESCIND")["rescind"]["offer_id"] == outstanding["id"]
    lost = next_update(stream, "stranded")
    assert lost["state"] == "TASK_LOST" and lost["reason"] == "REASON_SLAVE_REMOVED"
    assert lost["source"] == "SOURCE_MASTER" and "uuid" not in lost
    assert stream.next_event("FAILURE")["failure"] == {"agent_id": {"value": a2}}
    assert not alive(pid)
    stream.skip_all()
    allocation_runs(master, 4)
    assert all(o["agent_id"]["value"] != a2 for e in stream.unread("OFFERS")
               for o in e["offers"]["offers"])  # fmt: skip


def test_offer_timeout_rescinds_and_reoffers_without_filter() -> None:
    with MesosMaster([A2], allocation_interval=0.1, offer_timeout=0.3, seed=5) as m, \
            SchedulerStream(m.address, FRAMEWORK) as stream:  # fmt: skip
        offers = stream.next_event("OFFERS")
        offer = offers["offers"]["offers"][0]
        rescind = stream.next_event("RESCIND", timeout=3)
        assert rescind["rescind"]["offer_id"] == offer["id"]
        arrival = {id(e): t for e, t in zip(stream.received, stream.received_at, strict=True)}
        assert arrival[id(rescind)] - arrival[id(offers)] >= 0.25
        again = stream.next_event("OFFERS", timeout=2)["offers"]["offers"][0]
        assert again["id"] != offer["id"] and again["agent_id"] == offer["agent_id"]


def test_injected_call_failure_answers_without_acting(master: MesosMaster, subscribe) -> None:
    stream = subscribe()
    offer = stream.next_event("OFFERS")["offers"]["offers"][0]
    master.fail_next_call("DECLINE", 503, "Master has not finished recovery")
    decline = {"offer_ids": [offer["id"]]}
    assert stream.framework_call("DECLINE", decline=decline) == (
        503,
        "Master has not finished recovery",
    )
    assert offer["id"]["value"] in {o.id for o in master.offers()}
    assert stream.framework_call("DECLINE", decline=decline)[0] == 202
    assert offer["id"]["value"] not in {o.id for o in master.offers()}
    assert [c.status for c in master.calls("DECLINE")] == [503, 202]


# The real pymesos client --------------------------------------------------------------------


class _Recorder:
    """A pymesos Scheduler that launches one command task and records what it sees."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.launched = False
        self.states: list[str] = []
        self.registered: list[str] = []
        self.reregistered = threading.Event()
        self.finished = threading.Event()
        self.errors: list[str] = []

    def registered_cb(self, driver: Any, framework_id: dict[str, str], info: Any) -> None:
        self.registered.append(framework_id["value"])

    def resourceOffers(self, driver: Any, offers: list[dict[str, Any]]) -> None:
        if self.launched:
            driver.declineOffer([o["id"] for o in offers])
            return
        self.launched = True
        offer = offers[0]
        driver.launchTasks(offer["id"], [task_info("pm-1", offer, self.command, cpus=1, mem=128)])

    def statusUpdate(self, driver: Any, status: dict[str, Any]) -> None:
        self.states.append(status["state"])
        if status["state"] in ("TASK_FINISHED", "TASK_FAILED", "TASK_LOST", "TASK_ERROR"):
            self.finished.set()

    def error(self, driver: Any, message: str) -> None:
        self.errors.append(message)


def _pymesos_scheduler(recorder: _Recorder) -> Any:
    from pymesos import Scheduler

    class Adapter(Scheduler):
        def registered(self, driver: Any, framework_id: Any, info: Any) -> None:
            recorder.registered_cb(driver, framework_id, info)

        def reregistered(self, driver: Any, info: Any) -> None:
            recorder.reregistered.set()

        def resourceOffers(self, driver: Any, offers: Any) -> None:
            recorder.resourceOffers(driver, offers)

        def statusUpdate(self, driver: Any, status: Any) -> None:
            recorder.statusUpdate(driver, status)

        def error(self, driver: Any, message: str) -> None:
            recorder.error(driver, message)

    return Adapter()


def test_pymesos_launches_a_command_task_to_finished(master: MesosMaster) -> None:
    from pymesos import MesosSchedulerDriver

    recorder = _Recorder("echo from-pymesos; sleep 0.2")
    driver = MesosSchedulerDriver(_pymesos_scheduler(recorder), {**FRAMEWORK, "name": "pm"},
                                  master.address)  # fmt: skip
    driver.start()
    try:
        assert recorder.finished.wait(15), recorder.states
        assert recorder.states == ["TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED"]
        assert recorder.registered == [f"{master.master_id}-0000"]
        master.wait_for(lambda: len(master.calls("ACKNOWLEDGE")) == 3, what="3 acks")
        sandbox = master.sandbox("pm-1")
        assert sandbox is not None and (sandbox / "stdout").read_text() == "from-pymesos\n"
        # pymesos re-subscribes with its framework id when the stream is cut.
        master.drop_stream()
        assert recorder.reregistered.wait(10)
        subscribes = master.calls("SUBSCRIBE")
        assert len(subscribes) == 2
        assert subscribes[1].body["framework_id"] == {"value": recorder.registered[0]}
        assert recorder.errors == []
    finally:
        driver.stop()
        driver.join()
    master.wait_for(lambda: master.frameworks()[0].removed, what="TEARDOWN from stop()")
