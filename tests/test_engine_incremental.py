"""The incremental engine (issue 28) decides exactly as the dense engine it replaced.

Random event sequences (agents and tenants coming and going, capacities, targets, releases,
refuse filters, adopted tasks, allocation runs at advancing times, some capped) drive the
current `Engine` and a frozen copy of the dense one (`tests/support/reference_engine.py`)
side by side; every run must make the same grants in the same order, and every event the
same error or none. Schedulers x modes x levels x ties cover both the runs over the changed
agents only and the dense runs the engine keeps for the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator import engine_bulk, engine_direct, engine_random
from allocator.engine import Engine, EngineError
from allocator.engine_config import EngineConfig
from allocator.policy import bestfit_index
from tests.support import reference_engine as reference

SCHEDULERS = ["drf", "psdsf", "rpsdsf", "bfdrf", "tsf", "alpha-psdsf"]
SELECTIONS = [None, None, None, "firstfit", "bestfit", "random"]


def configs(
    schedulers: list[str], selections: list[str | None], ties: tuple[str, ...] = ("random", "waste")
) -> st.SearchStrategy:
    return st.builds(
        EngineConfig,
        scheduler=st.sampled_from(schedulers),
        mode=st.sampled_from(["characterized", "oblivious"]),
        selection=st.sampled_from(selections),
        level=st.sampled_from(["role", "framework"]),
        ties=st.sampled_from(ties),
        trigger=st.sampled_from(["tick", "release"]),
        seed=st.integers(0, 3),
    )


CONFIGS = configs(SCHEDULERS, SELECTIONS)
EVENTS = ["agent", "agent", "tenant", "tenant", "run", "run", "run", "release", "release",
          "target", "capacity", "remove", "unregister", "refuse", "adopt"]  # fmt: skip
#: TSF, whose y_n over the whole cluster the engine keeps across runs (`engine_alone`),
#: with every selection it runs over the changed agents.
TSF_CONFIGS = configs(["tsf"], [None, "firstfit", "bestfit"])
#: The selections whose choice is among feasible pairs only, which are all on the changed
#: agents: joint (its argmin and tie draws) and FUGA (its servers, its random agent).
PAIR_CONFIGS = configs(["drf", "psdsf", "rpsdsf", "tsf", "alpha-psdsf", "fuga"], ["joint", "fuga"])
#: Best and first fit with waste ties, which rank a framework that fits nowhere at agent
#: slot 0 (`engine_columns.with_first_agent`).
WASTE_CONFIGS = configs(SCHEDULERS, ["firstfit", "bestfit"], ("waste",))
#: The random selection, whose draws over every agent slot the engine replays.
RANDOM_CONFIGS = configs(["drf", "psdsf", "rpsdsf", "tsf", "alpha-psdsf"], ["random"])
AMOUNT = st.sampled_from([0.5, 1.0, 2.0, 3.0, 4.0, 8.0])
ZONES = st.sampled_from(["a", "b"])


def _both(new: Engine, old: reference.Engine, call: str, *args, **kwargs):  # type: ignore[no-untyped-def]
    """Apply one event to both engines: the same answer, or the same error."""
    try:
        expected = getattr(old, call)(*args, **kwargs)
    except reference.EngineError as error:
        with pytest.raises(EngineError) as raised:
            getattr(new, call)(*args, **kwargs)
        assert str(raised.value) == str(error)
        return None
    got = getattr(new, call)(*args, **kwargs)
    assert _plain(got) == _plain(expected), call
    return got


def _plain(answer: object) -> object:
    """Grants as tuples (each engine has its own EngineGrant class)."""
    if isinstance(answer, list):
        return [dataclasses.astuple(a) if dataclasses.is_dataclass(a) else a for a in answer]
    return answer


#: The runs whose shares and best fit are kept through a run (`engine_columns.KeptShares`,
#: `bestfit_index.CompiledScan`): DRF's share, framework first, characterized, random ties.
KEPT_CONFIGS = st.builds(
    EngineConfig,
    scheduler=st.sampled_from(["drf", "bfdrf"]),
    selection=st.sampled_from(["firstfit", "bestfit"]),
    level=st.sampled_from(["role", "role", "framework"]),
    trigger=st.sampled_from(["tick", "release"]),
    seed=st.integers(0, 3),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=CONFIGS, data=st.data())
def test_same_grants_run_by_run(config: EngineConfig, data: st.DataObject) -> None:
    same_grants_run_by_run(config, data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=KEPT_CONFIGS, data=st.data())
def test_same_grants_with_kept_shares(config: EngineConfig, data: st.DataObject) -> None:
    same_grants_run_by_run(config, data)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=TSF_CONFIGS, data=st.data())
def test_tsf_same_grants_run_by_run(config: EngineConfig, data: st.DataObject) -> None:
    """Refuse filters, which take agents out of y_n for a run, twice as often."""
    same_grants_run_by_run(config, data, [*EVENTS, "refuse"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=PAIR_CONFIGS, data=st.data())
def test_joint_and_fuga_same_grants_run_by_run(config: EngineConfig, data: st.DataObject) -> None:
    same_grants_run_by_run(config, data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=WASTE_CONFIGS, data=st.data())
def test_waste_ties_same_grants_run_by_run(config: EngineConfig, data: st.DataObject) -> None:
    same_grants_run_by_run(config, data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=RANDOM_CONFIGS, data=st.data())
def test_random_same_grants_run_by_run(config: EngineConfig, data: st.DataObject) -> None:
    """Half the examples look for the next candidate one draw at a time (the clusters here
    are smaller than a batch)."""
    batch = data.draw(st.sampled_from([engine_random.SMALLEST_BATCH, 1]))
    with mock.patch.object(engine_random, "SMALLEST_BATCH", batch):
        same_grants_run_by_run(config, data)


#: BF-DRF's runs that `allocator.engine_bulk` fills in one compiled loop: several roles,
#: weights, constraints, caps; some tenants' demands not declared (the loop hands their
#: lookups back to Python).
COMPILED_CONFIGS = st.builds(
    EngineConfig,
    scheduler=st.just("bfdrf"),
    selection=st.just("bestfit"),
    level=st.just("role"),
    trigger=st.sampled_from(["tick", "release"]),
    seed=st.integers(0, 3),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=COMPILED_CONFIGS,
    data=st.data(),
    log=st.sampled_from([engine_bulk.LOG, 1, 3]),
    tree_from=st.sampled_from([bestfit_index.TREE_MIN, 1]),
    direct=st.booleans(),
)
def test_compiled_fill_same_grants_run_by_run(
    config: EngineConfig, data: st.DataObject, log: int, tree_from: int, direct: bool
) -> None:
    """A grant log shorter than a run re-enters the loop mid-run; half the examples read
    the best fit after a grant from the min tree whatever the run's size; half build the
    run's state from the engine's arrays (`engine_direct`), half the usual way."""
    with mock.patch.object(engine_bulk, "LOG", log), mock.patch.object(
        bestfit_index, "TREE_MIN", tree_from
    ), mock.patch.object(engine_direct, "ENABLED", direct):
        same_grants_run_by_run(config, data, undeclared=True)


@pytest.mark.parametrize("direct", [False, True])
def test_compiled_fill_hands_steps_back_and_re_enters(direct: bool) -> None:
    """Hand-built: three roles on mixed agents, two tenants that declare nothing (their
    lookups go back to Python), a grant log of 5 (the loop re-enters mid-run): the same
    grants as the reference engine, run after run, and every kind of return is seen. With
    `engine_direct`, the run that meets an undeclared tenant is made again the usual way
    from where it started, and the other runs are its own."""
    statuses: list[int] = []
    loop = engine_bulk._fill
    direct_runs: list[bool] = []
    run = engine_direct._run

    def recorded(*args):  # type: ignore[no-untyped-def]
        statuses.append(loop(*args))
        return statuses[-1]

    def direct_run(*args):  # type: ignore[no-untyped-def]
        done, frameworks, agents = run(*args)
        direct_runs.append(done)
        return done, frameworks, agents

    config = EngineConfig.mesos("bfdrf", seed=2)
    new, old = Engine(("cpus", "mem"), config), reference.Engine(("cpus", "mem"), config)
    with mock.patch.object(engine_bulk, "LOG", 5), mock.patch.object(
        engine_bulk, "_fill", recorded
    ), mock.patch.object(engine_direct, "ENABLED", direct), mock.patch.object(
        engine_direct, "_run", direct_run
    ):
        for i in range(12):
            capacity = {"cpus": [4.0, 8.0, 2.0][i % 3], "mem": [8.0, 4.0, 2.0][i % 3]}
            _both(new, old, "add_agent", f"a{i}", capacity)
        for k in range(8):
            demand = {"cpus": [1.0, 0.5, 2.0][k % 3], "mem": [0.5, 1.0, 1.0, 3.0][k % 4]}
            _both(new, old, "register", f"t{k}", demand, "xyz"[k % 3], 1.0 + k % 2, 20.0,
                  declared=k not in (2, 5), require_fit=False)  # fmt: skip
        made = _both(new, old, "allocate", 0.0)
        for grant in made[:9]:
            _both(new, old, "release", grant.framework, grant.agent, 1)
        _both(new, old, "allocate", 1.0)
        for k in (2, 5):  # the undeclared tenants leave: the next runs need no Python step
            _both(new, old, "unregister", f"t{k}")
        for grant in made[9:15]:
            _both(new, old, "release", grant.framework, grant.agent, 1)
        _both(new, old, "allocate", 2.0)
    assert len(made) > 20
    assert {engine_bulk.DONE, engine_bulk.FULL, engine_bulk.LOOKUP} <= set(statuses)
    assert direct_runs == ([False, False, True] if direct else [])


def same_grants_run_by_run(
    config: EngineConfig, data: st.DataObject, events: list[str] = EVENTS,
    undeclared: bool = False,
) -> None:
    """`undeclared`: some tenants do not declare their demand (characterized mode)."""
    resources = ("cpus", "mem")
    new, old = Engine(resources, config), reference.Engine(resources, config)
    agents: list[str] = []
    frameworks: list[str] = []
    now = 0.0
    made = 0
    for step in range(data.draw(st.integers(5, 45))):
        event = data.draw(st.sampled_from(events))
        if event == "agent":
            name = f"a{step}"
            capacity = {"cpus": data.draw(AMOUNT), "mem": data.draw(AMOUNT)}
            attributes = {"zone": data.draw(ZONES)} if data.draw(st.booleans()) else {}
            _both(new, old, "add_agent", name, capacity, attributes)
            agents.append(name)
        elif event == "tenant":
            name = f"t{step}"
            demand = {"cpus": data.draw(st.sampled_from([0.5, 1.0, 2.0])),
                      "mem": data.draw(st.sampled_from([0.0, 0.5, 1.0, 3.0]))}  # fmt: skip
            constraints = {"zone": data.draw(ZONES)} if data.draw(st.booleans()) else {}
            role = data.draw(st.sampled_from(["*", "x", "y"]))
            weight = data.draw(st.sampled_from([1.0, 2.0]))
            target = float(data.draw(st.integers(0, 12)))
            declared = not undeclared or data.draw(st.booleans())
            registered = _both(new, old, "register", name, demand, role, weight, target,
                               constraints, declared=declared, require_fit=False)  # fmt: skip
            if registered is None and name in old.frameworks:
                frameworks.append(name)
        elif event == "run":
            now += data.draw(st.sampled_from([0.0, 1.0, 3.0, 7.0]))
            cap = data.draw(st.sampled_from([None, None, 1, 2, 5]))
            got = _both(new, old, "allocate", now, cap)
            made += len(got or [])
        elif event == "release" and old.running:
            (f, a), held = data.draw(st.sampled_from(sorted(old.running.items())))
            _both(new, old, "release", f, a, data.draw(st.integers(1, held)))
        elif event == "target" and frameworks:
            f = data.draw(st.sampled_from(frameworks))
            _both(new, old, "set_target", f, float(data.draw(st.integers(0, 15))))
        elif event == "capacity" and agents:
            a = data.draw(st.sampled_from(agents))
            _both(
                new, old, "set_capacity", a, {"cpus": data.draw(AMOUNT), "mem": data.draw(AMOUNT)}
            )
        elif event == "remove" and agents:
            a = data.draw(st.sampled_from(agents))
            _both(new, old, "remove_agent", a)
            agents.remove(a)
        elif event == "unregister" and frameworks:
            f = data.draw(st.sampled_from(frameworks))
            _both(new, old, "unregister", f)
            frameworks.remove(f)
        elif event == "refuse" and agents and frameworks:
            f, a = data.draw(st.sampled_from(frameworks)), data.draw(st.sampled_from(agents))
            _both(new, old, "refuse", f, a, now + data.draw(st.sampled_from([0.5, 2.0, 6.0])))
        elif event == "adopt" and agents and frameworks:
            f, a = data.draw(st.sampled_from(frameworks)), data.draw(st.sampled_from(agents))
            _both(new, old, "adopt", f, a, data.draw(st.integers(1, 2)))
        assert new.running == old.running
        assert new.run_now == old.run_now
    for _ in range(3):  # what is left, run to the end
        now += 1.0
        got = _both(new, old, "allocate", now)
        made += len(got or [])
    assert (new.runs, new.grants_total) == (old.runs, old.grants_total)
    assert new.filters == old.filters
    assert new.pending() == old.pending()
    kept = new._framework_rows()  # written again slot by slot as tenants came and went
    new._rows_cache = None
    for name, rebuilt in new._framework_rows()._asdict().items():
        np.testing.assert_array_equal(getattr(kept, name), rebuilt, err_msg=name)


def test_the_churn_run_fills_only_the_changed_agents() -> None:
    """After a run that left nothing fitting, a release makes the next run build its state
    over that agent alone (hand-built: 50 full agents, one task ends on one of them)."""
    engine = Engine(("cpus", "mem"), EngineConfig.mesos("drf"))
    for i in range(50):
        engine.add_agent(f"a{i}", {"cpus": 4.0, "mem": 4.0})
    engine.register("t", {"cpus": 1.0, "mem": 1.0}, target=1000)
    first = engine.allocate(0.0)
    assert sum(g.tasks for g in first) == 200  # 4 tasks on each of 50 agents
    assert engine._candidates().size == 0
    engine.release("t", "a17", 2)
    assert engine._candidates().tolist() == [engine._agent_slots.index["a17"]]
    again = engine.allocate(1.0)
    assert [(g.agent, g.tasks) for g in again] == [("a17", 1), ("a17", 1)]
    assert engine._candidates().size == 0


def test_a_tenant_wanting_again_brings_back_the_agents_it_fits() -> None:
    """A tenant at its target releases a task on a full agent: it may now take the room
    left on another agent, where no wanting tenant fitted before, so that agent is a
    candidate of the next run as well as the one the task left."""
    engine = Engine(("cpus", "mem"), EngineConfig.mesos("drf"))
    engine.add_agent("full", {"cpus": 2.0, "mem": 2.0})
    engine.add_agent("room", {"cpus": 1.0, "mem": 1.0})
    engine.register("t", {"cpus": 1.0, "mem": 1.0}, target=2)
    engine.adopt("t", "full", 2)
    engine.register("wide", {"cpus": 2.0, "mem": 2.0}, target=1)  # fits nowhere now
    assert engine.allocate(0.0) == []
    assert engine._candidates().size == 0
    engine.release("t", "full", 1)
    slots = engine._agent_slots.index
    assert engine._candidates().tolist() == sorted([slots["full"], slots["room"]])
    assert [g.framework for g in engine.allocate(1.0)] == ["t"]
    assert engine.tasks_of("t") == 2


def test_cluster_is_rebuilt_only_after_a_change() -> None:
    engine = Engine(("cpus", "mem"), EngineConfig.mesos("drf"))
    engine.add_agent("a", {"cpus": 4.0, "mem": 4.0})
    engine.register("t", {"cpus": 1.0, "mem": 1.0}, target=2)
    first = engine.cluster()
    engine.allocate(0.0)
    engine.release("t", "a", 1)
    assert engine.cluster() is first  # grants and releases do not change it
    engine.set_target("t", 3)
    second = engine.cluster()
    assert second is not first and second.max_tasks.tolist() == [3.0]
    engine.set_capacity("a", {"cpus": 2.0, "mem": 2.0})
    assert engine.cluster().capacity.tolist() == [[2.0, 2.0]]
    assert np.array_equal(engine.cluster().eligible, [[True]])


def _tsf_pair(engines: tuple[type, ...], seed: int) -> list:  # type: ignore[type-arg]
    """Two tenants of one demand; `b` is refused the big agent, which leaves it 2 of the
    10 tasks it could run alone (y_b = 2, y_a = 10)."""
    built = []
    for kind in engines:
        engine = kind(("cpus", "mem"), EngineConfig.mesos("tsf", seed=seed))
        engine.add_agent("big", {"cpus": 8.0, "mem": 8.0})
        engine.add_agent("small", {"cpus": 2.0, "mem": 2.0})
        engine.register("a", {"cpus": 1.0, "mem": 1.0}, target=3)
        engine.register("b", {"cpus": 1.0, "mem": 1.0}, target=2)
        engine.adopt("a", "big", 2)
        engine.adopt("b", "small", 1)
        engine.refuse("b", "big", 10.0)
        built.append(engine)
    return built


@pytest.mark.parametrize("seed", range(6))
def test_tsf_runs_over_the_changed_agents_with_the_whole_clusters_tasks_alone(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TSF run builds no dense snapshot, and reads y_n as the dense run sums it: over
    every agent, without those a refuse filter keeps from the tenant (x_a / y_a = 2 / 10
    against x_b / y_b = 1 / 2: `a` is served first where both fit)."""
    new, old = _tsf_pair((Engine, reference.Engine), seed)
    assert new._tasks_alone(1.0).tolist() == [10.0, 2.0]
    assert new._tasks_alone(11.0).tolist() == [10.0, 10.0]  # the filter has ended by then

    def no_snapshot(now: float) -> None:
        raise AssertionError("a TSF run took the dense snapshot")

    monkeypatch.setattr(new, "snapshot", no_snapshot)
    assert _plain(new.allocate(1.0)) == _plain(old.allocate(1.0))
    new.remove_agent("small")
    new.add_agent("small2", {"cpus": 3.0, "mem": 6.0})
    new.set_capacity("big", {"cpus": 4.0, "mem": 8.0})
    new.register("c", {"cpus": 2.0, "mem": 1.0}, target=1, constraints={"zone": "x"},
                 require_fit=False)  # fmt: skip
    assert new._tasks_alone(1.0).tolist() == [7.0, 3.0, 0.0]  # c: no agent in zone x
    new.add_agent("zoned", {"cpus": 4.0, "mem": 4.0}, {"zone": "x"})
    assert new._tasks_alone(11.0).tolist() == [11.0, 11.0, 2.0]


