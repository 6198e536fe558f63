"""Invariants of progressive filling on random small instances (hypothesis)."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support.instances import make_cluster

from allocator.engine_config import EngineConfig
from allocator.filling import progressive_fill
from allocator.model import Cluster
from allocator.policy import SCHEDULERS, Selection, Ties, scheduler
from allocator.policy.drf import DRF
from allocator.policy.selection import make_selector
from allocator.state import AllocationState, Mode


@st.composite
def clusters(draw: st.DrawFn, symmetric: bool = False) -> Cluster:
    n_r = draw(st.integers(2, 3))
    n_a = draw(st.integers(1, 4))
    n_f = draw(st.integers(2 if symmetric else 1, 4))
    positive_vector = st.lists(st.integers(0, 40), min_size=n_r, max_size=n_r).filter(any)
    capacity = draw(st.lists(positive_vector, min_size=n_a, max_size=n_a))
    small_vector = st.lists(st.integers(0, 12), min_size=n_r, max_size=n_r).filter(any)
    if symmetric:
        demand = [draw(small_vector)] * n_f
        return make_cluster(capacity, demand, resources=("cpus", "mem", "disk")[:n_r])
    demand = draw(st.lists(small_vector, min_size=n_f, max_size=n_f))
    weight = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=n_f, max_size=n_f))
    eligible = draw(
        st.lists(st.lists(st.booleans(), min_size=n_a, max_size=n_a), min_size=n_f, max_size=n_f)
    )
    max_tasks = draw(
        st.lists(st.one_of(st.just(np.inf), st.integers(0, 6)), min_size=n_f, max_size=n_f)
    )
    return make_cluster(
        capacity, demand, weight, eligible, max_tasks, resources=("cpus", "mem", "disk")[:n_r]
    )


policies = st.tuples(
    st.sampled_from(sorted(SCHEDULERS)),
    st.sampled_from(list(Selection)),
    st.sampled_from(list(Mode)),
    st.sampled_from(list(Ties)),
)


def fill(cluster: Cluster, policy: tuple, seed: int) -> AllocationState:
    name, selection, mode, ties = policy
    state = AllocationState(cluster, mode)
    rng = np.random.default_rng(seed)
    params = EngineConfig().policy_params()  # FUGA's selection takes K and lambda
    progressive_fill(state, scheduler(name).criterion(), selection, rng, ties, params=params)
    return state


@settings(max_examples=400, deadline=None)
@given(clusters(), policies, st.integers(0, 2**32 - 1))
def test_fill_is_feasible_and_stops_only_when_nothing_fits(cluster, policy, seed):
    state = fill(cluster, policy, seed)
    demand = cluster.demand
    used = np.einsum("na,nr->ar", state.tasks, demand)
    assert (used <= cluster.capacity + 1e-9).all(), "capacity exceeded"
    assert np.allclose(state.residual, cluster.capacity - used)
    assert (state.tasks[~cluster.eligible] == 0).all(), "task on an ineligible agent"
    assert (state.tasks.sum(axis=1) <= cluster.max_tasks).all(), "task limit exceeded"
    assert (state.tasks >= 0).all()
    # Progressive filling ends only when no framework that wants a task fits anywhere.
    room = cluster.capacity - used
    fits = (demand[:, None, :] <= room[None, :, :] + 1e-9).all(axis=2) & cluster.eligible
    wants = state.tasks.sum(axis=1) < cluster.max_tasks
    assert not (fits & wants[:, None]).any(), "stopped while a task still fits"


@settings(max_examples=150, deadline=None)
@given(clusters(), policies, st.integers(0, 2**32 - 1))
def test_same_seed_same_answer(cluster, policy, seed):
    assert np.array_equal(fill(cluster, policy, seed).tasks, fill(cluster, policy, seed).tasks)


@settings(max_examples=300, deadline=None)
@given(
    clusters(symmetric=True),
    # FUGA does not serve the lowest criterion at every grant (servers pick whole
    # combinations among their K best by utilisation), so the bound below is not its own.
    st.sampled_from(sorted(set(SCHEDULERS) - {"fuga"})),
    st.integers(0, 2**32 - 1),
)
def test_doubling_a_weight_never_lowers_its_tasks(cluster, name, seed):
    """Identical frameworks (characterized mode), framework 1's weight doubled.

    Every grant goes to a lowest x_m / phi_m among frameworks that fit, and identical
    frameworks fit in the same places, so when filling stops x_1 / 2 >= x_m - 1 for every
    other m. With T tasks in all (the same whatever the weights, the tasks being identical),
    that gives x_1 >= 2(T - F + 1)/(F + 1), which is at least the ceil(T/F) framework 1 can
    have at weight 1 once T >= F(3F - 1)/(F - 1): below that, a random tie at x = 0 may
    legitimately hand the few tasks to the others.
    """
    policy = (name, scheduler(name).default_selection, Mode.CHARACTERIZED, Ties.RANDOM)
    base = fill(cluster, policy, seed).tasks.sum(axis=1)
    weight = cluster.weight.copy()
    weight[0] = 2.0
    doubled = fill(dataclasses.replace(cluster, weight=weight), policy, seed).tasks.sum(axis=1)
    total, frameworks = int(base.sum()), len(base)
    assert doubled.sum() == total
    assert (doubled[0] >= 2 * (doubled[1:] - 1)).all()
    assert base.max() - base.min() <= 1
    if total * (frameworks - 1) >= frameworks * (3 * frameworks - 1):
        assert doubled[0] >= base[0]


@settings(max_examples=200, deadline=None)
@given(
    clusters(),
    st.sampled_from([Selection.RANDOM, Selection.RRR]),
    st.integers(0, 2**32 - 1),
)
def test_drf_serves_the_lowest_dominant_share(cluster, selection, seed):
    """Every DRF grant goes to a framework whose weighted dominant share is the lowest among
    those that fit a task on that agent; so when filling stops, any framework's share exceeds
    another's by at most its own last task, unless the other could not fit there."""
    state = AllocationState(cluster)
    criterion = DRF()
    selector = make_selector(selection, state, criterion, np.random.default_rng(seed))
    total = np.where(cluster.total > 0, cluster.total, np.inf)
    task_share = (cluster.demand / total).max(axis=1) / cluster.weight
    for _ in range(10_000):
        pick = selector.next()
        if pick is None:
            break
        n, a = pick
        shares = criterion.values(state)
        fits = state.fits_agent(a)
        assert fits[n]
        assert shares[n] <= shares[fits].min() + 1e-12
        state.grant(n, a)
    else:  # pragma: no cover - the instances are small
        raise AssertionError("fill did not stop")
    # Within one task: a framework with more than one task's share above another that was
    # never blocked (fits on the agents where it is eligible at the end) cannot exist, since
    # nothing fits anywhere now; check the weaker end state directly on unconstrained ones.
    shares = criterion.values(state)
    free = cluster.eligible.all(axis=1) & np.isinf(cluster.max_tasks)
    if free.sum() >= 2 and len(set(map(tuple, cluster.demand[free]))) == 1:
        gap = shares[free].max() - shares[free].min()
        assert gap <= task_share[free].max() + 1e-12
