"""A characterized BF-DRF run at role level straight from the engine's arrays (issue 28).

In a backlog a run grants a task or two, and the Python that builds its state
(`Columns`, `AllocationState`, `ColumnsFirst` with its kept shares and best-fit scan) cost
about twice the compiled fill (`engine_bulk._fill`) it feeds: some hundred numpy calls and
objects per run. `fill` makes the arrays the fill reads and writes in one compiled call
(`_run`), with the same float steps, and runs the same kernel on them, so the grants and
the draws are the ones `engine_bulk.fill` makes. Of the kept shares it computes those the
fill reads: the candidates' and their roles' (a role's allocation is summed again at each
grant to it).

The kernel draws on a copy of the generator's state (`pcg64`: numba's unboxing of a
Generator argument alone cost 32 us a call), written back after the run. Where the kernel
hands a step back to the Python selector (a share or a shape it does not decide:
`STEPWISE`, `LOOKUP`; not met with declared demands on a cluster whose resources all have
capacity), `fill` returns None and the generator is untouched: the engine then makes the
whole run the usual way, which reads nothing `fill` wrote.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from allocator import engine_bulk, pcg64
from allocator.engine_bulk import DONE, FULL, _fill
from allocator.engine_columns import _drf_share
from allocator.jit import njit
from allocator.policy import min_tree
from allocator.policy.bestfit_index import TREE_MIN
from allocator.state import Grant

#: Off: every run builds its state the usual way (the tests compare both).
ENABLED = True


class DirectRun(NamedTuple):
    """What a run reads, as the engine keeps it (nothing here is written): framework slots
    (F) and agent slots, and the run's agent slots `columns`."""

    count: np.ndarray  # (F,) x_n
    used: np.ndarray  # (agent slots, R)
    capacity: np.ndarray  # (agent slots, R)
    columns: np.ndarray
    active: np.ndarray  # (F,) registered
    limit: np.ndarray  # (F,) the target of an active framework, 0 elsewhere
    held_demand: np.ndarray  # (F, R) `held_demand_of`
    fit_demand: np.ndarray  # (F, R) `fit_demand_of`
    floor: np.ndarray  # (F, R) `fit_floor_of`
    known: np.ndarray  # (F, R) the demand the policy may know
    weight: np.ndarray  # (F,)
    role_of: np.ndarray  # (F,)
    role_weight: np.ndarray  # (roles,)
    total: np.ndarray  # (R,) the whole cluster's
    tol: np.ndarray  # (R,)
    scope: tuple[np.ndarray, np.ndarray] | None  # `Engine._scope`


def fill(run: DirectRun, rng: np.random.Generator, max_grants: int | None) -> list[Grant] | None:
    """The grants of `engine_bulk.fill` on the state the engine would build for `run` (agents
    as positions in `columns`), or None, the generator untouched, where it would need the
    Python selector. The kernel draws on the generator's state (`pcg64`), written back
    after a run it decided."""
    state = pcg64.state_of(rng)
    fresh, near = run.scope or (np.ones(run.count.shape[0], dtype=bool), np.zeros(0, np.int64))
    done, frameworks, agents = _run(
        run.count, run.used, run.capacity, run.columns, run.active, run.limit, run.held_demand,
        run.fit_demand, run.floor, run.known, run.weight, run.role_of, run.role_weight,
        run.total, run.tol, fresh, near, -1 if max_grants is None else max_grants,
        engine_bulk.LOG, state,
    )  # fmt: skip
    if not done:  # STEPWISE or LOOKUP: the usual run decides
        return None
    pcg64.restore(rng, state)
    return [Grant(f, a, 1) for f, a in zip(frameworks.tolist(), agents.tolist(), strict=True)]


