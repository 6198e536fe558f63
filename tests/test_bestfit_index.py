"""BF-DRF with the incremental best-fit index against brute force, step by step.

At every step of a fill the pair chosen must be what a scan of everything gives: the
framework has the least DRF share among the frameworks that want a task and fit somewhere,
the agent is feasible for it and its H is the least H over all feasible agents (within the
tie tolerance), and the fill stops only when no framework that wants a task fits anywhere.
The sequence of picks must also be exactly the one of a selector that scans every agent on
every pick (the implementation before the index), since both draw the same random numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import allocator.policy.bestfit_index as bestfit_index
from allocator.model import Cluster
from allocator.policy.base import Criterion
from allocator.policy.bestfit import fit_distance
from allocator.policy.drf import DRF
from allocator.policy.selection import Selection, make_selector
from allocator.policy.ties import RELATIVE_TIE, pick_lowest
from allocator.state import AllocationState, Mode
from allocator.workloads import google_agent_capacities, random_demands


def tie(value: float) -> float:
    return RELATIVE_TIE * max(1.0, abs(value))


# ---- instances ---------------------------------------------------------------------------
def google_instance(
    seed: int, n_agents: int, n_frameworks: int, constrained: bool = True
) -> Cluster:
    """Google-mix agents and random tenants; some with task limits, placement constraints
    (a random eligible matrix), weights, and a third resource some tasks do not use."""
    rng = np.random.default_rng(seed)
    capacity = google_agent_capacities(n_agents, rng)
    demand = random_demands(n_frameworks, rng)
    weight = np.ones(n_frameworks)
    eligible = np.ones((n_frameworks, n_agents), dtype=bool)
    max_tasks = np.full(n_frameworks, np.inf)
    resources: tuple[str, ...] = ("cpus", "mem")
    if constrained:
        weight = rng.choice([0.5, 1.0, 2.0], n_frameworks)
        limited = rng.random(n_frameworks) < 0.3
        max_tasks[limited] = rng.integers(0, 40, limited.sum())
        for n in np.flatnonzero(rng.random(n_frameworks) < 0.4):  # constrained frameworks
            eligible[n] = rng.random(n_agents) < rng.uniform(0.05, 0.9)
        # A third resource (say gpus) on a few agents, needed by a few tasks, and some tasks
        # that need no cpus at all (H then takes another reference resource).
        gpus = np.where(rng.random(n_agents) < 0.2, rng.integers(1, 9, n_agents), 0)
        needs = np.where(rng.random(n_frameworks) < 0.15, rng.integers(1, 3, n_frameworks), 0)
        capacity = np.column_stack([capacity, gpus.astype(float)])
        demand = np.column_stack([demand, needs.astype(float)])
        demand[rng.random(n_frameworks) < 0.1, 0] = 0.0
        resources = ("cpus", "mem", "gpus")
    return Cluster.from_arrays(capacity, demand, resources, weight, eligible, max_tasks)


@st.composite
def small_clusters(draw: st.DrawFn) -> Cluster:
    """Small integer clusters: many exact ties, zero resources, odd shapes."""
    n_r = draw(st.integers(2, 3))
    n_a = draw(st.integers(1, 12))
    n_f = draw(st.integers(1, 8))
    vector = st.lists(st.integers(0, 12), min_size=n_r, max_size=n_r).filter(any)
    capacity = np.array(draw(st.lists(vector, min_size=n_a, max_size=n_a)), dtype=float) * 4
    demand = np.array(draw(st.lists(vector, min_size=n_f, max_size=n_f)), dtype=float)
    eligible = np.array(
        draw(
            st.lists(
                st.lists(st.booleans(), min_size=n_a, max_size=n_a), min_size=n_f, max_size=n_f
            )
        )
    ).reshape(n_f, n_a)
    max_tasks = draw(
        st.lists(st.one_of(st.just(np.inf), st.integers(0, 8)), min_size=n_f, max_size=n_f)
    )
    weight = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=n_f, max_size=n_f))
    return Cluster.from_arrays(
        capacity, demand, ("cpus", "mem", "disk")[:n_r], weight, eligible, max_tasks
    )


# ---- brute force -------------------------------------------------------------------------
def fits_matrix(state: AllocationState) -> np.ndarray:
    """(F, A): one more task of n fits on i, by `fits_framework` for every framework."""
    return np.array([state.fits_framework(n) for n in range(state.cluster.n_frameworks)])


def brute_distance(state: AllocationState, framework: int) -> np.ndarray:
    demand = state.known_demand[framework]
    if np.isnan(demand).any():
        return np.zeros(state.cluster.n_agents)
    return fit_distance(demand, state.residual, state.cluster.total)


class ScanSelector:
    """BF-DRF as first written: every pick scans every agent (reference for the draws)."""

    def __init__(self, state: AllocationState, criterion: Criterion, rng: np.random.Generator):
        self.state, self.criterion, self.rng = state, criterion, rng
        self.active = state.runnable.copy()

    def next(self) -> tuple[int, int] | None:
        while True:
            candidates = self.active & self.state.wanting()
            if not candidates.any():
                return None
            framework = pick_lowest(self.criterion.values(self.state), candidates, self.rng)
            feasible = self.state.fits_framework(framework)
            if feasible.any():
                distance = brute_distance(self.state, framework)
                return framework, pick_lowest(distance, feasible, self.rng)
            self.active[framework] = False


def check_pick(state: AllocationState, pick: tuple[int, int] | None, retired: np.ndarray) -> None:
    """The brute-force conditions on one BF-DRF pick (before it is granted)."""
    fits = fits_matrix(state)
    live = state.wanting() & fits.any(axis=1)
    if pick is None:
        assert not live.any(), "fill stopped while a wanting framework still fits somewhere"
        return
    framework, agent = pick
    assert live[framework], "chosen framework does not want a task or fits nowhere"
    shares = DRF().values(state)
    low_share = shares[live].min()
    assert shares[framework] <= low_share + tie(low_share), "not the lowest DRF share"
    feasible = fits[framework]
    assert feasible[agent], "chosen agent is not feasible for the framework"
    distance = brute_distance(state, framework)
    low = distance[feasible].min()
    if np.isfinite(low):
        assert distance[agent] <= low + tie(low), "chosen agent is not a best fit"
    # Frameworks the selector retired never come back while residuals only shrink.
    assert not (retired & live).any()


def grant(state: AllocationState, framework: int, agent: int) -> None:
    tasks = 1 if state.mode is Mode.CHARACTERIZED else state.tasks_that_fit(framework, agent)
    state.grant(framework, agent, tasks)


def checked_fill(cluster: Cluster, seed: int, mode: Mode = Mode.CHARACTERIZED) -> int:
    """Fill with BF-DRF, checking every step by brute force and against the scanning
    reference; returns the number of grants."""
    state = AllocationState(cluster, mode)
    mirror = AllocationState(cluster, mode)
    selector = make_selector(Selection.BESTFIT, state, DRF(), np.random.default_rng(seed))
    reference = ScanSelector(mirror, DRF(), np.random.default_rng(seed))
    for step in range(200_000):
        pick = selector.next()
        check_pick(state, pick, ~selector.active)
        assert pick == reference.next(), f"step {step}: differs from the scanning selector"
        if pick is None:
            return step
        grant(state, *pick)
        grant(mirror, *pick)
    raise AssertionError("fill did not stop")


# ---- tests -------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def early_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build the index after a couple of lookups, so that most steps go through it."""
    monkeypatch.setattr(bestfit_index, "COMPILED", False)
    monkeypatch.setattr(bestfit_index, "MIN_SCANS", 2)
    monkeypatch.setattr(bestfit_index, "SCANS_PER_FRAMEWORK", 0.0)


