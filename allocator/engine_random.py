"""The random selection over the candidate agents, with the draws of a run over all.

`RandomAgent` draws an agent uniformly among the alive ones (every agent of the run's state
at first), serves it if something fits there and drops it otherwise, until none is left:
one draw per agent at least, and where each lands depends on how many are alive. Over the
candidates only, a run keeps the alive list of every agent slot, so that each draw lands
where it would, and knows without looking that nothing fits on the others (nothing fits
there at the start of the run, and a run only takes room away); the draws that land on
them are replayed in a compiled loop (`drop_until_candidate`), and the generator is left
exactly where the draws one by one would leave it.
"""

from __future__ import annotations

import numpy as np

from allocator.jit import njit
from allocator.policy.selection import FillInputs, RandomAgent, Selector

#: Fewest draws made at once while looking for the next candidate.
SMALLEST_BATCH = 64


@njit
def drop_until_candidate(
    alive: np.ndarray, size: int, draws: np.ndarray, candidate: np.ndarray
) -> tuple[int, int, int]:
    """`RandomAgent.next`'s draws (`draws`, uniforms in order) over `alive[:size]`, dropping
    each non-candidate drawn (the last alive takes its place), until one lands on a
    candidate: (draws used, its index in `alive` or -1, agents still alive)."""
    for k in range(draws.size):
        i = int(draws[k] * size)
        if candidate[alive[i]]:
            return k + 1, i, size
        size -= 1
        alive[i] = alive[size]
    return draws.size, -1, size


class ColumnsRandom(RandomAgent):
    """The random selection over the candidate agents (`columns`, the slots of the state's
    agents in order) with the draws of `RandomAgent` over all `n_agents` agent slots."""

    def __init__(self, inputs: FillInputs, n_agents: int, columns: np.ndarray) -> None:
        Selector.__init__(self, inputs)
        self.slots = np.arange(n_agents, dtype=np.int64)  # alive agent slots, first `size`
        self.size = n_agents
        self.position = np.full(n_agents, -1, dtype=np.int64)
        self.position[columns] = np.arange(len(columns))
        self.candidate = self.position >= 0
        self.candidates_left = len(columns)

    def next(self) -> tuple[int, int] | None:
        rng = self.rng
        while self.size:
            if not self.candidates_left:  # every draw left drops a non-candidate
                rng.random(self.size)
                self.size = 0
                break
            batch = min(self.size, max(SMALLEST_BATCH, 2 * self.size // self.candidates_left))
            saved = rng.bit_generator.state
            draws = rng.random(batch)
            used, i, self.size = drop_until_candidate(self.slots, self.size, draws, self.candidate)
            if used < batch:  # leave the generator after the draws used, one by one
                rng.bit_generator.state = saved
                rng.random(used)
            if i < 0:
                continue
            agent = int(self.position[self.slots[i]])
            framework = self._framework_at(agent)
            if framework >= 0:
                return framework, agent
            self.size -= 1
            self.slots[i] = self.slots[self.size]
            self.candidates_left -= 1
        return None
