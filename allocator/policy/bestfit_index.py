"""Best-fit agent lookup (the agent half of BF-DRF), kept up to date grant by grant.

For a framework n the best-fit agent is the feasible agent (one more whole task of d_n fits
in its residual and n may run there) with the least H (`bestfit.fit_distance`), ties within
`ties.RELATIVE_TIE` broken uniformly at random. `best_fit_scan` finds it by scanning every
agent: O(A) numpy passes per grant, plus recomputing H for every agent.

`BestFitIndex` keeps H (F, A) for every framework-agent pair, +inf where the task does not
fit. A grant changes one agent's residual, so only that agent's column is recomputed (a
vector over frameworks); a lookup is then one min and one comparison over the framework's
row. The columns are computed with the same float operations as `fit_distance` and
`AllocationState.fits_framework`, so every H is bit-for-bit what a scan computes and the
lookup returns the same agent as `best_fit_scan` for the same random stream. Whenever the
row's minimum is not finite (nothing fits, or an H that is +inf or NaN on a feasible agent)
it defers to `best_fit_scan`.

Changed agents come from the state's write counter and per-agent stamps
(`AllocationState.changes`, `changed_at`); no agent's residual changes any other way.
Memory is 8 F A bytes (80 MB at 1,000 frameworks x 10,000 agents).

`CompiledScan` (what `BestFit`, the selector's lookup, uses by default: `COMPILED`) is the
scan compiled: one pass over the agents per lookup, with the agents' half of H (their
residual shape, `bestfit.shape_distance`'s float steps) kept through the fill and
recomputed only for the agents a write changed, so a lookup makes only compares and
subtractions, the same H and the same draws as `best_fit_scan`; shapes it does not cover
(an unknown demand, one that fits nowhere, a least H that is not finite) go to the scan.
It needs no (F, A) matrix and nothing to build, and it is faster per lookup than the
index at 10,000 agents (the online engine's runs over many agents with a few grants each).

With `COMPILED` off: building the index costs about as much as F/2 scans, too much for an
allocation run that serves a handful of tasks, so `BestFit` scans for the first lookups
and builds the index only once a fill has made that many; with the same answers and draws
either way, the switch does not change the result. Above `MAX_BYTES` it always scans.
"""

from __future__ import annotations

import numpy as np

from allocator.jit import leaf, njit
from allocator.model import fit_floor_of
from allocator.policy import min_tree
from allocator.policy.bestfit import DemandShape, demand_shape, fit_distance
from allocator.policy.ties import RELATIVE_TIE, pick_lowest
from allocator.state import AllocationState

#: Largest H matrix the index allocates; beyond it best fit scans on every lookup.
MAX_BYTES = 1 << 30

#: Lookups answered by scanning before the index is built: this many per framework, at least
#: `MIN_SCANS` (building costs about as much as F / 2 scans).
SCANS_PER_FRAMEWORK = 0.5
MIN_SCANS = 16

#: Best fit by `CompiledScan` (False: numpy scans, then the index, as before).
COMPILED = True

#: Agents per block when many columns are recomputed at once (bounds the temporaries).
_BLOCK = 1024


@leaf
def _agent_shapes(
    residual: np.ndarray,
    total: np.ndarray,
    ref: int,
    agents: np.ndarray,
    shape: np.ndarray,
    empty: np.ndarray,
) -> None:
    """The agent half of H (`bestfit.shape_distance`'s float steps) for reference resource
    `ref` at `agents`: shape[i, r] = residual_r * (scale / C_r) with scale = 1 /
    (residual_ref / C_ref), and `empty[i]` where residual_ref / C_ref <= 0 (H = +inf)."""
    n_r = residual.shape[1]
    for k in range(agents.shape[0]):
        i = agents[k]
        res_ref = residual[i, ref] / total[ref]
        is_empty = res_ref <= 0
        scale = 1.0 / (1.0 if is_empty else res_ref)
        for r in range(n_r):
            if r != ref and total[r] > 0:
                shape[i, r] = residual[i, r] * (scale / total[r])
        empty[i] = is_empty


