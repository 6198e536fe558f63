"""WordCount on Spark: `spark-submit wordcount.py INPUT OUTPUT [--partitions N] [--top K]`.

Splits lines on whitespace (str.split), counts with flatMap/reduceByKey over N partitions and
writes JSON {"total", "distinct", "top": [[word, count], ...]} to OUTPUT, the K most frequent
words (all of them with --top 0), ties by word. The last line printed is
`RESULT words=<total> distinct=<distinct>`.

`--task-seconds S` (emulated work, docs/emulation.md): each task of the counting stage lasts
at least S seconds of wall time, sleeping out what its words did not use, so a job's run time
follows the task slots (emulated cores) it holds rather than the real CPUs of the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from operator import add
from pathlib import Path


def count_padded(lines: Iterable[str], task_seconds: float) -> Iterator[tuple[str, int]]:
    """(word, count) of one partition's lines, after at least `task_seconds` of wall time."""
    start = time.monotonic()
    counts: dict[str, int] = {}
    for line in lines:
        for word in line.split():
            counts[word] = counts.get(word, 0) + 1
    rest = task_seconds - (time.monotonic() - start)
    if rest > 0:
        time.sleep(rest)
    return iter(counts.items())


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="WordCount on Spark")
    parser.add_argument("input", help="text file (a local path or any URI Spark reads)")
    parser.add_argument("output", type=Path, help="JSON file written by the driver")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--top", type=int, default=20, help="words listed; 0 lists all")
    parser.add_argument(
        "--task-seconds", type=float, default=0.0,
        help="emulated work: each counting task lasts at least this many seconds (default 0)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.partitions < 1 or args.top < 0:
        parser.error("--partitions must be at least 1 and --top at least 0")
    if not 0 <= args.task_seconds < 3600:
        parser.error("--task-seconds must be in [0, 3600)")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    task_seconds = args.task_seconds
    try:
        lines = spark.sparkContext.textFile(args.input, minPartitions=args.partitions)
        if task_seconds > 0:
            pairs = lines.mapPartitions(lambda part: count_padded(part, task_seconds))
        else:
            pairs = lines.flatMap(str.split).map(lambda word: (word, 1))
        counts = pairs.reduceByKey(add, numPartitions=args.partitions).collect()
    finally:
        spark.stop()
    counts.sort(key=lambda item: (-item[1], item[0]))
    total = sum(count for _, count in counts)
    top = counts if args.top == 0 else counts[: args.top]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"total": total, "distinct": len(counts), "top": top}))
    print(f"RESULT words={total} distinct={len(counts)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
