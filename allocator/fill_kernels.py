"""Compiled inner loops of progressive filling (numba), for `allocator/native_fill.py`.

Each kernel repeats, float operation for float operation, what the generic selectors and
`AllocationState.grant` compute, so criteria, fits and tie sets are bit-identical, and draws
from the fill's own generator (numba's `Generator.permutation` and `integers` are NumPy's
algorithms on the same bit generator) exactly where the generic code draws: a permutation of
the agents still alive at each round, one integer among several tied candidates. Everything
a kernel must remember between calls (it returns only to have its grant log enlarged) lives
in the arrays it is given.
"""

from __future__ import annotations

import numpy as np

from allocator.draws import below
from allocator.jit import njit

#: As `allocator.policy.ties.RELATIVE_TIE` (`native_fill.applies` checks they agree).
RELATIVE_TIE = 1e-9
#: Relative slack on a lower bound before it ends a walk: above the few roundings that
#: separate a bound computed from a sort key from the value it bounds.
BOUND_SLACK = 1e-12

# What a kernel returns.
DONE = 0  # nothing fits any more, or the grant limit is reached
GROW = 1  # the grant log is full: enlarge it and call again with the same arguments

# Criteria of the rrr kernel and what its orders (`key[t]`, `srt[t]`) are.
DRF = 0  # one order, by max_r alloc_{n,r} / C_r / phi_n
TSF = 1  # one order, by x_n / (phi_n y_n)
PSDSF = 2  # an order per agent type (capacity): max_r alloc_{n,r} / c_{t,r} / phi_n
PSDSF_SCAN = 3  # PS-DSF with too many agent types: every framework evaluated at each visit
RPSDSF = 4  # no order: every framework evaluated at each visit, vectorized (`_scan_rps`)

# Slots of the `ints` array the kernels keep their counters in.
MADE = 0  # grants made
LIMIT = 1  # grant limit
POS = 2  # next position in the round's permutation `order`
ORDER_LEN = 3  # agents in this round's permutation
ALIVE_LEN = 4  # agents not yet found full (`alive[:ALIVE_LEN]`, in their first order)
M = 5  # frameworks the orders hold (wanting a task and fitting somewhere)
STEPS = 6  # frameworks walked past, in all (the kernels' work, for benchmarks)
N_INTS = 7


@njit(inline="always")
def _max_ratio(alloc: np.ndarray, n: int, den: np.ndarray) -> float:
    """max_r alloc[n, r] / den[r] over den[r] > 0, 0 if none (`policy.base.max_ratio`)."""
    out = 0.0
    first = True
    for r in range(den.shape[0]):
        if den[r] <= 0:
            continue
        ratio = alloc[n, r] / den[r]
        if first or ratio > out:
            out = ratio
        first = False
    return out


@njit
def update_keys(crit: int, n: int, alloc: np.ndarray, count: np.ndarray, weight: np.ndarray,
                total: np.ndarray, type_cap: np.ndarray, scale: np.ndarray,
                key: np.ndarray) -> None:  # fmt: skip
    """Framework n's sort keys (see the criteria above) from its allocation."""
    if crit == DRF:
        key[0, n] = _max_ratio(alloc, n, total) / weight[n]
    elif crit == TSF:
        key[0, n] = count[n] * scale[n]
    elif crit == PSDSF:
        for t in range(type_cap.shape[0]):
            key[t, n] = _max_ratio(alloc, n, type_cap[t]) / weight[n]


@njit(inline="always")
def _before(key: np.ndarray, t: int, a: int, b: int) -> bool:
    """Whether framework a sorts before b in order t: by key, then index."""
    ka = key[t, a]
    kb = key[t, b]
    return ka < kb or (ka == kb and a < b)


@njit
def build_orders(key: np.ndarray, wanting: np.ndarray, srt: np.ndarray) -> int:
    """The wanting frameworks by (key, index) into each `srt[t]`; returns how many."""
    members = np.flatnonzero(wanting)
    m = members.shape[0]
    for t in range(key.shape[0]):
        keys = key[t][members]
        idx = np.argsort(keys, kind="mergesort")  # stable: equal keys stay in index order
        for i in range(m):
            n = members[idx[i]]
            srt[t, i] = n
    return m


@njit(inline="always")
def _find(t: int, a: int, m: int, key: np.ndarray, srt: np.ndarray, lo: int) -> int:
    """The first position p >= lo in order t (of length m) where a would sort before or
    at srt[t, p] (binary search by key, then index)."""
    hi = m
    while lo < hi:
        mid = (lo + hi) // 2
        if _before(key, t, srt[t, mid], a):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(inline="always")
