"""SPARK_EXECUTOR_OPTS is split exactly as Spark's launcher splits it (checked against Spark's
own parseOptionString and its Main), and only allow-listed JVM options pass: the bypasses of
the old shlex filter are refused naming the option, at Register, over HTTP and gRPC."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.broker import AGENTS, PI, http, request
from support.spark_launcher import (
    SparkTokenizer,
    compile_harness,
    executor_command,
    launcher_jar,
    run_harness,
    tenant_part,
)

from allocator.backends.executor import EnvironmentRefused, ExecutorEnvPolicy, check_environment
from allocator.backends.jvm_options import (
    JAVA_WHITESPACE,
    JvmOptionRefused,
    OptionStringError,
    check_jvm_options,
    check_jvm_tokens,
    spark_split,
)
from allocator.backends.local import LocalCluster
from allocator.broker.client import BrokerCallError, BrokerClient
from allocator.broker.server import BrokerOptions, BrokerService
from allocator.engine_config import EngineConfig

JAR, WHY_NO_JAR = launcher_jar()


def needs_spark(test):
    """A test that runs Spark's launcher code in a JVM (left out of `make test-fast`)."""
    skip = pytest.mark.skipif(JAR is None, reason=f"Spark's launcher: {WHY_NO_JAR}")
    return pytest.mark.live(skip(test))


# The reported bypasses of the shlex filter and other dangerous options, each with the option
# the JVM would see (the string itself where it is one option).
_BYPASSES: list[str | tuple[str, str]] = [
    ('"\\-javaagent:/tmp/a.jar"', "-javaagent:/tmp/a.jar"),
    ("-Dx=1\x0b-javaagent:/tmp/a.jar", "-javaagent:/tmp/a.jar"),
    ("-Dx=1\u2003-javaagent:/tmp/a.jar", "-javaagent:/tmp/a.jar"),
    ("-Dx=1\x1f-agentlib:jdwp=transport=dt_socket,server=y,address=5005",
     "-agentlib:jdwp=transport=dt_socket,server=y,address=5005"),
    ('"\\@argfile"', "@argfile"),
    ("-Xrunjdwp:transport=dt_socket,server=y,address=5005",
     "-Xrunjdwp:transport=dt_socket,server=y,address=5005"),
    "-Dcom.sun.management.jmxremote.port=9010",
    "-Dcom.sun.management.jmxremote.authenticate=false",
    "-XX:+UnlockExperimentalVMOptions",
    "-XX:+EnableJVMCI",
    "-XX:+UseJVMCINativeLibrary",
    "-XX:JVMCILibPath=/tmp/evil",
    "-Djvmci.Compiler=evil",
    "-Dlog4j2.configurationFile=/tmp/l.xml",
    "-Dlog4j.configurationFile=http://x/l.xml",
    "-Dlog4j.configuration=file:/tmp/l.properties",
    "-DLOG4J2.CONFIGURATIONFILE=/tmp/l.xml",
    "-Dorg.apache.logging.log4j.configurationFile=/x",
    "-DAsyncLogger.ExceptionHandler=Evil",
    "-Djava.system.class.loader=Evil",
    "-Djava.security.manager=Evil",
    "-Djava.security.policy==/tmp/all",
    "-Djava.rmi.server.codebase=http://x/",
    "-Dcom.sun.jndi.ldap.object.trustURLCodebase=true",
    "-Dslf4j.provider=Evil",
    "-Xbootclasspath/a:/tmp/evil.jar",
    ("-XX:OnOutOfMemoryError=touch /tmp/x", "-XX:OnOutOfMemoryError=touch"),
    ("'-XX:OnError=sh -c id'", "-XX:OnError=sh -c id"),
    "-XX:Flags=/tmp/flags",
    "-XX:VMOptionsFile=/tmp/opts",
    "-agentpath:/tmp/a.so",
    "-Xdebug",
    "--patch-module=java.base=/tmp/p.jar",
    ("--module-path /tmp/m", "--module-path"),
    ("-cp /tmp/evil.jar", "-cp"),
    "Evil",
    "-XX:StartFlightRecording=filename=/tmp/x.jfr",
    "-Xlog:gc:file=/tmp/x",
    "-XX:MaxHeapSize=64g",
    "-Xmx64g",
    ("--add-opens java.base/java.lang=ALL-UNNAMED --add-opens @x", "--add-opens @x"),
    ("-Dx=1 -XX:+UseG1GC -javaagent:a.jar", "-javaagent:a.jar"),
]  # fmt: skip
BYPASSES = [b if isinstance(b, tuple) else (b, b) for b in _BYPASSES]

