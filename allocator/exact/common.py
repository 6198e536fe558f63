"""What every exact solver shares: the result type, size limits and the LP water-filling.

The LP water-filling computes a weighted max-min fair allocation of scalar per-framework
values v_n = w_n x_n (w_n > 0) over the feasible set {capacities, eligibility, task limits}:

round k: maximise t subject to v_n >= t for every active framework and v_m >= level_m for
every frozen one. An active framework whose level constraint has a non-zero dual is frozen
at t: by LP duality no feasible allocation raises it above t while every other active
framework keeps t. At least one framework freezes per round (the duals of the active level
constraints sum to 1), so there are at most F rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_array, csr_array, hstack, vstack

from allocator.errors import ScenarioError
from allocator.model import Cluster
from allocator.optimal import feasibility_constraints

#: Largest instance (eligible framework-agent pairs) the exact solvers accept.
MAX_PAIRS = 200_000

#: A dual this small (relative to the largest) does not freeze a framework.
DUAL_TOLERANCE = 1e-9


@dataclass(frozen=True)
class ExactAllocation:
    """A divisible allocation x[n, i] (tasks, real-valued) and how it was found."""

    policy: str
    tasks: np.ndarray  # (F, A)
    alpha: float | None = None
    iterations: int = 0  # LP rounds, or sweeps over the agents for the per-server games
    converged: bool = True
    notes: list[str] = field(default_factory=list)
    #: alpha-psdsf: the largest relative violation of the equilibrium conditions (its
    #: certificate, allocator/exact/alpha_kkt.py); None for the other policies.
    kkt_violation: float | None = None

    @property
    def totals(self) -> np.ndarray:
        """x_n: tasks of each framework over all agents."""
        return self.tasks.sum(axis=1)


def check_size(cluster: Cluster, limit: int = MAX_PAIRS) -> None:
    """Refuse instances the exact solvers would take too long or too much memory on."""
    pairs = int(cluster.eligible.sum())
    if pairs > limit:
        raise ScenarioError(
            f"scenario: {pairs} eligible framework-agent pairs is more than the exact solvers "
            f"take ({limit}); use `fairbroker fill` (progressive filling) for this instance"
        )


def dominant_share_per_task(cluster: Cluster) -> np.ndarray:
    """(F,) max_r d_{n,r} / C_r: one task's global dominant share (paper 001, DRFH)."""
    total = cluster.total
    ratio = np.divide(cluster.demand, total, out=np.zeros_like(cluster.demand), where=total > 0)
    return ratio.max(axis=1)


def max_min_lp(cluster: Cluster, weight_per_task: np.ndarray) -> tuple[np.ndarray, int]:
    """Weighted max-min fair x[n, i] for v_n = weight_per_task[n] * x_n; (x, LP rounds)."""
    cluster.check_runnable()
    n_f, n_a = cluster.n_frameworks, cluster.n_agents
    pairs, constraint, _ = feasibility_constraints(cluster)
    n_p = len(pairs)
    w = np.asarray(weight_per_task, dtype=float)
    resource_rows = csr_array(constraint.A)
    upper = np.asarray(constraint.ub, dtype=float)
    keep = np.isfinite(upper)  # unlimited task counts are no constraint
    resource_rows = resource_rows[np.flatnonzero(keep)]
    upper = upper[keep]
    value_rows = coo_array(
        (w[pairs[:, 0]], (pairs[:, 0], np.arange(n_p))), shape=(n_f, n_p)
    ).tocsr()
    base = hstack([resource_rows, csr_array((resource_rows.shape[0], 1))])
    cost = np.zeros(n_p + 1)
    cost[-1] = -1.0
    frozen = ~cluster.eligible.any(axis=1)
    level = np.zeros(n_f)
    solution = np.zeros(n_p)
    rounds = 0
    while not frozen.all():
        rounds += 1
        active = (~frozen).astype(float)[:, None]
        rows = vstack([base, hstack([-value_rows, csr_array(active)])]).tocsr()
        # A frozen framework keeps (a hair under) its level: exact equality is infeasible
        # after rounding in the previous LP's solution.
        bound = np.where(frozen, -level * (1 - 1e-9), 0.0)
        result = linprog(
            cost,
            A_ub=rows,
            b_ub=np.concatenate([upper, bound]),
            bounds=(0, None),
            method="highs",
        )
        if result.status != 0:
            raise ScenarioError(f"exact solver: the LP failed ({result.message})")
        solution = result.x[:-1]
        t = float(result.x[-1])
        duals = -result.ineqlin.marginals[len(upper) :]
        duals = np.where(frozen, 0.0, duals)
        blocked = duals > DUAL_TOLERANCE * max(1.0, duals.max())
        if not blocked.any():  # cannot happen with an exact dual; keep the loop finite
            blocked = (~frozen) & (duals == duals[~frozen].max())
        level[blocked] = t
        frozen |= blocked
    x = np.zeros((n_f, n_a))
    x[pairs[:, 0], pairs[:, 1]] = np.maximum(solution, 0.0)
    return x, rounds
