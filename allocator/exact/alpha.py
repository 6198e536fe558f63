"""alphaPF-VDS (paper 000 Sec. 3): every agent maximises its own alpha-fair utility of the
virtual dominant shares of its eligible frameworks, and the allocation is the equilibrium
among agents.

Agent i solves, with the tasks o_n each framework holds elsewhere fixed,

    maximise   sum_n phi_n f_alpha(x_n / (phi_n gamma_{n,i})),  x_n = o_n + x_{n,i}
    subject to sum_n x_{n,i} d_{n,r} <= c_{i,r},  0 <= x_{n,i},  x_n <= max_tasks_n,

with f_alpha(s) = s^(1-alpha)/(1-alpha) and f_1 = log. The extracted paper text lost this
formula: the form above, and in particular where phi_n sits, is our reconstruction (the
digest's "likely form"), chosen so that alpha -> infinity gives weighted PS-DSF and alpha = 1
gives proportional fairness on tasks (the utility's gradient phi_n / x_n is then the same at
every agent, so the equilibrium maximises sum_n phi_n log x_n).

One agent's problem is solved exactly through its dual: in units of virtual dominant share
s_n = x_n / (phi_n gamma_{n,i}) and with e_{n,r} = d_{n,r} gamma_{n,i} / c_{i,r} (e = 1 on
the framework's dominant resource there), framework n's best share at resource prices m is
s_n = clip((m . e_n)^(-1/alpha), own lower and upper bounds); the prices minimise the convex
dual, found by projected Newton steps with an Armijo line search until every priced resource
is used to within 1e-9 of its capacity (1e-6 where Newton stalls at a kink). Shares are
scaled by the agent's PS-DSF water level first, so the prices stay near 1 even for alpha =
50. `servers.equilibrium` iterates the
agents' best responses (Gauss-Seidel) to the fixed point, as paper 000 computes its
equilibrium iteratively.
"""

from __future__ import annotations

import numpy as np

from allocator.exact.common import ExactAllocation
from allocator.exact.psdsf import water_fill
from allocator.exact.servers import ServerGame, ServerSlice, equilibrium
from allocator.model import Cluster

NEWTON_STEPS = 100
#: Usage within this (relative) of capacity on every priced resource ends the search; a
#: stall of STALL_STEPS steps ends it within ACCEPT_TOLERANCE.
STALL_STEPS = 8
ACCEPT_TOLERANCE = 1e-6
#: Sweeps over the agents before giving up, and plain best-response sweeps before damping.
MAX_SWEEPS = 200
DAMP_AFTER = 100
USAGE_TOLERANCE = 1e-9


def utility(share: np.ndarray, alpha: float) -> np.ndarray:
    """f_alpha(s)."""
    if alpha == 1.0:
        return np.log(share)
    return share ** (1.0 - alpha) / (1.0 - alpha)


