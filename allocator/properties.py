"""Checkers for the fairness properties of paper 000's Table 1, for any allocation x[n, i].

Each checker returns the frameworks (or pairs) that break the property; empty means it
holds. `integer=True` judges whole-task allocations (progressive filling) by whole tasks: a
bundle is worth the whole tasks it holds on each agent, and "can grow" means one more task.

- sharing incentive (paper 000 Sec. 3.3): x_n at least what n runs with the fraction
  phi_n / sum_m phi_m of every agent (eligible or not), or its task limit.
- envy-freeness: n runs no more tasks with m's per-agent bundles, scaled by phi_n / phi_m,
  than with its own.
- Pareto optimality: no allocation gives every framework at least x_n and one more (LP, or
  MILP for whole tasks, over the same constraints); NaN ("unknown") when the solver stops
  at its time limit or fails without an answer.
- PS-DSF (Def. 4): on every agent i, a framework that can still use tasks is blocked by a
  saturated resource it needs whose other users there all have a virtual dominant share
  s_{m,i} / phi_m = x_m / (phi_m gamma_{m,i}) at most its own.
- bottleneck fairness (Def. 2): when a resource rho is every eligible framework's dominant
  resource on every agent, the allocation is (per agent) weighted max-min fair in rho. With
  such a rho, s_{n,i} = x_n d_{n,rho} / c_{i,rho}, so this is the Def. 4 test on those
  instances; `bottleneck` returns None where there is no bottleneck (not applicable).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import LinearConstraint, milp
from scipy.sparse import coo_array

from allocator.model import Cluster
from allocator.optimal import feasibility_constraints

#: Relative slack for continuous allocations (solver round-off).
TOLERANCE = 1e-6


def tasks_from_bundles(demand: np.ndarray, bundles: np.ndarray, integer: bool = False) -> float:
    """Tasks of per-task `demand` (R,) that per-agent `bundles` (A, R) hold."""
    need = demand > 0
    per_agent = (bundles[:, need] / demand[need]).min(axis=1)
    per_agent = np.floor(per_agent + 1e-9) if integer else per_agent
    return float(per_agent.sum())


def uniform_tasks(cluster: Cluster, integer: bool = False) -> np.ndarray:
    """(F,) tasks each framework runs with phi_n / sum phi of every agent (eligible ones)."""
    share = cluster.weight / cluster.weight.sum()
    tasks = share[:, None] * cluster.fit()
    return (np.floor(tasks + 1e-9) if integer else tasks).sum(axis=1)


def _slack(x: np.ndarray, integer: bool) -> float:
    return 0.5 if integer else TOLERANCE * max(1.0, float(np.abs(x).max(initial=0.0)))


def sharing_incentive(cluster: Cluster, x: np.ndarray, integer: bool = False) -> np.ndarray:
    """Frameworks that run fewer tasks than under the uniform split."""
    owed = np.minimum(uniform_tasks(cluster, integer), cluster.max_tasks)
    return np.flatnonzero(x.sum(axis=1) < owed - _slack(x, integer))


def envy(cluster: Cluster, x: np.ndarray, integer: bool = False) -> list[tuple[int, int]]:
    """(n, m) pairs where n would run more tasks with m's (weight-scaled) bundles."""
    demand = cluster.demand
    totals = x.sum(axis=1)
    slack = _slack(x, integer)
    found = []
    for m in range(cluster.n_frameworks):
        bundles = x[m][:, None] * demand[m][None, :]  # (A, R) what m holds on each agent
        for n in range(cluster.n_frameworks):
            if n == m:
                continue
            scaled = bundles * (cluster.weight[n] / cluster.weight[m])
            scaled = np.where(cluster.eligible[n][:, None], scaled, 0.0)
            could = min(tasks_from_bundles(demand[n], scaled, integer), cluster.max_tasks[n])
            if could > totals[n] + slack:
                found.append((n, m))
    return found


#: Seconds the Pareto (MI)LP may take before the answer is "unknown".
PARETO_TIME_LIMIT = 30.0


