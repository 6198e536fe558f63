"""A real Apache Mesos 1.11.0 master and agents on loopback, for the real-master tests.

`make mesos` unpacks the build the machine provides (`../shared/mesos/install.sh`, or
`$MESOS_HOME/install.sh`) into `.mesos/` of the checkout; `$MESOS_HOME` may also point at
an unpacked build (`bin/mesos-master`). Without one, `mesos_home()` is None and the
tests that need it skip.

    with RealMesos(load_cluster_file(), work_dir=tmp_path) as mesos:
        mesos.address        # 127.0.0.1:PORT of the master
        mesos.tasks("TASK_RUNNING"), mesos.kill_agent("t1-a"), mesos.restart_agent("t1-a")

The master keeps a replicated-log registry in its work dir (a restart keeps agents and
frameworks), or with `registry="in_memory"` none (a restarted master knows no agent until
each re-registers). With `zk=` (a `ZooKeeper` on loopback, Debian's `zookeeper` package) the master
is elected through ZooKeeper and the agents find it there (`zk://`), as in a real
fail-over set-up. Each agent listens on its own 127.0.1.x address and free port with its own
work and runtime dirs. Every process started here is stopped by pid at teardown, and so
are the process groups of the executors the agents started (they outlive their agent).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from allocator.backends.base import AgentInfo
from support.polling import free_port, wait_for
from support.processes import processes

CHECKOUT = Path(__file__).resolve().parents[2]
VERSION = "1.11.0"
SKIP_REASON = (
    "no Apache Mesos 1.11.0 build: `make mesos` installs it from ../shared/mesos "
    "(or $MESOS_HOME/install.sh); or set MESOS_HOME to an unpacked build"
)
STOP_TIMEOUT_S = 10.0
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # Debian's `zookeeper` package
ZK_SKIP_REASON = (
    f"no ZooKeeper: {ZOOKEEPER_JAR} and java come with Debian's `zookeeper` package "
    "(`make system-deps` installs it)"
)


def mesos_home() -> Path | None:
    """The directory holding bin/mesos-master, or None when this machine has none."""
    candidates = []
    if os.environ.get("MESOS_HOME"):
        home = Path(os.environ["MESOS_HOME"])
        candidates += [home, home / f"mesos-{VERSION}"]
    candidates.append(CHECKOUT / ".mesos" / f"mesos-{VERSION}")
    for home in candidates:
        if os.access(home / "bin" / "mesos-master", os.X_OK):
            return home
    return None


def describe(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):
            out.append(f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes()
                       .replace(b"\0", b" ").decode()[:200])  # fmt: skip
    return out


def processes_under(root: Path) -> list[int]:
    """Pids (not ours) whose working directory or command line lies under `root`."""
    marker, mine = str(root), os.getpid()
    return [
        int(entry.name)
        for entry, cmdline, cwd in processes()
        if int(entry.name) != mine and (cwd.startswith(marker) or marker in cmdline)
        and _alive(entry)
    ]  # fmt: skip


def assert_none_left(root: Path, what: str, seconds: float = 10.0) -> None:
    """No process lies under `root` within `seconds` (a task's `mesos-containerizer launch`
    may take a moment to exit after its agent stopped: seen 1 run in 3 after a KILL with a
    grace); AssertionError naming them and `what` they outlived otherwise."""
    deadline = time.monotonic() + seconds
    while (left := processes_under(root)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes outlived {what}: {describe(left)}"


def _alive(entry: Path) -> bool:
    """Not a zombie (a killed process its parent has not reaped yet)."""
    try:
        return (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def zookeeper_available() -> bool:
    return ZOOKEEPER_JAR.is_file() and shutil.which("java") is not None


class ZooKeeper:
    """A standalone ZooKeeper server on 127.0.0.1 and a free port, its data in `work_dir`;
    stopped by pid.

        with ZooKeeper(tmp_path / "zk") as zk:
            zk.url("/mesos")     # zk://127.0.0.1:PORT/mesos
    """

    def __init__(self, work_dir: Path) -> None:
        if not zookeeper_available():
            raise RuntimeError(ZK_SKIP_REASON)
        self.work_dir = Path(work_dir)
        self.port = free_port()
        self._process: subprocess.Popen | None = None
        self._log: Any = None

    def url(self, path: str = "/mesos") -> str:
        return f"zk://127.0.0.1:{self.port}{path}"

    def start(self) -> ZooKeeper:
        (self.work_dir / "data").mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "zoo.cfg"
        config.write_text(
            f"tickTime=500\ndataDir={self.work_dir / 'data'}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
        )
        self._log = open(self.work_dir / "zookeeper.log", "ab")  # noqa: SIM115 (closed at stop)
        self._process = subprocess.Popen(
            ["java", "-cp", str(ZOOKEEPER_JAR),
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=self.work_dir,
        )  # fmt: skip
        try:
            wait_for(self._serves, 60, f"ZooKeeper on 127.0.0.1:{self.port} to serve")
        except BaseException:
            self.stop()
            raise
        return self

    def _serves(self) -> bool:
        assert self._process is not None
        if self._process.poll() is not None:
            log = (self.work_dir / "zookeeper.log").read_text(errors="replace")[-2000:]
            raise AssertionError(f"ZooKeeper exited: {log}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                s.sendall(b"srvr")  # four-letter word, allowed by default
                return b"Mode: standalone" in s.recv(4096)
        except OSError:
            return False

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(STOP_TIMEOUT_S)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ZooKeeper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class RealTask:
    task_id: str
    framework_id: str
    agent_id: str
    state: str
    states: tuple[str, ...]
    resources: dict[str, float]


class RealMesos:
    """A real master on 127.0.0.1 and one real agent per AgentInfo (name -> process)."""

    def __init__(
        self,
        agents: Iterable[AgentInfo],
        *,
        work_dir: Path,
        allocation_interval: float = 0.2,
        agent_ping_timeout: float | None = None,
        max_agent_ping_timeouts: int = 2,
        master_flags: Iterable[str] = (),
        zk: str | None = None,
        registry: str = "replicated_log",
    ) -> None:
        home = mesos_home()
        if home is None:
            raise RuntimeError(SKIP_REASON)
        self.home = home
        self.work_dir = Path(work_dir)
        self.agent_specs = {a.name: a for a in agents}
        self.port = free_port()
        self.zk = zk  # zk://HOST:PORT/PATH: masters elected there, agents find them there
        # replicated_log: a restarted master recovers its agents (and waits for them to
        # re-register); in_memory: it starts with none and admits them as they re-register
        self.registry = registry
        flags = [
            f"--allocation_interval={allocation_interval}secs",
            *master_flags,
        ]
        if agent_ping_timeout is not None:
            flags += [
                f"--agent_ping_timeout={agent_ping_timeout}secs",
                f"--max_agent_ping_timeouts={max_agent_ping_timeouts}",
            ]
        self._master_flags = flags
        self._master: subprocess.Popen | None = None
        self._agents: dict[str, subprocess.Popen] = {}
        self._agent_ports: dict[str, int] = {}
        self._logs: list[Any] = []

    # lifecycle -------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def framework_master(self) -> str:
        """What a framework is given as its master: the ZooKeeper URL, or HOST:PORT."""
        return self.zk or self.address

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.work_dir / f"{name}.log", "ab")  # noqa: SIM115 (closed at stop)
        self._logs.append(log)
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=self.work_dir,
        )  # fmt: skip

    def start_master(self) -> None:
        self._master = self._spawn("master", [
            str(self.home / "bin" / "mesos-master"), "--ip=127.0.0.1", "--hostname=127.0.0.1",
            f"--port={self.port}", f"--work_dir={self.work_dir / 'master'}",
            f"--registry={self.registry}",
            *(["--quorum=1"] if self.registry == "replicated_log" else []), *self._master_flags,
            *([f"--zk={self.zk}"] if self.zk else []),
        ])  # fmt: skip
        # with ZooKeeper a restarted master waits for the killed one's session to expire
        # (--zk_session_timeout, 10 s by default) before it is elected
        wait_for(self._master_answers, 60 if self.zk else 30,
                 f"the Mesos master on {self.address} to answer as the leader")  # fmt: skip

    def _master_answers(self) -> bool:
        if self._master is not None and self._master.poll() is not None:
            raise AssertionError(f"mesos-master exited: {self.log_tail('master')}")
        try:
            # a master that is not (yet) the leader answers 307 or 503
            answer = requests.get(f"{self.url}/master/state", timeout=2, allow_redirects=False)
            return answer.status_code == 200
        except requests.RequestException:
            return False

    def start_agent(self, name: str) -> None:
        spec = self.agent_specs[name]
        ip = spec.hostname
        port = self._agent_ports.setdefault(name, free_port(ip))
        resources = ";".join(f"{r}:{v:g}" for r, v in spec.resources.items())
        attrs = ";".join(f"{k}:{v}" for k, v in spec.attributes.items())
        base = self.work_dir / "agents" / name
        self._agents[name] = self._spawn(f"agent-{name}", [
            str(self.home / "bin" / "mesos-agent"), f"--master={self.zk or self.address}",
            f"--ip={ip}", f"--hostname={ip}", f"--port={port}",
            f"--work_dir={base / 'work'}", f"--runtime_dir={base / 'run'}",
            f"--resources={resources}", *([f"--attributes={attrs}"] if attrs else []),
            "--launcher=posix", "--isolation=posix/cpu,posix/mem",
            "--no-systemd_enable_support", "--containerizers=mesos",
            f"--launcher_dir={self.home / 'bin'}", "--no-switch_user",
        ])  # fmt: skip

    def start(self) -> RealMesos:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.start_master()
            for name in self.agent_specs:
                self.start_agent(name)
            self.wait_agents(set(self.agent_specs))
        except BaseException:
            self.stop()
            raise
        return self

    def wait_agents(self, names: set[str], timeout: float = 60) -> None:
        hosts = {self.agent_specs[n].hostname for n in names}
        wait_for(
            lambda: hosts <= {a["hostname"] for a in self.state()["slaves"] if a["active"]},
            timeout, f"agents {sorted(names)} to be registered and active",
        )  # fmt: skip

    def stop(self) -> None:
        """Executors first (by process group: they outlive their agent), then every agent
        and the master, each by pid; nothing under the work dir is left running."""
        self._kill_groups(processes_under(self.work_dir / "agents"))
        for process in [*self._agents.values(), self._master]:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in [*self._agents.values(), self._master]:
            if process is None:
                continue
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT_S)
        # bounded: whatever an agent was starting as it stopped is caught here too, under the
        # whole work dir: a task's `mesos-containerizer launch` forked by its agent has the
        # agent's working directory (this one) until it enters its sandbox, and no path in
        # its command line (one outlived a test so, stopped, after a KILL with a grace)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while (left := processes_under(self.work_dir)) and time.monotonic() < deadline:
            self._kill_groups(left)
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        for log in self._logs:
            log.close()
        self._logs.clear()

    @staticmethod
    def _kill_groups(pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)

    def __enter__(self) -> RealMesos:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # faults ----------------------------------------------------------------------------

    def kill_agent(self, name: str) -> None:
        """SIGKILL the agent process only: its executors keep running (as on a real crash
        of the agent daemon)."""
        process = self._agents[name]
        process.kill()
        process.wait(STOP_TIMEOUT_S)

    def restart_agent(self, name: str) -> None:
        """Start the agent again on the same address, port and work dir (same agent id)."""
        if self._agents[name].poll() is None:
            raise RuntimeError(f"agent {name} is still running")
        self.start_agent(name)

    def executor_pids(self, name: str) -> list[int]:
        """Processes the agent `name` started that are still alive (the agent excluded)."""
        agent = self._agents.get(name)
        mine = {agent.pid} if agent is not None else set()
        return [p for p in processes_under(self.work_dir / "agents" / name) if p not in mine]

    def kill_master(self) -> None:
        assert self._master is not None
        self._master.kill()
        self._master.wait(STOP_TIMEOUT_S)

    def restart_master(self) -> None:
        if self._master is not None and self._master.poll() is None:
            self.kill_master()
        self.start_master()

    # introspection ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def state(self) -> dict:
        answer = requests.get(f"{self.url}/master/state", timeout=10)
        answer.raise_for_status()
        return answer.json()

    def metrics(self) -> dict[str, float]:
        return requests.get(f"{self.url}/metrics/snapshot", timeout=10).json()

    @property
    def master_id(self) -> str:
        return self.state()["id"]

    def hostname(self, name: str) -> str:
        return self.agent_specs[name].hostname

    def agent_id(self, name: str) -> str | None:
        host = self.agent_specs[name].hostname
        ids = [a["id"] for a in self.state()["slaves"] if a["hostname"] == host]
        return ids[0] if ids else None

    def agent_name(self, agent_id: str) -> str:
        hosts = {a["id"]: a["hostname"] for a in self.state()["slaves"]}
        by_host = {spec.hostname: name for name, spec in self.agent_specs.items()}
        return by_host[hosts[agent_id]]

    def tasks(self, state: str | None = None) -> list[RealTask]:
        out = []
        snapshot = self.state()
        for framework in [*snapshot["frameworks"], *snapshot.get("completed_frameworks", [])]:
            for task in [*framework.get("tasks", []), *framework.get("completed_tasks", []),
                         *framework.get("unreachable_tasks", [])]:  # fmt: skip
                if state is not None and task["state"] != state:
                    continue
                out.append(RealTask(
                    task["id"], task["framework_id"], task["slave_id"], task["state"],
                    tuple(s["state"] for s in task.get("statuses", [])),
                    {r: float(v) for r, v in task["resources"].items()
                     if isinstance(v, int | float) and v > 0},
                ))  # fmt: skip
        return out

    def frameworks(self) -> list[dict]:
        return self.state()["frameworks"]

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.work_dir / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""
