"""Helpers for the tests that run real Spark drivers and executors through the broker."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from spark_shim.submit import spark_submit_command
from support.processes import processes

HERE = Path(__file__).resolve().parents[1]  # tests/
HOSTS_JOB = HERE / "spark_apps" / "hosts_job.py"
QUIET_CONF = {"spark.ui.enabled": "false", "spark.log.level": "WARN"}


def executor_processes(marker: str, jvms_only: bool = False) -> list[int]:
    """Pids of Spark executors whose command line or working directory mentions `marker`.

    While an executor starts, `spark-class` (bash) and Spark's launcher JVM
    (org.apache.spark.launcher.Main) also carry the executor's class in their command lines;
    `jvms_only` leaves those out and counts the executor JVMs alone."""
    pids = []
    for entry, cmdline, cwd in processes():
        mentioned = marker in cmdline or marker in cwd
        if "CoarseGrainedExecutorBackend" not in cmdline or not mentioned:
            continue
        if jvms_only and ("org.apache.spark.launcher.Main" in cmdline or not _is_java(entry)):
            continue
        pids.append(int(entry.name))
    return pids


def _is_java(entry: Path) -> bool:
    try:
        return Path(os.readlink(entry / "exe")).name == "java"
    except OSError:
        return False


class Driver:
    """A Spark driver (spark-submit) running through the broker as a subprocess.

    Every driver started is remembered until it is killed, so a test that fails before
    waiting for its driver does not leak it (`kill_all_drivers`, run after every test)."""

    started: set[Driver] = set()  # noqa: RUF012 (the registry is shared on purpose)

    def __init__(
        self,
        broker: str,
        app_args: list[str],
        *,
        workdir: Path,
        name: str,
        group: str = "*",
        conf: dict[str, str] | None = None,
        oblivious: bool = False,
        token: str | None = None,
    ) -> None:
        plan = spark_submit_command(
            app_args,
            broker=broker,
            group=group,
            oblivious=oblivious,
            token=token,
            conf={**QUIET_CONF, **(conf or {})},
        )
        self.demand = plan.demand
        self.log = workdir / f"{name}.log"
        self._out = open(self.log, "wb")  # noqa: SIM115 (closed in wait/kill)
        self.process = subprocess.Popen(
            plan.argv,
            env={**plan.env, "PYSPARK_PYTHON": sys.executable},
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=workdir,
        )
        Driver.started.add(self)

    def wait(self, timeout: float = 240) -> tuple[int, dict]:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"driver {self.log.name} still running after {timeout:.0f} s; its output:\n"
                f"{self.output()}"
            ) from None
        finally:
            self.kill()
        result = {}
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("RESULT {"):
                result = json.loads(line.removeprefix("RESULT "))
        return code, result

    def kill(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self._out.close()
        Driver.started.discard(self)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def kill_all_drivers() -> None:
    for driver in list(Driver.started):
        driver.kill()
