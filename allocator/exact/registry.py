"""The exact policies by name, and one entry point that validates and dispatches."""

from __future__ import annotations

from collections.abc import Callable

from allocator.errors import ScenarioError
from allocator.exact.common import ExactAllocation, check_size
from allocator.exact.drfh import drfh
from allocator.exact.psdsf import psdsf_exact
from allocator.exact.tsf import tsf_exact
from allocator.model import Cluster


def _alpha(cluster: Cluster, alpha: float) -> ExactAllocation:
    from allocator.exact.alpha import alpha_psdsf

    return alpha_psdsf(cluster, alpha)


#: name -> (solver taking (cluster, alpha), the progressive-filling scheduler it compares to)
EXACT_POLICIES: dict[str, tuple[Callable[[Cluster, float], ExactAllocation], str]] = {
    "drfh": (lambda cluster, _alpha: drfh(cluster), "drf"),
    "psdsf-exact": (lambda cluster, _alpha: psdsf_exact(cluster), "psdsf"),
    "alpha-psdsf": (_alpha, "alpha-psdsf"),
    "tsf-exact": (lambda cluster, _alpha: tsf_exact(cluster), "tsf"),
}

#: alphaPF-VDS's alpha when none is given (one of paper 000's evaluated values).
DEFAULT_ALPHA = 3.0


def solve(cluster: Cluster, policy: str, alpha: float = DEFAULT_ALPHA) -> ExactAllocation:
    """The divisible allocation of `policy` on `cluster` (one-line errors for bad input)."""
    name = policy.lower()
    if name not in EXACT_POLICIES:
        known = ", ".join(EXACT_POLICIES)
        raise ScenarioError(f"policy: unknown {policy!r} (known: {known})")
    if not alpha > 0 or alpha == float("inf"):
        raise ScenarioError(f"alpha: must be a positive finite number, got {alpha}")
    check_size(cluster)
    cluster.check_runnable()
    return EXACT_POLICIES[name][0](cluster, alpha)
