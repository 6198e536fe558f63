"""FUGA (paper 003, Xu and Yu 2014): servers with idle resources choose executor combinations.

Each server with room is a player. Its strategies are the K feasible combinations of
executors (one executor = one task of a framework's demand d_n, the paper's VM type) with the
highest minimum utilisation mu_j. A strategy profile (one combination per server) is scored
for each server by

    U_j = -(lambda * F + S_j)

where F is the deviation of the frameworks' dominant shares from equal shares after the
whole profile (shared by all players) and S_j = sqrt(sum_k (u_k / mean(u) - 1)^2) is server
j's skewness after its own combination. Servers move in ascending order of their best mu
(the paper's Algorithm 1) and the subgame-perfect equilibrium is found by backward
induction. The formulas the paper's text lost and how they were rebuilt are in docs/fuga.md.

Bounds (so an allocation run stays linear in the number of agents):
- the executor types a server considers are the `max_types` frameworks with the lowest
  dominant share among those that fit there;
- a server enumerates every feasible combination when there are at most `max_combinations`
  count vectors, otherwise a grid of counts completed greedily to maximal combinations;
- backward induction is exact over blocks of `horizon` consecutive servers (K^horizon
  profiles each); a block takes the choices of the blocks before it as given.

`FugaSelector` turns the equilibrium into (framework, agent) grants for progressive
filling, so `fuga` runs wherever the other schedulers run. It is registered as the `fuga`
selection, built from `FugaParams`; K and lambda come from `EngineConfig.fuga_k` and
`fuga_lambda` (`EngineConfig.policy_params()`), where their defaults are written.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from allocator.errors import ScenarioError
from allocator.policy.base import CRITERIA, max_ratio
from allocator.policy.drf import DRF
from allocator.policy.selection import SELECTIONS, FillInputs, Selector
from allocator.policy.ties import pick_lowest
from allocator.state import AllocationState, Mode


@dataclass(frozen=True)
class FugaParams:
    #: Strategies per server: the top-K combinations by minimum utilisation (paper: K = 3).
    k: int
    #: Weight of the fairness deviation against skewness.
    lam: float
    #: Servers resolved together by exact backward induction.
    horizon: int = 4
    #: Executor types (frameworks) a server considers in one planning round.
    max_types: int = 4
    #: Largest number of count vectors enumerated exhaustively per server.
    max_combinations: int = 512

    def __post_init__(self) -> None:
        for name in ("k", "horizon", "max_types", "max_combinations"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ScenarioError(f"fuga.{name}: must be a positive integer, got {value!r}")
        if not np.isfinite(self.lam) or self.lam < 0:
            raise ScenarioError(f"fuga.lambda: must be finite and >= 0, got {self.lam!r}")


@CRITERIA.register("fuga")
class Fuga(DRF):
    """FUGA's framework criterion is DRF (the dominant share it equalises); the placement
    is FUGA's own selection (`FugaSelector`), which takes the parameters."""

    name = "fuga"


# ---- the pieces of the game, each testable on its own -------------------------------------


