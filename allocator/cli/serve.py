"""Running `fairbroker serve` from a validated `ServeConfig` until SIGTERM or SIGINT."""

from __future__ import annotations

import errno
import logging
import os
import signal
import threading
from dataclasses import replace

import click

from allocator.backends.base import Backend
from allocator.broker.server import BrokerOptions, BrokerService, local_backend
from allocator.cli.listen_check import ListenError, check_can_listen
from allocator.cli.serve_config import ConfigError, ServeConfig

#: `serve --ha`'s exit status when it lost the leadership (a supervisor restarts it as a
#: standby with a fresh session)
DEPOSED_EXIT = 3


def broker_options(config: ServeConfig) -> BrokerOptions:
    options = BrokerOptions(
        engine=config.engine_config(),
        host=config.host,
        http_port=config.port,
        grpc_port=config.grpc_port,
        grpc_connections_per_address=config.grpc_connections_per_address,
        token=config.read_token(),
        lease_seconds=config.lease,
        state_dir=config.state_dir,
        state_recover=config.state_recover,
        metrics_port=config.metrics_port if config.metrics else None,
        metrics_token=config.metrics_token,
        advertised_host=config.advertised_host,
        sandbox=config.sandbox_config(),
        tls=config.tls_files(),
    )
    if config.ha is not None:
        from allocator.broker.zk_url import parse_zk_url

        options.ha = parse_zk_url(config.ha)
    if config.cluster is not None:
        options.cluster_file = config.cluster
    from allocator.backends.executor import ExecutorEnvPolicy

    try:
        env = ExecutorEnvPolicy.of_operator(config.executor_env, config.executor_python)
    except ValueError as error:
        raise ConfigError(f"executor_env: {error}") from None
    try:
        limits = options.limits.with_settings(config.limits)
    except ValueError as error:
        raise ConfigError(f"limits: {error}") from None
    options.limits = replace(limits, executor_env=env)
    return options


def make_backend(config: ServeConfig, options: BrokerOptions) -> Backend:
    """The one place a backend is chosen: the embedded cluster (the broker's default, see
    `local_backend`) or a Mesos framework built from `config`."""
    if config.backend == "local":
        return local_backend(options)
    from allocator.backends.mesos import MesosBackend, MesosOptions

    return MesosBackend(
        MesosOptions(
            master=config.master or "", roles=config.roles, principal=config.principal,
            secret=config.read_mesos_secret(), failover_timeout=config.failover_timeout,
            framework_name=config.framework_name, user=config.task_user,
            hostname=config.hostname, webui_url=config.effective_webui_url, gpus=config.gpus,
            spark_home=config.spark_home, spark_uri=config.spark_uri, state_dir=config.state_dir,
            refuse_seconds=config.refuse_seconds,
            executor_env=options.limits.executor_env,
        )
    )  # fmt: skip


def _bind_failure(error: Exception, host: str, ports: list[tuple[str, int | None]]) -> Exception:
    """A server failed to start after the pre-flight check passed: a port was taken in
    between (or the address went away). The same one-line answer as the pre-flight when the
    check now sees it; otherwise the error itself (not a listening problem)."""
    try:
        check_can_listen(host, ports)
    except ListenError as found:
        return found
    if getattr(error, "errno", None) in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
        return ListenError(f"cannot listen on {host}: {error.strerror or error}")
    return error


def run(config: ServeConfig) -> None:
    """Serve until SIGTERM/SIGINT, then stop: with `config.teardown` every executor is
    stopped (Mesos: the framework is torn down), otherwise the Mesos framework fails over
    and its tasks keep running for a restarted broker to re-adopt."""
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config.check_runtime()
    options = broker_options(config)
    ports: list[tuple[str, int | None]] = [
        ("--port", options.http_port), ("--grpc-port", options.grpc_port),
        ("--metrics-port", options.metrics_port),
    ]  # fmt: skip
    check_can_listen(options.host, ports)
    backend = make_backend(config, options)
    done = threading.Event()
    deposed: list[str] = []
    options.on_deposed = lambda why: (deposed.append(why), done.set())
    try:
        service = BrokerService(options, backend=backend)
    except (OSError, RuntimeError) as error:  # gRPC's failed bind is a RuntimeError
        raise _bind_failure(error, options.host, ports) from None
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        service.start()
    except OSError as error:
        raise _bind_failure(error, options.host, ports) from None
    scheme = "https" if options.tls is not None else "http"
    metrics = f"{scheme}://{service.metrics_address}/metrics" if service.metrics_address else "off"
    sandbox = getattr(backend, "sandbox", None)
    if sandbox is not None:
        click.echo(f"fairbroker: executor sandbox: {sandbox.describe()}", err=True)
        limits = getattr(backend, "limits_in_force", None)
        if limits:
            click.echo(f"fairbroker: executor limits: {limits}", err=True)
    standby = f" as a standby until elected in {config.ha}" if config.ha else ""
    click.echo(
        f"fairbroker: serving{standby} on {scheme}://{service.http_address} (Spark master "
        f"sparkbroker://{service.http_address}), gRPC {service.grpc_address}, metrics "
        f"{metrics}; pid {os.getpid()}",
        err=True,
    )
    done.wait()
    if deposed:  # --ha: fenced already; the new leader owns every executor, so keep them
        click.echo(f"fairbroker: no longer the leader ({deposed[0]}); exiting", err=True)
        service.stop(kill_executors=False)
        raise SystemExit(DEPOSED_EXIT)
    how = "its executors with it" if config.teardown else "leaving executors running"
    if config.backend == "mesos":
        how = "tearing the framework down" if config.teardown else "failing over (tasks kept)"
    click.echo(f"fairbroker: stopping the broker, {how}", err=True)
    service.stop(kill_executors=config.teardown)