@pytest.mark.parametrize(
    "changes",
    [{"scheduler": "tsf"}, {"scheduler": "tsf", "mode": "oblivious"},
     {"scheduler": "drf", "selection": "random"}, {"scheduler": "psdsf", "selection": "random"},
     {"scheduler": "drf", "selection": "joint"}, {"scheduler": "fuga"}],
)  # fmt: skip
def test_churn_at_scale_as_the_dense_engine(changes: dict[str, str]) -> None:
    """Hundreds of agents, most of them full: the runs after a few tasks end cover a few
    agents among many (the random selection's draws span several batches)."""
    rng = np.random.default_rng(7)
    config = EngineConfig.mesos(seed=3, **changes)
    new, old = Engine(("cpus", "mem"), config), reference.Engine(("cpus", "mem"), config)
    for i in range(400):
        capacity = {"cpus": float(rng.choice([4, 8, 16])), "mem": float(rng.choice([8, 16, 32]))}
        _both(new, old, "add_agent", f"a{i}", capacity, {"zone": "ab"[i % 2]})
    for n in range(30):
        demand = {"cpus": float(rng.choice([0.5, 1, 2])), "mem": float(rng.choice([1, 2, 4]))}
        constraints = {"zone": "a"} if n % 7 == 0 else {}
        _both(new, old, "register", f"t{n}", demand, "*", 1.0, 1e6, constraints)
    now = 0.0
    _both(new, old, "allocate", now)
    for _ in range(8):
        now += 1.0
        running = sorted(old.running.items())
        for k in rng.choice(len(running), 5, replace=False):
            (f, a), _held = running[k]
            _both(new, old, "release", f, a, 1)
        if now == 4.0:
            _both(new, old, "refuse", "t1", running[0][0][1], now + 3.0)
        assert _both(new, old, "allocate", now)
    assert new.running == old.running


