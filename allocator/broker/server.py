"""A running broker: the engine loop, a backend, and the tenant API on HTTP and gRPC."""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from allocator.backends.base import AgentInfo, Backend
from allocator.backends.local import LocalCluster
from allocator.backends.sandbox import SandboxConfig
from allocator.broker.api import RequestObserver
from allocator.broker.asgi import HttpLimits
from allocator.broker.core import DEFAULT_LEASE_SECONDS, Broker
from allocator.broker.grpc_front import CONNECTIONS_PER_ADDRESS
from allocator.broker.grpc_server import TenantGrpcServer
from allocator.broker.http_server import TenantHttpServer
from allocator.broker.limits import Limits
from allocator.broker.metrics import BrokerMetrics, MetricsServer
from allocator.broker.ports import DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT, DEFAULT_METRICS_PORT
from allocator.broker.store import Store
from allocator.broker.tls import TlsFiles
from allocator.broker.zk_url import ZkUrl

if TYPE_CHECKING:
    from allocator.broker.leader import Leadership
from allocator.engine_config import EngineConfig
from allocator.scenarios.cluster_file import DEFAULT_CLUSTER, load_cluster_file

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_GRPC_PORT", "DEFAULT_HTTP_PORT", "DEFAULT_METRICS_PORT", "BrokerService"]


@dataclass
class BrokerOptions:
    engine: EngineConfig = field(default_factory=EngineConfig.mesos)
    host: str = "127.0.0.1"
    http_port: int = DEFAULT_HTTP_PORT
    grpc_port: int = DEFAULT_GRPC_PORT
    # gRPC connections one client address may hold at once (docs/security.md)
    grpc_connections_per_address: int = CONNECTIONS_PER_ADDRESS
    token: str | None = None
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    state_dir: Path = Path(".fairbroker")
    persist: bool = True
    cluster_file: Path = DEFAULT_CLUSTER
    agents: list[AgentInfo] | None = None  # overrides cluster_file
    observers: list[RequestObserver] = field(default_factory=list)
    metrics_port: int | None = None  # Prometheus /metrics on `host` (0: ephemeral; None: off)
    limits: Limits = field(default_factory=Limits)
    state_recover: bool = False  # keep what is readable of a damaged state file
    metrics_token: bool = False  # /metrics requires the tenant API's token too
    http_limits: HttpLimits = field(default_factory=HttpLimits)  # tenant API and /metrics
    # --ha: elect a leader and keep the state in ZooKeeper (None: one broker, SQLite)
    ha: ZkUrl | None = None
    advertised_host: str | None = None  # the host a standby names for this broker's API
    # --ha: called once when this broker, having led, lost its ZooKeeper session (it is
    # fenced already); `fairbroker serve` stops and exits. None: logged only.
    on_deposed: Callable[[str], None] | None = None
    # the embedded cluster's executor sandbox (serve's default is auto; here none, so tests
    # and library users that start executors from private temporary directories still can)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    tls: TlsFiles | None = None  # HTTPS and gRPC over TLS for the tenant API and /metrics


def local_backend(options: BrokerOptions) -> Backend:
    """The embedded cluster (allocator/backends/local.py): `options.agents`, else the agents
    of `options.cluster_file`, with each executor's files under the state dir's agents/,
    in `options.sandbox` (the state dir always hidden from executors)."""
    agents = options.agents or load_cluster_file(options.cluster_file)
    sandbox = replace(options.sandbox, state_dir=Path(options.state_dir))
    return LocalCluster(
        agents, Path(options.state_dir) / "agents", env_policy=options.limits.executor_env,
        sandbox=sandbox,
    )  # fmt: skip


