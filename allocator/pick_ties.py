"""The picks of a characterized BF-DRF fill, kept from pick to pick (issue 28).

`_pick_loop` (engine_columns) picks the role with the least value among those with a
candidate, then the framework with the least value in it, draws among the ties (within
`RELATIVE_TIE` of the least, in index order) and retires a pick that fits nowhere. It
scans every role and the chosen role's frameworks at each pick. In a backlog (a thousand
frameworks waiting, a few tasks ending at each tick, a run's candidate agents few) a run is
mostly picks that retire, so a run cost candidates x roles.

`Ties` keeps, for each segment of items (a role's frameworks; the roles themselves), the
items sorted by value and the tie group of the least value admitted into a Fenwick tree
over the items' index order. A pick counts the ties and finds the r-th of them in index
order in O(log n), so it makes the same draws with the same bounds as the scan and picks
the same item. Keys are fixed between grants (a retirement only removes an item), so the
least value only rises and the tie group only grows by admitting the next sorted items,
or loses removed ones; a grant changes one item's key and moves it to its place in its
segment's order.
"""

from __future__ import annotations

import numpy as np

from allocator.draws import below32
from allocator.engine_columns import _fits_somewhere
from allocator.jit import leaf, njit
from allocator.policy.ties import RELATIVE_TIE

#: Segments up to this size are sorted by insertion.
SMALL = 16


@njit(inline="always")
def _bit_add(bit: np.ndarray, i: int, delta: int) -> None:
    i += 1
    while i < bit.shape[0]:
        bit[i] += delta
        i += i & -i


@njit(inline="always")
def _bit_prefix(bit: np.ndarray, i: int) -> int:
    """The count over item positions [0, i)."""
    total = 0
    while i > 0:
        total += bit[i]
        i -= i & -i
    return total


@njit(inline="always")
def _bit_select(bit: np.ndarray, k: int) -> int:
    """The position of the (k + 1)-th counted item."""
    step = 1
    while step * 2 < bit.shape[0]:
        step *= 2
    position = 0
    while step > 0:
        ahead = position + step
        if ahead < bit.shape[0] and bit[ahead] <= k:
            position = ahead
            k -= bit[ahead]
        step //= 2
    return position


@njit
def ties_of(keys: np.ndarray, start: np.ndarray):  # type: ignore[no-untyped-def]
    """Items 0..n-1 with `keys`, in segments [start[s], start[s + 1]): (start, keys, order,
    low, admit, gone, admitted, bit, tied, segment). Each segment's order is sorted at once."""
    n = keys.shape[0]
    n_s = start.shape[0] - 1
    segment = np.empty(n, dtype=np.int64)
    order = np.empty(n, dtype=np.int64)  # each segment's items by key, ties in index order
    for s in range(n_s):
        a, b = start[s], start[s + 1]
        segment[a:b] = s
        _sorted_into(keys, a, b, order)
    return (
        start,
        keys.copy(),
        order,
        start[:-1].copy(),  # low: the first item of the sorted order not gone
        start[:-1].copy(),  # admit: the sorted items before it were admitted
        np.zeros(n, dtype=np.bool_),  # gone
        np.zeros(n, dtype=np.bool_),  # admitted (counted, unless gone)
        np.zeros(n + 1, dtype=np.int64),  # Fenwick tree of the counted items
        np.zeros(n_s, dtype=np.int64),  # tied: each segment's counted items
        segment,
    )


@njit
def _sorted_into(keys: np.ndarray, a: int, b: int, order: np.ndarray) -> None:
    """order[a:b] = items a..b-1 by key, ties in index order (a stable sort), without the
    tuple of `ties_of` passed per segment (each call counted references to its ten arrays)."""
    if b - a <= SMALL:  # insertion sort: stable, and no allocation
        for j in range(a, b):
            i = j
            while i > a and keys[order[i - 1]] > keys[j]:
                order[i] = order[i - 1]
                i -= 1
            order[i] = j
    else:
        order[a:b] = a + np.argsort(keys[a:b], kind="mergesort")


@leaf
def _count(start: np.ndarray, keys: np.ndarray, order: np.ndarray, low: np.ndarray,
           admit: np.ndarray, gone: np.ndarray, admitted: np.ndarray, bit: np.ndarray,
           tied: np.ndarray, s: int) -> int:  # fmt: skip
    """How many items of segment s tie for its least key (0: none is left)."""
    end = start[s + 1]
    at = low[s]
    while at < end and gone[order[at]]:
        at += 1
    low[s] = at
    if at == end:
        return 0
    least = keys[order[at]]
    limit = least + RELATIVE_TIE * max(1.0, abs(least))
    j = max(admit[s], at)
    while j < end and keys[order[j]] <= limit:
        item = order[j]
        if not gone[item]:
            admitted[item] = True
            _bit_add(bit, item, 1)
            tied[s] += 1
        j += 1
    admit[s] = j
    return tied[s]


