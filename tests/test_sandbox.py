"""The executor sandbox of the embedded cluster (issue 25): hostile stand-in executors try to
read the broker's database, write into its state directory, signal the broker and the other
tenant's executor and list the other tenant's working directory; each writes what it could
do into its own working directory, and the test reads that report. Real subprocesses, real
bubblewrap, the broker in this process (as this user) and `fairbroker serve` as an
unprivileged user."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from support.broker import request
from support.polling import free_port, wait_for
from support.sandbox import HAS_BWRAP, ONE_AGENT, needs_bwrap, sandboxed_broker, spark_home
from support.serving import stop_gracefully
from support.standin import held

from allocator.backends.local import LocalCluster
from allocator.backends.sandbox import SandboxConfig, SandboxError, resolve_sandbox

AGENTS = ONE_AGENT
DEMAND = {"cpus": 1.0, "mem": 512.0}
ROOT = os.geteuid() == 0
PROBES = ("read_state", "write_state", "signal_broker", "signal_other", "list_other")

# Waits for the test's targets file (in Spark's home, read-only to it), probes, reports into
# its working directory, then says it registered and lives on like an executor.
HOSTILE = r"""#!/bin/bash
tenant=$(basename "$(dirname "$PWD")")
for _ in $(seq 300); do [ -f "$SPARK_HOME/targets" ] && break; sleep 0.1; done
. "$SPARK_HOME/targets"
eval "other_pid=\$OTHER_PID_$tenant other_dir=\$OTHER_DIR_$tenant"
try() { if eval "$2" >/dev/null 2>&1; then echo "$1=allowed"; else echo "$1=denied"; fi; }
{
  try read_state 'head -c 16 "$STATE_DB" | grep -q SQLite'
  try write_state 'echo planted > "$STATE_DIR/planted"'
  try signal_broker 'kill -0 "$BROKER_PID"'
  try signal_other 'kill -0 "$other_pid"'
  try list_other 'ls "$other_dir" | grep -q .'
  try write_own 'echo mine > own-file'
  echo "uid=$(id -u)"
} > report 2>&1
echo 'Successfully registered with driver' >&2
exec sleep 300
"""


# Traps SIGTERM (writes `term`), says it registered and waits.
TERM_TRAP = (
    "#!/bin/bash\ntrap 'echo got-term > term; exit 0' TERM\n"
    "echo 'Successfully registered with driver' >&2\nsleep 300 & wait\n"
)


@pytest.fixture
def base(sandbox_base: Path) -> Path:
    return sandbox_base


def hostile_spark(base: Path) -> Path:
    return spark_home(base, HOSTILE)


def inner_pid(outer: int) -> int:
    """The stand-in's own process: `outer` itself, or the one inside bubblewrap."""
    return wait_for(lambda: _inner_pid(outer), 60, f"the stand-in in group {outer}")


def _inner_pid(outer: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != outer:
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"bash") and any(a.endswith(b"spark-class") for a in argv):
            return int(entry.name)
    return None


def write_targets(home: Path, state: Path, broker_pid: int, executors: dict) -> None:
    """`executors`: tenant -> (pid, working directory); each tenant's other is the other."""
    (a, (pid_a, dir_a)), (b, (pid_b, dir_b)) = executors.items()
    lines = [
        f"BROKER_PID={broker_pid}", f"STATE_DB={state / 'broker.sqlite'}", f"STATE_DIR={state}",
        f"OTHER_PID_{a}={pid_b}", f"OTHER_DIR_{a}={dir_b}",
        f"OTHER_PID_{b}={pid_a}", f"OTHER_DIR_{b}={dir_a}",
    ]  # fmt: skip
    (home / "targets.tmp").write_text("\n".join(lines) + "\n")
    (home / "targets.tmp").chmod(0o644)
    (home / "targets.tmp").rename(home / "targets")


def read_report(directory: Path) -> dict[str, str]:
    path = directory / "report"
    wait_for(lambda: path.exists() and "uid=" in path.read_text(), 30, f"{path}")
    return dict(line.split("=", 1) for line in path.read_text().split())


