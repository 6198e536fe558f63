"""A running broker: the engine loop, a backend, and the tenant API on HTTP and gRPC."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from allocator.backends.base import AgentInfo, Backend
from allocator.backends.cluster_file import DEFAULT_CLUSTER, load_cluster_file
from allocator.backends.local import LocalCluster
from allocator.broker.api import RequestObserver
from allocator.broker.core import DEFAULT_LEASE_SECONDS, TICK_SECONDS, Broker
from allocator.broker.grpc_server import TenantGrpcServer
from allocator.broker.http_server import TenantHttpServer
from allocator.broker.store import Store

log = logging.getLogger(__name__)

DEFAULT_HTTP_PORT = 7080  # the sparkbroker://HOST:PORT the Spark plugin talks to
DEFAULT_GRPC_PORT = 7081


@dataclass
class BrokerOptions:
    scheduler: str = "rpsdsf"
    mode: str = "characterized"
    selection: str | None = None
    level: str = "role"
    trigger: str = "tick"
    ties: str = "random"
    seed: int = 0
    host: str = "127.0.0.1"
    http_port: int = DEFAULT_HTTP_PORT
    grpc_port: int = DEFAULT_GRPC_PORT
    token: str | None = None
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    tick_seconds: float = TICK_SECONDS
    state_dir: Path = Path(".fairbroker")
    persist: bool = True
    cluster_file: Path = DEFAULT_CLUSTER
    agents: list[AgentInfo] | None = None  # overrides cluster_file
    observers: list[RequestObserver] = field(default_factory=list)


class BrokerService:
    """Start with `start()` (or `with BrokerService(options) as service:`), stop with `stop()`."""

    def __init__(self, options: BrokerOptions, backend: Backend | None = None) -> None:
        self.options = options
        state_dir = Path(options.state_dir)
        if backend is None:
            agents = options.agents or load_cluster_file(options.cluster_file)
            backend = LocalCluster(agents, state_dir / "agents")
        store = Store(state_dir / "broker.sqlite" if options.persist else None)
        self.broker = Broker(
            backend,
            options.scheduler,
            options.mode,
            options.selection,
            level=options.level,
            trigger=options.trigger,
            ties=options.ties,
            seed=options.seed,
            lease_seconds=options.lease_seconds,
            store=store,
            tick_seconds=options.tick_seconds,
        )
        address = options.host
        self.http = TenantHttpServer(
            self.broker, (address, options.http_port), options.token, self._observe
        )
        try:
            self.grpc = TenantGrpcServer(
                self.broker, (address, options.grpc_port), options.token, self._observe
            )
        except Exception:
            self.http.server_close()
            raise

    def _observe(self, transport: str, method: str, code: str) -> None:
        for observer in self.options.observers:
            observer(transport, method, code)

    @property
    def http_address(self) -> str:
        return f"{self.options.host}:{self.http.port}"

    @property
    def grpc_address(self) -> str:
        return f"{self.options.host}:{self.grpc.port}"

    def start(self) -> BrokerService:
        self.broker.start()
        self.http.start()
        self.grpc.start()
        info = self.broker.info()
        log.info(
            "broker up: %s, %s mode, %s backend; HTTP %s, gRPC %s",
            info.scheduler, info.mode, info.backend, self.http_address, self.grpc_address,
        )  # fmt: skip
        return self

    def stop(self, kill_executors: bool = True) -> None:
        self.http.stop()
        self.grpc.stop()
        self.broker.stop(kill_executors=kill_executors)

    def __enter__(self) -> BrokerService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
