"""The Mesos backend: the broker as one Mesos framework (v1 scheduler API through pymesos).

Offers become what the broker may use on each agent (held offers + its own tasks there);
each allocation run's launches on an agent become one ACCEPT of that agent's offers with a
LAUNCH per executor, and the offers a run leaves unused are declined with a refuse filter.
With no executor pending the framework SUPPRESSes, and REVIVEs when demand returns.

With several roles (one per group), an agent offered to role R is a separate engine agent
`AGENT@R` carrying the attribute `mesos_role=R`, and each tenant is constrained to its
group's role, so an executor only ever lands in an offer of its own role.

pymesos runs callbacks on its IO thread and re-raises any exception from them in the main
thread; every callback here is wrapped so nothing escapes.
"""

from __future__ import annotations

import functools
import getpass
import logging
import math
import re
import shlex
import threading
import time
from collections.abc import Callable, ItemsView, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from allocator.backends.base import (
    AgentInfo,
    BackendEvents,
    ExecutorState,
    LaunchSpec,
    TaskStatus,
)
from allocator.backends.executor import ExecutorEnvPolicy, executor_launch
from allocator.backends.mesos_link import MesosLink
from allocator.errors import FairbrokerError
from allocator.mesos_defaults import REFUSE_SECONDS

log = logging.getLogger(__name__)
DRIVER_STOP_S = 10.0  # at most this long for pymesos's I/O thread to finish (and TEARDOWN)

ROLE_ATTRIBUTE = "mesos_role"
FRAMEWORK_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")
HEARTBEAT_SECONDS = 15.0  # the master's fixed interval
RECONCILE_FIRST_S = 2.0  # reconciliation is repeated, doubling, until every task is confirmed
RECONCILE_MAX_S = 60.0
AGENTS_LOOK_S = 15.0  # how often the master's agent list is read (for health, hostnames)
REDIRECT_FIRST_S = 0.2  # back-off between the master's 307s (pymesos has none)
REDIRECT_MAX_S = 5.0
MISSED_HEARTBEATS = 5  # then the connection is considered dead and re-established
TERMINAL = {
    "TASK_FINISHED": ExecutorState.FINISHED,
    "TASK_FAILED": ExecutorState.FAILED,
    "TASK_KILLED": ExecutorState.KILLED,
    "TASK_LOST": ExecutorState.FAILED,
    "TASK_ERROR": ExecutorState.FAILED,
    "TASK_DROPPED": ExecutorState.FAILED,
    "TASK_GONE": ExecutorState.FAILED,
    "TASK_GONE_BY_OPERATOR": ExecutorState.FAILED,
    "TASK_UNKNOWN": ExecutorState.FAILED,
}


@dataclass
class _Offer:
    offer_id: str
    agent_id: str
    hostname: str
    role: str
    resources: dict[str, float]
    attributes: dict[str, str]


@dataclass
class _Task:
    spec: LaunchSpec
    agent_key: str  # engine agent (AGENT or AGENT@ROLE)
    agent_id: str
    state: str = "TASK_STAGING"


@dataclass
class MesosOptions:
    master: str  # HOST:5050 or zk://...
    roles: tuple[str, ...] = ("*",)
    principal: str | None = None
    secret: str | None = field(default=None, repr=False)  # never in logs or reprs
    failover_timeout: float = 7 * 24 * 3600.0
    framework_name: str = "fairbroker"
    user: str | None = None  # the user tasks run as (default: the broker's own)
    hostname: str | None = None
    webui_url: str | None = None
    gpus: bool = False  # GPU_RESOURCES: without it Mesos never offers GPU agents
    spark_home: str = "/opt/spark"  # where Spark is on the agents
    spark_uri: str | None = None  # or a Spark tarball the agents fetch into the sandbox
    heartbeat_timeout: float = MISSED_HEARTBEATS * HEARTBEAT_SECONDS
    refuse_seconds: float = REFUSE_SECONDS  # the engine's (EngineConfig.refuse_seconds)
    agents_look_seconds: float = AGENTS_LOOK_S  # how often the master's agent list is read
    state_dir: Path = Path(".fairbroker")
    executor_env: ExecutorEnvPolicy = field(default_factory=ExecutorEnvPolicy)
    extra: dict[str, Any] = field(default_factory=dict)


def scalars(resources: list[dict], role: str | None = None) -> dict[str, float]:
    """Scalar resources of a v1 resource list (optionally only those allocated to `role`)."""
    out: dict[str, float] = {}
    for r in resources:
        if r.get("type", "SCALAR") != "SCALAR" or "scalar" not in r:
            continue
        allocated = r.get("allocation_info", {}).get("role")
        if role is not None and allocated not in (None, role):
            continue
        out[r["name"]] = out.get(r["name"], 0.0) + float(r["scalar"]["value"])
    return out