#: `CompiledScan.tree_kept`: the scans over this many agents or more keep a min tree of H for
#: the lookups after a grant (`TREE_FROM`), and for how many positions the tree holds the
#: kept H, plus one (0: it does not; `TREE_OF`), and how many of them are feasible.
TREE_FROM, TREE_OF, TREE_FEASIBLE = 0, 1, 2
#: Agents from which a lookup after a grant reads the min tree (below: the walk is cheaper).
TREE_MIN = 256


@leaf
def _distance_at(i: int, eligible: np.ndarray, floor: np.ndarray, residual: np.ndarray,
                 shape: np.ndarray, empty: np.ndarray, resources: np.ndarray,
                 terms: np.ndarray) -> tuple[bool, float]:  # fmt: skip
    """Whether one more task fits on agent i (`fits_framework`'s test), and then its H."""
    ok = eligible[i]
    r = 0
    n_r = residual.shape[1]
    while ok and r < n_r:
        ok = residual[i, r] >= floor[r]
        r += 1
    if not ok:
        return False, np.nan
    if empty[i]:
        return True, np.inf
    h = 0.0
    for j in range(resources.shape[0]):
        gap = abs(terms[j] - shape[i, resources[j]])
        h = gap if j == 0 else h + gap
    return True, h


@njit
def _rescan_one(eligible: np.ndarray, floor: np.ndarray, residual: np.ndarray,
                shape: np.ndarray, empty: np.ndarray, resources: np.ndarray,
                terms: np.ndarray, distance: np.ndarray, tied: np.ndarray, agents: np.ndarray,
                every: bool, only: int, n_scan: int, tree: np.ndarray,
                tree_kept: np.ndarray) -> int:  # fmt: skip
    """`_scan_kernel` after a grant at `only`, on the min tree of the kept H: the same
    distances written, the same answer."""
    if tree_kept[TREE_OF] != n_scan + 1:
        tree_kept[TREE_FEASIBLE] = min_tree.build(tree, distance, agents, every, n_scan)
        tree_kept[TREE_OF] = n_scan + 1
    at = only
    if not every:  # `only` counts only where it is scanned
        at = np.searchsorted(agents, only)
        if at == n_scan or agents[at] != only:
            at = -1
    if at >= 0:
        was = not np.isnan(distance[only])
        ok, h = _distance_at(only, eligible, floor, residual, shape, empty, resources, terms)
        distance[only] = h
        tree_kept[TREE_FEASIBLE] += int(ok) - int(was)
        if ok and np.isnan(h):  # undefined: the caller decides, and keeps nothing
            tree_kept[TREE_OF] = 0
            return -2
        min_tree.update(tree, n_scan, at, h)
    if tree_kept[TREE_FEASIBLE] == 0:
        return -1
    low = tree[1]
    if not np.isfinite(low):
        return -2
    limit = low + RELATIVE_TIE * max(1.0, abs(low))
    return min_tree.at_most(tree, n_scan, limit, agents, every, tied)


@njit
def _scan_kernel(
    eligible: np.ndarray,
    demand: np.ndarray,
    tol: np.ndarray,
    residual: np.ndarray,
    shape: np.ndarray,
    empty: np.ndarray,
    resources: np.ndarray,
    terms: np.ndarray,
    distance: np.ndarray,
    tied: np.ndarray,
    agents: np.ndarray,
    every: bool,
    only: int,
    tree: np.ndarray,
    tree_kept: np.ndarray,
) -> int:
    """`best_fit_scan`'s feasibility, H and ties for one framework of valid shape, with the
    same float steps (`AllocationState.fits_framework`, `bestfit.shape_distance` on the
    agents' kept halves `shape`/`empty`, `ties.pick_lowest`): the tied agents in
    `tied[:k]`, ascending; returns k, -1 when nothing is feasible, -2 when the least H is
    not finite (the caller decides then). Not `every`: only at `agents` (ascending, every
    agent where the framework may fit among them). `only` >= 0: `distance` holds this
    framework's H from a call that returned k >= 1, and agent `only` alone changed since:
    only its H is computed again, and over at least `tree_kept[TREE_FROM]` agents the least H
    and its ties come from a min tree (`min_tree`, in `tree`) of the kept H."""
    n_a, n_r = residual.shape
    floor = np.full(n_r, -np.inf)
    for r in range(n_r):
        if demand[r] > 0:
            floor[r] = demand[r] - tol[r]
    n_scan = n_a if every else agents.shape[0]
    if only >= 0 and n_scan >= tree_kept[TREE_FROM]:
        return _rescan_one(eligible, floor, residual, shape, empty, resources, terms, distance,
                           tied, agents, every, only, n_scan, tree, tree_kept)  # fmt: skip
    tree_kept[TREE_OF] = 0  # `distance` is written here: the tree no longer holds it
    low = np.inf
    feasible = 0
    undefined = False  # a NaN H among the feasible
    for at in range(n_scan):
        i = at if every else agents[at]
        if only >= 0 and i != only:
            kept = distance[i]
            if not np.isnan(kept):  # NaN: infeasible (that call found no undefined H)
                feasible += 1
                if kept < low:
                    low = kept
            continue
        ok, h = _distance_at(i, eligible, floor, residual, shape, empty, resources, terms)
        if not ok:
            distance[i] = np.nan
            continue
        feasible += 1
        distance[i] = h
        if np.isnan(h):
            undefined = True
        elif h < low:
            low = h
    if feasible == 0:
        return -1
    if undefined or not np.isfinite(low):
        return -2
    limit = low + RELATIVE_TIE * max(1.0, abs(low))
    k = 0
    for at in range(n_scan):
        i = at if every else agents[at]
        if distance[i] <= limit:  # NaN (infeasible) compares False
            tied[k] = i
            k += 1
    return k


