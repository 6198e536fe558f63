"""The broker's `Allocation` message as arrays (`AllocationFrame.of`), for the Prometheus
exporter: the values are allocator.metrics_defs's functions of those arrays, the same
definitions the simulators' time series use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from allocator.metrics_defs import (
    GroupUsage,
    agent_dominant_shares,
    dominant_shares,
    jain,
    task_shares,
)
from allocator.model import matches_constraints

if TYPE_CHECKING:
    from allocator.broker.proto import pb
    from allocator.engine import Engine


@dataclass(frozen=True)
class AllocationFrame:
    """An `Allocation` message as arrays: T tenants, A agents, R resources (native units)."""

    resources: tuple[str, ...]
    tenants: tuple[str, ...]
    groups: tuple[str, ...]  # (T,) each tenant's group
    weight: np.ndarray  # (T,)
    declared: np.ndarray  # (T,) bool: the policy sees the demand
    demand: np.ndarray  # (T, R) per executor
    held: np.ndarray  # (T, R)
    running: np.ndarray  # (T,) executors accounted (x_n)
    target: np.ndarray  # (T,)
    pending: np.ndarray  # (T,)
    agents: tuple[str, ...]
    capacity: np.ndarray  # (A, R)
    used: np.ndarray  # (A, R)
    residual: np.ndarray  # (A, R)
    tasks: np.ndarray  # (T, A) executors of each tenant on each agent
    eligible: np.ndarray  # (T, A) bool, from the tenants' constraints

    @classmethod
    def of(
        cls,
        allocation: pb.Allocation,
        constraints: Mapping[str, Mapping[str, object]] | None = None,
    ) -> AllocationFrame:
        """`constraints`: tenant -> required agent attributes (default: none)."""
        resources = _resources(allocation)
        tenants = allocation.tenants
        agents = allocation.agents
        tenant_index = {t.tenant_id: n for n, t in enumerate(tenants)}
        tasks = np.zeros((len(tenants), len(agents)))
        for i, agent in enumerate(agents):
            for tenant_id, count in agent.executors.items():
                if tenant_id in tenant_index:
                    tasks[tenant_index[tenant_id], i] = count
        constraints = constraints or {}
        eligible = np.array(
            [
                [matches_constraints(dict(a.attributes), dict(constraints.get(t.tenant_id, {})))
                 for a in agents]
                for t in tenants
            ],
            dtype=bool,
        ).reshape(len(tenants), len(agents))  # fmt: skip
        return cls(
            resources=resources,
            tenants=tuple(t.tenant_id for t in tenants),
            groups=tuple(t.group or "*" for t in tenants),
            weight=np.array([t.weight or 1.0 for t in tenants]),
            declared=np.array([t.declared for t in tenants], dtype=bool),
            demand=_matrix([t.demand for t in tenants], resources),
            held=_matrix([t.allocated for t in tenants], resources),
            running=np.array([t.running for t in tenants], dtype=float),
            target=np.array([t.target for t in tenants], dtype=float),
            pending=np.array([t.pending for t in tenants], dtype=float),
            agents=tuple(a.name for a in agents),
            capacity=_matrix([a.capacity for a in agents], resources),
            used=_matrix([a.allocated for a in agents], resources),
            residual=_matrix([a.residual for a in agents], resources),
            tasks=tasks,
            eligible=eligible,
        )

    def capacity_total(self) -> np.ndarray:
        return self.capacity.sum(axis=0)

    def usage(self) -> GroupUsage:
        groups = tuple(sorted(set(self.groups)))
        held = np.zeros((len(groups), len(self.resources)))
        np.add.at(held, [groups.index(g) for g in self.groups], self.held)
        return GroupUsage(self.resources, self.capacity_total(), groups, held)

    def dominant_shares(self) -> np.ndarray:
        return dominant_shares(self.held, self.capacity_total())

    def agent_dominant_shares(self) -> np.ndarray:
        return agent_dominant_shares(self.held, self.capacity)

    def task_shares(self) -> np.ndarray:
        return task_shares(self.running, self.demand, self.capacity, self.eligible)

    def fairness(self) -> float:
        """Jain's index over the tenants' dominant shares."""
        return jain(self.dominant_shares())


def constraints_of(engine: Engine) -> dict[str, dict[str, object]]:
    """Each framework's placement constraints, for `AllocationFrame.of` on a simulated run."""
    return {name: dict(record.constraints) for name, record in engine.frameworks.items()}


def _resources(allocation: pb.Allocation) -> tuple[str, ...]:
    """The broker's resource order, then any other resource a message names (sorted)."""
    names = list(allocation.broker.resources)
    named = {r for a in allocation.agents for r in a.capacity}
    named |= {r for t in allocation.tenants for r in (*t.demand, *t.allocated)}
    return (*names, *sorted(named - set(names)))


def _matrix(rows: Sequence[Mapping[str, float]], resources: tuple[str, ...]) -> np.ndarray:
    return np.array([[row.get(r, 0.0) for r in resources] for row in rows], dtype=float).reshape(
        len(rows), len(resources)
    )