@pytest.fixture(params=["index", "compiled"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of answering a lookup: the incremental index, the compiled scan."""
    monkeypatch.setattr(bestfit_index, "COMPILED", request.param == "compiled")
    return request.param


@pytest.mark.parametrize(
    ("seed", "n_agents", "n_frameworks", "constrained"),
    [
        (1, 50, 5, False),
        (2, 80, 12, True),
        (3, 120, 20, True),
        (4, 200, 30, False),
        (5, 300, 40, True),
    ],
)
def test_every_step_is_the_brute_force_best_fit(path, seed, n_agents, n_frameworks, constrained):
    cluster = google_instance(seed, n_agents, n_frameworks, constrained)
    assert checked_fill(cluster, seed) > 0


def test_oblivious_mode_learns_demands_mid_fill(path):
    cluster = google_instance(6, 150, 25)
    assert checked_fill(cluster, 6, Mode.OBLIVIOUS) > 0


@settings(max_examples=150, deadline=None)
@given(small_clusters(), st.sampled_from(list(Mode)), st.integers(0, 2**32 - 1))
def test_small_instances(cluster, mode, seed):
    checked_fill(cluster, seed, mode)


@settings(max_examples=150, deadline=None)
@given(small_clusters(), st.sampled_from(list(Mode)), st.integers(0, 2**32 - 1))
def test_small_instances_compiled(cluster, mode, seed):
    bestfit_index.COMPILED = True  # the autouse fixture restores it after the test
    checked_fill(cluster, seed, mode)


def _tree_used(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Lookups after a grant read the min tree from the first agent on (`TREE_MIN` 1);
    returns the lookups' count of answers it gave."""
    monkeypatch.setattr(bestfit_index, "COMPILED", True)
    monkeypatch.setattr(bestfit_index, "TREE_MIN", 1)
    used = [0]
    real_best = bestfit_index.CompiledScan.best

    def best(self, framework):
        agent = real_best(self, framework)
        used[0] += int(self.tree_kept[bestfit_index.TREE_OF] > 0)
        return agent

    monkeypatch.setattr(bestfit_index.CompiledScan, "best", best)
    return used


@pytest.mark.parametrize(("seed", "constrained"), [(12, True), (13, False)])
def test_the_kept_tree_answers_as_the_walk(monkeypatch, seed, constrained):
    used = _tree_used(monkeypatch)
    assert checked_fill(google_instance(seed, 120, 15, constrained), seed) > 0
    assert used[0] > 0


def test_the_kept_tree_sees_releases_between_picks(monkeypatch):
    used = _tree_used(monkeypatch)
    test_releases_between_picks_are_seen("compiled")
    assert used[0] > 0


@settings(max_examples=150, deadline=None)
@given(small_clusters(), st.sampled_from(list(Mode)), st.integers(0, 2**32 - 1))
def test_small_instances_on_the_kept_tree(cluster, mode, seed):
    with pytest.MonkeyPatch.context() as monkeypatch:
        _tree_used(monkeypatch)
        checked_fill(cluster, seed, mode)


def test_releases_between_picks_are_seen(path):
    """Writes the selector did not make (releases, grants elsewhere) still update H."""
    cluster = google_instance(7, 120, 15)
    state = AllocationState(cluster)
    mirror = AllocationState(cluster)
    rng = np.random.default_rng(7)
    selector = make_selector(Selection.BESTFIT, state, DRF(), np.random.default_rng(7))
    reference = ScanSelector(mirror, DRF(), np.random.default_rng(7))
    for step in range(3000):
        pick = selector.next()
        assert pick == reference.next(), f"step {step}"
        if pick is None:
            break
        framework, agent = pick
        feasible = state.fits_framework(framework)
        distance = brute_distance(state, framework)
        assert feasible[agent]
        low = distance[feasible].min()
        assert distance[agent] <= low + tie(low)
        for s in (state, mirror):
            s.grant(framework, agent)
        if step % 7 == 3:  # release a random running task
            held = np.argwhere(state.tasks > 0)
            n, a = held[rng.integers(len(held))]
            for s in (state, mirror):
                s.release(int(n), int(a))
        if step % 11 == 5:  # and grant one the selector did not choose, where it fits
            fits = fits_matrix(state) & state.wanting()[:, None]
            if fits.any():
                n, a = np.argwhere(fits)[rng.integers(fits.sum())]
                for s in (state, mirror):
                    s.grant(int(n), int(a))
    used = selector.best_fit.index if path == "index" else selector.best_fit.compiled
    assert used is not None, f"the {path} was never used"


def test_too_large_for_the_index_scans(monkeypatch):  # numpy scans only
    monkeypatch.setattr(bestfit_index, "MAX_BYTES", 0)
    cluster = google_instance(8, 60, 8)
    assert checked_fill(cluster, 8) > 0


@pytest.mark.parametrize("sabotaged", ["BestFitIndex", "CompiledScan"])
def test_the_check_catches_a_worse_agent(monkeypatch, sabotaged):
    """Sabotage: the lookup returns the second-best agent; the step check must fail."""
    monkeypatch.setattr(bestfit_index, "COMPILED", sabotaged == "CompiledScan")
    kind = getattr(bestfit_index, sabotaged)
    real_best = kind.best

    def second_best(self, framework):
        agent = real_best(self, framework)
        state = self.state
        feasible = state.fits_framework(framework)
        distance = np.where(feasible, brute_distance(state, framework), np.inf)
        worse = np.flatnonzero(np.isfinite(distance) & (distance > distance[agent] * 1.001))
        return int(worse[np.argmin(distance[worse])]) if worse.size else agent

    monkeypatch.setattr(kind, "best", second_best)
    with pytest.raises(AssertionError, match="not a best fit"):
        checked_fill(google_instance(9, 60, 8, constrained=False), 9)


@pytest.mark.parametrize("sabotaged", ["BestFitIndex", "CompiledScan"])
def test_the_check_catches_an_early_stop(monkeypatch, sabotaged):
    """Sabotage: the lookup claims a framework fits nowhere when it does."""
    monkeypatch.setattr(bestfit_index, "COMPILED", sabotaged == "CompiledScan")
    kind = getattr(bestfit_index, sabotaged)
    real_best = kind.best
    calls = [0]

    def forgetful(self, framework):
        calls[0] += 1
        return -1 if calls[0] > 20 else real_best(self, framework)

    monkeypatch.setattr(kind, "best", forgetful)
    with pytest.raises(AssertionError):
        checked_fill(google_instance(10, 60, 8, constrained=False), 10)


def test_index_matches_a_rebuild_after_a_long_fill():
    """Every H the index keeps equals a fresh computation (masked where nothing fits)."""
    cluster = google_instance(11, 200, 25)
    state = AllocationState(cluster)
    selector = make_selector(Selection.BESTFIT, state, DRF(), np.random.default_rng(11))
    for _ in range(1500):
        pick = selector.next()
        if pick is None:
            break
        state.grant(*pick)
    selector.next()  # brings the index up to date with the last grant
    index = selector.best_fit.index
    assert index is not None
    fits = fits_matrix(state)
    for n in range(cluster.n_frameworks):
        expected = np.where(fits[n], brute_distance(state, n), np.inf)
        np.testing.assert_array_equal(index._distance[n], expected)