class _Shapes:
    """`bestfit.demand_shape` of each framework's known demand, as kernel arguments, made
    once per fill and again only when a demand becomes known (oblivious mode)."""

    def __init__(self, state: AllocationState) -> None:
        self.state = state
        self.version = state.demand_version
        self.shapes: dict[int, tuple[int, np.ndarray, np.ndarray] | None] = {}

    def of(self, framework: int) -> tuple[int, np.ndarray, np.ndarray] | None:
        """(ref, resources, terms), or None when H is not a shape match (demand unknown, or
        no task of it fits anywhere)."""
        state = self.state
        if state.demand_version != self.version:
            self.version = state.demand_version
            self.shapes.clear()
        if framework not in self.shapes:
            demand = state.known_demand[framework]
            shape = None
            if not np.isnan(demand).any():
                found = demand_shape(demand, state.cluster.total)
                if found.valid:
                    resources = np.array(found.resources, dtype=np.int64)
                    shape = (found.ref, resources, np.array(found.terms, dtype=float))
            self.shapes[framework] = shape
        return self.shapes[framework]


class CompiledScan:
    """`best_fit_scan` compiled: the same agent and the same draws, in one pass over the
    agents instead of a dozen numpy passes; a shape it does not cover goes to the scan."""

    def __init__(self, state: AllocationState, rng: np.random.Generator) -> None:
        self.state = state
        self.rng = rng
        self.shapes = _Shapes(state)
        n_a, n_r = state.residual.shape
        self.distance = np.empty(n_a)
        self.tied = np.empty(n_a, dtype=np.int64)
        #: A min tree over `distance` for the lookups after a grant (`_rescan_one`), and
        #: what it holds (`TREE_FROM`, `TREE_OF`, `TREE_FEASIBLE`).
        self.tree = np.empty(2 * min_tree.leaves(n_a))
        self.tree_kept = np.array([TREE_MIN, 0, 0], dtype=np.int64)
        #: The agents' halves of H for each reference resource that has them (`built`), as
        #: of write `seen`: shape[ref] (A, R) and empty[ref] (A,). Not zeroed: a lookup reads
        #: only what `_agent_shapes` wrote (shape[ref][:, r] for r != ref with C_r > 0).
        self.shape = np.empty((n_r, n_a, n_r))
        self.empty = np.empty((n_r, n_a), dtype=bool)
        self.built = np.zeros(n_r, dtype=bool)
        self.seen = state.changes
        self.last = -1  # the agent returned last: usually the only one changed since
        #: (fresh, near): a framework not `fresh` can fit only at the agents `near`
        #: (ascending), so its scans cover those alone (`Engine._scope`); None: all agents.
        self.scope: tuple[np.ndarray, np.ndarray] | None = None
        self._none = np.zeros(0, dtype=np.int64)
        #: (framework, ref, demand version) of the last lookup, when its kernel call left
        #: that framework's H in `distance`: the next lookup for it, after one grant on the
        #: agent it returned, computes that agent's H alone.
        self._kept: tuple[int, int, int] | None = None

    def _last_alone_changed(self) -> bool:
        """Whether one write since the last lookup changed the agent it returned, and
        nothing else."""
        now = self.state.changes
        return now == self.seen + 1 and self.last >= 0 and self.state.changed_at[self.last] == now

    def catch_up(self) -> None:
        """Bring the halves up to the state's current write."""
        state = self.state
        now = state.changes
        if now != self.seen and self.built.any():
            if self._last_alone_changed():
                changed = np.array([self.last])
            else:
                changed = np.flatnonzero(state.changed_at > self.seen)
            for at in np.flatnonzero(self.built).tolist():
                _agent_shapes(state.residual, state.cluster.total, at, changed, self.shape[at],
                              self.empty[at])  # fmt: skip
        self.seen = now

    def _halves(self, ref: int) -> tuple[np.ndarray, np.ndarray]:
        state = self.state
        self.catch_up()
        if not self.built[ref]:
            every = np.arange(state.residual.shape[0])
            _agent_shapes(state.residual, state.cluster.total, ref, every, self.shape[ref],
                          self.empty[ref])  # fmt: skip
            self.built[ref] = True
        return self.shape[ref], self.empty[ref]

    def written_through(self) -> None:
        """The halves are up to date at the state's current write, and no framework's H is
        kept (after grants made by the compiled fill, `allocator.engine_bulk`)."""
        self.seen = self.state.changes
        self.last = -1
        self._kept = None

    def best(self, framework: int) -> int:
        state = self.state
        found = self.shapes.of(framework)
        if found is None:
            self._kept = None
            agent = best_fit_scan(state, framework, self.rng)
        else:
            ref, resources, terms = found
            kept = (framework, ref, state.demand_version)
            only = self.last if self._kept == kept and self._last_alone_changed() else -1
            shape, empty = self._halves(ref)
            near, every = self._none, True
            if self.scope is not None and not self.scope[0][framework]:
                near, every = self.scope[1], False
            k = _scan_kernel(
                state.cluster.eligible[framework],
                state.fit_demand[framework],
                state.tol,
                state.residual,
                shape,
                empty,
                resources,
                terms,
                self.distance,
                self.tied,
                near,
                every,
                only,
                self.tree,
                self.tree_kept,
            )
            self._kept = kept if k >= 1 else None
            if k == -2:
                agent = best_fit_scan(state, framework, self.rng)
            elif k <= 1:
                agent = -1 if k < 0 else int(self.tied[0])
            else:
                agent = int(self.tied[self.rng.integers(k)])
        self.last = agent
        return agent


