"""The Mesos backend the broker talks to: it composes the link to the master
(`link.Subscription`), the book of offers held (`offers.OfferBook`) and the broker's tasks
(`tasks.TaskBook`), and receives pymesos's callbacks, each of which may touch all three.

Each allocation run's launches on an agent become one ACCEPT of that agent's offers with a
LAUNCH per executor, and the offers a run leaves unused are declined with a refuse filter.
With no executor pending the framework SUPPRESSes, and REVIVEs when demand returns.

pymesos runs callbacks on its IO thread and re-raises any exception from them in the main
thread; every callback here is wrapped so nothing escapes. One lock guards the three pieces;
reports to the broker are sent once it is released (the broker's lock comes first).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from allocator.backends.base import (
    AgentInfo,
    BackendEvents,
    ExecutorState,
    LaunchSpec,
    NoRoom,
    TaskStatus,
)
from allocator.backends.mesos.driver import pymesos_driver
from allocator.backends.mesos.link import REFUSAL_EVERY_S, Subscription, agent_silence_seconds
from allocator.backends.mesos.offers import OfferBook, scalars
from allocator.backends.mesos.options import AGENT_RETURN_MARGIN_S, ROLE_ATTRIBUTE, MesosOptions
from allocator.backends.mesos.tasks import TERMINAL, Task, TaskBook, task_id_of
from allocator.errors import FairbrokerError

log = logging.getLogger(__package__)


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
        if any("@" in role for role in options.roles):
            raise FairbrokerError(f"roles: a Mesos role name holds no '@', got {options.roles}")
        self.options = options
        if driver_factory is None and threading.current_thread() is threading.main_thread():
            # pymesos installs a SIGINT handler when imported, which only the main thread may
            # do; with --ha the driver is started on the election thread at a take-over
            import pymesos  # noqa: F401
        self._lock = threading.RLock()
        self._events: BackendEvents | None = None
        self.subscription = Subscription(options, self, driver_factory or pymesos_driver)
        self.link = self.subscription.link  # the link's state, for metrics, status and health
        self.tasks = TaskBook(options, self.subscription.call)
        self.offers = OfferBook(options, self.subscription.call, self.tasks.resources_on,
                                self._lock)  # fmt: skip
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        # Mesos agent ids seen (offered, or listed by the master) since this subscription: a
        # new one may bring back tasks the broker gave up or never had (implicit RECONCILE)
        self._agents_seen: set[str] = set()
        self.torn_down = False  # set by stop(kill_executors=True) once the master confirms

    @property
    def framework_id(self) -> str | None:
        return self.subscription.framework_id

    def keep_framework_id_in(self, ids: Any) -> None:
        """Keep the framework id in `ids` (load/save/forget, `path`) instead of the state
        directory's file: with --ha, the state in ZooKeeper, read by whichever broker takes
        over (loaded when it subscribes)."""
        self.subscription.id_file = ids
        self.subscription.framework_id = None

    # ---- Backend -----------------------------------------------------------------------
    def start(self, events: BackendEvents) -> None:
        self._events = self.offers.events = events
        ledger = getattr(events, "kill_ledger", None)
        if ledger is not None:
            self.tasks.ledger = ledger
        self.subscription.connect()
        self._watchdog = threading.Thread(target=self._watch, name="mesos-watchdog", daemon=True)
        self._watchdog.start()

    def agents(self) -> list[AgentInfo]:
        return []  # they arrive with offers

    def last_offered(self) -> dict[str, dict[str, float]]:
        """Each agent's total when it was last offered (for status and metrics: between
        offers, and while suppressed, the capacity the broker holds is only its tasks)."""
        with self._lock:
            return {key: dict(total) for key, total in self.offers.last_offered.items()}

    def offer_stats(self) -> dict[str, int]:
        """Offers held now and counted by outcome (for the metrics)."""
        with self._lock:
            return self.offers.stats()

    @property
    def pooled_attribute(self) -> str | None:
        """With several roles the master offers each role its own copy of an agent
        (`AGENT@ROLE`, attribute ROLE_ATTRIBUTE): the broker's role level weighs the roles
        against each other on every copy (Engine.pooled_attribute)."""
        return ROLE_ATTRIBUTE if self.options.several_roles else None

    def tenant_constraints(self, group: str) -> dict[str, str]:
        """With several roles, a tenant runs in offers of its group's role (else the first)."""
        roles = self.options.roles
        if len(roles) == 1:
            return {}
        return {ROLE_ATTRIBUTE: group if group in roles else roles[0]}

    def launch(self, spec: LaunchSpec) -> str:
        """Queue the executor for its agent's ACCEPT; NoRoom when the offers held for that
        agent, less the launches already queued on them, cannot hold it (the engine's
        capacity was stale): the agent's capacity is reported before raising."""
        with self._lock:
            agent = self.offers.agents.get(spec.agent)
            free = self.offers.room(spec.agent)
            for task in self.tasks.pending.get(spec.agent, []):
                for r, v in scalars(task["resources"]).items():
                    free[r] = free.get(r, 0.0) - v
            short = sorted(r for r, v in spec.resources.items() if v > free.get(r, 0.0) + 1e-9)
            if agent is None or short:
                self.offers.report_capacity(spec.agent)
                why = "agent not known" if agent is None else f"no offer held for {short}"
            else:
                return self.tasks.launch(spec, agent.hostname)
        self._emit()
        raise NoRoom(f"{spec.agent}: {why}")

    def flush(self, wants_more: bool = True) -> None:
        """Accept the offers of agents that got launches, decline the rest; suppress when
        nothing is pending."""
        with self._lock:
            self.offers.decline_malformed_again()
            pending = self.tasks.take_pending()
            counts = self.offers.counts
            for key, offers in self.offers.take_by_agent().items():
                ids = [{"value": o.offer_id} for o in offers]
                tasks = pending.pop(key, [])
                if tasks:
                    operations = [{"type": "LAUNCH", "launch": {"task_infos": tasks}}]
                    accepted = self.subscription.call(
                        "acceptOffers", ids, operations, {"refuse_seconds": 1.0}
                    )
                    counts["accepted" if accepted else "declined"] += len(ids)
                    if not accepted:
                        # Never launched: the executors are lost to the broker, and the offers,
                        # still outstanding at the master, are handed back at once. Without a
                        # subscription the offers died with it: the broker's failure.
                        gone = not self.subscription.subscribed
                        why = "offer gone with the subscription" if gone else "ACCEPT refused"
                        for task in tasks:
                            self._lost(task["task_id"]["value"], why, launched=not gone)
                        self.offers.decline([o.offer_id for o in offers], 0.0)
                else:
                    self.offers.decline([o.offer_id for o in offers], self.options.refuse_seconds)
                    counts["declined"] += len(ids)
                self.offers.keep_outstanding(offers)  # still outstanding at the master
                self.offers.report_capacity(key)
            for key, tasks in pending.items():  # offers gone (rescinded) before the accept
                for task in tasks:
                    self._lost(task["task_id"]["value"], "offer no longer held", launched=False)
                self.offers.report_capacity(key)
            self.subscription.want_offers(wants_more)
        self._emit()

    def kill(self, tenant_id: str, executor_id: str) -> None:
        with self._lock:
            self.tasks.kill(tenant_id, executor_id)

    def adopt(self, spec: LaunchSpec, handle: str) -> bool:
        with self._lock:
            self.tasks.adopt(spec, handle)
        return True

    def reconcile(self, adopted: set[tuple[str, str]], abandoned: list[LaunchSpec]) -> None:
        with self._lock:
            self.tasks.kill_abandoned(abandoned)
            self.tasks.recovery_done()
        self._reconcile(implicit=True)  # every task the master knows, to find the unwanted

    def stop(self, kill_executors: bool = True) -> None:
        self._stop.set()
        driver = self.subscription.driver
        if driver is None:
            return
        if kill_executors:
            with self._lock:
                for task_id in list(self.tasks.tasks):
                    driver.killTask({"value": task_id})
        self.torn_down = self.subscription.stop(kill_executors)

    def health(self) -> dict[str, object]:
        with self._lock:
            return self.subscription.health(len(self.tasks.unconfirmed))

    # ---- pymesos scheduler callbacks ---------------------------------------------------
    @_guarded
    def registered(self, driver: Any, framework_id: dict, master_info: dict) -> None:
        self.subscription.registered(framework_id["value"])
        log.info("registered with Mesos as framework %s", self.framework_id)
        self._subscribed_again()

    @_guarded
    def reregistered(self, driver: Any, master_info: dict) -> None:
        log.info("re-registered with Mesos (framework %s)", self.framework_id)
        self._subscribed_again()

    def _subscribed_again(self) -> None:
        """A new subscription: the master discarded this framework's offers (without a
        rescind) and its suppression; pending KILLs are re-sent and every known task is
        reconciled until the master confirms it."""
        with self._lock:
            self.subscription.subscribed_again()
            self.offers.forget_offers()
            self.tasks.subscribed_again()
            self._agents_seen.clear()
        self._emit()
        self._reconcile(implicit=True)

    @_guarded
    def disconnected(self, driver: Any) -> None:
        # pymesos calls this after every failed connection attempt too: say it once, when the
        # subscription is lost (pymesos logs each attempt on its own line)
        with self._lock:
            was_subscribed = self.subscription.lost()
        if was_subscribed:
            log.warning("disconnected from the Mesos master")
        self.link.disconnected()

    @_guarded
    def processHeartBeat(self, driver: Any) -> None:
        self.subscription.heard()

    @_guarded
    def resourceOffers(self, driver: Any, offers: list[dict]) -> None:
        self.subscription.heard()
        with self._lock:
            self.subscription.has_agents = True
            new = False
            for raw in offers:
                offer = self.offers.receive(raw)
                if offer is not None:
                    self.tasks.kill_orphans(offer.agent_id)
                    new |= self._seen(offer.agent_id)
        self._emit()
        if new:
            self._reconcile(implicit=True, now=True)

    @_guarded
    def offerRescinded(self, driver: Any, offer_id: dict) -> None:
        with self._lock:
            self.offers.rescind(offer_id["value"])
        self._emit()

    @_guarded
    def statusUpdate(self, driver: Any, status: dict) -> None:
        self.subscription.heard(heartbeat=False)
        task_id = status["task_id"]["value"]
        state = status.get("state", "")
        with self._lock:
            task = self.tasks.update(task_id, state, status)
        if task is not None and self._events is not None:
            spec = task.spec
            if state == "TASK_RUNNING":
                self._events.status(
                    TaskStatus(spec.tenant_id, spec.executor_id, ExecutorState.RUNNING, state)
                )
            elif state in TERMINAL:
                with self._lock:
                    self.tasks.finished(task_id)
                message = f"{state}: {status.get('message', status.get('reason', ''))}"
                self._events.status(
                    TaskStatus(spec.tenant_id, spec.executor_id, TERMINAL[state], message)
                )
                with self._lock:
                    self.offers.report_capacity(task.agent_key)
                self._emit()
        if "uuid" in status:
            self.subscription.call("acknowledgeStatusUpdate", status)  # explicit acknowledgements

    @_guarded
    def slaveLost(self, driver: Any, agent_id: dict) -> None:
        """The master removed the agent: its offers and engine agents are gone, its tasks
        become orphans (killed when the agent is seen again), the broker is told."""
        lost = agent_id["value"]
        with self._lock:
            keys = self.offers.remove_agent(lost)
            self.tasks.agent_lost(lost)
        for key in keys:
            if self._events is not None:
                self._events.agent_removed(key)

    @_guarded
    def error(self, driver: Any, message: str) -> None:
        if self.subscription.refused(message):
            log.error("Mesos master error: %s (repeats not logged for %.0f s)", message,
                      REFUSAL_EVERY_S)  # fmt: skip

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
    def _emit(self) -> None:
        """Send the queued reports to the broker, outside the backend's lock."""
        with self._lock:
            reports = self.offers.take_reports()
        for report in reports:
            report()

    def _lost(self, task_id: str, why: str, launched: bool = True) -> None:
        """A task that never ran; `launched` False: it never reached the master (the
        broker's failure, not the tenant's)."""
        status = self.tasks.lost(task_id, why)
        if status is not None and self._events is not None:
            self._events.status(dataclasses.replace(status, launched=launched))

    def _seen(self, agent_id: str) -> bool:
        """Note an agent seen since this subscription; whether it is new."""
        new = agent_id not in self._agents_seen
        self._agents_seen.add(agent_id)
        return new

    def _reconcile(self, implicit: bool = False, now: bool = False) -> None:
        """Explicit reconciliation of the tasks the master has not confirmed since this
        subscription (repeated by the watchdog with back-off until none is left; `now`: an
        extra one, the back-off unchanged); `implicit`: also an empty RECONCILE, which the
        master answers with every task of the framework it knows, so a task the broker
        does not want is seen (and killed) even if nothing else would report it."""
        with self._lock:
            bodies = self.tasks.reconcile_bodies(time.monotonic(), schedule=not now)
        if bodies:
            self.subscription.call("reconcileTasks", bodies)
        if implicit:
            self.subscription.call("reconcileTasks", [])

    def _give_up(self) -> None:
        """Tasks whose agent the master still does not know after the grace: reported
        failed (the broker replaces them); each is killed if its agent comes back."""
        with self._lock:
            tasks = self.tasks.given_up()
        for task in tasks:
            log.warning("task %s: its agent %s did not re-register within %.0f s; replacing it",
                        task_id_of(task.spec.tenant_id, task.spec.executor_id), task.agent_id,
                        self.tasks.agent_return_grace)  # fmt: skip
        self._replaced(tasks, lambda task: f"agent {task.agent_id} unknown to the master for "
                       f"{self.tasks.agent_return_grace:.0f} s")  # fmt: skip

    def _replaced(self, tasks: list[Task], why: Callable[[Task], str]) -> None:
        """Tasks no longer the broker's through no fault of their tenants (their agent lost,
        their framework removed): each reported failed, `launched=False` so its tenant is
        not rested, and its agent's capacity reported again."""
        for task in tasks:
            if self._events is not None:
                self._events.status(TaskStatus(
                    task.spec.tenant_id, task.spec.executor_id, ExecutorState.FAILED,
                    why(task), launched=False,
                ))  # fmt: skip
            with self._lock:
                self.offers.report_capacity(task.agent_key)
        if tasks:
            self._emit()

    def _watch(self) -> None:
        """pymesos does not notice a silent master: reconnect after missed heartbeats. Also
        repeats reconciliation and reads the master's agent list when due."""
        limit = self.options.heartbeat_timeout
        while not self._stop.wait(min(1.0, limit / 4)):
            now = time.monotonic()
            with self._lock:
                reconcile = self.tasks.reconcile_due(now)
                look = self.subscription.look_due(now)
            if reconcile:
                self._reconcile()
            self._give_up()
            if look:
                self._look_at_agents()
            if self.options.register_anew_if_removed and self.subscription.removed_for_good():
                self._replace_removed_framework()
            if self.subscription.heartbeats_missed():
                log.warning("no heartbeat from the Mesos master for %.0f s; reconnecting", limit)
                self.subscription.reconnect()

    def _replace_removed_framework(self) -> None:
        """The master removed the framework and killed its tasks: each is reported failed
        (replaced), then a new framework subscribes."""
        with self._lock:
            tasks = self.tasks.framework_removed()
        self._replaced(tasks, lambda _: "its Mesos framework was removed by the master")
        self.subscription.reconnect()

    def _look_at_agents(self) -> None:
        """Ask the leading master which agents it has: a master restarted without its
        registry has none, and the broker says so in its health; adopted executors' agents
        get their hostnames before any offer arrives."""
        if self.tasks.master_grace is None:
            flags = self.subscription.master_flags()
            silence = agent_silence_seconds(flags) if flags is not None else None
            if silence is not None:
                with self._lock:
                    self.tasks.master_grace = silence + AGENT_RETURN_MARGIN_S
        slaves = self.subscription.master_agents()
        if slaves is None:
            return
        with self._lock:
            self.subscription.has_agents = bool(slaves)
            if not slaves:
                log.warning("subscribed, but the Mesos master has no agents")
            by_id = {a["id"]: a for a in slaves}
            # a list, not a generator: every agent is noted, not only up to the first new one
            new = any([self._seen(agent_id) for agent_id in by_id])
            for key in self.tasks.agent_keys() - set(self.offers.agents):
                agent = by_id.get(self.options.agent_id(key))  # agent ids may hold '@'
                if agent is None:
                    continue
                attrs = {k: str(v) for k, v in agent.get("attributes", {}).items()}
                attrs.update(self.options.role_attributes(key))  # as for an offer
                self.offers.agents[key] = AgentInfo(key, agent.get("hostname", ""), {}, attrs)
                self.offers.report_capacity(key)
        self._emit()
        if new:  # agents the broker's tasks fill are never offered: the list shows them
            self._reconcile(implicit=True, now=True)
