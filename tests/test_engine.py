"""The online engine: Mesos timing, two-level fairness, oblivious offers and filters."""

from __future__ import annotations

import numpy as np
import pytest
from support.instances import make_cluster

from allocator.engine import Engine, EngineError
from allocator.engine_config import EngineConfig
from allocator.filling import progressive_fill
from allocator.policy import scheduler
from allocator.state import AllocationState


def engine(name: str = "drf", **kwargs) -> Engine:
    return Engine(("cpus", "mem"), EngineConfig(name, **kwargs))


def held(e: Engine) -> dict[str, int]:
    out: dict[str, int] = {}
    for (f, _), k in e.running.items():
        out[f] = out.get(f, 0) + k
    return out


def test_adds_ask_for_a_run_now_releases_wait_for_the_tick():
    e = engine()
    assert not e.run_now
    e.add_agent("a", {"cpus": 4, "mem": 4})
    assert e.run_now
    e.allocate(0.0)
    e.register("f", {"cpus": 1, "mem": 1}, target=4)
    assert e.run_now
    assert len(e.allocate(0.0)) == 4
    e.release("f", "a", 1)
    assert not e.run_now  # Mesos does not allocate on resource recovery
    e.set_target("f", 3)
    assert not e.run_now  # lowering the target is not a revive


def test_release_trigger_allocates_as_soon_as_anything_is_freed():
    e = engine(trigger="release")
    e.add_agent("a", {"cpus": 2, "mem": 2})
    e.register("f", {"cpus": 1, "mem": 1}, target=2)
    e.allocate(0.0)
    e.release("f", "a")
    assert e.run_now


def test_same_policy_code_as_the_static_fill():
    capacity = [[100, 30], [30, 100]]
    demand = [[5, 1], [1, 5]]
    e = engine("psdsf", level="framework", seed=9)
    for i, c in enumerate(capacity):
        e.add_agent(f"s{i + 1}", {"cpus": c[0], "mem": c[1]})
    for n, d in enumerate(demand):
        e.register(f"f{n + 1}", {"cpus": d[0], "mem": d[1]}, target=10_000)
    e.allocate(0.0)
    state = AllocationState(make_cluster(capacity, demand, max_tasks=[10_000, 10_000]))
    rng = np.random.default_rng(9)
    progressive_fill(state, scheduler("psdsf").criterion(), "rrr", rng, agent_pass=True)
    assert e.running == {
        (f"f{n + 1}", f"s{i + 1}"): int(state.tasks[n, i])
        for n in range(2)
        for i in range(2)
        if state.tasks[n, i]
    }


def test_role_level_then_framework_level():
    """Role 'a' has two frameworks, role 'b' one; identical tasks, 12 slots in all."""
    for level, expected in (
        ("role", {"a1": 3, "a2": 3, "b": 6}),
        ("framework", {"a1": 4, "a2": 4, "b": 4}),
    ):
        e = engine(level=level)
        e.add_agent("s", {"cpus": 12, "mem": 12})
        for name, role in (("a1", "a"), ("a2", "a"), ("b", "b")):
            e.register(name, {"cpus": 1, "mem": 1}, role=role, target=100)
        e.allocate(0.0)
        assert held(e) == expected, level


def test_role_weights_apply():
    e = engine(role_weights={"a": 2.0})
    e.add_agent("s", {"cpus": 9, "mem": 9})
    e.register("x", {"cpus": 1, "mem": 1}, role="a", target=100)
    e.register("y", {"cpus": 1, "mem": 1}, role="b", target=100)
    e.allocate(0.0)
    assert held(e) == {"x": 6, "y": 3}


def test_a_role_with_no_framework_left_is_forgotten_and_the_others_keep_their_weights():
    """Roles a, b, c; b's only framework leaves: the snapshot holds a and c, each framework
    still in its own role, and the split is the one a fresh engine with a and c gives."""
    e = engine(role_weights={"c": 2.0})
    e.add_agent("s", {"cpus": 9, "mem": 9})
    for name, role in (("x", "a"), ("y", "b"), ("z", "c")):
        e.register(name, {"cpus": 1, "mem": 1}, role=role, target=100)
    e.unregister("y")
    cluster = e.snapshot(0.0).cluster
    assert cluster.role_names == ("a", "c")
    slots = {name: n for n, name in enumerate(cluster.framework_names)}
    assert cluster.role_names[cluster.role_of[slots["x"]]] == "a"
    assert cluster.role_names[cluster.role_of[slots["z"]]] == "c"
    e.allocate(0.0)
    assert held(e) == {"x": 3, "z": 6}
    e.register("w", {"cpus": 1, "mem": 1}, role="b", target=1)  # b comes back, last
    assert e.snapshot(0.0).cluster.role_names == ("a", "c", "b")
    e.unregister("x")
    e.unregister("z")
    e.unregister("w")
    assert e.snapshot(0.0).cluster.role_names == ("*",)


