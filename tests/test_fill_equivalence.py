"""The fill makes exactly the grants it made before issue 28's speed-ups, in the same order.

`tests/support/reference_fill` is a frozen copy of progressive filling as it was; every
instance here is filled by both from the same seed, and the grant sequences, the final
states and the random generators' states afterwards must be identical (the last one shows
both drew the same numbers, which is what keeps later draws, e.g. the next allocation run's,
the same too).
"""

from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.reference_fill.filling import progressive_fill as reference_fill

from allocator import native_fill
from allocator.filling import progressive_fill
from allocator.model import Cluster
from allocator.policy import PAPER_SCHEDULERS, Selection, Ties, scheduler
from allocator.policy.levels import Level
from allocator.state import AllocationState, Mode
from allocator.workloads import google_like_cluster

SELECTIONS = (
    Selection.RRR,
    Selection.RANDOM,
    Selection.JOINT,
    Selection.BESTFIT,
    Selection.FIRSTFIT,
)


@st.composite
def instances(draw: st.DrawFn) -> Cluster:
    """Small clusters built to tie: few agent types and small integer demands (many equal
    shares), sometimes fractional ones; weights, constraints, task limits, frameworks
    without demand and several roles, each only sometimes."""
    n_r = draw(st.integers(1, 3))
    n_a = draw(st.integers(1, 14))
    n_f = draw(st.integers(1, 9))
    kinds = draw(
        st.lists(st.lists(st.integers(1, 24), min_size=n_r, max_size=n_r), min_size=1, max_size=4)
    )
    capacity = np.array(
        [kinds[draw(st.integers(0, len(kinds) - 1))] for _ in range(n_a)], dtype=float
    )
    if n_r > 1 and draw(st.booleans()):  # a resource some agents lack
        capacity[draw(st.integers(0, n_a - 1)), n_r - 1] = 0.0
    demand = np.array(
        draw(
            st.lists(
                st.lists(st.integers(0, 6), min_size=n_r, max_size=n_r).filter(any),
                min_size=n_f,
                max_size=n_f,
            )
        ),
        dtype=float,
    )
    if draw(st.booleans()):
        demand = demand * draw(st.sampled_from([0.25, 0.3, 1.7]))
    if n_f > 1 and draw(st.booleans()):  # a framework that declared no demand
        demand[draw(st.integers(0, n_f - 1))] = np.nan
    weight = draw(st.lists(st.sampled_from([1.0, 1.0, 0.5, 2.0, 3.0]), min_size=n_f, max_size=n_f))
    if draw(st.booleans()):
        eligible = np.array(
            draw(st.lists(st.booleans(), min_size=n_f * n_a, max_size=n_f * n_a))
        ).reshape(n_f, n_a)
    else:
        eligible = np.ones((n_f, n_a), dtype=bool)
    max_tasks = draw(
        st.lists(st.one_of(st.just(np.inf), st.integers(1, 8)), min_size=n_f, max_size=n_f)
    )
    cluster = Cluster.from_arrays(
        capacity, demand, ("cpus", "mem", "disk")[:n_r], weight, eligible, max_tasks
    )
    n_roles = draw(st.integers(1, min(3, n_f)))
    if n_roles > 1:
        role_of = np.array(
            draw(st.lists(st.integers(0, n_roles - 1), min_size=n_f, max_size=n_f)), dtype=np.int64
        )
        role_weight = draw(
            st.lists(st.sampled_from([1.0, 2.0, 0.5]), min_size=n_roles, max_size=n_roles)
        )
        cluster = dataclasses.replace(
            cluster,
            role_of=role_of,
            role_names=tuple(f"r{g}" for g in range(n_roles)),
            role_weight=np.array(role_weight),
        )
    return cluster


def fill_both(
    cluster: Cluster,
    name: str,
    selection: Selection,
    mode: Mode,
    ties: Ties,
    level: Level,
    seed: int,
    engine: bool = False,
    max_grants: int | None = None,
) -> tuple[list, list]:
    """Fill fresh states of `cluster` with the new and the frozen fill; assert the states and
    the generators end equal and return both grant lists."""
    chosen = scheduler(name)
    out = []
    for fill in (progressive_fill, reference_fill):
        state = AllocationState(cluster, mode)
        rng = np.random.default_rng(seed)
        kwargs = {"agent_pass": True, "single_offer": mode is Mode.OBLIVIOUS} if engine else {}
        grants = fill(state, chosen.criterion(), selection, rng, ties, level=level,
                      max_grants=max_grants, **kwargs)  # fmt: skip
        out.append((grants, state, rng.bit_generator.state))
    (new, new_state, new_rng), (old, old_state, old_rng) = out
    np.testing.assert_array_equal(new_state.tasks, old_state.tasks)
    np.testing.assert_array_equal(new_state.residual, old_state.residual)
    np.testing.assert_array_equal(new_state.alloc, old_state.alloc)
    np.testing.assert_array_equal(new_state.count, old_state.count)
    np.testing.assert_array_equal(new_state.changed_at, old_state.changed_at)
    assert new_state.changes == old_state.changes
    np.testing.assert_array_equal(new_state.wanting(), old_state.wanting())
    assert new_rng == old_rng
    return new, old