def test_tsf_runs_densely_where_tasks_alone_are_past_exact_sums(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """y_n past 2^53 is no longer an exact sum of whole numbers: the run takes the dense
    snapshot, as the frozen engine does, and makes its grants."""
    new, old = (
        kind(("cpus", "mem"), EngineConfig.mesos("tsf")) for kind in (Engine, reference.Engine)
    )
    for engine in (new, old):
        engine.add_agent("huge", {"cpus": 1e16, "mem": 1e16})
        engine.add_agent("small", {"cpus": 2.0, "mem": 2.0})
        engine.register("t", {"cpus": 0.5, "mem": 0.5}, target=3)
    assert new._tasks_alone(0.0) is None
    dense = []
    monkeypatch.setattr(
        new, "snapshot", lambda now, _dense=new.snapshot: dense.append(now) or _dense(now)
    )
    got = new.allocate(0.0)
    assert _plain(got) == _plain(old.allocate(0.0))
    assert sum(g.tasks for g in got) == 3
    assert dense == [0.0]


@settings(max_examples=200, deadline=None)
@given(
    alloc=st.lists(
        st.tuples(*[st.sampled_from([0.0, -0.0, 0.5, 1.0, 3.0, 7.5, np.nan])] * 3),
        min_size=1, max_size=12,
    ),
    total=st.tuples(*[st.sampled_from([0.0, 1.0, 4.0, 10.0])] * 3),
    data=st.data(),
)
def test_kept_drf_shares_are_the_criterions(alloc: list, total: tuple, data: st.DataObject) -> None:
    """`engine_columns._drf_shares` gives, bit for bit, DRF's values of every framework and
    of every role as `RoleHoldings.of` sums them (NaN shares and resources the cluster
    lacks included)."""
    from allocator.engine_columns import _drf_shares
    from allocator.policy.base import max_ratio
    from allocator.policy.levels import RoleHoldings

    held = np.asfortranarray(np.array(alloc, dtype=float))
    n_f = len(held)
    weight = np.array(data.draw(st.lists(st.sampled_from([1.0, 2.0, 0.5]), min_size=n_f,
                                         max_size=n_f)))  # fmt: skip
    role_of = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n_f, max_size=n_f)))
    role_weight = np.array([1.0, 3.0, 0.25])
    whole = np.array(total)
    values, role_alloc, role_values = np.empty(n_f), np.empty((3, 3)), np.empty(3)
    _drf_shares(held, whole, weight, role_of, role_weight, values, role_alloc, role_values)
    state = mock.Mock(alloc=held, count=np.zeros(n_f), residual=None, tol=None)
    state.cluster = mock.Mock(role_names=("a", "b", "c"), role_of=role_of,
                              role_weight=role_weight, total=whole, capacity=None)  # fmt: skip
    roles = RoleHoldings.of(state)
    np.testing.assert_array_equal(values, max_ratio(held, whole) / weight)
    np.testing.assert_array_equal(role_alloc, roles.alloc)
    np.testing.assert_array_equal(role_values, max_ratio(roles.alloc, whole) / role_weight)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["tenant", "leave", "agent", "capacity", "run"]),
            st.integers(0, 5),
            AMOUNT,
            AMOUNT,
        ),
        min_size=1,
        max_size=30,
    )
)
def test_kept_fit_floors_are_made_again_from_the_rows(steps: list) -> None:
    """The floors a run reads (`Engine._fit_floor`, one row written per registration and
    all made again when the tolerance moves) equal `fit_floor_of` of the run's rows at the
    run's tolerance, whatever came and went before."""
    from allocator.model import fit_floor_of

    engine = Engine(("cpus", "mem"), EngineConfig("bfdrf", level="role"))
    engine.add_agent("a0", {"cpus": 4.0, "mem": 4.0})
    for at, (kind, k, x, y) in enumerate(steps):
        name = f"t{k}"
        if kind == "tenant" and name not in engine.frameworks:
            with contextlib.suppress(EngineError):  # a demand that fits no agent is refused
                engine.register(name, {"cpus": x, "mem": y}, role=f"r{k % 2}", target=3)
        elif kind == "leave" and name in engine.frameworks:
            engine.unregister(name)
        elif kind == "agent":
            engine.add_agent(f"a{at + 1}", {"cpus": 1e4 * x, "mem": y})  # moves the tolerance
        elif kind == "capacity":
            with contextlib.suppress(EngineError):
                engine.set_capacity("a0", {"cpus": 4.0 * x, "mem": 4.0 * y})
        else:
            engine.allocate(float(at))
        rows, (_, tol) = engine._framework_rows(), engine._totals()
        kept = engine._fit_floor(rows, tol)
        assert np.array_equal(kept, fit_floor_of(rows.fit_demand, tol))


