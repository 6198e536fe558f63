"""`fairbroker sim --explain TENANT@TIME` (issue 26): the same explanation as the live
broker's, from the simulated engine's state at that moment."""

from __future__ import annotations

import json
from pathlib import Path

from support.commands import one_line_error, run_fairbroker

SCENARIOS = Path(__file__).resolve().parents[1] / "benchmarks" / "scenarios"
LATE = str(SCENARIOS / "reclaim-late.yaml")


def test_a_late_job_waits_on_full_agents_below_its_fair_share() -> None:
    """reclaim-late: the two long applications fill the six agents; the first ad-hoc job
    (6 executors of 1 cpu / 1.5 GiB) arrives at 120 s. At 125 s, without reclaim, it holds
    nothing, every agent is `full` of cpus or memory, it is the only tenant of its group
    wanting more, and its fair share from an empty cluster is its whole target."""
    done = run_fairbroker("sim", LATE, "--explain", "adhoc-q0-j0@125", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["time"] == 125.0
    assert (answer["tenant"], answer["held"], answer["wants"]) == ("adhoc-q0-j0", 0, 6)
    assert answer["fair_share"] == 6 > answer["held"]
    assert {w["reason"] for w in answer["waiting"]} == {"full"}
    assert len(answer["waiting"]) == 6
    assert answer["criterion"]["rank"] == 1 and answer["criterion"]["value"] == 0.0
    text = run_fairbroker("sim", LATE, "--explain", "adhoc-q0-j0@125")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("at 125 s (simulated):")
    assert "full" in text.stdout and "fair share 6" in text.stdout


def test_explain_refuses_what_it_cannot_answer() -> None:
    missing = run_fairbroker("sim", LATE, "--explain", "adhoc-q0-j0@10")
    assert "is not running at 10 s" in one_line_error(missing)
    for bad in ("adhoc-q0-j0", "@10", "x@-1", "x@nan", "x@inf"):
        assert "expected TENANT@SECONDS" in one_line_error(
            run_fairbroker("sim", LATE, "--explain", bad)
        ), bad
    several = run_fairbroker("sim", LATE, "--explain", "x@1", "--seeds", "2")
    assert "one run only" in one_line_error(several)
    trace = run_fairbroker("sim", str(SCENARIOS / "drfh-dynamic.yaml"), "--explain", "x@1")
    assert "only for batch scenarios" in one_line_error(trace)