class BrokerService:
    """Start with `start()` (or `with BrokerService(options) as service:`), stop with `stop()`."""

    def __init__(self, options: BrokerOptions, backend: Backend | None = None) -> None:
        self.options = options
        state_dir = Path(options.state_dir)
        if backend is None:
            backend = local_backend(options)
        self.leadership: Leadership | None = None
        self._serving = threading.Event()  # --ha: taken over, the tenant API open
        self._started = False
        if options.ha is None:
            store = Store(
                state_dir / "broker.sqlite" if options.persist else None, options.state_recover
            )
        else:
            store = self._zk_store(options.ha, backend)
        self.broker = Broker(
            backend,
            options.engine,
            lease_seconds=options.lease_seconds,
            store=store,
            limits=options.limits,
        )
        self.metrics: BrokerMetrics | None = None
        self.metrics_server: MetricsServer | None = None
        if options.metrics_port is not None:
            self.metrics = BrokerMetrics.of_broker(self.broker)
        address = options.host
        try:
            if options.tls is not None:
                options.tls.check()
            self.http = TenantHttpServer(
                self.broker, (address, options.http_port), options.token, self._observe,
                options.http_limits, options.tls,
            )  # fmt: skip
        except Exception:
            store.close()
            raise
        try:
            self.grpc = TenantGrpcServer(
                self.broker, (address, options.grpc_port), options.token, self._observe,
                options.tls, options.grpc_connections_per_address,
            )  # fmt: skip
        except Exception:
            self.http.server_close()
            store.close()
            raise
        if options.ha is not None:  # once the ports are known: they are advertised
            self._join_election()

    # ---- --ha ----------------------------------------------------------------------------
    def _zk_store(self, url: ZkUrl, backend: Backend):  # -> ZkStore
        from allocator.broker.zk_store import ZkFrameworkId, ZkStore

        def fence_node() -> str | None:
            ha = self.leadership
            return ha.node if ha is not None and ha.fence() is None else None

        store = ZkStore(lambda: self.leadership.client, url.path, fence_node)
        keep_id = getattr(backend, "keep_framework_id_in", None)
        if keep_id is not None:  # Mesos: the framework id lives with the state
            keep_id(ZkFrameworkId(store))
        return store

    def _join_election(self) -> None:
        from allocator.broker.leader import Leadership, Member

        host = self.options.advertised_host or self.options.host
        me = Member(f"{host}:{self.http.port}", f"{host}:{self.grpc.port}", os.getpid())
        assert self.options.ha is not None
        self.leadership = Leadership(self.options.ha, me, self._take_over, self._deposed)
        self.broker.fence = self.leadership.fence
        self.broker.standby = self._refusal
        if self.metrics is not None:
            from allocator.broker.leader_metrics import LeaderCollector

            self.metrics.registry.register(LeaderCollector(self.leadership))

    def _refusal(self) -> str | None:
        if self._serving.is_set() and self.leadership is not None and not self.leadership.deposed:
            return None
        if self.leadership is not None and self.leadership.leading:
            return "taking over: reading the state and re-adopting executors; retry shortly"
        return self.leadership.refusal() if self.leadership is not None else "starting"

    def _take_over(self) -> None:
        """Elected (on the election thread): read the state, start the backend (Mesos:
        subscribe with the stored framework id), re-adopt and reconcile, then allocate and
        serve. A take-over that fails steps down."""
        log.info("elected leader: taking over")
        try:
            self.broker.store.load()
            self.broker.start()
            self._started = True
        except Exception as error:
            log.exception("take-over failed")
            self._deposed(f"take-over failed: {error}")
            return
        self._serving.set()
        log.info("took over: serving tenants (HTTP %s, gRPC %s)", self.http_address,
                 self.grpc_address)  # fmt: skip

    def _deposed(self, why: str) -> None:
        log.error("no longer the leader (%s): launching nothing, stepping down", why)
        self._serving.clear()
        if self.options.on_deposed is not None:
            self.options.on_deposed(why)

    @property
    def serving(self) -> bool:
        """Does this broker serve tenants (always without --ha; the leader with it)?"""
        return self.leadership is None or self._serving.is_set()

    def _observe(self, transport: str, method: str, code: str) -> None:
        if self.metrics is not None:
            self.metrics.observe_request(transport, method, code)
        for observer in self.options.observers:
            observer(transport, method, code)

    @property
    def http_address(self) -> str:
        return f"{self.options.host}:{self.http.port}"

    @property
    def grpc_address(self) -> str:
        return f"{self.options.host}:{self.grpc.port}"

    @property
    def metrics_address(self) -> str | None:
        if self.metrics_server is None:
            return None
        return f"{self.options.host}:{self.metrics_server.port}"

    def start(self) -> BrokerService:
        if self.metrics is not None and self.options.metrics_port is not None:
            try:
                self.metrics_server = MetricsServer(
                    self.metrics.registry, self.options.host, self.options.metrics_port,
                    self.options.token if self.options.metrics_token else None,
                    self.options.tls,
                )  # fmt: skip
            except OSError as error:
                self.http.server_close()
                self.grpc.stop()
                self.broker.store.close()
                raise OSError(
                    f"cannot serve metrics on {self.options.host}:{self.options.metrics_port}: "
                    f"{error.strerror or error}"
                ) from None
        if not self.options.token and not is_loopback(self.options.host):
            log.warning(
                "serving the tenant API on %s without a token: anyone who can reach it can "
                "register tenants and start executors (give --token-file)", self.options.host,
            )  # fmt: skip
        if self.leadership is not None:  # serve (as a standby) first, then join
            self.http.start()
            self.grpc.start()
            self.leadership.start()
            log.info("--ha %s: joined the election as %s", self.options.ha, self.leadership.node
                     or "a member")  # fmt: skip
            return self
        self.broker.start()
        self._started = True
        self.http.start()
        self.grpc.start()
        info = self.broker.info()
        log.info(
            "broker up: %s, %s mode, %s backend; HTTP %s, gRPC %s, metrics %s",
            info.scheduler, info.mode, info.backend, self.http_address, self.grpc_address,
            self.metrics_address or "off",
        )  # fmt: skip
        return self

    def stop(self, kill_executors: bool = True) -> None:
        if self.metrics_server is not None:
            self.metrics_server.stop()
            self.metrics_server = None
        self.http.stop()
        self.grpc.stop()
        if self._started:
            self.broker.stop(kill_executors=kill_executors)
        else:  # a standby: nothing of the backend's was started
            self.broker.store.close()
        if self.leadership is not None:  # last: a standby takes over once we are stopped
            self.leadership.stop()

    def __enter__(self) -> BrokerService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