def test_a_state_built_loaded_is_the_state_built_then_loaded() -> None:
    """`AllocationState(..., running=(count, used))` is construction then `load`, array by
    array (a run's state is built the first way)."""
    from allocator.state import AllocationState

    engine = Engine(("cpus", "mem"), EngineConfig("bfdrf"))
    for i, (c, m) in enumerate([(4.0, 8.0), (8.0, 2.0), (2.0, 2.0)]):
        engine.add_agent(f"a{i}", {"cpus": c, "mem": m})
    engine.register("x", {"cpus": 1.0, "mem": 1.5}, target=4)
    engine.register("y", {"cpus": 0.5, "mem": 0.25}, target=9)
    engine.allocate(0.0)
    cluster = engine.cluster()
    count, used = engine._count[:2].copy(), engine._used[:3].copy()
    assert count.sum() > 0
    loaded = AllocationState(cluster, tasks=np.zeros((2, 3), dtype=np.int64), running=(count, used))
    then = AllocationState(cluster, tasks=np.zeros((2, 3), dtype=np.int64))
    then.load(np.zeros((2, 3), dtype=np.int64), count, used)
    for name in ("residual", "alloc", "count", "limit", "known_demand", "runnable", "withheld",
                 "changed_at", "_wanting"):  # fmt: skip
        a, b = getattr(loaded, name), getattr(then, name)
        assert np.array_equal(a, b), name
        assert a.flags["F_CONTIGUOUS"] == b.flags["F_CONTIGUOUS"], name
    assert loaded.changes == then.changes


