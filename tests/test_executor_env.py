"""The executor environment is an allow-list on both backends: a tenant's variables that would
run code before Spark (BASH_ENV, LD_PRELOAD, PATH, SPARK_CONF_DIR, ...) are refused at
Register, never reach a launched process, and the broker's own environment stays home."""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

import pytest
from support.broker import AGENTS, PI, RecordingBackend, request
from support.mesos import RecordingDriver

from allocator.backends.base import LaunchSpec
from allocator.backends.executor import (
    EnvironmentRefused,
    ExecutorEnvPolicy,
    check_environment,
)
from allocator.backends.local import LocalCluster
from allocator.backends.mesos import MesosBackend, MesosOptions
from allocator.backends.mesos.tasks import task_info
from allocator.broker.core import ApiError, Broker
from allocator.engine_config import EngineConfig

MODULE_FLAGS = "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED -Dspark.x=1 -XX:+UseG1GC"

HOSTILE = [
    {"BASH_ENV": "$(touch {marker})"},
    {"ENV": "$(touch {marker})"},
    {"LD_PRELOAD": "{marker}.so"},
    {"PATH": "{marker}:/usr/bin"},
    {"JAVA_HOME": "{marker}"},
    {"SPARK_CONF_DIR": "{marker}"},
    {"SPARK_HOME": "{marker}"},
    {"JAVA_TOOL_OPTIONS": "-javaagent:{marker}.jar"},
    {"FAIRBROKER_TOKEN": "stolen"},
    {"SPARK_EXECUTOR_OPTS": "-Dx=1 -XX:OnError=touch {marker}"},
    {"SPARK_EXECUTOR_OPTS": "-javaagent:{marker}.jar"},
    {"SPARK_EXECUTOR_OPTS": "@{marker}"},
    {"PYSPARK_PYTHON": "{marker}"},
    {"SPARK_LOCAL_DIRS": "{marker}"},
    {"lower": "x"},
]


def hostile(index: int, marker: Path) -> dict[str, str]:
    return {k: v.format(marker=marker) for k, v in HOSTILE[index].items()}


def spec(environment: dict[str, str], executor_id: str = "1") -> LaunchSpec:
    return LaunchSpec(
        tenant_id="t", executor_id=executor_id, agent="t1", resources=dict(PI),
        driver_url="spark://CoarseGrainedScheduler@127.0.0.1:4000", app_id="app-t",
        cores=2, heap_mib=640, environment=environment,
    )  # fmt: skip


@pytest.mark.parametrize("index", range(len(HOSTILE)))
def test_register_refuses_each_variable_naming_it(index: int, tmp_path: Path) -> None:
    broker = Broker(RecordingBackend(), EngineConfig("drf"))
    broker.start(loop=False)
    bad = request("t", PI)
    env = hostile(index, tmp_path / "ran")
    bad.launch.environment.update(env)
    with pytest.raises(ApiError, match=f"launch.environment.*{next(iter(env))}") as error:
        broker.register(bad)
    assert error.value.code == "INVALID_ARGUMENT"
    assert "t" not in broker.tenants and "t" not in broker.engine.frameworks
    broker.stop()


def test_what_spark_sends_is_accepted_and_the_operator_can_add_names() -> None:
    check_environment(
        {"SPARK_EXECUTOR_OPTS": MODULE_FLAGS, "PYSPARK_PYTHON": sys.executable,
         "PYTHONHASHSEED": "0", "SPARK_USER": "alice"},
        ExecutorEnvPolicy(),
    )  # fmt: skip
    with pytest.raises(EnvironmentRefused, match="FOO"):
        check_environment({"FOO": "bar"}, ExecutorEnvPolicy())
    policy = ExecutorEnvPolicy.of_operator(["FOO"], ["/opt/py/bin/python3"])
    check_environment({"FOO": "bar", "PYSPARK_PYTHON": "/opt/py/bin/python3"}, policy)
    for name in ("BASH_ENV", "LD_PRELOAD", "SPARK_HOME", "SPARK_LOCAL_DIRS", "path"):
        with pytest.raises(ValueError, match=name):
            ExecutorEnvPolicy.of_operator([name], [])


@pytest.mark.parametrize(
    "option",
    [
        "--patch-module=java.base=/tmp/evil.jar", "--module-path=/tmp/mods", "-p",
        "--upgrade-module-path", "-Djava.system.class.loader=Evil", "-XX:ErrorFile=/tmp/x",
        "-XX:HeapDumpPath=/tmp/x", "-XX:LogFile=/tmp/x", "-Xlog:gc:file=/tmp/x",
        "-Xlog:all=info:/tmp/x", "-Xloggc:/tmp/x", "-Djava.library.path=/tmp",
        "-Dsun.boot.library.path=/tmp",
    ],
)  # fmt: skip
def test_jvm_options_that_load_code_or_write_files_are_refused(option: str) -> None:
    with pytest.raises(EnvironmentRefused, match=r"SPARK_EXECUTOR_OPTS.*not allowed"):
        check_environment({"SPARK_EXECUTOR_OPTS": f"-Dx=1 {option} -Dy=2"}, ExecutorEnvPolicy())


