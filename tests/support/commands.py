"""The `fairbroker` command in tests: run it as a user does, in a real subprocess, and check
that a usage error is one line."""

from __future__ import annotations

import subprocess
import sys


def run_fairbroker(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The `fairbroker` command as a user runs it, in a real subprocess."""
    return subprocess.run(
        [sys.executable, "-c", "from allocator.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def one_line_error(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    """Exit 2, nothing on stdout, exactly one `fairbroker: error:` line on stderr."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("fairbroker: error: "), lines[0]
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]
