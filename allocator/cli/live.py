"""Live commands: `fairbroker serve`, `status` and `configure` (the broker and its API)."""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import click

from allocator.broker.ports import DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT, DEFAULT_METRICS_PORT
from allocator.cli.engine_options import engine_flags, engine_options
from allocator.cli.option_types import ADMISSION_OPTION, FiniteFloat, LazyChoice
from allocator.engine_config import RECLAIM_FIELDS
from allocator.errors import FairbrokerError

TOKEN_ENV = "FAIRBROKER_TOKEN"
CA_FILE_ENV = "FAIRBROKER_CA_FILE"  # the Spark plugin reads the same variable


def _choice(values: list[str]) -> click.Choice:
    return LazyChoice(lambda: values)


def executor_env_options(func):
    """What tenants may put in their executors' environment (docs/security.md)."""
    func = click.option(
        "--executor-python", multiple=True, metavar="PATH",
        help="Approve an interpreter for PYSPARK_PYTHON (repeat; default: this Python, "
        "python3, python).",
    )(func)  # fmt: skip
    func = click.option(
        "--limit", "limits", multiple=True, metavar="NAME=VALUE",
        help="Change a limit on what tenants may ask (repeat), e.g. max_tenants=500, "
        "min_demand.cpus=0.5; the limits and defaults are in docs/security.md.",
    )(func)  # fmt: skip
    return click.option(
        "--executor-env", multiple=True, metavar="NAME",
        help="Let tenants set this variable in their executors (repeat; beyond "
        "SPARK_EXECUTOR_OPTS, PYSPARK_PYTHON, SPARK_USER, PYTHONHASHSEED).",
    )(func)  # fmt: skip


# Flag defaults for --help only (a flag not given never overrides the file or the
# environment); tests check they equal ServeConfig's, which are the real ones.
SERVE_DEFAULTS = {
    "host": "127.0.0.1", "port": DEFAULT_HTTP_PORT, "grpc_port": DEFAULT_GRPC_PORT,
    "metrics_port": DEFAULT_METRICS_PORT, "state_dir": ".fairbroker", "lease": 30.0,
    "log_level": "info", "backend": "local", "failover_timeout": 7 * 24 * 3600.0,
    "framework_name": "fairbroker", "spark_home": "/opt/spark", "sandbox": "auto",
    "sandbox_user": "nobody", "sandbox_cpu": "shares", "grpc_connections_per_address": 16,
}  # fmt: skip


