"""The Spark plugin jar: build and cache, and what a real driver sends to a broker.

The driver tests run real JVMs (about 10 s each) against a recording stub of the broker's
HTTP API that never launches executors.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.polling import wait_for

from allocator.scenarios.spark_demand import executor_demand
from spark_shim.jvm import build
from spark_shim.jvm.build import PluginBuildError, detect_spark, plugin_jar
from spark_shim.submit import spark_submit_command

CLASSES = ["BrokerClusterManager", "BrokerSchedulerBackend", "BrokerClient", "Registration"]


@pytest.fixture(scope="module")
def jar() -> Path:
    return plugin_jar()


def test_jar_has_service_file_and_classes(jar: Path) -> None:
    spark = detect_spark(build.default_spark_home())
    assert jar.name == f"fairbroker-spark-{spark.version}.jar"
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
        assert z.read(build.SERVICE).decode().strip() == "fairbroker.spark.BrokerClusterManager"
        manifest = z.read("META-INF/MANIFEST.MF").decode()
    assert {f"fairbroker/spark/{c}.class" for c in CLASSES} <= names
    assert f"X-Scala-Version: {spark.scala}" in manifest


def test_second_call_does_not_rebuild(jar: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = jar.stat().st_mtime_ns

    def no_compile(*_: object) -> Path:
        raise AssertionError("rebuilt a fresh jar")

    monkeypatch.setattr(build, "_compile", no_compile)
    assert plugin_jar() == jar
    assert jar.stat().st_mtime_ns == before


def test_rebuilds_when_a_source_is_newer(
    jar: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = tmp_path / "src"
    shutil.copytree(build.SOURCES, sources)
    monkeypatch.setattr(build, "SOURCES", sources)
    monkeypatch.setattr(build, "BUILD_DIR", tmp_path / "build")
    (tmp_path / "build").mkdir()
    cached = shutil.copy2(jar, tmp_path / "build" / jar.name)
    later = time.time() + 5
    os.utime(cached, (later, later))
    assert plugin_jar() == cached
    assert os.stat(cached).st_mtime == later  # fresh: not rebuilt
    os.utime(sources / "fairbroker/spark/Registration.java", (later + 5, later + 5))
    assert plugin_jar() == cached
    assert os.stat(cached).st_mtime != later  # a source is newer: rebuilt
    with zipfile.ZipFile(cached) as z:
        assert "fairbroker/spark/Registration.class" in z.namelist()


def test_scala_212_install_is_detected(tmp_path: Path) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    for name in ("scala-library-2.12.18.jar", "spark-core_2.12-3.5.9.jar"):
        (jars / name).touch()
    spark = detect_spark(tmp_path)
    assert (spark.version, spark.scala) == ("3.5.9", "2.12")
    assert build.SEQ_TYPE[spark.scala] == "scala.collection.Seq"


def test_build_errors_are_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PluginBuildError, match="no Spark jars in"):
        detect_spark(tmp_path)
    monkeypatch.setattr(build, "BUILD_DIR", tmp_path / "build")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(PluginBuildError, match="javac not found"):
        plugin_jar()


# ---- real drivers against a recording stub broker ---------------------------------------

Reply = tuple[int, dict[str, Any]]


class StubBroker:
    """The broker's HTTP API, recording every call; `answer` may override replies."""

    def __init__(self, answer: Callable[[str, dict[str, Any]], Reply | None] | None = None):
        self.calls: list[tuple[str, dict[str, Any], str | None]] = []
        self.answer = answer
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                method = self.path.removeprefix("/v1/")
                stub.calls.append((method, body, self.headers.get("Authorization")))
                status, reply = (stub.answer and stub.answer(method, body)) or (200, {})
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def bodies(self, method: str) -> list[dict[str, Any]]:
        return [body for m, body, _ in list(self.calls) if m == method]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def stub_broker(answer=None) -> Iterator[StubBroker]:
    stub = StubBroker(answer)
    try:
        yield stub
    finally:
        stub.close()


@contextlib.contextmanager
def process_group(
    argv: list[str], env: dict[str, str], log: Path, cwd: Path | None = None
) -> Iterator[subprocess.Popen]:
    """A subprocess in its own process group, killed with its children on the way out."""
    with open(log, "wb") as out:
        process = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd
        )
        try:
            yield process
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


