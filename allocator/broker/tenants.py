"""A tenant's state and what each event does to it. `Broker` (allocator/broker/core.py)
coordinates: it holds the lock, the clock, the store, the engine and the backend, calls the
functions here, and passes the refusals they return to `Engine.refuse`.

A tenant's `Standing` (its target, its rests, whether it is stopping) changes only through
these pure functions; each returns the new standing and the rests the engine must (again) be
told, agent -> until when (broker clock):

- Registered (`Broker.register`, a new tenant): `Standing()`, then its target is set.
- Target set (`set_target`: a SetTarget, or a re-register with identical parameters): the
  target is replaced; every rest still running is kept and returned, because raising a
  target lifts the engine's refuse filters (a Mesos revive) and a rest must outlast that.
- Executor exited (`executor_exited`, a terminal TaskStatus from either backend): an
  executor that ended before it registered with its driver, or within QUICK_FAILURE_SECONDS
  of its launch, is a quick failure on that agent whatever its exit code or signal (exit 0,
  SIGKILL, a TASK_KILLED nobody asked for), unless the broker had asked it to stop: killed at
  the tenant's request (KILLING) or beyond a lowered target (the tenant's other live
  executors already fill it: a stopping driver sets its target to 0 first). From the
  FAILURES_BEFORE_RESTING-th quick failure in a row the tenant rests there (60 s, doubling at
  each further one, at most 900 s). An executor that ran longer clears the count; one the
  broker asked to stop changes nothing. A stopping tenant's exits count for nothing.
- Reclaimed executor exited (`executor_exited(reclaimed=True)`: the broker asked it to leave
  so that a tenant below its fair share gets room, docs/reclaim.md): nothing changes, whenever
  and however it ended (decommissioned, SIGTERM, SIGKILL after the grace, or a crash while
  leaving): never a quick failure, never a rest, and the count of quick failures in a row
  is neither raised nor cleared.
- Launch failed (`launch_failed`, the backend raised): the tenant rests on that agent for
  LAUNCH_FAILURE_REST_SECONDS at once (a longer rest already running is kept). Not when
  the backend had no room for it (`NoRoom`: a Mesos agent whose offers are gone, the
  broker's capacity was stale) nor when its offer went away before the ACCEPT (a TaskStatus
  with `launched=False`): the broker's failure, never the tenant's; nothing changes, the
  grant goes back and the backend reports the agent's capacity.
- Agent lost (`agent_lost`): nothing changes (the agent failed, not the launch); the broker
  forgets the executors that were on it.
- Dropped (`dropped`: unregistered, or its lease expired, `lease_expired`): the tenant is
  stopping from then on; it leaves once its executors have exited, or once they have sent
  nothing for STOP_TIMEOUT_SECONDS (`never_reported`: the broker forgets them).

Nothing here lowers a target, so after an exit the next allocation run grants a replacement
wherever the tenant is not resting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from allocator.backends.base import ExecutorState, LaunchSpec
from allocator.broker.proto import pb

FAILURES_BEFORE_RESTING = 2  # quick failures of a tenant on an agent, in a row, before it rests
FIRST_REST_SECONDS = 60.0  # the first rest; each further quick failure doubles it
MAX_REST_SECONDS = 900.0
QUICK_FAILURE_SECONDS = 60.0  # an executor ending this soon after its launch is crash-looping
LAUNCH_FAILURE_REST_SECONDS = FIRST_REST_SECONDS
STOP_TIMEOUT_SECONDS = 60.0  # a dropped tenant whose executors never report their exit

Refusals = Mapping[str, float]  # agent -> keep the tenant off it until then (broker clock)


@dataclass(frozen=True)
class Standing:
    """What the broker decides about a tenant with, besides its executors. Never mutated:
    every event returns a new one."""

    target: int = 0  # executors wanted in all, as sent (the engine sees it capped)
    failures: Mapping[str, int] = field(default_factory=dict)  # agent -> quick failures in a row
    rests: Mapping[str, float] = field(default_factory=dict)  # agent -> resting there until
    stopping_since: float | None = None  # dropped: its executors are being stopped


def set_target(standing: Standing, total: int, now: float) -> tuple[Standing, Refusals]:
    """SetTarget, or a re-register repeating the registration: the rests still running are
    kept, and all of them are returned for the engine to apply again after its revive."""
    rests = {agent: until for agent, until in standing.rests.items() if until > now}
    return replace(standing, target=int(total), rests=rests), dict(rests)


def is_quick_exit(registered: bool, seconds_since_launch: float) -> bool:
    """Ended before the executor registered with its driver, or soon after its launch."""
    return not registered or seconds_since_launch < QUICK_FAILURE_SECONDS


def asked_to_stop(standing: Standing, *, killing: bool, others: int) -> bool:
    """Did the broker want this executor gone? `killing`: it was being killed (Kill, a
    dropped tenant); `others`: the tenant's other executors in flight and not being killed,
    which already fill its target when the target was lowered below them."""
    return killing or others >= standing.target


def crash_loop_rest_seconds(failures: int) -> float | None:
    """How long a tenant rests on an agent after `failures` quick failures in a row there."""
    if failures < FAILURES_BEFORE_RESTING:
        return None
    return min(MAX_REST_SECONDS, FIRST_REST_SECONDS * 2 ** (failures - FAILURES_BEFORE_RESTING))


def executor_exited(
    standing: Standing,
    agent: str,
    *,
    killing: bool,
    others: int,
    registered: bool,
    seconds_since_launch: float,
    now: float,
    reclaimed: bool = False,
) -> tuple[Standing, Refusals]:
    """One of its executors on `agent` ended, whatever its exit code or signal (`registered`:
    it had reported RUNNING; `killing`, `others`: see `asked_to_stop`; `reclaimed`: it was
    being reclaimed)."""
    if standing.stopping_since is not None or reclaimed:
        return standing, {}
    if asked_to_stop(standing, killing=killing, others=others):
        return standing, {}
    failures = dict(standing.failures)
    if not is_quick_exit(registered, seconds_since_launch):
        if agent not in failures:
            return standing, {}
        del failures[agent]  # it ran: the launch spec works there
        return replace(standing, failures=failures), {}
    count = failures[agent] = failures.get(agent, 0) + 1
    seconds = crash_loop_rest_seconds(count)
    if seconds is None:
        return replace(standing, failures=failures), {}
    return _rest(replace(standing, failures=failures), agent, now + seconds)


def launch_failed(standing: Standing, agent: str, now: float) -> tuple[Standing, Refusals]:
    """The backend could not launch its executor on `agent`."""
    return _rest(standing, agent, now + LAUNCH_FAILURE_REST_SECONDS)


def _rest(standing: Standing, agent: str, until: float) -> tuple[Standing, Refusals]:
    until = max(until, standing.rests.get(agent, until))
    return replace(standing, rests={**standing.rests, agent: until}), {agent: until}


def agent_lost(standing: Standing, agent: str) -> tuple[Standing, Refusals]:
    """An agent left with the tenant's executors on it: nothing is counted."""
    return standing, {}


