"""DRF (paper 002 eq. 3): M_n = x_n max_r d_{n,r} / sum_j c_{j,r} / phi_n.

Computed from allocated resources, as Mesos's DRF sorter does: max_r alloc_{n,r} / C_r.
"""

from __future__ import annotations

import numpy as np

from allocator.policy.base import CRITERIA, Criterion, Holdings, max_ratio


@CRITERIA.register("drf")
class DRF(Criterion):
    name = "drf"

    def values(self, state: Holdings) -> np.ndarray:
        return max_ratio(state.alloc, state.cluster.total) / state.cluster.weight