def best_fit_scan(state: AllocationState, framework: int, rng: np.random.Generator) -> int:
    """Best-fit agent by scanning all agents (least H among the feasible, random ties), or -1."""
    feasible = state.fits_framework(framework)
    if not feasible.any():
        return -1
    demand = state.known_demand[framework]
    if np.isnan(demand).any():  # oblivious, nothing observed yet: no shape to match
        distance = np.zeros(len(feasible))
    else:
        distance = fit_distance(demand, state.residual, state.cluster.total)
    return pick_lowest(distance, feasible, rng)


class BestFit:
    """Best-fit lookups for one fill: scans at first, then an index once it pays for itself."""

    def __init__(self, state: AllocationState, rng: np.random.Generator) -> None:
        self.state = state
        self.rng = rng
        self.index: BestFitIndex | None = None
        cluster = state.cluster
        affordable = 0 < 8 * cluster.n_frameworks * cluster.n_agents <= MAX_BYTES
        budget = max(int(SCANS_PER_FRAMEWORK * cluster.n_frameworks), MIN_SCANS)
        #: Scans left before building the index (None: never build it).
        self.scans_left: int | None = budget if affordable else None
        #: Compiled scans on every lookup (as fast as the index's, without building it).
        self.compiled = CompiledScan(state, rng) if COMPILED else None

    def best(self, framework: int) -> int:
        """The best-fit feasible agent for `framework` (random among ties), or -1."""
        if self.index is not None:
            return self.index.best(framework)
        if self.compiled is not None:
            return self.compiled.best(framework)
        if self.scans_left is not None:
            if self.scans_left <= 0:
                self.index = BestFitIndex(self.state, self.rng)
                return self.index.best(framework)
            self.scans_left -= 1
        return best_fit_scan(self.state, framework, self.rng)


