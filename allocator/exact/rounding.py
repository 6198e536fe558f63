"""Whole tasks from a divisible allocation, without breaking any constraint.

Rounding rule: floor every x[n, i] (which keeps every capacity, eligibility and task limit),
then visit the pairs in decreasing order of their fractional part x[n, i] - floor(x[n, i])
and give each one more task if that task still fits on the agent and the framework is below
its task limit. Every pair gains at most one task, so no framework gets more than the
ceiling of its divisible share on any agent.
"""

from __future__ import annotations

import numpy as np

from allocator.model import Cluster

#: x within this of an integer counts as that integer (solver round-off).
SNAP = 1e-7


def round_feasible(cluster: Cluster, x: np.ndarray) -> np.ndarray:
    """(F, A) integer allocation by the rule above."""
    demand = cluster.demand
    snapped = np.where(np.abs(x - np.round(x)) <= SNAP, np.round(x), x)
    tasks = np.floor(np.maximum(snapped, 0.0)) * cluster.eligible
    tolerance = 1e-9 * np.maximum(cluster.capacity, 1.0)
    residual = cluster.capacity - tasks.T @ demand
    if (residual < -tolerance).any() or (tasks.sum(axis=1) > cluster.max_tasks).any():
        tasks = np.floor(np.maximum(x, 0.0)) * cluster.eligible  # snapping overshot: plain floor
        residual = cluster.capacity - tasks.T @ demand
    fraction = np.where(cluster.eligible, snapped - tasks, 0.0)
    order = np.argsort(-fraction, axis=None, kind="stable")
    count = tasks.sum(axis=1)
    for flat in order:
        n, i = divmod(int(flat), cluster.n_agents)
        if fraction[n, i] <= SNAP:
            break
        if count[n] + 1 <= cluster.max_tasks[n] and (demand[n] <= residual[i] + tolerance[i]).all():
            tasks[n, i] += 1
            count[n] += 1
            residual[i] -= demand[n]
    return tasks.astype(np.int64)
