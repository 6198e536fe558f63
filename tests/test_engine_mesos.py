"""The online engine against Mesos's allocator semantics (hierarchical.cpp, as read in
../shared/notes/mesos_api.md): refuse filters hold declined resources and apply only while the
agent offers no more; they need an allocatable leftover (cpus 0.01 or mem 32 MB) and last
max(refuse_seconds, allocation interval); an outstanding offer counts as allocated for the
rest of the pass; and the pass visits the agents in one shuffled order, each filled in turn."""

from __future__ import annotations

import numpy as np
from support.instances import make_cluster

from allocator.engine import Engine
from allocator.engine_config import EngineConfig
from allocator.filling import progressive_fill
from allocator.policy import scheduler
from allocator.state import AllocationState


def oblivious(**kwargs) -> Engine:
    config = EngineConfig.flat("drf", mode="oblivious", trigger="tick", **kwargs)
    return Engine(("cpus", "mem"), config)


def test_a_leftover_below_the_minimum_sets_no_filter():
    """A 2-cpu/670-MB executor on (6.005 cpus, 2020 MB): 3 fit, (0.005, 10) is left."""
    e = oblivious()
    e.add_agent("s", {"cpus": 6.005, "mem": 2020})
    e.register("f", {"cpus": 2, "mem": 670}, target=10)
    (grant,) = e.allocate(0.0)
    assert grant.tasks == 3
    assert e.filters == {} and e.declined == {}
    # With a little more cpu the leftover (1.005, 10) is allocatable (cpus >= 0.01).
    e = oblivious()
    e.add_agent("s", {"cpus": 7.005, "mem": 2020})
    e.register("f", {"cpus": 2, "mem": 670}, target=10)
    e.allocate(0.0)
    assert e.filters == {("f", "s"): 5.0}
    assert np.allclose(e.declined[("f", "s")], [1.005, 10])
    # And with mem alone: (0.005, 50) is allocatable (mem >= 32).
    e = oblivious()
    e.add_agent("s", {"cpus": 6.005, "mem": 2060})
    e.register("f", {"cpus": 2, "mem": 670}, target=10)
    e.allocate(0.0)
    assert set(e.filters) == {("f", "s")}


def test_the_filter_lasts_the_longer_of_refuse_and_interval():
    for refuse, interval, until in ((5.0, 1.0, 5.0), (0.5, 2.0, 2.0)):
        e = oblivious(refuse_seconds=refuse, interval=interval)
        e.add_agent("s", {"cpus": 10, "mem": 10_000})
        e.register("f", {"cpus": 1, "mem": 1000}, target=3)
        e.allocate(0.0)
        assert e.filters == {("f", "s"): until}
    e = oblivious(refuse_seconds=0.0)  # refuse_seconds 0 installs no filter
    e.add_agent("s", {"cpus": 10, "mem": 10_000})
    e.register("f", {"cpus": 1, "mem": 1000}, target=3)
    e.allocate(0.0)
    assert e.filters == {}


def test_a_filter_holds_while_free_stays_within_what_was_declined():
    e = oblivious()
    e.add_agent("s", {"cpus": 10, "mem": 10_000})
    e.register("f", {"cpus": 1, "mem": 1000}, target=3)
    assert [(g.framework, g.tasks) for g in e.allocate(0.0)] == [("f", 3)]
    assert np.allclose(e.declined[("f", "s")], [7, 7000])  # f refuses s until 5.0
    e.register("g", {"cpus": 1, "mem": 1000}, target=5)
    assert [(g.framework, g.tasks) for g in e.allocate(0.5)] == [("g", 5)]
    # One of f's executors fails: f wants one more. Free (3, 3000) is within the (7, 7000)
    # it declined, so s stays hidden from f (g wants nothing more).
    e.release("f", "s", 1)
    assert e.allocate(1.0) == []
    # g finishes: free (8, 8000) is more than f declined, so the filter no longer applies,
    # long before it would expire at 5.0.
    e.set_target("g", 0)
    e.release("g", "s", 5)
    assert [(g.framework, g.tasks) for g in e.allocate(2.0)] == [("f", 1)]