@njit
def _run(count_in: np.ndarray, used: np.ndarray, capacity: np.ndarray, columns: np.ndarray,
         runnable: np.ndarray, limit: np.ndarray, held_demand: np.ndarray,
         fit_demand: np.ndarray, floor: np.ndarray, known: np.ndarray, weight: np.ndarray,
         role_of: np.ndarray, role_weight: np.ndarray, total: np.ndarray, tol: np.ndarray,
         fresh: np.ndarray, near: np.ndarray, max_grants: int, log: int,
         rng: np.ndarray):  # type: ignore[no-untyped-def]  # fmt: skip
    """`fill`'s run: (whether it decided every step, the grants' framework slots, their
    agents' positions in `columns`). `max_grants` -1: no limit; `log`: grants at most per
    `_fill` call; `rng`: a `pcg64.state_of` state."""
    n_f = count_in.shape[0]
    n_r = total.shape[0]
    n_a = columns.shape[0]
    n_roles = role_weight.shape[0]
    # AllocationState.load, with its float steps
    count = count_in.astype(np.float64)
    alloc = np.empty((n_r, n_f)).T  # column-major, as the state's
    for r in range(n_r):
        for n in range(n_f):
            alloc[n, r] = count[n] * held_demand[n, r]
    residual = np.empty((n_r, n_a)).T
    for r in range(n_r):
        for c in range(n_a):
            residual[c, r] = capacity[columns[c], r] - used[columns[c], r]
    wanting = np.empty(n_f, dtype=np.bool_)
    for n in range(n_f):
        wanting[n] = runnable[n] and count[n] < limit[n]
    active = runnable.copy()  # the selector's: retired for this fill
    eligible = np.broadcast_to(runnable.reshape(n_f, 1), (n_f, n_a))  # (read-only)
    # The candidates, grouped by role in slot order (`ColumnsFirst.prepare_compiled`'s
    # stable sort, by counting), and the kept shares the fill reads (`KeptShares`): those of
    # the candidates and of their roles (summed over the role's frameworks in slot order,
    # from zero, as `_drf_shares` sums them); a role's allocation is summed again at a grant.
    in_role = np.zeros(n_roles + 1, dtype=np.int64)
    m = 0
    for n in range(n_f):
        if active[n] and wanting[n]:
            in_role[role_of[n] + 1] += 1
            m += 1
    for g in range(n_roles):
        in_role[g + 1] += in_role[g]
    members = np.empty(m, dtype=np.int64)
    for n in range(n_f):
        if active[n] and wanting[n]:
            members[in_role[role_of[n]]] = n
            in_role[role_of[n]] += 1
    values = np.zeros(n_f)  # (read for the candidates only)
    for n in members:
        values[n] = _drf_share(alloc[n], total, weight[n])
    role_alloc = np.zeros((n_roles, n_r))
    role_values = np.zeros(n_roles)
    candidate_role = np.zeros(n_roles, dtype=np.bool_)
    for n in members:
        candidate_role[role_of[n]] = True
    for r in range(n_r):
        for n in range(n_f):
            g = role_of[n]
            if candidate_role[g]:
                role_alloc[g, r] += alloc[n, r]
    for g in range(n_roles):
        if candidate_role[g]:
            role_values[g] = _drf_share(role_alloc[g], total, role_weight[g])
    witness = np.full(n_f, -1, dtype=np.int64)
    # CompiledScan
    shape = np.empty((n_r, n_a, n_r))
    empty = np.empty((n_r, n_a), dtype=np.bool_)
    built = np.zeros(n_r, dtype=np.bool_)
    distance = np.empty(n_a)
    tied = np.empty(n_a, dtype=np.int64)
    tree = np.empty(2 * min_tree.leaves(n_a))
    tree_kept = np.array([TREE_MIN, 0, 0], dtype=np.int64)
    changed_at = np.ones(n_a, dtype=np.int64)
    ints = np.zeros(3, dtype=np.int64)
    out_f = np.empty(log, dtype=np.int64)
    out_a = np.empty(log, dtype=np.int64)
    got_f = np.empty(log, dtype=np.int64)
    got_a = np.empty(log, dtype=np.int64)
    made = 0
    ints[0] = 1  # the state's writes: its load
    while max_grants < 0 or made < max_grants:
        ints[1] = log if max_grants < 0 else min(log, max_grants - made)
        status = _fill(members, active, wanting, runnable, count, limit, role_of, n_roles,
                       values, role_values, role_alloc, weight, role_weight, eligible, floor,
                       fit_demand, known, tol, total, residual, alloc, changed_at, witness,
                       fresh, near, shape, empty, built, distance, tied, tree, tree_kept,
                       ints, out_f, out_a, rng)  # fmt: skip
        step = ints[1]
        if made + step > got_f.shape[0]:
            grown = max(2 * got_f.shape[0], made + step)
            got_f = np.concatenate((got_f[:made], np.empty(grown - made, dtype=np.int64)))
            got_a = np.concatenate((got_a[:made], np.empty(grown - made, dtype=np.int64)))
        got_f[made : made + step] = out_f[:step]
        got_a[made : made + step] = out_a[:step]
        made += step
        if status == DONE:
            break
        if status == FULL:
            continue
        if max_grants >= 0 and made >= max_grants:
            break
        return False, got_f[:made], got_a[:made]
    return True, got_f[:made], got_a[:made]
