"""The Best-Fit DRFH heuristic (paper 001 eq. 9) behind BF-DRF.

H(n, i) = || d_n / d_{n,ref} - cbar_i / cbar_{i,ref} ||_1, with demand and residual capacity
first normalized by the cluster totals C_r, and `ref` the first resource (cpus) as in the
paper and the authors' Mesos sorter; a framework that needs no cpus uses its dominant
resource instead. The agent whose residual shape best matches the demand shape has the least H.
"""

from __future__ import annotations

import numpy as np


def reference_resource(demand: np.ndarray, total: np.ndarray) -> int:
    """Index of the resource both vectors are normalized by: cpus unless d_n needs none."""
    if demand[0] > 0:
        return 0
    return int(np.argmax(demand / total))


def fit_distance(demand: np.ndarray, residual: np.ndarray, total: np.ndarray) -> np.ndarray:
    """(A,) H of one framework's demand (R,) against every agent's residual (A, R).

    Agents with nothing left of the reference resource get +inf (nothing fits there).
    """
    ref = reference_resource(demand, total)
    d_ref = demand[ref] / total[ref]
    res_ref = residual[:, ref] / total[ref]
    empty = res_ref <= 0
    scale = 1.0 / np.where(empty, 1.0, res_ref)
    distance = np.zeros(len(residual))
    for r in range(len(demand)):
        if r != ref:  # the reference term is |1 - 1| = 0
            shape = residual[:, r] * (scale / total[r])
            distance += np.abs(demand[r] / total[r] / d_ref - shape)
    distance[empty] = np.inf
    return distance
