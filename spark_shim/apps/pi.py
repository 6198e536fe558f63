"""Monte-Carlo Pi on Spark: `spark-submit pi.py PARTITIONS SAMPLES [--seed S]`.

Partition i draws SAMPLES points from its own generator seeded with (seed, i), so the answer
does not depend on how tasks land on executors and `count_inside` recomputes it in Python.
The last line printed is `RESULT pi=<estimate> inside=<n> samples=<n>`.
"""

from __future__ import annotations

import argparse
import random
import sys


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


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Monte-Carlo Pi on Spark")
    parser.add_argument("partitions", type=int, help="Spark partitions (tasks)")
    parser.add_argument("samples", type=int, help="points drawn per partition")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.partitions < 1 or args.samples < 1:
        parser.error("partitions and samples must be at least 1")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    try:
        seed, samples = args.seed, args.samples
        inside = (
            spark.sparkContext.parallelize(range(args.partitions), args.partitions)
            .map(lambda i: count_inside(seed, i, samples))
            .sum()
        )
    finally:
        spark.stop()
    total = args.partitions * args.samples
    print(f"RESULT pi={4.0 * inside / total:.10f} inside={inside} samples={total}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
