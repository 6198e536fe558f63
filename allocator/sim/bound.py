"""A lower bound on a batch's makespan: the fluid (LP) relaxation, and each queue's chain.

Fluid: the batch's executor-seconds W_g of each group, at d_g per executor, must fit in the
capacity-time the agents offer: minimize T subject to
    sum_i y_{g,i} = W_g,   sum_g d_{g,r} y_{g,i} <= c_{i,r} (T - t_i),   y >= 0,
where y_{g,i} is executor-seconds of group g on agent i and t_i the agent's registration
time (assuming T >= every t_i). Chain: the jobs of one queue run one after another, each at
least as long as its fixed overhead (driver start-up, the quickest executor start-up, serial
tail) plus its work at all the executors it asks for that the cluster can hold at once.

With `seed` the bound is for that seed's jobs (the simulator's draws); without, for every
seed (each jittered part at the low end of its spread).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import linprog

from allocator.model import matches_constraints
from allocator.scenarios.batch import BatchSpec, GroupSpec, JobModel
from allocator.sim.workload import JobDraws


@dataclass(frozen=True)
class MakespanBound:
    fluid_s: float
    chain_s: float

    @property
    def seconds(self) -> float:
        return max(self.fluid_s, self.chain_s)

    @property
    def binding(self) -> str:
        """Which bound is the larger: "fluid" (capacity only, blind to per-job overhead) or
        "chain" (one queue's jobs with their fixed overhead)."""
        return "fluid" if self.fluid_s >= self.chain_s else "chain"


def _jobs(group: GroupSpec, g: int, seed: int | None) -> list[list[JobModel]]:
    """Each queue's job models as the simulator draws them at `seed` (with the quickest
    executor start-up), or at the low end of every spread without a seed."""
    base, jitter = group.job.model(), group.job.jitter
    quickest = base.executor_start_s * (1 - jitter.executor_start_s)
    if seed is None:
        low = JobModel(
            work=base.work * (1 - jitter.work),
            startup_s=base.startup_s * (1 - jitter.startup_s),
            executor_start_s=quickest,
            serial_s=base.serial_s * (1 - jitter.serial_s),
        )
        return [[low] * group.jobs_per_queue for _ in range(group.queues)]
    return [
        [
            replace(JobDraws.draw(base, jitter, seed, g, q, j).model, executor_start_s=quickest)
            for j in range(group.jobs_per_queue)
        ]
        for q in range(group.queues)
    ]


def makespan_bound(batch: BatchSpec, seed: int | None = None) -> MakespanBound:
    resources = batch.resource_names()
    agents = batch.agents
    cap = np.array([[a.resources.get(r, 0.0) for r in resources] for a in agents])
    start = np.array([a.register_at for a in agents])
    groups = batch.groups
    n_g, n_a, n_r = len(groups), len(agents), len(resources)
    demand = np.zeros((n_g, n_r))
    work = np.zeros(n_g)
    chain = 0.0
    for g, group in enumerate(groups):
        vector, wanted = group.executor_demand()
        demand[g] = [vector.get(r, 0.0) for r in resources]
        need = demand[g] > 0
        fit_each = np.floor(np.min(cap[:, need] / demand[g, need], axis=1) + 1e-9)
        at_once = max(1, min(wanted, int(fit_each.sum())))
        queues = _jobs(group, g, seed)
        work[g] = sum(job.work for queue in queues for job in queue)
        gaps = (group.jobs_per_queue - 1) * group.submit_gap_s
        for queue in queues:
            chain = max(chain, gaps + sum(job.duration(at_once) for job in queue))
    eligible = np.array(
        [[matches_constraints(a.attributes, g.constraints) for a in agents] for g in groups]
    )
    # variables: y (n_g * n_a, row-major by group), then T
    n_y = n_g * n_a
    cost = np.zeros(n_y + 1)
    cost[-1] = 1.0
    a_eq = np.zeros((n_g, n_y + 1))
    for g in range(n_g):
        a_eq[g, g * n_a : (g + 1) * n_a] = 1.0
    a_ub = np.zeros((n_a * n_r, n_y + 1))
    b_ub = np.zeros(n_a * n_r)
    for i in range(n_a):
        for r in range(n_r):
            row = i * n_r + r
            a_ub[row, [g * n_a + i for g in range(n_g)]] = demand[:, r]
            a_ub[row, -1] = -cap[i, r]
            b_ub[row] = -cap[i, r] * start[i]
    bounds = [(0, None if eligible[g, i] else 0) for g in range(n_g) for i in range(n_a)]
    bounds.append((float(start.max()), None))
    result = linprog(
        cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=work, bounds=bounds, method="highs"
    )
    fluid = float(result.x[-1]) if result.status == 0 else float("inf")
    return MakespanBound(fluid_s=fluid, chain_s=float(chain))
