"""alphaPF-VDS's equilibrium conditions as one complementarity system, solved by a
smoothing Newton method, and the certificate every alpha-psdsf answer carries.

With a_{n,i} = phi_n^alpha gamma_{n,i}^(alpha-1) (the derivative of agent i's utility
phi_n f_alpha(x_n / (phi_n gamma_{n,i})) in x_{n,i} is a_{n,i} x_n^(-alpha)), x is an
equilibrium of the agents' game exactly when every agent i has prices p_{i,r} >= 0, zero on
resources it does not fill, with

    a_{n,i} x_n^(-alpha) <= p_i . d_n  for every framework n eligible on i, equal where
    x_{n,i} > 0,

except that a framework at its task limit may be served where its price is below its
marginal utility (the limit's multiplier in agent i's problem). `certificate` measures the
violation of exactly these conditions. Newton solves a slightly stronger system: at a task
limit, x_n^(-alpha) is replaced by one theta_n in [0, x_n^(-alpha)] for all agents (the
multipliers proportional to a_{n,i}: Rosen's normalised equilibrium). Without task limits
the two coincide; with them the normalised one may not exist (an agent with free capacity
forces theta_n = 0 while another charges n a positive price), and then only the sweeps can
reach an equilibrium.

Newton works in each agent's own units, so that alpha = 50 stays representable: with L_i the
agent's level of virtual dominant share (its best response's scale), R_n a reference task
count, e_{n,i,r} = d_{n,r} gamma_{n,i} / c_{i,r} and scaled prices m_{i,r} (p_{i,r} = m_{i,r}
L_i^(-alpha) / c_{i,r}), the pair condition reads

    G_{n,i} = m_i . e_{n,i} / w_{n,i} - omega_n >= 0  _|_  x_{n,i} / R_n >= 0,
    w_{n,i} = (phi_n gamma_{n,i} L_i / R_n)^alpha,  omega_n = (R_n / x_n)^alpha,

(omega_n = theta_n R_n^alpha at a task limit), and a priced resource is full:
m_{i,r} >= 0 _|_ 1 - sum_n x_{n,i} d_{n,r} / c_{i,r} >= 0. Each complementarity pair (a, b)
becomes a smoothed Fischer-Burmeister equation, and each Newton step is one sparse LU (see
`AlphaKKT.direction` and `AlphaKKT.solve`).

This is a local method: for alpha != 1 the equilibrium problem is not monotone (docs/
exact.md), so no merit-function argument guarantees that Newton reaches a solution from
anywhere; it can stop at a local minimum of its merit function. `alpha.alpha_psdsf` starts
it from several best-response iterates and accepts an answer only with a certificate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_array
from scipy.sparse.linalg import lsqr, splu

from allocator.model import Cluster

#: A certificate at or below this (relative violation of the equilibrium conditions) counts
#: as an equilibrium.
KKT_TOLERANCE = 1e-8
#: x_{n,i} at most this fraction of x_n counts as "not served" in the certificate, and a
#: resource with less than this fraction of its capacity free counts as full.
SUPPORT_TOLERANCE = 1e-9
#: A resource with at most this fraction of its capacity free counts as full (may be priced).
FULL_TOLERANCE = 1e-7
NEWTON_STEPS = 100
#: Newton stops when every equation holds to this (absolute, in the scaled units above).
RESIDUAL_TOLERANCE = 1e-13
#: The smoothing parameter as a fraction of the current residual, and the proximal
#: regularisation of the step in x.
SMOOTHING = 0.1
PROXIMAL = 1e-7
#: A pair stays in the sparse LU (not eliminated) when its FB derivative in x is below
#: this fraction of the one in its price gap: eliminating it would amplify by more.
KEEP_RATIO = 0.01


@dataclass(frozen=True)
class Certificate:
    """How far x is from an equilibrium, with the prices that show it.

    `violation` is the largest of: a framework's marginal utility above an agent's price
    for it (relative to the marginal utility), for a served framework min(its price above
    its marginal utility (relative), x_{n,i} / x_n) unless it is at its task limit, and usage
    above capacity (relative); prices count only on full resources (at most
    FULL_TOLERANCE of the capacity free). `converged` means violation <= KKT_TOLERANCE.
    """

    violation: float

    @property
    def converged(self) -> bool:
        return bool(self.violation <= KKT_TOLERANCE)


def _fb(a: np.ndarray, b: np.ndarray, mu: float = 0.0) -> tuple[np.ndarray, ...]:
    """Smoothed Fischer-Burmeister a + b - sqrt(a^2 + b^2 + 2 mu^2) (zero exactly when a, b
    >= 0 and ab = mu^2) and its partial derivatives."""
    r = np.sqrt(a * a + b * b + 2 * mu * mu)
    both = a + b
    # (2ab - 2mu^2) / (a + b + r) where a + b > 0: the same number without cancellation
    value = np.where(both > 0, 2 * (a * b - mu * mu) / np.where(both > 0, both + r, 1.0), both - r)
    safe = np.where(r > 0, r, 1.0)
    da = np.where(r > 0, 1.0 - a / safe, 1.0 - 1 / np.sqrt(2))
    db = np.where(r > 0, 1.0 - b / safe, 1.0 - 1 / np.sqrt(2))
    return value, da, db


class AlphaKKT:
    """The equilibrium system on one cluster for one alpha, in fixed per-agent units.

    Unknowns z = (x_{n,i} / R_n over eligible pairs, omega_n, m_{i,r} over all agents and
    resources); a price m_{i,r} no eligible framework uses has the equation m_{i,r} = 0.
    """

    def __init__(self, cluster: Cluster, alpha: float, level: np.ndarray, reference: np.ndarray):
        self.cluster, self.alpha = cluster, alpha
        gamma = cluster.fit()
        self.live = (cluster.max_tasks > 0) & (gamma > 0).any(axis=1)
        self.pn, self.pa = np.nonzero((gamma > 0) & self.live[:, None])
        self.n_pairs, self.n_f = len(self.pn), cluster.n_frameworks
        self.n_a, self.n_r = cluster.capacity.shape
        capacity = cluster.capacity[self.pa]
        demand = cluster.demand[self.pn]
        self.usage = np.divide(demand, capacity, out=np.zeros_like(demand), where=capacity > 0)
        self.e = self.usage * gamma[self.pn, self.pa][:, None]
        self.used = np.zeros((self.n_a, self.n_r), dtype=bool)
        np.logical_or.at(self.used, self.pa, self.usage > 0)
        self.reference = np.where(self.live, reference, 1.0)
        log_w = alpha * (
            np.log(cluster.weight[self.pn] * gamma[self.pn, self.pa] * level[self.pa])
            - np.log(self.reference[self.pn])
        )
        self.w = np.exp(np.clip(log_w, -600, 600))
        # Each price's own scale: the smallest price that alone would pay for a framework
        # using the resource (at omega = 1). At large alpha the frameworks on one agent can
        # have marginal utilities orders of magnitude apart, and a resource only the
        # low-marginal ones use must still count as priced or free on its own scale.
        unit = np.full((self.n_a, self.n_r), np.inf)
        with np.errstate(divide="ignore"):
            np.minimum.at(unit, self.pa, np.where(self.e > 0, self.w[:, None] / self.e, np.inf))
        self.price_scale = np.clip(np.where(np.isfinite(unit), unit, 1.0), 1e-300, 1e300)
        self.cap = cluster.max_tasks
        self.capped = np.isfinite(self.cap) & self.live
        self.ref_pair = self.reference[self.pn]

    def split(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p, f = self.n_pairs, self.n_f
        return z[:p], z[p : p + f], z[p + f :].reshape(self.n_a, self.n_r)

    def _parts(self, z: np.ndarray, mu: float = 0.0) -> dict[str, np.ndarray]:
        xs, omega, m = self.split(z)
        total = np.bincount(self.pn, weights=xs * self.ref_pair, minlength=self.n_f)
        with np.errstate(divide="ignore", over="ignore"):
            h = (self.reference / np.maximum(total, 1e-300)) ** self.alpha
        h = np.where(self.live, np.where(total > 0, h, np.inf), 1.0)
        g = (m[self.pa] * self.e).sum(axis=1) / self.w - omega[self.pn]
        pair, pair_da, pair_db = _fb(xs, g, mu)
        slack = np.ones((self.n_a, self.n_r))
        np.subtract.at(slack, self.pa, self.usage * (xs * self.ref_pair)[:, None])
        res, res_da, res_db = _fb(m / self.price_scale, slack, mu)
        res_da = res_da / self.price_scale
        res = np.where(self.used, res, m)
        res_da = np.where(self.used, res_da, 1.0)
        res_db = np.where(self.used, res_db, 0.0)
        room = np.where(self.capped, (self.cap - total) / self.reference, 0.0)
        limit, limit_da, limit_db = _fb(room, h - omega, mu)
        frame = np.where(self.capped, limit, omega - h)
        frame = np.where(self.live, frame, omega - 1.0)
        return dict(
            total=total, h=h, pair=pair, pair_da=pair_da, pair_db=pair_db, res=res,
            res_da=res_da, res_db=res_db, frame=frame, limit_da=limit_da, limit_db=limit_db,
        )  # fmt: skip

    def residual(self, z: np.ndarray, mu: float = 0.0) -> np.ndarray:
        with np.errstate(invalid="ignore"):  # inf - inf where a trial step empties x_n
            parts = self._parts(z, mu)
        return np.concatenate([parts["pair"], parts["frame"], parts["res"].ravel()])

    def direction(self, z: np.ndarray, prox: float, mu: float = 0.0) -> np.ndarray:
        """The (regularised) Newton step. The pairs whose equation is mostly "x_{n,i} = 0"
        (the Fischer-Burmeister derivative in x the larger) are eliminated, which divides by
        a number of at least 1 - 1/sqrt(2); the served pairs, the omegas and the prices
        remain, in one sparse LU."""
        with np.errstate(invalid="ignore"):
            q = self._parts(z, mu)
        pn, pa = self.pn, self.pa
        n_p, n_f, n_a, n_r = self.n_pairs, self.n_f, self.n_a, self.n_r
        # pair rows: a dx + b (E . dm_i) - b domega_n = -pair, E = e / w
        a = q["pair_da"] + q["pair_db"] * prox
        b = q["pair_db"]
        big_e = self.e / self.w[:, None]
        kept = a < KEEP_RATIO * b
        gone = ~kept
        served = np.flatnonzero(kept)
        n_s = len(served)
        slot = np.full(n_p, -1)
        slot[served] = np.arange(n_s)
        # eliminated pairs: dx = u - v . dm_i + beta domega_n
        safe_a = np.where(gone, a, 1.0)
        u = np.where(gone, -q["pair"] / safe_a, 0.0)
        beta = np.where(gone, b / safe_a, 0.0)
        v = beta[:, None] * big_e
        # framework rows: C . dx + D domega = -frame
        total, h = q["total"], q["h"]
        dh_dx = -self.alpha * h[pn] * self.ref_pair / np.where(total > 0, total, 1.0)[pn]
        capped = self.capped[pn]
        c = np.where(capped, -q["limit_da"][pn] + q["limit_db"][pn] * dh_dx, -dh_dx)
        d = np.where(self.capped, -q["limit_db"], 1.0)
        d = np.where(self.live, d, 1.0)
        # resource rows: Ra dm + H . dx = -res, H_{p,r} = -Rb_{i,r} usage_{p,r} R_n
        hh = -q["res_db"][pa] * self.usage * self.ref_pair[:, None]
        col_omega = n_s + np.arange(n_f)
        col_m = n_s + n_f + (pa[:, None] * n_r + np.arange(n_r))  # (P, R)
        row_frame = n_s + pn
        row_res = col_m
        rows: list[np.ndarray] = []
        cols: list[np.ndarray] = []
        vals: list[np.ndarray] = []

        def add(r: np.ndarray, cc: np.ndarray, vv: np.ndarray) -> None:
            rows.append(np.ravel(r))
            cols.append(np.ravel(cc))
            vals.append(np.ravel(vv))

        ks = served
        add(slot[ks], slot[ks], a[ks])
        add(slot[ks], col_omega[pn[ks]], -b[ks])
        add(np.repeat(slot[ks], n_r), col_m[ks], b[ks, None] * big_e[ks])
        # framework rows
        add(row_frame[ks], slot[ks], c[ks])
        g = np.flatnonzero(gone)
        add(np.repeat(row_frame[g], n_r), col_m[g], -c[g, None] * v[g])
        diag_omega = d + np.bincount(pn[g], weights=c[g] * beta[g], minlength=n_f)
        add(col_omega, col_omega, diag_omega)
        rhs_frame = -q["frame"] - np.bincount(pn[g], weights=c[g] * u[g], minlength=n_f)
        # resource rows (prices regularised too: an agent whose full resources are priced by
        # fewer served frameworks than resources has a line of equilibrium prices)
        all_m = n_s + n_f + np.arange(n_a * n_r)
        add(all_m, all_m, (q["res_da"] + q["res_db"] * prox / self.price_scale).ravel())
        add(row_res[ks], np.repeat(slot[ks, None], n_r, axis=1), hh[ks])
        add(
            np.repeat(row_res[g], n_r, axis=1),
            np.tile(col_m[g], n_r),
            -(hh[g][:, :, None] * v[g][:, None, :]).reshape(len(g), n_r * n_r),
        )
        add(row_res[g], np.repeat(col_omega[pn[g], None], n_r, axis=1), hh[g] * beta[g, None])
        rhs_res = -q["res"].copy()
        np.subtract.at(rhs_res, pa[g], hh[g] * u[g, None])
        size = n_s + n_f + n_a * n_r
        matrix = coo_array(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(size, size),
        ).tocsc()
        rhs = np.concatenate([-q["pair"][served], rhs_frame, rhs_res.ravel()])
        try:
            step = splu(matrix, permc_spec="MMD_AT_PLUS_A").solve(rhs)
        except RuntimeError:  # exactly singular: least squares
            step = lsqr(matrix, rhs, atol=1e-14, btol=1e-14)[0]
        d_omega = step[n_s : n_s + n_f]
        d_m = step[n_s + n_f :].reshape(n_a, n_r)
        d_x = u - (v * d_m[pa]).sum(axis=1) + beta * d_omega[pn]
        d_x[served] = step[:n_s]
        return np.concatenate([d_x, d_omega, d_m.ravel()])

    # ---- conversions ---------------------------------------------------------------------

    def pack(self, x: np.ndarray, prices: np.ndarray) -> np.ndarray:
        """z from x[n, i] (tasks) and scaled prices m (A, R)."""
        xs = x[self.pn, self.pa] / self.ref_pair
        total = x.sum(axis=1)
        with np.errstate(divide="ignore", over="ignore"):
            omega = np.where(self.live, (self.reference / total) ** self.alpha, 1.0)
        m = np.where(self.used, prices, 0.0).ravel()
        return np.concatenate([xs, np.minimum(omega, 1e300), m])

    def unpack(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xs, _, m = self.split(z)
        x = np.zeros((self.n_f, self.n_a))
        x[self.pn, self.pa] = np.maximum(xs, 0.0) * self.ref_pair
        return x, np.maximum(m, 0.0)

    def solve(self, z: np.ndarray) -> tuple[np.ndarray, int]:
        """Smoothing Newton from z; (the iterate with the smallest residual, steps).

        Step k solves the equations smoothed by mu_k = SMOOTHING x the current residual
        (a + b - sqrt(a^2 + b^2 + 2 mu^2): a and b positive with ab = mu^2, an interior point
        near the true complementarity), with an Armijo line search on their squared norm;
        mu shrinks with the residual, so the last steps are plain semismooth Newton steps.
        """
        phi = self.residual(z)
        best, best_error = z, float(np.abs(phi).max())
        error, steps = best_error, 0
        while steps < NEWTON_STEPS:
            if not np.isfinite(error) or error <= RESIDUAL_TOLERANCE:
                break
            steps += 1
            mu = SMOOTHING * error
            smoothed = self.residual(z, mu)
            merit = float(smoothed @ smoothed)
            direction = self.direction(z, PROXIMAL, mu)
            t = 1.0
            while t > 1e-10:
                trial = z + t * direction
                phi_t = self.residual(trial, mu)
                merit_t = float(phi_t @ phi_t)
                if np.isfinite(merit_t) and merit_t <= (1 - 2e-4 * t) * merit:
                    break
                t *= 0.5
            else:
                break  # no decrease along the Newton direction
            z = trial
            error = float(np.abs(self.residual(z)).max())
            if error < best_error:
                best, best_error = z, error
        return best, steps


def certificate(
    cluster: Cluster, alpha: float, x: np.ndarray, prices: np.ndarray, level: np.ndarray
) -> Certificate:
    """The largest relative violation of the equilibrium conditions by x with the scaled
    prices m (A, R) in units of the agents' levels L (p_{i,r} = m_{i,r} L_i^(-alpha) /
    c_{i,r}); see the module docstring."""
    gamma = cluster.fit()
    total = x.sum(axis=1)
    live = (cluster.max_tasks > 0) & (gamma > 0).any(axis=1)
    worst = 0.0
    capacity = cluster.capacity
    used = x.T @ cluster.demand
    ratio = np.divide(used, capacity, out=np.zeros_like(used), where=capacity > 0)
    worst = max(worst, float(np.max(ratio - 1.0, initial=0.0)))
    worst = max(worst, float(np.max(-x, initial=0.0) / max(1.0, total.max(initial=1.0))))
    if (live & ~(total > 0)).any():
        return Certificate(np.inf)
    # A price on a resource with free capacity is no price: complementarity, exactly.
    full = ratio >= 1.0 - FULL_TOLERANCE
    prices = np.where(full & (capacity > 0), prices, 0.0)
    n_idx, a_idx = np.nonzero((gamma > 0) & live[:, None])
    if len(n_idx) == 0:
        return Certificate(worst)
    cap_i = capacity[a_idx]
    e = (
        np.divide(cluster.demand[n_idx], cap_i, out=np.zeros_like(cap_i), where=cap_i > 0)
        * gamma[n_idx, a_idx][:, None]
    )
    dot = (e * prices[a_idx]).sum(axis=1)
    # rho = p . d / (a x_n^-alpha) = (m . e) * s^alpha with s = x_n / (phi gamma L)
    with np.errstate(divide="ignore"):
        log_s = np.log(total[n_idx]) - np.log(
            cluster.weight[n_idx] * gamma[n_idx, a_idx] * level[a_idx]
        )
        rho = np.exp(np.clip(np.log(dot) + alpha * log_s, -700, 700))
    at_limit = total[n_idx] >= cluster.max_tasks[n_idx] * (1 - SUPPORT_TOLERANCE)
    low = np.where(at_limit, 0.0, np.maximum(1.0 - rho, 0.0))
    # complementarity, as min(x_{n,i} / x_n, rho - 1): served only where not overpriced
    high = np.minimum(np.maximum(rho - 1.0, 0.0), x[n_idx, a_idx] / total[n_idx])
    worst = max(worst, float(low.max()), float(high.max()))
    return Certificate(worst)