def serve_options(func):
    """serve's flags; each is a key of allocator.cli.serve_config.ServeConfig (defaults there)."""
    d = SERVE_DEFAULTS.get
    port = click.IntRange(0, 65535)
    options = [
        click.option(
            "--config", "config_file", type=click.Path(dir_okay=False), default=None,
            help="YAML file of serve options (env FAIRBROKER_CONFIG); every option also has "
            "an environment variable FAIRBROKER_<OPTION>. Precedence: flags > env > file.",
        ),
        click.option(
            "--print-config", is_flag=True,
            help="Print the effective configuration (secrets masked) and exit.",
        ),
        click.option("--host", default=d("host"), show_default=True, help="Listen address."),
        click.option(
            "--port", type=port, default=d("port"), show_default=True,
            help="HTTP/JSON tenant API (the sparkbroker://HOST:PORT URL).",
        ),
        click.option("--grpc-port", type=port, default=d("grpc_port"), show_default=True,
                     help="gRPC tenant API."),
        click.option(
            "--grpc-connections-per-address", type=click.IntRange(1, 256),
            default=d("grpc_connections_per_address"), show_default=True,
            help="gRPC connections one client address may hold at once (IPv6: one /64); "
            "more are reset, while other addresses still get in.",
        ),
        click.option(
            "--cluster", type=click.Path(dir_okay=False), default=None,
            help="Agents of the embedded cluster (YAML; default: the paper's six, memory/2).",
        ),
        click.option(
            "--state-dir", type=click.Path(file_okay=False), default=str(d("state_dir")),
            show_default=True, help="Broker state (SQLite) and the agents' working directories.",
        ),
        click.option(
            "--state-recover", is_flag=True, default=None,
            help="Start on a damaged state file: keep every readable row, report what was "
            "dropped, keep the damaged files beside it (without this the broker refuses).",
        ),
        click.option(
            "--ha", default=None, metavar="zk://HOST:PORT[,...]/PATH",
            help="Run as one of several brokers: the leader is elected in ZooKeeper and the "
            "state kept there under PATH; the others stand by and answer 503 naming it.",
        ),
        click.option(
            "--sandbox", type=_choice(["auto", "bwrap", "user", "none"]), default=d("sandbox"),
            show_default=True,
            help="Local backend: executors' sandbox (auto: the strongest here; bwrap: "
            "bubblewrap namespaces; user: an unprivileged user, as root; none: beside the "
            "broker, warned). docs/security.md.",
        ),
        click.option(
            "--sandbox-user", default=d("sandbox_user"), show_default=True,
            help="Local backend run as root: the unprivileged user executors run as.",
        ),
        click.option(
            "--sandbox-cpu", type=_choice(["off", "shares", "quota"]), default=d("sandbox_cpu"),
            show_default=True,
            help="Local backend: executors' CPU in their cgroups (shares: in proportion to "
            "their cores, an idle CPU going to whoever wants it; quota: also capped at their "
            "cores; off: not grouped). docs/security.md.",
        ),
        click.option(
            "--sandbox-hide", multiple=True, metavar="PATH",
            help="Local backend: another path executors must not see (repeat; the state "
            "directory, token and secret files always are).",
        ),
        click.option(
            "--token-file", type=click.Path(dir_okay=False), default=None,
            help="Require the shared token in this file (one line) on the tenant API: the "
            "preferred way to give it.",
        ),
        click.option(
            "--tls-cert", type=click.Path(dir_okay=False), default=None,
            help="Serve the tenant API (HTTP and gRPC) and /metrics over TLS with this PEM "
            "certificate (chain); with --tls-key.",
        ),
        click.option(
            "--tls-key", type=click.Path(dir_okay=False), default=None,
            help="The PEM private key of --tls-cert (hidden from executors).",
        ),
        click.option(
            "--tls-ca", type=click.Path(dir_okay=False), default=None,
            help="The PEM certificate of the CA that issued --tls-cert: checked at start; "
            "status/configure/explain --config trust it.",
        ),
        click.option(
            "--token", default=None,
            help=f"The token itself (discouraged: any local user sees it in the process "
            f"list; use --token-file or the environment variable {TOKEN_ENV}).",
        ),
        click.option(
            "--metrics-token", is_flag=True, default=None,
            help="Require the token on /metrics too (Prometheus: authorization.credentials).",
        ),
        click.option(
            "--lease", type=FiniteFloat(min=1), default=d("lease"), show_default=True,
            help="Seconds a tenant may stay silent before it is dropped.",
        ),
        click.option(
            "--metrics-port", type=port, default=d("metrics_port"), show_default=True,
            help="Prometheus /metrics on --host (0: any free port).",
        ),
        click.option("--metrics/--no-metrics", default=True, help="Serve Prometheus metrics."),
        click.option(
            "--teardown-on-exit/--no-teardown-on-exit", default=None,
            help="On SIGTERM/SIGINT stop every executor (Mesos: tear the framework down). "
            "Default: local backend yes, mesos no (fail over: tasks keep running and a "
            "restarted broker re-adopts them).",
        ),
        click.option("--keep-executors", is_flag=True, hidden=True,
                     help="Same as --no-teardown-on-exit."),
        click.option("--log-level", type=_choice(["debug", "info", "warning"]),
                     default=d("log_level"), show_default=True,
                     help="How much the broker logs (debug: every offer and launch)."),
        click.option(
            "--backend", type=_choice(["local", "mesos"]), default=d("backend"),
            show_default=True,
            help="local: the embedded cluster; mesos: register as a framework with --master.",
        ),
        click.option("--master", default=None,
                     help="Mesos master HOST:5050 or zk://HOST:2181/mesos."),
        click.option(
            "--role", "roles", multiple=True,
            help="Mesos role(s) of the framework; repeat for several (a group runs in its own "
            "role).",
        ),
        click.option("--principal", default=None, help="Mesos principal (HTTP basic auth)."),
        click.option("--secret-file", type=click.Path(dir_okay=False), default=None,
                     help="File holding the --principal's secret (with --principal)."),
        click.option(
            "--failover-timeout", type=FiniteFloat(min=0), default=d("failover_timeout"),
            show_default=True,
            help="Seconds Mesos keeps the framework's tasks while the broker is away.",
        ),
        click.option("--framework-name", default=d("framework_name"), show_default=True,
                     help="The framework's name in the Mesos master's UI and state."),
        click.option(
            "--user", default=None,
            help="User the executors run as on the agents (default: the broker's user; root "
            "is refused without --allow-root).",
        ),
        click.option("--allow-root", is_flag=True, help="Allow executors to run as root."),
        click.option(
            "--hostname", default=None,
            help="Host name given to Mesos and used in webui_url (default: --host, or this "
            "host's name when listening on all addresses).",
        ),
        click.option("--webui-url", default=None,
                     help="Framework web UI link (default: the broker's allocation JSON)."),
        click.option("--gpus", is_flag=True,
                     help="Schedule GPUs: ask Mesos for GPU agents' offers (GPU_RESOURCES)."),
        click.option("--spark-home", default=d("spark_home"), show_default=True,
                     help="Where Spark is installed on the Mesos agents."),
        click.option(
            "--spark-uri", default=None,
            help="Instead of --spark-home: a Spark tarball URI the agents fetch and unpack.",
        ),
    ]  # fmt: skip
    for option in reversed(options):
        func = option(func)
    return func