@leaf
def _select(start: np.ndarray, order: np.ndarray, low: np.ndarray, bit: np.ndarray, s: int,
            k: int, r: int) -> int:  # fmt: skip
    """The r-th (from 0, in index order) of segment s's k ties, after `_count`."""
    if k == 1:  # the least item is always among the ties
        return order[low[s]]
    return _bit_select(bit, _bit_prefix(bit, start[s]) + r)


@leaf
def _remove(gone: np.ndarray, admitted: np.ndarray, bit: np.ndarray, tied: np.ndarray,
            segment: np.ndarray, item: int) -> None:  # fmt: skip
    if not gone[item]:
        gone[item] = True
        if admitted[item]:
            _bit_add(bit, item, -1)
            tied[segment[item]] -= 1


@njit
def rekey(ties, item: int, s: int, key: float) -> None:  # type: ignore[no-untyped-def]
    """Item (of segment s) has a new (finite) key: it moves to its place in the segment's
    order, the one a stable sort gives (by key, ties in index order: the others' keys did
    not change), and the tie group is counted again from the least."""
    start, keys, order, low, admit, gone, admitted, bit, tied, _ = ties
    keys[item] = key
    a, b = start[s], start[s + 1]
    if tied[s] > 0:
        for j in range(a, b):
            if admitted[j] and not gone[j]:
                _bit_add(bit, j, -1)
    admitted[a:b] = False
    tied[s] = 0
    at = a
    while order[at] != item:
        at += 1
    while at + 1 < b and _before(keys, order[at + 1], item):
        order[at] = order[at + 1]
        at += 1
    while at > a and _before(keys, item, order[at - 1]):
        order[at] = order[at - 1]
        at -= 1
    order[at] = item
    low[s] = admit[s] = a


@njit(inline="always")
def _before(keys: np.ndarray, i: int, j: int) -> bool:
    """Whether item i comes before item j in a stable sort by key."""
    return keys[i] < keys[j] or (keys[i] == keys[j] and i < j)


@njit
def candidates(members: np.ndarray, active: np.ndarray, wanting: np.ndarray,
               role_of: np.ndarray, n_roles: int, values: np.ndarray,
               role_values: np.ndarray):  # type: ignore[no-untyped-def]  # fmt: skip
    """The fill's candidates (`members` still active and wanting, grouped by role when
    `n_roles` > 0, roles ascending): (finite, kept). `finite` is False when a candidate's
    value or its role's is not finite (then no pick may be drawn). `kept` is (live: the
    candidates; at: each framework slot's position in live, -1 if none; bucket: each
    position's bucket; role: each bucket's role; left: candidates left in each bucket;
    frameworks: `Ties` of the candidates' values by bucket; roles: `Ties` of the buckets'
    role values, one segment)."""
    live = np.empty(members.shape[0], dtype=np.int64)
    m = 0
    finite = True
    for n in members:
        if active[n] and wanting[n]:
            if not np.isfinite(values[n]):
                finite = False
            if n_roles > 0 and not np.isfinite(role_values[role_of[n]]):
                finite = False
            live[m] = n
            m += 1
    live = live[:m]
    at = np.full(active.shape[0], -1, dtype=np.int64)
    start = np.empty(m + 1, dtype=np.int64)
    role = np.empty(max(m, 1), dtype=np.int64)
    bucket = np.empty(m, dtype=np.int64)
    buckets = 0
    for j in range(m):
        key = role_of[live[j]] if n_roles > 0 else 0
        if j == 0 or key != role[buckets - 1]:
            start[buckets] = j
            role[buckets] = key
            buckets += 1
        bucket[j] = buckets - 1
        at[live[j]] = j
    start[buckets] = m
    start = start[: buckets + 1]
    role = role[:buckets]
    left = start[1:] - start[:-1]
    keys = np.empty(m)
    for j in range(m):
        keys[j] = values[live[j]] if finite else 0.0
    role_keys = np.zeros(buckets)
    if n_roles > 0 and finite:
        for b in range(buckets):
            role_keys[b] = role_values[role[b]]
    frameworks = ties_of(keys, start)
    roles = ties_of(role_keys, np.array([0, buckets], dtype=np.int64))
    return finite, (live, at, bucket, role, left, frameworks, roles)


@njit
def pick(kept, n_roles: int, active: np.ndarray, eligible: np.ndarray, floor: np.ndarray,
         residual: np.ndarray, witness: np.ndarray, fresh: np.ndarray, near: np.ndarray,
         rng: np.random.Generator) -> int:  # type: ignore[no-untyped-def]  # fmt: skip
    """`_pick_loop`'s pick among the kept candidates, retiring (`active`, and here) each
    picked one that fits nowhere; -1 when none is left."""
    return pick_into(kept, n_roles, active, eligible, floor, residual, witness, fresh, near,
                     rng, np.empty(residual.shape[1]))  # fmt: skip


