"""Progressive filling at native speed for the static fills that dominate large instances.

`progressive_fill` hands a fill here when `applies` says the compiled kernels
(`allocator/fill_kernels.py`) make exactly its grants and the instance is large enough to
be worth loading them (`MIN_PAIRS`): a fresh state in characterized mode, framework level (or
a single role), random ties, and DRF, TSF, PS-DSF or rPS-DSF with randomized round-robin
(the static rounds, not the engine's agent pass), or BF-DRF (DRF with best fit,
`allocator/bestfit_kernels.py`).

The kernels keep each criterion up to date grant by grant instead of re-evaluating every
framework (DRF and TSF: one sorted order; PS-DSF: one per agent type, agents with the same
capacity sharing a type; rPS-DSF: a vectorized screen at each visit), and draw every
permutation and every tie from the fill's generator where the generic selectors draw, so
the generator ends in the same state too.
"""

from __future__ import annotations

import numpy as np

from allocator.model import Cluster, fit_floor_of
from allocator.policy.base import Criterion
from allocator.policy.drf import DRF
from allocator.policy.levels import Level
from allocator.policy.psdsf import PSDSF
from allocator.policy.rpsdsf import RPSDSF
from allocator.policy.selection import Selection
from allocator.policy.ties import RELATIVE_TIE, Ties
from allocator.policy.tsf import TSF
from allocator.state import AllocationState, Mode

#: Smallest instance (agents x frameworks) filled natively: below it the generic fill takes
#: well under a second, less than importing numba and loading the compiled kernels.
MIN_PAIRS = 100_000

#: PS-DSF keeps a key per agent type while there are at most this many distinct capacities;
#: beyond, it is computed at each visit.
MAX_TYPES = 64

_RRR_CRITERIA = (DRF, TSF, PSDSF, RPSDSF)


def applies(state: AllocationState, criterion: Criterion, selection: Selection | str,
            ties: Ties | str, level: Level | str, agent_pass: bool,
            single_offer: bool) -> bool:  # fmt: skip
    """Whether the native fill makes the grants `progressive_fill` would make here."""
    cluster = state.cluster
    if (
        cluster.n_agents * cluster.n_frameworks < MIN_PAIRS
        or state.mode is not Mode.CHARACTERIZED
        or Ties(ties) is not Ties.RANDOM
        or (Level(level) is Level.ROLE and len(cluster.role_names) > 1)
        or single_offer
        or state.changes != 0
        or state.withheld.any()
        or not (np.isfinite(cluster.weight).all() and (cluster.weight > 0).all())
        or RELATIVE_TIE != 1e-9  # the kernels' own copy
    ):
        return False
    chosen = Selection(selection)
    if chosen is Selection.BESTFIT:  # FrameworkFirst ignores agent_pass
        return type(criterion) is DRF
    return chosen is Selection.RRR and type(criterion) in _RRR_CRITERIA and not agent_pass


