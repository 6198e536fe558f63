"""Spark's own launcher code, run for the tests of allocator/backends/jvm_options.py: its
option-string splitter (through tests/support/jvm/SparkOptionTokens.java) and the executor
command its `Main` builds from SPARK_EXECUTOR_OPTS."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

HARNESS = Path(__file__).resolve().parent / "jvm" / "SparkOptionTokens.java"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def launcher_jar() -> tuple[Path | None, str]:
    """The spark-launcher jar of the installed pyspark, or None and why not."""
    try:
        import pyspark
    except ImportError:
        return None, "pyspark is not installed"
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("spark-launcher_*.jar"))
    if not jars:
        return None, "pyspark has no spark-launcher jar"
    if shutil.which("java") is None or shutil.which("javac") is None:
        return None, "no java/javac on PATH"
    return jars[-1], ""


def compile_harness(jar: Path, out: Path) -> str:
    """The class path that runs SparkOptionTokens."""
    subprocess.run(
        ["javac", "-d", str(out), "-cp", str(jar), str(HARNESS)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return f"{jar}{os.pathsep}{out}"


def _hex(text: str) -> str:
    data = text.encode("utf-16-be", "surrogatepass")
    return data.hex()


def _unhex(text: str) -> str:
    return bytes.fromhex(text).decode("utf-16-be", "surrogatepass")


class SparkTokenizer:
    """A running SparkOptionTokens: `split(s)` is Spark's parseOptionString(s), or None where
    Spark refuses the string."""

    def __init__(self, classpath: str) -> None:
        self.process = subprocess.Popen(
            ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", classpath,
             "SparkOptionTokens"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="ascii",
        )  # fmt: skip

    def split(self, text: str) -> list[str] | None:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(_hex(text) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().rstrip("\n")
        assert answer, "SparkOptionTokens stopped"
        if answer == "E":
            return None
        return [_unhex(token) for token in answer[1:].split("|")[1:]]

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        if self.process.stdout:
            self.process.stdout.close()


def run_harness(classpath: str, mode: str) -> str:
    return subprocess.run(
        ["java", "-cp", classpath, "SparkOptionTokens", mode],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip


def executor_command(jar: Path, executor_opts: str, lang: str = "C.UTF-8") -> list[str]:
    """The executor command Spark's launcher (`spark-class`'s first step) builds with
    SPARK_EXECUTOR_OPTS set to `executor_opts` in locale `lang`; printed, never run."""
    home = jar.parent.parent
    scala = jar.stem.split("_")[1].split("-")[0]  # spark-launcher_2.13-4.3.0
    env = {"PATH": os.environ["PATH"], "SPARK_HOME": str(home), "SPARK_SCALA_VERSION": scala,
           "SPARK_EXECUTOR_OPTS": executor_opts, "LANG": lang}  # fmt: skip
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    done = subprocess.run(
        ["java", "-cp", str(jar), "org.apache.spark.launcher.Main", EXECUTOR_CLASS],
        env=env, capture_output=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return [arg.decode("utf-8", "surrogateescape") for arg in done.stdout.split(b"\0") if arg]


def tenant_part(command: list[str]) -> list[str]:
    """The arguments SPARK_EXECUTOR_OPTS contributed: between the class path and the -Xmx
    Spark adds after them."""
    start = command.index("-cp") + 2
    end = max(i for i, arg in enumerate(command) if arg.startswith("-Xmx"))
    return command[start:end]
