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
50.

The equilibrium among agents: a few best-response sweeps (`servers.equilibrium`,
Gauss-Seidel) give a starting point, and a smoothing Newton method on the whole system of
equilibrium conditions (`alpha_kkt`) finishes; sweeps alone need not settle, as this game is
not monotone for alpha != 1 (docs/exact.md). Every answer carries a certificate: the
largest relative violation of the equilibrium conditions, `converged` when at most
alpha_kkt.KKT_TOLERANCE.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls

from allocator.exact.alpha_kkt import KKT_TOLERANCE, AlphaKKT, Certificate, certificate
from allocator.exact.common import ExactAllocation
from allocator.exact.psdsf import water_fill
from allocator.exact.servers import ServerGame, ServerSlice, equilibrium
from allocator.model import Cluster

NEWTON_STEPS = 100
#: Usage within this (relative) of capacity on every priced resource ends the search; a
#: stall of STALL_STEPS steps ends it within ACCEPT_TOLERANCE.
STALL_STEPS = 8
ACCEPT_TOLERANCE = 1e-6
#: Where Newton starts: (best-response sweeps from the empty cluster, damped from that
#: sweep or not at all), tried in turn until one is certified; then damped sweeps in chunks
#: between further Newton tries; sweeps in all before giving up.
NEWTON_STARTS: tuple[tuple[int, int | None], ...] = ((5, None), (1, None), (3, 0), (8, 0))
FALLBACK_SWEEPS = 50
MAX_SWEEPS = 200
USAGE_TOLERANCE = 1e-9


def utility(share: np.ndarray, alpha: float) -> np.ndarray:
    """f_alpha(s)."""
    if alpha == 1.0:
        return np.log(share)
    return share ** (1.0 - alpha) / (1.0 - alpha)


