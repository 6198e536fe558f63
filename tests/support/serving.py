"""`fairbroker serve` (or any broker-like process) as a test's subprocess: started, its
ports read from its log line, and stopped the way an operator would (SIGTERM, then a kill
only if it does not exit in time)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

STOP_GRACE_SECONDS = 30.0
_SERVING = re.compile(r"serving on http://[\d.]+:(\d+) .* gRPC [\d.]+:(\d+)")


def stop_gracefully(process: subprocess.Popen, grace: float = STOP_GRACE_SECONDS) -> int | None:
    """SIGTERM `process`, wait up to `grace` s for it to exit, else SIGKILL it; always reaped.
    Its exit status after the SIGTERM, or None when it had to be killed (or had already
    exited: then its status)."""
    if process.poll() is not None:
        return process.returncode
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace)
        return None


def start_serve(
    args: list[str], workdir: Path, timeout: float = 120.0, **popen
) -> tuple[subprocess.Popen, int, int, Path]:
    """`fairbroker serve ARGS` with its stderr in workdir/serve.err: (process, HTTP port,
    gRPC port, that file) once it says it serves; killed and the test failed with its log
    if it exits or does not serve within `timeout` s (generous: a loaded machine)."""
    import pytest

    err = workdir / "serve.err"
    command = [sys.executable, "-c", "from allocator.cli import main; main()", "serve", *args]
    with open(err, "w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, **popen)
    deadline = time.monotonic() + timeout
    while (found := _SERVING.search(err.read_text())) is None:
        if time.monotonic() > deadline or process.poll() is not None:
            stop_gracefully(process, grace=5)
            pytest.fail(f"serve did not start: {err.read_text()[-3000:]}")
        time.sleep(0.05)
    http_port, grpc_port = (int(p) for p in found.groups())
    return process, http_port, grpc_port, err
