"""Reclaim victim selection (allocator.reclaim): one hand-computed case per rule, and
hypothesis properties over random clusters."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.engine import Engine
from allocator.engine_config import EngineConfig
from allocator.fair_share import FairShare, fair_shares
from allocator.model import Cluster
from allocator.reclaim import Reclaim, ReclaimLimits, RunningExecutor, select_reclaims

CPU_MEM = ("cpus", "mem")
EAGER = ReclaimLimits(reclaim_after=5, min_runtime=0, per_run=100, per_minute=100)


def fair_share(
    capacity: list[list[float]],
    demand: dict[str, list[float]],
    fair: dict[str, int],
    roles: dict[str, str] | None = None,
    unit: dict[str, float] | None = None,
    eligible: dict[str, list[bool]] | None = None,
) -> FairShare:
    """A FairShare with the fair counts given (placed on the first agent: only the counts
    matter to reclaim), for cases that isolate one rule of the selection."""
    names = tuple(demand)
    roles = roles or {}
    role_names = tuple(dict.fromkeys(roles.get(f, "*") for f in names))
    n_a = len(capacity)
    cluster = Cluster(
        resources=CPU_MEM,
        agent_names=tuple(f"a{i}" for i in range(1, n_a + 1)),
        framework_names=names,
        capacity=np.array(capacity, dtype=float),
        demand=np.array([demand[f] for f in names], dtype=float),
        weight=np.ones(len(names)),
        eligible=np.array([(eligible or {}).get(f, [True] * n_a) for f in names]),
        max_tasks=np.full(len(names), np.inf),
        role_of=np.array([role_names.index(roles.get(f, "*")) for f in names]),
        role_names=role_names,
    )
    by_agent = np.zeros((len(names), n_a), dtype=np.int64)
    by_agent[:, 0] = [fair[f] for f in names]
    units = np.array([(unit or {}).get(f, 1.0) for f in names])
    return FairShare(cluster, by_agent, units)


def issue_cluster() -> tuple[FairShare, list[RunningExecutor]]:
    """Issue 22's embedded case: agents of 4, 8 and 6 cpus (4096 MiB each), A and B with
    1 cpu / 512 MiB, target 100. A holds all 18 slots: e0..e3 on a1, e4..e11 on a2,
    e12..e17 on a3, executor k started at second k."""
    engine = Engine(CPU_MEM, EngineConfig.mesos("drf"))
    for name, cpus in (("a1", 4), ("a2", 8), ("a3", 6)):
        engine.add_agent(name, {"cpus": cpus, "mem": 4096})
    engine.register("A", {"cpus": 1, "mem": 512}, target=100)
    engine.register("B", {"cpus": 1, "mem": 512}, target=100)
    agent_of = ["a1"] * 4 + ["a2"] * 8 + ["a3"] * 6
    executors = [RunningExecutor(f"e{k}", "A", agent_of[k], float(k)) for k in range(18)]
    return fair_shares(engine), executors


def ids(decisions: list[Reclaim]) -> list[str]:
    return [d.executor for d in decisions]


def test_issue_case_takes_the_nine_youngest_for_b() -> None:
    # Fair share (DRF, pass a1, a2, a3, A first on ties): a1 2+2, a2 4+4, a3 3+3 -> 9 and 9.
    # B is 9 short, A 9 over; every agent needs one kill for B's 1 cpu, so the least work
    # lost is the youngest executor left each time: e17, e16, ..., e9.
    share, executors = issue_cluster()
    assert share.as_dict() == {"A": 9, "B": 9}
    decisions = select_reclaims(share, executors, {"B": 5.0}, 20.0, EAGER)
    assert ids(decisions) == [f"e{k}" for k in range(17, 8, -1)]
    assert {(d.victim, d.beneficiary) for d in decisions} == {("A", "B")}
    assert [d.placement for d in decisions] == ids(decisions)  # one kill per placement
    first = decisions[0]
    assert (first.victim_executors, first.victim_fair_share) == (18, 9)
    assert (first.beneficiary_executors, first.beneficiary_fair_share) == (0, 9)
    assert (decisions[-1].victim_executors, decisions[-1].beneficiary_executors) == (10, 8)


def test_disabled_or_not_waited_long_enough() -> None:
    share, executors = issue_cluster()
    off = ReclaimLimits(reclaim_after=0, min_runtime=0)
    assert select_reclaims(share, executors, {"B": 0.0}, 100.0, off) == []
    # Waiting since 16 s at 20 s: 4 s < reclaim_after 5.
    assert select_reclaims(share, executors, {"B": 16.0}, 20.0, EAGER) == []
    assert select_reclaims(share, executors, {}, 20.0, EAGER) == []


def test_per_run_and_per_minute_bounds() -> None:
    share, executors = issue_cluster()
    per_run = ReclaimLimits(reclaim_after=5, min_runtime=0, per_run=4, per_minute=100)
    assert ids(select_reclaims(share, executors, {"B": 0.0}, 20.0, per_run)) == [
        "e17", "e16", "e15", "e14"
    ]  # fmt: skip
    per_minute = ReclaimLimits(reclaim_after=5, min_runtime=0, per_run=100, per_minute=6)
    # 6 a minute, 4 already this minute: 2 left.
    got = select_reclaims(share, executors, {"B": 0.0}, 20.0, per_minute, reclaimed_last_minute=4)
    assert ids(got) == ["e17", "e16"]
    full = select_reclaims(share, executors, {"B": 0.0}, 20.0, per_minute, reclaimed_last_minute=6)
    assert full == []


def test_min_runtime_spares_young_executors() -> None:
    # At 20 s with min runtime 5 s, e16 (4 s) and e17 (3 s) are too young; e15 (5 s) is not.
    share, executors = issue_cluster()
    limits = ReclaimLimits(reclaim_after=5, min_runtime=5, per_run=100, per_minute=100)
    assert ids(select_reclaims(share, executors, {"B": 0.0}, 20.0, limits)) == [
        f"e{k}" for k in range(15, 6, -1)
    ]


def test_never_below_the_victims_fair_share() -> None:
    # A holds 4 with fair share 3: one kill, although B is 3 short and the budget is 100.
    share = fair_share([[4, 4]], {"A": [1, 1], "B": [1, 1]}, {"A": 3, "B": 3})
    executors = [RunningExecutor(f"e{k}", "A", "a1", float(k)) for k in range(4)]
    assert ids(select_reclaims(share, executors, {"B": 0.0}, 100.0, EAGER)) == ["e3"]
    # B needs 2 cpus: two of A's would have to go, one more than A is over: nothing.
    share = fair_share([[4, 4]], {"A": [1, 1], "B": [2, 1]}, {"A": 3, "B": 1})
    assert select_reclaims(share, executors, {"B": 0.0}, 100.0, EAGER) == []


def test_opted_out_group_is_never_a_victim() -> None:
    # A (prod) is 2 over, C (dev) 1 over at the same price: A would go first, but prod is
    # not preemptible, so C gives one and nobody else does.
    share = fair_share(
        [[5, 5]],
        {"A": [1, 1], "B": [1, 1], "C": [1, 1]},
        {"A": 2, "B": 3, "C": 0},
        roles={"A": "prod", "B": "dev", "C": "dev"},
    )
    executors = [RunningExecutor(f"a{k}", "A", "a1", float(k)) for k in range(4)]
    executors.append(RunningExecutor("c0", "C", "a1", 0.0))
    unprotected = select_reclaims(share, executors, {"B": 0.0}, 100.0, EAGER)
    assert [d.executor for d in unprotected] == ["a3", "a2", "c0"]
    got = select_reclaims(share, executors, {"B": 0.0}, 100.0, EAGER, protected_groups={"prod"})
    assert [(d.victim, d.executor) for d in got] == [("C", "c0")]


def test_most_over_share_victim_first_in_criterion_terms() -> None:
    # A is 3 over at 0.1 an executor (0.3), C 1 over at 0.5 (0.5): C goes first.
    share = fair_share(
        [[7, 7]],
        {"A": [1, 1], "B": [1, 1], "C": [1, 1]},
        {"A": 2, "B": 3, "C": 1},
        unit={"A": 0.1, "B": 0.1, "C": 0.5},
    )
    executors = [RunningExecutor(f"a{k}", "A", "a1", float(k)) for k in range(5)]
    executors += [RunningExecutor(f"c{k}", "C", "a1", float(k)) for k in range(2)]
    got = select_reclaims(share, executors, {"B": 0.0}, 100.0, EAGER)
    # C (1 over, 0.5) first; then A (3 over, 0.3) while C is at its fair share: a4, a3.
    assert [(d.victim, d.executor) for d in got] == [("C", "c1"), ("A", "a4"), ("A", "a3")]


def test_furthest_below_beneficiary_served_first() -> None:
    # B is 3 short at 0.1 (0.3), D 1 short at 0.5 (0.5): with room for one kill, D.
    share = fair_share(
        [[4, 4]],
        {"A": [1, 1], "B": [1, 1], "D": [1, 1]},
        {"A": 0, "B": 3, "D": 1},
        unit={"A": 1.0, "B": 0.1, "D": 0.5},
    )
    executors = [RunningExecutor(f"e{k}", "A", "a1", float(k)) for k in range(4)]
    one = ReclaimLimits(reclaim_after=5, min_runtime=0, per_run=1)
    got = select_reclaims(share, executors, {"B": 0.0, "D": 0.0}, 100.0, one)
    assert [(d.executor, d.beneficiary) for d in got] == [("e3", "D")]


def test_placement_aware_never_kills_where_the_room_is_useless() -> None:
    # B needs (1 cpu, 2048 MiB). a2 (4 cpus, 1024 MiB) could never hold it, however many of
    # A's (1, 512) leave; a1 (4, 4096) full of A's cpus has 2048 MiB free: one kill frees
    # the cpu. So a1's youngest (e3, started 3 s) goes although a2's (e5, 5 s) are younger.
    share = fair_share([[4, 4096], [4, 1024]], {"A": [1, 512], "B": [1, 2048]}, {"A": 3, "B": 1})
    executors = [RunningExecutor(f"e{k}", "A", "a1", float(k)) for k in range(4)]
    executors += [RunningExecutor(f"e{k}", "A", "a2", float(k)) for k in (4, 5)]
    got = select_reclaims(share, executors, {"B": 0.0}, 100.0, EAGER)
    assert [(d.executor, d.agent) for d in got] == [("e3", "a1")]


def test_placement_needing_two_kills_is_whole_or_nothing() -> None:
    # B needs 2 cpus; a1 (4 cpus) is full of A's 1-cpu executors: two kills, one placement.
    share = fair_share([[4, 4]], {"A": [1, 1], "B": [2, 1]}, {"A": 2, "B": 1})
    executors = [RunningExecutor(f"e{k}", "A", "a1", float(k)) for k in range(4)]
    got = select_reclaims(share, executors, {"B": 0.0}, 100.0, EAGER)
    assert [(d.executor, d.placement) for d in got] == [("e3", "e3"), ("e2", "e3")]
    one = ReclaimLimits(reclaim_after=5, min_runtime=0, per_run=1)
    assert select_reclaims(share, executors, {"B": 0.0}, 100.0, one) == []


def test_constraint_limits_where_room_is_made() -> None:
    # B may run on a2 only: a1's younger executors are left alone.
    share = fair_share(
        [[2, 2], [2, 2]],
        {"A": [1, 1], "B": [1, 1]},
        {"A": 2, "B": 2},
        eligible={"B": [False, True]},
    )
    executors = [RunningExecutor("old1", "A", "a2", 0.0), RunningExecutor("old2", "A", "a2", 1.0)]
    executors += [RunningExecutor(f"new{k}", "A", "a1", 10.0 + k) for k in range(2)]
    got = select_reclaims(share, executors, {"B": 0.0}, 100.0, EAGER)
    assert [(d.executor, d.agent) for d in got] == [("old2", "a2"), ("old1", "a2")]


def test_free_room_is_used_before_any_kill() -> None:
    # a1 has 2 cpus free: B (2 short) is served by the allocation run, nothing is killed.
    share = fair_share([[4, 4]], {"A": [1, 1], "B": [1, 1]}, {"A": 1, "B": 2})
    executors = [RunningExecutor(f"e{k}", "A", "a1", float(k)) for k in range(2)]
    assert select_reclaims(share, executors, {"B": 0.0}, 100.0, EAGER) == []


def test_in_flight_reclaims_count_until_gone() -> None:
    share, executors = issue_cluster()
    first = select_reclaims(share, executors, {"B": 0.0}, 20.0, EAGER)
    # All nine still leaving: B is projected at 9, nothing more to do.
    assert select_reclaims(share, executors, {"B": 0.0}, 21.0, EAGER, in_flight=first) == []
    # Four leaving (e17..e14 on a3): B projected 4, five more, the next youngest.
    again = select_reclaims(share, executors, {"B": 0.0}, 21.0, EAGER, in_flight=first[:4])
    assert ids(again) == [f"e{k}" for k in range(13, 8, -1)]


def test_in_flight_from_several_runs_each_count() -> None:
    # One reclaim per run: e17, then e16; with both still leaving, B is projected at 2 of
    # 9, so seven more (e15..e9), not eight.
    share, executors = issue_cluster()
    one = ReclaimLimits(reclaim_after=5, min_runtime=0, per_run=1)
    first = select_reclaims(share, executors, {"B": 0.0}, 20.0, one)
    second = select_reclaims(share, executors, {"B": 0.0}, 21.0, one, in_flight=first)
    assert ids(first + second) == ["e17", "e16"]
    rest = select_reclaims(share, executors, {"B": 0.0}, 22.0, EAGER, in_flight=first + second)
    assert ids(rest) == [f"e{k}" for k in range(15, 8, -1)]


def test_room_made_for_one_beneficiary_is_not_anothers() -> None:
    # a1 (2 cpus) holds A's x1 (leaving for B) and x2; a2 (1 cpu) holds A's y1. D also
    # waits. x1's room is B's; D gets room from y1 on a2 (or x2), never from x1 again.
    share = fair_share(
        [[2, 2], [1, 1]], {"A": [1, 1], "B": [1, 1], "D": [1, 1]}, {"A": 1, "B": 1, "D": 1}
    )
    executors = [
        RunningExecutor("x1", "A", "a1", 0.0),
        RunningExecutor("x2", "A", "a1", 1.0),
        RunningExecutor("y1", "A", "a2", 2.0),
    ]
    leaving = [Reclaim("x1", "A", "a1", "B", "x1", 3, 1, 0, 1)]
    got = select_reclaims(share, executors, {"B": 0.0, "D": 0.0}, 100.0, EAGER, in_flight=leaving)
    assert [(d.executor, d.beneficiary) for d in got] == [("y1", "D")]
    # Had x1's beneficiary left since, x1's room would be free for D: nothing to kill.
    gone = [Reclaim("x1", "A", "a1", "gone", "x1", 3, 1, 0, 1)]
    assert select_reclaims(share, executors, {"D": 0.0}, 100.0, EAGER, in_flight=gone) == []


def test_unknown_framework_is_an_error() -> None:
    share = fair_share([[4, 4]], {"A": [1, 1]}, {"A": 1})
    with pytest.raises(ValueError, match="no fair share"):
        select_reclaims(share, [RunningExecutor("z", "Z", "a1", 0.0)], {}, 1.0, EAGER)


# ---- properties ------------------------------------------------------------------------


@st.composite
def reclaim_cases(draw: st.DrawFn) -> dict:
    n_a = draw(st.integers(1, 4))
    n_f = draw(st.integers(2, 5))
    capacity = [[draw(st.integers(2, 12)), draw(st.integers(2, 12))] for _ in range(n_a)]
    names = [f"f{n}" for n in range(n_f)]
    demand = {f: [draw(st.integers(1, 3)), draw(st.integers(1, 3))] for f in names}
    roles = {f: draw(st.sampled_from(["g0", "g1", "g2"])) for f in names}
    eligible = {f: [draw(st.booleans()) or i == 0 for i in range(n_a)] for f in names}
    executors: list[RunningExecutor] = []
    for i in range(n_a):  # agents mostly full, so that room has to be made
        room = np.array(capacity[i], dtype=float)
        for _ in range(draw(st.integers(4, 24))):
            f = draw(st.sampled_from(names))
            if eligible[f][i] and (np.array(demand[f]) <= room).all():
                room -= demand[f]
                started = float(draw(st.integers(0, 100)))
                executors.append(RunningExecutor(f"e{len(executors)}", f, f"a{i + 1}", started))
    # Fair shares around what each holds, so that some are over and some under.
    held = Counter(e.framework for e in executors)
    fair = {f: max(0, held[f] + draw(st.integers(-4, 4))) for f in names}
    share = fair_share(capacity, demand, fair, roles=roles, eligible=eligible,
                       unit={f: draw(st.floats(0.01, 1.0)) for f in names})  # fmt: skip
    leaving = [e for e in executors if draw(st.integers(0, 6)) == 0]
    in_flight = [
        Reclaim(e.id, e.framework, e.agent, draw(st.sampled_from(names)), e.id, 0, 0, 0, 0)
        for e in leaving
    ]
    limits = ReclaimLimits(
        reclaim_after=draw(st.sampled_from([10.0, 30.0])),
        min_runtime=draw(st.sampled_from([20.0, 0.0])),
        per_run=draw(st.integers(1, 8)),
        per_minute=draw(st.integers(3, 12)),
    )
    return {
        "fair": share,
        "executors": executors,
        "waiting_since": {
            f: float(draw(st.integers(0, 80))) for f in names if draw(st.integers(0, 3)) < 3
        },
        "now": 100.0,
        "limits": limits,
        "reclaimed_last_minute": draw(st.integers(0, 3)),
        "in_flight": in_flight,
        "protected_groups": set(draw(st.sets(st.sampled_from(["g0", "g1", "g2"]), max_size=1))),
    }


@settings(max_examples=300, deadline=None)
@given(reclaim_cases())
def test_reclaim_properties(case: dict) -> None:
    share: FairShare = case["fair"]
    executors: list[RunningExecutor] = case["executors"]
    limits: ReclaimLimits = case["limits"]
    decisions = select_reclaims(**case)
    cluster = share.cluster
    index = {f: n for n, f in enumerate(cluster.framework_names)}
    by_id = {e.id: e for e in executors}
    leaving = {r.executor for r in case["in_flight"]}
    taken = [d.executor for d in decisions]

    assert len(decisions) <= limits.per_run
    assert len(decisions) <= max(0, limits.per_minute - case["reclaimed_last_minute"])
    # Each executor once, running, not already leaving, old enough.
    assert len(set(taken)) == len(taken)
    for d in decisions:
        executor = by_id[d.executor]
        assert executor.id not in leaving
        assert (executor.framework, executor.agent) == (d.victim, d.agent)
        assert case["now"] - executor.started >= limits.min_runtime
    # Never a victim of an opted-out group; never below its fair share.
    held = Counter(e.framework for e in executors if e.id not in leaving)
    killed = Counter(d.victim for d in decisions)
    fair = share.executors
    for victim, kills in killed.items():
        role = cluster.role_names[cluster.role_of[index[victim]]]
        assert role not in case["protected_groups"]
        assert held[victim] - kills >= fair[index[victim]]
    # Beneficiaries waited long enough and were below their fair share.
    for d in decisions:
        assert case["now"] - case["waiting_since"][d.beneficiary] >= limits.reclaim_after
        assert d.beneficiary_executors < d.beneficiary_fair_share
        assert d.victim_executors > d.victim_fair_share
    # Placement-aware: on each agent, once every leaving executor is gone, the room holds
    # one executor of each beneficiary placed there, and each is eligible there.
    demand = cluster.demand
    agents = {a: i for i, a in enumerate(cluster.agent_names)}
    gone = leaving | set(taken)
    placements = {(d.placement, d.beneficiary, d.agent) for d in decisions}
    for agent, i in agents.items():
        used = sum(
            (demand[index[e.framework]] for e in executors
             if e.agent == agent and e.id not in gone),
            np.zeros(2),
        )  # fmt: skip
        room = cluster.capacity[i] - used
        needed = sum((demand[index[b]] for _, b, a in placements if a == agent), np.zeros(2))
        assert (needed <= room + 1e-9).all()
        for _, b, a in placements:
            if a == agent:
                assert cluster.eligible[index[b], i]


def test_hold_room_keeps_the_victim_off_that_agent_for_the_grace_and_the_hold() -> None:
    """The victim is refused the agent its executor was reclaimed from until now + grace +
    max(10 s, 3 intervals): the freed room cannot go straight back to it."""
    from allocator.engine import Engine
    from allocator.engine_config import EngineConfig
    from allocator.reclaim import Reclaim, hold_room

    engine = Engine(("cpus", "mem"), EngineConfig("rpsdsf"))
    engine.add_agent("s", {"cpus": 4, "mem": 4})
    engine.register("v", {"cpus": 1, "mem": 1}, target=4)
    engine.register("b", {"cpus": 1, "mem": 1}, target=4)
    decision = Reclaim(
        executor="1", victim="v", agent="s", beneficiary="b", placement=0,
        victim_executors=4, victim_fair_share=2, beneficiary_executors=0,
        beneficiary_fair_share=2,
    )  # fmt: skip
    hold_room(engine, decision, now=100.0, grace=30.0, interval=1.0)
    assert engine.filters == {("v", "s"): 140.0}
    hold_room(engine, decision, now=100.0, grace=0.0, interval=5.0)  # 3 runs of 5 s
    assert engine.filters == {("v", "s"): 140.0}  # the longer filter is kept
    engine.filters.clear()
    hold_room(engine, decision, now=100.0, grace=0.0, interval=5.0)
    assert engine.filters == {("v", "s"): 115.0}
