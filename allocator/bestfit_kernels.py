"""Compiled best fit (BF-DRF's fill) for `allocator/native_fill.py`.

`bestfit` makes the grants of `selection.FrameworkFirst` with best fit, DRF and random
ties: the lowest-share framework among those still active and wanting (random among ties),
then its best-fit agent, the feasible agent with the least H (`policy.bestfit`, random
among ties); a framework that fits nowhere is dropped for good and the pick drawn again.
Every float is computed as the generic code computes it (H as `bestfit.shape_distance`,
feasibility as `AllocationState.fits_framework`), and every draw is made where it draws.

The frameworks are kept in one order by DRF share (`fill_kernels`' orders). H splits into
a framework half (its reference resource `ref` and terms d_r / C_r / (d_ref / C_ref)) and an
agent half (the agent's residual shape, residual_r * (scale / C_r) with scale = 1 /
(residual_ref / C_ref)); the agents are kept sorted by their shape on the first compared
resource, one order per reference resource in use, where H is at least the distance
between the framework's term and the agent's shape on that resource. A lookup walks the
order outwards from the framework's term, nearest side first, and stops once both sides
are past the tie tolerance of the least H found. The order is cut into chunks of at most
`CHUNK` agents, each knowing the most of each resource any of its agents has left, so a
walk skips chunks where the task cannot fit and an agent whose shape changed after a grant
moves in O(`CHUNK`).

Why the helpers are compiled as they are: numba reference-counts every array bound to a new
name (an atomic increment and decrement), and its pruning pass misses many pairs, above all
where the function makes calls. A helper inlined by numba (`inline="always"`) binds its
arguments anew at every call, which in a loop cost a pair per array per iteration (the
walk's chunk test, so inlined, was a third of the fill); a plain helper that LLVM inlines
costs nothing. So array helpers in hot loops are plain, and the walk makes no calls (the
draw, which does, runs only when several entries tie).
"""

from __future__ import annotations

import numpy as np

from allocator.draws import below
from allocator.fill_kernels import (
    DONE,
    DRF,
    GROW,
    LIMIT,
    MADE,
    STEPS,
    M,
    _leave,
    _shift_left,
    _shift_right,
    _threshold,
    grant,
)
from allocator.jit import njit

#: Most agents a chunk of an agent order holds (a full chunk splits in two halves).
CHUNK = 128

#: What `bestfit` returns besides DONE and GROW: a NaN shape, which has no place in an
#: order; the generic fill decides then (started afresh, from the generator's first state).
UNORDERED = 2


@njit
def agent_shapes(agent: int, residual: np.ndarray, total: np.ndarray, refs: np.ndarray,
                 first: np.ndarray, shape: np.ndarray, empty: np.ndarray,
                 sort_key: np.ndarray) -> bool:  # fmt: skip
    """One agent's half of H for each reference resource in use (`refs[g]`): shape[g, r],
    `empty[g]` when residual_ref <= 0, and its key in order g (its shape on the first
    compared resource `first[g]`, 0 when there is none, +inf when empty). Returns False
    on a NaN key."""
    n_r = residual.shape[1]
    for g in range(refs.shape[0]):
        ref = refs[g]
        res_ref = residual[agent, ref] / total[ref]
        is_empty = res_ref <= 0
        scale = 1.0 / (1.0 if is_empty else res_ref)
        for r in range(n_r):
            if r != ref and total[r] > 0:
                shape[g, r, agent] = residual[agent, r] * (scale / total[r])
        empty[g, agent] = is_empty
        if is_empty:
            sort_key[g, agent] = np.inf
        elif first[g] >= 0:
            sort_key[g, agent] = shape[g, first[g], agent]
        else:
            sort_key[g, agent] = 0.0
        if np.isnan(sort_key[g, agent]):
            return False
    return True


# ---- the chunked agent orders ----------------------------------------------------------------
# Per order g: `directory[g, :n_chunks[g]]` the chunks in order; chunk c holds
# `members[g, c, :size[g, c]]`, sorted by (key, agent), with their keys in `keys[g, c]`
# and `room[g, c, r]` the most of resource r any of them has left; `chunk_of[g, a]` is the
# chunk holding agent a; `spare[g, :n_spare[g]]` the unused chunks.