def _shift_left(row: np.ndarray, p: int, q: int) -> None:
    """row[p:q - 1] = row[p + 1:q], in place. Unsigned indices: with signed ones numba
    checks each for wraparound and the copy is not vectorized (ten times slower)."""
    start = np.uint64(p)
    one = np.uint64(1)
    for i in range(np.uint64(max(q - 1 - p, 0))):
        row[start + i] = row[start + i + one]


@njit(inline="always")
def _shift_right(row: np.ndarray, p: int, q: int) -> None:
    """row[p + 1:q + 1] = row[p:q], in place (unsigned indices, as `_shift_left`)."""
    one = np.uint64(1)
    stop = np.uint64(p)
    i = np.uint64(max(q, p))
    while i > stop:
        row[i] = row[i - one]
        i -= one


@njit
def _leave(n: int, m: int, key: np.ndarray, srt: np.ndarray) -> None:
    """Take n (with the keys it is ordered by) out of every order of length m."""
    for t in range(srt.shape[0]):
        p = _find(t, n, m, key, srt, 0)
        _shift_left(srt[t], p, m)


@njit
def _regrant(crit: int, n: int, leaves: bool, m: int, alloc: np.ndarray, count: np.ndarray,
             weight: np.ndarray, total: np.ndarray, type_cap: np.ndarray, scale: np.ndarray,
             key: np.ndarray, srt: np.ndarray, places: np.ndarray) -> None:  # fmt: skip
    """After a grant to n: its new keys, and its place in every order of length m (keys
    only grow in a static fill, so it moves towards the end), or out of them if it
    `leaves` (wants no more)."""
    if leaves:
        _leave(n, m, key, srt)
        update_keys(crit, n, alloc, count, weight, total, type_cap, scale, key)
        return
    for t in range(srt.shape[0]):
        places[t] = _find(t, n, m, key, srt, 0)
    update_keys(crit, n, alloc, count, weight, total, type_cap, scale, key)
    for t in range(srt.shape[0]):
        p = places[t]
        q = _find(t, n, m, key, srt, p + 1)  # n sorts before srt[t, q]
        _shift_left(srt[t], p, q)
        srt[t, q - 1] = n


@njit
def grant(crit: int, ordered: bool, n: int, agent: int, ints: np.ndarray,
          residual: np.ndarray, alloc: np.ndarray, count: np.ndarray, limit: np.ndarray,
          wanting: np.ndarray, demand: np.ndarray, weight: np.ndarray, total: np.ndarray,
          type_cap: np.ndarray, scale: np.ndarray, key: np.ndarray, srt: np.ndarray,
          places: np.ndarray, out_f: np.ndarray, out_a: np.ndarray) -> bool:  # fmt: skip
    """One task of n on `agent`, as `AllocationState.grant`, logged in `out_f`/`out_a`;
    with `ordered`, n's new keys (its share, for DRF) and place in the orders of length
    `ints[M]`, out of them if it wants no more. Returns whether n wants more. Shared by
    the rrr kernel and `bestfit_kernels.bestfit` (DRF's share update)."""
    for r in range(demand.shape[1]):
        alloc[n, r] += demand[n, r]
        residual[agent, r] -= demand[n, r]
    count[n] += 1.0
    wants = count[n] < limit[n]
    wanting[n] = wants
    made = ints[MADE]
    out_f[made] = n
    out_a[made] = agent
    ints[MADE] = made + 1
    if ordered:
        _regrant(crit, n, not wants, ints[M], alloc, count, weight, total, type_cap, scale,
                 key, srt, places)  # fmt: skip
        if not wants:
            ints[M] -= 1
    return wants


@njit
def _fits_somewhere(n: int, residual: np.ndarray, demand: np.ndarray, tol: np.ndarray,
                    eligible: np.ndarray, witness: np.ndarray) -> bool:  # fmt: skip
    """Whether one more task of n fits on some agent (the walks' own test). Residuals only
    shrink in a static fill, so an agent where n no longer fits never fits it again: the
    search resumes from the last agent that did (`witness[n]`), O(agents) per framework
    over the whole fill."""
    for agent in range(witness[n], residual.shape[0]):
        if eligible[agent, n] and _fits(n, agent, residual, demand, tol):
            witness[n] = agent
            return True
    witness[n] = residual.shape[0]
    return False


