"""Exact PS-DSF (paper 000, Def. 4): each agent applies weighted max-min to the virtual
dominant shares s_{n,i} = x_n / (phi_n gamma_{n,i}) of its eligible frameworks.

Agent i's best response to the tasks o_n its frameworks hold elsewhere is a water-filling
on one level L: framework n holds x_{n,i}(L) = clip(phi_n gamma_{n,i} L, o_n, max_tasks_n)
- o_n, i.e. it starts growing once L passes its own share o_n / (phi_n gamma_{n,i}). L rises
until a resource saturates; every framework that needs that resource stops there (every
other user of it has a share at most L), and the rest keep rising until each is stopped by a
saturated resource or its task limit. Each round solves, per resource, the piecewise-linear
equation usage_r(L) = residual_r exactly at its breakpoints, so a best response is exact and
takes at most R + 1 rounds. `servers.equilibrium` iterates best responses over the agents;
at its fixed point every framework on every agent is stopped as Def. 4 requires, which
`allocator.properties.psdsf_violations` checks independently.
"""

from __future__ import annotations

import numpy as np

from allocator.exact.common import ExactAllocation
from allocator.exact.servers import ServerGame, ServerSlice, equilibrium
from allocator.model import Cluster


def _level_for(slope: np.ndarray, start: np.ndarray, stop: np.ndarray, need: float) -> float:
    """Smallest L with sum_n slope_n (clip(L, start_n, stop_n) - start_n) >= need."""
    if need <= 0:
        return float(start.min(initial=np.inf))
    points = np.unique(np.concatenate([start, stop[np.isfinite(stop)]]))
    used = (
        slope[:, None] * (np.clip(points[None, :], start[:, None], stop[:, None]) - start[:, None])
    ).sum(axis=0)
    k = int(np.searchsorted(used, need))
    if k < len(points):
        if k == 0:
            return float(points[0])
        rise = (used[k] - used[k - 1]) / (points[k] - points[k - 1])
        return float(points[k - 1] + (need - used[k - 1]) / rise)
    tail = slope[np.isinf(stop)].sum()  # growing for ever past the last breakpoint
    if tail <= 0:
        return np.inf
    return float(points[-1] + (need - used[-1]) / tail)


def water_fill(piece: ServerSlice, offsets: np.ndarray) -> np.ndarray:
    """Agent `piece`'s PS-DSF best response: its users' tasks there, given `offsets`."""
    rate = piece.weight * piece.gamma  # tasks per unit of share
    start = offsets / rate
    stop = np.maximum(piece.cap, offsets) / rate
    demand = piece.demand
    tasks = np.zeros(len(piece.users))
    active = np.ones(len(piece.users), dtype=bool)
    residual = piece.capacity.astype(float).copy()
    level = -np.inf
    tol = 1e-12 * np.maximum(piece.capacity, 1.0)
    while active.any():
        levels = np.full(len(residual), np.inf)
        for r in range(len(residual)):
            users = active & (demand[:, r] > 0)
            if users.any():
                levels[r] = _level_for(
                    rate[users] * demand[users, r], start[users], stop[users], residual[r]
                )
        low = max(level, float(levels.min()))
        if not np.isfinite(low):  # nothing saturates: everyone reaches its task limit
            tasks[active] = np.maximum(piece.cap[active] - offsets[active], 0.0)
            break
        level = low
        hit = levels <= low * (1 + 1e-12) + 1e-15
        stopped = active & (demand[:, hit] > 0).any(axis=1)
        grant = rate[stopped] * (np.clip(level, start[stopped], stop[stopped]) - start[stopped])
        tasks[stopped] = grant
        residual -= grant @ demand[stopped]
        residual = np.where(residual < tol, 0.0, residual)
        active &= ~stopped
    return tasks


def psdsf_exact(cluster: Cluster, tol: float = 1e-10, max_sweeps: int = 5000) -> ExactAllocation:
    x, sweeps, gap = equilibrium(ServerGame(cluster), water_fill, tol, max_sweeps)
    notes = [] if gap == 0 else [f"no fixed point within {max_sweeps} sweeps (gap {gap:.2g})"]
    return ExactAllocation("psdsf-exact", x, iterations=sweeps, converged=gap == 0, notes=notes)


def per_server_drf(cluster: Cluster) -> np.ndarray:
    """Naive per-server DRF (paper 001 Fig. 1): every agent runs DRF on its own capacity,
    blind to what frameworks hold elsewhere (one water-filling per agent, no offsets)."""
    game = ServerGame(cluster)
    x = np.zeros((cluster.n_frameworks, cluster.n_agents))
    for piece in game.slices:
        x[piece.users, piece.agent] = water_fill(piece, np.zeros(len(piece.users)))
    return x
