"""The executor lifecycle's crash-loop rule (allocator/broker/lifecycle.py), event by event;
the broker applying it end to end is in tests/test_broker.py and tests/test_orphans.py."""

from __future__ import annotations

import pytest

from allocator.backends.base import ExecutorState
from allocator.broker.lifecycle import rest_after_exit

FAILED, KILLED, FINISHED = ExecutorState.FAILED, ExecutorState.KILLED, ExecutorState.FINISHED


def test_quick_failures_in_a_row_rest_the_tenant_doubling_up_to_fifteen_minutes() -> None:
    failures: dict[str, int] = {}
    rests = [rest_after_exit(failures, "a1", FAILED, False, 1.0) for _ in range(8)]
    # the 1st is forgiven; 60 s from the 2nd, doubling: 60, 120, 240, 480, then 900 at most
    assert rests == [None, 60.0, 120.0, 240.0, 480.0, 900.0, 900.0, 900.0]
    assert failures == {"a1": 8}


@pytest.mark.parametrize(
    ("state", "registered", "seconds", "kept"),
    [
        (FAILED, True, 59.0, 2),  # registered but failed within a minute: still quick
        (FAILED, True, 61.0, 0),  # ran a minute: the launch works there, count cleared
        (FAILED, False, 600.0, 2),  # never registered, however long: quick
        (KILLED, False, 1.0, 1),  # killed on request: neither counted nor cleared
        (FINISHED, True, 1.0, 0),  # exited 0: cleared
    ],
)
def test_what_counts_as_a_quick_failure(state, registered, seconds, kept) -> None:
    failures = {"a1": 1, "a2": 5}
    rest_after_exit(failures, "a1", state, registered, seconds)
    assert failures.get("a1", 0) == kept
    assert failures["a2"] == 5  # other agents' counts are untouched
