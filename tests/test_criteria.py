"""Criterion values against hand-computed numbers (paper 002 example; paper 001 Fig. 1)."""

from __future__ import annotations

import numpy as np
import pytest
from support.instances import make_cluster

from allocator.errors import ScenarioError
from allocator.policy.bestfit import fit_distance
from allocator.policy.drf import DRF
from allocator.policy.psdsf import PSDSF
from allocator.policy.rpsdsf import RPSDSF
from allocator.policy.slots import with_slots
from allocator.policy.tsf import TSF
from allocator.state import AllocationState, Mode
from allocator.trials import run_trials


def test_gamma(example):
    assert np.array_equal(example.fit(), [[20, 6], [6, 20]])


def test_drf_equals_tsf_equals_x_over_26(example):
    state = AllocationState(example)
    state.grant(0, 0, 3)
    state.grant(0, 1, 1)
    state.grant(1, 1, 2)
    expected = np.array([4, 2]) / 26
    assert DRF().values(state) == pytest.approx(expected)
    assert TSF().values(state) == pytest.approx(expected)


def test_psdsf_per_server_shares(example):
    state = AllocationState(example)
    state.grant(0, 0, 3)
    state.grant(1, 1, 4)
    k = PSDSF().matrix(state)
    assert k == pytest.approx(np.array([[3 / 20, 3 / 6], [4 / 6, 4 / 20]]))
    assert PSDSF().column(state, 1) == pytest.approx(k[:, 1])


def test_rpsdsf_on_residual(example):
    state = AllocationState(example)
    state.grant(0, 0, 1)
    k = RPSDSF().matrix(state)
    assert k[0, 0] == pytest.approx(1 / 19)
    assert k[0, 1] == pytest.approx(1 / 6)
    assert RPSDSF().column(state, 0) == pytest.approx(k[:, 0])


def test_rpsdsf_skips_exhausted_resource():
    cluster = make_cluster([[10, 10]], [[1, 0], [1, 1]])
    state = AllocationState(cluster)
    state.grant(0, 0, 1)
    state.grant(1, 0, 9)  # cpus gone, 1 mem left
    # cpus (residual 0) is skipped, not infinite: f1 holds no mem, f2 holds 9 of the 1 left.
    assert RPSDSF().column(state, 0) == pytest.approx([0.0, 9.0])


def test_weights_divide_the_criterion(example):
    weighted = make_cluster([[100, 30], [30, 100]], [[5, 1], [1, 5]], weight=[2, 1])
    state = AllocationState(weighted)
    state.grant(0, 0, 2)
    state.grant(1, 0, 2)
    assert DRF().values(state) == pytest.approx(np.array([10 / 130 / 2, 10 / 130]))


def test_best_fit_distance_at_empty_state(example):
    total = example.total
    h1 = fit_distance(example.demand[0], example.capacity, total)
    h2 = fit_distance(example.demand[1], example.capacity, total)
    assert h1 == pytest.approx([0.1, 3.1333333])
    assert h2 == pytest.approx([4.7, 1.6666667])


def test_tsf_uses_observed_demand_in_oblivious_mode(example):
    state = AllocationState(example, Mode.OBLIVIOUS)
    assert np.isnan(state.known_demand).all()
    assert TSF().values(state) == pytest.approx([0, 0])
    state.grant(0, 0, 2)
    assert np.array_equal(state.known_demand[0], [5, 1])
    assert TSF().values(state)[0] == pytest.approx(2 / 26)


def test_drfh_example_of_paper_001():
    """Paper 001 Fig. 1: S1=(2 CPU, 12 GB), S2=(12, 2); U1 task (0.2, 1), U2 task (1, 0.2).

    DRFH puts each user on its matching server: 10 tasks each, the optimum. Best fit does
    this exactly. PS-DSF and rPS-DSF need the waste tie-break: at x = 0 every framework ties,
    and a random tie can hand S1's first task to U2, after which S1 holds only 5 of U1's.
    """
    cluster = make_cluster([[2, 12], [12, 2]], [[0.2, 1], [1, 0.2]])
    best_fit = run_trials(cluster, "bfdrf", trials=20, seed=1)
    assert np.array_equal(best_fit.tasks_mean, [[10, 0], [0, 10]])
    assert best_fit.optimum.tasks == 20
    for name in ("rpsdsf", "psdsf"):
        waste = run_trials(cluster, name, ties="waste", trials=20, seed=1, with_optimum=False)
        assert np.array_equal(waste.tasks_mean, [[10, 0], [0, 10]]), name
        random = run_trials(cluster, name, trials=200, seed=1, with_optimum=False)
        assert random.totals.mean() < 20, name


def test_slot_baseline_cuts_each_server_by_its_smaller_fraction_of_the_largest():
    capacity = np.array([[16.0, 64.0], [8.0, 16.0], [1.0, 64.0]])
    demand = np.array([[2.0, 1.0], [0.5, 8.0]])
    resources, cap, dem = with_slots(
        ("cpus", "mem"), capacity, demand, np.array([16.0, 64.0]), 14
    )
    assert resources == ("cpus", "mem", "slots")
    # 14 x min(16/16, 64/64) = 14; 14 x min(8/16, 16/64) = 3.5 -> 3; 14 x 1/16 -> 0.
    assert cap[:, 2].tolist() == [14, 3, 0]
    assert np.array_equal(cap[:, :2], capacity)
    assert dem[:, 2].tolist() == [1, 1] and np.array_equal(dem[:, :2], demand)
    with pytest.raises(ScenarioError, match="at least 1"):
        with_slots(("cpus", "mem"), capacity, demand, np.array([16.0, 64.0]), 0)
