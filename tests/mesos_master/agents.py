"""Local agents: run a TaskInfo's command as the Mesos command executor would.

Each task runs in its own process group and sandbox
(`<root>/slaves/<agent>/frameworks/<framework>/executors/<task>/runs/<container>`), with
`stdout` and `stderr` files there. A kill sends SIGTERM to the group and SIGKILL after the
grace period (3 s unless the kill policy says otherwise), as `src/launcher/executor.cpp`
does; when the command exits, whatever is left in its group is killed, as the container's
destruction would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_KILL_GRACE_S = 3.0
FETCH_TIMEOUT_S = 60.0
_LOOPBACK_PREFIX = "127."


@dataclass
class Launch:
    framework_id: str
    task_id: str
    agent_id: str
    command: dict[str, Any]


@dataclass
class Exit:
    framework_id: str
    task_id: str
    returncode: int
    killed: bool

    @property
    def message(self) -> str:
        if self.returncode >= 0:
            return f"Command exited with status {self.returncode}"
        return f"Command terminated with signal {signal.strsignal(-self.returncode)}"


@dataclass
class _Running:
    launch: Launch
    popen: subprocess.Popen[bytes]
    sandbox: Path
    kill_deadline: float | None = None


class LaunchError(Exception):
    pass


def _close_quietly(*files: Any) -> None:
    for f in files:
        f.close()


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class LocalAgent:
    def __init__(self, agent_id: str, hostname: str, root: Path) -> None:
        self.agent_id = agent_id
        self.hostname = hostname
        self.root = root
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], _Running] = {}
        self._sandboxes: dict[tuple[str, str], Path] = {}

    def sandbox(self, framework_id: str, task_id: str) -> Path | None:
        with self._lock:
            return self._sandboxes.get((framework_id, task_id))

    def _environment(self, launch: Launch, sandbox: Path) -> dict[str, str]:
        env = dict(os.environ)  # executors inherit the agent's environment by default
        env.update({
            "MESOS_SANDBOX": str(sandbox), "MESOS_DIRECTORY": str(sandbox),
            "MESOS_FRAMEWORK_ID": launch.framework_id, "MESOS_EXECUTOR_ID": launch.task_id,
            "MESOS_TASK_ID": launch.task_id, "MESOS_AGENT_ID": launch.agent_id,
            "MESOS_SLAVE_ID": launch.agent_id, "HOST": self.hostname,
        })  # fmt: skip
        for variable in launch.command.get("environment", {}).get("variables", []):
            if variable.get("type", "VALUE") == "VALUE":
                env[variable["name"]] = variable.get("value", "")
        return env

    def _fetch(self, uris: list[dict[str, Any]], sandbox: Path) -> None:
        for uri in uris:
            source = uri["value"]
            parsed = urllib.parse.urlparse(source)
            name = uri.get("output_file") or os.path.basename(parsed.path) or "download"
            target = sandbox / name
            if parsed.scheme in ("", "file"):
                shutil.copyfile(parsed.path if parsed.scheme else source, target)
            elif parsed.scheme in ("http", "https") and (parsed.hostname or "").startswith(
                _LOOPBACK_PREFIX
            ):
                with urllib.request.urlopen(source, timeout=FETCH_TIMEOUT_S) as answer:
                    target.write_bytes(answer.read())
            else:
                raise LaunchError(f"the test agent fetches local and loopback URIs only: {source}")
            if uri.get("executable", False):
                target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            elif uri.get("extract", True):
                # Not an archive: the fetcher leaves it as it is.
                with contextlib.suppress(shutil.ReadError, ValueError):
                    shutil.unpack_archive(target, sandbox)

    def launch(self, launch: Launch) -> None:
        """Start the command; raises LaunchError when the container cannot start."""
        container = str(uuid.uuid4())
        sandbox = (
            self.root / "slaves" / self.agent_id / "frameworks" / launch.framework_id
            / "executors" / launch.task_id / "runs" / container
        )  # fmt: skip
        sandbox.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._sandboxes[(launch.framework_id, launch.task_id)] = sandbox
        command = launch.command
        try:
            self._fetch(command.get("uris", []), sandbox)
        except (OSError, LaunchError) as exc:
            message = f"Failed to fetch all URIs for container '{container}': {exc}"
            raise LaunchError(message) from None
        value = command.get("value")
        if value is None:
            raise LaunchError("Shell command of task is not specified")
        if command.get("shell", True):
            argv, executable = ["/bin/sh", "-c", value], None
        else:
            argv, executable = list(command.get("arguments") or [value]), value
        stdout = (sandbox / "stdout").open("ab")
        stderr = (sandbox / "stderr").open("ab")
        try:
            popen = subprocess.Popen(
                argv, executable=executable, cwd=sandbox, env=self._environment(launch, sandbox),
                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True,
            )
        except OSError as exc:
            raise LaunchError(f"Failed to launch container: {exc}") from None
        finally:
            _close_quietly(stdout, stderr)
        with self._lock:
            self._running[(launch.framework_id, launch.task_id)] = _Running(launch, popen, sandbox)

    def kill(self, framework_id: str, task_id: str, grace_s: float = DEFAULT_KILL_GRACE_S) -> bool:
        """SIGTERM now, SIGKILL after `grace_s`; a later kill may only shorten the grace."""
        with self._lock:
            running = self._running.get((framework_id, task_id))
            if running is None:
                return False
            deadline = time.monotonic() + max(0.0, grace_s)
            if running.kill_deadline is None:
                _signal_group(running.popen.pid, signal.SIGTERM)
                running.kill_deadline = deadline
            else:
                running.kill_deadline = min(running.kill_deadline, deadline)
            return True

    def is_running(self, framework_id: str, task_id: str) -> bool:
        with self._lock:
            return (framework_id, task_id) in self._running

    def poll(self) -> list[Exit]:
        exits = []
        now = time.monotonic()
        with self._lock:
            for key, running in list(self._running.items()):
                code = running.popen.poll()
                if code is None:
                    if running.kill_deadline is not None and now >= running.kill_deadline:
                        _signal_group(running.popen.pid, signal.SIGKILL)
                    continue
                _signal_group(running.popen.pid, signal.SIGKILL)
                del self._running[key]
                exits.append(Exit(key[0], key[1], code, running.kill_deadline is not None))
        return exits

    def lose(self) -> None:
        """The agent vanished: its processes die with it and nothing is reported."""
        with self._lock:
            running = list(self._running.values())
            self._running.clear()
        for r in running:
            _signal_group(r.popen.pid, signal.SIGKILL)
        for r in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                r.popen.wait(timeout=5)

    def stop(self, grace_s: float = 2.0) -> None:
        with self._lock:
            running = list(self._running.values())
            self._running.clear()
        for r in running:
            _signal_group(r.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for r in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                r.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            _signal_group(r.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                r.popen.wait(timeout=5)
