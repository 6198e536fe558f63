"""A Mesos master for tests: the v1 scheduler HTTP API and operator endpoints on 127.0.0.1,
with local agents that run command tasks as subprocesses, and fault injection.

    with MesosMaster([AgentSpec("a1", {"cpus": 4, "mem": 4096})], allocation_interval=0.2) as m:
        driver = MesosSchedulerDriver(scheduler, framework_info, m.address)

The tests marked BOTH in tests/test_mesos_master.py run against this master and a real Mesos
1.11.0 master alike (the scheduler endpoint's error answers and their order, routing and
404s, nested offers with each agent's remainder, allocation_info for MULTI_ROLE, invalid
FrameworkInfo as 200 then ERROR, SUBSCRIBED's heartbeat interval and the HEARTBEAT right
after it, the 5 s default DECLINE filter and REVIVE clearing it, refuse_seconds, a filter
hiding only offers that fit inside what was refused, SUPPRESS and REVIVE by role, updates
one at a time after each ACKNOWLEDGE, TEARDOWN, KILL with TASK_KILLING and the kill_policy
grace period (SIGTERM, then SIGKILL), KILL of an unknown task and implicit/explicit
reconciliation, TASK_DROPPED for partition-aware frameworks, /version, /master/state and
/metrics/snapshot with a running task), reading only the stream and /master/state;
`/master/slaves` was added after the broker met a real master. Still tested against this
master only, because they read its internals or need what a real one cannot do on demand:
filter bookkeeping (`core.filters`), the sandbox files of a task, agent loss and offer
rescinds, fail-over to a new id with frameworks kept, injected call failures, offer
timeouts, the allocation order, and the operator endpoints' exact fields.

Still different from a real master: JSON only (protobuf bodies get 415, protobuf-only Accept
406); no authentication, gzip, or 307/503 of its own (inject them with `fail_next_call`);
the heartbeat interval is configurable (Mesos fixes 15 s); scalar resources only (no ports,
which a real agent offers by default, ranges, sets, reservations, volumes, quota, weights,
role trees, offer constraints); DRF ties break by framework id; RESERVE and other operations
are ignored, LAUNCH_GROUP gives TASK_ERROR, custom executors TASK_FAILED; MESSAGE, REQUEST
and inverse offers do nothing; unacknowledged updates are re-sent on re-subscription rather
than on the agent's timer; on fail-over the master keeps its frameworks (a real one rebuilds
them from re-registering agents); a lost agent never returns (a real agent whose daemon died
keeps its executors running and re-registers with the same id, and the master then sends
TASK_RUNNING "Unreachable agent re-reregistered" after the TASK_LOST it sent when the agent
stopped answering); `/master/state`, `/master/slaves` and `/metrics/snapshot` carry the main
fields only; the operator `/api/v1` answers GET_HEALTH, GET_VERSION, GET_STATE, GET_AGENTS,
GET_FRAMEWORKS, GET_TASKS and GET_METRICS (501 otherwise).
"""

from .client import SchedulerStream
from .core import RecordedCall
from .master import FrameworkView, MesosMaster, OfferView, TaskView
from .state import AgentSpec

__all__ = [
    "AgentSpec",
    "FrameworkView",
    "MesosMaster",
    "OfferView",
    "RecordedCall",
    "SchedulerStream",
    "TaskView",
]
