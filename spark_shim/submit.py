"""Run Spark applications against a fairbroker broker (master URL sparkbroker://HOST:PORT).

`spark_submit_command` turns a user's spark-submit arguments into the real command line
(plugin jar, broker master URL, spark.fairbroker.* confs) and computes the executor demand
the driver will declare; `configure_session` does the same for a SparkSession built in
Python; `submit_command` is the `fairbroker submit` CLI.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from allocator.broker.limits import GROUP
from allocator.errors import FairbrokerError
from allocator.scenarios.spark_demand import ExecutorDemand, executor_demand
from spark_shim.driver_host import driver_host
from spark_shim.jvm.build import default_spark_home, plugin_jar

DEFAULT_BROKER = "127.0.0.1:7080"
UNBOUNDED = 1_000_000
# Reclaim (docs/reclaim.md): an executor the broker takes back is decommissioned by the
# plugin, so it takes no new tasks, finishes or hands back its running ones and migrates its
# shuffle and cached blocks to the other executors before the broker kills it. Each key is
# set only when the user has not set it (on the command line, in a properties file or in
# spark-defaults.conf).
DECOMMISSION_CONF = {
    "spark.decommission.enabled": "true",
    "spark.storage.decommission.enabled": "true",
    "spark.storage.decommission.shuffleBlocks.enabled": "true",
    "spark.storage.decommission.rddBlocks.enabled": "true",
}

# spark-submit options that take a value (SparkSubmitOptionParser, 3.5 and 4.x).
_VALUE_OPTIONS = frozenset(
    {
        "--archives",
        "--class",
        "--conf",
        "-c",
        "--deploy-mode",
        "--driver-class-path",
        "--driver-cores",
        "--driver-java-options",
        "--driver-library-path",
        "--driver-memory",
        "--exclude-packages",
        "--executor-cores",
        "--executor-memory",
        "--files",
        "--jars",
        "--keytab",
        "--kill",
        "--master",
        "--name",
        "--num-executors",
        "--packages",
        "--principal",
        "--properties-file",
        "--proxy-user",
        "--py-files",
        "--queue",
        "--remote",
        "--repositories",
        "--status",
        "--total-executor-cores",
    }
)
# Dedicated options that override --conf for the same key in spark-submit.
_DEMAND_OPTIONS = {
    "--executor-cores": "spark.executor.cores",
    "--executor-memory": "spark.executor.memory",
    "--num-executors": "spark.executor.instances",
    "--total-executor-cores": "spark.cores.max",
}
_PROPERTY = re.compile(r"^([^\s=:]+)(?:\s*[=:]\s*|\s+|$)(.*)$")
_BROKER = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


class SubmitError(FairbrokerError):
    """Arguments that cannot be submitted to the broker."""


@dataclass(frozen=True)
class SubmitPlan:
    argv: list[str]
    env: dict[str, str] = field(repr=False)
    demand: ExecutorDemand
    driver_host: str = ""  # which spark.driver.host was chosen and why


def broker_addresses(broker: str) -> list[str]:
    """HOST:PORT, or several comma-separated (brokers run with --ha: the plugin calls
    whichever leads)."""
    addresses = [a.strip() for a in broker.split(",")]
    for address in addresses:
        match = _BROKER.match(address)
        if not match or not 0 < int(match.group(2)) < 65536:
            raise SubmitError(f"--broker: expected HOST:PORT[,HOST:PORT...], got {broker!r}")
    return addresses


def master_url(broker: str) -> str:
    """sparkbroker://HOST:PORT[,HOST:PORT...] for brokers given as HOST:PORT[,...]."""
    return "sparkbroker://" + ",".join(broker_addresses(broker))


def spark_submit_path() -> Path:
    return default_spark_home() / "bin" / "spark-submit"


