"""DRFH (paper 001): weighted max-min of global dominant shares G_n = x_n max_r d_{n,r}/C_r.

Paper 001 eq. (7) is the first round: the largest common g such that every framework gets
g (its dominant share) under the capacity and eligibility constraints; the later rounds let
frameworks that can still grow do so (progressive water-filling), as its iterative treatment
of finite demands does.
"""

from __future__ import annotations

from allocator.exact.common import ExactAllocation, dominant_share_per_task, max_min_lp
from allocator.model import Cluster


def drfh(cluster: Cluster) -> ExactAllocation:
    share = dominant_share_per_task(cluster) / cluster.weight
    x, rounds = max_min_lp(cluster, share)
    return ExactAllocation("drfh", x, iterations=rounds)