@leaf
def pick_into(kept, n_roles: int, active: np.ndarray, eligible: np.ndarray, floor: np.ndarray,
              residual: np.ndarray, witness: np.ndarray, fresh: np.ndarray, near: np.ndarray,
              rng: np.random.Generator,
              bound: np.ndarray) -> int:  # type: ignore[no-untyped-def]  # fmt: skip
    """`pick` with a scratch (R,) array `bound`: it allocates nothing, so a fill's loop
    retires a framework without counting references to the 25 arrays it unpacks."""
    # Unpacked once: the helpers take arrays, not the tuples (each unpacking costs).
    live, _, _, _, left, frameworks, roles = kept
    f_start, f_keys, f_order, f_low, f_admit, f_gone, f_admitted, f_bit, f_tied, f_seg = (
        frameworks
    )
    r_start, r_keys, r_order, r_low, r_admit, r_gone, r_admitted, r_bit, r_tied, r_seg = roles
    _most_free(residual, near, bound)
    while True:
        b = 0
        if n_roles > 0:
            k = _count(r_start, r_keys, r_order, r_low, r_admit, r_gone, r_admitted, r_bit,
                       r_tied, 0)  # fmt: skip
            if k == 0:
                return -1
            b = _select(r_start, r_order, r_low, r_bit, 0, k,
                        0 if k == 1 else below32(rng, k))  # fmt: skip
        elif left.shape[0] == 0:
            return -1
        k = _count(f_start, f_keys, f_order, f_low, f_admit, f_gone, f_admitted, f_bit, f_tied,
                   b)  # fmt: skip
        if k == 0:
            return -1  # no roles, and no candidate is left
        j = _select(f_start, f_order, f_low, f_bit, b, k, 0 if k == 1 else below32(rng, k))
        framework = live[j]
        reach = fresh[framework] or not _out_of_reach(framework, floor, residual, witness,
                                                      bound)  # fmt: skip
        if reach and _fits_somewhere(framework, eligible, floor, residual, witness,
                                     fresh[framework], near):  # fmt: skip
            return framework
        active[framework] = False
        _remove(f_gone, f_admitted, f_bit, f_tied, f_seg, j)
        left[b] -= 1
        if left[b] == 0:
            _remove(r_gone, r_admitted, r_bit, r_tied, r_seg, b)


@njit(inline="always")
def _most_free(residual: np.ndarray, near: np.ndarray, bound: np.ndarray) -> None:
    """bound[r] = the most of resource r free at any agent `near` (-inf where there is
    none)."""
    bound[:] = -np.inf
    for i in near:
        for r in range(residual.shape[1]):
            if residual[i, r] > bound[r]:
                bound[r] = residual[i, r]


@leaf
def _out_of_reach(n: int, floor: np.ndarray, residual: np.ndarray, witness: np.ndarray,
                  bound: np.ndarray) -> bool:  # fmt: skip
    """Whether framework n, not fresh, needs more of some resource than any agent near has
    and than its witness has: then `_fits_somewhere` tries those agents alone and finds
    none (the same answer, without a test per agent)."""
    w = witness[n]
    for r in range(floor.shape[1]):
        f = floor[n, r]
        if f > bound[r] and (w < 0 or residual[w, r] < f):
            return True
    return False


@njit
def drop(kept, j: int) -> None:  # type: ignore[no-untyped-def]
    """Candidate position `j` is no longer one (retired, or it wants no more tasks)."""
    _, _, bucket, _, left, frameworks, roles = kept
    _remove(frameworks[5], frameworks[6], frameworks[7], frameworks[8], frameworks[9], j)
    b = bucket[j]
    left[b] -= 1
    if left[b] == 0:
        _remove(roles[5], roles[6], roles[7], roles[8], roles[9], b)


@njit
def served(kept, n_roles: int, framework: int, wanting: bool, value: float,
           role_value: float) -> bool:  # type: ignore[no-untyped-def]  # fmt: skip
    """A grant to `framework` (a candidate): it stays one while `wanting`, with its new
    `value`, and at role level its role (while it has candidates) has `role_value`.
    Returns whether the next pick may draw: False when one of those is not finite."""
    _, at, bucket, _, left, frameworks, roles = kept
    j = at[framework]
    b = bucket[j]
    finite = True
    if wanting:
        rekey(frameworks, j, b, value)
        finite = bool(np.isfinite(value))
    else:
        drop(kept, j)
    if n_roles > 0 and left[b] > 0:
        rekey(roles, b, 0, role_value)
        finite = finite and bool(np.isfinite(role_value))
    return finite