@click.command()
@engine_flags()
@serve_options
@executor_env_options
@click.pass_context
def serve(ctx: click.Context, config_file: str | None, print_config: bool, **flags) -> None:
    """Run the broker (embedded local cluster, or a Mesos framework) until SIGTERM/SIGINT."""
    from click.core import ParameterSource

    from allocator.cli.serve import run
    from allocator.cli.serve_config import CONFIG_ENV, load_serve_config, unknown_env

    for warning in unknown_env(os.environ):
        click.echo(f"fairbroker: warning: {warning}", err=True)
    given = {
        key: value for key, value in flags.items()
        if ctx.get_parameter_source(key) == ParameterSource.COMMANDLINE
    }  # fmt: skip
    if given.pop("keep_executors", False):
        given["teardown_on_exit"] = False
    config, sources = load_serve_config(
        given, config_file or os.environ.get(CONFIG_ENV) or None, os.environ
    )
    if print_config:
        click.echo(config.render(sources))
        return
    run(config)


@dataclass(frozen=True)
class BrokerTarget:
    """Where a client command goes and how: address(es), token, CA certificate (TLS)."""

    broker: str
    token: str | None = None
    ca_file: str | None = None


def _client(target: BrokerTarget):
    from allocator.broker.address import api_client

    return api_client(target.broker, target.token, target.ca_file)


def broker_target(
    broker: str | None, token: str | None, ca_file: str | None, config_file: str | None
) -> BrokerTarget:
    """The options given, else what serve's configuration file says (its address on this
    host, token_file, tls_ca), else the defaults."""
    default = f"127.0.0.1:{DEFAULT_HTTP_PORT}"
    if config_file is None:
        return BrokerTarget(broker or default, token, ca_file)
    from allocator.cli.serve_config import ConfigError, load_serve_config

    try:
        config, _ = load_serve_config({}, config_file, {})  # the file alone
        file_token = None if token else config.read_token()
    except (ConfigError, FairbrokerError) as error:
        raise click.BadParameter(str(error), param_hint="--config") from None
    host = config.host if config.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return BrokerTarget(
        broker or f"{host}:{config.port}",
        token or file_token,
        ca_file or (str(config.tls_ca) if config.tls_ca else None),
    )


BROKER_HELP = (
    f"The broker, HOST:PORT: its HTTP port ({DEFAULT_HTTP_PORT}, the one submit and Spark use) "
    f"or its gRPC port ({DEFAULT_GRPC_PORT}). Brokers under --ha: several, comma-separated; "
    "the one leading answers."
)


