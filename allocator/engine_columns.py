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

The same premise narrows each framework's own search in a characterized best- or first-fit
run (`Engine._scope`): a framework that cannot want tasks again since the last run (not in
the engine's `_rescan`) fits, if anywhere, only on the agents whose room grew since
(`_touched`), so its fit tests and best-fit scans look there alone. A framework that
registers makes every agent it fits on a candidate; without this every waiting framework
would scan them all, at every grant of that run.

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

from allocator.draws import below
from allocator.jit import leaf, njit
from allocator.model import Cluster, fit_floor_of
from allocator.policy.base import Criterion
from allocator.policy.levels import Level
from allocator.policy.selection import AgentPass, FillInputs, FrameworkFirst, Selection
from allocator.policy.ties import RELATIVE_TIE, Ties, pick_lowest
from allocator.state import AllocationState, Mode

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
    #: (`has_demand`, `fit_demand`, `held_demand`) as the engine keeps them across runs,
    #: or None.
    framework_rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    #: `fit_floor_of(fit_demand, tol)` at the run's tolerance, as the engine keeps it, or None.
    fit_floor: np.ndarray | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.framework_rows is not None:  # the cached properties, already known
            known = dict(zip(("has_demand", "fit_demand", "held_demand"), self.framework_rows,
                             strict=True))  # fmt: skip
            self.__dict__.update(known)

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
    agent-independent criterion and random ties: picks as `FrameworkFirst._next_simple`
    does, with the same draws.

    With a fit matrix (few frameworks x agents, the churn run) and one level: within one
    call the values do not change, so the frameworks are sorted by value once; the lowest
    group (within `RELATIVE_TIE`) in index order is what `nonzero` would give. Where each
    framework fits is kept grant by grant (a grant changes one agent), so a framework that
    fits nowhere is retired without a best-fit scan, which would find nothing and draw
    nothing. Otherwise (role level, many agents) for DRF the frameworks' and roles' shares
    are kept through the run (`KeptShares`) and each pick is two compiled passes
    (`_next_compiled`)."""

    def __init__(
        self, inputs: FillInputs, best: bool, scope: tuple[np.ndarray, np.ndarray] | None = None
    ) -> None:
        super().__init__(inputs, best)
        state = self.state
        #: (fresh, near) from `Engine._scope`: a framework not fresh fits, if anywhere, only
        #: at the run's agents `near`, so its fit tests and scans look there alone.
        self.scope = scope
        if scope is not None and self.best_fit is not None and self.best_fit.compiled:
            self.best_fit.compiled.scope = scope
        self.shares = KeptShares.of(self.criterion, state, self.role_level)
        n_roles = len(state.cluster.role_names)
        self._tied = np.empty(max(state.cluster.n_frameworks, n_roles), dtype=np.int64)
        self._has = np.zeros(n_roles, dtype=bool)
        #: (F, agents) where one more task fits now, kept up to date grant by grant (the
        #: agents a grant changed, from the state's write stamps), when small enough.
        self.fits: np.ndarray | None = None
        self.hopeful: np.ndarray | None = None
        self.seen = state.changes
        n_f, n_a = state.cluster.n_frameworks, state.cluster.n_agents
        # The compiled pick (`_pick_loop`) finds the frameworks that fit nowhere itself.
        compiled = self.role_level and self.shares is not None
        if n_f * n_a <= HOPELESS_PAIRS and not compiled:
            self.fits = self._fits_at(np.arange(n_a))
            self.hopeful = self.fits.any(axis=1)
        # (F, R) `fit_floor_of`: d - tol where d > 0, -inf elsewhere.
        self._floor: np.ndarray | None = getattr(state.cluster, "fit_floor", None)
        # The candidates (active and wanting) at the fill's first compiled pick, ascending
        # (by role first at role level): within a fill no framework becomes one again.
        self._members: np.ndarray | None = None
        self._witness = np.full(n_f, -1, dtype=np.int64)  # an agent where each fitted

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
        if self.shares is not None:
            self.shares.sync()
        pick = super().next()
        if pick is not None and self.shares is not None:
            self.shares.serving(pick[0])
        return pick

    def _framework_values(self) -> np.ndarray:
        if self.shares is not None:
            return self.shares.values
        return super()._framework_values()

    def _role_values(self, agent: int | None) -> np.ndarray:
        if self.shares is not None and self.shares.role_values is not None:
            return self.shares.role_values
        return super()._role_values(agent)

    def agent_for(self, framework: int) -> int:
        if self.hopeful is not None and not self.hopeful[framework]:
            return -1
        return super().agent_for(framework)

    def _next_simple(self) -> tuple[int, int] | None:
        if self.role_level or self.fits is None:
            # The generic pass, over kept shares: without the fit matrix a sorted walk
            # retires nothing cheaper, and sorting at every pick costs O(F log F).
            if self.shares is not None:
                return self._next_compiled(self.shares)
            return super()._next_simple()
        state = self.state
        candidates = self.active & state.wanting()
        values = self._framework_values()
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
            pick = self.serve_or_retire(order[at])
            if pick is not None:
                return pick
            if at == head:
                head += 1
            else:
                del order[at], sorted_values[at]
        return None

    def _next_compiled(self, shares: KeptShares) -> tuple[int, int] | None:
        """`FrameworkFirst._next_simple` on kept shares: `_pick_loop` draws the framework
        and retires those that fit nowhere; with a share that is not finite, the passes
        of `_next_stepwise` instead."""
        state = self.state
        self.prepare_compiled()
        assert self.scope is not None
        fresh, near = self.scope
        while True:  # each pass returns or retires a framework that fits nowhere
            framework = _pick_loop(
                self._members,
                self.active,
                state.wanting(),
                state.cluster.role_of,
                len(state.cluster.role_names) if self.role_level else 0,
                shares.values,
                shares.values if shares.role_values is None else shares.role_values,
                state.cluster.eligible,
                self._floor,
                state.residual,
                self._witness,
                fresh,
                near,
                self.rng,
                self._tied,
            )
            if framework == -2:
                return self._next_stepwise(shares)
            if framework < 0:
                return None
            pick = self.serve_or_retire(framework)
            if pick is not None:
                return pick

    def prepare_compiled(self) -> None:
        """What the compiled picks read, made at the fill's first: the fit floors, the
        candidates (`_members`) and a scope of every agent if none was given."""
        state = self.state
        if self._floor is None:
            self._floor = fit_floor_of(state.fit_demand, state.tol)
        if self._members is None:
            members = np.flatnonzero(self.active & state.wanting())
            if self.role_level:  # grouped by role, as `_pick_loop` reads them
                members = members[np.argsort(state.cluster.role_of[members], kind="stable")]
            self._members = members
            if self.scope is None:
                self.scope = (np.ones(len(self.active), dtype=bool), np.zeros(0, np.int64))

    def _next_stepwise(self, shares: KeptShares) -> tuple[int, int] | None:
        """`FrameworkFirst._next_simple` on kept shares, each narrowing (the lowest role,
        then the lowest framework in it) one compiled pass, the draws made here as
        `ties.pick_lowest` makes them; a least value that is not finite goes to
        `pick_lowest` itself at the same point."""
        state = self.state
        cluster = state.cluster
        role_of = cluster.role_of
        values = shares.values
        while True:  # each pass returns or retires a framework that fits nowhere
            wanting = state.wanting()
            role = -1
            if self.role_level:
                assert shares.role_values is not None
                k = _role_ties(self.active, wanting, role_of, shares.role_values, self._has,
                               self._tied)  # fmt: skip
                if k == 0:
                    return None  # no candidate at all
                role = self._draw(k, shares.role_values, self._has)
            k = _framework_ties(self.active, wanting, role_of, role, values, self._tied)
            if k == 0:
                return None
            candidates = None
            if k < 0:
                candidates = self.active & wanting
                if role >= 0:
                    candidates &= role_of == role
            framework = self._draw(k, values, candidates)
            if framework < 0:
                return None
            pick = self.serve_or_retire(framework)
            if pick is not None:
                return pick

    def _draw(self, k: int, values: np.ndarray, mask: np.ndarray | None) -> int:
        """The pick among `k` tied (in `_tied`), or `pick_lowest` over `mask` (k < 0)."""
        if k < 0:
            assert mask is not None
            return pick_lowest(values, mask, self.rng)
        if k == 1:
            return int(self._tied[0])
        return int(self._tied[self.rng.integers(k)])


@leaf
def _fits_somewhere(n: int, eligible: np.ndarray, floor: np.ndarray, residual: np.ndarray,
                    witness: np.ndarray, fresh: bool, near: np.ndarray) -> bool:  # fmt: skip
    """Whether one task of framework n fits on some agent (`fits_framework(n).any()`),
    trying first the agent where it last fitted; not `fresh`: n may fit only at the
    agents `near`, and only those are tried."""
    n_a, n_r = residual.shape
    first = witness[n]
    n_scan = n_a if fresh else near.shape[0]
    for step in range(-1 if first >= 0 else 0, n_scan):
        i = first if step < 0 else (step if fresh else near[step])
        ok = eligible[n, i]
        r = 0
        while ok and r < n_r:
            f = floor[n, r]
            ok = f == -np.inf or residual[i, r] >= f
            r += 1
        if ok:
            witness[n] = i
            return True
    return False


@njit
def _pick_loop(members: np.ndarray, active: np.ndarray, wanting: np.ndarray,
               role_of: np.ndarray, n_roles: int, values: np.ndarray, role_values: np.ndarray,
               eligible: np.ndarray, floor: np.ndarray, residual: np.ndarray,
               witness: np.ndarray, fresh: np.ndarray, near: np.ndarray,
               rng: np.random.Generator, tied: np.ndarray) -> int:  # fmt: skip
    """`FrameworkFirst._next_simple`'s picks (role level when `n_roles` > 0: the lowest
    role among those with a candidate, then the lowest framework in it; ties as
    `ties.pick_lowest` draws them, numba's `Generator.integers` being NumPy's) until one
    fits somewhere; each that fits nowhere is retired (`active`), as the generic pass
    retires it after a lookup that finds nothing and draws nothing. The candidates are
    the frameworks of `members` (a superset kept through the fill, ascending, and at role
    level grouped by role, roles ascending) still active and wanting, so a pick costs what
    the candidates number, not the framework slots.
    Returns that framework, -1 when no candidate is left, -2 (before any draw) when a
    candidate's share or its role's is not finite."""
    live = np.empty(members.shape[0], dtype=np.int64)
    m = 0
    for n in members:
        if active[n] and wanting[n]:
            if not np.isfinite(values[n]):
                return -2
            if n_roles > 0 and not np.isfinite(role_values[role_of[n]]):
                return -2
            live[m] = n
            m += 1
    live = live[:m]
    keys = role_of[live] if n_roles > 0 else np.zeros(m, dtype=np.int64)
    start = np.empty(m + 1, dtype=np.int64)  # bucket b: live[start[b]:start[b + 1]]
    role = np.empty(m, dtype=np.int64)  # bucket b's role, ascending
    buckets = 0
    for j in range(m):
        if j == 0 or keys[j] != keys[j - 1]:
            start[buckets] = j
            role[buckets] = keys[j]
            buckets += 1
    start[buckets] = m
    left = np.empty(buckets, dtype=np.int64)  # candidates still active in each bucket
    for b in range(buckets):
        left[b] = start[b + 1] - start[b]
    remaining = m
    while remaining > 0:
        b = 0
        if n_roles > 0:  # the tied roles in role order, as bucket numbers
            low = np.inf
            for h in range(buckets):
                if left[h] > 0 and role_values[role[h]] < low:
                    low = role_values[role[h]]
            limit = low + RELATIVE_TIE * max(1.0, abs(low))
            k = 0
            for h in range(buckets):
                if left[h] > 0 and role_values[role[h]] <= limit:
                    tied[k] = h
                    k += 1
            b = tied[0] if k == 1 else tied[below(rng, k)]
        low = np.inf
        for j in range(start[b], start[b + 1]):
            n = live[j]
            if active[n] and values[n] < low:
                low = values[n]
        limit = low + RELATIVE_TIE * max(1.0, abs(low))
        k = 0
        for j in range(start[b], start[b + 1]):
            n = live[j]
            if active[n] and values[n] <= limit:
                tied[k] = n
                k += 1
        framework = tied[0] if k == 1 else tied[below(rng, k)]
        if _fits_somewhere(framework, eligible, floor, residual, witness, fresh[framework],
                           near):  # fmt: skip
            return framework
        active[framework] = False
        left[b] -= 1
        remaining -= 1
    return -1


@njit
def _tied_within(values: np.ndarray, low: float, mask_of: np.ndarray, tied: np.ndarray) -> int:
    """Indices i (ascending) with mask_of[i] and values[i] within `RELATIVE_TIE` of `low`."""
    limit = low + RELATIVE_TIE * max(1.0, abs(low))
    k = 0
    for i in range(values.shape[0]):
        if mask_of[i] and values[i] <= limit:
            tied[k] = i
            k += 1
    return k


@njit
def _role_ties(active: np.ndarray, wanting: np.ndarray, role_of: np.ndarray,
               role_values: np.ndarray, has: np.ndarray, tied: np.ndarray) -> int:  # fmt: skip
    """The roles with a candidate framework (active and wanting) in `has`, and those tied
    for the least value among them in `tied`: their count, 0 when no framework is a
    candidate, -1 when the least is not finite (NaN included, as numpy's min gives it)."""
    has[:] = False
    found = False
    for n in range(active.shape[0]):
        if active[n] and wanting[n]:
            has[role_of[n]] = True
            found = True
    if not found:
        return 0
    low = np.inf
    for g in range(role_values.shape[0]):
        if has[g]:
            if np.isnan(role_values[g]):
                return -1
            low = min(low, role_values[g])
    if not np.isfinite(low):
        return -1
    return _tied_within(role_values, low, has, tied)


@njit
def _framework_ties(active: np.ndarray, wanting: np.ndarray, role_of: np.ndarray, role: int,
                    values: np.ndarray, tied: np.ndarray) -> int:  # fmt: skip
    """The candidate frameworks (active, wanting, of `role` unless it is -1) tied for the
    least value in `tied`: their count, 0 when there is no candidate, -1 when the least
    is not finite (NaN included: `masked.argmin()` stops at the first NaN)."""
    low = np.inf
    found = False
    for n in range(active.shape[0]):
        if active[n] and wanting[n] and (role < 0 or role_of[n] == role):
            found = True
            if np.isnan(values[n]):
                return -1
            low = min(low, values[n])
    if not found:
        return 0
    if not low < np.inf:
        return -1
    limit = low + RELATIVE_TIE * max(1.0, abs(low))
    k = 0
    for n in range(active.shape[0]):
        if active[n] and wanting[n] and (role < 0 or role_of[n] == role) and values[n] <= limit:
            tied[k] = n
            k += 1
    return k


@leaf
def _drf_share(alloc: np.ndarray, total: np.ndarray, weight: float) -> float:
    """One holder's `DRF.values` (the same IEEE steps as `max_ratio` over the resources the
    cluster has, a NaN kept as np.maximum keeps it, then the division by the weight)."""
    has = False
    share = 0.0
    for r in range(total.shape[0]):
        whole = total[r]
        if whole <= 0:
            continue
        ratio = alloc[r] / whole
        if not has or ratio > share or np.isnan(ratio):
            if not has or not np.isnan(share):
                share = ratio
            has = True
    return share / weight


@leaf
def _summed(alloc: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    """out[r] = the sum of alloc[rows, r] in the order of `rows`, from the first (what
    `np.cumsum` ends at): a role's allocation over its frameworks, in slot order."""
    for r in range(alloc.shape[1]):
        held = alloc[rows[0], r]
        for j in range(1, rows.shape[0]):
            held += alloc[rows[j], r]
        out[r] = held


@njit
def _drf_shares(alloc: np.ndarray, total: np.ndarray, weight: np.ndarray, role_of: np.ndarray,
                role_weight: np.ndarray, values: np.ndarray, role_alloc: np.ndarray,
                role_values: np.ndarray) -> None:  # fmt: skip
    """DRF's values of every framework, and of every role (`role_values` not empty) on its
    allocation as `RoleHoldings.of` sums it (`np.bincount`: in framework order, from 0)."""
    n_f, n_r = alloc.shape
    values[:] = 0.0
    first = True
    for r in range(n_r):  # a resource at a time, as `max_ratio` takes them
        whole = total[r]
        if whole <= 0:
            continue
        for n in range(n_f):
            ratio = alloc[n, r] / whole
            kept = values[n]  # np.maximum(kept, ratio): a NaN on either side stays
            if first or (not np.isnan(kept) and (ratio > kept or np.isnan(ratio))):
                values[n] = ratio
        first = False
    for n in range(n_f):
        values[n] /= weight[n]
    if role_values.shape[0] == 0:
        return
    role_alloc[:] = 0.0
    for r in range(n_r):
        for n in range(n_f):
            role_alloc[role_of[n], r] += alloc[n, r]
    for g in range(role_values.shape[0]):
        role_values[g] = _drf_share(role_alloc[g], total, role_weight[g])


#: Criteria whose value for a holder reads only that holder's allocation (and the cluster's
#: totals and weights), by the function that computes one holder's value: a grant changes
#: the served framework's value alone.
ROW_LOCAL = {"drf": _drf_share}


class KeptShares:
    """A row-local criterion's values of every framework, and at role level of every role,
    kept grant by grant through one fill (characterized mode: a grant changes only the
    served framework's allocation, and so its role's). Each kept value is recomputed with
    the criterion's own float steps on its own row (a role's allocation as `RoleHoldings`
    sums it: in framework order, from zero), so it equals what a full evaluation gives;
    any other write to the state (a release, a grant this selector did not pick) makes
    them all recomputed."""

    def __init__(self, criterion: Criterion, state: AllocationState, role_level: bool) -> None:
        self.criterion = criterion
        self.state = state
        cluster = state.cluster
        n_roles = len(cluster.role_names) if role_level else 0
        self.values = np.empty(cluster.n_frameworks)
        self.role_alloc = np.empty((n_roles, len(cluster.resources)))
        role_values = np.empty(n_roles)
        assert criterion.name == "drf" and cluster.role_weight is not None
        _drf_shares(state.alloc, cluster.total, cluster.weight, cluster.role_of,
                    cluster.role_weight, self.values, self.role_alloc, role_values)  # fmt: skip
        self.role_values: np.ndarray | None = role_values if role_level else None
        self.members: dict[int, np.ndarray] = {}
        self.total = np.ascontiguousarray(cluster.total, dtype=float)
        self.seen = state.changes
        self.served = -1
        self.served_count = 0.0

    @classmethod
    def of(
        cls, criterion: Criterion, state: AllocationState, role_level: bool
    ) -> KeptShares | None:
        if criterion.name not in ROW_LOCAL or state.mode is not Mode.CHARACTERIZED:
            return None
        return cls(criterion, state, role_level)

    def serving(self, framework: int) -> None:
        """The framework about to be granted a task."""
        self.served = framework
        self.served_count = float(self.state.count[framework])

    def sync(self) -> None:
        state = self.state
        if state.changes == self.seen:
            return
        n = self.served
        one_grant = (
            state.changes == self.seen + 1 and n >= 0 and state.count[n] == self.served_count + 1
        )
        self.seen = state.changes
        self.served = -1
        if not one_grant:
            fresh = KeptShares(self.criterion, state, self.role_values is not None)
            self.values, self.role_values = fresh.values, fresh.role_values
            if fresh.role_values is not None:
                self.role_alloc = fresh.role_alloc
            return
        cluster = state.cluster
        share = ROW_LOCAL[self.criterion.name]
        self.values[n] = share(state.alloc[n], self.total, float(cluster.weight[n]))
        if self.role_values is None:
            return
        g = int(cluster.role_of[n])
        members = self.members.get(g)
        if members is None:
            members = self.members[g] = np.flatnonzero(cluster.role_of == g)
        _summed(state.alloc, members, self.role_alloc[g])
        assert cluster.role_weight is not None
        self.role_values[g] = share(self.role_alloc[g], self.total, float(cluster.role_weight[g]))
