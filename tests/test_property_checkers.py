"""The fairness-property checkers of allocator/properties.py on hand-made allocations whose
answer is worked out by hand: each property once held and once broken."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import OptimizeResult
from support.instances import make_cluster

import allocator.properties as properties
from allocator.properties import (
    bottleneck,
    bottleneck_resource,
    envy,
    pareto_improvement,
    sharing_incentive,
    uniform_tasks,
)


@pytest.fixture
def fig1():
    """Paper 001 Fig. 1: s1 = (2 CPU, 12 GB), s2 = (12, 2); u1 (0.2, 1), u2 (1, 0.2)."""
    return make_cluster([[2, 12], [12, 2]], [[0.2, 1], [1, 0.2]])


# Naive per-server DRF's 6 + 6 (5 on the agent that suits a framework, 1 on the other) and
# DRFH's 10 + 10 (paper 001 Fig. 1); both are feasible (s1: 0.2*5 + 1 = 2 CPU, 5.2 GB).
PER_SERVER_DRF = np.array([[5.0, 1.0], [1.0, 5.0]])
DRFH = np.array([[10.0, 0.0], [0.0, 10.0]])


def test_uniform_share_is_half_of_every_agent(fig1):
    # gamma: u1 10 on s1 (CPU), 2 on s2 (mem); u2 2 on s1, 10 on s2; half of 12 each.
    np.testing.assert_allclose(uniform_tasks(fig1), [6.0, 6.0])


@pytest.mark.parametrize("integer", [False, True])
def test_sharing_incentive(fig1, integer):
    assert list(sharing_incentive(fig1, PER_SERVER_DRF, integer)) == []  # exactly 6 each
    short = PER_SERVER_DRF.copy()
    short[0, 0] = 4.0  # u1 runs 5 < 6
    assert list(sharing_incentive(fig1, short, integer)) == [0]


def test_sharing_incentive_is_capped_by_the_task_limit():
    cluster = make_cluster([[2, 12], [12, 2]], [[0.2, 1], [1, 0.2]], max_tasks=[3, np.inf])
    x = np.array([[3.0, 0.0], [1.0, 5.0]])  # u1 at its limit of 3 < 6 is not short-changed
    assert list(sharing_incentive(cluster, x)) == []


def test_per_server_drf_is_not_pareto_optimal_and_drfh_is(fig1):
    # Everyone at least 6 and the most tasks in all: DRFH's 20, 8 more than 12.
    assert pareto_improvement(fig1, PER_SERVER_DRF) == pytest.approx(8.0, abs=1e-6)
    assert pareto_improvement(fig1, PER_SERVER_DRF, integer=True) == pytest.approx(8.0)
    assert pareto_improvement(fig1, DRFH) == 0.0  # each agent holds its 10-task maximum
    assert pareto_improvement(fig1, DRFH, integer=True) == 0.0


def test_pareto_unknown_when_the_solver_does_not_finish(fig1, monkeypatch):
    """A solver stopped at its time limit with nothing better is "unknown" (NaN), never 0;
    an improvement it found before stopping still counts."""
    stopped = OptimizeResult(status=1, x=None, fun=None, success=False)
    monkeypatch.setattr(properties, "milp", lambda *a, **k: stopped)
    assert np.isnan(pareto_improvement(fig1, DRFH))
    # found a feasible 10 + 10 (as per-pair variables s1:u1, s2:u1, s1:u2, s2:u2) then stopped
    better = OptimizeResult(status=1, x=np.array([10.0, 0.0, 0.0, 10.0]), fun=-20.0)
    monkeypatch.setattr(properties, "milp", lambda *a, **k: better)
    assert pareto_improvement(fig1, PER_SERVER_DRF) == pytest.approx(8.0)


def test_envy_and_weights():
    one = make_cluster([[10, 10]], [[1, 1], [1, 1]])
    assert envy(one, np.array([[2.0], [6.0]])) == [(0, 1)]  # f1 would run 6 with f2's bundle
    assert envy(one, np.array([[4.0], [4.0]])) == []
    # with weights 1 and 3, f2's bundle scaled by 1/3 is worth 2 tasks to f1: no envy
    weighted = make_cluster([[10, 10]], [[1, 1], [1, 1]], weight=[1, 3])
    assert envy(weighted, np.array([[2.0], [6.0]])) == []
    assert envy(weighted, np.array([[1.0], [6.0]])) == [(0, 1)]


def test_envy_ignores_bundles_on_agents_the_envier_may_not_use():
    cluster = make_cluster([[10, 10], [10, 10]], [[1, 1], [1, 1]], eligible=[[1, 0], [1, 1]])
    assert envy(cluster, np.array([[2.0, 0.0], [0.0, 6.0]])) == []
    assert envy(cluster, np.array([[2.0, 0.0], [6.0, 0.0]])) == [(0, 1)]


def test_envy_by_whole_tasks():
    # f2's 2 tasks hold (4, 4): 4/3 of f1's (3, 3) tasks divisibly, but only 1 whole task.
    cluster = make_cluster([[10, 10]], [[3, 3], [2, 2]])
    x = np.array([[1.0], [2.0]])
    assert envy(cluster, x) == [(0, 1)]
    assert envy(cluster, x, integer=True) == []


def test_bottleneck_resource():
    # CPU is both frameworks' dominant resource on both agents.
    cpu = make_cluster([[10, 100], [20, 100]], [[1, 1], [2, 5]])
    assert bottleneck_resource(cpu) == 0
    assert bottleneck_resource(make_cluster([[100, 10], [100, 20]], [[1, 1], [5, 2]])) == 1
    fig1 = make_cluster([[2, 12], [12, 2]], [[0.2, 1], [1, 0.2]])
    assert bottleneck_resource(fig1) is None  # u1's dominant resource is mem on s1, CPU on s2
    # s3 (100, 10): f1 (1, 0.1) ties CPU and mem there, f2 (2, 5) is memory-dominated, which
    # matters only where f2 may run.
    capacity, demand = [[10, 100], [20, 100], [100, 10]], [[1, 0.1], [2, 5]]
    assert bottleneck_resource(make_cluster(capacity, demand)) is None
    assert bottleneck_resource(make_cluster(capacity, demand, eligible=[[1, 1, 1], [1, 1, 0]])) == 0


def test_bottleneck_fairness_is_max_min_in_the_bottleneck():
    # One agent (10 CPU, 100 mem), f1 (1, 1), f2 (2, 1): CPU is the bottleneck; max-min of the
    # CPU shares x1/10 = 2 x2/10 on 10 CPUs gives x = (5, 2.5).
    cluster = make_cluster([[10, 100]], [[1, 1], [2, 1]])
    assert bottleneck(cluster, np.array([[5.0], [2.5]])) == []
    assert bottleneck(cluster, np.array([[8.0], [1.0]])) == [(1, 0)]  # f2 (0.2) below f1 (0.8)
    fig1 = make_cluster([[2, 12], [12, 2]], [[0.2, 1], [1, 0.2]])
    assert bottleneck(fig1, DRFH) is None  # no bottleneck resource: not applicable
