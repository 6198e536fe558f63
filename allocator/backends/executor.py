"""The executor's command line and environment, built in one place for every backend.

A tenant's `launch.environment` is hostile input: `spark-class` is a bash script, so names
such as BASH_ENV, LD_PRELOAD, PATH, JAVA_HOME, SPARK_HOME or SPARK_CONF_DIR (whose
spark-env.sh is sourced) would run code before Spark starts, as the broker's user. The
environment is therefore an allow-list: the few names Spark's executor reads and never
sources (`TENANT_NAMES`), the interpreters the operator approved for PYSPARK_PYTHON, and
the names the operator adds (`ExecutorEnvPolicy.extra_names`). The broker's own environment
never reaches an executor except the names in `ExecutorEnvPolicy.inherit` (PATH, JAVA_HOME,
locale: what a JVM needs to start), so FAIRBROKER_TOKEN and the like stay with the broker.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from allocator.backends.base import LaunchSpec
from allocator.backends.jvm_options import JvmOptionRefused, OptionStringError, check_jvm_options
from allocator.errors import FairbrokerError

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"

# Names a tenant may set without the operator's say: read by Spark's launcher or executor as
# data, never sourced as shell, never a search path.
TENANT_NAMES = frozenset({"SPARK_EXECUTOR_OPTS", "PYSPARK_PYTHON", "SPARK_USER", "PYTHONHASHSEED"})
# Set by the backend for every executor; a tenant can never choose them.
BACKEND_NAMES = frozenset(
    {"SPARK_EXECUTOR_MEMORY", "SPARK_LOCAL_IP", "SPARK_LOCAL_DIRS", "SPARK_HOME",
     "FAIRBROKER_EXECUTOR"}
)  # fmt: skip
# Names that run code or redirect what runs (shell start-up files, the dynamic loader, search
# paths, JVM option hooks, Spark's sourced spark-env.sh): not even an operator may let a
# tenant set them.
NEVER_NAMES = BACKEND_NAMES | frozenset({
    "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "CDPATH", "PATH", "HOME",
    "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "JAVA_HOME", "JAVA_TOOL_OPTIONS",
    "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS", "CLASSPATH", "SPARK_CONF_DIR", "SPARK_ENV_LOADED",
    "SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH", "SPARK_PREPEND_CLASSES", "SPARK_LAUNCHER_OPTS",
    "SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS", "SPARK_JAVA_OPTS", "SPARK_SCALA_VERSION",
    "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME",
})  # fmt: skip
# The broker's own environment that a local executor inherits (nothing else does).
INHERITED_NAMES = ("PATH", "JAVA_HOME", "LANG", "LC_ALL", "TZ", "HOME", "USER", "TMPDIR")
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
MAX_ENV_VALUE = 8192


class EnvironmentRefused(FairbrokerError):
    """A tenant's executor environment breaks the policy; the message names the variable."""


@dataclass(frozen=True)
class ExecutorEnvPolicy:
    """What the operator allows into executors (`fairbroker serve --executor-env`,
    `--executor-python`)."""

    extra_names: frozenset[str] = frozenset()  # more names tenants may set
    pythons: frozenset[str] = field(
        default_factory=lambda: frozenset({sys.executable, "python3", "python"})
    )
    inherit: tuple[str, ...] = INHERITED_NAMES

    @classmethod
    def of_operator(cls, names: Iterable[str], pythons: Iterable[str]) -> ExecutorEnvPolicy:
        """The default policy plus the operator's names and interpreters."""
        names = frozenset(names)
        for name in names:
            if not ENV_NAME.fullmatch(name) or name in NEVER_NAMES:
                raise ValueError(f"{name!r}: not a variable name a tenant may be allowed to set")
        default = cls()
        return cls(extra_names=names, pythons=default.pythons | frozenset(pythons))

    def allowed(self, name: str) -> bool:
        return name in TENANT_NAMES or name in self.extra_names


def check_environment(environment: Mapping[str, str], policy: ExecutorEnvPolicy) -> None:
    """Raise EnvironmentRefused naming the first variable the policy does not allow."""
    for name, value in environment.items():
        where = f"launch.environment.{name}"
        if not ENV_NAME.fullmatch(name):
            raise EnvironmentRefused(f"launch.environment: {name!r} is not a variable name")
        if not policy.allowed(name):
            allowed = ", ".join(sorted(TENANT_NAMES | policy.extra_names))
            raise EnvironmentRefused(
                f"{where}: not allowed in an executor's environment (allowed: {allowed}; "
                "an operator adds names with --executor-env)"
            )
        if len(value) > MAX_ENV_VALUE or "\0" in value:
            raise EnvironmentRefused(f"{where}: at most {MAX_ENV_VALUE} characters and no NUL byte")
        if name == "PYSPARK_PYTHON" and value not in policy.pythons:
            raise EnvironmentRefused(
                f"{where}: {value!r} is not an approved interpreter (the operator approves "
                "them with --executor-python)"
            )
        if name == "PYTHONHASHSEED" and not (value == "random" or value.isdigit()):
            raise EnvironmentRefused(f"{where}: a number or 'random', got {value!r}")
        if name == "SPARK_EXECUTOR_OPTS":
            try:
                check_jvm_options(value)
            except (JvmOptionRefused, OptionStringError) as error:
                raise EnvironmentRefused(f"{where}: {error}") from None


@dataclass(frozen=True)
class ExecutorLaunch:
    argv: list[str]
    environment: dict[str, str]


def executor_launch(
    spec: LaunchSpec,
    *,
    spark_class: str,
    hostname: str,
    policy: ExecutorEnvPolicy,
    inherited: Mapping[str, str] | None = None,
    backend_env: Mapping[str, str] | None = None,
) -> ExecutorLaunch:
    """The command Spark's own Mesos backend gives its executors, and their environment:
    the inherited names of `inherited` (the broker's environment on the local backend,
    nothing on Mesos, where the agent provides it), the tenant's checked variables, then
    what the backend sets (heap, bind address, Spark home)."""
    check_environment(spec.environment, policy)
    argv = [
        spark_class, EXECUTOR_CLASS,
        "--driver-url", spec.driver_url,
        "--executor-id", spec.executor_id,
        "--hostname", hostname,
        "--cores", str(spec.cores),
        "--app-id", spec.app_id,
        "--resourceProfileId", str(spec.resource_profile_id),
    ]  # fmt: skip
    inherited = inherited or {}
    environment = {name: inherited[name] for name in policy.inherit if name in inherited}
    environment.update(spec.environment)
    environment.update(backend_env or {})
    environment["SPARK_EXECUTOR_MEMORY"] = f"{spec.heap_mib}m"
    return ExecutorLaunch(argv, environment)
