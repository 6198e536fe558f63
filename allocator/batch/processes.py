"""Driver processes started by a batch, each in its own process group, so that a job's whole
tree (spark-submit's shell, the SparkSubmit JVM, the Python driver) can be stopped at once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import IO

GRACE_SECONDS = 10.0


class ProcessesClosed(Exception):
    """start() after close(): the batch is being torn down."""


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is empty
        os.killpg(pgid, sig)


def stop_group(process: subprocess.Popen[bytes], grace: float = GRACE_SECONDS) -> None:
    """SIGTERM the process's group, SIGKILL it after `grace` seconds, and reap the leader.

    Also run after a normal exit: members left behind by the leader are killed too.
    """
    if process.poll() is None:
        _signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
    _signal_group(process.pid, signal.SIGKILL)
    # A leader that survives SIGKILL (uninterruptible sleep) is beyond our reach.
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)


class DriverProcesses:
    """Thread-safe registry of the driver processes still running."""

    def __init__(self, grace: float = GRACE_SECONDS) -> None:
        self.grace = grace
        self._live: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def start(
        self, argv: Sequence[str], env: Mapping[str, str], log: IO[bytes]
    ) -> subprocess.Popen[bytes]:
        with self._lock:  # no process may start once close() has begun
            if self._closed:
                raise ProcessesClosed
            process = subprocess.Popen(
                list(argv),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self._live.add(process)
            return process

    def finish(self, process: subprocess.Popen[bytes]) -> None:
        """Stop what is left of the process's group and forget it."""
        stop_group(process, self.grace)
        with self._lock:
            self._live.discard(process)

    def close(self) -> None:
        """Refuse new processes and stop every live one."""
        with self._lock:
            self._closed = True
            live = list(self._live)
        for process in live:
            if process.poll() is None:
                _signal_group(process.pid, signal.SIGTERM)
        for process in live:
            self.finish(process)
