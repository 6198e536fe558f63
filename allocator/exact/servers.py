"""The per-server game of paper 000: every agent allocates its own capacity given what the
frameworks hold elsewhere, and the solution is the point where no agent wants to change.

`ServerGame` holds each agent's eligible frameworks and their per-task demand; `equilibrium`
runs Gauss-Seidel best-response sweeps: agent i recomputes x[:, i] with each framework's
tasks on the other agents (its offset o_n = x_n - x_{n,i}) held fixed, the agents in turn,
until a whole sweep changes no x[n, i] by more than `tol` (relative to the largest x_n).
A best response of every agent at once is the paper's equilibrium (Nash, as in Rosen's
concave games), so the stopping rule is a fixed-point test; the sweep count is capped and a
run that hits the cap says so (`converged` False, with the last sweep's largest move).

Best responses need not settle when the game is not monotone (alphaPF-VDS with alpha != 1
and frameworks spread over agents of different gamma, see docs/exact.md). After
`damp_after` sweeps each agent moves only part of the way to its best response, by
1/sqrt(k) at the k-th damped sweep (averaged best responses).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from allocator.model import Cluster


@dataclass(frozen=True)
class ServerSlice:
    """One agent's view: its eligible frameworks and what one task of each uses there."""

    agent: int
    users: np.ndarray  # (U,) framework indices with gamma > 0 here
    demand: np.ndarray  # (U, R) d_n
    gamma: np.ndarray  # (U,) gamma_{n,i}
    weight: np.ndarray  # (U,) phi_n
    cap: np.ndarray  # (U,) max_tasks_n (inf when unlimited)
    capacity: np.ndarray  # (R,) c_i


class ServerGame:
    def __init__(self, cluster: Cluster) -> None:
        cluster.check_runnable()
        self.cluster = cluster
        gamma = cluster.fit()
        self.slices = []
        for i in range(cluster.n_agents):
            users = np.flatnonzero(gamma[:, i] > 0)
            self.slices.append(
                ServerSlice(
                    agent=i,
                    users=users,
                    demand=cluster.demand[users],
                    gamma=gamma[users, i],
                    weight=cluster.weight[users],
                    cap=cluster.max_tasks[users],
                    capacity=cluster.capacity[i],
                )
            )


#: A best response: (slice, offsets o_n of its users) -> the users' tasks on this agent.
Respond = Callable[[ServerSlice, np.ndarray], np.ndarray]


def equilibrium(
    game: ServerGame,
    respond: Respond,
    tol: float = 1e-10,
    max_sweeps: int = 5000,
    start: np.ndarray | None = None,
    damp_after: int | None = None,
) -> tuple[np.ndarray, int, float]:
    """Gauss-Seidel best responses until a sweep moves nothing; (x, sweeps, gap), where gap
    is the last sweep's largest best-response move relative to the largest x_n (0 when it
    converged)."""
    cluster = game.cluster
    x = (
        np.zeros((cluster.n_frameworks, cluster.n_agents))
        if start is None
        else np.array(start, dtype=float)
    )
    totals = x.sum(axis=1)
    slices = [s for s in game.slices if len(s.users)]
    # Agents whose frameworks changed since the agent last answered; all of them at first.
    stale = np.ones(cluster.n_agents, dtype=bool)
    eligible = cluster.fit() > 0
    moved = 0.0
    for sweep in range(1, max_sweeps + 1):
        moved = 0.0
        scale = max(1.0, float(totals.max(initial=0.0)))
        damped = damp_after is not None and sweep > damp_after
        weight = 1.0 / np.sqrt(sweep - damp_after) if damped else 1.0
        changed_users = np.zeros(cluster.n_frameworks, dtype=bool)
        for piece in slices:
            if not stale[piece.agent]:
                continue
            stale[piece.agent] = False
            old = x[piece.users, piece.agent]
            offsets = totals[piece.users] - old
            delta = respond(piece, np.maximum(offsets, 0.0)) - old
            step = float(np.abs(delta).max(initial=0.0))
            if step > tol * scale:
                moved = max(moved, step)
                # Marked by the whole move, so a damped step never hides an unsettled agent.
                changed_users[piece.users[np.abs(delta) > tol * scale]] = True
                delta *= weight
                x[piece.users, piece.agent] = old + delta
                totals[piece.users] += delta
        if moved == 0.0:
            return x, sweep, 0.0
        stale = eligible[changed_users].any(axis=0)
    return x, max_sweeps, moved / scale
