"""A Mesos master for tests: the v1 scheduler HTTP API and operator endpoints on 127.0.0.1,
with local agents that run command tasks as subprocesses, and fault injection.

    with MesosMaster([AgentSpec("a1", {"cpus": 4, "mem": 4096})], allocation_interval=0.2) as m:
        driver = MesosSchedulerDriver(scheduler, framework_info, m.address)

Simplified against a real master: JSON only (protobuf bodies get 415, protobuf-only Accept
406); no authentication, gzip, or 307/503 of its own (inject them with `fail_next_call`);
the heartbeat interval is configurable (Mesos fixes 15 s); scalar resources only (no ports,
ranges, sets, reservations, volumes, quota, weights, role trees, offer constraints); DRF ties
break by framework id; RESERVE and other operations are ignored, LAUNCH_GROUP gives
TASK_ERROR, custom executors TASK_FAILED; MESSAGE, REQUEST and inverse offers do nothing;
unacknowledged updates are re-sent on re-subscription rather than on the agent's timer; on
fail-over the master keeps its frameworks (a real one rebuilds them from re-registering
agents); a lost agent never returns; `/master/state` and `/metrics/snapshot` carry the main
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