def attributes(offer: dict) -> dict[str, str]:
    out = {}
    for a in offer.get("attributes", []):
        kind = a.get("type", "TEXT").lower()
        value = a.get(kind, {})
        out[a["name"]] = str(value.get("value", value))
    return out


def lost_by_master(status: dict) -> bool:
    """A TASK_LOST the master declared (agent unreachable or removed), not the agent."""
    return status.get("source") == "SOURCE_MASTER" and status.get("reason") not in (
        "REASON_RECONCILIATION", "REASON_INVALID_OFFERS",
    )  # fmt: skip


def _guarded(method: Callable) -> Callable:
    @functools.wraps(method)
    def call(self: MesosBackend, *args: Any) -> Any:
        try:
            return method(self, *args)
        except Exception:  # an exception here would kill pymesos' IO thread and the broker
            log.exception("mesos callback %s failed", method.__name__)
            return None

    return call


class MesosBackend:
    """Backend protocol (allocator.backends.base) over a pymesos scheduler driver."""

    name = "mesos"

    def __init__(
        self, options: MesosOptions, driver_factory: Callable[..., Any] | None = None
    ) -> None:
        self.options = options
        self._driver_factory = driver_factory or pymesos_driver
        self._driver: Any = None
        self._events: BackendEvents | None = None
        self._lock = threading.RLock()
        self._offers: dict[str, _Offer] = {}
        self._tasks: dict[str, _Task] = {}
        self._pending: dict[str, list[dict]] = {}  # agent key -> TaskInfos of this run
        self._agents: dict[str, AgentInfo] = {}  # engine agent key -> info
        self._suppressed = False  # as the master has it (a SUBSCRIBE resets it)
        self._subscribed = False  # SUBSCRIBED received on the current stream
        self._kills: set[str] = set()  # KILLs to (re)send once subscribed
        self._unconfirmed: set[str] = set()  # tasks the master has not reported since subscribing
        self._next_reconcile = (0.0, RECONCILE_FIRST_S)  # (when, back-off)
        self._orphans: dict[str, str] = {}  # task id -> agent id: given up with a lost agent
        self._has_agents: bool | None = None  # does the master have agents (None: unknown)
        self._next_look = 0.0  # when to read the master's agent list next
        self._outbox: list[Callable[[], None]] = []
        self._offer_counts = dict.fromkeys(("received", "accepted", "declined", "rescinded"), 0)
        self._last_heartbeat = time.monotonic()
        self.link = MesosLink()  # for metrics, status and health
        self._last_offered: dict[str, dict[str, float]] = {}  # engine agent -> total
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._undeclined: set[str] = set()  # offers whose DECLINE failed (still outstanding)
        # malformed offers (never usable) whose DECLINE failed: declined again at each flush
        self._bad_undeclined: set[str] = set()
        self._abandoned: set[str] = set()  # task ids the broker dropped at recovery
        if any("@" in role for role in options.roles):
            raise FairbrokerError(f"roles: a Mesos role name holds no '@', got {options.roles}")
        self.framework_id: str | None = self._load_framework_id()

    # ---- Backend -----------------------------------------------------------------------
    def start(self, events: BackendEvents) -> None:
        self._events = events
        self._connect()
        self._watchdog = threading.Thread(target=self._watch, name="mesos-watchdog", daemon=True)
        self._watchdog.start()

    def agents(self) -> list[AgentInfo]:
        return []  # they arrive with offers

    def last_offered(self) -> dict[str, dict[str, float]]:
        """Each agent's total when it was last offered (for status and metrics: between
        offers, and while suppressed, the capacity the broker holds is only its tasks)."""
        with self._lock:
            return {key: dict(total) for key, total in self._last_offered.items()}

    def offer_stats(self) -> dict[str, int]:
        """Offers held now and counted by outcome (for the metrics)."""
        with self._lock:
            return {"held": len(self._offers), **self._offer_counts}

    def tenant_constraints(self, group: str) -> dict[str, str]:
        """With several roles, a tenant runs in offers of its group's role (else the first)."""
        roles = self.options.roles
        if len(roles) == 1:
            return {}
        return {ROLE_ATTRIBUTE: group if group in roles else roles[0]}

    def launch(self, spec: LaunchSpec) -> str:
        with self._lock:
            agent = self._agents[spec.agent]
            agent_id = self._agent_id(spec.agent)
            task_id = f"{spec.tenant_id}.{spec.executor_id}"
            self._pending.setdefault(spec.agent, []).append(
                self.task_info(spec, task_id, agent_id, agent.hostname)
            )
            self._tasks[task_id] = _Task(spec, spec.agent, agent_id)
            return task_id

    def task_info(self, spec: LaunchSpec, task_id: str, agent_id: str, hostname: str) -> dict:
        """The TaskInfo of one executor: its resources are exactly the broker's demand."""
        command = executor_launch(
            spec,
            spark_class=self._spark_class(),
            hostname=hostname,
            policy=self.options.executor_env,
        )  # the agent provides the base environment, never the broker
        # No "role": in Mesos 1.x a Resource.role other than "*" means *statically
        # reserved*, which these resources are not (the master would answer TASK_ERROR);
        # the master injects the offer's allocation_info itself.
        resources = [
            {"name": name, "type": "SCALAR", "scalar": {"value": round(value, 3)}}
            for name, value in sorted(spec.resources.items())
            if value > 0
        ]
        value = shlex.join(command.argv)
        uris = []
        if self.options.spark_uri:
            # as Spark's own Mesos backend does: the tarball unpacks to <basename>*/ in the
            # sandbox, and the executor starts from there
            uris = [{"value": self.options.spark_uri, "extract": True}]
            basename = self.options.spark_uri.rstrip("/").split("/")[-1].split(".")[0]
            value = f"cd {shlex.quote(basename)}*; {value}"
        return {
            "name": f"fairbroker {spec.tenant_id} executor {spec.executor_id}",
            "task_id": {"value": task_id},
            "agent_id": {"value": agent_id},
            "resources": resources,
            "command": {
                "shell": True,
                "value": value,
                **({"uris": uris} if uris else {}),
                "environment": {
                    "variables": [
                        {"name": k, "value": v} for k, v in sorted(command.environment.items())
                    ]
                },
            },
        }

    def _spark_class(self) -> str:
        if self.options.spark_uri:
            return "./bin/spark-class"
        return f"{self.options.spark_home}/bin/spark-class"

    def flush(self, wants_more: bool = True) -> None:
        """Accept the offers of agents that got launches, decline the rest; suppress when
        nothing is pending."""
        with self._lock:
            if self._bad_undeclined:
                self._decline(sorted(self._bad_undeclined), self.options.refuse_seconds)
                self._bad_undeclined &= self._undeclined  # those whose DECLINE failed again
            pending, self._pending = self._pending, {}
            by_agent: dict[str, list[_Offer]] = {}
            for offer in self._offers.values():
                by_agent.setdefault(self._key(offer), []).append(offer)
            for key, offers in by_agent.items():
                ids = [{"value": o.offer_id} for o in offers]
                for o in offers:
                    del self._offers[o.offer_id]
                tasks = pending.pop(key, [])
                if tasks:
                    operations = [{"type": "LAUNCH", "launch": {"task_infos": tasks}}]
                    accepted = self._call("acceptOffers", ids, operations, {"refuse_seconds": 1.0})
                    self._offer_counts["accepted" if accepted else "declined"] += len(ids)
                    if not accepted:
                        # Never launched: the executors are lost to the broker, and the offers,
                        # still outstanding at the master, are handed back at once.
                        for task in tasks:
                            self._lost(task["task_id"]["value"], "ACCEPT refused by the master")
                        self._decline([o.offer_id for o in offers], 0.0)
                else:
                    self._decline([o.offer_id for o in offers], self.options.refuse_seconds)
                    self._offer_counts["declined"] += len(ids)
                for o in offers:  # still outstanding at the master: keep them
                    if o.offer_id in self._undeclined:
                        self._offers[o.offer_id] = o
                self._report_capacity(key)
            for tasks in pending.values():  # offers gone (rescinded) before the accept
                for task in tasks:
                    self._lost(task["task_id"]["value"], "offer no longer held")
            if not wants_more and not self._suppressed:
                self._suppressed = self._call("suppressOffers")
            elif wants_more and self._suppressed:
                self._suppressed = not self._call("reviveOffers")
        self._emit()

    def _call(self, name: str, *args: Any) -> bool:
        """A call to the master; an error answer is logged and reported as False, never
        raised into the allocation loop. Before SUBSCRIBED pymesos drops calls silently (or
        fails an assertion), so nothing is sent then and the call counts as not made."""
        if not self._subscribed or not getattr(self._driver, "connected", True):
            log.debug("Mesos call %s not sent: not subscribed", name)
            return False
        try:
            getattr(self._driver, name)(*args)
        except Exception as error:
            # pymesos puts the request body (task environments) after the first line
            first = str(error).split("\n", 1)[0][:300]
            log.error("Mesos call %s failed: %s", name, first)
            return False
        return True

    def kill(self, tenant_id: str, executor_id: str) -> None:
        with self._lock:
            task_id = f"{tenant_id}.{executor_id}"
            task = self._tasks.get(task_id)
            if task is not None:
                self._kills.add(task_id)  # until the task's terminal update arrives
                self._kill(task_id, task.agent_id)

    def _kill(self, task_id: str, agent_id: str) -> bool:
        return self._call("killTask", {"value": task_id}, {"value": agent_id})

    def adopt(self, spec: LaunchSpec, handle: str) -> bool:
        """After a broker restart: the task is assumed alive; reconciliation corrects it
        (a task whose launch was recorded but not its ACCEPT has its deterministic id)."""
        task_id = handle or f"{spec.tenant_id}.{spec.executor_id}"
        with self._lock:
            agent_id = self._agent_id(spec.agent)
            self._tasks[task_id] = _Task(spec, spec.agent, agent_id, "TASK_RUNNING")
        return True

    def reconcile(self, adopted: set[tuple[str, str]], abandoned: list[LaunchSpec]) -> None:
        """Kill the tasks of executors the broker abandoned at recovery (again once
        subscribed, as the driver may not be connected yet)."""
        self._abandoned.update(f"{spec.tenant_id}.{spec.executor_id}" for spec in abandoned)
        for task_id in self._abandoned:
            self._call("killTask", {"value": task_id})

    def stop(self, kill_executors: bool = True) -> None:
        self._stop.set()
        if self._driver is None:
            return
        if kill_executors:
            with self._lock:
                for task_id in list(self._tasks):
                    self._driver.killTask({"value": task_id})
        # failover=True keeps the framework (and its tasks) for a restarted broker; a torn
        # down framework's id cannot subscribe again, so it is forgotten
        self._driver.stop(failover=not kill_executors)
        # pymesos sends TEARDOWN from its I/O thread on the way out: wait for it, or a
        # process that exits right after (`fairbroker teardown`, serve --teardown-on-exit)
        # may end before the master hears it
        wait = getattr(self._driver, "wait_stopped", None)
        if wait is not None and not wait(DRIVER_STOP_S):
            log.warning("the Mesos driver did not stop within %.0f s", DRIVER_STOP_S)
        if kill_executors:
            self._framework_file().unlink(missing_ok=True)

    # ---- pymesos scheduler callbacks ---------------------------------------------------
    @_guarded
    def registered(self, driver: Any, framework_id: dict, master_info: dict) -> None:
        self.framework_id = framework_id["value"]
        self._save_framework_id()
        log.info("registered with Mesos as framework %s", self.framework_id)
        self._subscribed_again()

    @_guarded
    def reregistered(self, driver: Any, master_info: dict) -> None:
        log.info("re-registered with Mesos (framework %s)", self.framework_id)
        self._subscribed_again()

    def _subscribed_again(self) -> None:
        """A new subscription: the master discarded this framework's offers (without a
        rescind) and its suppression (pymesos sends no suppressed_roles); pending KILLs
        (and those of executors abandoned at recovery) are re-sent and every known task is
        reconciled until the master confirms it."""
        self.link.subscribed(self.framework_id)
        with self._lock:
            self._subscribed = True
            self._suppressed = False  # the next flush SUPPRESSes again if nothing is pending
            self._has_agents = None
            self._next_look = 0.0  # read the master's agents at once
            self._offers.clear()
            for key in list(self._agents):
                self._report_capacity(key)
            self._unconfirmed = set(self._tasks) | set(self._orphans)
            self._next_reconcile = (0.0, RECONCILE_FIRST_S)
            for task_id in sorted(self._kills):
                task = self._tasks.get(task_id)
                if task is not None:
                    self._kill(task_id, task.agent_id)
            for task_id in sorted(self._abandoned):
                self._call("killTask", {"value": task_id})
        self._emit()
        self._reconcile()

    @_guarded
    def disconnected(self, driver: Any) -> None:
        # pymesos calls this after every failed connection attempt too: say it once, when the
        # subscription is lost (pymesos logs each attempt on its own line)
        with self._lock:
            was_subscribed, self._subscribed = self._subscribed, False
        if was_subscribed:
            log.warning("disconnected from the Mesos master")
        self.link.disconnected()

    @_guarded
    def processHeartBeat(self, driver: Any) -> None:
        self._last_heartbeat = time.monotonic()
        self.link.event()

    @_guarded
    def resourceOffers(self, driver: Any, offers: list[dict]) -> None:
        self._last_heartbeat = time.monotonic()
        self.link.event()
        with self._lock:
            self._has_agents = True
            for raw in offers:
                try:
                    offer = self._parse_offer(raw)
                except (KeyError, TypeError, ValueError, AttributeError) as error:
                    # One bad offer costs only itself: it is declined, the others are used.
                    offer_id = _offer_id(raw)
                    log.warning("declining malformed offer %s: %s", offer_id or "?", error)
                    self._offer_counts["received"] += 1
                    if offer_id:
                        self._decline([offer_id], self.options.refuse_seconds)
                        if offer_id in self._undeclined:  # still outstanding: try again later
                            self._bad_undeclined.add(offer_id)
                    continue
                role = offer.role
                self._offers[offer.offer_id] = offer
                self._offer_counts["received"] += 1
                key = self._key(offer)
                known = self._agents.get(key)
                if known is None or not known.hostname:
                    attrs = dict(offer.attributes)
                    if len(self.options.roles) > 1:
                        attrs[ROLE_ATTRIBUTE] = role
                    self._agents[key] = AgentInfo(key, offer.hostname, {}, attrs)
                self._report_capacity(key)
                self._kill_orphans(offer.agent_id)
        self._emit()

    def _parse_offer(self, raw: dict) -> _Offer:
        role = raw.get("allocation_info", {}).get("role", self.options.roles[0])
        hostname = raw.get("hostname")
        if not isinstance(hostname, str) or not hostname:
            raise ValueError("no hostname")
        resources = scalars(raw.get("resources", []), role)
        for name, value in resources.items():
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"resource {name!r}: {value}")
        return _Offer(
            offer_id=str(raw["id"]["value"]),
            agent_id=str(raw["agent_id"]["value"]),
            hostname=hostname,
            role=role,
            resources=resources,
            attributes=attributes(raw),
        )

    def _decline(self, offer_ids: list[str], refuse_seconds: float) -> None:
        """Decline; a DECLINE that fails leaves the offers outstanding at the master, so
        they are kept (and used or declined again at the next run) until rescinded."""
        ids = [{"value": i} for i in offer_ids]
        if self._call("declineOffer", ids, {"refuse_seconds": refuse_seconds}):
            self._undeclined.difference_update(offer_ids)
        else:
            self._undeclined.update(offer_ids)

    @_guarded
    def offerRescinded(self, driver: Any, offer_id: dict) -> None:
        with self._lock:
            offer = self._offers.pop(offer_id["value"], None)
            self._undeclined.discard(offer_id["value"])
            self._bad_undeclined.discard(offer_id["value"])
            if offer is not None:
                self._offer_counts["rescinded"] += 1
                self._report_capacity(self._key(offer))
        self._emit()

    @_guarded
    def statusUpdate(self, driver: Any, status: dict) -> None:
        self.link.event()
        task_id = status["task_id"]["value"]
        state = status.get("state", "")
        with self._lock:
            self._unconfirmed.discard(task_id)
            task = self._tasks.get(task_id)
            if task is not None:
                task.state = state
            if state in TERMINAL:
                self._kills.discard(task_id)
            if task_id in self._orphans:
                self._orphan_update(task_id, state, status)
            elif task is not None and state == "TASK_LOST" and lost_by_master(status):
                # the master lost sight of the agent; the executor may well still run there
                self._orphans[task_id] = task.agent_id
        if task is not None and self._events is not None:
            spec = task.spec
            if state == "TASK_RUNNING":
                self._events.status(
                    TaskStatus(spec.tenant_id, spec.executor_id, ExecutorState.RUNNING, state)
                )
            elif state in TERMINAL:
                with self._lock:
                    self._tasks.pop(task_id, None)
                message = f"{state}: {status.get('message', status.get('reason', ''))}"
                self._events.status(
                    TaskStatus(spec.tenant_id, spec.executor_id, TERMINAL[state], message)
                )
                with self._lock:
                    self._report_capacity(task.agent_key)
                self._emit()
        if "uuid" in status:
            self._call("acknowledgeStatusUpdate", status)  # explicit acknowledgements

    @_guarded
    def slaveLost(self, driver: Any, agent_id: dict) -> None:
        """The master removed the agent. Its executors are replaced elsewhere, but they may
        still be running (an agent daemon that died leaves them alive): each is remembered
        as an orphan and killed by id as soon as the agent is seen again."""
        lost = agent_id["value"]
        with self._lock:
            keys = [k for k in self._agents if self._agent_id(k) == lost]
            self._offers = {i: o for i, o in self._offers.items() if o.agent_id != lost}
            for task_id, task in list(self._tasks.items()):
                if task.agent_id == lost:
                    del self._tasks[task_id]
                    self._kills.discard(task_id)
                    self._orphans[task_id] = lost
            for key in keys:
                del self._agents[key]
        for key in keys:
            if self._events is not None:
                self._events.agent_removed(key)

    @_guarded
    def error(self, driver: Any, message: str) -> None:
        log.error("Mesos master error: %s", message)

    @_guarded
    def executorLost(self, driver: Any, executor_id: dict, agent_id: dict, status: Any) -> None:
        log.warning("executor %s lost on agent %s", executor_id, agent_id)

    # Not used by a framework that launches command tasks and never reserves.
    def inverseOffers(self, driver: Any, offers: list) -> None:
        pass

    def inverseOfferRescinded(self, driver: Any, offer_id: dict) -> None:
        pass

    def operationStatusUpdate(self, driver: Any, status: dict) -> None:
        pass

    def frameworkMessage(self, driver: Any, executor_id: dict, agent_id: dict, data: Any) -> None:
        pass

    # ---- internals ---------------------------------------------------------------------
    def _agent_id(self, key: str) -> str:
        """The Mesos agent id of an engine agent (`AGENT` or `AGENT@ROLE`; role names hold
        no '@', agent ids may)."""
        return key if len(self.options.roles) == 1 else key.rsplit("@", 1)[0]

    def _key(self, offer: _Offer) -> str:
        return offer.agent_id if len(self.options.roles) == 1 else f"{offer.agent_id}@{offer.role}"

    def _capacity(self, key: str) -> dict[str, float]:
        """What the broker may use on an engine agent: its held offers plus its tasks."""
        with self._lock:
            total: dict[str, float] = {}
            for offer in self._offers.values():
                if self._key(offer) == key:
                    for r, v in offer.resources.items():
                        total[r] = total.get(r, 0.0) + v
            for task in self._tasks.values():
                if task.agent_key == key:
                    for r, v in task.spec.resources.items():
                        total[r] = total.get(r, 0.0) + v
            return total

    def _report_capacity(self, key: str) -> None:
        """Queue a capacity report for an engine agent; sent by `_emit` once the backend's
        lock is released (the broker's lock comes first). Reports from pymesos's thread and
        the allocation thread can reach the broker in either order, so a report carries no
        snapshot: the broker reads the capacity when it applies it, under its own lock."""
        info = self._agents.get(key)
        if info is None or self._events is None:
            return
        total = self._capacity(key)
        if any(self._key(offer) == key for offer in self._offers.values()):
            self._last_offered[key] = dict(total)
        events = self._events
        if not info.resources:
            if not any(v > 0 for v in total.values()):
                return
            self._agents[key] = info = AgentInfo(key, info.hostname, total, info.attributes)
            self._outbox.append(functools.partial(events.agent_added, info))
            return
        self._outbox.append(functools.partial(events.capacity_changed, key, _Capacity(self, key)))

    def _emit(self) -> None:
        """Send the queued reports to the broker, outside the backend's lock."""
        with self._lock:
            outbox, self._outbox = self._outbox, []
        for report in outbox:
            report()

    def _lost(self, task_id: str, why: str) -> None:
        task = self._tasks.pop(task_id, None)
        if task is not None and self._events is not None:
            self._events.status(
                TaskStatus(task.spec.tenant_id, task.spec.executor_id, ExecutorState.FAILED, why)
            )

    def _kill_orphans(self, agent_id: str) -> None:
        for task_id, lost_on in self._orphans.items():
            if lost_on == agent_id:
                self._kill(task_id, agent_id)

    def _orphan_update(self, task_id: str, state: str, status: dict) -> None:
        """An update for an executor given up with its agent: the master reports it again
        when the agent re-registers (possibly TASK_RUNNING, or a second terminal state).
        Running: kill it. Terminal as the agent or executor reports it: done (the master's
        own TASK_LOST only means it cannot see the task)."""
        agent_id = self._orphans[task_id]
        if state not in TERMINAL:
            log.warning("executor %s of lost agent %s is still running: killing it",
                        task_id, agent_id)  # fmt: skip
            self._kill(task_id, agent_id)
        elif status.get("source") != "SOURCE_MASTER":
            del self._orphans[task_id]

    def _reconcile(self) -> None:
        """Explicit reconciliation of the tasks the master has not confirmed since this
        subscription; repeated by the watchdog with back-off until none is left."""
        with self._lock:
            tasks = sorted(self._unconfirmed)
            backoff = self._next_reconcile[1]
            self._next_reconcile = (time.monotonic() + backoff, min(2 * backoff, RECONCILE_MAX_S))
            bodies = []
            for task_id in tasks:
                task = self._tasks.get(task_id)
                agent = task.agent_id if task else self._orphans.get(task_id)
                bodies.append({"task_id": {"value": task_id}}
                              | ({"agent_id": {"value": agent}} if agent else {}))  # fmt: skip
        self._call("reconcileTasks", bodies)

    def health(self) -> dict[str, object]:
        """The broker's /healthz answer: the link's, and unhealthy also while the master
        the broker is subscribed to has no agents (restarted without its registry)."""
        report = self.link.health()
        with self._lock:
            no_agents = self._subscribed and self._has_agents is False
            unconfirmed = len(self._unconfirmed)
        if no_agents and report["ok"]:
            report.update(ok=False, reason="subscribed, but the Mesos master has no agents")
        report["unreconciled_tasks"] = unconfirmed
        return report

    def _framework_info(self) -> dict:
        roles = list(self.options.roles)
        info: dict[str, Any] = {
            "user": self.options.user or getpass.getuser(),
            "name": self.options.framework_name,
            "failover_timeout": self.options.failover_timeout,
            "checkpoint": True,
            # declared in full: pymesos would add GPU_RESOURCES on its own
            "capabilities": [{"type": "MULTI_ROLE"}]
            + ([{"type": "GPU_RESOURCES"}] if self.options.gpus else []),
            "roles": roles,
        }
        for key in ("hostname", "webui_url"):
            if getattr(self.options, key):
                info[key] = getattr(self.options, key)
        if self.options.principal:
            info["principal"] = self.options.principal
        if self.framework_id:
            info["id"] = {"value": self.framework_id}
        return info

    def _connect(self) -> None:
        self._subscribed = False
        self._driver = self._driver_factory(self, self._framework_info(), self.options)
        self._last_heartbeat = time.monotonic()
        self._driver.start()

    def _watch(self) -> None:
        """pymesos does not notice a silent master: reconnect after missed heartbeats."""
        limit = self.options.heartbeat_timeout
        while not self._stop.wait(min(1.0, limit / 4)):
            now = time.monotonic()
            with self._lock:
                subscribed, reconcile = self._subscribed, self._unconfirmed
                reconcile = reconcile and now >= self._next_reconcile[0]
                look = subscribed and now >= self._next_look
                if look:
                    self._next_look = now + self.options.agents_look_seconds
            if reconcile:
                self._reconcile()
            if look:
                self._look_at_agents()
            if time.monotonic() - self._last_heartbeat > limit:
                log.warning("no heartbeat from the Mesos master for %.0f s; reconnecting", limit)
                self.link.disconnected()
                try:
                    self._driver.stop(failover=True)
                    self._connect()
                except Exception as error:  # one line per attempt; the traceback at debug
                    log.warning("reconnecting to the Mesos master failed: %s", error)
                    log.debug("reconnect failure", exc_info=True)
                    self._last_heartbeat = time.monotonic()

    def _look_at_agents(self) -> None:
        """Ask the leading master which agents it has: a master restarted without its
        registry (no ZooKeeper, in-memory registry) has none, and the broker says so in its
        health; adopted executors' agents get their hostnames before any offer arrives."""
        master = getattr(self._driver, "master", None)
        if not master:
            return
        auth = (
            (self.options.principal, self.options.secret or "") if self.options.principal else None
        )
        try:
            answer = requests.get(f"http://{master}/master/slaves", timeout=10, auth=auth)
            answer.raise_for_status()
            slaves = answer.json().get("slaves", [])
        except (requests.RequestException, ValueError) as error:
            log.warning("cannot read the Mesos master's agents: %s", error)
            return
        with self._lock:
            self._has_agents = bool(slaves)
            if not slaves:
                log.warning("subscribed, but the Mesos master has no agents")
            by_id = {a["id"]: a for a in slaves}
            for key in {t.agent_key for t in self._tasks.values()} - set(self._agents):
                agent = by_id.get(self._agent_id(key))  # agent ids may hold '@'
                if agent is None:
                    continue
                attrs = {k: str(v) for k, v in agent.get("attributes", {}).items()}
                if len(self.options.roles) > 1:  # as for an offer: AGENT@ROLE, roles hold no '@'
                    attrs[ROLE_ATTRIBUTE] = key.rsplit("@", 1)[1]
                self._agents[key] = AgentInfo(key, agent.get("hostname", ""), {}, attrs)
                self._report_capacity(key)
        self._emit()

    def _framework_file(self) -> Path:
        return Path(self.options.state_dir) / "mesos-framework-id"

    def _load_framework_id(self) -> str | None:
        """The id to re-subscribe with; an unreadable file is an error (a silent new
        framework would orphan every task of the old one)."""
        path = self._framework_file()
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as error:
            raise FairbrokerError(f"{path}: cannot read the Mesos framework id ({error})") from None
        if text and not FRAMEWORK_ID.fullmatch(text):
            raise FairbrokerError(f"{path}: not a Mesos framework id: {text[:80]!r}")
        return text or None

    def _save_framework_id(self) -> None:
        path = self._framework_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{self.framework_id}\n")


