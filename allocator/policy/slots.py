"""Slots (Hadoop Fair Scheduler style, paper 001's baseline): max-min fairness on task counts.

Each agent is cut into slots (`with_slots` adds a `slots` pseudo-resource: floor(k f) slots
on a server with fraction f of the largest server, k slots per maximum server) and every
task takes one slot whatever its real demand. Users are served max-min fair on the
slots they hold, i.e. on their running task counts: the criterion is x_n / phi_n. At role
level the role's count is the sum over its frameworks (RoleHoldings.count).
"""

from __future__ import annotations

import numpy as np

from allocator.errors import ScenarioError
from allocator.policy.base import CRITERIA, Criterion, Holdings

#: The pseudo-resource the slot baseline adds to every agent and every task.
SLOTS = "slots"
#: Slots per maximum server by default (paper 001 Table II: 14 is best).
DEFAULT_SLOTS_PER_SERVER = 14


def with_slots(
    resources: tuple[str, ...],
    capacity: np.ndarray,
    demand: np.ndarray,
    largest: np.ndarray,
    per_server: int = DEFAULT_SLOTS_PER_SERVER,
) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    """The cluster as the slot baseline sees it: `resources` plus `slots`; each agent of
    `capacity` (A, R) gets floor(k f) slots, f the smaller of its fractions of the `largest`
    server, k = `per_server`; each task of `demand` (T, R) takes one slot."""
    if per_server < 1:
        raise ScenarioError("slots_per_server: must be at least 1")
    fraction = (capacity / largest).min(axis=1)
    slots = np.floor(per_server * fraction + 1e-9)
    return (
        (*resources, SLOTS),
        np.column_stack([capacity, slots]),
        np.column_stack([demand, np.ones(len(demand))]),
    )


@CRITERIA.register("slots")
class Slots(Criterion):
    name = "slots"

    def values(self, state: Holdings) -> np.ndarray:
        return state.count / state.cluster.weight