def _fairbroker_conf(
    group: str, weight: float, oblivious: bool, token: str | None
) -> dict[str, str]:
    if not group.strip():
        raise SubmitError("--group: must not be empty")
    if group.strip() != "*" and not GROUP.fullmatch(group.strip()):
        raise SubmitError(
            "--group: 1-64 characters of letters, digits and . _ - starting with a letter or "
            f"digit (a Mesos role name), got {group!r}"
        )
    if not (math.isfinite(weight) and weight > 0):
        raise SubmitError(f"--weight: must be a positive number, got {weight}")
    conf = {
        "spark.fairbroker.group": group.strip(),
        "spark.fairbroker.weight": repr(float(weight)),
        "spark.fairbroker.oblivious": str(oblivious).lower(),
    }
    if token:
        conf["spark.fairbroker.token"] = token
    return conf


def _spark_defaults() -> dict[str, str]:
    """The spark-defaults.conf spark-submit reads (SPARK_CONF_DIR, else the conf directory
    of the pyspark install, which is the SPARK_HOME the command runs with), if any."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    directory = Path(conf_dir) if conf_dir else default_spark_home() / "conf"
    path = directory / "spark-defaults.conf"
    return _properties(str(path)) if path.is_file() else {}


def decommission_defaults(*user_confs: Mapping[str, str]) -> dict[str, str]:
    """The DECOMMISSION_CONF keys none of `user_confs` (nor spark-defaults.conf) sets."""
    user = set(_spark_defaults()).union(*user_confs)
    return {key: value for key, value in DECOMMISSION_CONF.items() if key not in user}


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise SubmitError(f"--conf: expected key=value, got {text!r}")
    return key.strip(), value


def _properties(path: str) -> dict[str, str]:
    """A Spark properties file: `key value` or `key=value` lines, # comments."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        raise SubmitError(f"--properties-file: cannot read {path}: {error.strerror}") from None
    out = {}
    for line in lines:
        match = _PROPERTY.match(line.strip())
        if match and not line.lstrip().startswith(("#", "!")):
            out[match.group(1)] = match.group(2).strip()
    return out


@dataclass
class _Parsed:
    options: list[str]  # passed through to spark-submit
    app: list[str]  # primary resource and its arguments
    conf: dict[str, str]  # --conf values in order (later wins)
    dedicated: dict[str, str]  # spark keys from --executor-* etc. (win over --conf)
    jars: list[str]
    properties: dict[str, str]


def _parse(args: Sequence[str]) -> _Parsed:
    """Split spark-submit arguments into options and the application, collecting confs."""
    parsed = _Parsed([], [], {}, {}, [], {})
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":  # `submit --opt x -- app.py`: click keeps the separator; Spark would not
            i += 1
            continue
        if not arg.startswith("-"):
            parsed.app = list(args[i:])
            break
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name not in _VALUE_OPTIONS:
            parsed.options.append(arg)  # a switch (--verbose) or spark-submit's to reject
            i += 1
            continue
        if eq:
            value = inline
        elif i + 1 < len(args):
            value, i = args[i + 1], i + 1
        else:
            raise SubmitError(f"{name}: missing value")
        i += 1
        if name == "--master":
            raise SubmitError("--master: the master is the broker; use --broker HOST:PORT")
        if name == "--remote":
            raise SubmitError("--remote: Spark Connect is not supported by the broker")
        if name == "--deploy-mode" and value != "client":
            raise SubmitError(f"--deploy-mode {value}: only client mode is supported")
        if name == "--jars":
            parsed.jars += [j for j in value.split(",") if j]
        elif name in ("--conf", "-c"):
            key, conf_value = _key_value(value)
            if key == "spark.jars":
                parsed.jars += [j for j in conf_value.split(",") if j]
            elif key == "spark.master":
                raise SubmitError("--conf spark.master: the master is the broker; use --broker")
            else:
                parsed.conf[key] = conf_value
        elif name in _DEMAND_OPTIONS:
            parsed.dedicated[_DEMAND_OPTIONS[name]] = value
        else:
            if name == "--properties-file":
                parsed.properties = _properties(value)
            parsed.options += [name, value]
    if not parsed.app:
        raise SubmitError("no application given (e.g. fairbroker submit -- app.py)")
    return parsed


