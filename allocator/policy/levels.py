"""Two-level fairness, as in Mesos: groups (roles) first, then frameworks within the group.

At role level the criterion is computed on each role's aggregate allocation (role weights
apply); the lowest role is chosen (ties at random), then the lowest framework within it by
the same criterion. Framework level is flat per-framework fairness.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from allocator.state import AllocationState


class Level(StrEnum):
    ROLE = "role"
    FRAMEWORK = "framework"


@dataclass(frozen=True)
class RoleCluster:
    """The cluster as a role-level criterion sees it: role weights, the same capacities."""

    weight: np.ndarray  # (G,) each role's weight
    total: np.ndarray  # (R,)
    capacity: np.ndarray  # (A, R)


@dataclass(frozen=True)
class RoleHoldings:
    """`Holdings` with one holder per role: what its frameworks hold, summed."""

    alloc: np.ndarray  # (G, R)
    count: np.ndarray  # (G,)
    residual: np.ndarray  # (A, R), the state's own
    tol: np.ndarray  # (R,)
    cluster: RoleCluster

    @classmethod
    def of(cls, state: AllocationState) -> RoleHoldings:
        cluster = state.cluster
        roles = len(cluster.role_names)
        alloc = np.column_stack(
            [
                np.bincount(cluster.role_of, weights=state.alloc[:, r], minlength=roles)
                for r in range(state.alloc.shape[1])
            ]
        )
        return cls(
            alloc=alloc,
            count=np.bincount(cluster.role_of, weights=state.count, minlength=roles),
            residual=state.residual,
            tol=state.tol,
            cluster=RoleCluster(
                weight=cluster.role_weight, total=cluster.total, capacity=cluster.capacity
            ),
        )
