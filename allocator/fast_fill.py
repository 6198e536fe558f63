"""A faster static fill for the commonest case: DRF with randomized round-robin, one task per
grant, random ties (`fairbroker fill -s drf`, and every large instance of issue 17).

It makes exactly the grants `progressive_fill` makes, in the same order, with the same
random draws (tests/test_fill_scale.py checks it grant by grant): the same agent
permutations each round, the same lowest-criterion framework with the same tie tolerance,
and the same `rng.integers` draw among tied frameworks. What differs is how the lowest
fitting framework is found. The generic selector evaluates the criterion and the fit of
every framework as numpy vectors at each visit (about 20 us of call overhead per grant with
100 frameworks); here the frameworks are kept sorted by their DRF share, which only the
served framework's grant changes, and a visit walks them from the lowest until one fits.
The floating-point arithmetic is the generic path's, operation for operation (residuals and
allocations are updated by the same additions, shares by the same divisions and maxima), so
the shares and the ties are bit-identical.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, insort
from collections.abc import Callable

import numpy as np

from allocator.policy.base import Criterion
from allocator.policy.drf import DRF
from allocator.policy.selection import Selection
from allocator.policy.ties import RELATIVE_TIE, Ties
from allocator.state import AllocationState, Mode


def applies(state: AllocationState, criterion: Criterion, selection: Selection | str,
            ties: Ties | str) -> bool:  # fmt: skip
    """Whether `fast_fill` makes the same grants as `progressive_fill` would here: DRF
    (exactly, not a subclass), RRR, random ties, characterized mode, a fresh state."""
    return (
        type(criterion) is DRF
        and Selection(selection) is Selection.RRR
        and Ties(ties) is Ties.RANDOM
        and state.mode is Mode.CHARACTERIZED
        and state.changes == 0
        and not state.withheld.any()
    )


def _share(alloc: list[float], total: list[float], weight: float) -> float:
    """DRF's max_r alloc_r / C_r over resources the cluster has, over phi (as max_ratio)."""
    out = None
    for a, c in zip(alloc, total, strict=True):
        if c <= 0:
            continue
        ratio = a / c
        out = ratio if out is None or ratio > out else out
    return (0.0 if out is None else out) / weight


def fast_fill(
    state: AllocationState,
    rng: np.random.Generator,
    max_grants: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    progress_every: int = 2_000,
    record: list[tuple[int, int]] | None = None,
) -> int:
    """Fill `state` (see `applies`) and return the number of grants. `on_progress(grants)`
    is called every `progress_every` grants with `state.alloc` up to date; `record`, if
    given, receives each (framework, agent) in order (for the equivalence tests)."""
    cluster = state.cluster
    n_f, n_a = cluster.n_frameworks, cluster.n_agents
    demand = state.fit_demand.tolist()  # inf for a resource a framework without demand lacks
    tol = state.tol.tolist()
    total = np.asarray(cluster.total, dtype=float).tolist()
    weight = cluster.weight.tolist()
    limit = state.limit.tolist()
    count = state.count.tolist()
    alloc = np.asarray(state.alloc).tolist()
    residual = np.asarray(state.residual).tolist()
    wanting = state.wanting().tolist()
    all_eligible = bool(cluster.eligible.all())
    eligible_by_agent = state.eligible_by_agent
    n_r = len(tol)
    resources = range(n_r)

    share = [_share(alloc[n], total, weight[n]) for n in range(n_f)]
    # Frameworks that can still take a task, by (share, index); a framework leaves the order
    # when it reaches its limit (not wanting) and never comes back in a static fill.
    order = sorted((share[n], n) for n in range(n_f) if wanting[n])
    granted_f, granted_a = array("q"), array("q")  # 8 bytes a grant, not a list's 36
    grants = 0

    alive = np.arange(n_a)
    full = np.zeros(n_a, dtype=bool)
    while max_grants is None or grants < max_grants:
        alive = alive[~full[alive]]
        if len(alive) == 0:
            break
        for agent in rng.permutation(alive).tolist():
            if max_grants is not None and grants >= max_grants:
                break
            room = [residual[agent][r] + tol[r] for r in resources]
            eligible = None if all_eligible else eligible_by_agent[agent].tolist()
            low = None
            tied: list[int] = []
            for value, n in order:
                if low is not None and value > low:
                    break
                if eligible is not None and not eligible[n]:
                    continue
                d = demand[n]
                if all(d[r] <= room[r] for r in resources):
                    if low is None:
                        low = value + RELATIVE_TIE * max(1.0, abs(value))
                    tied.append(n)
            if low is None:
                full[agent] = True
                continue
            if len(tied) == 1:
                framework = tied[0]
            else:
                tied.sort()
                framework = tied[int(rng.integers(len(tied)))]
            # the grant, as AllocationState.grant does it (tasks = 1)
            d = demand[framework]
            held, left = alloc[framework], residual[agent]
            for r in resources:
                held[r] += 1 * d[r]
                left[r] -= 1 * d[r]
            count[framework] += 1
            old = share[framework]
            del order[bisect_left(order, (old, framework))]
            if count[framework] < limit[framework]:
                share[framework] = _share(held, total, weight[framework])
                insort(order, (share[framework], framework))
            granted_f.append(framework)
            granted_a.append(agent)
            grants += 1
            if on_progress is not None and grants % progress_every == 0:
                state.alloc[:] = alloc
                on_progress(grants)
    # write the final state back, as the generic path leaves it
    if record is not None:
        record.extend(zip(granted_f, granted_a, strict=True))
    if grants:
        frameworks = np.frombuffer(granted_f, dtype=np.int64)
        agents = np.frombuffer(granted_a, dtype=np.int64)
        np.add.at(state.tasks, (frameworks, agents), 1)
        # each agent's last grant, as the generic path numbers its writes
        last = np.full(n_a, -1, dtype=np.int64)
        np.maximum.at(last, agents, np.arange(grants, dtype=np.int64))
        touched = last >= 0
        state.changed_at[touched] = state.changes + 1 + last[touched]
        state.changes += grants
    state.count[:] = count
    state.alloc[:] = alloc
    state.residual[:] = residual
    for n in range(n_f):
        state.refresh_wanting(n)
    return grants
