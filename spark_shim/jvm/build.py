"""Build the Spark plugin jar with javac against the installed pyspark's jars.

The one Java source tree serves Scala 2.12 (Spark 3.5) and 2.13 (Spark 4.x): the only
difference, the Seq type of doKillExecutors, is substituted before compiling. The jar is
cached under spark_shim/jvm/build/ and rebuilt only when a source is newer than it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from allocator.errors import FairbrokerError

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"
BUILD_DIR = HERE / "build"
SERVICE = "META-INF/services/org.apache.spark.scheduler.ExternalClusterManager"
# The sources are written for 2.13; this marked type is swapped for the 2.12 one.
SEQ_MARKER = "/*SCALA_SEQ*/scala.collection.immutable.Seq"
SEQ_TYPE = {"2.12": "scala.collection.Seq", "2.13": "scala.collection.immutable.Seq"}

_SCALA_LIBRARY = re.compile(r"^scala-library-(2\.1[23])\.\d+\.jar$")
_SPARK_CORE = re.compile(r"^spark-core_(2\.1[23])-(.+)\.jar$")


class PluginBuildError(FairbrokerError):
    """The plugin jar cannot be built (no JDK, no Spark jars, compile error)."""


@dataclass(frozen=True)
class SparkInstall:
    home: Path
    version: str
    scala: str  # binary version, "2.12" or "2.13"


def default_spark_home() -> Path:
    """SPARK_HOME of the installed pyspark package."""
    try:
        import pyspark
    except ImportError:
        raise PluginBuildError("pyspark is not installed: pip install pyspark") from None
    return Path(pyspark.__file__).resolve().parent


def detect_spark(spark_home: Path) -> SparkInstall:
    """Spark and Scala binary versions from the file names in SPARK_HOME/jars."""
    jars = spark_home / "jars"
    if not jars.is_dir():
        raise PluginBuildError(f"no Spark jars in {jars}")
    names = [p.name for p in jars.iterdir()]
    scala = next((m.group(1) for n in names if (m := _SCALA_LIBRARY.match(n))), None)
    core = next((m for n in names if (m := _SPARK_CORE.match(n))), None)
    if scala is None or core is None:
        raise PluginBuildError(f"no scala-library or spark-core jar in {jars}")
    if core.group(1) != scala:
        raise PluginBuildError(f"{core.group(0)} does not match scala-library {scala} in {jars}")
    return SparkInstall(home=spark_home, version=core.group(2), scala=scala)


def _javac() -> str:
    java_home = os.environ.get("JAVA_HOME")
    candidates = [shutil.which("javac")]
    if java_home:
        candidates.append(str(Path(java_home) / "bin" / "javac"))
    found = next((c for c in candidates if c and os.access(c, os.X_OK)), None)
    if found is None:
        raise PluginBuildError("javac not found (PATH or JAVA_HOME): install a JDK 17 or newer")
    return found


def _sources() -> list[Path]:
    return sorted(p for p in SOURCES.rglob("*") if p.is_file())


def _is_fresh(jar: Path) -> bool:
    if not jar.exists():
        return False
    newest = max(p.stat().st_mtime for p in [*_sources(), Path(__file__)])
    return jar.stat().st_mtime >= newest


def _compile(spark: SparkInstall, work: Path) -> Path:
    """javac the substituted sources into work/classes; returns that directory."""
    src, classes = work / "src", work / "classes"
    java_files = []
    for path in _sources():
        if path.suffix != ".java":
            continue
        text = path.read_text()
        target = src / path.relative_to(SOURCES)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text.replace(SEQ_MARKER, SEQ_TYPE[spark.scala]))
        java_files.append(str(target))
    classpath = str(spark.home / "jars" / "*")
    command = [_javac(), "--release", "17", "-nowarn", "-cp", classpath, "-d", str(classes)]
    done = subprocess.run([*command, *java_files], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.strip()][:20]
        raise PluginBuildError(
            f"javac failed against Spark {spark.version} (Scala {spark.scala}): "
            + " | ".join(errors)
        )
    return classes


def _write_jar(classes: Path, jar: Path, spark: SparkInstall) -> None:
    manifest = (
        "Manifest-Version: 1.0\n"
        "Created-By: fairbroker spark_shim.jvm.build\n"
        f"X-Spark-Version: {spark.version}\nX-Scala-Version: {spark.scala}\n\n"
    )
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("META-INF/MANIFEST.MF", manifest)
        out.write(SOURCES / SERVICE, SERVICE)
        for path in sorted(classes.rglob("*.class")):
            out.write(path, path.relative_to(classes).as_posix())


def plugin_jar(spark_home: Path | None = None) -> Path:
    """The plugin jar for the given (default: the installed pyspark's) Spark, built if stale."""
    spark = detect_spark(Path(spark_home) if spark_home else default_spark_home())
    jar = BUILD_DIR / f"fairbroker-spark-{spark.version}.jar"
    if _is_fresh(jar):
        return jar
    if SEQ_MARKER not in (SOURCES / "fairbroker/spark/BrokerSchedulerBackend.java").read_text():
        raise PluginBuildError(f"{SEQ_MARKER!r} missing from BrokerSchedulerBackend.java")
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD_DIR, prefix=".build-") as tmp:
        work = Path(tmp)
        staged = work / jar.name
        _write_jar(_compile(spark, work), staged, spark)
        os.replace(staged, jar)  # atomic, so concurrent builders never see half a jar
    return jar


def main() -> None:
    try:
        print(plugin_jar(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
    except FairbrokerError as error:
        print(f"fairbroker: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