@njit(inline="always")
def _before(ka: float, a: int, kb: float, b: int) -> bool:
    return ka < kb or (ka == kb and a < b)


@njit(inline="always")
def _chunk_room(g: int, c: int, members: np.ndarray, size: np.ndarray, residual: np.ndarray,
                room: np.ndarray) -> None:  # fmt: skip
    for r in range(residual.shape[1]):
        most = -np.inf
        for j in range(size[g, c]):
            most = max(most, residual[members[g, c, j], r])
        room[g, c, r] = most


@njit
def build_order(g: int, order: np.ndarray, sort_key: np.ndarray, residual: np.ndarray,
                members: np.ndarray, keys: np.ndarray, size: np.ndarray, room: np.ndarray,
                chunk_of: np.ndarray, directory: np.ndarray, n_chunks: np.ndarray,
                spare: np.ndarray, n_spare: np.ndarray) -> None:  # fmt: skip
    """Order g afresh from `order` (every agent, sorted by key and index), in half-full
    chunks."""
    half = CHUNK // 2
    n_a = order.shape[0]
    used = 0
    for start in range(0, n_a, half):
        c = used
        count = min(half, n_a - start)
        for j in range(count):
            a = order[start + j]
            members[g, c, j] = a
            keys[g, c, j] = sort_key[g, a]
            chunk_of[g, a] = c
        size[g, c] = count
        _chunk_room(g, c, members, size, residual, room)
        directory[g, used] = c
        used += 1
    n_chunks[g] = used
    n_spare[g] = 0
    for c in range(members.shape[1] - 1, used - 1, -1):
        spare[g, n_spare[g]] = c
        n_spare[g] += 1
        size[g, c] = 0


@njit(inline="always")
def _held_most(g: int, c: int, held: np.ndarray, room: np.ndarray) -> bool:
    """Whether an entry whose residual was `held` when chunk c's room was last computed
    may have been the one with the most of some resource (room to recompute)."""
    for r in range(held.shape[0]):  # noqa: SIM110 (a loop numba compiles plainly)
        if held[r] >= room[g, c, r]:
            return True
    return False


@njit
def _shrink_room(g: int, c: int, held: np.ndarray, members: np.ndarray, size: np.ndarray,
                 residual: np.ndarray, room: np.ndarray) -> None:  # fmt: skip
    """Chunk c's room after an entry's residual shrank from `held`."""
    if _held_most(g, c, held, room):
        _chunk_room(g, c, members, size, residual, room)


@njit
def _remove(g: int, a: int, key: float, held: np.ndarray, members: np.ndarray,
            keys: np.ndarray, size: np.ndarray, room: np.ndarray, chunk_of: np.ndarray,
            directory: np.ndarray, n_chunks: np.ndarray, spare: np.ndarray,
            n_spare: np.ndarray, residual: np.ndarray) -> None:  # fmt: skip
    """Take agent a (of key `key`, residual `held` when its chunk's room was computed)
    out of order g."""
    c = chunk_of[g, a]
    lo, hi = 0, size[g, c]
    while lo < hi:
        mid = (lo + hi) // 2
        if _before(keys[g, c, mid], members[g, c, mid], key, a):
            lo = mid + 1
        else:
            hi = mid
    last = size[g, c] - 1
    _shift_left(members[g, c], lo, last + 1)
    _shift_left(keys[g, c], lo, last + 1)
    size[g, c] = last
    if last > 0:
        if _held_most(g, c, held, room):
            _chunk_room(g, c, members, size, residual, room)
        return
    i = 0  # an empty chunk leaves the directory
    while directory[g, i] != c:
        i += 1
    for j in range(i, n_chunks[g] - 1):
        directory[g, j] = directory[g, j + 1]
    n_chunks[g] -= 1
    spare[g, n_spare[g]] = c
    n_spare[g] += 1


