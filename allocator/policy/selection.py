"""Server selection: which (framework, agent) pair progressive filling serves next.

- random:   a uniformly random agent among those where some task still fits, then the
            framework with the lowest criterion there (reproduces the paper's Table II spread).
- rrr:      randomized round-robin: agents in a fresh random permutation each round, one
            grant per visit (static fills); the online engine runs it as Mesos's allocation
            pass instead: agents shuffled once per run, each filled before the next.
- joint:    argmin of the criterion over every feasible framework-agent pair.
- bestfit:  framework by criterion, then the feasible agent with the least H (BF-DRF).
- firstfit: framework by criterion, then the first feasible agent in declaration order.
- fuga:     paper 003's server game (`allocator/policy/fuga.py`, which registers it).

Each registers its factory in `SELECTIONS` (allocator.policy.registry); `make_selector` looks
it up by name. Agent-first selectors evaluate the criterion for one agent as an (F,) vector;
framework-first selectors scan the agents of one framework as an (A,) vector; joint evaluates
(F, A).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from allocator.policy.base import Criterion
from allocator.policy.bestfit_index import BestFit
from allocator.policy.levels import Level
from allocator.policy.registry import Registry
from allocator.policy.ties import RELATIVE_TIE, Ties, pick_lowest
from allocator.state import AllocationState


class Selection(StrEnum):
    RANDOM = "random"
    RRR = "rrr"
    JOINT = "joint"
    BESTFIT = "bestfit"
    FIRSTFIT = "firstfit"
    FUGA = "fuga"  # paper 003's server game (allocator/policy/fuga.py)


@dataclass(frozen=True)
class FillInputs:
    """What a selector is built on for one fill."""

    state: AllocationState
    criterion: Criterion
    rng: np.random.Generator
    ties: Ties = Ties.RANDOM
    level: Level = Level.FRAMEWORK
    #: rrr as the online engine runs it: Mesos's allocation pass (`AgentPass`).
    agent_pass: bool = False


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

    def __init__(self, inputs: FillInputs) -> None:
        self.state = inputs.state
        self.criterion = inputs.criterion
        self.rng = inputs.rng
        self.ties = Ties(inputs.ties)
        cluster = inputs.state.cluster
        self.role_level = Level(inputs.level) is Level.ROLE and len(cluster.role_names) > 1

    def next(self) -> tuple[int, int] | None:
        raise NotImplementedError

    def _lowest_role(self, candidates: np.ndarray, agent: int | None) -> np.ndarray:
        """Narrow candidate frameworks to the role with the lowest aggregate criterion
        (at `agent` for per-agent criteria); ties between roles are broken at random.

        With contested agents (Cluster.contested: each Mesos role is offered its own copy of
        an agent), a role lower than every candidate's that wants a task and fits in this
        agent's room, but is not offered it, takes the agent from the candidates: none of
        them is served here (the offer goes back, and Mesos can offer the room to that
        role). Without that, each role only ever sees its own offers, and role weights
        would never decide anything."""
        state = self.state
        role_of = state.cluster.role_of
        n_roles = len(state.cluster.role_names)
        roles = np.zeros(n_roles, dtype=bool)
        roles[role_of[candidates]] = True
        values = self._role_values(agent)
        contested = state.cluster.contested
        if contested is not None and agent is not None:
            room = state.residual[agent] + state.tol
            rivals = state.wanting() & contested[:, agent] & (state.fit_demand <= room).all(axis=1)
            contending = roles.copy()
            contending[role_of[rivals]] = True
            low = values[contending].min()
            roles &= values <= low + RELATIVE_TIE * max(1.0, abs(low))
            if not roles.any():
                return np.zeros_like(candidates)
        role = pick_lowest(values, roles, self.rng)
        return candidates & (role_of == role)

    def _role_values(self, agent: int | None) -> np.ndarray:
        """(G,) the criterion of each role (at `agent` for per-agent criteria)."""
        return self.criterion.role_column(self.state, agent)

    def _framework_values(self) -> np.ndarray:
        """(F,) the criterion of each framework (agent-independent criteria)."""
        return self.criterion.values(self.state)

    def _framework_at(self, agent: int) -> int:
        """Lowest-criterion framework that fits a task on `agent`, or -1."""
        fits = self.state.fits_agent(agent)
        if not fits.any():
            return -1
        if self.role_level:
            fits = self._lowest_role(fits, agent)
        values = self.criterion.column(self.state, agent)
        agents = np.array([agent])
        return pick_lowest(
            values, fits, self.rng, self.ties, lambda idx: _gamma_at(self.state, idx, agents)
        )


class RandomAgent(Selector):
    def __init__(self, inputs: FillInputs) -> None:
        super().__init__(inputs)
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
    def __init__(self, inputs: FillInputs) -> None:
        super().__init__(inputs)
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


class AgentPass(Selector):
    """Mesos's allocation pass: the agents shuffled once, each filled before the next."""

    def __init__(self, inputs: FillInputs) -> None:
        super().__init__(inputs)
        self.order = self.rng.permutation(self.state.cluster.n_agents)
        self.position = 0

    def next(self) -> tuple[int, int] | None:
        while self.position < len(self.order):  # an agent is left only when nothing fits
            agent = int(self.order[self.position])
            framework = self._framework_at(agent)
            if framework >= 0:
                return framework, agent
            self.position += 1
        return None


