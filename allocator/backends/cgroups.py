"""Per-executor cgroups on the embedded cluster: the kernel holds each executor to the memory
and CPUs the broker accounted it (docs/security.md, "Resource limits").

Each executor gets a cgroup `PARENT/TENANT+EXECUTOR` under a parent named after the cluster's
working directory, created beside the broker in its own cgroup (cgroup v1: in each of the
memory, cpu and pids hierarchies; cgroup v2: in the unified one). Limits:

- memory: the accounted memory (heap + overhead + off-heap), swap none; past it the kernel's
  OOM killer kills a process of the executor (the JVM, its largest);
- cpu (`SandboxConfig.cpu`): `shares` gives each executor a weight of its `cores` (v1 shares
  1024 per CPU, v2 weight 100 per CPU, as Mesos gives tasks): under contention executors
  share the CPUs in proportion to their cores, and a CPU one leaves idle goes to the others
  (work-conserving). The executors' parent weighs the sum of its executors' weights, so
  against the rest of the host the executors count as the busy threads they declared, not as
  one process. `quota` adds a CFS quota of `cores` CPUs per 100 ms period (throttled, never
  killed, even on an idle host); `off` leaves the cpu controller alone;
- pids: `pids` processes and threads (a fork bomb fails to fork, the host does not).

Every process of the executor is in its cgroup, also one that left its process group, so
stopping an executor kills what remains in the cgroup.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CFS_PERIOD_US = 100_000
# cpuacct (v1 only) holds the usage counter of a cgroup; v2 keeps it in every cgroup's cpu.stat
CONTROLLERS = ("memory", "cpu", "cpuacct", "pids")
SHARES_PER_CPU = 1024  # v1 cpu.shares of one CPU (a busy thread's weight at nice 0)
WEIGHT_PER_CPU = 100  # v2 cpu.weight likewise
MAX_SHARES, MAX_WEIGHT = 262_144, 10_000  # the kernel's limits
REMOVE_SECONDS = 2.0


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    cpus: float
    pids: int
    quota: bool = False  # a hard CFS quota of `cpus` (else the weight alone, no ceiling)


@dataclass(frozen=True)
class ExecutorCgroup:
    """One executor's cgroup: one directory per v1 hierarchy, or one v2 directory."""

    version: int
    paths: dict[str, Path]  # controller ("memory", "cpu", "pids"; v2: "unified") -> dir

    def add(self, pid: int) -> None:
        """Move `pid` (stopped at its gate, not yet running the executor) into the cgroup."""
        for path in self.paths.values():
            (path / "cgroup.procs").write_text(f"{pid}\n")

    def oom_kills(self) -> int:
        """How many processes the kernel killed here for exceeding the memory limit."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        memory = self.paths.get("memory", self.paths.get("unified"))
        if memory is None:
            return 0
        try:
            lines = (memory / name).read_text().splitlines()
        except OSError:
            return 0
        for line in lines:
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def cpu_usage_ns(self) -> int | None:
        """The CPU time every process of the cgroup has used, in ns, as the kernel counts it
        (v1 cpuacct.usage, v2 cpu.stat usage_usec); None without the counter."""
        try:
            if self.version == 1:
                return int((self.paths["cpuacct"] / "cpuacct.usage").read_text())
            for line in (self.paths["unified"] / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) * 1000
        except (KeyError, OSError, ValueError):
            return None
        return None

    def pids(self) -> set[int]:
        out: set[int] = set()
        for path in self.paths.values():
            with contextlib.suppress(OSError, ValueError):
                out.update(int(p) for p in (path / "cgroup.procs").read_text().split())
        return out

    def kill_all(self) -> None:
        """SIGKILL every process still in the cgroup (a daemon the executor left behind)."""
        kill_file = self.paths.get("unified", Path("/nonexistent")) / "cgroup.kill"
        if kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1\n")
                return
        for _ in range(10):  # bounded: a process forking as fast as it is killed
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def remove(self) -> None:
        """Kill what remains, then remove the directories (a cgroup with a process in it
        cannot be removed; the kernel needs a moment after the last one exits)."""
        self.kill_all()
        deadline = time.monotonic() + REMOVE_SECONDS
        for path in self.paths.values():
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as error:
                    if error.errno != errno.EBUSY or time.monotonic() > deadline:
                        log.warning("cgroup %s not removed: %s", path, error.strerror)
                        break
                    time.sleep(0.05)


@dataclass(frozen=True)
class CgroupTree:
    """The parent cgroup(s) of one cluster's executors."""

    version: int
    parents: dict[str, Path]

    def describe(self) -> str:
        names = ", ".join(k for k in self.parents if k != "unified") or "unified hierarchy"
        where = next(iter(self.parents.values()))
        return f"cgroup v{self.version} ({names}) under {where.parent}"

    def create(self, name: str, limits: Limits) -> ExecutorCgroup:
        """The executor's cgroup with its limits written; OSError when the kernel refuses."""
        paths = {key: parent / name for key, parent in self.parents.items()}
        for path in paths.values():
            path.mkdir(exist_ok=True)
        group = ExecutorCgroup(self.version, paths)
        try:
            for key, value in _settings(self.version, limits, set(paths)):
                target = paths[key] / value[0]
                if target.exists():
                    target.write_text(value[1] + "\n")
                elif value[0] in ("memory.limit_in_bytes", "memory.max"):
                    raise OSError(errno.ENOENT, f"{target} missing: no memory controller")
        except OSError:
            group.remove()
            raise
        return group

    def reweigh(self) -> None:
        """The executors' parent weighs the sum of its executors' weights (at least one
        CPU's): in a cgroup all the executors would otherwise count as one busy process
        against the rest of the host, and starve on a busy one."""
        key, name, unit, high = (
            ("cpu", "cpu.shares", SHARES_PER_CPU, MAX_SHARES)
            if self.version == 1
            else ("unified", "cpu.weight", WEIGHT_PER_CPU, MAX_WEIGHT)
        )
        parent = self.parents.get(key)
        if parent is None or not (parent / name).exists():
            return  # no cpu controller here
        total = 0
        for child in parent.iterdir():
            with contextlib.suppress(OSError, ValueError):
                total += int((child / name).read_text())
        with contextlib.suppress(OSError):
            (parent / name).write_text(f"{min(high, max(unit, total))}\n")

    def open(self, name: str) -> ExecutorCgroup | None:
        """The cgroup of an executor started by an earlier broker, if it is still there."""
        paths = {key: parent / name for key, parent in self.parents.items()}
        if not all(p.is_dir() for p in paths.values()):
            return None
        return ExecutorCgroup(self.version, paths)

    def remove(self) -> None:
        for path in self.parents.values():
            with contextlib.suppress(OSError):
                path.rmdir()