def test_the_old_filter_would_have_hidden_the_agent_until_it_expired():
    """Control for the test above: a broker-set refusal (no declined resources, e.g. failing
    executors) hides the agent outright until it expires."""
    e = oblivious()
    e.add_agent("s", {"cpus": 10, "mem": 10_000})
    e.register("f", {"cpus": 1, "mem": 1000}, target=3)
    e.allocate(0.0)
    e.refuse("f", "s", 5.0)
    e.release("f", "s", 3)
    assert e.allocate(2.0) == []
    assert [g.framework for g in e.allocate(5.0)] == ["f"]


def offered_then(seed: int) -> list[tuple[str, str]]:
    """g holds 3 x (1.5, 1.5) on c; f (demand (4, 4)) is new; a (5, 5) and b (10, 10) free.
    DRF over totals (19.5, 19.5): f 0, g 4.5."""
    e = Engine(("cpus", "mem"), EngineConfig("drf", mode="oblivious", level="framework", seed=seed))
    e.add_agent("c", {"cpus": 4.5, "mem": 4.5})
    e.register("g", {"cpus": 1.5, "mem": 1.5}, target=3)
    assert [g.tasks for g in e.allocate(0.0)] == [3]
    e.set_target("g", 20)
    e.add_agent("a", {"cpus": 5, "mem": 5})
    e.add_agent("b", {"cpus": 10, "mem": 10})
    e.register("f", {"cpus": 4, "mem": 4}, target=20)
    return [(g.agent, g.framework) for g in e.allocate(1.0)]


def test_an_offered_remainder_counts_as_allocated_for_the_rest_of_the_pass():
    """When a comes first, f is offered all of a: it keeps one task (4) but holds the whole
    offer (5 > g's 4.5) until the pass ends, so b goes to g. Counting only what f kept
    (4 < 4.5) would give b to f as well."""
    a_first = [order for order in map(offered_then, range(12)) if order[0][0] == "a"]
    assert a_first, "no seed put a first"
    for order in a_first:
        assert order == [("a", "f"), ("b", "g")]


def test_the_offered_remainder_counts_for_the_role_too():
    state = AllocationState(make_cluster([[5, 5], [10, 10]], [[4, 4], [1, 1]]))
    state.withhold(0)  # withheld but offered to no one: nobody's allocation
    assert np.allclose(state.alloc, 0)
    state = AllocationState(make_cluster([[5, 5], [10, 10]], [[4, 4], [1, 1]]))
    state.grant(0, 0)
    state.withhold(0, 0)
    assert np.allclose(state.alloc[0], [5, 5]) and np.allclose(state.residual[0], 0)
    from allocator.policy.levels import RoleHoldings

    assert np.allclose(RoleHoldings.of(state).alloc.sum(axis=0), [5, 5])


def test_online_rrr_fills_each_agent_before_the_next():
    """Paper 002's Table I instance under the engine's pass: the grants come in one block per
    agent, in the order of one shuffle, and match a static fill with the same pass."""
    capacity, demand = [[100, 30], [30, 100]], [[5, 1], [1, 5]]
    for seed in range(4):
        e = Engine(("cpus", "mem"), EngineConfig("psdsf", level="framework", seed=seed))
        for i, c in enumerate(capacity):
            e.add_agent(f"s{i + 1}", {"cpus": c[0], "mem": c[1]})
        for n, d in enumerate(demand):
            e.register(f"f{n + 1}", {"cpus": d[0], "mem": d[1]}, target=10_000)
        agents = [g.agent for g in e.allocate(0.0)]
        blocks = [a for k, a in enumerate(agents) if k == 0 or agents[k - 1] != a]
        assert sorted(blocks) == ["s1", "s2"]  # each agent visited once, filled, left
        order = np.random.default_rng(seed).permutation(2)
        assert blocks == [f"s{i + 1}" for i in order]
        # Filled: nothing more fits on either agent.
        state = e.snapshot(1.0)
        assert not state.fits_all().any()
        static = AllocationState(make_cluster(capacity, demand, max_tasks=[10_000, 10_000]))
        progressive_fill(static, scheduler("psdsf").criterion(), "rrr",
                         np.random.default_rng(seed), agent_pass=True)  # fmt: skip
        assert state.tasks.tolist() == static.tasks.tolist()


