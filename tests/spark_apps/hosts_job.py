"""A test driver: waits for its executors, runs a checkable job, reports where it ran.

`hosts_job.py EXECUTORS TASKS TASK_SECONDS`: waits (up to 120 s) until EXECUTORS executors
have registered, runs TASKS tasks that each sleep TASK_SECONDS and return their index and
executor host, and prints `RESULT {"sum": ..., "hosts": [...], "task_hosts": [...]}`.
"""

import json
import os
import sys
import time

from pyspark.sql import SparkSession


def task(i: int, seconds: float) -> tuple[int, str]:
    time.sleep(seconds)
    # Python workers inherit the executor's environment; the local cluster sets the
    # agent's address there.
    return i, os.environ.get("SPARK_LOCAL_IP", "?")


def main() -> int:
    executors, tasks, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    spark = SparkSession.builder.getOrCreate()
    sc = spark.sparkContext
    status = sc._jsc.sc().getExecutorMemoryStatus()
    deadline = time.monotonic() + 120
    while status.size() - 1 < executors and time.monotonic() < deadline:
        time.sleep(0.2)
        status = sc._jsc.sc().getExecutorMemoryStatus()
    keys = status.keySet().iterator()
    hosts = []
    while keys.hasNext():
        hosts.append(keys.next().rsplit(":", 1)[0])
    out = sc.parallelize(range(tasks), tasks).map(lambda i: task(i, seconds)).collect()
    print("RESULT " + json.dumps({
        "sum": sum(i for i, _ in out),
        "hosts": sorted(hosts),
        "task_hosts": sorted({h for _, h in out}),
    }), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