def _settings(version: int, limits: Limits, keys: set[str]) -> list[tuple[str, tuple[str, str]]]:
    """(controller, (file, value)) in the order the kernel needs them."""
    memory = str(limits.memory_bytes)
    # the kernel's minimum quota is 1 ms; without a quota, none (a cgroup's own default)
    quota = max(1000, round(limits.cpus * CFS_PERIOD_US)) if limits.quota else None
    if version == 2:  # a file whose controller is not enabled is absent, and skipped
        weight = min(MAX_WEIGHT, max(1, round(WEIGHT_PER_CPU * limits.cpus)))
        return [
            ("unified", ("memory.max", memory)),
            ("unified", ("memory.swap.max", "0")),
            ("unified", ("cpu.max", f"{quota or 'max'} {CFS_PERIOD_US}")),
            ("unified", ("cpu.weight", str(weight))),
            ("unified", ("pids.max", str(limits.pids))),
        ]
    out: list[tuple[str, tuple[str, str]]] = [
        ("memory", ("memory.limit_in_bytes", memory)),
        # memory + swap no more than memory: no swap (written after the memory limit, which
        # it may never be below)
        ("memory", ("memory.memsw.limit_in_bytes", memory)),
    ]
    if "cpu" in keys:
        shares = min(MAX_SHARES, max(2, round(SHARES_PER_CPU * limits.cpus)))
        out += [
            ("cpu", ("cpu.cfs_period_us", str(CFS_PERIOD_US))),
            ("cpu", ("cpu.cfs_quota_us", str(quota or -1))),
            ("cpu", ("cpu.shares", str(shares))),
        ]
    if "pids" in keys:
        out.append(("pids", ("pids.max", str(limits.pids))))
    return out


def cgroup_name(tenant_id: str, executor_id: str) -> str:
    """Tenant ids hold no `+` (validation.py), so the name is unambiguous."""
    return f"{tenant_id}+{executor_id}"


