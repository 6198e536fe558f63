"""Server selection: which (framework, agent) pair progressive filling serves next.

- random:   a uniformly random agent among those where some task still fits, then the
            framework with the lowest criterion there (reproduces the paper's Table II spread).
- rrr:      randomized round-robin: agents in a fresh random permutation each round, one
            grant per visit.
- joint:    argmin of the criterion over every feasible framework-agent pair.
- bestfit:  framework by criterion, then the feasible agent with the least H (BF-DRF).
- firstfit: framework by criterion, then the first feasible agent in declaration order.

Agent-first selectors evaluate the criterion for one agent as an (F,) vector; framework-first
selectors scan the agents of one framework as an (A,) vector; joint evaluates (F, A).
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np

from allocator.policy.base import Criterion
from allocator.policy.bestfit import fit_distance
from allocator.policy.ties import Ties, pick_lowest
from allocator.state import AllocationState


class Selection(StrEnum):
    RANDOM = "random"
    RRR = "rrr"
    JOINT = "joint"
    BESTFIT = "bestfit"
    FIRSTFIT = "firstfit"


def _gamma_at(state: AllocationState, frameworks: np.ndarray, agents: np.ndarray) -> np.ndarray:
    """gamma_{n,i} on capacity for pairs, from the demand the allocator knows (0 if unknown)."""
    d = state.known_demand[frameworks]
    c = state.cluster.capacity[agents]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(d > 0, c / d, np.inf)
    gamma = ratio.min(axis=-1)
    return np.where(np.isfinite(gamma), gamma, 0.0)


class Selector:
    """Yields the next (framework, agent) pair to serve, or None when nothing fits."""

    def __init__(
        self,
        state: AllocationState,
        criterion: Criterion,
        rng: np.random.Generator,
        ties: Ties = Ties.RANDOM,
    ) -> None:
        self.state = state
        self.criterion = criterion
        self.rng = rng
        self.ties = Ties(ties)

    def next(self) -> tuple[int, int] | None:
        raise NotImplementedError

    def _framework_at(self, agent: int) -> int:
        """Lowest-criterion framework that fits a task on `agent`, or -1."""
        fits = self.state.fits_agent(agent)
        if not fits.any():
            return -1
        values = self.criterion.column(self.state, agent)
        agents = np.array([agent])
        return pick_lowest(
            values, fits, self.rng, self.ties, lambda idx: _gamma_at(self.state, idx, agents)
        )


class RandomAgent(Selector):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.alive = list(range(self.state.cluster.n_agents))

    def next(self) -> tuple[int, int] | None:
        alive = self.alive
        while alive:  # each pass either returns or drops an agent for good
            i = int(self.rng.random() * len(alive))
            agent = alive[i]
            framework = self._framework_at(agent)
            if framework >= 0:
                return framework, agent
            alive[i] = alive[-1]
            alive.pop()
        return None


class RandomizedRoundRobin(Selector):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.alive = np.arange(self.state.cluster.n_agents)
        self.full = np.zeros(self.state.cluster.n_agents, dtype=bool)
        self.order: np.ndarray = np.empty(0, dtype=np.int64)
        self.position = 0

    def next(self) -> tuple[int, int] | None:
        while True:  # bounded: a round without a grant marks every agent full
            if self.position >= len(self.order):
                self.alive = self.alive[~self.full[self.alive]]
                if len(self.alive) == 0:
                    return None
                self.order = self.rng.permutation(self.alive)
                self.position = 0
            agent = int(self.order[self.position])
            self.position += 1
            framework = self._framework_at(agent)
            if framework >= 0:
                return framework, agent
            self.full[agent] = True


class Joint(Selector):
    def next(self) -> tuple[int, int] | None:
        fits = self.state.fits_all()
        if not fits.any():
            return None
        values = self.criterion.matrix(self.state)
        n_agents = self.state.cluster.n_agents

        def gamma(flat: np.ndarray) -> np.ndarray:
            return _gamma_at(self.state, flat // n_agents, flat % n_agents)

        flat = pick_lowest(values, fits, self.rng, self.ties, gamma)
        return divmod(flat, n_agents)


class FrameworkFirst(Selector):
    """Pick the framework by criterion, then its agent by best fit or first fit."""

    def __init__(self, *args: object, best: bool, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.best = best
        self.active = self.state.runnable.copy()

    def agent_for(self, framework: int) -> int:
        feasible = self.state.fits_framework(framework)
        if not feasible.any():
            return -1
        if not self.best:
            return int(np.argmax(feasible))
        demand = self.state.known_demand[framework]
        if np.isnan(demand).any():  # oblivious, nothing observed yet: no shape to match
            distance = np.zeros(len(feasible))
        else:
            distance = fit_distance(demand, self.state.residual, self.state.cluster.total)
        return pick_lowest(distance, feasible, self.rng)

    def next(self) -> tuple[int, int] | None:
        chosen: dict[int, int] = {}

        def agent(framework: int) -> int:
            if framework not in chosen:
                chosen[framework] = self.agent_for(framework)
            return chosen[framework]

        def gamma(frameworks: np.ndarray) -> np.ndarray:
            agents = np.array([max(agent(int(n)), 0) for n in frameworks])
            return _gamma_at(self.state, frameworks, agents)

        while True:  # each pass returns or retires a framework that fits nowhere
            candidates = self.active & self.state.wanting()
            if not candidates.any():
                return None
            if self.criterion.per_agent:
                values = np.full(len(candidates), np.inf)
                matrix = self.criterion.matrix(self.state)
                for n in np.flatnonzero(candidates):
                    a = agent(int(n))
                    if a < 0:
                        self.active[n] = False
                        candidates[n] = False
                    else:
                        values[n] = matrix[n, a]
                if not candidates.any():
                    return None
            else:
                values = self.criterion.values(self.state)
            framework = pick_lowest(values, candidates, self.rng, self.ties, gamma)
            where = agent(framework)
            if where >= 0:
                return framework, where
            self.active[framework] = False


def make_selector(
    selection: Selection | str,
    state: AllocationState,
    criterion: Criterion,
    rng: np.random.Generator,
    ties: Ties | str = Ties.RANDOM,
) -> Selector:
    selection = Selection(selection)
    ties = Ties(ties)
    if selection is Selection.RANDOM:
        return RandomAgent(state, criterion, rng, ties)
    if selection is Selection.RRR:
        return RandomizedRoundRobin(state, criterion, rng, ties)
    if selection is Selection.JOINT:
        return Joint(state, criterion, rng, ties)
    return FrameworkFirst(state, criterion, rng, ties, best=selection is Selection.BESTFIT)
