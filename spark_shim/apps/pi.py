"""Monte-Carlo Pi on Spark: `spark-submit pi.py PARTITIONS SAMPLES [--seed S]`.

Partition i draws SAMPLES points from its own generator seeded with (seed, i), so the answer
does not depend on how tasks land on executors and `count_inside` recomputes it in Python.
The last line printed is `RESULT pi=<estimate> inside=<n> samples=<n>`.

`--task-seconds S` (emulated work, docs/emulation.md): each task lasts at least S seconds of
wall time, sleeping out what its count did not use, so a job's run time follows the task
slots (emulated cores) it holds rather than the real CPUs of the machine.
"""

from __future__ import annotations

import argparse
import random
import sys
import time


def partition_seed(seed: int, index: int) -> int:
    return seed * 1_000_003 + index


def count_inside(seed: int, index: int, samples: int) -> int:
    """Points of partition `index` that fall inside the unit quarter circle."""
    rng = random.Random(partition_seed(seed, index))
    draw = rng.random
    inside = 0
    for _ in range(samples):
        x, y = draw(), draw()
        inside += x * x + y * y <= 1.0
    return inside


def padded(task_seconds: float, work, *args):
    """work(*args), then sleep until `task_seconds` of wall time have passed since the start."""
    start = time.monotonic()
    value = work(*args)
    rest = task_seconds - (time.monotonic() - start)
    if rest > 0:
        time.sleep(rest)
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Monte-Carlo Pi on Spark")
    parser.add_argument("partitions", type=int, help="Spark partitions (tasks)")
    parser.add_argument("samples", type=int, help="points drawn per partition")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--task-seconds", type=float, default=0.0,
        help="emulated work: each task lasts at least this many seconds (default 0: none)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.partitions < 1 or args.samples < 1:
        parser.error("partitions and samples must be at least 1")
    if not 0 <= args.task_seconds < 3600:
        parser.error("--task-seconds must be in [0, 3600)")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    try:
        seed, samples, task_seconds = args.seed, args.samples, args.task_seconds
        inside = (
            spark.sparkContext.parallelize(range(args.partitions), args.partitions)
            .map(lambda i: padded(task_seconds, count_inside, seed, i, samples))
            .sum()
        )
    finally:
        spark.stop()
    total = args.partitions * args.samples
    print(f"RESULT pi={4.0 * inside / total:.10f} inside={inside} samples={total}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
