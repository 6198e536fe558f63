"""BF-DRF's allocation run compiled grant after grant (issue 28).

`ColumnsFirst` picks a framework (`_pick_loop`), asks `CompiledScan` for its best-fit agent,
grants one task and keeps the DRF shares (`KeptShares`): each grant of a characterized run is
a few compiled calls with Python between them, which costs more than the calls do when a
run grants many tasks. `fill` makes those same steps in one compiled loop:

- the pick is `_pick_loop`'s, with the same draws, its candidates kept from pick to pick
  (`pick_ties`: a grant changes the served framework's value and its role's);
- the lookup is `_scan_kernel` on the same halves of H (`CompiledScan.shape`), with the
  framework's demand shape computed with `bestfit.demand_shape`'s float steps, and the same
  `only` shortcut after a grant to the framework just served;
- the grant writes the state as `AllocationState.grant` does, the halves at the granted
  agent as `_agent_shapes` does, and the served framework's and its role's shares as
  `KeptShares.sync` does (`_drf_share`, and `_summed` for a role's allocation).

Where the kernels do not decide (a share that is not finite before any draw; a demand not
known, of no valid shape, or a least H that is not finite after the pick's draws) the loop
hands that one step back to the Python selector and goes on after it.
"""

from __future__ import annotations

import numpy as np

from allocator import pick_ties
from allocator.draws import below
from allocator.engine_columns import ColumnsFirst, _drf_share, _summed
from allocator.jit import njit
from allocator.policy.bestfit_index import _agent_shapes, _scan_kernel, best_fit_scan
from allocator.state import Grant

#: What `_fill` returns: nothing fits; the grant limit or the log is full; a share is not
#: finite (the Python pass picks next); the framework picked needs the Python lookup.
DONE, FULL, STEPWISE, LOOKUP = 0, 1, 2, 3
#: Grants logged per call.
LOG = 4096


@njit
def _demand_shape(demand: np.ndarray, total: np.ndarray, resources: np.ndarray,
                  terms: np.ndarray) -> int:  # fmt: skip
    """`bestfit.demand_shape` of a known demand: returns its reference resource (-1 when
    the shape is not valid), its other resources in `resources` up to the first -1 and
    their terms in `terms`."""
    n_r = total.shape[0]
    ref = 0  # `bestfit.reference_resource`: cpus, unless d needs none
    if not demand[0] > 0:
        best = 0.0
        for r in range(n_r):
            share = demand[r] / total[r] if total[r] > 0 else 0.0
            if r == 0 or share > best:
                best, ref = share, r
    if not (total[ref] > 0 and demand[ref] > 0):
        return -1
    d_ref = demand[ref] / total[ref]
    m = 0
    for r in range(n_r):
        if r != ref and total[r] > 0:
            resources[m] = r
            terms[m] = demand[r] / total[r] / d_ref
            m += 1
    resources[m:] = -1
    return ref


@njit
def _fill(members: np.ndarray, active: np.ndarray, wanting: np.ndarray, runnable: np.ndarray,
          count: np.ndarray, limit: np.ndarray, role_of: np.ndarray, n_roles: int,
          values: np.ndarray, role_values: np.ndarray, role_alloc: np.ndarray, weight: np.ndarray,
          role_weight: np.ndarray, eligible: np.ndarray, floor: np.ndarray,
          fit_demand: np.ndarray, known: np.ndarray, tol: np.ndarray, total: np.ndarray,
          residual: np.ndarray, alloc: np.ndarray, changed_at: np.ndarray,
          witness: np.ndarray, fresh: np.ndarray, near: np.ndarray, shape: np.ndarray,
          empty: np.ndarray, built: np.ndarray, distance: np.ndarray, tied_agents: np.ndarray,
          tree: np.ndarray, tree_kept: np.ndarray, ints: np.ndarray, out_f: np.ndarray,
          out_a: np.ndarray, rng: np.random.Generator) -> int:  # fmt: skip
    """Grant as `ColumnsFirst` would until `ints[1]` grants are logged or a step needs
    Python; `ints[0]` is the state's write counter, in and out; `ints[1]` grants made, out;
    `ints[2]` the framework picked (LOOKUP). Returns DONE, FULL, STEPWISE or LOOKUP."""
    n_r = total.shape[0]
    limit_grants = ints[1]
    changes = ints[0]
    made = 0
    resources = np.empty(n_r, dtype=np.int64)
    terms = np.empty(n_r)
    bound = np.empty(n_r)  # `pick_into`'s scratch
    kept = -1  # the framework whose H `distance` holds, one grant (at `last`) ago
    last = -1
    status = FULL
    all_agents = np.arange(residual.shape[0])
    # Each role's frameworks in slot order (what KeptShares sums a role's allocation over).
    n_f = role_of.shape[0]
    role_start = np.zeros(max(n_roles, 1) + 1, dtype=np.int64)
    role_members = np.empty(n_f if n_roles > 0 else 0, dtype=np.int64)
    if n_roles > 0:
        for n in range(n_f):
            role_start[role_of[n] + 1] += 1
        for g in range(n_roles):
            role_start[g + 1] += role_start[g]
        placed = role_start[:-1].copy()
        for n in range(n_f):
            role_members[placed[role_of[n]]] = n
            placed[role_of[n]] += 1
    finite, candidates = pick_ties.candidates(members, active, wanting, role_of, n_roles,
                                              values, role_values)  # fmt: skip
    while made < limit_grants:
        if not finite:
            status = STEPWISE
            break
        framework = pick_ties.pick_into(candidates, n_roles, active, eligible, floor,
                                        residual, witness, fresh, near, rng, bound)  # fmt: skip
        if framework < 0:
            status = DONE
            break
        d = known[framework]
        if np.isnan(d).any():
            ints[2] = framework
            status = LOOKUP
            break
        ref = _demand_shape(d, total, resources, terms)
        if ref < 0:
            ints[2] = framework
            status = LOOKUP
            break
        m = 0
        while m < n_r and resources[m] >= 0:
            m += 1
        if not built[ref]:
            _agent_shapes(residual, total, ref, all_agents, shape[ref], empty[ref])
            built[ref] = True
        every = fresh[framework]
        k = _scan_kernel(eligible[framework], fit_demand[framework], tol, residual,
                         shape[ref], empty[ref], resources[:m], terms[:m], distance,
                         tied_agents, near, every, last if kept == framework else -1, tree,
                         tree_kept)  # fmt: skip
        kept = framework if k >= 1 else -1
        if k == -2:
            ints[2] = framework
            status = LOOKUP
            break
        if k == -1:
            active[framework] = False  # fits nowhere: retired for this fill
            pick_ties.drop(candidates, candidates[1][framework])
            last = -1
            continue
        agent = tied_agents[0] if k == 1 else tied_agents[below(rng, k)]
        # AllocationState.grant, one task
        demand = fit_demand[framework]
        count[framework] += 1
        for r in range(n_r):
            alloc[framework, r] += demand[r]
            residual[agent, r] -= demand[r]
        changes += 1
        changed_at[agent] = changes
        wanting[framework] = runnable[framework] and count[framework] < limit[framework]
        one = all_agents[agent : agent + 1]
        for at in range(n_r):
            if built[at]:
                _agent_shapes(residual, total, at, one, shape[at], empty[at])
        values[framework] = _drf_share(alloc[framework], total, weight[framework])
        role_value = 0.0
        if n_roles > 0:
            g = role_of[framework]
            _summed(alloc, role_members[role_start[g] : role_start[g + 1]], role_alloc[g])
            role_values[g] = role_value = _drf_share(role_alloc[g], total, role_weight[g])
        finite = pick_ties.served(candidates, n_roles, framework, wanting[framework],
                                  values[framework], role_value)  # fmt: skip
        out_f[made] = framework
        out_a[made] = agent
        made += 1
        last = agent
    ints[0] = changes
    ints[1] = made
    return status