@njit(inline="always")
def _fits(n: int, agent: int, residual: np.ndarray, demand: np.ndarray, tol: np.ndarray) -> bool:
    """`AllocationState.fits_agent` for one pair: d_{n,r} <= residual_r + tol_r for all r."""
    for r in range(demand.shape[1]):  # noqa: SIM110 (a loop numba compiles plainly)
        if demand[n, r] > residual[agent, r] + tol[r]:
            return False
    return True


@njit(inline="always")
def _threshold(low: float) -> float:
    """The largest value tied with `low` (`ties.pick_lowest`); +inf ties only with +inf."""
    if np.isfinite(low):
        return low + RELATIVE_TIE * max(1.0, abs(low))
    return low


@njit
def rrr(crit: int, rng: np.random.Generator, ints: np.ndarray, residual: np.ndarray,
        alloc: np.ndarray, count: np.ndarray, limit: np.ndarray, wanting: np.ndarray,
        demand: np.ndarray, tol: np.ndarray, eligible: np.ndarray, weight: np.ndarray,
        total: np.ndarray, type_of: np.ndarray, type_cap: np.ndarray, scale: np.ndarray,
        key: np.ndarray, srt: np.ndarray, order: np.ndarray, alive: np.ndarray,
        full: np.ndarray, witness: np.ndarray, out_f: np.ndarray, out_a: np.ndarray,
        ties: np.ndarray, values: np.ndarray) -> int:  # fmt: skip
    """Randomized round-robin (`selection.RandomizedRoundRobin`): rounds over a fresh
    permutation of the agents not yet full; at each agent the lowest-criterion framework
    that fits a task there (`Selector._framework_at`, random among ties), one grant per
    visit; an agent where nothing fits is full for the rest of the fill.

    The lowest fitting framework is found by walking an order instead of evaluating every
    framework: DRF, TSF and PS-DSF walk theirs (PS-DSF: the agent type's) from the lowest
    key, where the first framework that fits is the lowest and the walk ends past its tie
    tolerance, and a framework that fits nowhere any more leaves the orders. rPS-DSF, whose
    value at an agent depends on its residual, evaluates every framework at each visit in
    vectorized loops (`_scan_rps`); so does PS-DSF with too many agent types."""
    n_r = demand.shape[1]
    dead = np.empty(demand.shape[0], dtype=np.int64)
    rres = np.empty(n_r)
    places = np.zeros(srt.shape[0], dtype=np.int64)
    alloc_t = np.ascontiguousarray(alloc.T)
    demand_t = np.ascontiguousarray(demand.T)
    approx = np.empty(demand.shape[0])
    inv_weight = 1.0 / weight
    # rPS-DSF's screen starts from 0 for a wanting framework, +inf for the others
    base = np.where(wanting, 0.0, np.inf)
    everywhere = eligible.all()
    while True:
        if ints[MADE] >= ints[LIMIT]:
            return DONE
        if ints[MADE] >= out_f.shape[0]:
            return GROW
        if ints[POS] >= ints[ORDER_LEN]:  # a new round, as RandomizedRoundRobin.next
            kept = 0
            for i in range(ints[ALIVE_LEN]):
                agent = alive[i]
                if not full[agent]:
                    alive[kept] = agent
                    kept += 1
            ints[ALIVE_LEN] = kept
            if kept == 0:
                return DONE
            shuffled = rng.permutation(alive[:kept])
            order[:kept] = shuffled
            ints[ORDER_LEN] = kept
            ints[POS] = 0
        agent = order[ints[POS]]
        ints[POS] += 1
        n_dead = 0
        if crit == RPSDSF:
            for r in range(n_r):
                res = residual[agent, r]
                rres[r] = res if res > tol[r] else 0.0
            k, low = _scan_rps(agent, residual, alloc, alloc_t, demand_t, tol, base,
                               everywhere, eligible, weight, inv_weight, rres, approx, ties,
                               values)  # fmt: skip
        else:
            k, low, n_dead = _walk(crit, agent, ints, residual, alloc, wanting, demand, tol,
                                   eligible, weight, type_of, type_cap, key, srt, witness,
                                   ties, values, dead)  # fmt: skip
        for i in range(n_dead):
            _leave(dead[i], ints[M], key, srt)
            ints[M] -= 1
        if k == 0:
            full[agent] = True
            continue
        threshold = _threshold(low)
        tied = 0
        for i in range(k):
            if values[i] <= threshold if np.isfinite(low) else values[i] == low:
                ties[tied] = ties[i]
                tied += 1
        if tied > 1:
            ties[:tied].sort()
            n = ties[below(rng, tied)]
        else:
            n = ties[0]
        ordered = crit != PSDSF_SCAN and crit != RPSDSF
        wants = grant(crit, ordered, n, agent, ints, residual, alloc, count, limit, wanting,
                      demand, weight, total, type_cap, scale, key, srt, places, out_f,
                      out_a)  # fmt: skip
        if crit == RPSDSF:
            for r in range(n_r):
                alloc_t[r, n] += demand[n, r]
            if not wants:
                base[n] = np.inf


