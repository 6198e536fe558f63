"""A tenant's lifecycle (allocator/broker/tenants.py), event by event: one table of
(state, event) -> (new state, rests the engine is told); the broker applying it end to end is
in tests/test_broker.py and tests/test_orphans.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from allocator.backends.base import ExecutorState, LaunchSpec
from allocator.broker import tenants
from allocator.broker.proto import pb
from allocator.broker.tenants import ExecutorRecord, Refusals, Standing, Tenant

KILLING = ExecutorState.KILLING
NOW = 1000.0

FRESH = Standing(target=2)
ONE_FAILURE = Standing(target=2, failures={"a1": 1})
# resting on a1 until NOW+30 after a launch failure (nothing counted), a2 counting on
LAUNCH_REST = Standing(target=2, failures={"a2": 1}, rests={"a1": NOW + 30})
# resting on a1 until NOW+100 after three quick failures; a rest on a2 ended at NOW-1
CRASH_REST = Standing(target=2, failures={"a1": 3}, rests={"a1": NOW + 100, "a2": NOW - 1})
STOPPING = Standing(target=2, failures={"a1": 1}, stopping_since=NOW - 5)

Event = Callable[[Standing], tuple[Standing, Refusals]]


def exited(
    registered: bool = False,
    ran: float = 1.0,
    *,
    killing: bool = False,
    others: int = 0,
    reclaimed: bool = False,
) -> Event:
    """An executor on a1 ended (its exit code or signal is not an input: any counts alike),
    `ran` seconds after its launch, with `others` of the tenant's executors still live."""
    return lambda s: tenants.executor_exited(
        s, "a1", killing=killing, others=others, registered=registered,
        seconds_since_launch=ran, now=NOW, reclaimed=reclaimed,
    )  # fmt: skip


def set_target(total: int) -> Event:
    return lambda s: tenants.set_target(s, total, NOW)


def launch_failed(s: Standing) -> tuple[Standing, Refusals]:
    return tenants.launch_failed(s, "a1", NOW)


def agent_lost(s: Standing) -> tuple[Standing, Refusals]:
    return tenants.agent_lost(s, "a1")


def dropped(s: Standing) -> tuple[Standing, Refusals]:
    return tenants.dropped(s, NOW)


TABLE = [
    # registration: a new tenant has no rest, its target is then set
    ("register", Standing(), set_target(3), Standing(target=3), {}),
    # SetTarget (and a re-register repeating the registration): every running rest is kept,
    # and given to the engine again, whatever began it; an ended one is forgotten
    ("raise target, resting after a launch failure", LAUNCH_REST, set_target(5), Standing(
        target=5, failures={"a2": 1}, rests={"a1": NOW + 30}), {"a1": NOW + 30}),
    ("raise target, resting after a crash loop", CRASH_REST, set_target(5), Standing(
        target=5, failures={"a1": 3}, rests={"a1": NOW + 100}), {"a1": NOW + 100}),
    ("lower target", CRASH_REST, set_target(0), Standing(
        target=0, failures={"a1": 3}, rests={"a1": NOW + 100}), {"a1": NOW + 100}),
    # an executor's exit, whatever its code or signal (exit 0, SIGKILL, an unasked TASK_KILLED)
    ("1st quick exit", FRESH, exited(), ONE_FAILURE, {}),
    ("2nd quick exit", ONE_FAILURE, exited(), Standing(
        target=2, failures={"a1": 2}, rests={"a1": NOW + 60}), {"a1": NOW + 60}),
    ("4th quick exit", CRASH_REST, exited(), Standing(
        target=2, failures={"a1": 4}, rests={"a1": NOW + 240, "a2": NOW - 1}), {"a1": NOW + 240}),
    ("registered, ended at 59 s", ONE_FAILURE, exited(True, 59.0), Standing(
        target=2, failures={"a1": 2}, rests={"a1": NOW + 60}), {"a1": NOW + 60}),
    ("registered, ended at 1 s", ONE_FAILURE, exited(True, 1.0), Standing(
        target=2, failures={"a1": 2}, rests={"a1": NOW + 60}), {"a1": NOW + 60}),
    ("never registered, ended at 600 s", ONE_FAILURE, exited(False, 600.0), Standing(
        target=2, failures={"a1": 2}, rests={"a1": NOW + 60}), {"a1": NOW + 60}),
    ("quick, one other live of target 2", ONE_FAILURE, exited(others=1), Standing(
        target=2, failures={"a1": 2}, rests={"a1": NOW + 60}), {"a1": NOW + 60}),
    ("ran 61 s, ended", ONE_FAILURE, exited(True, 61.0), FRESH, {}),
    ("ran, while resting elsewhere", LAUNCH_REST, exited(True, 61.0), LAUNCH_REST, {}),
    # an exit the broker asked for counts for nothing and clears nothing
    ("killed on request, quick", ONE_FAILURE, exited(killing=True), ONE_FAILURE, {}),
    ("killed on request, ran", ONE_FAILURE, exited(True, 61.0, killing=True), ONE_FAILURE, {}),
    ("quick, beyond a lowered target", ONE_FAILURE, exited(others=2), ONE_FAILURE, {}),
    ("quick, target 0 (a stopping driver)", Standing(failures={"a1": 1}), exited(),
     Standing(failures={"a1": 1}), {}),
    ("exit of a stopping tenant", STOPPING, exited(), STOPPING, {}),
    # a reclaimed executor's exit (asked to leave for another tenant's fair share) is never a
    # failure, however quick and unregistered; it clears nothing either
    ("reclaimed, quick, unregistered", ONE_FAILURE, exited(reclaimed=True), ONE_FAILURE, {}),
    ("reclaimed, ran", ONE_FAILURE, exited(True, 61.0, reclaimed=True), ONE_FAILURE, {}),
    ("reclaimed, while resting", CRASH_REST, exited(reclaimed=True), CRASH_REST, {}),
    # a launch the backend refused: 60 s at once, a longer rest is kept, nothing counted
    ("launch failed", FRESH, launch_failed, Standing(
        target=2, rests={"a1": NOW + 60}), {"a1": NOW + 60}),
    ("launch failed, resting longer", CRASH_REST, launch_failed, CRASH_REST, {"a1": NOW + 100}),
    # an agent lost takes executors, not the tenant's standing
    ("agent lost", CRASH_REST, agent_lost, CRASH_REST, {}),
    # unregistered or lease expired: stopping from now on, once
    ("dropped", ONE_FAILURE, dropped, Standing(
        target=2, failures={"a1": 1}, stopping_since=NOW), {}),
    ("dropped again", STOPPING, dropped, STOPPING, {}),
]  # fmt: skip
IDS = [row[0] for row in TABLE]


