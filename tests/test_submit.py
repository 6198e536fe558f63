"""The submit wrapper: spark-submit command lines, demand vectors, one-line errors."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from allocator.scenarios.spark_demand import SparkConfError
from spark_shim.jvm.build import default_spark_home, plugin_jar
from spark_shim.submit import (
    SubmitError,
    configure_session,
    describe_demand,
    spark_submit_command,
)

BROKER = "127.0.0.1:7080"


def conf_args(argv: list[str]) -> dict[str, str]:
    """The --conf key=value pairs of an argv (later wins, as in spark-submit)."""
    out = {}
    for flag, value in itertools.pairwise(argv):
        if flag == "--conf":
            key, _, v = value.partition("=")
            out[key] = v
    return out


@pytest.mark.parametrize(
    ("args", "cpus", "mem", "target"),
    [
        ("--executor-memory 640m --executor-cores 2", 2, 640 + 384, 1_000_000),
        # 0.10 x 4096 = 409.6 -> 409 > 384
        ("--executor-memory 4g --executor-cores 2 --total-executor-cores 9", 2, 4096 + 409, 4),
        (
            "--executor-memory 2g --conf spark.executor.memoryOverhead=1g --num-executors 3",
            1,
            3072,
            3,
        ),
        (
            "-c spark.memory.offHeap.enabled=true --conf=spark.memory.offHeap.size=512m "
            "--conf spark.executor.pyspark.memory=256m --executor-memory=1g",
            1,
            1024 + 384 + 512 + 256,
            1_000_000,
        ),
        (
            "--conf spark.dynamicAllocation.enabled=true "
            "--conf spark.dynamicAllocation.minExecutors=1 "
            "--conf spark.dynamicAllocation.maxExecutors=5 "
            "--conf spark.dynamicAllocation.initialExecutors=2",
            1,
            1408,
            2,
        ),
    ],
)
def test_demand_from_the_command_line(args: str, cpus: int, mem: int, target: int) -> None:
    plan = spark_submit_command([*args.split(), "app.py"], broker=BROKER)
    assert plan.demand.vector() == {"cpus": cpus, "mem": mem}
    assert plan.demand.initial_executors == target


def test_command_line_shape() -> None:
    plan = spark_submit_command(
        ["--jars", "extra.jar", "--name", "pi", "app.py", "--executor-memory", "9g", "10"],
        broker="10.9.8.7:7081",
        group="etl",
        weight=2.5,
        conf={"spark.ui.enabled": "false"},
    )
    argv = plan.argv
    assert argv[0].endswith("/bin/spark-submit")
    assert argv[argv.index("--master") + 1] == "sparkbroker://10.9.8.7:7081"
    assert argv[argv.index("--jars") + 1] == f"{plugin_jar()},extra.jar"
    assert argv.count("--jars") == 1
    confs = conf_args(argv)
    assert confs["spark.fairbroker.group"] == "etl"
    assert confs["spark.fairbroker.weight"] == "2.5"
    assert confs["spark.fairbroker.oblivious"] == "false"
    assert confs.get("spark.driver.host") != "127.0.0.1"  # executors elsewhere dial back
    assert confs["spark.ui.enabled"] == "false"
    # Everything from the application on is the application's, untouched and not parsed.
    assert argv[-4:] == ["app.py", "--executor-memory", "9g", "10"]
    assert plan.demand.heap_mib == 1024
    assert argv[argv.index("--name") + 1] == "pi"


def test_user_settings_win_over_defaults() -> None:
    plan = spark_submit_command(
        [
            "--conf",
            "spark.driver.host=10.0.0.5",
            "--conf",
            "spark.executor.memory=2g",
            "--executor-memory",
            "1g",
            "app.py",
        ],
        broker=BROKER,
        conf={"spark.executor.memory": "8g"},
    )
    assert conf_args(plan.argv)["spark.driver.host"] == "10.0.0.5"
    assert plan.demand.heap_mib == 1024  # --executor-memory beats --conf beats `conf`
    assert plan.argv[plan.argv.index("--executor-memory") + 1] == "1g"


def test_num_executors_becomes_a_conf() -> None:
    # spark-submit ignores --num-executors for masters it files under standalone.
    plan = spark_submit_command(["--num-executors", "3", "app.py"], broker=BROKER)
    assert "--num-executors" not in plan.argv
    assert conf_args(plan.argv)["spark.executor.instances"] == "3"


def test_token_travels_in_the_environment() -> None:
    plan = spark_submit_command(["app.py"], broker=BROKER, token="s3cret", oblivious=True)
    assert plan.env["FAIRBROKER_TOKEN"] == "s3cret"
    assert not any("s3cret" in a for a in plan.argv)
    assert conf_args(plan.argv)["spark.fairbroker.oblivious"] == "true"
    assert plan.env["SPARK_HOME"] == str(default_spark_home())


def test_properties_file_counts(tmp_path) -> None:
    props = tmp_path / "spark.conf"
    props.write_text("# mine\nspark.executor.memory 3g\nspark.executor.cores=4\n")
    plan = spark_submit_command(["--properties-file", str(props), "app.py"], broker=BROKER)
    assert plan.demand.vector() == {"cpus": 4, "mem": 3072 + 384}


DECOMMISSION = {
    "spark.decommission.enabled": "true",
    "spark.storage.decommission.enabled": "true",
    "spark.storage.decommission.shuffleBlocks.enabled": "true",
    "spark.storage.decommission.rddBlocks.enabled": "true",
}


def test_decommissioning_is_on_unless_the_user_says_otherwise(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reclaimed executors are decommissioned (docs/reclaim.md): the wrapper turns Spark's
    decommissioning and block migration on, and never overrides a user's own setting of a
    key, wherever it was made."""
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "no-conf"))
    plain = conf_args(spark_submit_command(["app.py"], broker=BROKER).argv)
    assert {k: plain.get(k) for k in DECOMMISSION} == DECOMMISSION
    props = tmp_path / "spark.conf"
    props.write_text("spark.storage.decommission.rddBlocks.enabled false\n")
    defaults = tmp_path / "conf"
    defaults.mkdir()
    (defaults / "spark-defaults.conf").write_text("spark.storage.decommission.enabled=false\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(defaults))
    plan = spark_submit_command(
        ["--properties-file", str(props), "--conf", "spark.decommission.enabled=false",
         "app.py"],
        broker=BROKER,
        conf={"spark.storage.decommission.shuffleBlocks.enabled": "false"},
    )  # fmt: skip
    argv = plan.argv
    # each user setting appears once, as the user gave it; none of ours is added
    assert argv.count("spark.decommission.enabled=false") == 1
    assert "spark.decommission.enabled=true" not in argv
    assert argv.count("spark.storage.decommission.shuffleBlocks.enabled=false") == 1
    assert not any(a.startswith("spark.storage.decommission.enabled=") for a in argv)
    assert not any(a.startswith("spark.storage.decommission.rddBlocks.") for a in argv)
    assert "spark.storage.decommission.shuffleBlocks.enabled=true" not in argv


@pytest.mark.parametrize(
    ("args", "broker", "message"),
    [
        (["--executor-memory", "banana", "app.py"], BROKER, "spark.executor.memory: not a size"),
        (["--executor-cores", "two", "app.py"], BROKER, "spark.executor.cores: not a number"),
        (["app.py"], "localhost", "--broker: expected HOST:PORT"),
        (["app.py"], "host:99999", "--broker: expected HOST:PORT"),
        (["--master", "local[2]", "app.py"], BROKER, "use --broker"),
        (["--deploy-mode", "cluster", "app.py"], BROKER, "only client mode"),
        (["--conf", "novalue", "app.py"], BROKER, "expected key=value"),
        (["--executor-memory", "1g"], BROKER, "no application given"),
    ],
)
def test_bad_input_is_a_clear_error(args: list[str], broker: str, message: str) -> None:
    with pytest.raises((SubmitError, SparkConfError), match=message):
        spark_submit_command(args, broker=broker)


def test_bad_weight_and_group() -> None:
    with pytest.raises(SubmitError, match="--weight"):
        spark_submit_command(["app.py"], broker=BROKER, weight=0)
    with pytest.raises(SubmitError, match="--group"):
        spark_submit_command(["app.py"], broker=BROKER, group=" ")


def run_submit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    code = "from spark_shim.submit import submit_command; submit_command()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_cli_bad_input_is_one_line() -> None:
    done = run_submit("--executor-memory", "banana", "app.py")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "spark.executor.memory: not a size: 'banana'" in lines[0]


def test_cli_dry_run_prints_demand_and_command() -> None:
    env = {**os.environ, "FAIRBROKER_BROKER": "10.1.2.3:9000"}
    args = "--group etl --dry-run --executor-memory 640m --executor-cores 2 --num-executors 4"
    done = run_submit(*args.split(), "app.py", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[0] == (
        "fairbroker: executor demand cpus=2 mem=1024 MiB (heap 640 + overhead 384), target 4"
    )
    assert done.stderr.strip().splitlines()[1].startswith("fairbroker: spark.driver.host")
    assert "sparkbroker://10.1.2.3:9000" in done.stdout
    assert "spark.fairbroker.group=etl" in done.stdout


def test_describe_demand_variants() -> None:
    plan = spark_submit_command(
        [
            "--conf",
            "spark.dynamicAllocation.enabled=true",
            "--conf",
            "spark.executor.pyspark.memory=100m",
            "app.py",
        ],
        broker=BROKER,
    )
    text = describe_demand(plan.demand)
    assert "mem=1508 MiB (heap 1024 + overhead 384 + off-heap/pyspark 100)" in text
    assert "target 0 (dynamic allocation, 0..unbounded)" in text
    unbounded = spark_submit_command(["app.py"], broker=BROKER).demand
    oblivious = describe_demand(unbounded, oblivious=True)
    assert "not declared" in oblivious and "as many as fit" in oblivious


class FakeBuilder:
    """Records what configure_session does to a SparkSession.builder."""

    def __init__(self, options: dict[str, str] | None = None) -> None:
        self._options: dict[str, Any] = dict(options or {})
        self.master_url: str | None = None

    def master(self, url: str) -> FakeBuilder:
        self.master_url = url
        return self

    def config(self, key: str, value: str) -> FakeBuilder:
        self._options[key] = value
        return self


def test_configure_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    builder = configure_session(
        FakeBuilder({"spark.jars": "mine.jar"}), "127.0.0.1:7080", group="ml", token="t"
    )
    assert builder.master_url == "sparkbroker://127.0.0.1:7080"
    assert builder._options["spark.jars"] == f"{plugin_jar()},mine.jar"
    assert builder._options["spark.driver.host"] == "127.0.0.1"
    assert builder._options["spark.fairbroker.group"] == "ml"
    assert builder._options["spark.fairbroker.token"] == "t"
    assert builder._options["spark.fairbroker.oblivious"] == "false"
    # Executors of a pip-installed pyspark need this interpreter.
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    kept = configure_session(FakeBuilder({"spark.driver.host": "10.0.0.9"}), "h:1")
    assert kept._options["spark.driver.host"] == "10.0.0.9"
    for key, value in DECOMMISSION.items():
        assert builder._options[key] == value
    off = configure_session(FakeBuilder({"spark.decommission.enabled": "false"}), "h:1")
    assert off._options["spark.decommission.enabled"] == "false"
    assert off._options["spark.storage.decommission.enabled"] == "true"


def test_driver_host_is_loopback_only_for_a_loopback_broker(monkeypatch) -> None:
    from spark_shim import driver_host as dh

    for broker in ("127.0.0.1:7080", "localhost:7080", "[::1]:7080", "127.0.1.3:9"):
        assert dh.driver_host(broker)[0] == "127.0.0.1", broker
    # A broker elsewhere: the address this host reaches it from, as the kernel's routing
    # table has it (`ip route get` is the independent oracle), never 127.0.0.1.
    host, note = dh.driver_host("10.1.2.3:7080")
    ip = shutil.which("ip")
    if ip and host is not None:
        route = subprocess.run([ip, "route", "get", "10.1.2.3"], capture_output=True, text=True)
        assert f"src {host}" in route.stdout, (route.stdout, host)
    assert host != "127.0.0.1" and "10.1.2.3" in note
    plan = spark_submit_command(["app.py"], broker="10.1.2.3:7080")
    assert conf_args(plan.argv).get("spark.driver.host") == host
    # no route (or only loopback): Spark's default, and the plan says so
    monkeypatch.setattr(dh, "routable_address", lambda host, port: None)
    monkeypatch.setattr("spark_shim.submit.driver_host", dh.driver_host)
    plan = spark_submit_command(["app.py"], broker="10.1.2.3:7080")
    assert "spark.driver.host" not in conf_args(plan.argv)
    assert "Spark's default" in plan.driver_host
    monkeypatch.setattr(dh, "routable_address", lambda host, port: "127.0.1.1")
    assert dh.driver_host("broker.example:7080")[0] is None
