"""rPS-DSF (paper 002 Sec. IV): PS-DSF on the agent's current residual capacity.

Ktilde_{n,j} = max_r alloc_{n,r} / (c_{j,r} - sum_m x_{m,j} d_{m,r}) / phi_n. A resource with
zero residual is skipped rather than counted as infinite, as in the authors' Mesos sorter;
no task that needs it can be placed there anyway.
"""

from __future__ import annotations

import numpy as np

from allocator.policy.base import CRITERIA, Criterion, Holdings, max_ratio


@CRITERIA.register("rpsdsf")
class RPSDSF(Criterion):
    name = "rpsdsf"
    per_agent = True

    def column(self, state: Holdings, agent: int) -> np.ndarray:
        residual = np.where(state.residual[agent] > state.tol, state.residual[agent], 0.0)
        return max_ratio(state.alloc, residual) / state.cluster.weight

    def matrix(self, state: Holdings) -> np.ndarray:
        residual = np.where(state.residual > state.tol, state.residual, 0.0)
        shares = max_ratio(state.alloc[:, None, :], residual[None, :, :])
        return shares / state.cluster.weight[:, None]
