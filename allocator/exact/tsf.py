"""Exact TSF (paper 000 Sec. 2.2): weighted max-min of task shares x_n / (phi_n y_n).

y_n = sum_i gamma_{n,i} over every agent, placement constraints ignored (paper 000: "as if
there were no placement constraints"), real-valued because tasks are divisible here. The
online `tsf` criterion instead counts whole tasks on eligible agents only.
"""

from __future__ import annotations

import numpy as np

from allocator.exact.common import ExactAllocation, max_min_lp
from allocator.model import Cluster


def tasks_alone(cluster: Cluster) -> np.ndarray:
    """(F,) y_n: divisible tasks of n on the whole cluster, eligibility ignored."""
    unconstrained = Cluster.from_arrays(cluster.capacity, cluster.demand, cluster.resources)
    return unconstrained.fit().sum(axis=1)


def tsf_exact(cluster: Cluster) -> ExactAllocation:
    x, rounds = max_min_lp(cluster, 1.0 / (cluster.weight * tasks_alone(cluster)))
    return ExactAllocation("tsf-exact", x, iterations=rounds)