def _two_roles(pooled: bool, wc_wants: int = 4) -> Engine:
    """Mesos with roles pi (weight 3) and wc: agent P's copy offered to pi holds pi's three
    running tasks (no room left), agent A's whole remainder (8 cpus, 8 GiB) is offered to pi,
    its wc copy has nothing. wc holds nothing and wants 4 tasks; pi wants 10."""
    e = Engine(("cpus", "mem"), EngineConfig.mesos("drf", role_weights={"pi": 3.0}))
    if pooled:
        e.pooled_attribute = "mesos_role"
    e.add_agent("P@pi", {"cpus": 6, "mem": 6144}, {"mesos_role": "pi"})
    e.add_agent("A@pi", {"cpus": 8, "mem": 8192}, {"mesos_role": "pi"})
    e.add_agent("A@wc", {"cpus": 0, "mem": 0}, {"mesos_role": "wc"}, empty=True)
    for name, role, target in (("p", "pi", 10), ("w", "wc", wc_wants)):
        e.register(name, {"cpus": 2, "mem": 1024}, role=role, target=target,
                   constraints={"mesos_role": role}, require_fit=False)  # fmt: skip
    e.adopt("p", "P@pi", 3)
    return e


def test_a_role_lower_than_the_one_offered_an_agent_takes_it_from_that_role():
    """Issue 23: each Mesos role is offered its own copy of an agent. pi (weight 3) holds 3
    tasks of 2 of the 14 cpus: weighted dominant share (6/14)/3 = 0.14; wc holds none: 0.
    A is offered to pi. Without pooling pi fills A (4 tasks: wc can never be compared with
    it there); pooled, wc is lower and its 2 cpus / 1 GiB fit A's room: pi is served nothing
    on A, A's offer goes back (for Mesos to offer to wc). When wc wants nothing, pi takes
    A."""
    grants = _two_roles(pooled=False).allocate(0.0)
    assert {(g.framework, g.agent) for g in grants} == {("p", "A@pi")}
    assert sum(g.tasks for g in grants) == 4
    assert _two_roles(pooled=True).allocate(0.0) == []
    grants = _two_roles(pooled=True, wc_wants=0).allocate(0.0)
    assert {(g.framework, g.agent) for g in grants} == {("p", "A@pi")}
    assert sum(g.tasks for g in grants) == 4


def test_a_lower_role_resting_on_its_copy_of_an_agent_does_not_keep_the_offered_role_off():
    """wc rests on its copy of A (a refuse filter: quick failures there, or a declined
    offer): it could not take A's room were Mesos to offer it, so it is no rival there and
    pi fills A as if wc wanted nothing (before, A went back unused by either role for as
    long as wc rested). The rest ended, wc takes A from pi again; resting on another agent
    changes nothing at A."""
    e = _two_roles(pooled=True)
    e.refuse("w", "A@wc", until=100.0)
    grants = e.allocate(0.0)
    assert {(g.framework, g.agent) for g in grants} == {("p", "A@pi")}
    assert sum(g.tasks for g in grants) == 4
    e = _two_roles(pooled=True)
    e.refuse("w", "A@wc", until=100.0)
    assert e.allocate(101.0) == []
    e = _two_roles(pooled=True)
    e.add_agent("B@wc", {"cpus": 0, "mem": 0}, {"mesos_role": "wc"}, empty=True)
    e.refuse("w", "B@wc", until=100.0)
    assert e.allocate(0.0) == []