# Several SparkContexts, one after another, in one driver JVM: each registers and stops.
AGREEMENT_SCRIPT = """
import json, sys
from pyspark import SparkConf, SparkContext
master, confs = sys.argv[1], json.loads(sys.argv[2])
SparkContext._ensure_initialized()  # the JVM, without the first context's conf as defaults
for i, extra in enumerate(confs):
    conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(f"agree{i}")
    conf.set("spark.ui.enabled", "false").set("spark.driver.host", "127.0.0.1")
    conf.set("spark.fairbroker.tenantId", f"t{i}")
    conf.setAll(list(extra.items()))
    try:
        SparkContext(conf=conf).stop()
        print(f"CONTEXT {i} OK", flush=True)
    except Exception as error:
        print(f"CONTEXT {i} FAILED " + json.dumps(str(error)), flush=True)
"""

AGREEMENT_CONFS: list[dict[str, str]] = [
    {},
    {"spark.executor.memory": "4g", "spark.executor.cores": "2", "spark.cores.max": "9"},
    {
        "spark.executor.memory": "3g",
        "spark.executor.memoryOverheadFactor": "0.25",
        "spark.executor.minMemoryOverhead": "500m",
        "spark.memory.offHeap.enabled": "true",
        "spark.memory.offHeap.size": "1g",
        "spark.executor.pyspark.memory": "300m",
        "spark.executor.instances": "5",
    },
    {
        "spark.executor.memory": "1536m",
        "spark.mesos.executor.memoryOverhead": "700",
        "spark.executor.cores": "3",
    },
    {
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.shuffleTracking.enabled": "true",
        "spark.dynamicAllocation.minExecutors": "1",
        "spark.dynamicAllocation.maxExecutors": "4",
        "spark.executor.instances": "2",
        "spark.executor.memoryOverhead": "100m",
        # a bare off-heap size is bytes to Spark: 256 MiB here
        "spark.memory.offHeap.enabled": "true",
        "spark.memory.offHeap.size": str(256 * 1024 * 1024),
    },
]


def test_driver_demand_agrees_with_demand_py(jar: Path, tmp_path: Path) -> None:
    def answer(method: str, body: dict[str, Any]) -> Reply | None:
        if method == "Register" and body["tenantId"] == "t-refused":
            return 409, {"error": "tenant 't-refused' is registered with another demand"}
        return None

    confs = [*AGREEMENT_CONFS, {"spark.fairbroker.tenantId": "t-refused"}]
    with stub_broker(answer) as stub:
        env = {
            **os.environ,
            "PYSPARK_SUBMIT_ARGS": f"--jars {jar} pyspark-shell",
            "PYSPARK_PYTHON": sys.executable,
        }
        argv = [
            sys.executable,
            "-c",
            AGREEMENT_SCRIPT,
            f"sparkbroker://{stub.address}",
            json.dumps(confs),
        ]
        log = tmp_path / "driver.log"
        with process_group(argv, env, log) as driver:
            driver.wait(timeout=240)
        output = log.read_text(errors="replace")
        registered = {body["tenantId"]: body for body in stub.bodies("Register")}
    for i, conf in enumerate(AGREEMENT_CONFS):
        assert f"CONTEXT {i} OK" in output, output[-3000:]
        body = registered[f"t{i}"]
        expected = executor_demand(conf)
        assert body["demand"] == expected.vector(), conf
        assert body["target"] == expected.initial_executors, conf
        launch = body["launch"]
        assert launch["cores"] == expected.cpus
        assert launch["heapMib"] == math.floor(expected.heap_mib)
    refused = next(line for line in output.splitlines() if line.startswith("CONTEXT 5"))
    assert "FAILED" in refused and "refused the registration" in refused
    assert "registered with another demand" in refused
    # The refused id may be another driver's tenant: no SetTarget or Unregister for it.
    others = [(m, b) for m, b, _ in stub.calls if m != "Register" and b["tenantId"] == "t-refused"]
    assert others == []