def applies(selector: ColumnsFirst) -> bool:
    """Whether `fill` makes the selector's grants: best fit by `CompiledScan` on kept DRF
    shares, as `ColumnsFirst._next_compiled` picks."""
    best_fit = selector.best_fit
    return (
        selector.shares is not None
        and selector._simple
        and best_fit is not None
        and best_fit.compiled is not None  # then best fit never builds its index
        and (selector.role_level or selector.fits is None)
    )


def fill(selector: ColumnsFirst, max_grants: int | None) -> list[Grant]:
    """Progressive filling with `selector` (see `applies`) until nothing fits or
    `max_grants`: the grants `progressive_fill`'s loop makes, in order, written into the
    state."""
    state = selector.state
    shares = selector.shares
    scan = selector.best_fit.compiled  # type: ignore[union-attr]
    assert shares is not None and scan is not None
    cluster = state.cluster
    selector.prepare_compiled()
    members = selector._members
    fresh, near = selector.scope  # type: ignore[misc]
    n_roles = len(cluster.role_names) if selector.role_level else 0
    if n_roles:
        role_values, role_alloc = shares.role_values, shares.role_alloc
        role_weight = cluster.role_weight
    else:
        role_values, role_alloc = shares.values, np.zeros((1, len(cluster.resources)))
        role_weight = np.ones(1)
    ints = np.zeros(3, dtype=np.int64)
    out_f = np.empty(LOG, dtype=np.int64)
    out_a = np.empty(LOG, dtype=np.int64)
    tasks = state.tasks
    grants: list[Grant] = []
    while max_grants is None or len(grants) < max_grants:
        shares.sync()
        scan.catch_up()
        left = LOG if max_grants is None else min(LOG, max_grants - len(grants))
        ints[0], ints[1] = state.changes, left
        status = _fill(
            members, selector.active, state.wanting(), state.runnable, state.count,
            state.limit, cluster.role_of, n_roles, shares.values,
            role_values, role_alloc, cluster.weight, role_weight, cluster.eligible,
            selector._floor, state.fit_demand, state.known_demand, state.tol, cluster.total,
            state.residual, state.alloc, state.changed_at, selector._witness, fresh, near,
            scan.shape, scan.empty, scan.built, scan.distance, scan.tied, scan.tree,
            scan.tree_kept, ints, out_f, out_a, selector.rng,
        )  # fmt: skip
        made = int(ints[1])
        state.changes = int(ints[0])
        for f, a in zip(out_f[:made].tolist(), out_a[:made].tolist(), strict=True):
            tasks[f, a] += 1
            grants.append(Grant(f, a, 1))
        shares.seen, shares.served = state.changes, -1
        scan.written_through()
        if status == DONE:
            break
        if status == FULL:
            continue
        if max_grants is not None and len(grants) >= max_grants:
            break
        if status == STEPWISE:
            pick = selector.next()
        else:  # LOOKUP: the framework is picked, its draws made
            framework = int(ints[2])
            agent = best_fit_scan(state, framework, selector.rng)
            scan.last = agent
            pick = None
            if agent >= 0:
                pick = framework, agent
                shares.serving(framework)
            else:
                selector.active[framework] = False  # fits nowhere: retired for this fill
        if pick is None:
            if status == STEPWISE:
                break
            continue
        grants.append(state.grant(pick[0], pick[1], 1))
    return grants