def dropped(standing: Standing, now: float) -> tuple[Standing, Refusals]:
    """Unregistered, or its lease expired: it stops (a second drop keeps the first time)."""
    if standing.stopping_since is not None:
        return standing, {}
    return replace(standing, stopping_since=now), {}


def lease_expired(last_seen: float, now: float, lease_seconds: float) -> bool:
    return now - last_seen > lease_seconds


def deaf_seconds(stalls: Iterable[tuple[float, float]], since: float, now: float) -> float:
    """How much of [since, now] the broker spent in `stalls` ((start, end) of the runs that
    held it, apart), when no tenant could be heard."""
    return sum(max(0.0, min(end, now) - max(start, since)) for start, end in stalls)


def never_reported(standing: Standing, now: float) -> bool:
    """A stopping tenant whose executors have not all reported their exit in time."""
    since = standing.stopping_since
    return since is not None and now - since > STOP_TIMEOUT_SECONDS


@dataclass
class ExecutorRecord:
    spec: LaunchSpec
    state: ExecutorState
    granted_at: float  # broker clock (monotonic)
    started_at: float  # unix seconds, for reports


@dataclass
class Tenant:
    """A registered tenant as the broker holds it: its registration, its `Standing`, and its
    executors in flight (they hold their capacity until their processes have exited, even
    once the tenant is dropped and unknown to the API)."""

    request: pb.RegisterRequest
    demand: dict[str, float]
    last_seen: float  # broker clock: its lease runs from here
    standing: Standing = field(default_factory=Standing)
    next_executor: int = 1
    executors: dict[str, ExecutorRecord] = field(default_factory=dict)
    grants: int = 0  # executors launched for it
    kills: int = 0  # executors killed at its request
    reclaimed: int = 0  # executors reclaimed from it (asked to leave for another tenant)

    @property
    def tenant_id(self) -> str:
        return self.request.tenant_id

    @property
    def target(self) -> int:
        return self.standing.target

    @property
    def stopping_since(self) -> float | None:
        return self.standing.stopping_since

    def executors_on(self, agent: str) -> list[str]:
        return [e for e, record in self.executors.items() if record.spec.agent == agent]

    def start_killing(self, executor_ids: list[str]) -> list[str]:
        """Mark those of `executor_ids` it runs and is not killing yet as KILLING; returns
        them, for the backend to kill (which may report their exits at once)."""
        killing = []
        for executor_id in executor_ids:
            record = self.executors.get(executor_id)
            if record is not None and record.state is not ExecutorState.KILLING:
                record.state = ExecutorState.KILLING
                killing.append(executor_id)
        return killing