# What the project and Spark send: Spark 3.5.9's module options (JavaModuleOptions; 4.x's
# come from the installed Spark below), the fast-start flags of
# benchmarks/scenarios/spark-fill.yaml, and common tuning.
SPARK35_MODULES = " ".join(
    ["-XX:+IgnoreUnrecognizedVMOptions"]
    + [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
        "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio",
        "java.util", "java.util.concurrent", "java.util.concurrent.atomic", "jdk.internal.ref",
        "sun.nio.ch", "sun.nio.cs", "sun.security.action", "sun.util.calendar")]
    + ["--add-opens=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
       "-Djdk.reflect.useDirectMethodHandle=false"]
)  # fmt: skip
LEGIT = [
    SPARK35_MODULES,
    "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED -Dspark.x=1 -XX:+UseG1GC",
    "-XX:+UseG1GC -XX:MaxGCPauseMillis=200 -XX:InitiatingHeapOccupancyPercent=35 "
    "-XX:G1HeapRegionSize=16m -XX:+ParallelRefProcEnabled -XX:ConcGCThreads=2",
    "-Xms512m -Xss4m -XX:MaxMetaspaceSize=256m -XX:MaxDirectMemorySize=1g "
    "-XX:+ExitOnOutOfMemoryError -XX:+HeapDumpOnOutOfMemoryError",
    "-Xlog:gc -Xlog:gc*:stdout -Xlog:gc*=debug:stderr:uptime,level,tags -verbose:gc",
    "-Dlog4j2.level=WARN -Dspark.plugins=x -Dpath=/p -Dfoo \"-Dspark.app.note=a b 'c'\"",
    "--add-opens java.base/java.nio=ALL-UNNAMED --add-modules jdk.incubator.vector",
    "-Duser.timezone=UTC -Dfile.encoding=UTF-8 -Djava.net.preferIPv4Stack=true",
    "-XX:MaxRAMPercentage=75.0 -XX:NativeMemoryTracking=summary -ea -server",
    "\t-Dx=1\n-Dy=2\r\n",
    "",
]


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> str:
    if JAR is None:
        pytest.skip(f"Spark's launcher: {WHY_NO_JAR}")
    return compile_harness(JAR, tmp_path_factory.mktemp("harness"))


@pytest.fixture(scope="module")
def spark(harness: str):
    tokenizer = SparkTokenizer(harness)
    yield tokenizer
    tokenizer.close()


def ours(text: str) -> list[str] | None:
    try:
        return spark_split(text)
    except OptionStringError:
        return None


# ---- the splitter ----------------------------------------------------------------------
HAND = [
    ("a b  c", ["a", "b", "c"]),
    ('"ab cd" efgh \'i \\" j\'', ["ab cd", "efgh", 'i \\" j']),  # Spark's own javadoc case
    ('"\\-x"', ["-x"]),  # shlex keeps this backslash
    ("'\\-x'", ["\\-x"]),
    ('"a\\"b"', ['a"b']),
    ("a\\ b", ["a b"]),
    ('"" \'\' a""', ["", "", "a"]),
    ("a\x0bb\x0cc\x1cd\x1fe", ["a", "b", "c", "d", "e"]),
    ("a\u2003b\u3000c\u2028d\u205fe\u1680f", ["a", "b", "c", "d", "e", "f"]),
    ("a\u00a0b\u2007c\u202fd\x85e\u200bf", ["a\u00a0b\u2007c\u202fd\x85e\u200bf"]),
    ("-Dx=\U0001f600", ["-Dx=\U0001f600\ude00"]),  # the low surrogate twice, as Java does
    ("\\", None),
    ("'a", None),
    ('"a', None),
    ("a'b'\"c\"\\d", ["abcd"]),
    ("   ", []),
]


