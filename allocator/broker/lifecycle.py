"""What the broker does when one of a tenant's executors ends without being asked to: one
rule per event, as pure functions of the event; `Broker` (allocator/broker/core.py) applies
them under its lock and owns the clock.

- Exited (`Broker.status`, a terminal TaskStatus from either backend): the executor's
  resources go back to the engine. A FAILED executor that ended before it registered with
  its driver, or within QUICK_FAILURE_SECONDS of its launch, is a quick failure on that
  agent; `rest_after_exit` counts them, and from the FAILURES_BEFORE_RESTING-th in a row the
  tenant rests on that agent (60 s, doubling at each further one, at most 900 s). An
  executor that ran longer, or ended any other way than FAILED or KILLED, clears the count.
- Agent lost (`Broker.agent_removed`): the engine drops the agent with everything on it and
  the broker forgets those executors; nothing is counted, the agent failed, not the launch.
- Launch failed (`Broker._launch`, the backend raised): the grant goes back and the tenant
  rests on that agent for `LAUNCH_FAILURE_REST_SECONDS` at once.
- Never reported (a dropped tenant whose executors send no exit within
  STOP_TIMEOUT_SECONDS, `Broker._expire_leases`): they are forgotten.

Nothing here changes the tenant's target, so the next allocation run grants a replacement
wherever the tenant is not resting.
"""

from __future__ import annotations

from allocator.backends.base import ExecutorState

FAILURES_BEFORE_RESTING = 2  # quick failures of a tenant on an agent, in a row, before it rests
FIRST_REST_SECONDS = 60.0  # the first rest; each further quick failure doubles it
MAX_REST_SECONDS = 900.0
QUICK_FAILURE_SECONDS = 60.0  # an executor failing this soon after its launch is crash-looping
LAUNCH_FAILURE_REST_SECONDS = FIRST_REST_SECONDS
STOP_TIMEOUT_SECONDS = 60.0  # a dropped tenant whose executors never report their exit


def is_quick_failure(state: ExecutorState, registered: bool, seconds_since_launch: float) -> bool:
    """A FAILED exit before the executor registered with its driver, or soon after launch."""
    quick = not registered or seconds_since_launch < QUICK_FAILURE_SECONDS
    return state is ExecutorState.FAILED and quick


def rest_after_exit(
    failures: dict[str, int],
    agent: str,
    state: ExecutorState,
    registered: bool,
    seconds_since_launch: float,
) -> float | None:
    """Count an executor's exit in `failures` (agent -> quick failures in a row) and return
    how many seconds the tenant rests on `agent`, or None if it does not."""
    if not is_quick_failure(state, registered, seconds_since_launch):
        if state is not ExecutorState.KILLED:
            failures.pop(agent, None)  # it ran: the launch spec works there
        return None
    count = failures[agent] = failures.get(agent, 0) + 1
    if count < FAILURES_BEFORE_RESTING:
        return None
    return min(MAX_REST_SECONDS, FIRST_REST_SECONDS * 2 ** (count - FAILURES_BEFORE_RESTING))