def pareto_improvement(
    cluster: Cluster, x: np.ndarray, integer: bool = False, time_limit: float = PARETO_TIME_LIMIT
) -> float:
    """How many more tasks in all an allocation can give with nobody getting fewer: 0 when
    x is Pareto-optimal, NaN when the (MI)LP did not finish (time limit or solver failure)
    without finding an improvement, so "unknown" is never counted as "holds"."""
    pairs, constraint, bounds = feasibility_constraints(cluster)
    totals = x.sum(axis=1)
    if len(pairs) == 0:
        return 0.0  # nothing can run anywhere: nothing to improve
    per_framework = coo_array(
        (np.ones(len(pairs)), (pairs[:, 0], np.arange(len(pairs)))),
        shape=(cluster.n_frameworks, len(pairs)),
    )
    # Floors relaxed by 1e-8: at 1e-9 (below HiGHS's 1e-7 feasibility tolerance) x itself
    # can look infeasible; at 1e-7 the slack alone buys a 'gain' above the threshold.
    floor = totals if integer else totals - 1e-8 * np.maximum(totals, 1.0)
    keep = LinearConstraint(per_framework, floor, np.inf)
    result = milp(
        -np.ones(len(pairs)),
        constraints=[constraint, keep],
        bounds=bounds,
        integrality=1 if integer else 0,
        options={"time_limit": time_limit},
    )
    threshold = 0.5 if integer else TOLERANCE * max(1.0, float(totals.sum()))
    if result.x is not None:
        gain = float(result.x.sum()) - float(totals.sum())
        if gain > threshold:
            return gain  # a feasible improvement, proven even if the solver stopped early
    if result.status != 0 or result.x is None:
        return float("nan")  # not solved to optimality: whether x is Pareto-optimal is unknown
    return 0.0


def psdsf_violations(
    cluster: Cluster, x: np.ndarray, integer: bool = False
) -> list[tuple[int, int]]:
    """(n, i) pairs where framework n could grow on agent i at the expense of frameworks
    with a larger virtual dominant share there (Def. 4)."""
    gamma = cluster.fit()
    demand = cluster.demand
    totals = x.sum(axis=1)
    residual = cluster.capacity - x.T @ demand  # (A, R)
    slack = _slack(x, integer)
    found = []
    for n in np.flatnonzero(totals < cluster.max_tasks - slack):
        for i in np.flatnonzero(gamma[n] > 0):
            rate = cluster.weight * np.where(gamma[:, i] > 0, gamma[:, i], np.inf)
            share = totals / rate  # s_{m,i} / phi_m
            own = (totals[n] + (1 if integer else 0)) / rate[n]
            # Frameworks n may take from: others on i with a larger share than its own.
            richer = (share > own + TOLERANCE * max(own, 1e-12)) & (x[:, i] > 0)
            richer[n] = False
            room = residual[i] + x[richer, i] @ demand[richer]
            need = demand[n] > 0
            if integer:
                blocked = (room[need] < demand[n, need] - 1e-9).any()
            else:
                tol = TOLERANCE * np.maximum(cluster.capacity[i], 1.0)
                blocked = (room[need] <= tol[need]).any()
            if not blocked:
                found.append((int(n), int(i)))
    return found


def bottleneck_resource(cluster: Cluster) -> int | None:
    """A resource that is every eligible framework's dominant resource on every agent."""
    eligible = cluster.fit() > 0
    ratio = np.divide(
        cluster.demand[:, None, :],
        cluster.capacity[None, :, :],
        out=np.zeros((cluster.n_frameworks, cluster.n_agents, len(cluster.resources))),
        where=cluster.capacity[None, :, :] > 0,
    )
    top = ratio.max(axis=2)
    for rho in range(len(cluster.resources)):
        dominant = ratio[:, :, rho] >= top * (1 - 1e-12)
        if dominant[eligible].all():
            return rho
    return None


def bottleneck(cluster: Cluster, x: np.ndarray, integer: bool = False) -> list | None:
    """Violations of bottleneck fairness, or None where no bottleneck resource exists."""
    if bottleneck_resource(cluster) is None:
        return None
    return psdsf_violations(cluster, x, integer)