@pytest.mark.parametrize(("before", "event", "after", "told"), [r[1:] for r in TABLE], ids=IDS)
def test_each_event_on_each_state(before, event, after, told) -> None:
    assert event(before) == (after, told)


@pytest.mark.parametrize(("before", "event"), [r[1:3] for r in TABLE], ids=IDS)
def test_events_leave_the_state_they_were_given_unchanged(before, event) -> None:
    copy = Standing(before.target, dict(before.failures), dict(before.rests), before.stopping_since)
    event(before)
    assert before == copy


def test_quick_failures_in_a_row_rest_the_tenant_doubling_up_to_fifteen_minutes() -> None:
    standing, rests = Standing(target=1), []
    for _ in range(8):
        standing, told = exited()(standing)
        rests.append(told["a1"] - NOW if told else None)
    # the 1st is forgiven; 60 s from the 2nd, doubling: 60, 120, 240, 480, then 900 at most
    assert rests == [None, 60.0, 120.0, 240.0, 480.0, 900.0, 900.0, 900.0]
    assert standing.failures == {"a1": 8}


def test_a_lease_and_a_stop_expire_strictly_after_their_time() -> None:
    assert not tenants.lease_expired(last_seen=NOW - 30, now=NOW, lease_seconds=30)
    assert tenants.lease_expired(last_seen=NOW - 30.5, now=NOW, lease_seconds=30)
    assert not tenants.never_reported(FRESH, NOW + 1e6)  # not stopping: nothing to report
    assert not tenants.never_reported(Standing(stopping_since=NOW - 60), NOW)
    assert tenants.never_reported(Standing(stopping_since=NOW - 61), NOW)


def test_only_executors_it_runs_and_is_not_killing_yet_are_killed() -> None:
    def record(executor_id: str, state: ExecutorState) -> ExecutorRecord:
        spec = LaunchSpec("t", executor_id, "a1", {"cpus": 1.0}, "spark://d", "app", 1, 512)
        return ExecutorRecord(spec, state, NOW, NOW)

    tenant = Tenant(pb.RegisterRequest(tenant_id="t"), {"cpus": 1.0}, NOW)
    tenant.executors = {"1": record("1", ExecutorState.RUNNING), "2": record("2", KILLING)}
    assert tenant.start_killing(["1", "2", "9", "1"]) == ["1"]
    assert {e: r.state for e, r in tenant.executors.items()} == {"1": KILLING, "2": KILLING}


def test_deaf_seconds_count_the_stalls_inside_the_silence_only() -> None:
    stalls = [(NOW - 50, NOW - 40), (NOW - 20, NOW - 15), (NOW - 2, NOW + 5)]
    # since NOW - 45: 5 s of the first, all 5 of the second, 2 of the third (up to now)
    assert tenants.deaf_seconds(stalls, since=NOW - 45, now=NOW) == 12
    assert tenants.deaf_seconds(stalls, since=NOW - 10, now=NOW) == 2
    assert tenants.deaf_seconds([], since=NOW - 10, now=NOW) == 0