def executor_dir(workdir: Path, tenant: str) -> Path:
    return workdir / "a1" / tenant / "executor-1"


def run_hostile_pair(base: Path, sandbox: SandboxConfig) -> tuple[dict, dict, LocalCluster]:
    """Tenants A and B, one hostile executor each, under a broker in this process."""
    home = hostile_spark(base)
    state = base / "state"
    with sandboxed_broker(home, state, sandbox) as (cluster, service):
        for tenant in ("A", "B"):
            service.broker.register(request(tenant, DEMAND, target=1))
        wait_for(lambda: len(cluster.pids()) == 2, 60, "both executors started")
        executors = {
            tenant: (inner_pid(pid), executor_dir(state / "agents", tenant))
            for (tenant, _), pid in cluster.pids().items()
        }
        assert (state / "broker.sqlite").exists()
        write_targets(home, state, os.getpid(), executors)
        reports = {t: read_report(executor_dir(state / "agents", t)) for t in ("A", "B")}
        wait_for(
            lambda: all(v == {"RUNNING": 1} for v in held(service.broker).values()), 20, "running"
        )
        assert service.broker  # the broker outlived every probe
        pids = cluster.pids()
    assert not [p for p in pids.values() if Path(f"/proc/{p}").exists()], "executors left"
    return reports["A"], reports["B"], cluster


def test_without_a_sandbox_the_hostile_executor_reaches_everything(base: Path) -> None:
    """The control: with sandbox none each probe succeeds, so the probes can see a hole."""
    a, b, cluster = run_hostile_pair(base, SandboxConfig(mode="none"))
    assert cluster.sandbox.kind == "none"
    for report in (a, b):
        assert {p: report[p] for p in PROBES} == dict.fromkeys(PROBES, "allowed"), report
        assert report["uid"] == str(os.geteuid())
    assert (base / "state" / "planted").exists()


@needs_bwrap
def test_auto_sandbox_denies_the_state_dir_the_broker_and_the_other_tenant(base: Path) -> None:
    """auto here: bubblewrap (as the unprivileged sandbox user when this test runs as root).
    Every probe denied for both tenants; each still writes its own working directory."""
    a, b, cluster = run_hostile_pair(base, SandboxConfig(mode="auto"))
    assert cluster.sandbox.kind == "bwrap"
    expected_uid = pwd.getpwnam("nobody").pw_uid if ROOT else os.geteuid()
    for report in (a, b):
        assert {p: report[p] for p in PROBES} == dict.fromkeys(PROBES, "denied"), report
        assert report["write_own"] == "allowed"
        assert report["uid"] == str(expected_uid)
    assert not (base / "state" / "planted").exists()
    assert (executor_dir(base / "state" / "agents", "A") / "own-file").read_text() == "mine\n"


@pytest.mark.skipif(not ROOT, reason="the user sandbox needs the broker to run as root")
def test_user_sandbox_denies_the_state_dir_and_the_broker(base: Path) -> None:
    """sandbox user: executors run as nobody; the database, the state directory and the
    broker (root) are out of reach. Tenants share that user, so they can signal each other
    and (the directory being its own) list each other's working directory: `user` alone does
    not separate tenants, as docs/security.md says."""
    a, b, cluster = run_hostile_pair(base, SandboxConfig(mode="user"))
    assert cluster.sandbox.kind == "user"
    for report in (a, b):
        assert report["read_state"] == report["write_state"] == "denied", report
        assert report["signal_broker"] == "denied"
        assert report["signal_other"] == report["list_other"] == "allowed"
        assert report["uid"] == str(pwd.getpwnam("nobody").pw_uid)
    db = base / "state" / "broker.sqlite"
    assert db.stat().st_mode & 0o077 == 0


