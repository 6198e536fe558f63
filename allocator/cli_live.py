"""Live commands: `fairbroker serve`, `status` and `configure` (the broker and its API)."""

from __future__ import annotations

import logging
import os
import signal
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from allocator.cli_types import (
    LazyChoice,
    mode_choice,
    scheduler_choice,
    selection_choice,
    ties_choice,
)
from allocator.ports import DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT, DEFAULT_METRICS_PORT

if TYPE_CHECKING:
    from allocator.broker.server import BrokerOptions

TOKEN_ENV = "FAIRBROKER_TOKEN"


def _choice(values: list[str]) -> click.Choice:
    return LazyChoice(lambda: values)


def read_token(token: str | None, token_file: str | None) -> str | None:
    if token_file:
        text = Path(token_file).read_text().strip()
        if not text:
            raise click.BadParameter(f"{token_file} is empty", param_hint="--token-file")
        return text
    return token or None


def policy_options(func):
    """--scheduler/--mode/--selection/--ties, shared by serve and batch."""
    func = click.option(
        "--ties", type=ties_choice(), default="random", show_default=True,
        help="Tie rule among equally fair choices (waste: the agent left least unusable).",
    )(func)  # fmt: skip
    func = click.option(
        "--selection", type=selection_choice(), default=None,
        help="Server selection (default: the scheduler's own).",
    )(func)  # fmt: skip
    func = click.option(
        "--mode", type=mode_choice(), default="characterized", show_default=True
    )(func)
    return click.option(
        "--scheduler", type=scheduler_choice(), default="rpsdsf", show_default=True
    )(func)


def broker_options(func):
    """Where the broker listens and keeps its state, shared by serve and batch."""
    options = [
        click.option("--host", default="127.0.0.1", show_default=True, help="Listen address."),
        click.option(
            "--port", "http_port", type=click.IntRange(0, 65535), default=DEFAULT_HTTP_PORT,
            show_default=True, help="HTTP/JSON tenant API (the sparkbroker://HOST:PORT URL).",
        ),
        click.option(
            "--grpc-port", type=click.IntRange(0, 65535), default=DEFAULT_GRPC_PORT,
            show_default=True, help="gRPC tenant API.",
        ),
        click.option(
            "--cluster", "cluster_file", type=click.Path(dir_okay=False), default=None,
            help="Agents of the embedded cluster (YAML; default: the paper's six, memory/2).",
        ),
        click.option(
            "--state-dir", type=click.Path(file_okay=False), default=".fairbroker",
            show_default=True, help="Broker state (SQLite) and the agents' working directories.",
        ),
        click.option(
            "--token", envvar=TOKEN_ENV, default=None,
            help=f"Require this shared token on the tenant API (env {TOKEN_ENV}).",
        ),
        click.option("--token-file", type=click.Path(dir_okay=False, exists=True), default=None),
        click.option(
            "--lease", "lease_seconds", type=click.FloatRange(min=1), default=30.0,
            show_default=True, help="Seconds a tenant may stay silent before it is dropped.",
        ),
        click.option(
            "--metrics-port", type=click.IntRange(0, 65535), default=DEFAULT_METRICS_PORT,
            show_default=True, help="Prometheus /metrics on --host (0: any free port).",
        ),
        click.option("--no-metrics", is_flag=True, help="Do not serve Prometheus metrics."),
    ]  # fmt: skip
    for option in reversed(options):
        func = option(func)
    return func


def make_options(**kw) -> BrokerOptions:
    from allocator.broker.server import BrokerOptions

    options = BrokerOptions(
        scheduler=kw["scheduler"],
        mode=kw["mode"],
        selection=kw["selection"],
        ties=kw["ties"],
        host=kw["host"],
        http_port=kw["http_port"],
        grpc_port=kw["grpc_port"],
        token=read_token(kw["token"], kw["token_file"]),
        lease_seconds=kw["lease_seconds"],
        state_dir=Path(kw["state_dir"]),
        metrics_port=None if kw["no_metrics"] else kw["metrics_port"],
    )
    if kw.get("cluster_file"):
        options.cluster_file = Path(kw["cluster_file"])
    return options


def executor_env_options(func):
    """What tenants may put in their executors' environment (docs/security.md)."""
    func = click.option(
        "--executor-python", multiple=True, metavar="PATH",
        help="Approve an interpreter for PYSPARK_PYTHON (repeat; default: this Python, "
        "python3, python).",
    )(func)  # fmt: skip
    return click.option(
        "--executor-env", multiple=True, metavar="NAME",
        help="Let tenants set this variable in their executors (repeat; beyond "
        "SPARK_EXECUTOR_OPTS, PYSPARK_PYTHON, SPARK_USER, PYTHONHASHSEED).",
    )(func)  # fmt: skip