def fill(state: AllocationState, criterion: Criterion, selection: Selection | str,
         rng: np.random.Generator,
         max_grants: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:  # fmt: skip
    """Fill `state` (see `applies`); returns the grants' frameworks and agents, in order,
    and leaves the state as the generic fill leaves it. Returns None, with the state and
    the generator untouched, where the kernels cannot decide (best fit on a NaN shape):
    the generic fill is then to run."""
    from allocator import fill_kernels as k

    cluster = state.cluster
    n_f, n_a = cluster.n_frameworks, cluster.n_agents
    limit = np.iinfo(np.int64).max if max_grants is None else max_grants
    arrays = _Arrays(state, limit)
    if Selection(selection) is Selection.BESTFIT:
        started = rng.bit_generator.state
        if not _run_bestfit(arrays, state, rng):
            rng.bit_generator.state = started
            return None
    else:
        _run_rrr(k, arrays, state, criterion, rng)
    made = int(arrays.ints[k.MADE])
    frameworks = arrays.out_f[:made]
    agents = arrays.out_a[:made]
    _write_back(state, arrays, frameworks, agents, n_f, n_a)
    return frameworks, agents


def load_kernels(criterion: Criterion, selection: Selection | str) -> None:
    """Load the compiled kernels a native fill with `criterion` and `selection` runs (numba
    reads them from its disk cache, or compiles them after an install, at their first call:
    0.3-0.5 s, or a minute), by filling a small cluster with them: for a caller that times
    the fill itself (`fairbroker fill`'s fill_seconds)."""
    from allocator.workloads import google_like_cluster

    small = AllocationState(google_like_cluster(20, 5, seed=0))
    fill(small, criterion, selection, np.random.default_rng(0))


class _Arrays:
    """The kernels' working copies of the state (C order) and their output buffers."""

    def __init__(self, state: AllocationState, limit: int) -> None:
        from allocator import fill_kernels as k

        cluster = state.cluster
        self.residual = np.ascontiguousarray(state.residual, dtype=float)
        self.alloc = np.ascontiguousarray(state.alloc, dtype=float)
        self.count = state.count.astype(float)
        self.limit = state.limit.astype(float)
        self.wanting = state.wanting().copy()
        self.demand = np.ascontiguousarray(state.fit_demand, dtype=float)
        self.tol = np.ascontiguousarray(state.tol, dtype=float)
        self.eligible = np.ascontiguousarray(state.eligible_by_agent)
        self.weight = np.ascontiguousarray(cluster.weight, dtype=float)
        self.total = np.ascontiguousarray(cluster.total, dtype=float)
        self.ints = np.zeros(k.N_INTS, dtype=np.int64)
        self.ints[k.LIMIT] = limit
        self.out_f = np.empty(_expected_grants(state, limit), dtype=np.int64)
        self.out_a = np.empty_like(self.out_f)
        self.ties = np.empty(max(cluster.n_frameworks, cluster.n_agents), dtype=np.int64)
        self.values = np.empty(cluster.n_frameworks, dtype=float)


def _expected_grants(state: AllocationState, limit: int) -> int:
    """About how many grants a fill of `state` makes (the grant log's first size; it grows
    when that was too few): the tasks the whole cluster holds of each framework alone."""
    demand = state.fit_demand
    with np.errstate(divide="ignore", invalid="ignore"):
        alone = np.where(demand > 0, state.cluster.total / demand, np.inf).min(axis=1)
    alone = np.minimum(np.nan_to_num(alone, nan=0.0, posinf=1e6), state.limit)
    return int(min(alone.sum() + 1024, limit + 1, 1 << 32))


def _grow(arrays: _Arrays) -> None:
    """Double the grant log."""
    size = 2 * len(arrays.out_f)
    for name in ("out_f", "out_a"):
        old = getattr(arrays, name)
        new = np.empty(size, dtype=np.int64)
        new[: len(old)] = old
        setattr(arrays, name, new)


def _run_rrr(k, arrays: _Arrays, state: AllocationState, criterion: Criterion,
             rng: np.random.Generator) -> None:  # fmt: skip
    cluster = state.cluster
    n_f, n_a = cluster.n_frameworks, cluster.n_agents
    n_r = len(cluster.resources)
    scale = np.zeros(n_f)
    type_of = np.zeros(n_a, dtype=np.int64)
    type_cap = np.zeros((1, n_r))
    orders = 1
    kind = type(criterion)
    if kind is DRF:
        crit = k.DRF
    elif kind is TSF:
        crit = k.TSF
        scale = np.ascontiguousarray(criterion.scale(state), dtype=float)
    elif kind is RPSDSF:
        crit = k.RPSDSF
    else:
        caps, inverse = np.unique(cluster.capacity, axis=0, return_inverse=True)
        if len(caps) <= MAX_TYPES:
            crit = k.PSDSF
            type_cap = np.ascontiguousarray(caps, dtype=float)
            type_of = np.ascontiguousarray(inverse.reshape(-1), dtype=np.int64)
            orders = len(caps)
        else:  # an order per agent type would cost more than it saves
            crit = k.PSDSF_SCAN
            type_cap = np.ascontiguousarray(cluster.capacity, dtype=float)
            type_of = np.arange(n_a, dtype=np.int64)
    key = np.zeros((orders, n_f))
    srt = np.zeros((orders, n_f), dtype=np.int64)
    if crit in (k.DRF, k.TSF, k.PSDSF):
        for n in range(n_f):
            k.update_keys(crit, n, arrays.alloc, arrays.count, arrays.weight, arrays.total,
                          type_cap, scale, key)  # fmt: skip
        arrays.ints[k.M] = k.build_orders(key, arrays.wanting, srt)
    alive = np.arange(n_a, dtype=np.int64)
    arrays.ints[k.ALIVE_LEN] = n_a
    order = np.zeros(n_a, dtype=np.int64)
    full = np.zeros(n_a, dtype=bool)
    witness = np.zeros(n_f, dtype=np.int64)
    while True:
        status = k.rrr(crit, rng, arrays.ints, arrays.residual, arrays.alloc, arrays.count,
                       arrays.limit, arrays.wanting, arrays.demand, arrays.tol, arrays.eligible,
                       arrays.weight, arrays.total, type_of, type_cap, scale, key, srt,
                       order, alive, full, witness, arrays.out_f,
                       arrays.out_a, arrays.ties, arrays.values)  # fmt: skip
        if status != k.GROW:
            break
        _grow(arrays)


def _run_bestfit(arrays: _Arrays, state: AllocationState, rng: np.random.Generator) -> bool:
    """BF-DRF's fill (`bestfit_kernels.bestfit`); False where an agent's shape is NaN."""
    from allocator import bestfit_kernels as b
    from allocator import fill_kernels as k

    cluster = state.cluster
    n_f, n_a = cluster.n_frameworks, cluster.n_agents
    total = arrays.total
    n_r = len(total)
    key = np.zeros((1, n_f))
    srt = np.zeros((1, n_f), dtype=np.int64)
    no_type = np.zeros((1, n_r))
    for n in range(n_f):
        k.update_keys(k.DRF, n, arrays.alloc, arrays.count, arrays.weight, total, no_type,
                      np.zeros(0), key)  # fmt: skip
    arrays.ints[k.M] = k.build_orders(key, arrays.wanting, srt)
    # feasibility as AllocationState.fits_framework: residual_r >= d_r - tol_r where d_r > 0
    floor = np.ascontiguousarray(fit_floor_of(state.fit_demand, state.tol))
    eligible = np.ascontiguousarray(cluster.eligible)
    group, refs, terms, compared, n_compared = _shapes(state.known_demand, total)
    pristine, residual = _pristine(cluster, arrays.residual)
    n_e = len(residual)  # entries of the agent orders: the agents, then the classes
    n_g = len(refs)
    shape = np.zeros((n_g, n_r, n_e))
    empty = np.zeros((n_g, n_e), dtype=bool)
    sort_key = np.zeros((n_g, n_e))
    first = np.where(n_compared > 0, compared[:n_g, 0], -1).astype(np.int64)
    for entry in range(n_e):
        if not b.agent_shapes(entry, residual, total, refs, first, shape, empty, sort_key):
            return False
    chunks = 2 * (-(-n_e // (b.CHUNK // 2))) + 2
    orders = (
        np.zeros((n_g, chunks, b.CHUNK), dtype=np.int64),  # members
        np.zeros((n_g, chunks, b.CHUNK)),  # keys
        np.zeros((n_g, chunks), dtype=np.int64),  # size
        np.zeros((n_g, chunks, n_r)),  # room
        np.zeros((n_g, n_e), dtype=np.int64),  # chunk_of
        np.zeros((n_g, chunks), dtype=np.int64),  # directory
        np.zeros(n_g, dtype=np.int64),  # n_chunks
        np.zeros((n_g, chunks), dtype=np.int64),  # spare
        np.zeros(n_g, dtype=np.int64),  # n_spare
    )
    class_of = pristine[6]
    listed = np.flatnonzero(np.concatenate([class_of < 0, np.ones(n_e - n_a, dtype=bool)]))
    for g in range(n_g):
        order = listed[np.lexsort((listed, sort_key[g, listed]))]
        b.build_order(g, order, sort_key, residual, *orders)
    found = np.empty(n_a, dtype=np.int64)
    found_h = np.empty(n_a)
    while True:
        status = b.bestfit(rng, arrays.ints, residual, arrays.alloc, arrays.count,
                           arrays.limit, arrays.wanting, arrays.demand, floor, eligible,
                           arrays.weight, total, key, srt, group, refs, terms, compared,
                           n_compared, shape, empty, sort_key, orders, pristine, found,
                           found_h, arrays.ties, arrays.out_f, arrays.out_a)  # fmt: skip
        if status == b.UNORDERED:
            return False
        if status != k.GROW:
            arrays.residual = residual[:n_a]
            return True
        _grow(arrays)


def _pristine(cluster: Cluster, residual: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The classes of agents of one capacity (at least two; none under constraints, where
    such agents are not interchangeable), as `bestfit_kernels` keeps them, and the residuals
    with a row per class after the agents'."""
    n_a = cluster.n_agents
    class_of = np.full(n_a, -1, dtype=np.int64)
    class_pos = np.zeros(n_a, dtype=np.int64)
    if cluster.eligible.all():
        caps, kind, sizes = np.unique(residual, axis=0, return_inverse=True, return_counts=True)
        kind = kind.reshape(-1)
        shared = sizes >= 2
        caps, sizes = caps[shared], sizes[shared]
        renumber = np.cumsum(shared) - 1
        class_of = np.where(shared[kind], renumber[kind], -1)
    else:
        caps, sizes = np.zeros((0, residual.shape[1])), np.zeros(0, dtype=np.int64)
    members = np.flatnonzero(class_of >= 0)
    members = members[np.argsort(class_of[members], kind="stable")]  # by class, then index
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    class_pos[members] = np.arange(len(members)) - start[class_of[members]]
    positions = class_pos[members] + 1
    fenwick = (positions & -positions).astype(np.int64)  # every member untouched
    pristine = (start, sizes.astype(np.int64), members.astype(np.int64), class_pos, fenwick,
                sizes.astype(np.int64).copy(), class_of.astype(np.int64))  # fmt: skip
    rows = np.ascontiguousarray(np.concatenate([residual, caps]), dtype=float)
    return pristine, rows


def _shapes(demand: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, ...]:
    """The framework half of H (`bestfit.demand_shape`) for every framework at once:
    each framework's group (index into `refs`, its reference resource; -1 when no valid
    shape), the terms d_r / C_r / (d_ref / C_ref) by resource, and each group's compared
    resources (every resource the cluster has but the reference, in order)."""
    n_f, n_r = demand.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total > 0, demand / total, 0.0)
        ref = np.where(demand[:, 0] > 0, 0, np.argmax(share, axis=1))
    rows = np.arange(n_f)
    valid = (total[ref] > 0) & (demand[rows, ref] > 0)
    refs = np.unique(ref[valid]).astype(np.int64)
    group = np.full(n_f, -1, dtype=np.int64)
    group[valid] = np.searchsorted(refs, ref[valid])
    terms = np.zeros((n_f, n_r))
    with np.errstate(divide="ignore", invalid="ignore"):
        d_ref = demand[rows, ref] / total[ref]
        for r in range(n_r):
            if total[r] > 0:
                terms[:, r] = np.where(valid, demand[:, r] / total[r] / d_ref, 0.0)
    compared = np.zeros((max(len(refs), 1), n_r), dtype=np.int64)
    n_compared = np.zeros(max(len(refs), 1), dtype=np.int64)
    for g, r_ref in enumerate(refs):
        resources = [r for r in range(n_r) if r != r_ref and total[r] > 0]
        compared[g, : len(resources)] = resources
        n_compared[g] = len(resources)
    return group, refs, terms, compared, n_compared[: len(refs)]


def _write_back(state: AllocationState, arrays: _Arrays, frameworks: np.ndarray,
                agents: np.ndarray, n_f: int, n_a: int) -> None:  # fmt: skip
    """Leave `state` as the generic fill's grants (one write each) would have."""
    grants = len(frameworks)
    if grants:
        np.add.at(state.tasks, (frameworks, agents), 1)
        last = np.full(n_a, -1, dtype=np.int64)
        np.maximum.at(last, agents, np.arange(grants, dtype=np.int64))
        touched = last >= 0
        state.changed_at[touched] = state.changes + 1 + last[touched]
        state.changes += grants
    state.count[:] = arrays.count
    state.alloc[:] = arrays.alloc
    state.residual[:] = arrays.residual
    for n in np.unique(frameworks):
        state.refresh_wanting(int(n))