def test_harmless_jvm_options_stay_allowed() -> None:
    check_environment(
        {"SPARK_EXECUTOR_OPTS": f"{MODULE_FLAGS} -Xlog:gc -Xlog:gc*:stdout -Xlog:safepoint:stderr"
         " -Dspark.plugins=x -Dpath=/p -XX:+ExitOnOutOfMemoryError -Xss4m"},
        ExecutorEnvPolicy(),
    )  # fmt: skip


@pytest.fixture
def fake_spark(tmp_path: Path) -> Path:
    """A Spark home whose spark-class is a bash script (as the real one is) that records its
    environment and then waits to be stopped."""
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "spark-class"
    script.write_text('#!/bin/bash\nenv -0 > "$PWD/env.out"\nexec sleep 30\n')
    script.chmod(0o755)
    return home


def _local(tmp_path: Path, home: Path) -> LocalCluster:
    cluster = LocalCluster(AGENTS, tmp_path / "agents", home)
    cluster.start(RecordingBackend())
    return cluster


def _environ(path: Path) -> dict[str, str]:
    deadline = time.monotonic() + 10
    while not (path.exists() and path.read_bytes().endswith(b"\0")):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.02)
    entries = [e.split("=", 1) for e in path.read_text().split("\0") if e]
    return dict(entries)


@pytest.mark.parametrize("index", range(len(HOSTILE)))
def test_local_backend_never_starts_a_hostile_environment(
    index: int, tmp_path: Path, fake_spark: Path
) -> None:
    """Even a spec that skipped Register's check (an old state file) runs nothing."""
    marker = tmp_path / "ran"
    cluster = _local(tmp_path, fake_spark)
    try:
        with pytest.raises(EnvironmentRefused):
            cluster.launch(spec(hostile(index, marker)))
        assert cluster.pids() == {}
        assert not marker.exists()
    finally:
        cluster.stop()


def test_local_executor_gets_only_allowed_and_backend_variables(
    tmp_path: Path, fake_spark: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIRBROKER_TOKEN", "broker-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "cloud-secret")
    monkeypatch.setenv("BASH_ENV", str(tmp_path / "broker-bashenv"))
    (tmp_path / "broker-bashenv").write_text(f"touch {tmp_path / 'ran'}\n")
    cluster = _local(tmp_path, fake_spark)
    try:
        cluster.launch(spec({"SPARK_EXECUTOR_OPTS": MODULE_FLAGS}))
        env = _environ(tmp_path / "agents" / "t1" / "t" / "executor-1" / "env.out")
    finally:
        cluster.stop()
    assert not {"FAIRBROKER_TOKEN", "AWS_SECRET_ACCESS_KEY", "BASH_ENV"} & set(env)
    assert not (tmp_path / "ran").exists()
    assert env["SPARK_EXECUTOR_OPTS"] == MODULE_FLAGS
    assert env["SPARK_EXECUTOR_MEMORY"] == "640m" and env["SPARK_LOCAL_IP"] == "127.0.1.1"
    assert env["SPARK_LOCAL_DIRS"] == str(tmp_path / "agents" / "t1" / "t" / "executor-1")
    assert env["SPARK_HOME"] == str(fake_spark) and env["PATH"] == os.environ["PATH"]


def _mesos(tmp_path: Path, policy: ExecutorEnvPolicy | None = None) -> MesosBackend:
    options = MesosOptions(master="127.0.0.1:5050", state_dir=tmp_path, spark_home="/opt/spark")
    if policy is not None:
        options.executor_env = policy
    return MesosBackend(options, driver_factory=lambda *_: RecordingDriver())


@pytest.mark.parametrize("index", range(len(HOSTILE)))
def test_mesos_task_never_carries_a_hostile_environment(index: int, tmp_path: Path) -> None:
    backend = _mesos(tmp_path)
    with pytest.raises(EnvironmentRefused):
        task_info(spec(hostile(index, tmp_path / "ran")), "t.1", "a1", "h1", backend.options)


def test_mesos_task_environment_is_the_tenants_allowed_names_and_the_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIRBROKER_TOKEN", "broker-secret")
    backend = _mesos(tmp_path, ExecutorEnvPolicy.of_operator(["FOO"], []))
    task = task_info(
        spec({"SPARK_EXECUTOR_OPTS": MODULE_FLAGS, "FOO": "a b"}), "t.1", "a1", "h1",
        backend.options,
    )  # fmt: skip
    env = {v["name"]: v["value"] for v in task["command"]["environment"]["variables"]}
    assert env == {
        "SPARK_EXECUTOR_OPTS": MODULE_FLAGS, "FOO": "a b", "SPARK_EXECUTOR_MEMORY": "640m"
    }  # fmt: skip
    assert shlex.split(task["command"]["value"])[:3] == [
        "exec", "/opt/spark/bin/spark-class",
        "org.apache.spark.executor.CoarseGrainedExecutorBackend",
    ]  # fmt: skip