def render_allocation(allocation) -> str:
    info = allocation.broker
    lines = [
        f"scheduler {info.scheduler}, {info.mode} mode, {info.selection} selection, "
        f"{info.backend} backend; {info.grants_total} grants in {info.runs_total} runs",
        *([f"{info.backend}: {info.backend_status}"] if info.backend_status else []),
        render_reclaim(info),
        "",
        f"{'tenant':<28} {'group':<12} {'demand':<20} {'run':>4} {'fair':>4} "
        f"{'want':>5} {'dom.share':>9}",
    ]
    for t in allocation.tenants:
        demand = " ".join(f"{r}={v:g}" for r, v in sorted(t.demand.items()))
        flag = "" if t.declared else " (obl.)"
        leaving = sum(e.state == "LEAVING" for e in t.executors)
        lines.append(
            f"{t.tenant_id:<28} {t.group:<12} {demand + flag:<20} {t.running:>4} "
            f"{t.fair_share:>4} {t.target:>5} {t.dominant_share:>9.3f}"
            + (f"  ({leaving} leaving)" if leaving else "")
        )
    # as wide as the longest name: a Mesos agent id is 39+ characters (with @role more)
    name = max([len(a.name) for a in allocation.agents] + [10])
    host = max([len(a.hostname) for a in allocation.agents] + [12])
    header = (
        f"{'agent':<{name}} {'host':<{host}} {'cpus used/cap':>14} {'mem used/cap':>16}  executors"
    )
    lines += ["", header]
    marked = False
    for a in allocation.agents:
        per = ", ".join(f"{k}:{v}" for k, v in sorted(a.executors.items())) or "-"
        # Mesos: between offers (and while suppressed) the broker holds only its own tasks;
        # the agent's size is its last offered total
        cap = a.last_offered if a.last_offered else a.capacity
        mark = "*" if a.last_offered and not _holds(a, info.resources) else " "
        marked = marked or mark == "*"
        lines.append(
            f"{a.name:<{name}} {a.hostname:<{host}} "
            f"{a.allocated.get('cpus', 0):>6g}/{cap.get('cpus', 0):<6g}{mark} "
            f"{a.allocated.get('mem', 0):>7g}/{cap.get('mem', 0):<7g}{mark}  {per}"
        )
    if marked:
        lines.append(
            "* last offered total: the broker holds no offer of it now (declined between runs, "
            "or suppressed with nothing pending)"
        )
    return "\n".join(lines)


def _holds(agent, accounted) -> bool:
    """Does the broker hold the agent's last offered total now? Only the resources it
    accounts are compared: a real offer carries more (disk, ports), never in its capacity."""
    return all(
        math.isclose(agent.last_offered.get(r, 0.0), agent.capacity.get(r, 0.0),
                     rel_tol=1e-9, abs_tol=1e-6)
        for r in accounted
    )  # fmt: skip


_TOKEN = click.option(
    "--token", envvar=TOKEN_ENV, default=None,
    help=f"The broker's shared token (env {TOKEN_ENV}).",
)  # fmt: skip


def _broker_address(command: Callable) -> Callable:
    """--broker, --token, --ca-file and --config of the commands that talk to a running
    broker, handed to the command as one `target: BrokerTarget`."""

    @functools.wraps(command)
    def with_target(*args, broker, token, ca_file, config_file, **kwargs):
        target = broker_target(broker, token, ca_file, config_file)
        return command(*args, target=target, **kwargs)

    options = [
        click.option(
            "--broker", envvar="FAIRBROKER_BROKER", default=None,
            show_default=f"127.0.0.1:{DEFAULT_HTTP_PORT}",
            help=BROKER_HELP + " Env FAIRBROKER_BROKER.",
        ),
        _TOKEN,
        click.option(
            "--ca-file", envvar=CA_FILE_ENV, type=click.Path(dir_okay=False, exists=True),
            default=None,
            help=f"Speak TLS to the broker, trusting the CA certificate(s) in this PEM file "
            f"(a broker serving tls_cert). Env {CA_FILE_ENV}.",
        ),
        click.option(
            "--config", "config_file", envvar="FAIRBROKER_CONFIG",
            type=click.Path(dir_okay=False, exists=True), default=None,
            help="serve's configuration file: the broker's port, token_file and tls_ca are "
            "taken from it unless given here. Env FAIRBROKER_CONFIG.",
        ),
    ]  # fmt: skip
    for option in reversed(options):
        with_target = option(with_target)
    return with_target