@click.command()
@policy_options
@broker_options
@click.option(
    "--keep-executors", is_flag=True,
    help="On exit leave executors running for a restarted broker to re-adopt.",
)  # fmt: skip
@click.option("--log-level", type=_choice(["debug", "info", "warning"]), default="info")
@click.option(
    "--backend", type=_choice(["local", "mesos"]), default="local", show_default=True,
    help="local: the embedded cluster; mesos: register as a framework with --master.",
)
@click.option("--master", default=None, help="Mesos master HOST:5050 or zk://HOST:2181/mesos.")
@click.option(
    "--role", "roles", multiple=True,
    help="Mesos role(s) of the framework; repeat for several (a group runs in its own role).",
)
@click.option("--principal", default=None, help="Mesos principal (HTTP basic auth).")
@click.option("--secret-file", type=click.Path(dir_okay=False, exists=True), default=None)
@click.option(
    "--failover-timeout", type=click.FloatRange(min=0), default=7 * 24 * 3600.0,
    show_default=True, help="Seconds Mesos keeps the framework's tasks while the broker is away.",
)
@click.option(
    "--spark-home", default="/opt/spark", show_default=True,
    help="Where Spark is installed on the Mesos agents.",
)
@click.option(
    "--spark-uri", default=None,
    help="Instead of --spark-home: a Spark tarball URI the agents fetch and unpack.",
)
@executor_env_options
def serve(
    keep_executors: bool, log_level: str, backend: str, master: str | None,
    roles: tuple[str, ...], principal: str | None, secret_file: str | None,
    failover_timeout: float, spark_home: str, spark_uri: str | None,
    executor_env: tuple[str, ...], executor_python: tuple[str, ...], **kw,
) -> None:  # fmt: skip
    """Run the broker (embedded local cluster, or a Mesos framework) until interrupted."""
    from allocator.broker.server import BrokerService

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    options = make_options(**kw)
    from allocator.backends.executor import ExecutorEnvPolicy

    try:
        env = ExecutorEnvPolicy.of_operator(executor_env, executor_python)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--executor-env") from None
    options.limits = replace(options.limits, executor_env=env)
    cluster = None
    if backend == "mesos":
        from allocator.backends.mesos import MesosBackend, MesosOptions

        if not master:
            raise click.UsageError("--backend mesos needs --master HOST:5050 or zk://...")
        if bool(principal) != bool(secret_file):
            raise click.UsageError("--principal and --secret-file go together")
        cluster = MesosBackend(
            MesosOptions(
                master=master, roles=roles or ("*",), principal=principal,
                secret=Path(secret_file).read_text().strip() if secret_file else None,
                failover_timeout=failover_timeout, spark_home=spark_home, spark_uri=spark_uri,
                state_dir=options.state_dir, executor_env=options.limits.executor_env,
            )
        )  # fmt: skip
    elif master or roles or principal:
        raise click.UsageError("--master, --role and --principal need --backend mesos")
    service = BrokerService(options, backend=cluster)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    service.start()
    metrics = f"http://{service.metrics_address}/metrics" if service.metrics_address else "off"
    click.echo(
        f"fairbroker: serving on http://{service.http_address} (Spark master "
        f"sparkbroker://{service.http_address}), gRPC {service.grpc_address}, metrics "
        f"{metrics}; pid {os.getpid()}",
        err=True,
    )
    done.wait()
    service.stop(kill_executors=not keep_executors)


def _client(broker: str, token: str | None):
    from allocator.broker.client import BrokerClient

    return BrokerClient(broker, token=token)


def render_allocation(allocation) -> str:
    info = allocation.broker
    lines = [
        f"scheduler {info.scheduler}, {info.mode} mode, {info.selection} selection, "
        f"{info.backend} backend; {info.grants_total} grants in {info.runs_total} runs",
        "",
        f"{'tenant':<28} {'group':<12} {'demand':<20} {'run':>4} {'want':>5} {'dom.share':>9}",
    ]
    for t in allocation.tenants:
        demand = " ".join(f"{r}={v:g}" for r, v in sorted(t.demand.items()))
        flag = "" if t.declared else " (obl.)"
        lines.append(
            f"{t.tenant_id:<28} {t.group:<12} {demand + flag:<20} {t.running:>4} "
            f"{t.target:>5} {t.dominant_share:>9.3f}"
        )
    header = f"{'agent':<10} {'host':<12} {'cpus used/cap':>14} {'mem used/cap':>16}  executors"
    lines += ["", header]
    for a in allocation.agents:
        per = ", ".join(f"{k}:{v}" for k, v in sorted(a.executors.items())) or "-"
        lines.append(
            f"{a.name:<10} {a.hostname:<12} "
            f"{a.allocated.get('cpus', 0):>6g}/{a.capacity.get('cpus', 0):<7g} "
            f"{a.allocated.get('mem', 0):>7g}/{a.capacity.get('mem', 0):<8g}  {per}"
        )
    return "\n".join(lines)


