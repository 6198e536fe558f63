"""Per-executor demand vector and executor count from a Spark conf.

One executor is one task in the schedulers' sense. Its demand is
  cpus = spark.executor.cores (default 1)
  mem  = heap + overhead [+ off-heap if enabled] [+ PySpark memory if set]   (MiB)
with heap = spark.executor.memory (default 1g) and overhead = spark.executor.memoryOverhead
(or spark.mesos.executor.memoryOverhead) if set, else
max(spark.executor.minMemoryOverhead (384 MiB), spark.executor.memoryOverheadFactor (0.10) x heap),
which is what Spark's Mesos backend asks for in 3.5 and its YARN/K8s backends in 4.x.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from allocator.errors import FairbrokerError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b)?\s*$", re.IGNORECASE)
_TO_MIB = {"b": 1 / 1024**2, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2, "p": 1024**3}


class SparkConfError(FairbrokerError):
    """A Spark conf value the demand cannot be derived from."""


def size_mib(value: str | int | float, key: str, default_unit: str = "m") -> float:
    """Spark size string ("512m", "4g", "1536") in MiB; a bare number is in `default_unit`."""
    text = str(value).strip()
    match = _SIZE.match(text)
    if not match:
        raise SparkConfError(f"{key}: not a size: {value!r}")
    number, unit, byte_suffix = float(match.group(1)), match.group(2).lower(), match.group(3)
    if not unit:
        unit = "b" if byte_suffix else default_unit
    return number * _TO_MIB[unit]


def _number(conf: Mapping[str, object], key: str, default: float) -> float:
    raw = conf.get(key, default)
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SparkConfError(f"{key}: not a number: {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise SparkConfError(f"{key}: must be a finite non-negative number, got {raw!r}")
    return value


def _flag(conf: Mapping[str, object], key: str) -> bool:
    return str(conf.get(key, "false")).strip().lower() == "true"


@dataclass(frozen=True)
class ExecutorDemand:
    cpus: float
    mem_mib: float
    heap_mib: float
    overhead_mib: float
    min_executors: int
    max_executors: int  # the target for static allocation
    initial_executors: int
    dynamic: bool

    def vector(self) -> dict[str, float]:
        return {"cpus": self.cpus, "mem": self.mem_mib}


def executor_demand(
    conf: Mapping[str, object], max_when_unbounded: int = 1_000_000
) -> ExecutorDemand:
    """Demand vector and executor counts from a Spark conf (keys as in spark-defaults)."""
    cores = _number(conf, "spark.executor.cores", 1)
    if cores <= 0:
        raise SparkConfError("spark.executor.cores: must be positive")
    heap = size_mib(conf.get("spark.executor.memory", "1g"), "spark.executor.memory")
    if heap <= 0:
        raise SparkConfError("spark.executor.memory: must be positive")
    overhead_key = next(
        (
            k
            for k in ("spark.executor.memoryOverhead", "spark.mesos.executor.memoryOverhead")
            if k in conf
        ),
        None,
    )
    if overhead_key is not None:
        overhead = size_mib(conf[overhead_key], overhead_key)
    else:
        minimum = size_mib(
            conf.get("spark.executor.minMemoryOverhead", "384m"), "spark.executor.minMemoryOverhead"
        )
        factor = _number(conf, "spark.executor.memoryOverheadFactor", 0.10)
        overhead = max(minimum, math.floor(factor * heap))
    extra = 0.0
    if _flag(conf, "spark.memory.offHeap.enabled"):
        # Spark reads a bare off-heap size as bytes (every other size here as MiB).
        extra += size_mib(
            conf.get("spark.memory.offHeap.size", "0"), "spark.memory.offHeap.size", "b"
        )
    if "spark.executor.pyspark.memory" in conf:
        extra += size_mib(conf["spark.executor.pyspark.memory"], "spark.executor.pyspark.memory")

    dynamic = _flag(conf, "spark.dynamicAllocation.enabled")
    if dynamic:
        low = int(_number(conf, "spark.dynamicAllocation.minExecutors", 0))
        high_raw = conf.get("spark.dynamicAllocation.maxExecutors")
        high = (
            int(_number(conf, "spark.dynamicAllocation.maxExecutors", 0))
            if high_raw is not None
            else max_when_unbounded
        )
        initial = int(_number(conf, "spark.dynamicAllocation.initialExecutors", low))
        initial = (
            int(_number(conf, "spark.executor.instances", initial))
            if "spark.executor.instances" in conf
            else initial
        )
        if high < low:
            raise SparkConfError("spark.dynamicAllocation.maxExecutors: below minExecutors")
        initial = min(max(initial, low), high)
    else:
        if "spark.executor.instances" in conf:
            high = int(_number(conf, "spark.executor.instances", 0))
        elif "spark.cores.max" in conf:
            high = int(_number(conf, "spark.cores.max", 0) // cores)
        else:
            high = max_when_unbounded
        low = initial = high
    return ExecutorDemand(
        cpus=cores,
        mem_mib=heap + overhead + extra,
        heap_mib=heap,
        overhead_mib=overhead,
        min_executors=low,
        max_executors=high,
        initial_executors=initial,
        dynamic=dynamic,
    )