class Joint(Selector):
    def next(self) -> tuple[int, int] | None:
        fits = self.state.fits_all()
        if not fits.any():
            return None
        n_agents = self.state.cluster.n_agents
        if self.role_level:  # lowest (role, agent) pair first, then a framework of it there
            role_of = self.state.cluster.role_of
            pairs = np.zeros((len(self.state.cluster.role_names), n_agents), dtype=bool)
            np.logical_or.at(pairs, role_of, fits)
            flat = pick_lowest(self.criterion.role_matrix(self.state), pairs, self.rng)
            role, agent = divmod(flat, n_agents)
            fits = np.zeros_like(fits)
            fits[:, agent] = self.state.fits_agent(agent) & (role_of == role)
        values = self.criterion.matrix(self.state)

        def gamma(flat: np.ndarray) -> np.ndarray:
            return _gamma_at(self.state, flat // n_agents, flat % n_agents)

        flat = pick_lowest(values, fits, self.rng, self.ties, gamma)
        return divmod(flat, n_agents)


class FrameworkFirst(Selector):
    """Pick the framework by criterion, then its agent by best fit or first fit.

    Best fit asks `bestfit_index.BestFit`, which answers exactly as a scan of every agent
    would, with the same random draws, but keeps H up to date grant by grant in a long fill.
    """

    def __init__(self, inputs: FillInputs, best: bool) -> None:
        super().__init__(inputs)
        self.best = best
        self.active = self.state.runnable.copy()
        self.best_fit = BestFit(self.state, self.rng) if best else None
        # Agent-independent criterion with random ties: the agent is needed only for the
        # framework served, so the pick needs no per-framework agent lookups.
        self._simple = not self.criterion.per_agent and self.ties is Ties.RANDOM

    def agent_for(self, framework: int) -> int:
        if self.best_fit is not None:
            return self.best_fit.best(framework)
        feasible = self.state.fits_framework(framework)
        if not feasible.any():
            return -1
        return int(np.argmax(feasible))

    def serve_or_retire(self, framework: int) -> tuple[int, int] | None:
        """(framework, the agent that serves it); None, and the framework retired for this
        fill, where it fits nowhere."""
        where = self.agent_for(framework)
        if where >= 0:
            return framework, where
        self.active[framework] = False
        return None

    def next(self) -> tuple[int, int] | None:
        if self._simple:
            return self._next_simple()
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
            if self.role_level:
                candidates = self._lowest_role(candidates, None)
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

    def _next_simple(self) -> tuple[int, int] | None:
        """`next` for an agent-independent criterion and random ties.

        Picks as `pick_lowest(values, candidates, rng)` does, with the same draws, in fewer
        passes: non-candidates are masked to +inf, and the rare case where no candidate has a
        finite value (or none is left) goes to `pick_lowest` itself.
        """
        state = self.state
        values: np.ndarray | None = None
        while True:  # each pass returns or retires a framework that fits nowhere
            candidates = self.active & state.wanting()
            if self.role_level and candidates.any():
                candidates = self._lowest_role(candidates, None)
            if values is None:  # the state does not change within one call
                values = self._framework_values()
            masked = np.where(candidates, values, np.inf)
            if not masked.size:  # no framework slot at all (a broker before any Register)
                return None
            low = masked[masked.argmin()]
            if low < np.inf:
                tied = (masked <= low + RELATIVE_TIE * max(1.0, abs(low))).nonzero()[0]
                framework = int(tied[0] if tied.size == 1 else tied[self.rng.integers(tied.size)])
            else:
                framework = pick_lowest(values, candidates, self.rng)
                if framework < 0:
                    return None
            pick = self.serve_or_retire(framework)
            if pick is not None:
                return pick


#: Every selection by name (allocator.policy.registry): a factory of a `Selector` from
#: `FillInputs`; FUGA's registers itself in allocator/policy/fuga.py.
SELECTIONS: Registry[Selector] = Registry("selection")
SELECTIONS.register(Selection.RANDOM)(RandomAgent)
SELECTIONS.register(Selection.JOINT)(Joint)


@SELECTIONS.register(Selection.RRR)
def _rrr(inputs: FillInputs) -> Selector:
    return AgentPass(inputs) if inputs.agent_pass else RandomizedRoundRobin(inputs)


@SELECTIONS.register(Selection.BESTFIT)
def _bestfit(inputs: FillInputs) -> Selector:
    return FrameworkFirst(inputs, best=True)


@SELECTIONS.register(Selection.FIRSTFIT)
def _firstfit(inputs: FillInputs) -> Selector:
    return FrameworkFirst(inputs, best=False)


def make_selector(
    selection: Selection | str,
    state: AllocationState,
    criterion: Criterion,
    rng: np.random.Generator,
    ties: Ties | str = Ties.RANDOM,
    level: Level | str = Level.FRAMEWORK,
    agent_pass: bool = False,
    params: Mapping[str, object] | None = None,
) -> Selector:
    """The selection's selector for one fill; `params`: the plugins' parameters by name
    (`EngineConfig.policy_params()`), of which the selection takes its own if it has any."""
    inputs = FillInputs(state, criterion, rng, Ties(ties), Level(level), agent_pass)
    return SELECTIONS.build(Selection(selection), params, inputs)