@pytest.mark.parametrize(("text", "tokens"), HAND)
def test_hand_worked_splits(text: str, tokens: list[str] | None) -> None:
    assert ours(text) == tokens


@needs_spark
@pytest.mark.parametrize(("text", "tokens"), HAND)
def test_spark_splits_the_hand_cases_the_same(spark: SparkTokenizer, text, tokens) -> None:
    assert spark.split(text) == tokens


@needs_spark
def test_java_whitespace_is_javas(harness: str) -> None:
    javas = {int(line, 16) for line in run_harness(harness, "whitespace").split()}
    assert javas == JAVA_WHITESPACE


@needs_spark
@pytest.mark.parametrize("value", [v for v, _ in BYPASSES] + LEGIT)
def test_spark_splits_the_corpus_as_we_do(spark: SparkTokenizer, value: str) -> None:
    assert spark.split(value) == ours(value)


SPECIAL = ["'", '"', "\\", " ", "\t", "\n", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\u00a0",
           "\u2003", "\u2007", "\u3000", "\u2028", "\U0001f600", "\ud83d", "\ude00", "-", "@",
           "a", "="]  # fmt: skip
texts = st.text(
    st.one_of(st.sampled_from(SPECIAL), st.characters(codec=None, exclude_categories=())),
    max_size=40,
)


@needs_spark
@settings(
    max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts)
def test_spark_splits_any_string_as_we_do(spark: SparkTokenizer, text: str) -> None:
    assert spark.split(text) == ours(text)


# ---- the allow-list --------------------------------------------------------------------
@pytest.mark.parametrize(("value", "option"), BYPASSES)
def test_each_bypass_is_refused_naming_the_option(value: str, option: str) -> None:
    with pytest.raises(EnvironmentRefused) as error:
        check_environment({"SPARK_EXECUTOR_OPTS": value}, ExecutorEnvPolicy())
    message = str(error.value)
    assert message.startswith("launch.environment.SPARK_EXECUTOR_OPTS: JVM option ")
    assert repr(option) in message and "not allowed" in message


@needs_spark
@pytest.mark.parametrize(("value", "option"), BYPASSES[:6])
def test_the_reported_bypasses_do_reach_the_jvm_through_sparks_launcher(value, option) -> None:
    """Without the check, Spark's real launcher puts each smuggled flag in the java
    command as a bare argument (what makes the refusals above matter)."""
    part = tenant_part(executor_command(JAR, value))
    assert option in part


@needs_spark
def test_how_the_jvm_splits_non_ascii_depends_on_the_agents_locale() -> None:
    """Why only ASCII passes: the same bytes split in two under UTF-8 and stay one argument
    under the C locale, where Java decodes the variable as ASCII."""
    value = "-Dx=1\u2003-Dy=2"
    assert tenant_part(executor_command(JAR, value, "C.UTF-8")) == ["-Dx=1", "-Dy=2"]
    assert len(tenant_part(executor_command(JAR, value, "C"))) == 1


@pytest.mark.parametrize("value", LEGIT)
def test_what_spark_and_the_project_send_is_accepted(value: str) -> None:
    check_environment({"SPARK_EXECUTOR_OPTS": value}, ExecutorEnvPolicy())


@needs_spark
def test_sparks_own_java17_module_options_are_accepted(harness: str) -> None:
    modules = run_harness(harness, "modules").strip()
    assert "--add-opens=java.base/java.lang=ALL-UNNAMED" in modules
    assert len(check_jvm_options(modules)) > 10


