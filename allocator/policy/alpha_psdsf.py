"""alpha-PS-DSF online (paper 000's alphaPF-VDS as a progressive-filling key).

Agent j serves the framework whose next task adds the most to its alpha-fair utility
sum_n phi_n f_alpha(x_n / (phi_n gamma_{n,j})): that marginal utility per task is
s^(-alpha) / gamma_{n,j} with s = x_n / (phi_n gamma_{n,j}). Its monotone transform
marginal^(-1/alpha) = x_n gamma_{n,j}^(1/alpha - 1) / phi_n is the key (lowest served
first), written on allocated resources as x_n^(1/alpha) K_{n,j}^(1 - 1/alpha) / phi_n with
K_{n,j} = max_r alloc_{n,r} / c_{j,r} (PS-DSF's share without the weight), so it needs no
d_n and works in both modes. alpha -> infinity is PS-DSF's order; alpha = 1 serves the
framework with the fewest tasks (proportional fairness on tasks, the most efficient end).
The placement of phi_n follows the reconstructed utility of `allocator.exact.alpha`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from allocator.policy.base import CRITERIA, Criterion, Holdings, max_ratio

#: alpha when none is given (one of paper 000's evaluated values: 1, 3, infinity).
DEFAULT_ALPHA = 3.0


@dataclass(frozen=True)
class AlphaParams:
    alpha: float = DEFAULT_ALPHA

    def __post_init__(self) -> None:
        if not 0 < self.alpha < np.inf:
            raise ValueError(f"alpha: must be a positive finite number, got {self.alpha}")


class AlphaPSDSF(Criterion):
    name = "alpha-psdsf"
    per_agent = True

    def __init__(self, alpha: float = DEFAULT_ALPHA) -> None:
        self.alpha = float(AlphaParams(alpha).alpha)

    def _key(self, count: np.ndarray, share: np.ndarray, weight: np.ndarray) -> np.ndarray:
        inverse = 1.0 / self.alpha
        return count**inverse * share ** (1.0 - inverse) / weight

    def column(self, state: Holdings, agent: int) -> np.ndarray:
        share = max_ratio(state.alloc, state.cluster.capacity[agent])
        return self._key(state.count, share, state.cluster.weight)

    def matrix(self, state: Holdings) -> np.ndarray:
        share = max_ratio(state.alloc[:, None, :], state.cluster.capacity[None, :, :])
        return self._key(state.count[:, None], share, state.cluster.weight[:, None])


@CRITERIA.register("alpha-psdsf", AlphaParams)
def _alpha_psdsf(params: AlphaParams) -> AlphaPSDSF:
    return AlphaPSDSF(params.alpha)