def test_a_floor_row_written_for_a_reused_slot_is_at_the_runs_tolerance() -> None:
    """Hand case: a tenant leaves and another registers into its slot (the one row the
    engine writes): its floor is d - tol (1e-9 of the largest capacity, 4)."""
    from allocator.model import fit_floor_of

    engine = Engine(("cpus", "mem"), EngineConfig("bfdrf", level="role"))
    engine.add_agent("a0", {"cpus": 4.0, "mem": 4.0})
    engine.register("t0", {"cpus": 1.0, "mem": 1.0}, role="r0", target=3)
    engine.register("t1", {"cpus": 1.0, "mem": 1.0}, role="r1", target=3)
    engine.register("t3", {"cpus": 1.0, "mem": 1.0}, role="r0", target=3)  # r0 stays
    engine.allocate(0.0)  # the floors are made
    engine.unregister("t0")
    engine.register("t2", {"cpus": 2.0, "mem": 1.0}, role="r0", target=3)  # t0's slot
    rows, (_, tol) = engine._framework_rows(), engine._totals()
    assert engine._floor_cache is not None
    assert engine._floor_cache[0] == engine._frameworks_version  # the row was written
    kept = engine._fit_floor(rows, tol)
    slot = engine._framework_slots.index["t2"]
    assert kept[slot].tolist() == [2.0 - 4e-9, 1.0 - 4e-9]
    assert np.array_equal(kept, fit_floor_of(rows.fit_demand, tol))
