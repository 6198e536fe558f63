"""The embedded local cluster: virtual heterogeneous agents on this machine.

Each agent is a name, a loopback address used as the executors' hostname, a working
directory and a capacity that exists only in the broker's accounting. A launch starts a real
Spark executor (`CoarseGrainedExecutorBackend` via `spark-class`) as a subprocess in its own
process group; its heap (-Xmx) is the launch's heap, never more than its accounted memory.
An executor counts as RUNNING once its log says it registered with its driver. Executors run
in the sandbox of `allocator/backends/sandbox.py` (bubblewrap or an unprivileged user), each
in a cgroup of its own holding it to its accounted memory and CPUs where the broker may create
cgroups (`allocator/backends/cgroups.py`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from allocator.backends.base import (
    AgentInfo,
    BackendEvents,
    ExecutorState,
    LaunchSpec,
    TaskStatus,
)
from allocator.backends.cgroups import CgroupTree, ExecutorCgroup, Limits, cgroup_name, discover
from allocator.backends.executor import ExecutorEnvPolicy, executor_launch
from allocator.backends.sandbox import Sandbox, SandboxConfig, SandboxError, resolve_sandbox
from allocator.errors import FairbrokerError

log = logging.getLogger(__name__)

REGISTERED_MARK = b"Successfully registered with driver"
# Every executor carries `FAIRBROKER_EXECUTOR=TENANT/EXECUTOR/WORKDIR` in its environment, so
# a restarted broker finds each process it started, recorded or not (the write-ahead row
# may hold no pid when the broker died right after the fork).
MARKER = "FAIRBROKER_EXECUTOR"
POLL_SECONDS = 0.2
KILL_GRACE_SECONDS = 5.0
# Under cgroup limits the executor waits at this gate until the broker has moved it into its
# cgroup, so nothing it runs (not even bubblewrap's first fork) starts outside the limits.
# The gate is the child's standard input (a pipe), /dev/null again once it is open.
GATE = 'read -r go; [ "$go" = go ] || exit 125; exec </dev/null; exec "$@"'


def spark_home() -> Path:
    env = os.environ.get("SPARK_HOME")
    if env:
        return Path(env)
    try:
        import pyspark
    except ImportError:
        raise FairbrokerError("pyspark is not installed and SPARK_HOME is not set") from None
    return Path(pyspark.__file__).parent


@dataclass
class _Process:
    spec: LaunchSpec
    pid: int
    log_path: Path
    popen: subprocess.Popen | None  # None when adopted after a broker restart
    state: ExecutorState = ExecutorState.LAUNCHING
    killing_since: float | None = None
    log_offset: int = 0
    tail: bytes = field(default=b"", repr=False)
    wrapped: bool = False  # `pid` is bubblewrap's; the executor runs inside its namespaces
    cgroup: ExecutorCgroup | None = None


def _release(popen: subprocess.Popen, gate: tuple[int, int], cgroup: ExecutorCgroup) -> None:
    """Move the gated child into its cgroup, then let it run; if it cannot be moved it
    never runs the executor (it exits 125 on the closed gate) and the launch fails."""
    os.close(gate[0])
    try:
        try:
            cgroup.add(popen.pid)
        except OSError as error:
            raise FairbrokerError(
                f"local cluster: cannot move the executor into its cgroup ({error})"
            ) from None
        os.write(gate[1], b"go\n")
    except BaseException:
        os.close(gate[1])
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=10)
        cgroup.remove()
        raise
    os.close(gate[1])


def _is_bwrap(pid: int) -> bool:
    try:
        first = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return os.path.basename(first) == b"bwrap"


def _group_members(pgid: int) -> list[int]:
    """Every process in process group `pgid` but its leader."""
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != pgid:
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


def _still_running(pgid: int, marker: bytes) -> list[int]:
    """Processes of group `pgid`, its leader included, that carry this executor's `marker`
    environment item (a zombie's environment reads empty; a reused pid carries no marker)."""
    out = []
    for pid in [pgid, *_group_members(pgid)]:
        try:
            if os.getpgid(pid) != pgid:
                continue  # the leader's pid, reused outside the group
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            out.append(pid)
    return out


def _end_group(pgid: int, marker: bytes, timeout: float) -> bool:
    """SIGKILL what is left of an executor's process group once its leader is gone (a
    Python worker that ignored SIGTERM outlives its JVM); True once none of it runs."""
    deadline = time.monotonic() + timeout
    while pids := _still_running(pgid, marker):
        if time.monotonic() >= deadline:
            return False
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    return True


def _pid_is(pid: int, spec: LaunchSpec) -> bool:
    """Is `pid` alive and still this executor (pids are reused)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
        return False
    try:
        at = cmdline.index(b"--executor-id")
        app = cmdline.index(b"--app-id")
    except ValueError:
        return False
    return cmdline[at + 1].decode() == spec.executor_id and cmdline[app + 1].decode() == spec.app_id


class LocalCluster:
    """Backend running executors as local subprocesses on virtual agents."""

    name = "local"

    def __init__(
        self,
        agents: list[AgentInfo],
        workdir: Path,
        home: Path | None = None,
        env_policy: ExecutorEnvPolicy | None = None,
        sandbox: SandboxConfig | Sandbox | None = None,
    ) -> None:
        if not agents:
            raise FairbrokerError("local cluster: no agents")
        self._agents = list(agents)
        self._hosts = {a.name: a.hostname for a in agents}
        self.workdir = Path(workdir)
        self.home = home or spark_home()
        self.env_policy = env_policy or ExecutorEnvPolicy()
        self._procs: dict[tuple[str, str], _Process] = {}
        self._lock = threading.Lock()
        self._events: BackendEvents | None = None
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self._found: dict[tuple[str, str], int] | None = None  # marked processes, at recovery
        self._cgroups: CgroupTree | None = None  # set at start when limits are in force
        if not isinstance(sandbox, Sandbox):
            sandbox = resolve_sandbox(sandbox or SandboxConfig())
        self.sandbox = sandbox
        self.sandbox.check_reachable(self.home / "bin" / "spark-class", f"Spark ({self.home})")

    # ---- Backend -----------------------------------------------------------------------
    def start(self, events: BackendEvents) -> None:
        self._events = events
        for agent in self._agents:
            (self.workdir / agent.name).mkdir(parents=True, exist_ok=True)
        self.sandbox.protect_state()
        for note in self.sandbox.notes:
            log.warning("%s", note)
        self._start_limits()
        try:  # the default PYSPARK_PYTHON: a tenant's Python tasks would fail at their start
            self.sandbox.check_reachable(Path(sys.executable), "the executors' Python")
        except SandboxError as error:
            log.warning("%s (PySpark tasks will fail; docs/security.md)", error)
        self._monitor = threading.Thread(target=self._watch, name="local-cluster", daemon=True)
        self._monitor.start()

    def _start_limits(self) -> None:
        if self.sandbox.kind == "none" or not self.sandbox.config.cgroups:
            return
        cpu = ("cpu", "cpuacct") if self.sandbox.config.cpu != "off" else ()
        wanted = ("memory", "pids", *cpu)
        found = discover(self.workdir, controllers=wanted)
        if isinstance(found, str):
            log.warning(
                "executor limits: %s; memory and CPU are not enforced by the kernel, only "
                "prlimit's (docs/security.md, Resource limits)", found,
            )  # fmt: skip
            return
        self._cgroups = found
        log.info("executor limits: %s", found.describe())

    @property
    def limits_in_force(self) -> str | None:
        """The cgroups holding executors to their grant, in words; None when there are none."""
        return self._cgroups.describe() if self._cgroups is not None else None

    def agents(self) -> list[AgentInfo]:
        return list(self._agents)

    def launch(self, spec: LaunchSpec) -> str:
        if spec.agent not in self._hosts:
            raise FairbrokerError(f"local cluster: unknown agent {spec.agent!r}")
        accounted = spec.resources.get("mem")
        if accounted is not None and spec.heap_mib > accounted:
            raise FairbrokerError(
                f"executor heap {spec.heap_mib} MiB exceeds its accounted memory {accounted} MiB"
            )
        hostname = self._hosts[spec.agent]
        directory = self.workdir / spec.agent / spec.tenant_id / f"executor-{spec.executor_id}"
        command = executor_launch(
            spec,
            spark_class=str(self.home / "bin" / "spark-class"),
            hostname=hostname,
            policy=self.env_policy,
            inherited=os.environ,
            backend_env={
                "SPARK_LOCAL_IP": hostname,
                # Spark's scratch (block manager, shuffle files) in the executor's own
                # directory, not a /tmp that other tenants' executors can read.
                "SPARK_LOCAL_DIRS": str(directory),
                "SPARK_HOME": str(self.home),
                MARKER: self._marker(spec),
                **self.sandbox.environment(directory),
            },
        )
        directory.mkdir(parents=True, exist_ok=True)
        self.sandbox.prepare(directory, self.workdir)
        log_path = directory / "stderr"
        argv = self.sandbox.wrap(command.argv, directory, keep=[self.home])
        cgroup = self._cgroup_for(spec)
        gate = os.pipe() if cgroup is not None else None
        if gate is not None:
            argv = ["/bin/sh", "-c", GATE, "fairbroker-gate", *argv]
        try:
            with open(directory / "stdout", "wb") as out, open(log_path, "wb") as err:
                for path in (directory / "stdout", log_path):
                    self.sandbox.own(path)
                popen = subprocess.Popen(
                    argv,
                    cwd=directory,
                    env=command.environment,
                    stdin=gate[0] if gate is not None else subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    **self.sandbox.popen_options(),
                )
        except BaseException:
            if gate is not None:
                os.close(gate[0])
                os.close(gate[1])
            if cgroup is not None:
                cgroup.remove()
            raise
        if gate is not None and cgroup is not None:
            _release(popen, gate, cgroup)
        with self._lock:
            self._procs[(spec.tenant_id, spec.executor_id)] = _Process(
                spec, popen.pid, log_path, popen, wrapped=self.sandbox.wraps, cgroup=cgroup
            )
        return str(popen.pid)

    def _cgroup_for(self, spec: LaunchSpec) -> ExecutorCgroup | None:
        """The executor's cgroup with its grant as limits (None: no limits in force)."""
        if self._cgroups is None:
            return None
        memory = spec.resources.get("mem", float(spec.heap_mib))
        limits = Limits(
            memory_bytes=int(memory * 1024 * 1024),
            cpus=float(spec.resources.get("cpus", spec.cores)),
            pids=self.sandbox.config.pids,
            quota=self.sandbox.config.cpu == "quota",
        )
        try:
            group = self._cgroups.create(cgroup_name(spec.tenant_id, spec.executor_id), limits)
            self._cgroups.reweigh()
            return group
        except OSError as error:
            raise FairbrokerError(
                f"local cluster: cannot create the executor's cgroup ({error})"
            ) from None

    def kill(self, tenant_id: str, executor_id: str) -> None:
        with self._lock:
            proc = self._procs.get((tenant_id, executor_id))
            if proc is None or proc.killing_since is not None:
                return
            proc.killing_since = time.monotonic()
        self._signal(proc, signal.SIGTERM)

    def tenant_constraints(self, group: str) -> dict[str, str]:
        return {}

    def flush(self, wants_more: bool) -> None:
        pass  # every launch started at once

    def adopt(self, spec: LaunchSpec, handle: str) -> bool:
        pid = self._marked().get((spec.tenant_id, spec.executor_id))
        if pid is None or not _pid_is(pid, spec) or handle not in ("", str(pid)):
            return False
        directory = self.workdir / spec.agent / spec.tenant_id / f"executor-{spec.executor_id}"
        log_path = directory / "stderr"
        cgroup = None
        if self._cgroups is not None:
            cgroup = self._cgroups.open(cgroup_name(spec.tenant_id, spec.executor_id))
        proc = _Process(spec, pid, log_path, None, wrapped=_is_bwrap(pid), cgroup=cgroup)
        with self._lock:
            self._procs[(spec.tenant_id, spec.executor_id)] = proc
        return True

    def reconcile(self, adopted: set[tuple[str, str]], abandoned: list[LaunchSpec]) -> None:
        """Stop (SIGKILL, as nobody wants them) every process group carrying this cluster's
        marker that the broker did not adopt."""
        for key, pid in self._marked().items():
            if key not in adopted:
                log.warning(
                    "stopping orphaned executor %s/%s (pid %d): not adopted by the broker",
                    *key, pid,
                )  # fmt: skip
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        self._found = None

    def _marker(self, spec: LaunchSpec) -> str:
        """The environment value that tells this cluster's executor processes apart."""
        return f"{spec.tenant_id}/{spec.executor_id}/{self.workdir.resolve()}"

    def _end_group(self, proc: _Process, timeout: float) -> None:
        marker = f"{MARKER}={self._marker(proc.spec)}".encode()
        if not _end_group(proc.pid, marker, timeout):
            log.warning("processes of executor group %d outlived SIGKILL", proc.pid)

    def _marked(self) -> dict[tuple[str, str], int]:
        """Process-group leaders on this host carrying this cluster's marker (read once per
        recovery from /proc; processes of other users are not readable and not ours)."""
        if self._found is None:
            self._found = {}
            suffix = f"/{self.workdir.resolve()}".encode()
            prefix = f"{MARKER}=".encode()
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                pid = int(entry.name)
                try:
                    if os.getpgid(pid) != pid:
                        continue  # a Python worker of an executor, in its leader's group
                    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                for item in environ:
                    if item.startswith(prefix) and item.endswith(suffix):
                        marker = item[len(prefix) : -len(suffix)].decode(errors="replace")
                        tenant_id, _, executor_id = marker.partition("/")
                        self._found[(tenant_id, executor_id)] = pid
        return self._found

    def stop(self, kill_executors: bool = True) -> None:
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(timeout=5)
        if not kill_executors:
            return
        with self._lock:
            procs = list(self._procs.values())
        for proc in procs:
            self._signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_SECONDS
        for proc in procs:
            while self._alive(proc) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._alive(proc):
                self._signal(proc, signal.SIGKILL)
            if proc.popen is not None:
                try:
                    proc.popen.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    log.warning("executor pid %d did not exit", proc.pid)
            self._end_group(proc, timeout=2)
            if proc.cgroup is not None:
                proc.cgroup.remove()
        if self._cgroups is not None:
            self._cgroups.remove()  # only once empty: executors kept alive keep theirs

    def pids(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return {key: proc.pid for key, proc in self._procs.items()}

    # ---- monitoring --------------------------------------------------------------------
    @staticmethod
    def _signal(proc: _Process, sig: signal.Signals) -> None:
        try:
            if proc.wrapped and sig != signal.SIGKILL:
                # bubblewrap would die of the signal and leave the executor running unseen;
                # the processes inside (in its group: no --new-session) get it instead.
                for pid in _group_members(proc.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
            else:
                os.killpg(proc.pid, sig)  # the JVM leads its group, with its Python workers
        except ProcessLookupError:
            pass
        except PermissionError:
            log.warning("cannot signal executor pid %d", proc.pid)

    @staticmethod
    def _alive(proc: _Process) -> bool:
        if proc.popen is not None:
            return proc.popen.poll() is None
        return _pid_is(proc.pid, proc.spec)

    def _registered(self, proc: _Process) -> bool:
        try:
            with open(proc.log_path, "rb") as f:
                f.seek(proc.log_offset)
                chunk = f.read()
        except OSError:
            return False
        proc.log_offset += len(chunk)
        window = proc.tail + chunk
        proc.tail = window[-len(REGISTERED_MARK) :]
        return REGISTERED_MARK in window

    def _poll_once(self) -> list[TaskStatus]:
        out = []
        now = time.monotonic()
        with self._lock:
            procs = list(self._procs.items())
        for key, proc in procs:
            if not self._alive(proc):
                code = proc.popen.returncode if proc.popen is not None else None
                if proc.killing_since is not None:
                    state, message = ExecutorState.KILLED, "killed on request"
                elif code == 0:
                    state, message = ExecutorState.FINISHED, "exited 0"
                elif code is None:
                    state, message = ExecutorState.FAILED, "exited (adopted; exit code unknown)"
                else:
                    state, message = ExecutorState.FAILED, f"exited with code {code}"
                self._end_group(proc, timeout=0.5)
                if proc.cgroup is not None:
                    if proc.cgroup.oom_kills() and state is ExecutorState.FAILED:
                        mem = proc.spec.resources.get("mem", proc.spec.heap_mib)
                        message += (
                            f": out of memory, killed by the kernel at its limit of {mem:g} MiB"
                        )
                    proc.cgroup.remove()  # and whatever it left running
                    if self._cgroups is not None:
                        self._cgroups.reweigh()
                with self._lock:
                    self._procs.pop(key, None)
                out.append(TaskStatus(*key, state, message))
                continue
            if proc.killing_since is not None and now - proc.killing_since > KILL_GRACE_SECONDS:
                self._signal(proc, signal.SIGKILL)
            if proc.state is ExecutorState.LAUNCHING and self._registered(proc):
                proc.state = ExecutorState.RUNNING
                out.append(TaskStatus(*key, ExecutorState.RUNNING, "registered with driver"))
        return out

    def _watch(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                updates = self._poll_once()
            except Exception:  # the monitor must outlive any one bad poll
                log.exception("local cluster: poll failed")
                continue
            for status in updates:
                if self._events is not None:
                    try:
                        self._events.status(status)
                    except Exception:
                        log.exception("status callback failed for %s", status)
