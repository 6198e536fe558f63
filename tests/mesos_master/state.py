"""What the test master knows: agents, frameworks, offers, tasks and refuse filters."""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import resources as res

TERMINAL_STATES = frozenset({
    "TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_DROPPED", "TASK_GONE",
    "TASK_LOST", "TASK_GONE_BY_OPERATOR",
})  # fmt: skip
ALL_TASK_STATES = (
    "TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING", "TASK_FINISHED",
    "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED", "TASK_UNREACHABLE",
    "TASK_GONE", "TASK_GONE_BY_OPERATOR", "TASK_UNKNOWN",
)  # fmt: skip


@dataclass(frozen=True)
class AgentSpec:
    """A local agent: its name, scalar resources (mem and disk in MiB) and attributes.

    `hostname` defaults to a distinct loopback address (127.0.1.N) given at start.
    """

    name: str
    resources: Mapping[str, float]
    attributes: Mapping[str, str | float] = field(default_factory=dict)
    hostname: str | None = None
    port: int = 5051


@dataclass
class Agent:
    id: str
    spec: AgentSpec
    hostname: str
    total: res.Millis
    registered_time: float
    active: bool = True

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class Offer:
    id: str
    framework_id: str
    agent_id: str
    role: str
    resources: res.Millis
    created: float


@dataclass
class Filter:
    """A refuse filter (`RefusedOfferFilter`): hides offers that fit inside `resources`."""

    framework_id: str
    role: str
    agent_id: str
    resources: res.Millis
    expires: float


@dataclass
class Task:
    task_id: str
    framework_id: str
    agent_id: str
    name: str
    role: str
    resources: res.Millis
    info: dict[str, Any]
    state: str = "TASK_STAGING"
    statuses: list[dict[str, Any]] = field(default_factory=list)
    # Agent-generated updates waiting for ACKNOWLEDGE; the head is the one in flight.
    pending: deque[dict[str, Any]] = field(default_factory=deque)
    head_sent_at: float | None = None
    retry_after: float = 0.0
    attempts: int = 0
    resources_released: bool = False

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class Subscription:
    """One SUBSCRIBE stream: an event queue drained by the HTTP handler that owns the socket."""

    CLOSE = b"close"  # end the chunked body cleanly
    DROP = b"drop"  # cut the connection without the last chunk

    def __init__(self, stream_id: str, framework_id: str, sock: socket.socket) -> None:
        self.stream_id = stream_id
        self.framework_id = framework_id
        self.sock = sock
        self.events: queue.Queue[bytes] = queue.Queue()
        self.finished = threading.Event()

    def send(self, data: bytes) -> None:
        self.events.put(data)

    def close(self) -> None:
        self.events.put(self.CLOSE)

    def drop(self) -> None:
        self.events.put(self.DROP)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)


@dataclass
class Framework:
    id: str
    info: dict[str, Any]
    registered_time: float
    subscription: Subscription | None = None
    connected: bool = False
    active: bool = False
    recovered: bool = False
    removed: bool = False
    suppressed: set[str] = field(default_factory=set)
    unregistered_time: float | None = None
    failover_deadline: float | None = None
    tasks: dict[str, Task] = field(default_factory=dict)
    completed_tasks: list[Task] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def capabilities(self) -> set[str]:
        return {c.get("type") for c in self.info.get("capabilities", []) if c.get("type")}

    @property
    def multi_role(self) -> bool:
        return "MULTI_ROLE" in self.capabilities

    @property
    def partition_aware(self) -> bool:
        return "PARTITION_AWARE" in self.capabilities

    @property
    def roles(self) -> list[str]:
        if self.multi_role:
            return list(self.info.get("roles", []))
        return [self.info.get("role", "*")]

    @property
    def failover_timeout(self) -> float:
        return float(self.info.get("failover_timeout", 0.0))

    @property
    def name(self) -> str:
        return str(self.info.get("name", ""))

    def count(self, key: str, by: int = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + by


def now() -> float:
    return time.time()
