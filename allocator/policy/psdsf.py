"""PS-DSF (paper 002 eqs. 4-5): per-server dominant share K_{n,j} = x_n / (phi_n gamma_{n,j}).

Written on allocation, K_{n,j} = max_r alloc_{n,r} / c_{j,r} / phi_n, which equals
x_n d_{n,rho} / (phi_n c_{j,rho}) for rho = argmax_r d_{n,r}/c_{j,r} and needs no d_n.
"""

from __future__ import annotations

import numpy as np

from allocator.policy.base import CRITERIA, Criterion, Holdings, max_ratio


@CRITERIA.register("psdsf")
class PSDSF(Criterion):
    name = "psdsf"
    per_agent = True

    def column(self, state: Holdings, agent: int) -> np.ndarray:
        return max_ratio(state.alloc, state.cluster.capacity[agent]) / state.cluster.weight

    def matrix(self, state: Holdings) -> np.ndarray:
        shares = max_ratio(state.alloc[:, None, :], state.cluster.capacity[None, :, :])
        return shares / state.cluster.weight[:, None]
