"""The executor sandbox of the embedded cluster (docs/security.md, "The executor sandbox").

A tenant's executor runs the tenant's code, so on the embedded cluster it must not reach the
broker that runs beside it. Three kinds, the strongest available chosen by `auto`:

- `bwrap`: Debian's bubblewrap puts the executor in its own PID, IPC and UTS namespaces
  (not a cgroup namespace: Java 17 fails to read its cgroup v1 limits inside one), under a
  read-only view of the file system in which the broker's state directory (its database and
  every executor's working directory) is an empty read-only tmpfs, its own working directory
  is the one writable place and /tmp is private. The broker and other tenants' executors are
  not in its PID namespace, so it cannot see or signal them. The network namespace is
  shared: executors reach their driver on 127.0.0.1. When the broker runs as root,
  bubblewrap itself runs as the unprivileged sandbox user (so nothing inside holds a
  capability over the host).
- `user` (root only): the executor runs as the unprivileged sandbox user in a working
  directory it owns (mode 0700); the state directory and its files are not readable by it.
  Executors of different tenants share that user, so they can signal each other and read
  each other's files: `user` alone does not separate tenants.
- `none`: the executor runs as the broker's user beside it (a loud warning).

Every sandboxed executor also gets resource limits: no core files, a bounded number of open
files and of processes of its user (`prlimit`), and where the kernel lets the broker create
cgroups, its accounted memory, CPUs and a process count (`allocator/backends/cgroups.py`).
There is no address-space limit (RLIMIT_AS): a JVM reserves far more address space than it
uses and fails to start under one near its memory (docs/security.md).
"""

from __future__ import annotations

import logging
import os
import pwd
import resource
import shutil
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from allocator.errors import FairbrokerError

log = logging.getLogger(__name__)

SandboxMode = Literal["auto", "bwrap", "user", "none"]
SANDBOX_MODES: tuple[str, ...] = ("auto", "bwrap", "user", "none")
CpuMode = Literal["off", "shares", "quota"]
CPU_MODES: tuple[str, ...] = ("off", "shares", "quota")
PROBE_SECONDS = 10.0
NONE_WARNING = (
    "SANDBOX OFF: executors run as {user} beside the broker; a tenant's code can read the "
    "state directory {state} (the broker's database, other tenants' working directories) and "
    "signal the broker. Use sandbox: auto (bubblewrap, or an unprivileged user as root)."
)


class SandboxError(FairbrokerError):
    """The requested sandbox cannot be set up on this host; the message says why."""


@dataclass(frozen=True)
class SandboxConfig:
    """The operator's choice (`fairbroker serve --sandbox`, `sandbox_user`, `sandbox_hide`)."""

    mode: SandboxMode = "none"
    user: str = "nobody"  # executors' user when the broker runs as root
    state_dir: Path | None = None  # hidden (bwrap) or closed (user) to executors
    hide: tuple[Path, ...] = ()  # more paths executors must not see (bwrap)
    nofile: int = 65536  # open files per executor process
    # processes and threads of the executors' user (RLIMIT_NPROC counts all of that user's,
    # every executor's together: a backstop against a fork bomb, not a per-executor share)
    nproc: int = 16384
    cgroups: bool = True  # per-executor cgroup limits where the broker may create cgroups
    # the cpu controller (docs/security.md, Resource limits): "shares" weighs each executor
    # by its cores (proportional, work-conserving), "quota" also caps it at them, "off" not
    cpu: CpuMode = "shares"
    pids: int = 4096  # processes and threads per executor (cgroup pids controller)
    bwrap: str = "bwrap"


