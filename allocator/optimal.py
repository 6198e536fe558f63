"""Bounds to compare a fill against: the most tasks any allocation can place.

maximize sum_{n,i} x_{n,i}  subject to  sum_n x_{n,i} d_{n,r} <= c_{i,r},
x_{n,i} = 0 where delta_{n,i} = 0,  sum_i x_{n,i} <= max_tasks_n,  x >= 0,
solved as a MILP (integer tasks) and as its LP relaxation with HiGHS (scipy.optimize.milp).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array, vstack

from allocator.model import Cluster

#: Instances with more framework-agent pairs than this are not solved by default.
DEFAULT_MAX_PAIRS = 200_000


@dataclass(frozen=True)
class Optimum:
    tasks: float | None  # integer optimum; None if not solved to optimality in time
    lp_tasks: float | None
    allocation: np.ndarray | None  # (F, A) integer optimum


def feasibility_constraints(cluster: Cluster) -> tuple[np.ndarray, LinearConstraint, Bounds]:
    """The feasible allocations, shared by the bounds here and the exact solvers: one variable
    per eligible (framework, agent) pair (the returned `pairs`), capacity rows per agent and
    resource, one task-limit row per framework, and x >= 0."""
    n_f, n_a = cluster.n_frameworks, cluster.n_agents
    demand = np.nan_to_num(cluster.demand, nan=0.0)
    pairs = np.argwhere(cluster.eligible)  # variables only for eligible pairs
    rows, cols, vals = [], [], []
    for r in range(len(cluster.resources)):
        use = demand[pairs[:, 0], r]
        keep = use > 0
        rows.append(pairs[keep, 1] + r * n_a)
        cols.append(np.flatnonzero(keep))
        vals.append(use[keep])
    capacity_rows = coo_array(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(n_a * len(cluster.resources), len(pairs)),
    )
    limit_rows = coo_array(
        (np.ones(len(pairs)), (pairs[:, 0], np.arange(len(pairs)))), shape=(n_f, len(pairs))
    )
    upper = np.concatenate([cluster.capacity.T.ravel(), cluster.max_tasks])
    matrix = vstack([capacity_rows, limit_rows]).tocsr()
    return pairs, LinearConstraint(matrix, -np.inf, upper), Bounds(0, np.inf)


def optimum(cluster: Cluster, time_limit: float = 30.0) -> Optimum:
    """Integer and LP-relaxed maximum of total tasks under the same constraints."""
    pairs, constraint, bounds = feasibility_constraints(cluster)
    if len(pairs) == 0:
        return Optimum(0.0, 0.0, np.zeros((cluster.n_frameworks, cluster.n_agents)))
    cost = -np.ones(len(pairs))
    options = {"time_limit": time_limit}
    lp = milp(cost, constraints=constraint, bounds=bounds, integrality=0, options=options)
    ip = milp(cost, constraints=constraint, bounds=bounds, integrality=1, options=options)
    allocation = None
    tasks = None
    if ip.status == 0 and ip.x is not None:
        allocation = np.zeros((cluster.n_frameworks, cluster.n_agents))
        allocation[pairs[:, 0], pairs[:, 1]] = np.round(ip.x)
        tasks = float(np.round(-ip.fun))
    lp_tasks = float(-lp.fun) if lp.status == 0 else None
    return Optimum(tasks, lp_tasks, allocation)
