"""An allocation run over some of the engine's agents (issue 28).

After a run that filled until nothing fitted, no wanting framework fits on any agent, and
only events change that: room freed or added on an agent, a filter that ends there, a
framework that starts wanting again. So a run needs only the agents where something may
fit now (the engine's candidates, `Engine._candidates`); every other agent is one where
the selectors find nothing and draw nothing:

- the agent pass (rrr online) skips an agent where nothing fits before any draw, so it
  visits the candidates in the order of the same permutation of all agents;
- best fit and first fit choose among the agents where the framework fits, in agent order,
  which are all candidates, and retire a framework that fits nowhere the same way.

A run is then progressive filling on a `Columns` cluster: all frameworks, the candidate
agents in slot order, and the whole cluster's totals and tolerance, which DRF's shares, best
fit's H and every fit test read. Criteria that read agents beyond the one served (TSF's
tasks alone, a per-agent criterion's best share at role level when choosing a framework
first) and the selections that draw over all agents (random, joint, FUGA) are not run
this way (`restrictable`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from allocator.model import Cluster
from allocator.policy.base import Criterion
from allocator.policy.levels import Level
from allocator.policy.selection import AgentPass, FillInputs, Selection

#: Criteria that read only the holders' allocations and the agent being served.
LOCAL_CRITERIA = frozenset({"drf", "psdsf", "rpsdsf", "alpha-psdsf"})


def restrictable(criterion: Criterion, selection: Selection, level: Level) -> bool:
    """Whether a run over the candidate agents makes the grants a run over all would."""
    if criterion.name not in LOCAL_CRITERIA:
        return False
    if selection is Selection.RRR:
        return True
    if selection in (Selection.BESTFIT, Selection.FIRSTFIT):
        # At role level a per-agent criterion orders roles by their best share over all
        # agents when the framework is chosen first.
        return level is Level.FRAMEWORK or not criterion.per_agent
    return False


@dataclass(frozen=True, eq=False)
class Columns(Cluster):
    """Some agents of a cluster; C_r (`total`) is the whole cluster's."""

    whole_total: np.ndarray | None = None

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
