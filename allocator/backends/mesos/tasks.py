"""The broker's Mesos tasks: the TaskInfo of each launch (queued until the run's ACCEPT),
the tasks believed running, their status updates, KILLs (re-sent until a terminal update),
explicit reconciliation with back-off, and orphans: executors given up with a lost agent,
killed by id when that agent is seen again.

Tasks the broker does not want are killed wherever they show up: a running task of this
framework that is not one of the broker's records (an executor given up and replaced whose
agent came back, one the previous broker run abandoned) is killed as soon as an update
(a reconciliation answer included) names it, with the kill recorded first in the broker's
state (`KillLedger`). A task the master calls unknown only because it does not know the
task's agent (a master restarted with `--registry=in_memory` knows no agent until each
re-registers) is not given up at once: it stays the broker's, counted and reconciled, for
`MesosOptions.agent_return_grace`; only then is it replaced (and killed if it returns).

Not thread-safe by itself: the backend calls it under its lock.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from allocator.backends.base import ExecutorState, KillLedger, LaunchSpec, TaskStatus
from allocator.backends.executor import executor_launch
from allocator.backends.mesos.options import AGENT_RETURN_GRACE_S, MesosOptions

log = logging.getLogger(__package__)

RECONCILE_FIRST_S = 2.0  # reconciliation is repeated, doubling, until every task is confirmed
RECONCILE_MAX_S = 60.0
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

#: A call to the master (name, arguments): False when it was not made or failed.
MasterCall = Callable[..., bool]


@dataclass
class Task:
    spec: LaunchSpec
    agent_key: str  # engine agent (AGENT or AGENT@ROLE)
    agent_id: str
    state: str = "TASK_STAGING"


def task_id_of(tenant_id: str, executor_id: str) -> str:
    return f"{tenant_id}.{executor_id}"


def lost_by_master(status: dict) -> bool:
    """A TASK_LOST the master declared (agent unreachable or removed), not the agent."""
    return status.get("source") == "SOURCE_MASTER" and status.get("reason") not in (
        "REASON_RECONCILIATION", "REASON_INVALID_OFFERS",
    )  # fmt: skip


def agent_unknown(state: str, status: dict) -> bool:
    """The master's reconciliation answer for a task whose agent it does not know (not
    registered, not recovering, not unreachable): "Reconciliation: Task is unknown", TASK_LOST
    (TASK_UNKNOWN for a partition-aware framework), reason REASON_RECONCILIATION. The task
    may come back with its agent. When the master knows the agent and the agent has no such
    task, the message says "unknown to the agent": that task is gone."""
    return (
        state in ("TASK_LOST", "TASK_UNKNOWN")
        and status.get("source") == "SOURCE_MASTER"
        and status.get("reason") == "REASON_RECONCILIATION"
        and "to the agent" not in str(status.get("message", ""))
        and "unreachable" not in str(status.get("message", ""))
    )


def ended(status: dict) -> bool:
    """A terminal update that means the task no longer runs anywhere: one from its agent or
    executor, or the master's word that the agent it knows has no such task (the master's
    other terminal answers only say it cannot see the task now)."""
    return status.get("source") != "SOURCE_MASTER" or "to the agent" in str(
        status.get("message", "")
    )


class MemoryLedger:
    """A KillLedger that keeps nothing across restarts (a broker without a state file)."""

    def record_kill(self, task_id: str, agent_id: str, reason: str) -> None:
        pass

    def forget_kill(self, task_id: str) -> None:
        pass

    def kills(self) -> dict[str, str]:
        return {}


def task_info(
    spec: LaunchSpec, task_id: str, agent_id: str, hostname: str, options: MesosOptions
) -> dict:
    """The TaskInfo of one executor: its resources are exactly the broker's demand."""
    spark_class = (
        "./bin/spark-class" if options.spark_uri else f"{options.spark_home}/bin/spark-class"
    )
    command = executor_launch(
        spec, spark_class=spark_class, hostname=hostname, policy=options.executor_env
    )  # the agent provides the base environment, never the broker
    # No "role": in Mesos 1.x a Resource.role other than "*" means *statically
    # reserved*, which these resources are not (the master would answer TASK_ERROR);
    # the master injects the offer's allocation_info itself.
    resources = [
        {"name": name, "type": "SCALAR", "scalar": {"value": round(value, 3)}}
        for name, value in sorted(spec.resources.items())
        if value > 0
    ]
    # exec: the executor (spark-class execs the JVM) is the task's process, not a child of
    # `sh -c`, so the KILL's SIGTERM reaches it and the grace before SIGKILL is its own (a
    # shell in between would die at once and end the task while the JVM shuts down)
    value = "exec " + shlex.join(command.argv)
    uris = []
    if options.spark_uri:
        # as Spark's own Mesos backend does: the tarball unpacks to <basename>*/ in the
        # sandbox, and the executor starts from there
        uris = [{"value": options.spark_uri, "extract": True}]
        basename = options.spark_uri.rstrip("/").split("/")[-1].split(".")[0]
        value = f"cd {shlex.quote(basename)}*; {value}"
    return {
        "name": f"fairbroker {spec.tenant_id} executor {spec.executor_id}",
        "task_id": {"value": task_id},
        "agent_id": {"value": agent_id},
        "resources": resources,
        # The grace of kills by the agent's v0 command executor (Mesos's default,
        # --http_command_executor=false), which drops a KILL call's own kill_policy.
        "kill_policy": options.kill_policy(),
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


class TaskBook:
    def __init__(
        self, options: MesosOptions, call: MasterCall, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.options = options
        self._call = call
        self._clock = clock
        self.ledger: KillLedger = MemoryLedger()
        self.tasks: dict[str, Task] = {}
        self.pending: dict[str, list[dict]] = {}  # agent key -> TaskInfos of this run
        self.kills: set[str] = set()  # KILLs to (re)send once subscribed
        self.unconfirmed: set[str] = set()  # tasks the master has not reported since subscribing
        self.next_reconcile = (0.0, RECONCILE_FIRST_S)  # (when, back-off)
        self.orphans: dict[str, str] = {}  # task id -> agent id: given up with a lost agent
        self.abandoned: set[str] = set()  # task ids the broker dropped at recovery
        # task id -> agent id ('' unknown): killed because the broker does not want them,
        # recorded in the ledger, re-sent after each subscription until a terminal update
        self.unwanted: dict[str, str] = {}
        # task id -> since when the master says it does not know the task's agent
        self.awaiting: dict[str, float] = {}
        self.master_grace: float | None = None  # from the master's flags, once read
        # Until the broker has recovered its records, a running task it does not know may
        # be one it is about to adopt: such tasks wait here (task id -> agent id).
        self.recovered = False
        self.unclaimed: dict[str, str] = {}

    # ---- launches ----------------------------------------------------------------------
    def launch(self, spec: LaunchSpec, hostname: str) -> str:
        """Queue the executor's TaskInfo for the run's ACCEPT on its agent."""
        agent_id = self.options.agent_id(spec.agent)
        task_id = task_id_of(spec.tenant_id, spec.executor_id)
        self.pending.setdefault(spec.agent, []).append(
            task_info(spec, task_id, agent_id, hostname, self.options)
        )
        self.tasks[task_id] = Task(spec, spec.agent, agent_id)
        return task_id

    def take_pending(self) -> dict[str, list[dict]]:
        pending, self.pending = self.pending, {}
        return pending

    def adopt(self, spec: LaunchSpec, handle: str) -> None:
        """After a broker restart: the task is assumed alive; reconciliation corrects it
        (a task whose launch was recorded but not its ACCEPT has its deterministic id)."""
        task_id = handle or task_id_of(spec.tenant_id, spec.executor_id)
        self.tasks[task_id] = Task(spec, spec.agent, self.options.agent_id(spec.agent),
                                   "TASK_RUNNING")  # fmt: skip

    def lost(self, task_id: str, why: str) -> TaskStatus | None:
        """Forget a task that never ran (its ACCEPT refused, its offer gone): the status to
        report, if the task was known."""
        task = self.tasks.pop(task_id, None)
        if task is None:
            return None
        return TaskStatus(task.spec.tenant_id, task.spec.executor_id, ExecutorState.FAILED, why)

    def resources_on(self, key: str) -> Iterator[Mapping[str, float]]:
        """The resources of each task on an engine agent."""
        return (task.spec.resources for task in self.tasks.values() if task.agent_key == key)

    def agent_keys(self) -> set[str]:
        return {task.agent_key for task in self.tasks.values()}

    # ---- kills -------------------------------------------------------------------------
    def kill(self, tenant_id: str, executor_id: str) -> None:
        task_id = task_id_of(tenant_id, executor_id)
        task = self.tasks.get(task_id)
        if task is not None:
            self.kills.add(task_id)  # until the task's terminal update arrives
            self._kill(task_id, task.agent_id)

    def _kill(self, task_id: str, agent_id: str | None) -> bool:
        """KILL with the options' kill_policy (as the TaskInfo's, for executors that honour
        only that one): the executor gets SIGTERM, then SIGKILL after the grace. TASK_KILLED
        maps to KILLED, never to a failure."""
        agent = {"value": agent_id} if agent_id else None
        return self._call("killTask", {"value": task_id}, agent, self.options.kill_policy())

    def kill_abandoned(self, specs: list[LaunchSpec]) -> None:
        """Kill the tasks of executors the broker abandoned at recovery (again once
        subscribed, as the driver may not be connected yet)."""
        self.abandoned.update(task_id_of(spec.tenant_id, spec.executor_id) for spec in specs)
        for task_id in self.abandoned:
            self._kill(task_id, None)

    def recovery_done(self) -> None:
        """The broker's records are complete: the kills the previous run recorded are sent
        again, and every running task seen meanwhile that is not the broker's is killed."""
        self.recovered = True
        for task_id, agent_id in self.ledger.kills().items():
            if task_id not in self.tasks:
                self.unwanted[task_id] = agent_id
                self._kill(task_id, agent_id or None)
        unclaimed, self.unclaimed = self.unclaimed, {}
        for task_id, agent_id in unclaimed.items():
            if task_id not in self.tasks:
                self.kill_unwanted(task_id, agent_id, "not one of the broker's executors")

    def kill_unwanted(self, task_id: str, agent_id: str, why: str) -> None:
        """Kill a task the broker does not want, recorded first (write-ahead, as a launch
        is); a failed record does not stop the KILL (the task is killed again whenever it is
        seen, recorded or not)."""
        if task_id not in self.unwanted:
            log.warning("killing task %s on agent %s: %s", task_id, agent_id or "?", why)
            try:
                self.ledger.record_kill(task_id, agent_id, why)
            except Exception as error:  # the store's StoreError: logged, the kill goes on
                log.error("kill of task %s not recorded: %s", task_id, error)
        self.unwanted[task_id] = agent_id
        self._kill(task_id, agent_id or None)

    def kill_orphans(self, agent_id: str) -> None:
        """The agent is seen again: kill the executors given up with it."""
        for task_id, lost_on in list(self.orphans.items()):
            if lost_on == agent_id:
                self.kill_unwanted(task_id, agent_id, "given up with its agent, since replaced")

    # ---- subscription and reconciliation ----------------------------------------------
    def subscribed_again(self) -> None:
        """Every known task is unconfirmed until the master reports it; pending KILLs (and
        those of executors abandoned at recovery) are re-sent."""
        self.unconfirmed = set(self.tasks) | set(self.orphans)
        self.next_reconcile = (0.0, RECONCILE_FIRST_S)
        self.master_grace = None  # this master's flags are read again
        for task_id in sorted(self.kills):
            task = self.tasks.get(task_id)
            if task is not None:
                self._kill(task_id, task.agent_id)
        for task_id in sorted(self.abandoned):
            self._kill(task_id, None)
        for task_id, agent_id in sorted(self.unwanted.items()):
            self._kill(task_id, agent_id or None)

    def reconcile_due(self, now: float) -> bool:
        return bool(self.unconfirmed) and now >= self.next_reconcile[0]

    def reconcile_bodies(self, now: float, schedule: bool = True) -> list[dict]:
        """The RECONCILE of the tasks the master has not confirmed since this subscription;
        `schedule`: the next one follows after the back-off, which doubles up to
        RECONCILE_MAX_S."""
        if schedule:
            backoff = self.next_reconcile[1]
            self.next_reconcile = (now + backoff, min(2 * backoff, RECONCILE_MAX_S))
        bodies = []
        for task_id in sorted(self.unconfirmed):
            task = self.tasks.get(task_id)
            agent = task.agent_id if task else self.orphans.get(task_id)
            bodies.append({"task_id": {"value": task_id}}
                          | ({"agent_id": {"value": agent}} if agent else {}))  # fmt: skip
        return bodies

    # ---- status updates and lost agents ------------------------------------------------
    def update(self, task_id: str, state: str, status: dict) -> Task | None:
        """Record a status update (the task is still listed, even when terminal: the
        backend reports it first, then calls `finished`); the task, if it is the broker's
        and the update is to be reported (not while its agent is awaited)."""
        task = self.tasks.get(task_id)
        if task is not None and agent_unknown(state, status):
            self._await_agent(task_id, task)
            return None
        self.unconfirmed.discard(task_id)
        self.awaiting.pop(task_id, None)
        if task is not None:
            task.state = state
        if state in TERMINAL:
            self.kills.discard(task_id)
            if task_id in self.unwanted and ended(status):
                del self.unwanted[task_id]
                self._forget_kill(task_id)
        agent_id = str(status.get("agent_id", {}).get("value", ""))
        if task_id in self.orphans:
            self._orphan_update(task_id, state, status)
        elif task is not None and state == "TASK_LOST" and lost_by_master(status):
            # the master lost sight of the agent; the executor may well still run there
            self.orphans[task_id] = task.agent_id
        elif task is None and state not in TERMINAL:
            if task_id in self.abandoned:
                self._kill(task_id, agent_id or None)
            elif not self.recovered:
                self.unclaimed[task_id] = agent_id
            else:
                self.kill_unwanted(task_id, agent_id, "not (or no longer) one of the "
                                   "broker's executors")  # fmt: skip
        return task

    def _forget_kill(self, task_id: str) -> None:
        try:
            self.ledger.forget_kill(task_id)
        except Exception as error:  # a stale row only repeats a KILL at the next start
            log.error("kill of task %s not forgotten: %s", task_id, error)

    def _await_agent(self, task_id: str, task: Task) -> None:
        """The master does not know the task's agent: the task stays the broker's and
        unconfirmed (reconciled again) until the agent returns or the grace is over."""
        self.unconfirmed.add(task_id)
        if task_id not in self.awaiting:
            self.awaiting[task_id] = self._clock()
            log.warning("task %s: the master does not know its agent %s (yet); waiting up to "
                        "%.0f s for the agent to re-register before replacing it",
                        task_id, task.agent_id, self.agent_return_grace)  # fmt: skip

    @property
    def agent_return_grace(self) -> float:
        """How long a task whose agent the master does not know stays the broker's."""
        if self.options.agent_return_grace is not None:
            return self.options.agent_return_grace
        return AGENT_RETURN_GRACE_S if self.master_grace is None else self.master_grace

    def given_up(self) -> list[Task]:
        """Tasks whose agent did not return within the grace: no longer the broker's (the
        backend reports them failed); each is an orphan, killed if its agent comes back."""
        now, grace = self._clock(), self.agent_return_grace
        out = []
        for task_id, since in list(self.awaiting.items()):
            if now < since + grace:
                continue
            del self.awaiting[task_id]
            self.unconfirmed.discard(task_id)
            task = self.tasks.pop(task_id, None)
            if task is None:
                continue
            self.kills.discard(task_id)
            self.orphans[task_id] = task.agent_id
            out.append(task)
        return out

    def framework_removed(self) -> list[Task]:
        """The master removed the framework for good: it killed every task, and no call can
        reach them any more. Everything about them is dropped; returns the broker's tasks."""
        tasks = list(self.tasks.values())
        for task_id in self.ledger.kills():
            self.ledger.forget_kill(task_id)
        self.tasks, self.pending, self.kills, self.unconfirmed = {}, {}, set(), set()
        self.orphans, self.unwanted, self.awaiting, self.unclaimed = {}, {}, {}, {}
        self.abandoned = set()
        return tasks

    def finished(self, task_id: str) -> None:
        self.tasks.pop(task_id, None)

    def _orphan_update(self, task_id: str, state: str, status: dict) -> None:
        """An update for an executor given up with its agent: the master reports it again
        when the agent re-registers (possibly TASK_RUNNING, or a second terminal state).
        Running: kill it. Terminal as the agent or executor reports it: done (the master's
        own TASK_LOST only means it cannot see the task)."""
        agent_id = self.orphans[task_id]
        if state not in TERMINAL:
            self.kill_unwanted(task_id, agent_id, "given up with its agent, since replaced; "
                               "still running")  # fmt: skip
        elif status.get("source") != "SOURCE_MASTER":
            del self.orphans[task_id]

    def agent_lost(self, agent_id: str) -> None:
        """The master removed the agent. Its executors are replaced elsewhere, but they may
        still be running (an agent daemon that died leaves them alive): each is remembered
        as an orphan and killed by id as soon as the agent is seen again."""
        for task_id, task in list(self.tasks.items()):
            if task.agent_id == agent_id:
                del self.tasks[task_id]
                self.kills.discard(task_id)
                self.orphans[task_id] = agent_id
