"""FUGA (paper 003): the worked example of its Fig. 2 and Sec. 4.3, the game solver, and
invariants of the scheduler built on it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.commands import run_fairbroker
from support.instances import make_cluster

from allocator.errors import ScenarioError
from allocator.filling import progressive_fill
from allocator.policy import Selection, scheduler
from allocator.policy.base import max_ratio
from allocator.policy.fuga import (
    Fuga,
    FugaParams,
    ServerOptions,
    backward_induction,
    enumerate_combinations,
    fairness_deviation,
    min_utilisation,
    skewness,
    solve_block,
    top_strategies,
    utilisation,
)
from allocator.state import AllocationState, Mode

EXAMPLE = Path(__file__).resolve().parents[1] / "allocator" / "data" / "paper002-example.yaml"

# Paper 003, Fig. 2: VM types (cpus, mem GB, disk GB), idle resources of the two servers and
# their initial resource spaces (Sec. 4.3, Step 2).
VM = np.array([(2, 4, 20), (1, 1, 10), (2, 2, 10)], dtype=float)
IDLE = [np.array([4.0, 8, 40]), np.array([4.0, 6, 50])]
SPACE = [np.array([6.0, 16, 100]), np.array([8.0, 20, 120])]


def _by_hand(idle: np.ndarray) -> set[tuple[int, ...]]:
    """Every non-empty count vector that fits, by brute force over small counts."""
    return {
        n
        for n in itertools.product(range(5), repeat=3)
        if any(n) and (np.array(n) @ VM <= idle).all()
    }


def test_example_enumerates_13_combinations_on_server_1_not_12():
    combos = enumerate_combinations(VM, IDLE[0], np.full(3, 99))
    got = {tuple(int(v) for v in c) for c in combos}
    assert got == _by_hand(IDLE[0])
    # The full list: the paper's Step 1 names 12, but 13 fit (4 CPU, 8 GB, 40 GB).
    assert got == {
        (0, 1, 0), (0, 2, 0), (0, 3, 0), (0, 4, 0), (0, 0, 1), (0, 1, 1), (0, 2, 1),
        (0, 0, 2), (1, 0, 0), (1, 1, 0), (1, 2, 0), (1, 0, 1), (2, 0, 0),
    }  # fmt: skip
    assert len(enumerate_combinations(VM, IDLE[1], np.full(3, 99))) == 12


def _server_options(j: int, k: int = 3) -> ServerOptions:
    combos = enumerate_combinations(VM, IDLE[j], np.full(3, 99))
    u = utilisation(SPACE[j] - IDLE[j], combos @ VM, SPACE[j])
    top = top_strategies(u, k)
    return ServerOptions(j, np.arange(3), combos[top], skewness(u[top]), min_utilisation(u[top])[0])


def test_example_top_three_by_minimum_utilisation():
    s1, s2 = _server_options(0), _server_options(1)
    assert [tuple(c) for c in s1.counts] == [(2, 0, 0), (1, 0, 1), (1, 2, 0)]
    assert [tuple(c) for c in s2.counts] == [(1, 2, 0), (0, 4, 0), (0, 3, 0)]
    # mu after placement on the initial space, e.g. (1,0,1) on server 1: (2+4)/6, (8+6)/16,
    # (60+30)/100 -> min 0.875; (0,3,0) on server 2: (4+3)/8, (14+3)/20, (70+30)/120 -> 5/6.
    u1 = utilisation(SPACE[0] - IDLE[0], s1.counts @ VM, SPACE[0])
    u2 = utilisation(SPACE[1] - IDLE[1], s2.counts @ VM, SPACE[1])
    assert min_utilisation(u1) == pytest.approx([1.0, 0.875, 0.875])
    assert min_utilisation(u2) == pytest.approx([11 / 12, 0.9, 5 / 6])
    # (1,0,1) and (1,2,0) tie on mu = 0.875; the lower skewness ranks first.
    assert s1.skew[1] < s1.skew[2]


@pytest.mark.parametrize("lam", [0.2, 1.0, 10.0])
def test_example_equilibrium_server_2_third_server_1_second(lam):
    s1, s2 = _server_options(0), _server_options(1)
    order = sorted([s1, s2], key=lambda s: s.best_mu)
    assert [s.agent for s in order] == [1, 0]  # server 2 (best mu 11/12) moves first
    total = IDLE[0] + IDLE[1]
    users = np.ones(3, dtype=bool)
    choice = solve_block(order, np.zeros((3, 3)), VM, np.arange(3), np.ones(3), users, total, lam)
    assert choice == (2, 1)  # server 2 its 3rd combination, server 1 its 2nd
    # The users' allocations under that profile, and their dominant shares of the idle
    # resources (8, 14, 90): VM 1 (2,4,20) -> 4/14 = 2/7, VM 2 3x(1,1,10) -> 3/8, VM 3
    # (2,2,10) -> 2/8 = 1/4 (by hand).
    alloc = sum(s.counts[c][:, None] * VM for s, c in zip(order, choice, strict=True))
    shares = max_ratio(alloc, total)
    assert shares == pytest.approx([2 / 7, 3 / 8, 1 / 4])
    mean = (2 / 7 + 3 / 8 + 1 / 4) / 3
    std = np.sqrt(((2 / 7 - mean) ** 2 + (3 / 8 - mean) ** 2 + (1 / 4 - mean) ** 2) / 3)
    assert fairness_deviation(shares) == pytest.approx(std / mean)


def example_state() -> AllocationState:
    """Fig. 2 as a cluster: the servers' initial spaces, already used so that the idle
    resources are (4, 8, 40) and (4, 6, 50), and one framework per VM type."""
    cluster = make_cluster(
        [list(space) for space in SPACE], VM.tolist(), resources=("cpus", "mem", "disk")
    )
    state = AllocationState(cluster)
    busy = np.array(SPACE) - np.array(IDLE)  # held by no framework of the fill
    state.load(np.zeros((3, 2), dtype=np.int64), np.zeros(3), busy)
    return state


@pytest.mark.parametrize("lam", [0.2, 1.0, 10.0])
def test_example_equilibrium_through_the_scheduler(lam):
    """The same equilibrium from FUGA's selector in a progressive fill: its first planning
    round grants (0,3,0) on server 2, which moves first, then (1,0,1) on server 1."""
    state = example_state()
    rng = np.random.default_rng(0)
    params = {"fuga": FugaParams(k=3, lam=lam)}
    grants = progressive_fill(state, Fuga(), Selection.FUGA, rng, params=params)
    first = [(g.framework, g.agent) for g in grants[:5]]
    assert first[:3] == [(1, 1)] * 3  # server 2 (agent 1) first: 3 x VM 2
    assert sorted(first[3:]) == [(0, 0), (2, 0)]  # server 1: VM 1 and VM 3
    # Server 1 is then full for every type; server 2's (1, 3, 20) left holds one more VM 2,
    # which the next round grants.
    assert [(g.framework, g.agent) for g in grants[5:]] == [(1, 1)]
    assert state.tasks.T.tolist() == [[1, 0, 1], [0, 4, 0]]
    # Dominant shares of the whole cluster (14, 36, 220) after the first round, by hand:
    # VM 1 max(2/14, 4/36, 20/220) = 1/7, VM 2 3/14, VM 3 2/14 = 1/7.
    after_round = np.zeros((3, 3))
    for framework, _ in first:
        after_round[framework] += VM[framework]
    assert max_ratio(after_round, state.cluster.total) == pytest.approx([1 / 7, 3 / 14, 1 / 7])


def test_example_without_fairness_each_server_takes_its_least_skewed():
    order = sorted([_server_options(0), _server_options(1)], key=lambda s: s.best_mu)
    total = IDLE[0] + IDLE[1]
    users = np.ones(3, dtype=bool)
    choice = solve_block(order, np.zeros((3, 3)), VM, np.arange(3), np.ones(3), users, total, 0)
    assert choice == tuple(int(np.argmin(s.skew)) for s in order)


def test_skewness_and_minimum_utilisation_by_hand():
    u = np.array([1.0, 0.875, 0.9])
    mean = u.mean()
    assert skewness(u) == pytest.approx(np.sqrt(sum((x / mean - 1) ** 2 for x in u)))
    assert skewness(np.array([0.5, 0.5, 0.5])) == 0
    assert min_utilisation(u) == 0.875
    # A resource the server does not have enters neither.
    u = utilisation(np.zeros(3), np.array([2.0, 2.0, 0.0]), np.array([4.0, 8.0, 0.0]))
    # u = (0.5, 0.25), mean 0.375: deviations +1/3 and -1/3.
    assert min_utilisation(u) == 0.25 and skewness(u) == pytest.approx(np.sqrt(2) / 3)


def test_backward_induction_is_subgame_perfect_not_greedy():
    # Player 0 moves first (L or R), player 1 replies (l or r). Payoffs (p0, p1):
    # L: l (3, 1), r (0, 0); R: l (4, 0), r (1, 2). Player 1 answers L with l and R with r,
    # so player 0 takes L (3 > 1) although R-l would pay it 4.
    utility = np.array([[[3, 1], [0, 0]], [[4, 0], [1, 2]]], dtype=float)
    assert backward_induction(utility) == (0, 0)
    # Three players, each best off matching the first mover: the last two follow player 0,
    # who then takes its own best (strategy 1).
    three = np.zeros((2, 2, 2, 3))
    for a, b, c in itertools.product(range(2), repeat=3):
        three[a, b, c] = [a * 2 + (b == a) + (c == a), float(b == a), float(c == a)]
    assert backward_induction(three) == (1, 1, 1)


def test_enumeration_is_bounded_on_large_servers():
    demand = np.array([[1.0, 2.0], [2.0, 1.0], [1.0, 1.0], [3.0, 1.0]])
    room = np.array([512.0, 512.0])
    combos = enumerate_combinations(demand, room, np.full(4, np.inf), max_combinations=512)
    assert 0 < len(combos) <= 512
    assert (combos @ demand <= room + 1e-9).all()
    # Completed greedily: no executor of any type fits beside any of them.
    left = room - combos @ demand
    assert not (left[:, None, :] >= demand[None, :, :]).all(axis=2).any()


def test_bad_parameters_are_one_line_errors():
    with pytest.raises(ScenarioError, match=r"^fuga\.k: must be a positive integer, got 0$"):
        FugaParams(k=0, lam=1.0)
    with pytest.raises(ScenarioError, match=r"^fuga\.lambda"):
        FugaParams(k=3, lam=-1.0)


def test_fuga_reaches_the_optimum_on_paper_002_example():
    done = run_fairbroker("fill", str(EXAMPLE), "--scheduler", "fuga", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["selection"] == "fuga"
    assert out["tasks"]["mean"] == {"f1": {"s1": 19, "s2": 2}, "f2": {"s1": 2, "s2": 19}}


@st.composite
def instances(draw: st.DrawFn):
    n_r = draw(st.integers(2, 3))
    vector = st.lists(st.integers(0, 12), min_size=n_r, max_size=n_r).filter(any)
    capacity = draw(st.lists(st.lists(st.integers(0, 60), min_size=n_r, max_size=n_r)
                             .filter(any), min_size=1, max_size=5))  # fmt: skip
    demand = draw(st.lists(vector, min_size=1, max_size=6))
    limits = draw(st.lists(st.one_of(st.just(np.inf), st.integers(0, 8)),
                           min_size=len(demand), max_size=len(demand)))  # fmt: skip
    k = draw(st.integers(1, 4))
    names = ("cpus", "mem", "disk")[:n_r]
    return make_cluster(capacity, demand, max_tasks=limits, resources=names), FugaParams(
        k=k, lam=1.0, horizon=2
    )


@settings(max_examples=150, deadline=None)
@given(instances(), st.sampled_from(list(Mode)), st.integers(0, 3))
def test_fuga_respects_capacity_and_limits_and_leaves_nothing_that_fits(instance, mode, seed):
    cluster, params = instance
    state = AllocationState(cluster, mode)
    rng = np.random.default_rng(seed)
    progressive_fill(state, Fuga(), Selection.FUGA, rng, params={"fuga": params})
    used = state.tasks.T @ np.nan_to_num(cluster.demand)
    assert (used <= cluster.capacity + 1e-9).all()
    assert (state.count <= cluster.max_tasks).all()
    assert not state.fits_all().any()


def test_fuga_is_a_registered_scheduler():
    chosen = scheduler("FUGA")
    assert chosen.default_selection is Selection.FUGA
    assert isinstance(chosen.criterion(), Fuga)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fuga-k", "0"], "fairbroker: error: fuga_k: must be a positive integer, got 0"),
        (["--fuga-lambda", "-1"], "fairbroker: error: fuga_lambda: must be finite and >= 0"),
    ],
)
def test_bad_fuga_options_are_one_line_errors(args, message):
    done = run_fairbroker("fill", str(EXAMPLE), "-s", "fuga", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().startswith(message) and len(done.stderr.splitlines()) == 1


PAPER000 = EXAMPLE.with_name("paper000-example.yaml")


def _fill_tasks(args: list[str]) -> dict:
    from click.testing import CliRunner

    from allocator.cli import cli

    done = CliRunner().invoke(cli, ["fill", str(PAPER000), "-s", "fuga", "--json", *args])
    assert done.exit_code == 0, done.output
    return json.loads(done.output)["tasks"]["mean"]


def _fill_directly(params: FugaParams) -> dict:
    from allocator.scenarios.static import load_scenario
    from allocator.trials import run_trials

    summary = run_trials(load_scenario(PAPER000), "fuga", params={"fuga": params})
    return summary.to_json()["tasks"]["mean"]


def test_fuga_options_reach_the_selection_and_nothing_else():
    """--fuga-k/--fuga-lambda become the run's EngineConfig, whose FugaParams FUGA's
    selection is built with; they change this instance's fill, and leave no process-wide
    setting behind (the next fill without them is the default's)."""
    default = _fill_directly(FugaParams(k=3, lam=1.0))
    for args, params in (
        (["--fuga-k", "1"], FugaParams(k=1, lam=1.0)),
        (["--fuga-lambda", "0"], FugaParams(k=3, lam=0.0)),
    ):
        tasks = _fill_tasks(args)
        assert tasks == _fill_directly(params) and tasks != default
        assert _fill_tasks([]) == default


def test_engine_config_carries_fugas_parameters():
    from allocator.engine_config import EngineConfig, EngineConfigError

    config = EngineConfig("fuga", fuga_k=2, fuga_lambda=1)
    assert config.policy_params() == {"fuga": FugaParams(k=2, lam=1.0)}
    assert EngineConfig().policy_params() == {"fuga": FugaParams(k=3, lam=1.0)}
    assert config.to_json()["fuga_k"] == 2 and config.to_json()["fuga_lambda"] == 1.0
    assert "fuga_k" not in EngineConfig("drf").to_json()  # recorded only where FUGA decides
    for bad in ({"fuga_k": 0}, {"fuga_k": 1.5}, {"fuga_k": True}, {"fuga_lambda": -0.1},
                {"fuga_lambda": float("nan")}):  # fmt: skip
        with pytest.raises(EngineConfigError, match=f"^{next(iter(bad))}: must be"):
            EngineConfig("fuga", **bad)


def test_oblivious_strategies_are_single_framework_combinations():
    # A framework offered the agent keeps all of it it can use: 2 of (2,4,20), 4 of
    # (1,1,10) or 2 of (2,2,10) on (4, 8, 40).
    combos = enumerate_combinations(VM, IDLE[0], np.full(3, 99), single_type=True)
    assert [tuple(c) for c in combos] == [(2, 0, 0), (0, 4, 0), (0, 0, 2)]
    capped = enumerate_combinations(VM, IDLE[0], np.array([1, 0, 5]), single_type=True)
    assert [tuple(c) for c in capped] == [(1, 0, 0), (0, 0, 2)]