@needs_spark
@pytest.mark.parametrize("value", LEGIT)
def test_accepted_options_reach_the_jvm_as_we_split_them(value: str) -> None:
    assert tenant_part(executor_command(JAR, value)) == check_jvm_options(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-Dx=\u00fc", "U+00FC"), ("-Dx=1\u2003-Dy=2", "U+2003"), ("-Dx=1\x0b-Dy=2", "U+000B"),
        ("-Dx='1", "unclosed quote"), ("-Dx=1\\", "trailing backslash"),
        ("--add-opens", "needs a value"), ("-Dlog4j2.level=${jndi:ldap://x/a}", "log4j2.level"),
        ("-XX:MaxGCPauseMillis=1;id", "MaxGCPauseMillis"), ("-Xss1x", "-Xss1x"),
    ],
)  # fmt: skip
def test_odd_strings_are_refused_with_a_reason(value: str, message: str) -> None:
    with pytest.raises(EnvironmentRefused, match=re.escape(message)):
        check_environment({"SPARK_EXECUTOR_OPTS": value}, ExecutorEnvPolicy())


# Independent of the allow-list: what must never reach the JVM, however spelled.
DANGEROUS = re.compile(
    r"@|-(javaagent|agentlib|agentpath|xrun|xdebug|xbootclasspath|cp$|classpath$|jar$|p$"
    r"|-module-path|-patch-module|-upgrade-module-path|-class-path"
    r"|xx:[+-]?(on(outofmemory)?error|flags|vmoptionsfile|enablejvmci|usejvmci|jvmci)"
    r"|dcom\.sun\.management|djvmci|djava\.system\.class\.loader|djava\.security"
    r"|dlog4j[^=]*config|dorg\.apache\.logging|xmx|xx:maxheapsize)",
    re.IGNORECASE,
)
SAFE = [
    "-Dx=1", "-XX:+UseG1GC", "-Xss4m", "-Xlog:gc", "-Dspark.a=b", "-Dlog4j2.level=WARN",
    "--add-opens=java.base/java.lang=ALL-UNNAMED", "-verbose:gc", "-XX:MaxGCPauseMillis=200",
]  # fmt: skip
QUOTINGS = ["{}", '"{}"', "'{}'", "\\{}", '{}""', "-D'x'=\\'{}'"]
FRAGMENTS = [
    "-javaagent:/tmp/a.jar", "-agentlib:jdwp=x", "-Xrunjdwp:x", "@f", "-XX:OnError=id",
    "-Dcom.sun.management.jmxremote.port=1", "-XX:+EnableJVMCI", "-Djvmci.x=1",
    "-Dlog4j2.configurationFile=/x", "-Djava.system.class.loader=E", "-Xbootclasspath/a:/x",
    "-cp", "/x.jar", "-Xmx1g", "--add-opens", "-D", "-", "Evil", "=", "-j", "avaagent:a",
]  # fmt: skip
SEPARATORS = [
    " ", " ", " ", " ", " ", " ", "  ", "\t", "\n", "\x0b", "\x1f", "\u2003", "\u00a0", "'", '"',
    "\\", "",
]  # fmt: skip
safe_pieces = st.tuples(st.sampled_from(SAFE), st.sampled_from(QUOTINGS)).map(
    lambda pair: pair[1].format(pair[0])
)
pieces = st.one_of(
    *[safe_pieces] * 6, st.just("--add-opens java.base/java.nio=ALL-UNNAMED"),
    st.sampled_from(FRAGMENTS), st.text(max_size=2),
)  # fmt: skip
option_strings = st.lists(st.tuples(pieces, st.sampled_from(SEPARATORS)), max_size=8).map(
    lambda parts: "".join(piece + separator for piece, separator in parts)
)


def accepted(value: str) -> bool:
    try:
        check_jvm_options(value)
    except (JvmOptionRefused, OptionStringError):
        return False
    return True


def assert_safe(tokens: list[str]) -> None:
    previous = ""
    for token in tokens:
        assert not DANGEROUS.match(token), token
        assert token.startswith("-") or previous in ("--add-opens", "--add-modules"), token
        previous = token