@dataclass(frozen=True)
class Sandbox:
    """The sandbox chosen for this host; `wrap` and `popen_options` apply it to a launch."""

    kind: Literal["bwrap", "user", "none"]
    config: SandboxConfig = field(default_factory=SandboxConfig)
    uid: int | None = None  # None: the broker's own user
    gid: int | None = None
    user_name: str | None = None
    bwrap_path: str | None = None
    # warnings for the log once the broker starts (not at construction, so that a start
    # refused for another reason stays one line)
    notes: tuple[str, ...] = ()

    @property
    def wraps(self) -> bool:
        """Is the tracked process bubblewrap (signals go to the processes inside)?"""
        return self.kind == "bwrap"

    def describe(self) -> str:
        who = self.user_name or _current_user()
        if self.kind == "bwrap":
            return f"bwrap (own PID/IPC/UTS namespaces, state dir hidden) as {who}"
        if self.kind == "user":
            return f"user {who} (no namespaces: tenants share that user)"
        return f"NONE: executors run as {who} beside the broker"

    # ---- directories -----------------------------------------------------------------
    def protect_state(self) -> None:
        """Under `user` (and bwrap run as another user): the state directory lets the
        sandbox user pass through to its working directory but not list or read anything."""
        state = self.config.state_dir
        if self.uid is None or state is None or not state.is_dir():
            return
        state.chmod(0o711)
        for entry in state.iterdir():
            if entry.is_file() and not entry.is_symlink():
                entry.chmod(stat.S_IMODE(entry.stat().st_mode) & 0o700)

    def prepare(self, directory: Path, top: Path) -> None:
        """An executor's working directory (and its private tmp under bwrap), owned by the
        sandbox user; every directory from `top` down to it traversable, not listable."""
        (directory / "tmp").mkdir(parents=True, exist_ok=True)
        if self.uid is None:
            return
        for relative in reversed(directory.relative_to(top).parents):
            (top / relative).chmod(0o711)
        for path in (directory, directory / "tmp"):
            os.chown(path, self.uid, self.gid if self.gid is not None else -1)
            path.chmod(0o700)
        _check_reachable(directory, self.uid, self.gid, "the state directory")

    def check_reachable(self, path: Path, what: str) -> None:
        """SandboxError unless the sandbox user may pass every directory above `path`."""
        if self.uid is not None:
            _check_reachable(path, self.uid, self.gid, what)

    def own(self, path: Path) -> None:
        if self.uid is not None:
            os.chown(path, self.uid, self.gid if self.gid is not None else -1)

    # ---- the launch ----------------------------------------------------------------------
    def environment(self, directory: Path) -> dict[str, str]:
        """What the backend sets beside the executor's allowed environment."""
        if self.kind == "none":
            return {}
        tmp = "/tmp" if self.kind == "bwrap" else str(directory / "tmp")
        env = {"HOME": str(directory), "TMPDIR": tmp}
        if self.user_name:
            env["USER"] = self.user_name
        return env

    def wrap(self, argv: Sequence[str], directory: Path, keep: Sequence[Path]) -> list[str]:
        """The command line that runs `argv` in this sandbox with `directory` as its
        working directory; `keep` are read-only paths it needs (Spark's home) even where a
        hidden path or the private /tmp covers them."""
        if self.kind == "none":
            return list(argv)
        nofile = _within_hard(resource.RLIMIT_NOFILE, self.config.nofile)
        nproc = _within_hard(resource.RLIMIT_NPROC, self.config.nproc)
        limited = [
            "prlimit", "--core=0", f"--nofile={nofile}", f"--nproc={nproc}",
            "--", *argv,
        ]  # fmt: skip
        if self.kind == "user":
            return limited
        assert self.bwrap_path is not None
        out = [
            self.bwrap_path,
            "--unshare-user-try", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--bind", str(directory / "tmp"), "/tmp",
        ]  # fmt: skip
        hidden = [p for p in self._hidden() if p.is_dir()]
        for path in self._hidden():
            if path.is_dir():
                out += ["--tmpfs", str(path)]
            elif path.exists():
                out += ["--ro-bind", "/dev/null", str(path)]
        for path in keep:
            out += ["--ro-bind-try", str(path), str(path)]
        out += ["--bind", str(directory), str(directory), "--chdir", str(directory)]
        for path in hidden:  # empty and read-only, once the mount points in it exist
            out += ["--remount-ro", str(path)]
        return [*out, "--", *limited]

    def popen_options(self) -> dict[str, Any]:
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": [], "umask": 0o077}

    def _hidden(self) -> list[Path]:
        paths = [self.config.state_dir, *self.config.hide]
        return [Path(p).resolve() for p in paths if p is not None]


