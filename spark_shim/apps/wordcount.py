"""WordCount on Spark: `spark-submit wordcount.py INPUT OUTPUT [--partitions N] [--top K]`.

Splits lines on whitespace (str.split), counts with flatMap/reduceByKey over N partitions and
writes JSON {"total", "distinct", "top": [[word, count], ...]} to OUTPUT, the K most frequent
words (all of them with --top 0), ties by word. The last line printed is
`RESULT words=<total> distinct=<distinct>`.
"""

from __future__ import annotations

import argparse
import json
import sys
from operator import add
from pathlib import Path


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="WordCount on Spark")
    parser.add_argument("input", help="text file (a local path or any URI Spark reads)")
    parser.add_argument("output", type=Path, help="JSON file written by the driver")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--top", type=int, default=20, help="words listed; 0 lists all")
    args = parser.parse_args(argv)
    if args.partitions < 1 or args.top < 0:
        parser.error("--partitions must be at least 1 and --top at least 0")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    try:
        counts = (
            spark.sparkContext.textFile(args.input, minPartitions=args.partitions)
            .flatMap(str.split)
            .map(lambda word: (word, 1))
            .reduceByKey(add, numPartitions=args.partitions)
            .collect()
        )
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