@settings(max_examples=1500, deadline=None)
@given(option_strings)
def test_no_accepted_string_splits_into_a_dangerous_option(value: str) -> None:
    if accepted(value):
        assert_safe(spark_split(value))


@needs_spark
@settings(
    max_examples=800, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(option_strings)
def test_no_accepted_string_splits_into_a_dangerous_option_in_spark(
    spark: SparkTokenizer, value: str
) -> None:
    """The property of the brief, under Spark's own tokenization: every argument Spark makes
    of an accepted string is on the allow-list, and none is dangerous."""
    if accepted(value):
        tokens = spark.split(value)
        assert tokens is not None
        check_jvm_tokens(tokens)
        assert_safe(tokens)


# ---- through the broker ----------------------------------------------------------------
@pytest.fixture
def fake_spark(tmp_path: Path) -> Path:
    """A Spark home whose spark-class (bash, as the real one) records its environment."""
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "spark-class"
    script.write_text('#!/bin/bash\nenv -0 > "$PWD/env.out"\nexec sleep 30\n')
    script.chmod(0o755)
    return home


@pytest.fixture
def embedded(tmp_path: Path, fake_spark: Path):
    """A broker serving HTTP and gRPC over the embedded cluster (the fake spark-class)."""
    options = BrokerOptions(
        engine=EngineConfig("drf", interval=0.05), http_port=0, grpc_port=0,
        state_dir=tmp_path / "state", token="s3cret", agents=AGENTS,
    )  # fmt: skip
    cluster = LocalCluster(AGENTS, tmp_path / "agents", fake_spark)
    with BrokerService(options, backend=cluster) as running:
        yield running, cluster


def body(tenant: str, opts: str) -> bytes:
    return json.dumps({
        "tenantId": tenant, "demand": PI, "target": 1,
        "launch": {"driverUrl": "spark://CoarseGrainedScheduler@127.0.0.1:40000",
                   "appId": f"app-{tenant}", "cores": 2, "heapMib": 640,
                   "environment": {"SPARK_EXECUTOR_OPTS": opts}},
    }).encode()  # fmt: skip


def test_the_broker_refuses_each_bypass_over_http_and_grpc_and_launches_nothing(
    embedded, tmp_path: Path
) -> None:
    service, cluster = embedded
    for i, (value, option) in enumerate(BYPASSES):
        status, reply = http(service, "Register", body(f"bad-{i}", value))
        assert status == 400 and reply["code"] == "INVALID_ARGUMENT", (value, reply)
        assert "SPARK_EXECUTOR_OPTS" in reply["error"] and repr(option) in reply["error"]
    with BrokerClient(service.grpc_address, token="s3cret") as client:
        for i, (value, option) in enumerate(BYPASSES[:6]):
            bad = request(f"grpc-{i}", PI, target=1)
            bad.launch.environment["SPARK_EXECUTOR_OPTS"] = value
            with pytest.raises(BrokerCallError) as error:
                client.register(bad)
            assert error.value.code == "INVALID_ARGUMENT" and repr(option) in str(error.value)
        assert len(client.allocation().tenants) == 0
    assert cluster.pids() == {}
    assert not (tmp_path / "agents").exists() or not list((tmp_path / "agents").rglob("env.out"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to start serve as nobody")
def test_a_broker_run_as_an_unprivileged_user_refuses_each_bypass(sandbox_base: Path) -> None:
    """The same refusals from `fairbroker serve` run as nobody (setpriv), over HTTP: 400 naming
    the option, no tenant registered, no executor started."""
    import pwd
    import signal
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    from support.polling import free_port, wait_for
    from support.sandbox import spark_home

    nobody = pwd.getpwnam("nobody")
    home = spark_home(sandbox_base, "#!/bin/bash\nexec sleep 30\n")
    state = sandbox_base / "state"
    state.mkdir()
    os.chown(state, nobody.pw_uid, nobody.pw_gid)
    (sandbox_base / "cluster.yaml").write_text(
        "agents:\n  - {name: a1, hostname: 127.0.0.1, resources: {cpus: 8, mem: 8192}}\n"
    )
    port = free_port()
    log = sandbox_base / "serve.log"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SPARK_HOME": str(home),
           "HOME": str(sandbox_base)}  # fmt: skip
    serve = subprocess.Popen(
        ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
         "--", str(Path(sys.executable).parent / "fairbroker"), "serve", "--state-dir",
         str(state), "--cluster", str(sandbox_base / "cluster.yaml"), "--port", str(port),
         "--grpc-port", str(free_port()), "--no-metrics"],
        env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"), cwd=sandbox_base,
    )  # fmt: skip

    def post(method: str, data: bytes | None) -> tuple[int, dict]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/{method}", data=data,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def up() -> bool:
        try:
            return post("GetAllocation", None)[0] == 200
        except OSError:
            return serve.poll() is not None

    try:
        wait_for(up, 60, "serve up")
        assert serve.poll() is None, log.read_text()
        assert Path(f"/proc/{serve.pid}").stat().st_uid == nobody.pw_uid
        for i, (value, option) in enumerate(BYPASSES):
            status, reply = post("Register", body(f"bad-{i}", value))
            assert status == 400 and reply["code"] == "INVALID_ARGUMENT", (value, reply)
            assert "SPARK_EXECUTOR_OPTS" in reply["error"] and repr(option) in reply["error"]
        assert post("GetAllocation", None)[1].get("tenants", []) == []
        assert not list((state / "agents").rglob("executor-*"))
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()


def test_the_broker_launches_legit_options_unchanged(embedded, tmp_path: Path) -> None:
    service, _ = embedded
    value = LEGIT[0] + " " + LEGIT[1]
    status, reply = http(service, "Register", body("good", value))
    assert status == 200, reply
    deadline = time.monotonic() + 60

    def written() -> Path | None:
        """An executor's env.out once env -0 has written the variable: every entry ends with
        NUL, so a file ending with one holds whole entries (its size alone says nothing
        while env is still writing)."""
        for path in (tmp_path / "agents").rglob("env.out"):
            data = path.read_bytes()
            if data.endswith(b"\0") and b"\0SPARK_EXECUTOR_OPTS=" in b"\0" + data:
                return path
        return None

    while (path := written()) is None:
        assert time.monotonic() < deadline, "no executor wrote its environment"
        time.sleep(0.05)
    entries = dict(e.split("=", 1) for e in path.read_text().split("\0") if "=" in e)
    assert entries["SPARK_EXECUTOR_OPTS"] == value


@needs_spark
def test_a_real_driver_with_a_smuggled_agent_stops_at_registration(tmp_path: Path) -> None:
    """The Spark plugin sends spark.executor.extraJavaOptions in SPARK_EXECUTOR_OPTS: a
    driver carrying a bypass is refused at Register and no executor starts."""
    from support.spark import HOSTS_JOB, Driver, executor_processes

    options = BrokerOptions(
        engine=EngineConfig("drf", interval=0.2), http_port=0, grpc_port=0,
        state_dir=tmp_path / "broker", agents=AGENTS[:1],
    )  # fmt: skip
    conf = {"spark.executor.cores": "2", "spark.executor.memory": "640m",
            "spark.executor.instances": "1",
            "spark.executor.extraJavaOptions": '-Dx=1 "\\-javaagent:/tmp/a.jar"'}  # fmt: skip
    with BrokerService(options) as service:
        driver = Driver(service.http_address, [str(HOSTS_JOB), "1", "2", "0"], workdir=tmp_path,
                        name="smuggler", conf=conf)  # fmt: skip
        code, _ = driver.wait(timeout=180)
        output = driver.output()
        assert code != 0, output
        assert "refused the registration" in output, output
        assert "JVM option '-javaagent:/tmp/a.jar' is not allowed" in output, output
        assert not service.broker.tenants
    assert executor_processes(str(tmp_path)) == []