class _Dual:
    """One agent's dual in scaled shares sigma = s / s0: D(m) = m . b + sum_n phi_n
    (f(sigma_n) - (m . e_n)(sigma_n - low_n)), minimised over prices m >= 0."""

    def __init__(self, e, phi, low, high, budget, alpha):
        self.e, self.phi, self.low, self.high = e, phi, low, high
        self.budget, self.alpha = budget, alpha

    def shares(self, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        price = self.e @ m
        wanted = price ** (-1.0 / self.alpha)  # inf where unpriced (errors off in minimise)
        sigma = np.minimum(np.maximum(wanted, self.low), self.high)
        interior = (wanted > self.low) & (wanted < self.high)
        return sigma, price, interior

    def value(self, m: np.ndarray) -> float:
        sigma, price, _ = self.shares(m)
        gain = utility(sigma, self.alpha) - price * (sigma - self.low)
        return float(self.budget * m.sum() + self.phi @ gain)

    def gradient(self, sigma: np.ndarray) -> np.ndarray:
        return self.budget - (self.phi * (sigma - self.low)) @ self.e

    def hessian(self, sigma: np.ndarray, interior: np.ndarray) -> np.ndarray:
        weight = self.phi[interior] * sigma[interior] ** (1.0 + self.alpha) / self.alpha
        e = self.e[interior]
        return (e * weight[:, None]).T @ e

    def minimise(self, start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, bool]:
        """(sigma, prices, converged) at the dual minimum, from `start` prices (default 1)."""
        with np.errstate(divide="ignore"):
            return self._minimise(start)

    def _minimise(self, start: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, bool]:
        used = (self.e > 0).any(axis=0)
        m = used.astype(float) if start is None else np.where(used, start, 0.0)
        best, since = np.inf, 0
        for _ in range(NEWTON_STEPS):
            sigma, _, interior = self.shares(m)
            g = self.gradient(sigma)
            residual = float(np.abs(np.where(m > 0, g, np.minimum(g, 0.0))).max())
            if residual <= USAGE_TOLERANCE * self.budget:
                return sigma, m, True
            # Newton can circle a kink (a framework entering or leaving the interior) without
            # getting closer; once near enough, a stall ends the search.
            best, since = (residual, 0) if residual < 0.5 * best else (best, since + 1)
            if since >= STALL_STEPS and best <= ACCEPT_TOLERANCE * self.budget:
                return sigma, m, True
            free = (m > 0) | (g < 0)
            h = self.hessian(sigma, interior)[np.ix_(free, free)]
            h = h + np.eye(len(h)) * 1e-12 * max(np.trace(h), 1e-300)
            try:
                newton = -np.linalg.solve(h, g[free])
            except np.linalg.LinAlgError:
                newton = -g[free]
            # A singular Hessian (fewer interior frameworks than priced resources) can give a
            # Newton step that no backtracking rescues: then a scaled gradient step.
            reference = float(m[free].max(initial=0.0)) or 1.0
            scaled = -g[free] * reference / float(np.abs(g[free]).max())
            moved = self._search(m, free, g, newton)
            moved = self._search(m, free, g, scaled) if moved is None else moved
            if moved is None:
                break  # no decrease left at machine precision
            m = moved
        sigma = self.shares(m)[0]
        projected = np.where(m > 0, self.gradient(sigma), np.minimum(self.gradient(sigma), 0.0))
        return sigma, m, bool(np.abs(projected).max() <= ACCEPT_TOLERANCE * self.budget)

    def _search(self, m, free, g, direction) -> np.ndarray | None:
        """Armijo backtracking (by 5x: overshoots can be orders of magnitude) along
        `direction`, projected on m >= 0; None if no step decreases the dual."""
        if not np.all(np.isfinite(direction)) or direction @ g[free] >= 0:
            return None
        start = self.value(m)
        step = 1.0
        for _ in range(30):
            trial = m.copy()
            trial[free] = np.maximum(m[free] + step * direction, 0.0)
            if self.value(trial) <= start + 1e-4 * g @ (trial - m):
                return trial
            step *= 0.2
        return None


def best_response(
    piece: ServerSlice,
    offsets: np.ndarray,
    alpha: float,
    warm: dict[int, tuple[np.ndarray, float]] | None = None,
) -> np.ndarray:
    """Agent `piece`'s alpha-fair best response: its users' tasks there, given `offsets`.

    `warm` keeps each agent's last prices and scale, to start the next answer from them.
    """
    rate = piece.weight * piece.gamma
    capacity = piece.capacity
    e = np.divide(
        piece.demand * piece.gamma[:, None],
        capacity,
        out=np.zeros_like(piece.demand),
        where=capacity > 0,
    )
    high = np.minimum(np.maximum(piece.cap, offsets) / rate, offsets / rate + 1.0 / piece.weight)

    def run(scale: float, start: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, bool]:
        low = offsets / rate / scale
        dual = _Dual(e, piece.weight, low, high / scale, 1.0 / scale, alpha)
        return dual.minimise(start)

    done = False
    if warm is not None and piece.agent in warm:  # last prices, in the last answer's units
        prices, scale = warm[piece.agent]
        sigma, prices, done = run(scale, prices)
    if not done:
        # Scale: the agent's PS-DSF level (alpha = infinity) among frameworks it serves.
        level = (offsets + water_fill(piece, offsets)) / rate
        served = level > offsets / rate
        scale = float(np.median(level[served])) if served.any() else float(level.max(initial=1))
        scale = scale if scale > 0 else 1.0
        sigma, prices, done = run(scale, None)
    if warm is not None:
        warm[piece.agent] = (prices, scale)
    tasks = np.maximum(sigma * scale * rate - offsets, 0.0)
    usage = tasks @ piece.demand
    over = np.divide(usage, capacity, out=np.zeros_like(usage), where=capacity > 0).max()
    return tasks / over if over > 1.0 else tasks


def alpha_psdsf(
    cluster: Cluster,
    alpha: float,
    tol: float = 1e-8,
    max_sweeps: int = MAX_SWEEPS,
    damp_after: int = DAMP_AFTER,
) -> ExactAllocation:
    warm: dict[int, tuple[np.ndarray, float]] = {}
    x, sweeps, gap = equilibrium(
        ServerGame(cluster),
        lambda piece, offsets: best_response(piece, offsets, alpha, warm),
        tol,
        max_sweeps,
        damp_after=damp_after,
    )
    notes = []
    if gap > 0:
        notes.append(
            f"alpha-psdsf: no fixed point within {max_sweeps} sweeps; the last sweep still "
            f"moved an allocation by {gap:.2g} of the largest x_n"
        )
    return ExactAllocation(
        "alpha-psdsf", x, alpha=alpha, iterations=sweeps, converged=gap == 0, notes=notes
    )