def test_submitted_driver_registers_heartbeats_and_unregisters(jar: Path, tmp_path: Path) -> None:
    heartbeats = []

    def answer(method: str, body: dict[str, Any]) -> Reply | None:
        if method == "Heartbeat":
            heartbeats.append(body)
            if len(heartbeats) == 1:  # as if the broker had restarted without the tenant
                return 404, {"error": "unknown tenant", "code": "NOT_FOUND"}
        if method == "Register":
            return 200, {"tenantId": body["tenantId"], "leaseSeconds": 30}
        return None

    release = tmp_path / "release"
    app = tmp_path / "app.py"
    app.write_text(
        "import os, sys, time\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.appName('fb-submit-test').getOrCreate()\n"
        "deadline = time.time() + 120\n"
        "while not os.path.exists(sys.argv[1]) and time.time() < deadline:\n"
        "    time.sleep(0.1)\n"
        "spark.stop()\n"
    )
    with stub_broker(answer) as stub:
        plan = spark_submit_command(
            [
                "--executor-memory",
                "640m",
                "--executor-cores",
                "2",
                "--num-executors",
                "3",
                str(app),
                str(release),
            ],
            broker=stub.address,
            group="etl",
            weight=2.0,
            token="s3cret",
            conf={
                "spark.ui.enabled": "false",
                "spark.fairbroker.heartbeatInterval": "300ms",
                "spark.fairbroker.constraints": "zone:a; disk:ssd",
                "spark.executorEnv.FOO": "bar",
            },
        )
        with process_group(plan.argv, plan.env, tmp_path / "driver.log") as driver:
            wait_for(lambda: len(stub.bodies("Register")) >= 2, 180, "a second Register", every=0.1)
            release.touch()
            assert driver.wait(timeout=120) == 0
        calls = [(m, body) for m, body, _ in stub.calls if m != "Heartbeat"]
        auth = {header for _, _, header in stub.calls}
    first, again = stub.bodies("Register")[:2]
    assert again == first  # re-registered with the same demand and the current target
    assert first["demand"] == plan.demand.vector() == {"cpus": 2, "mem": 1024}
    assert first["target"] == 3
    assert first["group"] == "etl" and first["weight"] == 2.0 and not first["oblivious"]
    assert first["constraints"] == {"zone": "a", "disk": "ssd"}
    launch = first["launch"]
    tenant = first["tenantId"]
    assert launch["appId"] == tenant
    assert launch["driverUrl"].startswith("spark://CoarseGrainedScheduler@127.0.0.1:")
    assert launch["cores"] == 2 and launch["heapMib"] == 640
    assert launch["resourceProfileId"] == 0
    env = launch["environment"]
    assert env["FOO"] == "bar" and env["PYSPARK_PYTHON"] == sys.executable
    assert "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED" in env["SPARK_EXECUTOR_OPTS"]
    assert auth == {"Bearer s3cret"}
    # On stop: target 0 (no replacements while Spark stops its executors), then Unregister.
    assert calls[-2:] == [
        ("SetTarget", {"tenantId": tenant, "total": 0}),
        ("Unregister", {"tenantId": tenant}),
    ]


# ---- reclaim: executors the broker lists as leaving are decommissioned --------------------

# Waits for two executors, runs a job on them, says READY, then holds until released and
# prints how many executors it has left.
LEAVING_APP = """
import os, sys, time
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("fb-leaving-test").getOrCreate()
sc = spark.sparkContext
ready, release = sys.argv[1], sys.argv[2]
deadline = time.time() + 240
def executors():
    return len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1  # minus the driver
while executors() < 2 and time.time() < deadline:
    time.sleep(0.2)
print("SUM", sc.parallelize(range(8), 4).sum(), flush=True)
open(ready, "w").close()
while not os.path.exists(release) and time.time() < deadline:
    time.sleep(0.2)
print("EXECUTORS", executors(), flush=True)
spark.stop()
"""