class _Capacity(Mapping[str, float]):
    """An agent's capacity, read from the backend when the broker applies the report."""

    def __init__(self, backend: MesosBackend, key: str) -> None:
        self._backend, self._key = backend, key

    def _now(self) -> dict[str, float]:
        return self._backend._capacity(self._key)

    def __getitem__(self, name: str) -> float:
        return self._now()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._now())

    def __len__(self) -> int:
        return len(self._now())

    def items(self) -> ItemsView[str, float]:
        return self._now().items()


class _SocketErrorsOnOneLine(logging.Filter):
    """pymesos logs a failed send or receive with logger.exception: a traceback on every
    reconnect attempt. A socket error becomes one line with the error's text; any other
    exception (a bug, in pymesos or in a callback) keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, OSError):
            record.msg = f"{record.getMessage()}: {error.strerror or error}"
            record.args = None
            record.exc_info = record.exc_text = None
        return True


def pymesos_driver(scheduler: MesosBackend, framework: dict, options: MesosOptions) -> Any:
    import pymesos
    from pymesos import MesosSchedulerDriver

    # pymesos adds its own stderr handler to its logger, which also propagates to the
    # root logger: every line twice. The application's logging configuration decides.
    logging.getLogger(pymesos.__name__).handlers.clear()
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if (
            name.split(".")[0] == pymesos.__name__
            and isinstance(logger, logging.Logger)
            and not any(isinstance(f, _SocketErrorsOnOneLine) for f in logger.filters)
        ):
            logger.addFilter(_SocketErrorsOnOneLine())

    class Driver(MesosSchedulerDriver):
        @property
        def framework(self) -> dict:
            return dict(self._framework)  # as given: no capability added, no default timeout

        def wait_stopped(self, timeout: float) -> bool:
            thread = self._io_thread
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout)
            return thread is None or not thread.is_alive()

        def killTask(self, task_id: dict, agent_id: dict | None = None) -> None:
            # pymesos drops the agent id; the master needs it to forward a KILL for a task it
            # does not know (one of an agent that was removed and came back)
            kill = {"task_id": task_id} | ({"agent_id": agent_id} if agent_id else {})
            self._framework_call("KILL", kill=kill)

        def reconcileTasks(self, tasks: list[dict]) -> None:
            self._framework_call("RECONCILE", reconcile={"tasks": tasks})  # agent ids kept

        def _framework_call(self, kind: str, **body: Any) -> None:
            if not self.connected or not self.framework_id:
                raise RuntimeError(f"{kind} before SUBSCRIBED")
            self._send({"type": kind, "framework_id": {"value": self.framework_id}, **body})

        def change_master(self, master: str) -> None:
            # A 307 from a master that is not (yet) the leader sends pymesos straight back:
            # hundreds of redirects a second during an election. Back off between them.
            now = time.monotonic()
            last, delay = getattr(self, "_redirected", (0.0, 0.0))
            if now - last < REDIRECT_MAX_S:
                delay = min(max(delay * 2, REDIRECT_FIRST_S), REDIRECT_MAX_S)
                time.sleep(delay)
            else:
                delay = 0.0
            self._redirected = (time.monotonic(), delay)
            super().change_master(master)

    return Driver(
        scheduler,
        framework,
        options.master,
        use_addict=False,
        implicit_acknowledgements=False,
        principal=options.principal,
        secret=options.secret,
        failover=True,
    )


def _offer_id(raw: object) -> str | None:
    try:
        return str(raw["id"]["value"])  # type: ignore[index]
    except (KeyError, TypeError):
        return None