@njit
def _insert(g: int, a: int, key: float, members: np.ndarray, keys: np.ndarray,
            size: np.ndarray, room: np.ndarray, chunk_of: np.ndarray, directory: np.ndarray,
            n_chunks: np.ndarray, spare: np.ndarray, n_spare: np.ndarray,
            residual: np.ndarray) -> bool:  # fmt: skip
    """Put agent a (of key `key`) into order g; False when a chunk is full and there is no
    spare one to split it into (the order is then to be rebuilt)."""
    if n_chunks[g] == 0:
        n_spare[g] -= 1
        c = spare[g, n_spare[g]]
        directory[g, 0] = c
        n_chunks[g] = 1
        size[g, c] = 0
        i = 0
    else:
        # the first chunk whose last agent sorts after a, else the last chunk
        lo, hi = 0, n_chunks[g] - 1
        while lo < hi:
            mid = (lo + hi) // 2
            d = directory[g, mid]
            last = size[g, d] - 1
            if _before(keys[g, d, last], members[g, d, last], key, a):
                lo = mid + 1
            else:
                hi = mid
        i = lo
        c = directory[g, i]
    if size[g, c] == CHUNK:
        if n_spare[g] == 0:
            return False
        n_spare[g] -= 1
        upper = spare[g, n_spare[g]]
        half = CHUNK // 2
        for j in range(half, CHUNK):
            b = members[g, c, j]
            members[g, upper, j - half] = b
            keys[g, upper, j - half] = keys[g, c, j]
            chunk_of[g, b] = upper
        size[g, c] = half
        size[g, upper] = CHUNK - half
        _chunk_room(g, c, members, size, residual, room)
        _chunk_room(g, upper, members, size, residual, room)
        for j in range(n_chunks[g], i + 1, -1):
            directory[g, j] = directory[g, j - 1]
        directory[g, i + 1] = upper
        n_chunks[g] += 1
        if _before(keys[g, c, half - 1], members[g, c, half - 1], key, a):
            c = upper
    n = size[g, c]
    lo, hi = 0, n  # a goes before the first member it sorts before
    while lo < hi:
        mid = (lo + hi) // 2
        if _before(key, a, keys[g, c, mid], members[g, c, mid]):
            hi = mid
        else:
            lo = mid + 1
    j = lo
    _shift_right(members[g, c], j, n)
    _shift_right(keys[g, c], j, n)
    members[g, c, j] = a
    keys[g, c, j] = key
    size[g, c] = n + 1
    chunk_of[g, a] = c
    if n == 0:
        _chunk_room(g, c, members, size, residual, room)
    else:
        for r in range(residual.shape[1]):
            room[g, c, r] = max(room[g, c, r], residual[a, r])
    return True


# ---- pristine agents ----------------------------------------------------------------------
# Agents no grant has touched yet are as their capacity left them, so the agents of one
# capacity are interchangeable in a lookup (with no constraints): each such class stands in
# the orders as one entry (id n_agents + t), its residual row that capacity, with its members
# in `class_members[class_start[t]:][:class_len[t]]` (by index) and a Fenwick tree over them
# (`fenwick`, the same layout) counting those still untouched (`class_count[t]`) for the
# draw among tied agents. An agent's first grant takes it out of its class (`class_of`,
# `class_pos`) into the orders on its own.


@njit(inline="always")
def _fenwick_add(fenwick: np.ndarray, start: int, length: int, pos: int, delta: int) -> None:
    i = pos + 1
    while i <= length:
        fenwick[start + i - 1] += delta
        i += i & -i


@njit(inline="always")
def _fenwick_prefix(fenwick: np.ndarray, start: int, pos: int) -> int:
    """How many of the class's first `pos` members are untouched."""
    total = 0
    i = pos
    while i > 0:
        total += fenwick[start + i - 1]
        i -= i & -i
    return total


