"""The JSON the Mesos backend sends has the shape of the Mesos v1 protos.

tests/data/mesos_v1_fields.json holds the field names of the messages involved, read from
apache/mesos (include/mesos/v1/mesos.proto and scheduler/scheduler.proto; commits in its
"_source"). Mesos's JSON mapping uses the proto field names as keys, so a key that is not a
field of the message at its position is silently dropped by the master's parser: a
misspelled `task_infos` launches nothing, a `slave_id` is not an `agent_id`.

`wire_errors` walks a JSON value as a given message and reports every key that is not a
field, every enum value that is not a name, and every value whose shape (message, list,
scalar) is not the field's. It checks what the backend hands a recording driver, and every
call the real pymesos driver posted to the test master while the broker launched, killed,
declined, suppressed and revived.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from mesos_master import AgentSpec, MesosMaster
from support.mesos import RecordingDriver, offer, tenant

from allocator.backends.mesos import MesosBackend, MesosOptions
from allocator.broker.core import Broker
from allocator.engine_config import EngineConfig

FACTS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "mesos_v1_fields.json").read_text()
)
FIELDS: dict[str, frozenset[str]] = {
    name: frozenset(names) for name, names in FACTS.items() if not name.startswith("_")
}
ENUMS: dict[str, frozenset[str]] = {name: frozenset(v) for name, v in FACTS["_enums"].items()}

STRING = "string"  # a repeated scalar's element type
# The declared type of each field whose value is not a single scalar, as in the protos:
# (message, field) -> (type, repeated). The type is a message of FIELDS, an enum of ENUMS or
# STRING. Any other field must hold one scalar (string, number or bool).
TYPES: dict[tuple[str, str], tuple[str, bool]] = {
    ("Call", "framework_id"): ("FrameworkID", False),
    ("Call", "type"): ("Call.Type", False),
    ("Call", "subscribe"): ("Call.Subscribe", False),
    ("Call", "accept"): ("Call.Accept", False),
    ("Call", "decline"): ("Call.Decline", False),
    ("Call", "revive"): ("Call.Revive", False),
    ("Call", "suppress"): ("Call.Suppress", False),
    ("Call", "kill"): ("Call.Kill", False),
    ("Call", "acknowledge"): ("Call.Acknowledge", False),
    ("Call", "reconcile"): ("Call.Reconcile", False),
    ("Call.Subscribe", "framework_info"): ("FrameworkInfo", False),
    ("Call.Subscribe", "suppressed_roles"): (STRING, True),
    ("Call.Accept", "offer_ids"): ("OfferID", True),
    ("Call.Accept", "operations"): ("Offer.Operation", True),
    ("Call.Accept", "filters"): ("Filters", False),
    ("Call.Decline", "offer_ids"): ("OfferID", True),
    ("Call.Decline", "filters"): ("Filters", False),
    ("Call.Revive", "roles"): (STRING, True),
    ("Call.Suppress", "roles"): (STRING, True),
    ("Call.Kill", "task_id"): ("TaskID", False),
    ("Call.Kill", "agent_id"): ("AgentID", False),
    ("Call.Kill", "kill_policy"): ("KillPolicy", False),
    ("KillPolicy", "grace_period"): ("DurationInfo", False),
    ("Call.Acknowledge", "agent_id"): ("AgentID", False),
    ("Call.Acknowledge", "task_id"): ("TaskID", False),
    ("Call.Reconcile", "tasks"): ("Call.Reconcile.Task", True),
    ("Call.Reconcile.Task", "task_id"): ("TaskID", False),
    ("Call.Reconcile.Task", "agent_id"): ("AgentID", False),
    ("FrameworkInfo", "id"): ("FrameworkID", False),
    ("FrameworkInfo", "roles"): (STRING, True),
    ("FrameworkInfo", "capabilities"): ("FrameworkInfo.Capability", True),
    ("FrameworkInfo.Capability", "type"): ("FrameworkInfo.Capability.Type", False),
    ("Offer.Operation", "type"): ("Offer.Operation.Type", False),
    ("Offer.Operation", "launch"): ("Offer.Operation.Launch", False),
    ("Offer.Operation.Launch", "task_infos"): ("TaskInfo", True),
    ("TaskInfo", "task_id"): ("TaskID", False),
    ("TaskInfo", "agent_id"): ("AgentID", False),
    ("TaskInfo", "resources"): ("Resource", True),
    ("TaskInfo", "command"): ("CommandInfo", False),
    ("TaskInfo", "kill_policy"): ("KillPolicy", False),
    ("CommandInfo", "uris"): ("CommandInfo.URI", True),
    ("CommandInfo", "environment"): ("Environment", False),
    ("CommandInfo", "arguments"): (STRING, True),
    ("Environment", "variables"): ("Environment.Variable", True),
    ("Environment.Variable", "type"): ("Environment.Variable.Type", False),
    ("Resource", "type"): ("Value.Type", False),
    ("Resource", "scalar"): ("Value.Scalar", False),
    ("Resource", "allocation_info"): ("Resource.AllocationInfo", False),
}
# Calls whose type names a payload the master requires (SUBSCRIBE needs `subscribe`, ...).
PAYLOAD_REQUIRED = ("SUBSCRIBE", "ACCEPT", "DECLINE", "KILL", "ACKNOWLEDGE", "RECONCILE")


def _is_scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def wire_errors(value: Any, message: str, path: str | None = None) -> list[str]:
    """Everything in `value` (JSON) that does not fit `message`; empty when it all does."""
    path = path or message
    if message not in FIELDS:
        return [f"{path}: no field list for message {message}"]
    if not isinstance(value, dict):
        return [f"{path}: a {message} must be a JSON object, got {value!r}"]
    errors: list[str] = []
    for key, item in value.items():
        where = f"{path}.{key}"
        if key not in FIELDS[message]:
            errors.append(f"{where}: {key!r} is not a field of {message}")
            continue
        kind, repeated = TYPES.get((message, key), (None, False))
        items = item if repeated else [item]
        if repeated and not isinstance(item, list):
            errors.append(f"{where}: a repeated field must be a JSON array, got {item!r}")
            continue
        for i, element in enumerate(items):
            at = f"{where}[{i}]" if repeated else where
            if kind in FIELDS:
                errors.extend(wire_errors(element, kind, at))
            elif kind in ENUMS:
                if element not in ENUMS[kind]:
                    errors.append(f"{at}: {element!r} is not a {kind} name")
            elif not _is_scalar(element):
                errors.append(f"{at}: expected a scalar, got {element!r}")
    return errors


def call_errors(body: Any) -> list[str]:
    """`wire_errors` of a scheduler Call, plus: its type is a Call.Type name and the
    payload that type requires is there."""
    errors = wire_errors(body, "Call")
    kind = body.get("type") if isinstance(body, dict) else None
    if kind is None:
        errors.append("Call: a call without a type")
    elif kind in PAYLOAD_REQUIRED and kind.lower() not in body:
        errors.append(f"Call: a {kind} call without its {kind.lower()!r} payload")
    return errors


# ---- the facts and the checker -----------------------------------------------------------


def test_the_facts_name_their_source_and_cover_every_type_used() -> None:
    source = FACTS["_source"]
    assert source["repo"] == "apache/mesos"
    listed = [m for file in source["files"].values() for m in file["messages"]]
    assert sorted(listed) == sorted(FIELDS)
    for file in source["files"].values():
        assert len(file["commit"]) == 40 and int(file["commit"], 16) >= 0
    for (message, field), (kind, _) in TYPES.items():
        assert field in FIELDS[message], (message, field)
        assert kind in FIELDS or kind in ENUMS or kind == STRING, kind


def valid_accept() -> dict[str, Any]:
    """An ACCEPT written by hand from the protos, using every message the checker knows."""
    task = {
        "name": "t", "task_id": {"value": "t.1"}, "agent_id": {"value": "a1"},
        "resources": [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": 1.0}, "role": "r",
             "allocation_info": {"role": "r"}},
        ],
        "command": {
            "shell": True, "value": "true", "arguments": ["x"],
            "uris": [{"value": "file:///s.tgz", "extract": True, "cache": False}],
            "environment": {"variables": [{"name": "A", "type": "VALUE", "value": "1"}]},
        },
    }  # fmt: skip
    return {
        "type": "ACCEPT", "framework_id": {"value": "fw"},
        "accept": {
            "offer_ids": [{"value": "o1"}],
            "operations": [{"type": "LAUNCH", "launch": {"task_infos": [task]}}],
            "filters": {"refuse_seconds": 1.0},
        },
    }  # fmt: skip


def _task(body: dict[str, Any]) -> dict[str, Any]:
    return body["accept"]["operations"][0]["launch"]["task_infos"][0]


def _rename(d: dict[str, Any], old: str, new: str) -> None:
    d[new] = d.pop(old)


MISTAKES = {
    "task_info": (lambda b: _rename(b["accept"]["operations"][0]["launch"], "task_infos",
                                    "task_info"),
                  "Call.accept.operations[0].launch.task_info"),
    "slave_id": (lambda b: _rename(_task(b), "agent_id", "slave_id"),
                 "Call.accept.operations[0].launch.task_infos[0].slave_id"),
    "offer_id": (lambda b: _rename(b["accept"], "offer_ids", "offer_id"), "Call.accept.offer_id"),
    "refuse": (lambda b: _rename(b["accept"]["filters"], "refuse_seconds", "refuse"),
               "Call.accept.filters.refuse"),
    "enviroment": (lambda b: _rename(_task(b)["command"], "environment", "enviroment"),
                   "Call.accept.operations[0].launch.task_infos[0].command.enviroment"),
    "variable key": (lambda b: _rename(
        _task(b)["command"]["environment"]["variables"][0], "value", "val"),
        "Call.accept.operations[0].launch.task_infos[0].command.environment.variables[0].val"),
    "scalar key": (lambda b: _rename(_task(b)["resources"][0]["scalar"], "value", "amount"),
                   "Call.accept.operations[0].launch.task_infos[0].resources[0].scalar.amount"),
    "allocation key": (lambda b: _rename(_task(b)["resources"][0]["allocation_info"], "role",
                                         "roles"),
                       "Call.accept.operations[0].launch.task_infos[0].resources[0]"
                       ".allocation_info.roles"),
    "uri key": (lambda b: _rename(_task(b)["command"]["uris"][0], "extract", "unpack"),
                "Call.accept.operations[0].launch.task_infos[0].command.uris[0].unpack"),
    "id key": (lambda b: _rename(b["framework_id"], "value", "id"), "Call.framework_id.id"),
    "not repeated": (lambda b: b["accept"].update(offer_ids={"value": "o1"}),
                     "Call.accept.offer_ids"),
    "not a message": (lambda b: _task(b).update(task_id="t.1"),
                      "Call.accept.operations[0].launch.task_infos[0].task_id"),
    "not a scalar": (lambda b: _task(b).update(name={"value": "t"}),
                     "Call.accept.operations[0].launch.task_infos[0].name"),
    "operation type": (lambda b: b["accept"]["operations"][0].update(type="LAUNCH_TASKS"),
                       "Call.accept.operations[0].type"),
    "value type": (lambda b: _task(b)["resources"][0].update(type="FLOAT"),
                   "Call.accept.operations[0].launch.task_infos[0].resources[0].type"),
    "call type": (lambda b: b.update(type="LAUNCH"), "Call.type"),
    "no payload": (lambda b: b.pop("accept"), "Call"),
    "no type": (lambda b: b.pop("type"), "Call"),
}  # fmt: skip


def test_the_checker_accepts_a_call_written_from_the_protos() -> None:
    assert call_errors(valid_accept()) == []


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_the_checker_reports_each_mistake_where_it_is(mistake: str) -> None:
    mutate, where = MISTAKES[mistake]
    body = valid_accept()
    mutate(body)
    errors = call_errors(body)
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{where}:"), errors


def test_the_checker_reports_a_misspelled_framework_info() -> None:
    body = {"type": "SUBSCRIBE", "subscribe": {"framework_info": {
        "user": "u", "name": "n", "capabilities": [{"type": "MULTI_ROLE"}],
        "failover": 10.0, "id": {"value": "fw"},
    }}}  # fmt: skip
    assert call_errors(body) == [
        "Call.subscribe.framework_info.failover: 'failover' is not a field of FrameworkInfo"
    ]
    body["subscribe"]["framework_info"]["capabilities"] = [{"type": "MULTIROLE"}]
    del body["subscribe"]["framework_info"]["failover"]
    assert call_errors(body) == [
        "Call.subscribe.framework_info.capabilities[0].type: 'MULTIROLE' is not a "
        "FrameworkInfo.Capability.Type name"
    ]


# ---- what the backend hands the driver -------------------------------------------------

HAS_SPARK_URI = "spark_uri" in {f.name for f in fields(MesosOptions)}
SPARK_URI = "http://127.0.0.1:1/spark-3.5.1-bin-hadoop3.tgz"
CASES = {
    "one role": {},
    "several roles": {"roles": ("pi", "wc")},
    "spark_uri": {"spark_uri": SPARK_URI},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_backend_hands_the_driver_proto_shaped_messages(case: str, tmp_path: Path) -> None:
    if case == "spark_uri" and not HAS_SPARK_URI:
        pytest.skip("MesosOptions has no spark_uri")
    options = CASES[case]
    roles = options.get("roles", ("*",))
    driver = RecordingDriver()
    backend = MesosBackend(
        MesosOptions(master="m:5050", state_dir=tmp_path, spark_home="/opt/spark", **options),
        driver_factory=lambda *_: driver,
    )
    assert wire_errors(backend.subscription.framework_info(), "FrameworkInfo") == []
    broker = Broker(backend, EngineConfig("drf"))
    broker.start(loop=False)
    try:
        backend.registered(driver, {"value": "fw-1"}, {})
        # registered with an id: the FrameworkInfo of a re-subscription carries it
        info = backend.subscription.framework_info()
        assert info["id"] == {"value": "fw-1"} and info["roles"] == list(roles)
        assert wire_errors(info, "FrameworkInfo") == []
        role = roles[-1]
        broker.register(tenant("p", 2, 1024, target=2, group=role))
        backend.resourceOffers(driver, [offer("o1", "a1", "h1", 8, 4096, role=role)])
        assert broker.allocate_once() == 2
        backend.reregistered(driver, {})  # as after a master failover: RECONCILE the tasks
        backend.resourceOffers(driver, [offer("o2", "a2", "h2", 8, 4096, role=role)])
        broker.allocate_once()  # nothing pending: o2 is declined
        broker.kill("p", ["1"])
    finally:
        broker.stop(kill_executors=False)

    (accept,) = driver.named("acceptOffers")
    offer_ids, operations, filters = accept
    assert [wire_errors(o, "OfferID") for o in offer_ids] == [[]]
    assert wire_errors(filters, "Filters") == []
    assert [wire_errors(op, "Offer.Operation") for op in operations] == [[]]
    tasks = operations[0]["launch"]["task_infos"]
    assert len(tasks) == 2
    for task in tasks:
        assert wire_errors(task, "TaskInfo") == []
        # never a "role" (it would mean a static reservation: TASK_ERROR on a real master)
        assert not [r for r in task["resources"] if "role" in r]
        uris = task["command"].get("uris", [])
        assert uris == ([{"value": SPARK_URI, "extract": True}] if "spark_uri" in options
                        else [])  # fmt: skip
    (decline,) = driver.named("declineOffer")
    assert decline[0] == [{"value": "o2"}]
    assert [wire_errors(o, "OfferID") for o in decline[0]] == [[]]
    assert wire_errors(decline[1], "Filters") == []
    # implicit ones (empty: every task the master knows) after each subscription and each
    # agent first seen since (a1, then a2 after the second), and the explicit one of the
    # broker's unconfirmed tasks after the second subscription and again with a2's offer
    reconciles = driver.named("reconcileTasks")
    assert reconciles[:2] == [([],), ([],)] and reconciles.count(([],)) == 4
    explicit = [call for call in reconciles if call != ([],)]
    assert len(explicit) == 2
    for (again,) in explicit:
        assert sorted(t["task_id"]["value"] for t in again) == ["p.1", "p.2"]
        assert [wire_errors(t, "Call.Reconcile.Task") for t in again] == [[], []]
    (kill,) = driver.named("killTask")
    assert kill == ({"value": "p.1"}, {"value": "a1"},
                    {"grace_period": {"nanoseconds": 5_000_000_000}})  # fmt: skip
    assert wire_errors(kill[0], "TaskID") == wire_errors(kill[1], "AgentID") == []
    assert wire_errors(kill[2], "KillPolicy") == []


# ---- every call pymesos posts to the test master ------------------------------------------

# A stand-in for spark-class: executor 1 fails at once, the others run until killed.
FAKE_SPARK_CLASS = """#!/bin/sh
case " $* " in *" --executor-id 1 "*) echo "no driver" >&2; exit 1;; esac
exec sleep 30
"""


@contextlib.contextmanager
def live_broker(
    tmp_path: Path, master: MesosMaster, driver_factory: Callable[..., Any] | None = None
) -> Iterator[Broker]:
    spark = tmp_path / "spark"
    (spark / "bin").mkdir(parents=True)
    script = spark / "bin" / "spark-class"
    script.write_text(FAKE_SPARK_CLASS)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    backend = MesosBackend(MesosOptions(
        master=master.address, spark_home=str(spark), state_dir=tmp_path / "broker",
        failover_timeout=0.0,
    ), driver_factory=driver_factory)  # fmt: skip
    broker = Broker(backend, EngineConfig("drf", interval=0.2))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop(kill_executors=True)  # KILLs, then TEARDOWN on pymesos' IO thread
        joiner = threading.Thread(target=backend.subscription.driver.join, daemon=True)
        joiner.start()
        joiner.join(10)
        assert not joiner.is_alive(), "the pymesos driver did not stop"


def state_of(master: MesosMaster, task_id: str) -> str | None:
    states = [t.state for t in master.tasks() if t.task_id == task_id]
    return states[-1] if states else None


def _sleepers(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and marker in os.readlink(entry / "cwd"):
                pids.append(int(entry.name))
    return pids


def drive(master: MesosMaster, broker: Broker) -> None:
    """Subscribe, launch, fail, replace, kill, replace: every call the broker makes."""
    master.wait_for(lambda: any(f.connected for f in master.frameworks()), 60,
                    "the broker to subscribe")  # fmt: skip
    request = tenant("pi", 2, 1024, target=2)
    request.launch.driver_url = "spark://CoarseGrainedScheduler@127.0.0.1:1"  # nobody there
    broker.register(request)
    # executor 1 fails (the broker REVIVEs for its replacement); executor 2 runs
    running = lambda: master.tasks("TASK_RUNNING")  # noqa: E731
    master.wait_for(lambda: state_of(master, "pi.1") == "TASK_FAILED", 60, "the failed task")
    master.wait_for(lambda: len(running()) == 2, 60, "two running tasks")
    broker.kill("pi", ["2"])  # KILL; then its replacement
    master.wait_for(lambda: state_of(master, "pi.2") == "TASK_KILLED", 60, "the killed task")
    master.wait_for(lambda: len(running()) == 2, 60, "the replacement of the killed task")


def test_every_call_the_broker_makes_has_the_proto_shape(tmp_path: Path) -> None:
    agents = [
        AgentSpec("a1", {"cpus": 4, "mem": 4096}),
        AgentSpec("a2", {"cpus": 4, "mem": 4096}),
    ]
    timed_out: TimeoutError | None = None
    try:
        with MesosMaster(agents, allocation_interval=0.2, work_dir=tmp_path / "mesos") as master:
            with live_broker(tmp_path, master) as broker:
                try:
                    drive(master, broker)
                except TimeoutError as error:  # the shapes are checked first, below
                    timed_out = error
            with contextlib.suppress(TimeoutError):
                master.wait_for(lambda: master.calls("TEARDOWN"), 30, "the teardown")
            calls = master.calls()
    finally:
        for pid in _sleepers(str(tmp_path)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    problems = {
        i: (c.type, call_errors(c.body)) for i, c in enumerate(calls) if call_errors(c.body)
    }
    assert problems == {}
    assert timed_out is None, timed_out
    seen = {c.type for c in calls}
    assert {"SUBSCRIBE", "RECONCILE", "ACCEPT", "DECLINE", "ACKNOWLEDGE", "KILL", "SUPPRESS",
            "REVIVE", "TEARDOWN"} <= seen, seen  # fmt: skip
    assert [c.status for c in calls if c.status >= 400] == []  # and the master took them all
    launched = [
        t["task_id"]["value"]
        for c in calls if c.type == "ACCEPT"
        for op in c.body["accept"]["operations"]
        for t in op["launch"]["task_infos"]
    ]  # fmt: skip
    assert sorted(launched) == ["pi.1", "pi.2", "pi.3", "pi.4"]  # no launch lost or repeated


def recording_driver_factory(calls: list[tuple[str, Any, int]]) -> Callable[..., Any]:
    """The real pymesos driver, recording every call as sent: (type, body, HTTP status)."""
    from allocator.backends.mesos import pymesos_driver

    def factory(scheduler: Any, framework: dict, options: MesosOptions) -> Any:
        driver = pymesos_driver(scheduler, framework, options)
        send, subscribe = driver._send, driver.gen_request

        def recording_send(body: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                answer = send(body, *args, **kwargs)
            except RuntimeError as error:  # pymesos: "Failed to send request STATUS: ..."
                found = re.match(r"Failed to send request (\d+)", str(error))
                calls.append((body.get("type"), body, int(found.group(1)) if found else 0))
                raise
            calls.append((body.get("type"), body, 202))
            return answer

        def recording_subscribe() -> bytes:
            raw = subscribe()
            calls.append(("SUBSCRIBE", json.loads(raw.split(b"\r\n\r\n", 1)[1]), 200))
            return raw

        driver._send, driver.gen_request = recording_send, recording_subscribe
        return driver

    return factory


def test_every_call_the_broker_makes_is_well_formed_and_taken_by_a_real_master(
    tmp_path: Path,
) -> None:
    """The same run as above against a real Mesos 1.11.0 master and two real agents, the
    calls recorded as pymesos sends them: every body has the proto shape, the real master
    answers none with an error, and no launch is lost or repeated."""
    from support.polling import wait_for
    from support.real_mesos import SKIP_REASON, RealMesos, assert_none_left, mesos_home

    from allocator.backends.base import AgentInfo

    if mesos_home() is None:
        pytest.skip(SKIP_REASON)
    agents = [AgentInfo(f"a{k}", f"127.0.6.{k}", {"cpus": 4, "mem": 4096}, {}) for k in (1, 2)]
    calls: list[tuple[str, Any, int]] = []
    with RealMesos(agents, work_dir=tmp_path / "real", allocation_interval=0.2) as master:

        def state_of(task_id: str) -> str | None:
            states = [t.state for t in master.tasks() if t.task_id == task_id]
            return states[-1] if states else None

        running = lambda: master.tasks("TASK_RUNNING")  # noqa: E731
        with live_broker(tmp_path, master, recording_driver_factory(calls)) as broker:  # type: ignore[arg-type]
            wait_for(lambda: any(f["active"] for f in master.frameworks()), 60,
                     "the broker to subscribe")  # fmt: skip
            request = tenant("pi", 2, 1024, target=2)
            request.launch.driver_url = "spark://CoarseGrainedScheduler@127.0.0.1:1"
            broker.register(request)
            wait_for(lambda: state_of("pi.1") == "TASK_FAILED", 60, "the failed task pi.1")
            wait_for(lambda: len(running()) == 2, 60, "two running tasks")
            broker.kill("pi", ["2"])
            wait_for(lambda: state_of("pi.2") == "TASK_KILLED", 60, "the killed task pi.2")
            wait_for(lambda: len(running()) == 2, 60, "the replacement of the killed task")
        wait_for(lambda: any(c[0] == "TEARDOWN" for c in calls), 30, "the teardown")
    assert_none_left(tmp_path / "real", "the real master")

    problems = {i: (kind, call_errors(body)) for i, (kind, body, _) in enumerate(calls)
                if call_errors(body)}  # fmt: skip
    assert problems == {}
    seen = {kind for kind, _, _ in calls}
    assert {"SUBSCRIBE", "RECONCILE", "ACCEPT", "DECLINE", "ACKNOWLEDGE", "KILL", "SUPPRESS",
            "REVIVE", "TEARDOWN"} <= seen, seen  # fmt: skip
    assert [(kind, status) for kind, _, status in calls if status >= 400 or status == 0] == []
    launched = [
        t["task_id"]["value"]
        for kind, body, _ in calls if kind == "ACCEPT"
        for op in body["accept"]["operations"]
        for t in op["launch"]["task_infos"]
    ]  # fmt: skip
    assert sorted(launched) == ["pi.1", "pi.2", "pi.3", "pi.4"]  # no launch lost or repeated