def _within_hard(which: int, wanted: int) -> int:
    """`wanted`, or the broker's hard limit if lower (an unprivileged broker cannot raise it)."""
    hard = resource.getrlimit(which)[1]
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)


def _current_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def _check_reachable(directory: Path, uid: int, gid: int | None, what: str) -> None:
    """Every ancestor of `directory` must let the sandbox user pass (o+x, or its owner)."""
    for parent in directory.resolve().parents:
        st = parent.stat()
        ok = st.st_mode & stat.S_IXOTH or (st.st_uid == uid and st.st_mode & stat.S_IXUSR)
        ok = ok or (gid is not None and st.st_gid == gid and st.st_mode & stat.S_IXGRP)
        if not ok:
            raise SandboxError(
                f"sandbox: {parent} is not traversable by the sandbox user (uid {uid}); put "
                f"{what} where every parent directory has o+x"
            )


def probe_bwrap(path: str | None, options: dict[str, Any]) -> str | None:
    """None when bubblewrap can build the sandbox here (as the sandbox user), else why not."""
    if path is None:
        return "bwrap is not installed (Debian package bubblewrap; make system-deps)"
    argv = [
        path, "--unshare-user-try", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
        "--", "true",
    ]  # fmt: skip
    try:
        done = subprocess.run(
            argv, cwd="/", capture_output=True, timeout=PROBE_SECONDS, check=False, **options
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap failed to start: {error}"
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip().splitlines()
        return f"bwrap cannot build a sandbox here: {reason[-1] if reason else done.returncode}"
    return None


def resolve_sandbox(config: SandboxConfig) -> Sandbox:
    """The sandbox `config.mode` asks for, or the strongest this host offers for `auto`;
    SandboxError when an explicit mode is not available."""
    if config.mode not in SANDBOX_MODES:
        raise SandboxError(f"sandbox: {config.mode!r} is not one of {', '.join(SANDBOX_MODES)}")
    if config.mode == "none":
        return _none(config)
    root = os.geteuid() == 0
    uid = gid = name = None
    if root:
        try:
            entry = pwd.getpwnam(config.user)
        except KeyError:
            raise SandboxError(
                f"sandbox_user: no user {config.user!r} on this host (create one, e.g. "
                "`useradd --system --no-create-home fairbroker-exec`, or use nobody)"
            ) from None
        if entry.pw_uid == 0:
            raise SandboxError(f"sandbox_user: {config.user!r} is root; give an unprivileged user")
        uid, gid, name = entry.pw_uid, entry.pw_gid, entry.pw_name
    if config.mode == "user" and not root:
        raise SandboxError(
            "sandbox: user needs the broker to run as root (to start executors as another "
            "user); use bwrap"
        )
    options = {"user": uid, "group": gid, "extra_groups": []} if root else {}
    notes: tuple[str, ...] = ()
    if config.mode in ("auto", "bwrap"):
        found = shutil.which(config.bwrap)
        why = probe_bwrap(found, options)
        if why is None:
            return Sandbox("bwrap", config, uid, gid, name, found)
        if config.mode == "bwrap":
            raise SandboxError(f"sandbox: {why}")
        notes = (f"sandbox: {why}",)
    if root:
        return Sandbox("user", config, uid, gid, name, notes=notes)
    return _none(config, notes)


def _none(config: SandboxConfig, notes: tuple[str, ...] = ()) -> Sandbox:
    warning = NONE_WARNING.format(user=_current_user(), state=config.state_dir)
    return Sandbox("none", config, notes=(*notes, warning))
