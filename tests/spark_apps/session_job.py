"""A driver that builds its SparkSession in Python through the shim (no spark-submit).

`session_job.py BROKER_HOST:PORT` prints `RESULT {"sum": ...}`.
"""

import json
import sys

from pyspark.sql import SparkSession

from spark_shim.submit import configure_session


def main() -> int:
    builder = configure_session(SparkSession.builder.appName("session-job"), sys.argv[1],
                                group="python")  # fmt: skip
    spark = (
        builder.config("spark.executor.instances", "1")
        .config("spark.executor.memory", "512m")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    total = spark.sparkContext.parallelize(range(100), 4).sum()
    print("RESULT " + json.dumps({"sum": total}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
