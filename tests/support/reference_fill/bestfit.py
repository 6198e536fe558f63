"""The Best-Fit DRFH heuristic (paper 001 eq. 9) behind BF-DRF.

H(n, i) = || d_n / d_{n,ref} - cbar_i / cbar_{i,ref} ||_1, with demand and residual capacity
first normalized by the cluster totals C_r, and `ref` the first resource (cpus) as in the
paper and the authors' Mesos sorter; a framework that needs no cpus uses its dominant
resource instead. The agent whose residual shape best matches the demand shape has the least H.

A resource no agent has (C_r = 0) does not enter H: both shares would be 0/0, and a task
that needs such a resource fits nowhere anyway.

`fit_distance` is `demand_shape` (the per-framework part) followed by `shape_distance` (the
per-agent part); the incremental index in `bestfit_index` calls the two halves separately
and so gets exactly the same floats as a full scan.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class DemandShape(NamedTuple):
    """The framework-only part of H: the reference resource and d_r / C_r / (d_ref / C_ref)
    for each resource `terms` lists (every resource the cluster has, except `ref`)."""

    ref: int
    resources: tuple[int, ...]
    terms: tuple[float, ...]
    #: False when d_ref / C_ref is not positive: no task of this shape fits any agent.
    valid: bool


def reference_resource(demand: np.ndarray, total: np.ndarray) -> int:
    """Index of the resource both vectors are normalized by: cpus unless d_n needs none."""
    if demand[0] > 0:
        return 0
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total > 0, demand / total, 0.0)
    return int(np.argmax(share))


def demand_shape(demand: np.ndarray, total: np.ndarray) -> DemandShape:
    """The per-framework constants of H for `demand` (R,)."""
    ref = reference_resource(demand, total)
    valid = bool(total[ref] > 0 and demand[ref] > 0)
    if not valid:
        return DemandShape(ref, (), (), False)
    d_ref = demand[ref] / total[ref]
    resources = tuple(r for r in range(len(demand)) if r != ref and total[r] > 0)
    # The reference term is |1 - 1| = 0.
    terms = tuple(demand[r] / total[r] / d_ref for r in resources)
    return DemandShape(ref, resources, terms, True)


def shape_distance(shape: DemandShape, residual: np.ndarray, total: np.ndarray) -> np.ndarray:
    """(m,) H of one framework (its `demand_shape`) against the residuals (m, R) of m agents.

    Agents with nothing left of the reference resource get +inf (nothing fits there).
    """
    if not shape.valid:
        return np.full(len(residual), np.inf)
    ref = shape.ref
    res_ref = residual[:, ref] / total[ref]
    empty = res_ref <= 0
    scale = 1.0 / np.where(empty, 1.0, res_ref)
    distance: np.ndarray | None = None
    for r, term in zip(shape.resources, shape.terms, strict=True):
        gap = np.abs(term - residual[:, r] * (scale / total[r]))
        if distance is None:
            distance = gap
        else:
            distance += gap
    if distance is None:  # a single resource: every shape matches
        distance = np.zeros(len(residual))
    distance[empty] = np.inf
    return distance


def fit_distance(demand: np.ndarray, residual: np.ndarray, total: np.ndarray) -> np.ndarray:
    """(A,) H of one framework's demand (R,) against every agent's residual (A, R).

    Agents with nothing left of the reference resource get +inf (nothing fits there).
    """
    return shape_distance(demand_shape(demand, total), residual, total)