@pytest.mark.parametrize("name", PAPER_SCHEDULERS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cluster=instances(),
    selection=st.sampled_from(SELECTIONS),
    mode=st.sampled_from(list(Mode)),
    ties=st.sampled_from(list(Ties)),
    level=st.sampled_from(list(Level)),
    seed=st.integers(0, 2**32 - 1),
    engine=st.booleans(),
)
def test_same_grants_in_the_same_order(
    name: str,
    cluster: Cluster,
    selection: Selection,
    mode: Mode,
    ties: Ties,
    level: Level,
    seed: int,
    engine: bool,
) -> None:
    new, old = fill_both(cluster, name, selection, mode, ties, level, seed, engine)
    assert [(g.framework, g.agent, g.tasks) for g in new] == [
        (g.framework, g.agent, g.tasks) for g in old
    ]


@pytest.mark.parametrize("name", PAPER_SCHEDULERS)
def test_same_grants_on_a_google_like_cluster(name: str) -> None:
    """Hundreds of agents of the Google mix, tens of frameworks: long fills in which the
    shares move through many orders, agents fill up unevenly and ties come and go."""
    cluster = google_like_cluster(300, 40, seed=7)
    chosen = scheduler(name)
    with mock.patch.object(native_fill, "MIN_PAIRS", 0):
        new, old = fill_both(cluster, name, chosen.default_selection, Mode.CHARACTERIZED,
                             Ties.RANDOM, Level.FRAMEWORK, seed=11)  # fmt: skip
    assert len(new) > 1000
    assert [(g.framework, g.agent) for g in new] == [(g.framework, g.agent) for g in old]


@pytest.mark.parametrize("name", ["drf", "tsf", "psdsf", "psdsf-scan", "rpsdsf", "bfdrf"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cluster=instances(),
    seed=st.integers(0, 2**32 - 1),
    max_grants=st.one_of(st.none(), st.integers(0, 40)),
)
def test_native_fill_makes_the_same_grants(name: str, cluster: Cluster, seed: int,
                                           max_grants: int | None) -> None:  # fmt: skip
    """Where the compiled kernels take the fill (rrr or BF-DRF's best fit, characterized,
    random ties), on
    every instance: weights, constraints, limits, frameworks without demand, a grant
    limit; `psdsf-scan` is PS-DSF past `MAX_TYPES` agent types (evaluated per visit)."""
    chosen = scheduler(name.split("-")[0])
    criterion = chosen.criterion()
    selection = chosen.default_selection
    state = AllocationState(cluster)
    level = Level.FRAMEWORK
    max_types = 0 if name.endswith("scan") else native_fill.MAX_TYPES
    with mock.patch.multiple(native_fill, MIN_PAIRS=0, MAX_TYPES=max_types):
        assert native_fill.applies(state, criterion, selection, Ties.RANDOM, level, False,
                                   False)  # fmt: skip
        new, old = fill_both(cluster, chosen.name, selection, Mode.CHARACTERIZED, Ties.RANDOM,
                             level, seed, max_grants=max_grants)  # fmt: skip
    assert [(g.framework, g.agent, g.tasks) for g in new] == [
        (g.framework, g.agent, g.tasks) for g in old
    ]


def test_the_kernels_take_the_default_static_fills() -> None:
    """The paper's schedulers with their default selections go native on large instances
    (else the speed-up and the tests above would be about nothing), and neither the engine's
    runs nor small instances do."""
    assert not native_fill.applies(AllocationState(google_like_cluster(20, 4, seed=1)),
                                   scheduler("drf").criterion(), Selection.RRR, Ties.RANDOM,
                                   Level.FRAMEWORK, False, False)  # fmt: skip
    state = AllocationState(google_like_cluster(1000, 100, seed=1))
    for name in ("drf", "tsf", "psdsf", "rpsdsf", "bfdrf"):
        chosen = scheduler(name)
        args = (state, chosen.criterion(), chosen.default_selection, Ties.RANDOM)
        assert native_fill.applies(*args, Level.FRAMEWORK, False, False)
        if name != "bfdrf":  # best fit has no agent pass: the engine's state stops it
            assert not native_fill.applies(*args, Level.FRAMEWORK, True, False)
    oblivious = AllocationState(google_like_cluster(1000, 100, seed=1), Mode.OBLIVIOUS)
    assert not native_fill.applies(oblivious, scheduler("drf").criterion(), Selection.RRR,
                                   Ties.RANDOM, Level.FRAMEWORK, False, False)  # fmt: skip


def test_the_order_shifts_move_exactly_their_span() -> None:
    """The kernels' in-place shifts (unsigned indices, for speed) against slicing by hand:
    left moves row[p + 1:q] to row[p:q - 1], right moves row[p:q] to row[p + 1:q + 1], and
    an empty span moves nothing."""
    from allocator.fill_kernels import _shift_left, _shift_right

    for p, q in [(2, 6), (0, 8), (3, 3), (0, 0), (7, 8)]:
        row = np.arange(10, dtype=np.int64) * 10
        want = row.copy()
        want[p : max(q - 1, p)] = row[p + 1 : q]
        _shift_left(row, p, q)
        np.testing.assert_array_equal(row, want)
        row = np.arange(10, dtype=np.int64) * 10
        want = row.copy()
        want[p + 1 : q + 1] = row[p:q]
        _shift_right(row, p, q)
        np.testing.assert_array_equal(row, want)
