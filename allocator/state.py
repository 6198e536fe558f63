"""Mutable allocation state: x_{n,i}, residual capacity, per-framework allocation.

The same state object serves a static progressive filling and each allocation run of the
online engine; the policy code reads it and `grant`/`release` are the only writers.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property
from typing import NamedTuple

import numpy as np

from allocator.model import Cluster


class Mode(StrEnum):
    """How much a grant hands out.

    characterized: one task's worth of d_n per grant (the tenant declared d_n).
    oblivious: the agent's whole remainder; the tenant keeps the whole tasks that fit.
    """

    CHARACTERIZED = "characterized"
    OBLIVIOUS = "oblivious"


class Grant(NamedTuple):
    """A grant: `tasks` tasks of `framework` on `agent` (a tuple: a large fill makes
    hundreds of thousands)."""

    framework: int
    agent: int
    tasks: int


class AllocationState:
    """Allocation of tasks to agents, with the derived quantities the criteria read.

    tasks[n, i] = x_{n,i}; count[n] = x_n; alloc[n] = resources held by n (sum over agents);
    residual[i] = c_i minus everything allocated on agent i.
    """

    def __init__(
        self,
        cluster: Cluster,
        mode: Mode | str = Mode.CHARACTERIZED,
        known_demand: np.ndarray | None = None,
        tol: np.ndarray | None = None,
        tasks: np.ndarray | None = None,
        running: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """`known_demand` overrides what the policy may know (the online engine passes the
        declared or observed demand of each framework); `tol` the fit tolerance (the
        engine's whole cluster's, over some of its agents); `tasks` x_{n,i} in place of a
        dense (F, A) array of zeros (the engine's sparse placements); `running` (count,
        used): start from those tasks as `load(tasks, count, used)` does."""
        self.cluster = cluster
        self.mode = Mode(mode)
        n_f, n_a = cluster.n_frameworks, cluster.n_agents
        n_r = len(cluster.resources)
        if running is None:  # (else `load` makes them)
            # Column-major: the hot loops read one resource across all agents or frameworks.
            self.residual = np.asfortranarray(cluster.capacity, dtype=float).copy(order="F")
            self.tasks = np.zeros((n_f, n_a), dtype=np.int64) if tasks is None else tasks
            self.count = np.zeros(n_f, dtype=float)
            self.alloc = np.zeros((n_f, n_r), dtype=float, order="F")
        self.limit = np.array(cluster.max_tasks, dtype=float)
        #: Demand the allocator may use: declared in characterized mode, observed from granted
        #: tasks in oblivious mode (NaN until the framework has run a task).
        if known_demand is not None:
            self.known_demand = np.array(known_demand, dtype=float)
        elif self.mode is Mode.CHARACTERIZED:
            self.known_demand = cluster.demand.copy()
        else:
            self.known_demand = np.full_like(cluster.demand, np.nan)
        self.demand_version = 0
        # Frameworks without a demand cannot take tasks in a static fill.
        self.runnable = cluster.has_demand.copy()
        self.fit_demand = cluster.fit_demand
        if tol is None:
            self.tol = 1e-9 * np.maximum(cluster.capacity.max(axis=0, initial=0.0), 1.0)
        else:
            self.tol = np.array(tol, dtype=float)
        #: Writes so far (grants and releases), and the write that last changed each agent's
        #: residual; incremental indexes (best fit) use them to find the agents to recheck.
        self.changes = 0
        self.changed_at = np.zeros(n_a, dtype=np.int64)
        self.withheld = np.zeros((n_a, n_r), order="F")
        if running is None:
            self._wanting = self.runnable & (self.count < self.limit)
        else:
            assert tasks is not None
            self.load(tasks, *running)

    # ---- feasibility -------------------------------------------------------------------
    @cached_property
    def eligible_by_agent(self) -> np.ndarray:
        """(A, F) eligibility, contiguous by agent (what `fits_agent` reads); made on first
        use, as framework-first fills never read it."""
        return np.ascontiguousarray(self.cluster.eligible.T)

    def wanting(self) -> np.ndarray:
        """Frameworks that still want a task (runnable and below their task limit)."""
        return self._wanting

    def refresh_wanting(self, framework: int) -> None:
        """Recompute one framework's `wanting` after its count or limit changed."""
        self._wanting[framework] = (
            self.runnable[framework] and self.count[framework] < self.limit[framework]
        )

    def fits_agent(self, agent: int) -> np.ndarray:
        """(F,) frameworks that want a task and fit one more whole task on `agent`."""
        room = self.residual[agent] + self.tol
        ok = self._wanting & self.eligible_by_agent[agent]
        for r in range(len(room)):
            ok &= self.fit_demand[:, r] <= room[r]
        return ok

    def fits_framework(self, framework: int) -> np.ndarray:
        """(A,) agents where `framework` fits one more whole task (ignoring its limit)."""
        ok = self.cluster.eligible[framework].copy()
        d = self.fit_demand[framework]
        for r in range(len(d)):
            if d[r] > 0:
                ok &= self.residual[:, r] >= d[r] - self.tol[r]
        return ok

    def fits_all(self) -> np.ndarray:
        """(F, A) framework-agent pairs where one more task fits."""
        room = self.residual[None, :, :] + self.tol
        ok = (self.fit_demand[:, None, :] <= room).all(axis=2)
        return ok & self.cluster.eligible & self.wanting()[:, None]

    def tasks_that_fit(self, framework: int, agent: int) -> int:
        """Whole tasks of `framework` that the agent's remainder holds, capped by its limit."""
        d = self.fit_demand[framework]
        need = d > 0
        whole = np.floor((self.residual[agent, need] + self.tol[need]) / d[need]).min()
        left = self.limit[framework] - self.count[framework]
        return int(max(0.0, min(whole, left)))

    def load(self, tasks: np.ndarray, count: np.ndarray, used: np.ndarray) -> None:
        """Start from tasks already running, all at once (the online engine's snapshot).

        `tasks` is x_{n,i} and is used in place: grants are written into it. `count` is
        x_n and `used` each agent's allocated resources, which the engine keeps up to date.
        """
        demand = self.cluster.held_demand
        self.tasks = tasks
        self.count = count.astype(float)
        # Made column-major at once: numpy broadcasts over a row of a few resources slowly.
        self.alloc = np.multiply(self.count[:, None], demand, order="F")
        self.residual = np.subtract(self.cluster.capacity, used, order="F")
        self._wanting = self.runnable & (self.count < self.limit)
        self.changes += 1
        self.changed_at[:] = self.changes

    # ---- writers -----------------------------------------------------------------------
    def grant(self, framework: int, agent: int, tasks: int = 1) -> Grant:
        d = self.fit_demand[framework]
        self.tasks[framework, agent] += tasks
        self.count[framework] += tasks
        self.alloc[framework] += tasks * d
        self.residual[agent] -= tasks * d
        self.changes += 1
        self.changed_at[agent] = self.changes
        self.refresh_wanting(framework)
        if np.isnan(self.known_demand[framework, 0]):
            self.known_demand[framework] = d
            self.demand_version += 1
        return Grant(framework, agent, tasks)

    def release(self, framework: int, agent: int, tasks: int = 1) -> None:
        if tasks > self.tasks[framework, agent]:
            raise ValueError(
                f"release of {tasks} tasks of framework {framework} on agent {agent}, "
                f"which holds {self.tasks[framework, agent]}"
            )
        d = self.fit_demand[framework]
        self.tasks[framework, agent] -= tasks
        self.count[framework] -= tasks
        self.alloc[framework] -= tasks * d
        self.residual[agent] += tasks * d
        self.changes += 1
        self.changed_at[agent] = self.changes
        if self.count[framework] == 0:
            self.alloc[framework] = 0.0  # no float drift when a framework is empty
        self.refresh_wanting(framework)

    def withhold(self, agent: int, framework: int | None = None) -> None:
        """Take an agent's remainder out of this run (oblivious mode: it is out on offer;
        what the tenant declines returns at the next allocation run, as in Mesos). Offered to
        `framework`, it counts toward that framework's allocation (and so its role's) for
        the rest of the run, as Mesos accounts an outstanding offer as allocated."""
        if framework is not None:
            self.alloc[framework] += self.residual[agent]
        self.withheld[agent] += self.residual[agent]
        self.residual[agent] = 0.0
        self.changes += 1
        self.changed_at[agent] = self.changes

    # ---- summaries ---------------------------------------------------------------------
    def used(self) -> np.ndarray:
        return self.cluster.capacity - self.residual - self.withheld

    def utilization(self) -> np.ndarray:
        """Fraction of the cluster's capacity allocated, per resource."""
        total = self.cluster.total
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(total > 0, self.used().sum(axis=0) / total, 0.0)