@needs_bwrap
def test_sigterm_reaches_the_executor_inside_bubblewrap(base: Path) -> None:
    """kill() sends SIGTERM to the processes inside the sandbox, not to bubblewrap (which
    would die and leave the executor running unseen): the executor's TERM trap runs, then
    bubblewrap exits with the executor's status and the broker sees KILLED."""
    home = spark_home(base, TERM_TRAP)
    state = base / "state"
    with sandboxed_broker(home, state, SandboxConfig(mode="bwrap")) as (cluster, service):
        service.broker.register(request("A", DEMAND, target=1))
        wait_for(lambda: held(service.broker).get("A") == {"RUNNING": 1}, 60, "A running")
        cluster.kill("A", "1")
        term = executor_dir(state / "agents", "A") / "term"
        wait_for(term.exists, 30, "the executor's TERM trap")  # 10 s timed out once under load
        wait_for(lambda: not cluster.pids(), 60, "the executor reported gone")


def test_explicit_modes_that_cannot_work_here_are_refused() -> None:
    with pytest.raises(SandboxError, match="not one of"):
        resolve_sandbox(SandboxConfig(mode="jail"))  # type: ignore[arg-type]
    if ROOT:
        with pytest.raises(SandboxError, match="sandbox_user: no user 'no-such-user-x'"):
            resolve_sandbox(SandboxConfig(mode="auto", user="no-such-user-x"))
        with pytest.raises(SandboxError, match="is root"):
            resolve_sandbox(SandboxConfig(mode="user", user="root"))
    else:
        with pytest.raises(SandboxError, match="needs the broker to run as root"):
            resolve_sandbox(SandboxConfig(mode="user"))
    with pytest.raises(SandboxError, match="bwrap is not installed"):
        resolve_sandbox(SandboxConfig(mode="bwrap", bwrap="no-such-bwrap"))


@pytest.mark.skipif(not ROOT, reason="only a broker run as root changes the executors' user")
def test_a_spark_home_the_sandbox_user_cannot_reach_is_refused_at_start(base: Path) -> None:
    private = base / "private"
    home = hostile_spark(private)
    private.chmod(0o700)
    with pytest.raises(SandboxError, match=f"{private} is not traversable by the sandbox user"):
        LocalCluster(AGENTS, base / "state" / "agents", home, sandbox=SandboxConfig(mode="user"))


