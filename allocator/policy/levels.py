"""Two-level fairness, as in Mesos: groups (roles) first, then frameworks within the group.

At role level the criterion is computed on each role's aggregate allocation (role weights
apply); the lowest role is chosen (ties at random), then the lowest framework within it by
the same criterion. Framework level is flat per-framework fairness.
"""

from __future__ import annotations

from enum import StrEnum
from types import SimpleNamespace

import numpy as np

from allocator.state import AllocationState


class Level(StrEnum):
    ROLE = "role"
    FRAMEWORK = "framework"


class RoleView:
    """Looks like an AllocationState to a criterion, with one holder per role."""

    def __init__(self, state: AllocationState) -> None:
        cluster = state.cluster
        roles = len(cluster.role_names)
        self.alloc = np.column_stack(
            [
                np.bincount(cluster.role_of, weights=state.alloc[:, r], minlength=roles)
                for r in range(state.alloc.shape[1])
            ]
        )
        self.count = np.bincount(cluster.role_of, weights=state.count, minlength=roles)
        self.residual = state.residual
        self.tol = state.tol
        self.cluster = SimpleNamespace(
            weight=cluster.role_weight, total=cluster.total, capacity=cluster.capacity
        )
        self.state = state