def enumerate_combinations(
    demand: np.ndarray,
    room: np.ndarray,
    most: np.ndarray,
    max_combinations: int = 512,
    single_type: bool = False,
) -> np.ndarray:
    """(M, T) counts of T executor types (demand (T, R)) that fit in `room` (R,), none empty.

    `most` (T,) caps each type's count (what the framework still wants). Exhaustive when
    there are at most `max_combinations` count vectors; otherwise a grid of counts per type,
    each completed greedily (types in order) to a combination where nothing more fits.
    `single_type`: only the combinations of one type each, as many as fit (oblivious mode,
    where a framework offered an agent keeps all of it that it can use).
    """
    demand = np.asarray(demand, dtype=float)
    room = np.asarray(room, dtype=float)
    need = demand > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        per_resource = np.where(
            need, np.floor(room[None, :] / np.where(need, demand, 1.0) + 1e-9), np.inf
        )
    fit_alone = per_resource.min(axis=1)
    cap = np.minimum(np.asarray(most, dtype=float), fit_alone)
    cap = np.where(np.isfinite(cap), np.maximum(cap, 0), 0).astype(np.int64)
    n_types = len(cap)
    if n_types == 0:
        return np.zeros((0, 0), dtype=np.int64)
    if single_type:  # one type per combination, as many as fit
        grid = np.diag(cap)
        return grid[cap > 0]
    sizes = cap + 1
    if float(np.prod(sizes.astype(float))) <= max_combinations:
        grid = np.indices(tuple(sizes)).reshape(n_types, -1).T
    else:
        levels = max(2, int(max_combinations ** (1.0 / n_types)))
        axes = []
        for c in cap.tolist():
            points = min(levels, c + 1)
            axes.append(
                sorted({(i * c + (points - 1) // 2) // max(points - 1, 1) for i in range(points)})
            )
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, n_types)
        grid = _complete(grid, demand, room, cap)
        # Completions coincide often: keep each combination once (rows as mixed-radix keys).
        radix = np.cumprod(np.r_[1, sizes[:-1]])
        _, first = np.unique(grid @ radix, return_index=True)
        grid = grid[np.sort(first)]
    use = grid @ demand
    ok = (use <= room + 1e-9 * np.maximum(room, 1.0)).all(axis=1) & (grid.sum(axis=1) > 0)
    return grid[ok]


def _complete(
    grid: np.ndarray, demand: np.ndarray, room: np.ndarray, cap: np.ndarray
) -> np.ndarray:
    """Drop grid points that do not fit, then add executors while they fit: first the same
    number of every type still below its cap, then one more of each type in turn (so
    completions stay balanced), then as many of each type as fit."""
    grid = grid[(grid @ demand <= room + 1e-9).all(axis=1)].copy()
    open_types = grid < cap
    step = open_types.astype(float) @ demand  # (M, R) one more of every open type
    left = room[None, :] - grid @ demand
    with np.errstate(divide="ignore", invalid="ignore"):
        rounds = np.where(step > 0, np.floor(left / np.where(step > 0, step, 1.0) + 1e-9), np.inf)
    rounds = rounds.min(axis=1)
    rounds = np.where(np.isfinite(rounds), rounds, 0.0)
    rounds = np.minimum(rounds, np.where(open_types, cap - grid, np.inf).min(axis=1))
    grid += (open_types * rounds[:, None]).astype(np.int64)
    left = room[None, :] - grid @ demand
    for most in (1, None):  # one more of each type in turn, then as many as fit
        for t in range(grid.shape[1]):
            need = demand[t] > 0
            more = np.floor(left[:, need] / demand[t, need] + 1e-9).min(axis=1)
            if most is not None:
                more = np.minimum(more, most)
            more = np.clip(np.minimum(more, cap[t] - grid[:, t]), 0, None)
            grid[:, t] += more.astype(np.int64)
            left -= more[:, None] * demand[t]
    return grid


def utilisation(used_before: np.ndarray, added: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """(..., R) utilisation u_k of a server after adding `added` to what it already uses.

    Resources the server does not have are NaN (they enter neither mu nor skewness)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(capacity > 0, (used_before + added) / capacity, np.nan)


def min_utilisation(u: np.ndarray) -> np.ndarray:
    """mu_j = min_k u_k (paper 003 eq. 6)."""
    return np.nanmin(u, axis=-1)


def skewness(u: np.ndarray) -> np.ndarray:
    """S_j = sqrt(sum_k (u_k / mean(u) - 1)^2) (paper 003 eq. 7, from its ref. 24)."""
    mean = np.nanmean(u, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        dev = np.where(mean > 0, u / mean - 1.0, 0.0)
    return np.sqrt(np.nansum(dev * dev, axis=-1))


def fairness_deviation(shares: np.ndarray) -> np.ndarray:
    """F = std / mean of the users' dominant shares (last axis): 0 when all are equal.

    Relative (a coefficient of variation), so lambda trades it against skewness, which is
    relative too, whatever the cluster's size."""
    mean = shares.mean(axis=-1)
    std = shares.std(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(mean > 0, std / mean, 0.0)


def top_strategies(u: np.ndarray, k: int, deviation: np.ndarray | None = None) -> np.ndarray:
    """Indices of the top-k combinations by mu. The paper ranks ties at random; we rank them
    by lower skewness, then by lower fairness deviation `deviation` (when given: without it
    a server offered identical executor types would keep only lopsided splits among its K),
    then by listing order."""
    return rank_strategies(min_utilisation(u), skewness(u), k, deviation)


def rank_strategies(
    mu: np.ndarray, skew: np.ndarray, k: int, deviation: np.ndarray | None = None
) -> np.ndarray:
    """`top_strategies` from mu and skewness already computed."""
    tie = np.zeros(len(mu)) if deviation is None else deviation.round(12)
    order = np.lexsort((np.arange(len(mu)), tie, skew.round(12), -mu.round(12)))
    return order[:k]


def deviation_after(
    counts: np.ndarray,
    types: np.ndarray,
    demand: np.ndarray,
    holder_alloc: np.ndarray,
    holder_of: np.ndarray,
    holder_weight: np.ndarray,
    users: np.ndarray,
    total: np.ndarray,
) -> np.ndarray:
    """(M,) F after adding each of one server's combinations (M, T) to the holders' current
    allocation, from the users' share sums (only the holders of the T types change)."""
    base = max_ratio(holder_alloc, total) / holder_weight
    n = max(int(users.sum()), 1)
    s1 = np.full(len(counts), base[users].sum())
    s2 = np.full(len(counts), (base[users] ** 2).sum())
    holders = holder_of[types]
    for h in np.unique(holders):
        if not users[h]:
            continue
        mine = holders == h
        added = counts[:, mine] @ demand[types[mine]]
        share = max_ratio(holder_alloc[h] + added, total) / holder_weight[h]
        s1 += share - base[h]
        s2 += share**2 - base[h] ** 2
    mean = s1 / n
    std = np.sqrt(np.maximum(s2 / n - mean**2, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(mean > 0, std / mean, 0.0)


def backward_induction(utility: np.ndarray) -> tuple[int, ...]:
    """Subgame-perfect choices of players 0..P-1 moving in that order.

    `utility` has shape (K_0, ..., K_{P-1}, P): player p's utility at every profile. The
    last mover picks its best reply to every history, then the one before it, and so on
    (ties go to the lower strategy index)."""
    n_players = utility.shape[-1]
    values = utility  # payoffs of the subgame reached after each history
    replies: list[np.ndarray] = []
    for p in range(n_players - 1, -1, -1):
        best = values[..., p].argmax(axis=-1)  # player p's reply to each history before it
        replies.append(best)
        values = np.take_along_axis(values, best[..., None, None], axis=p).squeeze(axis=p)
    choices: list[int] = []
    for p in range(n_players):
        reply = replies[n_players - 1 - p]
        choices.append(int(reply[tuple(choices)]))
    return tuple(choices)


# ---- the game over one planning round -----------------------------------------------------


@dataclass
class ServerOptions:
    agent: int
    types: np.ndarray  # (T,) framework indices
    counts: np.ndarray  # (K', T) the server's strategies
    skew: np.ndarray  # (K',)
    best_mu: float


def plan(
    state: AllocationState,
    params: FugaParams,
    fits: np.ndarray,
    users: np.ndarray,
    holder_of: np.ndarray,
    holder_weight: np.ndarray,
) -> list[tuple[int, int, int]]:
    """One planning round: (agent, framework, executors) in the order to grant them.

    `fits` (F, A) says which frameworks fit a task where; users are the holders whose
    shares F compares (frameworks, or roles at role level) and `holder_of` maps frameworks
    to them. Servers are ordered by the best mu of their options at the start of the round;
    each block of `horizon` servers then re-draws its options from the shares and wants the
    blocks before it left, so that one round does not hand every server to the same few
    frameworks."""
    demand = np.nan_to_num(state.known_demand, nan=0.0)
    total = state.cluster.total
    alloc = _holder_alloc(state.alloc, holder_of, len(holder_weight))
    own_alloc = state.alloc.copy()
    oblivious = state.mode is Mode.OBLIVIOUS
    frameworks = np.arange(state.cluster.n_frameworks)
    weight = np.asarray(state.cluster.weight, dtype=float)
    active = state.runnable & ((state.count > 0) | state.wanting())
    left = state.limit - state.count
    capacity = state.cluster.capacity
    used = capacity - state.residual - state.withheld

    def candidates(agents: np.ndarray) -> np.ndarray:
        """(F, len(agents)) the `max_types` frameworks each of `agents` considers now."""
        own_share = max_ratio(own_alloc, total) / state.cluster.weight
        order = _candidate_order(max_ratio(alloc, total) / holder_weight, own_share, holder_of)
        ranked = fits[np.ix_(order, agents)] & (left[order] > 0)[:, None]
        chosen = np.zeros_like(ranked)
        chosen[order] = ranked & (np.cumsum(ranked, axis=0) <= params.max_types)
        return chosen

    # An agent's combinations of the same executor types (and the same wants) do not change
    # within a round; only the fairness tie-break does.
    enumerated: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def options(agent: int, types: np.ndarray) -> ServerOptions | None:
        key = (agent, types.tobytes(), left[types].tobytes())
        if key not in enumerated:
            counts = enumerate_combinations(
                demand[types],
                state.residual[agent],
                left[types],
                params.max_combinations,
                single_type=oblivious,
            )
            has = capacity[agent] > 0  # resources the agent lacks enter neither measure
            u = (used[agent, has] + counts @ demand[types][:, has]) / capacity[agent, has]
            mean = u.mean(axis=1, keepdims=True) if len(u) else u
            with np.errstate(divide="ignore", invalid="ignore"):
                dev = np.where(mean > 0, u / mean - 1.0, 0.0)
            skew = np.sqrt((dev * dev).sum(axis=1))
            enumerated[key] = (counts, u.min(axis=1, initial=np.inf), skew)
        counts, mu, skew = enumerated[key]
        if len(counts) == 0:
            return None
        top = rank_strategies(mu, skew, params.k)
        last = top[-1]
        tied = (mu.round(12) == mu[last].round(12)) & (skew.round(12) == skew[last].round(12))
        if tied.sum() > np.isin(top, np.flatnonzero(tied)).sum():
            # A tie across the K-th place: the frameworks' fairness deviation decides (it is
            # needed nowhere else, and costs as much as the rest of the ranking). Per
            # framework even at role level, so that a role's jobs share its executors.
            deviation = deviation_after(
                counts, types, demand, own_alloc, frameworks, weight, active, total
            )
            top = rank_strategies(mu, skew, params.k, deviation)
        return ServerOptions(agent, types, counts[top], skew[top], float(mu[top[0]]))

    agents = np.flatnonzero(fits.any(axis=0))
    chosen = candidates(agents)
    first = [options(int(a), np.flatnonzero(chosen[:, i])) for i, a in enumerate(agents)]
    servers = sorted((s for s in first if s is not None), key=lambda s: (s.best_mu, s.agent))
    steps: list[tuple[int, int, int]] = []
    for start in range(0, len(servers), params.horizon):
        block = servers[start : start + params.horizon]
        if start > 0:
            chosen = candidates(np.array([s.agent for s in block]))
            fresh = [options(s.agent, np.flatnonzero(chosen[:, i])) for i, s in enumerate(block)]
            block = [s for s in fresh if s is not None]
            if not block:
                continue
        choice = solve_block(
            block, alloc, demand, holder_of, holder_weight, users, total, params.lam
        )
        for server, c in zip(block, choice, strict=True):
            counts = server.counts[c]
            added = counts[:, None] * demand[server.types]
            np.add.at(alloc, holder_of[server.types], added)
            own_alloc[server.types] += added
            left[server.types] -= counts
            for t in np.argsort(-counts, kind="stable"):
                if counts[t] > 0:
                    steps.append((server.agent, int(server.types[t]), int(counts[t])))
    return steps


def _candidate_order(
    holder_share: np.ndarray, own_share: np.ndarray, holder_of: np.ndarray
) -> np.ndarray:
    """Frameworks in the order servers consider them: the lowest framework of every holder
    (role) by ascending holder share, then the second lowest of each, and so on, so that the
    `max_types` a server considers span the roles instead of filling up from one."""
    keys = (own_share, holder_of, holder_share[holder_of])
    grouped = np.lexsort(keys)
    holders = holder_of[grouped]
    starts = np.flatnonzero(np.r_[True, holders[1:] != holders[:-1]])
    rank = np.empty(len(grouped), dtype=np.int64)
    rank[grouped] = np.arange(len(grouped)) - np.repeat(
        starts, np.diff(np.r_[starts, len(grouped)])
    )
    return np.lexsort((*keys, rank))


def _holder_alloc(alloc: np.ndarray, holder_of: np.ndarray, holders: int) -> np.ndarray:
    out = np.zeros((holders, alloc.shape[1]))
    np.add.at(out, holder_of, alloc)
    return out


def solve_block(
    block: list[ServerOptions],
    alloc: np.ndarray,
    demand: np.ndarray,
    holder_of: np.ndarray,
    holder_weight: np.ndarray,
    users: np.ndarray,
    total: np.ndarray,
    lam: float,
) -> tuple[int, ...]:
    """Exact backward induction over the block's servers (first in the list moves first)."""
    shape = tuple(len(s.counts) for s in block)
    profiles = np.indices(shape).reshape(len(block), -1).T  # (P, B)
    added = np.zeros((len(profiles), *alloc.shape))
    for b, server in enumerate(block):
        per_strategy = np.zeros((len(server.counts), *alloc.shape))
        contribution = server.counts[:, :, None] * demand[server.types][None, :, :]  # (K, T, R)
        for t, holder in enumerate(holder_of[server.types]):
            per_strategy[:, holder] += contribution[:, t]
        added += per_strategy[profiles[:, b]]
    shares = max_ratio(alloc[None] + added, total) / holder_weight
    deviation = fairness_deviation(shares[:, users])  # (P,)
    skew = np.stack([s.skew[profiles[:, b]] for b, s in enumerate(block)], axis=1)  # (P, B)
    utility = -(lam * deviation[:, None] + skew)
    return backward_induction(utility.reshape(*shape, len(block)))


@SELECTIONS.register("fuga", FugaParams)
class FugaSelector(Selector):
    """Progressive filling's view of FUGA: grants from the current round's equilibrium; a new
    round is planned when the previous one is used up, until nothing fits."""

    def __init__(self, params: FugaParams, inputs: FillInputs) -> None:
        super().__init__(inputs)
        self.params = params
        self.queue: list[tuple[int, int, int]] = []
        self.demand = np.nan_to_num(self.state.cluster.demand, nan=np.inf)

    def _users(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        state = self.state
        cluster = state.cluster
        if self.role_level:
            holder_of = cluster.role_of
            weight = np.asarray(cluster.role_weight, dtype=float)
        else:
            holder_of = np.arange(cluster.n_frameworks)
            weight = np.asarray(cluster.weight, dtype=float)
        active = state.runnable & ((state.count > 0) | state.wanting())
        users = np.zeros(len(weight), dtype=bool)
        users[holder_of[active]] = True
        return holder_of, weight, users

    def next(self) -> tuple[int, int] | None:
        state = self.state
        demand = self.demand
        for _ in range(2):  # the queue, then one fresh round
            while self.queue:
                agent, framework, count = self.queue[0]
                if count <= 1:
                    self.queue.pop(0)
                else:
                    self.queue[0] = (agent, framework, count - 1)
                if (
                    state.wanting()[framework]
                    and state.cluster.eligible[framework, agent]
                    and (demand[framework] <= state.residual[agent] + state.tol).all()
                ):
                    return framework, agent
            fits = state.fits_all()
            if not fits.any():
                return None
            known = ~np.isnan(state.known_demand).any(axis=1)
            unknown = fits & ~known[:, None]
            if unknown.any():
                # Oblivious mode, a framework with no executor yet: it holds nothing, so it
                # is the least served; it gets a random agent where it fits (as best fit
                # falls back to), the lowest share first if several.
                agents = np.flatnonzero(unknown.any(axis=0))
                agent = int(agents[self.rng.integers(len(agents))])
                values = self.criterion.column(state, agent)
                return pick_lowest(values, unknown[:, agent], self.rng), agent
            holder_of, weight, users = self._users()
            self.queue = plan(state, self.params, fits, users, holder_of, weight)
        return None
