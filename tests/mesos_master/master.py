"""`MesosMaster`: start/stop, fault injection and introspection for tests."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from . import faults, wire
from . import resources as res
from .core import MasterCore, RecordedCall
from .server import MasterHTTPServer
from .state import AgentSpec

TICK_S = 0.02
JOIN_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TaskView:
    task_id: str
    framework_id: str
    agent_id: str
    agent_name: str
    state: str
    states: tuple[str, ...]
    resources: dict[str, float]
    unacknowledged: int = 0  # status updates the agent will send again until acknowledged


@dataclass(frozen=True)
class OfferView:
    id: str
    framework_id: str
    agent_id: str
    agent_name: str
    role: str
    resources: dict[str, float]


@dataclass(frozen=True)
class FrameworkView:
    id: str
    name: str
    roles: tuple[str, ...]
    connected: bool
    active: bool
    removed: bool
    suppressed: frozenset[str]
    stream_id: str | None


class MesosMaster:
    """A Mesos master speaking the v1 scheduler API on 127.0.0.1, with local agents.

    `allocation_interval` is the master flag of that name (1 s); `heartbeat_interval` is
    fixed at 15 s in Mesos and configurable here; `status_update_retry` is the agent's first
    retry interval for unacknowledged updates (10 s in Mesos, doubling); `offer_timeout` is
    the master flag `--offer_timeout` (unset by default: offers never expire).
    """

    def __init__(
        self,
        agents: Iterable[AgentSpec] = (),
        *,
        allocation_interval: float = 1.0,
        heartbeat_interval: float = 15.0,
        status_update_retry: float = 10.0,
        offer_timeout: float | None = None,
        seed: int | None = None,
        work_dir: Path | None = None,
        port: int = 0,
    ) -> None:
        self._port = port  # 0: any free port; a fixed one restarts "the same" master
        self._own_work_dir = work_dir is None
        self.work_dir = Path(tempfile.mkdtemp(prefix="mesos-master-")) if work_dir is None else (
            work_dir
        )
        self.core = MasterCore(
            work_dir=self.work_dir, allocation_interval=allocation_interval,
            heartbeat_interval=heartbeat_interval, status_update_retry=status_update_retry,
            offer_timeout=offer_timeout, seed=seed,
        )  # fmt: skip
        self._specs = list(agents)
        self._server: MasterHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()

    # lifecycle -------------------------------------------------------------------------

    def start(self) -> MesosMaster:
        if self._server is not None:
            raise RuntimeError("the master is already started")
        self._server = MasterHTTPServer(self.core, self._port)
        self.core.port = self._server.server_address[1]
        for spec in self._specs:
            self.core.add_agent(spec)
        serve = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                 name="mesos-master-http")  # fmt: skip
        ticker = threading.Thread(target=self._tick_loop, name="mesos-master-ticker")
        self._threads = [serve, ticker]
        for thread in self._threads:
            thread.start()
        return self

    def _tick_loop(self) -> None:
        while not self._stopping.wait(TICK_S):
            self.core.launch_pending()
            self.core.tick()

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()
        with self.core.lock:
            for framework in self.core.frameworks.values():
                if framework.subscription is not None:
                    framework.subscription.drop()
        for local in list(self.core.local.values()):
            local.stop()
        self._server.shutdown()
        self._server.cut_connections()
        self._server.server_close()
        for thread in self._threads:
            thread.join(JOIN_TIMEOUT_S)
        for local in list(self.core.local.values()):
            local.stop()  # anything the ticker launched while stopping
        self._server = None
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> MesosMaster:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.stop()

    # addresses -------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """`host:port`, the form pymesos takes as its master."""
        return f"{self.core.ip}:{self.core.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def master_id(self) -> str:
        return self.core.master_id

    # agents and faults -----------------------------------------------------------------

    def add_agent(self, spec: AgentSpec) -> str:
        return self.core.add_agent(spec).id

    def agent_id(self, name: str) -> str:
        with self.core.lock:
            return self.core.agent_named(name).id

    def hostname(self, name: str) -> str:
        with self.core.lock:
            return self.core.agent_named(name).hostname

    def drop_stream(self, framework_id: str | None = None) -> int:
        """Cut the SUBSCRIBE connection (of one framework, or all) without a last chunk."""
        with self.core.lock:
            cut = 0
            for framework in self.core.frameworks.values():
                if framework.subscription is None:
                    continue
                if framework_id is None or framework.id == framework_id:
                    self.core.disconnect(framework)
                    cut += 1
            return cut

    def fail_over(self) -> str:
        """A new leading master: returns its id. Frameworks re-subscribe with their ids."""
        return faults.fail_over(self.core)

    def lose_agent(self, name: str) -> str:
        """Remove an agent as unreachable; returns its id."""
        return faults.lose_agent(self.core, name)

    def rescind(self, offer_id: str) -> bool:
        return self.core.rescind(offer_id)

    def fail_next_call(self, call_type: str, status: int = 500,
                       message: str = "Injected failure") -> None:  # fmt: skip
        """Answer the next valid call of `call_type` with `status` without acting on it."""
        self.core.inject(call_type, wire.Answer.text(status, message))

    def send_error(self, framework_id: str, message: str) -> None:
        """An ERROR event, after which the master closes the stream (as on removal)."""
        with self.core.lock:
            framework = self.core.frameworks[framework_id]
            self.core.send(framework, {"type": "ERROR", "error": {"message": message}})
            self.core.remove_framework(framework)

    # introspection ---------------------------------------------------------------------

    def calls(self, call_type: str | None = None) -> list[RecordedCall]:
        with self.core.lock:
            return [c for c in self.core.calls if call_type is None or c.type == call_type]

    def events(self, framework_id: str | None = None,
               event_type: str | None = None) -> list[dict[str, Any]]:  # fmt: skip
        """Events the master queued for frameworks' streams, heartbeats included."""
        with self.core.lock:
            return [
                e for fid, e in self.core.sent
                if (framework_id is None or fid == framework_id)
                and (event_type is None or e.get("type") == event_type)
            ]  # fmt: skip

    def tasks(self, state: str | None = None) -> list[TaskView]:
        with self.core.lock:
            out = []
            for framework in self.core.frameworks.values():
                for task in [*framework.tasks.values(), *framework.completed_tasks]:
                    if state is not None and task.state != state:
                        continue
                    agent = self.core.agents[task.agent_id]
                    out.append(TaskView(
                        task.task_id, task.framework_id, task.agent_id, agent.name, task.state,
                        tuple(s["state"] for s in task.statuses),
                        {n: res.value(v) for n, v in task.resources.items()},
                        len(task.pending),
                    ))  # fmt: skip
            return out

    def task(self, task_id: str) -> TaskView:
        found = [t for t in self.tasks() if t.task_id == task_id]
        if not found:
            raise KeyError(task_id)
        return found[-1]

    def offers(self) -> list[OfferView]:
        with self.core.lock:
            return [
                OfferView(o.id, o.framework_id, o.agent_id, self.core.agents[o.agent_id].name,
                          o.role, {n: res.value(v) for n, v in o.resources.items()})
                for o in self.core.offers.values()
            ]  # fmt: skip

    def frameworks(self) -> list[FrameworkView]:
        with self.core.lock:
            return [
                FrameworkView(f.id, f.name, tuple(f.roles), f.connected, f.active, f.removed,
                              frozenset(f.suppressed),
                              f.subscription.stream_id if f.subscription else None)
                for f in self.core.frameworks.values()
            ]  # fmt: skip

    def sandbox(self, task_id: str) -> Path | None:
        with self.core.lock:
            for framework in self.core.frameworks.values():
                task = framework.tasks.get(task_id) or next(
                    (t for t in framework.completed_tasks if t.task_id == task_id), None
                )
                if task is not None:
                    return self.core.local[task.agent_id].sandbox(framework.id, task_id)
        return None

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0,
                 what: str = "condition") -> Any:  # fmt: skip
        """Poll `predicate` until it returns something truthy; TimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.02)