def test_oblivious_offers_whole_agent_and_refuse_filter():
    e = engine(mode="oblivious", refuse_seconds=5.0, seed=1)
    e.add_agent("s", {"cpus": 10, "mem": 10})
    e.register("f", {"cpus": 3, "mem": 1}, target=100)
    e.register("g", {"cpus": 1, "mem": 1}, target=100)
    grants = e.allocate(0.0)
    # One offer per agent per run: one tenant got the remainder and kept the whole tasks.
    assert len(grants) == 1
    first = grants[0].framework
    assert grants[0].tasks == (3 if first == "f" else 10)
    if first == "g":  # g took everything: no allocatable leftover, so no filter
        assert e.filters == {}
        return
    # f declined (1, 7), refusing this agent for 5 s: the next run offers it to g, which
    # keeps 1 task and declines (0, 6), below Mesos's minimum: no filter for g.
    assert e.filters == {("f", "s"): 5.0}
    assert [(g.framework, g.tasks) for g in e.allocate(1.0)] == [("g", 1)]
    assert set(e.filters) == {("f", "s")}
    e.release("g", "s", 1)  # free (1, 7): within what f declined, the filter holds
    assert [g.framework for g in e.allocate(2.0)] == ["g"]
    e.release("f", "s", 3)  # free (9, 3) is more cpus than f declined: the filter is lifted
    assert [(g.framework, g.tasks) for g in e.allocate(3.0)] == [("f", 3)]  # f holds least


def test_oblivious_policy_does_not_know_demand_until_a_task_runs():
    e = engine("tsf", mode="oblivious")
    e.add_agent("s", {"cpus": 4, "mem": 4})
    e.register("f", {"cpus": 1, "mem": 1}, target=2)
    state = e.snapshot(0.0)
    assert np.isnan(state.known_demand[0]).all()
    e.allocate(0.0)
    assert np.array_equal(e.snapshot(1.0).known_demand[0], [1, 1])


def test_no_run_when_nothing_changed():
    e = engine()
    e.add_agent("s", {"cpus": 2, "mem": 2})
    e.register("f", {"cpus": 1, "mem": 1}, target=5)
    assert len(e.allocate(0.0)) == 2
    runs = e.runs
    assert e.allocate(1.0) == []
    assert e.runs == runs  # nothing freed, nothing new: the answer cannot differ
    e.release("f", "s")
    assert len(e.allocate(2.0)) == 1
    assert e.runs == runs + 1


def test_capacity_never_exceeded_under_churn():
    rng = np.random.default_rng(4)
    e = engine("rpsdsf", level="role")
    for i in range(5):
        e.add_agent(
            f"s{i}", {"cpus": float(rng.integers(4, 16)), "mem": float(rng.integers(4, 16))}
        )
    demands = {}
    for n in range(6):
        d = {"cpus": float(rng.integers(1, 4)), "mem": float(rng.integers(1, 4))}
        demands[f"f{n}"] = d
        e.register(f"f{n}", d, role=f"r{n % 2}", target=int(rng.integers(1, 20)))
    for step in range(300):
        e.allocate(float(step))
        running = list(e.running.items())
        if running and rng.random() < 0.7:
            (f, a), k = running[int(rng.integers(len(running)))]
            e.release(f, a, int(rng.integers(1, k + 1)))
        if rng.random() < 0.2:
            e.set_target(f"f{int(rng.integers(6))}", int(rng.integers(0, 20)))
        used = {a: np.zeros(2) for a in e.agents}
        for (f, a), k in e.running.items():
            used[a] += k * np.array([demands[f]["cpus"], demands[f]["mem"]])
        for a, record in e.agents.items():
            assert (used[a] <= record.capacity + 1e-9).all()
        # The engine's incremental totals agree with the tasks it holds.
        held = sum(e.allocated_by_role().values(), np.zeros(2))
        assert np.allclose(held, sum(used.values(), np.zeros(2)))


def test_bad_events_are_errors():
    e = engine()
    e.add_agent("s", {"cpus": 2, "mem": 2})
    with pytest.raises(EngineError, match="fits no registered agent"):
        e.register("big", {"cpus": 3, "mem": 1})
    with pytest.raises(EngineError, match="unknown resource"):
        e.register("g", {"gpus": 1})
    with pytest.raises(EngineError, match="positive somewhere"):
        e.register("g", {"cpus": -1})
    with pytest.raises(EngineError, match="unknown framework"):
        e.release("nobody", "s")
    e.register("f", {"cpus": 1, "mem": 1}, target=1)
    e.allocate(0.0)
    with pytest.raises(EngineError, match="holds 1 tasks"):
        e.release("f", "s", 2)
    with pytest.raises(EngineError, match="already registered"):
        e.add_agent("s", {"cpus": 1})


def test_unregister_and_agent_loss_free_resources():
    e = engine()
    e.add_agent("s", {"cpus": 4, "mem": 4})
    e.add_agent("t", {"cpus": 4, "mem": 4})
    e.register("f", {"cpus": 1, "mem": 1}, target=8)
    e.allocate(0.0)
    lost = e.remove_agent("t")
    assert lost == [("f", 4)]
    assert e.pending() == {"f": 4}
    assert e.unregister("f") == [("s", 4)]
    assert e.running == {}