@njit(inline="always")
def _untouched_up_to(t: int, x: int, pristine: tuple) -> int:
    """How many untouched members of class t have an index <= x."""
    class_start, class_len, class_members, _pos, fenwick, _count, _of = pristine
    start = class_start[t]
    lo, hi = 0, class_len[t]
    while lo < hi:
        mid = (lo + hi) // 2
        if class_members[start + mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return _fenwick_prefix(fenwick, start, lo)


@njit
def _draw(found: np.ndarray, tied: int, n_a: int, pristine: tuple,
          rng: np.random.Generator) -> int:  # fmt: skip
    """The agent `ties.pick_lowest` draws among the tied entries `found[:tied]` (agents and
    classes, standing for their untouched members): all of them sorted by index, one
    integer when there are several."""
    class_count = pristine[5]
    agents, last = 0, tied - 1  # the agents first, the classes after them
    while agents <= last:
        if found[agents] < n_a:
            agents += 1
        else:
            found[agents], found[last] = found[last], found[agents]
            last -= 1
    every = agents
    for i in range(agents, tied):
        every += class_count[found[i] - n_a]
    classes = tied
    if every == 1 and agents == 1:
        return found[0]
    chosen = found[:agents]
    chosen.sort()
    j = 0 if every == 1 else below(rng, every)
    if classes == agents:
        return chosen[j]
    # the least index x with j + 1 tied agents at or below it
    lo, hi = 0, n_a - 1
    while lo < hi:
        x = (lo + hi) // 2
        at_or_below = np.searchsorted(chosen, x, side="right")
        for i in range(agents, classes):
            at_or_below += _untouched_up_to(found[i] - n_a, x, pristine)
        if at_or_below >= j + 1:
            hi = x
        else:
            lo = x + 1
    return lo


@njit
def _leave_class(a: int, pristine: tuple) -> int:
    """Agent a is touched: out of its class; returns the class's entry if that emptied it
    (-1 if not)."""
    class_start, class_len, _members, class_pos, fenwick, class_count, class_of = pristine
    t = class_of[a]
    class_of[a] = -1
    _fenwick_add(fenwick, class_start[t], class_len[t], class_pos[a], -1)
    class_count[t] -= 1
    return t if class_count[t] == 0 else -1


# ---- the lookup ----------------------------------------------------------------------------


@njit
def _fits_floor(n: int, entry: int, residual: np.ndarray, floor: np.ndarray) -> bool:
    """`AllocationState.fits_framework` for one pair, eligibility aside: residual_r >= d_r -
    tol_r for every resource the task uses (floor = -inf for the others)."""
    for r in range(floor.shape[1]):  # noqa: SIM110 (a loop numba compiles plainly)
        if residual[entry, r] < floor[n, r]:
            return False
    return True


@njit
def _chunk_fits(n: int, g: int, c: int, room: np.ndarray, floor: np.ndarray) -> bool:
    """Whether a task of n may fit on some entry of chunk c (no: it needs more of some
    resource than any there has left)."""
    for r in range(floor.shape[1]):  # noqa: SIM110 (a loop numba compiles plainly)
        if room[g, c, r] < floor[n, r]:
            return False
    return True


@njit
def _distance(n: int, g: int, entry: int, terms: np.ndarray, compared: np.ndarray,
              n_compared: int, shape: np.ndarray, empty: np.ndarray) -> float:  # fmt: skip
    """H(n, entry) as `bestfit.shape_distance` sums it: the compared resources in order."""
    if empty[g, entry]:
        return np.inf
    distance = 0.0
    for j in range(n_compared):
        r = compared[g, j]
        gap = abs(terms[n, r] - shape[g, r, entry])
        distance = gap if j == 0 else distance + gap
    return distance


@njit
def _best_agent(n: int, n_a: int, residual: np.ndarray, floor: np.ndarray,
                eligible: np.ndarray, group: np.ndarray, terms: np.ndarray,
                compared: np.ndarray, n_compared: np.ndarray, shape: np.ndarray,
                empty: np.ndarray, orders: tuple, found: np.ndarray, found_h: np.ndarray,
                ints: np.ndarray) -> int:  # fmt: skip
    """`bestfit_index.best_fit_scan` up to the draw: the feasible entries with the least H
    (those within its tie tolerance) into `found[:tied]`; returns tied, 0 when none. A
    framework of no valid shape (`group` -1) has H = +inf everywhere: every feasible agent
    ties. `bestfit` draws among them (`_draw`, as `ties.pick_lowest` draws): with the draw's
    calls out of it, this walk compiles without reference counting its arrays per call."""
    members, keys, size, room, _of, directory, n_chunks, _spare, _n_spare = orders
    elig = eligible[n]
    k = 0
    best = np.inf
    steps = 0
    g = group[n]
    if g < 0:
        for agent in range(n_a):
            if elig[agent] and _fits_floor(n, agent, residual, floor):
                found[k] = agent
                found_h[k] = np.inf
                k += 1
        steps = n_a
    else:
        nc = n_compared[g]
        term = terms[n, compared[g, 0]] if nc > 0 else 0.0
        chunks = n_chunks[g]
        # the up side starts at the first entry whose key is >= term, the down side before
        lo, hi = 0, chunks
        while lo < hi:
            mid = (lo + hi) // 2
            d = directory[g, mid]
            if keys[g, d, size[g, d] - 1] < term:
                lo = mid + 1
            else:
                hi = mid
        up_i, up_j = lo, 0
        if up_i < chunks:
            d = directory[g, up_i]
            lo, hi = 0, size[g, d]
            while lo < hi:
                mid = (lo + hi) // 2
                if keys[g, d, mid] < term:
                    lo = mid + 1
                else:
                    hi = mid
            up_j = lo
        down_i, down_j = up_i, up_j - 1
        if down_j < 0:
            down_i -= 1
            if down_i >= 0:
                down_j = size[g, directory[g, down_i]] - 1
        threshold = np.inf
        d = u = 0
        bound_down = bound_up = np.inf
        while True:
            # skip the chunks (or the rest of them) where the task fits on no entry
            while down_i >= 0 and not _chunk_fits(n, g, directory[g, down_i], room, floor):
                down_i -= 1
                if down_i >= 0:
                    down_j = size[g, directory[g, down_i]] - 1
            while up_i < chunks and not _chunk_fits(n, g, directory[g, up_i], room, floor):
                up_i += 1
                up_j = 0
            if down_i < 0 and up_i >= chunks:
                break
            if down_i >= 0:
                d = directory[g, down_i]
                bound_down = abs(term - keys[g, d, down_j])
            if up_i < chunks:
                u = directory[g, up_i]
                bound_up = abs(term - keys[g, u, up_j])
            if up_i >= chunks or (down_i >= 0 and bound_down <= bound_up):
                entry = members[g, d, down_j]
                bound = bound_down
                down_j -= 1
                if down_j < 0:
                    down_i -= 1
                    if down_i >= 0:
                        down_j = size[g, directory[g, down_i]] - 1
            else:
                entry = members[g, u, up_j]
                bound = bound_up
                up_j += 1
                if up_j >= size[g, u]:
                    up_i += 1
                    up_j = 0
            if bound > threshold:  # (only once some H is finite: +inf before)
                break
            steps += 1
            if entry < n_a and not elig[entry]:  # (classes exist only without constraints)
                continue
            if not _fits_floor(n, entry, residual, floor):
                continue
            h = _distance(n, g, entry, terms, compared, nc, shape, empty)
            if h <= threshold:
                found[k] = entry
                found_h[k] = h
                k += 1
                if h < best:
                    best = h
                    threshold = _threshold(best)
    ints[STEPS] += steps
    if k == 0:
        return 0
    tied = k  # when the least is +inf, every one found is +inf
    if np.isfinite(best):
        threshold = _threshold(best)
        tied = 0
        for i in range(k):
            if found_h[i] <= threshold:
                found[tied] = found[i]
                tied += 1
    return tied


@njit
def bestfit(rng: np.random.Generator, ints: np.ndarray, residual: np.ndarray,
            alloc: np.ndarray, count: np.ndarray, limit: np.ndarray, wanting: np.ndarray,
            demand: np.ndarray, floor: np.ndarray, eligible: np.ndarray, weight: np.ndarray,
            total: np.ndarray, key: np.ndarray, srt: np.ndarray, group: np.ndarray,
            refs: np.ndarray, terms: np.ndarray, compared: np.ndarray,
            n_compared: np.ndarray, shape: np.ndarray, empty: np.ndarray,
            sort_key: np.ndarray, orders: tuple, pristine: tuple, found: np.ndarray,
            found_h: np.ndarray, ties: np.ndarray, out_f: np.ndarray,
            out_a: np.ndarray) -> int:  # fmt: skip
    """The fill (see the module doc) until nothing fits or `ints[LIMIT]` grants; returns
    DONE, GROW (the grant log is full) or UNORDERED. `residual` has a row per agent, then
    one per pristine class."""
    members, keys, size, room, chunk_of, directory, n_chunks, spare, n_spare = orders
    class_of = pristine[6]
    n_a = eligible.shape[1]
    n_r = demand.shape[1]
    places = np.zeros(1, dtype=np.int64)
    no_type = np.zeros((1, n_r))
    no_scale = np.zeros(0)
    first = np.empty(refs.shape[0], dtype=np.int64)
    for g in range(refs.shape[0]):
        first[g] = compared[g, 0] if n_compared[g] > 0 else -1
    old = np.empty(refs.shape[0])
    before = np.empty(n_r)  # the granted agent's residual before the grant
    while True:
        if ints[MADE] >= ints[LIMIT]:
            return DONE
        if ints[MADE] >= out_f.shape[0]:
            return GROW
        m = ints[M]
        if m == 0:
            return DONE
        # the lowest share, random among ties (as FrameworkFirst._next_simple)
        threshold = _threshold(key[0, srt[0, 0]])
        tied = 0
        while tied < m and key[0, srt[0, tied]] <= threshold:
            ties[tied] = srt[0, tied]
            tied += 1
        if tied > 1:
            ties[:tied].sort()
            n = ties[below(rng, tied)]
        else:
            n = ties[0]
        tied = _best_agent(n, n_a, residual, floor, eligible, group, terms, compared,
                           n_compared, shape, empty, orders, found, found_h, ints)  # fmt: skip
        if tied == 0:
            agent = -1
        elif tied == 1 and found[0] < n_a:
            agent = found[0]
        else:
            agent = _draw(found, tied, n_a, pristine, rng)
        if agent < 0:  # fits nowhere: inactive for the rest of the fill
            _leave(n, m, key, srt)
            ints[M] = m - 1
            continue
        for r in range(n_r):
            before[r] = residual[agent, r]
        grant(DRF, True, n, agent, ints, residual, alloc, count, limit, wanting, demand, weight,
              total, no_type, no_scale, key, srt, places, out_f, out_a)  # fmt: skip
        emptied = -1
        pristine_agent = class_of[agent] >= 0
        if pristine_agent:
            emptied = _leave_class(agent, pristine)
        for g in range(refs.shape[0]):
            old[g] = sort_key[g, agent]
        if not agent_shapes(agent, residual, total, refs, first, shape, empty, sort_key):
            return UNORDERED
        for g in range(refs.shape[0]):
            if emptied >= 0:
                entry = n_a + emptied
                _remove(g, entry, sort_key[g, entry], residual[entry], members, keys, size,
                        room, chunk_of, directory, n_chunks, spare, n_spare,
                        residual)  # fmt: skip
            if not pristine_agent:
                if sort_key[g, agent] == old[g]:  # same place, less room
                    _shrink_room(g, chunk_of[g, agent], before, members, size, residual, room)
                    continue
                _remove(g, agent, old[g], before, members, keys, size, room, chunk_of,
                        directory, n_chunks, spare, n_spare, residual)  # fmt: skip
            if not _insert(g, agent, sort_key[g, agent], members, keys, size, room, chunk_of,
                           directory, n_chunks, spare, n_spare, residual):  # fmt: skip
                _rebuild(g, agent, sort_key, residual, members, keys, size, room, chunk_of,
                         directory, n_chunks, spare, n_spare)  # fmt: skip


@njit
def _rebuild(g: int, missing: int, sort_key: np.ndarray, residual: np.ndarray,
             members: np.ndarray, keys: np.ndarray, size: np.ndarray, room: np.ndarray,
             chunk_of: np.ndarray, directory: np.ndarray, n_chunks: np.ndarray,
             spare: np.ndarray, n_spare: np.ndarray) -> None:  # fmt: skip
    """Order g afresh, with entry `missing` (not in it) in its place: it found a full chunk
    and no spare one to split it into."""
    order = np.empty(sort_key.shape[1], dtype=np.int64)
    p = 0
    for i in range(n_chunks[g]):
        c = directory[g, i]
        for j in range(size[g, c]):
            order[p] = members[g, c, j]
            p += 1
    q = p
    while q > 0 and _before(sort_key[g, missing], missing, sort_key[g, order[q - 1]],
                            order[q - 1]):  # fmt: skip
        order[q] = order[q - 1]
        q -= 1
    order[q] = missing
    build_order(
        g,
        order[: p + 1],
        sort_key,
        residual,
        members,
        keys,
        size,
        room,
        chunk_of,
        directory,
        n_chunks,
        spare,
        n_spare,
    )
