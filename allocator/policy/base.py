"""The criterion interface: each fairness criterion scores holders; the lowest is served.

A criterion is a vectorised expression over all holders (and, for per-server criteria, over
agents). A holder is a framework, or at role level a role holding what its frameworks hold
(`allocator.policy.levels.RoleHoldings`). `Holdings` is everything a criterion may read:
allocated resources, task counts, the agents' residuals and capacities and the holders'
weights. None of it is the demand d_n, so the same code serves both modes; a criterion that
needs d_n (TSF) reads the framework-level `AllocationState` and computes its role level
itself.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from allocator.policy.registry import Registry
from allocator.state import AllocationState


class HoldersCluster(Protocol):
    """The part of the cluster a criterion divides by."""

    @property
    def weight(self) -> np.ndarray:
        """(H,) phi of each holder."""
        ...

    @property
    def total(self) -> np.ndarray:
        """(R,) C_r: cluster-wide capacity."""
        ...

    @property
    def capacity(self) -> np.ndarray:
        """(A, R) c_{j,r}: each agent's capacity."""
        ...


class Holdings(Protocol):
    """What a criterion reads: an `AllocationState` (one holder per framework) or a
    `RoleHoldings` (one per role). Read-only; a criterion never changes it."""

    @property
    def alloc(self) -> np.ndarray:
        """(H, R) resources allocated to each holder."""
        ...

    @property
    def count(self) -> np.ndarray:
        """(H,) x_n: tasks each holder runs."""
        ...

    @property
    def residual(self) -> np.ndarray:
        """(A, R) what is free on each agent."""
        ...

    @property
    def tol(self) -> np.ndarray:
        """(R,) the tolerance below which an amount counts as zero."""
        ...

    @property
    def cluster(self) -> HoldersCluster: ...


class Criterion:
    """Agent-independent criterion unless `per_agent` is set."""

    name: str = ""
    per_agent: bool = False
    needs_demand: bool = False

    def values(self, state: Holdings) -> np.ndarray:
        """(H,) criterion of each holder, for criteria that do not depend on the agent."""
        raise NotImplementedError

    def column(self, state: Holdings, agent: int) -> np.ndarray:
        """(H,) criterion of each holder evaluated at `agent`."""
        return self.values(state)

    def matrix(self, state: Holdings) -> np.ndarray:
        """(H, A) criterion of every holder at every agent."""
        values = self.values(state)
        return np.broadcast_to(values[:, None], (len(values), state.residual.shape[0]))

    def role_column(self, state: AllocationState, agent: int | None = None) -> np.ndarray:
        """(G,) criterion of each role's aggregate allocation (at `agent` if per-agent)."""
        from allocator.policy.levels import RoleHoldings

        roles = RoleHoldings.of(state)
        if self.per_agent and agent is not None:
            return self.column(roles, agent)
        if self.per_agent:  # no agent in view: the role's best (lowest) share over agents
            return self.matrix(roles).min(axis=1)
        return self.values(roles)

    def role_matrix(self, state: AllocationState) -> np.ndarray:
        """(G, A) criterion of each role's aggregate allocation at every agent."""
        from allocator.policy.levels import RoleHoldings

        return self.matrix(RoleHoldings.of(state))


#: Every criterion by name (allocator.policy.registry); each module registers its own.
CRITERIA: Registry[Criterion] = Registry("criterion")


def max_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """max_r numerator[..., r] / denominator[..., r], skipping resources with no denominator.

    A resource an agent does not have (or has no residual of) does not enter the share: the
    framework cannot be placed there anyway, and treating it as infinite would order
    frameworks by which resources they happen to name. The loop is over resources (a handful),
    each step a vector operation over all frameworks (and agents).
    """
    out: np.ndarray | None = None
    for r in range(numerator.shape[-1]):
        den = denominator[..., r]
        if den.ndim == 0:
            if den <= 0:
                continue
            ratio = numerator[..., r] / den
        else:
            ratio = np.divide(
                numerator[..., r],
                den,
                out=np.zeros(np.broadcast_shapes(numerator[..., r].shape, den.shape)),
                where=den > 0,
            )
        out = ratio if out is None else np.maximum(out, ratio, out=out)
    if out is None:
        return np.zeros(np.broadcast_shapes(numerator.shape, denominator.shape)[:-1])
    return out
