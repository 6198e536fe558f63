"""The master's state machine: subscriptions, offers, the status update stream and faults.

Everything here runs under `MasterCore.lock`. HTTP handler threads call in for calls and
subscriptions; the ticker thread (see master.py) calls `tick()` and `launch_pending()`.
"""

from __future__ import annotations

import base64
import math
import random
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import events, schema, wire
from . import resources as res
from .agents import Exit, Launch, LaunchError, LocalAgent
from .allocator import allocate
from .state import (
    Agent,
    AgentSpec,
    Filter,
    Framework,
    Offer,
    Subscription,
    Task,
)

DEFAULT_REFUSE_S = 5.0
MAX_REFUSE_S = 31_536_000.0  # a year: the allocator caps longer filters
MAX_UPDATE_RETRY_S = 600.0


@dataclass
class RecordedCall:
    """A POST to the scheduler endpoint, as received, with the status it was answered with."""

    type: str | None
    framework_id: str | None
    stream_id: str | None
    body: Any
    status: int
    at: float = field(default_factory=time.time)


def refuse_timeout(filters: dict[str, Any] | None, allocation_interval: float) -> float | None:
    """The filter duration for recovered resources, or None when no filter is installed."""
    refuse = (filters or {}).get("refuse_seconds", DEFAULT_REFUSE_S)
    if not isinstance(refuse, float | int) or not math.isfinite(refuse) or refuse < 0:
        refuse = DEFAULT_REFUSE_S
    refuse = min(float(refuse), MAX_REFUSE_S)
    if refuse == 0:
        return None
    return max(allocation_interval, refuse)


