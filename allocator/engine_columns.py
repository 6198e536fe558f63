"""An allocation run over some of the engine's agents (issue 28).

After a run that filled until nothing fitted, no wanting framework fits on any agent, and
only events change that: room freed or added on an agent, a filter that ends there, a
framework that starts wanting again. So a run needs only the agents where something may
fit now (the engine's candidates, `Engine._candidates`); every other agent is one where
the selectors find nothing and draw nothing:

- the agent pass (rrr online) skips an agent where nothing fits before any draw, so it
  visits the candidates in the order of the same permutation of all agents;
- best fit and first fit choose among the agents where the framework fits, in agent order,
  which are all candidates, and retire a framework that fits nowhere the same way; with
  waste ties they break a tie by gamma at each framework's agent, and for a framework that
  fits nowhere at agent 0 of the run's state (`FrameworkFirst.next`), agent slot 0 of the
  whole cluster in a dense run: such a run takes slot 0 as well (`with_first_agent`);
- joint takes the argmin of the criterion over the feasible pairs, and draws among the tied
  ones in (framework, agent) order: feasible pairs are all on candidates, in the same order
  (at role level the (role, agent) pairs likewise);
- FUGA's servers are the agents where something fits, ordered by (best mu, agent), and its
  random agent for a framework with no executor yet is drawn among the agents where it
  fits: all candidates, in the same order;
- the random selection draws among every agent slot, one draw per agent at least, so the
  run keeps them all alive and replays the draws that land off the candidates
  (`allocator.engine_random`).

A run is then progressive filling on a `Columns` cluster: all frameworks, the candidate
agents in slot order, and the whole cluster's totals and tolerance, which DRF's shares, best
fit's H and every fit test read, and TSF's y_n (tasks alone, a sum over every agent the
framework may use at that run), which the engine keeps across runs
(`allocator.engine_alone`; a y_n past 2^53, where sums stop being exact, runs densely).

What still takes a dense snapshot of every agent, and why (`restrictable`):

- a per-agent criterion (PS-DSF, rPS-DSF, alpha-PS-DSF) at role level, with more than one
  role, with best or first fit: the framework is chosen first, and roles are ordered by
  their best share over every agent (`Criterion.role_column` with no agent), which over
  the candidates is another minimum. It would need each role's minimum over all agents
  kept across runs. (With one role the selectors serve frameworks as at framework level.)
- Mesos role pools (`Engine.pooled_attribute`): an agent where a framework fits can be left
  unserved when a lower role that is not offered it contests it (`Cluster.contested`,
  `Selector._lowest_role`), so a run can end with room that fits, and whether the contest
  still holds at the next run depends on shares that other agents' grants change: the
  premise above (nothing fits anywhere after a run) fails, and with it the candidates.
  The contest also reads the eligibility, refuse filters included, of each framework's own
  copy of the agent, another agent slot, from (F, A) pool matrices (`Engine._pools`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from allocator.model import Cluster
from allocator.policy.base import Criterion
from allocator.policy.levels import Level
from allocator.policy.selection import AgentPass, FillInputs, FrameworkFirst, Selection
from allocator.policy.ties import RELATIVE_TIE, Ties

#: Criteria that read only the holders' allocations and the agent being served (FUGA's is
#: DRF), and TSF, whose y_n, summed over the whole cluster, a run reads from `Columns.alone`.
LOCAL_CRITERIA = frozenset({"drf", "psdsf", "rpsdsf", "alpha-psdsf", "tsf", "fuga"})


def restrictable(criterion: Criterion, selection: Selection, level: Level, ties: Ties) -> bool:
    """Whether a run over the candidate agents makes the grants a run over all would."""
    if criterion.name not in LOCAL_CRITERIA:
        return False
    if selection in (Selection.RRR, Selection.JOINT, Selection.FUGA, Selection.RANDOM):
        return True
    if selection in (Selection.BESTFIT, Selection.FIRSTFIT):
        # At role level a per-agent criterion orders roles by their best share over all
        # agents when the framework is chosen first (waste ties: `with_first_agent`).
        return level is Level.FRAMEWORK or not criterion.per_agent
    return False


def with_first_agent(columns: np.ndarray, selection: Selection, ties: Ties) -> np.ndarray:
    """The candidates and agent slot 0 for best or first fit with waste ties, which rank a
    framework that fits nowhere by gamma at the first agent of the run's state
    (`FrameworkFirst.next`): slot 0 in a dense run. Nothing fits there unless it is a
    candidate, and it comes first in slot order, so it changes nothing else."""
    framework_first = selection in (Selection.BESTFIT, Selection.FIRSTFIT)
    if not framework_first or ties is not Ties.WASTE or (columns.size and columns[0] == 0):
        return columns
    return np.concatenate([np.zeros(1, dtype=columns.dtype), columns])


@dataclass(frozen=True, eq=False)
class Columns(Cluster):
    """Some agents of a cluster; C_r (`total`) is the whole cluster's, and so is TSF's y_n
    (`alone`, (F,) for the frameworks' demands; `allocator.policy.tsf.tasks_alone`)."""

    whole_total: np.ndarray | None = None
    alone: np.ndarray | None = None

    @property
    def total(self) -> np.ndarray:  # type: ignore[override]
        assert self.whole_total is not None
        return self.whole_total


class ColumnsPass(AgentPass):
    """Mesos's allocation pass over the candidate agents: the same permutation of all
    `n_agents` agents as `AgentPass` draws, keeping the candidates (`columns`, the slots of
    the state's agents in order) in its order, as positions in the state."""

    def __init__(self, inputs: FillInputs, n_agents: int, columns: np.ndarray) -> None:
        super(AgentPass, self).__init__(inputs)
        permutation = self.rng.permutation(n_agents)
        position = np.full(n_agents, -1, dtype=np.int64)
        position[columns] = np.arange(len(columns))
        mapped = position[permutation]
        self.order = mapped[mapped >= 0]
        self.position = 0


#: Largest (frameworks x agents) fit test made up front to retire hopeless frameworks.
HOPELESS_PAIRS = 4_000_000
#: Tied groups larger than this are picked from by `FrameworkFirst`'s own pass.
SMALL_TIE = 64


class ColumnsFirst(FrameworkFirst):
    """Framework-first selection (best fit, first fit) over the candidate agents, for an
    agent-independent criterion, random ties and one level: picks as
    `FrameworkFirst._next_simple` does, with the same draws, without its O(F) pass per
    pick. Within one call the values do not change, so the frameworks are sorted by value
    once; the lowest group (within `RELATIVE_TIE`) in index order is what `nonzero` would
    give. Where each framework fits is kept grant by grant (a grant changes one agent), so
    a framework that fits nowhere is retired without a best-fit scan, which would find
    nothing and draw nothing."""

    def __init__(self, inputs: FillInputs, best: bool) -> None:
        super().__init__(inputs, best)
        state = self.state
        #: (F, agents) where one more task fits now, kept up to date grant by grant (the
        #: agents a grant changed, from the state's write stamps), when small enough.
        self.fits: np.ndarray | None = None
        self.hopeful: np.ndarray | None = None
        self.seen = state.changes
        n_f, n_a = state.cluster.n_frameworks, state.cluster.n_agents
        if n_f * n_a <= HOPELESS_PAIRS:
            self.fits = self._fits_at(np.arange(n_a))
            self.hopeful = self.fits.any(axis=1)

    def _fits_at(self, agents: np.ndarray) -> np.ndarray:
        """(F, len(agents)) as `AllocationState.fits_framework` tests each pair."""
        state = self.state
        ok = np.array(state.cluster.eligible[:, agents], dtype=bool)
        for r in range(state.residual.shape[1]):
            d = state.fit_demand[:, r, None]
            ok &= (d <= 0) | (state.residual[None, agents, r] >= d - state.tol[r])
        return ok

    def next(self) -> tuple[int, int] | None:
        state = self.state
        if self.fits is not None and state.changes != self.seen:
            changed = np.flatnonzero(state.changed_at > self.seen)
            self.fits[:, changed] = self._fits_at(changed)
            self.hopeful = self.fits.any(axis=1)
            self.seen = state.changes
        return super().next()

    def agent_for(self, framework: int) -> int:
        if self.hopeful is not None and not self.hopeful[framework]:
            return -1
        return super().agent_for(framework)

    def _next_simple(self) -> tuple[int, int] | None:
        if self.role_level:
            return super()._next_simple()
        state = self.state
        candidates = self.active & state.wanting()
        values = self.criterion.values(state)
        index = np.flatnonzero(candidates)
        chosen = values[index]
        if index.size == 0 or not np.isfinite(chosen).all():
            return super()._next_simple()
        ranked = np.argsort(chosen, kind="stable")
        order, sorted_values = index[ranked].tolist(), chosen[ranked].tolist()
        head = 0
        while head < len(order):
            low = sorted_values[head]
            limit = low + RELATIVE_TIE * max(1.0, abs(low))
            end = head + 1
            while end < len(order) and sorted_values[end] <= limit:
                end += 1
            if end - head > SMALL_TIE:
                return super()._next_simple()  # the same pick, by the generic pass
            at = head
            if end - head > 1:
                tied = sorted(order[head:end])
                at = order.index(tied[int(self.rng.integers(len(tied)))], head, end)
            framework = order[at]
            where = self.agent_for(framework)
            if where >= 0:
                return framework, where
            self.active[framework] = False
            if at == head:
                head += 1
            else:
                del order[at], sorted_values[at]
        return None
