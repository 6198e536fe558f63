"""A min segment tree over a framework's kept best-fit distances (issue 28).

After a grant, best fit for the framework just served needs its H at the one agent the
grant changed; the least H and the agents tied with it are then a min and a walk over
every agent (`bestfit_index._scan_kernel`). A run that serves a new job thousands of
tasks in a row over thousands of agents spends most of its time there. The tree keeps
the min: updating one leaf and reading the root cost O(log A), and the ties are found
leftmost first, so in ascending agent order, in O(k log A).

Leaves are the scanned positions' H, +inf where the agent is infeasible (its kept
distance is NaN): `h <= limit` then holds for a leaf exactly when it holds for the
distance, for any finite limit.
"""

from __future__ import annotations

import numpy as np

from allocator.jit import njit


@njit(inline="always")
def leaves(n: int) -> int:
    """The leaves of a tree over n positions (a power of two, at least 1); the tree is an
    array of twice that."""
    size = 1
    while size < n:
        size *= 2
    return size


@njit
def build(tree: np.ndarray, distance: np.ndarray, agents: np.ndarray, every: bool,
          n: int) -> int:  # fmt: skip
    """Fill the tree with the distances of positions 0..n-1 (agent `at`, or `agents[at]`
    unless `every`); returns how many are feasible (not NaN)."""
    size = leaves(n)
    feasible = 0
    for at in range(size):
        leaf = np.inf
        if at < n:
            h = distance[at if every else agents[at]]
            if not np.isnan(h):
                feasible += 1
                leaf = h
        tree[size + at] = leaf
    for node in range(size - 1, 0, -1):
        tree[node] = min(tree[2 * node], tree[2 * node + 1])
    return feasible


@njit
def update(tree: np.ndarray, n: int, at: int, h: float) -> None:
    """Position `at` now has distance h (NaN: infeasible)."""
    size = leaves(n)
    node = size + at
    tree[node] = np.inf if np.isnan(h) else h
    node //= 2
    while node >= 1:
        tree[node] = min(tree[2 * node], tree[2 * node + 1])
        node //= 2


@njit
def at_most(tree: np.ndarray, n: int, limit: float, agents: np.ndarray, every: bool,
            out: np.ndarray) -> int:  # fmt: skip
    """The agents whose distance is <= limit, ascending, into `out`; returns how many."""
    size = leaves(n)
    stack = np.empty(64, dtype=np.int64)
    stack[0] = 1
    top = 1
    k = 0
    while top > 0:
        top -= 1
        node = stack[top]
        if not tree[node] <= limit:
            continue
        if node >= size:
            at = node - size
            out[k] = at if every else agents[at]
            k += 1
        else:  # the right child waits under the left: positions come out ascending
            stack[top] = 2 * node + 1
            stack[top + 1] = 2 * node
            top += 2
    return k