class MasterCore:
    def __init__(
        self,
        *,
        work_dir: Path,
        allocation_interval: float,
        heartbeat_interval: float,
        status_update_retry: float,
        offer_timeout: float | None,
        seed: int | None,
    ) -> None:
        self.lock = threading.RLock()
        self.work_dir = work_dir
        self.allocation_interval = allocation_interval
        self.allocations = 0  # allocation runs so far
        self.heartbeat_interval = heartbeat_interval
        self.status_update_retry = status_update_retry
        self.offer_timeout = offer_timeout
        self.rng = random.Random(seed)
        self.ip = "127.0.0.1"
        self.port = 0
        self.master_id = str(uuid.uuid4())
        self.start_time = time.time()
        self.elected_time = self.start_time
        self.agents: dict[str, Agent] = {}
        self.local: dict[str, LocalAgent] = {}
        self.frameworks: dict[str, Framework] = {}
        self.offers: dict[str, Offer] = {}
        self.filters: list[Filter] = []
        self.launches: deque[Launch] = deque()
        self.allocate_now = True
        self.next_allocation = 0.0
        self.calls: list[RecordedCall] = []
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.injected: dict[str, deque[wire.Answer]] = {}
        self.metrics: dict[str, float] = {}
        self._seq = {"framework": 0, "offer": 0, "agent": 0}
        self._loopback = 0

    # ids -------------------------------------------------------------------------------

    def _next(self, kind: str) -> int:
        n = self._seq[kind]
        self._seq[kind] = n + 1
        return n

    def count(self, key: str, by: float = 1) -> None:
        self.metrics[key] = self.metrics.get(key, 0) + by

    def master_info(self) -> dict[str, Any]:
        return events.master_info(self.master_id, self.ip, self.port)

    # agents ----------------------------------------------------------------------------

    def add_agent(self, spec: AgentSpec) -> Agent:
        with self.lock:
            if any(a.name == spec.name and a.active for a in self.agents.values()):
                raise ValueError(f"agent {spec.name!r} already exists")
            hostname = spec.hostname
            if hostname is None:
                self._loopback += 1
                hostname = f"127.0.1.{self._loopback}"
            agent_id = f"{self.master_id}-S{self._next('agent')}"
            agent = Agent(agent_id, spec, hostname, res.from_spec(spec.resources), time.time())
            self.agents[agent_id] = agent
            self.local[agent_id] = LocalAgent(agent_id, hostname, self.work_dir)
            self.allocate_now = True
            return agent

    def agent_named(self, name: str) -> Agent:
        for agent in self.agents.values():
            if agent.name == name and agent.active:
                return agent
        raise KeyError(f"no active agent named {name!r}")

    # events ----------------------------------------------------------------------------

    def send(self, framework: Framework, event: dict[str, Any]) -> bool:
        """Queue an event on the framework's stream; False when it has none."""
        sub = framework.subscription
        if sub is None:
            return False
        body = events.compact(event)
        self.sent.append((framework.id, body))
        sub.send(wire.dump(body))
        return True

    def record_heartbeat(self, framework_id: str) -> None:
        with self.lock:
            self.sent.append((framework_id, events.heartbeat()))

    # subscription ----------------------------------------------------------------------

    def _refuse(self, sub: Subscription, message: str) -> None:
        body = events.error(message)
        self.sent.append((sub.framework_id, body))
        sub.send(wire.dump(body))
        sub.close()

    def subscribe(self, sub: Subscription, body: dict[str, Any]) -> None:
        with self.lock:
            info = dict(body["framework_info"])
            suppressed = list(body.get("suppressed_roles", []))
            problem = schema.framework_problem(info, suppressed)
            framework_id = info.get("id", {}).get("value")
            known = self.frameworks.get(framework_id) if framework_id else None
            if problem is None and known is not None and known.removed:
                problem = "Framework has been removed"
            if problem is not None:
                self._refuse(sub, problem)
                return
            if known is None:
                if framework_id is None:
                    framework_id = f"{self.master_id}-{self._next('framework'):04d}"
                known = Framework(framework_id, info, time.time())
                self.frameworks[framework_id] = known
            elif known.subscription is not None:
                # Failover to a new connection: the old one is told and closed, and the
                # framework's offers go away without RESCIND or filter.
                old = known.subscription
                known.subscription = None
                self._refuse(old, "Framework failed over")
            self._discard_offers(known)
            info["id"] = {"value": framework_id}
            known.info = info
            sub.framework_id = framework_id
            known.subscription = sub
            known.connected = known.active = True
            known.recovered = False
            known.failover_deadline = None
            known.suppressed = set(suppressed)
            self.send(known, events.subscribed(framework_id, self.heartbeat_interval,
                                               self.master_info()))  # fmt: skip
            self.send(known, events.heartbeat())
            now = time.time()
            for task in known.tasks.values():
                if task.pending:
                    self._forward_head(known, task, now)
            self.allocate_now = True

    def stream_ended(self, sub: Subscription) -> None:
        with self.lock:
            framework = self.frameworks.get(sub.framework_id)
            if framework is not None and framework.subscription is sub:
                self.disconnect(framework)

    def disconnect(self, framework: Framework) -> None:
        """The stream broke: deactivate, recover offers, start the failover timeout."""
        if framework.subscription is not None:
            framework.subscription.drop()
        framework.subscription = None
        framework.connected = framework.active = False
        self._discard_offers(framework)
        framework.failover_deadline = time.time() + framework.failover_timeout

    def remove_framework(self, framework: Framework) -> None:
        framework.removed = True
        framework.connected = framework.active = False
        framework.unregistered_time = time.time()
        framework.failover_deadline = None
        self._discard_offers(framework)
        self.filters = [f for f in self.filters if f.framework_id != framework.id]
        for task in list(framework.tasks.values()):
            task.pending.clear()
            if self.cancel_launch(task):
                # Never started: it ends here, with nobody left to tell.
                self._set_state(task, "TASK_KILLED", events.status(
                    task.task_id, "TASK_KILLED", "SOURCE_MASTER",
                    reason="REASON_TASK_KILLED_DURING_LAUNCH", timestamp=time.time(),
                ))  # fmt: skip
                self.complete(framework, task)
            elif not task.terminal:
                self.local[task.agent_id].kill(framework.id, task.task_id)
        if framework.subscription is not None:
            framework.subscription.close()
            framework.subscription = None

    # offers and filters ----------------------------------------------------------------

    def _discard_offers(self, framework: Framework) -> None:
        for offer in [o for o in self.offers.values() if o.framework_id == framework.id]:
            del self.offers[offer.id]

    def recover(self, offer: Offer, remainder: res.Millis, filters: dict[str, Any] | None,
                with_filter: bool) -> None:  # fmt: skip
        self.offers.pop(offer.id, None)
        if not with_filter or res.is_empty(remainder):
            return
        timeout = refuse_timeout(filters, self.allocation_interval)
        if timeout is not None:
            self.filters.append(Filter(offer.framework_id, offer.role, offer.agent_id,
                                       dict(remainder), time.time() + timeout))  # fmt: skip

    def _allocate(self, now: float) -> None:
        self.allocations += 1  # tests wait on runs, not on time a busy machine stretches
        self.filters = [f for f in self.filters if f.expires > now]
        live_tasks = [
            t for f in self.frameworks.values() for t in f.tasks.values()
            if not t.resources_released
        ]  # fmt: skip
        grants = allocate(
            list(self.agents.values()), list(self.frameworks.values()),
            list(self.offers.values()), live_tasks, self.filters, now, self.rng,
        )  # fmt: skip
        by_framework: dict[str, list[dict[str, Any]]] = {}
        for grant in grants:
            offer_id = f"{self.master_id}-O{self._next('offer')}"
            offer = Offer(offer_id, grant.framework.id, grant.agent.id, grant.role,
                          dict(grant.resources), now)  # fmt: skip
            self.offers[offer_id] = offer
            grant.framework.count("offers/sent")
            body = events.offer(offer, grant.agent, grant.framework)
            by_framework.setdefault(grant.framework.id, []).append(body)
        for framework_id, bodies in by_framework.items():
            self.send(self.frameworks[framework_id], events.offers(bodies))
        self.count("allocator/mesos/allocation_runs")

    # status updates --------------------------------------------------------------------

    def agent_update(self, task: Task, state: str, *, source: str = "SOURCE_EXECUTOR",
                     message: str | None = None, reason: str | None = None) -> None:  # fmt: skip
        """An update from the agent or executor: it carries a uuid and waits for ACKNOWLEDGE."""
        now = time.time()
        status = events.status(
            task.task_id, state, source, agent_id=task.agent_id,
            executor_id=task.task_id if source == "SOURCE_EXECUTOR" else None,
            message=message, reason=reason, with_uuid=True, timestamp=now,
        )  # fmt: skip
        self._set_state(task, state, status)
        framework = self.frameworks.get(task.framework_id)
        if framework is None or framework.removed:
            if task.terminal:
                self.complete(framework, task)
            return
        task.pending.append(status)
        if len(task.pending) == 1:
            self._forward_head(framework, task, now)

    def master_update(self, framework: Framework, task_id: str, state: str, *, reason: str,
                      message: str, agent_id: str | None = None,
                      task: Task | None = None) -> None:  # fmt: skip
        """An update the master makes up: no uuid, nothing to acknowledge."""
        status = events.status(task_id, state, "SOURCE_MASTER", agent_id=agent_id,
                               message=message, reason=reason, timestamp=time.time())  # fmt: skip
        if task is not None:
            self._set_state(task, state, status)
            task.pending.clear()
            if task.terminal:
                self.complete(framework, task)
        self.send(framework, events.update(status))

    def _set_state(self, task: Task, state: str, status: dict[str, Any]) -> None:
        task.state = state
        task.statuses.append({k: v for k, v in status.items() if k != "uuid"})
        self.count(f"master/tasks_{state.removeprefix('TASK_').lower()}/total")
        if task.terminal:
            # Recovered at once, but offered only at the next tick (no allocation here).
            task.resources_released = True

    def complete(self, framework: Framework | None, task: Task) -> None:
        if framework is None:
            return
        if framework.tasks.get(task.task_id) is task:
            del framework.tasks[task.task_id]
            framework.completed_tasks.append(task)

    def _forward_head(self, framework: Framework, task: Task, now: float) -> None:
        if not task.pending:
            return
        if task.head_sent_at is None:
            task.attempts = 0
        task.head_sent_at = now
        # The agent's status update manager backs off exponentially, up to 10 minutes.
        task.retry_after = now + min(MAX_UPDATE_RETRY_S,
                                     self.status_update_retry * 2**task.attempts)  # fmt: skip
        task.attempts += 1
        self.send(framework, events.update(task.pending[0]))

    def acknowledge(self, framework: Framework, body: dict[str, Any]) -> None:
        task = framework.tasks.get(body["task_id"]["value"])
        if task is None or task.agent_id != body["agent_id"]["value"] or not task.pending:
            return
        head = task.pending[0]
        if base64.b64decode(head["uuid"]) != body["uuid"]:
            return
        task.pending.popleft()
        task.head_sent_at = None
        self.count("master/messages_status_update_acknowledgement")
        if task.pending:
            self._forward_head(framework, task, time.time())
        elif task.terminal:
            self.complete(framework, task)

    # launching -------------------------------------------------------------------------

    def queue_launch(self, task: Task) -> None:
        command = task.info.get("command")
        self.launches.append(Launch(task.framework_id, task.task_id, task.agent_id,
                                    command if command is not None else {}))  # fmt: skip

    def cancel_launch(self, task: Task) -> bool:
        for launch in list(self.launches):
            if launch.framework_id == task.framework_id and launch.task_id == task.task_id:
                self.launches.remove(launch)
                return True
        return False

    def launch_pending(self) -> None:
        """Start queued launches (the slow part runs outside the lock)."""
        while True:
            with self.lock:
                if not self.launches:
                    return
                launch = self.launches.popleft()
                framework = self.frameworks.get(launch.framework_id)
                agent = self.agents.get(launch.agent_id)
                if framework is None or agent is None or not agent.active:
                    continue
                task = framework.tasks[launch.task_id]
                if task.state != "TASK_STAGING":
                    continue
                local = self.local[launch.agent_id]
                custom = "executor" in task.info
            error = None
            if custom:
                error = "The test agent runs command tasks only (no custom executors)"
            else:
                try:
                    local.launch(launch)
                except LaunchError as exc:
                    error = str(exc)
            with self.lock:
                if framework.tasks.get(task.task_id) is not task or task.state != "TASK_STAGING":
                    local.kill(task.framework_id, task.task_id, 0.0)
                    continue
                if error is not None:
                    self.agent_update(task, "TASK_FAILED", source="SOURCE_AGENT", message=error,
                                      reason="REASON_CONTAINER_LAUNCH_FAILED")  # fmt: skip
                    continue
                self.agent_update(task, "TASK_STARTING")
                self.agent_update(task, "TASK_RUNNING")

    def _exited(self, exit_: Exit) -> None:
        framework = self.frameworks.get(exit_.framework_id)
        task = framework.tasks.get(exit_.task_id) if framework else None
        if task is None or task.terminal:
            return
        if exit_.returncode == 0:
            state = "TASK_FINISHED"
        elif exit_.killed:
            state = "TASK_KILLED"
        else:
            state = "TASK_FAILED"
        self.agent_update(task, state, message=exit_.message)

    # the ticker ------------------------------------------------------------------------

    def tick(self) -> None:
        exits = [e for local in list(self.local.values()) for e in local.poll()]
        with self.lock:
            for exit_ in exits:
                self._exited(exit_)
            now = time.time()
            for framework in self.frameworks.values():
                if framework.removed:
                    continue
                if framework.failover_deadline is not None and now >= framework.failover_deadline:
                    self.remove_framework(framework)
                    continue
                if framework.connected:
                    for task in framework.tasks.values():
                        if task.pending and now >= task.retry_after:
                            self._forward_head(framework, task, now)
            if self.offer_timeout is not None:
                for offer in [o for o in self.offers.values()
                              if now - o.created >= self.offer_timeout]:  # fmt: skip
                    self.rescind(offer.id)
            if self.allocate_now or now >= self.next_allocation:
                self.allocate_now = False
                self.next_allocation = now + self.allocation_interval
                self._allocate(now)

    # operator actions ------------------------------------------------------------------

    def rescind(self, offer_id: str) -> bool:
        with self.lock:
            offer = self.offers.pop(offer_id, None)
            if offer is None:
                return False
            framework = self.frameworks[offer.framework_id]
            framework.count("offers/rescinded")
            self.send(framework, events.rescind(offer_id))
            return True

    def inject(self, call_type: str, answer: wire.Answer) -> None:
        with self.lock:
            self.injected.setdefault(call_type, deque()).append(answer)

    def take_injected(self, call_type: str) -> wire.Answer | None:
        with self.lock:
            queue = self.injected.get(call_type)
            return queue.popleft() if queue else None