def parent_name(workdir: Path) -> str:
    digest = hashlib.sha256(str(workdir.resolve()).encode()).hexdigest()[:12]
    return f"fairbroker-{digest}"


# ---- discovery ---------------------------------------------------------------------------
def _mounts(mountinfo: str) -> tuple[dict[str, Path], Path | None]:
    """cgroup v1 mount points by controller, and the cgroup2 mount point."""
    v1: dict[str, Path] = {}
    v2 = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        point = Path(fields[4].replace("\\040", " "))
        if tail[0] == "cgroup2" and v2 is None:
            v2 = point
        elif tail[0] == "cgroup":
            for option in tail[2].split(","):
                if option in CONTROLLERS:
                    v1.setdefault(option, point)
    return v1, v2


def _own(proc_cgroup: str) -> tuple[dict[str, str], str | None]:
    """This process's cgroup per v1 controller, and its v2 cgroup."""
    v1: dict[str, str] = {}
    v2 = None
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            v2 = path
        for controller in controllers.split(","):
            if controller in CONTROLLERS:
                v1[controller] = path
    return v1, v2


def discover(
    workdir: Path, proc: Path = Path("/proc/self"), controllers: tuple[str, ...] = CONTROLLERS
) -> CgroupTree | str:
    """The parent cgroup(s) for this cluster's executors, created, with `controllers` (memory
    always); or why there are none (a sentence for the log)."""
    try:
        mountinfo = (proc / "mountinfo").read_text()
        own_text = (proc / "cgroup").read_text()
    except OSError as error:
        return f"cannot read {proc}: {error.strerror}"
    mounts_v1, mount_v2 = _mounts(mountinfo)
    own_v1, own_v2 = _own(own_text)
    name = parent_name(workdir)
    if "memory" in mounts_v1 and "memory" in own_v1:
        parents = {
            c: mounts_v1[c] / own_v1[c].lstrip("/") / name
            for c in CONTROLLERS
            if c in mounts_v1 and c in own_v1 and (c in controllers or c == "memory")
        }
        try:
            for path in parents.values():
                path.mkdir(exist_ok=True)
        except OSError as error:
            return f"cgroup v1: cannot create {error.filename} ({error.strerror})"
        return CgroupTree(1, parents)
    if mount_v2 is not None and own_v2 is not None:
        return _discover_v2(mount_v2, own_v2, name, {"memory", *controllers})
    return "no cgroup memory controller mounted"


def _discover_v2(mount: Path, own: str, name: str, wanted: set[str]) -> CgroupTree | str:
    base = mount / own.lstrip("/")
    try:
        available = set((base / "cgroup.controllers").read_text().split())
    except OSError as error:
        return f"cgroup v2: cannot read {base}/cgroup.controllers ({error.strerror})"
    if "memory" not in available:
        return f"cgroup v2: no memory controller delegated to {base}"
    wanted &= available
    enable = " ".join(f"+{c}" for c in sorted(wanted))
    try:
        _enable(base, enable)
        parent = base / name
        parent.mkdir(exist_ok=True)
        (parent / "cgroup.subtree_control").write_text(enable + "\n")
    except OSError as error:
        return (
            f"cgroup v2: cannot delegate {enable} below {base} ({error.strerror}); run the "
            "broker in a cgroup of its own (systemd: Delegate=yes)"
        )
    return CgroupTree(2, {"unified": parent})


def _enable(base: Path, enable: str) -> None:
    """Turn the controllers on for `base`'s children. A non-root cgroup with processes in it
    cannot (the v2 "no internal processes" rule): when the broker is its only process, the
    broker moves into a leaf `broker` first, as a delegated service does."""
    try:
        (base / "cgroup.subtree_control").write_text(enable + "\n")
        return
    except OSError as error:
        if error.errno != errno.EBUSY:
            raise
    procs = (base / "cgroup.procs").read_text().split()
    if procs != [str(os.getpid())]:
        raise OSError(errno.EBUSY, f"other processes are in {base}")
    leaf = base / "broker"
    leaf.mkdir(exist_ok=True)
    (leaf / "cgroup.procs").write_text(f"{os.getpid()}\n")
    (base / "cgroup.subtree_control").write_text(enable + "\n")
