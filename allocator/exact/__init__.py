"""Exact (divisible) fair allocations, beside progressive filling's whole-task approximations.

Each solver takes a `Cluster` and returns an `ExactAllocation` with real-valued x[n, i]:

- `drfh`: paper 001's DRFH, weighted max-min of global dominant shares (LP water-filling).
- `tsf-exact`: max-min of task shares x_n / (phi_n y_n) (LP water-filling).
- `psdsf-exact`: paper 000's Def. 4, per-server weighted max-min of virtual dominant shares.
- `alpha-psdsf`: paper 000's alphaPF-VDS, per-server alpha-fair utility, equilibrium among
  servers.
"""

from __future__ import annotations

from allocator.exact.common import ExactAllocation, check_size
from allocator.exact.registry import EXACT_POLICIES, solve

__all__ = ["EXACT_POLICIES", "ExactAllocation", "check_size", "solve"]
