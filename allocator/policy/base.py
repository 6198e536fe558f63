"""The criterion interface: each fairness criterion scores frameworks; the lowest is served.

A criterion is a vectorised expression over all frameworks (and, for per-server criteria,
over agents). Criteria read only allocated resources, counts and the demand the allocator is
allowed to know (`state.known_demand`), so the same code serves both modes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from allocator.state import AllocationState


class Criterion:
    """Agent-independent criterion unless `per_agent` is set."""

    name: str = ""
    per_agent: bool = False
    needs_demand: bool = False

    def values(self, state: AllocationState) -> np.ndarray:
        """(F,) criterion of each framework, for criteria that do not depend on the agent."""
        raise NotImplementedError

    def column(self, state: AllocationState, agent: int) -> np.ndarray:
        """(F,) criterion of each framework evaluated at `agent`."""
        return self.values(state)

    def matrix(self, state: AllocationState) -> np.ndarray:
        """(F, A) criterion of every framework at every agent."""
        values = self.values(state)
        return np.broadcast_to(values[:, None], (len(values), state.residual.shape[0]))

    def role_column(self, state: AllocationState, agent: int | None = None) -> np.ndarray:
        """(G,) criterion of each role's aggregate allocation (at `agent` if per-agent)."""
        from allocator.policy.levels import RoleView

        view: Any = RoleView(state)
        if self.per_agent and agent is not None:
            return self.column(view, agent)
        if self.per_agent:  # no agent in view: the role's best (lowest) share over agents
            return self.matrix(view).min(axis=1)
        return self.values(view)

    def role_matrix(self, state: AllocationState) -> np.ndarray:
        """(G, A) criterion of each role's aggregate allocation at every agent."""
        from allocator.policy.levels import RoleView

        view: Any = RoleView(state)
        return self.matrix(view)


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
