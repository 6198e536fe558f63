"""The order `make test` runs in: the known-long tests first, spread over the xdist workers.

pytest-xdist's worksteal gives each of N workers a contiguous 1/N of the collection at the
start and lets an idle worker steal from the *end* of a busy one's queue. A five-minute test
collected late starts late and runs alone at the end; all the long tests in one worker's
share run one after another while the others finish theirs. So the long tests go to the front
of the shares, largest first, each to the share with the least long work so far (longest
processing time first), and every other test keeps its collection order behind them.

LONG_TESTS are the seconds `make test -n 3` measured here (--durations, 2026-12-01, beside
other helpers' benchmarks), by node id prefix (a parametrized test's ids all match): a
ranking, not a timing anybody asserts. A test missing from it only runs in collection order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

LONG_TESTS: dict[str, float] = {
    "tests/test_mesos_real.py::test_an_agent_killed_under_an_executor": 160,
    "tests/test_mesos_real.py::test_two_spark_jobs_at_once_both_hold_executors_while_both_run":
        153,
    "tests/test_spark_live.py::test_killed_executor_is_reported_freed_and_replaced": 115,
    "tests/test_mesos_live.py::test_faults_lose_no_work_and_launch_nothing_twice": 105,
    "tests/test_compare_live.py::test_compare_writes_both_runs_and_the_prediction": 78,
    "tests/test_deploy_terraform.py::test_terraform_test_passes": 51,
    "tests/test_packaging.py::test_the_wheel_installs_into_a_clean_venv_and_runs": 44,
    "tests/test_admission_live.py::test_live_wfq_batch_starts_jobs_in_priority_order": 39,
    "tests/test_spark_live.py::test_real_tenants_get_the_placement_the_scheduler_prescribes": 31,
    "tests/test_mesos_real.py::test_teardown_reports_success_only_when_the_master_shows": 26,
    "tests/test_spark_live.py::test_broker_restart_mid_job_loses_nothing_and_leaks_nothing": 26,
}  # fmt: skip


def known_seconds(nodeid: str) -> float:
    return max((s for prefix, s in LONG_TESTS.items() if nodeid.startswith(prefix)), default=0.0)


def share_sizes(total: int, workers: int) -> list[int]:
    """How many tests each worker is sent first: worksteal's own split of `total` among
    `workers` idle workers (xdist/scheduler/worksteal.py, check_schedule)."""
    sizes, left = [], total
    for i in range(workers):
        sizes.append(left // (workers - i))
        left -= sizes[-1]
    return sizes


def long_first(items: Sequence[T], nodeid, workers: int) -> list[T]:
    """`items` reordered so that each worker's first share starts with its long tests."""
    if workers < 1:
        return list(items)
    long = sorted((i for i in items if known_seconds(nodeid(i)) > 0),
                  key=lambda i: -known_seconds(nodeid(i)))  # fmt: skip
    if not long:
        return list(items)
    sizes = share_sizes(len(items), workers)
    shares: list[list[T]] = [[] for _ in sizes]
    load = [0.0] * workers
    for item in long:
        # the least loaded share that still has room
        k = min((k for k in range(workers) if len(shares[k]) < sizes[k]), key=lambda k: load[k])
        shares[k].append(item)
        load[k] += known_seconds(nodeid(item))
    chosen = {id(i) for i in long}
    rest = iter(i for i in items if id(i) not in chosen)
    for k, size in enumerate(sizes):
        shares[k].extend(next(rest) for _ in range(size - len(shares[k])))
    return [i for share in shares for i in share]
