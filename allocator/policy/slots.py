"""Slots (Hadoop Fair Scheduler style, paper 001's baseline): max-min fairness on task counts.

Each agent is cut into slots (the trace simulator adds a `slots` pseudo-resource: floor(k f)
slots on a server with fraction f of the largest server, k slots per maximum server) and
every task takes one slot whatever its real demand. Users are served max-min fair on the
slots they hold, i.e. on their running task counts: the criterion is x_n / phi_n. At role
level the role's count is the sum over its frameworks (RoleHoldings.count).
"""

from __future__ import annotations

import numpy as np

from allocator.policy.base import Criterion, Holdings


class Slots(Criterion):
    name = "slots"

    def values(self, state: Holdings) -> np.ndarray:
        return state.count / state.cluster.weight
