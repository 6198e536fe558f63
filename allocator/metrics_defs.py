"""Allocation metrics, defined once: what Prometheus exports, what `fairbroker sim` and
`fairbroker batch` record as time series, and what their plots draw.

Everything is a function of arrays taken from the broker's `Allocation` message
(`allocator.broker.allocation_frame.AllocationFrame`, which reads the message; this module
knows no broker) or, for the simulator's hot loop, of the engine's group totals
(`GroupUsage.of`); both give the same numbers for the same state. Shares are unweighted
(divide by the weight for the value a scheduler compares) and read only allocated
resources, as the policy criteria do (`allocator.policy.base.max_ratio`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from allocator.model import Cluster
from allocator.policy.base import max_ratio


def jain(values: np.ndarray) -> float:
    """Jain's index (sum x)^2 / (n sum x^2); 1 when all equal, 1/n when one holds all."""
    if len(values) == 0 or not np.any(values):
        return 1.0
    return float(values.sum() ** 2 / (len(values) * np.square(values).sum()))


def ratio(amount: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """amount / capacity per resource; 0 where there is no capacity."""
    return np.divide(
        amount, capacity, out=np.zeros(np.broadcast_shapes(amount.shape, capacity.shape)),
        where=capacity > 0,
    )  # fmt: skip


def dominant_shares(held: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """DRF's dominant share max_r held_r / C_r of each row of `held` (cluster-wide)."""
    return max_ratio(held, capacity)


def agent_dominant_shares(held: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """(T, A) PS-DSF's per-agent share K_{n,j} = max_r held_{n,r} / c_{j,r} (eqs. 4-5)."""
    return max_ratio(held[:, None, :], capacity[None, :, :])


def tasks_alone(demand: np.ndarray, capacity: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """TSF's y_n: whole executors of d_n its eligible agents hold, each on its own (the
    policy's gamma_{n,i}, `Cluster.fit`, floored and summed as in allocator.policy.tsf)."""
    resources = tuple(f"r{r}" for r in range(demand.shape[1]))
    gamma = Cluster.from_arrays(capacity, demand, resources, eligible=eligible).fit()
    return np.floor(gamma + 1e-9).sum(axis=1)


def task_shares(
    running: np.ndarray, demand: np.ndarray, capacity: np.ndarray, eligible: np.ndarray
) -> np.ndarray:
    """TSF's task share x_n / y_n (0 for a tenant that fits nowhere and so runs nothing)."""
    alone = tasks_alone(demand, capacity, eligible)
    return np.divide(running, alone, out=np.zeros(len(running)), where=alone > 0)


class EngineLike(Protocol):
    """What GroupUsage reads: the online engine, or a live batch's snapshot view."""

    resources: tuple[str, ...]

    def capacity_total(self) -> np.ndarray: ...

    def allocated_by_role(self) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class GroupUsage:
    """Allocated resources per group (Mesos role) beside the registered capacity."""

    resources: tuple[str, ...]
    capacity: np.ndarray  # (R,) summed over agents
    groups: tuple[str, ...]
    held: np.ndarray  # (G, R)

    @classmethod
    def of(cls, source: EngineLike) -> GroupUsage:
        by_group = source.allocated_by_role()
        groups = tuple(sorted(by_group))
        resources = tuple(source.resources)
        held = np.array([by_group[g] for g in groups]).reshape(len(groups), len(resources))
        return cls(resources, np.asarray(source.capacity_total(), float), groups, held)

    def allocated(self) -> np.ndarray:
        """(R,) resources allocated to all groups."""
        return self.held.sum(axis=0)

    def allocated_ratio(self) -> np.ndarray:
        """(R,) fraction of the registered capacity allocated (paper 002 Figs. 1-5)."""
        return ratio(self.allocated(), self.capacity)

    def group_ratio(self) -> np.ndarray:
        """(G, R) fraction of the registered capacity allocated to each group."""
        return ratio(self.held, self.capacity)

    def dominant_shares(self) -> np.ndarray:
        """(G,) each group's cluster-wide dominant share."""
        return dominant_shares(self.held, self.capacity)

    def fairness(self, groups: Iterable[str] | None = None) -> float:
        """Jain's index over the dominant shares of `groups` (default: every group listed,
        i.e. with registered tenants); a group not listed here counts with share 0."""
        shares = dict(zip(self.groups, self.dominant_shares(), strict=True))
        chosen = sorted(shares if groups is None else set(groups))
        return jain(np.array([shares.get(g, 0.0) for g in chosen]))
