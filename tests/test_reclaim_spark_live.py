"""Reclaim with real Spark (issue 22, docs/reclaim.md): a late job gets its fair share from
one that filled the cluster, through the plugin's decommissioning of the executors the
broker lists as leaving; both jobs finish with the right answer and the tasks the reclaimed
executors were running are re-run by Spark, not lost. On the embedded cluster here, and on a
real Mesos 1.11 master in test_mesos_real.py."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from support.polling import wait_for
from support.reclaim import AllocationWatch, rerun_tasks
from support.spark import Driver, executor_processes

from allocator.backends.base import AgentInfo
from allocator.broker.server import BrokerOptions, BrokerService
from allocator.engine_config import EngineConfig
from spark_shim.apps import pi, script, wordgen

# Two agents of two 1-cpu / 896 MiB slots each: the first job's four executors fill them.
AGENTS = [
    AgentInfo("e1", "127.0.2.1", {"cpus": 2, "mem": 2048}),
    AgentInfo("e2", "127.0.2.2", {"cpus": 2, "mem": 2048}),
]
EXECUTOR = {"spark.executor.cores": "1", "spark.executor.memory": "512m"}  # + 384 = 896 MiB
FAST_HEARTBEAT = {"spark.fairbroker.heartbeatInterval": "500ms"}
PI_SEED, PI_PARTITIONS, PI_SAMPLES = 3, 4, 20_000
# One task per executor, longer than the second driver's start-up (about 25 s while four
# executors run) + reclaim-after + grace: a reclaimed executor is killed in the middle of its
# task, so that task must be re-run elsewhere.
PI_TASK_SECONDS = 45


@pytest.mark.slow
def test_a_late_spark_job_gets_executors_reclaimed_by_decommissioning(tmp_path: Path) -> None:
    """Pi (target 4) fills the four slots with tasks of 45 s; WordCount (target 2, same
    executor size) arrives. DRF's fair share is 2 each: two of Pi's executors are asked to
    leave (decommissioned by the plugin, killed after the 3 s grace, mid-task), WordCount
    runs on the freed slots while Pi keeps two, Pi's lost tasks run again, and both answers
    are exact. Nothing over capacity, no rest for Pi, no executor left."""
    engine = EngineConfig(
        "drf", interval=0.5, reclaim_after=2, reclaim_grace=3, reclaim_min_runtime=1
    )
    options = BrokerOptions(engine=engine, http_port=0, grpc_port=0, state_dir=tmp_path / "b")
    options.agents = AGENTS
    text = tmp_path / "words.txt"
    words = wordgen.generate(text, 1, seed=11, vocabulary_size=500)
    expected = Counter(text.read_text().split())
    out = tmp_path / "counts.json"
    with BrokerService(options) as service:
        sampler = AllocationWatch(service, ("pi", "wc"))
        try:
            first = Driver(
                service.http_address,
                [str(script("pi")), str(PI_PARTITIONS), str(PI_SAMPLES), "--seed", str(PI_SEED),
                 "--task-seconds", str(PI_TASK_SECONDS)],
                workdir=tmp_path, name="pi", group="pi",
                conf={**EXECUTOR, **FAST_HEARTBEAT, "spark.executor.instances": "4",
                      "spark.log.level": "INFO"},
            )  # fmt: skip
            wait_for(lambda: sampler.most["pi"] == 4, 180, "Pi on all four slots")
            late = Driver(
                service.http_address,
                [str(script("wordcount")), str(text), str(out), "--partitions", "4", "--top",
                 "0", "--task-seconds", "1"],
                workdir=tmp_path, name="wc", group="wc",
                conf={**EXECUTOR, **FAST_HEARTBEAT, "spark.executor.instances": "2"},
            )  # fmt: skip
            wc_code, _ = late.wait(timeout=300)
            pi_code, _ = first.wait(timeout=300)
        finally:
            sampler.close()
        assert wc_code == 0, late.output()
        assert pi_code == 0, first.output()
    wait_for(lambda: not executor_processes(str(tmp_path)), 30, "every executor to exit")

    pi_log = first.log.read_text(errors="replace")
    result = re.search(r"RESULT pi=\S+ inside=(\d+) samples=(\d+)", pi_log)
    assert result, pi_log[-3000:]
    inside = sum(pi.count_inside(PI_SEED, i, PI_SAMPLES) for i in range(PI_PARTITIONS))
    assert (int(result[1]), int(result[2])) == (inside, PI_PARTITIONS * PI_SAMPLES)
    counts = json.loads(out.read_text())
    assert counts["total"] == words.total and dict(counts["top"]) == expected

    # Two of Pi's executors were reclaimed (its fair share is 2), decommissioned by the
    # plugin once each, and what they were running ran again.
    reclaimed = sampler.leaving.get("pi", set())
    assert len(reclaimed) == 2 and "wc" not in sampler.leaving, sampler.leaving
    asked = re.findall(r"fairbroker: the broker reclaims executors \[([^\]]*)\]", pi_log)
    assert {e.strip() for line in asked for e in line.split(",")} == reclaimed, asked
    assert re.search(r"Decommission executors: ", pi_log)
    again = rerun_tasks(pi_log, reclaimed)
    assert again, "no task of a reclaimed executor was re-run:\n" + "\n".join(
        line for line in pi_log.splitlines() if "Lost task" in line or ".1 in stage" in line
    )
    assert sampler.both_running > 0 and sampler.most["wc"] == 2, sampler
    assert sampler.over == [] and sampler.rested == set(), (sampler.over, sampler.rested)
