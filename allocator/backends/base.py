"""What the broker needs from a cluster backend, and the records they exchange."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class ExecutorState(StrEnum):
    LAUNCHING = "LAUNCHING"  # granted and started, not yet registered with its driver
    RUNNING = "RUNNING"  # registered with its driver
    LEAVING = "LEAVING"  # reclaimed: asked to leave, killed after the reclaim grace
    KILLING = "KILLING"
    FINISHED = "FINISHED"  # exited 0
    FAILED = "FAILED"  # exited non-zero, or lost
    KILLED = "KILLED"  # stopped on request

    @property
    def terminal(self) -> bool:
        return self in (ExecutorState.FINISHED, ExecutorState.FAILED, ExecutorState.KILLED)


@dataclass(frozen=True)
class AgentInfo:
    name: str
    hostname: str
    resources: dict[str, float]
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchSpec:
    """One Spark executor to start on one agent (the broker's grant, made concrete)."""

    tenant_id: str
    executor_id: str
    agent: str
    resources: dict[str, float]  # what the broker accounts for it
    driver_url: str
    app_id: str
    cores: int
    heap_mib: int
    resource_profile_id: int = 0
    environment: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskStatus:
    tenant_id: str
    executor_id: str
    state: ExecutorState
    message: str = ""
    # False: the executor was never handed to the cluster because the backend no longer
    # held room for it (a Mesos offer gone before its ACCEPT), or it was given up with an
    # agent the Mesos master no longer knows: the broker's or the cluster's failure, not
    # the tenant's, so it never counts toward crash-loop protection.
    launched: bool = True


class NoRoom(Exception):
    """`Backend.launch`: the backend holds nothing to launch this executor on (the agent's
    offers are gone or too small). Not the tenant's failure: the broker gives the grant
    back without resting the tenant, and the backend has reported the agent's capacity."""


class KillLedger(Protocol):
    """Where a backend records the KILLs of cluster tasks the broker does not want, before
    sending them (the broker's state file); a restarted broker sends them again."""

    def record_kill(self, task_id: str, agent_id: str, reason: str) -> None:
        """Raises (the store's StoreError) when it cannot be recorded."""

    def forget_kill(self, task_id: str) -> None: ...

    def kills(self) -> dict[str, str]:
        """The kills recorded before this start: task id -> agent id ('' when unknown)."""


class BackendEvents(Protocol):
    """What a backend reports to the broker (from any thread). `kill_ledger` (optional, a
    KillLedger) is where the backend records kills of tasks the broker does not want."""

    def status(self, status: TaskStatus) -> None:
        """An executor changed state."""

    def agent_added(self, agent: AgentInfo) -> None:
        """An agent appeared (e.g. in a Mesos offer) with what the broker may use there."""

    def agent_removed(self, name: str) -> None:
        """An agent is gone; its executors are lost."""

    def capacity_changed(self, name: str, capacity: dict[str, float]) -> None:
        """What the broker may use on an agent in all changed (free offers + its executors)."""


class Backend(Protocol):
    name: str

    def start(self, events: BackendEvents) -> None:
        """Begin reporting to the broker."""

    def agents(self) -> list[AgentInfo]:
        """The agents known at start (a backend may add more through its events)."""

    def tenant_constraints(self, group: str) -> dict[str, str]:
        """Agent attributes a tenant of `group` must be placed on (e.g. its Mesos role)."""

    def launch(self, spec: LaunchSpec) -> str:
        """Start the executor; returns a backend handle (pid, task id) to persist."""

    def kill(self, tenant_id: str, executor_id: str) -> None: ...

    def flush(self, wants_more: bool) -> None:
        """End of an allocation run: carry out the launches made during it (e.g. one Mesos
        ACCEPT per agent) and give back what was not used; `wants_more`: some tenant still
        has executors pending (a Mesos framework suppresses offers when none has)."""

    def adopt(self, spec: LaunchSpec, handle: str) -> bool:
        """After a broker restart: take over a running executor; False if it is gone.
        `handle` is '' when the broker recorded the launch but not its start (a crash in
        between): the backend looks for the executor by its identity."""

    def reconcile(self, adopted: set[tuple[str, str]], abandoned: list[LaunchSpec]) -> None:
        """After recovery: stop the executors the broker abandoned (tenant or agent gone) and
        every other executor of this broker that was not adopted (tenant id, executor id)."""

    def stop(self, kill_executors: bool = True) -> None:
        """Stop reporting; with kill_executors, stop every executor this backend runs."""