def test_none_warns_loudly_when_the_cluster_starts(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sandbox = SandboxConfig(mode="none", state_dir=base / "state")
    cluster = LocalCluster(AGENTS, base / "state" / "agents", hostile_spark(base), sandbox=sandbox)
    assert "SANDBOX OFF" not in caplog.text  # a start refused later stays one line
    cluster.start(None)  # type: ignore[arg-type]
    try:
        assert "SANDBOX OFF" in caplog.text and str(base / "state") in caplog.text
    finally:
        cluster.stop()


# ---- the broker as an unprivileged user: `fairbroker serve` under setpriv -----------------
TOKEN = "s3cret-token"


def _post(port: int, method: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/{method}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as answer:
        return json.loads(answer.read() or b"{}")


@pytest.mark.skipif(not (ROOT and HAS_BWRAP), reason="needs root (to drop to nobody) and bwrap")
def test_serve_as_an_unprivileged_user_sandboxes_with_bubblewrap(base: Path) -> None:
    """`fairbroker serve` started as nobody (setpriv) with the default sandbox (auto): it
    picks bubblewrap (unprivileged user namespaces); two hostile executors of two tenants,
    launched through the HTTP API, are denied every probe, though they run as the broker's
    own user."""
    nobody = pwd.getpwnam("nobody")
    home = hostile_spark(base)
    state = base / "state"
    state.mkdir()
    os.chown(state, nobody.pw_uid, nobody.pw_gid)
    cluster = base / "cluster.yaml"
    cluster.write_text(
        "agents:\n  - {name: a1, hostname: 127.0.0.1, resources: {cpus: 4, mem: 4096}}\n"
    )
    http, grpc = free_port(), free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SPARK_HOME": str(home),
        "FAIRBROKER_TOKEN": TOKEN, "HOME": str(base),
    }  # fmt: skip
    log = base / "serve.log"
    serve = subprocess.Popen(
        [
            "setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
            "--", str(Path(sys.executable).parent / "fairbroker"), "serve",
            "--state-dir", str(state), "--cluster", str(cluster), "--port", str(http),
            "--grpc-port", str(grpc), "--no-metrics",
        ],
        env=env, stderr=log.open("wb"), stdout=subprocess.DEVNULL, cwd=base,
    )  # fmt: skip
    try:
        wait_for(lambda: _healthy(http) or serve.poll() is not None, 60, "serve up")
        assert serve.poll() is None, log.read_text()
        for tenant in ("A", "B"):
            _post(http, "Register", {
                "tenantId": tenant, "demand": DEMAND, "target": 1, "launch": {
                    "driverUrl": "spark://CoarseGrainedScheduler@127.0.0.1:4002",
                    "appId": f"app-{tenant}", "cores": 1, "heapMib": 128}})  # fmt: skip
        dirs = {t: executor_dir(state / "agents", t) for t in ("A", "B")}
        outer = {t: wait_for(lambda t=t: _marked_leader(t, state), 60, t) for t in dirs}
        write_targets(home, state, serve.pid, {t: (inner_pid(outer[t]), dirs[t]) for t in dirs})
        for directory in dirs.values():
            report = read_report(directory)
            assert {p: report[p] for p in PROBES} == dict.fromkeys(PROBES, "denied"), report
            assert report["uid"] == str(nobody.pw_uid) and report["write_own"] == "allowed"
        assert serve.poll() is None
    finally:
        stop_gracefully(serve)
    assert "executor sandbox: bwrap" in log.read_text(), log.read_text()
    deadline = time.monotonic() + 10
    while _marked_leader("A", state) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _marked_leader("A", state), "executor left after serve stopped"


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def _marked_leader(tenant: str, state: Path) -> int | None:
    """The process-group leader carrying tenant's executor marker under `state`."""
    want = f"FAIRBROKER_EXECUTOR={tenant}/1/{(state / 'agents').resolve()}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != int(entry.name):
                continue
            if want in (entry / "environ").read_bytes().split(b"\0"):
                return int(entry.name)
        except OSError:
            continue
    return None


@needs_bwrap
def test_a_restarted_cluster_adopts_sandboxed_executors_and_stops_the_rest(base: Path) -> None:
    """Broker restart: the executor marker is found on bubblewrap's process (the group
    leader), a new LocalCluster adopts A's executor (its SIGTERM then reaches the stand-in
    inside) and reconcile SIGKILLs B's, which nobody adopted: bubblewrap and the process
    inside are gone."""
    from allocator.backends.base import LaunchSpec

    home = spark_home(base, TERM_TRAP)
    state = base / "state"
    sandbox = SandboxConfig(mode="bwrap", state_dir=state)

    def spec(tenant: str) -> LaunchSpec:
        return LaunchSpec(
            tenant, "1", "a1", DEMAND, "spark://CoarseGrainedScheduler@127.0.0.1:4002",
            f"app-{tenant}", 1, 128,
        )  # fmt: skip

    first = LocalCluster(AGENTS, state / "agents", home, sandbox=sandbox)
    handles = {t: first.launch(spec(t)) for t in ("A", "B")}  # not started: no monitor
    inner = {t: inner_pid(int(handles[t])) for t in handles}
    second = LocalCluster(AGENTS, state / "agents", home, sandbox=sandbox)
    try:
        assert second.adopt(spec("A"), handles["A"])
        second.reconcile({("A", "1")}, [])
        wait_for(lambda: not Path(f"/proc/{inner['B']}").exists(), 60, "B's stand-in killed")
        for pid in (int(handles["B"]), inner["B"]):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # the first cluster's child: reap it
        assert Path(f"/proc/{inner['A']}").exists()
        second.kill("A", "1")
        term = executor_dir(state / "agents", "A") / "term"
        wait_for(term.exists, 60, "A's TERM trap, through the adopted bubblewrap")
    finally:
        for handle in handles.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(handle), signal.SIGKILL)
        for handle in handles.values():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(handle), 0)