def utility_change(before: np.ndarray, after: np.ndarray, alpha: float) -> np.ndarray:
    """f_alpha(after) - f_alpha(before), exactly 0 where the share did not move and without
    the cancellation of subtracting two large values where it did."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.log(after / before)
        if alpha == 1.0:
            change = ratio
        else:
            change = before ** (1.0 - alpha) * np.expm1((1.0 - alpha) * ratio) / (1.0 - alpha)
        direct = utility(after, alpha) - utility(before, alpha)  # from a share of 0
    return np.where(after == before, 0.0, np.where(before > 0, change, direct))


class _Dual:
    """One agent's dual in scaled shares sigma = s / s0: D(m) = m . b + sum_n phi_n
    (f(sigma_n) - (m . e_n)(sigma_n - low_n)), minimised over prices m >= 0."""

    def __init__(self, e, phi, low, high, budget, alpha, precise=False):
        self.e, self.phi, self.low, self.high = e, phi, low, high
        self.budget, self.alpha, self.precise = budget, alpha, precise

    def shares(self, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        price = self.e @ m
        wanted = price ** (-1.0 / self.alpha)  # inf where unpriced (errors off in minimise)
        sigma = np.minimum(np.maximum(wanted, self.low), self.high)
        interior = (wanted > self.low) & (wanted < self.high)
        return sigma, price, interior

    def change(self, m: np.ndarray, trial: np.ndarray) -> float:
        """D(trial) - D(m), term by term: D itself can be many orders of magnitude larger
        than a Newton step's decrease (f_alpha of a small share held at its bound, for a
        large alpha), so the difference of the two values would be rounding noise."""
        before, price, _ = self.shares(m)
        after, trial_price, _ = self.shares(trial)
        gain = utility_change(before, after, self.alpha) - (
            trial_price * (after - self.low) - price * (before - self.low)
        )
        return float(self.budget * (trial.sum() - m.sum()) + self.phi @ gain)

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
        `direction`, projected on m >= 0; None if no step decreases the dual. `precise`:
        the decrease measured term by term (`change`), not as the difference of two
        values."""
        if not np.all(np.isfinite(direction)) or direction @ g[free] >= 0:
            return None
        start = None if self.precise else self._value(m)
        step = 1.0
        for _ in range(30):
            trial = m.copy()
            trial[free] = np.maximum(m[free] + step * direction, 0.0)
            wanted = 1e-4 * g @ (trial - m)
            if start is None:
                decreased = self.change(m, trial) <= wanted
            else:
                decreased = self._value(trial) <= start + wanted
            if decreased:
                return trial
            step *= 0.2
        return None

    def _value(self, m: np.ndarray) -> float:
        sigma, price, _ = self.shares(m)
        gain = utility(sigma, self.alpha) - price * (sigma - self.low)
        return float(self.budget * m.sum() + self.phi @ gain)


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

    def run(
        scale: float, start: np.ndarray | None, precise: bool = False
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        low = offsets / rate / scale
        dual = _Dual(e, piece.weight, low, high / scale, 1.0 / scale, alpha, precise)
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
        if not done:
            # The dual's value can be so large (f_alpha of a small share held at its bound,
            # for a large alpha) that a Newton step's decrease is below its rounding error:
            # the line search then stalls unless it measures the decrease term by term.
            # Only then: elsewhere the value difference is what the answers were made with.
            sigma, prices, done = run(scale, None, precise=True)
    if warm is not None:
        warm[piece.agent] = (prices, scale)
    tasks = np.maximum(sigma * scale * rate - offsets, 0.0)
    usage = tasks @ piece.demand
    over = np.divide(usage, capacity, out=np.zeros_like(usage), where=capacity > 0).max()
    return tasks / over if over > 1.0 else tasks


def _prices(game: ServerGame, x: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Each agent's best-response prices and level at x (fresh, not warm-started): the
    starting prices for Newton, in the units `alpha_kkt` uses."""
    cluster = game.cluster
    level = np.ones(cluster.n_agents)
    prices = np.zeros(cluster.capacity.shape)
    fresh: dict[int, tuple[np.ndarray, float]] = {}
    totals = x.sum(axis=1)
    for piece in game.slices:
        if len(piece.users):
            best_response(piece, totals[piece.users] - x[piece.users, piece.agent], alpha, fresh)
            prices[piece.agent], level[piece.agent] = fresh[piece.agent]
            mine = x[piece.users, piece.agent]
            fitted = _fitted_prices(piece, mine, totals[piece.users], alpha, level[piece.agent])
            if fitted is not None:
                prices[piece.agent] = fitted
    return prices, level


def _fitted_prices(
    piece: ServerSlice, mine: np.ndarray, totals: np.ndarray, alpha: float, level: float
) -> np.ndarray | None:
    """Scaled prices (units of `level`) on the agent's full resources that best equal the
    served frameworks' marginal utilities, relative (non-negative least squares): where a
    best response ends at the agent's capacity its dual prices only bound the marginals."""
    served = mine > 1e-9 * np.maximum(totals, 1e-300)
    if not served.any():
        return None
    used = mine @ piece.demand
    full = (piece.capacity > 0) & (used >= piece.capacity * (1 - 1e-7))
    if not full.any():
        return None
    e = piece.demand[served][:, full] * piece.gamma[served, None] / piece.capacity[full]
    log_marginal = -alpha * np.log(
        totals[served] / (piece.weight[served] * piece.gamma[served] * level)
    )
    scale = np.exp(np.clip(-log_marginal, -700, 700))  # rows relative: divide by marginal
    fitted, _ = nnls(e * scale[:, None], np.ones(served.sum()))
    prices = np.zeros(len(piece.capacity))
    prices[full] = fitted
    return prices


def _newton(
    game: ServerGame, x: np.ndarray, alpha: float
) -> tuple[np.ndarray, Certificate, int, Certificate]:
    """Newton on the equilibrium conditions from x; (x', its certificate, Newton steps, x's
    own certificate)."""
    cluster = game.cluster
    prices, level = _prices(game, x, alpha)
    start = certificate(cluster, alpha, x, prices, level)
    system = AlphaKKT(cluster, alpha, level, np.maximum(x.sum(axis=1), 1e-12))
    z, steps = system.solve(system.pack(x, prices))
    polished, polished_prices = system.unpack(z)
    # Newton's last residual may leave an agent over capacity by a rounding error: scale
    # that agent's tasks down so every answer is feasible.
    used = polished.T @ cluster.demand
    over = np.divide(
        used, cluster.capacity, out=np.zeros_like(used), where=cluster.capacity > 0
    ).max(axis=1)
    polished = polished / np.maximum(over, 1.0)
    return polished, certificate(cluster, alpha, polished, polished_prices, level), steps, start


def alpha_psdsf(
    cluster: Cluster,
    alpha: float,
    tol: float = 1e-10,
    max_sweeps: int = MAX_SWEEPS,
    starts: tuple[tuple[int, int | None], ...] = NEWTON_STARTS,
) -> ExactAllocation:
    """The alphaPF-VDS equilibrium: Newton on the whole equilibrium system (`alpha_kkt`),
    started from a few best-response sweeps; if its answer is not certified, from other
    sweep counts (`starts`: (sweeps, damped from sweep) pairs, each from the empty
    cluster), then from further damped sweeps, up to `max_sweeps` sweeps in all.
    `converged` is the certificate's verdict (largest relative violation of the
    equilibrium conditions <= alpha_kkt.KKT_TOLERANCE)."""
    game = ServerGame(cluster)
    sweeps = newton_steps = 0
    best: tuple[np.ndarray, Certificate] | None = None
    x = np.zeros((cluster.n_frameworks, cluster.n_agents))
    warm: dict[int, tuple[np.ndarray, float]] = {}

    def respond(piece: ServerSlice, offsets: np.ndarray) -> np.ndarray:
        return best_response(piece, offsets, alpha, warm)

    def attempt(start: np.ndarray) -> bool:
        nonlocal best, newton_steps
        polished, proof, steps, own = _newton(game, start, alpha)
        newton_steps += steps
        # Newton's answer first when certified: with task limits it is the normalised
        # equilibrium (alpha = 1: the global optimum), where sweeps may settle elsewhere.
        for candidate in ((polished, proof), (start, own)):
            better = best is None or candidate[1].violation < best[1].violation
            if better and (best is None or not best[1].converged):
                best = candidate
        return best[1].converged

    for count, damp_after in starts:
        warm.clear()
        count = min(count, max_sweeps - sweeps)
        if count <= 0:
            break
        x, done, _ = equilibrium(game, respond, tol, count, damp_after=damp_after)
        sweeps += done
        if attempt(x):
            break
    while not best[1].converged and sweeps < max_sweeps:  # type: ignore[index]
        chunk = min(FALLBACK_SWEEPS, max_sweeps - sweeps)
        x, done, gap = equilibrium(game, respond, tol, chunk, start=x, damp_after=0)
        sweeps += done
        attempt(x)
        if gap == 0:  # the sweeps are at their fixed point: more would not move
            break
    assert best is not None
    allocation, proof = best
    notes = [
        f"alpha-psdsf: largest relative violation of the equilibrium conditions "
        f"{proof.violation:.2g} (certified below {KKT_TOLERANCE:g}: "
        f"{'yes' if proof.converged else 'NO'}); {sweeps} best-response sweep(s), "
        f"{newton_steps} Newton step(s)"
    ]
    return ExactAllocation(
        "alpha-psdsf",
        allocation,
        alpha=alpha,
        iterations=sweeps,
        converged=proof.converged,
        notes=notes,
        kkt_violation=proof.violation,
    )
