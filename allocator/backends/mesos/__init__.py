"""The broker as one Mesos framework (v1 scheduler API through pymesos), along its three
jobs: the link to the master (`link.py`: subscription, framework id, heartbeats, SUPPRESS /
REVIVE; `driver.py`: the pymesos driver), the book of offers held (`offers.py`: what the
broker may use on each agent, declines, capacity reports) and the broker's tasks
(`tasks.py`: launches, status updates, reconciliation, kills, orphans); `backend.py`
composes them as the Backend the broker talks to. `options.py` holds `MesosOptions` and how
roles name engine agents; `operator_view.py` is Mesos's own view for `status --master`.
"""

from allocator.backends.mesos.backend import MesosBackend
from allocator.backends.mesos.driver import pymesos_driver
from allocator.backends.mesos.options import MesosOptions

__all__ = ["MesosBackend", "MesosOptions", "pymesos_driver"]
