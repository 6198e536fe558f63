"""The min tree of kept best-fit distances (`allocator.policy.min_tree`) against brute force:
after any sequence of one-position updates, its least leaf is the least feasible distance
and the positions at most a limit are those whose distance is, ascending."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.policy import min_tree

DISTANCES = st.one_of(
    st.just(np.nan), st.just(np.inf), st.sampled_from([0.0, 0.5, 1.0]), st.floats(0, 10)
)


@settings(max_examples=300, deadline=None)
@given(
    distances=st.lists(DISTANCES, min_size=1, max_size=70),
    updates=st.lists(st.tuples(st.integers(0, 69), DISTANCES), max_size=30),
    every=st.booleans(),
    limit=st.floats(0, 10),
)
def test_least_and_ties_are_the_walks(distances, updates, every, limit):
    n = len(distances)
    # Not `every`: position at reads agent agents[at] (ascending, with gaps).
    agents = np.arange(n) if every else 3 * np.arange(n) + 1
    distance = np.full(int(agents[-1]) + 1, -7.0)  # unscanned agents: never read
    distance[agents] = distances
    tree = np.empty(2 * min_tree.leaves(n))
    feasible = min_tree.build(tree, distance, agents, every, n)
    for at, h in updates:
        at %= n
        distance[agents[at]] = h
        min_tree.update(tree, n, at, h)
    scanned = distance[agents]
    assert feasible == int((~np.isnan(np.array(distances))).sum())
    open_ = scanned[~np.isnan(scanned)]
    assert tree[1] == (open_.min() if open_.size else np.inf)
    out = np.empty(n, dtype=np.int64)
    k = min_tree.at_most(tree, n, limit, agents, every, out)
    assert out[:k].tolist() == agents[scanned <= limit].tolist()