@click.command()
@_broker_address
@click.option("--json", "as_json", is_flag=True, help="The Allocation message as JSON.")
@click.option(
    "--master", default=None,
    help="Also show the Mesos master's own view (HOST:5050): agents, frameworks, DRF shares.",
)  # fmt: skip
def status(target: BrokerTarget, as_json: bool, master: str | None) -> None:
    """Show the broker's current allocation: tenants and agents."""
    from google.protobuf import json_format

    with _client(target) as client:
        allocation = client.allocation()
    if as_json:
        click.echo(json_format.MessageToJson(allocation))
    else:
        click.echo(render_allocation(allocation))
    if master:
        from allocator.backends.mesos.operator_view import mesos_view

        click.echo("")
        click.echo(mesos_view(master).render())


@click.command()
@_broker_address
@engine_flags(
    ("scheduler", "mode", "selection", "level", "trigger", "ties", "role_weights",
     *RECLAIM_FIELDS)
)  # fmt: skip
@click.option(
    "--no-protected-groups", is_flag=True,
    help="Clear the protected groups: every group's executors may be reclaimed.",
)  # fmt: skip
def configure(
    target: BrokerTarget, role_weights: tuple[str, ...],
    protected_groups: tuple[str, ...], no_protected_groups: bool, **changes,
) -> None:  # fmt: skip
    """Change a running broker's scheduler, mode, selection, level, trigger, ties, group
    weights or reclaim knobs (--protected-group replaces the set). The changes last until
    the broker stops: to keep them, put them in its configuration (serve --config FILE,
    FAIRBROKER_* or flags)."""
    from allocator.broker.proto import pb
    from allocator.cli.engine_options import role_weights_of

    weights = role_weights_of(role_weights)
    if no_protected_groups and protected_groups:
        raise click.UsageError("--protected-group and --no-protected-groups together")
    if protected_groups or no_protected_groups:
        changes["protected_groups"] = pb.GroupList(groups=protected_groups)
    with _client(target) as client:
        info = client.configure(
            **{k: v for k, v in changes.items() if v is not None}, role_weights=weights
        )
    click.echo(render_engine(info))


def render_engine(info) -> str:
    weights = ", ".join(f"{r}={w:g}" for r, w in sorted(info.role_weights.items()))
    return (
        f"scheduler {info.scheduler}, {info.mode} mode, {info.selection} selection, "
        f"{info.level} level, {info.trigger} trigger, ties {info.ties}"
        + (f", group weights {weights}" if weights else "")
        + f"; {render_reclaim(info)}"
    )


