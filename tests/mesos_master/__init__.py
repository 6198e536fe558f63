"""A Mesos master for tests: the v1 scheduler HTTP API and operator endpoints on 127.0.0.1,
with local agents that run command tasks as subprocesses, and fault injection.

    with MesosMaster([AgentSpec("a1", {"cpus": 4, "mem": 4096})], allocation_interval=0.2) as m:
        driver = MesosSchedulerDriver(scheduler, framework_info, m.address)
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