# Heartbeat replies a confused or hostile broker might send: none names a live executor of
# the driver in a form the plugin may act on ("1" comes after the first 1024 entries, or as
# a number, or inside something else, or padded).
HOSTILE_REPLIES: list[dict[str, Any]] = [
    {"leaving": "1"},
    {"leaving": {"0": "1"}},
    {"leaving": None},
    {"leaving": [1, None, True, 1.0, {"id": "1"}, ["1"]]},
    {"leaving": ["x"] * 1024 + ["1"]},
    {"leaving": [" 1", "1 ", "01", "1\u0000", "a" * 100_000, "99", "app-other.1"]},
    {"leaving": [f"e{i}" for i in range(50_000)]},
]


def test_leaving_executors_are_decommissioned_once_and_garbage_is_ignored(
    jar: Path, tmp_path: Path
) -> None:
    """The broker's heartbeat reply lists executors it reclaims: the plugin decommissions
    each live one once (Spark then lets it finish and exit by itself, exit code 0), leaves
    the others alone, and survives any garbage in the list."""
    from allocator.backends.base import LaunchSpec
    from allocator.backends.executor import ExecutorEnvPolicy, executor_launch

    reply: dict[str, Any] = {}  # the current heartbeat reply
    served: list[dict[str, Any]] = []

    def answer(method: str, body: dict[str, Any]) -> Reply | None:
        if method == "Register":
            return 200, {"tenantId": body["tenantId"], "leaseSeconds": 30}
        if method == "Heartbeat":
            current = reply.get("next", {})
            served.append(current)
            return 200, current
        return None

    ready, release = tmp_path / "ready", tmp_path / "release"
    app = tmp_path / "app.py"
    app.write_text(LEAVING_APP)
    home = build.default_spark_home()
    with stub_broker(answer) as stub, contextlib.ExitStack() as stack:
        plan = spark_submit_command(
            ["--executor-memory", "512m", "--num-executors", "2", str(app), str(ready),
             str(release)],
            broker=stub.address,
            conf={"spark.ui.enabled": "false", "spark.fairbroker.heartbeatInterval": "300ms"},
        )  # fmt: skip
        driver = stack.enter_context(process_group(plan.argv, plan.env, tmp_path / "driver.log"))
        wait_for(lambda: stub.bodies("Register"), 180, "the driver to register", every=0.2)
        launch = stub.bodies("Register")[0]["launch"]
        executors = {}
        for executor_id in ("1", "2"):
            spec = LaunchSpec(
                "t", executor_id, "local", {}, launch["driverUrl"], launch["appId"],
                launch["cores"], launch["heapMib"], environment=launch["environment"],
            )  # fmt: skip
            command = executor_launch(
                spec, spark_class=str(home / "bin" / "spark-class"), hostname="127.0.0.1",
                policy=ExecutorEnvPolicy(), inherited=os.environ,
                backend_env={"SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1"},
            )  # fmt: skip
            workdir = tmp_path / f"executor-{executor_id}"  # where it fetches the app's jars
            workdir.mkdir()
            executors[executor_id] = stack.enter_context(process_group(
                command.argv, command.environment, workdir / "log", cwd=workdir
            ))  # fmt: skip
        wait_for(ready.exists, 240, "two executors to run a job", every=0.2)

        for hostile in HOSTILE_REPLIES:
            reply["next"] = hostile
            seen = len(served)
            wait_for(lambda s=seen: len(served) >= s + 2, 30, "two heartbeats", every=0.05)
        assert [e.poll() for e in executors.values()] == [None, None]

        reply["next"] = {"leaving": ["99", "1", "1", 7]}  # in every heartbeat, as the broker
        assert executors["1"].wait(timeout=90) == 0  # decommissioned: it leaves by itself
        assert executors["2"].poll() is None
        seen = len(served)
        wait_for(lambda: len(served) >= seen + 3, 30, "more heartbeats", every=0.05)
        reply["next"] = {}
        release.touch()
        assert driver.wait(timeout=120) == 0
    output = (tmp_path / "driver.log").read_text(errors="replace")
    assert "SUM 28" in output and "EXECUTORS 1" in output, output[-3000:]
    # one decommission for all the heartbeats that listed it
    assert output.count("fairbroker: the broker reclaims executors [1]: decommissioning [1]") == 1
    assert "Exception" not in output.split("SUM 28", 1)[1], output[-3000:]