def render_reclaim(info) -> str:
    """The reclaim knobs of a BrokerInfo, in words."""
    if info.reclaim_after <= 0:
        return "reclaim off"
    protected = ", ".join(info.protected_groups)
    return (
        f"reclaim after {info.reclaim_after:g} s below the fair share (grace "
        f"{info.reclaim_grace:g} s, min runtime {info.reclaim_min_runtime:g} s, at most "
        f"{info.reclaim_per_run} per run and {info.reclaim_per_minute} per minute"
        + (f", protected groups {protected}" if protected else "")
        + ")"
    )


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@engine_options()
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default="results/batch",
    show_default=True,
    help="Job logs, the broker's state, result.json and allocation.png.",
)
@click.option(
    "--broker",
    default=None,
    help="HTTP address of a running broker to use instead of starting one on the scenario's "
    "agents (its scheduler is then the broker's own).",
)
@_TOKEN
@click.option(
    "--ca-file",
    envvar=CA_FILE_ENV,
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help=f"--broker serves TLS: trust the CA certificate(s) in this PEM file (the drivers "
    f"too). Env {CA_FILE_ENV}.",
)
@click.option(
    "--job-timeout",
    type=FiniteFloat(min=1),
    default=600.0,
    show_default=True,
    help="Seconds a job may run before it is stopped and counted as failed.",
)
@click.option(
    "--metrics-port", type=click.IntRange(0, 65535), default=None,
    help="Serve the started broker's Prometheus /metrics on this port (0: any free port; "
    "default: off).",
)  # fmt: skip
@ADMISSION_OPTION
@click.option("--quiet", "-q", is_flag=True, help="No progress display.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def batch(
    scenario: str, engine, out: str, broker: str | None, token: str | None,
    ca_file: str | None, job_timeout: float, metrics_port: int | None, admission: str | None,
    quiet: bool, as_json: bool,
) -> None:  # fmt: skip
    """Run SCENARIO's Spark job batches (queues of jobs per group) through the broker.

    Without --broker, a broker is started on an embedded cluster of the scenario's agents and
    stopped afterwards with every executor it launched.
    """
    import json

    from google.protobuf import json_format

    from allocator.admission import AdmissionConfig, Policy
    from allocator.batch import run_live_batch
    from allocator.broker.server import BrokerOptions, BrokerService
    from allocator.cli.outputs import check_stdout, prepare_output_dir
    from allocator.scenarios.batch import load_batch
    from allocator.scenarios.cluster_file import agent_infos
    from allocator.sim.series import write_series_csv

    check_stdout()
    spec = load_batch(scenario)
    # A group's weight is its role's weight, in the simulator and here alike.
    engine = engine.with_default_role_weights(spec.role_weights())
    if broker is not None:
        _check_running_broker(BrokerTarget(broker, token, ca_file), engine)
    else:
        ca_file = None  # the broker started here speaks plain HTTP
    workdir = prepare_output_dir(out, "--out")
    service = None
    if broker is None:
        options = BrokerOptions(
            engine=engine, http_port=0, grpc_port=0, token=token, state_dir=workdir / "broker",
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
            oblivious=engine.mode == "oblivious",
            token=token,
            ca_file=ca_file,  # handed to the drivers in their environment
            progress=not quiet,
            job_timeout=job_timeout,
            admission=AdmissionConfig(Policy(admission)) if admission else None,
        )
    finally:
        if service is not None:
            service.stop(kill_executors=True)
    data = result.to_json()
    from allocator.batch import prediction

    predicted = prediction.predict(spec, engine)
    data["prediction"] = predicted.to_json()
    (workdir / "result.json").write_text(json.dumps(data, indent=2) + "\n")
    prediction.plot(predicted, data, workdir / "prediction.png")
    if result.series is not None:
        result.plot(workdir / "allocation.png")
        series = result.series
        write_series_csv(workdir / "allocation.csv", series.total, series.by_group)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(result.render_summary())
        click.echo("\n" + prediction.render(predicted, data))
        click.echo(f"\nwrote {workdir / 'result.json'}, {workdir / 'allocation.png'}, "
                   f"{workdir / 'allocation.csv'}, {workdir / 'prediction.png'}, "
                   f"job logs in {workdir / 'jobs'}")  # fmt: skip
    if result.failures:
        raise click.ClickException(f"{len(result.failures)} job(s) failed; see their logs")


def _check_running_broker(target: BrokerTarget, engine) -> None:
    """With --broker the broker's own configuration decides: refuse engine options that
    would be ignored, and group weights the broker does not hold."""
    from allocator.engine_config import EngineConfig

    asked = engine.replace(role_weights={})
    if asked != EngineConfig():
        raise click.UsageError(
            "--broker: the running broker's configuration decides; change it with "
            "`fairbroker configure` instead of giving engine options here"
        )
    wanted = {g: w for g, w in engine.role_weights.items() if w != 1.0}
    with _client(target) as client:
        held = dict(client.allocation().broker.role_weights)
    missing = {g: w for g, w in wanted.items() if held.get(g, 1.0) != w}
    if missing:
        flags = " ".join(f"--role-weight {g}={w:g}" for g, w in sorted(missing.items()))
        raise click.UsageError(
            f"the batch's group weights are not the broker's; run `fairbroker configure "
            f"--broker {target.broker} {flags}` (or start it with them) first"
        )


@click.command()
@click.argument("tenant")
@_broker_address
@click.option("--json", "as_json", is_flag=True, help="The explanation as JSON.")
def explain(tenant: str, target: BrokerTarget, as_json: bool) -> None:
    """Why TENANT waits: its fair share, the criterion value that orders it, and for every
    agent why it gets no executor there (constraint, resting, limit, refused, full,
    waiting_turn), with the last grants and reclaims that touched it."""
    from google.protobuf import json_format

    from allocator.explain import render

    with _client(target) as client:
        answer = client.explain(tenant)
    data = json_format.MessageToDict(
        answer, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    if not answer.HasField("role"):
        data.pop("role", None)
    if data["fair_share"] < 0:
        data["fair_share"] = None  # not computed yet
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(render(data))


COMMANDS = (serve, status, configure, batch, explain)