@njit
def _walk(crit: int, agent: int, ints: np.ndarray, residual: np.ndarray, alloc: np.ndarray,
          wanting: np.ndarray, demand: np.ndarray, tol: np.ndarray, eligible: np.ndarray,
          weight: np.ndarray, type_of: np.ndarray, type_cap: np.ndarray, key: np.ndarray,
          srt: np.ndarray, witness: np.ndarray, ties: np.ndarray,
          values: np.ndarray, dead: np.ndarray) -> tuple[int, float, int]:  # fmt: skip
    """The frameworks that fit on `agent` with their criterion, from the lowest up to the
    lowest's tie tolerance (`ties[:k]`, `values[:k]`); returns k, the lowest value and how
    many frameworks were found to fit nowhere (`dead[:n_dead]`)."""
    elig = eligible[agent]
    t = type_of[agent]
    k = 0
    n_dead = 0
    low = np.inf
    threshold = np.inf
    found = False
    steps = 0
    scan = crit == PSDSF_SCAN
    m = demand.shape[0] if scan else ints[M]
    for i in range(m):
        n = i if scan else srt[t, i]
        if scan:
            if not wanting[n]:
                continue
            v = _max_ratio(alloc, n, type_cap[t]) / weight[n]
        else:
            v = key[t, n]
            if found and v > threshold:
                break
        steps += 1
        if not elig[n]:
            continue
        if not _fits(n, agent, residual, demand, tol):
            if not scan and not _fits_somewhere(n, residual, demand, tol, eligible, witness):
                dead[n_dead] = n
                n_dead += 1
            continue
        ties[k] = n
        values[k] = v
        k += 1
        if v < low or not found:
            low = min(low, v)
            found = True
            threshold = _threshold(low)
    ints[STEPS] += steps
    return k, low, n_dead


@njit
def _scan_rps(agent: int, residual: np.ndarray, alloc: np.ndarray, alloc_t: np.ndarray,
              demand_t: np.ndarray, tol: np.ndarray, base: np.ndarray, everywhere: bool,
              eligible: np.ndarray, weight: np.ndarray, inv_weight: np.ndarray,
              rres: np.ndarray, approx: np.ndarray, ties: np.ndarray,
              values: np.ndarray) -> tuple[int, float]:  # fmt: skip
    """rPS-DSF at `agent`: the frameworks that fit there from the lowest value up to its
    tie tolerance (`ties[:k]`, `values[:k]`, in index order) and the lowest value.

    Every framework is screened at once in loops the compiler vectorizes (floats only,
    no branches: a framework that cannot take the task here screens at +inf; `base` is
    +inf for those that want no more, `everywhere` when no constraint excludes any), over
    (R, F) copies of the allocations and demands and with multiplications by reciprocals,
    which are within a few ulps of the criterion's divisions; only the frameworks the
    screen cannot rule out (those within a relative 1e-12 past the tie tolerance of the
    screened minimum) get the exact value, computed as `_max_ratio` does."""
    n_r, n_f = demand_t.shape
    if everywhere:
        for n in range(n_f):
            approx[n] = base[n]
    else:
        elig = eligible[agent]
        for n in range(n_f):
            approx[n] = base[n] if elig[n] else np.inf
    for r in range(n_r):
        room = residual[agent, r] + tol[r]
        share = alloc_t[r]
        need = demand_t[r]
        if rres[r] > 0:
            inverse = 1.0 / rres[r]
            for n in range(n_f):
                v = max(approx[n], share[n] * inverse)
                approx[n] = v if need[n] <= room else np.inf
        else:
            for n in range(n_f):
                approx[n] = approx[n] if need[n] <= room else np.inf
    screened = np.inf
    for n in range(n_f):
        v = approx[n] * inv_weight[n]
        approx[n] = v
        screened = min(screened, v)
    if screened == np.inf:
        return 0, np.inf
    cutoff = _threshold(screened) * (1.0 + BOUND_SLACK)
    k = 0
    low = np.inf
    for n in range(n_f):
        if approx[n] <= cutoff:
            v = _max_ratio(alloc, n, rres) / weight[n]
            ties[k] = n
            values[k] = v
            k += 1
            if v < low:
                low = v
    return k, low
