"""A real Spark batch admitted by wfq: `fairbroker batch` starts the jobs in the order the
policy says, read from the Spark drivers' own log timestamps (about 40 s)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import yaml
from support.commands import run_fairbroker

SPARK_TIME = re.compile(r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d) ", re.MULTILINE)


def spark_times(log: Path) -> tuple[datetime, datetime]:
    """First and last timestamp Spark wrote in a driver's log."""
    stamps = [
        datetime.strptime(t, "%y/%m/%d %H:%M:%S") for t in SPARK_TIME.findall(log.read_text())
    ]
    assert stamps, f"no Spark log lines in {log}"
    return stamps[0], stamps[-1]


def test_live_wfq_batch_starts_jobs_in_priority_order(tmp_path: Path):
    # One turn, two jobs declared low priority first: fcfs would run j0 then j1; wfq puts the
    # priority-2 job in MQ (n = 2: N_HQ = 0, N_MQ = 1) ahead of the priority-1 job in LQ.
    scenario = {
        "name": "wfq-live",
        "agents": [{"name": "a1", "resources": {"cpus": 4, "mem": 4096}}],
        "groups": [
            {
                "name": "pi",
                "queues": 1,
                "jobs_per_queue": 2,
                "spark": {
                    "spark.executor.cores": 2,
                    "spark.executor.memory": "640m",
                    "spark.executor.instances": 1,
                    "spark.ui.enabled": False,
                },
                "app": {"kind": "pi", "partitions": 2, "samples": 20000},
                "job": {"work": 0.5},
                "admission": {"policy": "wfq"},
                "jobs": [{"priority": 1}, {"priority": 2}],
            }
        ],
    }
    path = tmp_path / "wfq.yaml"
    path.write_text(yaml.safe_dump(scenario))
    out = tmp_path / "out"
    done = run_fairbroker("batch", str(path), "--out", str(out), "--quiet", "--job-timeout", "600")
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["jobs"] == 2 and result["failures"] == 0, result
    first_low, _ = spark_times(out / "jobs" / "pi-q0-j0.log")
    first_high, last_high = spark_times(out / "jobs" / "pi-q0-j1.log")
    assert first_high < first_low  # the priority-2 job started first
    assert first_low >= last_high  # and the other only after it ended (one turn)