@click.command()
@click.option(
    "--broker", default=f"127.0.0.1:{DEFAULT_GRPC_PORT}", show_default=True,
    help="The broker's gRPC address.",
)  # fmt: skip
@click.option("--token", envvar=TOKEN_ENV, default=None)
@click.option("--json", "as_json", is_flag=True, help="The Allocation message as JSON.")
@click.option(
    "--master", default=None,
    help="Also show the Mesos master's own view (HOST:5050): agents, frameworks, DRF shares.",
)  # fmt: skip
def status(broker: str, token: str | None, as_json: bool, master: str | None) -> None:
    """Show the broker's current allocation: tenants and agents."""
    from google.protobuf import json_format

    with _client(broker, token) as client:
        allocation = client.allocation()
    if as_json:
        click.echo(json_format.MessageToJson(allocation))
    else:
        click.echo(render_allocation(allocation))
    if master:
        from allocator.backends.mesos_operator import mesos_view

        click.echo("")
        click.echo(mesos_view(master).render())


@click.command()
@click.option("--broker", default=f"127.0.0.1:{DEFAULT_GRPC_PORT}", show_default=True)
@click.option("--token", envvar=TOKEN_ENV, default=None)
@click.option("--scheduler", type=scheduler_choice(), default=None)
@click.option("--mode", type=mode_choice(), default=None)
@click.option("--selection", type=selection_choice(), default=None)
def configure(
    broker: str, token: str | None, scheduler: str | None, mode: str | None, selection: str | None
) -> None:
    """Switch a running broker's scheduler, mode or selection."""
    with _client(broker, token) as client:
        info = client.configure(scheduler or "", mode or "", selection or "")
    click.echo(f"scheduler {info.scheduler}, {info.mode} mode, {info.selection} selection")



@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@policy_options
@click.option(
    "--out", type=click.Path(file_okay=False), default="results/batch", show_default=True,
    help="Job logs, the broker's state, result.json and allocation.png.",
)
@click.option(
    "--broker", default=None,
    help="HTTP address of a running broker to use instead of starting one on the scenario's "
    "agents (its scheduler is then the broker's own).",
)
@click.option("--token", envvar=TOKEN_ENV, default=None)
@click.option("--job-timeout", type=click.FloatRange(min=1), default=600.0, show_default=True)
@click.option(
    "--metrics-port", type=click.IntRange(0, 65535), default=None,
    help="Serve the started broker's Prometheus /metrics on this port (0: any free port; "
    "default: off).",
)  # fmt: skip
@click.option("--quiet", "-q", is_flag=True, help="No progress display.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def batch(
    scenario: str, scheduler: str, mode: str, selection: str | None, ties: str, out: str,
    broker: str | None, token: str | None, job_timeout: float, metrics_port: int | None,
    quiet: bool, as_json: bool,
) -> None:  # fmt: skip
    """Run SCENARIO's Spark job batches (queues of jobs per group) through the broker.

    Without --broker, a broker is started on an embedded cluster of the scenario's agents and
    stopped afterwards with every executor it launched.
    """
    import json

    from google.protobuf import json_format

    from allocator.backends.cluster_file import agent_infos
    from allocator.batch import run_live_batch
    from allocator.broker.server import BrokerOptions, BrokerService
    from allocator.sim.batch import load_batch
    from allocator.sim.series import write_series_csv

    spec = load_batch(scenario)
    workdir = Path(out)
    workdir.mkdir(parents=True, exist_ok=True)
    service = None
    if broker is None:
        options = BrokerOptions(
            scheduler=scheduler, mode=mode, selection=selection, ties=ties, http_port=0,
            grpc_port=0, token=token, state_dir=workdir / "broker",
            agents=agent_infos(spec.agents), metrics_port=metrics_port,
        )  # fmt: skip
        service = BrokerService(options).start()
        broker = service.http_address
        if not quiet:
            info = service.broker.info()
            metrics = f", metrics at {service.metrics_address}" if service.metrics_address else ""
            click.echo(
                f"fairbroker: {spec.name}: {info.scheduler} ({info.selection}), {info.mode} "
                f"mode, {len(spec.agents)} agents; broker at {broker}{metrics}",
                err=True,
            )

    def snapshot() -> dict:
        return json_format.MessageToDict(service.broker.allocation())

    try:
        result = run_live_batch(
            spec,
            broker=broker,
            snapshot=snapshot if service is not None else None,
            workdir=workdir,
            oblivious=mode == "oblivious",
            token=token,
            progress=not quiet,
            job_timeout=job_timeout,
        )
    finally:
        if service is not None:
            service.stop(kill_executors=True)
    data = result.to_json()
    (workdir / "result.json").write_text(json.dumps(data, indent=2) + "\n")
    if result.series is not None:
        result.plot(workdir / "allocation.png")
        series = result.series
        write_series_csv(workdir / "allocation.csv", series.total, series.by_group)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(result.render_summary())
        click.echo(f"\nwrote {workdir / 'result.json'}, {workdir / 'allocation.png'}, "
                   f"{workdir / 'allocation.csv'}, job logs in {workdir / 'jobs'}")  # fmt: skip
    if result.failures:
        raise click.ClickException(f"{len(result.failures)} job(s) failed; see their logs")


COMMANDS = (serve, status, configure, batch)