def spark_submit_command(
    app_args: Sequence[str],
    *,
    broker: str,
    group: str = "*",
    weight: float = 1.0,
    oblivious: bool = False,
    token: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SubmitPlan:
    """The spark-submit command line, environment and executor demand for `app_args`.

    `app_args` are spark-submit's own arguments without --master (options, then the
    application and its arguments). `conf` entries come before them, so a user's --conf of
    the same key wins, as do --executor-cores/--executor-memory/--num-executors/
    --total-executor-cores over --conf. The token travels in the environment, not on argv.
    """
    url = master_url(broker)
    parsed = _parse(app_args)
    fairbroker = _fairbroker_conf(group, weight, oblivious, None)
    extra = dict(conf or {})
    if "spark.jars" in extra:
        parsed.jars = [j for j in extra.pop("spark.jars").split(",") if j] + parsed.jars
    effective = {**parsed.properties, **fairbroker, **extra, **parsed.conf, **parsed.dedicated}
    demand = executor_demand(effective)

    argv = [str(spark_submit_path()), "--master", url]
    argv += ["--jars", ",".join([str(plugin_jar()), *parsed.jars])]
    leading = dict(fairbroker)
    leading.update(decommission_defaults(parsed.properties, extra, parsed.conf))
    host_note = "spark.driver.host as given"
    if not any("spark.driver.host" in source for source in (parsed.properties, extra, parsed.conf)):
        host, host_note = driver_host(broker_addresses(broker)[0])
        if host is not None:
            leading["spark.driver.host"] = host
    leading.update(extra)
    for key, value in leading.items():
        argv += ["--conf", f"{key}={value}"]
    for key, value in parsed.conf.items():
        argv += ["--conf", f"{key}={value}"]
    argv += parsed.options
    for option, key in _DEMAND_OPTIONS.items():
        if key in parsed.dedicated:
            # spark-submit drops --num-executors for "spark*" masters; a conf always works.
            if option == "--num-executors":
                argv += ["--conf", f"{key}={parsed.dedicated[key]}"]
            else:
                argv += [option, parsed.dedicated[key]]
    argv += parsed.app

    env = dict(os.environ)
    env["SPARK_HOME"] = str(default_spark_home())
    if "spark.pyspark.python" not in effective:
        # Executors of a pip-installed pyspark need a Python that can import pyspark.
        env.setdefault("PYSPARK_PYTHON", sys.executable)
    if token:
        env["FAIRBROKER_TOKEN"] = token
    return SubmitPlan(argv=argv, env=env, demand=demand, driver_host=host_note)


def configure_session(
    builder: Any,
    broker: str,
    *,
    group: str = "*",
    weight: float = 1.0,
    oblivious: bool = False,
    token: str | None = None,
) -> Any:
    """Point a `SparkSession.builder` at the broker; returns the builder.

    Call it before the session (and so the JVM) is created. It also defaults the
    PYSPARK_PYTHON environment variable to this interpreter, which executors need.
    """
    url = master_url(broker)
    options: Mapping[str, str] = getattr(builder, "_options", {})
    jars = [j for j in str(options.get("spark.jars", "")).split(",") if j]
    builder = builder.master(url).config("spark.jars", ",".join([str(plugin_jar()), *jars]))
    first = broker_addresses(broker)[0]
    host = driver_host(first)[0] if "spark.driver.host" not in options else None
    if host is not None:
        builder = builder.config("spark.driver.host", host)
    for key, value in _fairbroker_conf(group, weight, oblivious, token).items():
        builder = builder.config(key, value)
    for key, value in decommission_defaults(options).items():
        builder = builder.config(key, value)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return builder


def _mib(value: float) -> str:
    return f"{value:g}"


def describe_demand(demand: ExecutorDemand, *, oblivious: bool = False) -> str:
    """One line for the user: the vector the driver declares and its executor target."""
    extra = demand.mem_mib - demand.heap_mib - demand.overhead_mib
    parts = f"heap {_mib(demand.heap_mib)} + overhead {_mib(demand.overhead_mib)}"
    if extra > 0:
        parts += f" + off-heap/pyspark {_mib(extra)}"
    vector = f"cpus={_mib(demand.cpus)} mem={_mib(demand.mem_mib)} MiB ({parts})"
    if demand.initial_executors >= UNBOUNDED:
        target = "target: as many as fit"
    else:
        target = f"target {demand.initial_executors}"
    if demand.dynamic:
        high = "unbounded" if demand.max_executors >= UNBOUNDED else demand.max_executors
        target += f" (dynamic allocation, {demand.min_executors}..{high})"
    if oblivious:
        return (
            f"fairbroker: oblivious mode: executor demand {vector} is not declared to the "
            f"policy, {target}"
        )
    return f"fairbroker: executor demand {vector}, {target}"


@click.command(
    "submit",
    context_settings={
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
        "help_option_names": ["-h", "--help"],
    },
)
@click.option(
    "--broker",
    envvar="FAIRBROKER_BROKER",
    default=DEFAULT_BROKER,
    show_default=True,
    help="Broker address HOST:PORT, or HOST:PORT,HOST:PORT for brokers run with --ha "
    "(env FAIRBROKER_BROKER).",
)
@click.option("--group", default="*", show_default=True, help="Group / role of the tenant.")
@click.option("--weight", type=float, default=1.0, show_default=True, help="Tenant weight.")
@click.option("--oblivious", is_flag=True, help="Do not declare the executor demand to the policy.")
@click.option("--token", envvar="FAIRBROKER_TOKEN", default=None, help="Bearer token.")
@click.option(
    "--ca-file", envvar="FAIRBROKER_CA_FILE", type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="A broker serving TLS: trust the CA certificate(s) in this PEM file (the driver's "
    "plugin too). Env FAIRBROKER_CA_FILE.",
)  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Print the spark-submit command, do not run it.")
@click.argument("spark_args", nargs=-1, type=click.UNPROCESSED)
def submit_command(
    broker: str,
    group: str,
    weight: float,
    oblivious: bool,
    token: str | None,
    ca_file: str | None,
    dry_run: bool,
    spark_args: tuple[str, ...],
) -> None:
    """Run spark-submit against the broker: SPARK_ARGS are spark-submit's (without --master).

    Example: fairbroker submit --group etl -- --executor-memory 2g app.py 100
    """
    try:
        plan = spark_submit_command(
            spark_args, broker=broker, group=group, weight=weight, oblivious=oblivious, token=token
        )
    except FairbrokerError as error:
        raise click.ClickException(str(error)) from None
    if ca_file is not None:  # the plugin reads it in the driver (spark.fairbroker.caFile)
        plan.env["FAIRBROKER_CA_FILE"] = str(Path(ca_file).resolve())
    if not dry_run:
        from allocator.broker.address import check_submit_address, check_submit_token

        try:
            address = check_submit_address(broker_addresses(broker), ca_file)
            check_submit_token(address, token, ca_file)
        except FairbrokerError as error:
            raise click.ClickException(str(error)) from None
    click.echo(describe_demand(plan.demand, oblivious=oblivious), err=True)
    click.echo(f"fairbroker: {plan.driver_host}", err=True)
    if dry_run:
        click.echo(subprocess.list2cmdline(plan.argv))
        return
    process = subprocess.Popen(plan.argv, env=plan.env)
    try:
        code = process.wait()
    except KeyboardInterrupt:
        # The driver got the same SIGINT; give it time to stop its SparkContext.
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
    sys.exit(code)
