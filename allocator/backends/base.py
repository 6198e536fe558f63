"""What the broker needs from a cluster backend, and the records they exchange."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class ExecutorState(StrEnum):
    LAUNCHING = "LAUNCHING"  # granted and started, not yet registered with its driver
    RUNNING = "RUNNING"  # registered with its driver
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


StatusCallback = Callable[[TaskStatus], None]


class Backend(Protocol):
    name: str

    def start(self, on_status: StatusCallback) -> None:
        """Begin reporting executor status changes through `on_status`."""

    def agents(self) -> list[AgentInfo]: ...

    def launch(self, spec: LaunchSpec) -> str:
        """Start the executor; returns a backend handle (pid, task id) to persist."""

    def kill(self, tenant_id: str, executor_id: str) -> None: ...

    def adopt(self, spec: LaunchSpec, handle: str) -> bool:
        """After a broker restart: take over a running executor; False if it is gone."""

    def stop(self, kill_executors: bool = True) -> None:
        """Stop reporting; with kill_executors, stop every executor this backend runs."""