class _Group:
    """Frameworks whose H has the same form: reference resource and resources compared."""

    def __init__(self, ref: int, resources: tuple[int, ...]) -> None:
        self.ref = ref
        self.resources = resources
        self.rows: list[int] = []
        self.terms: list[tuple[float, ...]] = []

    def freeze(self) -> None:
        self.index = np.array(self.rows, dtype=np.int64)
        # One column per compared resource; terms[j] is the (G,) vector for resources[j].
        table = np.array(self.terms, dtype=float).reshape(len(self.rows), len(self.resources))
        self.columns = [np.ascontiguousarray(table[:, j]) for j in range(len(self.resources))]


class BestFitIndex:
    """H of every framework on every agent, +inf where it does not fit; see the module doc."""

    def __init__(self, state: AllocationState, rng: np.random.Generator) -> None:
        self.state = state
        self.rng = rng
        cluster = state.cluster
        n_f, n_a = cluster.n_frameworks, cluster.n_agents
        self._total = cluster.total
        self._total_list = cluster.total.tolist()
        # Ineligible frameworks by agent (contiguous per agent), unless every pair is eligible.
        everywhere = cluster.eligible.all()
        self._ineligible = None if everywhere else np.ascontiguousarray(~cluster.eligible.T)
        # Feasibility exactly as AllocationState.fits_framework: residual_r >= d_r - tol_r for
        # each resource the task uses (d = inf for frameworks without demand: never fits).
        floor = fit_floor_of(state.fit_demand, state.tol)
        self._floor = [
            (r, np.ascontiguousarray(floor[:, r]))
            for r in range(floor.shape[1])
            if not np.isneginf(floor[:, r]).all()  # some task uses resource r
        ]
        self._distance = np.empty((n_f, n_a), dtype=float)
        self._demand_version = state.demand_version
        self._shapes: list[DemandShape | None] = [None] * n_f
        self._regroup(np.arange(n_f))
        self._seen = state.changes
        self._last = -1  # the agent returned last: usually the only one changed since
        for start in range(0, n_a, _BLOCK):
            self._update(slice(start, start + _BLOCK))

    # ---- keeping H current ---------------------------------------------------------------
    def _regroup(self, rows: np.ndarray) -> None:
        """Sort frameworks by the form of their H, recomputing the shapes of `rows`."""
        demand = self.state.known_demand
        known = ~np.isnan(demand).any(axis=1)
        for n in rows:
            # Unknown (oblivious, nothing observed yet): H = 0 everywhere.
            self._shapes[n] = demand_shape(demand[n], self._total) if known[n] else None
        groups: dict[tuple[int, tuple[int, ...]], _Group] = {}
        unknown, invalid = [], []
        for n, shape in enumerate(self._shapes):
            if shape is None:
                unknown.append(n)
            elif not shape.valid:  # fits no agent
                invalid.append(n)
            else:
                group = groups.setdefault((shape.ref, shape.resources), _Group(*shape[:2]))
                group.rows.append(n)
                group.terms.append(shape.terms)
        for group in groups.values():
            group.freeze()
        self._groups = list(groups.values())
        whole = len(self._groups) == 1 and len(self._groups[0].rows) == len(known)
        self._single = self._groups[0] if whole else None
        self._unknown = np.array(unknown, dtype=np.int64)
        self._invalid = np.array(invalid, dtype=np.int64)
        self._known = known
        self._demand = demand.copy()

    def _update(self, agents: np.ndarray | slice) -> None:
        """Recompute the columns of `agents` (the float steps of `bestfit.shape_distance`)."""
        total = self._total
        residual = self.state.residual[agents]  # (m, R)
        m = len(residual)
        block = None if self._single is not None else np.empty((len(self._known), m))
        if block is not None:
            block[self._unknown] = 0.0
            block[self._invalid] = np.inf
        for group in self._groups:
            res_ref = residual[:, group.ref] / total[group.ref]
            empty = res_ref <= 0
            scale = 1.0 / np.where(empty, 1.0, res_ref)
            distance: np.ndarray | None = None
            for r, terms in zip(group.resources, group.columns, strict=True):
                shape = residual[:, r] * (scale / total[r])
                gap = np.abs(terms[:, None] - shape[None, :])
                if distance is None:
                    distance = gap
                else:
                    distance += gap
            if distance is None:  # a single resource: every shape matches
                distance = np.zeros((len(group.index), m))
            distance[:, empty] = np.inf
            if block is None:
                block = distance
            else:
                block[group.index] = distance
        assert block is not None
        misfit = None if self._ineligible is None else self._ineligible[agents].T
        for r, floor in self._floor:
            out = floor[:, None] > residual[None, :, r]
            misfit = out if misfit is None else misfit | out
        if misfit is not None:
            np.putmask(block, misfit, np.inf)
        self._distance[:, agents] = block

    def _update_one(self, agent: int) -> None:
        """`_update` for a single agent, on scalars and (F,) vectors (the grant-by-grant path)."""
        total = self._total_list
        residual = self.state.residual[agent].tolist()
        if self._single is not None:  # one group holding every framework, in order
            column = self._group_column(self._single, residual, total)
        else:
            column = np.empty(len(self._known))
            column[self._unknown] = 0.0
            column[self._invalid] = np.inf
            for group in self._groups:
                column[group.index] = self._group_column(group, residual, total)
        # Does not fit: floor_r > residual_r (the negation of fits_framework's test).
        misfit = self._ineligible[agent].copy() if self._ineligible is not None else None
        for r, floor in self._floor:
            if misfit is None:
                misfit = floor > residual[r]
            else:
                misfit |= floor > residual[r]
        if misfit is not None:
            np.putmask(column, misfit, np.inf)
        self._distance[:, agent] = column

    @staticmethod
    def _group_column(group: _Group, residual: list[float], total: list[float]) -> np.ndarray:
        """(G,) H of a group's frameworks on one agent; Python floats round as numpy does."""
        res_ref = residual[group.ref] / total[group.ref]
        if res_ref <= 0:
            return np.full(len(group.index), np.inf)
        scale = 1.0 / res_ref
        distance: np.ndarray | None = None
        for r, terms in zip(group.resources, group.columns, strict=True):
            gap = np.abs(terms - residual[r] * (scale / total[r]))
            if distance is None:
                distance = gap
            else:
                distance += gap
        return np.zeros(len(group.index)) if distance is None else distance

    def _sync(self) -> None:
        state = self.state
        if state.demand_version != self._demand_version:  # oblivious: a demand became known
            self._demand_version = state.demand_version
            now_known, before = state.known_demand, self._demand
            same = (now_known == before) | (np.isnan(now_known) & np.isnan(before))
            rows = np.flatnonzero(~same.all(axis=1))
            if rows.size:
                self._regroup(rows)
                for n in rows:
                    self._refresh_row(n)
        now = state.changes
        if now == self._seen:
            return
        if now == self._seen + 1 and self._last >= 0 and state.changed_at[self._last] == now:
            self._seen = now
            self._update_one(self._last)
            return
        changed = np.flatnonzero(state.changed_at > self._seen)
        self._seen = now
        for start in range(0, len(changed), _BLOCK):
            self._update(changed[start : start + _BLOCK])

    def _refresh_row(self, n: int) -> None:
        state = self.state
        demand = state.known_demand[n]
        if np.isnan(demand).any():
            row = np.zeros(state.cluster.n_agents)
        else:
            row = fit_distance(demand, state.residual, self._total)
        row[~state.fits_framework(n)] = np.inf
        self._distance[n] = row

    # ---- lookups -----------------------------------------------------------------------
    def best(self, framework: int) -> int:
        """The best-fit feasible agent for `framework` (random among ties), or -1."""
        self._sync()
        row = self._distance[framework]
        low = row[row.argmin()]  # NaN counts as the least: the scan below handles it
        if low < np.inf:
            tied = (row <= low + RELATIVE_TIE * max(1.0, abs(low))).nonzero()[0]
            # As ties.pick_lowest draws: one integer when more than one agent is tied.
            agent = int(tied[0]) if tied.size == 1 else int(tied[self.rng.integers(tied.size)])
        else:  # nothing fits, or no finite H where something fits: do what a scan does
            agent = best_fit_scan(self.state, framework, self.rng)
        self._last = agent
        return agent
